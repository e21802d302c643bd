/* The benchmark's own parts: the suites as the issue lists them, the measurement loop, case
 * instances and their reference check, and the gap table (the reader of its files:
 * test_bench_results.c). The tool itself runs every suite on PoCL in the bench-* meson tests
 * (bench/meson.build). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/calibrate.h"
#include "autotune/measure.h"
#include "autotune/reference.h"
#include "bench/adamw_case.h"
#include "bench/case.h"
#include "bench/compare.h"
#include "bench/results_file.h"
#include "autotune/suites.h"
#include "dispatch/tools.h"
#include "tests/testlib.h"

#ifndef HD_BENCH_TEST_DATA
#define HD_BENCH_TEST_DATA "tests/data/bench"
#endif

static void test_suites_match_the_issue(void **state)
{
    (void)state;
    const hd_bench_suite *seed = hd__bench_suite_find("seed");
    const hd_bench_suite *train = hd__bench_suite_find("train");
    const hd_bench_suite *gemm = hd__bench_suite_find("gemm");
    assert_non_null(seed);
    assert_non_null(train);
    assert_non_null(gemm);
    assert_non_null(hd__bench_suite_find("ci"));
    assert_null(hd__bench_suite_find("nope"));
    assert_int_equal(seed->count, 11); /* 3 widths + 4 more ranks, 3 row ops, PyTorch layout */
    assert_int_equal(train->count, 8); /* LoRA in both layouts, 6 row ops */
    assert_int_equal(gemm->count, 13); /* 64..8192 squares, three token counts, 2 batched */
    char name[64];
    hd__bench_case_name(&seed->cases[2], name, sizeof name);
    assert_string_equal(name, "lora 1x2048x2048 r8");
    hd__bench_case_name(&train->cases[0], name, sizeof name);
    assert_string_equal(name, "lora 4096x4096x4096 r16");
    hd__bench_case_name(&gemm->cases[10], name, sizeof name);
    assert_string_equal(name, "gemm 8192x4096x4096");
    hd__bench_case_name(&gemm->cases[12], name, sizeof name);
    assert_string_equal(name, "gemm_batched 512x64x512 x12");
    hd__bench_case_name(&seed->cases[10], name, sizeof name);
    assert_string_equal(name, "lora 1x1024x1024 r8 pt");
    assert_int_equal(seed->cases[10].shape.lora_layout, HD_LORA_LAYOUT_PYTORCH);
}

/* The step suite: Llama-3-8B's step at 2048 tokens, then a small model's at 512, 14 ops each,
 * then AdamW over each model's LoRA factors; its cases' names as the peers join them. */
static void test_step_suite_holds_both_models(void **state)
{
    (void)state;
    const hd_bench_suite *step = hd__bench_suite_find("step");
    assert_non_null(step);
    assert_int_equal(step->count, 30);
    static const char *const names[] = {
        "swiglu 2048x14336",
        "swiglu_backward 2048x14336",
        "add 2048x4096",
        "add_rms_norm 2048x4096",
        "add_rms_norm_backward 2048x4096",
        "rope 2048x4096 p64",
        "rope 2048x1024 p64",
        "attention 2048 h32 k8 d128",
        "attention_backward 2048 h32 k8 d128",
        "cross_entropy 2048x128256",
        "linear_cross_entropy 2048x4096 v128256",
        "embedding 2048x4096 v128256",
        "gelu 2048x14336",
        "gelu_backward 2048x14336",
    };
    char name[64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        hd__bench_case_name(&step->cases[i], name, sizeof name);
        assert_string_equal(name, names[i]);
    }
    hd__bench_case_name(&step->cases[14 + 7], name, sizeof name);
    assert_string_equal(name, "attention 512 h16 k4 d64");
    hd__bench_case_name(&step->cases[14 + 10], name, sizeof name);
    assert_string_equal(name, "linear_cross_entropy 512x1024 v32000");
    hd__bench_case_name(&step->cases[28], name, sizeof name);
    assert_string_equal(name, "adamw 2x4096x1024x14336 r16");
    hd__bench_case_name(&step->cases[29], name, sizeof name);
    assert_string_equal(name, "adamw 2x1024x256x2816 r16");
    /* "all" runs it, the default suites do not */
    const hd_bench_suite *all[HD_BENCH_SUITES_MAX];
    size_t n = hd__bench_suites_named("all", all), found = 0;
    for (size_t i = 0; i < n; i++)
        found += all[i] == step;
    assert_int_equal(found, 1);
}

