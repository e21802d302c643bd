/*
 * Every operation on the CPU backend (a context with OpenCL disabled) against the float64
 * reference: the shared shape lists, all four GEMM transposes, BLAS semantics for alpha, beta
 * and empty shapes, in-place row operations, NaN and infinity propagation, and inputs large
 * enough that the row kernels split rows across threads.
 *
 * Tolerances: GEMM and LoRA use the rounding bound k*FLT_EPSILON*sum|a||b| (factor below).
 * Softmax: |err| <= 1e-9 + 1e-5*|ref| (exp and the normalisation each lose a few ulps; the
 * sum is accumulated in double). Layer norm and RMS norm: |err| <= 1e-5 + 1e-5*|ref| for
 * inputs in [-2, 2] (the mean and 1/sigma are rounded to float once each).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "tests/testlib.h"

#define GEMM_FACTOR  1.0
#define SOFTMAX_ATOL 1e-9
#define SOFTMAX_RTOL 1e-5
#define NORM_ATOL    1e-5
#define NORM_RTOL    1e-5
#define NORM_EPS     1e-5f

/* More elements than HD_CPU_PARALLEL_ELEMENTS (65536) in backends/cpu/rows.c, over many rows,
 * so the thread pool's path runs; odd sizes so the rows do not split evenly across threads. */
#define PARALLEL_ROWS 257
#define PARALLEL_COLS 521

static int setup(void **state)
{
    *state = hd_test_context(true);
    return 0;
}

static int teardown(void **state)
{
    hd_context_destroy(*state);
    return 0;
}

static void expect_ok(hd_context *ctx, hd_status s, const char *what)
{
    hd_test_expect_ran_on(ctx, s, HD_BACKEND_CPU, what);
}

static void fill_nan(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* ---- GEMM ---- */

typedef struct gemm_case {
    bool trans_a, trans_b;
    size_t m, n, k;
    float alpha, beta;
} gemm_case;

/* Runs one GEMM on random data (with optional NaN/Inf planted by poke) and compares. */
static void check_gemm(hd_context *ctx, const gemm_case *gc, uint64_t salt,
                       void (*poke)(float *a, float *b, float *c, const gemm_case *gc))
{
    size_t na = gc->m * gc->k, nb = gc->k * gc->n, nc = gc->m * gc->n;
    hd_rng rng = hd_test_rng(salt);
    float *a = hd_test_random(&rng, na, -1.0f, 1.0f), *b = hd_test_random(&rng, nb, -1.0f, 1.0f);
    float *c = hd_test_random(&rng, nc, -1.0f, 1.0f);
    if (poke != NULL)
        poke(a, b, c, gc);

    hd_tensor *ta =
        hd_test_tensor(ctx, gc->trans_a ? gc->k : gc->m, gc->trans_a ? gc->m : gc->k, a);
    hd_tensor *tb =
        hd_test_tensor(ctx, gc->trans_b ? gc->n : gc->k, gc->trans_b ? gc->k : gc->n, b);
    hd_tensor *tc = hd_test_tensor(ctx, gc->m, gc->n, c);

    char what[160];
    snprintf(what, sizeof what, "gemm %s%s m=%zu n=%zu k=%zu alpha=%g beta=%g",
             gc->trans_a ? "T" : "N", gc->trans_b ? "T" : "N", gc->m, gc->n, gc->k,
             (double)gc->alpha, (double)gc->beta);
    expect_ok(ctx, hd_gemm(ctx, gc->trans_a, gc->trans_b, gc->alpha, ta, tb, gc->beta, tc), what);

    double *want = hd_test_doubles(nc), *bound = hd_test_doubles(nc);
    hd_ref_gemm(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, gc->alpha, a, b, gc->beta, c, want,
                bound);
    float *got = hd_test_read(tc);
    hd_test_expect_gemm_close(what, got, want, bound, nc, gc->k, GEMM_FACTOR);

    free(got);
    free(want);
    free(bound);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(tc);
    free(a);
    free(b);
    free(c);
}

static void test_gemm_matches_reference_on_every_shape_and_transpose(void **state)
{
    hd_context *ctx = *state;
    for (size_t i = 0; i < hd_test_gemm_shape_count; i++) {
        const hd_test_gemm_shape *s = &hd_test_gemm_shapes[i];
        for (int t = 0; t < 4; t++) {
            gemm_case gc = {.trans_a = t & 1,
                            .trans_b = t & 2,
                            .m = s->m,
                            .n = s->n,
                            .k = s->k,
                            .alpha = 1.0f,
                            .beta = 0.0f};
            check_gemm(ctx, &gc, i * 4 + (uint64_t)t, NULL);
        }
    }
}

/* Shapes drawn from the whole class (testlib), fresh each run, in a random transpose, with
 * alpha and beta. */
static void test_gemm_random_shapes_match_reference(void **state)
{
    hd_context *ctx = *state;
    hd_rng rng = hd_test_rng(90);
    for (int i = 0; i < 8; i++) {
        hd_test_gemm_shape s = hd_test_random_gemm_shape(&rng);
        gemm_case gc = {.trans_a = i & 1,
                        .trans_b = i & 2,
                        .m = s.m,
                        .n = s.n,
                        .k = s.k,
                        .alpha = hd_test_uniform(&rng, -2.0f, 2.0f),
                        .beta = i % 3 == 0 ? 0.0f : hd_test_uniform(&rng, -1.0f, 1.0f)};
        check_gemm(ctx, &gc, 91 + (uint64_t)i, NULL);
    }
}

static void test_gemm_matches_reference_for_alpha_and_beta_values(void **state)
{
    hd_context *ctx = *state;
    static const float alphas[] = {1.0f, -1.0f, 0.5f, 2.75f};
    static const float betas[] = {0.0f, 1.0f, -0.5f, 3.0f};
    static const hd_test_gemm_shape shapes[] = {{17, 31, 29}, {1, 13, 7}, {13, 1, 7}};
    uint64_t salt = 1000;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t i = 0; i < sizeof alphas / sizeof alphas[0]; i++)
            for (size_t j = 0; j < sizeof betas / sizeof betas[0]; j++)
                for (int t = 0; t < 4; t++) {
                    gemm_case gc = {.trans_a = t & 1,
                                    .trans_b = t & 2,
                                    .m = shapes[s].m,
                                    .n = shapes[s].n,
                                    .k = shapes[s].k,
                                    .alpha = alphas[i],
                                    .beta = betas[j]};
                    check_gemm(ctx, &gc, salt++, NULL);
                }
}

