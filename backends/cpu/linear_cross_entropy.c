/*
 * Cross-entropy of a frozen LM head on the CPU (hd_linear_cross_entropy): the tokens in chunks
 * whose logits fit a bounded buffer, each chunk
 *   logits_c = h_c * w^T        (OpenBLAS; w is V x D as stored)
 *   cross-entropy rows          (losses, and dlogits in place, scaled by 1 / counted)
 *   dh_c = dlogits_c * w        (only where dh is wanted)
 * so that the T x V logits are never held whole. The loss adds every row's loss in row order
 * once the chunks are done, the same sum whatever the chunking.
 */
#include <stdlib.h>

#include "backends/cpu/step.h"
#include "core/error.h"

/* The largest chunk of logits held at once: large enough that each chunk's products run at
 * the GEMM's full rate, small enough to stay a fraction of a host's memory. */
#define LOGITS_CHUNK_BYTES ((size_t)64 << 20)

static size_t chunk_rows(size_t rows, size_t vocab)
{
    size_t c = LOGITS_CHUNK_BYTES / sizeof(float) / vocab;
    c = c > 0 ? c : 1;
    return c < rows ? c : rows;
}

typedef struct lm_head {
    size_t rows, dim, vocab;
    const float *h, *w;
    const int32_t *targets;
    int32_t ignore_index;
    float inv_count;
    float *losses, *dh; /* dh NULL: losses only */
} lm_head;

/* Rows r0 .. r0 + n - 1 through logits (n x vocab floats). */
static void lm_head_chunk(hd_cpu_pool *pool, const lm_head *l, size_t r0, size_t n, float *logits)
{
    size_t d = l->dim, v = l->vocab;
    hd__cpu_sgemm(false, true, n, v, d, 1.0f, l->h + r0 * d, d, l->w, d, 0.0f, logits, v);
    hd__cpu_cross_entropy(pool, n, v, logits, l->targets + r0, l->ignore_index, l->inv_count,
                          l->losses + r0, NULL, l->dh != NULL ? logits : NULL, NULL);
    if (l->dh != NULL)
        hd__cpu_sgemm(false, false, n, d, v, 1.0f, logits, v, l->w, d, 0.0f, l->dh + r0 * d, d);
}

/* in: h, w; out: loss, dh (may be NULL). */
hd_status hd__cpu_linear_cross_entropy_slot(void *state, hd_context *ctx, const hd_op_args *args)
{
    const hd_step_args *a = &args->step;
    hd_cpu_state *cpu = state;
    size_t chunk = chunk_rows(a->rows, a->vocab);
    float *logits = malloc(chunk * a->vocab * sizeof *logits);
    float *losses = malloc(a->rows * sizeof *losses);
    if (logits == NULL || losses == NULL) {
        free(logits);
        free(losses);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY,
                         "hd_linear_cross_entropy: %zu x %zu logits and %zu losses", chunk,
                         a->vocab, a->rows);
    }
    const hd_tensor *dh = a->out[1];
    lm_head l = {a->rows,
                 a->cols,
                 a->vocab,
                 a->in[0]->state->host,
                 a->in[1]->state->host,
                 a->ids,
                 a->ignore_index,
                 hd__cpu_inv_count(a->counted),
                 losses,
                 dh != NULL ? dh->state->host : NULL};
    hd__cpu_blas_begin(cpu->threads);
    for (size_t r0 = 0; r0 < a->rows; r0 += chunk)
        lm_head_chunk(cpu->pool, &l, r0, a->rows - r0 < chunk ? a->rows - r0 : chunk, logits);
    hd__cpu_blas_end();
    double total = 0.0;
    for (size_t i = 0; i < a->rows; i++)
        total += losses[i];
    a->out[0]->state->host[0] = (float)(total * l.inv_count);
    free(logits);
    free(losses);
    return HD_OK;
}
