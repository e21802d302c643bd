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
#include <unistd.h>

#include "autotune/case_params.h"
#include "autotune/reference.h"
#include "autotune/suites.h"
#include "dispatch/check.h"
#include "dispatch/tensor.h"
#include "dispatch/tools.h"
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
    snprintf(ctx->report.last_error, sizeof ctx->report.last_error, "%s", saved);
}

/* What the library said about the call: the error after a failure, the notes after a
 * success (a fallback is a note: the call succeeded). */
static const char *said(hd_context *ctx, op_run r)
{
    return r.status == HD_OK ? hd_test_notes() : hd_context_last_error(ctx);
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
static op_run run_plain_gemm(hd_context *ctx, hd_rng *rng)
{
    return run_gemm(ctx, HD_OP_GEMM, rng);
}
static op_run run_batched_gemm(hd_context *ctx, hd_rng *rng)
{
    return run_gemm(ctx, HD_OP_GEMM_BATCHED, rng);
}
static op_run run_softmax(hd_context *ctx, hd_rng *rng)
{
    return run_row_op(ctx, HD_TEST_SOFTMAX, rng);
}
static op_run run_layer_norm(hd_context *ctx, hd_rng *rng)
{
    return run_row_op(ctx, HD_TEST_LAYER_NORM, rng);
}
static op_run run_rms_norm(hd_context *ctx, hd_rng *rng)
{
    return run_row_op(ctx, HD_TEST_RMS_NORM, rng);
}

/* The backward ops: inputs of the forward's shapes (dy random), every gradient wanted, the
 * outputs checked against the float64 reference, or unchanged after a failure. */
static op_run run_backward(hd_context *ctx, hd_op op, hd_rng *rng)
{
    op_run res = {0};
    bool lora = op == HD_OP_LORA_BACKWARD;
    size_t rows = lora ? L_T : R_ROWS, cols = lora ? L_IN : R_COLS;
    size_t n_in[5] = {rows * cols, lora ? L_IN * L_OUT : R_COLS, lora ? L_IN * L_R : 0,
                      lora ? L_R * L_OUT : 0, lora ? L_T * L_OUT : rows * cols};
    size_t n_out[3] = {rows * cols, lora ? L_IN * L_R : R_COLS, lora ? L_R * L_OUT : R_COLS};
    size_t shapes[8][2] = {{rows, cols},
                           {lora ? L_IN : 1, lora ? L_OUT : cols},
                           {L_IN, L_R},
                           {L_R, L_OUT},
                           {lora ? L_T : rows, lora ? L_OUT : cols},
                           {rows, cols},
                           {lora ? L_IN : 1, lora ? L_R : cols},
                           {lora ? L_R : 1, lora ? L_OUT : cols}};
    float *in[5], *out[3];
    hd_tensor *t[8];
    for (int i = 0; i < 5; i++) {
        in[i] = hd_test_random(rng, n_in[i], i == 1 && !lora ? 0.5f : -1.0f, 1.0f);
        t[i] = n_in[i] > 0 || lora ? hd_test_tensor(ctx, shapes[i][0], shapes[i][1], in[i]) : NULL;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = sentinels(n_out[i]);
        t[5 + i] = hd_test_tensor(ctx, shapes[5 + i][0], shapes[5 + i][1], out[i]);
    }
    if (op == HD_OP_SOFTMAX_BACKWARD)
        res.status = hd_softmax_backward(ctx, t[0], t[4], t[5]);
    else if (op == HD_OP_RMS_NORM_BACKWARD)
        res.status = hd_rms_norm_backward(ctx, t[0], t[1], t[4], 1e-5f, t[5], t[6]);
    else if (op == HD_OP_LAYER_NORM_BACKWARD)
        res.status = hd_layer_norm_backward(ctx, t[0], t[1], t[4], 1e-5f, t[5], t[6], t[7]);
    else
        res.status =
            hd_lora_backward(ctx, t[0], t[1], t[2], t[3], 0.75f, t[4], t[5], t[6], t[7], false);
    char err[HD_ERROR_CAPACITY];
    snprintf(err, sizeof err, "%s", hd_context_last_error(ctx));
    int outputs = op == HD_OP_SOFTMAX_BACKWARD ? 1 : op == HD_OP_RMS_NORM_BACKWARD ? 2 : 3;
    if (res.status == HD_OK) {
        double *want[3];
        for (int i = 0; i < 3; i++)
            want[i] = hd_test_doubles(n_out[i]);
        if (op == HD_OP_SOFTMAX_BACKWARD)
            hd_ref_softmax_backward(rows, cols, in[0], in[4], want[0]);
        else if (op == HD_OP_RMS_NORM_BACKWARD)
            hd_ref_rms_norm_backward(rows, cols, in[0], in[1], in[4], 1e-5f, want[0], want[1]);
        else if (op == HD_OP_LAYER_NORM_BACKWARD)
            hd_ref_layer_norm_backward(rows, cols, in[0], in[1], in[4], 1e-5f, want[0], want[1],
                                       want[2]);
        else
            hd_ref_lora_backward(L_T, L_IN, L_OUT, L_R, in[0], in[1], in[2], in[3], 0.75f, in[4],
                                 want[0], want[1], want[2], NULL, NULL, NULL);
        for (int i = 0; i < outputs; i++) {
            float *got = hd_test_read(t[5 + i]);
            hd_test_expect_close(hd_op_name(op), got, want[i], n_out[i], 1e-3, 1e-3);
            free(got);
        }
        for (int i = 0; i < 3; i++)
            free(want[i]);
    } else {
        for (int i = 0; i < 3; i++)
            hd_test_expect_unchanged("backward output after failure", t[5 + i], out[i]);
    }
    for (int i = 0; i < 5; i++)
        if (t[i] != NULL)
            hd_test_expect_unchanged("backward input", t[i], in[i]);
    restore_error(ctx, err);
    for (int i = 0; i < 8; i++)
        hd_tensor_destroy(t[i]);
    for (int i = 0; i < 5; i++)
        free(in[i]);
    for (int i = 0; i < 3; i++)
        free(out[i]);
    return res;
}
static op_run run_softmax_backward(hd_context *ctx, hd_rng *rng)
{
    return run_backward(ctx, HD_OP_SOFTMAX_BACKWARD, rng);
}
static op_run run_layer_norm_backward(hd_context *ctx, hd_rng *rng)
{
    return run_backward(ctx, HD_OP_LAYER_NORM_BACKWARD, rng);
}
static op_run run_rms_norm_backward(hd_context *ctx, hd_rng *rng)
{
    return run_backward(ctx, HD_OP_RMS_NORM_BACKWARD, rng);
}
static op_run run_lora_backward(hd_context *ctx, hd_rng *rng)
{
    return run_backward(ctx, HD_OP_LORA_BACKWARD, rng);
}

/* The training step's ops: the ci suite's case of the op (tiny, every backend takes it), its
 * scalars as the tools make them, inputs from the op table's ranges, every output wanted that
 * the tools want; the outputs checked by the tools' float64 check, or unchanged after a
 * failure. */
static const hd_bench_case *ci_case_of(hd_op op)
{
    const hd_bench_suite *ci = hd__bench_suite_find("ci");
    for (size_t i = 0; ci != NULL && i < ci->count; i++)
        if (ci->cases[i].op == op)
            return &ci->cases[i];
    fail_msg("the ci suite has no case of %s", hd_op_name(op));
    return NULL;
}

static op_run run_step(hd_context *ctx, hd_op op, hd_rng *rng)
{
    const hd_bench_case *c = ci_case_of(op);
    const hd_op_desc *d = hd__op(op);
    hd_case_params cp;
    assert_true(hd__case_params_make(c, 7, &cp));
    hd_tensor *t[HD_OP_TENSOR_MAX] = {NULL};
    float *data[HD_OP_TENSOR_MAX] = {NULL};
    const float *in[HD_OP_TENSOR_MAX] = {NULL};
    const float *got[HD_OP_TENSOR_MAX] = {NULL};
    size_t count[HD_OP_TENSOR_MAX] = {0};
    int inputs = 0, outputs = 0;
    for (int i = 0; i < d->tensor_count; i++) {
        if (hd__case_tensor_left_out(op, i))
            continue;
        size_t rows, cols;
        hd__op_tensor_shape(op, i, &c->shape, &rows, &cols);
        count[i] = rows * cols;
        bool output = d->tensors[i].role == HD_ROLE_OUTPUT;
        data[i] = output && !hd__case_reads_output(op)
                      ? sentinels(count[i])
                      : hd_test_random(rng, count[i], output ? -1.0f : d->tensors[i].lo,
                                       output ? 1.0f : d->tensors[i].hi);
        t[i] = hd_test_tensor(ctx, rows, cols, data[i]);
        if (output)
            outputs++;
        else
            in[inputs++] = data[i];
    }
    if (hd__case_reads_output(op)) /* add reads y: its old contents are an input of the check */
        for (int i = 0; i < d->tensor_count; i++)
            if (d->tensors[i].role == HD_ROLE_OUTPUT && data[i] != NULL)
                in[inputs++] = data[i];
    op_run res = {.status = hd__call(ctx, op, (const hd_tensor *const *)t, &cp.p)};
    char err[HD_ERROR_CAPACITY];
    snprintf(err, sizeof err, "%s", hd_context_last_error(ctx));
    int o = 0;
    for (int i = 0; i < d->tensor_count; i++) {
        if (t[i] == NULL)
            continue;
        if (d->tensors[i].role == HD_ROLE_INPUT)
            hd_test_expect_unchanged("step op input", t[i], data[i]);
        else if (res.status == HD_OK)
            got[o++] = hd_test_read(t[i]);
        else if (!hd__case_reads_output(op))
            hd_test_expect_unchanged("step op output after failure", t[i], data[i]);
    }
    if (res.status == HD_OK) {
        char why[200];
        double worst = hd__ref_check_step(op, &c->shape, &cp.p, in, got, why, sizeof why);
        if (!(worst <= 1.0))
            fail_msg("%s: %s", hd_op_name(op), why);
    }
    restore_error(ctx, err);
    for (int i = 0; i < o; i++)
        free((float *)got[i]);
    for (int i = 0; i < d->tensor_count; i++) {
        hd_tensor_destroy(t[i]);
        free(data[i]);
    }
    hd__case_params_free(&cp);
    (void)outputs;
    return res;
}

static op_run run_and_check(hd_context *ctx, hd_op op, uint64_t salt)
{
    static op_run (*const runners[HD_OP_COUNT])(hd_context *, hd_rng *) = {
        [HD_OP_GEMM] = run_plain_gemm,
        [HD_OP_GEMM_BATCHED] = run_batched_gemm,
        [HD_OP_LORA] = run_lora,
        [HD_OP_SOFTMAX] = run_softmax,
        [HD_OP_LAYER_NORM] = run_layer_norm,
        [HD_OP_RMS_NORM] = run_rms_norm,
        [HD_OP_SOFTMAX_BACKWARD] = run_softmax_backward,
        [HD_OP_LAYER_NORM_BACKWARD] = run_layer_norm_backward,
        [HD_OP_RMS_NORM_BACKWARD] = run_rms_norm_backward,
        [HD_OP_LORA_BACKWARD] = run_lora_backward,
    };
    hd_rng rng = hd_test_rng(salt);
    if (hd__op(op)->args == HD_ARGS_STEP)
        return run_step(ctx, op, &rng);
    if (runners[op] == NULL)
        fail_msg("no runner for %s: add one with the op", hd_op_name(op));
    return runners[op](ctx, &rng);
}

/* ---- stand-ins with the real CPU ---- */

static char cache_path[256];

static int setup(void **state)
{
    (void)state;
    return hd_test_cache_dir_create("fallback", cache_path, sizeof cache_path);
}

static int teardown(void **state)
{
    (void)state;
    return hd_test_cache_dir_remove(cache_path);
}

/* Stand-ins with the real CPU, and a calibration under which the host is far slower than the
 * stand-ins' estimates: the cost model tries the device stand-ins first, and the CPU is what
 * the calls fall back to. */
static hd_context *device_first_context(void)
{
    hd_tune_file f;
    hd__tune_file_init(&f);
    f.cal = (hd_tune_calibration){.host_gbps = 10, .cpu_gflops = 1e-3, .cpu_gbps = 1e-3};
    hd_context *ctx = fake_context(true, &f, cache_path);
    hd__tune_file_free(&f);
    return ctx;
}

static void test_fallback_injected_launch_fault_lands_on_the_cpu_for_every_op(void **state)
{
    (void)state;
    setenv("HD_FAULT", "*:launch", 1);
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_context *ctx = device_first_context();
        op_run r = run_and_check(ctx, (hd_op)op, 100 + (uint64_t)op);
        assert_int_equal(r.status, HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        assert_string_equal(hd_context_last_error(ctx), "");
        const char *msg = said(ctx, r);
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
        hd_context *ctx = device_first_context();
        hd_context_set_backend(ctx, (hd_op)op, HD_BACKEND_FUSED);
        hd_shape any = {.dim = {1, 1, 1, 1}};
        bool took[HD_BACKEND_COUNT];
        for (int b = 0; b < HD_BACKEND_COUNT; b++)
            took[b] = b != HD_BACKEND_CPU && hd__backend_takes(ctx, (hd_backend)b, (hd_op)op, &any);
        op_run r = run_and_check(ctx, (hd_op)op, 200 + (uint64_t)op);
        assert_int_equal(r.status, HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        assert_non_null(strstr(said(ctx, r), "fails at migrate"));
        /* Only device backends or plans that take the op were tried and marked (a plan is
         * out of use too once one of its backends is); the CPU ran. */
        int marked = 0;
        for (int b = 0; b < HD_BACKEND_COUNT; b++) {
            if (ctx->backend_unhealthy[b])
                assert_true(took[b]);
            marked += ctx->backend_unhealthy[b];
        }
        assert_true(marked >= 1);
        hd_context_destroy(ctx);
    }
    unsetenv("HD_FAULT");
}

/* A backend that declines (unsupported) is not marked unhealthy; one whose slot reports a
 * device error is; an error that would fail everywhere is returned at once. */
static void test_fallback_slot_errors_decide_health(void **state)
{
    (void)state;
    hd_context *ctx = device_first_context();
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_UNSUPPORTED;
    op_run r = run_and_check(ctx, HD_OP_SOFTMAX, 300);
    assert_int_equal(r.status, HD_OK);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 1);
    assert_false(ctx->backend_unhealthy[HD_BACKEND_FUSED]);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
    assert_non_null(strstr(said(ctx, r), "stand-in backend fails"));

    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_DEVICE;
    r = run_and_check(ctx, HD_OP_RMS_NORM, 301);
    assert_int_equal(r.status, HD_OK);
    assert_true(ctx->backend_unhealthy[HD_BACKEND_FUSED]);
    /* Unhealthy: not tried again. */
    r = run_and_check(ctx, HD_OP_LAYER_NORM, 302);
    assert_int_equal(r.status, HD_OK);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 2);
    hd_context_destroy(ctx);

    /* Any other failure of a backend, its parameters refused (invalid argument after the
     * caller's arguments passed the checks) or host memory it could not get, moves on too:
     * the next backend may succeed. Neither marks the backend unhealthy. */
    static const hd_status others[] = {HD_ERR_INVALID_ARGUMENT, HD_ERR_OUT_OF_MEMORY,
                                       HD_ERR_INTERNAL};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        ctx = device_first_context();
        fake_states[HD_BACKEND_FUSED].fail_with = others[i];
        r = run_and_check(ctx, HD_OP_SOFTMAX, 303 + i);
        assert_int_equal(r.status, HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
        assert_false(ctx->backend_unhealthy[HD_BACKEND_FUSED]);
        hd_context_destroy(ctx);
    }
}

