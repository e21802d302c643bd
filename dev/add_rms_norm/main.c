/*
 * Lab harness of residual add + RMS norm (backends/fused/kernels/add_rms_norm.cl,
 * backends/cpu/add_rms_norm.c) against the float64 reference (autotune/reference_train.c):
 * every kernel and path, fp32 and bf16 activations, odd and prime shapes, rows of any magnitude,
 * in place; the CPU version at 1, 2 and 3 threads (the same bits required); the reference's
 * backward against finite differences of its forward.
 *
 * Tolerances (lab.h: errors in units of u * mag, u = 2^-24):
 *   h:  mag |h|, limit 1 (x + r rounded once; in bf16 the stored value must be exactly the
 *       bf16 rounding of the float sum).
 *   y:  mag |y|, limit 8 + 4 sqrt(cols) (a sum of squares of cols terms, its rsqrt, products);
 *       in bf16 against the reference on the stored (bf16) h, plus one bf16 ulp.
 *   dh: mag rstd (|w dy| + |xhat| mean|w dy xhat|) + |dres|, limit 8 + 4 sqrt(cols).
 *   dw: mag sum_i |dy xhat|, limit 8 + 4 (sqrt(rows) + sqrt(cols)).
 *   finite differences of the reference (central, step 2^-12 of the row's rms; w's: of |w|):
 *       |fd - ref| <= 1e-6 mag.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "backends/cpu/step.h"
#include "lab.h"

typedef struct config {
    int wg, rows, vec, cache, prefetch;
} config;

static const config configs[] = {
    {256, 1, 4, 4, 0}, /* a row of up to 4096 in registers */
    {64, 4, 1, 2, 1},  /* 4 rows per group, slots of 16, rows of up to 32 in registers */
    {128, 2, 4, 2, 1}, /* 2 rows per group, slots of 64, float4, rows of up to 512 in registers */
    {32, 2, 4, 0, 0},  /* looped kernels only */
};

typedef struct shape {
    size_t rows, cols;
} shape;

static const shape shapes[] = {{1, 1},    {1, 4},    {3, 7},    {1, 13},   {5, 12},
                               {2, 64},   {17, 100}, {4, 257},  {3, 1000}, {7, 1024},
                               {2, 4099}, {9, 2048}, {64, 1024}};

/* x ~ scale N(0, 1), r ~ scale N(0, 1/4); dy and dres ~ dscale N(0, 1) (dh ~ dy / rms(h) must
 * stay within float's range) */
typedef struct magnitude {
    const char *name;
    double scale;
    float eps;
    double dscale;
} magnitude;

static const magnitude mags[] = {
    {"1", 1.0, 1e-6f, 1.0},
    {"1e30", 1e30, 1e-6f, 1.0},
    {"2e37", 2e37, 1e-6f, 1.0},
    {"1e-30 eps0", 1e-30, 0.0f, 1e-30},
    {"1e-38 eps0", 1e-38, 0.0f, 1e-36}, /* dy not subnormal */
    {"1e-20 eps1e-6", 1e-20, 1e-6f, 1.0},
    {"1e10, dy 1e25", 1e10, 1e-6f, 1e25},
};

enum { E_H, E_Y, E_DH, E_DW, E_CPU_SAME, E_FD_X, E_FD_W, E_COUNT };
static lab_err errs[2][E_COUNT]; /* [bf16] */
static lab_err cpu_errs[E_COUNT];

static double ylimit(size_t cols)
{
    return 8.0 + 4.0 * sqrt((double)cols);
}

static double dwlimit(size_t rows, size_t cols)
{
    return 8.0 + 4.0 * (sqrt((double)rows) + sqrt((double)cols));
}

/* Activation buffer from float values (stored as bf16 when bf16). */
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

static void fill(float *p, size_t n, double scale, bool bf16)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(scale * lab_normal());
        if (bf16)
            p[i] = lab_round_bf16(p[i]);
    }
}

typedef struct kernels {
    cl_program prog;
    cl_kernel cached, looped, rows, fused, stats, apply, partials, combine;
} kernels;

