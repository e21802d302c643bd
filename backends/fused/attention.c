/*
 * Flash-style attention on the device (kernels/attention.cl): the forward in one launch; the
 * backward as delta (dout . out per row and head), dq, and dk with dv (the query heads of a kv
 * head split over work-groups, their partial sums added in order by a last launch), without
 * atomics. The rows' key ranges (and, backward, the keys' query ranges) are made on the host
 * from the packed sequences and copied with the call. One program per head dimension.
 * Where the device has tensor cores, the forward, dq, and dk with dv run on them
 * (kernels/attention_mma.cl; delta and the slices' sum stay attention.cl's), their tiles in
 * local memory that the call passes on the CUDA runtime (up to its opt-in limit): in tf32, or
 * as 3xTF32 in fp32x3 and in fp32, as PyTorch's scaled_dot_product_attention runs fp32 inputs
 * on such devices (CUTLASS's OpMultiplyAddFastF32). The variant FMA=1 keeps fp32's FMA kernels,
 * and the tuner times them beside the tensor cores. On tensor cores, unless the context is
 * deterministic, dk and dv's kernel also adds dq's parts into dq (zeroed by delta's launch)
 * with atomic adds and dq's own kernel is not run (DQ_ATOMIC: five products, not seven).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/fused/internal.h"
#include "core/sequence.h"

/* Work-items of the delta and reduce launches (fixed: attention.cl's defaults). */
#define DELTA_GROUP  256
#define DELTA_SLOT   16
#define REDUCE_GROUP 256
/* The dk and dv kernel's work-items across a tile's columns (attention.cl's KV_TC). */
#define KV_TC 16

/* The tensor-core kernels (attention_mma.cl). */
enum { MMA_FORWARD, MMA_DQ, MMA_DKDV, MMA_KERNELS };

/* A call's tiles: the variant's, the rest attention.cl's defaults for the head dimension
 * (halved rows for heads wider than 128, whose tiles must fit the same local memory), or on
 * tensor cores attention_mma.cl's. */
typedef struct tiles {
    int bq, bk, rq, tc; /* forward and dq (the tensor-core kernels' MMA_BQ, MMA_BK) */
    int kbk, krk, kbq;  /* dk and dv (MMA_KBK, MMA_KBQ) */
    int fast;
    int prec;                      /* TF32 products per multiply on tensor cores; 0: FMAs */
    int ring;                      /* the backward's buffers of the tiles it streams (MMA_RING) */
    bool dq_atomic;                /* dq added by dk and dv's kernel (DQ_ATOMIC) */
    size_t mma_local[MMA_KERNELS]; /* the tensor-core kernels' local memory, in bytes */
} tiles;

static int or_default(int v, int fallback)
{
    return v != 0 ? v : fallback;
}

/* A tensor-core kernel's work-items and local memory (attention_mma.cl: MMA_WG, MMA_KWG and
 * MMA_LOCAL_FLOATS, MMA_DQ_FLOATS, MMA_KV_FLOATS). */
static size_t mma_group(const tiles *t, int kernel)
{
    return (size_t)(kernel == MMA_DKDV ? t->kbk : t->bq) / 16 * 32;
}

static size_t mma_local_bytes(const hd_fused *f, size_t head_dim, const tiles *t, int kernel)
{
    size_t d16 = (head_dim + 15) / 16 * 16, lda = d16 + (d16 % 32 == 0 ? 16 : 0);
    size_t ldb = d16 + (d16 % 32 == 0 ? 20 : 4), ldv = head_dim + 4;
    size_t bq = (size_t)t->bq, bk = (size_t)t->bk, kbk = (size_t)t->kbk, kbq = (size_t)t->kbq;
    size_t scratch = f->mma_emulated ? mma_group(t, kernel) * 6 : 0;
    size_t ring = (size_t)t->ring;
    /* dk and dv's k read both ways, and ds's own area where the tile's buffer is too narrow
     * (MMA_KS_LD, MMA_LDS, MMA_DS_FLOATS) */
    size_t ldks = t->dq_atomic ? ldb : lda, lds = kbk + 8;
    size_t ds = t->dq_atomic && lds > 2 * ldb ? kbq * lds : 0;
    size_t floats = kernel == MMA_FORWARD ? (bq + bk) * lda + bk * ldv
                    : kernel == MMA_DQ    ? (2 * bq + bk) * lda + ring * bk * ldb
                                          : kbk * (ldks + lda) + 2 * ring * kbq * ldb + ds;
    return (floats + scratch) * sizeof(float);
}

