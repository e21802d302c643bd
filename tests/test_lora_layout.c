/*
 * hd_lora_forward_ex(): the LoRA forward pass with W, A and B stored transposed (PyTorch and
 * PEFT keep W out×in, A r×in, B out×r), on every backend this machine has, forced one by one,
 * and on auto, against the float64 reference of the same product in the default layout.
 * A backend that cannot read a layout in place must hand the call on (the fused backend reads
 * W and B transposed only together): the result is still checked either way. Besides the
 * listed cases, shapes drawn at random from the whole class, fresh each run.
 *
 * Tolerance: the GEMM rounding bound over in + rank terms, as in the CPU suite.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testlib.h"

#define GEMM_FACTOR 1.0

static int setup(void **state)
{
    *state = hd_test_context(false);
    return 0;
}

static int teardown(void **state)
{
    hd_context_destroy(*state);
    return 0;
}

typedef struct lora_case {
    size_t tokens, in, out, rank;
} lora_case;

/* One call in `layout` on backend b (AUTO: the dispatcher's choice), checked against the
 * reference. Returns the backend it ran on. */
static hd_backend check_layout(hd_context *ctx, hd_backend b, unsigned layout, lora_case c,
                               uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    float *x = hd_test_random(&rng, c.tokens * c.in, -1.0f, 1.0f);
    float *w = hd_test_random(&rng, c.in * c.out, -1.0f, 1.0f);
    float *a = hd_test_random(&rng, c.in * c.rank, -1.0f, 1.0f);
    float *bm = hd_test_random(&rng, c.rank * c.out, -1.0f, 1.0f);
    bool tw = layout & HD_LORA_TRANS_W, ta = layout & HD_LORA_TRANS_A,
         tb = layout & HD_LORA_TRANS_B;
    /* stored as the layout says: the transpose of the default-layout matrix */
    float *ws = tw ? hd_test_transposed(w, c.in, c.out) : w;
    float *as = ta ? hd_test_transposed(a, c.in, c.rank) : a;
    float *bs = tb ? hd_test_transposed(bm, c.rank, c.out) : bm;
    hd_tensor *tx = hd_test_tensor(ctx, c.tokens, c.in, x);
    hd_tensor *twt =
        tw ? hd_test_tensor(ctx, c.out, c.in, ws) : hd_test_tensor(ctx, c.in, c.out, ws);
    hd_tensor *tat =
        ta ? hd_test_tensor(ctx, c.rank, c.in, as) : hd_test_tensor(ctx, c.in, c.rank, as);
    hd_tensor *tbt =
        tb ? hd_test_tensor(ctx, c.out, c.rank, bs) : hd_test_tensor(ctx, c.rank, c.out, bs);
    hd_tensor *ty = hd_test_tensor(ctx, c.tokens, c.out, NULL);

    char what[200];
    snprintf(what, sizeof what, "lora layout %u on %s: tokens=%zu in=%zu out=%zu rank=%zu", layout,
             hd_backend_name(b), c.tokens, c.in, c.out, c.rank);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, b), HD_OK);
    hd_status s = hd_lora_forward_ex(ctx, tx, twt, tat, tbt, 0.75f, layout, ty);
    if (s != HD_OK)
        fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
    hd_backend ran = hd_context_last_backend(ctx);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, HD_BACKEND_AUTO), HD_OK);

    size_t n = c.tokens * c.out;
    double *want = hd_test_doubles(n), *bound = hd_test_doubles(n);
    hd_ref_lora(c.tokens, c.in, c.out, c.rank, x, w, a, bm, 0.75f, want, bound);
    float *got = hd_test_read(ty);
    hd_test_expect_gemm_close(what, got, want, bound, n, c.in + c.rank, GEMM_FACTOR);
    /* the inputs are read in place, never rewritten */
    hd_test_expect_unchanged(what, twt, ws);
    hd_test_expect_unchanged(what, tat, as);
    hd_test_expect_unchanged(what, tbt, bs);

    free(got);
    free(want);
    free(bound);
    hd_tensor *all[] = {tx, twt, tat, tbt, ty};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    if (ws != w)
        free(ws);
    if (as != a)
        free(as);
    if (bs != bm)
        free(bs);
    free(x);
    free(w);
    free(a);
    free(bm);
    return ran;
}

static const unsigned layouts[] = {
    HD_LORA_LAYOUT_DEFAULT, HD_LORA_TRANS_W,        HD_LORA_TRANS_A,
    HD_LORA_TRANS_B,        HD_LORA_LAYOUT_PYTORCH, HD_LORA_TRANS_W | HD_LORA_TRANS_A,
};
/* One token (the GEMV-style path), a few, and more than the fused kernels' 16; odd sizes; 8
 * and 9 tokens on either side of the dot form's limit in PyTorch's layout; a depth of one. */
