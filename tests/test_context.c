/*
 * Context lifecycle and configuration: options, the environment overrides (HD_BACKEND,
 * HD_DEVICE, HD_THREADS and the switches HD_DISABLE_OPENCL, HD_PINNED, HD_LOG and
 * HD_PROGRAM_CACHE), forcing a backend, the last backend, the last error, names of statuses,
 * backends and operations, the version, and tensors' own lifecycle.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/context.h"
#include "core/env.h"
#include "dispatch/tools.h"
#include "tests/testlib.h"

#ifdef HD_HAVE_OPENBLAS_THREADS
#include <cblas.h>
#endif

/* The variables the library reads, saved around each test that changes them so that a
 * user's own settings neither leak into nor out of the cases. */
static const char *const env_names[] = {
    "HD_BACKEND",      "HD_DEVICE", "HD_DISABLE_OPENCL", "HD_GEMM_PRECISION", "HD_THREADS",
    "HD_PINNED",       "HD_LOG",    "HD_PROGRAM_CACHE",  "HD_FAULT",          "HD_PROFILE",
    "HD_DETERMINISTIC"};
#define ENV_COUNT (sizeof env_names / sizeof env_names[0])

static int save_env(void **state)
{
    char **saved = calloc(ENV_COUNT, sizeof *saved);
    if (saved == NULL)
        return -1;
    for (size_t i = 0; i < ENV_COUNT; i++) {
        const char *v = getenv(env_names[i]);
        saved[i] = v != NULL ? strdup(v) : NULL;
        unsetenv(env_names[i]);
    }
    *state = saved;
    return 0;
}

static int restore_env(void **state)
{
    char **saved = *state;
    for (size_t i = 0; i < ENV_COUNT; i++) {
        if (saved[i] != NULL)
            setenv(env_names[i], saved[i], 1);
        else
            unsetenv(env_names[i]);
        free(saved[i]);
    }
    free(saved);
    return 0;
}

static hd_context *create_ok(const hd_context_options *opt)
{
    hd_context *ctx = NULL;
    hd_status s = hd_context_create(&ctx, opt);
    if (s != HD_OK)
        fail_msg("hd_context_create: %s (%s)", hd_status_name(s), hd_context_last_error(NULL));
    assert_non_null(ctx);
    return ctx;
}

static hd_context_options cpu_options(void)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.disable_opencl = true;
    opt.no_tune_cache = true;
    return opt;
}

static void expect_cpu_only(const hd_context *ctx)
{
    assert_true(hd_context_has_backend(ctx, HD_BACKEND_CPU));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_FUSED));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST_FUSED));
    assert_string_equal(hd_context_device_name(ctx), "none");
}

/* Runs a softmax big enough that a device would be chosen if one could be, and returns the
 * backend it ran on. */
static hd_backend softmax_backend(hd_context *ctx)
{
    float *x = hd_test_floats(64 * 1024);
    hd_rng rng = hd_test_rng(1);
    hd_test_fill(&rng, x, 64 * 1024, -1.0f, 1.0f);
    hd_tensor *tx = hd_test_tensor(ctx, 64, 1024, x);
    hd_status s = hd_softmax(ctx, tx, tx);
    if (s != HD_OK)
        fail_msg("hd_softmax: %s", hd_context_last_error(ctx));
    hd_tensor_destroy(tx);
    free(x);
    return hd_context_last_backend(ctx);
}

/* ---- lifecycle and options ---- */

static void test_context_create_null_out_is_invalid(void **state)
{
    (void)state;
    assert_int_equal(hd_context_create(NULL, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(NULL), "NULL"));
}

static void test_context_create_with_defaults_has_the_cpu(void **state)
{
    (void)state;
    hd_context *ctx = create_ok(NULL);
    assert_true(hd_context_has_backend(ctx, HD_BACKEND_CPU));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_AUTO));
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_AUTO);
    assert_non_null(hd_context_device_name(ctx));
    assert_string_equal(hd_context_last_error(NULL), ""); /* the last create succeeded */
    hd_context_destroy(ctx);
}

static void test_context_options_init_sets_defaults(void **state)
{
    (void)state;
    hd_context_options opt;
    memset(&opt, 0xa5, sizeof opt);
    hd_context_options_init(&opt);
    assert_null(opt.device);
    assert_null(opt.backends);
    assert_null(opt.tune_cache);
    assert_false(opt.disable_opencl);
    assert_false(opt.no_tune_cache);
    assert_false(opt.warmup);
    assert_false(opt.deterministic);
    hd_context_options_init(NULL); /* harmless */
}

static void test_context_disable_opencl_option_gives_cpu_only(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    expect_cpu_only(ctx);
    assert_int_equal(softmax_backend(ctx), HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

static void test_context_disable_opencl_env_gives_cpu_only(void **state)
{
    (void)state;
    setenv("HD_DISABLE_OPENCL", "1", 1);
    hd_context *ctx = create_ok(NULL);
    expect_cpu_only(ctx);
    assert_int_equal(softmax_backend(ctx), HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

static void test_context_warmup_option_and_call_succeed_on_cpu(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    opt.warmup = true;
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(hd_context_warmup(ctx), HD_OK);
    assert_int_equal(hd_sync(ctx), HD_OK);
    hd_context_destroy(ctx);
}

static void test_context_null_arguments_are_harmless(void **state)
{
    (void)state;
    hd_context_destroy(NULL);
    hd_tensor_destroy(NULL);
    assert_int_equal(hd_sync(NULL), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_warmup(NULL), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_context_last_backend(NULL), HD_BACKEND_AUTO);
    assert_false(hd_context_has_backend(NULL, HD_BACKEND_CPU));
    assert_string_equal(hd_context_device_name(NULL), "none");
    assert_int_equal(hd_tensor_rows(NULL), 0);
    assert_int_equal(hd_tensor_cols(NULL), 0);
}

static void test_context_device_env_is_ignored_without_opencl(void **state)
{
    (void)state;
    setenv("HD_DEVICE", "no-such-device-anywhere", 1);
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    expect_cpu_only(ctx);
    hd_context_destroy(ctx);
}

static void test_context_device_spec_matching_nothing_fails(void **state)
{
    (void)state;
#ifdef HD_HAVE_OPENCL
    /* An explicit device request that cannot be met is an error, not a silent CPU context. */
    setenv("HD_DEVICE", "no-such-device-anywhere", 1);
    hd_context *ctx = (hd_context *)&ctx;
    hd_status s = hd_context_create(&ctx, NULL);
    assert_int_not_equal(s, HD_OK);
    assert_null(ctx);
    assert_true(hd_context_last_error(NULL)[0] != '\0');
#else
    /* Without OpenCL there are no devices to name: the variable is ignored. */
    setenv("HD_DEVICE", "no-such-device-anywhere", 1);
    hd_context *ctx = create_ok(NULL);
    expect_cpu_only(ctx);
    hd_context_destroy(ctx);
#endif
}

/* A device that is there but cannot be used (held in exclusive mode by another process, a
 * failing driver) is no error: the context runs on what is left, with a note. */
static void test_context_unusable_device_leaves_a_working_context(void **state)
{
    (void)state;
#ifdef HD_HAVE_OPENCL
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.log = hd_test_log;
    setenv("HD_FAULT", "*:open", 1);
    hd_test_notes_clear();
    hd_context *ctx = create_ok(&opt);
    expect_cpu_only(ctx);
    assert_string_equal(hd_context_last_error(ctx), "");
    if (strstr(hd_test_notes(), "no usable OpenCL device") == NULL)
        fail_msg("no note says the device could not be used: '%s'", hd_test_notes());
    hd_context_destroy(ctx);

    setenv("HD_FAULT", "fused:probe-device,clblast:probe-device", 1);
    hd_test_notes_clear();
    ctx = create_ok(&opt);
    assert_true(hd_context_has_backend(ctx, HD_BACKEND_CPU));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_FUSED));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST));
    if (strstr(hd_test_notes(), "backend fused not available") == NULL)
        fail_msg("no note names the fused backend: '%s'", hd_test_notes());
    hd_context_destroy(ctx);

    /* a device the user named and cannot have is an error */
    setenv("HD_FAULT", "*:open", 1);
    setenv("HD_DEVICE", "0", 1);
    ctx = (hd_context *)&ctx;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_ERR_DEVICE);
    assert_null(ctx);