static kernels build(const config *c, bool bf16)
{
    char opt[256];
    snprintf(opt, sizeof opt, "-DWG=%d -DROWS=%d -DVEC=%d -DCACHE=%d -DPREFETCH=%d -DACT_BF16=%d",
             c->wg, c->rows, c->vec, c->cache, c->prefetch, bf16);
    kernels k = {0};
    k.prog = lab_build("add_rms_norm", opt);
    if (c->cache > 0) {
        k.cached = lab_kernel(k.prog, "add_rms_norm_cached");
        k.fused = lab_kernel(k.prog, "add_rms_norm_backward_fused");
    }
    k.looped = lab_kernel(k.prog, "add_rms_norm_looped");
    k.rows = lab_kernel(k.prog, "add_rms_norm_backward_rows");
    k.stats = lab_kernel(k.prog, "add_rms_norm_backward_stats");
    k.apply = lab_kernel(k.prog, "add_rms_norm_backward_apply");
    k.partials = lab_kernel(k.prog, "add_rms_norm_weight_partials");
    k.combine = lab_kernel(k.prog, "add_rms_norm_weight_combine");
    return k;
}

static void release(kernels *k)
{
    cl_kernel all[] = {k->cached, k->looped, k->rows,     k->fused,
                       k->stats,  k->apply,  k->partials, k->combine};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] != NULL)
            clReleaseKernel(all[i]);
    clReleaseProgram(k->prog);
}

/* ---- forward ---- */

/* Runs one forward kernel with h aliasing x (alias 1), r (2) or nothing (0), checks h and y. */
static void forward_case(const config *c, kernels *k, cl_kernel kern, bool bf16, size_t rows,
                         size_t cols, const float *x, const float *r, const float *w, float eps,
                         int alias, const char *kname)
{
    size_t n = rows * cols;
    double *h_ref = malloc(n * sizeof *h_ref), *y_ref = malloc(n * sizeof *y_ref);
    float *hs = malloc(n * 4), *zero = calloc(n, 4), *h = malloc(n * 4), *y = malloc(n * 4);
    /* the op's h as stored: the float sum, rounded to bf16 in bf16; y from that h */
    for (size_t i = 0; i < n; i++) {
        hs[i] = x[i] + r[i];
        if (bf16)
            hs[i] = lab_round_bf16(hs[i]);
    }
    hd__ref_add_rms_norm(rows, cols, x, r, w, eps, h_ref, y_ref);
    if (bf16)
        hd__ref_add_rms_norm(rows, cols, hs, zero, w, eps, NULL, y_ref);

    cl_mem bx = act_upload(x, n, bf16), br = act_upload(r, n, bf16), bw = lab_buffer(cols * 4, w);
    cl_mem bh = alias == 1 ? bx : alias == 2 ? br : lab_buffer(n * (bf16 ? 2 : 4), NULL);
    cl_mem by = lab_buffer(n * (bf16 ? 2 : 4), NULL);
    cl_int ir = (cl_int)rows, ic = (cl_int)cols;
    LAB_ARG(kern, 0, bx);
    LAB_ARG(kern, 1, br);
    LAB_ARG(kern, 2, bw);
    LAB_ARG(kern, 3, bh);
    LAB_ARG(kern, 4, by);
    LAB_ARG(kern, 5, ir);
    LAB_ARG(kern, 6, ic);
    LAB_ARG(kern, 7, eps);
    lab_launch(kern, (rows + (size_t)c->rows - 1) / (size_t)c->rows, (size_t)c->wg);
    act_download(bh, n, bf16, h);
    act_download(by, n, bf16, y);
    for (size_t i = 0; i < n; i++) {
        size_t row = i / cols, col = i % cols;
        if (bf16)
            lab_check(&errs[1][E_H], h[i], hs[i], fabs(hs[i]), 1.001, false, "%s %zux%zu (%zu,%zu)",
                      kname, rows, cols, row, col);
        else
            lab_check(&errs[0][E_H], h[i], h_ref[i], fabs(h_ref[i]), 1.001, false,
                      "%s %zux%zu (%zu,%zu)", kname, rows, cols, row, col);
        lab_check(&errs[bf16][E_Y], y[i], y_ref[i], fabs(y_ref[i]), ylimit(cols), bf16,
                  "%s %zux%zu (%zu,%zu) alias %d", kname, rows, cols, row, col, alias);
    }
    clReleaseMemObject(bx);
    clReleaseMemObject(br);
    clReleaseMemObject(bw);
    if (alias == 0)
        clReleaseMemObject(bh);
    clReleaseMemObject(by);
    free(h_ref);
    free(y_ref);
    free(hs);
    free(zero);
    free(h);
    free(y);
    (void)k;
}

