/* Tensors: creation, host access and lazy migration between host and device. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/context.h"
#include "dispatch/device.h"
#include "core/error.h"
#include "dispatch/tensor.h"

static size_t tensor_bytes(const hd_tensor *t)
{
    return hd__tensor_count(t) * sizeof(float);
}

hd_status hd_tensor_create(hd_context *ctx, size_t rows, size_t cols, hd_tensor **out)
{
    if (out == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_tensor_create: tensor pointer is NULL");
    *out = NULL;
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if (cols != 0 && rows > SIZE_MAX / sizeof(float) / cols)
        return hd__error(ctx, HD_ERR_SIZE_OVERFLOW,
                         "hd_tensor_create: %zu x %zu floats do not fit in memory", rows, cols);
    /* One block: the handle, then the state behind it. */
    struct block {
        hd_tensor t;
        hd_tensor_state state;
    } *b = calloc(1, sizeof *b);
    if (b == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_tensor_create: no memory for the tensor");
    hd_tensor *t = &b->t;
    t->state = &b->state;
    t->ctx = ctx;
    t->rows = rows;
    t->cols = cols;
    *out = t;
    return HD_OK;
}

static void release_device(const hd_tensor *t)
{
    if (t->state->device != NULL)
        t->ctx->dev->release(t->ctx->rt, t->state->device);
    t->state->device = NULL;
    t->state->device_valid = false;
}

void hd_tensor_destroy(hd_tensor *t)
{
    if (t == NULL)
        return;
    release_device(t);
    hd__host_free(t->ctx, t->state->host, t->state->host_pinned);
    free(t);
}

size_t hd_tensor_rows(const hd_tensor *t)
{
    return t == NULL ? 0 : t->rows;
}

size_t hd_tensor_cols(const hd_tensor *t)
{
    return t == NULL ? 0 : t->cols;
}

static hd_status ensure_host_storage(const hd_tensor *t)
{
    if (t->state->host != NULL)
        return HD_OK;
    /* Zeroed: a tensor never written reads as zeros. At least one element, so that empty
     * tensors still have an address. */
    size_t n = hd__tensor_count(t);
    t->state->host =
        hd__host_alloc(t->ctx, (n > 0 ? n : 1) * sizeof(float), true, &t->state->host_pinned);
    if (t->state->host == NULL)
        return hd__error(t->ctx, HD_ERR_OUT_OF_MEMORY, "no host memory for a %zu x %zu tensor",
                         t->rows, t->cols);
    return HD_OK;
}

hd_status hd__tensor_reserve(const hd_tensor *t, hd_place place)
{
    if (place == HD_PLACE_HOST)
        return ensure_host_storage(t);
    if (t->state->device != NULL)
        return HD_OK;
    if (t->ctx->dev == NULL)
        return hd__error(t->ctx, HD_ERR_BACKEND_UNAVAILABLE, "the context has no device");
    return t->ctx->dev->acquire(t->ctx->rt, t->ctx, tensor_bytes(t), &t->state->device);
}

hd_status hd__tensor_to_host(const hd_tensor *t)
{
    hd_status s = ensure_host_storage(t);
    if (s != HD_OK || t->state->host_valid)
        return s;
    if (t->state->device_valid) {
        s = t->ctx->dev->download(t->ctx->rt, t->ctx, t->state->device, t->state->host,
                                  tensor_bytes(t));
        if (s != HD_OK)
            return s;
        t->state->stay_us = 0.0; /* the copy is paid: staying is counted afresh */
    }
    /* Neither place valid: the calloc'd zeros are the contents. */
    t->state->host_valid = true;
    return HD_OK;
}

hd_status hd__tensor_to_device(const hd_tensor *t)
{
    if (t->state->device_valid)
        return HD_OK;
    hd_status s = hd__tensor_reserve(t, HD_PLACE_DEVICE);
    if (s != HD_OK)
        return s;
    if (t->state->host_valid) {
        s = t->ctx->dev->upload(t->ctx->rt, t->ctx, t->state->device, t->state->host,
                                tensor_bytes(t));
        if (s == HD_OK) /* the copy is paid: staying is counted afresh */
            t->state->stay_us = 0.0;
    } else {
        s = t->ctx->dev->zero(t->ctx->rt, t->ctx, t->state->device, tensor_bytes(t));
    }
    if (s != HD_OK)
        return s;
    t->state->device_valid = true;
    return HD_OK;
}

hd_status hd__tensor_to_place(const hd_tensor *t, hd_place place)
{
    return place == HD_PLACE_HOST ? hd__tensor_to_host(t) : hd__tensor_to_device(t);
}

void hd__tensor_written(const hd_tensor *t, hd_place place)
{
    bool stays = place == HD_PLACE_HOST ? t->state->host_valid : t->state->device_valid;
    if (!stays) /* written where it was not: what staying elsewhere cost is void */
        t->state->stay_us = 0.0;
    t->state->host_valid = place == HD_PLACE_HOST;
    t->state->device_valid = place == HD_PLACE_DEVICE;
}

size_t hd__tensor_migration_bytes(const hd_tensor *t, hd_place place)
{
    bool valid_there = place == HD_PLACE_HOST ? t->state->host_valid : t->state->device_valid;
    bool valid_elsewhere = place == HD_PLACE_HOST ? t->state->device_valid : t->state->host_valid;
    return valid_there || !valid_elsewhere ? 0 : tensor_bytes(t);
}

hd_status hd__tensor_prefetch(const hd_tensor *t)
{
    return t->ctx->dev != NULL ? hd__tensor_to_device(t) : HD_OK;
}

hd_status hd_tensor_prefetch(hd_tensor *t)
{
    if (t == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(t->ctx);
    return hd__tensor_prefetch(t);
}

hd_status hd_tensor_write(hd_tensor *t, const float *src)
{
    if (t == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(t->ctx);
    if (src == NULL && hd__tensor_count(t) > 0)
        return hd__error(t->ctx, HD_ERR_INVALID_ARGUMENT, "hd_tensor_write: source is NULL");
    hd_status s = ensure_host_storage(t);
    if (s != HD_OK)
        return s;
    if (hd__tensor_count(t) > 0)
        memcpy(t->state->host, src, tensor_bytes(t));
    hd__tensor_written(t, HD_PLACE_HOST);
    return HD_OK;
}

hd_status hd_tensor_read(const hd_tensor *t, float *dst)
{
    if (t == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(t->ctx);
    if (dst == NULL && hd__tensor_count(t) > 0)
        return hd__error(t->ctx, HD_ERR_INVALID_ARGUMENT, "hd_tensor_read: destination is NULL");
    if (hd__tensor_count(t) == 0)
        return HD_OK;
    hd_status s = hd__tensor_to_host(t); /* reading may migrate: the state behind the handle */
    if (s != HD_OK)
        return s;
    memcpy(dst, t->state->host, tensor_bytes(t));
    return HD_OK;
}
