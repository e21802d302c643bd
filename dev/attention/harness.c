/*
 * Lab harness for attention (dev/, not the product): the OpenCL kernels of
 * backends/fused/kernels/attention.cl (built from the .cl files, on whatever OpenCL device comes
 * first: PoCL here) and the CPU version (backends/cpu/attention.c) against the float64
 * reference (autotune/reference_attention.c), on fresh random data, for many shapes; the
 * reference backward against finite differences of the reference forward.
 *
 * Tolerances, per element, relative to the float64 reference and the magnitude of the data
 * (u = 2^-24; S_ij = scale * sum_c |q_ic k_jc|, the magnitude of a score's terms, which an
 * fp32 score's rounding error scales with; p_ij the reference weights; n_i the row's keys):
 *   a score is off by up to about u sqrt(d) S_ij (a d-long float dot product, random
 *   rounding), and lse by u |lse| when stored and read: a weight's relative error is
 *   E_ij = sqrt(d) (S_ij + 1) + |lse_i| + sqrt(n_i) (the last for the sums over keys) in u;
 *   out_ic:  K u sum_j p_ij (E_ij |v_jc - out_ic| + |v_jc|)
 *   lse_i:   K u (sum_j p_ij E_ij + 1)
 *   dv_jc:   K u sum_i p_ij E_ij |dout_ic|
 *   dq_ic:   K u scale sum_j W_ij |k_jc|,  dk_jc: K u scale sum_i W_ij |q_ic|, where
 *            W_ij = p_ij (E_ij |dp_ij - delta_i| + sqrt(d) (sum_c |dout_ic v_jc| +
 *            (1 + e_out / u) sum_c |dout_ic out_ic|)), e_out the rounding of the stored out
 *            (u, or 2^-8 in bf16), and the sums of the outputs' own rounding (sqrt(n) |terms|)
 * with K = 4. bf16 adds the rounding of the stored output, 2^-8 |want| (the reference is
 * computed on the bf16-rounded inputs). Every reported error is err / tolerance ("norm": at
 * most 1 passes) beside the plain relative error err / max |want| of the tensor.
 * The backward is checked on out and lse taken from the reference (rounded to the stored
 * type), so that it is judged on its own arithmetic; the chained run (forward, then backward
 * on the forward's own out and lse) is reported too.
 *
 * Usage: harness [KERNELS_DIR] (default backends/fused/kernels); environment: QUICK=1 fewer
 * cases; CASE=substring runs the cases whose name contains it.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune/reference_step.h"
#include "backends/cpu/step.h"

#define U        (1.0 / 16777216.0)
#define KTOL     4.0
#define BF16_OUT (1.0 / 256.0)

static int failures;

/* ---- small helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void) /* in [-1, 1) */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f))
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = xmalloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    b[n] = 0;
    fclose(f);
    return b;
}

/* ---- the comparison ---- */

typedef struct check {
    double norm, rel, abs; /* worst err / tol, err / max|want|, err */
    size_t where;
    bool nan; /* a NaN where the reference has none, or the other way */
} check;

static check compare(const float *got, const double *want, const double *tol, size_t n)
{
    check c = {0, 0, 0, 0, false};
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(want[i])) {
            c.nan = true;
            c.where = i;
            continue;
        }
        if (isnan(want[i]))
            continue;
        double e = fabs((double)got[i] - want[i]);
        double r = e / tol[i];
        if (r > c.norm || isnan(r)) {
            c.norm = r;
            c.where = i;
        }
        c.abs = fmax(c.abs, e);
    }
    c.rel = scale > 0 ? c.abs / scale : c.abs;
    return c;
}

typedef struct tally {
    double norm, rel;
} tally;
static tally worst_fp32, worst_bf16, worst_cpu;

static void report(const char *what, const char *name, check c, bool bf16, tally *t)
{
    bool ok = !c.nan && c.norm <= 1.0;
    if (!ok)
        failures++;
    if (t != NULL) {
        t->norm = fmax(t->norm, c.norm);
        t->rel = fmax(t->rel, c.rel);
    }
    if (!ok || getenv("VERBOSE"))
        printf("    %-4s %-12s %-5s norm %.3f rel %.2e abs %.2e at %zu%s %s\n",
               bf16 ? "bf16" : "fp32", what, name, c.norm, c.rel, c.abs, c.where,
               c.nan ? " NaN-mismatch" : "", ok ? "PASS" : "FAIL");
}

/* ---- a test case ---- */

typedef struct tcase {
    const char *name;
    int nseq, lens[8];
    bool causal;
    int heads, kv_heads, d;
    double mag; /* q, k uniform in +-mag; v, dout in +-1 */
} tcase;

typedef struct data {
    size_t T, H, Hkv, d, qn, kn;
    float *q, *k, *v, *dout;               /* as stored (bf16-rounded in a bf16 run) */
    double *out, *lse, *dq, *dk, *dv;      /* reference */
    double *tout, *tlse, *tdq, *tdk, *tdv; /* tolerances (fp32 arithmetic) */
    float *outf, *lsef;                    /* reference out and lse, rounded as stored */
    int *kv_range, *q_range;
    hd_ref_attention_shape rs;
    float scale;
} data;

static double round_stored(double x, bool bf16)
{
    return bf16 ? (double)from_bf16(to_bf16((float)x)) : (double)(float)x;
}