static void test_gemm_large_matches_reference(void **state)
{
    gemm_case gc = {.m = 203, .n = 257, .k = 311, .alpha = 0.75f, .beta = -1.25f};
    for (int t = 0; t < 4; t++) {
        gc.trans_a = t & 1;
        gc.trans_b = t & 2;
        check_gemm(*state, &gc, 2000 + (uint64_t)t, NULL);
    }
}

/* Runs one GEMM whose result is exactly beta*C (or zeros), whatever A and B hold. */
static void check_gemm_scale_only(hd_context *ctx, size_t m, size_t n, size_t k, float alpha,
                                  float beta, bool nan_inputs, bool nan_c, const char *what)
{
    hd_rng rng = hd_test_rng(3000 + m * 31 + k);
    float *a = hd_test_random(&rng, m * k, -1.0f, 1.0f),
          *b = hd_test_random(&rng, k * n, -1.0f, 1.0f);
    float *c = hd_test_random(&rng, m * n, -1.0f, 1.0f);
    if (nan_inputs) {
        fill_nan(a, m * k);
        if (k * n > 0)
            b[k * n / 2] = INFINITY;
    }
    if (nan_c)
        fill_nan(c, m * n);
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        hd_tensor *xa = hd_test_tensor(ctx, ta ? k : m, ta ? m : k, a);
        hd_tensor *xb = hd_test_tensor(ctx, tb ? n : k, tb ? k : n, b);
        hd_tensor *xc = hd_test_tensor(ctx, m, n, c);
        expect_ok(ctx, hd_gemm(ctx, ta, tb, alpha, xa, xb, beta, xc), what);
        double *want = hd_test_doubles(m * n);
        for (size_t i = 0; i < m * n; i++)
            want[i] = beta == 0.0f ? 0.0 : (double)(beta * c[i]);
        float *got = hd_test_read(xc);
        hd_test_expect_close(what, got, want, m * n, 0.0, 0.0);
        free(got);
        free(want);
        hd_tensor_destroy(xa);
        hd_tensor_destroy(xb);
        hd_tensor_destroy(xc);
    }
    free(a);
    free(b);
    free(c);
}

static void test_gemm_beta_zero_ignores_nan_in_c(void **state)
{
    hd_context *ctx = *state;
    gemm_case gc = {.m = 16, .n = 67, .k = 61, .alpha = 1.5f, .beta = 0.0f};
    for (int t = 0; t < 4; t++) {
        gc.trans_a = t & 1;
        gc.trans_b = t & 2;
        /* The reference ignores C when beta = 0, so NaN in C must not reach the result. */
        check_gemm(ctx, &gc, 4000 + (uint64_t)t, NULL);
    }
    hd_rng rng = hd_test_rng(4100);
    float *a = hd_test_floats(7 * 5), *b = hd_test_floats(5 * 3), *c = hd_test_floats(7 * 3);
    hd_test_fill(&rng, a, 35, -1.0f, 1.0f);
    hd_test_fill(&rng, b, 15, -1.0f, 1.0f);
    fill_nan(c, 21);
    hd_tensor *ta = hd_test_tensor(ctx, 7, 5, a), *tb = hd_test_tensor(ctx, 5, 3, b);
    hd_tensor *tc = hd_test_tensor(ctx, 7, 3, c);
    expect_ok(ctx, hd_gemm(ctx, false, false, 1.0f, ta, tb, 0.0f, tc), "gemm beta=0, NaN in C");
    double want[21], bound[21];
    hd_ref_gemm(false, false, 7, 3, 5, 1.0f, a, b, 0.0f, c, want, bound);
    float *got = hd_test_read(tc);
    hd_test_expect_gemm_close("gemm beta=0, NaN in C", got, want, bound, 21, 5, GEMM_FACTOR);
    free(got);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(tc);
    free(a);
    free(b);
    free(c);
}

static void test_gemm_alpha_zero_ignores_nan_in_a_and_b(void **state)
{
    check_gemm_scale_only(*state, 13, 7, 5, 0.0f, -0.5f, true, false, "gemm alpha=0, NaN in A");
    check_gemm_scale_only(*state, 13, 7, 5, 0.0f, 0.0f, true, true,
                          "gemm alpha=0 beta=0, NaN everywhere");
}

static void test_gemm_k_zero_gives_beta_times_c(void **state)
{
    check_gemm_scale_only(*state, 13, 7, 0, 1.0f, 2.5f, false, false, "gemm k=0 beta=2.5");
    check_gemm_scale_only(*state, 1, 1, 0, 1.0f, 1.0f, false, false, "gemm 1x1 k=0 beta=1");
    check_gemm_scale_only(*state, 5, 3, 0, 1.0f, 0.0f, false, true, "gemm k=0 beta=0, NaN in C");
}

static void test_gemm_empty_m_or_n_is_a_no_op(void **state)
{
    hd_context *ctx = *state;
    static const hd_test_gemm_shape shapes[] = {{0, 5, 3}, {5, 0, 3}, {0, 0, 3}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t m = shapes[i].m, n = shapes[i].n, k = shapes[i].k;
        hd_rng rng = hd_test_rng(5000 + i);
        float *a = hd_test_random(&rng, m * k, -1.0f, 1.0f);
        float *b = hd_test_random(&rng, k * n, -1.0f, 1.0f);
        hd_tensor *ta = hd_test_tensor(ctx, m, k, a), *tb = hd_test_tensor(ctx, k, n, b);
        hd_tensor *tc = hd_test_tensor(ctx, m, n, NULL);
        assert_int_equal(hd_gemm(ctx, false, false, 1.0f, ta, tb, 0.5f, tc), HD_OK);
        assert_int_equal(hd_tensor_rows(tc), m);
        assert_int_equal(hd_tensor_cols(tc), n);
        /* The inputs are untouched. */
        hd_test_expect_unchanged("gemm empty: a", ta, a);
        hd_test_expect_unchanged("gemm empty: b", tb, b);
        hd_tensor_destroy(ta);
        hd_tensor_destroy(tb);
        hd_tensor_destroy(tc);
        free(a);
        free(b);
    }
}

