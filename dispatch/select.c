/*
 * Backend choice. The first rule that names a usable backend taking the call wins:
 *
 *   1. forced: hd_context_set_backend() or $HD_BACKEND;
 *   2. tuned: the cache's record for exactly this (op, shape[, transposes]), with its variant;
 *   3. nearest: the record of the nearest tuned shape (log-space distance in every dimension
 *      within HD_TUNE_NEAR_DIM); it lends its backend, not its variant, since kernel
 *      parameters are tuned for one shape;
 *   4. cost: a model from the device's calibrated constants (launch latency, copy and host-link
 *      bandwidth, GEMM rates), when the cache holds a calibration;
 *   5. default: a fixed order, the CPU first for work so small that a launch and the copies
 *      would cost more than the work itself.
 *
 * Moving inputs counts in rules 2-4: a backend whose inputs are not valid at its place pays
 * bytes / host-link bandwidth. A tuned winner that would have to move its inputs loses to its
 * runner-up when the runner-up's measured time plus its own migration is lower.
 * Every other usable backend that takes the call follows as a fallback, the CPU last.
 */
#include <math.h>
#include <stdio.h>

#include "autotune/table.h"
#include "dispatch/context.h"
#include "dispatch/select.h"

/* Below this many multiply-adds (GEMM, LoRA) or elements (row ops), with every input on the
 * host, the CPU beats any device: a launch plus two copies costs ~10-30 µs. */
#define HD_SMALL_WORK 32768.0

/* Used where the calibration lacks a constant, and for migration without a calibration:
 * a PCIe 3 x16 link in practice and the launch cost of a typical OpenCL driver. */
#define DEFAULT_HOST_GBPS 10.0
#define DEFAULT_LAUNCH_US 10.0

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
    case HD_OP_GEMM_BATCHED:
        has_slot = impl->gemm_batched != NULL;
        break;
    case HD_OP_COUNT:
        break;
    }
    if (!has_slot)
        return false;
    return impl->supports == NULL || impl->supports(ctx->backend_state[b], op, shape);
}

void hd__shape_text(hd_op op, const hd_shape *s, char *buf, size_t size)
{
    switch (op) {
    case HD_OP_GEMM:
        snprintf(buf, size, "gemm %zux%zux%zu %c%c", s->dim[0], s->dim[1], s->dim[2],
                 s->trans_a ? 't' : 'n', s->trans_b ? 't' : 'n');
        break;
    case HD_OP_LORA:
        snprintf(buf, size, "lora %zux%zux%zu r%zu", s->dim[0], s->dim[1], s->dim[2], s->dim[3]);
        break;
    case HD_OP_GEMM_BATCHED:
        snprintf(buf, size, "gemm_batched %zux%zux%zu %c%c x%zu", s->dim[0], s->dim[1], s->dim[2],
                 s->trans_a ? 't' : 'n', s->trans_b ? 't' : 'n', s->dim[3]);
        break;
    default:
        snprintf(buf, size, "%s %zux%zu", hd_op_name(op), s->dim[0], s->dim[1]);
        break;
    }
}

static void plan_add(const hd_context *ctx, hd_plan *plan, hd_backend b, const char *variant,
                     hd_op op, const hd_shape *shape)
{
    if (b == HD_BACKEND_AUTO || !hd__backend_takes(ctx, b, op, shape))
        return;
    for (int i = 0; i < plan->count; i++)
        if (plan->order[i] == b)
            return;
    plan->variant[plan->count] = variant != NULL && variant[0] != '\0' ? variant : NULL;
    plan->order[plan->count++] = b;
}

static double work_of(hd_op op, const hd_shape *s)
{
    switch (op) {
    case HD_OP_GEMM:
        return (double)s->dim[0] * (double)s->dim[1] * (double)s->dim[2];
    case HD_OP_LORA:
        return (double)s->dim[0] * (double)s->dim[1] * ((double)s->dim[2] + (double)s->dim[3]) +
               (double)s->dim[0] * (double)s->dim[3] * (double)s->dim[2];
    case HD_OP_GEMM_BATCHED: /* m, n, k, batch */
        return (double)s->dim[0] * (double)s->dim[1] * (double)s->dim[2] * (double)s->dim[3];
    default:
        return (double)s->dim[0] * (double)s->dim[1];
    }
}