/* ---- backward ---- */

typedef struct bwd_data {
    size_t rows, cols;
    float *h, *w, *dy, *dres; /* inputs as stored (bf16-rounded in bf16) */
    float eps;
    double *dh_ref, *dw_ref, *dh_mag, *dw_mag;
} bwd_data;

/* The reference and the magnitudes of the tolerances. */
static void bwd_reference(bwd_data *d)
{
    size_t rows = d->rows, cols = d->cols, n = rows * cols;
    d->dh_ref = malloc(n * sizeof(double));
    d->dh_mag = malloc(n * sizeof(double));
    d->dw_ref = malloc(cols * sizeof(double));
    d->dw_mag = calloc(cols, sizeof(double));
    hd__ref_add_rms_norm_backward(rows, cols, d->h, d->w, d->dy, d->dres, d->eps, d->dh_ref,
                                  d->dw_ref);
    for (size_t i = 0; i < rows; i++) {
        const float *h = d->h + i * cols, *dy = d->dy + i * cols;
        double sq = 0.0, agx = 0.0;
        for (size_t j = 0; j < cols; j++)
            sq += (double)h[j] * h[j];
        double rstd = 1.0 / sqrt(sq / (double)cols + d->eps);
        for (size_t j = 0; j < cols; j++)
            agx += fabs((double)d->w[j] * dy[j] * h[j] * rstd);
        agx /= (double)cols;
        for (size_t j = 0; j < cols; j++) {
            double xhat = h[j] * rstd;
            d->dh_mag[i * cols + j] = rstd * (fabs((double)d->w[j] * dy[j]) + fabs(xhat) * agx) +
                                      (d->dres != NULL ? fabs(d->dres[i * cols + j]) : 0.0);
            d->dw_mag[j] += fabs(dy[j] * xhat);
        }
    }
}

static void bwd_free(bwd_data *d)
{
    free(d->dh_ref);
    free(d->dh_mag);
    free(d->dw_ref);
    free(d->dw_mag);
}

static void check_dh(const bwd_data *d, const float *dh, bool bf16, const char *path)
{
    for (size_t i = 0; i < d->rows * d->cols; i++)
        lab_check(&errs[bf16][E_DH], dh[i], d->dh_ref[i], d->dh_mag[i], ylimit(d->cols), bf16,
                  "%s %zux%zu (%zu,%zu)", path, d->rows, d->cols, i / d->cols, i % d->cols);
}

static void check_dw(const bwd_data *d, const float *dw, bool bf16, const char *path)
{
    for (size_t j = 0; j < d->cols; j++)
        lab_check(&errs[bf16][E_DW], dw[j], d->dw_ref[j], d->dw_mag[j], dwlimit(d->rows, d->cols),
                  false, "%s %zux%zu col %zu", path, d->rows, d->cols, j);
}

enum path { P_ROWS, P_FUSED_DW, P_FUSED, P_LONG };
static const char *const path_names[] = {"backward_rows", "backward_fused+combine",
                                         "backward_fused (no dw)", "stats+partials+combine+apply"};

