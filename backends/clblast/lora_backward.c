/*
 * LoRA backward with W frozen as CLBlast GEMMs, all on the device, every transpose and every
 * layout (hd_lora_backward_ex) read in place, dA and dB written as A and B are stored:
 *   u  = scale * dy * B^T       tokens x rank, a pooled temporary
 *   h  = x * A                  tokens x rank, a pooled temporary
 *   dx = dy * W^T (+ u * A^T onto it, beta 1)
 *   dA = x^T * u,  dB = scale * h^T * dy
 * Overwritten gradients are written by the products themselves; accumulated ones are made in
 * pooled temporaries and added at the end (CLBlastSaxpy), so that a product that fails (the
 * indirect path allocates buffers of its own) leaves them as they were. A tuned variant
 * (CLBlast's kernel parameters, tuned on dy * W^T, the largest product) runs every product, as
 * in the forward; it is verified before anything is queued.
 */
#include "backends/clblast/clblast.h"
#include "core/error.h"

static cl_mem mem_of(const hd_tensor *t)
{
    return hd__cl_mem(t->state->device->mem);
}

/* Where the products write: the gradients themselves when they are overwritten, pooled
 * temporaries when they accumulate. */
typedef struct grad_targets {
    cl_mem dx, da, db;
} grad_targets;

/* u and h, then dA and dB (beta 0), each as its tensor is stored. Lock held. */
static hd_status low_rank_products(hd_clblast_state *st, hd_context *ctx, const hd_lora_backward_args *l, cl_mem u,
                                   cl_mem h, const grad_targets *g)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool ta = l->trans_a, tb = l->trans_b;
    cl_mem x = mem_of(l->x), dy = mem_of(l->dy);
    hd_status s = hd__clblast_sgemm(st, ctx, true, false, !tb, t, r, out, l->scale, dy, 0, out,
                                    mem_of(l->b), 0, tb ? r : out, 0.0f, u, 0, r);
    if (s == HD_OK)
        s = hd__clblast_sgemm(st, ctx, true, false, ta, t, r, in, 1.0f, x, 0, in, mem_of(l->a), 0,
                              ta ? in : r, 0.0f, h, 0, r);
    if (s == HD_OK)
        s = ta ? hd__clblast_sgemm(st, ctx, true, true, false, r, in, t, 1.0f, u, 0, r, x, 0, in, 0.0f,
                                   g->da, 0, in)
               : hd__clblast_sgemm(st, ctx, true, true, false, in, r, t, 1.0f, x, 0, in, u, 0, r, 0.0f,
                                   g->da, 0, r);
    if (s == HD_OK)
        s = tb ? hd__clblast_sgemm(st, ctx, true, true, false, out, r, t, l->scale, dy, 0, out, h, 0, r,
                                   0.0f, g->db, 0, r)
               : hd__clblast_sgemm(st, ctx, true, true, false, r, out, t, l->scale, h, 0, r, dy, 0, out,
                                   0.0f, g->db, 0, out);
    return s;
}

/* dx = dy * W^T (+ u * A^T), as W and A are stored. Lock held. */
static hd_status dx_products(hd_clblast_state *st, hd_context *ctx, const hd_lora_backward_args *l, cl_mem u, cl_mem dx)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    hd_status s =
        hd__clblast_sgemm(st, ctx, true, false, !l->trans_w, t, in, out, 1.0f, mem_of(l->dy), 0, out,
                          mem_of(l->w), 0, l->trans_w ? in : out, 0.0f, dx, 0, in);
    if (s == HD_OK && r > 0)
        s = hd__clblast_sgemm(st, ctx, true, false, !l->trans_a, t, in, r, 1.0f, u, 0, r, mem_of(l->a),
                              0, l->trans_a ? in : r, 1.0f, dx, 0, in);
    return s;
}

