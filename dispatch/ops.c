/* The public operations: each builds its tensors and scalars in the op table's order; then
 * one path checks them, handles empty shapes, chooses, migrates, runs and falls back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/check.h"
#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/fault.h"
#include "dispatch/memo.h"
#include "dispatch/profile.h"
#include "dispatch/select.h"
#include "dispatch/tensor.h"
#include "dispatch/tools.h"
#include "dispatch/tuning.h"

static hd_status place_tensors(const hd_call *call, hd_place place)
{
    hd_status s;
    for (int i = 0; i < call->io.input_count; i++)
        if ((s = hd__tensor_to_place(call->io.inputs[i], place)) != HD_OK)
            return s;
    for (int i = 0; i < call->io.output_count; i++) {
        const hd_tensor *t = call->io.outputs[i];
        s = call->io.output_read ? hd__tensor_to_place(t, place) : hd__tensor_reserve(t, place);
        if (s != HD_OK)
            return s;
    }
    return HD_OK;
}

/* The tuned kernel parameters of the backend about to run; NULL for its defaults. */
static void set_variant(hd_call *call, const char *variant)
{
    switch (hd__op(call->op)->args) {
    case HD_ARGS_GEMM:
        call->args.gemm.variant = variant;
        break;
    case HD_ARGS_LORA:
        call->args.lora.variant = variant;
        break;
    case HD_ARGS_ROW:
        call->args.row.variant = variant;
        break;
    case HD_ARGS_ROW_BACKWARD:
        call->args.row_backward.variant = variant;
        break;
    case HD_ARGS_LORA_BACKWARD:
        call->args.lora_backward.variant = variant;
        break;
    case HD_ARGS_STEP:
        call->args.step.variant = variant;
        break;
    }
}

/* A plan of two backends: the product backend's GEMM leaves the op's leading product in the
 * output, then the epilogue backend finishes it, in queue order at one place. Both stages
 * accepted the shape (hd__backend_takes), and the epilogue its parameters, before the product
 * writes anything: a refusal leaves the output as the caller wrote it. */
static hd_status run_composite(hd_context *ctx, hd_backend b, const hd_call *call,
                               const char *variant)
{
    const hd_composite *plan = ctx->composite[b];
    hd_status s = variant != NULL
                      ? hd__backend_check_variant(ctx, b, call->op, &call->shape, variant)
                      : HD_OK;
    if (s != HD_OK)
        return s;
    hd_op_args product;
    hd_shape shape;
    hd__op(call->op)->product(&call->shape, &call->args, &shape, &product.gemm);
    s = ctx->backends[plan->product]->run[HD_OP_GEMM](ctx->backend_state[plan->product], ctx,
                                                      &product);
    if (s == HD_OK)
        s = ctx->backends[plan->epilogue]->epilogue[call->op](ctx->backend_state[plan->epilogue],
                                                              ctx, &call->args);
    return s;
}

static hd_status run_slot(hd_context *ctx, hd_backend b, const hd_call *call, const char *variant)
{
    if (ctx->composite[b] != NULL)
        return run_composite(ctx, b, call, variant);
    return ctx->backends[b]->run[call->op](ctx->backend_state[b], ctx, &call->args);
}

hd_status hd__call_run_slot(hd_context *ctx, hd_backend b, const hd_call *call)
{
    return run_slot(ctx, b, call, NULL);
}

hd_status hd__call_run_on(hd_context *ctx, hd_backend b, hd_call *call, const char *variant)
{
    hd_place place = hd__backend_place(ctx, b);
    set_variant(call, variant);
    if (hd__fault(ctx, b, "migrate"))
        return HD_ERR_DEVICE;
    hd_status s = place_tensors(call, place);
    if (s == HD_OK && hd__fault(ctx, b, "launch"))
        s = HD_ERR_DEVICE;
    ctx->report.outputs_changed = false;
    if (s == HD_OK)
        s = run_slot(ctx, b, call, variant);
    /* written there; after a failure that changed them too: what that place holds is latest */
    if (s == HD_OK || ctx->report.outputs_changed)
        for (int i = 0; i < call->io.output_count; i++)
            hd__tensor_written(call->io.outputs[i], place);
    if (s == HD_OK)
        ctx->last_backend = b;
    return s;
}

/* Whether a call that wrote part of its outputs and failed can be run again from the start:
 * not where it reads what it writes, its outputs' old contents (accumulating, beta != 0) or an
 * input that is also an output (in place). */
