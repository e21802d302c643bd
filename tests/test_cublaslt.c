/*
 * The CUDA runtime's vendor GEMM (backends/cuda/blas.h) on a cuBLASLt written in C
 * (fake_libcublaslt.c, column-major as cuBLASLt is, on host memory): row-major products of
 * every transpose, padded leading dimensions, 1-row and 1-column shapes against the float64
 * reference; the compute type each precision asks for; the plans kept per shape, and made
 * ahead by a prepare; and every
 * refusal (a library that is missing or lacks a function, fp32x3, no algorithm), with the
 * output untouched. $HD_TEST_FAKE_CUBLASLT and $HD_TEST_FAKE_CUBLASLT_OLD name the two builds of
 * the fake. The real cuBLASLt runs under test_train_ops on an NVIDIA GPU (the LM head's
 * products).
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/blas.h"
#include "testlib.h"

static const char *fake_path(const char *variable)
{
    const char *p = getenv(variable);
    if (p == NULL || p[0] == '\0')
        fail_msg("$%s is not set", variable);
    return p;
}

static hd_cublaslt *open_fake(hd_context *ctx)
{
    setenv("HD_CUBLASLT_LIBRARY", fake_path("HD_TEST_FAKE_CUBLASLT"), 1);
    hd_cublaslt *lt = NULL;
    assert_int_equal(hd__cublaslt_open(ctx, &lt), HD_OK);
    assert_non_null(lt);
    return lt;
}

/* The fake's counters, from the loaded library. */
static int *fake_counter(const char *name)
{
    void *lib = dlopen(fake_path("HD_TEST_FAKE_CUBLASLT"), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    int *p = dlsym(lib, name);
    assert_non_null(p);
    dlclose(lib);
    return p;
}

/* A row-major rows x cols matrix stored with leading dimension ld >= cols, its padding NaN (a
 * read of it shows in the result), and its contiguous copy. */
typedef struct padded {
    float *stored, *dense;
    size_t rows, cols, ld;
} padded;

static padded padded_random(hd_rng *rng, size_t rows, size_t cols, size_t pad)
{
    padded p = {.rows = rows, .cols = cols, .ld = cols + pad};
    p.stored = hd_test_floats(rows * p.ld);
    p.dense = hd_test_random(rng, rows * cols, -1.0f, 1.0f);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < p.ld; j++)
            p.stored[i * p.ld + j] = j < cols ? p.dense[i * cols + j] : NAN;
    return p;
}

static void padded_free(padded *p)
{
    free(p->stored);
    free(p->dense);
}

typedef struct product_case {
    size_t m, n, k;
    bool trans_a, trans_b;
    size_t pad;
    float alpha, beta;
} product_case;

/* c = alpha op(a) op(b) + beta c through the vendor GEMM; checked against the reference. */
static void expect_product(hd_cublaslt *lt, hd_context *ctx, hd_rng *rng, product_case t,
                           hd_precision precision)
{
    padded a =
        t.trans_a ? padded_random(rng, t.k, t.m, t.pad) : padded_random(rng, t.m, t.k, t.pad);
    padded b =
        t.trans_b ? padded_random(rng, t.n, t.k, t.pad) : padded_random(rng, t.k, t.n, t.pad);
    padded c = padded_random(rng, t.m, t.n, t.pad);
    if (t.beta == 0.0f) /* ignored, NaN included */
        for (size_t i = 0; i < t.m; i++)
            c.stored[i * c.ld] = NAN;
    double *want = hd_test_doubles(t.m * t.n), *bound = hd_test_doubles(t.m * t.n);
    float *a_ref = a.dense, *b_ref = b.dense;
    float *a_tf32 = NULL, *b_tf32 = NULL;
    if (precision == HD_PRECISION_TF32) { /* the reference of the operands tf32 reads */
        a_tf32 = hd_test_floats(a.rows * a.cols);
        b_tf32 = hd_test_floats(b.rows * b.cols);
        for (size_t i = 0; i < a.rows * a.cols; i++)
            a_tf32[i] = hd_test_tf32(a.dense[i]);
        for (size_t i = 0; i < b.rows * b.cols; i++)
            b_tf32[i] = hd_test_tf32(b.dense[i]);
        a_ref = a_tf32;
        b_ref = b_tf32;
    }
    hd_ref_gemm(t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, a_ref, b_ref, t.beta, c.dense, want,
                bound);
    const hd_rt_gemm g = {.m = t.m,
                          .n = t.n,
                          .k = t.k,
                          .a = (hd_devmem)a.stored,
                          .b = (hd_devmem)b.stored,
                          .c = (hd_devmem)c.stored,
                          .lda = a.ld,
                          .ldb = b.ld,
                          .ldc = c.ld,
                          .trans_a = t.trans_a,
                          .trans_b = t.trans_b,
                          .alpha = t.alpha,
                          .beta = t.beta,
                          .precision = precision};
    char workspace[4096];
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, (hd_devmem)workspace, sizeof workspace),
                     HD_OK);
    float *got = hd_test_floats(t.m * t.n);
    for (size_t i = 0; i < t.m; i++) {
        memcpy(got + i * t.n, c.stored + i * c.ld, t.n * sizeof(float));
        for (size_t j = t.n; j < c.ld; j++) /* the padding unwritten */
            assert_true(isnan(c.stored[i * c.ld + j]));
    }
    char what[160];
    snprintf(what, sizeof what, "%s %zux%zux%zu %c%c pad %zu alpha %g beta %g",
             hd_precision_name(precision), t.m, t.n, t.k, t.trans_a ? 't' : 'n',
             t.trans_b ? 't' : 'n', t.pad, (double)t.alpha, (double)t.beta);
    hd_test_expect_gemm_close(what, got, want, bound, t.m * t.n, t.k, 2.0);
    free(got);
    free(want);
    free(bound);
    free(a_tf32);
    free(b_tf32);
    padded_free(&a);
    padded_free(&b);
    padded_free(&c);
}