static void poke_nan_inf(float *a, float *b, float *c, const gemm_case *gc)
{
    a[0] = NAN;                      /* one element of A: a row (or column) of C turns NaN */
    b[gc->k * gc->n - 1] = INFINITY; /* one element of B: infinities in one column of C */
    c[gc->m * gc->n / 2] = -INFINITY;
}

static void test_gemm_propagates_nan_and_inf_like_reference(void **state)
{
    for (int t = 0; t < 4; t++) {
        gemm_case gc = {.trans_a = t & 1,
                        .trans_b = t & 2,
                        .m = 17,
                        .n = 31,
                        .k = 29,
                        .alpha = 1.0f,
                        .beta = 1.0f};
        check_gemm(*state, &gc, 6000 + (uint64_t)t, poke_nan_inf);
    }
}

/* Batched GEMM: each tensor stacks its batch matrices by rows; each C_i is checked against
 * the reference of its own A_i, B_i. */
static void check_gemm_batched(hd_context *ctx, size_t batch, const gemm_case *gc, uint64_t salt,
                               bool nan_c)
{
    size_t na = gc->m * gc->k, nb = gc->k * gc->n, nc = gc->m * gc->n;
    hd_rng rng = hd_test_rng(salt);
    float *a = hd_test_random(&rng, batch * na, -1.0f, 1.0f);
    float *b = hd_test_random(&rng, batch * nb, -1.0f, 1.0f);
    float *c = hd_test_random(&rng, batch * nc, -1.0f, 1.0f);
    if (nan_c)
        fill_nan(c, batch * nc);
    size_t ar = gc->trans_a ? gc->k : gc->m, ac = gc->trans_a ? gc->m : gc->k;
    size_t br = gc->trans_b ? gc->n : gc->k, bc = gc->trans_b ? gc->k : gc->n;
    hd_tensor *ta = hd_test_tensor(ctx, batch * ar, ac, a);
    hd_tensor *tb = hd_test_tensor(ctx, batch * br, bc, b);
    hd_tensor *tc = hd_test_tensor(ctx, batch * gc->m, gc->n, c);
    char what[160];
    snprintf(what, sizeof what, "gemm_batched %zu x %s%s m=%zu n=%zu k=%zu alpha=%g beta=%g", batch,
             gc->trans_a ? "T" : "N", gc->trans_b ? "T" : "N", gc->m, gc->n, gc->k,
             (double)gc->alpha, (double)gc->beta);
    expect_ok(
        ctx, hd_gemm_batched(ctx, batch, gc->trans_a, gc->trans_b, gc->alpha, ta, tb, gc->beta, tc),
        what);
    float *got = hd_test_read(tc);
    double *want = hd_test_doubles(nc), *bound = hd_test_doubles(nc);
    for (size_t i = 0; i < batch; i++) {
        hd_ref_gemm(gc->trans_a, gc->trans_b, gc->m, gc->n, gc->k, gc->alpha, a + i * na,
                    b + i * nb, gc->beta, c + i * nc, want, bound);
        hd_test_expect_gemm_close(what, got + i * nc, want, bound, nc, gc->k, GEMM_FACTOR);
    }
    free(got);
    free(want);
    free(bound);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(tc);
    free(a);
    free(b);
    free(c);
}

static void test_gemm_batched_matches_reference(void **state)
{
    static const hd_test_gemm_shape shapes[] = {{1, 13, 7}, {7, 5, 3}, {17, 31, 29}, {1, 1, 1}};
    static const size_t batches[] = {1, 3, 8};
    uint64_t salt = 9000;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t j = 0; j < sizeof batches / sizeof batches[0]; j++)
            for (int t = 0; t < 4; t++) {
                gemm_case gc = {.trans_a = t & 1,
                                .trans_b = t & 2,
                                .m = shapes[s].m,
                                .n = shapes[s].n,
                                .k = shapes[s].k,
                                .alpha = 1.25f,
                                .beta = t == 3 ? 0.0f : -0.5f};
                check_gemm_batched(*state, batches[j], &gc, salt++, false);
            }
}

static void test_gemm_batched_beta_zero_ignores_nan_in_c(void **state)
{
    gemm_case gc = {.m = 5, .n = 7, .k = 3, .alpha = 1.0f, .beta = 0.0f};
    check_gemm_batched(*state, 4, &gc, 9100, true);
}

