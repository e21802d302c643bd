/*
 * Host-built tables that calls hand to their kernels (RoPE's positions and frequencies,
 * attention's sequence ranges), kept on the device between calls. A call whose table holds the
 * bytes of the last one of its kind uses the copy already there: the layers of a step share
 * their positions and ranges, forward and backward, so each is copied once, and a chain of
 * calls has no transfer from the host queued between its kernels (which the device runs in
 * order with them, each costing about a short kernel's time).
 *
 * The tables are read by kernels only. One that changes is written over on the context's
 * in-order queue, after the launches that read its old bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/fused/internal.h"

hd_status hd__fused_table(hd_fused *f, hd_context *ctx, hd_fused_table_kind kind, const void *src,
                          size_t bytes, const struct hd_device_buffer **out)
{
    struct hd_fused_table *t = &f->tables[kind];
    if (t->buffer != NULL && t->bytes == bytes &&
        (bytes == 0 || memcmp(t->host, src, bytes) == 0)) {
        *out = t->buffer;
        return HD_OK;
    }
    *out = NULL;
    /* forgotten until the new bytes are copied, so that a failed copy leaves none to match */
    struct hd_device_buffer *buffer = t->buffer;
    t->buffer = NULL;
    if (buffer != NULL && buffer->capacity < bytes) {
        hd__fused_buffer_release(f, buffer);
        buffer = NULL;
    }
    hd_status s = buffer != NULL ? HD_OK : hd__fused_buffer(f, ctx, bytes, &buffer);
    if (s == HD_OK && bytes > t->capacity) {
        void *host = realloc(t->host, bytes);
        if (host == NULL)
            s = hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: a table of %zu bytes", bytes);
        else {
            t->host = host;
            t->capacity = bytes;
        }
    }
    if (s == HD_OK && bytes > 0)
        s = hd__rt_upload(f->rt, ctx, buffer, src, bytes);
    if (s != HD_OK) {
        hd__fused_buffer_release(f, buffer);
        return s;
    }
    if (bytes > 0)
        memcpy(t->host, src, bytes);
    t->buffer = buffer;
    t->bytes = bytes;
    *out = buffer;
    return HD_OK;
}

void hd__fused_tables_release(hd_fused *f)
{
    for (int k = 0; k < HD_FUSED_TABLE_COUNT; k++) {
        hd__fused_buffer_release(f, f->tables[k].buffer);
        free(f->tables[k].host);
        f->tables[k] = (struct hd_fused_table){0};
    }
}
