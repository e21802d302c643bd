/*
 * Backend choice. The first rule that names a usable backend taking the call wins:
 *
 *   1. forced: hd_context_set_backend() or $HD_BACKEND;
 *   2. tuned: the cache's record for exactly this (op, shape[, transposes]), with its variant;
 *   3. nearest: the record of the nearest tuned shape (log-space distance in every dimension
 *      within HD_TUNE_NEAR_DIM); it lends its backend, not its variant, since kernel
 *      parameters are tuned for one shape;
 *   4. cost: each backend's own estimate (its estimate_us, from the device's calibrated
 *      constants, or its default rates where the cache holds no calibration), scaled by how
 *      it compared with the time measured on the nearest record of the op that timed that
 *      backend (model_us), plus moving the inputs;
 *   5. default, where no backend estimates: the device backends in the registry's order, the
 *      host's after them, and the host's first for work so small that a launch and the copies
 *      would cost more than the work itself.
 *
 * Moving inputs counts in rules 2-4: a backend whose inputs are not valid at its place pays
 * bytes / host-link bandwidth, and a backend on the host a round trip per download. A tuned
 * winner that would have to move its inputs loses to its runner-up when the runner-up's
 * measured time plus its own migration is lower.
 * Every other usable backend that takes the call follows as a fallback, in the registry's
 * order (the CPU last). The scheduler knows backends only through their slots, supports()
 * and estimate_us(): no backend is named here.
 */
#include <math.h>
#include <stdio.h>

#include "dispatch/context.h"
#include "dispatch/select.h"
#include "dispatch/tensor.h"
#include "dispatch/tools.h"
#include "dispatch/tuning.h"

/* Below this many multiply-adds (GEMM, LoRA) or elements (row ops), with every input on the
 * host, a backend on the host beats any device: a launch plus two copies costs more than such
 * work takes on the host. */
#define HD_SMALL_WORK 32768.0

/* Used for migration where the calibration lacks the host link: a PCIe 3 x16 link in
 * practice. */
#define DEFAULT_HOST_GBPS 10.0

/* A download's round trip where the calibration lacks one (its launch time: a command
 * enqueued and waited for). */
#define DEFAULT_ROUND_TRIP_US 10.0

/* shape as a backend is asked about it: with the context's GEMM arithmetic. */
static hd_shape in_context(const hd_context *ctx, const hd_shape *shape)
{
    hd_shape s = *shape;
    s.precision = ctx->gemm_precision;
    return s;
}

/* Whether backend b (not a plan) offers op's part and takes the shape by its own limits. */
static bool impl_takes(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                       hd_part part)
{
    const hd_backend_impl *impl = ctx->backends[b];
    if (impl == NULL || !hd__backend_usable(ctx, b))
        return false;
    hd_op_slot slot = part == HD_PART_WHOLE ? impl->run[op] : impl->epilogue[op];
    if (slot == NULL)
        return false;
    hd_shape s = in_context(ctx, shape);
    return impl->supports == NULL || impl->supports(ctx->backend_state[b], op, &s, part);
}

bool hd__backend_takes(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape)
{
    if (!hd__backend_usable(ctx, b) || (unsigned)op >= HD_OP_COUNT)
        return false;
    const hd_composite *plan = ctx->composite[b];
    if (plan == NULL)
        return impl_takes(ctx, b, op, shape, HD_PART_WHOLE);
    const hd_op_desc *d = hd__op(op);
    if (d->product == NULL)
        return false;
    hd_shape product;
    d->product(shape, NULL, &product, NULL);
    return impl_takes(ctx, plan->product, HD_OP_GEMM, &product, HD_PART_WHOLE) &&
           impl_takes(ctx, plan->epilogue, op, shape, HD_PART_EPILOGUE);
}

hd_place hd__backend_place(const hd_context *ctx, hd_backend b)
{
    const hd_composite *plan = ctx->composite[b];
    return ctx->backends[plan != NULL ? plan->product : b]->place;
}