#else
    /* no device to open: the fault is never met */
    setenv("HD_FAULT", "*:open", 1);
    hd_context *ctx = create_ok(NULL);
    expect_cpu_only(ctx);
    hd_context_destroy(ctx);
#endif
}

/* A fault a test misspells must not pass unnoticed. */
static void test_context_unreadable_fault_item_is_noted(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    opt.log = hd_test_log;
    setenv("HD_FAULT", "fused-launch,cpu:launch", 1);
    hd_test_notes_clear();
    hd_context *ctx = create_ok(&opt);
    if (strstr(hd_test_notes(), "HD_FAULT item 'fused-launch' ignored") == NULL)
        fail_msg("no note names the unread item: '%s'", hd_test_notes());
    if (strstr(hd_test_notes(), "cpu:launch") != NULL)
        fail_msg("a readable item was noted: '%s'", hd_test_notes());
    hd_context_destroy(ctx);
}

/* ---- HD_BACKEND and the backends option ---- */

static const char *const bad_specs[] = {
    "gpu",
    "CPU",
    "cpu ",
    " cpu",
    "gemm=",
    "=cpu",
    "gemm=gpu",
    "matmul=cpu",
    ",",
    ",cpu",
    "cpu,",
    "gemm=cpu,",
    "gemm=cpu,,lora=cpu",
    "gemm=cpu=cpu",
    "gemm:cpu",
    "softmax=fused;gemm=cpu",
    "gemm=cpu,softmax=clblast,layer_norm=fused,rms_norm=cpu,lora=clblast+fusedd",
    "an-item-much-longer-than-sixty-four-characters-which-no-real-name-has-at-all",
};

static void test_context_bad_backend_env_is_rejected(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
        setenv("HD_BACKEND", bad_specs[i], 1);
        hd_context *ctx = (hd_context *)&ctx;
        hd_status s = hd_context_create(&ctx, NULL);
        if (s != HD_ERR_INVALID_ARGUMENT)
            fail_msg("HD_BACKEND='%s': got %s", bad_specs[i], hd_status_name(s));
        assert_null(ctx);
        const char *msg = hd_context_last_error(NULL);
        if (strstr(msg, "backend specification") == NULL)
            fail_msg("HD_BACKEND='%s': message '%s' does not say what was wrong", bad_specs[i],
                     msg);
    }
}

static void count_note(void *user, const char *message)
{
    (void)message;
    ++*(int *)user;
}

/* The GEMM precision: fp32 by default; a bad name or value is rejected with a message that
 * names it; a tensor-core mode where no backend runs one leaves fp32 with a note; the option
 * takes precedence over the environment. */
static void test_context_gemm_precision_is_chosen_checked_and_lowered(void **state)
{
    (void)state;
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, NULL), HD_OK);
    assert_int_equal(hd_context_gemm_precision(ctx), HD_PRECISION_FP32);
    hd_context_destroy(ctx);
    assert_int_equal(hd_context_gemm_precision(NULL), HD_PRECISION_FP32);
    assert_string_equal(hd_precision_name(HD_PRECISION_FP32X3), "fp32x3");
    assert_string_equal(hd_precision_name((hd_precision)99), "unknown");

    setenv("HD_GEMM_PRECISION", "fp64", 1);
    ctx = (hd_context *)&ctx;
    assert_int_equal(hd_context_create(&ctx, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(hd_context_last_error(NULL), "fp64"));

    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.gemm_precision = (hd_precision)7;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_ERR_INVALID_ARGUMENT);

    /* without OpenCL no backend has tensor cores: fp32, and a note says so */
    setenv("HD_GEMM_PRECISION", "tf32", 1);
    int notes = 0;
    hd_context_options_init(&opt);
    opt.disable_opencl = true;
    opt.log = count_note;
    opt.log_user = &notes;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_int_equal(hd_context_gemm_precision(ctx), HD_PRECISION_FP32);
    assert_true(notes >= 1);
    assert_string_equal(hd_context_last_error(ctx), "");
    hd_context_destroy(ctx);
    unsetenv("HD_GEMM_PRECISION");
}

static void count_determinism_note(void *user, const char *message)
{
    *(int *)user += strstr(message, "HD_DETERMINISTIC='sometimes' is ignored") != NULL;
}

/* Determinism: off by default, on from the option or $HD_DETERMINISTIC; a value that is no
 * switch leaves the default with a note. */
static void test_context_deterministic_option_and_env(void **state)
{
    (void)state;
    assert_false(hd_context_deterministic(NULL));
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.disable_opencl = true;
    hd_context *ctx = create_ok(&opt);
    assert_false(hd_context_deterministic(ctx));
    hd_context_destroy(ctx);
    opt.deterministic = true;
    ctx = create_ok(&opt);
    assert_true(hd_context_deterministic(ctx));
    hd_context_destroy(ctx);

    opt.deterministic = false;
    setenv("HD_DETERMINISTIC", " yes ", 1);
    ctx = create_ok(&opt);
    assert_true(hd_context_deterministic(ctx));
    hd_context_destroy(ctx);
    setenv("HD_DETERMINISTIC", "sometimes", 1);
    int notes = 0;
    opt.log = count_determinism_note;
    opt.log_user = &notes;
    ctx = create_ok(&opt);
    assert_false(hd_context_deterministic(ctx));
    assert_int_equal(notes, 1);
    hd_context_destroy(ctx);
    unsetenv("HD_DETERMINISTIC");
}

static void test_context_bad_backend_option_is_rejected(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
        hd_context_options opt = cpu_options();
        opt.backends = bad_specs[i];
        hd_context *ctx = (hd_context *)&ctx;
        hd_status s = hd_context_create(&ctx, &opt);
        if (s != HD_ERR_INVALID_ARGUMENT)
            fail_msg("backends='%s': got %s", bad_specs[i], hd_status_name(s));
        assert_null(ctx);
        assert_non_null(strstr(hd_context_last_error(NULL), "backend specification"));
    }
}