static void test_suites_names_are_unique(void **state)
{
    (void)state;
    size_t n;
    const hd_bench_suite *s = hd__bench_suites(&n);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < s[i].count; j++)
            for (size_t k = j + 1; k < s[i].count; k++) {
                char a[64], b[64];
                hd__bench_case_name(&s[i].cases[j], a, sizeof a);
                hd__bench_case_name(&s[i].cases[k], b, sizeof b);
                assert_string_not_equal(a, b);
            }
}

static void test_case_figures_gemm_and_rows(void **state)
{
    (void)state;
    hd_bench_case g = {.op = HD_OP_GEMM, .shape = {.dim = {2, 3, 5}}};
    assert_true(hd__bench_case_flops(&g) == 60.0);
    assert_true(hd__bench_case_bytes(&g) == 4.0 * (10 + 15 + 6));
    hd_bench_case s = {.op = HD_OP_SOFTMAX, .shape = {.dim = {64, 1024}}};
    assert_true(hd__bench_case_bytes(&s) == 8.0 * 64 * 1024);
    hd_bench_case l = {.op = HD_OP_LORA, .shape = {.dim = {1, 4, 6, 2}}};
    assert_true(hd__bench_case_elements(&l) == 4 + 24 + 8 + 12 + 6);
}

/* Llama-3-8B's AdamW case: A (16 x in) and B (out x 16) of q, k, v, o, gate, up and down, for
 * each of its two layers: 28 tensors, 2.6 M parameters; AdamW's figures per parameter. */
static void test_adamw_case_steps_the_lora_factors_of_its_model(void **state)
{
    (void)state;
    const hd_bench_case *c = &hd__bench_suite_find("step")->cases[28];
    assert_true(hd__bench_case_is_adamw(c));
    assert_string_equal(hd__bench_case_op_name(c), "adamw");
    static const size_t layer[HD_BENCH_ADAMW_LAYER_TENSORS][2] = {
        {16, 4096}, {4096, 16}, {16, 4096},  {1024, 16}, {16, 4096},  {1024, 16},  {16, 4096},
        {4096, 16}, {16, 4096}, {14336, 16}, {16, 4096}, {14336, 16}, {16, 14336}, {4096, 16},
    };
    size_t rows[28], cols[28];
    assert_int_equal(hd__bench_adamw_tensors(c, rows, cols, 28), 28);
    for (size_t k = 0; k < 28; k++) {
        assert_int_equal(rows[k], layer[k % HD_BENCH_ADAMW_LAYER_TENSORS][0]);
        assert_int_equal(cols[k], layer[k % HD_BENCH_ADAMW_LAYER_TENSORS][1]);
    }
    /* a shorter array takes the first tensors; the count is still every one */
    size_t few_rows[3] = {0}, few_cols[3] = {0};
    assert_int_equal(hd__bench_adamw_tensors(c, few_rows, few_cols, 3), 28);
    assert_int_equal(few_rows[2], 16);
    assert_int_equal(few_cols[2], 4096);
    double n = 2 * 16 * (9 * 4096 + 2 * 1024 + 3 * 14336);
    assert_true(hd__bench_adamw_parameters(c) == n);
    assert_true(n == 2621440.0);
    assert_true(hd__bench_case_elements(c) == 4 * n);
    assert_true(hd__bench_case_bytes(c) == 28 * n);
    assert_true(hd__bench_case_flops(c) == 17 * n);
    assert_false(hd__bench_case_compute_bound(c));
    assert_false(hd__bench_case_has_host_mode(c));
}

/* A shapes file's AdamW line reads as the suite's case, held once; each misspelling is refused
 * with a message that says what is wrong. */