static double impl_estimate(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                            hd_part part, const hd_tune_calibration *cal)
{
    const hd_backend_impl *impl = ctx->backends[b];
    if (impl == NULL || impl->estimate_us == NULL ||
        (part == HD_PART_WHOLE ? impl->run[op] : impl->epilogue[op]) == NULL)
        return -1.0; /* no estimate, or no slot for the op to estimate */
    hd_shape s = in_context(ctx, shape);
    return impl->estimate_us(ctx->backend_state[b], op, &s, part, cal);
}

double hd__backend_estimate_us(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                               const hd_tune_calibration *cal)
{
    if ((unsigned)b >= HD_BACKEND_COUNT || b == HD_BACKEND_AUTO || (unsigned)op >= HD_OP_COUNT)
        return -1.0;
    const hd_composite *plan = ctx->composite[b];
    if (plan == NULL)
        return impl_estimate(ctx, b, op, shape, HD_PART_WHOLE, cal);
    if (hd__op(op)->product == NULL) /* the plan does not take the op */
        return -1.0;
    hd_shape product;
    hd__op(op)->product(shape, NULL, &product, NULL);
    double first = impl_estimate(ctx, plan->product, HD_OP_GEMM, &product, HD_PART_WHOLE, cal);
    double second = impl_estimate(ctx, plan->epilogue, op, shape, HD_PART_EPILOGUE, cal);
    return first < 0.0 || second < 0.0 ? -1.0 : first + second;
}

/* Where b's variants belong: a plan's are its epilogue's, of the epilogue part. */
static hd_backend variant_owner(const hd_context *ctx, hd_backend b, hd_part *part)
{
    const hd_composite *plan = ctx->composite[b];
    *part = plan != NULL ? HD_PART_EPILOGUE : HD_PART_WHOLE;
    return plan != NULL ? plan->epilogue : b;
}

size_t hd__backend_variants(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                            const char **out, size_t max)
{
    hd_part part;
    hd_backend owner = variant_owner(ctx, b, &part);
    const hd_backend_impl *impl = ctx->backends[owner];
    if (impl == NULL || impl->variants == NULL || max == 0)
        return 0;
    hd_shape s = in_context(ctx, shape);
    return impl->variants(ctx->backend_state[owner], op, &s, part, out, max);
}

hd_status hd__backend_check_variant(hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                                    const char *variant)
{
    hd_part part;
    hd_backend owner = variant_owner(ctx, b, &part);
    const hd_backend_impl *impl = ctx->backends[owner];
    if (impl == NULL || impl->check_variant == NULL)
        return HD_OK;
    hd_shape s = in_context(ctx, shape);
    return impl->check_variant(ctx->backend_state[owner], ctx, op, &s, part, variant);
}

hd_status hd__backend_build_ahead(hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                                  const char *variant)
{
    hd_part part;
    hd_backend owner = variant_owner(ctx, b, &part);
    const hd_backend_impl *impl = ctx->backends[owner];
    if (impl == NULL || impl->build_ahead == NULL)
        return HD_OK;
    hd_shape s = in_context(ctx, shape);
    return impl->build_ahead(ctx->backend_state[owner], ctx, op, &s, part, variant);
}