static void test_context_backend_message_names_the_bad_item(void **state)
{
    (void)state;
    setenv("HD_BACKEND", "gemm=cpu,sofmax=fused", 1);
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(NULL), "'sofmax'"));
    for (int op = 0; op < HD_OP_COUNT; op++) /* the message lists every operation there is */
        if (strstr(hd_context_last_error(NULL), hd_op_name((hd_op)op)) == NULL)
            fail_msg("'%s' does not list %s", hd_context_last_error(NULL), hd_op_name((hd_op)op));
    setenv("HD_BACKEND", "gemm=cuda", 1);
    assert_int_equal(hd_context_create(&ctx, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(NULL), "'cuda'"));
    for (int b = 0; b < HD_BACKEND_COUNT; b++) /* and every backend there is */
        if (strstr(hd_context_last_error(NULL), hd_backend_name((hd_backend)b)) == NULL)
            fail_msg("'%s' does not list %s", hd_context_last_error(NULL),
                     hd_backend_name((hd_backend)b));
}

static void test_context_backend_option_overrides_env(void **state)
{
    (void)state;
    setenv("HD_BACKEND", "not-a-backend", 1);
    hd_context_options opt = cpu_options();
    opt.backends = "cpu";
    hd_context *ctx = create_ok(&opt);
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(ctx->forced[op], HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

static void test_context_backend_env_cpu_runs_everything_on_the_cpu(void **state)
{
    (void)state;
    setenv("HD_BACKEND", "cpu", 1);
    hd_context *ctx = create_ok(NULL); /* OpenCL as the machine has it */
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(ctx->forced[op], HD_BACKEND_CPU);
    assert_int_equal(softmax_backend(ctx), HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

static void test_context_backend_spec_parses_per_op_items(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    /* Each case: the backend of every op the specification does not name, then up to three
     * (op, backend) pairs it names. */
    static const struct {
        const char *spec;
        hd_backend rest;
        struct {
            hd_op op;
            hd_backend b;
        } named[3];
        int named_count;
    } cases[] = {
        {"cpu", HD_BACKEND_CPU, {{0}}, 0},
        {"auto", HD_BACKEND_AUTO, {{0}}, 0},
        {"gemm=clblast,softmax=fused",
         HD_BACKEND_AUTO,
         {{HD_OP_GEMM, HD_BACKEND_CLBLAST}, {HD_OP_SOFTMAX, HD_BACKEND_FUSED}},
         2},
        {"lora=clblast+fused,layer_norm=cpu,rms_norm=fused",
         HD_BACKEND_AUTO,
         {{HD_OP_LORA, HD_BACKEND_CLBLAST_FUSED},
          {HD_OP_LAYER_NORM, HD_BACKEND_CPU},
          {HD_OP_RMS_NORM, HD_BACKEND_FUSED}},
         3},
        /* A lone backend sets every op; later items override earlier ones. */
        {"cpu,gemm=fused", HD_BACKEND_CPU, {{HD_OP_GEMM, HD_BACKEND_FUSED}}, 1},
        {"gemm=fused,gemm=clblast", HD_BACKEND_AUTO, {{HD_OP_GEMM, HD_BACKEND_CLBLAST}}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hd_backend want[HD_OP_COUNT];
        for (int op = 0; op < HD_OP_COUNT; op++)
            want[op] = cases[i].rest;
        for (int j = 0; j < cases[i].named_count; j++)
            want[cases[i].named[j].op] = cases[i].named[j].b;
        hd_backend forced[HD_OP_COUNT];
        for (int op = 0; op < HD_OP_COUNT; op++)
            forced[op] = HD_BACKEND_AUTO;
        hd_status s = hd__parse_backend_spec(ctx, cases[i].spec, forced);
        if (s != HD_OK)
            fail_msg("'%s': %s", cases[i].spec, hd_context_last_error(ctx));
        for (int op = 0; op < HD_OP_COUNT; op++)
            if (forced[op] != want[op])
                fail_msg("'%s': %s runs on %s, expected %s", cases[i].spec, hd_op_name((hd_op)op),
                         hd_backend_name(forced[op]), hd_backend_name(want[op]));
    }
    /* A rejected specification leaves the previous choice as it was. */
    hd_backend forced[HD_OP_COUNT] = {
        [HD_OP_GEMM] = HD_BACKEND_FUSED, [HD_OP_LORA] = HD_BACKEND_CPU};
    assert_int_equal(hd__parse_backend_spec(ctx, "gemm=cpu,bogus", forced),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(forced[HD_OP_GEMM], HD_BACKEND_FUSED);
    assert_int_equal(forced[HD_OP_LORA], HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

static void test_context_forced_backend_missing_here_falls_back_to_cpu(void **state)
{
    (void)state;
    setenv("HD_BACKEND", "fused", 1);
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(softmax_backend(ctx), HD_BACKEND_CPU);
    hd_context_destroy(ctx);
}

/* ---- hd_context_set_backend, last backend, last error ---- */

static void test_set_backend_rejects_bad_arguments(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(hd_context_set_backend(NULL, HD_OP_GEMM, HD_BACKEND_CPU),
                     HD_ERR_INVALID_ARGUMENT);

    assert_int_equal(hd_context_set_backend(ctx, HD_OP_COUNT, HD_BACKEND_CPU),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "operation"));
    assert_int_equal(hd_context_set_backend(ctx, (hd_op)-1, HD_BACKEND_CPU),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "operation"));

    assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM, HD_BACKEND_COUNT),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "backend"));
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM, (hd_backend)-3),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "backend"));

    static const hd_backend device_backends[] = {HD_BACKEND_CLBLAST, HD_BACKEND_FUSED,
                                                 HD_BACKEND_CLBLAST_FUSED};
    for (size_t i = 0; i < 3; i++) {
        for (int op = 0; op < HD_OP_COUNT; op++) {
            assert_int_equal(hd_context_set_backend(ctx, (hd_op)op, device_backends[i]),
                             HD_ERR_BACKEND_UNAVAILABLE);
            const char *msg = hd_context_last_error(ctx);
            char quoted[32];
            snprintf(quoted, sizeof quoted, "'%s'", hd_backend_name(device_backends[i]));
            if (strstr(msg, quoted) == NULL)
                fail_msg("message '%s' does not name %s", msg, quoted);
            assert_int_equal(ctx->forced[op], HD_BACKEND_AUTO); /* unchanged */
        }
    }
    hd_context_destroy(ctx);
}

static void test_set_backend_cpu_and_auto_are_accepted(void **state)
{
    (void)state;
    hd_context *ctx = create_ok(NULL);
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(hd_context_set_backend(ctx, (hd_op)op, HD_BACKEND_CPU), HD_OK);
    assert_int_equal(softmax_backend(ctx), HD_BACKEND_CPU);
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(hd_context_set_backend(ctx, (hd_op)op, HD_BACKEND_AUTO), HD_OK);
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(ctx->forced[op], HD_BACKEND_AUTO);
    /* Every backend the context reports can be forced. */
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++)
        if (hd_context_has_backend(ctx, (hd_backend)b))
            assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM, (hd_backend)b), HD_OK);
    hd_context_destroy(ctx);
}

