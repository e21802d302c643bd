/*
 * The device's calibration measurements: device-to-device copy bandwidth, the cost of an
 * empty launch, and uploads from the host, on whichever runtime the device runs. Part of the
 * tools' library (dispatch-autotune, dispatch-bench, the tests), not of libdispatch: the
 * library only reads what the tuner recorded. The tools reach them through dispatch/device.h
 * (dispatch/measure.c).
 */
#include <stdlib.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/runtime/runtime.h"
#include "core/error.h"

#ifndef HD_TIMING_REPS
#define HD_TIMING_REPS 9
#endif

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hd_status time_copies(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *src,
                             struct hd_device_buffer *dst, size_t bytes, double *seconds)
{
    double t[HD_TIMING_REPS];
    hd_status s = HD_OK;
    for (int i = -1; i < HD_TIMING_REPS && s == HD_OK; i++) { /* i = -1: warm-up */
        double dt = 0.0;
        hd__rt_capture_begin(rt);
        s = hd__rt_copy(rt, ctx, dst->mem, 0, src->mem, 0, bytes);
        hd_status end = hd__rt_capture_end(rt, ctx, &dt);
        if (s == HD_OK)
            s = end;
        if (i >= 0)
            t[i] = dt;
    }
    if (s == HD_OK)
        *seconds = median(t, HD_TIMING_REPS);
    return s;
}

static hd_status copy_bandwidth(hd_runtime *rt, hd_context *ctx, size_t bytes,
                                double *bytes_per_second)
{
    *bytes_per_second = 0.0;
    if (bytes == 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "copy bandwidth over 0 bytes");
    struct hd_device_buffer *src = NULL, *dst = NULL;
    hd_status s = hd__rt_buffer_acquire(rt, ctx, bytes, &src);
    if (s == HD_OK)
        s = hd__rt_buffer_acquire(rt, ctx, bytes, &dst);
    if (s == HD_OK)
        s = hd__rt_zero(rt, ctx, src->mem, bytes);
    if (s == HD_OK)
        s = hd__rt_zero(rt, ctx, dst->mem, bytes);
    double seconds = 0.0;
    if (s == HD_OK)
        s = time_copies(rt, ctx, src, dst, bytes, &seconds);
    hd__rt_buffer_release(rt, src);
    hd__rt_buffer_release(rt, dst);
    if (s == HD_OK && seconds > 0.0)
        *bytes_per_second = 2.0 * (double)bytes / seconds;
    return s;
}

static hd_status upload_seconds(hd_runtime *rt, hd_context *ctx, const void *src, size_t bytes,
                                unsigned repeats, double *best_seconds)
{
    *best_seconds = 0.0;
    struct hd_device_buffer *buf = NULL;
    hd_status s = hd__rt_buffer_acquire(rt, ctx, bytes, &buf);
    for (unsigned i = 0; i <= repeats && s == HD_OK; i++) { /* i = 0: warm-up */
        double t0 = now_seconds();
        s = hd__rt_upload(rt, ctx, buf, src, bytes);
        if (s == HD_OK)
            s = hd__rt_finish(rt, ctx);
        double t = now_seconds() - t0;
        if (s == HD_OK && i > 0 && (*best_seconds == 0.0 || t < *best_seconds))
            *best_seconds = t;
    }
    hd__rt_buffer_release(rt, buf);
    return s;
}

static const char empty_source[] = "__kernel void hd_empty(void) {}\n";

static hd_status launch_latency(hd_runtime *rt, hd_context *ctx, double *device_seconds,
                                double *host_seconds)
{
    *device_seconds = *host_seconds = 0.0;
    hd_kernel *kernel = NULL;
    hd_status s = hd__rt_kernel(rt, ctx, empty_source, "", "hd_empty", &kernel);
    if (s == HD_OK)
        s = hd__rt_finish(rt, ctx); /* start from an idle queue */
    double dev[HD_TIMING_REPS], host[HD_TIMING_REPS];
    for (int i = -2; i < HD_TIMING_REPS && s == HD_OK; i++) { /* i < 0: warm-up */
        double t0 = now_seconds(), dt = 0.0;
        hd__rt_capture_begin(rt);
        s = hd__rt_launch(rt, ctx, kernel, (const size_t[2]){1, 1}, 1);
        hd_status end = hd__rt_capture_end(rt, ctx, &dt); /* waits */
        double t1 = now_seconds();
        if (s == HD_OK)
            s = end;
        if (s == HD_OK && i >= 0) {
            dev[i] = dt;
            host[i] = t1 - t0;
        }
    }
    if (s != HD_OK)
        return s;
    *device_seconds = median(dev, HD_TIMING_REPS);
    *host_seconds = median(host, HD_TIMING_REPS);
    return HD_OK;
}

extern const hd_device_measure_ops hd__runtime_measure_ops;

const hd_device_measure_ops hd__runtime_measure_ops = {
    .copy_bandwidth = copy_bandwidth,
    .launch_latency = launch_latency,
    .upload_seconds = upload_seconds,
    .build_ahead_start = hd__rt_build_ahead_start,
    .build_ahead_cancel = hd__rt_build_ahead_cancel,
};
