/*
 * The CPU versions of the training step's ops (attention, elementwise ops, RoPE, embedding,
 * residual + RMS norm, cross-entropy, AdamW): functions on raw row-major float arrays, threaded
 * with the backend's pool (cpu.h; a NULL pool, or a small call, runs on the caller), with the
 * same bits whatever the thread count (every sum runs in a fixed order). The caller has checked
 * every argument (shapes, aliasing, ids; rows and cols >= 1). One section per op family.
 */
#ifndef HD_BACKENDS_CPU_STEP_H
#define HD_BACKENDS_CPU_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu.h"

/* ---- elementwise ops, RoPE, embedding (elementwise.c, rope.c, embedding.c) ----
 *
 * The elementwise ops treat their arrays as n contiguous floats (a rows x cols tensor has
 * n = rows * cols). Stable for any magnitude; NaN in gives NaN out, and infinite inputs give
 * what PyTorch's formulas give (elementwise.c). */

/* SwiGLU: y = silu(g) * u, silu(g) = g * sigmoid(g). y may be g or u. */
void hd__cpu_swiglu(hd_cpu_pool *pool, size_t n, const float *g, const float *u, float *y);
/* SwiGLU's backward: du = dy * silu(g), dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))).
 * dg may be g or dy; du may be u or dy. */
void hd__cpu_swiglu_backward(hd_cpu_pool *pool, size_t n, const float *g, const float *u,
                             const float *dy, float *dg, float *du);
/* GELU, tanh form (PyTorch's approximate='tanh'): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))). y may be x. */
void hd__cpu_gelu(hd_cpu_pool *pool, size_t n, const float *x, float *y);
/* GELU's backward: dx = dy * gelu'(x). dx may be dy or x. */
void hd__cpu_gelu_backward(hd_cpu_pool *pool, size_t n, const float *x, const float *dy, float *dx);
/* y = y + alpha * x. */
void hd__cpu_add(hd_cpu_pool *pool, size_t n, float alpha, const float *x, float *y);

/* RoPE, rotate-half convention, in place on x (rows x (heads * d), d even): row r, at position
 * pos[r], has each head's pair (x[i], x[i + d/2]) rotated by a = pos[r] * inv_freq[i] (by -a when
 * inverse: the backward pass, applied to the gradient). inv_freq: d/2 pairs (hi, lo), the
 * frequency hi + lo (hd__rope_frequencies, core/sequence.h). Angles, their cosines and sines
 * in double. */
void hd__cpu_rope(hd_cpu_pool *pool, size_t rows, size_t heads, size_t d, const int32_t *pos,
                  const float *inv_freq, bool inverse, float *x);
/* Embedding lookup: out[r][:] = table[ids[r]][:], table V x cols, out rows x cols, every id in
 * [0, V). */
void hd__cpu_embedding(hd_cpu_pool *pool, size_t rows, size_t cols, const int32_t *ids,
                       const float *table, float *out);

/* The op slots of the step's ops (step_ops.c), for the backend's table (backend.c). */
hd_status hd__cpu_swiglu_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_swiglu_backward_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_gelu_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_gelu_backward_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_add_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_rope_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_embedding_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_attention_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_attention_backward_slot(void *state, hd_context *ctx, const hd_op_args *args);

/* ---- residual add + RMS norm, cross-entropy, AdamW (add_rms_norm.c, cross_entropy.c,
 * adamw.c) ---- */

/* h = x + r; y = h / sqrt(mean_j h^2 + eps) * w. x, r, h, y rows x cols; w 1 x cols. h may be
 * x or r; y aliases nothing. Any magnitude (the squares summed in double). */
void hd__cpu_add_rms_norm(hd_cpu_pool *pool, size_t rows, size_t cols, const float *x,
                          const float *r, const float *w, float eps, float *h, float *y);

/* The backward of hd__cpu_add_rms_norm, from its sum h: rstd = 1 / sqrt(mean_j h^2 + eps),
 * xhat = h * rstd, g = w * dy; dh = rstd * (g - xhat * mean_j(g * xhat)) + dres (dres NULL: 0),
 * the gradient of x and of r alike; dw (NULL: not wanted) = sum over rows of dy * xhat, each
 * column's sum in row order. dh may be dy or dres. HD_ERR_OUT_OF_MEMORY (outputs untouched)
 * where the rows' statistics (16 bytes a row) cannot be allocated. */
hd_status hd__cpu_add_rms_norm_backward(hd_cpu_pool *pool, size_t rows, size_t cols, const float *h,
                                        const float *w, const float *dy, const float *dres,
                                        float eps, float *dh, float *dw);

/* Cross-entropy of logits (rows x vocab) against targets (rows int32, each in [0, vocab) or
 * ignore_index): losses[i] = logsumexp(logits_i) - logits_i[t_i], 0 for ignored rows; lse[i]
 * (NULL: not wanted) = logsumexp(logits_i), for every row; dlogits (NULL: not wanted; may be
 * logits, in place) = (softmax(logits_i) - onehot(t_i)) * inv_count, 0 for ignored rows; loss
 * (NULL: not wanted) = sum of losses * inv_count, added in row order. inv_count: 1 / the rows
 * not ignored. Evaluation passes dlogits NULL. -inf logits are legal masks; NaN or +inf in a
 * row makes its loss (and gradient) NaN, as in PyTorch. */