static void test_gemm_batched_empty_is_a_no_op(void **state)
{
    hd_context *ctx = *state;
    /* batch 0, and m = 0 within a batch of 3 */
    hd_tensor *a = hd_test_tensor(ctx, 6, 3, NULL), *b = hd_test_tensor(ctx, 9, 4, NULL);
    float c_data[6 * 4];
    for (int i = 0; i < 24; i++)
        c_data[i] = (float)i;
    hd_tensor *c = hd_test_tensor(ctx, 6, 4, c_data);
    assert_int_equal(hd_gemm_batched(ctx, 0, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    float *got = hd_test_read(c);
    hd_test_expect_same("gemm_batched batch=0", got, c_data, 24);
    free(got);
    hd_tensor *a0 = hd_test_tensor(ctx, 0, 3, NULL), *c0 = hd_test_tensor(ctx, 0, 4, NULL);
    assert_int_equal(hd_gemm_batched(ctx, 3, false, false, 1.0f, a0, b, 0.0f, c0), HD_OK);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(c);
    hd_tensor_destroy(a0);
    hd_tensor_destroy(c0);
}

/* ---- LoRA ---- */

static void check_lora(hd_context *ctx, size_t tokens, size_t in, size_t out, size_t rank,
                       float scale, uint64_t salt, bool plant_nan)
{
    hd_rng rng = hd_test_rng(salt);
    float *x = hd_test_random(&rng, tokens * in, -1.0f, 1.0f);
    float *w = hd_test_random(&rng, in * out, -1.0f, 1.0f);
    float *a = hd_test_random(&rng, in * rank, -1.0f, 1.0f);
    float *b = hd_test_random(&rng, rank * out, -1.0f, 1.0f);
    float *y = hd_test_floats(tokens * out);
    fill_nan(y, tokens * out); /* y is write-only: its old contents never matter */
    if (plant_nan) {
        x[0] = NAN;
        w[in * out - 1] = INFINITY;
    }

    hd_tensor *tx = hd_test_tensor(ctx, tokens, in, x), *tw = hd_test_tensor(ctx, in, out, w);
    hd_tensor *ta = hd_test_tensor(ctx, in, rank, a), *tb = hd_test_tensor(ctx, rank, out, b);
    hd_tensor *ty = hd_test_tensor(ctx, tokens, out, y);
    char what[160];
    snprintf(what, sizeof what, "lora tokens=%zu in=%zu out=%zu rank=%zu scale=%g", tokens, in, out,
             rank, (double)scale);
    expect_ok(ctx, hd_lora_forward(ctx, tx, tw, ta, tb, scale, ty), what);

    size_t n = tokens * out;
    double *want = hd_test_doubles(n), *bound = hd_test_doubles(n);
    hd_ref_lora(tokens, in, out, rank, x, w, a, b, scale, want, bound);
    float *got = hd_test_read(ty);
    /* Two chained products: the low-rank path rounds h = x*A, then h*B; in + rank terms. */
    hd_test_expect_gemm_close(what, got, want, bound, n, in + rank, GEMM_FACTOR);

    free(got);
    free(want);
    free(bound);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tw);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(ty);
    free(x);
    free(w);
    free(a);
    free(b);
    free(y);
}

static void test_lora_matches_reference_on_every_shape(void **state)
{
    static const float scales[] = {1.0f, 0.5f, -2.0f};
    for (size_t i = 0; i < hd_test_lora_shape_count; i++) {
        const hd_test_lora_shape *s = &hd_test_lora_shapes[i];
        for (size_t j = 0; j < sizeof scales / sizeof scales[0]; j++)
            check_lora(*state, s->tokens, s->in, s->out, s->rank, scales[j], 7000 + i * 8 + j,
                       false);
    }
}

static void test_lora_rank_zero_is_x_times_w(void **state)
{
    check_lora(*state, 7, 13, 11, 0, 2.0f, 7500, false);
    check_lora(*state, 1, 1, 1, 0, 1.0f, 7501, false);
}

static void test_lora_large_matches_reference(void **state)
{
    check_lora(*state, 64, 384, 320, 16, 0.25f, 7600, false);
}

static void test_lora_propagates_nan_and_inf_like_reference(void **state)
{
    check_lora(*state, 5, 13, 11, 3, 1.0f, 7700, true);
}

static void test_lora_in_zero_gives_zeros(void **state)
{
    hd_context *ctx = *state;
    float y[3 * 4];
    fill_nan(y, 12);
    float b[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    hd_tensor *tx = hd_test_tensor(ctx, 3, 0, NULL), *tw = hd_test_tensor(ctx, 0, 4, NULL);
    hd_tensor *ta = hd_test_tensor(ctx, 0, 2, NULL), *tb = hd_test_tensor(ctx, 2, 4, b);
    hd_tensor *ty = hd_test_tensor(ctx, 3, 4, y);
    expect_ok(ctx, hd_lora_forward(ctx, tx, tw, ta, tb, 1.0f, ty), "lora in=0");
    double want[12] = {0};
    float *got = hd_test_read(ty);
    hd_test_expect_close("lora in=0", got, want, 12, 0.0, 0.0);
    free(got);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tw);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(ty);
}

static void test_lora_empty_tokens_or_out_is_a_no_op(void **state)
{
    hd_context *ctx = *state;
    static const hd_test_lora_shape shapes[] = {{0, 5, 4, 2}, {3, 5, 0, 2}, {0, 0, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const hd_test_lora_shape *s = &shapes[i];
        hd_tensor *tx = hd_test_tensor(ctx, s->tokens, s->in, NULL);
        hd_tensor *tw = hd_test_tensor(ctx, s->in, s->out, NULL);
        hd_tensor *ta = hd_test_tensor(ctx, s->in, s->rank, NULL);
        hd_tensor *tb = hd_test_tensor(ctx, s->rank, s->out, NULL);
        hd_tensor *ty = hd_test_tensor(ctx, s->tokens, s->out, NULL);
        assert_int_equal(hd_lora_forward(ctx, tx, tw, ta, tb, 1.0f, ty), HD_OK);
        assert_int_equal(hd_tensor_rows(ty) * hd_tensor_cols(ty), 0);
        hd_tensor_destroy(tx);
        hd_tensor_destroy(tw);
        hd_tensor_destroy(ta);
        hd_tensor_destroy(tb);
        hd_tensor_destroy(ty);
    }
}

/* in = 0 (test_lora_in_zero_gives_zeros has finite B): x*W and x*A are sums of nothing,
 * y = scale * (0 * B): zero, NaN in every column of B that holds NaN or inf, and everywhere for
 * a scale that is not finite (as in PyTorch); in both layouts of B, and rank 0 (y = 0 whatever
 * y held). */
static void test_lora_without_inputs_is_zero_but_for_non_finite_b(void **state)
{
    hd_context *ctx = *state;
    enum { T = 3, OUT = 5, R = 2 };
    float b[R * OUT] = {1, 2, NAN, 4, 5, 6, INFINITY, 8, 9, 10}; /* columns 2 and 1 */
    float bt[OUT * R];                                           /* B stored out x r */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < OUT; j++)
            bt[j * R + i] = b[i * OUT + j];
    static const float scales[] = {1.0f, 0.0f, INFINITY};
    for (int layout = 0; layout < 2; layout++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
            float scale = scales[si];
            hd_tensor *tx = hd_test_tensor(ctx, T, 0, NULL);
            hd_tensor *tw = hd_test_tensor(ctx, layout ? OUT : 0, layout ? 0 : OUT, NULL);
            hd_tensor *ta = hd_test_tensor(ctx, layout ? R : 0, layout ? 0 : R, NULL);
            hd_tensor *tb =
                hd_test_tensor(ctx, layout ? OUT : R, layout ? R : OUT, layout ? bt : b);
            float start[T * OUT];
            fill_nan(start, T * OUT); /* overwritten, never read */
            hd_tensor *ty = hd_test_tensor(ctx, T, OUT, start);
            unsigned lay = layout ? HD_LORA_LAYOUT_PYTORCH : HD_LORA_LAYOUT_DEFAULT;
            assert_int_equal(hd_lora_forward_ex(ctx, tx, tw, ta, tb, scale, lay, ty), HD_OK);
            float *got = hd_test_read(ty);
            for (int t = 0; t < T; t++)
                for (int j = 0; j < OUT; j++) {
                    bool nan = !isfinite(scale) || j == 1 || j == 2;
                    float v = got[t * OUT + j];
                    if (nan ? !isnan(v) : v != 0.0f)
                        fail_msg("layout %d scale %g: y[%d][%d] = %g", layout, (double)scale, t, j,
                                 (double)v);
                }
            free(got);
            hd_tensor_destroy(tx);
            hd_tensor_destroy(tw);
            hd_tensor_destroy(ta);
            hd_tensor_destroy(tb);
            hd_tensor_destroy(ty);
        }
    /* rank 0: y = x*W = 0 */
    hd_tensor *tx = hd_test_tensor(ctx, T, 0, NULL), *tw = hd_test_tensor(ctx, 0, OUT, NULL);
    hd_tensor *ta = hd_test_tensor(ctx, 0, 0, NULL), *tb = hd_test_tensor(ctx, 0, OUT, NULL);
    float start[T * OUT];
    fill_nan(start, T * OUT);
    hd_tensor *ty = hd_test_tensor(ctx, T, OUT, start);
    assert_int_equal(hd_lora_forward(ctx, tx, tw, ta, tb, INFINITY, ty), HD_OK);
    float *got = hd_test_read(ty);
    for (int i = 0; i < T * OUT; i++)
        assert_true(got[i] == 0.0f);
    free(got);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tw);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(ty);
}

