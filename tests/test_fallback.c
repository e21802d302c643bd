/*
 * Fallback: when the chosen backend declines or its device fails, every operation still
 * succeeds on the next backend, hd_context_last_backend() says which, the message of the
 * failure is kept, inputs are unchanged and outputs complete; a failed device is marked
 * unhealthy. Failures come from $HD_FAULT (dispatch/fault.h) at the dispatcher's steps, and
 * from stand-in backends that return errors. Runs on stand-ins with the real CPU backend, and
 * on whatever real backends this machine has (PoCL in CI).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake_backends.h"

/* Shapes above the "small problem" threshold, so that a device is chosen where there is one. */
enum { G_M = 33, G_N = 67, G_K = 45 };
enum { L_T = 5, L_IN = 130, L_OUT = 70, L_R = 3 };
enum { R_ROWS = 67, R_COLS = 530 };

typedef struct op_run {
    hd_status status;
    bool output_untouched; /* after a failure */
} op_run;

/* The checks after a call read tensors, which may set the context's message: the tests look at
 * the call's message, so it is put back once they are done. */
static void restore_error(hd_context *ctx, const char *saved)
{
    snprintf(ctx->last_error, sizeof ctx->last_error, "%s", saved);
}

static const float sentinel = 123.25f;

static float *sentinels(size_t n)
{
    float *p = hd_test_floats(n);
    for (size_t i = 0; i < n; i++)
        p[i] = sentinel;
    return p;
}

static op_run run_gemm(hd_context *ctx, hd_op op, hd_rng *rng)
{
    op_run res = {0};
    size_t batch = op == HD_OP_GEMM ? 1 : 3;
    size_t na = batch * G_M * G_K, nb = batch * G_K * G_N, nc = batch * G_M * G_N;
    float *a = hd_test_random(rng, na, -1, 1), *b = hd_test_random(rng, nb, -1, 1);
    float *c = sentinels(nc);
    hd_tensor *ta = hd_test_tensor(ctx, batch * G_M, G_K, a);
    hd_tensor *tb = hd_test_tensor(ctx, batch * G_K, G_N, b);
    hd_tensor *tc = hd_test_tensor(ctx, batch * G_M, G_N, c);
    res.status = op == HD_OP_GEMM
                     ? hd_gemm(ctx, false, false, 1.5f, ta, tb, 0.5f, tc)
                     : hd_gemm_batched(ctx, batch, false, false, 1.5f, ta, tb, 0.5f, tc);
    char err[HD_ERROR_CAPACITY];
    snprintf(err, sizeof err, "%s", hd_context_last_error(ctx));
    if (res.status == HD_OK) {
        double *want = hd_test_doubles(nc), *bound = hd_test_doubles(nc);
        for (size_t i = 0; i < batch; i++)
            hd_ref_gemm(false, false, G_M, G_N, G_K, 1.5f, a + i * G_M * G_K, b + i * G_K * G_N,
                        0.5f, c + i * G_M * G_N, want + i * G_M * G_N, bound + i * G_M * G_N);
        float *got = hd_test_read(tc);
        hd_test_expect_gemm_close("gemm after fallback", got, want, bound, nc, G_K, 4.0);
        free(got);
        free(want);
        free(bound);
    } else {
        hd_test_expect_unchanged("gemm output after failure", tc, c);
    }
    hd_test_expect_unchanged("gemm input a", ta, a);
    hd_test_expect_unchanged("gemm input b", tb, b);
    restore_error(ctx, err);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(tc);
    free(a);
    free(b);
    free(c);
    return res;
}