void hd__cpu_cross_entropy(hd_cpu_pool *pool, size_t rows, size_t vocab, const float *logits,
                           const int32_t *targets, int32_t ignore_index, float inv_count,
                           float *losses, float *lse, float *dlogits, float *loss);

/* One tensor of an AdamW step: parameters, gradient, first and second moments, n floats each
 * (n may be 0). */
typedef struct hd_adamw_tensor {
    float *p;
    const float *g;
    float *m, *v;
    size_t n;
} hd_adamw_tensor;

/* One AdamW step over count tensors, in place on p, m and v, with the factors of
 * hd__adamw_factors (core/args.h):
 * p = p * decay; m = beta1 * m + (1 - beta1) * g'; v = beta2 * v + (1 - beta2) * g'^2;
 * p = p - step_size * m / (sqrt(v) * inv_bc2_sqrt + eps), with g' = g * coef. total NULL: coef
 * = 1; else gradient clipping as torch.nn.utils.clip_grad_norm_ before the step: *total =
 * sqrt(sum of g^2 over all the tensors) (in double, in a fixed order), coef = min(1, max_norm /
 * (total + 1e-6)) (NaN where total is NaN); the gradients are not modified. max_norm = INFINITY
 * only measures (coef = 1, even where total is infinite). HD_ERR_OUT_OF_MEMORY (nothing written)
 * where the norm's partial sums cannot be allocated. */
hd_status hd__cpu_adamw(hd_cpu_pool *pool, const hd_adamw_tensor *t, size_t count,
                        const hd_adamw_factors *f, float max_norm, float *total);

/* ---- attention (attention.c) ----
 *
 * Flash-style scaled dot-product attention (FlashAttention-2's algorithm: one pass over tiles
 * of keys with an online softmax; no tokens x tokens matrix), grouped-query heads, packed
 * sequences. Layout: q and out tokens x (heads * head_dim), k and v tokens x (kv_heads *
 * head_dim), row-major; head h of q is columns h * head_dim ..; query head h reads kv head
 * h / (heads / kv_heads). lse: tokens x heads floats, lse[i * heads + h] = the natural log of
 * sum_j exp(scale * q_i . k_j) over row i's keys (what the backward needs).
 *
 * Which keys a row attends to is given by two tables the host builds from the sequence
 * lengths (hd__sequence_attention_ranges, core/sequence.h): kv_range[2i], kv_range[2i + 1] = [begin, end) of the keys of
 * query row i; q_range[2j], q_range[2j + 1] = [begin, end) of the query rows that attend to key
 * j. Both begin and end are non-decreasing in the row (the OpenCL kernels rely on it; these
 * functions do not), every range is non-empty. The same tables serve the fused kernels
 * (attention.cl). */
typedef struct hd_cpu_attention_shape {
    size_t tokens, heads, kv_heads, head_dim; /* kv_heads divides heads; head_dim >= 1 */
    float scale;                              /* applied to q . k (1 / sqrt(head_dim) usually) */
} hd_cpu_attention_shape;

/* out (as q) and lse (tokens x heads) from q, k, v. out aliases no input. Returns HD_OK, or
 * HD_ERR_OUT_OF_MEMORY (its scratch) with nothing written. */
hd_status hd__cpu_attention(hd_cpu_pool *pool, const hd_cpu_attention_shape *s, const float *q,
                            const float *k, const float *v, const int32_t *kv_range, float *out,
                            float *lse);

/* The backward: dq (as q), dk and dv (as k), each overwritten, from the forward's inputs, its
 * out and lse, and dout (as q): delta_i = dout_i . out_i, p_ij = exp(scale q_i . k_j - lse_i),
 * ds_ij = p_ij (dout_i . v_j - delta_i), dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i
 * ds_ij q_i, dv_j = sum_i p_ij dout_i (dk, dv summed over the query heads of their kv head).
 * The outputs alias no input. Returns HD_OK, or HD_ERR_OUT_OF_MEMORY with nothing written. */
hd_status hd__cpu_attention_backward(hd_cpu_pool *pool, const hd_cpu_attention_shape *s,
                                     const float *q, const float *k, const float *v,
                                     const float *out, const float *lse, const float *dout,
                                     const int32_t *kv_range, const int32_t *q_range, float *dq, float *dk,
                                     float *dv);

/* The slots of these ops (train_ops.c, linear_cross_entropy.c), for the backend's table
 * (backend.c), and AdamW's, which is not an op of the table (hd_backend_impl.adamw). */
hd_status hd__cpu_add_rms_norm_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_add_rms_norm_backward_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_cross_entropy_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_linear_cross_entropy_slot(void *state, hd_context *ctx, const hd_op_args *args);
hd_status hd__cpu_adamw_slot(void *state, hd_context *ctx, const hd_adamw_args *args);
/* The cross-entropy's inv_count: 1 / counted, infinite for none (a NaN mean, zero gradients). */
float hd__cpu_inv_count(size_t counted);

#endif
