#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "core/error.h"

/* y = x*W, then h = scale*x*A (tokens×rank, the only temporary), then y += h*B. The low-rank
 * update never forms the in×out product A*B. A weight stored transposed is read in place, as
 * SGEMM's transposed operand, with its own leading dimension. */
hd_status hd__cpu_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    (void)state;
    float *h = NULL;
    if (l->rank > 0) {
        size_t bytes;
        if (!hd__cpu_scratch_bytes(1, l->tokens, l->rank, &bytes))
            return hd__error(ctx, HD_ERR_SIZE_OVERFLOW,
                             "LoRA: the %zu x %zu low-rank activations do not fit in memory",
                             l->tokens, l->rank);
        h = malloc(bytes);
        if (h == NULL)
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "LoRA: no memory for the %zu x %zu "
                             "low-rank activations", l->tokens, l->rank);
    }
    hd__cpu_sgemm(false, l->trans_w, l->tokens, l->out, l->in, 1.0f, l->x->state->host, l->in,
                  l->w->state->host, l->trans_w ? l->in : l->out, 0.0f, l->y->state->host,
                  l->out);
    if (h != NULL) {
        hd__cpu_sgemm(false, l->trans_a, l->tokens, l->rank, l->in, 1.0f, l->x->state->host,
                      l->in, l->a->state->host, l->trans_a ? l->in : l->rank, 0.0f, h, l->rank);
        hd__cpu_scale_low_rank(h, l->tokens * l->rank, l->scale);
        hd__cpu_sgemm(false, l->trans_b, l->tokens, l->out, l->rank, 1.0f, h, l->rank,
                      l->b->state->host, l->trans_b ? l->rank : l->out, 1.0f, l->y->state->host,
                      l->out);
        free(h);
    }
    return HD_OK;
}
