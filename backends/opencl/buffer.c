/*
 * Device buffers: a pool keyed by size class, and the copies between host and device.
 *
 * Reusing a pooled buffer needs no synchronisation: there is one in-order queue, so every
 * command that used the buffer before its release runs before any command of its next owner.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/internal.h"
#include "core/error.h"

/* Uploads up to this size return before the copy runs, from a host copy of the source: a chain
 * of device ops then never waits for the queue to drain (a blocking write in an in-order queue
 * waits for every earlier command). Larger uploads block: the extra host copy would cost about
 * as much as the wait. */
#ifndef HD_CL_STAGED_UPLOAD_MAX
#define HD_CL_STAGED_UPLOAD_MAX ((size_t)4 << 20)
#endif
/* Host copies in flight beyond this make the next upload wait for the queue. */
#ifndef HD_CL_STAGED_BYTES_MAX
#define HD_CL_STAGED_BYTES_MAX ((size_t)64 << 20)
#endif

struct hd_cl_staging {
    cl_event done;
    size_t bytes;
    struct hd_cl_staging *next;
    /* the copied bytes follow */
};

static bool allocation_failure(cl_int err)
{
    return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES;
}

/* Creates a buffer and touches it. Some drivers (NVIDIA's among them) reserve memory only when
 * a buffer is first used, so clCreateBuffer succeeds and the failure would surface in a later
 * kernel launch, far from its cause and after the dispatcher chose the device. A 4-byte fill
 * makes it surface here, once per allocation (pooled reuses skip it). */
static cl_int create_touched(hd_cl_runtime *rt, size_t capacity, cl_mem *out)
{
    cl_int err;
    cl_mem mem = clCreateBuffer(rt->context, CL_MEM_READ_WRITE, capacity, NULL, &err);
    if (mem == NULL)
        return err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE;
    const cl_uint zero = 0;
    err = clEnqueueFillBuffer(rt->queue, mem, &zero, sizeof zero, 0, sizeof zero, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(mem);
        return err;
    }
    *out = mem;
    return CL_SUCCESS;
}

/* The pool's allocations: touched buffers (create_touched; the pool hands its idle ones back
 * and tries again where the device is full). */
static hd_pool_result pool_alloc(void *owner, size_t bytes, hd_devmem *out)
{
    hd_cl_runtime *rt = owner;
    cl_mem mem = NULL;
    cl_int err = create_touched(rt, bytes, &mem);
    if (err != CL_SUCCESS) {
        rt->pool_error = err;
        return allocation_failure(err) ? HD_POOL_FULL : HD_POOL_FAILED;
    }
    *out = (hd_devmem)(void *)mem;
    return HD_POOL_OK;
}

static void pool_free(void *owner, hd_devmem mem)
{
    (void)owner;
    clReleaseMemObject(hd__cl_mem(mem)); /* the driver frees it after the commands using it */
}

hd_status hd__cl_scratch_create(hd_cl_runtime *rt, hd_context *ctx, size_t bytes, const char *what,
                                cl_mem *out)
{
    hd_devmem mem = NULL;
    rt->pool_error = CL_SUCCESS;
    hd_status s = hd__pool_scratch(&rt->pool, ctx, bytes, what, &mem);
    *out = (cl_mem)(void *)mem;
    if (s != HD_OK && rt->pool_error != CL_SUCCESS) { /* the driver's own code */
        char call[96];
        snprintf(call, sizeof call, "clCreateBuffer (%s)", what);
        return hd__cl_error(ctx, rt->pool_error, call);
    }
    return s;
}

void hd__cl_scratch_free(hd_cl_runtime *rt, cl_mem mem)
{
    (void)rt;
    if (mem != NULL)
        clReleaseMemObject(mem); /* freed once the queued launches using it ran */
}

void hd__cl_pool_init(hd_cl_runtime *rt, cl_ulong global_mem, cl_ulong max_alloc)
{
    hd__pool_init(&rt->pool, rt, pool_alloc, pool_free,
                  global_mem < SIZE_MAX ? (size_t)global_mem : SIZE_MAX);
    rt->pool.max_bytes = max_alloc < SIZE_MAX ? (size_t)max_alloc : SIZE_MAX;
}

hd_status hd__cl_buffer_acquire(hd_cl_runtime *rt, hd_context *ctx, size_t bytes,
                                struct hd_device_buffer **out)
{
    *out = NULL;
    if (rt->max_alloc > 0 && bytes > rt->max_alloc)
        return hd__error(ctx, HD_ERR_DEVICE_OUT_OF_MEMORY,
                         "a buffer of %zu bytes exceeds the device's largest allocation "
                         "(%llu bytes)",
                         bytes, (unsigned long long)rt->max_alloc);
    rt->pool_error = CL_SUCCESS;
    hd_status s = hd__pool_acquire(&rt->pool, ctx, bytes, out);
    if (s != HD_OK && rt->pool_error != CL_SUCCESS)
        return hd__cl_error(ctx, rt->pool_error, "clCreateBuffer"); /* the driver's own code */
    if (s == HD_OK)
        rt->live_buffers++;
    return s;
}

