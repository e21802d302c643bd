/*
 * Lab harness of cross-entropy (backends/fused/kernels/cross_entropy.cl,
 * backends/cpu/cross_entropy.c) against the float64 reference (autotune/reference_train.c):
 * the three kernels, fp32 and bf16 logits, vocabularies from 1 to 8192 (primes included), rows
 * ignored (ignore_index -100, and a valid class id as ignore_index), logits N(0,1), N(0,10),
 * U(-1e4, 1e4), -inf masks (the target's too), a peaked row (p_t -> 1), NaN and +inf rows;
 * dlogits apart, in place and absent, lse absent; the CPU version at 1, 2 and 3 threads (the same
 * bits required); the reference's dlogits against finite differences of its mean loss.
 *
 * Tolerances (lab.h: errors in units of u * mag, u = 2^-24), per row with m its largest logit,
 * s = sum_j exp(x_j - m), p its softmax, A = sum_j p_j |x_j - m| (what exp's argument rounding
 * costs the sum), V the vocabulary:
 *   lse:     mag |m| + |log s| + A + 1, limit 8 + 2 sqrt(V).
 *   loss_i:  mag |m - x_t| + |log s| + A + 1, limit 8 + 2 sqrt(V).
 *   dlogits: mag inv_count (p_j (1 + |x_j - m| + A) + [j == t]) (+ 2^-125 inv_count / u: below
 *            e^-87 the CPU's exp gives 0), limit 8 + 2 sqrt(V).
 *   loss:    mag inv_count sum_i mag(loss_i), limit 8 + 2 sqrt(V) + sqrt(rows).
 *   finite differences of the reference (central, step 2^-10): |fd - ref| <= 1e-6 (|ref| +
 *            inv_count p_j) + 16 DBL_EPSILON |loss| / (2 step) (the loss's rounding in double).
 * bf16 logits: the reference on the stored (bf16) logits, dlogits plus one rounding to bf16.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "backends/cpu/step.h"
#include "lab.h"

typedef struct config {
    int wg, rows, vec;
} config;

static const config configs[] = {
    {256, 1, 4}, /* a row per work-group */
    {64, 4, 1},  /* slots of 16 */
    {32, 8, 4},  /* slots of 4 */
};

typedef struct shape {
    size_t rows, vocab;
} shape;

static const shape shapes[] = {{1, 1},    {1, 2},     {3, 5},     {7, 37},    {2, 100},
                               {5, 1000}, {4, 4096},  {3, 4099},  {17, 3000}, {2, 8192},
                               {33, 512}, {20, 4096}, {3, 32000}, {2, 128256}};

enum dist { D_N1, D_N10, D_U1E4, D_MASKS, D_PEAKED, D_NONFINITE, D_COUNT };
static const char *const dist_names[] = {"N(0,1)",     "N(0,10)", "U(-1e4,1e4)",
                                         "-inf masks", "peaked",  "NaN/inf rows"};

enum { E_LSE, E_LOSS, E_DL, E_MEAN, E_SAME, E_FD, E_COUNT };
static lab_err errs[2][E_COUNT];
static lab_err cpu_errs[E_COUNT];

#define IGNORE (-100)

typedef struct ce_data {
    size_t rows, vocab;
    float *logits; /* as stored */
    int32_t *targets;
    int32_t ignore_index;
    float inv_count;
    size_t count;
    double *losses, *lse, *dl, loss;               /* reference */
    double *mag_lse, *mag_loss, *mag_dl, mag_mean; /* tolerances' magnitudes */
} ce_data;

