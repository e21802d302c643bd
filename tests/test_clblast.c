/*
 * The CLBlast backend on this machine's OpenCL device (PoCL in CI) against the float64
 * reference: GEMM in every transpose combination on the shared shapes and across the
 * direct/indirect threshold, the BLAS rules for alpha = 0 and beta = 0 with NaN around, batched
 * GEMM on CLBlast and the CPU, the LoRA forward and the CLBlast+fused plan, two contexts in two
 * threads, and the parameter sets (enumeration, text form, verification, rejection).
 * CLBlast compiles its kernels on first use (tens of seconds on PoCL): one context serves the
 * whole suite, and the shapes stay small.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "dispatch/tune_table.h"
#include "backends/clblast/clblast.h"
#include "backends/opencl/runtime.h"
#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/tools.h"
#include "tests/testlib.h"

static hd_context *ctx;

static int suite_setup(void **state)
{
    (void)state;
    ctx = hd_test_context_on("opencl"); /* CLBlast is OpenCL host code */
    if (!hd_context_has_backend(ctx, HD_BACKEND_CLBLAST)) {
        fprintf(stderr, "no CLBlast backend: %s\n", hd_context_last_error(ctx));
        return -1;
    }
    static const hd_op ops[] = {HD_OP_GEMM, HD_OP_GEMM_BATCHED, HD_OP_LORA};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (hd_context_set_backend(ctx, ops[i], HD_BACKEND_CLBLAST) != HD_OK)
            return -1;
    return 0;
}

static int suite_teardown(void **state)
{
    (void)state;
    hd_context_destroy(ctx);
    return 0;
}

static hd_clblast_state *clblast_state(hd_context *c)
{
    return c->backend_state[HD_BACKEND_CLBLAST];
}

