/*
 * Tuning one case: random inputs, the float64 reference check of every candidate (each backend
 * that takes the case, with its default parameters and the variants it lists), timing of the
 * correct ones (median after warm-up; device events on a GPU, host wall time on a machine whose
 * OpenCL device is its CPU), a confirming re-timing of the finalists, and the record of the
 * winner with its margin over the best candidate of another backend.
 *
 * Candidates run through the backend's op slot directly, as the dispatcher would run them
 * (argument check, inputs made resident at the backend's place, the variant in the arguments),
 * so that a variant can be chosen per call without touching the context's selection.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/calibrate.h"
#include "autotune/case_params.h"
#include "autotune/choose.h"
#include "autotune/measure.h"
#include "autotune/reference.h"
#include "autotune/tool/tool.h"
#include "dispatch/device.h"
#include "core/error.h"
#include "core/op.h"
#include "dispatch/tools.h"

#define MAX_VARIANTS 64

/* A CPU finalist this close to the best (a ratio of times) is timed again with the cores
 * free of builds ahead. */
#define CPU_CLOSE 1.25

/* Inputs and outputs of one case at most (attention's backward: six and three). */
#define MAX_INPUTS  6
#define MAX_OUTPUTS 3

typedef struct tune_data {
    hd_op op;
    hd_shape shape;
    hd_case_params params;   /* the call's scalars and ids, as the int32 tensor it takes */
    float *host[MAX_INPUTS]; /* NULL where the case leaves an optional input out */
    size_t rows[MAX_INPUTS], cols[MAX_INPUTS];
    int inputs;
    hd_tensor *in[MAX_INPUTS];
    hd_tensor *out[MAX_OUTPUTS];
    size_t out_rows[MAX_OUTPUTS], out_cols[MAX_OUTPUTS];
    int outputs;
    float *before[MAX_OUTPUTS]; /* what an output the op reads holds before a checked call */
    hd_ref_inputs ref;          /* the forward ops' reference inputs (the first four) */
    hd_ref_backward_memo memo;  /* the backward ops' checks: what they share */
    hd_ref_expect expect;       /* the step ops' checks: the sampled expected values */
    hd_call call;
    hd_backend backend; /* the candidate being run */
    const char *variant;
} tune_data;

static float rnd(unsigned long long *s, float lo, float hi)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((*s >> 40) & 0xffffff) / 16777216.0f;
}

static void free_data(tune_data *d)
{
    for (int i = 0; i < d->inputs; i++) {
        hd_tensor_destroy(d->in[i]);
        free(d->host[i]);
    }
    for (int i = 0; i < d->outputs; i++) {
        hd_tensor_destroy(d->out[i]);
        free(d->before[i]);
    }
    hd__ref_backward_memo_free(&d->memo);
    hd__ref_step_expect_free(&d->expect);
    hd__case_params_free(&d->params);
    memset(d, 0, sizeof *d);
}

/* n random floats in [lo, hi) from *st; NULL without memory. */
static float *random_floats(unsigned long long *st, size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t e = 0; p != NULL && e < n; e++)
        p[e] = rnd(st, lo, hi);
    return p;
}

/* Output o of the case (tensor i of the op): its tensor, unless the case leaves it out, and
 * where the op reads it, contents to start from. */
static hd_status make_output(hd_context *ctx, const hd_bench_case *c, int i, size_t rows,
                             size_t cols, unsigned long long *st, tune_data *d)
{
    int o = d->outputs++;
    d->out_rows[o] = rows;
    d->out_cols[o] = cols;
    if (hd__case_tensor_left_out(c->op, i))
        return HD_OK;
    if (hd__case_reads_output(c->op) &&
        (d->before[o] = random_floats(st, rows * cols, -1, 1)) == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "%zu floats of an output", rows * cols);
    return hd_tensor_create(ctx, rows, cols, &d->out[o]);
}

/* Inputs of the case's shape with fresh random values in the op table's ranges; checks the
 * arguments as the public call does, which builds the call. */
