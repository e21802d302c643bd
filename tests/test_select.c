/* Backend selection: the order of the rules (forced, tuned, nearest, cost model, default),
 * nearest-shape lookup, migration cost, tuned variants reaching the backend, and the explain
 * call. Stand-in backends (tests/fake_backends.h) make it independent of the machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fake_backends.h"

static char cache_path[256];

static int setup(void **state)
{
    (void)state;
    return hd_test_cache_dir_create("select", cache_path, sizeof cache_path);
}

static int teardown(void **state)
{
    (void)state;
    return hd_test_cache_dir_remove(cache_path);
}

static hd_plan plan_of(hd_context *ctx, hd_op op, size_t d0, size_t d1, size_t d2, size_t d3,
                       const hd_call_tensors *io)
{
    hd_shape s = {.dim = {d0, d1, d2, d3}};
    hd_plan plan;
    hd__select(ctx, op, &s, io, &plan);
    return plan;
}

/* A file with one tuned record per rule under test. */
static void standard_file(hd_tune_file *f)
{
    hd__tune_file_init(f);
    hd_tune_record r[] = {
        fake_record(HD_OP_SOFTMAX, 64, 1024, 0, 0, HD_BACKEND_CLBLAST_FUSED, 5, HD_BACKEND_AUTO,
                    0), /* a backend without a softmax slot: never trusted */
        fake_record(HD_OP_SOFTMAX, 256, 1024, 0, 0, HD_BACKEND_CPU, 5, HD_BACKEND_FUSED, 20),
        fake_record(HD_OP_LAYER_NORM, 64, 1024, 0, 0, HD_BACKEND_CPU, 5, HD_BACKEND_FUSED, 20),
        fake_record(HD_OP_GEMM, 1, 4096, 4096, 0, HD_BACKEND_CLBLAST, 40, HD_BACKEND_FUSED, 3),
        fake_record(HD_OP_LORA, 8, 2048, 2048, 8, HD_BACKEND_CLBLAST_FUSED, 30, HD_BACKEND_FUSED,
                    10),
    };
    snprintf(r[3].variant, sizeof r[3].variant, "KWG=16 MWG=32");
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        assert_int_equal(hd__tune_put(f, &r[i]), HD_OK);
}

static void test_select_forced_beats_tuned(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    hd_context *ctx = fake_context(false, &f, cache_path);
    hd_plan p = plan_of(ctx, HD_OP_LAYER_NORM, 64, 1024, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_TUNED);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);

    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LAYER_NORM, HD_BACKEND_FUSED), HD_OK);
    p = plan_of(ctx, HD_OP_LAYER_NORM, 64, 1024, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_FORCED);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    assert_int_equal(p.order[p.count - 1], HD_BACKEND_CPU); /* the others stay as fallbacks */

    /* A forced backend that does not take the shape gives way to the next rule. */
    p = plan_of(ctx, HD_OP_LAYER_NORM, 3, FAKE_MAX_COLS + 1, 0, 0, NULL);
    assert_int_not_equal(p.rule, HD_SELECT_FORCED);
    for (int i = 0; i < p.count; i++)
        assert_int_not_equal(p.order[i], HD_BACKEND_FUSED);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

static void test_select_tuned_beats_nearest_and_carries_its_variant(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    hd_tune_record close =
        fake_record(HD_OP_GEMM, 1, 4000, 4096, 0, HD_BACKEND_FUSED, 30, HD_BACKEND_AUTO, 0);
    assert_int_equal(hd__tune_put(&f, &close), HD_OK);
    hd_context *ctx = fake_context(false, &f, cache_path);
    hd_plan p = plan_of(ctx, HD_OP_GEMM, 1, 4096, 4096, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_TUNED);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST);
    assert_non_null(p.variant[0]);
    assert_string_equal(p.variant[0], "KWG=16 MWG=32");
    for (int i = 1; i < p.count; i++)
        assert_null(p.variant[i]);

    /* Nearest lends its backend, not its variant. */
    p = plan_of(ctx, HD_OP_GEMM, 1, 4100, 4096, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_NEAREST);
    assert_null(p.variant[0]);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

