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

/* The CPU backend's variant (threads.c): THREADS=1 runs an op's BLAS calls on the calling
 * thread. */
typedef struct hd_cpu_params {
    bool one_thread;
} hd_cpu_params;

/* Parses args->variant (NULL or "" for the defaults); HD_ERR_INVALID_ARGUMENT for anything
 * else than "THREADS=1". */
hd_status hd__cpu_params_parse(hd_context *ctx, const char *variant, hd_cpu_params *p);
/* The backend's variants slot: THREADS=1 for small GEMMs and LoRA where OpenBLAS threads. */
size_t hd__cpu_variants(void *state, hd_op op, const hd_shape *shape, const char **out,
                        size_t max);

/* OpenBLAS's thread count lowered to one between begin and end when p asks for it, and put
 * back at the end; nothing otherwise. Every begin needs its end. */
typedef struct hd_cpu_threads {
    int saved;
    bool lowered;
} hd_cpu_threads;
void hd__cpu_threads_begin(const hd_cpu_params *p, hd_cpu_threads *t);
void hd__cpu_threads_end(hd_cpu_threads *t);

hd_status hd__cpu_gemm(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_lora(void *state, hd_context *ctx, const hd_lora_args *args);
hd_status hd__cpu_softmax(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_layer_norm(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_rms_norm(void *state, hd_context *ctx, const hd_row_args *args);

#endif
