/*
 * The training step's elementwise ops, RoPE and embedding on the device (kernels/
 * elementwise.cl, rope.cl, embedding.cl): one launch each, after their per-call tables (RoPE's
 * positions and frequencies, embedding's ids where the caller gave a host array) are copied to
 * pooled buffers. Every kernel is
 * fetched (built on first use) before anything is queued, so that a refusal leaves the outputs
 * as they were. Kernel parameters: the step family (params.c), WG, VEC and HPI.
 */
#include <limits.h>
#include <stdio.h>

#include "backends/fused/internal.h"
#include "core/op.h"
#include "core/sequence.h"

/* Work-groups of a grid-stride launch at most: enough to fill any device many times over. */
#define STEP_MAX_GROUPS 65536

/* Defaults: 256 work-items, float4 accesses, four heads per RoPE item (as the kernels'). */
#define STEP_WG  256
#define STEP_VEC 4
#define STEP_HPI 4

/* The kernel of each op and its program. */
typedef struct step_kernel {
    hd_fused_program program;
    const char *name;
} step_kernel;

static const step_kernel kernel_of[HD_OP_COUNT] = {
    [HD_OP_SWIGLU] = {HD_FUSED_ELEMENTWISE, "swiglu"},
    [HD_OP_SWIGLU_BACKWARD] = {HD_FUSED_ELEMENTWISE, "swiglu_backward"},
    [HD_OP_GELU] = {HD_FUSED_ELEMENTWISE, "gelu"},
    [HD_OP_GELU_BACKWARD] = {HD_FUSED_ELEMENTWISE, "gelu_backward"},
    [HD_OP_ADD] = {HD_FUSED_ELEMENTWISE, "add"},
    [HD_OP_ROPE] = {HD_FUSED_ROPE, "rope"},
    [HD_OP_EMBEDDING] = {HD_FUSED_EMBEDDING, "embedding"},
    [HD_OP_ATTENTION] = {HD_FUSED_ATTENTION, "attention_forward"},
    [HD_OP_ATTENTION_BACKWARD] = {HD_FUSED_ATTENTION, "attention_bwd_dq"},
};

/* Attention's variants are its tiles (attention.c). */
static bool is_attention(hd_op op)
{
    return op == HD_OP_ATTENTION || op == HD_OP_ATTENTION_BACKWARD;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* The step family's parameters of a call of op with cols columns: the variant's, the rest the
 * defaults (VEC 1 where an embedding row is not a whole number of float4). */
static hd_status step_params(hd_fused *f, hd_context *ctx, hd_op op, size_t cols,
                             const char *variant, hd_fused_params *p)
{
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_STEP, variant, p);
    if (s != HD_OK)
        return s;
    if (p->wg == 0)
        p->wg = (int)min_size(STEP_WG, f->device_max_group);
    if (p->vec == 0)
        p->vec = op == HD_OP_EMBEDDING && cols % STEP_VEC != 0 ? 1 : STEP_VEC;
    if (p->hpi == 0)
        p->hpi = STEP_HPI;
    if (op == HD_OP_EMBEDDING && cols % (size_t)p->vec != 0)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: embedding rows of %zu columns do not take VEC=%d", cols, p->vec);
    if ((size_t)p->wg > f->device_max_group)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: work-group of %d exceeds the device's maximum of %zu", p->wg,
                         f->device_max_group);
    return HD_OK;
}

/* The -D options of a step kernel. */
static void step_options(hd_op op, const hd_fused_params *p, bool freq_pairs,
                         char out[HD_FUSED_OPTIONS_CAPACITY])
{
    if (op == HD_OP_ROPE)
        snprintf(out, HD_FUSED_OPTIONS_CAPACITY, "-D WG=%d -D HEADS_PER_ITEM=%d -D FREQ_PAIRS=%d",
                 p->wg, p->hpi, freq_pairs ? 1 : 0);
    else
        snprintf(out, HD_FUSED_OPTIONS_CAPACITY, "-D WG=%d -D VEC=%d", p->wg, p->vec);
}

static bool fits_int(size_t v)
{
    return v <= (size_t)INT_MAX;
}

/* The sizes a step kernel indexes with int arguments. */
static hd_status check_sizes(hd_context *ctx, hd_op op, const hd_step_args *a)
{
    if (fits_int(a->rows) && fits_int(a->cols) && fits_int(a->vocab))
        return HD_OK;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "fused: %s of %zu x %zu exceeds the kernels' int sizes", hd_op_name(op),
                     a->rows, a->cols);
}