/* A slot that fails after it began writing the outputs: where the call reads what it writes
 * (in place here), the call ends with its error, since the next backend would start from
 * contents that are no longer the caller's; where it does not, the next backend runs it. */
static void test_fallback_stops_where_a_slot_changed_what_the_call_reads(void **state)
{
    (void)state;
    hd_context *ctx = device_first_context();
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_DEVICE;
    fake_states[HD_BACKEND_FUSED].fail_after_writing = true;
    hd_tensor *x = hd_test_tensor(ctx, 3, 5, NULL);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_FUSED), HD_OK);
    assert_int_equal(hd_softmax(ctx, x, x), HD_ERR_DEVICE);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 1);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_AUTO); /* nothing else ran */
    if (strstr(hd_context_last_error(ctx), "undefined") == NULL ||
        strstr(hd_context_last_error(ctx), "stand-in backend fails as told") == NULL)
        fail_msg("the error does not say the outputs are undefined, and why: '%s'",
                 hd_context_last_error(ctx));
    hd_tensor_destroy(x);
    hd_context_destroy(ctx);

    ctx = device_first_context(); /* fused healthy again */
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_DEVICE;
    fake_states[HD_BACKEND_FUSED].fail_after_writing = true;
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_FUSED), HD_OK);
    op_run r = run_and_check(ctx, HD_OP_SOFTMAX, 310); /* y apart from x: checked on the CPU */
    assert_int_equal(r.status, HD_OK);
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 1);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