static void test_select_nearest_shape_within_the_limit(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    hd_context *ctx = fake_context(false, &f, cache_path);
    /* 200x1000 is near 256x1024 (CPU); 64x1024's record names a backend without the slot. */
    hd_plan p = plan_of(ctx, HD_OP_SOFTMAX, 200, 1000, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_NEAREST);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    char reason[512];
    hd__plan_reason(&p, reason, sizeof reason);
    assert_non_null(strstr(reason, "softmax 256x1024"));

    double d = -1;
    hd_shape s = {.dim = {200, 1000}};
    const hd_tune_record *r = hd__tune_nearest(ctx, HD_OP_SOFTMAX, &s, &d);
    assert_non_null(r);
    assert_true(d > 0.0 && d < 2 * HD_TUNE_NEAR_DIM);

    /* Four times the rows is beyond the limit in one dimension: not trusted; the cost model
     * decides. */
    p = plan_of(ctx, HD_OP_SOFTMAX, 1024, 1024, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);

    /* GEMM transposes must match. */
    hd_shape t = {.dim = {1, 4096, 4096}, .trans_a = true};
    assert_null(hd__tune_nearest(ctx, HD_OP_GEMM, &t, &d));
    assert_null(hd__tune_exact(ctx, HD_OP_GEMM, &t));
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

static void test_select_unhealthy_backend_is_skipped_by_every_rule(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    hd_context *ctx = fake_context(false, &f, cache_path);
    hd__backend_mark_unhealthy(ctx, HD_BACKEND_CLBLAST);
    hd_plan p = plan_of(ctx, HD_OP_GEMM, 1, 4096, 4096, 0, NULL);
    assert_int_not_equal(p.rule, HD_SELECT_TUNED);
    for (int i = 0; i < p.count; i++)
        assert_int_not_equal(p.order[i], HD_BACKEND_CLBLAST);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* A fast GPU's calibration: the cost model puts large GEMMs on CLBlast, one-token ones on the
 * fused kernels. */
static const hd_tune_calibration fast_gpu = {.launch_us = 5,
                                             .copy_gbps = 2000,
                                             .host_gbps = 25,
                                             .gemm_gflops = 50000,
                                             .cpu_gflops = 100,
                                             .cpu_gbps = 20};

static void test_select_cost_model_beats_default_order(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    /* A device with a slow launch and a fast CPU: the model sends a large softmax to the CPU,
     * where the default order would use the fused kernels. */
    f.cal = (hd_tune_calibration){.launch_us = 5000,
                                  .copy_gbps = 10,
                                  .host_gbps = 10,
                                  .gemm_gflops = 100,
                                  .cpu_gflops = 1000,
                                  .cpu_gbps = 1000};
    hd_context *ctx = fake_context(false, &f, cache_path);
    hd_plan p = plan_of(ctx, HD_OP_SOFTMAX, 4096, 4096, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    assert_true(p.model_us[HD_BACKEND_CPU] < p.model_us[HD_BACKEND_FUSED]);
    assert_true(p.model_us[HD_BACKEND_CLBLAST] < 0.0); /* no softmax slot: not estimated */
    /* Nothing estimates a call it cannot take, nor "auto", for the tools that ask any name. */
    hd_shape rows = {.dim = {4096, 4096}};
    assert_true(hd__backend_estimate_us(ctx, HD_BACKEND_CLBLAST_FUSED, HD_OP_SOFTMAX, &rows,
                                        &f.cal) < 0.0);
    assert_true(hd__backend_estimate_us(ctx, HD_BACKEND_AUTO, HD_OP_SOFTMAX, &rows, &f.cal) < 0.0);
    assert_true(hd__backend_estimate_us(ctx, HD_BACKEND_CLBLAST, HD_OP_SOFTMAX, &rows,
                                        &f.cal) < 0.0);
    hd_context_destroy(ctx);

    /* The reverse device: a fast GPU. A large GEMM goes to CLBlast, a one-token GEMM to the
     * fused GEMV-style kernel, both by the model. */
    f.cal = fast_gpu;
    ctx = fake_context(false, &f, cache_path);
    p = plan_of(ctx, HD_OP_GEMM, 2048, 2048, 2048, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST);
    p = plan_of(ctx, HD_OP_GEMM, 1, 4096, 4096, 0, NULL);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    p = plan_of(ctx, HD_OP_LORA, 512, 2048, 2048, 16, NULL);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST_FUSED);
    /* Every candidate is in the plan, in model order, CPU included (the fused stand-in takes
     * at most 16 tokens: the plan, CLBlast and the CPU). */
    for (int i = 1; i < p.count; i++)
        assert_true(p.model_us[p.order[i - 1]] <= p.model_us[p.order[i]]);
    assert_int_equal(p.count, 3);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* Rule 4 scales each backend's estimate by the record of the op that timed it nearest the
 * shape: far from any record (a factor of 4 in each dimension), the fast-GPU model above puts
 * CLBlast first for a 2048^3 GEMM, but a record at 8192^3 measured the fused kernel at less
 * than half its estimate and CLBlast above its own. A closer record of other transposes does
 * not count where one of the shape's own exists. */
static void test_select_cost_model_scaled_by_the_records(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    f.cal = fast_gpu;
    hd_context *ctx = fake_context(false, &f, cache_path);
    hd_plan raw = plan_of(ctx, HD_OP_GEMM, 2048, 2048, 2048, 0, NULL);
    assert_int_equal(raw.rule, HD_SELECT_COST);
    assert_int_equal(raw.order[0], HD_BACKEND_CLBLAST);
    hd_context_destroy(ctx);

    hd_tune_record far =
        fake_record(HD_OP_GEMM, 8192, 8192, 8192, 0, HD_BACKEND_FUSED, 20000, HD_BACKEND_CLBLAST,
                    25);
    hd_tune_record other = fake_record(HD_OP_GEMM, 1024, 1024, 1024, 0, HD_BACKEND_CLBLAST, 50,
                                       HD_BACKEND_FUSED, 300);
    other.shape.trans_b = true;
    assert_int_equal(hd__tune_put(&f, &far), HD_OK);
    assert_int_equal(hd__tune_put(&f, &other), HD_OK);
    ctx = fake_context(false, &f, cache_path);
    hd_plan p = plan_of(ctx, HD_OP_GEMM, 2048, 2048, 2048, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    /* each estimate times measured / estimated at 8192^3 */
    hd_shape at = far.shape, here = {.dim = {2048, 2048, 2048}};
    double fused_scale = 20000.0 / fake_fused_estimate(NULL, HD_OP_GEMM, &at, HD_PART_WHOLE,
                                                       &f.cal),
           clblast_scale = 25000.0 / fake_clblast_estimate(NULL, HD_OP_GEMM, &at, HD_PART_WHOLE,
                                                           &f.cal);
    double fused_us = fused_scale * fake_fused_estimate(NULL, HD_OP_GEMM, &here,
                                                        HD_PART_WHOLE, &f.cal),
           clblast_us = clblast_scale * fake_clblast_estimate(NULL, HD_OP_GEMM, &here,
                                                              HD_PART_WHOLE, &f.cal);
    assert_true(fabs(p.model_us[HD_BACKEND_FUSED] - fused_us) < 1e-6 * fused_us);
    assert_true(fabs(p.model_us[HD_BACKEND_CLBLAST] - clblast_us) < 1e-6 * clblast_us);
    /* 4096^3: the 8192^3 record again; with B transposed the nearest record is its own
     * (1024^3, CLBlast far ahead) */
    p = plan_of(ctx, HD_OP_GEMM, 4096, 4096, 4096, 0, NULL);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    hd_shape nt = {.dim = {4096, 4096, 4096}, .trans_b = true};
    hd__select(ctx, HD_OP_GEMM, &nt, NULL, &p);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST);
    /* the CPU, which no record timed, keeps its own estimate */
    assert_true(fabs(p.model_us[HD_BACKEND_CPU] -
                     fake_cpu_estimate(NULL, HD_OP_GEMM, &nt, HD_PART_WHOLE, &f.cal)) < 1e-6);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* Without a tuning cache the backends' estimates at their default rates decide, moving the
 * inputs included: small work on host data stays on the host, large work goes to the device
 * backend that estimates itself fastest. Only where no backend estimates does the default
 * order apply. */
static void test_select_without_a_cache_the_default_rates_decide(void **state)
{
    (void)state;
    hd_context *ctx = fake_context(false, NULL, cache_path);
    fake_fused.place = fake_clblast.place = HD_PLACE_DEVICE;
    hd_tensor_state xs = {.host_valid = true}, ys = {0};
    hd_tensor x = {.ctx = ctx, .rows = 512, .cols = 512, .state = &xs};
    hd_tensor y = {.ctx = ctx, .rows = 512, .cols = 512, .state = &ys};
    hd_call_tensors io = {.inputs = {&x}, .input_count = 1, .outputs = {&y}, .output_count = 1};
    hd_plan p = plan_of(ctx, HD_OP_SOFTMAX, 512, 512, 0, 0, &io);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_false(p.calibrated);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    assert_true(p.migrate_us[HD_BACKEND_FUSED] > 0.0); /* x goes up, priced at the default link */
    assert_int_equal(p.order[p.count - 1], HD_BACKEND_CPU);
    char reason[512];
    hd__plan_reason(&p, reason, sizeof reason);
    assert_non_null(strstr(reason, "default rates"));

    /* 4x4: a launch and the copy cost more than the work on the host. */
    x.rows = x.cols = y.rows = y.cols = 4;
    p = plan_of(ctx, HD_OP_SOFTMAX, 4, 4, 0, 0, &io);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    assert_true(p.model_us[HD_BACKEND_CPU] < p.model_us[HD_BACKEND_FUSED]);
    /* The same call with x already on the device: no copy to pay, the device runs it. */
    xs.device_valid = true;
    xs.host_valid = false;
    p = plan_of(ctx, HD_OP_SOFTMAX, 4, 4, 0, 0, &io);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);

    /* Both device backends take a large GEMM; their own estimates put CLBlast first. */
    p = plan_of(ctx, HD_OP_GEMM, 2048, 2048, 2048, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_COST);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST);
    assert_int_equal(p.order[1], HD_BACKEND_FUSED);
    assert_int_equal(p.order[p.count - 1], HD_BACKEND_CPU);
    p = plan_of(ctx, HD_OP_LORA, 512, 1024, 1024, 8, NULL);
    assert_int_equal(p.order[0], HD_BACKEND_CLBLAST_FUSED);

    /* No backend estimates: the default order, the device backends first unless the work is
     * small and on the host. */
    hd_backend_impl *impls[] = {&fake_cpu, &fake_fused, &fake_clblast};
    double (*estimates[3])(void *, hd_op, const hd_shape *, hd_part, const hd_tune_calibration *);
    for (int i = 0; i < 3; i++) {
        estimates[i] = impls[i]->estimate_us;
        impls[i]->estimate_us = NULL;
    }
    p = plan_of(ctx, HD_OP_SOFTMAX, 512, 512, 0, 0, NULL);
    assert_int_equal(p.rule, HD_SELECT_DEFAULT);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    assert_int_equal(p.order[p.count - 1], HD_BACKEND_CPU);
    xs.device_valid = false;
    xs.host_valid = true;
    p = plan_of(ctx, HD_OP_SOFTMAX, 4, 4, 0, 0, &io);
    assert_int_equal(p.rule, HD_SELECT_DEFAULT);
    assert_true(p.small);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    for (int i = 0; i < 3; i++)
        impls[i]->estimate_us = estimates[i];
    fake_fused.place = fake_clblast.place = HD_PLACE_HOST;
    hd_context_destroy(ctx);
}

/* The tuned winner lives on the device, the inputs on the host: over a slow link the CPU,
 * measured 20% slower with resident inputs, wins once the copy is counted. With the inputs
 * already on the device the tuned winner stays. */
static void test_select_migration_cost_changes_the_choice(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    hd_tune_record r =
        fake_record(HD_OP_SOFTMAX, 512, 512, 0, 0, HD_BACKEND_FUSED, 100, HD_BACKEND_CPU, 20);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    f.cal.host_gbps = 1.0; /* 1 MiB takes ~1000 us */
    hd_context *ctx = fake_context(false, &f, cache_path);
    fake_fused.place = HD_PLACE_DEVICE;

    hd_tensor_state xs = {.host_valid = true}, ys = {0};
    hd_tensor x = {.ctx = ctx, .rows = 512, .cols = 512, .state = &xs};
    hd_tensor y = {.ctx = ctx, .rows = 512, .cols = 512, .state = &ys};
    hd_call_tensors io = {.inputs = {&x}, .input_count = 1, .outputs = {&y}, .output_count = 1};
    hd_plan p = plan_of(ctx, HD_OP_SOFTMAX, 512, 512, 0, 0, &io);
    assert_int_equal(p.rule, HD_SELECT_TUNED);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    assert_true(p.migrate_us[HD_BACKEND_FUSED] > 500.0);
    assert_true(p.migrate_us[HD_BACKEND_CPU] == 0.0);
    char reason[512];
    hd__plan_reason(&p, reason, sizeof reason);
    assert_non_null(strstr(reason, "moving the inputs"));

    xs.device_valid = true; /* resident on the device (and the host) */
    p = plan_of(ctx, HD_OP_SOFTMAX, 512, 512, 0, 0, &io);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    xs.host_valid = false; /* only on the device: now the CPU would pay */
    p = plan_of(ctx, HD_OP_SOFTMAX, 512, 512, 0, 0, &io);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    assert_true(p.migrate_us[HD_BACKEND_CPU] > 500.0);
    fake_fused.place = HD_PLACE_HOST;
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* A backend on the host reading an input held on the device alone waits for its download: a
 * round trip through the queue (the calibrated launch time) besides the bytes, for each such
 * input. Uploads are queued ahead of the kernel and cost their bytes. */
static void test_select_download_costs_a_round_trip(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    f.cal = (hd_tune_calibration){.launch_us = 40, .copy_gbps = 2000, .host_gbps = 10,
                                  .gemm_gflops = 50000, .cpu_gflops = 100, .cpu_gbps = 20};
    hd_context *ctx = fake_context(false, &f, cache_path);
    fake_fused.place = HD_PLACE_DEVICE;
    hd_tensor_state xs = {.device_valid = true}, gs = {.device_valid = true},
                    bs = {.host_valid = true}, ys = {0};
    hd_tensor x = {.ctx = ctx, .rows = 1, .cols = 4096, .state = &xs};
    hd_tensor g = {.ctx = ctx, .rows = 1, .cols = 4096, .state = &gs};
    hd_tensor b = {.ctx = ctx, .rows = 1, .cols = 4096, .state = &bs};
    hd_tensor y = {.ctx = ctx, .rows = 1, .cols = 4096, .state = &ys};
    hd_call_tensors io = {.inputs = {&x, &g, &b}, .input_count = 3, .outputs = {&y},
                          .output_count = 1};
    hd_plan p = plan_of(ctx, HD_OP_LAYER_NORM, 1, 4096, 0, 0, &io);
    double bytes_us = 2 * 4096 * 4 / (10 * 1e3); /* x and gamma down, at 10 GB/s */
    assert_true(fabs(p.migrate_us[HD_BACKEND_CPU] - (bytes_us + 2 * 40.0)) < 1e-6);
    /* beta goes up: its bytes alone */
    assert_true(fabs(p.migrate_us[HD_BACKEND_FUSED] - 4096 * 4 / (10 * 1e3)) < 1e-6);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);
    fake_fused.place = HD_PLACE_HOST;
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* What staying cost a call is charged to every tensor the call read that was not at the
 * other place before the call, by bytes: the inputs, and an output the call also reads (GEMM's
 * C with beta != 0), so that such an output too moves once staying has paid for its copy. */
static void test_select_regret_is_charged_to_read_outputs_too(void **state)
{
    (void)state;
    hd_context *ctx = fake_context(false, NULL, cache_path);
    hd_tensor_state as = {.host_valid = true}, bs = {.device_valid = true},
                    cs = {.host_valid = true};
    hd_tensor a = {.ctx = ctx, .rows = 8, .cols = 16, .state = &as};
    hd_tensor b = {.ctx = ctx, .rows = 16, .cols = 8, .state = &bs};
    hd_tensor c = {.ctx = ctx, .rows = 8, .cols = 8, .state = &cs};
    hd_call_tensors io = {.inputs = {&a, &b}, .input_count = 2, .outputs = {&c},
                          .output_count = 1, .output_read = true};
    hd_plan p = {.regret_us = 90.0, .regret_place = HD_PLACE_DEVICE};
    double share[HD_PLAN_READ_MAX];
    hd__plan_regret_shares(&p, &io, share);
    hd__plan_account(&p, &io, share);
    /* a: 512 bytes to move, c: 256; b is on the device already */
    assert_true(fabs(as.stay_us - 60.0) < 1e-9);
    assert_true(fabs(cs.stay_us - 30.0) < 1e-9);
    assert_true(bs.stay_us == 0.0);

    /* c valid at both places before the call costs the device nothing: a takes the regret,
     * though the call, writing c on the host, leaves c on the host alone by the account */
    as.stay_us = cs.stay_us = 0.0;
    cs.device_valid = true;
    hd__plan_regret_shares(&p, &io, share);
    cs.device_valid = false; /* the call wrote c where it ran */
    hd__plan_account(&p, &io, share);
    assert_true(fabs(as.stay_us - 90.0) < 1e-9);
    assert_true(cs.stay_us == 0.0);

    io.output_read = false; /* an output only written is not charged */
    hd__plan_regret_shares(&p, &io, share);
    hd__plan_account(&p, &io, share);
    assert_true(fabs(as.stay_us - 180.0) < 1e-9);
    assert_true(cs.stay_us == 0.0);
    hd_context_destroy(ctx);
}

/* Through the public call: the tuned backend runs, receives the tuned variant, and
 * hd_context_last_backend() names it, the hybrid plan included. */
static void test_select_public_call_runs_the_tuned_backend(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    hd_context *ctx = fake_context(false, &f, cache_path);

    hd_tensor *a = hd_test_tensor(ctx, 1, 4096, NULL), *b = hd_test_tensor(ctx, 4096, 4096, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 1, 4096, NULL);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CLBLAST);
    assert_int_equal(fake_states[HD_BACKEND_CLBLAST].calls, 1);
    assert_string_equal(fake_states[HD_BACKEND_CLBLAST].variant, "KWG=16 MWG=32");
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(c);

    hd_tensor *x = hd_test_tensor(ctx, 8, 2048, NULL), *w = hd_test_tensor(ctx, 2048, 2048, NULL);
    hd_tensor *la = hd_test_tensor(ctx, 2048, 8, NULL), *lb = hd_test_tensor(ctx, 8, 2048, NULL);
    hd_tensor *y = hd_test_tensor(ctx, 8, 2048, NULL);
    assert_int_equal(hd_lora_forward(ctx, x, w, la, lb, 0.5f, y), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CLBLAST_FUSED);
    /* The plan's stages: CLBlast's GEMM with its defaults, then the fused epilogue. */
    assert_int_equal(fake_states[HD_BACKEND_CLBLAST].calls, 2);
    assert_string_equal(fake_states[HD_BACKEND_CLBLAST].variant, "");
    assert_int_equal(fake_states[HD_BACKEND_FUSED].calls, 1);
    hd_tensor_destroy(x);
    hd_tensor_destroy(w);
    hd_tensor_destroy(la);
    hd_tensor_destroy(lb);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

static void test_select_explain_names_rule_candidates_and_record(void **state)
{
    (void)state;
    hd_tune_file f;
    standard_file(&f);
    /* the tuner preferred the device over a CPU 2.5 % faster: a negative margin */
    hd_tune_record preferred =
        fake_record(HD_OP_GEMM, 64, 64, 64, 0, HD_BACKEND_CLBLAST, 27, HD_BACKEND_CPU, -2.5);
    assert_int_equal(hd__tune_put(&f, &preferred), HD_OK);
    hd_context *ctx = fake_context(false, &f, cache_path);
    char buf[2048];
    const size_t gemm[4] = {1, 4096, 4096, 0};
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, gemm, buf, sizeof buf), HD_OK);
    assert_non_null(strstr(buf, "gemm 1x4096x4096 nn: chosen clblast by rule 'tuned'"));
    assert_non_null(strstr(buf, "KWG=16 MWG=32"));
    assert_non_null(strstr(buf, "3.0% ahead of fused"));
    assert_non_null(strstr(buf, "candidates in order: clblast"));
    const size_t small[4] = {64, 64, 64, 0};
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, small, buf, sizeof buf), HD_OK);
    assert_non_null(strstr(buf, "2.5% behind (preferred over) cpu"));

    const size_t near[4] = {200, 1000};
    assert_int_equal(hd_context_explain(ctx, HD_OP_SOFTMAX, near, buf, sizeof buf), HD_OK);
    assert_non_null(strstr(buf, "rule 'nearest'"));
    assert_non_null(strstr(buf, "clblast: does not take this shape"));

    const size_t wide[4] = {2, FAKE_MAX_COLS + 1};
    assert_int_equal(hd_context_explain(ctx, HD_OP_RMS_NORM, wide, buf, sizeof buf), HD_OK);
    assert_non_null(strstr(buf, "fused: does not take this shape"));

    hd__backend_mark_unhealthy(ctx, HD_BACKEND_FUSED);
    assert_int_equal(hd_context_explain(ctx, HD_OP_RMS_NORM, near, buf, sizeof buf), HD_OK);
    assert_non_null(strstr(buf, "fused: unhealthy"));

    /* Truncation is safe; bad arguments are reported. */
    char tiny[8];
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, gemm, tiny, sizeof tiny), HD_OK);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, NULL, buf, sizeof buf),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, gemm, NULL, 10), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, gemm, buf, 0), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_explain(ctx, HD_OP_COUNT, gemm, buf, sizeof buf),
                     HD_ERR_INVALID_ARGUMENT);
    const size_t bad_trans[4] = {1, 1, 1, 4};
    assert_int_equal(hd_context_explain(ctx, HD_OP_GEMM, bad_trans, buf, sizeof buf),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_explain(NULL, HD_OP_GEMM, gemm, buf, sizeof buf),
                     HD_ERR_INVALID_ARGUMENT);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