static hd_status make_data(hd_context *ctx, const hd_bench_case *c, tune_data *d)
{
    memset(d, 0, sizeof *d);
    d->op = c->op;
    d->shape = c->shape;
    const hd_op_desc *desc = hd__op(c->op);
    int outputs = 0;
    for (int i = 0; i < desc->tensor_count; i++)
        outputs += desc->tensors[i].role == HD_ROLE_OUTPUT;
    if (outputs > MAX_OUTPUTS || desc->tensor_count - outputs > MAX_INPUTS)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "%s has %d tensors: more than the tuner holds",
                         hd_op_name(c->op), desc->tensor_count);
    static unsigned long long seed = 0x5eed;
    seed += 0x9e3779b97f4a7c15ull;
    unsigned long long st = seed;
    if (!hd__case_params_make(c, seed, &d->params))
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "the ids of %s", hd_op_name(c->op));
    const hd_tensor *t[HD_OP_TENSOR_MAX] = {NULL};
    hd_status r = hd__case_params_id_tensor(ctx, &d->params);
    for (int i = 0; i < desc->tensor_count && r == HD_OK; i++) {
        const hd_op_tensor *spec = &desc->tensors[i];
        size_t rows, cols;
        hd__op_tensor_shape(c->op, i, &c->shape, &rows, &cols);
        if (spec->role == HD_ROLE_OUTPUT) {
            r = make_output(ctx, c, i, rows, cols, &st, d);
            t[i] = d->out[d->outputs - 1];
            continue;
        }
        int k = d->inputs++;
        if (hd__case_tensor_left_out(c->op, i))
            continue;
        d->rows[k] = rows;
        d->cols[k] = cols;
        if ((d->host[k] = random_floats(&st, rows * cols, spec->lo, spec->hi)) == NULL)
            return HD_ERR_OUT_OF_MEMORY;
        r = hd_tensor_create(ctx, rows, cols, &d->in[k]);
        if (r == HD_OK)
            r = hd_tensor_write(d->in[k], d->host[k]);
        if (k < 4)
            d->ref.in[k] = d->host[k];
        t[i] = d->in[k];
    }
    if (r != HD_OK)
        return r;
    const hd_op_params *p = &d->params.p;
    d->ref.alpha = p->alpha;
    d->ref.beta = p->beta;
    d->ref.scale = p->scale;
    d->ref.eps = p->eps;
    d->ref.precision = hd_context_gemm_precision(ctx);
    return hd__call_prepare(ctx, c->op, t, p, &d->call);
}

/* The float64 part of a step op's check, once per case: the expected values of the sampled
 * outputs, from the inputs and the outputs' contents before the call where the op reads them,
 * with the context's GEMM precision (the LM head's products). */
static void expect_step(const hd_context *ctx, tune_data *d)
{
    const float *in[MAX_INPUTS + MAX_OUTPUTS] = {NULL};
    int n = 0;
    for (int i = 0; i < d->inputs; i++)
        in[n++] = d->host[i];
    for (int o = 0; o < d->outputs; o++)
        if (d->before[o] != NULL)
            in[n++] = d->before[o];
    hd_shape s = d->shape;
    s.precision = hd_context_gemm_precision(ctx);
    hd__ref_step_expect(d->op, &s, &d->params.p, in, &d->expect);
}

/* One call of the candidate, made as the dispatcher makes it. */
static hd_status run_candidate(hd_context *ctx, void *user, size_t set)
{
    (void)set;
    tune_data *d = user;
    hd_call call = d->call;
    return hd__call_run_on(ctx, d->backend, &call, d->variant);
}

/* Whether the outputs read back into got match the reference; why says how they do not. */
static bool outputs_correct(tune_data *d, const hd_context *ctx, float *const got[], char *why,
                            size_t size)
{
    if (hd__ref_is_step(d->op))
        return hd__ref_step_compare(&d->expect, (const float *const *)got, why, size) <= 1.0;
    if (!hd__ref_is_backward(d->op))
        return hd__ref_check(d->op, &d->shape, &d->ref, got[0], why, size) <= 1.0;
    const float *const *in = (const float *const *)d->host, *const *out = (const float *const *)got;
    double worst = hd__ref_check_backward(d->op, &d->shape, in, out, d->outputs, d->ref.scale,
                                          d->ref.eps, hd_context_gemm_precision(ctx), &d->memo);
    if (worst <= 1.0)
        return true;
    snprintf(why, size, "an output is %.3g times its tolerance from the reference", worst);
    return false;
}

/* Runs the candidate once on outputs full of NaN and checks the results. */
static bool candidate_correct(hd_context *ctx, tune_data *d, char *why, size_t size,
                              double *first_s, double *build_s)
{
    float *got[MAX_OUTPUTS] = {NULL}; /* NULL for an output left out: not checked */
    bool have = true;
    for (int o = 0; o < d->outputs && have; o++) { /* NaN, or what an output read starts from */
        size_t n = d->out_rows[o] * d->out_cols[o];
        if (d->out[o] == NULL)
            continue;
        have &= (got[o] = malloc((n ? n : 1) * sizeof *got[o])) != NULL;
        for (size_t i = 0; have && i < n; i++)
            got[o][i] = d->before[o] != NULL ? d->before[o][i] : NAN;
    }
    if (!have) {
        snprintf(why, size, "no memory");
        for (int o = 0; o < d->outputs; o++)
            free(got[o]);
        return false;
    }
    /* A first call builds the kernels: not part of the time that judges the candidate. */
    double t_build = hd__measure_now();
    hd_status s = run_candidate(ctx, d, 0);
    if (s == HD_OK)
        s = hd_sync(ctx);
    t_build = hd__measure_now() - t_build;
    for (int o = 0; o < d->outputs && s == HD_OK; o++)
        s = got[o] != NULL ? hd_tensor_write(d->out[o], got[o]) : HD_OK;
    if (s == HD_OK)
        s = hd_sync(ctx);
    double t0 = hd__measure_now();
    if (s == HD_OK)
        s = run_candidate(ctx, d, 0);
    if (s == HD_OK)
        s = hd_sync(ctx);
    *first_s = hd__measure_now() - t0;
    *build_s = t_build > *first_s ? t_build - *first_s : 0.0;
    for (int o = 0; o < d->outputs && s == HD_OK; o++)
        s = got[o] != NULL ? hd_tensor_read(d->out[o], got[o]) : HD_OK;
    bool ok = false;
    if (s != HD_OK)
        snprintf(why, size, "%s: %s", hd_status_name(s), hd_context_last_error(ctx));
    else
        ok = outputs_correct(d, ctx, got, why, size);
    for (int o = 0; o < d->outputs; o++)
        free(got[o]);
    return ok;
}