/* The backend a failed call's message names first: "every backend failed for OP: [NAME...". */
static hd_backend first_named(const char *msg)
{
    const char *at = strstr(msg, ": [");
    if (at == NULL)
        fail_msg("no backend named in '%s'", msg);
    at += 3;
    for (int b = HD_BACKEND_COUNT - 1; b > HD_BACKEND_AUTO; b--) {
        size_t n = strlen(hd_backend_name((hd_backend)b));
        if (strncmp(at, hd_backend_name((hd_backend)b), n) == 0 && (at[n] == ']' || at[n] == ' '))
            return (hd_backend)b;
    }
    fail_msg("no backend named in '%s'", msg);
    return HD_BACKEND_AUTO;
}

/* Where every backend fails, the call's status is the failure of the first backend in the plan
 * (the forced one, or auto's choice), whichever ran last; a backend that declines
 * (HD_ERR_UNSUPPORTED) passes the rule on to the next. Each stand-in fails its own way, as a
 * call too large for every memory did: the host's out of memory on the CPU, the device's on
 * the device backends. */
static void test_fallback_every_backend_failing_returns_the_first_failure(void **state)
{
    (void)state;
    static const hd_status fails[HD_BACKEND_COUNT] = {
        [HD_BACKEND_CPU] = HD_ERR_OUT_OF_MEMORY,
        [HD_BACKEND_CLBLAST] = HD_ERR_DEVICE_OUT_OF_MEMORY,
        [HD_BACKEND_FUSED] = HD_ERR_DEVICE,
    };
    static const hd_op ops[] = {HD_OP_GEMM, HD_OP_GEMM_BATCHED};
    static const hd_backend forced[] = {HD_BACKEND_AUTO, HD_BACKEND_CPU, HD_BACKEND_CLBLAST,
                                        HD_BACKEND_FUSED};
    for (size_t o = 0; o < 2; o++) {
        for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
            hd_context *ctx = fake_context(false, NULL, cache_path);
            for (int b = 0; b < HD_BACKEND_COUNT; b++)
                fake_states[b].fail_with = fails[b];
            if (forced[f] != HD_BACKEND_AUTO)
                assert_int_equal(hd_context_set_backend(ctx, ops[o], forced[f]), HD_OK);
            hd_rng rng = hd_test_rng(700 + 10 * o + f);
            op_run r = run_gemm(ctx, ops[o], &rng);
            const char *msg = said(ctx, r);
            hd_backend first = first_named(msg);
            if (strstr(msg, "; [") == NULL) /* the rule is only tested where two failed */
                fail_msg("%s: one backend tried: '%s'", hd_op_name(ops[o]), msg);
            if (forced[f] != HD_BACKEND_AUTO && fake_states[forced[f]].calls > 0)
                assert_int_equal(first, forced[f]);
            if (r.status != fails[first])
                fail_msg("%s forced to %s: %s, expected %s, the status of %s, the first tried: "
                         "'%s'",
                         hd_op_name(ops[o]), hd_backend_name(forced[f]), hd_status_name(r.status),
                         hd_status_name(fails[first]), hd_backend_name(first), msg);
            hd_context_destroy(ctx);
        }
    }

    /* The first declines: the status is the next one's failure. All decline: unsupported. */
    hd_context *ctx = fake_context(false, NULL, cache_path);
    fake_states[HD_BACKEND_FUSED].fail_with = HD_ERR_UNSUPPORTED;
    fake_states[HD_BACKEND_CLBLAST].fail_with = HD_ERR_DEVICE_OUT_OF_MEMORY;
    fake_states[HD_BACKEND_CPU].fail_with = HD_ERR_OUT_OF_MEMORY;
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM, HD_BACKEND_FUSED), HD_OK);
    hd_rng rng = hd_test_rng(720);
    op_run r = run_gemm(ctx, HD_OP_GEMM, &rng);
    const char *msg = said(ctx, r);
    assert_int_equal(first_named(msg), HD_BACKEND_FUSED);
    const char *second = strstr(msg, "; [") + 3;
    hd_backend next = strncmp(second, "cpu]", 4) == 0 ? HD_BACKEND_CPU : HD_BACKEND_CLBLAST;
    assert_int_equal(r.status, fake_states[next].fail_with);
    hd_context_destroy(ctx);
    ctx = fake_context(false, NULL, cache_path);
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        fake_states[b].fail_with = HD_ERR_UNSUPPORTED;
    r = run_gemm(ctx, HD_OP_GEMM, &rng);
    assert_int_equal(r.status, HD_ERR_UNSUPPORTED);
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
        hd_test_notes_clear();
        op_run r = run_and_check(ctx, (hd_op)op, 500 + (uint64_t)op);
        const char *msg = said(ctx, r);
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
    hd_context *ctx = device_first_context();
    unsetenv("HD_FAULT");
    assert_int_equal(ctx->fault.count, 1);
    assert_true(hd__fault(ctx, HD_BACKEND_CLBLAST, "build"));
    assert_non_null(strstr(hd_context_last_error(ctx), "fails at build"));
    assert_false(hd__fault(ctx, HD_BACKEND_FUSED, "build"));
    assert_false(hd__fault(NULL, HD_BACKEND_FUSED, "build"));
    hd_context_destroy(ctx);
}