/* One GEMM through the public API on backend `want`, checked against the reference. */
static void check_gemm(hd_context *c, hd_rng *rng, bool ta, bool tb, size_t m, size_t n, size_t k,
                       float alpha, float beta, hd_backend want)
{
    float *a = hd_test_floats(m * k), *b = hd_test_floats(k * n), *c0 = hd_test_floats(m * n);
    hd_test_fill(rng, a, m * k, -1.0f, 1.0f);
    hd_test_fill(rng, b, k * n, -1.0f, 1.0f);
    hd_test_fill(rng, c0, m * n, -1.0f, 1.0f);
    hd_tensor *ta_ = hd_test_tensor(c, ta ? k : m, ta ? m : k, a);
    hd_tensor *tb_ = hd_test_tensor(c, tb ? n : k, tb ? k : n, b);
    hd_tensor *tc = hd_test_tensor(c, m, n, c0);
    hd_status s = hd_gemm(c, ta, tb, alpha, ta_, tb_, beta, tc);
    char what[96];
    snprintf(what, sizeof what, "gemm %c%c %zux%zux%zu", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
    hd_test_expect_ran_on(c, s, want, what);
    float *got = hd_test_read(tc);
    double *ref = hd_test_doubles(m * n), *bound = hd_test_doubles(m * n);
    hd_ref_gemm(ta, tb, m, n, k, alpha, a, b, beta, c0, ref, bound);
    hd_test_expect_gemm_close(what, got, ref, bound, m * n, k, 4.0);
    free(got), free(ref), free(bound), free(a), free(b), free(c0);
    hd_tensor_destroy(ta_), hd_tensor_destroy(tb_), hd_tensor_destroy(tc);
}

static void test_clblast_gemm_all_transposes_match_reference(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(1);
    for (size_t i = 0; i < hd_test_gemm_shape_count; i++) {
        const hd_test_gemm_shape *sh = &hd_test_gemm_shapes[i];
        for (int t = 0; t < 4; t++)
            check_gemm(ctx, &rng, t & 1, t & 2, sh->m, sh->n, sh->k, 1.25f, -0.5f,
                       HD_BACKEND_CLBLAST);
    }
}

/* Shapes drawn from the whole class (testlib), fresh each run, in every transpose. */
static void test_clblast_gemm_random_shapes_match_reference(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(4);
    for (int i = 0; i < 8; i++) {
        hd_test_gemm_shape s = hd_test_random_gemm_shape(&rng);
        float alpha = hd_test_uniform(&rng, -2.0f, 2.0f);
        float beta = i % 3 == 0 ? 0.0f : hd_test_uniform(&rng, -1.0f, 1.0f);
        check_gemm(ctx, &rng, i & 1, i & 2, s.m, s.n, s.k, alpha, beta, HD_BACKEND_CLBLAST);
    }
}

/* Above XGEMM_MIN_INDIRECT_SIZE: the padded, tiled Xgemm path on sizes no tile divides. */
static void test_clblast_gemm_indirect_path_matches_reference(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(2);
    size_t t = clblast_state(ctx)->base.min_indirect_size;
    check_gemm(ctx, &rng, false, true, t + 3, t + 5, t + 1, 0.5f, 2.0f, HD_BACKEND_CLBLAST);
    check_gemm(ctx, &rng, true, false, t + 1, t + 7, t + 3, -1.0f, 0.0f, HD_BACKEND_CLBLAST);
}

static void test_clblast_gemm_k_one_and_thin_shapes(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(3);
    check_gemm(ctx, &rng, false, false, 41, 37, 1, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
    check_gemm(ctx, &rng, true, true, 1, 53, 1, 2.0f, 1.0f, HD_BACKEND_CLBLAST);
    check_gemm(ctx, &rng, false, true, 97, 1, 3, -1.0f, 0.5f, HD_BACKEND_CLBLAST);
}

static void test_clblast_gemm_alpha_zero_ignores_nan_inputs(void **state)
{
    (void)state;
    size_t m = 9, n = 11, k = 5;
    float *a = hd_test_floats(m * k), *b = hd_test_floats(k * n), *c0 = hd_test_floats(m * n);
    for (size_t i = 0; i < m * k; i++)
        a[i] = NAN;
    for (size_t i = 0; i < k * n; i++)
        b[i] = NAN;
    hd_rng rng = hd_test_rng(4);
    hd_test_fill(&rng, c0, m * n, -1.0f, 1.0f);
    hd_tensor *ta = hd_test_tensor(ctx, m, k, a), *tb = hd_test_tensor(ctx, k, n, b);
    hd_tensor *tc = hd_test_tensor(ctx, m, n, c0);
    assert_int_equal(hd_gemm(ctx, false, false, 0.0f, ta, tb, 3.0f, tc), HD_OK);
    float *got = hd_test_read(tc);
    double *want = hd_test_doubles(m * n);
    for (size_t i = 0; i < m * n; i++)
        want[i] = 3.0 * c0[i];
    hd_test_expect_close("alpha = 0", got, want, m * n, 0.0, 1e-6);
    free(got), free(want), free(a), free(b), free(c0);
    hd_tensor_destroy(ta), hd_tensor_destroy(tb), hd_tensor_destroy(tc);
}

/* A first GEMM leaves NaN in C's device buffer; a beta = 0 GEMM into it must not read them, on
 * the direct and the indirect path. */
static void test_clblast_gemm_beta_zero_ignores_nan_in_c(void **state)
{
    (void)state;
    size_t t = clblast_state(ctx)->base.min_indirect_size;
    const size_t sizes[2] = {13, t + 1};
    hd_rng rng = hd_test_rng(5);
    for (int p = 0; p < 2; p++) {
        size_t m = sizes[p], n = sizes[p] + 2, k = sizes[p];
        float *a = hd_test_floats(m * k), *b = hd_test_floats(k * n),
              *nan_a = hd_test_floats(m * k);
        hd_test_fill(&rng, a, m * k, -1.0f, 1.0f);
        hd_test_fill(&rng, b, k * n, -1.0f, 1.0f);
        for (size_t i = 0; i < m * k; i++)
            nan_a[i] = NAN;
        hd_tensor *ta = hd_test_tensor(ctx, m, k, nan_a), *tb = hd_test_tensor(ctx, k, n, b);
        hd_tensor *tc = hd_test_tensor(ctx, m, n, NULL);
        assert_int_equal(hd_gemm(ctx, false, false, 1.0f, ta, tb, 0.0f, tc), HD_OK);
        float *poisoned = hd_test_read(tc);
        assert_true(isnan(poisoned[0]) && isnan(poisoned[m * n - 1]));
        assert_int_equal(hd_tensor_write(ta, a), HD_OK);
        assert_int_equal(hd_gemm(ctx, false, false, 1.0f, ta, tb, 0.0f, tc), HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CLBLAST);
        float *got = hd_test_read(tc);
        double *ref = hd_test_doubles(m * n), *bound = hd_test_doubles(m * n);
        hd_ref_gemm(false, false, m, n, k, 1.0f, a, b, 0.0f, poisoned, ref, bound);
        hd_test_expect_gemm_close("beta = 0 over NaN", got, ref, bound, m * n, k, 4.0);
        free(got), free(ref), free(bound), free(a), free(b), free(nan_a), free(poisoned);
        hd_tensor_destroy(ta), hd_tensor_destroy(tb), hd_tensor_destroy(tc);
    }
}

static void test_clblast_gemm_empty_shapes_are_no_ops(void **state)
{
    (void)state;
    hd_tensor *a = hd_test_tensor(ctx, 0, 5, NULL), *b = hd_test_tensor(ctx, 5, 3, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 0, 3, NULL);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    hd_tensor *a2 = hd_test_tensor(ctx, 4, 0, NULL), *b2 = hd_test_tensor(ctx, 0, 3, NULL);
    float ones[12];
    for (int i = 0; i < 12; i++)
        ones[i] = 1.0f;
    hd_tensor *c2 = hd_test_tensor(ctx, 4, 3, ones);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a2, b2, 2.0f, c2), HD_OK); /* k = 0 */
    float *got = hd_test_read(c2);
    for (int i = 0; i < 12; i++)
        assert_true(got[i] == 2.0f);
    free(got);
    hd_tensor_destroy(a), hd_tensor_destroy(b), hd_tensor_destroy(c);
    hd_tensor_destroy(a2), hd_tensor_destroy(b2), hd_tensor_destroy(c2);
}