static void reference(ce_data *d)
{
    size_t rows = d->rows, v = d->vocab, n = rows * v;
    d->losses = malloc(rows * sizeof(double));
    d->lse = malloc(rows * sizeof(double));
    d->dl = malloc(n * sizeof(double));
    d->mag_lse = malloc(rows * sizeof(double));
    d->mag_loss = malloc(rows * sizeof(double));
    d->mag_dl = malloc(n * sizeof(double));
    hd__ref_cross_entropy(rows, v, d->logits, d->targets, d->ignore_index, d->losses, d->lse, d->dl,
                          &d->loss);
    d->mag_mean = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *x = d->logits + i * v;
        double m = -FLT_MAX, s = 0.0, a = 0.0;
        for (size_t j = 0; j < v; j++)
            m = x[j] > m ? x[j] : m;
        for (size_t j = 0; j < v; j++)
            s += exp((double)x[j] - m);
        for (size_t j = 0; j < v; j++)
            a += x[j] > -INFINITY ? exp((double)x[j] - m) / s * fabs((double)x[j] - m) : 0.0;
        if (!isfinite(a))
            a = 0.0;
        double base = fabs(log(s)) + a + 1.0;
        bool counted = d->targets[i] != d->ignore_index;
        d->mag_lse[i] = fabs(m) + base;
        d->mag_loss[i] = counted ? fabs(m - x[d->targets[i]]) + base : 0.0;
        if (isfinite(d->mag_loss[i]))
            d->mag_mean += d->inv_count * d->mag_loss[i];
        for (size_t j = 0; j < v; j++) {
            double p = exp((double)x[j] - m) / s;
            double pe = p > 0.0 ? p * (1.0 + fabs((double)x[j] - m) + a) : 0.0;
            d->mag_dl[i * v + j] =
                counted ? d->inv_count * (pe + ((int32_t)j == d->targets[i]) + 0x1p-125 / LAB_U)
                        : 0.0;
        }
    }
}

static double vlimit(const ce_data *d)
{
    return 8.0 + 2.0 * sqrt((double)d->vocab);
}

static void data_free(ce_data *d)
{
    free(d->losses);
    free(d->lse);
    free(d->dl);
    free(d->mag_lse);
    free(d->mag_loss);
    free(d->mag_dl);
}

/* Logits of the distribution, targets with about 30 % of rows ignored. */
static void generate(ce_data *d, int dist, bool bf16)
{
    size_t rows = d->rows, v = d->vocab;
    for (size_t i = 0; i < rows; i++) {
        float *x = d->logits + i * v;
        int32_t t = (int32_t)(lab_uniform() * (double)v);
        d->targets[i] = lab_uniform() < 0.3 ? d->ignore_index : t;
        for (size_t j = 0; j < v; j++) {
            double z = dist == D_N10     ? 10.0 * lab_normal()
                       : dist == D_U1E4  ? 2e4 * lab_uniform() - 1e4
                       : dist == D_MASKS ? 3.0 * lab_normal()
                                         : lab_normal();
            x[j] = (float)z;
            if (dist == D_MASKS && (int32_t)j != t && lab_uniform() < 0.2)
                x[j] = -INFINITY;
        }
        if (dist == D_PEAKED)
            x[t] = 30.0f;
        if (dist == D_MASKS && i == 1 && v > 1)
            x[t] = -INFINITY; /* the target masked: loss inf */
        if (dist == D_NONFINITE && i % 4 == 1)
            x[(size_t)t] = NAN;
        if (dist == D_NONFINITE && i % 4 == 2)
            x[v - 1] = INFINITY;
        if (dist == D_NONFINITE && i % 4 == 3) {
            for (size_t j = 0; j < v; j++)
                x[j] = -INFINITY;
            d->targets[i] = d->ignore_index; /* lse -inf, loss 0 */
        }
        if (bf16)
            for (size_t j = 0; j < v; j++)
                x[j] = lab_round_bf16(x[j]);
    }
    d->count = 0;
    for (size_t i = 0; i < rows; i++)
        d->count += d->targets[i] != d->ignore_index;
    d->inv_count = d->count > 0 ? (float)(1.0 / (double)d->count) : 0.0f;
}

static cl_mem act_upload(const float *v, size_t n, bool bf16)
{
    if (!bf16)
        return lab_buffer(n * 4, v);
    uint16_t *b = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        b[i] = lab_to_bf16(v[i]);
    cl_mem m = lab_buffer(n * 2, b);
    free(b);
    return m;
}

