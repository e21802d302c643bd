/*
 * The LoRA forward pass as CLBlast GEMMs, y = x*W + scale*(x*A)*B, all on the device:
 *   y = x*W                 (tokens×out, beta = 0)
 *   h = x*A                 (tokens×rank, into a pooled temporary)
 *   y = scale*h*B + 1*y     (beta = 1 accumulates onto the first product)
 * and the hybrid plan, where the fused backend's epilogue does the low-rank part in one launch
 * after CLBlast's y = x*W.
 */
#include "backends/clblast/clblast.h"
#include "backends/fused/fused.h"
#include "dispatch/context.h"
#include "dispatch/error.h"

/* y = x*W, the product both plans start with, with CLBlast parameters variant. Lock held. */
static hd_status base_product(hd_clblast_state *st, hd_context *ctx, const hd_lora_args *l,
                              const char *variant)
{
    hd_status s = hd__clblast_prepare(st, ctx, variant);
    if (s != HD_OK)
        return s;
    return hd__clblast_sgemm(ctx, true, false, false, l->tokens, l->out, l->in, 1.0f,
                             l->x->device->mem, 0, l->in, l->w->device->mem, 0, l->out, 0.0f,
                             l->y->device->mem, 0, l->out);
}

hd_status hd__clblast_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    if (l->tokens == 0 || l->in == 0 || l->out == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast LoRA with an empty dimension");
    struct hd_device_buffer *h = NULL;
    if (l->rank > 0) {
        /* Taken first: when the device is out of memory, y is still untouched. */
        hd_status s = hd__cl_buffer_acquire(ctx->cl, ctx, l->tokens * l->rank * sizeof(float), &h);
        if (s != HD_OK)
            return s;
    }
    hd__clblast_lock();
    hd_status s = base_product(state, ctx, l, l->variant);
    if (s == HD_OK && h != NULL)
        s = hd__clblast_sgemm(ctx, true, false, false, l->tokens, l->rank, l->in, 1.0f,
                              l->x->device->mem, 0, l->in, l->a->device->mem, 0, l->rank, 0.0f,
                              h->mem, 0, l->rank);
    if (s == HD_OK && h != NULL)
        s = hd__clblast_sgemm(ctx, true, false, false, l->tokens, l->out, l->rank, l->scale, h->mem,
                              0, l->rank, l->b->device->mem, 0, l->out, 1.0f, l->y->device->mem, 0,
                              l->out);
    hd__clblast_unlock();
    /* The queue is in order: whoever takes h from the pool next enqueues after these GEMMs. */
    if (h != NULL)
        hd__cl_buffer_release(ctx->cl, h);
    return s;
}

/* The hybrid plan borrows the states of both backends. Its variant belongs to the fused
 * epilogue; CLBlast runs its base parameters. The epilogue accepts its parameters, builds its
 * kernel and sets its arguments before CLBlast writes y = x*W: a refusal then leaves y as the
 * caller wrote it, and the dispatcher's next backend starts from the caller's data. */
hd_status hd__clblast_fused_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    (void)state;
    if (l->tokens == 0 || l->in == 0 || l->out == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast+fused LoRA with an empty dimension");
    hd_clblast_state *st = ctx->backend_state[HD_BACKEND_CLBLAST];
    void *fused = ctx->backend_state[HD_BACKEND_FUSED];
    if (st == NULL || fused == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "clblast+fused: the CLBlast or the fused backend is gone");
    hd_fused_update epilogue;
    hd_status s = hd__fused_lora_update_prepare(fused, ctx, l, &epilogue);
    if (s != HD_OK)
        return s;
    hd__clblast_lock();
    s = base_product(st, ctx, l, NULL);
    hd__clblast_unlock();
    if (s == HD_OK)
        s = hd__fused_lora_update_enqueue(ctx, &epilogue);
    return s;
}