static void test_last_backend_tracks_successful_calls_only(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_AUTO);
    hd_tensor *x = hd_test_tensor(ctx, 2, 3, NULL), *y = hd_test_tensor(ctx, 3, 2, NULL);
    assert_int_equal(hd_softmax(ctx, x, y), HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_AUTO);
    assert_int_equal(hd_softmax(ctx, x, x), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* Whatever this machine lacks (a device, CLBlast) is a note: after a successful creation and
 * a successful call the last error is "". */
static void test_last_error_is_empty_after_success(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    assert_string_equal(hd_context_last_error(ctx), "");
    assert_string_equal(hd_context_last_error(NULL), "");
    float v[6] = {1, 2, 3, 4, 5, 6};
    hd_tensor *x = hd_test_tensor(ctx, 2, 3, v), *y = hd_test_tensor(ctx, 2, 3, NULL);
    assert_int_equal(hd_softmax(ctx, x, y), HD_OK);
    assert_string_equal(hd_context_last_error(ctx), "");
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

static void test_last_error_is_cleared_by_the_next_successful_call(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    hd_tensor *x = hd_test_tensor(ctx, 2, 3, NULL), *y = hd_test_tensor(ctx, 3, 2, NULL);
    assert_int_equal(hd_softmax(ctx, x, y), HD_ERR_SHAPE_MISMATCH);
    const char *msg = hd_context_last_error(ctx);
    /* "<status text>: <detail>" */
    assert_true(strncmp(msg, hd_status_str(HD_ERR_SHAPE_MISMATCH),
                        strlen(hd_status_str(HD_ERR_SHAPE_MISMATCH))) == 0);
    assert_int_equal(hd_softmax(ctx, x, x), HD_OK);
    assert_string_equal(hd_context_last_error(ctx), "");
    /* every call that returns a status and succeeds, not only the ops */
    float data[6] = {0};
    char text[512];
    const size_t dims[4] = {2, 3, 0, 0};
    hd_tensor *made = NULL;
    for (int call = 0; call < 8; call++) {
        assert_int_equal(hd_softmax(ctx, x, y), HD_ERR_SHAPE_MISMATCH);
        hd_status s = call == 0   ? hd_sync(ctx)
                      : call == 1 ? hd_context_warmup(ctx)
                      : call == 2 ? hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_AUTO)
                      : call == 3 ? hd_context_explain(ctx, HD_OP_SOFTMAX, dims, text, sizeof text)
                      : call == 4 ? hd_tensor_write(x, data)
                      : call == 5 ? hd_tensor_read(x, data)
                      : call == 6 ? hd_tensor_prefetch(x)
                                  : hd_tensor_create(ctx, 2, 2, &made);
        assert_int_equal(s, HD_OK);
        if (hd_context_last_error(ctx)[0] != '\0')
            fail_msg("call %d succeeded and left the error '%s'", call, hd_context_last_error(ctx));
    }
    hd_tensor_destroy(made);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    hd_context_destroy(ctx);
}

/* ---- names and version ---- */

static void test_status_strings_cover_every_code(void **state)
{
    (void)state;
    static const struct {
        hd_status code;
        const char *name, *text;
    } table[] = {
#define ROW(name, code, text) {HD_##name, #name, text},
        HD_STATUS_MAP(ROW)
#undef ROW
    };
    size_t n = sizeof table / sizeof table[0];
    assert_int_equal(HD_OK, 0);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            assert_true(table[i].code < 0);
        assert_string_equal(hd_status_str(table[i].code), table[i].text);
        assert_string_equal(hd_status_name(table[i].code), table[i].name);
        assert_true(table[i].text[0] != '\0');
        assert_string_not_equal(table[i].text, "unknown status");
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(table[i].code, table[j].code);
            assert_string_not_equal(table[i].text, table[j].text);
        }
    }
    assert_string_equal(hd_status_str((hd_status)1), "unknown status");
    assert_string_equal(hd_status_str((hd_status)-9999), "unknown status");
    assert_string_equal(hd_status_name((hd_status)-9999), "UNKNOWN");
}

static void test_backend_and_op_names(void **state)
{
    (void)state;
    assert_string_equal(hd_backend_name(HD_BACKEND_AUTO), "auto");
    assert_string_equal(hd_backend_name(HD_BACKEND_CPU), "cpu");
    assert_string_equal(hd_backend_name(HD_BACKEND_CLBLAST), "clblast");
    assert_string_equal(hd_backend_name(HD_BACKEND_FUSED), "fused");
    assert_string_equal(hd_backend_name(HD_BACKEND_CLBLAST_FUSED), "clblast+fused");
    assert_string_equal(hd_backend_name(HD_BACKEND_COUNT), "unknown");
    assert_string_equal(hd_backend_name((hd_backend)-1), "unknown");
    assert_string_equal(hd_op_name(HD_OP_GEMM), "gemm");
    assert_string_equal(hd_op_name(HD_OP_LORA), "lora");
    assert_string_equal(hd_op_name(HD_OP_SOFTMAX), "softmax");
    assert_string_equal(hd_op_name(HD_OP_LAYER_NORM), "layer_norm");
    assert_string_equal(hd_op_name(HD_OP_RMS_NORM), "rms_norm");
    assert_string_equal(hd_op_name(HD_OP_COUNT), "unknown");
    assert_string_equal(hd_op_name((hd_op)-1), "unknown");
    /* Names round-trip through the specification parser. */
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        hd_backend got;
        assert_true(hd__backend_from_name(hd_backend_name((hd_backend)b), &got));
        assert_int_equal(got, b);
    }
    for (int op = 0; op < HD_OP_COUNT; op++) {
        hd_op got;
        assert_true(hd__op_from_name(hd_op_name((hd_op)op), &got));
        assert_int_equal(got, op);
    }
}

static void test_version_matches_the_macros(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", HD_VERSION_MAJOR, HD_VERSION_MINOR, HD_VERSION_PATCH);
    assert_string_equal(hd_version(), want);
    assert_string_equal(hd_version(), HD_VERSION_STRING);
}

/* ---- tensors ---- */

static void test_tensor_new_reads_as_zeros_and_round_trips(void **state)
{
    (void)state;
    hd_context *ctx = create_ok(NULL);
    hd_tensor *t = hd_test_tensor(ctx, 7, 13, NULL);
    assert_int_equal(hd_tensor_rows(t), 7);
    assert_int_equal(hd_tensor_cols(t), 13);
    float *z = hd_test_read(t);
    for (size_t i = 0; i < 7 * 13; i++)
        assert_true(z[i] == 0.0f);
    float data[7 * 13];
    hd_rng rng = hd_test_rng(2);
    hd_test_fill(&rng, data, 7 * 13, -1e30f, 1e30f);
    assert_int_equal(hd_tensor_write(t, data), HD_OK);
    float *got = hd_test_read(t);
    hd_test_expect_same("round trip", got, data, 7 * 13);
    free(z);
    free(got);
    hd_tensor_destroy(t);
    hd_context_destroy(ctx);
}

