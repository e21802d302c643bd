/*
 * LoRA backward with W frozen on the tiled GEMM engine (tile.c), everything queued:
 *   u  = scale * dy * B^T       tokens x rank, a temporary
 *   h  = x * A                  tokens x rank, a temporary
 *   dx = dy * W^T + u * A^T     one launch: the rank-r product is summed in dx's own tiles (k
 *                               extended by the rank), so dx is written once
 *   dA = x^T * u                in x rank, k = tokens deep: split-K where tiles are few
 *   dB = scale * h^T * dy       rank x out, likewise
 * Every transpose and every layout (hd_lora_backward_ex) is read in place, dA and dB written as
 * A and B are stored (u^T * x and scale * dy^T * h where they are transposed); neither W^T nor
 * A*B is ever formed. Where W and A are stored transposed apart, u * A^T takes a launch of its
 * own after dx's (the engine's second product shares the first's transposes). accumulate
 * makes beta 1.
 * A tuned variant sets dx's product, the largest; the others take their shapes' defaults.
 * The temporaries are taken and every product prepared (parameters, builds, scratch) before
 * the first launch, so a refusal leaves every gradient as it was; only an enqueue that the
 * device itself refuses can stop the call after a gradient was written.
 */
#include "backends/fused/internal.h"

/* The buffers of one call; NULL where a check runs without them. */
typedef struct backward_mems {
    cl_mem x, w, a, b, dy, dx, da, db, u, h;
} backward_mems;

/* The products of one call, in launch order. */
typedef struct backward_plan {
    hd_fused_tile_call step[6];
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

/* dx = dy * W^T (+ u * A^T): W and A are read as stored, transposed in the default layout
 * (W in x out, A in x r) and as they are in PyTorch's (W out x in, A r x in). The rank-r
 * product joins dx's own launch where both take the same transpose (the engine's second
 * product shares the first's); *apart says it needs a launch of its own. */
static hd_fused_tile_call dx_product(const hd_lora_backward_args *l, float beta,
                                     const backward_mems *m, const char *variant, bool *apart)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    hd_fused_tile_call c =
        product(t, in, out, 1.0f, beta, (hd_fused_operand){m->dy, out, false},
                (hd_fused_operand){m->w, l->trans_w ? in : out, !l->trans_w}, m->dx, l->precision);
    c.variant = variant;
    *apart = r > 0 && l->trans_w != l->trans_a;
    if (r > 0 && !*apart) {
        c.k2 = r;
        c.a2 = (hd_fused_operand){m->u, r, false};
        c.b2 = (hd_fused_operand){m->a, l->trans_a ? in : r, !l->trans_a};
    }
    return c;
}

static void plan_backward(const hd_lora_backward_args *l, const backward_mems *m, backward_plan *p)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool ta = l->trans_a, tb = l->trans_b, apart = false;
    float beta = l->accumulate ? 1.0f : 0.0f;
    hd_precision prec = l->precision;
    p->count = 0;
    if (r > 0) {
        p->step[p->count++] =
            product(t, r, out, l->scale, 0.0f, (hd_fused_operand){m->dy, out, false},
                    (hd_fused_operand){m->b, tb ? r : out, !tb}, m->u, prec);
        p->step[p->count++] = product(t, r, in, 1.0f, 0.0f, (hd_fused_operand){m->x, in, false},
                                      (hd_fused_operand){m->a, ta ? in : r, ta}, m->h, prec);
    }
    if (l->dx != NULL) {
        p->step[p->count++] = dx_product(l, beta, m, l->variant, &apart);
        if (apart)
            p->step[p->count++] = product(t, in, r, 1.0f, 1.0f, (hd_fused_operand){m->u, r, false},
                                          (hd_fused_operand){m->a, ta ? in : r, !ta}, m->dx, prec);
    }
    if (r == 0)
        return;
    /* dA and dB as A and B are stored: x^T * u (in x r) or u^T * x (r x in), and
     * scale * h^T * dy (r x out) or scale * dy^T * h (out x r) */
    hd_fused_operand x_t = {m->x, in, true}, x = {m->x, in, false}, u_t = {m->u, r, true},
                     u = {m->u, r, false}, h_t = {m->h, r, true}, h = {m->h, r, false},
                     dy_t = {m->dy, out, true}, dy = {m->dy, out, false};
    p->step[p->count++] = ta ? product(r, in, t, 1.0f, beta, u_t, x, m->da, prec)
                             : product(in, r, t, 1.0f, beta, x_t, u, m->da, prec);
    p->step[p->count++] = tb ? product(out, r, t, l->scale, beta, dy_t, h, m->db, prec)
                             : product(r, out, t, l->scale, beta, h_t, dy, m->db, prec);
}