/* out += tmp over n floats. Lock held. */
static hd_status add_into(hd_clblast_state *st, hd_context *ctx, size_t n, cl_mem tmp, cl_mem out)
{
    cl_command_queue queue = hd__cl_queue(st->rt);
    CLBlastStatusCode code = CLBlastSaxpy(n, 1.0f, tmp, 0, 1, out, 0, 1, &queue, NULL);
    return code == CLBlastSuccess ? HD_OK : hd__clblast_error(ctx, code, "CLBlastSaxpy");
}

/* Pooled buffers for the call: u and h, and with accumulate a temporary per gradient. */
typedef struct scratch {
    struct hd_device_buffer *buf[5]; /* u, h, dx, dA, dB */
} scratch;

static hd_status scratch_take(hd_clblast_state *st, hd_context *ctx, const hd_lora_backward_args *l, scratch *sc)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    size_t floats[5] = {t * r, t * r, l->accumulate && l->dx != NULL ? t * in : 0,
                        l->accumulate ? in * r : 0, l->accumulate ? r * out : 0};
    hd_status s = HD_OK;
    for (int i = 0; i < 5 && s == HD_OK; i++)
        if (floats[i] > 0)
            s = hd__cl_buffer_acquire(st->rt, ctx, floats[i] * sizeof(float), &sc->buf[i]);
    return s;
}

static void scratch_give(hd_clblast_state *st, hd_context *ctx, scratch *sc)
{
    /* The queue is in order: whoever takes a buffer from the pool next runs after these. */
    for (int i = 0; i < 5; i++)
        if (sc->buf[i] != NULL)
            hd__cl_buffer_release(st->rt, sc->buf[i]);
}

static cl_mem scratch_mem(const scratch *sc, int i)
{
    return sc->buf[i] != NULL ? hd__cl_mem(sc->buf[i]->mem) : NULL;
}

hd_status hd__clblast_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    hd_clblast_state *st = state;
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    if (t == 0 || in == 0 || out == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast LoRA backward with an empty dimension");
    /* Taken first: when the device is out of memory, no gradient has been touched. */
    scratch sc = {{NULL}};
    hd_status s = scratch_take(st, ctx, l, &sc);
    bool acc = l->accumulate;
    grad_targets g = {
        .dx = l->dx == NULL ? NULL
              : acc         ? scratch_mem(&sc, 2)
                            : mem_of(l->dx),
        .da = r == 0 ? NULL
              : acc  ? scratch_mem(&sc, 3)
                     : mem_of(l->da),
        .db = r == 0 ? NULL
              : acc  ? scratch_mem(&sc, 4)
                     : mem_of(l->db),
    };
    hd__clblast_lock();
    if (s == HD_OK)
        s = hd__clblast_prepare(st, ctx, l->variant);
    if (s == HD_OK && r > 0)
        s = low_rank_products(st, ctx, l, scratch_mem(&sc, 0), scratch_mem(&sc, 1), &g);
    if (s == HD_OK && l->dx != NULL)
        s = dx_products(st, ctx, l, scratch_mem(&sc, 0), g.dx);
    /* Accumulating, the gradients were made apart and are added only now: a product that
     * failed has left the caller's gradients as they were, for the next backend to add to. */
    bool added = false; /* a gradient has been added to: the call can no longer be retried */
    if (s == HD_OK && acc && l->dx != NULL &&
        (s = add_into(st, ctx, t * in, g.dx, mem_of(l->dx))) == HD_OK)
        added = true;
    if (s == HD_OK && acc && r > 0 && (s = add_into(st, ctx, in * r, g.da, mem_of(l->da))) == HD_OK)
        added = true;
    if (s == HD_OK && acc && r > 0)
        s = add_into(st, ctx, r * out, g.db, mem_of(l->db));
    if (s != HD_OK && added)
        hd__error_outputs_changed(ctx);
    hd__clblast_unlock();
    scratch_give(st, ctx, &sc);
    return s;
}