/* Whether the tensor-core kernels take their local memory as an argument (the CUDA runtime's
 * dynamic local memory), and how much they may take. */
static bool local_as_argument(const hd_fused *f)
{
    return f->stage_mem > 0;
}

static size_t local_capacity(const hd_fused *f)
{
    return local_as_argument(f) ? f->stage_mem : f->local_mem;
}

/* Whether op runs on tensor cores: the device has them and the variant does not ask for the FMA
 * kernels (fma), in every precision (fp32 as 3xTF32). The backward's accumulators of dk and dv
 * (dq) take HEAD_DIM floats a lane each, so heads past 128 would outgrow a thread's registers:
 * their backward stays on the FMA kernels. */
static bool wants_mma(const hd_fused *f, hd_op op, size_t head_dim, bool fma)
{
    return !fma && f->mma && !f->mma_broken && !f->attention_mma_broken &&
           (op == HD_OP_ATTENTION || head_dim <= 128);
}

/* The tensor-core kernels of op (with dq added by dk and dv's kernel, that one alone). */
static int mma_kernels_of(hd_op op, bool dq_atomic, int out[2])
{
    if (op == HD_OP_ATTENTION) {
        out[0] = MMA_FORWARD;
        return 1;
    }
    out[0] = MMA_DKDV;
    out[1] = MMA_DQ;
    return dq_atomic ? 1 : 2;
}

/* Whether the tiles t of op fit the local memory. */
static bool mma_fits(const hd_fused *f, hd_op op, size_t head_dim, const tiles *t)
{
    int k[2], n = mma_kernels_of(op, t->dq_atomic, k);
    for (int i = 0; i < n; i++)
        if (mma_local_bytes(f, head_dim, t, k[i]) > local_capacity(f))
            return false;
    return true;
}

/* Halves *first down to 16, then *second, while the local memory of kernel exceeds the
 * device's. */
static void mma_shrink(const hd_fused *f, int kernel, size_t head_dim, tiles *t, int *first,
                       int *second)
{
    while (mma_local_bytes(f, head_dim, t, kernel) > local_capacity(f) &&
           (*first > 16 || *second > 16)) {
        if (*first > 16)
            *first /= 2;
        else
            *second /= 2;
    }
}

/* Whether the variant p names the forward's and dq's tiles, and dk and dv's. */
static bool names_query_tiles(const hd_fused_params *p)
{
    return p->att_bq != 0 || p->att_bk != 0;
}

static bool names_key_tiles(const hd_fused_params *p)
{
    return p->att_kbk != 0 || p->att_kbq != 0;
}

/* The tensor-core tiles: those the variant names, the others the defaults halved, keys
 * first, until they fit the local memory; the backward's streamed tiles in two buffers, or in
 * one where two fit in no tiles (OpenCL's 48 KiB at heads of 128). The defaults: 64 x 64
 * forward; 128 query rows by 32 keys in dq, whose q' and dout take local memory by the row (8
 * warps in a work-group, where 64 x 64 left a multiprocessor one work-group of 4 warps); 64
 * keys by 16 rows in dk and dv (two work-groups to a multiprocessor of Hopper). */
static void mma_tiles_of(const hd_fused *f, hd_op op, size_t head_dim, hd_precision precision,
                         const hd_fused_params *p, tiles *t)
{
    bool forward = op == HD_OP_ATTENTION;
    for (int ring = 2; ring >= 1; ring--) {
        *t = (tiles){.bq = or_default(p->att_bq, forward ? 64 : 128),
                     .bk = or_default(p->att_bk, forward ? 64 : 32),
                     .kbk = or_default(p->att_kbk, 64),
                     .kbq = or_default(p->att_kbq, 16),
                     .fast = p->att_fast,
                     .prec = precision == HD_PRECISION_TF32 ? 1 : 3,
                     .ring = ring,
                     .dq_atomic = !forward && !f->deterministic};
        if (!names_query_tiles(p))
            mma_shrink(f, forward ? MMA_FORWARD : MMA_DQ, head_dim, t, &t->bk, &t->bq);
        if (!names_key_tiles(p))
            mma_shrink(f, MMA_DKDV, head_dim, t, &t->kbk, &t->kbq);
        if (mma_fits(f, op, head_dim, t))
            break;
    }
    for (int k = 0; k < MMA_KERNELS; k++)
        t->mma_local[k] = mma_local_bytes(f, head_dim, t, k);
}

