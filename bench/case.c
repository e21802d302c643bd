/* Benchmark case instances: random inputs, the measured call, and a sampled float64 check. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference.h"
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

/* Uniform in [lo, hi), nudged off zero so that no input is ever all zeros by chance. */
static void fill(uint64_t *state, float *p, size_t n, float lo, float hi)
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
        input_spec one = {rows, cols, d->tensors[i].lo, d->tensors[i].hi};
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
    fill(state, data, n, s->lo, s->hi);
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
    for (int i = 0; i < HD_BENCH_MAX_OUTPUTS; i++)
        hd_tensor_destroy(inst->out[i]);
    memset(inst, 0, sizeof *inst);
}

hd_status hd__bench_instance_create(hd_context *ctx, const hd_bench_case *c, uint64_t seed,
                                    bool keep_host, hd_bench_instance *inst)
{
    memset(inst, 0, sizeof *inst);
    inst->ctx = ctx;
    inst->c = *c;
    inst->seed = seed;
    inst->scale = 0.5f;
    inst->eps = 1e-5f;
    input_spec spec[HD_BENCH_MAX_INPUTS], out[HD_BENCH_MAX_OUTPUTS];
    inst->inputs = tensor_specs(c, spec, out, &inst->outputs);
    if (inst->inputs == 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "unknown operation %d", (int)c->op);
    double out_elements = 0.0;
    for (int i = 0; i < inst->outputs; i++)
        out_elements += (double)out[i].rows * (double)out[i].cols;
    double set_bytes = 4.0 * (hd__bench_case_elements(c) - out_elements);
    inst->sets = set_bytes * ROTATE_SETS < ROTATE_BELOW_BYTES ? ROTATE_SETS : 1;

    uint64_t state = seed;
    hd_status st = HD_OK;
    for (size_t s = 0; s < inst->sets && st == HD_OK; s++)
        for (int i = 0; i < inst->inputs && st == HD_OK; i++)
            st = make_tensor(ctx, &spec[i], &state, &inst->in[s][i],
                             keep_host ? &inst->host[s][i] : NULL);
    for (int i = 0; i < inst->outputs && st == HD_OK; i++)
        st = hd_tensor_create(ctx, out[i].rows, out[i].cols, &inst->out[i]);
    if (st != HD_OK)
        hd__bench_instance_destroy(inst);
    return st;
}

hd_status hd__bench_instance_run(hd_context *ctx, void *user, size_t set)
{
    hd_bench_instance *inst = user;
    hd_tensor **in = inst->in[set < inst->sets ? set : 0];
    const hd_tensor *t[HD_OP_TENSOR_MAX];
    const hd_op_desc *d = hd__op(inst->c.op);
    for (int i = 0, n = 0, o = 0; i < d->tensor_count; i++)
        t[i] = d->tensors[i].role == HD_ROLE_OUTPUT ? inst->out[o++] : in[n++];
    hd_op_params p = {.trans_a = inst->c.shape.trans_a,
                      .trans_b = inst->c.shape.trans_b,
                      .alpha = 1.0f,
                      .beta = 0.0f,
                      .scale = inst->scale,
                      .lora_layout = inst->c.shape.lora_layout,
                      .eps = inst->eps,
                      .batch = inst->c.shape.dim[3]};
    return hd__call(ctx, inst->c.op, t, &p);
}

hd_status hd__bench_instance_reset(hd_context *ctx, void *user, size_t set)
{
    hd_bench_instance *inst = user;
    size_t s = set < inst->sets ? set : 0;
    hd_status st = HD_OK;
    for (int i = 0; i < inst->inputs && st == HD_OK; i++)
        st = inst->host[s][i] != NULL
                 ? hd_tensor_write(inst->in[s][i], inst->host[s][i])
                 : hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "benchmark instance made without its inputs' host copies");
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

hd_status hd__bench_instance_check(hd_bench_instance *inst, double *worst)
{
    hd_context *ctx = inst->ctx;
    hd_status st = hd__bench_instance_run(ctx, inst, 0);
    if (st == HD_OK)
        st = hd_sync(ctx);
    if (st != HD_OK)
        return st;
    float *in[HD_BENCH_MAX_INPUTS] = {NULL}, *got[HD_BENCH_MAX_OUTPUTS] = {NULL};
    for (int i = 0; i < inst->outputs && st == HD_OK; i++)
        got[i] = read_all(inst->out[i], &st);
    for (int i = 0; i < inst->inputs && st == HD_OK; i++)
        in[i] = read_all(inst->in[0][i], &st);
    float *y = got[0];
    if (st == HD_OK && hd__ref_is_backward(inst->c.op)) {
        const float *const *cin = (const float *const *)in, *const *cgot =
                                                                (const float *const *)got;
        *worst =
            hd__ref_check_backward(inst->c.op, &inst->c.shape, cin, cgot, inst->outputs,
                                   inst->scale, inst->eps, hd_context_gemm_precision(ctx), NULL);
    } else if (st == HD_OK) {
        /* As hd__bench_instance_run calls them: GEMM with alpha 1 and beta 0. */
        hd_ref_inputs ref = {.in = {in[0], in[1], in[2], in[3]},
                             .alpha = 1.0f,
                             .beta = 0.0f,
                             .scale = inst->scale,
                             .eps = inst->eps,
                             .precision = hd_context_gemm_precision(ctx)};
        char why[160];
        *worst = hd__ref_check(inst->c.op, &inst->c.shape, &ref, y, why, sizeof why);
    }
    for (int i = 0; i < HD_BENCH_MAX_INPUTS; i++)
        free(in[i]);
    for (int i = 0; i < HD_BENCH_MAX_OUTPUTS; i++)
        free(got[i]);
    return st;
}