/* A batch through the public API on backend want. */
static void check_batched(hd_context *c, hd_rng *rng, size_t batch, bool ta, bool tb, size_t m,
                          size_t n, size_t k, hd_backend want)
{
    size_t na = m * k, nb = k * n, nc = m * n;
    float *a = hd_test_floats(batch * na), *b = hd_test_floats(batch * nb);
    float *c0 = hd_test_floats(batch * nc);
    hd_test_fill(rng, a, batch * na, -1.0f, 1.0f);
    hd_test_fill(rng, b, batch * nb, -1.0f, 1.0f);
    hd_test_fill(rng, c0, batch * nc, -1.0f, 1.0f);
    hd_tensor *t_a = hd_test_tensor(c, batch * (ta ? k : m), ta ? m : k, a);
    hd_tensor *t_b = hd_test_tensor(c, batch * (tb ? n : k), tb ? k : n, b);
    hd_tensor *t_c = hd_test_tensor(c, batch * m, n, c0);
    hd_status s = hd_gemm_batched(c, batch, ta, tb, 0.75f, t_a, t_b, -1.5f, t_c);
    hd_test_expect_ran_on(c, s, want, "hd_gemm_batched");
    float *got = hd_test_read(t_c);
    double *ref = hd_test_doubles(nc), *bound = hd_test_doubles(nc);
    for (size_t i = 0; i < batch; i++) {
        hd_ref_gemm(ta, tb, m, n, k, 0.75f, a + i * na, b + i * nb, -1.5f, c0 + i * nc, ref, bound);
        char what[96];
        snprintf(what, sizeof what, "batched %zu/%zu %c%c %zux%zux%zu", i, batch, ta ? 'T' : 'N',
                 tb ? 'T' : 'N', m, n, k);
        hd_test_expect_gemm_close(what, got + i * nc, ref, bound, nc, k, 4.0);
    }
    free(got), free(ref), free(bound), free(a), free(b), free(c0);
    hd_tensor_destroy(t_a), hd_tensor_destroy(t_b), hd_tensor_destroy(t_c);
}

static void test_clblast_gemm_batched_matches_reference(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(6);
    for (int t = 0; t < 4; t++)
        check_batched(ctx, &rng, 3, t & 1, t & 2, 17, 13, 11, HD_BACKEND_CLBLAST);
    check_batched(ctx, &rng, 1, false, false, 5, 7, 3, HD_BACKEND_CLBLAST);
    check_batched(ctx, &rng, 5, false, true, 1, 9, 1, HD_BACKEND_CLBLAST);
}

static void test_cpu_gemm_batched_matches_reference(void **state)
{
    (void)state;
    hd_context *cpu = hd_test_context(true);
    hd_rng rng = hd_test_rng(7);
    for (int t = 0; t < 4; t++)
        check_batched(cpu, &rng, 4, t & 1, t & 2, 19, 7, 23, HD_BACKEND_CPU);
    check_batched(cpu, &rng, 2, true, false, 1, 1, 1, HD_BACKEND_CPU);
    hd_context_destroy(cpu);
}

static void test_gemm_batched_rejects_bad_arguments(void **state)
{
    (void)state;
    float c_data[12];
    for (int i = 0; i < 12; i++)
        c_data[i] = (float)i;
    hd_tensor *a = hd_test_tensor(ctx, 6, 4, NULL), *b = hd_test_tensor(ctx, 8, 2, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 6, 2, c_data);
    assert_int_equal(hd_gemm_batched(ctx, 4, false, false, 1.0f, a, b, 0.0f, c),
                     HD_ERR_SHAPE_MISMATCH); /* 4 does not divide 6 */
    assert_non_null(strstr(hd_context_last_error(ctx), "multiple of the batch"));
    assert_int_equal(hd_gemm_batched(ctx, 3, false, false, 1.0f, a, b, 0.0f, c),
                     HD_ERR_SHAPE_MISMATCH);         /* 3 does not divide 8 */
    hd_tensor *b4 = hd_test_tensor(ctx, 6, 2, NULL); /* 3 x (2x2): inner 4 vs 2 */
    assert_int_equal(hd_gemm_batched(ctx, 3, false, false, 1.0f, a, b4, 0.0f, c),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_gemm_batched(ctx, 2, false, false, 1.0f, a, b, 0.0f, a), HD_ERR_ALIASING);
    assert_int_equal(hd_gemm_batched(ctx, 2, false, false, 1.0f, NULL, b, 0.0f, c),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_gemm_batched(NULL, 2, false, false, 1.0f, a, b, 0.0f, c),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_gemm_batched(ctx, 0, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    float *got = hd_test_read(c);
    hd_test_expect_same("outputs untouched", got, c_data, 12);
    free(got);
    hd_tensor_destroy(a), hd_tensor_destroy(b), hd_tensor_destroy(b4), hd_tensor_destroy(c);
}

static void check_lora(hd_backend want, const hd_test_lora_shape *sh, hd_rng *rng)
{
    size_t T = sh->tokens, in = sh->in, out = sh->out, r = sh->rank;
    float *x = hd_test_floats(T * in), *w = hd_test_floats(in * out);
    float *a = hd_test_floats(in * r), *b = hd_test_floats(r * out);
    hd_test_fill(rng, x, T * in, -1.0f, 1.0f);
    hd_test_fill(rng, w, in * out, -1.0f, 1.0f);
    hd_test_fill(rng, a, in * r, -1.0f, 1.0f);
    hd_test_fill(rng, b, r * out, -1.0f, 1.0f);
    hd_tensor *tx = hd_test_tensor(ctx, T, in, x), *tw = hd_test_tensor(ctx, in, out, w);
    hd_tensor *ta = hd_test_tensor(ctx, in, r, a), *tb = hd_test_tensor(ctx, r, out, b);
    hd_tensor *ty = hd_test_tensor(ctx, T, out, NULL);
    hd_status s = hd_lora_forward(ctx, tx, tw, ta, tb, 0.5f, ty);
    hd_test_expect_ran_on(ctx, s, want, "hd_lora_forward");
    float *got = hd_test_read(ty);
    double *ref = hd_test_doubles(T * out), *bound = hd_test_doubles(T * out);
    hd_ref_lora(T, in, out, r, x, w, a, b, 0.5f, ref, bound);
    char what[96];
    snprintf(what, sizeof what, "lora %s %zux%zux%zu r%zu", hd_backend_name(want), T, in, out, r);
    hd_test_expect_gemm_close(what, got, ref, bound, T * out, in + r, 4.0);
    free(got), free(ref), free(bound), free(x), free(w), free(a), free(b);
    hd_tensor_destroy(tx), hd_tensor_destroy(tw), hd_tensor_destroy(ta), hd_tensor_destroy(tb);
    hd_tensor_destroy(ty);
}

static void test_clblast_lora_matches_reference(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(8);
    for (size_t i = 0; i < hd_test_lora_shape_count; i++)
        check_lora(HD_BACKEND_CLBLAST, &hd_test_lora_shapes[i], &rng);
}

static void test_clblast_fused_lora_matches_reference(void **state)
{
    (void)state;
    assert_true(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST_FUSED));
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, HD_BACKEND_CLBLAST_FUSED), HD_OK);
    hd_rng rng = hd_test_rng(9);
    for (size_t i = 0; i < hd_test_lora_shape_count; i++)
        check_lora(HD_BACKEND_CLBLAST_FUSED, &hd_test_lora_shapes[i], &rng);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, HD_BACKEND_CLBLAST), HD_OK);
}

