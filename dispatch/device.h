/*
 * The context's device as the tuning cache and the tools see it: its names, whether it is a
 * GPU, the device time of what the backends queue, and (for the tools alone) the calibration
 * measurements, through the device hooks
 * (backends/backend.h), so that nothing above dispatch/ reaches the OpenCL runtime. Without a
 * device: no names (""), not a GPU, and HD_ERR_BACKEND_UNAVAILABLE from the measurements.
 */
#ifndef HD_DISPATCH_DEVICE_H
#define HD_DISPATCH_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

bool hd__device_present(const hd_context *ctx);
bool hd__device_is_gpu(const hd_context *ctx);
const char *hd__device_name(const hd_context *ctx);
const char *hd__device_driver(const hd_context *ctx);
const char *hd__device_platform(const hd_context *ctx);

/* Host memory as tensors take it: pinned where the context pins large tensors ($HD_PINNED)
 * and the device gives it (*pinned then true), else malloc's; at least one byte, zeros where
 * zeroed asks, else contents undefined. Freed with the same flag, before the context is
 * destroyed. */
void *hd__host_alloc(const hd_context *ctx, size_t bytes, bool zeroed, bool *pinned);
void hd__host_free(const hd_context *ctx, void *p, bool pinned);

/* Device time of what is queued between begin and end; end waits. Without a device, begin
 * does nothing and end fails. */
void hd__device_capture_begin(hd_context *ctx);
hd_status hd__device_capture_end(hd_context *ctx, double *seconds);

/* The calibration measurements below are the tools' (dispatch/measure.c and the device's
 * backends/opencl/measure.c, in the tools' library): libdispatch does not hold them. */

/* Device-to-device copy bandwidth over a buffer of bytes (read plus written bytes per second);
 * the cost of an empty launch, in device time and in host time to completion. Both wait. */
hd_status hd__device_copy_bandwidth(hd_context *ctx, size_t bytes, double *bytes_per_second);
hd_status hd__device_launch_latency(hd_context *ctx, double *device_seconds, double *host_seconds);

/* The fastest of repeats uploads of bytes from src to a scratch buffer of the device, each
 * timed on the host to completion after one untimed upload: the host link as a program's
 * hd_tensor_write and first device call meet it. */
hd_status hd__device_upload_seconds(hd_context *ctx, const void *src, size_t bytes,
                                    unsigned repeats, double *best_seconds);

/* Starts the device's build-ahead workers (at most 4; idempotent): programs queued by
 * hd__backend_build_ahead() are then built on them while the caller goes on. HD_OK where the
 * context has no device (nothing is built ahead then). */
hd_status hd__device_build_ahead_start(hd_context *ctx, unsigned workers);
/* Drops the builds queued and not yet started (a tuned case is over); with wait, returns once
 * those under way have ended too (before timings on the host, which need the cores). */
void hd__device_build_ahead_cancel(hd_context *ctx, bool wait);

#endif
