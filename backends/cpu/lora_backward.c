#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "core/error.h"

/*
 * LoRA backward with W frozen, as four or five SGEMMs that read every transpose in place:
 * u = dy*B^T and h = x*A (tokens x rank, the only temporaries), both then multiplied by scale
 * (hd__cpu_scale_low_rank), then dA = x^T*u, dB = h^T*dy, dx = dy*W^T + u*A^T. accumulate makes
 * beta 1.
 * In a transposed layout (hd_lora_backward_ex) the same products read W, A and B as stored,
 * and dA and dB are written as A and B are stored: dA^T = scale*u^T*x, dB^T = scale*dy^T*h.
 * The in x out product A*B is never formed.
 */
hd_status hd__cpu_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    (void)state;
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool tw = l->trans_w, ta = l->trans_a, tb = l->trans_b;
    const float *x = l->x->state->host, *w = l->w->state->host, *a = l->a->state->host;
    const float *b = l->b->state->host, *dy = l->dy->state->host;
    float beta = l->accumulate ? 1.0f : 0.0f;
    float *u = NULL;
    if (r > 0) {
        size_t bytes;
        if (!hd__cpu_scratch_bytes(2, t, r, &bytes))
            return hd__error(ctx, HD_ERR_SIZE_OVERFLOW,
                             "LoRA backward: the 2 x %zu x %zu low-rank products do not fit", t, r);
        u = malloc(bytes);
        if (u == NULL)
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY,
                             "LoRA backward: no memory for the 2 x %zu x %zu low-rank products", t,
                             r);
    }
    if (u != NULL) {
        float *h = u + t * r, *da = l->da->state->host, *db = l->db->state->host;
        hd__cpu_sgemm(false, !tb, t, r, out, 1.0f, dy, out, b, tb ? r : out, 0.0f, u, r);
        hd__cpu_sgemm(false, ta, t, r, in, 1.0f, x, in, a, ta ? in : r, 0.0f, h, r);
        hd__cpu_scale_low_rank(u, 2 * t * r, l->scale); /* u and h: scale*u, scale*h */
        if (ta)
            hd__cpu_sgemm(true, false, r, in, t, 1.0f, u, r, x, in, beta, da, in);
        else
            hd__cpu_sgemm(true, false, in, r, t, 1.0f, x, in, u, r, beta, da, r);
        if (tb)
            hd__cpu_sgemm(true, false, out, r, t, 1.0f, dy, out, h, r, beta, db, r);
        else
            hd__cpu_sgemm(true, false, r, out, t, 1.0f, h, r, dy, out, beta, db, out);
    }
    if (l->dx != NULL) {
        float *dx = l->dx->state->host;
        hd__cpu_sgemm(false, !tw, t, in, out, 1.0f, dy, out, w, tw ? in : out, beta, dx, in);
        if (u != NULL)
            hd__cpu_sgemm(false, !ta, t, in, r, 1.0f, u, r, a, ta ? in : r, 1.0f, dx, in);
    }
    free(u);
    return HD_OK;
}