/* The CPU's time for the case by the model of one GEMM rate, to skip hopeless CPU runs when
 * a GPU takes the case. */

typedef hd_tune_candidate candidate;

/* Each backend that takes the case with its defaults, then the variants each lists: where the
 * case's budget runs out early, every backend's defaults were timed before any variant (a
 * budget that took CLBlast's defaults and its parameter sets first left the fused backend's
 * defaults, the faster, untimed: commit c2612c3). The count. */
static size_t list_candidates(hd_context *ctx, const hd_bench_case *c, const tool_effort *e,
                              candidate *cand)
{
    size_t count = 0;
    const char *variants[MAX_VARIANTS];
    bool takes[HD_BACKEND_COUNT] = {false};
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++) {
        if (e->left_out[b] || !hd__backend_takes(ctx, (hd_backend)b, c->op, &c->shape))
            continue;
        /* Only a GPU makes a slow CPU call hopeless: an OpenCL device on the CPU (PoCL) shares
         * its cores and is itself slower than the CPU backend on large GEMMs. */
        if (b == HD_BACKEND_CPU && hd__measure_device_is_gpu(ctx) &&
            hd__calibrate_estimate_s(ctx, &e->cal, b, c->op, &c->shape) > e->cpu_limit_s)
            continue;
        takes[b] = true;
        cand[count++] = (candidate){.backend = (hd_backend)b};
    }
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++) {
        if (!takes[b])
            continue;
        /* CLBlast's sets each cost a CLBlast build; the library's own kernels build fast */
        size_t max = e->defaults_only ? 0 : b == HD_BACKEND_CLBLAST ? e->clblast_sets : e->variants;
        if (max > MAX_VARIANTS)
            max = MAX_VARIANTS;
        size_t n = hd__backend_variants(ctx, (hd_backend)b, c->op, &c->shape, variants, max);
        for (size_t i = 0; i < n && i < max; i++)
            cand[count++] = (candidate){.backend = (hd_backend)b, .variant = variants[i]};
    }
    return count;
}

#define FINALISTS 4
/* Variants of a backend whose defaults take this many times the best so far are not tried. */
#define HOPELESS 3.0

/* The median time of the candidate d names in mode, within budget_s; false if timing failed. */
static bool time_in_mode(hd_context *ctx, tune_data *d, hd_measure_mode mode, unsigned min_runs,
                         double budget_s, double *median_s)
{
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, mode);
    cfg.warmup = 2;
    cfg.min_runs = min_runs;
    cfg.max_runs = 1000;
    cfg.budget_s = budget_s;
    hd_measure_result r;
    if (hd__measure(ctx, &cfg, run_candidate, d, &r) != HD_OK)
        return false;
    *median_s = r.median_s;
    return true;
}

/* The candidate's time as the tuner judges it. On a GPU that is device time (the CPU backend's
 * is its host wall time). An OpenCL device on the CPU (PoCL) shares the host's cores with the
 * runtime that feeds it, and its events leave that work out, so there every candidate is timed
 * by host wall time to completion instead. */
static bool time_one(hd_context *ctx, tune_data *d, unsigned min_runs, double budget_s,
                     double *median_s)
{
    hd_measure_mode mode = hd__measure_device_is_gpu(ctx) || !hd__measure_has_device(ctx)
                               ? HD_MEASURE_DEVICE
                               : HD_MEASURE_SYNC;
    return time_in_mode(ctx, d, mode, min_runs, budget_s, median_s);
}

static const char *variant_text(const candidate *c)
{
    return c->variant ? c->variant : "-";
}

/* The case's clock: its budget and what its calls have shown so far. */
typedef struct case_clock {
    const hd_context *ctx;  /* whose backends estimate the calls */
    double start, budget_s; /* budget 0: unlimited */
    bool gpu;
    double call_s[HD_BACKEND_COUNT]; /* a backend's measured call, 0 until one ran */
    /* The mean first-call overhead (a kernel build) of a backend's variants timed so far, and
     * before the first the defaults' (which build every program the op needs, where a variant
     * builds one: an estimate on the safe side until a variant shows its own) */
    double build_s[HD_BACKEND_COUNT];
    unsigned builds[HD_BACKEND_COUNT];
} case_clock;

static double left_s(const case_clock *k)
{
    return k->budget_s > 0 ? k->budget_s - (hd__measure_now() - k->start) : INFINITY;
}

/* Seconds one call of c is expected to take: its backend's measured call, else the backend's
 * own estimate from the calibration. */
static double call_estimate_s(const case_clock *k, const tune_data *d, const tool_effort *e,
                              hd_backend b)
{
    if (k->call_s[b] > 0)
        return k->call_s[b];
    return hd__calibrate_estimate_s(k->ctx, &e->cal, b, d->op, &d->shape);
}