static op_run run_lora(hd_context *ctx, hd_rng *rng)
{
    op_run res = {0};
    size_t ny = L_T * L_OUT;
    float *x = hd_test_random(rng, L_T * L_IN, -1, 1),
          *w = hd_test_random(rng, L_IN * L_OUT, -1, 1);
    float *a = hd_test_random(rng, L_IN * L_R, -1, 1), *b = hd_test_random(rng, L_R * L_OUT, -1, 1);
    float *y = sentinels(ny);
    hd_tensor *tx = hd_test_tensor(ctx, L_T, L_IN, x), *tw = hd_test_tensor(ctx, L_IN, L_OUT, w);
    hd_tensor *ta = hd_test_tensor(ctx, L_IN, L_R, a), *tb = hd_test_tensor(ctx, L_R, L_OUT, b);
    hd_tensor *ty = hd_test_tensor(ctx, L_T, L_OUT, y);
    res.status = hd_lora_forward(ctx, tx, tw, ta, tb, 0.75f, ty);
    char err[HD_ERROR_CAPACITY];
    snprintf(err, sizeof err, "%s", hd_context_last_error(ctx));
    if (res.status == HD_OK) {
        double *want = hd_test_doubles(ny), *bound = hd_test_doubles(ny);
        hd_ref_lora(L_T, L_IN, L_OUT, L_R, x, w, a, b, 0.75f, want, bound);
        float *got = hd_test_read(ty);
        hd_test_expect_gemm_close("lora after fallback", got, want, bound, ny, L_IN, 8.0);
        free(got);
        free(want);
        free(bound);
    } else {
        hd_test_expect_unchanged("lora output after failure", ty, y);
    }
    hd_test_expect_unchanged("lora input x", tx, x);
    hd_test_expect_unchanged("lora input w", tw, w);
    hd_test_expect_unchanged("lora input a", ta, a);
    hd_test_expect_unchanged("lora input b", tb, b);
    restore_error(ctx, err);
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
    return res;
}

static op_run run_row_op(hd_context *ctx, hd_test_row_op op, hd_rng *rng)
{
    op_run res = {0};
    size_t n = R_ROWS * R_COLS;
    float *x = hd_test_random(rng, n, -4, 4), *g = hd_test_random(rng, R_COLS, 0.5f, 1.5f);
    float *be = hd_test_random(rng, R_COLS, -1, 1), *y = sentinels(n);
    hd_tensor *tx = hd_test_tensor(ctx, R_ROWS, R_COLS, x),
              *ty = hd_test_tensor(ctx, R_ROWS, R_COLS, y);
    hd_tensor *tg = hd_test_tensor(ctx, 1, R_COLS, g), *tb = hd_test_tensor(ctx, 1, R_COLS, be);
    res.status = hd_test_row_call(ctx, op, tx, tg, tb, 1e-5f, ty);
    char err[HD_ERROR_CAPACITY];
    snprintf(err, sizeof err, "%s", hd_context_last_error(ctx));
    if (res.status == HD_OK) {
        double *want = hd_test_doubles(n);
        hd_ref_row(op, R_ROWS, R_COLS, x, g, be, 1e-5f, want);
        float *got = hd_test_read(ty);
        hd_test_expect_close(hd_test_row_op_name(op), got, want, n, 1e-5, 1e-4);
        free(got);
        free(want);
    } else {
        hd_test_expect_unchanged("row output after failure", ty, y);
    }
    hd_test_expect_unchanged("row input x", tx, x);
    hd_test_expect_unchanged("row input gamma", tg, g);
    hd_test_expect_unchanged("row input beta", tb, be);
    restore_error(ctx, err);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(ty);
    hd_tensor_destroy(tg);
    hd_tensor_destroy(tb);
    free(x);
    free(g);
    free(be);
    free(y);
    return res;
}

/* Runs op on random data; on success checks the result against the float64 reference, and
 * always checks that the inputs are unchanged and, on failure, that the output is. */
static op_run run_and_check(hd_context *ctx, hd_op op, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    switch (op) {
    case HD_OP_GEMM:
    case HD_OP_GEMM_BATCHED:
        return run_gemm(ctx, op, &rng);
    case HD_OP_LORA:
        return run_lora(ctx, &rng);
    case HD_OP_SOFTMAX:
        return run_row_op(ctx, HD_TEST_SOFTMAX, &rng);
    case HD_OP_LAYER_NORM:
        return run_row_op(ctx, HD_TEST_LAYER_NORM, &rng);
    default:
        return run_row_op(ctx, HD_TEST_RMS_NORM, &rng);
    }
}

/* ---- stand-ins with the real CPU ---- */