/* ---- tuning records the backends reject ---- */

/* The context's message right after run_dims()' call, before reading the output cleared it. */
static char call_message[HD_ERROR_CAPACITY]; /* the last run's error, or its notes */

/* Runs op on dims (the record's order: GEMM m n k, LoRA tokens in out rank, rows rows cols)
 * with random data; returns the status, and checks the result against the float64 reference
 * when it is HD_OK. */
static hd_status run_dims(hd_context *ctx, hd_op op, const size_t *d, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    hd_status s;
    if (op == HD_OP_GEMM) {
        float *a = hd_test_random(&rng, d[0] * d[2], -1, 1),
              *b = hd_test_random(&rng, d[2] * d[1], -1, 1);
        hd_tensor *ta = hd_test_tensor(ctx, d[0], d[2], a),
                  *tb = hd_test_tensor(ctx, d[2], d[1], b);
        hd_tensor *tc = hd_test_tensor(ctx, d[0], d[1], NULL);
        hd_test_notes_clear();
        s = hd_gemm(ctx, false, false, 1.0f, ta, tb, 0.0f, tc);
        snprintf(call_message, sizeof call_message, "%s",
                 s == HD_OK ? hd_test_notes() : hd_context_last_error(ctx));
        if (s == HD_OK) {
            size_t n = d[0] * d[1];
            double *want = hd_test_doubles(n), *bound = hd_test_doubles(n);
            hd_ref_gemm(false, false, d[0], d[1], d[2], 1.0f, a, b, 0.0f, NULL, want, bound);
            float *got = hd_test_read(tc);
            hd_test_expect_gemm_close("gemm", got, want, bound, n, d[2], 4.0);
            free(got);
            free(want);
            free(bound);
        }
        hd_tensor_destroy(ta);
        hd_tensor_destroy(tb);
        hd_tensor_destroy(tc);
        free(a);
        free(b);
    } else if (op == HD_OP_LORA) {
        size_t t = d[0], in = d[1], out = d[2], r = d[3];
        float *x = hd_test_random(&rng, t * in, -1, 1), *w = hd_test_random(&rng, in * out, -1, 1);
        float *a = hd_test_random(&rng, in * r, -1, 1), *b = hd_test_random(&rng, r * out, -1, 1);
        hd_tensor *tx = hd_test_tensor(ctx, t, in, x), *tw = hd_test_tensor(ctx, in, out, w);
        hd_tensor *ta = hd_test_tensor(ctx, in, r, a), *tb = hd_test_tensor(ctx, r, out, b);
        hd_tensor *ty = hd_test_tensor(ctx, t, out, NULL);
        hd_test_notes_clear();
        s = hd_lora_forward(ctx, tx, tw, ta, tb, 0.5f, ty);
        snprintf(call_message, sizeof call_message, "%s",
                 s == HD_OK ? hd_test_notes() : hd_context_last_error(ctx));
        if (s == HD_OK) {
            double *want = hd_test_doubles(t * out), *bound = hd_test_doubles(t * out);
            hd_ref_lora(t, in, out, r, x, w, a, b, 0.5f, want, bound);
            float *got = hd_test_read(ty);
            hd_test_expect_gemm_close("lora", got, want, bound, t * out, in, 8.0);
            free(got);
            free(want);
            free(bound);
        }
        hd_tensor_destroy(tx);
        hd_tensor_destroy(tw);
        hd_tensor_destroy(ta);
        hd_tensor_destroy(tb);
        hd_tensor_destroy(ty);
        free(x);
        free(w);
        free(a);
        free(b);
    } else {
        hd_test_row_op rop = op == HD_OP_SOFTMAX      ? HD_TEST_SOFTMAX
                             : op == HD_OP_LAYER_NORM ? HD_TEST_LAYER_NORM
                                                      : HD_TEST_RMS_NORM;
        size_t n = d[0] * d[1];
        float *x = hd_test_random(&rng, n, -4, 4), *g = hd_test_random(&rng, d[1], 0.5f, 1.5f);
        float *be = hd_test_random(&rng, d[1], -1, 1);
        hd_tensor *tx = hd_test_tensor(ctx, d[0], d[1], x),
                  *ty = hd_test_tensor(ctx, d[0], d[1], NULL);
        hd_tensor *tg = hd_test_tensor(ctx, 1, d[1], g), *tb = hd_test_tensor(ctx, 1, d[1], be);
        hd_test_notes_clear();
        s = hd_test_row_call(ctx, rop, tx, tg, tb, 1e-5f, ty);
        snprintf(call_message, sizeof call_message, "%s",
                 s == HD_OK ? hd_test_notes() : hd_context_last_error(ctx));
        if (s == HD_OK) {
            double *want = hd_test_doubles(n);
            hd_ref_row(rop, d[0], d[1], x, g, be, 1e-5f, want);
            float *got = hd_test_read(ty);
            hd_test_expect_close(hd_test_row_op_name(rop), got, want, n, 1e-5, 1e-4);
            free(got);
            free(want);
        }
        hd_tensor_destroy(tx);
        hd_tensor_destroy(ty);
        hd_tensor_destroy(tg);
        hd_tensor_destroy(tb);
        free(x);
        free(g);
        free(be);
    }
    return s;
}

