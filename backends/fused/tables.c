/*
 * Host-built tables that calls hand to their kernels (RoPE's positions and frequencies,
 * attention's sequence ranges), kept on the device between calls. Each is named by the key of
 * the recipe it is made from (the sequences' lengths, RoPE's base and head size): a call whose
 * key is the last one's of its kind uses the copy already there, and neither makes the table
 * nor compares it. The layers of a step share their positions and ranges, forward and
 * backward, so each is made and copied once; a chain of calls has no transfer from the host
 * queued between its kernels (which the device runs in order with them, each costing about a
 * short kernel's time), and a short call's host time is its launch.
 *
 * The tables are read by kernels only. One that changes is written over on the context's
 * in-order queue, after the launches that read its old bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/fused/internal.h"

static bool same_key(const struct hd_fused_table *t, const hd_fused_recipe *r)
{
    if (t->key_bytes != r->key_bytes[0] + r->key_bytes[1])
        return false;
    const char *kept = t->key;
    return (r->key_bytes[0] == 0 || memcmp(kept, r->key[0], r->key_bytes[0]) == 0) &&
           (r->key_bytes[1] == 0 ||
            memcmp(kept + r->key_bytes[0], r->key[1], r->key_bytes[1]) == 0);
}

/* The table made and copied into buffer (whose capacity holds it). */
static hd_status make_and_copy(hd_fused *f, hd_context *ctx, const hd_fused_recipe *r,
                               struct hd_device_buffer *buffer)
{
    if (r->bytes == 0)
        return HD_OK;
    void *table = malloc(r->bytes);
    if (table == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: a table of %zu bytes", r->bytes);
    r->make(r->arg, table);
    hd_status s = hd__rt_upload(f->rt, ctx, buffer, table, r->bytes);
    free(table);
    return s;
}

hd_status hd__fused_table(hd_fused *f, hd_context *ctx, hd_fused_table_kind kind,
                          const hd_fused_recipe *r, const struct hd_device_buffer **out)
{
    struct hd_fused_table *t = &f->tables[kind];
    if (t->buffer != NULL && t->bytes == r->bytes && same_key(t, r)) {
        *out = t->buffer;
        return HD_OK;
    }
    *out = NULL;
    /* forgotten until the new table is copied, so that a failed copy leaves none to match */
    struct hd_device_buffer *buffer = t->buffer;
    t->buffer = NULL;
    if (buffer != NULL && buffer->capacity < r->bytes) {
        hd__fused_buffer_release(f, buffer);
        buffer = NULL;
    }
    hd_status s = buffer != NULL ? HD_OK : hd__fused_buffer(f, ctx, r->bytes, &buffer);
    size_t key_bytes = r->key_bytes[0] + r->key_bytes[1];
    if (s == HD_OK && key_bytes > t->capacity) {
        void *key = realloc(t->key, key_bytes);
        if (key == NULL)
            s = hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "fused: a table's key of %zu bytes",
                          key_bytes);
        else {
            t->key = key;
            t->capacity = key_bytes;
        }
    }
    if (s == HD_OK)
        s = make_and_copy(f, ctx, r, buffer);
    if (s != HD_OK) {
        hd__fused_buffer_release(f, buffer);
        return s;
    }
    if (r->key_bytes[0] > 0)
        memcpy(t->key, r->key[0], r->key_bytes[0]);
    if (r->key_bytes[1] > 0)
        memcpy((char *)t->key + r->key_bytes[0], r->key[1], r->key_bytes[1]);
    t->key_bytes = key_bytes;
    t->buffer = buffer;
    t->bytes = r->bytes;
    *out = buffer;
    return HD_OK;
}

void hd__fused_tables_release(hd_fused *f)
{
    for (int k = 0; k < HD_FUSED_TABLE_COUNT; k++) {
        hd__fused_buffer_release(f, f->tables[k].buffer);
        free(f->tables[k].key);
        f->tables[k] = (struct hd_fused_table){0};
    }
}
