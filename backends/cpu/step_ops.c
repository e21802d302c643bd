/* The CPU backend's slots of the training step's ops: arguments from hd_step_args (core/args.h)
 * into the kernels of elementwise.c, rope.c and embedding.c, on the host copies the dispatcher
 * made valid. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/step.h"
#include "core/error.h"
#include "core/sequence.h"

static hd_cpu_pool *pool_of(void *state)
{
    return ((hd_cpu_state *)state)->pool;
}

static float *host(const hd_tensor *t)
{
    return t->state->host;
}

static size_t elements(const hd_step_args *a)
{
    return a->rows * a->cols;
}

hd_status hd__cpu_swiglu_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_swiglu(pool_of(state), elements(a), host(a->in[0]), host(a->in[1]), host(a->out[0]));
    return HD_OK;
}

hd_status hd__cpu_swiglu_backward_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_swiglu_backward(pool_of(state), elements(a), host(a->in[0]), host(a->in[1]),
                            host(a->in[2]), host(a->out[0]), host(a->out[1]));
    return HD_OK;
}

hd_status hd__cpu_gelu_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_gelu(pool_of(state), elements(a), host(a->in[0]), host(a->out[0]));
    return HD_OK;
}

hd_status hd__cpu_gelu_backward_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_gelu_backward(pool_of(state), elements(a), host(a->in[0]), host(a->in[1]),
                          host(a->out[0]));
    return HD_OK;
}

hd_status hd__cpu_add_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_add(pool_of(state), elements(a), a->alpha, host(a->in[0]), host(a->out[0]));
    return HD_OK;
}

/* y = rope(x): x copied into y unless in place, then rotated there. The frequencies come as
 * (hi, lo) pairs: theta's in double, a caller's table with lo = 0. */
hd_status hd__cpu_rope_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    size_t d = a->head_dim;
    int32_t *pos = malloc(a->rows * sizeof *pos);
    float *pairs = malloc(d * sizeof *pairs);
    if (pos == NULL || pairs == NULL) {
        free(pos);
        free(pairs);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_rope: positions of %zu rows", a->rows);
    }
    hd__sequence_positions(a->seq_lengths, a->seq_count, a->rows, a->position_offset, pos);
    const hd_tensor *table = a->in[1];
    if (table != NULL) {
        for (size_t i = 0; i < d / 2; i++) {
            pairs[2 * i] = host(table)[i];
            pairs[2 * i + 1] = 0.0f;
        }
    } else {
        hd__rope_frequencies(a->theta, d, pairs);
    }
    float *y = host(a->out[0]);
    if (y != host(a->in[0]))
        memcpy(y, host(a->in[0]), elements(a) * sizeof *y);
    hd__cpu_rope(pool_of(state), a->rows, a->cols / d, d, pos, pairs, a->inverse, y);
    free(pos);
    free(pairs);
    return HD_OK;
}

hd_status hd__cpu_embedding_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    (void)ctx;
    const hd_step_args *a = &args->step;
    hd__cpu_embedding(pool_of(state), a->rows, a->cols, a->ids, host(a->in[0]), host(a->out[0]));
    return HD_OK;
}

/* Attention: the rows' key ranges (and the keys' query ranges) from the packed sequences. */
static hd_status attention_tables(hd_context *ctx, const hd_step_args *a, int32_t **kv, int32_t **q)
{
    *kv = malloc(2 * a->rows * sizeof **kv);
    *q = malloc(2 * a->rows * sizeof **q);
    if (*kv == NULL || *q == NULL) {
        free(*kv);
        free(*q);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "attention: range tables of %zu rows", a->rows);
    }
    hd__sequence_attention_ranges(a->seq_lengths, a->seq_count, a->rows, a->causal, a->window, *kv,
                                  *q);
    return HD_OK;
}

static hd_cpu_attention_shape attention_shape(const hd_step_args *a)
{
    return (hd_cpu_attention_shape){.tokens = a->rows,
                                    .heads = a->heads,
                                    .kv_heads = a->kv_heads,
                                    .head_dim = a->head_dim,
                                    .scale = a->scale};
}

hd_status hd__cpu_attention_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    int32_t *kv, *q;
    hd_status s = attention_tables(ctx, a, &kv, &q);
    if (s != HD_OK)
        return s;
    hd_cpu_attention_shape shape = attention_shape(a);
    float *lse = a->out[1] != NULL ? host(a->out[1]) : malloc(a->rows * a->heads * sizeof *lse);
    s = lse != NULL ? hd__cpu_attention(pool_of(state), &shape, host(a->in[0]), host(a->in[1]),
                                        host(a->in[2]), kv, host(a->out[0]), lse)
                    : HD_ERR_OUT_OF_MEMORY;
    if (a->out[1] == NULL)
        free(lse);
    free(kv);
    free(q);
    return s == HD_OK ? s : hd__error(ctx, s, "hd_attention: scratch of %zu rows", a->rows);
}

hd_status hd__cpu_attention_backward_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    int32_t *kv, *q;
    hd_status s = attention_tables(ctx, a, &kv, &q);
    if (s != HD_OK)
        return s;
    hd_cpu_attention_shape shape = attention_shape(a);
    s = hd__cpu_attention_backward(pool_of(state), &shape, host(a->in[0]), host(a->in[1]),
                                   host(a->in[2]), host(a->in[3]), host(a->in[4]), host(a->in[5]),
                                   kv, q, host(a->out[0]), host(a->out[1]), host(a->out[2]));
    free(kv);
    free(q);
    return s == HD_OK ? s
                      : hd__error(ctx, s, "hd_attention_backward: scratch of %zu rows", a->rows);
}
