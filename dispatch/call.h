/* One checked call of an operation, and running it on one backend. The dispatcher builds a
 * call from the public arguments and tries backends in its plan's order; the autotuner runs a
 * call on each candidate the same way, so what it times is what the dispatcher runs. */
#ifndef HD_DISPATCH_CALL_H
#define HD_DISPATCH_CALL_H

#include "backends/backend.h"
#include "dispatch/select.h"

/* The argument struct of each op's backend slot. */
typedef union hd_op_args {
    hd_gemm_args gemm; /* GEMM and batched GEMM */
    hd_lora_args lora;
    hd_row_args row;
} hd_op_args;

typedef struct hd_call {
    hd_op op;
    hd_shape shape;
    hd_call_tensors io;
    hd_op_args args;
} hd_call;

/* Runs call on backend b (present in ctx, taking the call) with the kernel parameters of
 * variant (NULL: the backend's defaults): makes the inputs valid at the backend's place, runs
 * its slot, then records the output as written there and b as the last backend. No fallback:
 * a failure is returned with the output untouched. */
hd_status hd__call_run_on(hd_context *ctx, hd_backend b, hd_call *call, const char *variant);

#endif