/* Each thread: its own context, first CLBlast calls at the same moment, checked results. */
typedef struct worker {
    pthread_barrier_t *start;
    uint64_t salt;
    int failures;
    char message[256];
} worker;

static void *worker_main(void *arg)
{
    worker *wk = arg;
    hd_context *c = NULL;
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.backends = "gemm=clblast";
    opt.runtime = "opencl";
    hd_status s = hd_context_create(&c, &opt);
    pthread_barrier_wait(wk->start);
    if (s != HD_OK) {
        snprintf(wk->message, sizeof wk->message, "context: %s", hd_status_str(s));
        wk->failures++;
        return NULL;
    }
    hd_rng rng = hd_test_rng(wk->salt);
    for (int round = 0; round < 3 && wk->failures == 0; round++) {
        size_t m = 23 + (size_t)round * 7, n = 19, k = 31;
        float *a = malloc(m * k * 4), *b = malloc(k * n * 4), *out = malloc(m * n * 4);
        double *ref = malloc(m * n * 8), *bound = malloc(m * n * 8);
        hd_test_fill(&rng, a, m * k, -1.0f, 1.0f);
        hd_test_fill(&rng, b, k * n, -1.0f, 1.0f);
        hd_tensor *ta = NULL, *tb = NULL, *tc = NULL;
        hd_tensor_create(c, m, k, &ta), hd_tensor_create(c, k, n, &tb);
        hd_tensor_create(c, m, n, &tc);
        hd_tensor_write(ta, a), hd_tensor_write(tb, b);
        s = hd_gemm(c, false, false, 1.0f, ta, tb, 0.0f, tc);
        if (s == HD_OK)
            s = hd_tensor_read(tc, out);
        if (s != HD_OK || hd_context_last_backend(c) != HD_BACKEND_CLBLAST) {
            snprintf(wk->message, sizeof wk->message, "gemm: %s on %s: %.180s", hd_status_str(s),
                     hd_backend_name(hd_context_last_backend(c)), hd_context_last_error(c));
            wk->failures++;
        } else {
            hd_ref_gemm(false, false, m, n, k, 1.0f, a, b, 0.0f, NULL, ref, bound);
            for (size_t i = 0; i < m * n; i++)
                if (!(fabs(out[i] - ref[i]) <= 1e-5 * (bound[i] + 1.0))) {
                    snprintf(wk->message, sizeof wk->message, "element %zu: %g vs %g", i,
                             (double)out[i], ref[i]);
                    wk->failures++;
                    break;
                }
        }
        hd_tensor_destroy(ta), hd_tensor_destroy(tb), hd_tensor_destroy(tc);
        free(a), free(b), free(out), free(ref), free(bound);
    }
    hd_context_destroy(c);
    return NULL;
}

static void test_clblast_two_threads_at_once(void **state)
{
    (void)state;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    worker wk[2] = {{.start = &start, .salt = 10}, {.start = &start, .salt = 11}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++)
        if (wk[i].failures != 0)
            fail_msg("thread %d: %s", i, wk[i].message);
}