static void act_download(cl_mem m, size_t n, bool bf16, float *out)
{
    if (!bf16) {
        lab_read(m, n * 4, out);
        return;
    }
    uint16_t *b = malloc(n * 2 + 2);
    lab_read(m, n * 2, b);
    for (size_t i = 0; i < n; i++)
        out[i] = lab_from_bf16(b[i]);
    free(b);
}

static void check_rows(lab_err *e, const ce_data *d, const float *losses, const float *lse,
                       const char *what)
{
    for (size_t i = 0; i < d->rows; i++) {
        if (losses != NULL)
            lab_check(&e[E_LOSS], losses[i], d->losses[i], d->mag_loss[i], vlimit(d), false,
                      "%s loss row %zu of %zux%zu", what, i, d->rows, d->vocab);
        if (lse != NULL)
            lab_check(&e[E_LSE], lse[i], d->lse[i], d->mag_lse[i], vlimit(d), false,
                      "%s lse row %zu of %zux%zu", what, i, d->rows, d->vocab);
    }
}

static void check_dlogits(lab_err *e, const ce_data *d, const float *dl, bool bf16,
                          const char *what)
{
    for (size_t k = 0; k < d->rows * d->vocab; k++)
        lab_check(&e[E_DL], dl[k], d->dl[k], d->mag_dl[k], vlimit(d), bf16,
                  "%s dlogits (%zu,%zu) of %zux%zu", what, k / d->vocab, k % d->vocab, d->rows,
                  d->vocab);
}

/* mode: 0 dlogits apart, 1 in place, 2 none (cross_entropy_rows), 3 cross_entropy_loss_rows */
static void kernel_case(const config *c, cl_program prog, bool bf16, const ce_data *d, int mode,
                        bool want_lse)
{
    size_t rows = d->rows, v = d->vocab, n = rows * v;
    cl_mem bx = act_upload(d->logits, n, bf16), bt = lab_buffer(rows * 4, d->targets);
    cl_mem bl = lab_buffer(rows * 4, NULL), blse = lab_buffer(rows * 4, NULL);
    cl_mem bdl = mode == 0 ? lab_buffer(n * (bf16 ? 2 : 4), NULL) : bx, bmean = lab_buffer(4, NULL);
    cl_int ir = (cl_int)rows, iv = (cl_int)v, ig = d->ignore_index;
    float inv = d->inv_count;
    size_t groups = (rows + (size_t)c->rows - 1) / (size_t)c->rows;
    cl_kernel k;
    if (mode < 3) {
        k = lab_kernel(prog, "cross_entropy_rows");
        LAB_ARG(k, 0, bx);
        LAB_ARG(k, 1, bt);
        LAB_ARG(k, 2, bl);
        want_lse ? LAB_ARG(k, 3, blse) : lab_arg_null(k, 3);
        mode < 2 ? LAB_ARG(k, 4, bdl) : lab_arg_null(k, 4);
        LAB_ARG(k, 5, ir);
        LAB_ARG(k, 6, iv);
        LAB_ARG(k, 7, ig);
        LAB_ARG(k, 8, inv);
    } else {
        k = lab_kernel(prog, "cross_entropy_loss_rows");
        LAB_ARG(k, 0, bx);
        LAB_ARG(k, 1, bt);
        LAB_ARG(k, 2, bl);
        LAB_ARG(k, 3, blse);
        LAB_ARG(k, 4, ir);
        LAB_ARG(k, 5, iv);
        LAB_ARG(k, 6, ig);
        want_lse = true;
    }
    lab_launch(k, groups, (size_t)c->wg);
    clReleaseKernel(k);
    k = lab_kernel(prog, "cross_entropy_mean");
    LAB_ARG(k, 0, bl);
    LAB_ARG(k, 1, bmean);
    LAB_ARG(k, 2, ir);
    LAB_ARG(k, 3, inv);
    lab_launch(k, 1, (size_t)c->wg);
    clReleaseKernel(k);

    float *losses = malloc(rows * 4), *lse = malloc(rows * 4), *dl = malloc(n * 4), mean;
    lab_read(bl, rows * 4, losses);
    lab_read(blse, rows * 4, lse);
    lab_read(bmean, 4, &mean);
    static const char *const modes[] = {"rows, dlogits apart", "rows, in place", "rows, no dlogits",
                                        "loss_rows"};
    lab_err *e = errs[bf16];
    check_rows(e, d, losses, want_lse ? lse : NULL, modes[mode]);
    if (d->count > 0)
        lab_check(&e[E_MEAN], mean, d->loss, d->mag_mean, vlimit(d) + sqrt((double)rows), false,
                  "%s mean of %zux%zu", modes[mode], rows, v);
    if (mode < 2) {
        act_download(bdl, n, bf16, dl);
        check_dlogits(e, d, dl, bf16, modes[mode]);
    }
    free(losses);
    free(lse);
    free(dl);
    clReleaseMemObject(bx);
    clReleaseMemObject(bt);
    clReleaseMemObject(bl);
    clReleaseMemObject(blse);
    if (mode == 0)
        clReleaseMemObject(bdl);
    clReleaseMemObject(bmean);
}

