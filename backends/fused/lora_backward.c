/*
 * LoRA backward with W frozen on the tiled GEMM engine (tile.c), everything queued:
 *   u  = scale * dy * B^T       tokens x rank, a temporary
 *   h  = x * A                  tokens x rank, a temporary
 *   dx = dy * W^T + u * A^T     one launch: the rank-r product is summed in dx's own tiles (k
 *                               extended by the rank), so dx is written once
 *   dA = x^T * u                in x rank, k = tokens deep: split-K where tiles are few
 *   dB = scale * h^T * dy       rank x out, likewise
 * Every transpose is read in place; neither W^T nor A*B is ever formed. accumulate makes beta 1.
 * A tuned variant sets dx's product, the largest; the others take their shapes' defaults.
 * The temporaries are taken and every product prepared (parameters, builds, scratch) before
 * the first launch, so a refusal leaves every gradient as it was.
 */
#include "backends/fused/internal.h"

/* The buffers of one call; NULL where a check runs without them. */
typedef struct backward_mems {
    cl_mem x, w, a, b, dy, dx, da, db, u, h;
} backward_mems;

/* The products of one call, in launch order. */
typedef struct backward_plan {
    hd_fused_tile_call step[5];
    size_t count;
} backward_plan;

static hd_fused_tile_call product(size_t m, size_t n, size_t k, float alpha, float beta,
                                  hd_fused_operand a, hd_fused_operand b, cl_mem c,
                                  hd_precision precision)
{
    return (hd_fused_tile_call){.m = m,
                                .n = n,
                                .k = k,
                                .batch = 1,
                                .alpha = alpha,
                                .beta = beta,
                                .a = a,
                                .b = b,
                                .c = c,
                                .ldc = n,
                                .precision = precision};
}

/* dx = dy * W^T + u * A^T: W (in x out) and A (in x r) are the stored-transposed operands. */
static hd_fused_tile_call dx_product(size_t t, size_t in, size_t out, size_t r, float beta,
                                     const backward_mems *m, hd_precision precision,
                                     const char *variant)
{
    hd_fused_tile_call c = product(t, in, out, 1.0f, beta, (hd_fused_operand){m->dy, out, false},
                                   (hd_fused_operand){m->w, out, true}, m->dx, precision);
    c.variant = variant;
    if (r > 0) {
        c.k2 = r;
        c.a2 = (hd_fused_operand){m->u, r, false};
        c.b2 = (hd_fused_operand){m->a, r, true};
    }
    return c;
}

static void plan_backward(const hd_lora_backward_args *l, const backward_mems *m, backward_plan *p)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    float beta = l->accumulate ? 1.0f : 0.0f;
    hd_precision prec = l->precision;
    p->count = 0;
    if (r > 0) {
        p->step[p->count++] =
            product(t, r, out, l->scale, 0.0f, (hd_fused_operand){m->dy, out, false},
                    (hd_fused_operand){m->b, out, true}, m->u, prec);
        p->step[p->count++] = product(t, r, in, 1.0f, 0.0f, (hd_fused_operand){m->x, in, false},
                                      (hd_fused_operand){m->a, r, false}, m->h, prec);
    }
    if (l->dx != NULL)
        p->step[p->count++] = dx_product(t, in, out, r, beta, m, prec, l->variant);
    if (r > 0) {
        p->step[p->count++] = product(in, r, t, 1.0f, beta, (hd_fused_operand){m->x, in, true},
                                      (hd_fused_operand){m->u, r, false}, m->da, prec);
        p->step[p->count++] = product(r, out, t, l->scale, beta, (hd_fused_operand){m->h, r, true},
                                      (hd_fused_operand){m->dy, out, false}, m->db, prec);
    }
}

hd_status hd__fused_lora_backward_check(hd_fused *f, hd_context *ctx, const hd_shape *shape,
                                        const char *variant)
{
    const backward_mems none = {NULL};
    hd_fused_tile_call c = dx_product(shape->dim[0], shape->dim[1], shape->dim[2], shape->dim[3],
                                      0.0f, &none, ctx->gemm_precision, variant);
    return hd__fused_tile_check(f, ctx, &c);
}

hd_status hd__fused_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    hd_fused *f = state;
    if (l->variant != NULL && !hd__fused_is_tile_variant(l->variant))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: LoRA backward takes the tiled engine's variants, not '%.100s'",
                         l->variant);
    size_t low_rank_bytes = l->tokens * l->rank * sizeof(float);
    struct hd_device_buffer *u = NULL, *h = NULL;
    hd_status s = HD_OK;
    if (l->rank > 0 && (s = hd__cl_buffer_acquire(ctx->cl, ctx, low_rank_bytes, &u)) == HD_OK)
        s = hd__cl_buffer_acquire(ctx->cl, ctx, low_rank_bytes, &h);
    backward_mems m = {.x = hd__fused_mem(l->x),
                       .w = hd__fused_mem(l->w),
                       .dy = hd__fused_mem(l->dy),
                       .dx = l->dx != NULL ? hd__fused_mem(l->dx) : NULL};
    if (s == HD_OK && l->rank > 0) {
        m.a = hd__fused_mem(l->a);
        m.b = hd__fused_mem(l->b);
        m.da = hd__fused_mem(l->da);
        m.db = hd__fused_mem(l->db);
        m.u = u->mem;
        m.h = h->mem;
    }
    backward_plan plan;
    plan_backward(l, &m, &plan);
    for (size_t i = 0; i < plan.count && s == HD_OK; i++)
        s = hd__fused_tile_prepare(f, ctx, &plan.step[i]);
    for (size_t i = 0; i < plan.count && s == HD_OK; i++)
        s = hd__fused_tile_gemm(f, ctx, &plan.step[i]);
    /* The queue is in order: whoever takes u or h from the pool next runs after these. */
    if (u != NULL)
        hd__cl_buffer_release(ctx->cl, u);
    if (h != NULL)
        hd__cl_buffer_release(ctx->cl, h);
    return s;
}