static void test_clblast_params_enumeration_is_legal_and_deterministic(void **state)
{
    (void)state;
    const hd_clblast_device *dev = &clblast_state(ctx)->dev;
    static hd_clblast_params first[60], again[60];
    const size_t max[HD_CLBLAST_KERNEL_COUNT] = {60, 40, 8};
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        size_t n = hd__clblast_params_enumerate(dev, (hd_clblast_kernel)k, first, max[k]);
        assert_int_equal(n, max[k]);
        assert_int_equal(hd__clblast_params_enumerate(dev, (hd_clblast_kernel)k, again, max[k]), n);
        hd_clblast_params shipped;
        hd__clblast_params_shipped(dev, &shipped);
        for (size_t i = 0; i < n; i++) {
            char why[200], text[HD_CLBLAST_VARIANT_MAX];
            if (!hd__clblast_params_legal(&first[i], dev, why, sizeof why))
                fail_msg("set %zu of %s is illegal: %s", i,
                         hd__clblast_kernel_name((hd_clblast_kernel)k), why);
            assert_true(hd__clblast_params_equal(&first[i], &again[i]));
            assert_true(first[i].has[k]);
            for (size_t j = 0; j < i; j++)
                assert_false(hd__clblast_params_equal(&first[i], &first[j]));
            /* The text form round-trips. */
            assert_true(hd__clblast_params_format(&first[i], text, sizeof text) <
                        HD_CLBLAST_VARIANT_MAX);
            hd_clblast_params back;
            assert_int_equal(hd__clblast_params_parse(NULL, text, &back), HD_OK);
            assert_true(hd__clblast_params_equal(&back, &first[i]));
        }
    }
}

/* CLBlast's values for unlisted devices, by type and vendor: every entry parses in full. */
static void test_clblast_params_shipped_by_vendor(void **state)
{
    (void)state;
    static const struct {
        bool gpu;
        const char *vendor;
        size_t min_indirect, mwg, wgd;
    } want[] = {
        {true, "NVIDIA Corporation", 1472, 64, 32},   {false, "GenuineIntel", 576, 64, 32},
        {false, "Intel(R) Corporation", 576, 64, 32}, {false, "AuthenticAMD", 896, 32, 16},
        {true, "Intel(R) Corporation", 896, 32, 16},  {false, "NVIDIA Corporation", 896, 32, 16},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        hd_clblast_device dev = {.is_gpu = want[i].gpu};
        snprintf(dev.vendor, sizeof dev.vendor, "%s", want[i].vendor);
        hd_clblast_params p;
        hd__clblast_params_shipped(&dev, &p);
        for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++)
            assert_true(p.has[k]);
        assert_int_equal(p.min_indirect_size, want[i].min_indirect);
        assert_int_equal(p.xgemm.mwg, want[i].mwg);
        assert_int_equal(p.direct.wgd, want[i].wgd);
    }
}

static void test_clblast_variant_text_errors_are_reported(void **state)
{
    (void)state;
    hd_clblast_params p;
    static const char *const bad[] = {
        "KWG=32",                                              /* the rest of Xgemm missing */
        "NOPE=1",                                              /* unknown */
        "XGEMM_MIN_INDIRECT_SIZE=12x",                         /* not a number */
        "XGEMM_MIN_INDIRECT_SIZE=-1",                          /* negative */
        "XGEMM_MIN_INDIRECT_SIZE",                             /* no value */
        "XGEMM_MIN_INDIRECT_SIZE=1 XGEMM_MIN_INDIRECT_SIZE=2", /* repeated */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hd__error_clear(ctx);
        assert_int_equal(hd__clblast_params_parse(ctx, bad[i], &p), HD_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(hd_context_last_error(ctx), "CLBlast variant"));
    }
    assert_int_equal(hd__clblast_params_parse(ctx, "XGEMM_MIN_INDIRECT_SIZE=64", &p), HD_OK);
    assert_true(p.has[HD_CLBLAST_GEMM_ROUTINE] && !p.has[HD_CLBLAST_XGEMM]);
    assert_int_equal(p.min_indirect_size, 64);
    assert_int_equal(hd__clblast_params_parse(ctx, NULL, &p), HD_OK);
}

/* An illegal set never reaches CLBlast: the call fails, the base stays, GEMM still works. */
static void test_clblast_params_illegal_set_is_rejected(void **state)
{
    (void)state;
    hd_clblast_state *st = clblast_state(ctx);
    hd_clblast_params before = st->base, bad = st->base;
    bad.has[HD_CLBLAST_XGEMM_DIRECT] = bad.has[HD_CLBLAST_GEMM_ROUTINE] = false;
    bad.xgemm.kwi = 3; /* KWG = 32 is no multiple of 3 */
    hd__error_clear(ctx);
    assert_int_equal(hd__clblast_params_apply(st, ctx, &bad), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "KWI"));
    assert_true(hd__clblast_params_equal(&st->base, &before));

    hd_clblast_params huge = before;
    huge.xgemm.sa = huge.xgemm.sb = 1;
    huge.xgemm.kwg = 1u << 20; /* local memory far beyond the device's */
    huge.xgemm.kwi = 2;
    assert_int_equal(hd__clblast_params_apply(st, ctx, &huge), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "local memory"));

    /* A call naming it as its variant is refused the same way, and falls back. */
    char text[HD_CLBLAST_VARIANT_MAX];
    hd__clblast_params_format(&bad, text, sizeof text);
    hd__clblast_lock();
    hd_status s = hd__clblast_prepare(st, ctx, text);
    hd__clblast_unlock();
    assert_int_equal(s, HD_ERR_INVALID_ARGUMENT);
    hd_rng rng = hd_test_rng(12);
    check_gemm(ctx, &rng, false, false, 29, 31, 37, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
}