void hd__cl_buffer_release(hd_cl_runtime *rt, struct hd_device_buffer *buf)
{
    if (rt == NULL || buf == NULL)
        return;
    rt->live_buffers--;
    hd__pool_release(&rt->pool, buf);
}

void hd__cl_pool_trim(hd_cl_runtime *rt)
{
    hd__pool_trim(&rt->pool);
}

void hd__cl_pool_counters(const hd_cl_runtime *rt, struct hd_cl_pool_counters *out)
{
    *out = (struct hd_cl_pool_counters){.allocations = rt->pool.allocations,
                                        .reuses = rt->pool.reuses,
                                        .pooled_bytes = rt->pool.pooled_bytes};
}

void hd__cl_staging_reclaim(hd_cl_runtime *rt, bool wait)
{
    while (rt->staging != NULL) {
        struct hd_cl_staging *s = rt->staging;
        cl_int status = CL_COMPLETE;
        if (wait)
            clWaitForEvents(1, &s->done);
        else if (clGetEventInfo(s->done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                NULL) != CL_SUCCESS)
            status = CL_COMPLETE; /* an event we cannot ask about is one we cannot wait on */
        if (status > CL_COMPLETE)
            break; /* in order: the later ones are not done either */
        rt->staging = s->next;
        if (rt->staging == NULL)
            rt->staging_tail = NULL;
        rt->staged_bytes -= s->bytes;
        clReleaseEvent(s->done);
        free(s);
    }
}

/* Copies src aside and enqueues a non-blocking write from the copy; false when there is no
 * memory for the copy (the caller then writes blocking). */
static bool upload_staged(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                          const void *src, size_t bytes, hd_status *status)
{
    hd__cl_staging_reclaim(rt, rt->staged_bytes + bytes > HD_CL_STAGED_BYTES_MAX);
    struct hd_cl_staging *s = malloc(sizeof *s + bytes);
    if (s == NULL)
        return false;
    void *copy = s + 1;
    memcpy(copy, src, bytes);
    cl_int err = clEnqueueWriteBuffer(rt->queue, hd__cl_mem(buf->mem), CL_FALSE, 0, bytes, copy, 0,
                                      NULL, &s->done);
    if (err != CL_SUCCESS) {
        free(s);
        *status = hd__cl_error(ctx, err, "clEnqueueWriteBuffer");
        return true;
    }
    s->bytes = bytes;
    s->next = NULL;
    if (rt->staging_tail != NULL)
        rt->staging_tail->next = s;
    else
        rt->staging = s;
    rt->staging_tail = s;
    rt->staged_bytes += bytes;
    *status = HD_OK;
    return true;
}

hd_status hd__cl_upload(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                        const void *src, size_t bytes)
{
    hd_status s = hd__buffer_check_range(ctx, buf, bytes, "upload");
    if (s != HD_OK || bytes == 0)
        return s;
    if (bytes <= HD_CL_STAGED_UPLOAD_MAX && upload_staged(rt, ctx, buf, src, bytes, &s))
        return s;
    cl_int err = clEnqueueWriteBuffer(rt->queue, hd__cl_mem(buf->mem), CL_TRUE, 0, bytes, src, 0,
                                      NULL, NULL);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clEnqueueWriteBuffer");
    return HD_OK;
}

hd_status hd__cl_download(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                          void *dst, size_t bytes)
{
    hd_status s = hd__buffer_check_range(ctx, buf, bytes, "download");
    if (s != HD_OK || bytes == 0)
        return s;
    cl_int err =
        clEnqueueReadBuffer(rt->queue, hd__cl_mem(buf->mem), CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clEnqueueReadBuffer");
    hd__cl_staging_reclaim(rt, false);
    return HD_OK;
}

hd_status hd__cl_zero(hd_cl_runtime *rt, hd_context *ctx, cl_mem mem, size_t bytes)
{
    if (bytes == 0)
        return HD_OK;
    const cl_uint zero = 0;
    size_t pattern = bytes % sizeof zero == 0 ? sizeof zero : 1;
    cl_int err = clEnqueueFillBuffer(rt->queue, mem, &zero, pattern, 0, bytes, 0, NULL,
                                     hd__cl_event_slot(rt));
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clEnqueueFillBuffer");
    return HD_OK;
}

hd_status hd__cl_copy(hd_cl_runtime *rt, hd_context *ctx, cl_mem dst, size_t dst_offset, cl_mem src,
                      size_t src_offset, size_t bytes)
{
    if (bytes == 0)
        return HD_OK;
    cl_int err = clEnqueueCopyBuffer(rt->queue, src, dst, src_offset, dst_offset, bytes, 0, NULL,
                                     hd__cl_event_slot(rt));
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clEnqueueCopyBuffer");
    return HD_OK;
}