void hd__shape_text(hd_op op, const hd_shape *s, char *buf, size_t size)
{
    hd__op_text(op, s, HD_TEXT_KEY, buf, size);
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

static bool all_on_host(const hd_call_tensors *io)
{
    if (io == NULL)
        return true;
    for (int i = 0; i < io->input_count; i++)
        if (io->inputs[i]->state->device_valid)
            return false;
    return true;
}

static double copy_us(const hd_context *ctx, double bytes)
{
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    double gbps = cal != NULL && cal->host_gbps > 0.0 ? cal->host_gbps : DEFAULT_HOST_GBPS;
    return bytes / (gbps * 1e3);
}

bool hd__tensor_move_paid(const hd_context *ctx, const hd_tensor *t)
{
    return t->state->stay_us > 0.0 &&
           t->state->stay_us >= copy_us(ctx, (double)hd__tensor_count(t) * 4.0);
}

/* The i-th tensor call io reads: its inputs, then the outputs it also reads (io->output_read). */
static const hd_tensor *read_tensor(const hd_call_tensors *io, int i)
{
    return i < io->input_count ? io->inputs[i] : io->outputs[i - io->input_count];
}

static int read_count(const hd_call_tensors *io)
{
    return io->input_count + (io->output_read ? io->output_count : 0);
}

/* Microseconds to make the call's inputs valid where backend b runs. A tensor whose staying
 * has already cost as much as its copy moves for free: the break-even rule, which keeps any
 * sequence of calls within twice the cost of the better of always copying and never copying.
 * A copy to the host also waits for it: the host needs the data before it can start, so each
 * such download costs a round trip through the queue besides its bytes (uploads are queued
 * ahead of the kernel that reads them). */
static double migrate_us(const hd_context *ctx, hd_backend b, const hd_call_tensors *io)
{
    if (io == NULL)
        return 0.0;
    hd_place place = hd__backend_place(ctx, b);
    double bytes = 0.0;
    int copies = 0;
    for (int i = 0; i < read_count(io); i++) {
        const hd_tensor *t = read_tensor(io, i);
        size_t moved = hd__tensor_move_paid(ctx, t) ? 0 : hd__tensor_migration_bytes(t, place);
        bytes += (double)moved;
        copies += moved > 0;
    }
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    double round_trip =
        cal != NULL && cal->launch_us > 0.0 ? cal->launch_us : DEFAULT_ROUND_TRIP_US;
    return copy_us(ctx, bytes) + (place == HD_PLACE_HOST ? copies * round_trip : 0.0);
}

/* The runner-up's time by the record: the winner's and its margin. A negative margin is the
 * tuner's preference for a winner slower by device time (for its queued time, a kernel
 * variant's allowance or the CPU's): it counts as none, or the runner-up would take over
 * wherever no input has to move. */
static double runner_up_us(const hd_tune_record *r)
{
    return r->median_us * (1.0 + (r->margin_pct > 0.0 ? r->margin_pct : 0.0) / 100.0);
}

/* A measured time over an estimate counts within these bounds: past them the record says
 * more about its own shape than about the backend. */
#define MODEL_SCALE_MIN 0.05
#define MODEL_SCALE_MAX 20.0

/* Backend b's estimate for the call with its inputs in place, scaled by how its estimate
 * compared with its measured time on the nearest tuned shape of the op that timed it (as the
 * record's winner or runner-up): the backends' estimates are rough models of a device, the
 * records measurements on this one (a kernel faster or slower than the calibrated GEMM rate,
 * a library's host time per call). Unscaled where no record timed b; -1 where b has no
 * estimate. */
static double model_us(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                       const hd_tune_calibration *cal)
{
    double us = hd__backend_estimate_us(ctx, b, op, shape, cal);
    const hd_tune_record *r = us > 0.0 ? hd__tune_nearest_timing(ctx, op, shape, b) : NULL;
    if (r == NULL)
        return us;
    double there = hd__backend_estimate_us(ctx, b, op, &r->shape, cal);
    double measured = r->backend == b ? r->median_us : runner_up_us(r);
    if (there <= 0.0 || measured <= 0.0)
        return us;
    double scale = measured / there;
    scale = scale < MODEL_SCALE_MIN ? MODEL_SCALE_MIN : scale;
    return us * (scale > MODEL_SCALE_MAX ? MODEL_SCALE_MAX : scale);
}

/* Each backend's time for the call with its inputs in place: the tuned record's times where
 * it names the backend (winner and runner-up), else the backend's estimate scaled by the
 * records (model_us). */
static void resident_times(const hd_context *ctx, hd_plan *plan, hd_op op, const hd_shape *shape)
{
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    for (int b = HD_BACKEND_FIRST; b < HD_BACKEND_COUNT; b++)
        plan->resident_us[b] = hd__backend_takes(ctx, (hd_backend)b, op, shape)
                                   ? model_us(ctx, (hd_backend)b, op, shape, cal)
                                   : -1.0;
    const hd_tune_record *r = plan->record;
    if (r != NULL && plan->resident_us[r->backend] >= 0.0)
        plan->resident_us[r->backend] = r->median_us;
    if (r != NULL && r->runner_up != HD_BACKEND_AUTO && plan->resident_us[r->runner_up] >= 0.0)
        plan->resident_us[r->runner_up] = runner_up_us(r);
}

/* What staying costs this call: the first backend's time against the fastest backend at the
 * other place whose inputs would have to move there, when that one would be faster with them
 * in place. hd__plan_account() charges it to the tensors the call read after it ran. */
static void plan_regret(const hd_context *ctx, hd_plan *plan, hd_op op, const hd_shape *shape)
{
    plan->regret_us = 0.0;
    if (plan->count == 0 || plan->rule == HD_SELECT_FORCED)
        return;
    resident_times(ctx, plan, op, shape);
    hd_backend first = plan->order[0];
    hd_place here = hd__backend_place(ctx, first);
    double mine = plan->resident_us[first];
    for (int i = 1; i < plan->count && mine >= 0.0; i++) {
        hd_backend b = plan->order[i];
        double there = plan->resident_us[b];
        if (hd__backend_place(ctx, b) == here || there < 0.0 || plan->migrate_us[b] <= 0.0)
            continue;
        if (mine - there > plan->regret_us) {
            plan->regret_us = mine - there;
            plan->regret_place = hd__backend_place(ctx, b);
        }
    }
}

void hd__plan_regret_shares(const hd_plan *plan, const hd_call_tensors *io,
                            double share[HD_PLAN_READ_MAX])
{
    if (plan->regret_us <= 0.0) /* nothing to charge: hd__plan_account reads no share */
        return;
    double total = 0.0;
    for (int i = 0; i < read_count(io); i++) {
        share[i] = (double)hd__tensor_migration_bytes(read_tensor(io, i), plan->regret_place);
        total += share[i];
    }
    for (int i = 0; i < read_count(io); i++)
        share[i] = total > 0.0 ? share[i] / total : 0.0;
}

void hd__plan_account(const hd_plan *plan, const hd_call_tensors *io,
                      const double share[HD_PLAN_READ_MAX])
{
    for (int i = 0; i < read_count(io) && plan->regret_us > 0.0; i++)
        read_tensor(io, i)->state->stay_us += plan->regret_us * share[i];
}

/* Rules 2 and 3: puts the record's backend first, or its runner-up when moving the inputs to
 * the winner would cost more than the runner-up's measured disadvantage (runner_up_us). */
static bool plan_from_record(const hd_context *ctx, hd_plan *plan, const hd_tune_record *r,
                             bool exact, double distance, hd_op op, const hd_shape *shape)
{
    if (!hd__backend_takes(ctx, r->backend, op, shape))
        return false;
    hd_backend first = r->backend;
    const char *variant = exact && r->variant[0] != '\0' ? r->variant : NULL;
    double win_us = r->median_us + plan->migrate_us[r->backend];
    if (r->runner_up != HD_BACKEND_AUTO && hd__backend_takes(ctx, r->runner_up, op, shape)) {
        double run_us = runner_up_us(r) + plan->migrate_us[r->runner_up];
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

/* Rule 4: every candidate by its estimated time (model_us) plus migration, best first. Without
 * a calibration the backends estimate from their own default rates and the link from
 * DEFAULT_HOST_GBPS: rough, but enough to keep one call on host data on the host where the
 * copy would cost more than the work, and the break-even rule then moves its tensors once a
 * loop has paid for the copy. Only where no backend estimates does rule 5 decide. */
static bool plan_from_model(const hd_context *ctx, hd_plan *plan, hd_op op, const hd_shape *shape)
{
    const hd_tune_calibration *cal = hd__tune_calibration(ctx);
    for (int b = HD_BACKEND_FIRST; b < HD_BACKEND_COUNT; b++) {
        if (!hd__backend_takes(ctx, (hd_backend)b, op, shape))
            continue;
        double us = model_us(ctx, (hd_backend)b, op, shape, cal);
        if (us >= 0.0)
            plan->model_us[b] = us + plan->migrate_us[b];
    }
    hd_backend sorted[HD_BACKEND_COUNT];
    int n = 0;
    for (int b = HD_BACKEND_FIRST; b < HD_BACKEND_COUNT; b++) {
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
    plan->calibrated = cal != NULL;
    return true;
}

/* Rule 5 and the fallbacks: the host's backends first when the work is small and every input
 * is on the host; then the device backends, fastest first by their own estimates (each from
 * its defaults: there is no calibration here), in the registry's order where they do not
 * estimate; then the host's backends in the registry's order, the CPU last. */
static void plan_from_order(const hd_context *ctx, hd_plan *plan, hd_op op, const hd_shape *shape,
                            const hd_call_tensors *io)
{
    size_t n;
    const hd_backend *order = hd__registry_order(&n);
    if (plan->count == 0 && all_on_host(io) && hd__op_work(op, shape) < HD_SMALL_WORK) {
        for (size_t i = 0; i < n; i++)
            if (hd__backend_usable(ctx, order[i]) &&
                hd__backend_place(ctx, order[i]) == HD_PLACE_HOST)
                plan_add(ctx, plan, order[i], NULL, op, shape);
        if (plan->count > 0) {
            plan->rule = HD_SELECT_DEFAULT;
            plan->small = true;
        }
    }
    hd_backend device[HD_BACKEND_COUNT];
    double us[HD_BACKEND_COUNT];
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        hd_backend b = order[i];
        if (!hd__backend_takes(ctx, b, op, shape) || hd__backend_place(ctx, b) == HD_PLACE_HOST)
            continue;
        double e = hd__backend_estimate_us(ctx, b, op, shape, NULL);
        int k = count++;
        for (; k > 0 && (e >= 0.0 && (us[k - 1] < 0.0 || us[k - 1] > e)); k--) {
            device[k] = device[k - 1];
            us[k] = us[k - 1];
        }
        device[k] = b;
        us[k] = e;
    }
    for (int i = 0; i < count; i++)
        plan_add(ctx, plan, device[i], NULL, op, shape);
    for (size_t i = 0; i < n; i++)
        plan_add(ctx, plan, order[i], NULL, op, shape);
    if (plan->rule == HD_SELECT_NONE && plan->count > 0)
        plan->rule = HD_SELECT_DEFAULT;
}

void hd__select(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                hd_plan *plan)
{
    plan->count = 0;
    plan->rule = HD_SELECT_NONE;
    plan->record = NULL;
    plan->distance = 0.0;
    plan->runner_up_first = plan->small = plan->calibrated = false;
    plan->regret_us = 0.0;
    plan->regret_place = HD_PLACE_HOST;
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        plan->resident_us[b] = -1.0;
        plan->model_us[b] = -1.0;
        plan->migrate_us[b] = b != HD_BACKEND_AUTO && hd__backend_usable(ctx, (hd_backend)b)
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
    plan_from_order(ctx, plan, op, shape, io);
    if (io != NULL)
        plan_regret(ctx, plan, op, shape);
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
        hd__op_text(r->op, &r->shape, HD_TEXT_KEY, key, sizeof key);
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
        snprintf(buf, size, "cost model from %s: %s %.2f us (migration %.2f us)",
                 plan->calibrated ? "the calibration"
                                  : "the backends' default rates (no calibration)",
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
