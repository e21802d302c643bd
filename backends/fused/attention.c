/*
 * Flash-style attention on the device (kernels/attention.cl): the forward in one launch; the
 * backward as delta (dout . out per row and head), dq, and dk with dv (the query heads of a kv
 * head split over work-groups, their partial sums added in order by a last launch), without
 * atomics. The rows' key ranges (and, backward, the keys' query ranges) are made on the host
 * from the packed sequences and copied with the call. One program per head dimension.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/fused/internal.h"
#include "core/sequence.h"

/* The kernels' work-group sizes under their default tiles (attention.cl's defaults, which
 * the host does not override): forward and dq BQ / RQ * TC, dkdv KV_BK / KV_RK * KV_TC. */
#define FORWARD_GROUP 128
#define DKDV_GROUP    256
#define DELTA_GROUP   256
#define DELTA_SLOT    16
#define REDUCE_GROUP  256

/* Query rows per work-group of the forward and dq, keys per work-group of dkdv: the tiles the
 * grid is cut into (attention.cl's defaults). */
static size_t query_tile(size_t head_dim)
{
    return head_dim > 128 ? 32 : 64;
}

static size_t key_tile(size_t head_dim)
{
    return head_dim > 128 ? 32 : 64;
}

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* The program of the call's head dimension. */
static void options_of(const hd_step_args *a, char out[HD_FUSED_OPTIONS_CAPACITY])
{
    snprintf(out, HD_FUSED_OPTIONS_CAPACITY, "-D HEAD_DIM=%zu", a->head_dim);
}

/* The kernels of a call, built (or found built) before any launch. */
static hd_status kernels(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                         const char *const names[], const size_t groups[], cl_kernel out[],
                         int count)
{
    char options[HD_FUSED_OPTIONS_CAPACITY];
    options_of(a, options);
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ATTENTION, options, names[i], groups[i], &out[i]);
    return s;
}

/* The range tables of the call's sequences on the device: the rows' key ranges, and (q_range
 * not NULL) the keys' query ranges. */
static hd_status upload_ranges(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                               struct hd_device_buffer **kv_range,
                               struct hd_device_buffer **q_range)
{
    size_t bytes = 2 * a->rows * sizeof(int32_t);
    int32_t *kv = malloc(bytes), *q = malloc(bytes);
    hd_status s = kv != NULL && q != NULL
                      ? HD_OK
                      : hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "attention: the range tables");
    if (s == HD_OK) {
        hd__sequence_attention_ranges(a->seq_lengths, a->seq_count, a->rows, a->causal, kv, q);
        s = hd__fused_upload(f, ctx, kv, bytes, kv_range);
    }
    if (s == HD_OK && q_range != NULL)
        s = hd__fused_upload(f, ctx, q, bytes, q_range);
    free(kv);
    free(q);
    return s;
}

/* scale * log2(e), formed in double: the kernels take scores in base 2. */
static cl_float base2_scale(float scale)
{
    return (cl_float)((double)scale * 1.4426950408889634);
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

hd_status hd__fused_attention(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    cl_kernel k;
    static const char *const names[] = {"attention_forward"};
    static const size_t groups[] = {FORWARD_GROUP};
    hd_status s = check_sizes(ctx, a);
    if (s == HD_OK)
        s = kernels(f, ctx, a, names, groups, &k, 1);
    struct hd_device_buffer *kv_range = NULL, *lse = NULL;
    if (s == HD_OK)
        s = upload_ranges(f, ctx, a, &kv_range, NULL);
    if (s == HD_OK && a->out[1] == NULL) /* lse not wanted: the kernel writes it anyway */
        s = hd__fused_buffer(f, ctx, a->rows * a->heads * sizeof(float), &lse);
    cl_int tokens = (cl_int)a->rows, heads = (cl_int)a->heads, kv_heads = (cl_int)a->kv_heads;
    cl_float qscale = base2_scale(a->scale);
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
        const size_t grid[2] = {a->heads, ceil_div(a->rows, query_tile(a->head_dim))};
        s = hd__fused_launch_grid(f, ctx, k, grid, FORWARD_GROUP, list,
                                  (int)(sizeof list / sizeof list[0]));
    }
    hd__fused_buffer_release(f, kv_range);
    hd__fused_buffer_release(f, lse);
    return s;
}

/* The backward's scratch: delta (tokens x heads) and, where the query heads of a kv head are
 * split, the partial dk and dv of each slice. */