static bool rerunnable(const hd_call *call)
{
    if (call->io.output_read)
        return false;
    for (int o = 0; o < call->io.output_count; o++)
        for (int i = 0; i < call->io.input_count; i++)
            if (call->io.outputs[o] == call->io.inputs[i])
                return false;
    return true;
}

static hd_status dispatch_call(hd_context *ctx, hd_call *call)
{
    hd_plan plan;
    hd__select_memo(ctx, call->op, &call->shape, &call->io, &plan);
    if (plan.count == 0)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "no backend of this context takes %s",
                         hd_op_name(call->op));

    char failures[HD_ERROR_CAPACITY / 2];
    failures[0] = '\0'; /* not "= \"\"", which would clear all 2 KiB on every call */
    /* Where every backend fails, the call's status is the first backend's (in plan order) that
     * failed rather than declined (HD_ERR_UNSUPPORTED), whichever ran last. */
    hd_status s = HD_ERR_UNSUPPORTED, first = HD_ERR_UNSUPPORTED;
    double share[HD_PLAN_READ_MAX]; /* of the regret, by where the tensors are before the call */
    hd__plan_regret_shares(&plan, &call->io, share);
    for (int i = 0; i < plan.count; i++) {
        hd_backend b = plan.order[i];
        s = hd__call_run_on(ctx, b, call, plan.variant[i]);
        if (s == HD_OK && i == 0)
            hd__plan_account(&plan, &call->io, share);
        if (s == HD_OK) {
            if (failures[0] != '\0') /* what went wrong is a note: the call succeeded */
                hd__note(ctx, "%s ran on %s after: %s", hd_op_name(call->op), hd_backend_name(b),
                         failures);
            hd__error_clear(ctx);
            return HD_OK;
        }
        if (first == HD_ERR_UNSUPPORTED)
            first = s;
        /* The checks passed before any backend ran, so whatever failed is the backend, its
         * device or the tuned parameters it was given: the next backend may still succeed.
         * A record whose parameters failed is not used again in this context. */
        if (plan.variant[i] != NULL)
            hd__tune_disable(ctx, call->op, &call->shape);
        if (s == HD_ERR_DEVICE) /* out of memory or a failed build may be this shape's alone */
            hd__backend_mark_unhealthy(ctx, b);
        if (ctx->report.outputs_changed && !rerunnable(call)) {
            char cause[640]; /* the message is rewritten in place: its cause copied first */
            snprintf(cause, sizeof cause, "%.600s", ctx->report.last_error);
            return hd__error(ctx, s,
                             "%s failed on %s after it had begun writing the outputs, which are "
                             "undefined now (no other backend ran): %s",
                             hd_op_name(call->op), hd_backend_name(b), cause);
        }
        size_t used = strlen(failures);
        const char *v = plan.variant[i];
        snprintf(failures + used, sizeof failures - used, "%s[%s%s%.200s%s] %.600s",
                 used ? "; " : "", hd_backend_name(b), v ? " \"" : "", v ? v : "", v ? "\"" : "",
                 ctx->report.last_error);
    }
    return hd__error(ctx, first, "every backend failed for %s: %s", hd_op_name(call->op), failures);
}

/* Output = beta*output at place, by the first usable backend there (in the registry's order)
 * whose scale hook takes it: HD_OK; else the last failure's status with its message in
 * last_failure (each failure also a note), or HD_ERR_UNSUPPORTED where no backend there has
 * the hook. */
static hd_status scale_at(hd_context *ctx, const hd_tensor *c, float beta, hd_place place,
                          char *last_failure, size_t size)
{
    size_t n;
    const hd_backend *order = hd__registry_order(&n);
    hd_status failed = HD_ERR_UNSUPPORTED;
    for (size_t i = 0; i < n; i++) {
        hd_backend b = order[i];
        const hd_backend_impl *impl = ctx->backends[b];
        if (impl == NULL || impl->scale == NULL || !hd__backend_usable(ctx, b) ||
            impl->place != place)
            continue;
        hd_status s = beta == 0.0f ? hd__tensor_reserve(c, place) : hd__tensor_to_place(c, place);
        if (s == HD_OK)
            s = hd__fault(ctx, b, "launch") ? HD_ERR_DEVICE
                                            : impl->scale(ctx->backend_state[b], ctx, c, beta);
        if (s == HD_OK) {
            hd__tensor_written(c, place);
            ctx->last_backend = b;
            return HD_OK;
        }
        /* as for a call: whatever failed is the backend or its device; the host remains */
        snprintf(last_failure, size, "%s: %.600s", hd_backend_name(b), ctx->report.last_error);
        hd__note(ctx, "scaling on %s", last_failure);
        hd__error_clear(ctx);
        failed = s;
    }
    return failed;
}

