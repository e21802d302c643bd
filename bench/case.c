/* Benchmark case instances: random inputs, the measured call, and a sampled float64 check. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/calibrate.h"
#include "autotune/reference.h"
#include "bench/adamw_case.h"
#include "bench/case.h"
#include "core/error.h"
#include "core/op.h"
#include "dispatch/tools.h"

/* Inputs of all sets together under this size rotate among several sets, so that a timing
 * is not a figure of data left hot in a cache by the previous run. */
#define ROTATE_BELOW_BYTES (64.0 * 1024 * 1024)
#define ROTATE_SETS        3

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

void hd__bench_fill(uint64_t *state, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(state) >> 11) * 0x1.0p-53;
        float v = (float)(lo + (hi - lo) * u);
        p[i] = v == 0.0f ? 0.5f * hi : v;
    }
}

typedef struct input_spec {
    size_t rows, cols;
    float lo, hi;
    bool left_out; /* an optional input the case leaves NULL */
} input_spec;

/* The input and output tensors of a case and the value ranges the inputs are drawn from: the
 * op table's. Returns the number of inputs; *outputs gets that of outputs. */
static int tensor_specs(const hd_bench_case *c, input_spec spec[HD_BENCH_MAX_INPUTS],
                        input_spec out[HD_BENCH_MAX_OUTPUTS], int *outputs)
{
    const hd_op_desc *d = hd__op(c->op);
    int n = 0;
    *outputs = 0;
    for (int i = 0; i < d->tensor_count; i++) {
        size_t rows, cols;
        hd__op_tensor_shape(c->op, i, &c->shape, &rows, &cols);
        input_spec one = {rows, cols, d->tensors[i].lo, d->tensors[i].hi,
                          hd__case_tensor_left_out(c->op, i)};
        if (d->tensors[i].role == HD_ROLE_OUTPUT && *outputs < HD_BENCH_MAX_OUTPUTS)
            out[(*outputs)++] = one;
        else if (d->tensors[i].role == HD_ROLE_INPUT && n < HD_BENCH_MAX_INPUTS)
            spec[n++] = one;
    }
    return n;
}

/* A tensor of random contents; *kept (NULL: not wanted) keeps them. */
static hd_status make_tensor(hd_context *ctx, const input_spec *s, uint64_t *state, hd_tensor **t,
                             float **kept)
{
    hd_status st = hd_tensor_create(ctx, s->rows, s->cols, t);
    if (st != HD_OK)
        return st;
    size_t n = s->rows * s->cols;
    float *data = malloc((n > 0 ? n : 1) * sizeof *data);
    if (data == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "benchmark input of %zu floats", n);
    hd__bench_fill(state, data, n, s->lo, s->hi);
    st = hd_tensor_write(*t, data);
    if (kept != NULL)
        *kept = data;
    else
        free(data);
    return st;
}

void hd__bench_instance_destroy(hd_bench_instance *inst)
{
    for (size_t s = 0; s < HD_BENCH_MAX_SETS; s++)
        for (int i = 0; i < HD_BENCH_MAX_INPUTS; i++) {
            hd_tensor_destroy(inst->in[s][i]);
            free(inst->host[s][i]);
        }
    for (int i = 0; i < HD_BENCH_MAX_OUTPUTS; i++) {
        hd_tensor_destroy(inst->out[i]);
        free(inst->before[i]);
    }
    if (inst->adamw != NULL)
        hd__bench_adamw_destroy(inst->adamw);
    free(inst->adamw);
    hd__ref_step_expect_free(&inst->expect);
    hd__case_params_free(&inst->params);
    memset(inst, 0, sizeof *inst);
}

/* The outputs (NULL where the case leaves one out), and what an output the op reads starts
 * from in a check. */
static hd_status make_outputs(hd_bench_instance *inst, const input_spec *out, uint64_t *state)
{
    hd_status st = HD_OK;
    for (int i = 0; i < inst->outputs && st == HD_OK; i++) {
        if (out[i].left_out)
            continue;
        st = hd_tensor_create(inst->ctx, out[i].rows, out[i].cols, &inst->out[i]);
        size_t n = out[i].rows * out[i].cols;
        if (st != HD_OK || !hd__case_reads_output(inst->c.op))
            continue;
        if ((inst->before[i] = malloc((n > 0 ? n : 1) * sizeof(float))) == NULL)
            return hd__error(inst->ctx, HD_ERR_OUT_OF_MEMORY, "benchmark output of %zu floats", n);
        hd__bench_fill(state, inst->before[i], n, -1.0f, 1.0f);
    }
    return st;
}

/* Input sets whose inputs together take set_bytes each: several where they stay small. */
static size_t input_sets(double set_bytes)
{
    return set_bytes * ROTATE_SETS < ROTATE_BELOW_BYTES ? ROTATE_SETS : 1;
}

/* An AdamW case's instance: its lists, every one an input set's (each set steps its own
 * parameters and moments). */