/* Seconds a candidate takes in all with calls of call_s: the first and the checked call, the
 * warm-up and the timing (at least min_runs calls, at least the budget), and a build for a
 * variant (the defaults' build cannot be known before the first of them runs). */
static double candidate_cost_s(const case_clock *k, const tool_effort *e, const candidate *c,
                               double call_s)
{
    double timing = fmax((4.0 + e->min_runs) * call_s, e->budget_s + 4.0 * call_s);
    return (c->variant != NULL ? k->build_s[c->backend] : 0.0) + timing;
}

/* Timed calls that fit in left_s seconds at call_s each, between 1 and e->min_runs. */
static unsigned runs_that_fit(const tool_effort *e, double call_s, double left)
{
    double fit = call_s > 0 ? left / call_s - 2.0 : e->min_runs;
    return fit >= e->min_runs ? e->min_runs : fit >= 1.0 ? (unsigned)fit : 1u;
}

/* Says that a candidate was skipped: always for a backend's defaults (a backend missing from
 * the comparison must be visible), only with --verbose for a variant. */
static void say_skipped(bool verbose, const candidate *c, const char *fmt, double a, double b)
{
    if (!verbose && c->variant != NULL)
        return;
    char reason[160];
    snprintf(reason, sizeof reason, fmt, a, b);
    fprintf(hd__measure_stderr(), "  %s %s: skipped: %s\n", hd_backend_name(c->backend),
            variant_text(c), reason);
}

/* hd__tune_order() with the estimated call of each backend's defaults. */
static void candidate_order(const case_clock *k, const tune_data *d, const tool_effort *e,
                            const candidate *cand, size_t count, size_t *order)
{
    double est_s[HD_BACKEND_COUNT] = {0.0};
    for (size_t i = 0; i < count; i++)
        if (cand[i].variant == NULL)
            est_s[cand[i].backend] = call_estimate_s(k, d, e, cand[i].backend);
    hd__tune_order(cand, count, est_s, order);
}

/* Says why a candidate that ran was left out of the comparison: always for a backend's
 * defaults (as say_skipped), only with --verbose for a variant. */
static void say_left_out(bool verbose, const candidate *c, const char *what, const char *reason)
{
    if (!verbose && c->variant != NULL)
        return;
    fprintf(hd__measure_stderr(), "  %s %s: %s: %s\n", hd_backend_name(c->backend), variant_text(c),
            what, reason);
}

/* Queues the programs of the variants order[from..count) names on the build-ahead workers, in
 * that order. A variant its backend refuses is refused again, with its message, when it runs. */
static void queue_builds(hd_context *ctx, const tune_data *d, const candidate *cand,
                         const size_t *order, size_t from, size_t count)
{
    for (size_t n = from; n < count; n++)
        if (cand[order[n]].variant != NULL &&
            hd__backend_build_ahead(ctx, cand[order[n]].backend, d->op, &d->shape,
                                    cand[order[n]].variant) != HD_OK)
            hd__error_clear(ctx);
}

/* Checks and times the candidates on d within the case budget, in hd__tune_order()'s order;
 * the index of the fastest correct one, or -1. why gets the first rejection. untimed_s[b]
 * gets the estimated call of backend b's defaults where the budget left them untimed and no
 * variant of b was timed, else stays 0. */