/* Output = beta*output: GEMM with k = 0 or alpha = 0, where BLAS ignores A and B, and LoRA
 * with in = 0. Done where the output is valid, so that a device-resident C is neither fetched
 * nor waited for, else at the other place (the host, or the device where no backend on the
 * host is usable). */
static hd_status scale_only(hd_context *ctx, const hd_tensor *c, float beta)
{
    hd_place here = c->state->device_valid ? HD_PLACE_DEVICE : HD_PLACE_HOST;
    hd_place other = here == HD_PLACE_HOST ? HD_PLACE_DEVICE : HD_PLACE_HOST;
    char last_failure[700] = "";
    hd_status s = scale_at(ctx, c, beta, here, last_failure, sizeof last_failure);
    if (s == HD_OK)
        return HD_OK;
    hd_status there = scale_at(ctx, c, beta, other, last_failure, sizeof last_failure);
    if (there == HD_OK)
        return HD_OK;
    s = there != HD_ERR_UNSUPPORTED ? there : s;
    if (s == HD_ERR_UNSUPPORTED) /* the CPU's hook always is: only a context without it */
        return hd__error(ctx, s, "no backend of this context scales the output");
    return hd__error(ctx, s, "scaling the output failed on %s", last_failure);
}

/* LoRA with in = 0: x*W and x*A are sums of nothing, so y = scale * (0 * B), zero except
 * wherever scale or a column of B is not finite, which gives NaN there, as in PyTorch. A GEMM of
 * a tokens x rank block of scale * 0 by B computes exactly that, on whichever backend runs the
 * GEMM. (y is the caller's non-const tensor: hd_lora_forward_ex takes it so.) */
static hd_status lora_without_inputs(hd_context *ctx, const hd_lora_args *l)
{
    if (l->rank > SIZE_MAX / sizeof(float) / l->tokens)
        return hd__error(ctx, HD_ERR_SIZE_OVERFLOW,
                         "hd_lora_forward: x*A of %zu x %zu floats does not fit in memory",
                         l->tokens, l->rank);
    size_t count = l->tokens * l->rank;
    float *products = malloc(count * sizeof *products);
    if (products == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "hd_lora_forward: %zu floats for x*A", count);
    for (size_t i = 0; i < count; i++)
        products[i] = l->scale * 0.0f;
    hd_tensor *u;
    hd_status s = hd_tensor_create(ctx, l->tokens, l->rank, &u);
    if (s == HD_OK)
        s = hd_tensor_write(u, products);
    free(products);
    if (s == HD_OK)
        s = hd_gemm(ctx, false, l->trans_b, 1.0f, u, l->b, 0.0f, (hd_tensor *)l->y);
    hd_tensor_destroy(u);
    return s;
}

hd_status hd__call_prepare(hd_context *ctx, hd_op op, const hd_tensor *const t[],
                           const hd_op_params *p, hd_call *call)
{
    memset(call, 0, sizeof *call);
    call->op = op;
    hd_status s = hd__check_tensors(ctx, op, hd__op_fn(op, p), t);
    if (s == HD_OK)
        s = hd__op_prepare[op](ctx, t, p, call);
    call->shape.precision = ctx->gemm_precision;
    return s;
}

hd_status hd__call(hd_context *ctx, hd_op op, const hd_tensor *const t[], const hd_op_params *p)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    hd_call call;
    hd_status s = hd__call_prepare(ctx, op, t, p, &call);
    if (s != HD_OK)
        return s;
    switch (call.kind) {
    case HD_CALL_NOTHING:
        return HD_OK;
    case HD_CALL_SCALE_ONLY: /* each output that holds anything (a backward's, several) */
        if (op == HD_OP_LORA && call.args.lora.rank > 0)
            return lora_without_inputs(ctx, &call.args.lora);
        for (int i = 0; i < call.io.output_count; i++)
            if (hd__tensor_count(call.io.outputs[i]) > 0 &&
                (s = scale_only(ctx, call.io.outputs[i],
                                i > 0 && call.zero_after_first ? 0.0f : call.beta)) != HD_OK)
                return s;
        return HD_OK;
    case HD_CALL_RUN:
        break;
    }
    double begin = hd__profile_begin(ctx);
    s = dispatch_call(ctx, &call);
    hd__profile_end(ctx, (int)op, &call.shape, begin, s);
    return s;
}