static void test_fallback_injected_launch_fault_lands_on_the_cpu_for_every_op(void **state)
{
    (void)state;
    setenv("HD_FAULT", "*:launch", 1);
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_context *ctx = fake_context(true, NULL, NULL);
        op_run r = run_and_check(ctx, (hd_op)op, 100 + (uint64_t)op);
        assert_int_equal(r.status, HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        const char *msg = hd_context_last_error(ctx);
        if (strstr(msg, "injected fault") == NULL || strstr(msg, "ran on cpu after") == NULL)
            fail_msg("%s: message not kept: '%s'", hd_op_name((hd_op)op), msg);
        /* Every stand-in that was tried is now unhealthy; none of them ran. */
        int tried = 0;
        for (int b = HD_BACKEND_CPU + 1; b < HD_BACKEND_COUNT; b++) {
            assert_int_equal(fake_states[b].calls, 0);
            if (ctx->backend_unhealthy[b]) {
                tried++;
                assert_non_null(strstr(msg, hd_backend_name((hd_backend)b)));
                assert_false(hd_context_has_backend(ctx, (hd_backend)b));
            }
        }
        assert_true(tried >= 1);
        hd_context_destroy(ctx);
    }
    unsetenv("HD_FAULT");
}

static void test_fallback_injected_migrate_fault_moves_on(void **state)
{
    (void)state;
    setenv("HD_FAULT", "fused:migrate,clblast:migrate,clblast+fused:migrate", 1);
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_context *ctx = fake_context(true, NULL, NULL);
        hd_context_set_backend(ctx, (hd_op)op, HD_BACKEND_FUSED);
        hd_shape any = {.dim = {1, 1, 1, 1}};
        bool took[HD_BACKEND_COUNT];
        for (int b = 0; b < HD_BACKEND_COUNT; b++)
            took[b] = b != HD_BACKEND_CPU && hd__backend_takes(ctx, (hd_backend)b, (hd_op)op, &any);
        op_run r = run_and_check(ctx, (hd_op)op, 200 + (uint64_t)op);
        assert_int_equal(r.status, HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        assert_non_null(strstr(hd_context_last_error(ctx), "fails at migrate"));
        for (int b = 0; b < HD_BACKEND_COUNT; b++)
            assert_int_equal(ctx->backend_unhealthy[b], took[b]);
        hd_context_destroy(ctx);
    }
    unsetenv("HD_FAULT");
}

/* A backend that declines (unsupported) is not marked unhealthy; one whose slot reports a
 * device error is; an error that would fail everywhere is returned at once. */
static void test_fallback_slot_errors_decide_health(void **state)
{
    (void)state;
    hd_context *ctx = fake_context(true, NULL, NULL);
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_UNSUPPORTED;
    op_run r = run_and_check(ctx, HD_OP_SOFTMAX, 300);
    assert_int_equal(r.status, HD_OK);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 1);
    assert_false(ctx->backend_unhealthy[HD_BACKEND_FUSED]);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
    assert_non_null(strstr(hd_context_last_error(ctx), "stand-in backend fails"));

    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_DEVICE;
    r = run_and_check(ctx, HD_OP_RMS_NORM, 301);
    assert_int_equal(r.status, HD_OK);
    assert_true(ctx->backend_unhealthy[HD_BACKEND_FUSED]);
    /* Unhealthy: not tried again. */
    r = run_and_check(ctx, HD_OP_LAYER_NORM, 302);
    assert_int_equal(r.status, HD_OK);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 2);
    hd_context_destroy(ctx);

    ctx = fake_context(true, NULL, NULL);
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_OUT_OF_MEMORY;
    r = run_and_check(ctx, HD_OP_SOFTMAX, 303); /* checks the output stayed untouched */
    assert_int_equal(r.status, HD_ERR_OUT_OF_MEMORY);
    hd_context_destroy(ctx);
}

/* ---- the real backends of this machine ---- */

