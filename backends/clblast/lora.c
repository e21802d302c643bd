/*
 * The LoRA forward pass as CLBlast GEMMs, y = x*W + scale*(x*A)*B, all on the device:
 *   y = x*W                 (tokens×out, beta = 0)
 *   h = x*A                 (tokens×rank, into a pooled temporary)
 *   y = scale*h*B + 1*y     (beta = 1 accumulates onto the first product)
 */
#include "backends/clblast/clblast.h"
#include "core/error.h"

/* y = x*W with CLBlast parameters variant. Lock held. */
static hd_status base_product(hd_clblast_state *st, hd_context *ctx, const hd_lora_args *l,
                              const char *variant)
{
    hd_status s = hd__clblast_prepare(st, ctx, variant);
    if (s != HD_OK)
        return s;
    return hd__clblast_sgemm(st, ctx, true, false, l->trans_w, l->tokens, l->out, l->in, 1.0f,
                             hd__cl_mem(l->x->state->device->mem), 0, l->in,
                             hd__cl_mem(l->w->state->device->mem), 0, l->trans_w ? l->in : l->out,
                             0.0f, hd__cl_mem(l->y->state->device->mem), 0, l->out);
}

hd_status hd__clblast_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    hd_clblast_state *st = state;
    if (l->tokens == 0 || l->in == 0 || l->out == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast LoRA with an empty dimension");
    struct hd_device_buffer *h = NULL;
    if (l->rank > 0) {
        /* Taken first: when the device is out of memory, y is still untouched. */
        hd_status s = hd__cl_buffer_acquire(st->rt, ctx, l->tokens * l->rank * sizeof(float), &h);
        if (s != HD_OK)
            return s;
    }
    hd__clblast_lock();
    hd_status s = base_product(st, ctx, l, l->variant);
    if (s == HD_OK && h != NULL)
        s = hd__clblast_sgemm(st, ctx, true, false, l->trans_a, l->tokens, l->rank, l->in, 1.0f,
                              hd__cl_mem(l->x->state->device->mem), 0, l->in,
                              hd__cl_mem(l->a->state->device->mem), 0, l->trans_a ? l->in : l->rank,
                              0.0f, hd__cl_mem(h->mem), 0, l->rank);
    if (s == HD_OK && h != NULL)
        s = hd__clblast_sgemm(
            st, ctx, true, false, l->trans_b, l->tokens, l->out, l->rank, l->scale,
            hd__cl_mem(h->mem), 0, l->rank, hd__cl_mem(l->b->state->device->mem), 0,
            l->trans_b ? l->rank : l->out, 1.0f, hd__cl_mem(l->y->state->device->mem), 0, l->out);
    hd__clblast_unlock();
    /* The queue is in order: whoever takes h from the pool next enqueues after these GEMMs. */
    if (h != NULL)
        hd__cl_buffer_release(st->rt, h);
    return s;
}
