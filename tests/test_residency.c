/* Residency that pays for itself: a single call on host data stays on the host; a loop of
 * calls moves its input to the device once staying has cost one copy; hd_tensor_prefetch()
 * places a tensor up front. Runs on this machine's OpenCL device (PoCL in CI) with a tuning
 * cache whose record and calibration make the copy dear and the device fast. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "dispatch/tune_table.h"
#include "dispatch/context.h"
#include "dispatch/select.h"
#include "tests/testlib.h"

enum { ROWS = 256, COLS = 256 };

static char cache_path[256];

/* The model's times of the contexts below, in microseconds. */
#define DEVICE_US 100.0
#define CPU_US    400.0

/* A device context whose cache says: softmax ROWS x COLS takes DEVICE_US on the fused kernels
 * and CPU_US on the CPU, and one copy of its input takes about copy_us. NULL without a
 * device. */
static hd_context *context_with_copy(double copy_us)
{
    hd_context *ctx = hd_test_context(false);
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        hd_context_destroy(ctx);
        return NULL;
    }
    hd_tune_file f;
    hd__tune_file_init(&f);
    hd_tune_record r = {.op = HD_OP_SOFTMAX,
                        .shape = {.dim = {ROWS, COLS}},
                        .backend = HD_BACKEND_FUSED,
                        .median_us = DEVICE_US,
                        .runner_up = HD_BACKEND_CPU,
                        .margin_pct = (CPU_US / DEVICE_US - 1.0) * 100.0};
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    f.cal.host_gbps = ROWS * COLS * 4.0 / copy_us / 1e3; /* bytes / copy_us, in GB/s */
    hd__tune_context_key(ctx, &f.key);
    char msg[256];
    remove(cache_path);
    assert_int_equal(hd__tune_save(cache_path, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = cache_path;
    hd__tune_close(ctx);
    assert_int_equal(hd__tune_open(ctx, &opt), HD_OK);
    return ctx;
}

static hd_context *dear_copy_context(void)
{
    return context_with_copy(1000.0);
}

static hd_tensor *host_written(hd_context *ctx, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    float *x = hd_test_random(&rng, ROWS * COLS, -4, 4);
    hd_tensor *t = hd_test_tensor(ctx, ROWS, COLS, x);
    free(x);
    return t;
}

/* y holds softmax(in) (ROWS x COLS) within the float64 reference's tolerance. */
static void expect_softmax_of(const hd_tensor *y, const float *in, const char *what)
{
    float *got = hd_test_read(y);
    double *want = hd_test_doubles(ROWS * COLS);
    hd_ref_softmax(ROWS, COLS, in, want);
    hd_test_expect_close(what, got, want, ROWS * COLS, 1e-6, 1e-4);
    free(got);
    free(want);
}

static void test_residency_single_call_on_host_data_stays_on_the_host(void **state)
{
    (void)state;
    hd_context *ctx = dear_copy_context();
    if (ctx == NULL)
        skip();
    hd_tensor *x = host_written(ctx, 1), *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    hd_test_expect_ran_on(ctx, hd_softmax(ctx, x, y), HD_BACKEND_CPU, "one call");
    assert_false(x->state->device_valid);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* 300 us of regret a call against a 1000 us copy: the fourth call has paid for the copy. */
static void test_residency_loop_on_host_data_ends_on_the_device(void **state)
{
    (void)state;
    hd_context *ctx = dear_copy_context();
    if (ctx == NULL)
        skip();
    hd_tensor *x = host_written(ctx, 2), *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    hd_backend ran[8];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
        ran[i] = hd_context_last_backend(ctx);
    }
    assert_int_equal(ran[0], HD_BACKEND_CPU);
    assert_int_equal(ran[7], HD_BACKEND_FUSED);
    int moved_at = 0;
    while (ran[moved_at] == HD_BACKEND_CPU)
        moved_at++;
    print_message("# moved to the device at call %d\n", moved_at + 1);
    assert_true(moved_at >= 3 && moved_at <= 5);
    for (int i = moved_at; i < 8; i++)
        assert_int_equal(ran[i], HD_BACKEND_FUSED);
    assert_true(x->state->device_valid && x->state->host_valid);
    /* The results are the reference's wherever they ran. */
    float *in = hd_test_read(x);
    expect_softmax_of(y, in, "softmax after the move");
    free(in);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* Without a tuning cache the backends' default rates price the copy: for a softmax whose
 * one call costs less on the host than the copy and the device's call, but more than the
 * device's call alone, a single call stays on the host and a loop moves to the device after
 * a few calls. The shape is found from the plans themselves (the first row count where one
 * call stays and staying pays for the copy within 8 calls), so the test holds whatever the
 * default rates are, as long as such a shape exists. */
static void test_residency_without_a_cache_a_loop_moves_after_a_few_calls(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        hd_context_destroy(ctx);
        skip();
    }
    size_t rows = 0;
    float *zeros = calloc(4096 * COLS, sizeof *zeros);
    assert_non_null(zeros);
    for (size_t r = 1; r <= 4096 && rows == 0; r += r / 8 + 1) {
        hd_tensor *x = hd_test_tensor(ctx, r, COLS, zeros); /* written: valid on the host */
        hd_tensor *y = hd_test_tensor(ctx, r, COLS, NULL);
        hd_shape s = {.dim = {r, COLS}};
        hd_call_tensors io = {.inputs = {x}, .input_count = 1, .outputs = {y}, .output_count = 1};
        hd_plan p;
        hd__select(ctx, HD_OP_SOFTMAX, &s, &io, &p);
        assert_int_equal(p.rule, HD_SELECT_COST);
        assert_false(p.calibrated);
        /* On the host with the copy counted, and what staying costs a call (the host's time
         * over the device's with x in place) pays for the copy within 8 calls. */
        double regret = p.resident_us[HD_BACKEND_CPU] - p.resident_us[HD_BACKEND_FUSED];
        if (p.order[0] == HD_BACKEND_CPU && p.resident_us[HD_BACKEND_FUSED] >= 0.0 &&
            regret * 8.0 >= p.migrate_us[HD_BACKEND_FUSED])
            rows = r;
        hd_tensor_destroy(x);
        hd_tensor_destroy(y);
    }
    free(zeros);
    if (rows == 0)
        fail_msg("no softmax of %d columns stays on the host for one call and moves for a loop "
                 "under the default rates", COLS);
    print_message("# %zu x %d\n", rows, COLS);
    hd_rng rng = hd_test_rng(5);
    float *in = hd_test_random(&rng, rows * COLS, -4, 4);
    hd_tensor *x = hd_test_tensor(ctx, rows, COLS, in), *y = hd_test_tensor(ctx, rows, COLS, NULL);
    hd_backend ran[16];
    for (int i = 0; i < 16; i++) {
        assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
        ran[i] = hd_context_last_backend(ctx);
    }
    assert_int_equal(ran[0], HD_BACKEND_CPU);
    assert_int_equal(ran[15], HD_BACKEND_FUSED);
    assert_true(x->state->device_valid);
    float *got = hd_test_read(y);
    double *want = hd_test_doubles(rows * COLS);
    hd_ref_softmax(rows, COLS, in, want);
    hd_test_expect_close("softmax after the move", got, want, rows * COLS, 1e-6, 1e-4);
    free(got);
    free(want);
    free(in);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* The break-even rule as a bound: over any sequence of rounds, each a write of the input from
 * the host and some calls on it, what the scheduler's choices cost in the model (the CPU's
 * calls, the copies, the device's calls) is at most twice the better of copying every round's
 * contents and never copying, after every call, whether the copy is cheap, dear or far dearer
 * than a call's regret, and whether a round holds one call or many. */
static void test_residency_rounds_cost_at_most_twice_the_better_of_copying_and_staying(void **state)
{
    (void)state;
    static const double copies_us[] = {150.0, 1000.0, 3000.0};
    static const int round_calls[] = {1, 3, 16};
    enum { ROUNDS = 12 };
    hd_rng rng = hd_test_rng(20);
    float *data = hd_test_random(&rng, ROWS * COLS, -4, 4);
    for (size_t c = 0; c < sizeof copies_us / sizeof copies_us[0]; c++)
        for (size_t r = 0; r < sizeof round_calls / sizeof round_calls[0]; r++) {
            double copy_us = copies_us[c];
            hd_context *ctx = context_with_copy(copy_us);
            if (ctx == NULL)
                skip();
            hd_tensor *x = host_written(ctx, 10 + c), *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
            double spent = 0.0;
            int calls = 0, device_calls = 0;
            for (int round = 1; round <= ROUNDS; round++) {
                if (round > 1)
                    assert_int_equal(hd_tensor_write(x, data), HD_OK);
                bool resident = false; /* this round's contents on the device */
                for (int n = 0; n < round_calls[r]; n++) {
                    assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
                    calls++;
                    bool on_device = hd_context_last_backend(ctx) == HD_BACKEND_FUSED;
                    spent += on_device ? DEVICE_US + (resident ? 0.0 : copy_us) : CPU_US;
                    resident |= on_device;
                    device_calls += on_device;
                    double always = round * copy_us + calls * DEVICE_US, never = calls * CPU_US;
                    double better = always < never ? always : never;
                    if (spent > 2.0 * better)
                        fail_msg("copy %.0f us, %d call(s) a round, round %d, call %d: the "
                                 "choices cost %.0f us, over twice %.0f us",
                                 copy_us, round_calls[r], round, calls, spent, better);
                }
            }
            /* Rounds long enough to pay for the copy move each time once staying has cost as
             * much (ceil(copy / regret) calls), the call after at the latest. */
            int stay = (int)ceil(copy_us / (CPU_US - DEVICE_US)) + 1;
            if (round_calls[r] > stay)
                assert_true(device_calls >= ROUNDS * (round_calls[r] - stay));
            expect_softmax_of(y, data, "softmax of the rewritten input");
            hd_tensor_destroy(x);
            hd_tensor_destroy(y);
            hd_context_destroy(ctx);
        }
    free(data);
}

/* Contents written again after the last ones moved start their accounting afresh: a single
 * call on them stays on the host (moving at once would cost a copy dearer than the call's
 * regret, round after round), and a round of calls moves them once staying has paid for the
 * copy, as the first round did. */
static void test_residency_rewritten_input_pays_for_its_copy_again(void **state)
{
    (void)state;
    hd_context *ctx = dear_copy_context();
    if (ctx == NULL)
        skip();
    hd_rng rng = hd_test_rng(22);
    float *data = hd_test_random(&rng, ROWS * COLS, -4, 4);
    hd_tensor *x = host_written(ctx, 21), *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    for (int i = 0; i < 8; i++)
        assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_FUSED);
    assert_int_equal(hd_tensor_write(x, data), HD_OK);
    assert_false(x->state->device_valid);
    hd_test_expect_ran_on(ctx, hd_softmax(ctx, x, y), HD_BACKEND_CPU,
                          "a single call on contents written again after a move");
    for (int i = 0; i < 8; i++)
        assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_FUSED);
    expect_softmax_of(y, data, "softmax of the rewritten input");
    free(data);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

static void test_residency_prefetch_places_a_tensor_up_front(void **state)
{
    (void)state;
    hd_context *ctx = dear_copy_context();
    if (ctx == NULL)
        skip();
    hd_tensor *x = host_written(ctx, 3), *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    assert_int_equal(hd_tensor_prefetch(x), HD_OK);
    assert_true(x->state->device_valid);
    hd_test_expect_ran_on(ctx, hd_softmax(ctx, x, y), HD_BACKEND_FUSED, "after prefetch");
    assert_int_equal(hd_tensor_prefetch(NULL), HD_ERR_INVALID_ARGUMENT);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* GEMM with k = 0 or alpha = 0 has no product to compute: C = beta*C where C lives, without
 * fetching a device-resident C to the host, on the device backend named (the other one's
 * probe failed: HD_FAULT). */
static void scale_only_stays_on_the_device(hd_backend on, const char *fault)
{
    setenv("HD_FAULT", fault, 1);
    hd_context *ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    if (!hd_context_has_backend(ctx, on)) {
        hd_context_destroy(ctx);
        return; /* that backend is not built (the test below skips where neither is) */
    }
    float cv[12] = {1, -2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, got[12];
    hd_tensor *a = hd_test_tensor(ctx, 3, 0, NULL), *b = hd_test_tensor(ctx, 0, 4, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 3, 4, cv);
    hd_tensor *a2 = hd_test_tensor(ctx, 3, 5, NULL), *b2 = hd_test_tensor(ctx, 5, 4, NULL);
    assert_int_equal(hd_tensor_prefetch(c), HD_OK);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 2.0f, c), HD_OK); /* k = 0 */
    assert_int_equal(hd_context_last_backend(ctx), on);
    assert_true(c->state->device_valid && !c->state->host_valid);
    assert_int_equal(hd_gemm(ctx, false, false, 0.0f, a2, b2, -0.5f, c), HD_OK); /* alpha = 0 */
    assert_int_equal(hd_context_last_backend(ctx), on);
    assert_false(c->state->host_valid);
    assert_int_equal(hd_tensor_read(c, got), HD_OK);
    for (int i = 0; i < 12; i++)
        assert_true(got[i] == -cv[i]);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 0.0f, c), HD_OK); /* beta = 0 */
    assert_int_equal(hd_tensor_read(c, got), HD_OK);
    for (int i = 0; i < 12; i++)
        assert_true(got[i] == 0.0f);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(a2);
    hd_tensor_destroy(b2);
    hd_tensor_destroy(c);
    hd_context_destroy(ctx);
}

