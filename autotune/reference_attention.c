/* The float64 reference of attention and its backward (reference_step.h): the definition,
 * row by row and head by head, every score recomputed where it is needed (no scratch). */
#include <math.h>
#include <string.h>

#include "autotune/reference_step.h"

/* The keys [*begin, *end) that row i attends to. */
static void key_range(const hd_ref_attention_shape *s, size_t i, size_t *begin, size_t *end)
{
    size_t start = 0;
    for (size_t q = 0; q < s->nseq; q++) {
        size_t len = (size_t)s->seq_lens[q];
        if (i < start + len) {
            *begin = s->window > 0 && i - start >= s->window ? i + 1 - s->window : start;
            *end = s->causal ? i + 1 : start + len;
            return;
        }
        start += len;
    }
    *begin = *end = i; /* beyond the sequences: no key (the callers never ask) */
}

/* scale * q_i . k_j for query head h. */
static double score(const hd_ref_attention_shape *s, const float *q, const float *k, size_t i,
                    size_t j, size_t h)
{
    const size_t d = s->head_dim, hk = h / (s->heads / s->kv_heads);
    const float *qi = q + i * s->heads * d + h * d, *kj = k + j * s->kv_heads * d + hk * d;
    double dot = 0.0;
    for (size_t c = 0; c < d; c++)
        dot += (double)qi[c] * kj[c];
    return s->scale * dot;
}

/* log sum_j exp(s_ij) over row i's keys, for head h. */
static double row_lse(const hd_ref_attention_shape *s, const float *q, const float *k, size_t i,
                      size_t h, size_t begin, size_t end)
{
    double max = -INFINITY, sum = 0.0;
    for (size_t j = begin; j < end; j++) {
        double x = score(s, q, k, i, j, h);
        max = x > max || isnan(x) ? x : max;
    }
    if (!isfinite(max)) /* NaN, or +inf (inf - inf), as a softmax gives */
        return isnan(max) ? max : NAN;
    for (size_t j = begin; j < end; j++)
        sum += exp(score(s, q, k, i, j, h) - max);
    return max + log(sum);
}

void hd__ref_attention(const hd_ref_attention_shape *s, const float *q, const float *k,
                       const float *v, double *out, double *lse)
{
    const size_t d = s->head_dim, g = s->heads / s->kv_heads;
    for (size_t i = 0; i < s->tokens; i++) {
        size_t begin, end;
        key_range(s, i, &begin, &end);
        for (size_t h = 0; h < s->heads; h++) {
            double l = row_lse(s, q, k, i, h, begin, end);
            double *o = out + i * s->heads * d + h * d;
            for (size_t c = 0; c < d; c++)
                o[c] = 0.0;
            for (size_t j = begin; j < end; j++) {
                double p = exp(score(s, q, k, i, j, h) - l);
                const float *vj = v + j * s->kv_heads * d + (h / g) * d;
                for (size_t c = 0; c < d; c++)
                    o[c] += p * vj[c];
            }
            if (lse != NULL)
                lse[i * s->heads + h] = l;
        }
    }
}

void hd__ref_attention_backward(const hd_ref_attention_shape *s, const float *q, const float *k,
                                const float *v, const float *dout, double *dq, double *dk,
                                double *dv)
{
    const size_t d = s->head_dim, g = s->heads / s->kv_heads;
    const size_t qcols = s->heads * d, kcols = s->kv_heads * d;
    memset(dk, 0, s->tokens * kcols * sizeof *dk);
    memset(dv, 0, s->tokens * kcols * sizeof *dv);
    for (size_t i = 0; i < s->tokens; i++) {
        size_t begin, end;
        key_range(s, i, &begin, &end);
        for (size_t h = 0; h < s->heads; h++) {
            const size_t hk = h / g;
            const float *qi = q + i * qcols + h * d, *doi = dout + i * qcols + h * d;
            double *dqi = dq + i * qcols + h * d;
            double l = row_lse(s, q, k, i, h, begin, end);
            /* delta = dout_i . out_i = sum_j p_ij (dout_i . v_j) */
            double delta = 0.0;
            for (size_t j = begin; j < end; j++) {
                const float *vj = v + j * kcols + hk * d;
                double dp = 0.0;
                for (size_t c = 0; c < d; c++)
                    dp += (double)doi[c] * vj[c];
                delta += exp(score(s, q, k, i, j, h) - l) * dp;
            }
            for (size_t c = 0; c < d; c++)
                dqi[c] = 0.0;
            for (size_t j = begin; j < end; j++) {
                const float *kj = k + j * kcols + hk * d, *vj = v + j * kcols + hk * d;
                double p = exp(score(s, q, k, i, j, h) - l), dp = 0.0;
                for (size_t c = 0; c < d; c++)
                    dp += (double)doi[c] * vj[c];
                double ds = p * (dp - delta);
                for (size_t c = 0; c < d; c++) {
                    dqi[c] += s->scale * ds * kj[c];
                    dk[j * kcols + hk * d + c] += s->scale * ds * qi[c];
                    dv[j * kcols + hk * d + c] += p * doi[c];
                }
            }
        }
    }
}