/* Whether the tensor-core tiles t of op hold to the kernels' rules and the device's limits. */
static hd_status mma_tiles_check(const hd_fused *f, hd_context *ctx, hd_op op, size_t head_dim,
                                 const tiles *t)
{
    if (t->bq <= 0 || t->bk <= 0 || t->kbk <= 0 || t->kbq <= 0 || t->bq % 16 != 0 ||
        t->bk % 16 != 0 || t->kbk % 16 != 0 || t->kbq % 16 != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: tensor-core attention tiles BQ=%d BK=%d KBK=%d KBQ=%d are not "
                         "all multiples of 16",
                         t->bq, t->bk, t->kbk, t->kbq);
    int k[2], n = mma_kernels_of(op, t->dq_atomic, k);
    for (int i = 0; i < n; i++) {
        if (t->mma_local[k[i]] > local_capacity(f))
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: tensor-core attention tiles BQ=%d BK=%d KBK=%d KBQ=%d of "
                             "head_dim %zu need %zu bytes of local memory; the device gives %zu",
                             t->bq, t->bk, t->kbk, t->kbq, head_dim, t->mma_local[k[i]],
                             local_capacity(f));
        if (mma_group(t, k[i]) > f->device_max_group)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: attention work-groups of %zu exceed the device's %zu",
                             mma_group(t, k[i]), f->device_max_group);
    }
    return HD_OK;
}

static size_t forward_group(const tiles *t)
{
    return (size_t)(t->bq / t->rq * t->tc);
}

static size_t dkdv_group(const tiles *t)
{
    return (size_t)(t->kbk / t->krk * KV_TC);
}

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The tiles of variant for a head of head_dim, checked against the kernels' divisibility
 * rules (attention.cl: VK and DQ_VK 16, or 8 for wide heads; KV_QK 8, or 4) and the device's
 * work-group limit. A tile whose local memory the device lacks fails its build instead. */
static hd_status tiles_of(hd_fused *f, hd_context *ctx, hd_op op, size_t head_dim,
                          hd_precision precision, const char *variant, tiles *t)
{
    hd_fused_params p;
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_ATTENTION, variant, &p);
    if (s != HD_OK)
        return s;
    if (wants_mma(f, op, head_dim, p.att_fma == 1)) {
        mma_tiles_of(f, op, head_dim, precision, &p, t);
        /* default tiles past the local memory (wide heads within OpenCL's 48 KiB) leave the
         * call to the FMA kernels, whose tiles are sized for it */
        if (names_query_tiles(&p) || names_key_tiles(&p) || mma_fits(f, op, head_dim, t))
            return mma_tiles_check(f, ctx, op, head_dim, t);
    }
    bool wide = head_dim > 128;
    int vk = wide ? 8 : 16, qk = wide ? 4 : 8;
    *t = (tiles){.bq = or_default(p.att_bq, wide ? 32 : 64),
                 .bk = or_default(p.att_bk, 64),
                 .rq = or_default(p.att_rq, wide ? 4 : 8),
                 .tc = or_default(p.att_tc, 16),
                 .kbk = or_default(p.att_kbk, wide ? 32 : 128),
                 .krk = or_default(p.att_krk, wide ? 2 : 8),
                 .kbq = or_default(p.att_kbq, 32),
                 .fast = p.att_fast};
    if (t->bq % t->rq != 0 || t->bk % t->tc != 0 || t->bk % vk != 0 || t->kbk % t->krk != 0 ||
        t->kbq % KV_TC != 0 || t->kbq % qk != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: attention tiles BQ=%d BK=%d RQ=%d TC=%d KBK=%d KRK=%d KBQ=%d do "
                         "not divide (BK by TC and %d, BQ by RQ, KBK by KRK, KBQ by %d and %d)",
                         t->bq, t->bk, t->rq, t->tc, t->kbk, t->krk, t->kbq, vk, KV_TC, qk);
    size_t most = forward_group(t) > dkdv_group(t) ? forward_group(t) : dkdv_group(t);
    if (most > f->device_max_group)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: attention work-groups of %zu exceed the device's %zu", most,
                         f->device_max_group);
    return HD_OK;
}

