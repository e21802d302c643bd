/*
 * cuBLASLt, NVIDIA's GEMM library, as the CUDA runtime's vendor GEMM (hd__rt_vendor_gemm):
 * loaded with dlopen, as libcuda is (nothing of CUDA is needed to build), its products queued
 * on the runtime's one stream, so that they sit in order between the fused kernels.
 *
 * cuBLASLt is column-major and the library's tensors are row-major: a row-major C = A * B is
 * the column-major C^T = B^T * A^T, so the call swaps the operands and reads each stored matrix
 * as its own transpose, moving no data. Each shape's descriptors and the
 * algorithm cuBLASLt's heuristic picks for it are kept, so that a repeated shape costs one
 * cublasLtMatmul call.
 */
#ifndef HD_BACKENDS_CUDA_BLAS_H
#define HD_BACKENDS_CUDA_BLAS_H

#include "backends/runtime/runtime.h"

typedef struct hd_cublaslt hd_cublaslt;

/* Loads cuBLASLt ($HD_CUBLASLT_LIBRARY, else libcublasLt.so.13, then .so.12) and creates its
 * handle in the calling thread's current CUDA context. HD_ERR_BACKEND_UNAVAILABLE with the
 * reason in the context's message where it cannot. */
hd_status hd__cublaslt_open(hd_context *ctx, hd_cublaslt **out);
void hd__cublaslt_close(hd_cublaslt *lt); /* NULL is a no-op */

/* Queues g on stream (a CUstream), with workspace (workspace_bytes of device memory, which the
 * caller keeps until the product has run) for the algorithms that want one. HD_ERR_UNSUPPORTED
 * for a precision cuBLASLt is not asked to run (fp32x3) or a shape its heuristic finds no
 * algorithm for; HD_ERR_DEVICE_OUT_OF_MEMORY or HD_ERR_DEVICE where a call of cuBLASLt fails.
 * Nothing is queued on failure. */
hd_status hd__cublaslt_gemm(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g, void *stream,
                            hd_devmem workspace, size_t workspace_bytes);
/* What hd__cublaslt_gemm would refuse for g with a workspace of workspace_bytes, its plan made
 * and kept for the call to come; queues nothing. */
hd_status hd__cublaslt_prepare(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g,
                               size_t workspace_bytes);

#endif
