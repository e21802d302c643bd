/*
 * Verification of a CLBlast parameter set: random GEMMs through the indirect path (Xgemm) and
 * the direct path (XgemmDirect), on odd sizes that no tile divides, with both transpose flags
 * exercised, alpha != 1 and beta != 0. The sizes are bounded by what the kernels need to show
 * a wrong tiling, a few tiles of each, not by the set's XGEMM_MIN_INDIRECT_SIZE: the set is
 * verified with its threshold lowered (hd__clblast_verify_params), so that a legal threshold
 * of 4096 does not turn the first call into two GEMMs of 4101^3 (tens of seconds on PoCL:
 * commit 32f6911).
 * The outputs are compared at sampled positions (every corner, then spread pseudo-randomly)
 * with the float64 reference's GEMM element (backends/reference.h): a wrong tiling breaks whole
 * tiles, so a sample finds it without a full float64 GEMM of the indirect size.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/clblast/clblast.h"
#include "backends/reference.h"
#include "core/error.h"

#define SAMPLES 128

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill(float *p, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((double)(next_random(seed) >> 11) * 0x1.0p-52 - 1.0);
}

typedef struct problem {
    bool trans_a, trans_b;
    size_t m, n, k;
    float alpha, beta;
} problem;

static hd_status compare(hd_context *ctx, const problem *pr, const float *a, const float *b,
                         const float *c0, const float *c, uint64_t *seed)
{
    size_t lda = pr->trans_a ? pr->m : pr->k, ldb = pr->trans_b ? pr->k : pr->n;
    for (size_t s = 0; s < SAMPLES; s++) {
        size_t i, j;
        if (s < 4) {
            i = (s & 1) ? pr->m - 1 : 0;
            j = (s & 2) ? pr->n - 1 : 0;
        } else {
            i = (size_t)(next_random(seed) % pr->m);
            j = (size_t)(next_random(seed) % pr->n);
        }
        hd_f64_elem e =
            hd__f64_gemm_elem(pr->trans_a, pr->trans_b, pr->k, pr->alpha, a, lda, b, ldb, i, j);
        double c_ij = (double)pr->beta * c0[i * pr->n + j];
        double want = e.want + c_ij, bound = e.bound + fabs(c_ij);
        double got = c[i * pr->n + j];
        double tol = 4.0 * (double)(pr->k + 2) * FLT_EPSILON * bound + 1e-30;
        if (!(fabs(got - want) <= tol))
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "CLBlast parameter set gives wrong results: %s%s GEMM %zu x %zu x "
                             "%zu, C[%zu][%zu] = %.9g, expected %.9g",
                             pr->trans_a ? "T" : "N", pr->trans_b ? "T" : "N", pr->m, pr->n, pr->k,
                             i, j, got, want);
    }
    return HD_OK;
}

static hd_status run_problem(hd_clblast_state *st, hd_context *ctx, const problem *pr, uint64_t *seed)
{
    size_t na = pr->m * pr->k, nb = pr->k * pr->n, nc = pr->m * pr->n;
    float *host = malloc((na + nb + 3 * nc) * sizeof *host);
    if (host == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "verifying CLBlast parameters");
    float *a = host, *b = a + na, *c0 = b + nb, *c = c0 + nc;
    fill(a, na + nb + nc, seed);

    struct hd_device_buffer *buf[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {na * sizeof *a, nb * sizeof *b, nc * sizeof *c};
    const float *src[3] = {a, b, c0};
    hd_cl_runtime *rt = st->rt;
    hd_status s = HD_OK;
    for (int i = 0; i < 3 && s == HD_OK; i++) {
        s = hd__cl_buffer_acquire(rt, ctx, bytes[i], &buf[i]);
        if (s == HD_OK)
            s = hd__cl_upload(rt, ctx, buf[i], src[i], bytes[i]);
    }
    if (s == HD_OK)
        s = hd__clblast_sgemm(st, ctx, true, pr->trans_a, pr->trans_b, pr->m, pr->n, pr->k,
                              pr->alpha, hd__cl_mem(buf[0]->mem), 0, pr->trans_a ? pr->m : pr->k,
                              hd__cl_mem(buf[1]->mem), 0, pr->trans_b ? pr->k : pr->n, pr->beta,
                              hd__cl_mem(buf[2]->mem), 0, pr->n);
    if (s == HD_OK)
        s = hd__cl_download(rt, ctx, buf[2], c, bytes[2]);
    if (s == HD_OK)
        s = compare(ctx, pr, a, b, c0, c, seed);
    for (int i = 0; i < 3; i++)
        if (buf[i] != NULL)
            hd__cl_buffer_release(rt, buf[i]);
    free(host);
    return s;
}

/* The threshold the kernels are verified under: indirect problems of a few tiles stay above
 * it, direct ones of up to 61 below it. */
