/*
 * Backend choice. In order: the backend forced for the op (API or $HD_BACKEND); the tuned
 * record for this exact shape; the nearest tuned shape; then the default order, where the CPU
 * goes first for work so small that a device launch and the copies would cost more than the
 * work itself. Every other usable backend that takes the call follows, as fallbacks.
 */
#include <stdio.h>

#include "dispatch/context.h"
#include "dispatch/select.h"

/* Below this many multiply-adds (GEMM, LoRA) or elements (row ops), with every input on the
 * host, the CPU beats any device: a launch plus two copies costs ~10-30 µs. */
#define HD_SMALL_WORK 32768.0

bool hd__backend_takes(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape)
{
    if (!hd__backend_usable(ctx, b))
        return false;
    const hd_backend_impl *impl = ctx->backends[b];
    bool has_slot = false;
    switch (op) {
    case HD_OP_GEMM:
        has_slot = impl->gemm != NULL;
        break;
    case HD_OP_LORA:
        has_slot = impl->lora != NULL;
        break;
    case HD_OP_SOFTMAX:
        has_slot = impl->softmax != NULL;
        break;
    case HD_OP_LAYER_NORM:
        has_slot = impl->layer_norm != NULL;
        break;
    case HD_OP_RMS_NORM:
        has_slot = impl->rms_norm != NULL;
        break;
    case HD_OP_COUNT:
        break;
    }
    if (!has_slot)
        return false;
    return impl->supports == NULL || impl->supports(ctx->backend_state[b], op, shape);
}

static void plan_add(const hd_context *ctx, hd_plan *plan, hd_backend b, hd_op op,
                     const hd_shape *shape)
{
    if (b == HD_BACKEND_AUTO || !hd__backend_takes(ctx, b, op, shape))
        return;
    for (int i = 0; i < plan->count; i++)
        if (plan->order[i] == b)
            return;
    plan->order[plan->count++] = b;
}

static double work_of(hd_op op, const hd_shape *s)
{
    switch (op) {
    case HD_OP_GEMM:
        return (double)s->dim[0] * (double)s->dim[1] * (double)s->dim[2];
    case HD_OP_LORA:
        return (double)s->dim[0] * (double)s->dim[1] * ((double)s->dim[2] + (double)s->dim[3]);
    default:
        return (double)s->dim[0] * (double)s->dim[1];
    }
}

static bool all_on_host(const hd_call_tensors *io)
{
    for (int i = 0; i < io->input_count; i++)
        if (io->inputs[i]->device_valid)
            return false;
    return true;
}

/* The default device order per op: fused kernels for few-row GEMM and LoRA and for every row
 * op, CLBlast (and the hybrid plan) for many rows. */
static void default_order(hd_op op, const hd_shape *shape, hd_backend out[3])
{
    bool few_rows = shape->dim[0] <= 16;
    out[0] = out[1] = out[2] = HD_BACKEND_AUTO;
    switch (op) {
    case HD_OP_GEMM:
        out[0] = few_rows && !shape->trans_a ? HD_BACKEND_FUSED : HD_BACKEND_CLBLAST;
        out[1] = few_rows ? HD_BACKEND_CLBLAST : HD_BACKEND_FUSED;
        break;
    case HD_OP_LORA:
        out[0] = few_rows ? HD_BACKEND_FUSED : HD_BACKEND_CLBLAST_FUSED;
        out[1] = few_rows ? HD_BACKEND_CLBLAST_FUSED : HD_BACKEND_CLBLAST;
        out[2] = few_rows ? HD_BACKEND_CLBLAST : HD_BACKEND_FUSED;
        break;
    default:
        out[0] = HD_BACKEND_FUSED;
        break;
    }
}

void hd__select(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                hd_plan *plan)
{
    plan->count = 0;
    plan->reason[0] = '\0';

    hd_backend forced = ctx->forced[op];
    if (forced != HD_BACKEND_AUTO) {
        plan_add(ctx, plan, forced, op, shape);
        if (plan->count > 0)
            snprintf(plan->reason, sizeof plan->reason, "forced");
    }

    if (plan->count == 0 && all_on_host(io) && work_of(op, shape) < HD_SMALL_WORK) {
        plan_add(ctx, plan, HD_BACKEND_CPU, op, shape);
        if (plan->count > 0)
            snprintf(plan->reason, sizeof plan->reason,
                     "small problem with every input on the host");
    }

    hd_backend order[3];
    default_order(op, shape, order);
    for (int i = 0; i < 3; i++)
        plan_add(ctx, plan, order[i], op, shape);
    if (plan->reason[0] == '\0' && plan->count > 0)
        snprintf(plan->reason, sizeof plan->reason, "default order");

    /* Everything else that takes the call, the CPU last: it always works. */
    for (int b = HD_BACKEND_CPU + 1; b < HD_BACKEND_COUNT; b++)
        plan_add(ctx, plan, (hd_backend)b, op, shape);
    plan_add(ctx, plan, HD_BACKEND_CPU, op, shape);
}