typedef struct backward_scratch {
    struct hd_device_buffer *kv_range, *q_range, *delta, *dk_part, *dv_part;
} backward_scratch;

static void release_scratch(hd_fused *f, backward_scratch *b)
{
    struct hd_device_buffer *all[] = {b->kv_range, b->q_range, b->delta, b->dk_part, b->dv_part};
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
                                 cl_kernel k[BACKWARD_KERNELS], const backward_scratch *b)
{
    const hd_tensor *q = a->in[0], *kt = a->in[1], *v = a->in[2], *out = a->in[3];
    const hd_tensor *lse = a->in[4], *dout = a->in[5];
    cl_int tokens = (cl_int)a->rows, heads = (cl_int)a->heads, kv_heads = (cl_int)a->kv_heads;
    cl_int splits = (cl_int)splits_of(a), kv_cols = (cl_int)(a->kv_heads * a->head_dim);
    cl_float qscale = base2_scale(a->scale), scale = a->scale;
    const hd_fused_arg delta[] = {HD_FUSED_TENSOR(out), HD_FUSED_TENSOR(dout),
                                  HD_FUSED_BUFFER(b->delta), HD_FUSED_VALUE(tokens),
                                  HD_FUSED_VALUE(heads)};
    size_t delta_groups = ceil_div(a->rows * a->heads * DELTA_SLOT, DELTA_GROUP);
    hd_status s = hd__fused_launch_args(f, ctx, k[DELTA], delta_groups, DELTA_GROUP, delta, 5);
    const hd_fused_arg dq[] = {
        HD_FUSED_TENSOR(q),           HD_FUSED_TENSOR(kt),        HD_FUSED_TENSOR(v),
        HD_FUSED_TENSOR(dout),        HD_FUSED_TENSOR(lse),       HD_FUSED_BUFFER(b->delta),
        HD_FUSED_BUFFER(b->kv_range), HD_FUSED_TENSOR(a->out[0]), HD_FUSED_VALUE(tokens),
        HD_FUSED_VALUE(heads),        HD_FUSED_VALUE(kv_heads),   HD_FUSED_VALUE(qscale),
        HD_FUSED_VALUE(scale)};
    const size_t dq_grid[2] = {a->heads, ceil_div(a->rows, query_tile(a->head_dim))};
    if (s == HD_OK)
        s = hd__fused_launch_grid(f, ctx, k[DQ], dq_grid, FORWARD_GROUP, dq, 13);
    const hd_fused_arg dkdv[] = {
        HD_FUSED_TENSOR(q),          HD_FUSED_TENSOR(kt),         HD_FUSED_TENSOR(v),
        HD_FUSED_TENSOR(dout),       HD_FUSED_TENSOR(lse),        HD_FUSED_BUFFER(b->delta),
        HD_FUSED_BUFFER(b->q_range), HD_FUSED_TENSOR(a->out[1]),  HD_FUSED_TENSOR(a->out[2]),
        HD_FUSED_BUFFER(b->dk_part), HD_FUSED_BUFFER(b->dv_part), HD_FUSED_VALUE(tokens),
        HD_FUSED_VALUE(heads),       HD_FUSED_VALUE(kv_heads),    HD_FUSED_VALUE(splits),
        HD_FUSED_VALUE(qscale),      HD_FUSED_VALUE(scale)};
    const size_t dkdv_grid[2] = {a->kv_heads * (size_t)splits,
                                 ceil_div(a->rows, key_tile(a->head_dim))};
    if (s == HD_OK)
        s = hd__fused_launch_grid(f, ctx, k[DKDV], dkdv_grid, DKDV_GROUP, dkdv, 17);
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

hd_status hd__fused_attention_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    static const char *const names[BACKWARD_KERNELS] = {"attention_bwd_delta", "attention_bwd_dq",
                                                        "attention_bwd_dkdv",
                                                        "attention_bwd_dkdv_reduce"};
    static const size_t groups[BACKWARD_KERNELS] = {DELTA_GROUP, FORWARD_GROUP, DKDV_GROUP,
                                                    REDUCE_GROUP};
    cl_kernel k[BACKWARD_KERNELS];
    backward_scratch b = {0};
    hd_status s = check_sizes(ctx, a);
    if (s == HD_OK)
        s = kernels(f, ctx, a, names, groups, k, BACKWARD_KERNELS);
    if (s == HD_OK)
        s = take_scratch(f, ctx, a, &b);
    if (s == HD_OK)
        s = launch_backward(f, ctx, a, k, &b);
    release_scratch(f, &b);
    return s;
}
