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
#include <stdint.h>

/* ---- elementwise ops, RoPE, embedding (reference_elementwise.c) ----
 *
 * The elementwise ops on n contiguous elements (a rows x cols tensor: n = rows * cols). */

/* SwiGLU: y = silu(g) * u, silu(g) = g * sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)). */
void hd__ref_swiglu(size_t n, const float *g, const float *u, double *y);
/* du = dy * silu(g); dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))). */
void hd__ref_swiglu_backward(size_t n, const float *g, const float *u, const float *dy, double *dg,
                             double *du);
/* GELU, tanh form: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void hd__ref_gelu(size_t n, const float *x, double *y);
/* dx = dy * gelu'(x), the derivative of the tanh form. */
void hd__ref_gelu_backward(size_t n, const float *x, const float *dy, double *dx);
/* out = y + alpha * x. */
void hd__ref_add(size_t n, float alpha, const float *x, const float *y, double *out);
/* RoPE, rotate-half convention, of x (rows x (heads * d), d even) into out: row r's pairs
 * (x[i], x[i + d/2]) of each head rotated by a = pos[r] * inv_freq[i] (-a when inverse), the
 * angle, its cosine and sine in double. inv_freq: d/2 frequencies in double
 * (hd__ref_rope_inv_freq for theta^(-2i/d)). */
void hd__ref_rope(size_t rows, size_t heads, size_t d, const int *pos, const double *inv_freq,
                  bool inverse, const float *x, double *out);
/* inv_freq[i] = theta^(-2i/d), i < d/2. */
void hd__ref_rope_inv_freq(double theta, size_t d, double *inv_freq);
/* out[r][:] = table[ids[r]][:], table V x cols, out rows x cols. */
void hd__ref_embedding(size_t rows, size_t cols, const int *ids, const float *table, double *out);


/* ---- residual + RMS norm, cross-entropy, AdamW (reference_train.c) ---- */

/* h = x + r; y = h / sqrt(mean_j h^2 + eps) * w. x, r: rows x cols; w: 1 x cols; h and y as x
 * (h may be NULL). */
void hd__ref_add_rms_norm(size_t rows, size_t cols, const float *x, const float *r, const float *w,
                          float eps, double *h, double *y);

/* Its backward from h (the forward's sum as stored): rstd = 1 / sqrt(mean_j h^2 + eps), xhat =
 * h * rstd, g = w * dy; dh = rstd * (g - xhat * mean_j(g * xhat)) + dres (dres NULL: 0); dw (NULL:
 * not computed) = sum over rows of dy * xhat. */
void hd__ref_add_rms_norm_backward(size_t rows, size_t cols, const float *h, const float *w,
                                   const float *dy, const float *dres, float eps, double *dh,
                                   double *dw);

/* Cross-entropy, PyTorch's F.cross_entropy(logits, targets, ignore_index=ignore_index) with
 * reduction 'mean': lse_i = log sum_j exp(logits_ij); losses_i = lse_i - logits_i[t_i], 0 where
 * t_i == ignore_index; *loss = sum_i losses_i / count, count = the rows not ignored (NaN with
 * none, as PyTorch); dlogits_ij = (exp(logits_ij - lse_i) - (j == t_i)) / count, 0 in ignored
 * rows. A row holding NaN or +inf has lse NaN; a row of -inf, lse -inf. Any output pointer may
 * be NULL. */
void hd__ref_cross_entropy(size_t rows, size_t vocab, const float *logits, const int32_t *targets,
                           int32_t ignore_index, double *losses, double *lse, double *dlogits,
                           double *loss);

/* The global gradient norm of torch.nn.utils.clip_grad_norm_: sqrt(sum over the count tensors
 * g[k] (n[k] floats each) of g^2). */
double hd__ref_grad_norm(size_t count, const float *const g[], const size_t n[]);
/* The factor its clip applies to every gradient: min(1, max_norm / (total + 1e-6)). */
double hd__ref_clip_coef(double total, float max_norm);

/* torch.optim.AdamW's hyperparameters, and the step t >= 1 being taken. */
typedef struct hd_ref_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;
} hd_ref_adamw_params;

/* One AdamW step of n elements from the state (p, m, v) before it and the gradient g times
 * coef (1 without clipping): p' = p (1 - lr wd); m' = beta1 m + (1 - beta1) g coef;
 * v' = beta2 v + (1 - beta2) (g coef)^2; p'' = p' - lr / (1 - beta1^t) * m' /
 * (sqrt(v' / (1 - beta2^t)) + eps), into p_out, m_out, v_out. */
void hd__ref_adamw(size_t n, const float *p, const float *g, const float *m, const float *v,
                   const hd_ref_adamw_params *hp, double coef, double *p_out, double *m_out,
                   double *v_out);

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
    size_t window; /* causal only: keys i - window + 1 .. i of the sequence; 0: every earlier */
} hd_ref_attention_shape;

/* out: tokens x heads * head_dim; lse: tokens x heads (may be NULL). */
void hd__ref_attention(const hd_ref_attention_shape *s, const float *q, const float *k,
                       const float *v, double *out, double *lse);
/* dq as q, dk and dv as k. */
void hd__ref_attention_backward(const hd_ref_attention_shape *s, const float *q, const float *k,
                                const float *v, const float *dout, double *dq, double *dk,
                                double *dv);

#endif