static int time_candidates(hd_context *ctx, tune_data *d, const tool_effort *e, bool verbose,
                           candidate *cand, size_t count, case_clock *k, size_t *skipped,
                           double untimed_s[HD_BACKEND_COUNT], char *why, size_t why_size)
{
    int best = -1;
    double defaults_s[HD_BACKEND_COUNT] = {0.0}; /* each backend's defaults, once timed */
    size_t order[HD_BACKEND_COUNT * MAX_VARIANTS];
    candidate_order(k, d, e, cand, count, order);
    /* The variants' programs go to the build-ahead workers in this order, where they run
     * (--build-threads): each is built while the candidates before it are timed, the
     * backends' defaults first (the CPU's timed on the host beside the builds: confirm_best
     * times it again with the cores free where it is a close finalist). */
    if (e->build_ahead)
        queue_builds(ctx, d, cand, order, 0, count);
    size_t defaults = 0;
    for (size_t n = 0; n < count; n++)
        defaults += cand[n].variant == NULL;
    for (size_t n = 0; n < count && !hd__tool_interrupted; n++) {
        if (n == defaults && n > 0) {
            /* the defaults ran: the variants of the backend measured fastest go first, those
             * of a backend whose defaults were not timed last, and the builds ahead follow
             * the new order (those built or under way stay) */
            double measured_s[HD_BACKEND_COUNT];
            for (int b = 0; b < HD_BACKEND_COUNT; b++)
                measured_s[b] = defaults_s[b] > 0.0 ? defaults_s[b] : INFINITY;
            hd__tune_order(cand, count, measured_s, order);
            if (e->build_ahead) {
                hd__device_build_ahead_cancel(ctx, false);
                queue_builds(ctx, d, cand, order, n, count);
            }
        }
        size_t i = order[n];
        /* What cannot finish within what is left of the case is not started: a call once
         * queued cannot be stopped. */
        double call_s = call_estimate_s(k, d, e, cand[i].backend);
        double cost = candidate_cost_s(k, e, &cand[i], call_s);
        if (cost > left_s(k)) {
            (*skipped)++;
            if (cand[i].variant == NULL)
                untimed_s[cand[i].backend] = call_s;
            say_skipped(verbose, &cand[i], "est. %.3g s > %.3g s left of the case budget", cost,
                        fmax(left_s(k), 0.0));
            continue;
        }
        /* Variants tune a backend, they do not rescue it: one whose defaults are several
         * times slower than the best so far (PoCL next to the CPU backend) skips them. */
        if (cand[i].variant != NULL && best >= 0 &&
            defaults_s[cand[i].backend] > HOPELESS * cand[best].median_s) {
            if (verbose)
                fprintf(hd__measure_stderr(), "  %s %s: skipped: its defaults are %.1fx the best\n",
                        hd_backend_name(cand[i].backend), variant_text(&cand[i]),
                        defaults_s[cand[i].backend] / cand[best].median_s);
            continue;
        }
        d->backend = cand[i].backend;
        d->variant = cand[i].variant;
        char fail[512];
        double first_s = 0.0, build_s = 0.0, checked_at = hd__measure_now();
        bool correct = candidate_correct(ctx, d, fail, sizeof fail, &first_s, &build_s);
        double check_s = hd__measure_now() - checked_at;
        if (cand[i].variant != NULL) {
            unsigned seen = k->builds[d->backend]++;
            k->build_s[d->backend] = (k->build_s[d->backend] * seen + build_s) / (seen + 1);
        } else if (k->builds[d->backend] == 0) {
            k->build_s[d->backend] = build_s;
        }
        /* A backend's defaults build its kernels once for the whole run (later cases reuse
         * them): that build is not charged to this case, nor is the check of their results
         * against the reference (a large case's outputs, fetched and compared, take longer
         * than its calls), or the backends that come first leave the later ones' defaults
         * untimed (a long case of LoRA at rank 64 timed CLBlast alone, the slower of the two;
         * at the end of a --max-time run, LoRA backward at 4096 tokens timed CLBlast alone,
         * again the slower: commit 275f03a). A variant's build and check are charged: there
         * can be dozens of them. */
        if (cand[i].variant == NULL) {
            /* the check ran the call twice: the first run (its build aside) and the checked
             * one stay charged */
            double uncharged = fmax(build_s, check_s - 2.0 * first_s);
            k->start += uncharged;
            if (verbose && uncharged > 1e-3)
                fprintf(hd__measure_stderr(),
                        "  %s -: builds and check %.3g s over its two calls, not charged "
                        "to the case\n",
                        hd_backend_name(d->backend), uncharged);
        }
        if (!correct) {
            say_left_out(verbose, &cand[i], "rejected", fail);
            if (why[0] == '\0')
                snprintf(why, why_size, "%s: %s", hd_backend_name(d->backend), fail);
            continue;
        }
        /* A checked call that decides the candidate's fate and took far over its estimate
         * is run once more where the budget holds it (hd__tune_checked_call) */
        double best_s = best >= 0 ? cand[best].median_s : 0.0;
        hd_tune_checked verdict = hd__tune_checked_call(first_s, call_s, best_s, left_s(k), false);
        if (verdict == HD_TUNE_CHECKED_RUN_AGAIN) {
            double again_s = hd__measure_now();
            hd_status again = run_candidate(ctx, d, 0);
            if (again == HD_OK)
                again = hd_sync(ctx);
            again_s = hd__measure_now() - again_s;
            if (again == HD_OK && again_s < first_s)
                first_s = again_s;
            verdict = hd__tune_checked_call(first_s, call_s, best_s, left_s(k), true);
        }
        if (verdict == HD_TUNE_CHECKED_STALLED) {
            (*skipped)++;
            if (cand[i].variant == NULL)
                untimed_s[cand[i].backend] = call_s;
            say_skipped(verbose, &cand[i],
                        "its checked call took %.3g s, %.0fx its estimate, with no time left "
                        "to run it again",
                        first_s, first_s / call_s);
            continue;
        }
        if (k->call_s[d->backend] <= 0)
            k->call_s[d->backend] = first_s;
        /* Far slower than the best so far on both calls: not worth a full timing. */
        if (verdict == HD_TUNE_CHECKED_HOPELESS) {
            char reason[64];
            snprintf(reason, sizeof reason, "its first call took %.1fx the best", first_s / best_s);
            say_left_out(verbose, &cand[i], "skipped", reason);
            continue;
        }
        /* The checked call (kernels built, so run time alone) may show the model was
         * optimistic: one timed call must still fit. */
        if (verdict == HD_TUNE_CHECKED_OVER_BUDGET) {
            (*skipped)++;
            if (cand[i].variant == NULL)
                untimed_s[cand[i].backend] = first_s;
            say_skipped(verbose, &cand[i],
                        "its checked call took %.3g s, %.3g s left of the case "
                        "budget",
                        first_s, fmax(left_s(k), 0.0));
            continue;
        }
        double median_s;
        unsigned runs = runs_that_fit(e, first_s, left_s(k));
        if (!time_one(ctx, d, runs, fmin(e->budget_s, fmax(left_s(k), 0.0)), &median_s)) {
            say_left_out(verbose, &cand[i], "timing failed", hd_context_last_error(ctx));
            continue;
        }
        if (hd__tool_interrupted)
            break;
        cand[i].ok = true;
        cand[i].median_s = median_s;
        untimed_s[cand[i].backend] = 0.0; /* the backend was compared after all */
        if (cand[i].variant == NULL) {
            defaults_s[cand[i].backend] = median_s;
            k->call_s[cand[i].backend] = median_s;
        }
        if (verbose) {
            char time[32];
            hd__tool_time_text(median_s * 1e6, time, sizeof time);
            fprintf(hd__measure_stderr(), "  %-14s %12s  %s\n", hd_backend_name(d->backend), time,
                    variant_text(&cand[i]));
        }
        if (best < 0 || median_s < cand[best].median_s)
            best = (int)i;
    }
    return best;
}