/* The scratch of tokens x rank floats (twice that backward) is checked before it is
 * allocated: each tensor's size is checked on creation, but not this product of two tensors'
 * dimensions. The slots are called directly with dimensions no tensor could have, and 1 x 1
 * tensors that a product that wrapped would then read past. */
static void test_lora_scratch_size_overflow_is_an_error(void **state)
{
    hd_context *ctx = *state;
    hd_tensor *t = hd_test_tensor(ctx, 1, 1, NULL);
    static const size_t dims[][2] = {
        {((size_t)1 << (sizeof(size_t) * 8 - 2)) + 1, 4}, /* wraps to 16 bytes */
        {SIZE_MAX / 2, 3},
        {3, SIZE_MAX / sizeof(float) / 2},
        {SIZE_MAX / sizeof(float) / 2 + 1, 1}, /* fits once, not twice as backward needs */
    };
    size_t count = sizeof dims / sizeof dims[0];
    for (size_t i = 0; i < count; i++) {
        size_t tokens = dims[i][0], rank = dims[i][1];
        hd_lora_args f = {.tokens = tokens, .in = 1, .out = 1, .rank = rank};
        f.x = f.w = f.a = f.b = f.y = t;
        if (i + 1 < count && hd__cpu_lora(NULL, ctx, &f) != HD_ERR_SIZE_OVERFLOW)
            fail_msg("lora tokens=%zu rank=%zu: %s", tokens, rank, hd_context_last_error(ctx));
        hd_lora_backward_args b = {.tokens = tokens, .in = 1, .out = 1, .rank = rank};
        b.x = b.w = b.a = b.b = b.dy = b.da = b.db = t;
        if (hd__cpu_lora_backward(NULL, ctx, &b) != HD_ERR_SIZE_OVERFLOW)
            fail_msg("lora_backward tokens=%zu rank=%zu: %s", tokens, rank,
                     hd_context_last_error(ctx));
    }
    hd_tensor_destroy(t);
}

static void test_cpu_scratch_bytes_refuses_what_overflows(void **state)
{
    (void)state;
    size_t bytes = 0, floats_max = SIZE_MAX / sizeof(float);
    assert_true(hd__cpu_scratch_bytes(2, 3, 5, &bytes));
    assert_int_equal(bytes, 2 * 3 * 5 * sizeof(float));
    assert_true(hd__cpu_scratch_bytes(1, floats_max, 1, &bytes));
    assert_false(hd__cpu_scratch_bytes(1, floats_max + 1, 1, &bytes));
    assert_false(hd__cpu_scratch_bytes(1, 1, floats_max + 1, &bytes));
    assert_false(hd__cpu_scratch_bytes(2, floats_max / 2 + 1, 1, &bytes));
    size_t root = (size_t)1 << (sizeof(size_t) * 4); /* root * root wraps to zero */
    assert_false(hd__cpu_scratch_bytes(1, root, root, &bytes));
}

/* ---- row operations ---- */

/* x gets values in [lo, hi]; poke may plant specials; in_place runs with y == x. */
static void check_row_op(hd_context *ctx, hd_test_row_op op, size_t rows, size_t cols, float lo,
                         float hi, float eps, bool in_place, uint64_t salt,
                         void (*poke)(float *x, size_t rows, size_t cols))
{
    hd_rng rng = hd_test_rng(salt);
    size_t n = rows * cols;
    float *x = hd_test_random(&rng, n, lo, hi), *gamma = hd_test_random(&rng, cols, 0.5f, 1.5f);
    float *beta = hd_test_random(&rng, cols, -0.5f, 0.5f);
    if (poke != NULL)
        poke(x, rows, cols);

    hd_tensor *tx = hd_test_tensor(ctx, rows, cols, x);
    hd_tensor *ty = in_place ? tx : hd_test_tensor(ctx, rows, cols, NULL);
    hd_tensor *tg = hd_test_tensor(ctx, 1, cols, gamma), *tb = hd_test_tensor(ctx, 1, cols, beta);
    char what[160];
    snprintf(what, sizeof what, "%s %zu x %zu%s eps=%g", hd_test_row_op_name(op), rows, cols,
             in_place ? " in place" : "", (double)eps);

    double *want = hd_test_doubles(n);
    hd_status s = hd_test_row_call(ctx, op, tx, tg, tb, eps, ty);
    hd_ref_row(op, rows, cols, x, gamma, beta, eps, want);
    bool softmax = op == HD_TEST_SOFTMAX;
    double atol = softmax ? SOFTMAX_ATOL : NORM_ATOL, rtol = softmax ? SOFTMAX_RTOL : NORM_RTOL;
    expect_ok(ctx, s, what);
    float *got = hd_test_read(ty);
    hd_test_expect_close(what, got, want, n, atol, rtol);
    if (!in_place) /* the input is untouched */
        hd_test_expect_unchanged(what, tx, x);

    free(got);
    free(want);
    if (!in_place)
        hd_tensor_destroy(ty);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tg);
    hd_tensor_destroy(tb);
    free(x);
    free(gamma);
    free(beta);
}