/* Bytes an op streams at least once: its inputs and its output. */
static double bytes_of(hd_op op, const hd_shape *s)
{
    double d0 = (double)s->dim[0], d1 = (double)s->dim[1], d2 = (double)s->dim[2];
    double d3 = (double)s->dim[3];
    switch (op) {
    case HD_OP_GEMM:
        return 4.0 * (d0 * d2 + d2 * d1 + d0 * d1);
    case HD_OP_LORA:
        return 4.0 * (d0 * d1 + d1 * d2 + d1 * d3 + d3 * d2 + d0 * d2);
    case HD_OP_GEMM_BATCHED:
        return 4.0 * d3 * (d0 * d2 + d2 * d1 + d0 * d1);
    default:
        return 4.0 * (2.0 * d0 * d1 + 2.0 * d1);
    }
}

static bool all_on_host(const hd_call_tensors *io)
{
    if (io == NULL)
        return true;
    for (int i = 0; i < io->input_count; i++)
        if (io->inputs[i]->device_valid)
            return false;
    return true;
}

/* Microseconds to make the call's inputs valid where backend b runs. */
static double migrate_us(const hd_context *ctx, hd_backend b, const hd_call_tensors *io)
{
    if (io == NULL)
        return 0.0;
    hd_place place = ctx->backends[b]->place;
    double bytes = 0.0;
    for (int i = 0; i < io->input_count; i++)
        bytes += (double)hd__tensor_migration_bytes(io->inputs[i], place);
    if (io->output_read)
        bytes += (double)hd__tensor_migration_bytes(io->output, place);
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    double gbps = cal != NULL && cal->host_gbps > 0.0 ? cal->host_gbps : DEFAULT_HOST_GBPS;
    return bytes / (gbps * 1e3);
}

/*
 * The cost model: launches × launch latency + the larger of compute time and streaming time,
 * plus migration. The rates are the calibrated ones scaled by how well each backend suits the
 * shape: CLBlast's GEMM reaches its rate only with both sides of C at least a tile wide; the
 * fused GEMV-style kernels stream the weights at copy bandwidth but are not tuned for large
 * tiles; the hybrid plan is CLBlast plus one epilogue launch.
 */
static double model_us(const hd_tune_calibration *cal, hd_backend b, hd_op op, const hd_shape *s)
{
    double flops = 2.0 * work_of(op, s), bytes = bytes_of(op, s);
    double launch = cal->launch_us > 0.0 ? cal->launch_us : DEFAULT_LAUNCH_US;
    double dev_gflops = cal->gemm_gflops > 0.0 ? cal->gemm_gflops : 1000.0;
    double dev_gbps = cal->copy_gbps > 0.0 ? cal->copy_gbps : 100.0;
    double cpu_gflops = cal->cpu_gflops > 0.0 ? cal->cpu_gflops : 50.0;
    double cpu_gbps = cal->cpu_gbps > 0.0 ? cal->cpu_gbps : 10.0;
    bool matmul = op == HD_OP_GEMM || op == HD_OP_LORA || op == HD_OP_GEMM_BATCHED;
    double narrow =
        fmin((double)s->dim[0], op == HD_OP_LORA ? (double)s->dim[2] : (double)s->dim[1]);
    double tile_fill = fmin(1.0, narrow / 64.0);

    double launches = 1.0, gflops = dev_gflops, gbps = dev_gbps;
    switch (b) {
    case HD_BACKEND_CPU:
        return fmax(matmul ? flops / (cpu_gflops * 1e3) : 0.0, bytes / (cpu_gbps * 1e3));
    case HD_BACKEND_CLBLAST:
        launches = op == HD_OP_LORA ? 3.0 : (work_of(op, s) > 16777216.0 ? 2.0 : 1.0);
        gflops = dev_gflops * tile_fill * tile_fill;
        break;
    case HD_BACKEND_CLBLAST_FUSED:
        launches = 2.0;
        gflops = dev_gflops * tile_fill * tile_fill;
        break;
    case HD_BACKEND_FUSED:
        gflops = dev_gflops * 0.25;
        break;
    default:
        return INFINITY;
    }
    if (!matmul)
        return launches * launch + bytes / (gbps * 1e3);
    return launches * launch + fmax(flops / (gflops * 1e3), bytes / (gbps * 1e3));
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
    case HD_OP_GEMM_BATCHED:
        out[0] = HD_BACKEND_CLBLAST;
        out[1] = HD_BACKEND_FUSED;
        break;
    default:
        out[0] = HD_BACKEND_FUSED;
        break;
    }
}