/* The reference, its tolerances, and the inputs, for case tc (bf16: inputs rounded). */
static void make_data(const tcase *tc, bool bf16, data *D)
{
    size_t T = 0;
    for (int s = 0; s < tc->nseq; s++)
        T += (size_t)tc->lens[s];
    D->T = T;
    D->H = (size_t)tc->heads;
    D->Hkv = (size_t)tc->kv_heads;
    D->d = (size_t)tc->d;
    D->qn = T * D->H * D->d;
    D->kn = T * D->Hkv * D->d;
    D->scale = (float)(1.0 / sqrt((double)tc->d));
    D->q = xmalloc(D->qn * 4);
    D->dout = xmalloc(D->qn * 4);
    D->k = xmalloc(D->kn * 4);
    D->v = xmalloc(D->kn * 4);
    float *arr[4] = {D->q, D->k, D->v, D->dout};
    size_t len[4] = {D->qn, D->kn, D->kn, D->qn};
    double mag[4] = {tc->mag, tc->mag, 1.0, 1.0};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < len[a]; i++) {
            float x = (float)(uniform() * mag[a]);
            arr[a][i] = bf16 ? from_bf16(to_bf16(x)) : x;
        }
    D->rs = (hd_ref_attention_shape){
        T, D->H, D->Hkv, D->d, tc->lens, (size_t)tc->nseq, tc->causal, (double)D->scale};
    D->out = xmalloc(D->qn * 8);
    D->lse = xmalloc(T * D->H * 8);
    D->dq = xmalloc(D->qn * 8);
    D->dk = xmalloc(D->kn * 8);
    D->dv = xmalloc(D->kn * 8);
    hd__ref_attention(&D->rs, D->q, D->k, D->v, D->out, D->lse);
    hd__ref_attention_backward(&D->rs, D->q, D->k, D->v, D->dout, D->dq, D->dk, D->dv);
    D->outf = xmalloc(D->qn * 4);
    D->lsef = xmalloc(T * D->H * 4);
    for (size_t i = 0; i < D->qn; i++)
        D->outf[i] = (float)round_stored(D->out[i], bf16);
    for (size_t i = 0; i < T * D->H; i++)
        D->lsef[i] = (float)D->lse[i];
    D->kv_range = xmalloc(T * 2 * sizeof(int));
    D->q_range = xmalloc(T * 2 * sizeof(int));
    hd__attention_ranges(tc->lens, (size_t)tc->nseq, tc->causal, D->kv_range, D->q_range);

    /* tolerances */
    const size_t d = D->d, H = D->H, g = D->H / D->Hkv, qc = H * d, kc = D->Hkv * d;
    const double sd = sqrt((double)d), e_out = bf16 ? BF16_OUT : U;
    D->tout = calloc(D->qn, 8);
    D->tlse = calloc(T * H, 8);
    D->tdq = calloc(D->qn, 8);
    D->tdk = calloc(D->kn, 8);
    D->tdv = calloc(D->kn, 8);
    for (size_t i = 0; i < T; i++) {
        size_t b = (size_t)D->kv_range[2 * i], e = (size_t)D->kv_range[2 * i + 1];
        double sn = sqrt((double)(e - b));
        for (size_t h = 0; h < H; h++) {
            size_t hk = h / g;
            const float *qi = D->q + i * qc + h * d, *gi = D->dout + i * qc + h * d;
            const double *oi = D->out + i * qc + h * d;
            double lse = D->lse[i * H + h], delta = 0.0, dabs = 0.0, lsum = 0.0;
            for (size_t c = 0; c < d; c++) {
                delta += gi[c] * oi[c];
                dabs += fabs(gi[c] * oi[c]);
            }
            for (size_t j = b; j < e; j++) {
                const float *kj = D->k + j * kc + hk * d, *vj = D->v + j * kc + hk * d;
                double s = 0.0, S = 0.0, dp = 0.0, dv = 0.0;
                for (size_t c = 0; c < d; c++) {
                    s += (double)qi[c] * kj[c];
                    S += fabs((double)qi[c] * kj[c]);
                    dp += (double)gi[c] * vj[c];
                    dv += fabs((double)gi[c] * vj[c]);
                }
                s *= D->scale;
                S *= D->scale;
                double p = exp(s - lse);
                if (!isfinite(p))
                    p = 1.0;
                double E = sd * (S + 1.0) + fabs(lse) + sn;
                lsum += p * E;
                double W = p * (E * fabs(dp - delta) + sd * (dv + (1.0 + e_out / U) * dabs));
                for (size_t c = 0; c < d; c++) {
                    D->tout[i * qc + h * d + c] += p * (E * fabs(vj[c] - oi[c]) + fabs(vj[c]));
                    D->tdv[j * kc + hk * d + c] += p * E * fabs(gi[c]);
                    D->tdq[i * qc + h * d + c] += D->scale * W * fabs(kj[c]);
                    D->tdk[j * kc + hk * d + c] += D->scale * W * fabs(qi[c]);
                }
            }
            D->tlse[i * H + h] = KTOL * U * (lsum + 1.0);
        }
    }
    double *t[4] = {D->tout, D->tdq, D->tdk, D->tdv};
    const double *w[4] = {D->out, D->dq, D->dk, D->dv};
    size_t tn[4] = {D->qn, D->qn, D->kn, D->kn};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < tn[a]; i++) {
            t[a][i] = KTOL * U * t[a][i] + 1e-30;
            if (bf16)
                t[a][i] = t[a][i] * (1.0 + BF16_OUT) + BF16_OUT * fabs(w[a][i]);
        }
}