/* The op's kernel, built (or found built) with the call's parameters. */
static hd_status step_kernel_for(hd_fused *f, hd_context *ctx, hd_op op, const hd_step_args *a,
                                 hd_fused_params *p, hd_kernel **k)
{
    hd_status s = check_sizes(ctx, op, a);
    if (s == HD_OK)
        s = step_params(f, ctx, op, a->cols, a->variant, p);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    step_options(op, p, a->in[1] == NULL, options);
    return hd__fused_kernel(f, ctx, kernel_of[op].program, options, kernel_of[op].name,
                            (size_t)p->wg, k);
}

/* Groups of a grid-stride launch over items work-items' worth of work. */
static size_t stride_groups(size_t items, int wg)
{
    size_t groups = (items + (size_t)wg - 1) / (size_t)wg;
    return groups == 0 ? 1 : min_size(groups, STEP_MAX_GROUPS);
}

static hd_status run_elementwise(void *state, hd_context *ctx, hd_op op, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    hd_fused_params p;
    hd_kernel *k;
    hd_status s = step_kernel_for(f, ctx, op, a, &p, &k);
    if (s != HD_OK)
        return s;
    size_t vectors = (a->rows * a->cols + (size_t)p.vec - 1) / (size_t)p.vec;
    size_t groups = stride_groups(vectors, p.wg);
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols;
    float alpha = a->alpha;
    hd_fused_arg list[8];
    int n = 0;
    for (int i = 0; i < HD_STEP_INPUTS && a->in[i] != NULL; i++)
        list[n++] = HD_FUSED_TENSOR(a->in[i]);
    if (op == HD_OP_ADD) /* y is read and written */
        list[n++] = HD_FUSED_TENSOR(a->out[0]);
    else
        for (int i = 0; i < HD_STEP_OUTPUTS && a->out[i] != NULL; i++)
            list[n++] = HD_FUSED_TENSOR(a->out[i]);
    list[n++] = HD_FUSED_VALUE(rows);
    list[n++] = HD_FUSED_VALUE(cols);
    if (op == HD_OP_ADD)
        list[n++] = HD_FUSED_VALUE(alpha);
    return hd__fused_launch_args(f, ctx, k, groups, (size_t)p.wg, list, n);
}

hd_status hd__fused_swiglu(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_elementwise(state, ctx, HD_OP_SWIGLU, args);
}

hd_status hd__fused_swiglu_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_elementwise(state, ctx, HD_OP_SWIGLU_BACKWARD, args);
}

hd_status hd__fused_gelu(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_elementwise(state, ctx, HD_OP_GELU, args);
}

hd_status hd__fused_gelu_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_elementwise(state, ctx, HD_OP_GELU_BACKWARD, args);
}

hd_status hd__fused_add(void *state, hd_context *ctx, const hd_op_args *args)
{
    return run_elementwise(state, ctx, HD_OP_ADD, args);
}

/* RoPE's tables: each row's position, from the call's sequences; theta's frequencies as pairs. */
static void make_positions(const void *arg, void *table)
{
    const hd_step_args *a = arg;
    hd__sequence_positions(a->seq_lengths, a->seq_count, a->rows, a->position_offset, table);
}

static void make_frequencies(const void *arg, void *table)
{
    const hd_step_args *a = arg;
    hd__rope_frequencies(a->theta, a->head_dim, table);
}

/* RoPE: the rows' positions and, without a caller's table, the frequencies as (hi, lo) pairs,
 * kept on the device (hd__fused_table: a step's layers share them), then one launch. */
hd_status hd__fused_rope(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    hd_fused_params p;
    hd_kernel *k;
    hd_status s = step_kernel_for(f, ctx, HD_OP_ROPE, a, &p, &k);
    if (s != HD_OK)
        return s;
    size_t d = a->head_dim, heads = a->cols / d;
    const struct hd_device_buffer *pos_buf = NULL, *freq_buf = NULL;
    const size_t pos_key[3] = {a->rows, a->position_offset, a->seq_count};
    const hd_fused_recipe positions = {
        .key = {pos_key, a->seq_lengths},
        .key_bytes = {sizeof pos_key, a->seq_count * sizeof *a->seq_lengths},
        .bytes = a->rows * sizeof(int32_t),
        .make = make_positions,
        .arg = a,
    };
    s = hd__fused_table(f, ctx, HD_FUSED_TABLE_POSITIONS, &positions, &pos_buf);
    const struct {
        double theta;
        size_t d;
    } freq_key = {a->theta, d};
    const hd_fused_recipe frequencies = {
        .key = {&freq_key, NULL},
        .key_bytes = {sizeof freq_key, 0},
        .bytes = d * sizeof(float),
        .make = make_frequencies,
        .arg = a,
    };
    if (s == HD_OK && a->in[1] == NULL)
        s = hd__fused_table(f, ctx, HD_FUSED_TABLE_FREQUENCIES, &frequencies, &freq_buf);
    int32_t rows = (int32_t)a->rows, heads_arg = (int32_t)heads, d_arg = (int32_t)d;
    int32_t inverse = a->inverse ? 1 : 0;
    if (s == HD_OK) {
        size_t items = a->rows * ((heads + (size_t)p.hpi - 1) / (size_t)p.hpi) * (d / 2);
        const hd_fused_arg list[] = {
            HD_FUSED_TENSOR(a->in[0]),
            HD_FUSED_TENSOR(a->out[0]),
            HD_FUSED_BUFFER(pos_buf),
            a->in[1] != NULL ? HD_FUSED_TENSOR(a->in[1]) : HD_FUSED_BUFFER(freq_buf),
            HD_FUSED_VALUE(rows),
            HD_FUSED_VALUE(heads_arg),
            HD_FUSED_VALUE(d_arg),
            HD_FUSED_VALUE(inverse),
        };
        s = hd__fused_launch_args(f, ctx, k, stride_groups(items, p.wg), (size_t)p.wg, list,
                                  (int)(sizeof list / sizeof list[0]));
    }
    return s;
}