/* One backward path; in place (dh over dy: alias 1, over dres: alias 2) where asked. */
static void backward_case(const config *c, kernels *k, bool bf16, const bwd_data *d, int path,
                          int alias)
{
    size_t rows = d->rows, cols = d->cols, n = rows * cols, esz = bf16 ? 2 : 4;
    cl_mem bh = act_upload(d->h, n, bf16), bdy = act_upload(d->dy, n, bf16);
    cl_mem bdres = d->dres != NULL ? act_upload(d->dres, n, bf16) : NULL;
    cl_mem bw = lab_buffer(cols * 4, d->w);
    cl_mem bdh = alias == 1 ? bdy : alias == 2 && bdres != NULL ? bdres : lab_buffer(n * esz, NULL);
    cl_mem bdw = lab_buffer(cols * 4, NULL), part = NULL, stats = NULL;
    cl_int ir = (cl_int)rows, ic = (cl_int)cols;
    float eps = d->eps;
    size_t row_groups = (rows + (size_t)c->rows - 1) / (size_t)c->rows;
    bool want_dw = path == P_FUSED_DW || path == P_LONG;
    cl_int chunks = 0;
    if (path == P_ROWS) {
        cl_kernel kk = k->rows;
        LAB_ARG(kk, 0, bh);
        LAB_ARG(kk, 1, bw);
        LAB_ARG(kk, 2, bdy);
        bdres != NULL ? LAB_ARG(kk, 3, bdres) : lab_arg_null(kk, 3);
        LAB_ARG(kk, 4, bdh);
        LAB_ARG(kk, 5, ir);
        LAB_ARG(kk, 6, ic);
        LAB_ARG(kk, 7, eps);
        lab_launch(kk, row_groups, (size_t)c->wg);
    } else if (path == P_FUSED_DW || path == P_FUSED) {
        /* at most 3 groups, each a chunk of rows that is a multiple of ROWS */
        size_t groups = rows < 3 ? rows : 3, chunk = (rows + groups - 1) / groups;
        chunk = (chunk + (size_t)c->rows - 1) / (size_t)c->rows * (size_t)c->rows;
        groups = (rows + chunk - 1) / chunk;
        chunks = (cl_int)groups;
        cl_int ichunk = (cl_int)chunk;
        part = lab_buffer(groups * cols * 4, NULL);
        cl_kernel kk = k->fused;
        LAB_ARG(kk, 0, bh);
        LAB_ARG(kk, 1, bw);
        LAB_ARG(kk, 2, bdy);
        bdres != NULL ? LAB_ARG(kk, 3, bdres) : lab_arg_null(kk, 3);
        LAB_ARG(kk, 4, bdh);
        path == P_FUSED_DW ? LAB_ARG(kk, 5, part) : lab_arg_null(kk, 5);
        LAB_ARG(kk, 6, ir);
        LAB_ARG(kk, 7, ic);
        LAB_ARG(kk, 8, eps);
        LAB_ARG(kk, 9, ichunk);
        lab_launch(kk, groups, (size_t)c->wg);
    } else {
        stats = lab_buffer(rows * 16, NULL);
        cl_kernel kk = k->stats;
        LAB_ARG(kk, 0, bh);
        LAB_ARG(kk, 1, bw);
        LAB_ARG(kk, 2, bdy);
        LAB_ARG(kk, 3, stats);
        LAB_ARG(kk, 4, ir);
        LAB_ARG(kk, 5, ic);
        LAB_ARG(kk, 6, eps);
        lab_launch(kk, row_groups, (size_t)c->wg);
        cl_int chunk = 4, span = (cl_int)((cols + 63) / 64 * 64);
        chunks = (cl_int)((rows + 3) / 4);
        part = lab_buffer((size_t)chunks * cols * 4, NULL);
        kk = k->partials;
        LAB_ARG(kk, 0, bh);
        LAB_ARG(kk, 1, bdy);
        LAB_ARG(kk, 2, stats);
        LAB_ARG(kk, 3, part);
        LAB_ARG(kk, 4, ir);
        LAB_ARG(kk, 5, ic);
        LAB_ARG(kk, 6, chunk);
        LAB_ARG(kk, 7, chunks);
        LAB_ARG(kk, 8, span);
        lab_launch(kk, (size_t)span / 64 * (size_t)chunks, 64);
    }
    if (want_dw) {
        cl_kernel kk = k->combine;
        LAB_ARG(kk, 0, part);
        LAB_ARG(kk, 1, bdw);
        LAB_ARG(kk, 2, ic);
        LAB_ARG(kk, 3, chunks);
        lab_launch(kk, (cols + 31) / 32, 256);
    }
    if (path == P_LONG) {
        cl_kernel kk = k->apply;
        LAB_ARG(kk, 0, bh);
        LAB_ARG(kk, 1, bw);
        LAB_ARG(kk, 2, bdy);
        bdres != NULL ? LAB_ARG(kk, 3, bdres) : lab_arg_null(kk, 3);
        LAB_ARG(kk, 4, stats);
        LAB_ARG(kk, 5, bdh);
        LAB_ARG(kk, 6, ir);
        LAB_ARG(kk, 7, ic);
        lab_launch(kk, row_groups, (size_t)c->wg);
    }
    float *dh = malloc(n * 4), *dw = malloc(cols * 4);
    act_download(bdh, n, bf16, dh);
    char name[96];
    snprintf(name, sizeof name, "%s dres %d alias %d", path_names[path], d->dres != NULL, alias);
    check_dh(d, dh, bf16, name);
    if (want_dw) {
        lab_read(bdw, cols * 4, dw);
        check_dw(d, dw, bf16, name);
    }
    free(dh);
    free(dw);
    clReleaseMemObject(bh);
    clReleaseMemObject(bdy);
    if (bdres != NULL)
        clReleaseMemObject(bdres);
    clReleaseMemObject(bw);
    if (!(alias == 1 || (alias == 2 && bdres != NULL)))
        clReleaseMemObject(bdh);
    clReleaseMemObject(bdw);
    if (part != NULL)
        clReleaseMemObject(part);
    if (stats != NULL)
        clReleaseMemObject(stats);
}