/* Rules 2 and 3: puts the record's backend first, or its runner-up when moving the inputs to
 * the winner would cost more than the runner-up's measured disadvantage. */
static bool plan_from_record(const hd_context *ctx, hd_plan *plan, const hd_tune_record *r,
                             bool exact, double distance, hd_op op, const hd_shape *shape)
{
    if (!hd__backend_takes(ctx, r->backend, op, shape))
        return false;
    hd_backend first = r->backend;
    const char *variant = exact && r->variant[0] != '\0' ? r->variant : NULL;
    double win_us = r->median_us + plan->migrate_us[r->backend];
    if (r->runner_up != HD_BACKEND_AUTO && hd__backend_takes(ctx, r->runner_up, op, shape)) {
        double run_us =
            r->median_us * (1.0 + r->margin_pct / 100.0) + plan->migrate_us[r->runner_up];
        if (run_us < win_us) {
            first = r->runner_up;
            variant = NULL;
            plan->runner_up_first = true;
        }
    }
    plan->record = r;
    plan->distance = distance;
    plan_add(ctx, plan, first, variant, op, shape);
    plan->rule = exact ? HD_SELECT_TUNED : HD_SELECT_NEAREST;
    return true;
}

/* Rule 4: every candidate by its modelled time, best first. */
static bool plan_from_model(const hd_context *ctx, hd_plan *plan, hd_op op, const hd_shape *shape)
{
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    if (cal == NULL)
        return false;
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++)
        if (hd__backend_takes(ctx, (hd_backend)b, op, shape))
            plan->model_us[b] = model_us(cal, (hd_backend)b, op, shape) + plan->migrate_us[b];
    /* Candidates by modelled time, best first; the rest follow as fallbacks. */
    hd_backend sorted[HD_BACKEND_COUNT];
    int n = 0;
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++) {
        if (plan->model_us[b] < 0.0)
            continue;
        int i = n++;
        for (; i > 0 && plan->model_us[sorted[i - 1]] > plan->model_us[b]; i--)
            sorted[i] = sorted[i - 1];
        sorted[i] = (hd_backend)b;
    }
    if (n == 0)
        return false;
    for (int i = 0; i < n; i++)
        plan_add(ctx, plan, sorted[i], NULL, op, shape);
    plan->rule = HD_SELECT_COST;
    return true;
}

