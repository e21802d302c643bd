/*
 * The device's calibration measurements: device-to-device copy bandwidth, the cost of an
 * empty launch, and uploads from the host. Part of the tools' library (dispatch-autotune,
 * dispatch-bench, the tests), not of libdispatch: the library only reads what the tuner
 * recorded. The tools reach them through dispatch/device.h (dispatch/measure.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "backends/opencl/internal.h"
#include "core/error.h"

#ifndef HD_CL_TIMING_REPS
#define HD_CL_TIMING_REPS 9
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

static hd_status event_seconds(hd_context *ctx, cl_event ev, double *out)
{
    cl_ulong start = 0, end = 0;
    cl_int err = clWaitForEvents(1, &ev);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    clReleaseEvent(ev);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clGetEventProfilingInfo");
    *out = end > start ? (double)(end - start) * 1e-9 : 0.0;
    return HD_OK;
}

static hd_status time_copies(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *src,
                             struct hd_device_buffer *dst, size_t bytes, double *seconds)
{
    double t[HD_CL_TIMING_REPS];
    for (int i = -1; i < HD_CL_TIMING_REPS; i++) { /* i = -1: warm-up */
        cl_event ev = NULL;
        cl_int err = clEnqueueCopyBuffer(rt->queue, src->mem, dst->mem, 0, 0, bytes, 0, NULL, &ev);
        if (err != CL_SUCCESS)
            return hd__cl_error(ctx, err, "clEnqueueCopyBuffer");
        double dt;
        hd_status s = event_seconds(ctx, ev, &dt);
        if (s != HD_OK)
            return s;
        if (i >= 0)
            t[i] = dt;
    }
    *seconds = median(t, HD_CL_TIMING_REPS);
    return HD_OK;
}

hd_status hd__cl_copy_bandwidth(hd_cl_runtime *rt, hd_context *ctx, size_t bytes,
                                double *bytes_per_second)
{
    *bytes_per_second = 0.0;
    if (bytes == 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "copy bandwidth over 0 bytes");
    struct hd_device_buffer *src = NULL, *dst = NULL;
    hd_status s = hd__cl_buffer_acquire(rt, ctx, bytes, &src);
    if (s == HD_OK)
        s = hd__cl_buffer_acquire(rt, ctx, bytes, &dst);
    if (s == HD_OK)
        s = hd__cl_zero(rt, ctx, src, bytes);
    if (s == HD_OK)
        s = hd__cl_zero(rt, ctx, dst, bytes);
    double seconds = 0.0;
    if (s == HD_OK)
        s = time_copies(rt, ctx, src, dst, bytes, &seconds);
    hd__cl_buffer_release(rt, src);
    hd__cl_buffer_release(rt, dst);
    if (s == HD_OK && seconds > 0.0)
        *bytes_per_second = 2.0 * (double)bytes / seconds;
    return s;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

hd_status hd__cl_upload_seconds(hd_cl_runtime *rt, hd_context *ctx, const void *src, size_t bytes,
                                unsigned repeats, double *best_seconds)
{
    *best_seconds = 0.0;
    struct hd_device_buffer *buf = NULL;
    hd_status s = hd__cl_buffer_acquire(rt, ctx, bytes, &buf);
    for (unsigned i = 0; i <= repeats && s == HD_OK; i++) { /* i = 0: warm-up */
        double t0 = now_seconds();
        s = hd__cl_upload(rt, ctx, buf, src, bytes);
        if (s == HD_OK)
            s = hd__cl_finish(rt, ctx);
        double t = now_seconds() - t0;
        if (s == HD_OK && i > 0 && (*best_seconds == 0.0 || t < *best_seconds))
            *best_seconds = t;
    }
    if (buf != NULL)
        hd__cl_buffer_release(rt, buf);
    return s;
}

static const char empty_source[] = "__kernel void hd_empty(void) {}\n";

hd_status hd__cl_launch_latency(hd_cl_runtime *rt, hd_context *ctx, double *device_seconds,
                                double *host_seconds)
{
    *device_seconds = *host_seconds = 0.0;
    cl_program program;
    cl_kernel kernel;
    hd_status s = hd__cl_program(rt, ctx, empty_source, NULL, &program);
    if (s == HD_OK)
        s = hd__cl_kernel(rt, ctx, program, "hd_empty", &kernel);
    if (s == HD_OK)
        s = hd__cl_finish(rt, ctx); /* start from an idle queue */
    double dev[HD_CL_TIMING_REPS], host[HD_CL_TIMING_REPS];
    const size_t one = 1;
    for (int i = -2; i < HD_CL_TIMING_REPS && s == HD_OK; i++) { /* i < 0: warm-up */
        cl_event ev = NULL;
        double t0 = now_seconds();
        cl_int err = clEnqueueNDRangeKernel(rt->queue, kernel, 1, NULL, &one, &one, 0, NULL, &ev);
        if (err == CL_SUCCESS)
            err = clFinish(rt->queue);
        double t1 = now_seconds();
        if (err != CL_SUCCESS) {
            if (ev != NULL)
                clReleaseEvent(ev);
            return hd__cl_error(ctx, err, "clEnqueueNDRangeKernel");
        }
        double dt = 0.0;
        s = event_seconds(ctx, ev, &dt);
        if (s == HD_OK && i >= 0) {
            dev[i] = dt;
            host[i] = t1 - t0;
        }
    }
    if (s != HD_OK)
        return s;
    *device_seconds = median(dev, HD_CL_TIMING_REPS);
    *host_seconds = median(host, HD_CL_TIMING_REPS);
    return HD_OK;
}

extern const hd_device_measure_ops hd__opencl_measure_ops;

const hd_device_measure_ops hd__opencl_measure_ops = {
    .copy_bandwidth = hd__cl_copy_bandwidth,
    .launch_latency = hd__cl_launch_latency,
    .upload_seconds = hd__cl_upload_seconds,
    .build_ahead_start = hd__cl_build_ahead_start,
    .build_ahead_cancel = hd__cl_build_ahead_cancel,
};