/* The program of the call's head dimension and tiles. */
static void options_of(const hd_fused *f, const hd_step_args *a, const tiles *t,
                       char out[HD_FUSED_OPTIONS_CAPACITY])
{
    if (t->prec != 0) {
        snprintf(out, HD_FUSED_OPTIONS_CAPACITY,
                 "-D HEAD_DIM=%zu -D ATT_MMA=1 -D PREC=%d -D MMA_BQ=%d -D MMA_BK=%d "
                 "-D MMA_KBK=%d -D MMA_KBQ=%d -D MMA_RING=%d -D MMA_LOCAL_ARG=%d -D FAST_EXP=%d "
                 "-D DQ_ATOMIC=%d%s",
                 a->head_dim, t->prec, t->bq, t->bk, t->kbk, t->kbq, t->ring, local_as_argument(f),
                 t->fast, t->dq_atomic, f->mma_emulated ? " -D MMA_EMULATE=1" : "");
        return;
    }
    snprintf(out, HD_FUSED_OPTIONS_CAPACITY,
             "-D HEAD_DIM=%zu -D BQ=%d -D BK=%d -D RQ=%d -D TC=%d -D DQ_BQ=%d -D DQ_BK=%d "
             "-D DQ_RQ=%d -D DQ_TC=%d -D KV_BK=%d -D KV_RK=%d -D KV_BQ=%d -D FAST_EXP=%d",
             a->head_dim, t->bq, t->bk, t->rq, t->tc, t->bq, t->bk, t->rq, t->tc, t->kbk, t->krk,
             t->kbq, t->fast);
}

/* The kernels of a call, built (or found built) before any launch; a NULL name is none. */
static hd_status kernels(hd_fused *f, hd_context *ctx, const hd_step_args *a, const tiles *t,
                         const char *const names[], const size_t groups[], hd_kernel *out[],
                         int count)
{
    char options[HD_FUSED_OPTIONS_CAPACITY];
    options_of(f, a, t, options);
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++) {
        out[i] = NULL;
        if (names[i] != NULL)
            s = hd__fused_kernel(f, ctx, HD_FUSED_ATTENTION, options, names[i], groups[i], &out[i]);
    }
    return s;
}

static void make_kv_ranges(const void *arg, void *table)
{
    const hd_step_args *a = arg;
    hd__sequence_attention_ranges(a->seq_lengths, a->seq_count, a->rows, a->causal, a->window,
                                  table, NULL);
}

static void make_q_ranges(const void *arg, void *table)
{
    const hd_step_args *a = arg;
    hd__sequence_attention_ranges(a->seq_lengths, a->seq_count, a->rows, a->causal, a->window, NULL,
                                  table);
}

/* The range tables of the call's sequences on the device (hd__fused_table: a step's layers
 * share them): the rows' key ranges, and (q_range not NULL) the keys' query ranges. */
static hd_status upload_ranges(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                               const struct hd_device_buffer **kv_range,
                               const struct hd_device_buffer **q_range)
{
    const size_t key[4] = {a->rows, a->causal ? 1 : 0, a->window, a->seq_count};
    hd_fused_recipe r = {
        .key = {key, a->seq_lengths},
        .key_bytes = {sizeof key, a->seq_count * sizeof *a->seq_lengths},
        .bytes = 2 * a->rows * sizeof(int32_t),
        .make = make_kv_ranges,
        .arg = a,
    };
    hd_status s = hd__fused_table(f, ctx, HD_FUSED_TABLE_KV_RANGES, &r, kv_range);
    r.make = make_q_ranges;
    if (s == HD_OK && q_range != NULL)
        s = hd__fused_table(f, ctx, HD_FUSED_TABLE_Q_RANGES, &r, q_range);
    return s;
}