static void test_row_major_products_of_every_transpose(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    hd_cublaslt *lt = open_fake(ctx);
    hd_rng rng = hd_test_rng(1);
    const product_case shapes[] = {
        {7, 5, 3, false, false, 0, 1.0f, 0.0f},  {13, 11, 17, false, false, 3, 1.0f, 0.0f},
        {1, 9, 4, false, false, 1, 0.5f, 1.0f},  {9, 1, 4, false, false, 2, 1.0f, -0.5f},
        {5, 7, 1, false, false, 0, -2.0f, 0.0f}, {31, 29, 37, false, false, 5, 1.0f, 0.25f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                product_case t = shapes[i];
                t.trans_a = ta;
                t.trans_b = tb;
                expect_product(lt, ctx, &rng, t, HD_PRECISION_FP32);
            }
    hd__cublaslt_close(lt);
    hd_context_destroy(ctx);
}

/* fp32 asks for fp32 FMAs, tf32 for the fast TF32 compute type (the fake then rounds the
 * operands as the tensor cores do, and the reference of rounded operands agrees). */
static void test_each_precision_asks_for_its_compute_type(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    hd_cublaslt *lt = open_fake(ctx);
    hd_rng rng = hd_test_rng(2);
    int *compute = fake_counter("fake_cublaslt_last_compute");
    product_case t = {19, 23, 29, false, true, 1, 1.0f, 0.0f};
    expect_product(lt, ctx, &rng, t, HD_PRECISION_FP32);
    assert_int_equal(*compute, 68); /* CUBLAS_COMPUTE_32F */
    expect_product(lt, ctx, &rng, t, HD_PRECISION_TF32);
    assert_int_equal(*compute, 77); /* CUBLAS_COMPUTE_32F_FAST_TF32 */
    hd__cublaslt_close(lt);
    hd_context_destroy(ctx);
}

/* A call of a shape seen before asks the heuristic nothing; the plans kept are the last 16
 * shapes, and an address of another alignment is another plan. */
static void test_keeps_a_plan_per_shape(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    hd_cublaslt *lt = open_fake(ctx);
    int *heuristics = fake_counter("fake_cublaslt_heuristics");
    static _Alignas(256) float a[256], b[256], c[256];
    hd_rt_gemm g = {.m = 4,
                    .n = 4,
                    .k = 4,
                    .a = (hd_devmem)a,
                    .b = (hd_devmem)b,
                    .c = (hd_devmem)c,
                    .lda = 4,
                    .ldb = 4,
                    .ldc = 4,
                    .alpha = 1.0f,
                    .precision = HD_PRECISION_FP32};
    int before = *heuristics;
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_OK);
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_OK);
    assert_int_equal(*heuristics, before + 1);
    for (size_t k = 5; k < 5 + 16; k++) { /* 16 other shapes push it out */
        hd_rt_gemm other = g;
        other.k = other.lda = k;
        assert_int_equal(hd__cublaslt_gemm(lt, ctx, &other, NULL, NULL, 0), HD_OK);
    }
    assert_int_equal(*heuristics, before + 17);
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_OK);
    assert_int_equal(*heuristics, before + 18);
    hd_rt_gemm shifted = g; /* a 4-byte aligned where it was 256-byte aligned */
    shifted.a = (hd_devmem)(a + 1);
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &shifted, NULL, NULL, 0), HD_OK);
    assert_int_equal(*heuristics, before + 19);
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_OK);
    assert_int_equal(*heuristics, before + 19);
    /* a prepared shape's call asks nothing more; the workspace is part of the plan */
    hd_rt_gemm prepared = g;
    prepared.n = prepared.ldb = prepared.ldc = 3;
    assert_int_equal(hd__cublaslt_prepare(lt, ctx, &prepared, 0), HD_OK);
    assert_int_equal(*heuristics, before + 20);
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &prepared, NULL, NULL, 0), HD_OK);
    assert_int_equal(*heuristics, before + 20);
    char workspace[64];
    assert_int_equal(
        hd__cublaslt_gemm(lt, ctx, &prepared, NULL, (hd_devmem)workspace, sizeof workspace), HD_OK);
    assert_int_equal(*heuristics, before + 21);
    hd__cublaslt_close(lt);
    hd_context_destroy(ctx);
}