hd_status hd_gemm(hd_context *ctx, bool trans_a, bool trans_b, float alpha, const hd_tensor *a,
                  const hd_tensor *b, float beta, hd_tensor *c)
{
    const hd_tensor *t[] = {a, b, c};
    hd_op_params p = {.trans_a = trans_a, .trans_b = trans_b, .alpha = alpha, .beta = beta};
    return hd__call(ctx, HD_OP_GEMM, t, &p);
}

hd_status hd_gemm_batched(hd_context *ctx, size_t batch, bool trans_a, bool trans_b, float alpha,
                          const hd_tensor *a, const hd_tensor *b, float beta, hd_tensor *c)
{
    const hd_tensor *t[] = {a, b, c};
    hd_op_params p = {
        .trans_a = trans_a, .trans_b = trans_b, .alpha = alpha, .beta = beta, .batch = batch};
    return hd__call(ctx, HD_OP_GEMM_BATCHED, t, &p);
}

hd_status hd_lora_forward(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                          const hd_tensor *a, const hd_tensor *b, float scale, hd_tensor *y)
{
    return hd_lora_forward_ex(ctx, x, w, a, b, scale, HD_LORA_LAYOUT_DEFAULT, y);
}

hd_status hd_lora_forward_ex(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                             const hd_tensor *a, const hd_tensor *b, float scale, unsigned layout,
                             hd_tensor *y)
{
    const hd_tensor *t[] = {x, w, a, b, y};
    hd_op_params p = {.scale = scale, .lora_layout = layout};
    return hd__call(ctx, HD_OP_LORA, t, &p);
}

hd_status hd_softmax(hd_context *ctx, const hd_tensor *x, hd_tensor *y)
{
    const hd_tensor *t[] = {x, y};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_SOFTMAX, t, &p);
}

hd_status hd_layer_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *gamma,
                        const hd_tensor *beta, float eps, hd_tensor *y)
{
    const hd_tensor *t[] = {x, gamma, beta, y};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_LAYER_NORM, t, &p);
}

hd_status hd_rms_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *weight, float eps,
                      hd_tensor *y)
{
    const hd_tensor *t[] = {x, weight, y};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_RMS_NORM, t, &p);
}

hd_status hd_softmax_backward(hd_context *ctx, const hd_tensor *y, const hd_tensor *dy,
                              hd_tensor *dx)
{
    const hd_tensor *t[] = {y, dy, dx};
    hd_op_params p = {0};
    return hd__call(ctx, HD_OP_SOFTMAX_BACKWARD, t, &p);
}

hd_status hd_rms_norm_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *weight,
                               const hd_tensor *dy, float eps, hd_tensor *dx, hd_tensor *dweight)
{
    const hd_tensor *t[] = {x, weight, dy, dx, dweight};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_RMS_NORM_BACKWARD, t, &p);
}

hd_status hd_layer_norm_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *gamma,
                                 const hd_tensor *dy, float eps, hd_tensor *dx, hd_tensor *dgamma,
                                 hd_tensor *dbeta)
{
    const hd_tensor *t[] = {x, gamma, dy, dx, dgamma, dbeta};
    hd_op_params p = {.eps = eps};
    return hd__call(ctx, HD_OP_LAYER_NORM_BACKWARD, t, &p);
}

hd_status hd_lora_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                           const hd_tensor *a, const hd_tensor *b, float scale, const hd_tensor *dy,
                           hd_tensor *dx, hd_tensor *da, hd_tensor *db, bool accumulate)
{
    return hd_lora_backward_ex(ctx, x, w, a, b, scale, HD_LORA_LAYOUT_DEFAULT, dy, dx, da, db,
                               accumulate);
}

hd_status hd_lora_backward_ex(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                              const hd_tensor *a, const hd_tensor *b, float scale, unsigned layout,
                              const hd_tensor *dy, hd_tensor *dx, hd_tensor *da, hd_tensor *db,
                              bool accumulate)
{
    const hd_tensor *t[] = {x, w, a, b, dy, dx, da, db};
    hd_op_params p = {.scale = scale, .lora_layout = layout, .accumulate = accumulate};
    return hd__call(ctx, HD_OP_LORA_BACKWARD, t, &p);
}
