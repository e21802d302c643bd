/*
 * Timing one operation, shared by dispatch-autotune and dispatch-bench.
 *
 * The operation is a callback that enqueues it on the context (it may run synchronously on the
 * CPU). Three modes, because on small operations they differ by an order of magnitude and a
 * figure means nothing without its mode:
 *
 *   device  device events around one op: first command's start to last command's end. An op
 *           that ran on the CPU backend has no events: its host wall time is used instead and
 *           the result says so (host_timed).
 *   sync    host wall time of one op plus hd_sync().
 *   chain   chain_length ops queued back to back, one hd_sync(), the total divided by the count.
 *   host    as chain, each sample on inputs first written again from the host (the reset
 *           callback, untimed): what a loop over host-written data costs per call, the moves
 *           that the scheduler makes (or does not) included.
 *
 * Each measurement first runs warm-up calls (at least one per input set, so that every set is
 * resident where the op runs and every kernel is built), then repeats until the time budget is
 * spent and at least min_runs samples are taken (at most max_runs), and reports median, min and
 * max. The callback receives the index of the input set to use, rotating over input_sets: when
 * the inputs fit in a cache, rotating among 2-4 sets keeps a figure from being a cache-hit
 * figure. Filling the sets with fresh random data is the caller's job.
 */
#ifndef HD_AUTOTUNE_MEASURE_H
#define HD_AUTOTUNE_MEASURE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <hd/dispatch.h>

typedef enum hd_measure_mode {
    HD_MEASURE_DEVICE = 0,
    HD_MEASURE_SYNC,
    HD_MEASURE_CHAIN,
    HD_MEASURE_HOST,
    HD_MEASURE_MODE_COUNT
} hd_measure_mode;

/* Enqueues one operation using input set `set` (0 <= set < input_sets). Returns HD_OK once it is
 * queued or done, or the status of the failing call. */
typedef hd_status (*hd_measure_fn)(hd_context *ctx, void *user, size_t set);

typedef struct hd_measure_config {
    hd_measure_mode mode;
    unsigned warmup;       /* warm-up calls before timing (raised to input_sets) */
    unsigned min_runs;     /* samples taken even when the budget is spent */
    unsigned max_runs;     /* at most this many samples (capped at HD_MEASURE_MAX_RUNS) */
    double budget_s;       /* stop taking samples once this much time went into them */
    unsigned chain_length; /* ops per sample in the chain and host modes; 0: enough for about
                              2 ms, 4..256 */
    size_t input_sets;     /* sets the callback rotates over; 0 counts as 1 */
    hd_measure_fn reset;   /* host mode (required there): writes input set `set` again from
                              the host, so that it is valid there alone */
} hd_measure_config;

#define HD_MEASURE_MAX_RUNS 10000

typedef struct hd_measure_result {
    hd_measure_mode mode;
    double median_s, min_s, max_s; /* per op */
    unsigned runs;                 /* samples taken */
    unsigned chain_length;         /* ops per sample: 1 except in chain mode */
    bool host_timed;               /* device mode on an op that ran on the CPU: host wall time */
    hd_backend ran_on;             /* hd_context_last_backend() after the last timed call */
} hd_measure_result;

/* Defaults: 3 warm-up calls, at least 5 and at most 1000 samples, 0.5 s, chain auto, 1 set. */
void hd__measure_config_init(hd_measure_config *cfg, hd_measure_mode mode);

/* The chain length "auto" gives an op that takes op_s seconds: enough calls for about 2 ms,
 * 4..256 (256 for op_s <= 0). */
unsigned hd__measure_chain_length(double op_s);

/*
 * Times fn as cfg says. Waits for the context before starting and after the last call. Returns
 * HD_OK with *out filled, HD_ERR_INVALID_ARGUMENT (NULL argument, unknown mode), the first
 * failing status of fn or hd_sync (the context's message says more), or HD_ERR_OUT_OF_MEMORY.
 */
hd_status hd__measure(hd_context *ctx, const hd_measure_config *cfg, hd_measure_fn fn, void *user,
                      hd_measure_result *out);

/* A flag the tools' SIGINT handler sets: once it is non-zero, hd__measure() stops after the
 * call in progress and reports the samples taken so far (at least one), so that an interrupt
 * takes effect within one call rather than one measurement. NULL: never stop early. */
void hd__measure_set_stop_flag(volatile sig_atomic_t *flag);

/* Where the tools' signal handlers write: a copy of the standard error the tool started with.
 * The library sends file descriptor 2 to a temporary file around each kernel build, to catch
 * what the compiler prints, and a message written to 2 in the meantime would end up there.
 * hd__measure_keep_stderr() makes the copy (at start, before any build); the handlers write
 * to hd__measure_stderr_fd(), which is 2 where no copy could be made. */
void hd__measure_keep_stderr(void);
int hd__measure_stderr_fd(void);
/* A stream on that copy, for the tools' own lines (stderr where none was made): kernel builds
 * on other threads (the tuner's build-ahead workers) redirect descriptor 2 while they run, and
 * would swallow what the tools write there meanwhile. */
FILE *hd__measure_stderr(void);

/* "device", "sync", "chain", "host". */
const char *hd__measure_mode_name(hd_measure_mode mode);
bool hd__measure_mode_from_name(const char *name, hd_measure_mode *mode);

/* Monotonic wall clock in seconds. */
double hd__measure_now(void);

/* Median of n values (sorts them in place); 0 for n = 0. */
double hd__measure_median(double *values, size_t n);

/*
 * Roofline helpers. Host memory bandwidth: memcpy over a buffer of bytes (read plus written
 * bytes per second, best of a few copies). Device bandwidth of the context's OpenCL device
 * through a copy kernel; HD_ERR_BACKEND_UNAVAILABLE without a device.
 */
hd_status hd__measure_host_bandwidth(size_t bytes, double *bytes_per_second);
hd_status hd__measure_device_bandwidth(hd_context *ctx, size_t bytes, double *bytes_per_second);
/* Whether the context has an OpenCL device, and whether that device is a GPU. */
bool hd__measure_has_device(const hd_context *ctx);
bool hd__measure_device_is_gpu(const hd_context *ctx);
/* Driver and platform of the context's device, "" without one. */
const char *hd__measure_device_driver(const hd_context *ctx);
const char *hd__measure_device_platform(const hd_context *ctx);

#endif
