/* Argument checks of the operations, one per row of the op table (its prepare member). Each
 * turns the caller's tensors and scalars into the backend argument struct and the call's
 * shape, or returns an error with a message naming the culprit; nothing is touched before
 * every check has passed. The tensors arrive checked for NULL, context and aliasing. */
#ifndef HD_DISPATCH_CHECK_H
#define HD_DISPATCH_CHECK_H

#include "dispatch/tools.h"

/* The checks every op shares, from its row of the table: each tensor non-NULL (unless
 * optional) and of ctx, no output that is also an input (but an in-place output may be the
 * first input). fn names the public function in the messages (hd__op_fn). */
hd_status hd__check_tensors(hd_context *ctx, hd_op op, const char *fn, const hd_tensor *const t[]);

/* Checks the public arguments of op (t in the order of its tensors[], already non-NULL where
 * not optional and of ctx) and fills call->args, call->shape and call->kind. */
typedef hd_status hd_prepare_fn(hd_context *ctx, const hd_tensor *const t[],
                                const hd_op_params *p, hd_call *call);
/* Each op's check, by hd_op: the one table of them (dispatch/check.c). */
extern hd_prepare_fn *const hd__op_prepare[HD_OP_COUNT];

hd_status hd__prepare_gemm(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call);
/* batch = 0 passes (a no-op) once the tensors are valid; args gets per-matrix m, n, k. */
hd_status hd__prepare_gemm_batched(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call);
hd_status hd__prepare_lora(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call);
/* Softmax (no parameters, no eps) and the norms (parameters one row as wide as x, eps). */
hd_status hd__prepare_softmax(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                              hd_call *call);
hd_status hd__prepare_norm(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call);
/* The row ops' backward: dy and dx of x's shape, the weight one row as wide, eps (norms);
 * rows = 0 with a weight gradient wanted zeroes it (scale-only with beta 0). */
hd_status hd__prepare_row_backward(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call);
/* LoRA backward: the forward's shapes, dy tokens x out, dx (optional) tokens x in, dA in x rank,
 * dB rank x out; a sum over nothing zeroes the gradients unless they accumulate. */
hd_status hd__prepare_lora_backward(hd_context *ctx, const hd_tensor *const t[],
                                    const hd_op_params *p, hd_call *call);

/* The training step's ops: the tensors against their op table rows, and each op's scalars
 * (eps; RoPE's head_dim, theta, sequences and positions; attention's heads, head_dim, scale
 * and sequences; the targets and ids, each in range). Cross-entropy over no row or no logit
 * is a scale-only call that writes the loss as NaN. */
hd_status hd__prepare_elementwise(hd_context *ctx, const hd_tensor *const t[],
                                  const hd_op_params *p, hd_call *call);
hd_status hd__prepare_add_rms_norm(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call);
hd_status hd__prepare_rope(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call);
hd_status hd__prepare_attention(hd_context *ctx, const hd_tensor *const t[],
                                const hd_op_params *p, hd_call *call);
hd_status hd__prepare_cross_entropy(hd_context *ctx, const hd_tensor *const t[],
                                    const hd_op_params *p, hd_call *call);
hd_status hd__prepare_embedding(hd_context *ctx, const hd_tensor *const t[],
                                const hd_op_params *p, hd_call *call);

#endif