/* A log callback that runs a CLBlast GEMM on another context (user), once. */
typedef struct gemm_from_log {
    hd_context *other;
    int notes;
    hd_status status;
} gemm_from_log;

static void run_gemm_from_log(void *user, const char *message)
{
    (void)message;
    gemm_from_log *g = user;
    if (g->notes++ > 0)
        return;
    hd_rng rng = hd_test_rng(14);
    check_gemm(g->other, &rng, false, true, 9, 7, 5, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
    g->status = hd_sync(g->other);
}

/* The note that the tuning cache's CLBlast base set is refused here reaches the log callback
 * outside the process-wide CLBlast lock: a callback that calls the library, here a CLBlast GEMM
 * of another context on the same thread, would otherwise wait for that lock forever (the
 * alarm ends the test then). */
static void test_clblast_cache_note_reaches_a_log_that_calls_the_library(void **state)
{
    (void)state;
    char path[256], msg[256];
    assert_int_equal(hd_test_cache_dir_create("clblast", path, sizeof path), 0);
    hd_tune_file f;
    hd__tune_file_init(&f);
    hd__tune_context_key(ctx, &f.key);
    f.params[0] = (hd_tune_param){.backend = HD_BACKEND_CLBLAST, .name = "base", .value = "KWG=7"};
    f.param_count = 1;
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);

    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.backends = "clblast";
    opt.runtime = "opencl";
    gemm_from_log g = {.status = HD_ERR_INTERNAL};
    assert_int_equal(hd_context_create(&g.other, &opt), HD_OK);
    opt.no_tune_cache = false;
    opt.tune_cache = path;
    opt.log = run_gemm_from_log;
    opt.log_user = &g;
    hd_context *noted;
    assert_int_equal(hd_context_create(&noted, &opt), HD_OK);
    alarm(300);
    hd_rng rng = hd_test_rng(13);
    check_gemm(noted, &rng, false, false, 11, 13, 17, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
    alarm(0);
    assert_true(g.notes >= 1);
    assert_int_equal(g.status, HD_OK);
    hd_context_destroy(noted);
    hd_context_destroy(g.other);
    assert_int_equal(hd_test_cache_dir_remove(path), 0);
}

/* The last context using CLBlast leaves nothing of its OpenCL context behind: CLBlast's
 * process-wide program cache held each context it had built for through its programs, so a
 * program that made and destroyed contexts grew with each (the suite's context is destroyed
 * for the test and made again after it). */
static void test_clblast_last_context_releases_its_opencl_context(void **state)
{
    (void)state;
    hd_context_destroy(ctx);
    hd_context *own = hd_test_context_on("opencl");
    hd_rng rng = hd_test_rng(15);
    assert_int_equal(hd_context_set_backend(own, HD_OP_GEMM, HD_BACKEND_CLBLAST), HD_OK);
    check_gemm(own, &rng, true, false, 19, 23, 29, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
    cl_context cl = hd__cl_context(hd__rt_opencl(own->rt));
    assert_int_equal(clRetainContext(cl), CL_SUCCESS);
    hd_context_destroy(own);
    /* PoCL's worker threads drop their references to finished commands (and through them to
     * the queue and the context) a moment after the commands complete: on a loaded machine the
     * count can still be above one right after the destroy. A leak stays; poll for a while. */
    cl_uint refs = 0;
    for (int tries = 0; tries < 500; tries++) {
        assert_int_equal(
            clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL),
            CL_SUCCESS);
        if (refs == 1)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    clReleaseContext(cl);
    assert_int_equal(suite_setup(NULL), 0); /* first: the later tests need the context */
    assert_int_equal(refs, 1);              /* the test's own reference alone */
}

/* A legal set other than the base is verified against the reference and becomes the base. */
static void test_clblast_params_verified_set_is_applied(void **state)
{
    (void)state;
    hd_clblast_state *st = clblast_state(ctx);
    hd_clblast_params sets[8];
    size_t n = hd__clblast_params_enumerate(&st->dev, HD_CLBLAST_XGEMM_DIRECT, sets, 8);
    size_t pick = n;
    for (size_t i = 0; i < n && pick == n; i++) {
        hd_clblast_params merged = st->base;
        hd__clblast_params_merge(&merged, &sets[i]);
        if (!hd__clblast_params_equal(&merged, &st->base))
            pick = i;
    }
    assert_true(pick < n);
    /* A threshold below the shipped one too, so the new Xgemm program runs on small sizes. */
    hd_clblast_params set = sets[pick];
    set.has[HD_CLBLAST_GEMM_ROUTINE] = true;
    set.min_indirect_size = 64;
    hd__error_clear(ctx);
    hd_status s = hd__clblast_params_apply(st, ctx, &set);
    if (s != HD_OK)
        fail_msg("apply: %s", hd_context_last_error(ctx));
    assert_int_equal(st->base.min_indirect_size, 64);
    assert_true(st->base.direct.wgd == set.direct.wgd && st->base.direct.vwmd == set.direct.vwmd);
    hd_rng rng = hd_test_rng(13);
    check_gemm(ctx, &rng, true, false, 67, 71, 73, 1.0f, 0.5f, HD_BACKEND_CLBLAST); /* indirect */
    check_gemm(ctx, &rng, false, true, 17, 19, 23, 1.0f, 0.5f, HD_BACKEND_CLBLAST); /* direct */
}

/* The tuning interface's device parameter set (hd__backend_set_params, as dispatch-autotune
 * applies the base set it records): a set verified on the device becomes the base that calls
 * without a variant run with; a malformed or illegal one is refused with the base kept; a
 * name CLBlast lacks, a backend without sets, a plan or auto are refused with their reasons. */
static void test_clblast_device_parameter_set_through_the_tuning_interface(void **state)
{
    (void)state;
    hd_clblast_state *st = clblast_state(ctx);
    hd_clblast_params before = st->base;
    hd_status s = hd__backend_set_params(ctx, HD_BACKEND_CLBLAST, "base",
                                         "XGEMM_MIN_INDIRECT_SIZE=128");
    if (s != HD_OK)
        fail_msg("set_params: %s", hd_context_last_error(ctx));
    assert_int_equal(st->base.min_indirect_size, 128);
    hd_rng rng = hd_test_rng(15);
    /* past the threshold of 128: indirect; under it: direct */
    check_gemm(ctx, &rng, false, true, 131, 137, 139, 1.0f, 0.5f, HD_BACKEND_CLBLAST);
    check_gemm(ctx, &rng, true, false, 33, 35, 37, 1.0f, 0.0f, HD_BACKEND_CLBLAST);

    hd_clblast_params now = st->base;
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CLBLAST, "base", "NOPE=1"),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "CLBlast variant"));
    hd_clblast_params bad = st->base;
    bad.has[HD_CLBLAST_XGEMM_DIRECT] = bad.has[HD_CLBLAST_GEMM_ROUTINE] = false;
    bad.xgemm.kwi = 3; /* KWG = 32 is no multiple of 3 */
    char text[HD_CLBLAST_VARIANT_MAX];
    hd__clblast_params_format(&bad, text, sizeof text);
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CLBLAST, "base", text),
                     HD_ERR_INVALID_ARGUMENT);
    assert_true(hd__clblast_params_equal(&st->base, &now));

    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CLBLAST, "tiles", "KWG=16"),
                     HD_ERR_UNSUPPORTED);
    assert_non_null(strstr(hd_context_last_error(ctx), "'base'"));
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CPU, "base", "x"), HD_ERR_UNSUPPORTED);
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CLBLAST_FUSED, "base", "x"),
                     HD_ERR_BACKEND_UNAVAILABLE);
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_AUTO, "base", "x"),
                     HD_ERR_BACKEND_UNAVAILABLE);
    assert_int_equal(hd__backend_set_params(ctx, HD_BACKEND_CLBLAST, "base", NULL),
                     HD_ERR_INVALID_ARGUMENT);

    /* back to the base of before for the tests that follow */
    st->base = before;
}