static void test_tensor_empty_shapes_are_allowed(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    static const size_t shapes[][2] = {{0, 0}, {0, 5}, {5, 0}};
    for (size_t i = 0; i < 3; i++) {
        hd_tensor *t = NULL;
        assert_int_equal(hd_tensor_create(ctx, shapes[i][0], shapes[i][1], &t), HD_OK);
        assert_int_equal(hd_tensor_rows(t), shapes[i][0]);
        assert_int_equal(hd_tensor_cols(t), shapes[i][1]);
        float sentinel = 42.0f;
        assert_int_equal(hd_tensor_read(t, &sentinel), HD_OK);
        assert_true(sentinel == 42.0f);
        hd_tensor_destroy(t);
    }
    hd_context_destroy(ctx);
}

/* An int32 tensor: its type; raw writes and reads of int32; float writes of whole numbers in
 * int32's range converted exactly, anything else refused with nothing written; float reads. */
static void test_int32_tensor_converts_whole_numbers_only(void **state)
{
    (void)state;
    hd_context *ctx = create_ok(NULL);
    hd_tensor *t = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 5, 1, HD_DTYPE_COUNT, &t), HD_ERR_INVALID_ARGUMENT);
    assert_null(t);
    assert_non_null(strstr(hd_context_last_error(ctx), "hd_tensor_create_ex: no element type"));
    assert_int_equal(hd_tensor_create_ex(ctx, 5, 1, (hd_dtype)-1, &t), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_tensor_create_ex(ctx, 5, 1, HD_DTYPE_I32, &t), HD_OK);
    assert_int_equal(hd_tensor_dtype(t), HD_DTYPE_I32);
    assert_int_equal(hd_tensor_dtype(NULL), HD_DTYPE_FP32);
    int32_t zeros[5] = {1, 1, 1, 1, 1};
    assert_int_equal(hd_tensor_read_raw(t, zeros), HD_OK); /* never written: zeros */
    for (int i = 0; i < 5; i++)
        assert_int_equal(zeros[i], 0);

    const int32_t raw[5] = {INT32_MIN, -1, 0, 16777217, INT32_MAX};
    assert_int_equal(hd_tensor_write_raw(t, raw), HD_OK);
    int32_t back[5];
    assert_int_equal(hd_tensor_read_raw(t, back), HD_OK);
    assert_memory_equal(back, raw, sizeof raw);
    float as_floats[5];
    assert_int_equal(hd_tensor_read(t, as_floats), HD_OK);
    assert_true(as_floats[0] == -2147483648.0f && as_floats[1] == -1.0f && as_floats[2] == 0.0f);
    assert_true(as_floats[3] == 16777216.0f); /* the nearest float */

    const float whole[5] = {-2147483648.0f, -3.0f, -0.0f, 7.0f, 2147483520.0f};
    assert_int_equal(hd_tensor_write(t, whole), HD_OK);
    assert_int_equal(hd_tensor_read_raw(t, back), HD_OK);
    const int32_t want[5] = {INT32_MIN, -3, 0, 7, 2147483520};
    assert_memory_equal(back, want, sizeof want);
    const float bad[][5] = {{0, 1, 2.5f, 3, 4},
                            {0, 1, 2, 3, 2147483648.0f},
                            {0, NAN, 2, 3, 4},
                            {0, 1, 2, -INFINITY, 4}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hd_tensor_write(t, bad[i]), HD_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(hd_context_last_error(ctx), "is not an int32 value"));
        assert_int_equal(hd_tensor_read_raw(t, back), HD_OK);
        assert_memory_equal(back, want, sizeof want); /* nothing written */
    }
    assert_int_equal(hd_tensor_write_raw(t, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_tensor_read_raw(t, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_tensor_write_raw(NULL, raw), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_tensor_read_raw(NULL, back), HD_ERR_INVALID_ARGUMENT);
    hd_tensor_destroy(t);

    /* a float tensor's raw bytes are its floats */
    hd_tensor *f = hd_test_tensor(ctx, 1, 3, (const float[]){1.5f, -2.0f, 3.25f});
    assert_int_equal(hd_tensor_dtype(f), HD_DTYPE_FP32);
    float fb[3];
    assert_int_equal(hd_tensor_read_raw(f, fb), HD_OK);
    assert_true(fb[0] == 1.5f && fb[1] == -2.0f && fb[2] == 3.25f);
    hd_tensor_destroy(f);
    hd_context_destroy(ctx);
}

/* ---- concurrency: separate contexts on separate threads ---- */

static void *thread_body(void *arg)
{
    int *ok = arg;
    hd_context_options opt = cpu_options();
    hd_context *ctx = NULL;
    *ok = 0;
    if (hd_context_create(&ctx, &opt) != HD_OK)
        return NULL;
    float x[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, y[12];
    hd_tensor *t = NULL;
    bool good = true;
    for (int iter = 0; iter < 50 && good; iter++) {
        good = hd_tensor_create(ctx, 3, 4, &t) == HD_OK && hd_tensor_write(t, x) == HD_OK &&
               hd_softmax(ctx, t, t) == HD_OK && hd_tensor_read(t, y) == HD_OK;
        for (int r = 0; r < 3 && good; r++) {
            double sum = (double)y[4 * r] + y[4 * r + 1] + y[4 * r + 2] + y[4 * r + 3];
            good = sum > 1.0 - 1e-5 && sum < 1.0 + 1e-5 && y[4 * r + 3] > y[4 * r];
        }
        hd_tensor_destroy(t);
    }
    hd_context_destroy(ctx);
    *ok = good;
    return NULL;
}

static void test_contexts_on_separate_threads_run_concurrently(void **state)
{
    (void)state;
    pthread_t threads[4];
    int ok[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, thread_body, &ok[i]), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_true(ok[i]);
    }
}

/* Contexts of different thread counts running GEMMs at the same time, while others are created
 * and destroyed on two more threads: OpenBLAS's count is one per process and its setter is not
 * safe against itself or a running product (this crashed or hung OpenBLAS's workers when
 * creating a context set it; each context's products now set it, under a lock). */
enum { THREADED_GEMM_N = 160, THREADED_GEMM_CALLS = 150 };

typedef struct threaded_gemm {
    int threads;     /* the context's count */
    const float *ab; /* A = B, n x n */
    const double *want, *bound;
    const char *failure; /* NULL: every product matched */
} threaded_gemm;

static void *threaded_gemm_body(void *arg)
{
    threaded_gemm *job = arg;
    const size_t n = THREADED_GEMM_N;
    hd_context_options opt = cpu_options();
    opt.threads = job->threads;
    hd_context *ctx = NULL;
    job->failure = "hd_context_create failed";
    if (hd_context_create(&ctx, &opt) != HD_OK)
        return NULL;
    hd_tensor *a = NULL, *c = NULL;
    float *got = malloc(n * n * sizeof *got);
    job->failure = "a call failed";
    bool good = got != NULL && hd_tensor_create(ctx, n, n, &a) == HD_OK &&
                hd_tensor_create(ctx, n, n, &c) == HD_OK && hd_tensor_write(a, job->ab) == HD_OK;
    for (int call = 0; call < THREADED_GEMM_CALLS && good; call++) {
        good = hd_gemm(ctx, false, false, 1.0f, a, a, 0.0f, c) == HD_OK &&
               hd_tensor_read(c, got) == HD_OK;
        for (size_t i = 0; i < n * n && good; i++)
            if (fabs(got[i] - job->want[i]) > 4.0 * FLT_EPSILON * job->bound[i] + 1e-30) {
                job->failure = "a product differs from the float64 reference";
                good = false;
            }
    }
    if (good)
        job->failure = NULL;
    hd_tensor_destroy(a);
    hd_tensor_destroy(c);
    hd_context_destroy(ctx);
    free(got);
    return NULL;
}

static atomic_bool threaded_gemms_done;

static void *create_and_destroy_contexts(void *arg)
{
    int *failed = arg;
    for (int k = 0; k < 100000 && !*failed && !atomic_load(&threaded_gemms_done); k++) {
        hd_context_options opt = cpu_options();
        opt.threads = 1 + k % 4;
        hd_context *ctx = NULL;
        if (hd_context_create(&ctx, &opt) != HD_OK)
            *failed = 1;
        hd_context_destroy(ctx);
    }
    return NULL;
}

static void test_contexts_of_other_thread_counts_run_gemms_at_once(void **state)
{
    (void)state;
    const size_t n = THREADED_GEMM_N;
    hd_rng rng = hd_test_rng(31);
    float *ab = hd_test_random(&rng, n * n, -1.0f, 1.0f);
    double *want = hd_test_doubles(n * n), *bound = hd_test_doubles(n * n);
    hd_ref_gemm(false, false, n, n, n, 1.0f, ab, ab, 0.0f, NULL, want, bound);
    threaded_gemm jobs[3];
    pthread_t gemm_threads[3], creators[2];
    int creator_failed[2] = {0, 0};
    atomic_store(&threaded_gemms_done, false);
    for (int i = 0; i < 3; i++) {
        jobs[i] = (threaded_gemm){.threads = i, .ab = ab, .want = want, .bound = bound};
        assert_int_equal(pthread_create(&gemm_threads[i], NULL, threaded_gemm_body, &jobs[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(
            pthread_create(&creators[i], NULL, create_and_destroy_contexts, &creator_failed[i]), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_join(gemm_threads[i], NULL), 0);
    atomic_store(&threaded_gemms_done, true);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(creators[i], NULL), 0);
    for (int i = 0; i < 3; i++)
        if (jobs[i].failure != NULL)
            fail_msg("context of %d threads: %s", jobs[i].threads, jobs[i].failure);
    assert_int_equal(creator_failed[0] + creator_failed[1], 0);
    free(ab);
    free(want);
    free(bound);
}

#ifdef HD_HAVE_OPENBLAS_THREADS
/* Each context's products run with its own count; creating one changes nothing, so a
 * creation that fails leaves OpenBLAS as it was. */
static void test_each_context_runs_openblas_with_its_own_count(void **state)
{
    (void)state;
    int before = openblas_get_num_threads();
    hd_context_options opt = cpu_options();
    opt.threads = before + 1;
    opt.backends = "no-such-backend";
    hd_context *bad = NULL;
    assert_int_equal(hd_context_create(&bad, &opt), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(openblas_get_num_threads(), before);
    opt.backends = NULL;
    hd_context *one = NULL, *three = NULL;
    opt.threads = 1;
    assert_int_equal(hd_context_create(&one, &opt), HD_OK);
    opt.threads = 3;
    assert_int_equal(hd_context_create(&three, &opt), HD_OK);
    assert_int_equal(openblas_get_num_threads(), before);
    hd_tensor *a = hd_test_tensor(one, 9, 9, NULL), *c = hd_test_tensor(one, 9, 9, NULL);
    hd_tensor *a3 = hd_test_tensor(three, 9, 9, NULL), *c3 = hd_test_tensor(three, 9, 9, NULL);
    assert_int_equal(hd_gemm(one, false, false, 1.0f, a, a, 0.0f, c), HD_OK);
    assert_int_equal(openblas_get_num_threads(), 1);
    assert_int_equal(hd_gemm(three, false, false, 1.0f, a3, a3, 0.0f, c3), HD_OK);
    assert_int_equal(openblas_get_num_threads(), 3);
    assert_int_equal(hd_gemm(one, false, false, 1.0f, a, a, 0.0f, c), HD_OK);
    assert_int_equal(openblas_get_num_threads(), 1);
    hd_tensor_destroy(a);
    hd_tensor_destroy(c);
    hd_tensor_destroy(a3);
    hd_tensor_destroy(c3);
    hd_context_destroy(one);
    hd_context_destroy(three);
}
#endif

static void test_context_threads_option_sets_the_cpu_thread_count(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    opt.threads = 1;
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(hd_context_cpu_threads(ctx), 1);
    hd_context_destroy(ctx);
    opt.threads = 3;
    setenv("HD_THREADS", "2", 1); /* the option wins over the variable */
    ctx = create_ok(&opt);
    assert_int_equal(hd_context_cpu_threads(ctx), 3);
    hd_context_destroy(ctx);
    assert_int_equal(hd_context_cpu_threads(NULL), 0);
}

static void test_context_threads_env_sets_the_cpu_thread_count(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    setenv("HD_THREADS", "2", 1);
    hd_context *ctx = create_ok(&opt);
    assert_int_equal(hd_context_cpu_threads(ctx), 2);
    hd_context_destroy(ctx);
    setenv("HD_THREADS", "0", 1); /* 0: the default, at least one thread */
    ctx = create_ok(&opt);
    assert_true(hd_context_cpu_threads(ctx) >= 1);
    hd_context_destroy(ctx);
}

/* A context without a thread setting takes OpenBLAS's own count as it was before any context
 * set one, not what the last context with a setting left in OpenBLAS (one count per process). */
static void test_context_default_threads_ignore_an_earlier_setting(void **state)
{
    (void)state;
    unsetenv("HD_THREADS");
    hd_context_options opt = cpu_options();
    hd_context *ctx = create_ok(&opt);
    size_t own = hd_context_cpu_threads(ctx);
    hd_context_destroy(ctx);
    opt.threads = (int)own + 1;
    ctx = create_ok(&opt);
    assert_int_equal(hd_context_cpu_threads(ctx), own + 1);
    hd_context_destroy(ctx);
    opt.threads = 0;
    ctx = create_ok(&opt);
    assert_int_equal(hd_context_cpu_threads(ctx), own);
    hd_context_destroy(ctx);
}

static void test_context_bad_threads_are_rejected_naming_the_value(void **state)
{
    (void)state;
    static const char *const bad[] = {"two", "-1", "2x", "99999", "+3", " +3", " -1", "4 4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("HD_THREADS", bad[i], 1);
        hd_context *ctx = (hd_context *)&ctx;
        hd_status s = hd_context_create(&ctx, NULL);
        if (s != HD_ERR_INVALID_ARGUMENT)
            fail_msg("HD_THREADS='%s': got %s", bad[i], hd_status_name(s));
        assert_null(ctx);
        char want[64];
        snprintf(want, sizeof want, "HD_THREADS='%s'", bad[i]);
        if (strstr(hd_context_last_error(NULL), want) == NULL)
            fail_msg("HD_THREADS='%s': message '%s' does not name it", bad[i],
                     hd_context_last_error(NULL));
    }
    unsetenv("HD_THREADS");
    hd_context_options opt = cpu_options();
    opt.threads = -2;
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(NULL), "threads -2"));
}

static void test_context_threads_env_ignores_blanks_around_the_number(void **state)
{
    (void)state;
    static const char *const spaced[] = {" 4", "4 ", " 4 ", "\t4\t"};
    hd_context_options opt = cpu_options();
    for (size_t i = 0; i < sizeof spaced / sizeof spaced[0]; i++) {
        setenv("HD_THREADS", spaced[i], 1);
        hd_context *ctx = create_ok(&opt);
        if (hd_context_cpu_threads(ctx) != 4)
            fail_msg("HD_THREADS='%s': %d threads", spaced[i], hd_context_cpu_threads(ctx));
        hd_context_destroy(ctx);
    }
    setenv("HD_THREADS", "  ", 1); /* blanks alone: as empty, the default */
    hd_context *ctx = create_ok(&opt);
    assert_true(hd_context_cpu_threads(ctx) >= 1);
    hd_context_destroy(ctx);
}

/* ---- the switches: one spelling of on and off for every variable ---- */

static const char *const on_spellings[] = {"1", "on", "On", "TRUE", "yes", " on "};
static const char *const off_spellings[] = {"0", "off", "OFF", "FALSE", "No", " false "};
#define SPELLINGS (sizeof on_spellings / sizeof on_spellings[0])

/* A context that may use OpenCL, with hd_test_log collecting its notes. */
static hd_context *create_with_opencl(void)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.log = hd_test_log;
    return create_ok(&opt);
}

static void test_context_disable_opencl_env_takes_every_spelling(void **state)
{
    (void)state;
    hd_context *ctx = create_with_opencl();
    char device[256];
    snprintf(device, sizeof device, "%s", hd_context_device_name(ctx));
    hd_context_destroy(ctx);
    for (size_t i = 0; i < SPELLINGS; i++) {
        setenv("HD_DISABLE_OPENCL", on_spellings[i], 1);
        ctx = create_with_opencl();
        expect_cpu_only(ctx);
        hd_context_destroy(ctx);
        setenv("HD_DISABLE_OPENCL", off_spellings[i], 1);
        ctx = create_with_opencl();
        if (strcmp(hd_context_device_name(ctx), device) != 0)
            fail_msg("HD_DISABLE_OPENCL='%s': device %s, expected %s", off_spellings[i],
                     hd_context_device_name(ctx), device);
        hd_context_destroy(ctx);
    }
}

static void test_context_log_env_takes_every_spelling(void **state)
{
    (void)state;
    hd_context_options opt = cpu_options();
    for (size_t i = 0; i < SPELLINGS; i++) {
        setenv("HD_LOG", on_spellings[i], 1);
        hd_context *ctx = create_ok(&opt);
        if (!ctx->report.log_stderr)
            fail_msg("HD_LOG='%s' does not log", on_spellings[i]);
        hd_context_destroy(ctx);
        setenv("HD_LOG", off_spellings[i], 1);
        ctx = create_ok(&opt);
        if (ctx->report.log_stderr)
            fail_msg("HD_LOG='%s' logs", off_spellings[i]);
        hd_context_destroy(ctx);
    }
}

/* Pinning is on where the device can pin and the variable says on, whatever the device. */
static void test_context_pinned_env_takes_every_spelling(void **state)
{
    (void)state;
    for (size_t i = 0; i < SPELLINGS; i++) {
        setenv("HD_PINNED", on_spellings[i], 1);
        hd_context *ctx = create_with_opencl();
        bool can_pin = ctx->dev != NULL && ctx->dev->host_alloc != NULL;
        if (ctx->pinned_host != can_pin)
            fail_msg("HD_PINNED='%s': pinned %d on a device that %s pin", on_spellings[i],
                     ctx->pinned_host, can_pin ? "can" : "cannot");
        hd_context_destroy(ctx);
        setenv("HD_PINNED", off_spellings[i], 1);
        ctx = create_with_opencl();
        if (ctx->pinned_host)
            fail_msg("HD_PINNED='%s' pins", off_spellings[i]);
        hd_context_destroy(ctx);
    }
}

static void test_env_bool_parse_takes_each_spelling_in_any_case(void **state)
{
    (void)state;
    for (size_t i = 0; i < SPELLINGS; i++) {
        bool on = false, off = true;
        if (!hd__env_bool_parse(on_spellings[i], &on) || !on)
            fail_msg("'%s' does not read as on", on_spellings[i]);
        if (!hd__env_bool_parse(off_spellings[i], &off) || off)
            fail_msg("'%s' does not read as off", off_spellings[i]);
    }
    static const char *const neither[] = {"", "  ", "2", "of", "onn", "y", "true!", "o n"};
    for (size_t i = 0; i < sizeof neither / sizeof neither[0]; i++) {
        bool untouched = true;
        if (hd__env_bool_parse(neither[i], &untouched) || !untouched)
            fail_msg("'%s' reads as a switch", neither[i]);
    }
    assert_false(hd__env_bool_parse(NULL, &(bool){true}));
}

/* $HD_PROGRAM_CACHE is read by the OpenCL runtime through hd__env_bool, on by default (off on
 * PoCL, which test_opencl_runtime checks). */
static void test_env_bool_reads_the_program_cache_switch(void **state)
{
    (void)state;
    assert_true(hd__env_bool(NULL, "HD_PROGRAM_CACHE", true));
    for (size_t i = 0; i < SPELLINGS; i++) {
        setenv("HD_PROGRAM_CACHE", off_spellings[i], 1);
        if (hd__env_bool(NULL, "HD_PROGRAM_CACHE", true))
            fail_msg("HD_PROGRAM_CACHE='%s' leaves the cache on", off_spellings[i]);
        setenv("HD_PROGRAM_CACHE", on_spellings[i], 1);
        if (!hd__env_bool(NULL, "HD_PROGRAM_CACHE", false))
            fail_msg("HD_PROGRAM_CACHE='%s' leaves the cache off", on_spellings[i]);
    }
    setenv("HD_PROGRAM_CACHE", "", 1);
    assert_true(hd__env_bool(NULL, "HD_PROGRAM_CACHE", true));
    hd_context *ctx = hd_test_context(true);
    setenv("HD_PROGRAM_CACHE", "disabled", 1);
    hd_test_notes_clear();
    assert_true(hd__env_bool(ctx, "HD_PROGRAM_CACHE", true));
    assert_non_null(strstr(hd_test_notes(), "HD_PROGRAM_CACHE='disabled' is ignored"));
    hd_context_destroy(ctx);
}

/* A value that is no switch keeps the default, and a note names it: not an error. */
static void test_context_unknown_switch_value_keeps_the_default_with_a_note(void **state)
{
    (void)state;
    hd_context *ctx = create_with_opencl();
    char device[256];
    snprintf(device, sizeof device, "%s", hd_context_device_name(ctx));
    bool pinned = ctx->pinned_host;
    hd_context_destroy(ctx);
    setenv("HD_DISABLE_OPENCL", "maybe", 1);
    setenv("HD_PINNED", "sometimes", 1);
    setenv("HD_LOG", "loud", 1);
    hd_test_notes_clear();
    ctx = create_with_opencl();
    assert_string_equal(hd_context_device_name(ctx), device);
    assert_int_equal(ctx->pinned_host, pinned);
    assert_false(ctx->report.log_stderr);
    assert_string_equal(hd_context_last_error(ctx), "");
    static const char *const named[] = {"HD_DISABLE_OPENCL='maybe'", "HD_LOG='loud'"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strstr(hd_test_notes(), named[i]) == NULL)
            fail_msg("no note names %s: '%s'", named[i], hd_test_notes());
    if (ctx->dev != NULL && ctx->dev->host_alloc != NULL &&
        strstr(hd_test_notes(), "HD_PINNED='sometimes'") == NULL)
        fail_msg("no note names HD_PINNED='sometimes': '%s'", hd_test_notes());
    hd_context_destroy(ctx);
}

/* HD_PROFILE=1: the table hd_context_destroy() prints counts each call that ran (not a refused
 * one) under its operation and backend, the first call of each shape apart. */
static void test_profile_counts_calls_and_each_shape_first(void **state)
{
    (void)state;
    setenv("HD_PROFILE", "1", 1);
    hd_context *ctx = hd_test_context(true);
    hd_tensor *a = hd_test_tensor(ctx, 3, 5, NULL), *b = hd_test_tensor(ctx, 5, 4, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 3, 4, NULL), *a7 = hd_test_tensor(ctx, 7, 5, NULL);
    hd_tensor *c7 = hd_test_tensor(ctx, 7, 4, NULL);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, b, 0.0f, c), HD_OK);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a7, b, 0.0f, c7), HD_OK);
    assert_int_equal(hd_gemm(ctx, false, false, 1.0f, a, a, 0.0f, c), HD_ERR_SHAPE_MISMATCH);
    hd_tensor *all[] = {a, b, c, a7, c7};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    hd_test_stderr capture;
    hd_test_stderr_capture(&capture);
    hd_context_destroy(ctx);
    char table[4096];
    assert_true(hd_test_stderr_release(&capture, table, sizeof table) > 0);
    const char *row = strstr(table, "\n  gemm ");
    if (row == NULL)
        fail_msg("no gemm row in the profile:\n%s", table);
    char op[32], backend[32];
    unsigned long calls = 0, shapes = 0;
    double total, per_call, share, first;
    assert_int_equal(sscanf(row, " %31s %31s %lu %lf %lf %lf%% %lu %lf", op, backend, &calls,
                            &total, &per_call, &share, &shapes, &first),
                     8);
    assert_string_equal(backend, "cpu");
    assert_int_equal(calls, 3);
    assert_int_equal(shapes, 2);
    assert_true(total >= 0.0 && first > 0.0);
}