static void check_row_op_on_every_shape(hd_context *ctx, hd_test_row_op op, bool in_place)
{
    for (size_t i = 0; i < hd_test_row_shape_count; i++) {
        const hd_test_matrix_shape *s = &hd_test_row_shapes[i];
        check_row_op(ctx, op, s->rows, s->cols, -2.0f, 2.0f, NORM_EPS, in_place,
                     8000 + op * 100 + i * 2 + in_place, NULL);
    }
}

static void test_softmax_matches_reference_on_every_shape(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_SOFTMAX, false);
}

static void test_softmax_in_place_matches_reference(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_SOFTMAX, true);
}

static void test_softmax_large_values_are_stable(void **state)
{
    /* exp(80) overflows float: only a max-subtracted softmax stays finite here. */
    check_row_op(*state, HD_TEST_SOFTMAX, 13, 127, 80.0f, 100.0f, 0.0f, false, 8500, NULL);
    check_row_op(*state, HD_TEST_SOFTMAX, 13, 127, -100.0f, -80.0f, 0.0f, false, 8501, NULL);
}

static void test_softmax_row_of_one_is_one(void **state)
{
    hd_context *ctx = *state;
    float x[3] = {-50.0f, 0.0f, 1e30f};
    hd_tensor *tx = hd_test_tensor(ctx, 3, 1, x), *ty = hd_test_tensor(ctx, 3, 1, NULL);
    expect_ok(ctx, hd_softmax(ctx, tx, ty), "softmax 3 x 1");
    float *got = hd_test_read(ty);
    for (int i = 0; i < 3; i++)
        assert_true(got[i] == 1.0f);
    free(got);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(ty);
}

/* Row 0: a NaN; row 1: +inf; row 2: a -inf among finite values; row 3: all -inf; row 4: a NaN
 * first (where the maximum starts); row 5: a NaN last (past the rows' 8-wide passes when cols is
 * not a multiple of 8); others finite. */
static void poke_row_specials(float *x, size_t rows, size_t cols)
{
    x[0 * cols + cols / 2] = NAN;
    if (rows > 1)
        x[1 * cols + cols - 1] = INFINITY;
    if (rows > 2)
        x[2 * cols] = -INFINITY;
    if (rows > 3)
        for (size_t j = 0; j < cols; j++)
            x[3 * cols + j] = -INFINITY;
    if (rows > 4)
        x[4 * cols] = NAN;
    if (rows > 5)
        x[5 * cols + cols - 1] = NAN;
}

static void test_row_ops_propagate_nan_and_inf_like_reference(void **state)
{
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        check_row_op(*state, op, 7, 13, -1.0f, 1.0f, NORM_EPS, false, 8600 + op, poke_row_specials);
        check_row_op(*state, op, 7, 13, -1.0f, 1.0f, NORM_EPS, true, 8610 + op, poke_row_specials);
        check_row_op(*state, op, 6, 37, -1.0f, 1.0f, NORM_EPS, false, 8620 + op, poke_row_specials);
    }
}

static void test_layer_norm_matches_reference_on_every_shape(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_LAYER_NORM, false);
}

static void test_layer_norm_in_place_matches_reference(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_LAYER_NORM, true);
}

static void test_layer_norm_eps_values_match_reference(void **state)
{
    static const float eps[] = {0.0f, 1e-6f, 1e-2f, 1.0f};
    for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++)
        check_row_op(*state, HD_TEST_LAYER_NORM, 7, 61, -2.0f, 2.0f, eps[i], false, 8700 + i, NULL);
}

static void test_layer_norm_large_offset_keeps_precision(void **state)
{
    /* Mean 1000, spread 1: E[x^2] - E[x]^2 in float would lose every digit here. */
    check_row_op(*state, HD_TEST_LAYER_NORM, 13, 1031, 999.0f, 1001.0f, NORM_EPS, false, 8750,
                 NULL);
}

/* Each row's first value -FLT_MAX, among values near +FLT_MAX: its deviation from the mean is
 * nearly twice FLT_MAX. */
static void poke_row_minus_flt_max(float *x, size_t rows, size_t cols)
{
    for (size_t i = 0; i < rows; i++)
        x[i * cols] = -FLT_MAX;
}

/* Rows near FLT_MAX (deviations of nearly twice it, 1/std about 1e-38) and near the smallest
 * normal floats, both norms, against the float64 reference. */
static void test_norms_extreme_magnitudes_match_reference(void **state)
{
    for (hd_test_row_op op = HD_TEST_LAYER_NORM; op <= HD_TEST_RMS_NORM; op++) {
        check_row_op(*state, op, 5, 67, -3e38f, 3e38f, NORM_EPS, false, 8760 + op, NULL);
        check_row_op(*state, op, 5, 67, 3e38f, 3.4e38f, NORM_EPS, false, 8770 + op,
                     poke_row_minus_flt_max);
        check_row_op(*state, op, 5, 67, -1e-30f, 1e-30f, 0.0f, false, 8780 + op, NULL);
    }
}

static void test_layer_norm_constant_row_gives_beta(void **state)
{
    hd_context *ctx = *state;
    float x[2 * 5] = {3, 3, 3, 3, 3, -7, -7, -7, -7, -7};
    float gamma[5] = {1, 2, 3, 4, 5}, beta[5] = {0.5f, -1, 2, 0, 7};
    hd_tensor *tx = hd_test_tensor(ctx, 2, 5, x), *ty = hd_test_tensor(ctx, 2, 5, NULL);
    hd_tensor *tg = hd_test_tensor(ctx, 1, 5, gamma), *tb = hd_test_tensor(ctx, 1, 5, beta);
    expect_ok(ctx, hd_layer_norm(ctx, tx, tg, tb, 1e-5f, ty), "layer_norm constant rows");
    float *got = hd_test_read(ty);
    for (int i = 0; i < 10; i++)
        assert_true(got[i] == beta[i % 5]);
    free(got);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(ty);
    hd_tensor_destroy(tg);
    hd_tensor_destroy(tb);
}

static void test_rms_norm_matches_reference_on_every_shape(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_RMS_NORM, false);
}

static void test_rms_norm_in_place_matches_reference(void **state)
{
    check_row_op_on_every_shape(*state, HD_TEST_RMS_NORM, true);
}