static hd_status create_adamw(hd_bench_instance *inst)
{
    inst->adamw = malloc(sizeof *inst->adamw);
    if (inst->adamw == NULL)
        return hd__error(inst->ctx, HD_ERR_OUT_OF_MEMORY, "an AdamW case");
    inst->sets = input_sets(4.0 * hd__bench_case_elements(&inst->c));
    hd_status st = hd__bench_adamw_create(inst->ctx, &inst->c, inst->seed, inst->sets, inst->adamw);
    if (st != HD_OK) {
        free(inst->adamw);
        inst->adamw = NULL;
    }
    return st;
}

hd_status hd__bench_instance_create(hd_context *ctx, const hd_bench_case *c, uint64_t seed,
                                    bool keep_host, hd_bench_instance *inst)
{
    memset(inst, 0, sizeof *inst);
    inst->ctx = ctx;
    inst->c = *c;
    inst->seed = seed;
    inst->expect.bounded = -1;
    if (hd__bench_case_is_adamw(c))
        return create_adamw(inst);
    /* the ids from a stream of their own, not the inputs' */
    if (!hd__case_params_make(c, seed ^ 0x6964730000000000u, &inst->params))
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "the ids of %s", hd_op_name(c->op));
    hd_status st = hd__case_params_id_tensor(ctx, &inst->params);
    if (st != HD_OK) {
        hd__bench_instance_destroy(inst);
        return st;
    }
    input_spec spec[HD_BENCH_MAX_INPUTS], out[HD_BENCH_MAX_OUTPUTS];
    inst->inputs = tensor_specs(c, spec, out, &inst->outputs);
    if (inst->inputs == 0) {
        hd__bench_instance_destroy(inst);
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "unknown operation %d", (int)c->op);
    }
    double out_elements = 0.0;
    for (int i = 0; i < inst->outputs; i++)
        out_elements += (double)out[i].rows * (double)out[i].cols;
    inst->sets = input_sets(4.0 * (hd__bench_case_elements(c) - out_elements));

    uint64_t state = seed;
    for (size_t s = 0; s < inst->sets && st == HD_OK; s++)
        for (int i = 0; i < inst->inputs && st == HD_OK; i++)
            if (!spec[i].left_out)
                st = make_tensor(ctx, &spec[i], &state, &inst->in[s][i],
                                 keep_host ? &inst->host[s][i] : NULL);
    if (st == HD_OK)
        st = make_outputs(inst, out, &state);
    if (st != HD_OK)
        hd__bench_instance_destroy(inst);
    return st;
}

bool hd__bench_case_takes(const hd_context *ctx, hd_backend b, const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c))
        return hd__backend_runs_adamw(ctx, b);
    return hd__backend_takes(ctx, b, c->op, &c->shape);
}

double hd__bench_case_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                 hd_backend b, const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c))
        return hd__bench_adamw_estimate_s(ctx, cal, b, c);
    return hd__calibrate_estimate_s(ctx, cal, b, c->op, &c->shape);
}

bool hd__bench_case_has_host_mode(const hd_bench_case *c)
{
    return !hd__bench_case_is_adamw(c);
}

hd_status hd__bench_instance_use(hd_bench_instance *inst, hd_backend b)
{
    if (inst->adamw != NULL)
        return hd__bench_adamw_place(inst->adamw, b);
    return hd_context_set_backend(inst->ctx, inst->c.op, b);
}

void hd__bench_instance_release(hd_bench_instance *inst)
{
    if (inst->adamw != NULL)
        return;
    /* hd_context_set_backend clears the context's last error, which holds the message of a
     * call that failed before the release: kept for the caller to report */
    hd_report *report = hd__report(inst->ctx);
    char kept[HD_ERROR_CAPACITY];
    size_t len = strlen(report->last_error) + 1;
    memcpy(kept, report->last_error, len);
    hd_context_set_backend(inst->ctx, inst->c.op, HD_BACKEND_AUTO);
    memcpy(report->last_error, kept, len);
}

hd_status hd__bench_instance_run(hd_context *ctx, void *user, size_t set)
{
    hd_bench_instance *inst = user;
    if (inst->adamw != NULL)
        return hd__bench_adamw_run(ctx, inst->adamw, set);
    hd_tensor **in = inst->in[set < inst->sets ? set : 0];
    const hd_tensor *t[HD_OP_TENSOR_MAX];
    const hd_op_desc *d = hd__op(inst->c.op);
    for (int i = 0, n = 0, o = 0; i < d->tensor_count; i++)
        t[i] = d->tensors[i].role == HD_ROLE_OUTPUT ? inst->out[o++] : in[n++];
    return hd__call(ctx, inst->c.op, t, &inst->params.p);
}

