/* Argument checks of the public operations. Each turns the caller's arguments into the
 * backend argument struct, or returns an error with a message naming the culprit; nothing is
 * touched before every check has passed. */
#ifndef HD_DISPATCH_CHECK_H
#define HD_DISPATCH_CHECK_H

#include "backends/backend.h"

hd_status hd__check_gemm(hd_context *ctx, bool trans_a, bool trans_b, float alpha,
                         const hd_tensor *a, const hd_tensor *b, float beta, hd_tensor *c,
                         hd_gemm_args *args);
/* batch = 0 passes (a no-op) once the tensors are valid; args gets per-matrix m, n, k. */
hd_status hd__check_gemm_batched(hd_context *ctx, size_t batch, bool trans_a, bool trans_b,
                                 float alpha, const hd_tensor *a, const hd_tensor *b, float beta,
                                 hd_tensor *c, hd_gemm_args *args);
hd_status hd__check_lora(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                         const hd_tensor *a, const hd_tensor *b, float scale, hd_tensor *y,
                         hd_lora_args *args);
/* gamma and beta may be NULL where the op has none; fn names the op in messages. */
hd_status hd__check_rows(hd_context *ctx, const char *fn, const hd_tensor *x,
                         const hd_tensor *gamma, const hd_tensor *beta, bool has_eps, float eps,
                         hd_tensor *y, hd_row_args *args);

#endif
