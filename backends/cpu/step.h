/*
 * The CPU backend's kernels for the ops of a decoder's training step, on raw float arrays:
 * plain functions, threaded over the backend's pool (pool.c) when the call is large enough to
 * pay for waking it (a NULL pool runs everything on the caller). Results do not depend on the
 * number of threads. The host checks every argument before calling them.
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

#endif