static void test_case_parse_reads_adamw_and_refuses_bad_spellings(void **state)
{
    (void)state;
    const hd_bench_case *llama = &hd__bench_suite_find("step")->cases[28];
    hd_bench_case c;
    char why[512] = "";
    assert_true(hd__bench_case_parse(" adamw 2\t4096 1024 14336 16 ", &c, why, sizeof why));
    assert_true(hd__bench_case_is_adamw(&c));
    assert_memory_equal(c.shape.dim, llama->shape.dim, sizeof c.shape.dim);
    assert_int_equal(c.rank, 16);
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"adamw 2 4096 1024 14336", "adamw takes 5 dimensions (layers hidden kv_dim mlp rank)"},
        {"adamw", "adamw takes 5 dimensions"},
        {"adamw 2 4096 1024 14336 16 pt", "expected adamw and its 5 dimensions only"},
        {"adamw 0 4096 1024 14336 16",
         "dimension 1 (layers) '0' is not a whole number from 1 to 1024"},
        {"adamw 1025 4096 1024 14336 16", "dimension 1 (layers) '1025' is not a whole number"},
        {"adamw 2 4096 1k 14336 16", "dimension 3 (kv_dim) '1k' is not a whole number"},
        {"adamw 2 4096 1024 14336 0",
         "dimension 5 (rank) '0' is not a whole number from 1 to 16777216"},
        {"adamW 2 4096 1024 14336 16", "unknown operation 'adamW' (expected gemm, "},
        {"adam 2 4096 1024 14336 16", "embedding or adamw)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        if (hd__bench_case_parse(bad[i].text, &c, why, sizeof why) ||
            strstr(why, bad[i].says) == NULL)
            fail_msg("'%s': expected a refusal saying '%s', got '%s'", bad[i].text, bad[i].says,
                     why);
    }
    hd_bench_case_list l = {NULL, 0, 0};
    hd_bench_case other = *llama;
    other.rank = 8;
    assert_true(hd__bench_case_list_add(&l, llama));
    assert_true(hd__bench_case_list_add(&l, llama));
    assert_true(hd__bench_case_list_add(&l, &other));
    assert_int_equal(l.count, 2);
    free(l.cases);
}

/* AdamW's check: a backend's step passes; the same step judged without its clip fails, as do
 * one element of a moment off by far more than its tolerance (named) and a NaN. */
static void test_adamw_check_passes_a_step_and_catches_a_wrong_one(void **state)
{
    (void)state;
    enum { K = 3 };
    static const size_t n[K] = {48, 1000, 7};
    hd_context *ctx = hd_test_context(true);
    hd_rng rng = hd_test_rng(91);
    float *p[K], *g[K], *m[K], *v[K], *got_p[K], *got_m[K], *got_v[K];
    hd_tensor *tp[K], *tg[K], *tm[K], *tv[K];
    for (size_t k = 0; k < K; k++) {
        p[k] = hd_test_random(&rng, n[k], -1.0f, 1.0f);
        g[k] = hd_test_random(&rng, n[k], -0.1f, 0.1f);
        m[k] = hd_test_random(&rng, n[k], -0.01f, 0.01f);
        v[k] = hd_test_random(&rng, n[k], 0.0f, 1e-3f);
        tp[k] = hd_test_tensor(ctx, 1, n[k], p[k]);
        tg[k] = hd_test_tensor(ctx, 1, n[k], g[k]);
        tm[k] = hd_test_tensor(ctx, 1, n[k], m[k]);
        tv[k] = hd_test_tensor(ctx, 1, n[k], v[k]);
    }
    hd_adamw_options o = hd__case_adamw_options(3);
    assert_int_equal(hd_adamw(ctx, &o, K, tp, (const hd_tensor *const *)tg, tm, tv), HD_OK);
    for (size_t k = 0; k < K; k++) {
        got_p[k] = hd_test_read(tp[k]);
        got_m[k] = hd_test_read(tm[k]);
        got_v[k] = hd_test_read(tv[k]);
    }
    const float *const *cp = (const float *const *)p, *const *cg = (const float *const *)g;
    const float *const *cm = (const float *const *)m, *const *cv = (const float *const *)v;
    hd_ref_adamw_lists before = {K, n, cp, cg, cm, cv};
    hd_ref_adamw_lists after = {K,
                                n,
                                (const float *const *)got_p,
                                NULL,
                                (const float *const *)got_m,
                                (const float *const *)got_v};
    hd_ref_adamw_params hp = {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.step};
    char why[200];
    double worst = hd__ref_check_adamw(&before, &hp, o.max_grad_norm, &after, why, sizeof why);
    if (!(worst <= 1.0))
        fail_msg("a CPU step off the reference: %g (%s)", worst, why);
    assert_true(hd__ref_check_adamw(&before, &hp, 0.0f, &after, why, sizeof why) > 1.0);
    got_m[1][17] += 1e-4f;
    assert_true(hd__ref_check_adamw(&before, &hp, o.max_grad_norm, &after, why, sizeof why) > 1.0);
    assert_non_null(strstr(why, "m[1][17]"));
    got_v[2][6] = NAN;
    assert_true(isinf(hd__ref_check_adamw(&before, &hp, o.max_grad_norm, &after, why, sizeof why)));
    for (size_t k = 0; k < K; k++) {
        float *all[] = {p[k], g[k], m[k], v[k], got_p[k], got_m[k], got_v[k]};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            free(all[i]);
        hd_tensor *t[] = {tp[k], tg[k], tm[k], tv[k]};
        for (size_t i = 0; i < 4; i++)
            hd_tensor_destroy(t[i]);
    }
    hd_context_destroy(ctx);
}