/* ---- the reference against finite differences ---- */

/* Row objective sum_j dy_j y_j + dres_j h_j of the reference forward. */
static double row_objective(size_t cols, const float *x, const float *r, const float *w, float eps,
                            const float *dy, const float *dres, double *hb, double *yb)
{
    hd__ref_add_rms_norm(1, cols, x, r, w, eps, hb, yb);
    double l = 0.0;
    for (size_t j = 0; j < cols; j++)
        l += dy[j] * yb[j] + (dres != NULL ? dres[j] * hb[j] : 0.0);
    return l;
}

static void fd_check(size_t rows, size_t cols, const float *x, const float *r, const float *w,
                     float eps, const float *dy, const float *dres)
{
    size_t n = rows * cols;
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = x[i] + r[i];
    bwd_data d = {rows, cols, h, (float *)w, (float *)dy, (float *)dres, eps, 0, 0, 0, 0};
    bwd_reference(&d);
    float *xr = malloc(cols * 4), *wp = malloc(cols * 4);
    double *hb = malloc(cols * sizeof(double)), *yb = malloc(cols * sizeof(double));
    for (int s = 0; s < 6; s++) {
        size_t i = (size_t)(lab_uniform() * (double)rows),
               j = (size_t)(lab_uniform() * (double)cols);
        const float *hr = h + i * cols;
        double sq = 0.0;
        for (size_t q = 0; q < cols; q++)
            sq += (double)hr[q] * hr[q];
        double delta = 0x1p-12 * sqrt(sq / (double)cols + eps);
        memcpy(xr, x + i * cols, cols * 4);
        float x0 = xr[j], xp = (float)(x0 + delta), xm = (float)(x0 - delta);
        const float *dres_row = dres != NULL ? dres + i * cols : NULL;
        xr[j] = xp;
        double lp = row_objective(cols, xr, r + i * cols, w, eps, dy + i * cols, dres_row, hb, yb);
        xr[j] = xm;
        double lm = row_objective(cols, xr, r + i * cols, w, eps, dy + i * cols, dres_row, hb, yb);
        double fd = (lp - lm) / ((double)xp - (double)xm);
        lab_check(&errs[0][E_FD_X], fd, d.dh_ref[i * cols + j],
                  d.dh_mag[i * cols + j] * 1e-6 / LAB_U, 1.0, false, "fd dx %zux%zu (%zu,%zu)",
                  rows, cols, i, j);
    }
    for (int s = 0; s < 3; s++) {
        size_t j = (size_t)(lab_uniform() * (double)cols);
        memcpy(wp, w, cols * 4);
        double delta = 0x1p-12 * fabs(w[j]);
        float wpp = (float)(w[j] + delta), wmm = (float)(w[j] - delta);
        double lp = 0.0, lm = 0.0;
        for (size_t i = 0; i < rows; i++) {
            wp[j] = wpp;
            lp += row_objective(cols, x + i * cols, r + i * cols, wp, eps, dy + i * cols, NULL, hb,
                                yb);
            wp[j] = wmm;
            lm += row_objective(cols, x + i * cols, r + i * cols, wp, eps, dy + i * cols, NULL, hb,
                                yb);
        }
        double fd = (lp - lm) / ((double)wpp - (double)wmm);
        lab_check(&errs[0][E_FD_W], fd, d.dw_ref[j], d.dw_mag[j] * 1e-6 / LAB_U, 1.0, false,
                  "fd dw %zux%zu col %zu", rows, cols, j);
    }
    bwd_free(&d);
    free(h);
    free(xr);
    free(wp);
    free(hb);
    free(yb);
}

