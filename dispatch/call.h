/* One checked call of an operation, and running it on one backend or plan. The public
 * functions build a call through the op table and the scheduler tries backends in its plan's
 * order; the tools run a call on each candidate the same way, so what they time is what the
 * dispatcher runs. */
#ifndef HD_DISPATCH_CALL_H
#define HD_DISPATCH_CALL_H

#include "backends/backend.h"
#include "dispatch/op.h"

/* The tensors one call reads and writes, for migration costs and residency. */
typedef struct hd_call_tensors {
    const hd_tensor *inputs[HD_OP_TENSOR_MAX];
    int input_count;
    const hd_tensor *outputs[HD_OP_TENSOR_MAX];
    int output_count;
    bool output_read; /* the op reads its outputs' old contents (GEMM with beta != 0) */
} hd_call_tensors;

typedef struct hd_call {
    hd_op op;
    hd_call_kind kind;
    hd_shape shape;
    hd_call_tensors io;
    hd_op_args args;
    float beta; /* HD_CALL_SCALE_ONLY: the output becomes beta times itself */
} hd_call;

/* Checks a call of op with tensors t (in the op table's order) and scalars p, and builds it:
 * the table's checks of every tensor (NULL, context, aliasing), then the op's own. Touches
 * nothing. */
hd_status hd__call_prepare(hd_context *ctx, hd_op op, const hd_tensor *const t[],
                           const hd_op_params *p, hd_call *call);

/* hd__call_prepare(), then the scheduler: what every public operation does. */
hd_status hd__call(hd_context *ctx, hd_op op, const hd_tensor *const t[], const hd_op_params *p);

/* Runs call on backend or plan b (usable in ctx, taking the call) with the kernel parameters
 * of variant (NULL: the defaults): makes the inputs valid at b's place, runs its slot (a
 * plan: each stage's), then records the outputs as written there and b as the last backend.
 * No fallback: a failure is returned with the outputs untouched. */
hd_status hd__call_run_on(hd_context *ctx, hd_backend b, hd_call *call, const char *variant);

#endif
