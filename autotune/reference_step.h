/*
 * The float64 reference of the training step's ops: plain loops in double on the float inputs
 * as stored, each the definition of its op and nothing clever, whole outputs written as
 * double. What the tests, the tuner and the benchmark check the backends against.
 */
#ifndef HD_AUTOTUNE_REFERENCE_STEP_H
#define HD_AUTOTUNE_REFERENCE_STEP_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