/* A repeated call plans once; hd_context_set_backend, a backend marked unhealthy and a cache
 * reload each drop the memoized plans, and the next call plans anew. */
static void test_select_memo_answers_repeats_and_is_invalidated(void **state)
{
    (void)state;
    hd_context *ctx = fake_context(false, NULL, cache_path);
    hd_tensor_state xs = {.host_valid = true}, ys = {0};
    hd_tensor x = {.ctx = ctx, .rows = 512, .cols = 512, .state = &xs};
    hd_tensor y = {.ctx = ctx, .rows = 512, .cols = 512, .state = &ys};
    hd_call_tensors io = {.inputs = {&x}, .input_count = 1, .outputs = {&y}, .output_count = 1};
    hd_shape s = {.dim = {512, 512}};
    unsigned long hits, misses;
    hd_plan p;
    for (int i = 0; i < 3; i++)
        hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    hd__plans_stats(ctx, &hits, &misses);
    assert_int_equal(misses, 1);
    assert_int_equal(hits, 2);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);

    /* Where the inputs live is part of the key. */
    xs.device_valid = true;
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    hd__plans_stats(ctx, &hits, &misses);
    assert_int_equal(misses, 2);
    xs.device_valid = false;

    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_CPU), HD_OK);
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    assert_int_equal(p.rule, HD_SELECT_FORCED);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_AUTO), HD_OK);
    /* The first plan's key again: planned anew (a miss), not answered from before the
     * forcing, since the forced backend is part of the key and setting it drops every plan. */
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    hd__plans_stats(ctx, &hits, &misses);
    assert_int_equal(misses, 4);
    assert_int_equal(hits, 2);
    assert_int_equal(p.order[0], HD_BACKEND_FUSED);

    hd__backend_mark_unhealthy(ctx, HD_BACKEND_FUSED);
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    hd__plans_stats(ctx, &hits, &misses);
    assert_int_equal(misses, 5);
    for (int i = 0; i < p.count; i++)
        assert_int_not_equal(p.order[i], HD_BACKEND_FUSED);
    hd_context_destroy(ctx);

    /* A cache reload: the record written since is used at once. */
    ctx = fake_context(false, NULL, cache_path);
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    assert_int_equal(p.rule, HD_SELECT_COST);
    hd_tune_file f;
    hd__tune_file_init(&f);
    hd_tune_record r =
        fake_record(HD_OP_SOFTMAX, 512, 512, 0, 0, HD_BACKEND_CPU, 10, HD_BACKEND_AUTO, 0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    hd__tune_context_key(ctx, &f.key);
    char msg[256];
    remove(cache_path);
    assert_int_equal(hd__tune_save(cache_path, &f, msg, sizeof msg), HD_OK);
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = cache_path;
    hd__tune_close(ctx);
    assert_int_equal(hd__tune_open(ctx, &opt), HD_OK);
    hd__select_memo(ctx, HD_OP_SOFTMAX, &s, &io, &p);
    assert_int_equal(p.rule, HD_SELECT_TUNED);
    assert_int_equal(p.order[0], HD_BACKEND_CPU);
    hd_context_destroy(ctx);
    hd__tune_file_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_select_forced_beats_tuned),
        cmocka_unit_test(test_select_memo_answers_repeats_and_is_invalidated),
        cmocka_unit_test(test_select_tuned_beats_nearest_and_carries_its_variant),
        cmocka_unit_test(test_select_nearest_shape_within_the_limit),
        cmocka_unit_test(test_select_unhealthy_backend_is_skipped_by_every_rule),
        cmocka_unit_test(test_select_cost_model_beats_default_order),
        cmocka_unit_test(test_select_without_a_cache_the_default_rates_decide),
        cmocka_unit_test(test_select_migration_cost_changes_the_choice),
        cmocka_unit_test(test_select_cost_model_scaled_by_the_records),
        cmocka_unit_test(test_select_download_costs_a_round_trip),
        cmocka_unit_test(test_select_public_call_runs_the_tuned_backend),
        cmocka_unit_test(test_select_regret_is_charged_to_read_outputs_too),
        cmocka_unit_test(test_select_explain_names_rule_candidates_and_record),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