/* scale * log2(e), formed in double: the kernels take scores in base 2. */
static float base2_scale(float scale)
{
    return (float)((double)scale * 1.4426950408889634);
}

static bool fits_int(size_t v)
{
    return v <= (size_t)INT_MAX;
}

static hd_status check_sizes(hd_context *ctx, const hd_step_args *a)
{
    if (fits_int(2 * a->rows) && fits_int(a->rows * a->heads) && fits_int(a->heads * a->head_dim))
        return HD_OK;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "fused: attention of %zu tokens exceeds the "
                     "kernels' int indices",
                     a->rows);
}

/* The most arguments a kernel takes: dk and dv's 18 and their local memory. */
#define LAUNCH_ARGS_MAX 19

/* Queues k over grid with the count arguments of list, and local (NULL: none) after them. */
static hd_status launch_with_local(hd_fused *f, hd_context *ctx, hd_kernel *k, const size_t grid[2],
                                   size_t group, const hd_fused_arg *list, int count,
                                   const hd_fused_arg *local)
{
    hd_fused_arg all[LAUNCH_ARGS_MAX];
    if (count + 1 > LAUNCH_ARGS_MAX)
        return hd__error(ctx, HD_ERR_INTERNAL, "fused: %d arguments", count + 1);
    memcpy(all, list, (size_t)count * sizeof *list);
    if (local != NULL)
        all[count++] = *local;
    return hd__fused_launch_grid(f, ctx, k, grid, group, all, count);
}

/* Queues the forward of a on the kernel of tiles t. */
static hd_status launch_forward(hd_fused *f, hd_context *ctx, const hd_step_args *a, const tiles *t)
{
    const char *name = t->prec != 0 ? "attention_forward_mma" : "attention_forward";
    size_t group = t->prec != 0 ? mma_group(t, MMA_FORWARD) : forward_group(t);
    hd_kernel *k;
    hd_status s = kernels(f, ctx, a, t, &name, &group, &k, 1);
    const struct hd_device_buffer *kv_range = NULL;
    struct hd_device_buffer *lse = NULL;
    if (s == HD_OK)
        s = upload_ranges(f, ctx, a, &kv_range, NULL);
    if (s == HD_OK && a->out[1] == NULL) /* lse not wanted: the kernel writes it anyway */
        s = hd__fused_buffer(f, ctx, a->rows * a->heads * sizeof(float), &lse);
    int32_t tokens = (int32_t)a->rows, heads = (int32_t)a->heads, kv_heads = (int32_t)a->kv_heads;
    float qscale = base2_scale(a->scale);
    if (s == HD_OK) {
        const hd_fused_arg list[] = {
            HD_FUSED_TENSOR(a->in[0]),
            HD_FUSED_TENSOR(a->in[1]),
            HD_FUSED_TENSOR(a->in[2]),
            HD_FUSED_BUFFER(kv_range),
            HD_FUSED_TENSOR(a->out[0]),
            a->out[1] != NULL ? HD_FUSED_TENSOR(a->out[1]) : HD_FUSED_BUFFER(lse),
            HD_FUSED_VALUE(tokens),
            HD_FUSED_VALUE(heads),
            HD_FUSED_VALUE(kv_heads),
            HD_FUSED_VALUE(qscale),
        };
        /* the tensor-core kernel takes its local memory last, where it is an argument */
        const hd_fused_arg local = HD_FUSED_LOCAL(t->mma_local[MMA_FORWARD]);
        const size_t grid[2] = {a->heads, ceil_div(a->rows, (size_t)t->bq)};
        s = launch_with_local(f, ctx, k, grid, group, list, (int)(sizeof list / sizeof list[0]),
                              t->prec != 0 && local_as_argument(f) ? &local : NULL);
    }
    hd__fused_buffer_release(f, lse);
    return s;
}

/* The backward's tables and scratch: the range tables (kept by f), delta (tokens x heads) and,
 * where the query heads of a kv head are split, the partial dk and dv of each slice. */
typedef struct backward_scratch {
    const struct hd_device_buffer *kv_range, *q_range;
    struct hd_device_buffer *delta, *dk_part, *dv_part;
} backward_scratch;

