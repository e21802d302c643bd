/*
 * The CPU versions of the training step's ops (attention, elementwise ops, RoPE, embedding,
 * residual + RMS norm, cross-entropy, AdamW): functions on raw float arrays, threaded with the
 * backend's pool (cpu.h; a NULL pool runs on the caller), with the same results whatever the
 * number of threads. The caller has checked every argument. One section per op family.
 */
#ifndef HD_BACKENDS_CPU_STEP_H
#define HD_BACKENDS_CPU_STEP_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/cpu/cpu.h"

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
 * lengths (hd__attention_ranges): kv_range[2i], kv_range[2i + 1] = [begin, end) of the keys of
 * query row i; q_range[2j], q_range[2j + 1] = [begin, end) of the query rows that attend to key
 * j. Both begin and end are non-decreasing in the row (the OpenCL kernels rely on it; these
 * functions do not), every range is non-empty. The same tables serve the fused kernels
 * (attention.cl). */
typedef struct hd_cpu_attention_shape {
    size_t tokens, heads, kv_heads, head_dim; /* kv_heads divides heads; head_dim >= 1 */
    float scale;                              /* applied to q . k (1 / sqrt(head_dim) usually) */
} hd_cpu_attention_shape;

/* The range tables above for nseq sequences of seq_lens[s] >= 1 rows each, one after
 * another; row i attends to the keys of its own sequence, those j <= i when causal.
 * kv_range and q_range hold 2 * (sum of the lengths) ints each. */
void hd__attention_ranges(const int *seq_lens, size_t nseq, bool causal, int *kv_range,
                          int *q_range);

/* out (as q) and lse (tokens x heads) from q, k, v. out aliases no input. Returns HD_OK, or
 * HD_ERR_OUT_OF_MEMORY (its scratch) with nothing written. */
hd_status hd__cpu_attention(hd_cpu_pool *pool, const hd_cpu_attention_shape *s, const float *q,
                            const float *k, const float *v, const int *kv_range, float *out,
                            float *lse);

/* The backward: dq (as q), dk and dv (as k), each overwritten, from the forward's inputs, its
 * out and lse, and dout (as q): delta_i = dout_i . out_i, p_ij = exp(scale q_i . k_j - lse_i),
 * ds_ij = p_ij (dout_i . v_j - delta_i), dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i
 * ds_ij q_i, dv_j = sum_i p_ij dout_i (dk, dv summed over the query heads of their kv head).
 * The outputs alias no input. Returns HD_OK, or HD_ERR_OUT_OF_MEMORY with nothing written. */
hd_status hd__cpu_attention_backward(hd_cpu_pool *pool, const hd_cpu_attention_shape *s,
                                     const float *q, const float *k, const float *v,
                                     const float *out, const float *lse, const float *dout,
                                     const int *kv_range, const int *q_range, float *dq, float *dk,
                                     float *dv);

#endif