/* A complete CLBlast parameter set the backend offers for GEMM 64x64x64 (into buf), made
 * illegal when broken: a vector width of 3. Empty where there is no CLBlast. */
static void clblast_set(bool broken, char *buf, size_t size)
{
    buf[0] = '\0';
    hd_context *probe = hd_test_context(false);
    const hd_backend_impl *impl = probe->backends[HD_BACKEND_CLBLAST];
    const char *sets[1];
    hd_shape shape = {.dim = {64, 64, 64}};
    if (impl != NULL && impl->variants(probe->backend_state[HD_BACKEND_CLBLAST], HD_OP_GEMM, &shape,
                                       HD_PART_WHOLE, sets, 1) == 1) {
        snprintf(buf, size, "%s", sets[0]);
        char *vw = strstr(buf, "VWM");
        if (broken && vw != NULL)
            vw[strcspn(vw, "=") + 1] = '3';
    }
    hd_context_destroy(probe);
}

/* A cache file for this machine's device holding the record line; its path in buf. */
static void write_cache_with(char *buf, size_t size, const char *line)
{
    static int serial;
    snprintf(buf, size, "/tmp/hd-fallback-tune-%d-%d.txt", (int)getpid(), serial++);
    hd_context *probe = hd_test_context(false);
    hd_tune_file f;
    hd__tune_file_init(&f);
    hd__tune_context_key(probe, &f.key);
    hd_context_destroy(probe);
    char *header = hd__tune_format(&f);
    assert_non_null(header);
    FILE *fp = fopen(buf, "wb");
    assert_non_null(fp);
    fprintf(fp, "%s%s\n", header, line);
    assert_int_equal(fclose(fp), 0);
    free(header);
}

/* A context reading path, its notes collected (hd_test_notes). */
static hd_context *context_with_cache(const char *path)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = path;
    opt.log = hd_test_log;
    hd_test_notes_clear();
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    return ctx;
}

/* Records of the kind that made valid calls fail: a variant each backend rejects (an unknown
 * token, a value outside the kernel's set, ROWS above WG, an illegal CLBlast set, a
 * non-power-of-two MR for the hybrid plan's epilogue). */