#define WITH_ENV(test) cmocka_unit_test_setup_teardown(test, save_env, restore_env)

int main(void)
{
    hd_test_seed();
    const struct CMUnitTest tests[] = {
        WITH_ENV(test_context_create_null_out_is_invalid),
        WITH_ENV(test_profile_counts_calls_and_each_shape_first),
        WITH_ENV(test_context_create_with_defaults_has_the_cpu),
        WITH_ENV(test_context_options_init_sets_defaults),
        WITH_ENV(test_context_disable_opencl_option_gives_cpu_only),
        WITH_ENV(test_context_disable_opencl_env_gives_cpu_only),
        WITH_ENV(test_context_warmup_option_and_call_succeed_on_cpu),
        WITH_ENV(test_context_null_arguments_are_harmless),
        WITH_ENV(test_context_device_env_is_ignored_without_opencl),
        WITH_ENV(test_context_device_spec_matching_nothing_fails),
        WITH_ENV(test_context_unusable_device_leaves_a_working_context),
        WITH_ENV(test_context_unreadable_fault_item_is_noted),
        WITH_ENV(test_context_bad_backend_env_is_rejected),
        WITH_ENV(test_context_gemm_precision_is_chosen_checked_and_lowered),
        WITH_ENV(test_context_deterministic_option_and_env),
        WITH_ENV(test_context_bad_backend_option_is_rejected),
        WITH_ENV(test_context_backend_message_names_the_bad_item),
        WITH_ENV(test_context_backend_option_overrides_env),
        WITH_ENV(test_context_backend_env_cpu_runs_everything_on_the_cpu),
        WITH_ENV(test_context_backend_spec_parses_per_op_items),
        WITH_ENV(test_context_forced_backend_missing_here_falls_back_to_cpu),
        WITH_ENV(test_set_backend_rejects_bad_arguments),
        WITH_ENV(test_set_backend_cpu_and_auto_are_accepted),
        WITH_ENV(test_last_backend_tracks_successful_calls_only),
        WITH_ENV(test_last_error_is_cleared_by_the_next_successful_call),
        WITH_ENV(test_last_error_is_empty_after_success),
        WITH_ENV(test_status_strings_cover_every_code),
        WITH_ENV(test_backend_and_op_names),
        WITH_ENV(test_version_matches_the_macros),
        WITH_ENV(test_tensor_new_reads_as_zeros_and_round_trips),
        WITH_ENV(test_tensor_empty_shapes_are_allowed),
        WITH_ENV(test_int32_tensor_converts_whole_numbers_only),
        WITH_ENV(test_contexts_on_separate_threads_run_concurrently),
        WITH_ENV(test_contexts_of_other_thread_counts_run_gemms_at_once),
#ifdef HD_HAVE_OPENBLAS_THREADS
        WITH_ENV(test_each_context_runs_openblas_with_its_own_count),
#endif
        WITH_ENV(test_context_threads_option_sets_the_cpu_thread_count),
        WITH_ENV(test_context_threads_env_sets_the_cpu_thread_count),
        WITH_ENV(test_context_default_threads_ignore_an_earlier_setting),
        WITH_ENV(test_context_bad_threads_are_rejected_naming_the_value),
        WITH_ENV(test_context_threads_env_ignores_blanks_around_the_number),
        WITH_ENV(test_context_disable_opencl_env_takes_every_spelling),
        WITH_ENV(test_context_log_env_takes_every_spelling),
        WITH_ENV(test_context_pinned_env_takes_every_spelling),
        WITH_ENV(test_context_unknown_switch_value_keeps_the_default_with_a_note),
        WITH_ENV(test_env_bool_parse_takes_each_spelling_in_any_case),
        WITH_ENV(test_env_bool_reads_the_program_cache_switch),
    };
    return cmocka_run_group_tests_name("context", tests, NULL, NULL);
}
