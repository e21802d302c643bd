/* The device's calibration measurements as the tools call them (dispatch/device.h): in the
 * tools' library, not in libdispatch. */
#include "backends/backend.h"
#include "dispatch/context.h"
#include "dispatch/device.h"
#include "core/error.h"

/* The build's measurement hooks where ctx has a device, else NULL with the context's error
 * set. */
static const hd_device_measure_ops *measure_ops(hd_context *ctx)
{
    const hd_device_measure_ops *m = hd__registry_device_measure();
    if (hd__device_present(ctx) && m != NULL)
        return m;
    hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "the context has no device to measure");
    return NULL;
}

hd_status hd__device_copy_bandwidth(hd_context *ctx, size_t bytes, double *bytes_per_second)
{
    *bytes_per_second = 0.0;
    const hd_device_measure_ops *m = measure_ops(ctx);
    return m != NULL ? m->copy_bandwidth(ctx->rt, ctx, bytes, bytes_per_second)
                     : HD_ERR_BACKEND_UNAVAILABLE;
}

hd_status hd__device_launch_latency(hd_context *ctx, double *device_seconds, double *host_seconds)
{
    *device_seconds = *host_seconds = 0.0;
    const hd_device_measure_ops *m = measure_ops(ctx);
    return m != NULL ? m->launch_latency(ctx->rt, ctx, device_seconds, host_seconds)
                     : HD_ERR_BACKEND_UNAVAILABLE;
}

hd_status hd__device_upload_seconds(hd_context *ctx, const void *src, size_t bytes,
                                    unsigned repeats, double *best_seconds)
{
    *best_seconds = 0.0;
    const hd_device_measure_ops *m = measure_ops(ctx);
    return m != NULL ? m->upload_seconds(ctx->rt, ctx, src, bytes, repeats, best_seconds)
                     : HD_ERR_BACKEND_UNAVAILABLE;
}

hd_status hd__device_build_ahead_start(hd_context *ctx, unsigned workers)
{
    const hd_device_measure_ops *m = hd__registry_device_measure();
    if (!hd__device_present(ctx) || m == NULL || m->build_ahead_start == NULL)
        return HD_OK;
    return m->build_ahead_start(ctx->rt, ctx, workers);
}

void hd__device_build_ahead_cancel(hd_context *ctx, bool wait)
{
    const hd_device_measure_ops *m = hd__registry_device_measure();
    if (hd__device_present(ctx) && m != NULL && m->build_ahead_cancel != NULL)
        m->build_ahead_cancel(ctx->rt, wait);
}