static const struct {
    const char *line;
    hd_op op;
    hd_backend backend;
    size_t dims[4];
} crafted[] = {
    {"gemm 4 64 32 nn fused \"TN=8 -DFOO\" 5 - -", HD_OP_GEMM, HD_BACKEND_FUSED, {4, 64, 32}},
    {"gemm 4 64 32 nn fused \"VEC=2\" 5 - -", HD_OP_GEMM, HD_BACKEND_FUSED, {4, 64, 32}},
    {"softmax 8 256 fused \"VEC=2\" 5 - -", HD_OP_SOFTMAX, HD_BACKEND_FUSED, {8, 256}},
    {"layer_norm 8 256 fused \"WG=256 ROWS=512\" 5 - -",
     HD_OP_LAYER_NORM,
     HD_BACKEND_FUSED,
     {8, 256}},
    {"rms_norm 8 256 fused \"WG=256 ROWS=512\" 5 - -", HD_OP_RMS_NORM, HD_BACKEND_FUSED, {8, 256}},
    {"gemm 64 64 64 nn fused \"BM=16 BN=16 RM=3\" 5 - -",
     HD_OP_GEMM,
     HD_BACKEND_FUSED,
     {64, 64, 64}},
    {"gemm 64 64 64 nn fused \"BM=256 BN=256 BK=64 RM=4 RN=4\" 5 - -",
     HD_OP_GEMM,
     HD_BACKEND_FUSED,
     {64, 64, 64}},
    {"lora 32 64 64 8 fused \"BM=16 BN=16 RM=3\" 5 - -",
     HD_OP_LORA,
     HD_BACKEND_FUSED,
     {32, 64, 64, 8}},
    {"lora 2 64 64 4 fused \"TN=3\" 5 - -", HD_OP_LORA, HD_BACKEND_FUSED, {2, 64, 64, 4}},
    {"gemm 64 64 64 nn clblast \"VWM=3\" 5 - -", HD_OP_GEMM, HD_BACKEND_CLBLAST, {64, 64, 64}},
    {"gemm 64 64 64 nn clblast \"%s\" 5 - -", HD_OP_GEMM, HD_BACKEND_CLBLAST, {64, 64, 64}},
    {"gemm 64 64 64 nn clblast \"GEMMK=1 KWG=32\" 5 - -",
     HD_OP_GEMM,
     HD_BACKEND_CLBLAST,
     {64, 64, 64}},
    {"lora 32 64 64 8 clblast+fused \"MR=3\" 5 - -",
     HD_OP_LORA,
     HD_BACKEND_CLBLAST_FUSED,
     {32, 64, 64, 8}},
};

/* Each crafted record is dropped at load with a note, and the call it names succeeds, chosen
 * freely and with the record's backend forced. */
static void test_fallback_rejected_tuned_variants_are_dropped_at_load(void **state)
{
    (void)state;
    int ran = 0;
    for (size_t i = 0; i < sizeof crafted / sizeof crafted[0]; i++) {
        char path[256], set[HD_TUNE_STRING_MAX], line[768];
        clblast_set(true, set, sizeof set);
        snprintf(line, sizeof line, crafted[i].line, set); /* %s: the illegal complete set */
        write_cache_with(path, sizeof path, line);
        hd_context *ctx = context_with_cache(path);
        if (!hd_context_has_backend(ctx, crafted[i].backend)) {
            hd_context_destroy(ctx);
            unlink(path);
            continue;
        }
        ran++;
        const char *msg = hd_test_notes(); /* a note: the context works without the record */
        if (strstr(msg, "dropped") == NULL)
            fail_msg("'%s': no note at load, message: %s", line, msg);
        hd_shape shape = {.dim = {crafted[i].dims[0], crafted[i].dims[1], crafted[i].dims[2],
                                  crafted[i].dims[3]}};
        assert_null(hd__tune_exact(ctx, crafted[i].op, &shape));
        hd_status s = run_dims(ctx, crafted[i].op, crafted[i].dims, 800 + i);
        if (s != HD_OK)
            fail_msg("'%s' (auto): %s: %s", line, hd_status_name(s), hd_context_last_error(ctx));
        assert_int_equal(hd_context_set_backend(ctx, crafted[i].op, crafted[i].backend), HD_OK);
        s = run_dims(ctx, crafted[i].op, crafted[i].dims, 900 + i);
        if (s != HD_OK)
            fail_msg("'%s' (forced): %s: %s", line, hd_status_name(s), hd_context_last_error(ctx));
        assert_int_equal(hd_context_last_backend(ctx), crafted[i].backend);
        hd_context_destroy(ctx);
        unlink(path);
    }
    print_message("# %d of %zu crafted records had their backend here\n", ran,
                  sizeof crafted / sizeof crafted[0]);
}

/* A variant that passed the load but fails at the call (here: changed in memory after the
 * load, as a device with other limits would refuse it): the call falls back and succeeds,
 * freely chosen and forced, and the record is not used again in this context. */
static void test_fallback_tuned_variant_failing_at_the_call_falls_back_and_is_disabled(void **state)
{
    (void)state;
    static const struct {
        const char *line, *broken;
        hd_op op;
        hd_backend backend;
        size_t dims[4];
        bool forced;
    } cases[] = {
        {"softmax 8 256 fused \"WG=256 ROWS=1\" 5 - -",
         "VEC=2",
         HD_OP_SOFTMAX,
         HD_BACKEND_FUSED,
         {8, 256},
         false},
        {"rms_norm 8 256 fused \"WG=256 ROWS=1\" 5 - -",
         "WG=256 ROWS=512",
         HD_OP_RMS_NORM,
         HD_BACKEND_FUSED,
         {8, 256},
         true},
        {"gemm 64 64 64 nn clblast \"%s\" 5 - -",
         NULL,
         HD_OP_GEMM,
         HD_BACKEND_CLBLAST,
         {64, 64, 64},
         false},
        {"lora 32 64 64 8 clblast+fused \"MR=4\" 5 - -",
         "MR=3",
         HD_OP_LORA,
         HD_BACKEND_CLBLAST_FUSED,
         {32, 64, 64, 8},
         true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], set[HD_TUNE_STRING_MAX], broken_set[HD_TUNE_STRING_MAX], line[768];
        clblast_set(false, set, sizeof set);
        clblast_set(true, broken_set, sizeof broken_set);
        const char *broken = cases[i].broken != NULL ? cases[i].broken : broken_set;
        snprintf(line, sizeof line, cases[i].line, set); /* %s: a legal complete set */
        write_cache_with(path, sizeof path, line);
        hd_context *ctx = context_with_cache(path);
        unlink(path);
        if (!hd_context_has_backend(ctx, cases[i].backend)) {
            hd_context_destroy(ctx);
            continue;
        }
        hd_shape shape = {
            .dim = {cases[i].dims[0], cases[i].dims[1], cases[i].dims[2], cases[i].dims[3]}};
        hd_tune_record *r = (hd_tune_record *)hd__tune_exact(ctx, cases[i].op, &shape);
        if (r == NULL)
            fail_msg("'%s' was not loaded: %s", line, hd_context_last_error(ctx));
        snprintf(r->variant, sizeof r->variant, "%s", broken);
        if (cases[i].forced)
            assert_int_equal(hd_context_set_backend(ctx, cases[i].op, cases[i].backend), HD_OK);
        hd_status s = run_dims(ctx, cases[i].op, cases[i].dims, 1000 + i);
        if (s != HD_OK)
            fail_msg("'%s' with \"%s\": %s: %s", line, broken, hd_status_name(s),
                     hd_context_last_error(ctx));
        if (strstr(call_message, "ran on") == NULL || strstr(call_message, broken) == NULL)
            fail_msg("'%s' with \"%s\": message '%s'", line, broken, call_message);
        assert_null(hd__tune_exact(ctx, cases[i].op, &shape));
        /* The next call runs on the record's backend again, with its defaults. */
        hd_context_set_backend(ctx, cases[i].op, cases[i].backend);
        assert_int_equal(run_dims(ctx, cases[i].op, cases[i].dims, 1100 + i), HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), cases[i].backend);
        hd_context_destroy(ctx);
    }
}