static void release_scratch(hd_fused *f, backward_scratch *b)
{
    struct hd_device_buffer *all[] = {b->delta, b->dk_part, b->dv_part};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd__fused_buffer_release(f, all[i]);
}

/* The query heads of a kv head in as many slices as they are (each its own work-group): the
 * first key tiles of a causal mask carry the most work, and slices spread it. */
static size_t splits_of(const hd_step_args *a)
{
    return a->heads / a->kv_heads;
}

static hd_status take_scratch(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                              backward_scratch *b)
{
    hd_status s = upload_ranges(f, ctx, a, &b->kv_range, &b->q_range);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, a->rows * a->heads * sizeof(float), &b->delta);
    size_t splits = splits_of(a), part = splits * a->rows * a->kv_heads * a->head_dim;
    if (s == HD_OK && splits > 1 && !fits_int(part))
        s = hd__error(ctx, HD_ERR_UNSUPPORTED,
                      "fused: attention backward's partials of %zu "
                      "floats exceed the kernels' int indices",
                      part);
    if (s == HD_OK && splits > 1)
        s = hd__fused_buffer(f, ctx, part * sizeof(float), &b->dk_part);
    if (s == HD_OK && splits > 1)
        s = hd__fused_buffer(f, ctx, part * sizeof(float), &b->dv_part);
    return s;
}

enum { DELTA, DQ, DKDV, REDUCE, BACKWARD_KERNELS };

static hd_status launch_backward(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                                 const tiles *t, hd_kernel *k[BACKWARD_KERNELS],
                                 const size_t groups[BACKWARD_KERNELS], const backward_scratch *b)
{
    const hd_tensor *q = a->in[0], *kt = a->in[1], *v = a->in[2], *out = a->in[3];
    const hd_tensor *lse = a->in[4], *dout = a->in[5];
    int32_t tokens = (int32_t)a->rows, heads = (int32_t)a->heads, kv_heads = (int32_t)a->kv_heads;
    int32_t splits = (int32_t)splits_of(a), kv_cols = (int32_t)(a->kv_heads * a->head_dim);
    float qscale = base2_scale(a->scale), scale = a->scale;
    /* with dq added by dk and dv's kernel, delta's launch zeroes it, and dk and dv's takes it
     * after their own arguments */
    const hd_fused_arg delta[] = {HD_FUSED_TENSOR(out),      HD_FUSED_TENSOR(dout),
                                  HD_FUSED_BUFFER(b->delta), HD_FUSED_VALUE(tokens),
                                  HD_FUSED_VALUE(heads),     HD_FUSED_TENSOR(a->out[0])};
    size_t delta_groups = ceil_div(a->rows * a->heads * DELTA_SLOT, DELTA_GROUP);
    hd_status s = hd__fused_launch_args(f, ctx, k[DELTA], delta_groups, DELTA_GROUP, delta,
                                        t->dq_atomic ? 6 : 5);
    const hd_fused_arg dq[] = {
        HD_FUSED_TENSOR(q),           HD_FUSED_TENSOR(kt),        HD_FUSED_TENSOR(v),
        HD_FUSED_TENSOR(dout),        HD_FUSED_TENSOR(lse),       HD_FUSED_BUFFER(b->delta),
        HD_FUSED_BUFFER(b->kv_range), HD_FUSED_TENSOR(a->out[0]), HD_FUSED_VALUE(tokens),
        HD_FUSED_VALUE(heads),        HD_FUSED_VALUE(kv_heads),   HD_FUSED_VALUE(qscale),
        HD_FUSED_VALUE(scale)};
    /* the tensor-core kernels take their local memory last, where it is an argument */
    const hd_fused_arg dq_local = HD_FUSED_LOCAL(t->mma_local[MMA_DQ]);
    const hd_fused_arg kv_local = HD_FUSED_LOCAL(t->mma_local[MMA_DKDV]);
    bool local_arg = t->prec != 0 && local_as_argument(f);
    const size_t dq_grid[2] = {a->heads, ceil_div(a->rows, (size_t)t->bq)};
    if (s == HD_OK && !t->dq_atomic)
        s = launch_with_local(f, ctx, k[DQ], dq_grid, groups[DQ], dq, 13,
                              local_arg ? &dq_local : NULL);
    const hd_fused_arg dkdv[] = {
        HD_FUSED_TENSOR(q),          HD_FUSED_TENSOR(kt),         HD_FUSED_TENSOR(v),
        HD_FUSED_TENSOR(dout),       HD_FUSED_TENSOR(lse),        HD_FUSED_BUFFER(b->delta),
        HD_FUSED_BUFFER(b->q_range), HD_FUSED_TENSOR(a->out[1]),  HD_FUSED_TENSOR(a->out[2]),
        HD_FUSED_BUFFER(b->dk_part), HD_FUSED_BUFFER(b->dv_part), HD_FUSED_VALUE(tokens),
        HD_FUSED_VALUE(heads),       HD_FUSED_VALUE(kv_heads),    HD_FUSED_VALUE(splits),
        HD_FUSED_VALUE(qscale),      HD_FUSED_VALUE(scale),       HD_FUSED_TENSOR(a->out[0])};
    const size_t dkdv_grid[2] = {a->kv_heads * (size_t)splits, ceil_div(a->rows, (size_t)t->kbk)};
    if (s == HD_OK)
        s = launch_with_local(f, ctx, k[DKDV], dkdv_grid, groups[DKDV], dkdv,
                              t->dq_atomic ? 18 : 17, local_arg ? &kv_local : NULL);
    const hd_fused_arg reduce[] = {HD_FUSED_BUFFER(b->dk_part), HD_FUSED_BUFFER(b->dv_part),
                                   HD_FUSED_TENSOR(a->out[1]),  HD_FUSED_TENSOR(a->out[2]),
                                   HD_FUSED_VALUE(tokens),      HD_FUSED_VALUE(kv_cols),
                                   HD_FUSED_VALUE(splits)};
    size_t reduce_groups = ceil_div(a->rows * (size_t)kv_cols, REDUCE_GROUP);
    if (s == HD_OK && splits > 1)
        s = hd__fused_launch_args(f, ctx, k[REDUCE], reduce_groups < 65536 ? reduce_groups : 65536,
                                  REDUCE_GROUP, reduce, 7);
    return s;
}

