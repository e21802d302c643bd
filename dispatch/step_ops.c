/* The training step's public operations: each puts its tensors in the op table's order and its
 * scalars in an hd_op_params; hd__call() does the rest, as for every operation. */
#include "core/error.h"
#include "dispatch/tools.h"

hd_status hd_swiglu(hd_context *ctx, const hd_tensor *g, const hd_tensor *u, hd_tensor *y)
{
    const hd_tensor *t[] = {g, u, y};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_SWIGLU, t, &p);
}

hd_status hd_swiglu_backward(hd_context *ctx, const hd_tensor *g, const hd_tensor *u,
                             const hd_tensor *dy, hd_tensor *dg, hd_tensor *du)
{
    const hd_tensor *t[] = {g, u, dy, dg, du};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_SWIGLU_BACKWARD, t, &p);
}

hd_status hd_gelu(hd_context *ctx, const hd_tensor *x, hd_tensor *y)
{
    const hd_tensor *t[] = {x, y};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_GELU, t, &p);
}

hd_status hd_gelu_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *dy, hd_tensor *dx)
{
    const hd_tensor *t[] = {x, dy, dx};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_GELU_BACKWARD, t, &p);
}

hd_status hd_add(hd_context *ctx, float alpha, const hd_tensor *x, hd_tensor *y)
{
    const hd_tensor *t[] = {x, y};
    hd_op_params p = {.alpha = alpha};
    return hd__call(ctx, HD_OP_ADD, t, &p);
}

hd_status hd_add_rms_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *r,
                          const hd_tensor *weight, float eps, hd_tensor *h, hd_tensor *y)
{
    const hd_tensor *t[] = {x, r, weight, h, y};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_ADD_RMS_NORM, t, &p);
}

hd_status hd_add_rms_norm_backward(hd_context *ctx, const hd_tensor *h, const hd_tensor *weight,
                                   const hd_tensor *dy, const hd_tensor *dres, float eps,
                                   hd_tensor *dh, hd_tensor *dweight)
{
    const hd_tensor *t[] = {h, weight, dy, dres, dh, dweight};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_ADD_RMS_NORM_BACKWARD, t, &p);
}

/* Options the caller left NULL are an error, named, as a NULL tensor is. */
static hd_status no_options(hd_context *ctx, hd_op op)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: options are NULL", hd__op(op)->fn);
}

/* An _ids form's id tensor the caller left NULL, named as any NULL tensor is. */
static hd_status no_tensor(hd_context *ctx, hd_op op, const char *name)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is NULL", hd__op(op)->ids_fn,
                     name);
}

hd_status hd_rope(hd_context *ctx, const hd_rope_options *opt, const hd_tensor *x, hd_tensor *y)
{
    if (opt == NULL)
        return no_options(ctx, HD_OP_ROPE);
    const hd_tensor *t[] = {x, opt->inv_freq, y};
    hd_op_params p = {.sequences = opt->sequences,
                      .head_dim = opt->head_dim,
                      .theta = opt->theta,
                      .position_offset = opt->position_offset,
                      .inverse = opt->inverse};
    return hd__call(ctx, HD_OP_ROPE, t, &p);
}

static hd_op_params attention_params(const hd_attention_options *opt)
{
    return (hd_op_params){.sequences = opt->sequences,
                          .heads = opt->heads,
                          .kv_heads = opt->kv_heads,
                          .causal = opt->causal,
                          .window = opt->window,
                          .attention_scale = opt->scale};
}

hd_status hd_attention(hd_context *ctx, const hd_attention_options *opt, const hd_tensor *q,
                       const hd_tensor *k, const hd_tensor *v, hd_tensor *out, hd_tensor *lse)
{
    if (opt == NULL)
        return no_options(ctx, HD_OP_ATTENTION);
    const hd_tensor *t[] = {q, k, v, out, lse};
    hd_op_params p = attention_params(opt);
    return hd__call(ctx, HD_OP_ATTENTION, t, &p);
}

hd_status hd_attention_backward(hd_context *ctx, const hd_attention_options *opt,
                                const hd_tensor *q, const hd_tensor *k, const hd_tensor *v,
                                const hd_tensor *out, const hd_tensor *lse, const hd_tensor *dout,
                                hd_tensor *dq, hd_tensor *dk, hd_tensor *dv)
{
    if (opt == NULL)
        return no_options(ctx, HD_OP_ATTENTION_BACKWARD);
    const hd_tensor *t[] = {q, k, v, out, lse, dout, dq, dk, dv};
    hd_op_params p = attention_params(opt);
    return hd__call(ctx, HD_OP_ATTENTION_BACKWARD, t, &p);
}

hd_status hd_cross_entropy(hd_context *ctx, const hd_tensor *logits, const int32_t *targets,
                           int32_t ignore_index, hd_tensor *loss, hd_tensor *dlogits)
{
    const hd_tensor *t[] = {logits, loss, dlogits};
    hd_op_params p = {.ids = targets, .ignore_index = ignore_index};
    return hd__call(ctx, HD_OP_CROSS_ENTROPY, t, &p);
}

hd_status hd_linear_cross_entropy(hd_context *ctx, const hd_tensor *h, const hd_tensor *w,
                                  const int32_t *targets, int32_t ignore_index, hd_tensor *loss,
                                  hd_tensor *dh)
{
    const hd_tensor *t[] = {h, w, loss, dh};
    hd_op_params p = {.ids = targets, .ignore_index = ignore_index};
    return hd__call(ctx, HD_OP_LINEAR_CROSS_ENTROPY, t, &p);
}

hd_status hd_embedding(hd_context *ctx, const hd_tensor *table, const int32_t *ids, hd_tensor *out)
{
    const hd_tensor *t[] = {table, out};
    hd_op_params p = {.ids = ids};
    return hd__call(ctx, HD_OP_EMBEDDING, t, &p);
}

/* An _ids form's call: its checks name the form (hd__op_fn), as does a NULL id tensor's. */
static hd_status call_ids_form(hd_context *ctx, hd_op op, const hd_tensor *const t[],
                               const hd_op_params *p, const char *ids_name)
{
    return p->id_tensor != NULL ? hd__call(ctx, op, t, p) : no_tensor(ctx, op, ids_name);
}

hd_status hd_cross_entropy_ids(hd_context *ctx, const hd_tensor *logits, const hd_tensor *targets,
                               int32_t ignore_index, hd_tensor *loss, hd_tensor *dlogits)
{
    const hd_tensor *t[] = {logits, loss, dlogits};
    hd_op_params p = {.id_tensor = targets, .ignore_index = ignore_index};
    return call_ids_form(ctx, HD_OP_CROSS_ENTROPY, t, &p, "targets");
}

hd_status hd_linear_cross_entropy_ids(hd_context *ctx, const hd_tensor *h, const hd_tensor *w,
                                      const hd_tensor *targets, int32_t ignore_index,
                                      hd_tensor *loss, hd_tensor *dh)
{
    const hd_tensor *t[] = {h, w, loss, dh};
    hd_op_params p = {.id_tensor = targets, .ignore_index = ignore_index};
    return call_ids_form(ctx, HD_OP_LINEAR_CROSS_ENTROPY, t, &p, "targets");
}

hd_status hd_embedding_ids(hd_context *ctx, const hd_tensor *table, const hd_tensor *ids,
                           hd_tensor *out)
{
    const hd_tensor *t[] = {table, out};
    hd_op_params p = {.id_tensor = ids};
    return call_ids_form(ctx, HD_OP_EMBEDDING, t, &p, "ids");
}