/* Verification runs GEMMs of a few tiles whatever the set's threshold: a legal
 * XGEMM_MIN_INDIRECT_SIZE=4096 made the first call verify with two GEMMs of about 4101^3. */
static void test_clblast_verify_sizes_are_bounded_by_tiles_not_threshold(void **state)
{
    (void)state;
    hd_clblast_state *st = clblast_state(ctx);
    static const size_t thresholds[] = {4096, 1472, 64, 16, 1};
    for (size_t i = 0; i < sizeof thresholds / sizeof thresholds[0]; i++) {
        hd_clblast_params set = st->base, probe;
        set.has[HD_CLBLAST_GEMM_ROUTINE] = true;
        set.min_indirect_size = thresholds[i];
        hd__clblast_verify_params(&set, &probe);
        assert_true(probe.min_indirect_size <= 64);
        assert_true(probe.min_indirect_size <= thresholds[i]);
        size_t dims[4][3];
        size_t n = hd__clblast_verify_problems(&probe, dims);
        assert_true(n == 2 || n == 4);
        size_t tile = set.xgemm.mwg > set.xgemm.nwg ? set.xgemm.mwg : set.xgemm.nwg;
        tile = tile > set.xgemm.kwg ? tile : set.xgemm.kwg;
        size_t cap = (2 * tile > 64 ? 2 * tile : 64) + 5;
        double t3 =
            (double)probe.min_indirect_size * probe.min_indirect_size * probe.min_indirect_size;
        for (size_t p = 0; p < n; p++) {
            double mnk = (double)dims[p][0] * (double)dims[p][1] * (double)dims[p][2];
            for (int d = 0; d < 3; d++)
                assert_true(dims[p][d] >= 1 && dims[p][d] <= cap);
            /* the first two take the indirect path, the others the direct one */
            assert_true(p < 2 ? mnk >= t3 : mnk < t3);
        }
    }
}