/* What the tuner times is what the load keeps: every variant a backend lists for a shape
 * passes its own check_variant, so that no tuned record is dropped for being a variant the
 * backend runs. */
static void test_fallback_every_listed_variant_passes_the_load_check(void **state)
{
    (void)state;
    static const struct {
        hd_op op;
        hd_shape shape;
    } cases[] = {
        {HD_OP_GEMM, {.dim = {4, 64, 32}}},
        {HD_OP_GEMM, {.dim = {64, 64, 64}}},
        {HD_OP_GEMM, {.dim = {64, 64, 64}, .trans_a = true}},
        {HD_OP_GEMM, {.dim = {100, 70, 30}, .trans_a = true, .trans_b = true}},
        {HD_OP_GEMM_BATCHED, {.dim = {16, 32, 8, 3}}},
        {HD_OP_LORA, {.dim = {2, 64, 64, 4}}},
        {HD_OP_LORA, {.dim = {32, 64, 64, 8}}},
        {HD_OP_LORA, {.dim = {32, 64, 64, 80}}},
        {HD_OP_SOFTMAX, {.dim = {8, 256}}},
        {HD_OP_LAYER_NORM, {.dim = {3, 67}}},
        {HD_OP_RMS_NORM, {.dim = {8, 4096}}},
        {HD_OP_SOFTMAX_BACKWARD, {.dim = {64, 1024}}},
        {HD_OP_LAYER_NORM_BACKWARD, {.dim = {5, 300}}},
        {HD_OP_RMS_NORM_BACKWARD, {.dim = {64, 4096}}},
        {HD_OP_LORA_BACKWARD, {.dim = {1, 64, 48, 4}}},
        {HD_OP_LORA_BACKWARD, {.dim = {70, 64, 96, 8}}},
    };
    hd_context *ctx = hd_test_context(false);
    int checked = 0;
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++) { /* plans of two included */
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (!hd__backend_takes(ctx, (hd_backend)b, cases[i].op, &cases[i].shape))
                continue;
            const char *listed[64];
            size_t n =
                hd__backend_variants(ctx, (hd_backend)b, cases[i].op, &cases[i].shape, listed, 64);
            for (size_t v = 0; v < n; v++) {
                char copy[HD_TUNE_STRING_MAX]; /* the strings may live in the state */
                snprintf(copy, sizeof copy, "%s", listed[v]);
                char key[96];
                hd__shape_text(cases[i].op, &cases[i].shape, key, sizeof key);
                if (hd__backend_check_variant(ctx, (hd_backend)b, cases[i].op, &cases[i].shape,
                                              copy) != HD_OK)
                    fail_msg("%s %s: listed variant \"%s\" fails the check: %s",
                             hd_backend_name((hd_backend)b), key, copy, hd_context_last_error(ctx));
                checked++;
            }
        }
    }
    print_message("# %d listed variants checked\n", checked);
    hd_context_destroy(ctx);
}

/* The hybrid plan's second stage refuses its parameters: CLBlast must not have written
 * y = x*W first. Run on the plan alone, without the dispatcher's fallback. */
static void test_fallback_hybrid_plan_refusal_leaves_y_untouched(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context_on("opencl");
    if (!hd_context_has_backend(ctx, HD_BACKEND_CLBLAST_FUSED)) {
        hd_context_destroy(ctx);
        skip();
    }
    enum { T = 32, IN = 64, OUT = 48, R = 8 };
    hd_rng rng = hd_test_rng(1200);
    float *x = hd_test_random(&rng, T * IN, -1, 1), *w = hd_test_random(&rng, IN * OUT, -1, 1);
    float *a = hd_test_random(&rng, IN * R, -1, 1), *b = hd_test_random(&rng, R * OUT, -1, 1);
    float *y = sentinels(T * OUT);
    hd_tensor *tx = hd_test_tensor(ctx, T, IN, x), *tw = hd_test_tensor(ctx, IN, OUT, w);
    hd_tensor *ta = hd_test_tensor(ctx, IN, R, a), *tb = hd_test_tensor(ctx, R, OUT, b);
    hd_tensor *ty = hd_test_tensor(ctx, T, OUT, y);
    static const char *const refused[] = {"MR=3", "WG=100", "VEC=2", "FOO=1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        hd_call call;
        const hd_tensor *t[] = {tx, tw, ta, tb, ty};
        hd_op_params p = {.scale = 0.5f};
        assert_int_equal(hd__call_prepare(ctx, HD_OP_LORA, t, &p, &call), HD_OK);
        /* y lives on the device only, as after a device op wrote it: a write there is a
         * write the caller sees. */
        assert_int_equal(hd__tensor_to_place(ty, HD_PLACE_DEVICE), HD_OK);
        hd__tensor_written(ty, HD_PLACE_DEVICE);
        hd_status s = hd__call_run_on(ctx, HD_BACKEND_CLBLAST_FUSED, &call, refused[i]);
        if (s == HD_OK)
            fail_msg("clblast+fused accepted \"%s\"", refused[i]);
        hd_test_expect_unchanged("y after the epilogue refused", ty, y);
    }
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
    hd_context_destroy(ctx);
}

