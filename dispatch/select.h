/* Choosing the backend of one call: the order in which the dispatcher tries backends. */
#ifndef HD_DISPATCH_SELECT_H
#define HD_DISPATCH_SELECT_H

#include "backends/backend.h"

typedef struct hd_plan {
    hd_backend order[HD_BACKEND_COUNT]; /* usable backends that take the call, best first */
    int count;
    char reason[160]; /* why the first was chosen, for the explain call */
} hd_plan;

/* The tensors one call reads and writes, for migration costs and residency. */
typedef struct hd_call_tensors {
    hd_tensor *inputs[5];
    int input_count;
    hd_tensor *output;
    bool output_read; /* the op reads the output's old contents (GEMM with beta != 0) */
} hd_call_tensors;

void hd__select(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                hd_plan *plan);

/* Whether backend b is usable in ctx and takes (op, shape): it has the slot and its
 * supports() agrees. */
bool hd__backend_takes(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape);

#endif
