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

/* The row kernels, compiled three times on x86-64 where the toolchain picks a function's
 * version when the program loads (GCC and clang on ELF, through ifunc): for AVX-512, AVX2 and
 * the baseline (SSE2). The loops are written with explicit lanes and built without FMA
 * contraction (-ffp-contract=off, meson.build), so every version gives the same bits; the wider
 * ones run the vector loops two and four times as wide. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
#define HD_CPU_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HD_CPU_VECTOR_CLONES
#endif

/* The row kernels' thread pool (pool.c): the caller and threads-1 workers that sleep while
 * idle. A NULL pool, or one of one thread, runs everything on the caller. */
typedef struct hd_cpu_pool hd_cpu_pool;
typedef void (*hd_cpu_pool_fn)(void *arg, size_t begin, size_t end);
hd_status hd__cpu_pool_create(size_t threads, hd_cpu_pool **out);
void hd__cpu_pool_destroy(hd_cpu_pool *pool);
size_t hd__cpu_pool_threads(const hd_cpu_pool *pool);
/* Calls fn(arg, begin, end) on contiguous parts of [0, n), one per thread, and waits. */
void hd__cpu_pool_run(hd_cpu_pool *pool, size_t n, hd_cpu_pool_fn fn, void *arg);

/* The threads of the CPU backend (threads.c): requested (hd_context_options.threads or
 * $HD_THREADS; 0 for the default) gives the count of the context's pool and OpenBLAS calls. */
size_t hd__cpu_threads_resolve(size_t requested);
/* Around every OpenBLAS call of a context: sets OpenBLAS's process-wide count to the context's
 * where it differs, and keeps other threads from changing it until hd__cpu_blas_end(). Never
 * nested: a setter waiting on another thread would block the inner begin for good. */
void hd__cpu_blas_begin(size_t threads);
void hd__cpu_blas_end(void);

/* The bytes of blocks scratch matrices of rows x cols floats (scratch.c); false where that
 * overflows size_t. Each tensor's size is checked when it is created, but a scratch sized by
 * the dimensions of two tensors (LoRA's tokens x rank) is not, so its slot checks it here. */
bool hd__cpu_scratch_bytes(size_t blocks, size_t rows, size_t cols, size_t *bytes);

/* p[i] *= scale over n floats: LoRA's scale applied to its T x r temporaries before the
 * products that read them, not as those products' alpha. SGEMM with alpha = 0 does not read its
 * operands (BLAS), so NaN or inf in A or B would vanish on the CPU alone; multiplied, they
 * reach the gradients and y as on every device backend and in PyTorch. */
void hd__cpu_scale_low_rank(float *p, size_t n, float scale);

/* The backend's state: one per context. */
typedef struct hd_cpu_state {
    hd_cpu_pool *pool;
    size_t threads; /* of the pool and of each OpenBLAS call */
} hd_cpu_state;

hd_status hd__cpu_gemm(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__cpu_lora(void *state, hd_context *ctx, const hd_lora_args *args);
hd_status hd__cpu_softmax(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_layer_norm(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_rms_norm(void *state, hd_context *ctx, const hd_row_args *args);
hd_status hd__cpu_softmax_backward(void *state, hd_context *ctx, const hd_row_backward_args *args);
hd_status hd__cpu_layer_norm_backward(void *state, hd_context *ctx,
                                      const hd_row_backward_args *args);
hd_status hd__cpu_rms_norm_backward(void *state, hd_context *ctx, const hd_row_backward_args *args);
hd_status hd__cpu_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *args);

#endif