static void free_data(data *D)
{
    void *p[] = {D->q,   D->k,   D->v,    D->dout, D->out,      D->lse,
                 D->dq,  D->dk,  D->dv,   D->tout, D->tlse,     D->tdq,
                 D->tdk, D->tdv, D->outf, D->lsef, D->kv_range, D->q_range};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

/* ---- finite differences of the reference ---- */

/* L = sum dout . out(q, k, v), in double. */
static double loss(const data *D, const float *q, const float *k, const float *v, double *buf)
{
    hd__ref_attention(&D->rs, q, k, v, buf, NULL);
    double L = 0.0;
    for (size_t i = 0; i < D->qn; i++)
        L += D->dout[i] * buf[i];
    return L;
}

/* Every element of the reference's dq, dk, dv (small cases) or a random direction (larger
 * ones) against central differences of L. */
static void check_fd(const data *D, const char *name, bool every)
{
    double *buf = xmalloc(D->qn * 8);
    float *x[3] = {xmalloc(D->qn * 4), xmalloc(D->kn * 4), xmalloc(D->kn * 4)};
    const float *src[3] = {D->q, D->k, D->v};
    const double *grad[3] = {D->dq, D->dk, D->dv};
    size_t n[3] = {D->qn, D->kn, D->kn};
    for (int a = 0; a < 3; a++)
        memcpy(x[a], src[a], n[a] * 4);
    double worst = 0.0;
    if (every) {
        for (int a = 0; a < 3; a++) {
            double gmax = 1e-30;
            for (size_t i = 0; i < n[a]; i++)
                gmax = fmax(gmax, fabs(grad[a][i]));
            for (size_t i = 0; i < n[a]; i++) {
                float x0 = src[a][i];
                float hp = x0 + 1e-3f * fmaxf(1.0f, fabsf(x0)),
                      hm = x0 - 1e-3f * fmaxf(1.0f, fabsf(x0));
                x[a][i] = hp;
                double lp = loss(D, x[0], x[1], x[2], buf);
                x[a][i] = hm;
                double lm = loss(D, x[0], x[1], x[2], buf);
                x[a][i] = x0;
                double fd = (lp - lm) / ((double)hp - (double)hm);
                worst = fmax(worst, fabs(fd - grad[a][i]) / gmax);
            }
        }
    } else {
        float *dir[3];
        double dot = 0.0, norm = 0.0;
        for (int a = 0; a < 3; a++) {
            dir[a] = xmalloc(n[a] * 4);
            for (size_t i = 0; i < n[a]; i++) {
                dir[a][i] = (float)uniform();
                dot += grad[a][i] * dir[a][i];
                norm += fabs(grad[a][i] * dir[a][i]);
            }
        }
        const double hs[2] = {1e-3, -1e-3};
        double l[2];
        for (int sidx = 0; sidx < 2; sidx++) {
            for (int a = 0; a < 3; a++)
                for (size_t i = 0; i < n[a]; i++)
                    x[a][i] = (float)((double)src[a][i] + hs[sidx] * dir[a][i]);
            l[sidx] = loss(D, x[0], x[1], x[2], buf);
        }
        /* the steps as the floats took them: (x+ - x-) . grad is what L's difference measures */
        double taken = 0.0;
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < n[a]; i++) {
                double xp = (float)((double)src[a][i] + hs[0] * dir[a][i]);
                double xm = (float)((double)src[a][i] + hs[1] * dir[a][i]);
                taken += (xp - xm) * grad[a][i];
            }
        worst = fabs((l[0] - l[1]) - taken) / (2e-3 * norm);
        (void)dot;
        for (int a = 0; a < 3; a++)
            free(dir[a]);
    }
    bool ok = worst < 1e-5;
    if (!ok)
        failures++;
    printf("    ref backward vs finite differences (%s): %.2e %s\n",
           every ? "every element" : "a direction", worst, ok ? "PASS" : "FAIL");
    (void)name;
    for (int a = 0; a < 3; a++)
        free(x[a]);
    free(buf);
}

/* ---- the CPU version ---- */

static hd_cpu_pool *pool3;

static void run_cpu(const data *D, const char *name)
{
    hd_cpu_attention_shape s = {D->T, D->H, D->Hkv, D->d, D->scale};
    float *out1 = xmalloc(D->qn * 4), *lse1 = xmalloc(D->T * D->H * 4);
    float *out3 = xmalloc(D->qn * 4), *lse3 = xmalloc(D->T * D->H * 4);
    float *dq1 = xmalloc(D->qn * 4), *dk1 = xmalloc(D->kn * 4), *dv1 = xmalloc(D->kn * 4);
    float *dq3 = xmalloc(D->qn * 4), *dk3 = xmalloc(D->kn * 4), *dv3 = xmalloc(D->kn * 4);
    double t0 = now();
    if (hd__cpu_attention(NULL, &s, D->q, D->k, D->v, D->kv_range, out1, lse1) != HD_OK)
        exit(2);
    double t1 = now();
    hd__cpu_attention(pool3, &s, D->q, D->k, D->v, D->kv_range, out3, lse3);
    double t2 = now();
    hd__cpu_attention_backward(NULL, &s, D->q, D->k, D->v, D->outf, D->lsef, D->dout, D->kv_range,
                               D->q_range, dq1, dk1, dv1);
    double t3 = now();
    hd__cpu_attention_backward(pool3, &s, D->q, D->k, D->v, D->outf, D->lsef, D->dout, D->kv_range,
                               D->q_range, dq3, dk3, dv3);
    bool same = !memcmp(out1, out3, D->qn * 4) && !memcmp(lse1, lse3, D->T * D->H * 4) &&
                !memcmp(dq1, dq3, D->qn * 4) && !memcmp(dk1, dk3, D->kn * 4) &&
                !memcmp(dv1, dv3, D->kn * 4);
    if (!same) {
        failures++;
        printf("    cpu: results differ between 1 and 3 threads FAIL\n");
    }
    report("cpu out", name, compare(out1, D->out, D->tout, D->qn), false, &worst_cpu);
    report("cpu lse", name, compare(lse1, D->lse, D->tlse, D->T * D->H), false, &worst_cpu);
    report("cpu dq", name, compare(dq1, D->dq, D->tdq, D->qn), false, &worst_cpu);
    report("cpu dk", name, compare(dk1, D->dk, D->tdk, D->kn), false, &worst_cpu);
    report("cpu dv", name, compare(dv1, D->dv, D->tdv, D->kn), false, &worst_cpu);
    if (getenv("VERBOSE"))
        printf("    cpu: forward %.1f ms (1 thread), backward %.1f ms\n", (t1 - t0) * 1e3,
               (t3 - t2) * 1e3);
    free(out1), free(lse1), free(out3), free(lse3), free(dq1), free(dk1), free(dv1);
    free(dq3), free(dk3), free(dv3);
}