/*
 * The first pass times each candidate once, at another moment than the others: on small ops the
 * differences between the best few are within the drift of the device, and the minimum of
 * dozens of noisy medians favours whichever was lucky. So the finalists (the three fastest and
 * the winner's backend with its defaults) are timed again, in turn, confirm_rounds times; each
 * finalist's time becomes the median of its first and confirming medians.
 *
 * Device time alone misses what a backend costs on the host and between its launches: CLBlast's
 * gemm 4096x4096x4096 took less device time than the fused engine's and more per call queued back
 * to back (commit 69ab3e7). So on a GPU, where the finalists come from more than one backend, each
 * confirming round also times them queued (chain mode), and the winner is the finalist whose worse
 * ratio to the best of the two modes is least: within 5 % of the best in both wherever one finalist
 * is. Returns the winner.
 */
static int confirm_best(hd_context *ctx, tune_data *d, const tool_effort *e, bool verbose,
                        candidate *cand, size_t count, int best, const case_clock *k)
{
    int fin[FINALISTS];
    size_t nfin = 0;
    for (size_t round = 0; round < FINALISTS - 1; round++) {
        int next = -1;
        for (size_t i = 0; i < count; i++) {
            bool taken = false;
            for (size_t f = 0; f < nfin; f++)
                taken |= fin[f] == (int)i;
            if (cand[i].ok && !taken && (next < 0 || cand[i].median_s < cand[next].median_s))
                next = (int)i;
        }
        if (next >= 0)
            fin[nfin++] = next;
    }
    int defaults = hd__tune_fastest(cand, count, cand[best].backend, true);
    bool have_defaults = false;
    for (size_t f = 0; f < nfin; f++)
        have_defaults |= fin[f] == defaults;
    if (defaults >= 0 && !have_defaults)
        fin[nfin++] = defaults;
    if (nfin < 2)
        return best;
    /* a close finalist timed on the host (within CPU_CLOSE of the best) waits for the builds
     * ahead under way, which take cores; a far one is not worth the wait, in every small case
     * (without confirming rounds, the finalists are weighed on their first times alone) */
    for (size_t f = 0; f < nfin && e->build_ahead && e->confirm_rounds > 0; f++)
        if (cand[fin[f]].backend == HD_BACKEND_CPU &&
            cand[fin[f]].median_s <= CPU_CLOSE * cand[best].median_s) {
            hd__device_build_ahead_cancel(ctx, true);
            break;
        }
    bool queued = false; /* finalists of several backends on a GPU: chain mode too */
    for (size_t f = 1; f < nfin; f++)
        queued |= k->gpu && cand[fin[f]].backend != cand[fin[0]].backend;

    double samples[FINALISTS][1 + 8], chain[FINALISTS][8], chain_s[FINALISTS];
    size_t taken[FINALISTS], chained[FINALISTS];
    for (size_t f = 0; f < nfin; f++) {
        samples[f][0] = cand[fin[f]].median_s;
        taken[f] = 1;
        chained[f] = 0;
    }
    unsigned rounds = e->confirm_rounds < 8 ? e->confirm_rounds : 8;
    /* As many rounds as fit in what is left of the case budget; a chain sample takes about
     * 2 ms of calls, at least 4 (measure.c) */
    double round_s = 0.0;
    for (size_t f = 0; f < nfin; f++) {
        double call_s = cand[fin[f]].median_s;
        round_s += fmax(e->budget_s / 2, (3.0 + e->min_runs) * call_s);
        if (queued)
            round_s += fmax(e->budget_s / 2, (3.0 + e->min_runs) * fmax(2e-3, 4.0 * call_s));
    }
    if (round_s > 0 && (double)rounds * round_s > left_s(k))
        rounds = left_s(k) > round_s ? (unsigned)(left_s(k) / round_s) : 0;
    for (unsigned r = 0; r < rounds && !hd__tool_interrupted; r++) {
        for (size_t f = 0; f < nfin; f++) {
            d->backend = cand[fin[f]].backend;
            d->variant = cand[fin[f]].variant;
            double median_s;
            if (time_one(ctx, d, e->min_runs, e->budget_s / 2, &median_s))
                samples[f][taken[f]++] = median_s;
            if (queued &&
                time_in_mode(ctx, d, HD_MEASURE_CHAIN, e->min_runs, e->budget_s / 2, &median_s))
                chain[f][chained[f]++] = median_s;
        }
    }
    double device_s[FINALISTS];
    hd_backend backend[FINALISTS];
    for (size_t f = 0; f < nfin; f++) {
        candidate *c = &cand[fin[f]];
        backend[f] = c->backend;
        device_s[f] = c->median_s = hd__measure_median(samples[f], taken[f]);
        chain_s[f] = chained[f] > 0 ? hd__measure_median(chain[f], chained[f]) : NAN;
        if (verbose) {
            char time[32], queued_time[32] = "";
            hd__tool_time_text(c->median_s * 1e6, time, sizeof time);
            if (chained[f] > 0)
                hd__tool_time_text(chain_s[f] * 1e6, queued_time, sizeof queued_time);
            fprintf(hd__measure_stderr(), "  confirmed %-14s %12s  %s%s%s\n",
                    hd_backend_name(c->backend), time, variant_text(c),
                    chained[f] > 0 ? "  chain: " : "", queued_time);
        }
    }
    return fin[hd__tune_balanced(device_s, chain_s, backend, nfin, k->gpu)];
}