static void test_residency_gemm_scale_only_stays_on_the_device(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    bool device = hd_context_has_backend(ctx, HD_BACKEND_FUSED) ||
                  hd_context_has_backend(ctx, HD_BACKEND_CLBLAST);
    hd_context_destroy(ctx);
    if (!device)
        skip();
    scale_only_stays_on_the_device(HD_BACKEND_FUSED, "clblast:probe-device");
    scale_only_stays_on_the_device(HD_BACKEND_CLBLAST, "fused:probe-device");

    /* The device's scale failing (a fault at launch), a device-resident C is scaled on the
     * host, with a note; with no backend on the host either, the call returns the device's
     * error, and says where it failed. */
    setenv("HD_FAULT", "fused:launch,clblast:launch", 1);
    ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    float cf[6] = {1, -2, 3, 4, 5, 6}, gf[6];
    hd_tensor *fa = hd_test_tensor(ctx, 2, 0, NULL), *fb = hd_test_tensor(ctx, 0, 3, NULL);
    hd_tensor *fc = hd_test_tensor(ctx, 2, 3, cf);
    assert_int_equal(hd_tensor_prefetch(fc), HD_OK);
    hd_test_notes_clear();
    hd_test_expect_ran_on(ctx, hd_gemm(ctx, false, false, 1.0f, fa, fb, -1.0f, fc), HD_BACKEND_CPU,
                          "scale-only GEMM after the device's scale failed");
    assert_non_null(strstr(hd_test_notes(), "injected fault"));
    assert_int_equal(hd_tensor_read(fc, gf), HD_OK);
    for (int i = 0; i < 6; i++)
        assert_true(gf[i] == -cf[i]);
    hd_tensor_destroy(fa);
    hd_tensor_destroy(fb);
    hd_tensor_destroy(fc);
    hd_context_destroy(ctx);
    setenv("HD_FAULT", "cpu:probe,fused:launch,clblast:launch", 1);
    ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    fa = hd_test_tensor(ctx, 2, 0, NULL), fb = hd_test_tensor(ctx, 0, 3, NULL);
    fc = hd_test_tensor(ctx, 2, 3, cf);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, fa, fb, 2.0f, fc), HD_ERR_DEVICE);
    assert_non_null(strstr(hd_context_last_error(ctx), "scaling the output failed on"));
    hd_tensor_destroy(fa);
    hd_tensor_destroy(fb);
    hd_tensor_destroy(fc);
    hd_context_destroy(ctx);

    /* Without a backend on the host, C written from the host is scaled on the device. */
    setenv("HD_FAULT", "cpu:probe", 1);
    ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    float cv[6] = {1, -2, 3, 4, 5, 6}, got[6];
    hd_tensor *a = hd_test_tensor(ctx, 2, 0, NULL), *b = hd_test_tensor(ctx, 0, 3, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 2, 3, cv);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 3.0f, c), HD_OK);
    assert_true(hd_context_last_backend(ctx) == HD_BACKEND_FUSED ||
                hd_context_last_backend(ctx) == HD_BACKEND_CLBLAST);
    assert_int_equal(hd_tensor_read(c, got), HD_OK);
    for (int i = 0; i < 6; i++)
        assert_true(got[i] == 3.0f * cv[i]);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(c);
    hd_context_destroy(ctx);
}