/* The ci suite's AdamW case on each backend that runs AdamW and on auto: its tensors placed
 * where the backend runs, the step run there and checked; a backend without AdamW does not
 * take it, and the host mode has no reset for it. */
static void test_instance_adamw_runs_where_it_is_placed(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    const hd_bench_suite *ci = hd__bench_suite_find("ci");
    const hd_bench_case *c = NULL;
    for (size_t i = 0; i < ci->count && c == NULL; i++)
        c = hd__bench_case_is_adamw(&ci->cases[i]) ? &ci->cases[i] : NULL;
    assert_non_null(c);
    hd_bench_instance inst;
    assert_int_equal(hd__bench_instance_create(ctx, c, hd_test_seed(), false, &inst), HD_OK);
    assert_non_null(inst.adamw);
    assert_int_equal(inst.adamw->count, HD_BENCH_ADAMW_LAYER_TENSORS);
    assert_int_equal(inst.sets, 3); /* small lists rotate */
    bool device = hd__backend_runs_adamw(ctx, HD_BACKEND_FUSED);
    const hd_backend timed[] = {HD_BACKEND_CPU, HD_BACKEND_FUSED, HD_BACKEND_AUTO, HD_BACKEND_CPU};
    for (size_t i = 0; i < sizeof timed / sizeof timed[0]; i++) {
        hd_backend b = timed[i];
        if (b != HD_BACKEND_AUTO && !hd__bench_case_takes(ctx, b, c))
            continue;
        hd_backend want = b == HD_BACKEND_AUTO ? (device ? HD_BACKEND_FUSED : HD_BACKEND_CPU) : b;
        assert_int_equal(hd__bench_instance_use(&inst, b), HD_OK);
        assert_int_equal(hd__bench_instance_run(ctx, &inst, 1), HD_OK);
        assert_int_equal(hd_sync(ctx), HD_OK);
        assert_int_equal(hd_context_last_backend(ctx), want);
        assert_true(inst.adamw->lists[1][0][0]->state->device_valid == (want != HD_BACKEND_CPU));
        double worst = -1;
        assert_int_equal(hd__bench_instance_check(&inst, &worst), HD_OK);
        if (!(worst >= 0 && worst <= 1.0))
            fail_msg("adamw on %s: %g tolerances off", hd_backend_name(b), worst);
        assert_int_equal(hd_context_last_backend(ctx), want);
        hd__bench_instance_release(&inst);
    }
    assert_false(hd__bench_case_takes(ctx, HD_BACKEND_CLBLAST, c));
    assert_false(hd__bench_case_takes(ctx, HD_BACKEND_CLBLAST_FUSED, c));
    assert_int_equal(hd__bench_instance_reset(ctx, &inst, 0), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "adamw has no host mode"));
    hd__bench_instance_destroy(&inst);
    hd_context_destroy(ctx);
}

typedef struct counter {
    unsigned calls;
    size_t max_set;
    hd_status fail_at; /* non-OK: returned from call fail_after on */
    unsigned fail_after;
} counter;

static hd_status count_call(hd_context *ctx, void *user, size_t set)
{
    (void)ctx;
    counter *c = user;
    c->calls++;
    c->max_set = set > c->max_set ? set : c->max_set;
    if (c->fail_at != HD_OK && c->calls > c->fail_after)
        return c->fail_at;
    return HD_OK;
}

/* The host mode's resets, counted apart from the calls. */
static unsigned resets;