/* The recorded candidate (autotune/choose.c), said when a preference moved the choice to
 * another backend. */
static int apply_preferences(hd_context *ctx, const candidate *cand, size_t count, int fastest,
                             bool verbose)
{
    int chosen = hd__tune_choose(cand, count, fastest, hd__measure_device_is_gpu(ctx));
    if (verbose && chosen >= 0 && cand[chosen].backend != cand[fastest].backend)
        fprintf(hd__measure_stderr(), "  preferred %s over %s, %.1f%% slower\n",
                hd_backend_name(cand[chosen].backend), hd_backend_name(cand[fastest].backend),
                (cand[chosen].median_s / cand[fastest].median_s - 1.0) * 100.0);
    return chosen;
}

/* The record of the winner, with its margin over the best candidate of another backend. */
static void make_record(const hd_bench_case *c, const candidate *cand, size_t count, int best,
                        hd_tune_record *rec, char *best_clblast, size_t best_size)
{
    int second = -1, clblast_best = -1;
    for (size_t i = 0; i < count; i++) {
        if (!cand[i].ok)
            continue;
        if (cand[i].backend != cand[best].backend &&
            (second < 0 || cand[i].median_s < cand[second].median_s))
            second = (int)i;
        if (cand[i].backend == HD_BACKEND_CLBLAST &&
            (clblast_best < 0 || cand[i].median_s < cand[clblast_best].median_s))
            clblast_best = (int)i;
    }
    memset(rec, 0, sizeof *rec);
    rec->op = c->op;
    rec->shape = c->shape;
    rec->backend = cand[best].backend;
    snprintf(rec->variant, sizeof rec->variant, "%s", cand[best].variant ? cand[best].variant : "");
    /* hd__tune_put() clamps both into what the cache's reader takes */
    rec->median_us = cand[best].median_s * 1e6;
    rec->runner_up = second >= 0 ? cand[second].backend : HD_BACKEND_AUTO;
    /* a winner timed at 0 (a call that queued nothing) has no ratio: an infinite margin is
     * clamped, 0/0 would be NaN */
    rec->margin_pct = second < 0 ? 0.0
                      : cand[best].median_s > 0.0
                          ? (cand[second].median_s / cand[best].median_s - 1.0) * 100.0
                      : cand[second].median_s > 0.0 ? HD_TUNE_MARGIN_MAX_PCT
                                                    : 0.0;
    if (clblast_best >= 0)
        snprintf(best_clblast, best_size, "%s",
                 cand[clblast_best].variant ? cand[clblast_best].variant : "-");
}

/* Whether any backend of the context, those --backends leaves out included, takes c. */
static bool any_backend_takes(const hd_context *ctx, const hd_bench_case *c)
{
    for (int b = HD_BACKEND_CPU; b < HD_BACKEND_COUNT; b++)
        if (hd__backend_takes(ctx, (hd_backend)b, c->op, &c->shape))
            return true;
    return false;
}