/* The reference's dlogits against central differences of its mean loss. */
static void fd_check(const ce_data *d)
{
    size_t rows = d->rows, v = d->vocab, n = rows * v;
    if (d->count == 0)
        return;
    float *x = malloc(n * 4);
    memcpy(x, d->logits, n * 4);
    for (int s = 0; s < 6; s++) {
        size_t k = (size_t)(lab_uniform() * (double)n), i = k / v;
        if (d->targets[i] == d->ignore_index || s == 0) { /* the target once */
            for (i = 0; i < rows && d->targets[i] == d->ignore_index; i++)
                ;
            k = i * v + (size_t)d->targets[i];
        }
        float x0 = x[k], xp = (float)(x0 + 0x1p-10), xm = (float)(x0 - 0x1p-10);
        double lp, lm;
        x[k] = xp;
        hd__ref_cross_entropy(rows, v, x, d->targets, d->ignore_index, NULL, NULL, NULL, &lp);
        x[k] = xm;
        hd__ref_cross_entropy(rows, v, x, d->targets, d->ignore_index, NULL, NULL, NULL, &lm);
        x[k] = x0;
        double fd = (lp - lm) / ((double)xp - xm), p = d->dl[k] / d->inv_count;
        /* the rounding of the loss in double, over the step */
        double floor = 16.0 * DBL_EPSILON * fabs(d->loss) / ((double)xp - xm);
        double mag = 1e-6 * (fabs(d->dl[k]) + d->inv_count * fabs(p)) + floor;
        lab_check(&errs[0][E_FD], fd, d->dl[k], mag / LAB_U, 1.0, false, "fd (%zu,%zu) of %zux%zu",
                  k / v, k % v, rows, v);
    }
    free(x);
}

static void same_bits(const float *a, const float *b, size_t n, const char *what, size_t rows,
                      size_t v)
{
    for (size_t i = 0; i < n; i++)
        lab_check(&cpu_errs[E_SAME], memcmp(&a[i], &b[i], 4) == 0 ? 0.0 : 1.0, 0.0, 1.0, 0.5, false,
                  "%s [%zu] of %zux%zu", what, i, rows, v);
}