static void test_rms_norm_eps_values_match_reference(void **state)
{
    static const float eps[] = {0.0f, 1e-6f, 1e-2f, 1.0f};
    for (size_t i = 0; i < sizeof eps / sizeof eps[0]; i++)
        check_row_op(*state, HD_TEST_RMS_NORM, 7, 61, -2.0f, 2.0f, eps[i], false, 8800 + i, NULL);
}

static void test_rms_norm_zero_row_gives_zeros(void **state)
{
    hd_context *ctx = *state;
    float x[7] = {0}, w[7] = {1, 2, 3, 4, 5, 6, 7};
    hd_tensor *tx = hd_test_tensor(ctx, 1, 7, x), *ty = hd_test_tensor(ctx, 1, 7, NULL);
    hd_tensor *tw = hd_test_tensor(ctx, 1, 7, w);
    expect_ok(ctx, hd_rms_norm(ctx, tx, tw, 1e-6f, ty), "rms_norm zero row");
    float *got = hd_test_read(ty);
    for (int i = 0; i < 7; i++)
        assert_true(got[i] == 0.0f);
    free(got);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(ty);
    hd_tensor_destroy(tw);
}

static void test_row_ops_parallel_path_matches_reference(void **state)
{
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        check_row_op(*state, op, PARALLEL_ROWS, PARALLEL_COLS, -2.0f, 2.0f, NORM_EPS, false,
                     8900 + op, NULL);
        check_row_op(*state, op, PARALLEL_ROWS, PARALLEL_COLS, -2.0f, 2.0f, NORM_EPS, true,
                     8910 + op, NULL);
    }
}

static hd_context *cpu_context_with_threads(int threads)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.disable_opencl = true;
    opt.threads = threads;
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_int_equal(hd_context_cpu_threads(ctx), threads);
    return ctx;
}

/* Rows are independent, so how they are split across threads must not change one bit. */
static void test_row_ops_on_three_threads_equal_one_thread(void **state)
{
    (void)state;
    hd_context *one = cpu_context_with_threads(1), *three = cpu_context_with_threads(3);
    hd_rng rng = hd_test_rng(8950);
    size_t n = (size_t)PARALLEL_ROWS * PARALLEL_COLS;
    float *x = hd_test_random(&rng, n, -2.0f, 2.0f);
    float *g = hd_test_random(&rng, PARALLEL_COLS, 0.5f, 1.5f);
    float *b = hd_test_random(&rng, PARALLEL_COLS, -0.5f, 0.5f);
    float *got[2];
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        hd_context *ctxs[2] = {one, three};
        for (int c = 0; c < 2; c++) {
            hd_tensor *tx = hd_test_tensor(ctxs[c], PARALLEL_ROWS, PARALLEL_COLS, x);
            hd_tensor *ty = hd_test_tensor(ctxs[c], PARALLEL_ROWS, PARALLEL_COLS, NULL);
            hd_tensor *tg = hd_test_tensor(ctxs[c], 1, PARALLEL_COLS, g);
            hd_tensor *tb = hd_test_tensor(ctxs[c], 1, PARALLEL_COLS, b);
            expect_ok(ctxs[c], hd_test_row_call(ctxs[c], op, tx, tg, tb, NORM_EPS, ty),
                      hd_test_row_op_name(op));
            got[c] = hd_test_read(ty);
            hd_tensor_destroy(tx);
            hd_tensor_destroy(ty);
            hd_tensor_destroy(tg);
            hd_tensor_destroy(tb);
        }
        hd_test_expect_same(hd_test_row_op_name(op), got[1], got[0], n);
        free(got[0]);
        free(got[1]);
    }
    free(x);
    free(g);
    free(b);
    hd_context_destroy(one);
    hd_context_destroy(three);
}

/* A child forked after the row threads started has none of them: its row ops still run (on
 * the calling thread) and give the same result, and destroying its copy of the context does
 * not wait for threads that are not there. */