static hd_status count_reset(hd_context *ctx, void *user, size_t set)
{
    (void)ctx;
    (void)user;
    (void)set;
    resets++;
    return HD_OK;
}

static void test_measure_takes_min_runs_and_warms_every_set(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        counter c = {0};
        hd_measure_config cfg;
        hd__measure_config_init(&cfg, (hd_measure_mode)m);
        cfg.warmup = 1;
        cfg.input_sets = 3;
        cfg.min_runs = 7;
        cfg.max_runs = 7;
        cfg.budget_s = 0.0;
        cfg.chain_length = 5;
        cfg.reset = count_reset;
        resets = 0;
        hd_measure_result r;
        assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_OK);
        assert_int_equal(r.runs, 7);
        bool chained = m == HD_MEASURE_CHAIN || m == HD_MEASURE_HOST;
        assert_int_equal(r.chain_length, chained ? 5 : 1);
        assert_int_equal(resets, m == HD_MEASURE_HOST ? 7 : 0); /* once before each sample */
        assert_int_equal(c.calls, 3 + 7 * r.chain_length);      /* warm-up covers all 3 sets */
        assert_int_equal(c.max_set, 2);
        assert_true(r.min_s <= r.median_s && r.median_s <= r.max_s);
        assert_true(r.host_timed == (m == HD_MEASURE_DEVICE));
    }
    hd_context_destroy(ctx);
}

static void test_measure_stops_at_budget_after_min_runs(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    counter c = {0};
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, HD_MEASURE_SYNC);
    cfg.min_runs = 4;
    cfg.max_runs = 100000; /* capped */
    cfg.budget_s = 0.0;
    hd_measure_result r;
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_OK);
    assert_int_equal(r.runs, 4);
    hd_context_destroy(ctx);
}

/* An interrupt takes effect after the call in progress, not after the measurement: one
 * warm-up call and one sample, whatever min_runs says. */
static void test_measure_stops_after_one_call_once_the_stop_flag_is_set(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    static volatile sig_atomic_t stop;
    stop = 1;
    hd__measure_set_stop_flag(&stop);
    counter c = {0};
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, HD_MEASURE_SYNC);
    cfg.warmup = 5;
    cfg.min_runs = 50;
    hd_measure_result r;
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_OK);
    assert_int_equal(r.runs, 1);
    assert_int_equal(c.calls, 2);
    hd__measure_set_stop_flag(NULL);
    hd_context_destroy(ctx);
}

/* The estimate that decides what the tools skip: each backend's own (the scheduler's cost
 * model) with the tools' margin; more work takes longer, a one-token GEMV is bounded by its
 * bytes, and an 8192^3 GEMM on a CPU of 100 GFLOP/s takes seconds, not milliseconds. */
static void test_estimate_follows_the_work_and_the_rates(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    hd_tune_calibration cal = {.launch_us = 20,
                               .copy_gbps = 1000,
                               .gemm_gflops = 50000,
                               .cpu_gflops = 100,
                               .cpu_gbps = 20};
    hd_shape small = {.dim = {512, 512, 512}}, big = {.dim = {8192, 8192, 8192}};
    hd_shape gemv = {.dim = {1, 4096, 4096}};
    for (int be = 0; be < HD_BACKEND_COUNT; be++) {
        if (be == HD_BACKEND_AUTO || !hd__backend_takes(ctx, (hd_backend)be, HD_OP_GEMM, &big))
            continue;
        double s = hd__calibrate_estimate_s(ctx, &cal, (hd_backend)be, HD_OP_GEMM, &small);
        double l = hd__calibrate_estimate_s(ctx, &cal, (hd_backend)be, HD_OP_GEMM, &big);
        assert_true(s > 0 && l > 10 * s);
        /* the backend's own estimate, with the tools' margin: no model of the tools' own */
        double own = hd__backend_estimate_us(ctx, (hd_backend)be, HD_OP_GEMM, &big, &cal);
        assert_true(fabs(l - HD_ESTIMATE_MARGIN * own * 1e-6) <= 1e-9 * l);
        if (hd__backend_place(ctx, (hd_backend)be) == HD_PLACE_DEVICE)
            assert_true(l < 0.5); /* 1.1 TFLOP at a device's 50 TFLOP/s, with the margin */
    }
    double cpu_big = hd__calibrate_estimate_s(ctx, &cal, HD_BACKEND_CPU, HD_OP_GEMM, &big);
    assert_true(cpu_big > 10.0); /* 1.1 TFLOP at 100 GFLOP/s */
    /* one token: the weight's 64 MB at the CPU's 20 GB/s dominate its 33 MFLOP */
    double cpu_gemv = hd__calibrate_estimate_s(ctx, &cal, HD_BACKEND_CPU, HD_OP_GEMM, &gemv);
    assert_true(cpu_gemv > 64e6 / 20e9 && cpu_gemv < 0.05);
    /* without a calibration the backends' default rates, never zero */
    hd_tune_calibration none = {0};
    assert_true(hd__calibrate_estimate_s(ctx, &none, HD_BACKEND_CPU, HD_OP_GEMM, &small) > 0);
    hd_shape rows = {.dim = {64, 1024}};
    assert_true(hd__calibrate_estimate_s(ctx, &none, HD_BACKEND_CPU, HD_OP_SOFTMAX, &rows) > 0);
    hd_context_destroy(ctx);
}

