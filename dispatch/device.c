/* The context's device through its hooks (dispatch/device.h). */
#include <stdlib.h>
#include <string.h>

#include "dispatch/context.h"
#include "dispatch/device.h"
#include "core/error.h"

bool hd__device_present(const hd_context *ctx)
{
    return ctx != NULL && ctx->dev != NULL;
}

bool hd__device_is_gpu(const hd_context *ctx)
{
    return hd__device_present(ctx) && ctx->dev->is_gpu(ctx->rt);
}

const char *hd__device_name(const hd_context *ctx)
{
    return hd__device_present(ctx) ? ctx->dev->name(ctx->rt) : "";
}

const char *hd__device_driver(const hd_context *ctx)
{
    return hd__device_present(ctx) ? ctx->dev->driver(ctx->rt) : "";
}

const char *hd__device_platform(const hd_context *ctx)
{
    return hd__device_present(ctx) ? ctx->dev->platform(ctx->rt) : "";
}

/* Host copies of at least this many bytes are pinned where the context says so: a copy to or
 * from the device then runs at the link's speed instead of through the driver's staging
 * (on NVIDIA, uploads of 64 MiB ran several times faster than from pageable memory:
 * BENCHMARKS.md at commit 89a17cb). Smaller ones are not worth the pinning's cost per
 * allocation. */
#define HD_PINNED_MIN_BYTES ((size_t)1 << 20)

void *hd__host_alloc(const hd_context *ctx, size_t bytes, bool zeroed, bool *pinned)
{
    *pinned = false;
    if (ctx->pinned_host && bytes >= HD_PINNED_MIN_BYTES) {
        void *p = ctx->dev->host_alloc(ctx->rt, bytes);
        if (p != NULL) {
            *pinned = true;
            return zeroed ? memset(p, 0, bytes) : p;
        }
    }
    /* calloc's zeros cost nothing until the pages are touched */
    return zeroed ? calloc(bytes > 0 ? bytes : 1, 1) : malloc(bytes > 0 ? bytes : 1);
}

void hd__host_free(const hd_context *ctx, void *p, bool pinned)
{
    if (pinned)
        ctx->dev->host_free(ctx->rt, p);
    else
        free(p);
}

static hd_status no_device(hd_context *ctx)
{
    return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "the context has no device to measure");
}

void hd__device_capture_begin(hd_context *ctx)
{
    if (hd__device_present(ctx))
        ctx->dev->capture_begin(ctx->rt);
}

hd_status hd__device_capture_end(hd_context *ctx, double *seconds)
{
    return hd__device_present(ctx) ? ctx->dev->capture_end(ctx->rt, ctx, seconds) : no_device(ctx);
}