static void test_row_ops_run_in_a_child_forked_after_the_threads_started(void **state)
{
    (void)state;
    hd_context *ctx = cpu_context_with_threads(2);
    hd_rng rng = hd_test_rng(8970);
    size_t n = (size_t)PARALLEL_ROWS * PARALLEL_COLS;
    float *x = hd_test_random(&rng, n, -2.0f, 2.0f);
    hd_tensor *tx = hd_test_tensor(ctx, PARALLEL_ROWS, PARALLEL_COLS, x);
    hd_tensor *ty = hd_test_tensor(ctx, PARALLEL_ROWS, PARALLEL_COLS, NULL);
    expect_ok(ctx, hd_softmax(ctx, tx, ty), "softmax before fork"); /* starts the threads */
    float *want = hd_test_read(ty);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        float *got = malloc(n * sizeof *got);
        bool same = got != NULL && hd_softmax(ctx, tx, ty) == HD_OK &&
                    hd_tensor_read(ty, got) == HD_OK && memcmp(got, want, n * sizeof *got) == 0;
        hd_tensor_destroy(tx);
        hd_tensor_destroy(ty);
        hd_context_destroy(ctx);
        _exit(same ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(want);
    free(x);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(ty);
    hd_context_destroy(ctx);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define SPEED_RUNS 15

/* Median milliseconds of one row op on 512×1024. */
static double row_op_median_ms(hd_context *ctx, hd_test_row_op op, hd_tensor *x, hd_tensor *g,
                               hd_tensor *b, hd_tensor *y)
{
    double t[SPEED_RUNS];
    for (int i = 0; i < SPEED_RUNS; i++) {
        double start = now_ms();
        expect_ok(ctx, hd_test_row_call(ctx, op, x, g, b, NORM_EPS, y), "timed row op");
        t[i] = now_ms() - start;
    }
    qsort(t, SPEED_RUNS, sizeof t[0], compare_doubles);
    return t[SPEED_RUNS / 2];
}

/* The CPU backend's row kernels and OpenBLAS share one thread setting, and idle row threads
 * sleep: right after a GEMM, while OpenBLAS's threads still wait for work, a row op must run
 * about as fast as before it. (With OpenMP spinning against OpenBLAS's pool on 2 cores,
 * softmax on 512×1024 took several times longer after a GEMM than before.) The bound leaves
 * room for a machine shared with other work. */
static void test_row_ops_after_a_gemm_run_at_their_own_speed(void **state)
{
    hd_context *ctx = *state;
    enum { ROWS = 512, COLS = 1024 };
    hd_rng rng = hd_test_rng(8960);
    float *data = hd_test_random(&rng, (size_t)ROWS * COLS, -2.0f, 2.0f);
    float *w = hd_test_random(&rng, (size_t)COLS * COLS, -1.0f, 1.0f);
    hd_tensor *x = hd_test_tensor(ctx, ROWS, COLS, data),
              *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    hd_tensor *tw = hd_test_tensor(ctx, COLS, COLS, w), *c = hd_test_tensor(ctx, ROWS, COLS, NULL);
    hd_tensor *g = hd_test_tensor(ctx, 1, COLS, NULL), *b = hd_test_tensor(ctx, 1, COLS, NULL);
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        double before = row_op_median_ms(ctx, op, x, g, b, y);
        expect_ok(ctx, hd_gemm(ctx, false, false, 1.0f, x, tw, 0.0f, c), "GEMM");
        double after = row_op_median_ms(ctx, op, x, g, b, y);
        print_message("%s 512x1024 on %d CPU threads: %.3f ms before a GEMM, %.3f ms after\n",
                      hd_test_row_op_name(op), hd_context_cpu_threads(ctx), before, after);
        if (after > 3.0 * before + 0.5)
            fail_msg("%s: %.3f ms per call after a GEMM against %.3f ms before",
                     hd_test_row_op_name(op), after, before);
    }
    hd_tensor *all[] = {x, y, tw, c, g, b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    free(data);
    free(w);
}

static void test_row_ops_empty_rows_or_cols_are_a_no_op(void **state)
{
    hd_context *ctx = *state;
    static const hd_test_matrix_shape shapes[] = {{0, 7}, {7, 0}, {0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t rows = shapes[i].rows, cols = shapes[i].cols;
        hd_tensor *tx = hd_test_tensor(ctx, rows, cols, NULL);
        hd_tensor *ty = hd_test_tensor(ctx, rows, cols, NULL);
        hd_tensor *tg = hd_test_tensor(ctx, 1, cols, NULL),
                  *tb = hd_test_tensor(ctx, 1, cols, NULL);
        assert_int_equal(hd_softmax(ctx, tx, ty), HD_OK);
        assert_int_equal(hd_softmax(ctx, tx, tx), HD_OK);
        assert_int_equal(hd_layer_norm(ctx, tx, tg, tb, 1e-5f, ty), HD_OK);
        assert_int_equal(hd_rms_norm(ctx, tx, tg, 1e-5f, ty), HD_OK);
        /* The parameters are untouched: still the zeros they were created with. */
        float *g = hd_test_read(tg);
        for (size_t j = 0; j < cols; j++)
            assert_true(g[j] == 0.0f);
        free(g);
        hd_tensor_destroy(tx);
        hd_tensor_destroy(ty);
        hd_tensor_destroy(tg);
        hd_tensor_destroy(tb);
    }
}

int main(void)
{
    hd_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_matches_reference_on_every_shape_and_transpose),
        cmocka_unit_test(test_gemm_random_shapes_match_reference),
        cmocka_unit_test(test_gemm_matches_reference_for_alpha_and_beta_values),
        cmocka_unit_test(test_gemm_large_matches_reference),
        cmocka_unit_test(test_gemm_beta_zero_ignores_nan_in_c),
        cmocka_unit_test(test_gemm_alpha_zero_ignores_nan_in_a_and_b),
        cmocka_unit_test(test_gemm_k_zero_gives_beta_times_c),
        cmocka_unit_test(test_gemm_empty_m_or_n_is_a_no_op),
        cmocka_unit_test(test_gemm_propagates_nan_and_inf_like_reference),
        cmocka_unit_test(test_gemm_batched_matches_reference),
        cmocka_unit_test(test_gemm_batched_beta_zero_ignores_nan_in_c),
        cmocka_unit_test(test_gemm_batched_empty_is_a_no_op),
        cmocka_unit_test(test_lora_matches_reference_on_every_shape),
        cmocka_unit_test(test_lora_rank_zero_is_x_times_w),
        cmocka_unit_test(test_lora_large_matches_reference),
        cmocka_unit_test(test_lora_propagates_nan_and_inf_like_reference),
        cmocka_unit_test(test_lora_in_zero_gives_zeros),
        cmocka_unit_test(test_lora_empty_tokens_or_out_is_a_no_op),
        cmocka_unit_test(test_lora_without_inputs_is_zero_but_for_non_finite_b),
        cmocka_unit_test(test_lora_scratch_size_overflow_is_an_error),
        cmocka_unit_test(test_cpu_scratch_bytes_refuses_what_overflows),
        cmocka_unit_test(test_softmax_matches_reference_on_every_shape),
        cmocka_unit_test(test_softmax_in_place_matches_reference),
        cmocka_unit_test(test_softmax_large_values_are_stable),
        cmocka_unit_test(test_softmax_row_of_one_is_one),
        cmocka_unit_test(test_row_ops_propagate_nan_and_inf_like_reference),
        cmocka_unit_test(test_layer_norm_matches_reference_on_every_shape),
        cmocka_unit_test(test_layer_norm_in_place_matches_reference),
        cmocka_unit_test(test_layer_norm_eps_values_match_reference),
        cmocka_unit_test(test_layer_norm_large_offset_keeps_precision),
        cmocka_unit_test(test_norms_extreme_magnitudes_match_reference),
        cmocka_unit_test(test_layer_norm_constant_row_gives_beta),
        cmocka_unit_test(test_rms_norm_matches_reference_on_every_shape),
        cmocka_unit_test(test_rms_norm_in_place_matches_reference),
        cmocka_unit_test(test_rms_norm_eps_values_match_reference),
        cmocka_unit_test(test_rms_norm_zero_row_gives_zeros),
        cmocka_unit_test(test_row_ops_parallel_path_matches_reference),
        cmocka_unit_test(test_row_ops_empty_rows_or_cols_are_a_no_op),
        cmocka_unit_test(test_row_ops_on_three_threads_equal_one_thread),
        cmocka_unit_test(test_row_ops_after_a_gemm_run_at_their_own_speed),
        cmocka_unit_test(test_row_ops_run_in_a_child_forked_after_the_threads_started),
    };
    return cmocka_run_group_tests_name("cpu_ops", tests, setup, teardown);
}