static void test_measure_reports_failing_call(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    counter c = {.fail_at = HD_ERR_DEVICE, .fail_after = 5};
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, HD_MEASURE_CHAIN);
    hd_measure_result r;
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_ERR_DEVICE);
    c = (counter){.fail_at = HD_ERR_UNSUPPORTED, .fail_after = 0};
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_ERR_UNSUPPORTED);
    hd_context_destroy(ctx);
}

static void test_measure_rejects_bad_arguments(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, HD_MEASURE_SYNC);
    hd_measure_result r;
    counter c = {0};
    assert_int_equal(hd__measure(NULL, &cfg, count_call, &c, &r), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd__measure(ctx, NULL, count_call, &c, &r), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd__measure(ctx, &cfg, NULL, &c, &r), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, NULL), HD_ERR_INVALID_ARGUMENT);
    cfg.mode = HD_MEASURE_MODE_COUNT;
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_ERR_INVALID_ARGUMENT);
    cfg.mode = HD_MEASURE_HOST; /* without the reset that makes it the host mode */
    assert_int_equal(hd__measure(ctx, &cfg, count_call, &c, &r), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.calls, 0);
    hd_context_destroy(ctx);
}

static void test_measure_mode_names_round_trip(void **state)
{
    (void)state;
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        hd_measure_mode back;
        assert_true(hd__measure_mode_from_name(hd__measure_mode_name((hd_measure_mode)m), &back));
        assert_int_equal(back, m);
    }
    hd_measure_mode x;
    assert_false(hd__measure_mode_from_name("wall", &x));
    assert_false(hd__measure_mode_from_name(NULL, &x));
    double v[] = {5, 1, 4, 2};
    assert_true(hd__measure_median(v, 4) == 3.0);
    assert_true(hd__measure_median(v, 0) == 0.0);
}

static void test_measure_host_bandwidth_is_positive(void **state)
{
    (void)state;
    double bw = 0;
    assert_int_equal(hd__measure_host_bandwidth(1 << 20, &bw), HD_OK);
    assert_true(bw > 1e6);
    assert_int_equal(hd__measure_host_bandwidth(4, &bw), HD_ERR_INVALID_ARGUMENT);
}

/* Every ci case on the CPU backend: inputs are random (never zeros), the result passes the
 * reference check, and the input sets differ. */
static void test_instance_ci_cases_check_on_cpu(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(true);
    const hd_bench_suite *ci = hd__bench_suite_find("ci");
    for (size_t i = 0; i < ci->count; i++) {
        /* the step's ops that the library has not yet on the CPU */
        if (!hd__backend_takes(ctx, HD_BACKEND_CPU, ci->cases[i].op, &ci->cases[i].shape))
            continue;
        hd_bench_instance inst;
        assert_int_equal(
            hd__bench_instance_create(ctx, &ci->cases[i], hd_test_seed() + i, false, &inst), HD_OK);
        assert_true(inst.sets >= 2); /* small inputs rotate */
        float *x = hd_test_read(inst.in[0][0]);
        size_t n = hd_tensor_rows(inst.in[0][0]) * hd_tensor_cols(inst.in[0][0]), zeros = 0;
        for (size_t j = 0; j < n; j++)
            zeros += x[j] == 0.0f;
        assert_int_equal(zeros, 0);
        free(x);
        double worst = -1;
        assert_int_equal(hd__bench_instance_check(&inst, &worst), HD_OK);
        assert_true(worst >= 0 && worst <= 1.0);

        /* Input sets hold different data: set 1 gives another output than set 0. */
        float *y = hd_test_read(inst.out[0]);
        assert_int_equal(hd__bench_instance_run(ctx, &inst, 1), HD_OK);
        float *y2 = hd_test_read(inst.out[0]);
        size_t m = hd_tensor_rows(inst.out[0]) * hd_tensor_cols(inst.out[0]), diff = 0;
        for (size_t j = 0; j < m; j++)
            diff += y[j] != y2[j];
        assert_true(diff > 0);
        free(y);
        free(y2);
        hd__bench_instance_destroy(&inst);
    }
    hd_context_destroy(ctx);
}