static void cpu_case(hd_cpu_pool *const pools[3], const ce_data *d)
{
    size_t rows = d->rows, v = d->vocab, n = rows * v;
    float *losses[3], *lse[3], *dl[3], mean[3];
    for (int p = 0; p < 3; p++) {
        losses[p] = malloc(rows * 4);
        lse[p] = malloc(rows * 4);
        dl[p] = malloc(n * 4);
        if (p == 1) /* in place */
            memcpy(dl[p], d->logits, n * 4);
        hd__cpu_cross_entropy(pools[p], rows, v, p == 1 ? dl[p] : d->logits, d->targets,
                              d->ignore_index, d->inv_count, losses[p], lse[p], dl[p], &mean[p]);
    }
    check_rows(cpu_errs, d, losses[0], lse[0], "cpu");
    if (d->count > 0)
        lab_check(&cpu_errs[E_MEAN], mean[0], d->loss, d->mag_mean, vlimit(d) + sqrt((double)rows),
                  false, "cpu mean of %zux%zu", rows, v);
    check_dlogits(cpu_errs, d, dl[0], false, "cpu");
    for (int p = 1; p < 3; p++) {
        same_bits(losses[0], losses[p], rows, "cpu losses", rows, v);
        same_bits(lse[0], lse[p], rows, "cpu lse", rows, v);
        same_bits(dl[0], dl[p], n, "cpu dlogits", rows, v);
        same_bits(&mean[0], &mean[p], 1, "cpu mean", rows, v);
    }
    /* evaluation: no dlogits, no lse */
    hd__cpu_cross_entropy(pools[2], rows, v, d->logits, d->targets, d->ignore_index, d->inv_count,
                          losses[1], NULL, NULL, NULL);
    same_bits(losses[0], losses[1], rows, "cpu losses without dlogits", rows, v);
    for (int p = 0; p < 3; p++) {
        free(losses[p]);
        free(lse[p]);
        free(dl[p]);
    }
}

int main(void)
{
    lab_init();
    static const char *const names[E_COUNT] = {"lse",
                                               "loss_i",
                                               "dlogits",
                                               "mean loss",
                                               "cpu threads same bits",
                                               "ref dlogits vs finite differences"};
    for (int b = 0; b < 2; b++)
        for (int e = 0; e < E_COUNT; e++)
            lab_err_start(&errs[b][e], names[e]);
    for (int e = 0; e < E_COUNT; e++)
        lab_err_start(&cpu_errs[e], names[e]);
    hd_cpu_pool *pools[3] = {NULL, NULL, NULL};
    hd__cpu_pool_create(2, &pools[1]);
    hd__cpu_pool_create(3, &pools[2]);
    uint64_t seed = 1;
    for (int bf = 0; bf < 2; bf++)
        for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
            const config *c = &configs[ci];
            char opt[128];
            snprintf(opt, sizeof opt, "-DWG=%d -DROWS=%d -DVEC=%d -DACT_BF16=%d", c->wg, c->rows,
                     c->vec, bf);
            cl_program prog = lab_build("cross_entropy", opt);
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                size_t rows = shapes[si].rows, v = shapes[si].vocab;
                if (v % (size_t)c->vec != 0)
                    continue;
                for (int dist = 0; dist < D_COUNT; dist++) {
                    lab_seed(seed++);
                    snprintf(lab_case, sizeof lab_case, "wg %d rows %d vec %d bf16 %d, %zux%zu, %s",
                             c->wg, c->rows, c->vec, bf, rows, v, dist_names[dist]);
                    ce_data d = {.rows = rows,
                                 .vocab = v,
                                 .logits = malloc(rows * v * 4),
                                 .targets = malloc(rows * 4),
                                 .ignore_index = (si % 4 == 3 && v > 1) ? 1 : IGNORE};
                    generate(&d, dist, bf);
                    reference(&d);
                    for (int mode = 0; mode < 4; mode++)
                        kernel_case(c, prog, bf, &d, mode, (mode + (int)si) % 2 == 0);
                    if (ci == 0 && !bf) {
                        if (dist <= D_N10)
                            fd_check(&d);
                        cpu_case(pools, &d);
                    }
                    data_free(&d);
                    free(d.logits);
                    free(d.targets);
                }
            }
            clReleaseProgram(prog);
        }
    printf("cross_entropy (OpenCL, fp32 logits):\n");
    for (int e = 0; e < E_COUNT; e++)
        if (e != E_SAME)
            lab_err_report(&errs[0][e]);
    printf("cross_entropy (OpenCL, bf16 logits):\n");
    for (int e = E_LSE; e <= E_MEAN; e++)
        lab_err_report(&errs[1][e]);
    printf("cross_entropy (CPU, 1/2/3 threads):\n");
    for (int e = E_LSE; e <= E_SAME; e++)
        lab_err_report(&cpu_errs[e]);
    hd__cpu_pool_destroy(pools[1]);
    hd__cpu_pool_destroy(pools[2]);
    lab_finish();
    return lab_summary();
}