static void expect_message(hd_context *ctx, const char *part)
{
    const char *m = hd_context_last_error(ctx);
    if (strstr(m, part) == NULL)
        fail_msg("the message \"%s\" lacks \"%s\"", m, part);
}

/* Each refusal: its status, a message naming it, and the output as it was. */
static void test_refusals_leave_the_output(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    hd_cublaslt *lt = NULL;
    setenv("HD_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13", 1);
    assert_int_equal(hd__cublaslt_open(ctx, &lt), HD_ERR_BACKEND_UNAVAILABLE);
    assert_null(lt);
    expect_message(ctx, "/nonexistent/libcublasLt.so.13 could not be loaded");
    setenv("HD_CUBLASLT_LIBRARY", fake_path("HD_TEST_FAKE_CUBLASLT_OLD"), 1);
    assert_int_equal(hd__cublaslt_open(ctx, &lt), HD_ERR_BACKEND_UNAVAILABLE);
    expect_message(ctx, "lacks cublasLtMatmul");

    lt = open_fake(ctx);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4] = {7, 7, 7, 7};
    const float kept[4] = {7, 7, 7, 7};
    hd_rt_gemm g = {.m = 2,
                    .n = 2,
                    .k = 3,
                    .a = (hd_devmem)a,
                    .b = (hd_devmem)b,
                    .c = (hd_devmem)c,
                    .lda = 3,
                    .ldb = 2,
                    .ldc = 2,
                    .alpha = 1.0f,
                    .precision = HD_PRECISION_FP32X3};
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_ERR_UNSUPPORTED);
    expect_message(ctx, "not fp32x3");
    hd_test_expect_same("after fp32x3", c, kept, 4);
    assert_int_equal(hd__cublaslt_prepare(lt, ctx, &g, 0), HD_ERR_UNSUPPORTED);
    expect_message(ctx, "not fp32x3");
    g.precision = HD_PRECISION_FP32;
    setenv("FAKE_CUBLASLT_NO_ALGO", "1", 1);
    assert_int_equal(hd__cublaslt_prepare(lt, ctx, &g, 0), HD_ERR_UNSUPPORTED);
    expect_message(ctx, "cublasLtMatmulAlgoGetHeuristic");
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_ERR_UNSUPPORTED);
    expect_message(ctx, "cublasLtMatmulAlgoGetHeuristic");
    hd_test_expect_same("without an algorithm", c, kept, 4);
    unsetenv("FAKE_CUBLASLT_NO_ALGO");
    /* the failed shape kept no plan: it runs once an algorithm is found */
    assert_int_equal(hd__cublaslt_gemm(lt, ctx, &g, NULL, NULL, 0), HD_OK);
    const float want[4] = {1 + 3, 2 + 3, 4 + 6, 5 + 6};
    hd_test_expect_same("once found", c, want, 4);
    hd__cublaslt_close(lt);
    hd_context_destroy(ctx);
}

int main(void)
{
    hd_test_filter_from_env();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_major_products_of_every_transpose),
        cmocka_unit_test(test_each_precision_asks_for_its_compute_type),
        cmocka_unit_test(test_keeps_a_plan_per_shape),
        cmocka_unit_test(test_refusals_leave_the_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