void hd__select(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                hd_plan *plan)
{
    plan->count = 0;
    plan->rule = HD_SELECT_NONE;
    plan->record = NULL;
    plan->distance = 0.0;
    plan->runner_up_first = plan->small = false;
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        plan->model_us[b] = -1.0;
        plan->migrate_us[b] = b != HD_BACKEND_AUTO && ctx->backends[b] != NULL
                                  ? migrate_us(ctx, (hd_backend)b, io)
                                  : -1.0;
    }
    const hd_tune_record *exact = hd__tune_exact(ctx, op, shape);

    hd_backend forced = ctx->forced[op];
    if (forced != HD_BACKEND_AUTO) {
        plan_add(ctx, plan, forced, exact && exact->backend == forced ? exact->variant : NULL, op,
                 shape);
        if (plan->count > 0)
            plan->rule = HD_SELECT_FORCED;
    }

    double distance = 0.0;
    const hd_tune_record *near = NULL;
    if (plan->count == 0 && exact != NULL)
        plan_from_record(ctx, plan, exact, true, 0.0, op, shape);
    if (plan->count == 0 && (near = hd__tune_nearest(ctx, op, shape, &distance)) != NULL)
        plan_from_record(ctx, plan, near, false, distance, op, shape);
    if (plan->count == 0)
        plan_from_model(ctx, plan, op, shape);

    if (plan->count == 0 && all_on_host(io) && work_of(op, shape) < HD_SMALL_WORK) {
        plan_add(ctx, plan, HD_BACKEND_CPU, NULL, op, shape);
        if (plan->count > 0) {
            plan->rule = HD_SELECT_DEFAULT;
            plan->small = true;
        }
    }
    hd_backend order[3];
    default_order(op, shape, order);
    for (int i = 0; i < 3; i++)
        plan_add(ctx, plan, order[i], NULL, op, shape);
    if (plan->rule == HD_SELECT_NONE && plan->count > 0)
        plan->rule = HD_SELECT_DEFAULT;

    /* Everything else that takes the call, the CPU last: it always works. */
    for (int b = HD_BACKEND_CPU + 1; b < HD_BACKEND_COUNT; b++)
        plan_add(ctx, plan, (hd_backend)b, NULL, op, shape);
    plan_add(ctx, plan, HD_BACKEND_CPU, NULL, op, shape);
    if (plan->rule == HD_SELECT_NONE && plan->count > 0)
        plan->rule = HD_SELECT_DEFAULT;
}

void hd__plan_reason(const hd_plan *plan, char *buf, size_t size)
{
    const hd_tune_record *r = plan->record;
    hd_backend first = plan->count > 0 ? plan->order[0] : HD_BACKEND_AUTO;
    char key[96], margin[72] = "", why[96] = "";
    switch (plan->rule) {
    case HD_SELECT_FORCED:
        snprintf(buf, size, "forced to %s (hd_context_set_backend or HD_BACKEND)",
                 hd_backend_name(first));
        return;
    case HD_SELECT_TUNED:
    case HD_SELECT_NEAREST:
        hd__shape_text(r->op, &r->shape, key, sizeof key);
        if (r->runner_up != HD_BACKEND_AUTO) {
            char text[64];
            hd__tune_margin_text(r, text, sizeof text);
            snprintf(margin, sizeof margin, ", %s", text);
        }
        if (plan->runner_up_first)
            snprintf(why, sizeof why, "; %s instead: moving the inputs costs %.1f us",
                     hd_backend_name(r->runner_up), plan->migrate_us[r->backend]);
        if (plan->rule == HD_SELECT_TUNED)
            snprintf(buf, size, "tuned record: %s -> %s%s%s%s, %.2f us%s%s", key,
                     hd_backend_name(r->backend), r->variant[0] ? " \"" : "", r->variant,
                     r->variant[0] ? "\"" : "", r->median_us, margin, why);
        else
            snprintf(buf, size, "nearest tuned shape (log2 distance %.2f): %s -> %s, %.2f us%s%s",
                     plan->distance, key, hd_backend_name(r->backend), r->median_us, margin, why);
        return;
    case HD_SELECT_COST:
        snprintf(buf, size, "cost model from the calibration: %s %.2f us (migration %.2f us)",
                 hd_backend_name(first), plan->model_us[first], plan->migrate_us[first]);
        return;
    case HD_SELECT_DEFAULT:
        snprintf(buf, size, "%s",
                 plan->small ? "default order: small problem with every input "
                               "on the host"
                             : "default order");
        return;
    case HD_SELECT_NONE:
        break;
    }
    snprintf(buf, size, "no backend takes the call");
}