static const lora_case cases[] = {{1, 37, 29, 8}, {5, 64, 48, 3}, {33, 40, 24, 16}, {3, 17, 9, 0},
                                  {8, 45, 23, 7}, {9, 45, 23, 7}, {2, 1, 19, 4}};

static void test_lora_layouts_match_reference_on_every_backend(void **state)
{
    hd_context *ctx = *state;
    uint64_t salt = 9100;
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        if (b != HD_BACKEND_AUTO && !hd_context_has_backend(ctx, (hd_backend)b))
            continue;
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                hd_backend ran = check_layout(ctx, (hd_backend)b, layouts[l], cases[i], salt++);
                /* CPU and CLBlast read every layout in place: forced, they run it */
                if (b == HD_BACKEND_CPU || b == HD_BACKEND_CLBLAST)
                    assert_int_equal(ran, b);
            }
    }
}

/* Shapes drawn from the whole class (testlib), each in a layout drawn from all eight, on every
 * backend and on auto. */
static void test_lora_random_shapes_match_reference_on_every_backend(void **state)
{
    hd_context *ctx = *state;
    hd_rng rng = hd_test_rng(9200);
    for (int i = 0; i < 6; i++) {
        hd_test_lora_shape s = hd_test_random_lora_shape(&rng);
        lora_case c = {s.tokens, s.in, s.out, s.rank};
        unsigned layout = (unsigned)hd_test_uniform(&rng, 0.0f, 7.99f);
        for (int b = 0; b < HD_BACKEND_COUNT; b++)
            if (b == HD_BACKEND_AUTO || hd_context_has_backend(ctx, (hd_backend)b))
                check_layout(ctx, (hd_backend)b, layout, c, 9210 + 10 * (uint64_t)i + b);
    }
}

/* The fused backend reads transposed weights on its tiled engine, whose low-rank product takes
 * the transposes of x*W: W and B transposed alike (the PyTorch layout), A either way. A layout
 * with W and B apart moves on to another backend. */
static void test_lora_fused_reads_w_and_b_transposed_alike(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        skip();
    static const unsigned runs_fused[] = {HD_LORA_LAYOUT_DEFAULT, HD_LORA_LAYOUT_PYTORCH,
                                          HD_LORA_TRANS_A, HD_LORA_TRANS_W | HD_LORA_TRANS_B};
    static const unsigned moves_on[] = {HD_LORA_TRANS_W, HD_LORA_TRANS_B,
                                        HD_LORA_TRANS_W | HD_LORA_TRANS_A};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t l = 0; l < sizeof runs_fused / sizeof runs_fused[0]; l++)
            assert_int_equal(
                check_layout(ctx, HD_BACKEND_FUSED, runs_fused[l], cases[i], 9300 + 10 * i + l),
                HD_BACKEND_FUSED);
        for (size_t l = 0; l < sizeof moves_on / sizeof moves_on[0]; l++)
            assert_int_not_equal(
                check_layout(ctx, HD_BACKEND_FUSED, moves_on[l], cases[i], 9350 + 10 * i + l),
                HD_BACKEND_FUSED);
    }
}