/* ---- OpenCL ---- */

typedef struct params {
    int bq, bk, rq, tc, dk, vk;                   /* forward */
    int dq_bq, dq_bk, dq_rq, dq_tc, dq_dk, dq_vk; /* dq */
    int kv_bk, kv_rk, kv_bq, kv_tc, kv_dk, kv_qk; /* dkdv */
    int delta_wg, delta_slot;
} params;

/* The kernel file's defaults (the host's) for head dimension d. */
static params default_params(int d)
{
    bool w = d > 128;
    return (params){
        w ? 32 : 64, 64,          w ? 4 : 8, 16, 16, w ? 8 : 16, w ? 32 : 64, 64,  w ? 4 : 8, 16, 8,
        w ? 8 : 16,  w ? 32 : 64, w ? 2 : 4, 32, 16, 8,          w ? 4 : 8,   256, 16};
}

static void describe(const params *p, char *buf, size_t size)
{
    snprintf(buf, size,
             "-D BQ=%d -D BK=%d -D RQ=%d -D TC=%d -D DK=%d -D VK=%d -D DQ_BQ=%d -D DQ_BK=%d "
             "-D DQ_RQ=%d -D DQ_TC=%d -D DQ_DK=%d -D DQ_VK=%d -D KV_BK=%d -D KV_RK=%d "
             "-D KV_BQ=%d -D KV_TC=%d -D KV_DK=%d -D KV_QK=%d -D DELTA_WG=%d -D DELTA_SLOT=%d",
             p->bq, p->bk, p->rq, p->tc, p->dk, p->vk, p->dq_bq, p->dq_bk, p->dq_rq, p->dq_tc,
             p->dq_dk, p->dq_vk, p->kv_bk, p->kv_rk, p->kv_bq, p->kv_tc, p->kv_dk, p->kv_qk,
             p->delta_wg, p->delta_slot);
}

static cl_context ctx;
static cl_command_queue queue;
static cl_device_id device;
static char *source;

