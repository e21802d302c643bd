/* The size-classed pool of device memory (pool.h). */
#include <stdlib.h>

#include "backends/runtime/pool.h"
#include "core/error.h"

#define POOL_CAP_MAX ((size_t)1 << 30)

struct hd_pool_entry {
    struct hd_device_buffer buf; /* first: the pointer handed out converts back */
    struct hd_pool_entry *next;  /* its class's idle list */
    struct hd_pool_entry *older, *newer;
};

size_t hd__pool_size_class(size_t bytes, size_t *capacity)
{
    if (bytes <= HD_POOL_MIN_BYTES) {
        *capacity = HD_POOL_MIN_BYTES;
        return 0;
    }
    unsigned k = 0;
    while (k < 63 && ((size_t)1 << (k + 1)) <= bytes)
        k++;
    size_t step = ((size_t)1 << k) / 4;
    size_t q = (bytes + step - 1) / step; /* 4..8 */
    if (q == 8) {
        k++;
        q = 4;
        step *= 2;
    }
    *capacity = q * step;
    return (size_t)(k - 8) * 4 + (q - 4);
}

void hd__pool_init(hd_pool *pool, void *owner,
                   hd_pool_result (*alloc)(void *owner, size_t bytes, hd_devmem *out),
                   void (*free_)(void *owner, hd_devmem mem), size_t device_bytes)
{
    *pool = (hd_pool){.owner = owner, .alloc = alloc, .free = free_};
    pool->cap_bytes = device_bytes / 8 < POOL_CAP_MAX ? device_bytes / 8 : POOL_CAP_MAX;
}

/* An allocation, tried again after the idle ones are handed back where the device is full. */
static hd_pool_result allocate(hd_pool *pool, size_t bytes, hd_devmem *out)
{
    hd_pool_result r = pool->alloc(pool->owner, bytes, out);
    if (r == HD_POOL_FULL && pool->pooled_bytes > 0) {
        hd__pool_trim(pool);
        r = pool->alloc(pool->owner, bytes, out);
    }
    pool->allocations += r == HD_POOL_OK;
    return r;
}

/* e out of the release order (it stays in its class's list). */
static void unlink_idle(hd_pool *pool, struct hd_pool_entry *e)
{
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        pool->oldest = e->newer;
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        pool->newest = e->older;
    e->older = e->newer = NULL;
    pool->pooled_bytes -= e->buf.capacity;
}

/* Hands the allocation idle longest back to the driver. */
static void evict_oldest(hd_pool *pool)
{
    struct hd_pool_entry *e = pool->oldest;
    size_t capacity;
    struct hd_pool_entry **at = &pool->free_lists[hd__pool_size_class(e->buf.capacity, &capacity)];
    while (*at != e)
        at = &(*at)->next;
    *at = e->next;
    unlink_idle(pool, e);
    pool->free(pool->owner, e->buf.mem);
    free(e);
}

static hd_status failed(hd_context *ctx, hd_pool_result r, size_t bytes, const char *what)
{
    return hd__error(ctx, r == HD_POOL_FULL ? HD_ERR_DEVICE_OUT_OF_MEMORY : HD_ERR_DEVICE,
                     "the device could not allocate %zu bytes (%s)", bytes, what);
}

hd_status hd__pool_acquire(hd_pool *pool, hd_context *ctx, size_t bytes,
                           struct hd_device_buffer **out)
{
    *out = NULL;
    size_t capacity;
    size_t cls = hd__pool_size_class(bytes, &capacity);
    struct hd_pool_entry *e = pool->free_lists[cls];
    if (e != NULL) {
        pool->free_lists[cls] = e->next;
        unlink_idle(pool, e);
        pool->reuses++;
    } else {
        if (pool->max_bytes > 0 && capacity > pool->max_bytes)
            capacity = pool->max_bytes; /* not a class size: released straight to the driver */
        e = calloc(1, sizeof *e);
        if (e == NULL)
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for a buffer record");
        hd_pool_result r = allocate(pool, capacity, &e->buf.mem);
        if (r != HD_POOL_OK) {
            free(e);
            return failed(ctx, r, capacity, "a buffer");
        }
        e->buf.capacity = capacity;
    }
    e->next = NULL;
    e->buf.bytes = bytes;
    *out = &e->buf;
    return HD_OK;
}

void hd__pool_release(hd_pool *pool, struct hd_device_buffer *buf)
{
    if (buf == NULL)
        return;
    struct hd_pool_entry *e = (struct hd_pool_entry *)buf;
    size_t capacity;
    size_t cls = hd__pool_size_class(buf->capacity, &capacity);
    if (capacity != buf->capacity || capacity > pool->cap_bytes) {
        pool->free(pool->owner, buf->mem);
        free(e);
        return;
    }
    while (pool->pooled_bytes + capacity > pool->cap_bytes)
        evict_oldest(pool);
    e->next = pool->free_lists[cls];
    pool->free_lists[cls] = e;
    e->older = pool->newest;
    e->newer = NULL;
    if (pool->newest != NULL)
        pool->newest->newer = e;
    else
        pool->oldest = e;
    pool->newest = e;
    pool->pooled_bytes += capacity;
}

hd_status hd__pool_scratch(hd_pool *pool, hd_context *ctx, size_t bytes, const char *what,
                           hd_devmem *out)
{
    *out = NULL;
    hd_pool_result r = allocate(pool, bytes > 0 ? bytes : 1, out);
    return r == HD_POOL_OK ? HD_OK : failed(ctx, r, bytes, what);
}

void hd__pool_trim(hd_pool *pool)
{
    for (size_t c = 0; c < HD_POOL_CLASSES; c++) {
        while (pool->free_lists[c] != NULL) {
            struct hd_pool_entry *e = pool->free_lists[c];
            pool->free_lists[c] = e->next;
            pool->free(pool->owner, e->buf.mem);
            free(e);
        }
    }
    pool->oldest = pool->newest = NULL;
    pool->pooled_bytes = 0;
}

hd_status hd__buffer_check_range(hd_context *ctx, const struct hd_device_buffer *buf, size_t bytes,
                                 const char *what)
{
    if (bytes > buf->capacity)
        return hd__error(ctx, HD_ERR_INTERNAL, "%s: %zu bytes into a buffer of %zu", what, bytes,
                         buf->capacity);
    return HD_OK;
}