static void test_lora_layout_shape_errors_name_the_tensor(void **state)
{
    hd_context *ctx = *state;
    hd_tensor *x = hd_test_tensor(ctx, 2, 6, NULL), *y = hd_test_tensor(ctx, 2, 5, NULL);
    hd_tensor *w_pt = hd_test_tensor(ctx, 5, 6, NULL), *a_pt = hd_test_tensor(ctx, 3, 6, NULL);
    hd_tensor *b_pt = hd_test_tensor(ctx, 5, 3, NULL);
    float *y_before = hd_test_read(y);
    /* the PyTorch layout is accepted as stored */
    assert_int_equal(hd_lora_forward_ex(ctx, x, w_pt, a_pt, b_pt, 1.0f, HD_LORA_LAYOUT_PYTORCH, y),
                     HD_OK);
    hd_tensor_destroy(y);
    y = hd_test_tensor(ctx, 2, 5, y_before);
    /* the same tensors in the default layout do not fit */
    assert_int_equal(hd_lora_forward_ex(ctx, x, w_pt, a_pt, b_pt, 1.0f, 0, y),
                     HD_ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(hd_context_last_error(ctx), "'w'"));
    /* only A transposed: W (5x6) still has to be in x out */
    assert_int_equal(hd_lora_forward_ex(ctx, x, w_pt, a_pt, b_pt, 1.0f, HD_LORA_TRANS_A, y),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(
        hd_lora_forward_ex(ctx, x, w_pt, a_pt, b_pt, 1.0f, HD_LORA_TRANS_W | HD_LORA_TRANS_A, y),
        HD_ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(hd_context_last_error(ctx), "'b'"));
    /* an unknown flag is named, and the output stays untouched */
    assert_int_equal(hd_lora_forward_ex(ctx, x, w_pt, a_pt, b_pt, 1.0f, 8, y),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "0x8"));
    hd_test_expect_unchanged("y after refused calls", y, y_before);
    free(y_before);
    hd_tensor *all[] = {x, y, w_pt, a_pt, b_pt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
}

/* scale = 0 is a product like any other, not BLAS's alpha = 0: NaN or inf in A or B reach y and
 * the gradients as in IEEE arithmetic (and PyTorch), on every backend alike. NaN at A[i0][j0]
 * makes column j0 of x*A NaN, so every y and dB row j0; inf at B[j1][c1] makes column j1 of
 * dy*B^T inf, scaled NaN, so every dx and dA column j1. The rest of dA and dB is 0. */
static void test_lora_scale_zero_keeps_nan_and_inf_of_a_and_b(void **state)
{
    hd_context *ctx = *state;
    enum { T = 5, IN = 11, OUT = 7, R = 3, I0 = 4, J0 = 1, J1 = 2, C1 = 6 };
    hd_rng rng = hd_test_rng(9400);
    float *x = hd_test_random(&rng, T * IN, -1.0f, 1.0f),
          *w = hd_test_random(&rng, IN * OUT, -1, 1);
    float *a = hd_test_random(&rng, IN * R, -1.0f, 1.0f), *b = hd_test_random(&rng, R * OUT, -1, 1);
    float *dy = hd_test_random(&rng, T * OUT, -1.0f, 1.0f);
    a[I0 * R + J0] = NAN;
    b[J1 * OUT + C1] = INFINITY;
    hd_tensor *tx = hd_test_tensor(ctx, T, IN, x), *tw = hd_test_tensor(ctx, IN, OUT, w);
    hd_tensor *ta = hd_test_tensor(ctx, IN, R, a), *tb = hd_test_tensor(ctx, R, OUT, b);
    hd_tensor *tdy = hd_test_tensor(ctx, T, OUT, dy), *ty = hd_test_tensor(ctx, T, OUT, NULL);
    hd_tensor *tdx = hd_test_tensor(ctx, T, IN, NULL), *tda = hd_test_tensor(ctx, IN, R, NULL);
    hd_tensor *tdb = hd_test_tensor(ctx, R, OUT, NULL);
    for (int backend = 0; backend < HD_BACKEND_COUNT; backend++) {
        hd_backend bk = (hd_backend)backend;
        if (bk != HD_BACKEND_AUTO && !hd_context_has_backend(ctx, bk))
            continue;
        const char *name = hd_backend_name(bk);
        assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, bk), HD_OK);
        assert_int_equal(hd_lora_forward(ctx, tx, tw, ta, tb, 0.0f, ty), HD_OK);
        float *y = hd_test_read(ty);
        for (int i = 0; i < T * OUT; i++)
            if (isfinite(y[i]))
                fail_msg("%s: y[%d] = %g, expected NaN from A's NaN", name, i, (double)y[i]);
        free(y);
        if (hd_context_set_backend(ctx, HD_OP_LORA_BACKWARD, bk) != HD_OK)
            continue; /* a plan of two backends has no backward */
        assert_int_equal(hd_lora_backward(ctx, tx, tw, ta, tb, 0.0f, tdy, tdx, tda, tdb, false),
                         HD_OK);
        float *dx = hd_test_read(tdx), *da = hd_test_read(tda), *db = hd_test_read(tdb);
        for (int i = 0; i < T * IN; i++)
            if (isfinite(dx[i]))
                fail_msg("%s: dx[%d] = %g, expected NaN from B's inf", name, i, (double)dx[i]);
        for (int i = 0; i < IN * R; i++)
            if ((i % R == J1) != !isfinite(da[i]) || (i % R != J1 && da[i] != 0.0f))
                fail_msg("%s: dA[%d][%d] = %g", name, i / R, i % R, (double)da[i]);
        for (int i = 0; i < R * OUT; i++)
            if ((i / OUT == J0) != !isfinite(db[i]) || (i / OUT != J0 && db[i] != 0.0f))
                fail_msg("%s: dB[%d][%d] = %g", name, i / OUT, i % OUT, (double)db[i]);
        free(dx);
        free(da);
        free(db);
    }
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA, HD_BACKEND_AUTO), HD_OK);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA_BACKWARD, HD_BACKEND_AUTO), HD_OK);
    hd_tensor *all[] = {tx, tw, ta, tb, tdy, ty, tdx, tda, tdb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    float *arrays[] = {x, w, a, b, dy};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
}

int main(void)
{
    hd_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_layouts_match_reference_on_every_backend),
        cmocka_unit_test(test_lora_random_shapes_match_reference_on_every_backend),
        cmocka_unit_test(test_lora_fused_reads_w_and_b_transposed_alike),
        cmocka_unit_test(test_lora_layout_shape_errors_name_the_tensor),
        cmocka_unit_test(test_lora_scale_zero_keeps_nan_and_inf_of_a_and_b),
    };
    return cmocka_run_group_tests_name("lora_layout", tests, setup, teardown);
}
