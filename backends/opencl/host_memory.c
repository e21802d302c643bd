/*
 * Pinned host memory for tensors' host copies: a buffer of CL_MEM_ALLOC_HOST_PTR mapped once
 * for the life of the allocation. NVIDIA's driver (the way its OpenCL guide gives) backs such a
 * buffer with page-locked memory, and copies from and to it run as direct transfers at the
 * link's speed, where pageable memory goes through the driver's own staging copies. The map
 * and unmap go through a queue of their own, so that neither waits for the work on the
 * runtime's queue.
 *
 * Such a buffer also holds as much device memory on NVIDIA's driver (an H100 showed 4 GiB more
 * in use for 4 GiB of pinned host copies), so pinned memory is capped at an eighth of the
 * device's (pinned_cap), counted over every context on the device in the process; beyond it
 * the caller takes ordinary memory.
 *
 * The buffer's handle sits in a header before the memory handed out, so that freeing needs
 * only the pointer.
 */
#include <string.h>

#include "backends/opencl/internal.h"

/* The header: the buffer and where it is mapped; 64 bytes keep the memory after it aligned
 * for any vector type. */
typedef struct pinned_header {
    cl_mem mem;
    void *base;
    size_t bytes; /* counted in the device's pinned_bytes */
} pinned_header;
#define PINNED_HEADER_BYTES 64

static bool map_queue(hd_cl_runtime *rt)
{
    if (rt->map_queue != NULL)
        return true;
    cl_int err;
    rt->map_queue = clCreateCommandQueue(rt->context, rt->device, 0, &err);
    return rt->map_queue != NULL;
}

void *hd__cl_host_alloc(hd_cl_runtime *rt, size_t bytes)
{
    if (bytes > SIZE_MAX - PINNED_HEADER_BYTES || !map_queue(rt))
        return NULL;
    size_t total = bytes + PINNED_HEADER_BYTES;
    if (total > rt->max_alloc)
        return NULL;
    /* the bytes are taken from the device's cap before the buffer exists, so that contexts in
     * other threads cannot pass it together */
    size_t used = atomic_load(rt->pinned_bytes);
    do {
        if (total > rt->pinned_cap - used)
            return NULL;
    } while (!atomic_compare_exchange_weak(rt->pinned_bytes, &used, used + total));
    cl_int err;
    cl_mem mem =
        clCreateBuffer(rt->context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, total, NULL, &err);
    void *base = mem == NULL
                     ? NULL
                     : clEnqueueMapBuffer(rt->map_queue, mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                          0, total, 0, NULL, NULL, &err);
    if (base == NULL || err != CL_SUCCESS) {
        if (mem != NULL)
            clReleaseMemObject(mem);
        atomic_fetch_sub(rt->pinned_bytes, total);
        return NULL;
    }
    pinned_header h = {mem, base, total};
    memcpy(base, &h, sizeof h);
    return (char *)base + PINNED_HEADER_BYTES;
}

void hd__cl_host_free(hd_cl_runtime *rt, void *p)
{
    if (p == NULL)
        return;
    pinned_header h;
    memcpy(&h, (char *)p - PINNED_HEADER_BYTES, sizeof h);
    clEnqueueUnmapMemObject(rt->map_queue, h.mem, h.base, 0, NULL, NULL);
    clFinish(rt->map_queue);
    clReleaseMemObject(h.mem);
    atomic_fetch_sub(rt->pinned_bytes, h.bytes);
}