/* Pinned host copies ($HD_PINNED): with it on, a tensor of 1 MiB or more takes its host copy
 * from the device (pinned where the driver pins), a smaller one malloc's; it reads as zeros
 * before any write, contents go to the device and back unchanged, and a device op's output
 * lands in it. With it off, no tensor is pinned. */
static void test_residency_pinned_host_copies(void **state)
{
    (void)state;
    const char *before = getenv("HD_PINNED");
    char saved[16] = "";
    if (before != NULL)
        snprintf(saved, sizeof saved, "%s", before);
    for (int on = 1; on >= 0; on--) {
        setenv("HD_PINNED", on ? "1" : "0", 1);
        hd_context *ctx = hd_test_context(false);
        if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
            hd_context_destroy(ctx);
            continue;
        }
        enum { R = 512, C = 1031 }; /* 2 MiB and a bit */
        float *v = hd_test_floats(R * C), *got = hd_test_floats(R * C);
        for (size_t i = 0; i < (size_t)R * C; i++)
            v[i] = (float)(i % 977) - 488.0f;
        hd_tensor *x = hd_test_tensor(ctx, R, C, NULL);
        hd_tensor *small = hd_test_tensor(ctx, 3, 5, NULL);
        assert_int_equal(hd_tensor_read(x, got), HD_OK); /* zeros before any write */
        for (size_t i = 0; i < (size_t)R * C; i++)
            assert_true(got[i] == 0.0f);
        assert_int_equal(hd_tensor_write(x, v), HD_OK);
        assert_int_equal(hd_tensor_write(small, v), HD_OK);
        assert_int_equal(x->state->host_pinned, on == 1);
        assert_false(small->state->host_pinned);
        assert_int_equal(hd_tensor_prefetch(x), HD_OK);
        assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM, HD_BACKEND_FUSED), HD_OK);
        hd_tensor *one = hd_test_tensor(ctx, 1, 1, (float[]){1.0f});
        hd_tensor *xs = hd_test_tensor(ctx, (size_t)R * C, 1, NULL);
        assert_int_equal(hd_tensor_write(xs, v), HD_OK);
        /* y = x scaled by the GEMM of an R*C x 1 column by 1 x 1 (2) on the device, read into
         * y's host copy */
        hd_tensor *col = hd_test_tensor(ctx, (size_t)R * C, 1, NULL);
        hd_test_expect_ran_on(ctx, hd_gemm(ctx, false, false, 2.0f, xs, one, 0.0f, col),
                              HD_BACKEND_FUSED, "pinned");
        assert_int_equal(hd_tensor_read(col, got), HD_OK);
        assert_int_equal(col->state->host_pinned, on == 1);
        for (size_t i = 0; i < (size_t)R * C; i++)
            assert_true(got[i] == 2.0f * v[i]);
        x->state->host_valid = false; /* the device copy alone: read it back */
        assert_int_equal(hd_tensor_read(x, got), HD_OK);
        assert_memory_equal(got, v, sizeof(float) * R * C);
        hd_tensor_destroy(x);
        hd_tensor_destroy(small);
        hd_tensor_destroy(one);
        hd_tensor_destroy(xs);
        hd_tensor_destroy(col);
        free(v);
        free(got);
        hd_context_destroy(ctx);
    }
    if (before != NULL)
        setenv("HD_PINNED", saved, 1);
    else
        unsetenv("HD_PINNED");
}

static int setup(void **state)
{
    (void)state;
    return hd_test_cache_dir_create("residency", cache_path, sizeof cache_path);
}

static int teardown(void **state)
{
    (void)state;
    return hd_test_cache_dir_remove(cache_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residency_single_call_on_host_data_stays_on_the_host),
        cmocka_unit_test(test_residency_loop_on_host_data_ends_on_the_device),
        cmocka_unit_test(test_residency_without_a_cache_a_loop_moves_after_a_few_calls),
        cmocka_unit_test(
            test_residency_rounds_cost_at_most_twice_the_better_of_copying_and_staying),
        cmocka_unit_test(test_residency_rewritten_input_pays_for_its_copy_again),
        cmocka_unit_test(test_residency_prefetch_places_a_tensor_up_front),
        cmocka_unit_test(test_residency_gemm_scale_only_stays_on_the_device),
        cmocka_unit_test(test_residency_pinned_host_copies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