hd_status hd__bench_instance_reset(hd_context *ctx, void *user, size_t set)
{
    hd_bench_instance *inst = user;
    size_t s = set < inst->sets ? set : 0;
    hd_status st = HD_OK;
    if (!hd__bench_case_has_host_mode(&inst->c))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s has no host mode",
                         hd__bench_case_op_name(&inst->c));
    for (int i = 0; i < inst->inputs && st == HD_OK; i++)
        st = inst->in[s][i] == NULL ? HD_OK /* left out */
             : inst->host[s][i] != NULL
                 ? hd_tensor_write(inst->in[s][i], inst->host[s][i])
                 : hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "benchmark instance made without its inputs' host copies");
    if (st == HD_OK) /* the ids come from the host too */
        st = hd__case_params_write_ids(&inst->params);
    return st;
}

static float *read_all(const hd_tensor *t, hd_status *st)
{
    size_t n = hd_tensor_rows(t) * hd_tensor_cols(t);
    float *p = malloc((n > 0 ? n : 1) * sizeof *p);
    if (p == NULL) {
        *st = HD_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    if ((*st = hd_tensor_read(t, p)) != HD_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* Set 0's inputs read back (NULL where left out); false with *st set on failure. */
static bool read_inputs(const hd_bench_instance *inst, float *in[], hd_status *st)
{
    for (int i = 0; i < inst->inputs && *st == HD_OK; i++)
        if (inst->in[0][i] != NULL)
            in[i] = read_all(inst->in[0][i], st);
    return *st == HD_OK;
}

/* A step op's check: its expected values made once, from the inputs and what the outputs it
 * reads held before, then compared with got. */
static hd_status check_step(hd_bench_instance *inst, const float *const got[], double *worst)
{
    hd_status st = HD_OK;
    if (!inst->expected) {
        float *in[HD_BENCH_MAX_INPUTS] = {NULL};
        const float *all[HD_BENCH_MAX_INPUTS + HD_BENCH_MAX_OUTPUTS] = {NULL};
        int n = 0;
        if (read_inputs(inst, in, &st)) {
            for (int i = 0; i < inst->inputs; i++)
                all[n++] = in[i];
            for (int o = 0; o < inst->outputs; o++)
                if (inst->before[o] != NULL)
                    all[n++] = inst->before[o];
            hd_shape s = inst->c.shape;
            s.precision = hd_context_gemm_precision(inst->ctx);
            hd__ref_step_expect(inst->c.op, &s, &inst->params.p, all, &inst->expect);
            inst->expected = true;
        }
        for (int i = 0; i < HD_BENCH_MAX_INPUTS; i++)
            free(in[i]);
    }
    char why[160];
    if (st == HD_OK)
        *worst = hd__ref_step_compare(&inst->expect, got, why, sizeof why);
    return st;
}

/* The forward and backward ops' checks, on the inputs read back. */
static hd_status check_others(hd_bench_instance *inst, const float *const got[], double *worst)
{
    hd_status st = HD_OK;
    float *in[HD_BENCH_MAX_INPUTS] = {NULL};
    const hd_op_params *p = &inst->params.p;
    hd_precision precision = hd_context_gemm_precision(inst->ctx);
    if (read_inputs(inst, in, &st) && hd__ref_is_backward(inst->c.op)) {
        *worst = hd__ref_check_backward(inst->c.op, &inst->c.shape, (const float *const *)in, got,
                                        inst->outputs, p->scale, p->eps, precision, NULL);
    } else if (st == HD_OK) {
        /* As hd__bench_instance_run calls them: GEMM with alpha 1 and beta 0. */
        hd_ref_inputs ref = {.in = {in[0], in[1], in[2], in[3]},
                             .alpha = p->alpha,
                             .beta = p->beta,
                             .scale = p->scale,
                             .eps = p->eps,
                             .precision = precision};
        char why[160];
        *worst = hd__ref_check(inst->c.op, &inst->c.shape, &ref, got[0], why, sizeof why);
    }
    for (int i = 0; i < HD_BENCH_MAX_INPUTS; i++)
        free(in[i]);
    return st;
}

hd_status hd__bench_instance_check(hd_bench_instance *inst, double *worst)
{
    hd_context *ctx = inst->ctx;
    hd_status st = HD_OK;
    if (inst->adamw != NULL)
        return hd__bench_adamw_check(inst->adamw, worst);
    for (int o = 0; o < inst->outputs && st == HD_OK; o++)
        if (inst->before[o] != NULL)
            st = hd_tensor_write(inst->out[o], inst->before[o]);
    if (st == HD_OK)
        st = hd__bench_instance_run(ctx, inst, 0);
    if (st == HD_OK)
        st = hd_sync(ctx);
    if (st != HD_OK)
        return st;
    float *got[HD_BENCH_MAX_OUTPUTS] = {NULL};
    for (int i = 0; i < inst->outputs && st == HD_OK; i++)
        if (inst->out[i] != NULL)
            got[i] = read_all(inst->out[i], &st);
    const float *const *cgot = (const float *const *)got;
    if (st == HD_OK)
        st = hd__ref_is_step(inst->c.op) ? check_step(inst, cgot, worst)
                                         : check_others(inst, cgot, worst);
    for (int i = 0; i < HD_BENCH_MAX_OUTPUTS; i++)
        free(got[i]);
    return st;
}
