#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "dispatch/error.h"

/* y = x*W, then h = x*A (tokens×rank, the only temporary), then y += scale*h*B. The low-rank
 * update never forms the in×out product A*B. */
hd_status hd__cpu_lora(void *state, hd_context *ctx, const hd_lora_args *l)
{
    (void)state;
    float *h = NULL;
    if (l->rank > 0) {
        h = malloc(l->tokens * l->rank * sizeof *h);
        if (h == NULL)
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "LoRA: no memory for the %zu x %zu "
                             "low-rank activations", l->tokens, l->rank);
    }
    hd__cpu_sgemm(false, false, l->tokens, l->out, l->in, 1.0f, l->x->state->host, l->in,
                  l->w->state->host, l->out, 0.0f, l->y->state->host, l->out);
    if (h != NULL) {
        hd__cpu_sgemm(false, false, l->tokens, l->rank, l->in, 1.0f, l->x->state->host, l->in,
                      l->a->state->host, l->rank, 0.0f, h, l->rank);
        hd__cpu_sgemm(false, false, l->tokens, l->out, l->rank, l->scale, h, l->rank,
                      l->b->state->host, l->out, 1.0f, l->y->state->host, l->out);
        free(h);
    }
    return HD_OK;
}