/* Queues the backward of a on the kernels of tiles t. */
static hd_status run_backward(hd_fused *f, hd_context *ctx, const hd_step_args *a, const tiles *t)
{
    static const char *const fma[BACKWARD_KERNELS] = {"attention_bwd_delta", "attention_bwd_dq",
                                                      "attention_bwd_dkdv",
                                                      "attention_bwd_dkdv_reduce"};
    static const char *const mma[BACKWARD_KERNELS] = {"attention_bwd_delta", "attention_bwd_dq_mma",
                                                      "attention_bwd_dkdv_mma",
                                                      "attention_bwd_dkdv_reduce"};
    bool on_mma = t->prec != 0;
    const size_t groups[BACKWARD_KERNELS] = {
        DELTA_GROUP, on_mma ? mma_group(t, MMA_DQ) : forward_group(t),
        on_mma ? mma_group(t, MMA_DKDV) : dkdv_group(t), REDUCE_GROUP};
    const char *names[BACKWARD_KERNELS];
    memcpy(names, on_mma ? mma : fma, sizeof names);
    if (t->dq_atomic)
        names[DQ] = NULL; /* dk and dv's kernel adds dq */
    hd_kernel *k[BACKWARD_KERNELS];
    backward_scratch b = {0};
    hd_status s = kernels(f, ctx, a, t, names, groups, k, BACKWARD_KERNELS);
    if (s == HD_OK)
        s = take_scratch(f, ctx, a, &b);
    if (s == HD_OK)
        s = launch_backward(f, ctx, a, t, k, groups, &b);
    release_scratch(f, &b);
    return s;
}

/* Runs op (its kernels queued by run) on the call's tiles; where the tensor-core kernels of
 * the default tiles fail to build, on the FMA kernels instead, for this context. */
