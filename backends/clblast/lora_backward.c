/*
 * LoRA backward with W frozen as CLBlast GEMMs, all on the device, every transpose and every
 * layout (hd_lora_backward_ex) read in place, dA and dB written as A and B are stored:
 *   u  = scale * dy * B^T       tokens x rank, a pooled temporary
 *   h  = x * A                  tokens x rank, a pooled temporary
 *   dx = dy * W^T (+ u * A^T onto it, beta 1)
 *   dA = x^T * u,  dB = scale * h^T * dy
 * accumulate makes the gradients' beta 1. A tuned variant (CLBlast's kernel parameters, tuned
 * on dy * W^T, the largest product) runs all six, as in the forward; it is verified before
 * anything is queued.
 */
#include "backends/clblast/clblast.h"
#include "dispatch/context.h"
#include "dispatch/error.h"

static cl_mem mem_of(const hd_tensor *t)
{
    return t->state->device->mem;
}

/* u and h, then dA and dB, each as its tensor is stored. Lock held. */
static hd_status low_rank_products(hd_context *ctx, const hd_lora_backward_args *l, cl_mem u,
                                   cl_mem h, float beta)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool ta = l->trans_a, tb = l->trans_b;
    cl_mem x = mem_of(l->x), dy = mem_of(l->dy), da = mem_of(l->da), db = mem_of(l->db);
    hd_status s = hd__clblast_sgemm(ctx, true, false, !tb, t, r, out, l->scale, dy, 0, out,
                                    mem_of(l->b), 0, tb ? r : out, 0.0f, u, 0, r);
    if (s == HD_OK)
        s = hd__clblast_sgemm(ctx, true, false, ta, t, r, in, 1.0f, x, 0, in, mem_of(l->a), 0,
                              ta ? in : r, 0.0f, h, 0, r);
    if (s == HD_OK)
        s = ta ? hd__clblast_sgemm(ctx, true, true, false, r, in, t, 1.0f, u, 0, r, x, 0, in, beta,
                                   da, 0, in)
               : hd__clblast_sgemm(ctx, true, true, false, in, r, t, 1.0f, x, 0, in, u, 0, r, beta,
                                   da, 0, r);
    if (s == HD_OK)
        s = tb ? hd__clblast_sgemm(ctx, true, true, false, out, r, t, l->scale, dy, 0, out, h, 0, r,
                                   beta, db, 0, r)
               : hd__clblast_sgemm(ctx, true, true, false, r, out, t, l->scale, h, 0, r, dy, 0, out,
                                   beta, db, 0, out);
    return s;
}

hd_status hd__clblast_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    if (t == 0 || in == 0 || out == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast LoRA backward with an empty dimension");
    float beta = l->accumulate ? 1.0f : 0.0f;
    struct hd_device_buffer *u = NULL, *h = NULL;
    hd_status s = HD_OK;
    /* Taken first: when the device is out of memory, no gradient has been touched. */
    if (r > 0 && (s = hd__cl_buffer_acquire(ctx->cl, ctx, t * r * sizeof(float), &u)) == HD_OK)
        s = hd__cl_buffer_acquire(ctx->cl, ctx, t * r * sizeof(float), &h);
    hd__clblast_lock();
    if (s == HD_OK)
        s = hd__clblast_prepare(state, ctx, l->variant);
    if (s == HD_OK && r > 0)
        s = low_rank_products(ctx, l, u->mem, h->mem, beta);
    if (s == HD_OK && l->dx != NULL) {
        cl_mem dx = mem_of(l->dx);
        s = hd__clblast_sgemm(ctx, true, false, !l->trans_w, t, in, out, 1.0f, mem_of(l->dy), 0,
                              out, mem_of(l->w), 0, l->trans_w ? in : out, beta, dx, 0, in);
        if (s == HD_OK && r > 0)
            s = hd__clblast_sgemm(ctx, true, false, !l->trans_a, t, in, r, 1.0f, u->mem, 0, r,
                                  mem_of(l->a), 0, l->trans_a ? in : r, 1.0f, dx, 0, in);
    }
    hd__clblast_unlock();
    /* The queue is in order: whoever takes u or h from the pool next enqueues after these. */
    if (u != NULL)
        hd__cl_buffer_release(ctx->cl, u);
    if (h != NULL)
        hd__cl_buffer_release(ctx->cl, h);
    return s;
}
