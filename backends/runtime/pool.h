/*
 * A pool of device memory keyed by size class, over a runtime's allocate and free (the CUDA
 * runtime's device memory, OpenCL's buffers). Reusing a pooled allocation needs no
 * synchronisation where the runtime has one in-order queue: every command that used it before
 * its release runs before any command of its next owner.
 *
 * At most cap_bytes stay idle. A release that would pass the cap hands back the allocations
 * idle longest first, so that what a program uses now stays pooled: a large buffer released
 * once (a 1 GiB logits tensor) must not leave every later call to allocate and free its
 * scratch, which on the CUDA runtime waits for the device.
 */
#ifndef HD_BACKENDS_RUNTIME_POOL_H
#define HD_BACKENDS_RUNTIME_POOL_H

#include <stddef.h>

#include "backends/runtime/runtime.h"

/* Size classes: four per octave (1, 1.25, 1.5, 1.75 times a power of two), so a pooled
 * allocation wastes at most a fifth of itself; the smallest class is HD_POOL_MIN_BYTES. */
#define HD_POOL_MIN_BYTES 256u
#define HD_POOL_CLASSES   (64 * 4)

/* The class of a request of bytes, and the capacity that class allocates. */
size_t hd__pool_size_class(size_t bytes, size_t *capacity);

typedef enum hd_pool_result {
    HD_POOL_OK,
    HD_POOL_FULL,   /* the device has no memory left */
    HD_POOL_FAILED, /* any other failure */
} hd_pool_result;

struct hd_pool_entry;

typedef struct hd_pool {
    void *owner;
    hd_pool_result (*alloc)(void *owner, size_t bytes, hd_devmem *out);
    void (*free)(void *owner, hd_devmem mem);
    struct hd_pool_entry *free_lists[HD_POOL_CLASSES]; /* idle, the latest released first */
    struct hd_pool_entry *oldest, *newest;             /* idle, in the order released */
    size_t pooled_bytes, cap_bytes;
    size_t max_bytes;   /* the device's largest allocation (0: no limit): a class past it
                           allocates this much, and is never pooled */
    size_t allocations; /* alloc calls that succeeded */
    size_t reuses;      /* acquisitions served from the pool */
} hd_pool;

/* An empty pool over alloc and free, keeping idle at most an eighth of device_bytes (1 GiB at
 * most). */
void hd__pool_init(hd_pool *pool, void *owner,
                   hd_pool_result (*alloc)(void *owner, size_t bytes, hd_devmem *out),
                   void (*free)(void *owner, hd_devmem mem), size_t device_bytes);
hd_status hd__pool_acquire(hd_pool *pool, hd_context *ctx, size_t bytes,
                           struct hd_device_buffer **out);
void hd__pool_release(hd_pool *pool, struct hd_device_buffer *buf); /* NULL: no-op */
/* Memory outside the pool (hd__rt_scratch_create), the idle allocations handed back and the
 * allocation tried again where the device is full. */
hd_status hd__pool_scratch(hd_pool *pool, hd_context *ctx, size_t bytes, const char *what,
                           hd_devmem *out);
/* Frees every idle allocation. */
void hd__pool_trim(hd_pool *pool);

/* HD_ERR_INTERNAL, naming what, where bytes do not fit in buf: a copy's bounds, checked by
 * either runtime before it reaches the driver. */
hd_status hd__buffer_check_range(hd_context *ctx, const struct hd_device_buffer *buf, size_t bytes,
                                 const char *what);

#endif