static hd_status run_attention(hd_fused *f, hd_context *ctx, hd_op op, const hd_step_args *a,
                               hd_status (*run)(hd_fused *, hd_context *, const hd_step_args *,
                                                const tiles *))
{
    tiles t = {0};
    hd_status s = check_sizes(ctx, a);
    if (s == HD_OK)
        s = tiles_of(f, ctx, op, a->head_dim, a->precision, a->variant, &t);
    if (s == HD_OK)
        s = run(f, ctx, a, &t);
    if (s == HD_ERR_BUILD && t.prec != 0 && a->variant == NULL) {
        f->attention_mma_broken = true;
        s = tiles_of(f, ctx, op, a->head_dim, a->precision, NULL, &t);
        if (s == HD_OK)
            s = run(f, ctx, a, &t);
    }
    return s;
}

hd_status hd__fused_attention(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_attention(state, ctx, HD_OP_ATTENTION, &args->step, launch_forward);
}

hd_status hd__fused_attention_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_attention(state, ctx, HD_OP_ATTENTION_BACKWARD, &args->step, run_backward);
}

hd_status hd__fused_attention_check(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *shape,
                                    const char *variant)
{
    tiles t;
    return tiles_of(f, ctx, op, shape->dim[3], shape->precision, variant, &t);
}

size_t hd__fused_attention_variants(const hd_fused *f, hd_op op, const hd_shape *shape,
                                    const char **out, size_t max)
{
    /* on tensor cores: the forward's query and key tiles, the backward's dq tiles (where dq
     * has its own kernel) and dk and dv tiles (a tile past the local memory is refused, and the
     * tuner moves on), and the exponential's instruction */
    static const char *const tensor_cores[] = {
        "BQ=64 BK=64",   "BQ=128 BK=64", "BQ=64 BK=32", "BQ=128 BK=32", "BQ=64 BK=128",
        "BQ=128 BK=128", "BQ=32 BK=64",  "BQ=32 BK=32", "BQ=32 BK=16",  "FAST=1"};
    static const char *const tensor_cores_backward[] = {
        "BQ=128 BK=16",  "BQ=64 BK=16",    "BQ=64 BK=32",   "BQ=32 BK=32",   "BQ=32 BK=16",
        "KBK=64 KBQ=32", "KBK=128 KBQ=16", "KBK=32 KBQ=16", "KBK=32 KBQ=32", "FAST=1"};
    if (wants_mma(f, op, shape->dim[3], false)) {
        bool forward = op == HD_OP_ATTENTION;
        const char *const *list = forward ? tensor_cores : tensor_cores_backward;
        size_t count = forward ? sizeof tensor_cores / sizeof tensor_cores[0]
                               : sizeof tensor_cores_backward / sizeof tensor_cores_backward[0];
        bool dq_kernel = forward || f->deterministic;
        size_t n = 0;
        for (size_t i = 0; i < count && n < max; i++)
            if (dq_kernel || strncmp(list[i], "BQ=", 3) != 0)
                out[n++] = list[i];
        /* in fp32, the FMA kernels beside them */
        static const char *const fma[] = {"FMA=1", "FMA=1 FAST=1"};
        for (size_t i = 0; shape->precision == HD_PRECISION_FP32 && i < 2 && n < max; i++)
            out[n++] = fma[i];
        return n;
    }
    /* the exponential's instruction, the key tile, the query tile and its rows per work-item,
     * and the backward's key tiles; a tile whose local memory the device lacks fails its
     * build, and the tuner moves on */
    static const char *const narrow[] = {"FAST=1",       "BK=32",        "BQ=32 RQ=4",
                                         "RQ=4",         "BQ=128 RQ=16", "KBK=32 KRK=2",
                                         "KBK=64 KRK=4", "KBQ=64",       "KBQ=16",
                                         "FAST=1 BK=32", "FAST=1 RQ=4",  "KBQ=64 BQ=32 RQ=4"};
    static const char *const wide[] = {"FAST=1", "BK=32", "BQ=16 RQ=2", "KBK=16 KRK=1", "KBQ=16"};
    bool is_wide = shape->dim[3] > 128;
    const char *const *list = is_wide ? wide : narrow;
    size_t count = is_wide ? sizeof wide / sizeof wide[0] : sizeof narrow / sizeof narrow[0];
    size_t n = 0;
    for (size_t i = 0; i < count && n < max; i++)
        out[n++] = list[i];
    return n;
}