bool hd__tool_tune_case(hd_context *ctx, const hd_bench_case *c, const tool_effort *e, bool verbose,
                        bool dry_run, hd_tune_record *rec, tool_case_outcome *out, char *why,
                        size_t why_size)
{
    memset(out, 0, sizeof *out);
    why[0] = '\0';
    candidate cand[HD_BACKEND_COUNT * MAX_VARIANTS];
    size_t count = list_candidates(ctx, c, e, cand);
    if (dry_run) { /* in the order they would be timed (the variants, once the defaults ran,
                      by the defaults' measured times); the defaults with their estimate */
        case_clock k = {.ctx = ctx, .gpu = hd__measure_device_is_gpu(ctx)};
        tune_data d = {.op = c->op, .shape = c->shape};
        size_t order[HD_BACKEND_COUNT * MAX_VARIANTS];
        candidate_order(&k, &d, e, cand, count, order);
        for (size_t n = 0; n < count; n++) {
            const candidate *ci = &cand[order[n]];
            if (ci->variant != NULL) {
                printf("    %-14s %s\n", hd_backend_name(ci->backend), ci->variant);
                continue;
            }
            char time[32];
            hd__tool_time_text(call_estimate_s(&k, &d, e, ci->backend) * 1e6, time, sizeof time);
            printf("    %-14s (default parameters, est. %s per call)\n",
                   hd_backend_name(ci->backend), time);
        }
        snprintf(why, why_size, "dry run");
        return false;
    }
    if (count == 0) {
        out->untaken = !any_backend_takes(ctx, c);
        snprintf(why, why_size, "%s",
                 out->untaken ? "no backend here computes it" : "no backend takes it");
        return false;
    }
    tune_data d;
    if (make_data(ctx, c, &d) != HD_OK) {
        snprintf(why, why_size, "inputs: %s", hd_context_last_error(ctx));
        free_data(&d);
        return false;
    }
    /* the backward and step checks' shared reference: a cost of the case, not of its first
     * candidate */
    hd__ref_backward_prepare(d.op, &d.shape, (const float *const *)d.host, &d.memo);
    if (hd__ref_is_step(d.op))
        expect_step(ctx, &d);
    case_clock k = {.ctx = ctx,
                    .start = hd__measure_now(),
                    .budget_s = e->case_target_s,
                    .gpu = hd__measure_device_is_gpu(ctx)};
    double untimed_s[HD_BACKEND_COUNT] = {0.0};
    int best = time_candidates(ctx, &d, e, verbose, cand, count, &k, &out->skipped, untimed_s, why,
                               why_size);
    /* the case's variants not started are not built: the next case queues its own (those
     * built and not taken stay for a later case of the same parameters) */
    if (e->build_ahead)
        hd__device_build_ahead_cancel(ctx, false);
    if (best >= 0)
        best = apply_preferences(ctx, cand, count,
                                 confirm_best(ctx, &d, e, verbose, cand, count, best, &k), verbose);
    free_data(&d);
    if (hd__tool_interrupted) /* a comparison cut short is no record */
        best = -1;
    /* Nor is one that left untimed the defaults of a backend estimated within HOPELESS of the
     * winner (hd__tune_untimed_contender) */
    hd_backend untimed = best >= 0 ? hd__tune_untimed_contender(untimed_s, cand[best].backend,
                                                                cand[best].median_s, HOPELESS)
                                   : HD_BACKEND_AUTO;
    if (untimed != HD_BACKEND_AUTO) {
        out->incomplete = true;
        snprintf(why, why_size,
                 "%s's defaults (est. %.3g s a call) did not fit the case budget, and %s's "
                 "%.3g s was not timed against them",
                 hd_backend_name(untimed), untimed_s[untimed], hd_backend_name(cand[best].backend),
                 cand[best].median_s);
        best = -1;
    }
    if (best < 0) {
        out->over_budget =
            !hd__tool_interrupted && !out->incomplete && why[0] == '\0' && out->skipped > 0;
        if (hd__tool_interrupted)
            snprintf(why, why_size, "interrupted");
        else if (out->over_budget)
            snprintf(why, why_size,
                     "skipped: every candidate is estimated over the case budget "
                     "of %.3g s (--case-budget-s, --max-time)",
                     e->case_target_s);
        else if (why[0] == '\0')
            snprintf(why, why_size, "no candidate could be timed");
        return false;
    }
    make_record(c, cand, count, best, rec, out->best_clblast, sizeof out->best_clblast);
    return true;
}

/* The estimated cost of timing each candidate of c that e lists, summed; with within_budget,
 * a candidate over the case budget counts nothing (it would be skipped) and the sum stops at
 * the budget. */
static double candidates_cost_s(hd_context *ctx, const hd_bench_case *c, const tool_effort *e,
                                bool within_budget)
{
    candidate cand[HD_BACKEND_COUNT * MAX_VARIANTS];
    size_t count = list_candidates(ctx, c, e, cand);
    case_clock k = {.ctx = ctx, .gpu = hd__measure_device_is_gpu(ctx)};
    tune_data d = {.op = c->op, .shape = c->shape};
    bool capped = within_budget && e->case_target_s > 0;
    double total = 0.0;
    for (size_t i = 0; i < count; i++) {
        double cost =
            candidate_cost_s(&k, e, &cand[i], call_estimate_s(&k, &d, e, cand[i].backend));
        if (!capped || cost <= e->case_target_s)
            total += cost;
    }
    return capped && total > e->case_target_s ? e->case_target_s : total;
}

double hd__tool_estimate_case(hd_context *ctx, const hd_bench_case *c, const tool_effort *e)
{
    return candidates_cost_s(ctx, c, e, true);
}

double hd__tool_defaults_cost(hd_context *ctx, const hd_bench_case *c, const tool_effort *e)
{
    tool_effort defaults = *e;
    defaults.defaults_only = true;
    return candidates_cost_s(ctx, c, &defaults, false);
}