#define VERIFY_THRESHOLD 64

void hd__clblast_verify_params(const hd_clblast_params *effective, hd_clblast_params *probe)
{
    *probe = *effective;
    if (!probe->has[HD_CLBLAST_GEMM_ROUTINE] || probe->min_indirect_size > VERIFY_THRESHOLD) {
        probe->has[HD_CLBLAST_GEMM_ROUTINE] = true;
        probe->min_indirect_size = VERIFY_THRESHOLD;
    }
}

/* Two tiles and a remainder: every tile edge and a partial tile, whatever the tile size. */
static size_t few_tiles(size_t tile, size_t at_least, size_t odd)
{
    size_t two = tile > 0 && tile <= 1024 ? 2 * tile : 0;
    return (two > at_least ? two : at_least) + odd;
}

size_t hd__clblast_verify_problems(const hd_clblast_params *probe, size_t dims[4][3])
{
    size_t t = probe->min_indirect_size, count = 0;
    const hd_clblast_xgemm *x = &probe->xgemm;
    /* Indirect: m*n*k >= t^3, each side at least t. */
    size_t lo = t == 0 ? 40 : t;
    size_t m = few_tiles(x->mwg, lo, 5), n = few_tiles(x->nwg, lo, 3), k = few_tiles(x->kwg, lo, 1);
    dims[count][0] = m, dims[count][1] = n, dims[count++][2] = k;
    dims[count][0] = n, dims[count][1] = k, dims[count++][2] = m;
    /* Direct: m*n*k < t^3, when t leaves room for it. */
    if (t >= 2) {
        size_t d = t - 1 < 61 ? t - 1 : 61;
        dims[count][0] = d, dims[count][1] = d > 2 ? d - 2 : 1,
        dims[count++][2] = d > 4 ? d - 4 : 1;
        dims[count][0] = d > 4 ? d - 4 : 1, dims[count][1] = d,
        dims[count++][2] = d > 2 ? d - 2 : 1;
    }
    return count;
}

hd_status hd__clblast_check_results(hd_clblast_state *st, hd_context *ctx,
                                    const hd_clblast_params *probe)
{
    (void)st;
    static const struct {
        bool trans_a, trans_b;
        float alpha, beta;
    } flags[4] = {{false, true, 0.75f, -0.5f},
                  {true, false, -1.25f, 0.25f},
                  {false, true, 1.5f, 0.5f},
                  {true, false, -0.5f, 1.0f}};
    uint64_t seed = 0x9e3779b97f4a7c15u;
    size_t dims[4][3];
    size_t count = hd__clblast_verify_problems(probe, dims);
    for (size_t i = 0; i < count; i++) {
        problem pr = {flags[i].trans_a, flags[i].trans_b, dims[i][0],   dims[i][1],
                      dims[i][2],       flags[i].alpha,   flags[i].beta};
        hd_status s = run_problem(st, ctx, &pr, &seed);
        if (s != HD_OK)
            return s;
    }
    return HD_OK;
}
