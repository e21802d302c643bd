/* Timing one operation in the device, sync, chain and host modes; bandwidth figures for the
 * roofline. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autotune/measure.h"
#include "dispatch/device.h"
#include "core/error.h"
#include "dispatch/tools.h"

static const char *const mode_names[HD_MEASURE_MODE_COUNT] = {"device", "sync", "chain", "host"};

const char *hd__measure_mode_name(hd_measure_mode mode)
{
    return (unsigned)mode < HD_MEASURE_MODE_COUNT ? mode_names[mode] : "unknown";
}

bool hd__measure_mode_from_name(const char *name, hd_measure_mode *mode)
{
    for (int m = 0; name != NULL && m < HD_MEASURE_MODE_COUNT; m++) {
        if (strcmp(name, mode_names[m]) == 0) {
            *mode = (hd_measure_mode)m;
            return true;
        }
    }
    return false;
}

double hd__measure_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hd__measure_median(double *values, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(values, n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void hd__measure_config_init(hd_measure_config *cfg, hd_measure_mode mode)
{
    *cfg = (hd_measure_config){
        .mode = mode,
        .warmup = 3,
        .min_runs = 5,
        .max_runs = 1000,
        .budget_s = 0.5,
        .chain_length = 0,
        .input_sets = 1,
    };
}

static volatile sig_atomic_t *stop_flag;

void hd__measure_set_stop_flag(volatile sig_atomic_t *flag)
{
    stop_flag = flag;
}

static int kept_stderr = STDERR_FILENO;

void hd__measure_keep_stderr(void)
{
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd >= 0)
        kept_stderr = fd;
}

int hd__measure_stderr_fd(void)
{
    return kept_stderr;
}

FILE *hd__measure_stderr(void)
{
    static FILE *kept;
    if (kept == NULL && kept_stderr != STDERR_FILENO) {
        int fd = fcntl(kept_stderr, F_DUPFD_CLOEXEC, 3);
        kept = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (kept != NULL)
            setvbuf(kept, NULL, _IONBF, 0); /* unbuffered, as stderr */
        else if (fd >= 0)
            close(fd);
    }
    return kept != NULL ? kept : stderr;
}

static bool stopping(void)
{
    return stop_flag != NULL && *stop_flag != 0;
}

/* Whether the last op ran where device events cannot see it. */
static bool ran_on_host(const hd_context *ctx)
{
    hd_backend b = hd_context_last_backend(ctx);
    return b == HD_BACKEND_AUTO || !hd__backend_usable(ctx, b) ||
           hd__backend_place(ctx, b) == HD_PLACE_HOST;
}

/* One device-mode sample: the op between capture_begin and capture_end. An op on the CPU left
 * nothing to capture; its host wall time stands in, and *host_timed says so. */
static hd_status sample_device(hd_context *ctx, hd_measure_fn fn, void *user, size_t set,
                               double *seconds, bool *host_timed)
{
    if (hd__device_present(ctx)) {
        double t0 = hd__measure_now();
        hd__device_capture_begin(ctx);
        hd_status s = fn(ctx, user, set);
        double device_s = 0.0;
        hd_status e = hd__device_capture_end(ctx, &device_s);
        double t1 = hd__measure_now();
        if (s != HD_OK)
            return s;
        if (ran_on_host(ctx)) {
            *seconds = t1 - t0;
            *host_timed = true;
            return HD_OK;
        }
        *seconds = device_s;
        return e;
    }
    double t0 = hd__measure_now();
    hd_status s = fn(ctx, user, set);
    if (s == HD_OK)
        s = hd_sync(ctx);
    *seconds = hd__measure_now() - t0;
    *host_timed = true;
    return s;
}

static hd_status sample_sync(hd_context *ctx, hd_measure_fn fn, void *user, size_t set,
                             double *seconds)
{
    double t0 = hd__measure_now();
    hd_status s = fn(ctx, user, set);
    if (s == HD_OK)
        s = hd_sync(ctx);
    *seconds = hd__measure_now() - t0;
    return s;
}

static hd_status sample_chain(hd_context *ctx, hd_measure_fn fn, void *user, size_t sets,
                              size_t *next_set, unsigned length, double *seconds)
{
    double t0 = hd__measure_now();
    for (unsigned i = 0; i < length; i++) {
        hd_status s = fn(ctx, user, *next_set);
        *next_set = (*next_set + 1) % sets;
        if (s != HD_OK)
            return s;
    }
    hd_status s = hd_sync(ctx);
    *seconds = (hd__measure_now() - t0) / length;
    return s;
}

/* A chain of length calls on input set `set`, after reset wrote it again from the host. */
static hd_status sample_host(hd_context *ctx, const hd_measure_config *cfg, hd_measure_fn fn,
                             void *user, size_t set, unsigned length, double *seconds)
{
    hd_status s = cfg->reset(ctx, user, set);
    if (s != HD_OK)
        return s;
    double t0 = hd__measure_now();
    for (unsigned i = 0; i < length && s == HD_OK; i++)
        s = fn(ctx, user, set);
    if (s == HD_OK)
        s = hd_sync(ctx);
    *seconds = (hd__measure_now() - t0) / length;
    return s;
}

/* Warm-up: every input set once at least, so each is resident and every kernel built. Returns
 * the sync time of the last call, the estimate that sizes a chain. */