hd_status hd__fused_embedding(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    hd_fused_params p;
    hd_kernel *k;
    hd_status s = step_kernel_for(f, ctx, HD_OP_EMBEDDING, a, &p, &k);
    const struct hd_device_buffer *ids = NULL;
    struct hd_device_buffer *uploaded = NULL;
    if (s == HD_OK)
        s = hd__fused_ids(f, ctx, a, &ids, &uploaded);
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols;
    if (s == HD_OK) {
        const hd_fused_arg list[] = {
            HD_FUSED_TENSOR(a->in[0]), HD_FUSED_BUFFER(ids), HD_FUSED_TENSOR(a->out[0]),
            HD_FUSED_VALUE(rows),      HD_FUSED_VALUE(cols),
        };
        s = hd__fused_launch_args(f, ctx, k, min_size(a->rows, STEP_MAX_GROUPS), (size_t)p.wg, list,
                                  (int)(sizeof list / sizeof list[0]));
    }
    hd__fused_buffer_release(f, uploaded);
    return s;
}

bool hd__fused_step_supports(hd_op op, const hd_shape *shape)
{
    if (hd__fused_train_op(op)) /* residual + norm, cross-entropy, the LM head: train.c */
        return hd__fused_train_supports(op, shape);
    if (kernel_of[op].name == NULL)
        return false;
    for (int d = 0; d < hd__op(op)->dims; d++)
        if (!fits_int(shape->dim[d]))
            return false;
    return true;
}

hd_status hd__fused_step_check(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *shape,
                               const char *variant)
{
    if (hd__fused_train_op(op))
        return hd__fused_train_check(f, ctx, op, shape, variant);
    if (is_attention(op))
        return hd__fused_attention_check(f, ctx, op, shape, variant);
    hd_fused_params p;
    return step_params(f, ctx, op, shape->dim[1], variant, &p);
}

size_t hd__fused_step_variants(const hd_fused *f, hd_op op, const hd_shape *shape,
                               const char **out, size_t max)
{
    if (hd__fused_train_op(op))
        return hd__fused_train_variants(f, op, shape, out, max);
    if (is_attention(op))
        return hd__fused_attention_variants(f, op, shape, out, max);
    if (kernel_of[op].name == NULL)
        return 0;
    static const char *const elementwise[] = {"WG=256 VEC=4", "WG=128 VEC=4", "WG=512 VEC=4",
                                              "WG=1024 VEC=4", "WG=256 VEC=1"};
    static const char *const rope[] = {"WG=256 HPI=4", "WG=256 HPI=1", "WG=256 HPI=2",
                                       "WG=128 HPI=4", "WG=512 HPI=8"};
    static const char *const embedding[] = {"WG=256 VEC=4", "WG=128 VEC=4", "WG=64 VEC=4",
                                            "WG=256 VEC=1"};
    const char *const *list = op == HD_OP_ROPE        ? rope
                              : op == HD_OP_EMBEDDING ? embedding
                                                      : elementwise;
    size_t count = op == HD_OP_ROPE        ? sizeof rope / sizeof rope[0]
                   : op == HD_OP_EMBEDDING ? sizeof embedding / sizeof embedding[0]
                                           : sizeof elementwise / sizeof elementwise[0];
    size_t n = 0;
    for (size_t i = 0; i < count && n < max; i++)
        if (!(op == HD_OP_EMBEDDING && shape->dim[1] % 4 != 0 && i != count - 1))
            out[n++] = list[i];
    return n;
}