#define CK(x)                                                                                      \
    do {                                                                                           \
        cl_int e_ = (x);                                                                           \
        if (e_ != CL_SUCCESS) {                                                                    \
            fprintf(stderr, "%s:%d: OpenCL error %d: %s\n", __FILE__, __LINE__, e_, #x);           \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct program {
    cl_program prog;
    cl_kernel fwd, delta, dq, dkdv, reduce;
    params p;
    int d;
    bool bf16;
} program;

static program build(int d, bool bf16, params p)
{
    program P = {.p = p, .d = d, .bf16 = bf16};
    char opt[1024], tiles[768];
    describe(&p, tiles, sizeof tiles);
    snprintf(opt, sizeof opt, "-D HEAD_DIM=%d -D ACT_BF16=%d %s", d, bf16, tiles);
    cl_int err;
    const char *src = source;
    P.prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CK(err);
    err = clBuildProgram(P.prog, 1, &device, opt, NULL, NULL);
    if (err != CL_SUCCESS) {
        size_t n;
        clGetProgramBuildInfo(P.prog, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        char *log = xmalloc(n + 1);
        clGetProgramBuildInfo(P.prog, device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        fprintf(stderr, "build failed (%s):\n%s\n", opt, log);
        exit(2);
    }
    P.fwd = clCreateKernel(P.prog, "attention_forward", &err);
    CK(err);
    P.delta = clCreateKernel(P.prog, "attention_bwd_delta", &err);
    CK(err);
    P.dq = clCreateKernel(P.prog, "attention_bwd_dq", &err);
    CK(err);
    P.dkdv = clCreateKernel(P.prog, "attention_bwd_dkdv", &err);
    CK(err);
    P.reduce = clCreateKernel(P.prog, "attention_bwd_dkdv_reduce", &err);
    CK(err);
    return P;
}

static void release(program *P)
{
    clReleaseKernel(P->fwd);
    clReleaseKernel(P->delta);
    clReleaseKernel(P->dq);
    clReleaseKernel(P->dkdv);
    clReleaseKernel(P->reduce);
    clReleaseProgram(P->prog);
}

/* A device buffer of n activations from src (NULL: uninitialised). */
static cl_mem act_buffer(const program *P, const float *src, size_t n)
{
    cl_int err;
    size_t es = P->bf16 ? 2 : 4;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n > 0 ? n * es : 4, NULL, &err);
    CK(err);
    if (src != NULL) {
        void *h = xmalloc(n * es);
        for (size_t i = 0; i < n; i++) {
            if (P->bf16)
                ((uint16_t *)h)[i] = to_bf16(src[i]);
            else
                ((float *)h)[i] = src[i];
        }
        CK(clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, n * es, h, 0, NULL, NULL));
        free(h);
    }
    return m;
}

static void read_act(const program *P, cl_mem m, float *dst, size_t n)
{
    size_t es = P->bf16 ? 2 : 4;
    void *h = xmalloc(n * es);
    CK(clEnqueueReadBuffer(queue, m, CL_TRUE, 0, n * es, h, 0, NULL, NULL));
    for (size_t i = 0; i < n; i++)
        dst[i] = P->bf16 ? from_bf16(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
}

static cl_mem raw_buffer(const void *src, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    CK(err);
    if (src != NULL)
        CK(clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, bytes, src, 0, NULL, NULL));
    return m;
}

#define ARG(k, i, v) CK(clSetKernelArg(k, i, sizeof(v), &(v)))

static void launch(cl_kernel k, size_t g0, size_t g1, size_t l0)
{
    size_t g[2] = {g0, g1}, l[2] = {l0, 1};
    CK(clEnqueueNDRangeKernel(queue, k, 2, NULL, g, l, 0, NULL, NULL));
}

/* Forward: out, lse from the device's q, k, v. */
static void cl_forward(const program *P, const data *D, cl_mem q, cl_mem k, cl_mem v, cl_mem kvr,
                       cl_mem out, cl_mem lse)
{
    const params *p = &P->p;
    int T = (int)D->T, H = (int)D->H, Hkv = (int)D->Hkv;
    float qscale = (float)((double)D->scale * 1.4426950408889634);
    size_t wg = (size_t)(p->bq / p->rq * p->tc), tiles = (D->T + p->bq - 1) / p->bq;
    ARG(P->fwd, 0, q);
    ARG(P->fwd, 1, k);
    ARG(P->fwd, 2, v);
    ARG(P->fwd, 3, kvr);
    ARG(P->fwd, 4, out);
    ARG(P->fwd, 5, lse);
    ARG(P->fwd, 6, T);
    ARG(P->fwd, 7, H);
    ARG(P->fwd, 8, Hkv);
    ARG(P->fwd, 9, qscale);
    launch(P->fwd, wg * D->H, tiles, wg);
}

/* Backward: dq, dk, dv from the device's inputs; splits slices of each kv head's query heads
 * (scratch partials when splits > 1). */
static void cl_backward(const program *P, const data *D, cl_mem q, cl_mem k, cl_mem v, cl_mem out,
                        cl_mem lse, cl_mem dout, cl_mem kvr, cl_mem qr, cl_mem dq, cl_mem dk,
                        cl_mem dv, int splits)
{
    const params *p = &P->p;
    int T = (int)D->T, H = (int)D->H, Hkv = (int)D->Hkv, kvc = (int)(D->Hkv * D->d);
    float qscale = (float)((double)D->scale * 1.4426950408889634), scale = D->scale;
    cl_mem delta = raw_buffer(NULL, D->T * D->H * 4);
    cl_mem dkp = NULL, dvp = NULL;
    if (splits > 1) {
        dkp = raw_buffer(NULL, (size_t)splits * D->kn * 4);
        dvp = raw_buffer(NULL, (size_t)splits * D->kn * 4);
    }
    ARG(P->delta, 0, out);
    ARG(P->delta, 1, dout);
    ARG(P->delta, 2, delta);
    ARG(P->delta, 3, T);
    ARG(P->delta, 4, H);
    size_t pairs = D->T * D->H, per = (size_t)(p->delta_wg / p->delta_slot);
    launch(P->delta, (pairs + per - 1) / per * (size_t)p->delta_wg, 1, (size_t)p->delta_wg);

    ARG(P->dkdv, 0, q);
    ARG(P->dkdv, 1, k);
    ARG(P->dkdv, 2, v);
    ARG(P->dkdv, 3, dout);
    ARG(P->dkdv, 4, lse);
    ARG(P->dkdv, 5, delta);
    ARG(P->dkdv, 6, qr);
    ARG(P->dkdv, 7, dk);
    ARG(P->dkdv, 8, dv);
    ARG(P->dkdv, 9, dkp);
    ARG(P->dkdv, 10, dvp);
    ARG(P->dkdv, 11, T);
    ARG(P->dkdv, 12, H);
    ARG(P->dkdv, 13, Hkv);
    ARG(P->dkdv, 14, splits);
    ARG(P->dkdv, 15, qscale);
    ARG(P->dkdv, 16, scale);
    size_t kwg = (size_t)(p->kv_bk / p->kv_rk * p->kv_tc);
    launch(P->dkdv, kwg * D->Hkv * (size_t)splits, (D->T + p->kv_bk - 1) / p->kv_bk, kwg);
    if (splits > 1) {
        ARG(P->reduce, 0, dkp);
        ARG(P->reduce, 1, dvp);
        ARG(P->reduce, 2, dk);
        ARG(P->reduce, 3, dv);
        ARG(P->reduce, 4, T);
        ARG(P->reduce, 5, kvc);
        ARG(P->reduce, 6, splits);
        size_t n = D->kn, groups = (n + 255) / 256;
        launch(P->reduce, (groups < 1024 ? groups : 1024) * 256, 1, 256);
    }

    ARG(P->dq, 0, q);
    ARG(P->dq, 1, k);
    ARG(P->dq, 2, v);
    ARG(P->dq, 3, dout);
    ARG(P->dq, 4, lse);
    ARG(P->dq, 5, delta);
    ARG(P->dq, 6, kvr);
    ARG(P->dq, 7, dq);
    ARG(P->dq, 8, T);
    ARG(P->dq, 9, H);
    ARG(P->dq, 10, Hkv);
    ARG(P->dq, 11, qscale);
    ARG(P->dq, 12, scale);
    size_t wg = (size_t)(p->dq_bq / p->dq_rq * p->dq_tc);
    launch(P->dq, wg * D->H, (D->T + p->dq_bq - 1) / p->dq_bq, wg);
    CK(clFinish(queue));
    clReleaseMemObject(delta);
    if (dkp != NULL) {
        clReleaseMemObject(dkp);
        clReleaseMemObject(dvp);
    }
}

static void run_cl(const program *P, const data *D, const char *name)
{
    bool bf16 = P->bf16;
    tally *t = bf16 ? &worst_bf16 : &worst_fp32;
    cl_mem q = act_buffer(P, D->q, D->qn), k = act_buffer(P, D->k, D->kn);
    cl_mem v = act_buffer(P, D->v, D->kn), dout = act_buffer(P, D->dout, D->qn);
    cl_mem out = act_buffer(P, NULL, D->qn), lse = raw_buffer(NULL, D->T * D->H * 4);
    cl_mem kvr = raw_buffer(D->kv_range, D->T * 8), qr = raw_buffer(D->q_range, D->T * 8);
    cl_mem dq = act_buffer(P, NULL, D->qn), dk = act_buffer(P, NULL, D->kn);
    cl_mem dv = act_buffer(P, NULL, D->kn);
    float *got = xmalloc(D->qn * 4), *gotk = xmalloc(D->kn * 4), *gotl = xmalloc(D->T * D->H * 4);

    double t0 = now();
    cl_forward(P, D, q, k, v, kvr, out, lse);
    CK(clFinish(queue));
    double t1 = now();
    read_act(P, out, got, D->qn);
    report("out", name, compare(got, D->out, D->tout, D->qn), bf16, t);
    CK(clEnqueueReadBuffer(queue, lse, CL_TRUE, 0, D->T * D->H * 4, gotl, 0, NULL, NULL));
    report("lse", name, compare(gotl, D->lse, D->tlse, D->T * D->H), bf16, t);

    /* the backward on the reference's out and lse, for every split of the query heads */
    cl_mem rout = act_buffer(P, D->outf, D->qn), rlse = raw_buffer(D->lsef, D->T * D->H * 4);
    int g = (int)(D->H / D->Hkv);
    for (int splits = 1; splits <= g; splits++) {
        if (g % splits != 0)
            continue;
        double t2 = now();
        cl_backward(P, D, q, k, v, rout, rlse, dout, kvr, qr, dq, dk, dv, splits);
        double t3 = now();
        char what[32];
        snprintf(what, sizeof what, "dq/%d", splits);
        read_act(P, dq, got, D->qn);
        report(what, name, compare(got, D->dq, D->tdq, D->qn), bf16, t);
        snprintf(what, sizeof what, "dk/%d", splits);
        read_act(P, dk, gotk, D->kn);
        report(what, name, compare(gotk, D->dk, D->tdk, D->kn), bf16, t);
        snprintf(what, sizeof what, "dv/%d", splits);
        read_act(P, dv, gotk, D->kn);
        report(what, name, compare(gotk, D->dv, D->tdv, D->kn), bf16, t);
        if (getenv("VERBOSE"))
            printf("    cl: forward %.1f ms, backward (splits %d) %.1f ms\n", (t1 - t0) * 1e3,
                   splits, (t3 - t2) * 1e3);
    }
    /* chained: the backward on the forward's own out and lse (reported, tolerance x4) */
    cl_backward(P, D, q, k, v, out, lse, dout, kvr, qr, dq, dk, dv, 1);
    read_act(P, dq, got, D->qn);
    check c = compare(got, D->dq, D->tdq, D->qn);
    if (getenv("VERBOSE"))
        printf("    chained dq norm %.3f rel %.2e\n", c.norm, c.rel);
    c.norm /= 4.0;
    report("dq chained", name, c, bf16, NULL);

    cl_mem all[] = {q, k, v, dout, out, lse, kvr, qr, dq, dk, dv, rout, rlse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(got);
    free(gotk);
    free(gotl);
}

/* ---- special inputs ---- */

/* NaN in one q row: that row's out and lse NaN, every other row as without it; and the NaN
 * row's sequence alone in its dq (the kernels' masked weights multiply a NaN in a tile's
 * other rows by 0 only in products over keys, so q's NaN stays in its row). */
static void check_nan(const program *P)
{
    tcase tc = {"nan", 2, {5, 9}, true, 2, 1, P->d, 1.0};
    data D;
    make_data(&tc, P->bf16, &D);
    size_t bad = 7; /* row 7 (of the second sequence), head 1 */
    float *q2 = xmalloc(D.qn * 4);
    memcpy(q2, D.q, D.qn * 4);
    q2[bad * D.H * D.d + 1 * D.d + 3] = NAN;
    cl_mem q = act_buffer(P, q2, D.qn), k = act_buffer(P, D.k, D.kn), v = act_buffer(P, D.v, D.kn);
    cl_mem out = act_buffer(P, NULL, D.qn), lse = raw_buffer(NULL, D.T * D.H * 4);
    cl_mem kvr = raw_buffer(D.kv_range, D.T * 8);
    cl_forward(P, &D, q, k, v, kvr, out, lse);
    float *got = xmalloc(D.qn * 4), *gotl = xmalloc(D.T * D.H * 4);
    read_act(P, out, got, D.qn);
    CK(clEnqueueReadBuffer(queue, lse, CL_TRUE, 0, D.T * D.H * 4, gotl, 0, NULL, NULL));
    bool ok = true;
    for (size_t i = 0; i < D.T; i++)
        for (size_t h = 0; h < D.H; h++) {
            bool nan_row = i == bad && h == 1;
            ok &= isnan(gotl[i * D.H + h]) == nan_row;
            for (size_t c = 0; c < D.d; c++)
                ok &= isnan(got[i * D.H * D.d + h * D.d + c]) == nan_row;
        }
    if (!ok)
        failures++;
    printf("    %s NaN in q: out and lse NaN in its (row, head) alone: %s\n",
           P->bf16 ? "bf16" : "fp32", ok ? "PASS" : "FAIL");
    /* CPU: the same */
    if (!P->bf16) {
        hd_cpu_attention_shape s = {D.T, D.H, D.Hkv, D.d, D.scale};
        hd__cpu_attention(NULL, &s, q2, D.k, D.v, D.kv_range, got, gotl);
        ok = true;
        for (size_t i = 0; i < D.T; i++)
            for (size_t h = 0; h < D.H; h++) {
                bool nan_row = i == bad && h == 1;
                ok &= isnan(gotl[i * D.H + h]) == nan_row;
                for (size_t c = 0; c < D.d; c++)
                    ok &= isnan(got[i * D.H * D.d + h * D.d + c]) == nan_row;
            }
        if (!ok)
            failures++;
        printf("    cpu  NaN in q: out and lse NaN in its (row, head) alone: %s\n",
               ok ? "PASS" : "FAIL");
        /* the CPU visits only a row's own keys: a NaN in v or dout of the first sequence
         * never reaches the second's outputs or gradients */
        float *v2 = xmalloc(D.kn * 4), *g2 = xmalloc(D.qn * 4);
        memcpy(v2, D.v, D.kn * 4);
        memcpy(g2, D.dout, D.qn * 4);
        v2[2 * D.Hkv * D.d + 1] = NAN;
        g2[1 * D.H * D.d + 2] = NAN;
        float *dq = xmalloc(D.qn * 4), *dk = xmalloc(D.kn * 4), *dv = xmalloc(D.kn * 4);
        hd__cpu_attention(NULL, &s, D.q, D.k, v2, D.kv_range, got, gotl);
        hd__cpu_attention_backward(NULL, &s, D.q, D.k, v2, got, gotl, g2, D.kv_range, D.q_range, dq,
                                   dk, dv);
        ok = true;
        for (size_t i = 5; i < D.T; i++) {
            for (size_t c = 0; c < D.H * D.d; c++)
                ok &= isfinite(got[i * D.H * D.d + c]) && isfinite(dq[i * D.H * D.d + c]);
            for (size_t c = 0; c < D.Hkv * D.d; c++)
                ok &= isfinite(dk[i * D.Hkv * D.d + c]) && isfinite(dv[i * D.Hkv * D.d + c]);
        }
        ok &= isnan(got[2 * D.H * D.d + 1]); /* and it does reach its own sequence's rows */
        if (!ok)
            failures++;
        printf("    cpu  NaN in v and dout of one sequence: none in the other's outputs: %s\n",
               ok ? "PASS" : "FAIL");
        free(v2), free(g2), free(dq), free(dk), free(dv);
    }
    cl_mem all[] = {q, k, v, out, lse, kvr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(q2);
    free(got);
    free(gotl);
    free_data(&D);
}

/* ---- main ---- */

static const tcase cases[] = {
    /* name          nseq lens                causal H  Hkv d    mag */
    {"T1", 1, {1}, true, 1, 1, 8, 1.0},
    {"T1full", 1, {1}, false, 4, 2, 64, 1.0},
    {"ones", 4, {1, 1, 1, 1}, true, 2, 1, 8, 1.0},
    {"mixed-c", 4, {1, 7, 64, 13}, true, 4, 1, 64, 1.0},
    {"mixed-f", 4, {1, 7, 64, 13}, false, 4, 1, 64, 1.0},
    {"prime-c", 1, {97}, true, 3, 3, 72, 1.0},
    {"prime-f", 2, {53, 47}, false, 2, 2, 72, 1.0},
    {"d8-gqa", 3, {31, 2, 66}, true, 8, 2, 8, 1.0},
    {"d128-c", 1, {131}, true, 4, 1, 128, 1.0},
    {"d128-f", 2, {70, 61}, false, 4, 4, 128, 1.0},
    {"d128-gqa4", 3, {100, 1, 99}, true, 8, 2, 128, 1.0},
    {"d256-c", 1, {77}, true, 2, 1, 256, 1.0},
    {"d256-f", 2, {40, 33}, false, 2, 2, 256, 1.0},
    {"large-c", 2, {90, 45}, true, 4, 1, 64, 30.0},
    {"large-f", 1, {70}, false, 2, 2, 128, 30.0},
    {"large-d8", 2, {33, 20}, true, 2, 1, 8, 30.0},
    {"long-c", 1, {300}, true, 2, 1, 64, 1.0},
    {"long-f", 3, {150, 1, 149}, false, 2, 2, 64, 1.0},
};

/* dev/attention/harness --cpu-bench T H HKV D [THREADS]: times the CPU version (causal, one
 * sequence; median of 5 runs after one), and prints GFLOP/s counting 4 T^2 H d / 2 for the
 * forward and 2.5 times that for the backward. */
static int cpu_bench(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    size_t T = (size_t)atol(argv[2]), H = (size_t)atol(argv[3]), Hkv = (size_t)atol(argv[4]);
    size_t d = (size_t)atol(argv[5]), threads = argc > 6 ? (size_t)atol(argv[6]) : 2;
    hd_cpu_pool *pool = NULL;
    if (hd__cpu_pool_create(threads, &pool) != HD_OK)
        return 2;
    size_t qn = T * H * d, kn = T * Hkv * d;
    float *q = xmalloc(qn * 4), *k = xmalloc(kn * 4), *v = xmalloc(kn * 4), *g = xmalloc(qn * 4);
    float *o = xmalloc(qn * 4), *l = xmalloc(T * H * 4), *dq = xmalloc(qn * 4);
    float *dk = xmalloc(kn * 4), *dv = xmalloc(kn * 4);
    for (size_t i = 0; i < qn; i++)
        q[i] = (float)uniform(), g[i] = (float)uniform();
    for (size_t i = 0; i < kn; i++)
        k[i] = (float)uniform(), v[i] = (float)uniform();
    int len = (int)T, *kvr = xmalloc(T * 8), *qr = xmalloc(T * 8);
    hd__attention_ranges(&len, 1, true, kvr, qr);
    hd_cpu_attention_shape s = {T, H, Hkv, d, (float)(1.0 / sqrt((double)d))};
    double tf[6], tb[6];
    for (int r = 0; r < 6; r++) {
        double t0 = now();
        hd__cpu_attention(pool, &s, q, k, v, kvr, o, l);
        double t1 = now();
        hd__cpu_attention_backward(pool, &s, q, k, v, o, l, g, kvr, qr, dq, dk, dv);
        double t2 = now();
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
    }
    for (int a = 1; a < 6; a++) /* sort runs 1..5 */
        for (int b = a + 1; b < 6; b++) {
            if (tf[b] < tf[a]) {
                double x = tf[a];
                tf[a] = tf[b];
                tf[b] = x;
            }
            if (tb[b] < tb[a]) {
                double x = tb[a];
                tb[a] = tb[b];
                tb[b] = x;
            }
        }
    double flop = 2.0 * (double)T * (double)T * (double)H * (double)d;
    printf("cpu T=%zu H=%zu Hkv=%zu d=%zu threads=%zu: forward %.2f ms (%.1f GFLOP/s), backward "
           "%.2f ms (%.1f GFLOP/s)\n",
           T, H, Hkv, d, threads, tf[3] * 1e3, flop / tf[3] * 1e-9, tb[3] * 1e3,
           2.5 * flop / tb[3] * 1e-9);
    hd__cpu_pool_destroy(pool);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--cpu-bench") == 0)
        return cpu_bench(argc, argv);
    const char *dir = argc > 1 ? argv[1] : "backends/fused/kernels";
    char path[1024];
    snprintf(path, sizeof path, "%s/elem.cl", dir);
    char *elem = slurp(path);
    snprintf(path, sizeof path, "%s/attention.cl", dir);
    char *att = slurp(path);
    source = xmalloc(strlen(elem) + strlen(att) + 2);
    sprintf(source, "%s\n%s", elem, att);
    const char *only = getenv("CASE");

    cl_platform_id plat;
    CK(clGetPlatformIDs(1, &plat, NULL));
    CK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    char dname[256];
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    printf("device: %s\n", dname);
    cl_int err;
    ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CK(err);
    queue = clCreateCommandQueue(ctx, device, 0, &err);
    CK(err);
    if (hd__cpu_pool_create(3, &pool3) != HD_OK)
        return 2;

    /* the local memory of each kernel with the host's defaults: at most 48 KiB (NVIDIA's
     * OpenCL limit; PoCL allows more, so it is checked here) */
    {
        static const int ds[] = {8, 64, 72, 128, 256};
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
            program P = build(ds[i], false, default_params(ds[i]));
            cl_kernel ks[4] = {P.fwd, P.delta, P.dq, P.dkdv};
            const char *names[4] = {"forward", "delta", "dq", "dkdv"};
            printf("local memory, d=%d:", ds[i]);
            for (int j = 0; j < 4; j++) {
                cl_ulong bytes = 0;
                CK(clGetKernelWorkGroupInfo(ks[j], device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof bytes,
                                            &bytes, NULL));
                printf(" %s %lu", names[j], (unsigned long)bytes);
                if (bytes > 49152) {
                    printf(" (over 48 KiB: FAIL)");
                    failures++;
                }
            }
            printf("\n");
            release(&P);
        }
    }

    /* every case with the host's default parameters, fp32 and bf16 */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const tcase *tc = &cases[ci];
        if (only != NULL && strstr(tc->name, only) == NULL)
            continue;
        for (int bf = 0; bf < 2; bf++) {
            double t0 = now();
            int f0 = failures;
            data D;
            make_data(tc, bf, &D);
            program P = build(tc->d, bf, default_params(tc->d));
            if (!bf) {
                if (tc->mag == 1.0 && D.qn <= 2048)
                    check_fd(&D, tc->name, true);
                else if (tc->mag == 1.0)
                    check_fd(&D, tc->name, false);
                run_cpu(&D, tc->name);
            }
            run_cl(&P, &D, tc->name);
            release(&P);
            printf("%-10s T=%-4zu H=%zu Hkv=%zu d=%-3zu %s %s %s (%.1f s)\n", tc->name, D.T, D.H,
                   D.Hkv, D.d, tc->causal ? "causal" : "full  ", bf ? "bf16" : "fp32",
                   failures == f0 ? "PASS" : "FAIL", now() - t0);
            free_data(&D);
        }
    }

    /* other tilings: odd runs (float2 and scalar loads), small tiles, single work-items along
     * the columns, partial chunks of the head dimension */
    static const struct {
        int d;
        params p;
    } tilings[] = {
        {64, {16, 32, 2, 16, 8, 8, 32, 16, 4, 8, 16, 4, 32, 2, 16, 8, 8, 4, 64, 8}},
        {72, {8, 16, 1, 4, 16, 4, 12, 12, 3, 4, 8, 6, 16, 1, 8, 4, 16, 2, 32, 32}},
        {128, {32, 32, 4, 8, 16, 16, 16, 32, 2, 16, 16, 8, 32, 4, 16, 8, 16, 8, 128, 16}},
        {8, {12, 12, 3, 4, 8, 6, 8, 16, 1, 4, 8, 4, 12, 3, 12, 4, 8, 6, 16, 4}},
        {256, {16, 64, 4, 16, 8, 8, 16, 32, 4, 8, 16, 8, 16, 2, 32, 16, 16, 4, 256, 32}},
    };
    const tcase tcs[] = {
        {"tile", 4, {1, 7, 64, 13}, true, 4, 2, 0, 1.0},
        {"tile-f", 2, {29, 40}, false, 2, 1, 0, 1.0},
    };
    for (size_t ti = 0; ti < sizeof tilings / sizeof tilings[0]; ti++)
        for (size_t ci = 0; ci < 2; ci++) {
            tcase tc = tcs[ci];
            tc.d = tilings[ti].d;
            if (only != NULL && strstr(tc.name, only) == NULL)
                continue;
            for (int bf = 0; bf < 2; bf++) {
                int f0 = failures;
                data D;
                make_data(&tc, bf, &D);
                program P = build(tc.d, bf, tilings[ti].p);
                run_cl(&P, &D, tc.name);
                release(&P);
                char tiles[768];
                describe(&tilings[ti].p, tiles, sizeof tiles);
                printf("%-10s d=%-3d %s %s\n    %s\n", tc.name, tc.d, bf ? "bf16" : "fp32",
                       failures == f0 ? "PASS" : "FAIL", tiles);
                free_data(&D);
            }
        }

    if (only == NULL)
        for (int bf = 0; bf < 2; bf++) {
            program P = build(64, bf, default_params(64));
            check_nan(&P);
            release(&P);
        }

    printf("worst fp32 kernels: norm %.3f rel %.2e; bf16 kernels: norm %.3f rel %.2e; "
           "cpu: norm %.3f rel %.2e\n",
           worst_fp32.norm, worst_fp32.rel, worst_bf16.norm, worst_bf16.rel, worst_cpu.norm,
           worst_cpu.rel);
    printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    hd__cpu_pool_destroy(pool3);
    return failures ? 1 : 0;
}
