/* The public operations: check, handle empty shapes, choose, migrate, run, fall back. */
#include <stdio.h>
#include <string.h>

#include "autotune/table.h"
#include "dispatch/call.h"
#include "dispatch/check.h"
#include "dispatch/context.h"
#include "dispatch/error.h"
#include "dispatch/fault.h"
#include "dispatch/select.h"

static hd_status run_slot(const hd_backend_impl *impl, void *state, hd_context *ctx,
                          const hd_call *call)
{
    switch (call->op) {
    case HD_OP_GEMM:
        return impl->gemm(state, ctx, &call->args.gemm);
    case HD_OP_LORA:
        return impl->lora(state, ctx, &call->args.lora);
    case HD_OP_SOFTMAX:
        return impl->softmax(state, ctx, &call->args.row);
    case HD_OP_LAYER_NORM:
        return impl->layer_norm(state, ctx, &call->args.row);
    case HD_OP_RMS_NORM:
        return impl->rms_norm(state, ctx, &call->args.row);
    case HD_OP_GEMM_BATCHED:
        return impl->gemm_batched(state, ctx, &call->args.gemm);
    case HD_OP_COUNT:
        break;
    }
    return hd__error(ctx, HD_ERR_INTERNAL, "unknown operation %d", (int)call->op);
}

static hd_status place_tensors(const hd_call *call, hd_place place)
{
    hd_status s;
    for (int i = 0; i < call->io.input_count; i++)
        if ((s = hd__tensor_to_place(call->io.inputs[i], place)) != HD_OK)
            return s;
    if (call->io.output_read)
        return hd__tensor_to_place(call->io.output, place);
    return hd__tensor_reserve(call->io.output, place);
}

/* The tuned kernel parameters of the backend about to run; NULL for its defaults. */
static void set_variant(hd_call *call, const char *variant)
{
    switch (call->op) {
    case HD_OP_GEMM:
    case HD_OP_GEMM_BATCHED:
        call->args.gemm.variant = variant;
        break;
    case HD_OP_LORA:
        call->args.lora.variant = variant;
        break;
    default:
        call->args.row.variant = variant;
        break;
    }
}

hd_status hd__call_run_on(hd_context *ctx, hd_backend b, hd_call *call, const char *variant)
{
    const hd_backend_impl *impl = ctx->backends[b];
    set_variant(call, variant);
    if (hd__fault(ctx, b, "migrate"))
        return HD_ERR_DEVICE;
    hd_status s = place_tensors(call, impl->place);
    if (s == HD_OK && hd__fault(ctx, b, "launch"))
        s = HD_ERR_DEVICE;
    if (s == HD_OK)
        s = run_slot(impl, ctx->backend_state[b], ctx, call);
    if (s == HD_OK) {
        hd__tensor_written(call->io.output, impl->place);
        ctx->last_backend = b;
    }
    return s;
}

static hd_status dispatch_call(hd_context *ctx, hd_call *call)
{
    hd_plan plan;
    hd__select(ctx, call->op, &call->shape, &call->io, &plan);
    if (plan.count == 0)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "no backend of this context takes %s",
                         hd_op_name(call->op));

    char failures[HD_ERROR_CAPACITY / 2];
    failures[0] = '\0'; /* not "= \"\"", which would clear all 2 KiB on every call */
    hd_status s = HD_ERR_UNSUPPORTED;
    for (int i = 0; i < plan.count; i++) {
        hd_backend b = plan.order[i];
        s = hd__call_run_on(ctx, b, call, plan.variant[i]);
        if (s == HD_OK) {
            if (failures[0] != '\0') /* keep what went wrong for the curious */
                hd__error(ctx, HD_OK, "%s ran on %s after: %s", hd_op_name(call->op),
                          hd_backend_name(b), failures);
            return HD_OK;
        }
        /* The checks passed before any backend ran, so whatever failed is the backend, its
         * device or the tuned parameters it was given: the next backend may still succeed.
         * A record whose parameters failed is not used again in this context. */
        if (plan.variant[i] != NULL)
            hd__tune_disable(ctx, call->op, &call->shape);
        if (s == HD_ERR_DEVICE) /* out of memory or a failed build may be this shape's alone */
            hd__backend_mark_unhealthy(ctx, b);
        size_t used = strlen(failures);
        const char *v = plan.variant[i];
        snprintf(failures + used, sizeof failures - used, "%s[%s%s%.200s%s] %.600s",
                 used ? "; " : "", hd_backend_name(b), v ? " \"" : "", v ? v : "", v ? "\"" : "",
                 ctx->last_error);
    }
    return hd__error(ctx, s, "every backend failed for %s: %s", hd_op_name(call->op), failures);
}

/* C = beta*C on the host: GEMM with k = 0 or alpha = 0, where BLAS ignores A and B. */
static hd_status gemm_scale_only(hd_context *ctx, hd_tensor *c, float beta)
{
    hd_status s = beta == 0.0f ? hd__tensor_reserve(c, HD_PLACE_HOST) : hd__tensor_to_host(c);
    if (s != HD_OK)
        return s;
    size_t n = hd__tensor_count(c);
    for (size_t i = 0; i < n; i++)
        c->host[i] = beta == 0.0f ? 0.0f : beta * c->host[i];
    hd__tensor_written(c, HD_PLACE_HOST);
    ctx->last_backend = HD_BACKEND_CPU;
    return HD_OK;
}