/* ---- CPU ---- */

static void same_bits(const float *a, const float *b, size_t n, const char *what, size_t rows,
                      size_t cols, size_t threads)
{
    for (size_t i = 0; i < n; i++)
        lab_check(&cpu_errs[E_CPU_SAME], memcmp(&a[i], &b[i], 4) == 0 ? 0.0 : 1.0, 0.0, 1.0, 0.5,
                  false, "%s %zux%zu [%zu] threads %zu", what, rows, cols, i, threads);
}

static void cpu_case(hd_cpu_pool *const pools[3], size_t rows, size_t cols, const float *x,
                     const float *r, const float *w, float eps, const float *dy, const float *dres)
{
    size_t n = rows * cols;
    double *h_ref = malloc(n * sizeof(double)), *y_ref = malloc(n * sizeof(double));
    hd__ref_add_rms_norm(rows, cols, x, r, w, eps, h_ref, y_ref);
    float *h[3], *y[3], *dh[3], *dw[3];
    for (int p = 0; p < 3; p++) {
        h[p] = malloc(n * 4);
        y[p] = malloc(n * 4);
        dh[p] = malloc(n * 4);
        dw[p] = malloc(cols * 4);
        /* in place on the second pool: h over a copy of x */
        if (p == 1) {
            memcpy(h[p], x, n * 4);
            hd__cpu_add_rms_norm(pools[p], rows, cols, h[p], r, w, eps, h[p], y[p]);
        } else {
            hd__cpu_add_rms_norm(pools[p], rows, cols, x, r, w, eps, h[p], y[p]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        lab_check(&cpu_errs[E_H], h[0][i], h_ref[i], fabs(h_ref[i]), 1.001, false,
                  "cpu h %zux%zu [%zu]", rows, cols, i);
        lab_check(&cpu_errs[E_Y], y[0][i], y_ref[i], fabs(y_ref[i]), ylimit(cols), false,
                  "cpu y %zux%zu [%zu]", rows, cols, i);
    }
    for (int p = 1; p < 3; p++) {
        same_bits(h[0], h[p], n, "cpu h", rows, cols, hd__cpu_pool_threads(pools[p]));
        same_bits(y[0], y[p], n, "cpu y", rows, cols, hd__cpu_pool_threads(pools[p]));
    }
    /* backward from the forward's h, with dw, then without (in place over dy) */
    bwd_data d = {rows, cols, h[0], (float *)w, (float *)dy, (float *)dres, eps, 0, 0, 0, 0};
    bwd_reference(&d);
    for (int p = 0; p < 3; p++)
        if (hd__cpu_add_rms_norm_backward(pools[p], rows, cols, h[0], w, dy, dres, eps, dh[p],
                                          dw[p]) != HD_OK)
            exit(2);
    for (size_t i = 0; i < n; i++)
        lab_check(&cpu_errs[E_DH], dh[0][i], d.dh_ref[i], d.dh_mag[i], ylimit(cols), false,
                  "cpu dh %zux%zu [%zu] dres %d", rows, cols, i, dres != NULL);
    for (size_t j = 0; j < cols; j++)
        lab_check(&cpu_errs[E_DW], dw[0][j], d.dw_ref[j], d.dw_mag[j], dwlimit(rows, cols), false,
                  "cpu dw %zux%zu [%zu]", rows, cols, j);
    for (int p = 1; p < 3; p++) {
        same_bits(dh[0], dh[p], n, "cpu dh", rows, cols, hd__cpu_pool_threads(pools[p]));
        same_bits(dw[0], dw[p], cols, "cpu dw", rows, cols, hd__cpu_pool_threads(pools[p]));
    }
    float *inplace = malloc(n * 4);
    memcpy(inplace, dy, n * 4);
    hd__cpu_add_rms_norm_backward(pools[2], rows, cols, h[0], w, inplace, dres, eps, inplace, NULL);
    same_bits(dh[0], inplace, n, "cpu dh in place, no dw", rows, cols, 3);
    free(inplace);
    bwd_free(&d);
    for (int p = 0; p < 3; p++) {
        free(h[p]);
        free(y[p]);
        free(dh[p]);
        free(dw[p]);
    }
    free(h_ref);
    free(y_ref);
}

int main(void)
{
    lab_init();
    static const char *const names[E_COUNT] = {"h",
                                               "y",
                                               "dh",
                                               "dw",
                                               "cpu threads same bits",
                                               "ref dh vs finite differences",
                                               "ref dw vs finite differences"};
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
            kernels k = build(c, bf);
            int t = c->wg / c->rows;
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                size_t rows = shapes[si].rows, cols = shapes[si].cols, n = rows * cols;
                if (cols % (size_t)c->vec != 0)
                    continue;
                bool fits = c->cache > 0 && cols / (size_t)c->vec <= (size_t)(t * c->cache);
                for (size_t mi = 0; mi < sizeof mags / sizeof mags[0]; mi++) {
                    lab_seed(seed++);
                    snprintf(lab_case, sizeof lab_case,
                             "wg %d rows %d vec %d cache %d prefetch %d bf16 %d, %zux%zu, %s",
                             c->wg, c->rows, c->vec, c->cache, c->prefetch, bf, rows, cols,
                             mags[mi].name);
                    float *x = malloc(n * 4), *r = malloc(n * 4), *w = malloc(cols * 4);
                    float *dy = malloc(n * 4), *dres = malloc(n * 4), *h = malloc(n * 4);
                    fill(x, n, mags[mi].scale, bf);
                    fill(r, n, 0.5 * mags[mi].scale, bf);
                    for (size_t j = 0; j < cols; j++)
                        w[j] = (float)(1.0 + 0.1 * lab_normal());
                    fill(dy, n, mags[mi].dscale, bf);
                    fill(dres, n, mags[mi].dscale, bf);
                    int alias = (int)(si + mi) % 3;
                    float eps = mags[mi].eps;
                    if (fits)
                        forward_case(c, &k, k.cached, bf, rows, cols, x, r, w, eps, alias,
                                     "cached");
                    forward_case(c, &k, k.looped, bf, rows, cols, x, r, w, eps, (alias + 1) % 3,
                                 "looped");
                    for (size_t i = 0; i < n; i++)
                        h[i] = bf ? lab_round_bf16(x[i] + r[i]) : x[i] + r[i];
                    for (int with_dres = 0; with_dres < 2; with_dres++) {
                        bwd_data d = {rows, cols, h, w, dy, with_dres ? dres : NULL,
                                      eps,  0,    0, 0, 0};
                        bwd_reference(&d);
                        for (int p = P_ROWS; p <= P_LONG; p++) {
                            if ((p == P_FUSED_DW || p == P_FUSED) && !fits)
                                continue;
                            backward_case(c, &k, bf, &d, p, (int)(si + mi + (size_t)p) % 3);
                        }
                        bwd_free(&d);
                    }
                    if (ci == 0 && !bf) {
                        fd_check(rows, cols, x, r, w, eps, dy, (si & 1) ? dres : NULL);
                        cpu_case(pools, rows, cols, x, r, w, eps, dy, (si & 1) ? dres : NULL);
                    }
                    free(x);
                    free(r);
                    free(w);
                    free(dy);
                    free(dres);
                    free(h);
                }
            }
            release(&k);
        }
    printf("add_rms_norm (OpenCL, fp32):\n");
    for (int e = 0; e < E_COUNT; e++)
        if (e != E_CPU_SAME && errs[0][e].count > 0)
            lab_err_report(&errs[0][e]);
    printf("add_rms_norm (OpenCL, bf16 activations):\n");
    for (int e = E_H; e <= E_DW; e++)
        lab_err_report(&errs[1][e]);
    printf("add_rms_norm (CPU, 1/2/3 threads):\n");
    for (int e = E_H; e <= E_CPU_SAME; e++)
        lab_err_report(&cpu_errs[e]);
    hd__cpu_pool_destroy(pools[1]);
    hd__cpu_pool_destroy(pools[2]);
    lab_finish();
    return lab_summary();
}