/* The host mode's reset leaves a set's inputs valid on the host alone, holding the data they
 * were made with, as a program's freshly written inputs; where the machine has a device, after
 * calls forced onto it had moved them there. */
static void test_instance_reset_leaves_the_inputs_on_the_host(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    hd_bench_case c = {.op = HD_OP_RMS_NORM, .shape = {.dim = {7, 129}}};
    hd_bench_instance inst;
    assert_int_equal(hd__bench_instance_create(ctx, &c, hd_test_seed(), true, &inst), HD_OK);
    if (hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        assert_int_equal(hd_context_set_backend(ctx, c.op, HD_BACKEND_FUSED), HD_OK);
        assert_int_equal(hd__bench_instance_run(ctx, &inst, 1), HD_OK);
        assert_true(inst.in[1][0]->state->device_valid);
    }
    assert_int_equal(hd__bench_instance_reset(ctx, &inst, 1), HD_OK);
    for (int i = 0; i < inst.inputs; i++) {
        const hd_tensor *t = inst.in[1][i];
        assert_true(t->state->host_valid && !t->state->device_valid);
        hd_test_expect_unchanged("a reset input", t, inst.host[1][i]);
    }
    hd__bench_instance_destroy(&inst);
    hd_context_destroy(ctx);
}

/* The tools' one check (hd__ref_check): a result rounded from the float64 reference passes, one
 * element off by a few of its tolerances fails and is named, NaN fails; the same for a row op,
 * on a row that the sampling of a large output must reach (the last). */
static void test_reference_check_passes_rounded_results_and_catches_one_wrong_element(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(91);
    enum { M = 37, N = 29, K = 53 };
    float *a = hd_test_random(&rng, M * K, -1, 1), *b = hd_test_random(&rng, K * N, -1, 1);
    float *c = hd_test_floats(M * N);
    hd_ref_inputs in = {.in = {a, b}, .alpha = 1.0f, .beta = 0.0f};
    hd_shape s = {.dim = {M, N, K}};
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++)
            c[i * N + j] = (float)hd__ref_matmul_elem(HD_OP_GEMM, &s, &in, 0, i, j).want;
    char why[160];
    assert_true(hd__ref_check(HD_OP_GEMM, &s, &in, c, why, sizeof why) <= 1.0);
    hd_ref_elem e = hd__ref_matmul_elem(HD_OP_GEMM, &s, &in, 0, 5, 7);
    double tol = hd__ref_matmul_tolerance((double)K + 2.0, e.bound, 2.0, HD_PRECISION_FP32);
    c[5 * N + 7] = (float)(e.want + 4.0 * tol);
    assert_true(hd__ref_check(HD_OP_GEMM, &s, &in, c, why, sizeof why) > 3.0);
    assert_non_null(strstr(why, "(5, 7)"));
    c[5 * N + 7] = NAN;
    assert_true(isinf(hd__ref_check(HD_OP_GEMM, &s, &in, c, why, sizeof why)));

    /* softmax of many rows: the sampled rows include the last */
    enum { ROWS = 20000, COLS = 300 };
    float *x = hd_test_random(&rng, (size_t)ROWS * COLS, -4, 4);
    float *y = hd_test_floats((size_t)ROWS * COLS);
    double *want = hd_test_doubles(COLS);
    hd_shape r = {.dim = {ROWS, COLS}};
    hd_ref_inputs rin = {.in = {x}};
    for (size_t i = 0; i < ROWS; i++) {
        hd__ref_row(HD_OP_SOFTMAX, &r, &rin, i, want);
        for (size_t j = 0; j < COLS; j++)
            y[i * COLS + j] = (float)want[j];
    }
    assert_true(hd__ref_check(HD_OP_SOFTMAX, &r, &rin, y, why, sizeof why) <= 1.0);
    size_t last = (size_t)(ROWS - 1) * COLS + 3;
    y[last] += (float)(3.0 * hd__ref_row_tolerance(HD_OP_SOFTMAX, y[last]));
    assert_true(hd__ref_check(HD_OP_SOFTMAX, &r, &rin, y, why, sizeof why) > 2.0);
    assert_non_null(strstr(why, "(19999, 3)"));
    free(a);
    free(b);
    free(c);
    free(x);
    free(y);
    free(want);
}