static void test_fallback_real_backends_survive_a_launch_fault_for_every_op(void **state)
{
    (void)state;
    hd_backend chosen[HD_OP_COUNT];
    unsetenv("HD_FAULT");
    hd_context *plain = hd_test_context(false);
    for (int op = 0; op < HD_OP_COUNT; op++) {
        assert_int_equal(run_and_check(plain, (hd_op)op, 400 + (uint64_t)op).status, HD_OK);
        chosen[op] = hd_context_last_backend(plain);
    }
    hd_context_destroy(plain);
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_backend first = chosen[op];
        char spec[64];
        snprintf(spec, sizeof spec, "%s:launch", hd_backend_name(first));
        setenv("HD_FAULT", spec, 1);
        hd_context *ctx = hd_test_context(false);
        unsetenv("HD_FAULT");
        int others = 0;
        for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++)
            others += b != (int)first && hd_context_has_backend(ctx, (hd_backend)b);
        op_run r = run_and_check(ctx, (hd_op)op, 500 + (uint64_t)op);
        const char *msg = hd_context_last_error(ctx);
        assert_non_null(strstr(msg, "injected fault"));
        if (first != HD_BACKEND_CPU) {
            /* The CPU is always there to fall back on. */
            assert_true(others >= 1);
            assert_int_equal(r.status, HD_OK);
            assert_int_not_equal(hd_context_last_backend(ctx), first);
            assert_false(hd_context_has_backend(ctx, first));
        } else if (r.status == HD_OK) {
            assert_int_not_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        } else {
            /* Only the CPU takes this op here, and it failed: the error, outputs untouched. */
            assert_int_equal(r.status, HD_ERR_DEVICE);
            assert_true(hd_context_has_backend(ctx, HD_BACKEND_CPU));
        }
        print_message("# %s: chosen %s, after its fault: %s\n", hd_op_name((hd_op)op),
                      hd_backend_name(first), hd_status_name(r.status));
        hd_context_destroy(ctx);
    }
}

static void test_fallback_probe_fault_removes_the_backend(void **state)
{
    (void)state;
    hd_context *plain = hd_test_context(false);
    for (int b = HD_BACKEND_CPU + 1; b < HD_BACKEND_COUNT; b++) {
        if (!hd_context_has_backend(plain, (hd_backend)b))
            continue;
        char spec[64];
        snprintf(spec, sizeof spec, "%s:probe", hd_backend_name((hd_backend)b));
        setenv("HD_FAULT", spec, 1);
        hd_context *ctx = hd_test_context(false);
        unsetenv("HD_FAULT");
        assert_false(hd_context_has_backend(ctx, (hd_backend)b));
        /* The first op the backend would have taken runs elsewhere. */
        hd_shape any = {.dim = {G_M, G_N, G_K, 1}};
        int op = 0;
        while (op < HD_OP_COUNT - 1 && !hd__backend_takes(plain, (hd_backend)b, (hd_op)op, &any))
            op++;
        assert_int_equal(run_and_check(ctx, (hd_op)op, 600 + (uint64_t)op).status, HD_OK);
        assert_int_not_equal(hd_context_last_backend(ctx), (hd_backend)b);
        hd_context_destroy(ctx);
    }
    hd_context_destroy(plain);

    /* Even without any backend, an op fails cleanly. */
    setenv("HD_FAULT", "cpu:probe,*:probe", 1);
    hd_context *ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++)
        assert_false(hd_context_has_backend(ctx, (hd_backend)b));
    op_run r = run_and_check(ctx, HD_OP_SOFTMAX, 700);
    assert_int_equal(r.status, HD_ERR_UNSUPPORTED);
    hd_context_destroy(ctx);
}

static void test_fallback_fault_spec_ignores_malformed_items(void **state)
{
    (void)state;
    setenv("HD_FAULT",
           "nonsense,:launch,fused:,cuda:launch,fused:a-step-name-far-too-long,,"
           "clblast:build",
           1);
    hd_context *ctx = fake_context(true, NULL, NULL);
    unsetenv("HD_FAULT");
    assert_int_equal(ctx->fault.count, 1);
    assert_true(hd__fault(ctx, HD_BACKEND_CLBLAST, "build"));
    assert_non_null(strstr(hd_context_last_error(ctx), "fails at build"));
    assert_false(hd__fault(ctx, HD_BACKEND_FUSED, "build"));
    assert_false(hd__fault(NULL, HD_BACKEND_FUSED, "build"));
    hd_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_injected_launch_fault_lands_on_the_cpu_for_every_op),
        cmocka_unit_test(test_fallback_injected_migrate_fault_moves_on),
        cmocka_unit_test(test_fallback_slot_errors_decide_health),
        cmocka_unit_test(test_fallback_real_backends_survive_a_launch_fault_for_every_op),
        cmocka_unit_test(test_fallback_probe_fault_removes_the_backend),
        cmocka_unit_test(test_fallback_fault_spec_ignores_malformed_items),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