static hd_status warm_up(hd_context *ctx, const hd_measure_config *cfg, hd_measure_fn fn,
                         void *user, size_t sets, double *last_s)
{
    unsigned count = cfg->warmup > sets ? cfg->warmup : (unsigned)sets;
    if (count == 0)
        count = 1;
    for (unsigned i = 0; i < count && !(i > 0 && stopping()); i++) {
        hd_status s = sample_sync(ctx, fn, user, i % sets, last_s);
        if (s != HD_OK)
            return s;
    }
    return HD_OK;
}

unsigned hd__measure_chain_length(double op_s)
{
    double want = op_s > 0.0 ? 2e-3 / op_s : 256.0;
    return want < 4.0 ? 4u : want > 256.0 ? 256u : (unsigned)want;
}

static unsigned chain_length_for(const hd_measure_config *cfg, double op_s)
{
    return cfg->chain_length > 0 ? cfg->chain_length : hd__measure_chain_length(op_s);
}

hd_status hd__measure(hd_context *ctx, const hd_measure_config *cfg, hd_measure_fn fn, void *user,
                      hd_measure_result *out)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    if (cfg == NULL || fn == NULL || out == NULL || (unsigned)cfg->mode >= HD_MEASURE_MODE_COUNT ||
        (cfg->mode == HD_MEASURE_HOST && cfg->reset == NULL))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd__measure: bad configuration");
    size_t sets = cfg->input_sets > 0 ? cfg->input_sets : 1;
    unsigned max_runs = cfg->max_runs == 0 ? 1 : cfg->max_runs;
    if (max_runs > HD_MEASURE_MAX_RUNS)
        max_runs = HD_MEASURE_MAX_RUNS;
    unsigned min_runs = cfg->min_runs > max_runs ? max_runs : cfg->min_runs;

    hd_status s = hd_sync(ctx);
    double warm_s = 0.0;
    if (s == HD_OK)
        s = warm_up(ctx, cfg, fn, user, sets, &warm_s);
    if (s != HD_OK)
        return s;

    double *samples = malloc(max_runs * sizeof *samples);
    if (samples == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd__measure: %u samples", max_runs);

    *out = (hd_measure_result){.mode = cfg->mode, .chain_length = 1};
    if (cfg->mode == HD_MEASURE_CHAIN || cfg->mode == HD_MEASURE_HOST)
        out->chain_length = chain_length_for(cfg, warm_s);
    size_t set = 0;
    double spent = 0.0;
    unsigned runs = 0;
    while (runs < max_runs && (runs < min_runs || spent < cfg->budget_s) &&
           !(runs > 0 && stopping())) {
        double t0 = hd__measure_now(), seconds = 0.0;
        switch (cfg->mode) {
        case HD_MEASURE_DEVICE:
            s = sample_device(ctx, fn, user, set, &seconds, &out->host_timed);
            set = (set + 1) % sets;
            break;
        case HD_MEASURE_SYNC:
            s = sample_sync(ctx, fn, user, set, &seconds);
            set = (set + 1) % sets;
            break;
        case HD_MEASURE_CHAIN:
            s = sample_chain(ctx, fn, user, sets, &set, out->chain_length, &seconds);
            break;
        default:
            s = sample_host(ctx, cfg, fn, user, set, out->chain_length, &seconds);
            set = (set + 1) % sets;
            break;
        }
        spent += hd__measure_now() - t0;
        if (s != HD_OK)
            break;
        samples[runs++] = seconds;
    }
    if (s == HD_OK)
        s = hd_sync(ctx);
    if (s == HD_OK) {
        out->runs = runs;
        out->ran_on = hd_context_last_backend(ctx);
        out->median_s = hd__measure_median(samples, runs);
        out->min_s = runs ? samples[0] : 0.0;
        out->max_s = runs ? samples[runs - 1] : 0.0;
    }
    free(samples);
    return s;
}

hd_status hd__measure_host_bandwidth(size_t bytes, double *bytes_per_second)
{
    if (bytes_per_second == NULL || bytes < 2 * sizeof(double))
        return HD_ERR_INVALID_ARGUMENT;
    size_t half = bytes / 2;
    char *src = malloc(half), *dst = malloc(half);
    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return HD_ERR_OUT_OF_MEMORY;
    }
    /* Touch both buffers first so page faults are not timed. */
    memset(src, 1, half);
    memset(dst, 2, half);
    double best = 0.0;
    for (int i = 0; i < 5; i++) {
        double t0 = hd__measure_now();
        memcpy(dst, src, half);
        double t = hd__measure_now() - t0;
        src[i] = dst[half - 1 - (size_t)i]; /* keeps the copies from being folded away */
        if (t > 0.0 && (double)(2 * half) / t > best)
            best = (double)(2 * half) / t;
    }
    free(src);
    free(dst);
    *bytes_per_second = best;
    return best > 0.0 ? HD_OK : HD_ERR_INTERNAL;
}

hd_status hd__measure_device_bandwidth(hd_context *ctx, size_t bytes, double *bytes_per_second)
{
    if (ctx == NULL || bytes_per_second == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    return hd__device_copy_bandwidth(ctx, bytes, bytes_per_second);
}

bool hd__measure_has_device(const hd_context *ctx)
{
    return hd__device_present(ctx);
}

bool hd__measure_device_is_gpu(const hd_context *ctx)
{
    return hd__device_is_gpu(ctx);
}

const char *hd__measure_device_driver(const hd_context *ctx)
{
    return hd__device_driver(ctx);
}

const char *hd__measure_device_platform(const hd_context *ctx)
{
    return hd__device_platform(ctx);
}
