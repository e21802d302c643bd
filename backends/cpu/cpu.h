/* The CPU backend: OpenBLAS for GEMM (plain C without it) and C kernels for the rest. */
#ifndef HD_BACKENDS_CPU_CPU_H
#define HD_BACKENDS_CPU_CPU_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"

/* Row-major SGEMM with leading dimensions: C = alpha*op(A)*op(B) + beta*C. beta = 0 ignores
 * C's contents, NaN included. m, n, k >= 1. */
void hd__cpu_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                   size_t ldc);

hd_status hd__cpu_gemm(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_lora(void *state, hd_context *ctx, const hd_lora_args *args);
hd_status hd__cpu_softmax(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_layer_norm(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_rms_norm(void *state, hd_context *ctx, const hd_row_args *args);

#endif