static char *compare_output(const char *ours_path, const char *peer_path, const char *mode, int *rc)
{
    char err[1200] = "";
    json_t *ours = hd__bench_results_load(ours_path, err, sizeof err);
    json_t *peer = hd__bench_results_load(peer_path, err, sizeof err);
    if (ours == NULL || peer == NULL)
        fail_msg("%s", err);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    *rc = hd__bench_compare(f, ours, peer, mode, err, sizeof err);
    fclose(f);
    json_decref(ours);
    json_decref(peer);
    return text;
}

static void test_compare_known_pair(void **state)
{
    (void)state;
    int rc;
    char *out =
        compare_output(HD_BENCH_TEST_DATA "/ours.json", HD_BENCH_TEST_DATA "/peer.json", NULL, &rc);
    assert_int_equal(rc, 0);
    /* gemm: both have sync; ours best 5 us (clblast), auto 6 us, peer 20 us */
    assert_non_null(strstr(out, "4.00x    3.33x"));
    /* softmax: device on both sides: 10 us / 8 us; auto's check ran on the CPU, its device-mode
     * calls on fused, and the table names the backend of the mode it shows */
    assert_non_null(strstr(out, "1.25x"));
    assert_non_null(strstr(out, "(fused)"));
    assert_null(strstr(out, "(cpu)"));
    assert_non_null(strstr(out, "rms_norm 64x1024         only in the peer file"));
    assert_non_null(strstr(out, "best 2.24x over 2 cases (faster on 2)"));
    free(out);
    out = compare_output(HD_BENCH_TEST_DATA "/ours.json", HD_BENCH_TEST_DATA "/peer.json", "device",
                         &rc);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "4.00x")); /* the peer has no device time for gemm */
    free(out);
    /* a file of another schema is refused when it is read */
    char err[1200] = "";
    assert_null(hd__bench_results_load(HD_BENCH_TEST_DATA "/other-schema.json", err, sizeof err));
    assert_non_null(strstr(err, "other-schema.json: schema: expected hd-bench/1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suites_match_the_issue),
        cmocka_unit_test(test_suites_names_are_unique),
        cmocka_unit_test(test_step_suite_holds_both_models),
        cmocka_unit_test(test_case_figures_gemm_and_rows),
        cmocka_unit_test(test_adamw_case_steps_the_lora_factors_of_its_model),
        cmocka_unit_test(test_case_parse_reads_adamw_and_refuses_bad_spellings),
        cmocka_unit_test(test_adamw_check_passes_a_step_and_catches_a_wrong_one),
        cmocka_unit_test(test_instance_adamw_runs_where_it_is_placed),
        cmocka_unit_test(test_measure_takes_min_runs_and_warms_every_set),
        cmocka_unit_test(test_measure_stops_at_budget_after_min_runs),
        cmocka_unit_test(test_measure_stops_after_one_call_once_the_stop_flag_is_set),
        cmocka_unit_test(test_estimate_follows_the_work_and_the_rates),
        cmocka_unit_test(test_measure_reports_failing_call),
        cmocka_unit_test(test_measure_rejects_bad_arguments),
        cmocka_unit_test(test_measure_mode_names_round_trip),
        cmocka_unit_test(test_measure_host_bandwidth_is_positive),
        cmocka_unit_test(test_instance_ci_cases_check_on_cpu),
        cmocka_unit_test(test_instance_reset_leaves_the_inputs_on_the_host),
        cmocka_unit_test(test_reference_check_passes_rounded_results_and_catches_one_wrong_element),
        cmocka_unit_test(test_compare_known_pair),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
