/* Tensors: creation, host access and lazy migration between host and device. */
#include <math.h>
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

static hd_status create(hd_context *ctx, const char *fn, size_t rows, size_t cols, hd_dtype dtype,
                        hd_tensor **out);

hd_status hd_tensor_create(hd_context *ctx, size_t rows, size_t cols, hd_tensor **out)
{
    return create(ctx, "hd_tensor_create", rows, cols, HD_DTYPE_FP32, out);
}

hd_status hd_tensor_create_ex(hd_context *ctx, size_t rows, size_t cols, hd_dtype dtype,
                              hd_tensor **out)
{
    return create(ctx, "hd_tensor_create_ex", rows, cols, dtype, out);
}

static hd_status create(hd_context *ctx, const char *fn, size_t rows, size_t cols, hd_dtype dtype,
                        hd_tensor **out)
{
    if (out == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: tensor pointer is NULL", fn);
    *out = NULL;
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if ((unsigned)dtype >= (unsigned)HD_DTYPE_COUNT)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: no element type %d", fn, (int)dtype);
    if (cols != 0 && rows > SIZE_MAX / sizeof(float) / cols)
        return hd__error(ctx, HD_ERR_SIZE_OVERFLOW, "%s: %zu x %zu elements do not fit in memory",
                         fn, rows, cols);
    /* One block: the handle, then the state behind it. */
    struct block {
        hd_tensor t;
        hd_tensor_state state;
    } *b = calloc(1, sizeof *b);
    if (b == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "%s: no memory for the tensor", fn);
    hd_tensor *t = &b->t;
    t->state = &b->state;
    t->ctx = ctx;
    t->rows = rows;
    t->cols = cols;
    t->dtype = dtype;
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

hd_dtype hd_tensor_dtype(const hd_tensor *t)
{
    return t == NULL ? HD_DTYPE_FP32 : t->dtype;
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

/* src's floats as int32, into dst: each a whole number in int32's range, else nothing is
 * written and the first that is not is named. */
static hd_status floats_to_ids(const hd_tensor *t, const float *src, int32_t *dst)
{
    size_t n = hd__tensor_count(t);
    for (size_t i = 0; i < n; i++) {
        float v = src[i];
        /* -2^31 is exact in float; 2^31 is the first float past int32's range */
        if (!(v >= -2147483648.0f && v < 2147483648.0f && v == truncf(v)))
            return hd__error(t->ctx, HD_ERR_INVALID_ARGUMENT,
                             "hd_tensor_write: element %zu (%g) is not an int32 value", i,
                             (double)v);
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = (int32_t)src[i];
    return HD_OK;
}

/* Copies src into t's host copy, converted from floats where `convert` and t holds int32. */
static hd_status write_host(hd_tensor *t, const void *src, bool convert, const char *fn)
{
    if (t == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(t->ctx);
    if (src == NULL && hd__tensor_count(t) > 0)
        return hd__error(t->ctx, HD_ERR_INVALID_ARGUMENT, "%s: source is NULL", fn);
    hd_status s = ensure_host_storage(t);
    if (s != HD_OK || hd__tensor_count(t) == 0) {
        if (s == HD_OK)
            hd__tensor_written(t, HD_PLACE_HOST);
        return s;
    }
    if (convert && t->dtype == HD_DTYPE_I32)
        s = floats_to_ids(t, src, (int32_t *)(void *)t->state->host);
    else
        memcpy(t->state->host, src, tensor_bytes(t));
    if (s == HD_OK)
        hd__tensor_written(t, HD_PLACE_HOST);
    return s;
}

hd_status hd_tensor_write(hd_tensor *t, const float *src)
{
    return write_host(t, src, true, "hd_tensor_write");
}

hd_status hd_tensor_write_raw(hd_tensor *t, const void *src)
{
    return write_host(t, src, false, "hd_tensor_write_raw");
}

/* Copies t's contents, valid on the host first, into dst, converted to floats where
 * `convert` and t holds int32. */
static hd_status read_host(const hd_tensor *t, void *dst, bool convert, const char *fn)
{
    if (t == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(t->ctx);
    if (dst == NULL && hd__tensor_count(t) > 0)
        return hd__error(t->ctx, HD_ERR_INVALID_ARGUMENT, "%s: destination is NULL", fn);
    if (hd__tensor_count(t) == 0)
        return HD_OK;
    hd_status s = hd__tensor_to_host(t); /* reading may migrate: the state behind the handle */
    if (s != HD_OK)
        return s;
    if (convert && t->dtype == HD_DTYPE_I32) {
        const int32_t *ids = hd__tensor_host_ids(t);
        float *out = dst;
        for (size_t i = 0, n = hd__tensor_count(t); i < n; i++)
            out[i] = (float)ids[i];
    } else {
        memcpy(dst, t->state->host, tensor_bytes(t));
    }
    return HD_OK;
}

hd_status hd_tensor_read(const hd_tensor *t, float *dst)
{
    return read_host(t, dst, true, "hd_tensor_read");
}

hd_status hd_tensor_read_raw(const hd_tensor *t, void *dst)
{
    return read_host(t, dst, false, "hd_tensor_read_raw");
}