/* The same through the device: a base set with the threshold at 4096 is verified in seconds,
 * and a 64^3 GEMM then runs on it. */
static void test_clblast_params_threshold_4096_verifies_in_seconds(void **state)
{
    (void)state;
    hd_clblast_state *st = clblast_state(ctx);
    /* CLBlast's shipped kernels, which an earlier case replaced in the base: the verification
     * compiles them afresh, as a first call would. */
    hd_clblast_params before = st->base, set;
    hd__clblast_params_shipped(&st->dev, &set);
    set.has[HD_CLBLAST_GEMM_ROUTINE] = true;
    set.min_indirect_size = 4096;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hd__error_clear(ctx);
    hd_status s = hd__clblast_params_apply(st, ctx, &set);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    print_message("# verification with XGEMM_MIN_INDIRECT_SIZE=4096: %.2f s\n", seconds);
    if (s != HD_OK)
        fail_msg("apply: %s", hd_context_last_error(ctx));
    assert_true(seconds < 20.0); /* PoCL took twice that running GEMMs of the threshold's size */
    assert_int_equal(st->base.min_indirect_size, 4096);
    hd_rng rng = hd_test_rng(14);
    check_gemm(ctx, &rng, false, false, 64, 64, 64, 1.0f, 0.0f, HD_BACKEND_CLBLAST);
    assert_int_equal(hd__clblast_params_apply(st, ctx, &before), HD_OK);
}

static void test_clblast_status_codes_map_with_name_and_number(void **state)
{
    (void)state;
    static const struct {
        CLBlastStatusCode code;
        hd_status want;
    } cases[] = {
        {CLBlastOpenCLOutOfResources, HD_ERR_DEVICE_OUT_OF_MEMORY},
        {CLBlastTempBufferAllocFailure, HD_ERR_DEVICE_OUT_OF_MEMORY},
        {CLBlastOpenCLOutOfHostMemory, HD_ERR_DEVICE_OUT_OF_MEMORY},
        {CLBlastOpenCLBuildProgramFailure, HD_ERR_BUILD},
        {CLBlastInvalidDimension, HD_ERR_INTERNAL},
        {CLBlastInvalidLocalMemUsage, HD_ERR_UNSUPPORTED},
        {CLBlastNotImplemented, HD_ERR_UNSUPPORTED},
        {CLBlastInvalidMemObject, HD_ERR_DEVICE},
        {(CLBlastStatusCode)-9999, HD_ERR_DEVICE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(hd__clblast_error(ctx, cases[i].code, "test"), cases[i].want);
        char code[16];
        snprintf(code, sizeof code, "(%d)", (int)cases[i].code);
        assert_non_null(strstr(hd_context_last_error(ctx), code));
    }
    hd__clblast_error(ctx, CLBlastInvalidLeadDimA, "test");
    assert_non_null(strstr(hd_context_last_error(ctx), "CLBlastInvalidLeadDimA"));
}

static void test_clblast_warmup_succeeds(void **state)
{
    (void)state;
    assert_int_equal(hd_context_warmup(ctx), HD_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clblast_two_threads_at_once),
        cmocka_unit_test(test_clblast_warmup_succeeds),
        cmocka_unit_test(test_clblast_device_parameter_set_through_the_tuning_interface),
        cmocka_unit_test(test_clblast_gemm_all_transposes_match_reference),
        cmocka_unit_test(test_clblast_gemm_random_shapes_match_reference),
        cmocka_unit_test(test_clblast_gemm_indirect_path_matches_reference),
        cmocka_unit_test(test_clblast_gemm_k_one_and_thin_shapes),
        cmocka_unit_test(test_clblast_gemm_alpha_zero_ignores_nan_inputs),
        cmocka_unit_test(test_clblast_gemm_beta_zero_ignores_nan_in_c),
        cmocka_unit_test(test_clblast_gemm_empty_shapes_are_no_ops),
        cmocka_unit_test(test_clblast_gemm_batched_matches_reference),
        cmocka_unit_test(test_cpu_gemm_batched_matches_reference),
        cmocka_unit_test(test_gemm_batched_rejects_bad_arguments),
        cmocka_unit_test(test_clblast_lora_matches_reference),
        cmocka_unit_test(test_clblast_fused_lora_matches_reference),
        cmocka_unit_test(test_clblast_params_enumeration_is_legal_and_deterministic),
        cmocka_unit_test(test_clblast_params_shipped_by_vendor),
        cmocka_unit_test(test_clblast_variant_text_errors_are_reported),
        cmocka_unit_test(test_clblast_params_illegal_set_is_rejected),
        cmocka_unit_test(test_clblast_params_verified_set_is_applied),
        cmocka_unit_test(test_clblast_cache_note_reaches_a_log_that_calls_the_library),
        cmocka_unit_test(test_clblast_verify_sizes_are_bounded_by_tiles_not_threshold),
        cmocka_unit_test(test_clblast_params_threshold_4096_verifies_in_seconds),
        cmocka_unit_test(test_clblast_status_codes_map_with_name_and_number),
        /* last: it clears CLBlast's programs, which the tests after it would build again */
        cmocka_unit_test(test_clblast_last_context_releases_its_opencl_context),
    };
    return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
