/*
 * The float64 reference of the training step's ops (attention, elementwise ops, RoPE,
 * embedding, residual + RMS norm, cross-entropy, AdamW): plain loops in double on the float
 * inputs the ops read, the definition of each op and nothing clever, for the tests and the
 * tuner's checks. One section per op family.
 */
#ifndef HD_AUTOTUNE_REFERENCE_STEP_H
#define HD_AUTOTUNE_REFERENCE_STEP_H

#include <stdbool.h>
#include <stddef.h>

/* ---- attention (reference_attention.c) ----
 *
 * Scaled dot-product attention over packed sequences, grouped-query heads. q and out are
 * tokens x (heads * head_dim), k and v tokens x (kv_heads * head_dim), row-major; head h of q
 * is columns h * head_dim ..; query head h reads kv head h / (heads / kv_heads). The tokens are
 * nseq sequences one after another, seq_lens[s] rows each (summing to tokens); row i attends
 * to the keys j of its own sequence, j <= i when causal. For each row i and head h, with
 * s_ij = scale * q_i . k_j over the keys j it attends to:
 *   lse[i * heads + h] = log sum_j exp(s_ij)        (natural log)
 *   out_i = sum_j exp(s_ij - lse) v_j
 * The backward, given dout (as out): p_ij = exp(s_ij - lse_i), delta_i = sum_c dout_ic out_ic,
 *   dv_j = sum_i p_ij dout_i, ds_ij = p_ij (dout_i . v_j - delta_i),
 *   dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i ds_ij q_i,
 * dk and dv of a kv head summed over the query heads that read it. The backward recomputes
 * its forward in double from q, k and v (it takes no out or lse). */
typedef struct hd_ref_attention_shape {
    size_t tokens, heads, kv_heads, head_dim;
    const int *seq_lens; /* nseq lengths >= 1, summing to tokens */
    size_t nseq;
    bool causal;
    double scale;
} hd_ref_attention_shape;

/* out: tokens x heads * head_dim; lse: tokens x heads (may be NULL). */
void hd__ref_attention(const hd_ref_attention_shape *s, const float *q, const float *k,
                       const float *v, double *out, double *lse);
/* dq as q, dk and dv as k. */
void hd__ref_attention_backward(const hd_ref_attention_shape *s, const float *q, const float *k,
                                const float *v, const float *dout, double *dq, double *dk,
                                double *dv);

#endif
