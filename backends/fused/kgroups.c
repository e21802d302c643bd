/* The scratch of the KG > 1 GEMV and LoRA kernels (gemv.cl, strip_combine): the partial sums
 * of each strip's KG work-groups and one arrival counter per strip. Both are shared by every
 * launch on the context's in-order queue, so one launch's last group has read the partials and
 * reset its counter before the next launch starts. AdamW's norm counts on the first counter
 * (hd__fused_arrival_counter), and its one-launch form waits on it with a flag beside
 * (hd__fused_grid_wait). */
#include <string.h>

#include "backends/fused/internal.h"

/* Partials beyond this are not worth it: KG then splits a GEMV already wide enough. */
#define KG_PART_MAX_BYTES ((size_t)256 << 20)

static hd_status create(hd_fused *f, hd_context *ctx, size_t bytes, hd_devmem *out)
{
    return hd__rt_scratch_create(f->rt, ctx, bytes, "GEMV partials", out);
}

/* Scratch of bytes zeroed on the queue (what: for the message); NULL where either fails. */
static hd_status create_zeroed(hd_fused *f, hd_context *ctx, size_t bytes, const char *what,
                               hd_devmem *out)
{
    hd_status s = hd__rt_scratch_create(f->rt, ctx, bytes, what, out);
    if (s == HD_OK && (s = hd__rt_zero(f->rt, ctx, *out, bytes)) != HD_OK) {
        hd__rt_scratch_free(f->rt, *out);
        *out = NULL;
    }
    return s;
}

/* kg_count holding at least `len` counters, zeroed where it is made. */
static hd_status counters(hd_fused *f, hd_context *ctx, size_t len)
{
    if (len <= f->kg_count_len)
        return HD_OK;
    hd__rt_scratch_free(f->rt, f->kg_count);
    f->kg_count = NULL;
    f->kg_count_len = 0;
    hd_status s = create_zeroed(f, ctx, len * sizeof(int32_t), "GEMV partials", &f->kg_count);
    if (s == HD_OK)
        f->kg_count_len = len;
    return s;
}

hd_status hd__fused_arrival_counter(hd_fused *f, hd_context *ctx, hd_devmem *out)
{
    hd_status s = counters(f, ctx, 1);
    *out = s == HD_OK ? f->kg_count : NULL;
    return s;
}

hd_status hd__fused_grid_wait(hd_fused *f, hd_context *ctx, hd_devmem *count, hd_devmem *flag)
{
    hd_status s = counters(f, ctx, 1);
    if (s == HD_OK && f->grid_flag == NULL)
        s = create_zeroed(f, ctx, sizeof(int32_t), "a grid's flag", &f->grid_flag);
    *count = s == HD_OK ? f->kg_count : NULL;
    *flag = s == HD_OK ? f->grid_flag : NULL;
    return s;
}

hd_status hd__fused_kg_buffers(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                               size_t strips, size_t rows, hd_devmem unused, hd_devmem *part,
                               hd_devmem *count)
{
    *part = unused;
    *count = unused;
    if (p->kg <= 1)
        return HD_OK;
    /* a strip's block holds MR (rows rounded up to a power of two) rows of TN vectors */
    size_t per_strip =
        (size_t)p->kg * hd__fused_pow2_ceil(rows) * (size_t)p->tn * (size_t)p->vec * sizeof(float);
    if (strips > KG_PART_MAX_BYTES / per_strip)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: KG=%d needs %zu strips of %zu bytes of partials, over the %zu "
                         "allowed",
                         p->kg, strips, per_strip, KG_PART_MAX_BYTES);
    size_t bytes = strips * per_strip;
    hd_status s;
    if (bytes > f->kg_part_bytes) {
        hd__rt_scratch_free(f->rt, f->kg_part); /* freed once the queued launches using it ran */
        f->kg_part = NULL;
        f->kg_part_bytes = 0;
        if ((s = create(f, ctx, bytes, &f->kg_part)) != HD_OK)
            return s;
        f->kg_part_bytes = bytes;
    }
    if ((s = counters(f, ctx, strips)) != HD_OK)
        return s;
    *part = f->kg_part;
    *count = f->kg_count;
    return HD_OK;
}

void hd__fused_kg_release(hd_fused *f)
{
    hd__rt_scratch_free(f->rt, f->kg_part);
    hd__rt_scratch_free(f->rt, f->kg_count);
    hd__rt_scratch_free(f->rt, f->grid_flag);
    f->kg_part = NULL;
    f->kg_count = NULL;
    f->grid_flag = NULL;
    f->kg_part_bytes = 0;
    f->kg_count_len = 0;
}