/* LoRA's backward on the fused backend is five products: one that refuses its parameters
 * (dx's variant, the third product) refuses the call before any product ran, so gradients
 * that accumulate are left exactly as they were, for the next backend to add to once. */
static void test_fallback_lora_backward_refusal_leaves_the_gradients_untouched(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        hd_context_destroy(ctx);
        skip();
    }
    enum { T = 19, IN = 37, OUT = 29, R = 5 };
    const size_t n[8] = {T * IN, IN * OUT, IN * R, R * OUT, T * OUT, T * IN, IN * R, R * OUT};
    const size_t rows[8] = {T, IN, IN, R, T, T, IN, R},
                 cols[8] = {IN, OUT, R, OUT, OUT, IN, R, OUT};
    hd_rng rng = hd_test_rng(1300);
    float *data[8];
    hd_tensor *t[8];
    for (int i = 0; i < 8; i++) {
        data[i] = hd_test_random(&rng, n[i], -1, 1);
        t[i] = hd_test_tensor(ctx, rows[i], cols[i], data[i]);
    }
    /* the gradients live on the device only, as after a device op wrote them */
    for (int i = 5; i < 8; i++) {
        assert_int_equal(hd__tensor_to_place(t[i], HD_PLACE_DEVICE), HD_OK);
        hd__tensor_written(t[i], HD_PLACE_DEVICE);
    }
    static const char *const refused[] = {"BM=64 BN=64 BK=8 RM=3 RN=4", "BM=64 BN=48", "TN=4 KS=64",
                                          "BM=64 FOO=1"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        hd_call call;
        hd_op_params p = {.scale = 0.5f, .accumulate = true};
        const hd_tensor *args[8] = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]};
        assert_int_equal(hd__call_prepare(ctx, HD_OP_LORA_BACKWARD, args, &p, &call), HD_OK);
        if (hd__call_run_on(ctx, HD_BACKEND_FUSED, &call, refused[i]) == HD_OK)
            fail_msg("fused LoRA backward accepted \"%s\"", refused[i]);
        hd_test_expect_unchanged("dx after a refusal", t[5], data[5]);
        hd_test_expect_unchanged("dA after a refusal", t[6], data[6]);
        hd_test_expect_unchanged("dB after a refusal", t[7], data[7]);
    }
    for (int i = 0; i < 8; i++) {
        hd_tensor_destroy(t[i]);
        free(data[i]);
    }
    hd_context_destroy(ctx);
}

/* A layout without records of its own takes the default layout's nearest record: in PyTorch's
 * layout a variant that this layout's dx cannot run leaves the call to the fused backend's
 * defaults, with a note and no error, rather than refusing it. */
static void test_fallback_lora_backward_variant_of_another_layout_runs_the_defaults(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        hd_context_destroy(ctx);
        skip();
    }
    enum { T = 7, IN = 37, OUT = 29, R = 5 };
    /* x, W (out x in), A (r x in), B (out x r), dy, dx, dA (r x in), dB (out x r) */
    const size_t rows[8] = {T, OUT, R, OUT, T, T, R, OUT},
                 cols[8] = {IN, IN, IN, R, OUT, IN, IN, R};
    hd_tensor *t[8];
    hd_rng rng = hd_test_rng(1400);
    for (int i = 0; i < 8; i++) {
        float *d = hd_test_random(&rng, rows[i] * cols[i], -1, 1);
        t[i] = hd_test_tensor(ctx, rows[i], cols[i], d);
        free(d);
    }
    hd_call call;
    hd_op_params p = {.scale = 0.5f, .lora_layout = HD_LORA_LAYOUT_PYTORCH};
    const hd_tensor *args[8] = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]};
    assert_int_equal(hd__call_prepare(ctx, HD_OP_LORA_BACKWARD, args, &p, &call), HD_OK);
    hd_test_notes_clear();
    assert_int_equal(hd__call_run_on(ctx, HD_BACKEND_FUSED, &call, "BM=64 BN=64 BK=8 RM=3 RN=4"),
                     HD_OK);
    assert_string_equal(hd_context_last_error(ctx), "");
    assert_non_null(strstr(hd_test_notes(), "runs its defaults"));
    for (int i = 0; i < 8; i++)
        hd_tensor_destroy(t[i]);
    hd_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback_injected_launch_fault_lands_on_the_cpu_for_every_op),
        cmocka_unit_test(test_fallback_injected_migrate_fault_moves_on),
        cmocka_unit_test(test_fallback_slot_errors_decide_health),
        cmocka_unit_test(test_fallback_stops_where_a_slot_changed_what_the_call_reads),
        cmocka_unit_test(test_fallback_every_backend_failing_returns_the_first_failure),
        cmocka_unit_test(test_fallback_real_backends_survive_a_launch_fault_for_every_op),
        cmocka_unit_test(test_fallback_probe_fault_removes_the_backend),
        cmocka_unit_test(test_fallback_fault_spec_ignores_malformed_items),
        cmocka_unit_test(test_fallback_rejected_tuned_variants_are_dropped_at_load),
        cmocka_unit_test(
            test_fallback_tuned_variant_failing_at_the_call_falls_back_and_is_disabled),
        cmocka_unit_test(test_fallback_every_listed_variant_passes_the_load_check),
        cmocka_unit_test(test_fallback_hybrid_plan_refusal_leaves_y_untouched),
        cmocka_unit_test(test_fallback_lora_backward_refusal_leaves_the_gradients_untouched),
        cmocka_unit_test(test_fallback_lora_backward_variant_of_another_layout_runs_the_defaults),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