hd_status hd_gemm(hd_context *ctx, bool trans_a, bool trans_b, float alpha, const hd_tensor *a,
                  const hd_tensor *b, float beta, hd_tensor *c)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    hd_call call = {.op = HD_OP_GEMM};
    hd_status s = hd__check_gemm(ctx, trans_a, trans_b, alpha, a, b, beta, c, &call.args.gemm);
    if (s != HD_OK)
        return s;
    const hd_gemm_args *g = &call.args.gemm;
    if (g->m == 0 || g->n == 0)
        return HD_OK;
    if (g->k == 0 || alpha == 0.0f)
        return gemm_scale_only(ctx, c, beta);
    call.shape = (hd_shape){.dim = {g->m, g->n, g->k}, .trans_a = trans_a, .trans_b = trans_b};
    call.io = (hd_call_tensors){.inputs = {(hd_tensor *)a, (hd_tensor *)b},
                                .input_count = 2,
                                .output = c,
                                .output_read = beta != 0.0f};
    return dispatch_call(ctx, &call);
}

hd_status hd_gemm_batched(hd_context *ctx, size_t batch, bool trans_a, bool trans_b, float alpha,
                          const hd_tensor *a, const hd_tensor *b, float beta, hd_tensor *c)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    hd_call call = {.op = HD_OP_GEMM_BATCHED};
    hd_status s = hd__check_gemm_batched(ctx, batch, trans_a, trans_b, alpha, a, b, beta, c,
                                         &call.args.gemm);
    if (s != HD_OK)
        return s;
    const hd_gemm_args *g = &call.args.gemm;
    if (batch == 0 || g->m == 0 || g->n == 0)
        return HD_OK;
    if (g->k == 0 || alpha == 0.0f) /* every C_i = beta*C_i: the whole stack at once */
        return gemm_scale_only(ctx, c, beta);
    call.shape = (hd_shape){.dim = {g->m, g->n, g->k, batch}, .trans_a = trans_a,
                            .trans_b = trans_b};
    call.io = (hd_call_tensors){.inputs = {(hd_tensor *)a, (hd_tensor *)b},
                                .input_count = 2,
                                .output = c,
                                .output_read = beta != 0.0f};
    return dispatch_call(ctx, &call);
}

hd_status hd_lora_forward(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                          const hd_tensor *a, const hd_tensor *b, float scale, hd_tensor *y)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    hd_call call = {.op = HD_OP_LORA};
    hd_status s = hd__check_lora(ctx, x, w, a, b, scale, y, &call.args.lora);
    if (s != HD_OK)
        return s;
    const hd_lora_args *l = &call.args.lora;
    if (l->tokens == 0 || l->out == 0)
        return HD_OK;
    if (l->in == 0) /* x*W and x*A are sums of nothing */
        return gemm_scale_only(ctx, y, 0.0f);
    call.shape = (hd_shape){.dim = {l->tokens, l->in, l->out, l->rank}};
    call.io = (hd_call_tensors){.inputs = {(hd_tensor *)x, (hd_tensor *)w, (hd_tensor *)a,
                                           (hd_tensor *)b},
                                .input_count = 4,
                                .output = y};
    return dispatch_call(ctx, &call);
}

static hd_status row_op(hd_context *ctx, hd_op op, const char *fn, const hd_tensor *x,
                        const hd_tensor *gamma, const hd_tensor *beta, bool has_eps, float eps,
                        hd_tensor *y)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    hd_call call = {.op = op};
    hd_status s = hd__check_rows(ctx, fn, x, gamma, beta, has_eps, eps, y, &call.args.row);
    if (s != HD_OK)
        return s;
    if (x->rows == 0 || x->cols == 0)
        return HD_OK;
    call.shape = (hd_shape){.dim = {x->rows, x->cols}};
    call.io.output = y;
    call.io.inputs[call.io.input_count++] = (hd_tensor *)x;
    if (gamma != NULL)
        call.io.inputs[call.io.input_count++] = (hd_tensor *)gamma;
    if (beta != NULL)
        call.io.inputs[call.io.input_count++] = (hd_tensor *)beta;
    return dispatch_call(ctx, &call);
}

hd_status hd_softmax(hd_context *ctx, const hd_tensor *x, hd_tensor *y)
{
    return row_op(ctx, HD_OP_SOFTMAX, "hd_softmax", x, NULL, NULL, false, 0.0f, y);
}

hd_status hd_layer_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *gamma,
                        const hd_tensor *beta, float eps, hd_tensor *y)
{
    if (ctx != NULL && (gamma == NULL || beta == NULL)) {
        hd__error_clear(ctx);
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_layer_norm: tensor '%s' is NULL",
                         gamma == NULL ? "gamma" : "beta");
    }
    return row_op(ctx, HD_OP_LAYER_NORM, "hd_layer_norm", x, gamma, beta, true, eps, y);
}

hd_status hd_rms_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *weight, float eps,
                      hd_tensor *y)
{
    if (ctx != NULL && weight == NULL) {
        hd__error_clear(ctx);
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_rms_norm: tensor 'weight' is NULL");
    }
    return row_op(ctx, HD_OP_RMS_NORM, "hd_rms_norm", x, weight, NULL, true, eps, y);
}