hd_status hd__fused_lora_backward_check(hd_fused *f, hd_context *ctx, const hd_shape *shape,
                                        const char *variant)
{
    const backward_mems none = {NULL};
    const hd_lora_backward_args l = {.tokens = shape->dim[0],
                                     .in = shape->dim[1],
                                     .out = shape->dim[2],
                                     .rank = shape->dim[3],
                                     .precision = ctx->gemm_precision,
                                     .trans_w = (shape->lora_layout & HD_LORA_TRANS_W) != 0,
                                     .trans_a = (shape->lora_layout & HD_LORA_TRANS_A) != 0};
    bool apart;
    hd_fused_tile_call c = dx_product(&l, 0.0f, &none, variant, &apart);
    return hd__fused_tile_check(f, ctx, &c);
}

/* Prepares every product of the plan; again from the start if a tensor-core build failed on
 * the way (the products before it were prepared for the tensor cores, which the launches will
 * no longer use), so that the launches meet exactly what was prepared. */
static hd_status prepare_all(hd_fused *f, hd_context *ctx, const backward_plan *plan)
{
    bool broken = f->mma_broken;
    hd_status s = HD_OK;
    for (size_t i = 0; i < plan->count && s == HD_OK; i++)
        s = hd__fused_tile_prepare(f, ctx, &plan->step[i]);
    for (size_t i = 0; s == HD_OK && f->mma_broken != broken && i < plan->count; i++)
        s = hd__fused_tile_prepare(f, ctx, &plan->step[i]);
    return s;
}

/* The call's variant: a tuning record is keyed by shape, not layout, so a variant tuned for
 * the default layout that this layout's dx cannot run (its tiles in local memory differ) is
 * left for the defaults, with a note, rather than refused. */
static const char *variant_for_layout(hd_fused *f, hd_context *ctx, const hd_lora_backward_args *l)
{
    if (l->variant == NULL || !(l->trans_w || l->trans_a))
        return l->variant;
    hd_shape s = {.dim = {l->tokens, l->in, l->out, l->rank},
                  .lora_layout =
                      (l->trans_w ? HD_LORA_TRANS_W : 0u) | (l->trans_a ? HD_LORA_TRANS_A : 0u)};
    if (hd__fused_lora_backward_check(f, ctx, &s, l->variant) == HD_OK)
        return l->variant;
    hd__error_clear(ctx);
    hd__note(ctx, "fused: LoRA backward in this layout runs its defaults, not '%.100s'",
             l->variant);
    return NULL;
}

hd_status hd__fused_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    hd_fused *f = state;
    if (l->variant != NULL && !hd__fused_is_tile_variant(l->variant))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: LoRA backward takes the tiled engine's variants, not '%.100s'",
                         l->variant);
    hd_lora_backward_args call = *l;
    call.variant = variant_for_layout(f, ctx, l);
    l = &call;
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
    if (s == HD_OK)
        s = prepare_all(f, ctx, &plan);
    for (size_t i = 0; i < plan.count && s == HD_OK; i++)
        s = hd__fused_tile_gemm(f, ctx, &plan.step[i]);
    /* The queue is in order: whoever takes u or h from the pool next runs after these. */
    if (u != NULL)
        hd__cl_buffer_release(ctx->cl, u);
    if (h != NULL)
        hd__cl_buffer_release(ctx->cl, h);
    return s;
}
