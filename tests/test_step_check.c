/*
 * The tools' check of the training step's ops (autotune/reference.h: hd__ref_step_expect and
 * hd__ref_step_compare) and the tools' scalars of a case (autotune/case_params.h): on every op,
 * the outputs of an independent float64 computation (the reference's functions on the whole
 * output, and attention written here from its textbook definition), rounded to float, pass;
 * one sampled element off by a few of its tolerances fails and is named; NaN fails. The LM
 * head's loss beyond the check's budget is held between bounds that its true value meets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/case_params.h"
#include "autotune/reference.h"
#include "autotune/reference_step.h"
#include "tests/testlib.h"

#define MAX_TENSORS 9

/* A case's inputs (the op table's ranges) and outputs, and its scalars. */
typedef struct step_data {
    hd_bench_case c;
    hd_case_params cp;
    float *in[MAX_TENSORS]; /* the op's inputs, then add's y before the call */
    int inputs;
    float *out[3];
    size_t out_n[3];
    int outputs;
} step_data;

static void make_data(const hd_bench_case *c, hd_rng *rng, step_data *d)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    assert_true(hd__case_params_make(c, hd_test_seed(), &d->cp));
    const hd_op_desc *desc = hd__op(c->op);
    for (int i = 0; i < desc->tensor_count; i++) {
        size_t rows, cols;
        hd__op_tensor_shape(c->op, i, &c->shape, &rows, &cols);
        const hd_op_tensor *t = &desc->tensors[i];
        if (t->role == HD_ROLE_OUTPUT) {
            d->out_n[d->outputs] = rows * cols;
            d->out[d->outputs++] = hd_test_floats(rows * cols);
        } else {
            bool out = hd__case_tensor_left_out(c->op, i);
            d->in[d->inputs++] = out ? NULL : hd_test_random(rng, rows * cols, t->lo, t->hi);
        }
    }
    if (hd__case_reads_output(c->op))
        d->in[d->inputs++] = hd_test_random(rng, d->out_n[0], -1, 1);
}

static void free_data(step_data *d)
{
    for (int i = 0; i < MAX_TENSORS; i++)
        free(d->in[i]);
    for (int o = 0; o < 3; o++)
        free(d->out[o]);
    hd__case_params_free(&d->cp);
}

static void round_into(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* ---- attention from its definition, whole tensors ---- */

/* The keys row i attends to: its sequence's, up to i when causal. */
static void key_range(const hd_op_params *p, size_t tokens, size_t i, size_t *b, size_t *e)
{
    size_t start = 0, len = tokens;
    for (size_t s = 0; s < p->sequences.count; s++) {
        len = p->sequences.lengths[s];
        if (i < start + len)
            break;
        start += len;
    }
    *b = start;
    *e = p->causal ? i + 1 : start + len;
}

/* Row i, head h's weights P (over all tokens: 0 outside its keys) and its log-sum-exp. */
static double weights(const hd_shape *s, const hd_op_params *p, const float *q, const float *k,
                      size_t i, size_t h, double *w)
{
    size_t T = s->dim[0], H = s->dim[1], Hk = s->dim[2], d = s->dim[3], b, e;
    double scale = 1.0 / sqrt((double)d), max = -INFINITY, sum = 0.0;
    key_range(p, T, i, &b, &e);
    for (size_t j = 0; j < T; j++) {
        double dot = 0.0;
        for (size_t c = 0; c < d && j >= b && j < e; c++)
            dot += (double)q[(i * H + h) * d + c] * k[(j * Hk + h / (H / Hk)) * d + c];
        w[j] = j >= b && j < e ? scale * dot : -INFINITY;
        max = w[j] > max ? w[j] : max;
    }
    for (size_t j = 0; j < T; j++)
        sum += exp(w[j] - max);
    double lse = max + log(sum);
    for (size_t j = 0; j < T; j++)
        w[j] = exp(w[j] - lse);
    return lse;
}

static void naive_attention(const hd_shape *s, const hd_op_params *p, const float *q,
                            const float *k, const float *v, double *out, double *lse)
{
    size_t T = s->dim[0], H = s->dim[1], Hk = s->dim[2], d = s->dim[3];
    double *w = hd_test_doubles(T);
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            lse[i * H + h] = weights(s, p, q, k, i, h, w);
            for (size_t c = 0; c < d; c++) {
                double acc = 0.0;
                for (size_t j = 0; j < T; j++)
                    acc += w[j] * v[(j * Hk + h / (H / Hk)) * d + c];
                out[(i * H + h) * d + c] = acc;
            }
        }
    free(w);
}

/* dP = dout v^T, dS = P (dP - rowsum(dout * out)), dq = scale dS k, dk = scale dS^T q,
 * dv = P^T dout, the groups' heads summed into their kv head. */
static void naive_attention_backward(const hd_shape *s, const hd_op_params *p,
                                     const float *const in[], double *dq, double *dk, double *dv)
{
    size_t T = s->dim[0], H = s->dim[1], Hk = s->dim[2], d = s->dim[3];
    const float *q = in[0], *k = in[1], *v = in[2], *out = in[3], *dout = in[5];
    double scale = 1.0 / sqrt((double)d), *w = hd_test_doubles(T);
    memset(dk, 0, T * Hk * d * sizeof *dk);
    memset(dv, 0, T * Hk * d * sizeof *dv);
    for (size_t i = 0; i < T; i++)
        for (size_t h = 0; h < H; h++) {
            size_t qa = (i * H + h) * d;
            weights(s, p, q, k, i, h, w);
            double delta = 0.0;
            for (size_t c = 0; c < d; c++)
                delta += (double)dout[qa + c] * out[qa + c];
            for (size_t c = 0; c < d; c++)
                dq[qa + c] = 0.0;
            for (size_t j = 0; j < T; j++) {
                size_t ka = (j * Hk + h / (H / Hk)) * d;
                double dp = 0.0;
                for (size_t c = 0; c < d; c++)
                    dp += (double)dout[qa + c] * v[ka + c];
                double ds = w[j] * (dp - delta);
                for (size_t c = 0; c < d; c++) {
                    dq[qa + c] += scale * ds * k[ka + c];
                    dk[ka + c] += scale * ds * q[qa + c];
                    dv[ka + c] += w[j] * dout[qa + c];
                }
            }
        }
    free(w);
}

/* The backward's out and lse made consistent with q, k and v (the forward's, rounded), as a
 * training step hands them over. */
static void attention_backward_inputs(step_data *d)
{
    const hd_shape *s = &d->c.shape;
    size_t T = s->dim[0], H = s->dim[1], n = T * H * s->dim[3];
    double *out = hd_test_doubles(n), *lse = hd_test_doubles(T * H);
    naive_attention(s, &d->cp.p, d->in[0], d->in[1], d->in[2], out, lse);
    round_into(d->in[3], out, n);
    round_into(d->in[4], lse, T * H);
    free(out);
    free(lse);
}

/* ---- the LM head's cross-entropy from its logits ---- */

static void naive_linear_cross_entropy(const hd_shape *s, const hd_op_params *p, const float *h,
                                       const float *w, double *loss, double *dh)
{
    size_t T = s->dim[0], D = s->dim[1], V = s->dim[2], count = 0;
    double *z = hd_test_doubles(V), total = 0.0;
    for (size_t i = 0; i < T; i++)
        count += p->ids[i] != p->ignore_index;
    for (size_t i = 0; i < T; i++) {
        double max = -INFINITY, sum = 0.0;
        for (size_t v = 0; v < V; v++) {
            z[v] = 0.0;
            for (size_t c = 0; c < D; c++)
                z[v] += (double)h[i * D + c] * w[v * D + c];
            max = z[v] > max ? z[v] : max;
        }
        for (size_t v = 0; v < V; v++)
            sum += exp(z[v] - max);
        double lse = max + log(sum);
        bool counted = p->ids[i] != p->ignore_index;
        total += counted ? lse - z[p->ids[i]] : 0.0;
        for (size_t c = 0; dh != NULL && c < D; c++)
            dh[i * D + c] = 0.0;
        for (size_t v = 0; dh != NULL && counted && v < V; v++) {
            double g = (exp(z[v] - lse) - (v == (size_t)p->ids[i])) / (double)count;
            for (size_t c = 0; c < D; c++)
                dh[i * D + c] += g * w[v * D + c];
        }
    }
    *loss = total / (double)count;
    free(z);
}

/* ---- each op's outputs in double ---- */

static void int_ids(const step_data *d, int *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ids[i] = (int)d->cp.ids[i];
}

/* The outputs of d's op computed whole in double into want[o]. */
static void compute(step_data *d, double *want[3])
{
    const hd_shape *s = &d->c.shape;
    const hd_op_params *p = &d->cp.p;
    float **in = d->in;
    size_t rows = s->dim[0], n = d->out_n[0];
    switch (d->c.op) {
    case HD_OP_SWIGLU:
        hd__ref_swiglu(n, in[0], in[1], want[0]);
        break;
    case HD_OP_SWIGLU_BACKWARD:
        hd__ref_swiglu_backward(n, in[0], in[1], in[2], want[0], want[1]);
        break;
    case HD_OP_GELU:
        hd__ref_gelu(n, in[0], want[0]);
        break;
    case HD_OP_GELU_BACKWARD:
        hd__ref_gelu_backward(n, in[0], in[1], want[0]);
        break;
    case HD_OP_ADD:
        hd__ref_add(n, p->alpha, in[0], in[1], want[0]);
        break;
    case HD_OP_ADD_RMS_NORM:
        hd__ref_add_rms_norm(rows, s->dim[1], in[0], in[1], in[2], p->eps, want[0], want[1]);
        break;
    case HD_OP_ADD_RMS_NORM_BACKWARD:
        hd__ref_add_rms_norm_backward(rows, s->dim[1], in[0], in[1], in[2], in[3], p->eps, want[0],
                                      want[1]);
        break;
    case HD_OP_ROPE: {
        size_t d2 = 2 * s->dim[2];
        int *pos = malloc(rows * sizeof *pos);
        double *freq = hd_test_doubles(d2 / 2);
        for (size_t i = 0; i < rows; i++)
            pos[i] = (int)i;
        hd__ref_rope_inv_freq(p->theta, d2, freq);
        hd__ref_rope(rows, s->dim[1] / d2, d2, pos, freq, false, in[0], want[0]);
        free(pos);
        free(freq);
        break;
    }
    case HD_OP_ATTENTION:
        naive_attention(s, p, in[0], in[1], in[2], want[0], want[1]);
        break;
    case HD_OP_ATTENTION_BACKWARD:
        naive_attention_backward(s, p, (const float *const *)in, want[0], want[1], want[2]);
        break;
    case HD_OP_CROSS_ENTROPY:
        hd__ref_cross_entropy(rows, s->dim[1], in[0], p->ids, p->ignore_index, NULL, NULL, want[1],
                              want[0]);
        break;
    case HD_OP_LINEAR_CROSS_ENTROPY:
        naive_linear_cross_entropy(s, p, in[0], in[1], want[0], want[1]);
        break;
    default: { /* embedding */
        int *ids = malloc(rows * sizeof *ids);
        int_ids(d, ids, rows);
        hd__ref_embedding(rows, s->dim[1], ids, in[0], want[0]);
        free(ids);
    }
    }
}

/* The check on d: the outputs rounded from want pass; one sampled element moved by 4
 * tolerances fails, named; NaN there fails. */
static void expect_check_works(step_data *d, double *want[3])
{
    const hd_shape *s = &d->c.shape;
    char name[96], why[256];
    hd__bench_case_name(&d->c, name, sizeof name);
    for (int o = 0; o < d->outputs; o++)
        round_into(d->out[o], want[o], d->out_n[o]);
    hd_ref_expect e;
    assert_true(hd__ref_step_expect(d->c.op, s, &d->cp.p, (const float *const *)d->in, &e));
    const float *const *got = (const float *const *)d->out;
    double worst = hd__ref_step_compare(&e, got, why, sizeof why);
    if (!(worst <= 1.0))
        fail_msg("%s: the rounded reference is %g tolerances off: %s", name, worst, why);
    for (int o = 0; o < d->outputs; o++) {
        assert_true(e.count[o] > 0);
        const hd_ref_sample *k = &e.sample[o][e.count[o] / 2];
        float keep = d->out[o][k->at];
        /* an exact element: any change; a bounded one (test_linear_cross_entropy_...): none */
        d->out[o][k->at] = k->tol <= 1e-300 ? keep + 1.0f : (float)(k->want + 4 * k->tol);
        worst = hd__ref_step_compare(&e, got, why, sizeof why);
        if (o != e.bounded && !(worst > 2.0))
            fail_msg("%s output %d: a wrong element passes (%g): %s", name, o, worst, why);
        d->out[o][k->at] = NAN;
        assert_true(isinf(hd__ref_step_compare(&e, got, why, sizeof why)));
        d->out[o][k->at] = keep;
    }
    hd__ref_step_expect_free(&e);
}

static void check_case(const hd_bench_case *c, hd_rng *rng, const hd_sequences *seq, bool causal)
{
    step_data d;
    make_data(c, rng, &d);
    if (seq != NULL) {
        d.cp.p.sequences = *seq;
        d.cp.p.causal = causal;
    }
    if (c->op == HD_OP_ATTENTION_BACKWARD)
        attention_backward_inputs(&d);
    double *want[3] = {NULL, NULL, NULL};
    for (int o = 0; o < d.outputs; o++)
        want[o] = hd_test_doubles(d.out_n[o]);
    compute(&d, want);
    expect_check_works(&d, want);
    for (int o = 0; o < 3; o++)
        free(want[o]);
    free_data(&d);
}

/* Every step op of the ci suite, at its small shapes. */
static void test_step_check_passes_the_reference_and_catches_a_wrong_element(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(71);
    const hd_bench_suite *ci = hd__bench_suite_find("ci");
    size_t checked = 0;
    for (size_t i = 0; i < ci->count; i++)
        if (hd__ref_is_step(ci->cases[i].op)) {
            check_case(&ci->cases[i], &rng, NULL, true);
            checked++;
        }
    assert_int_equal(checked, 13);
}

/* Larger shapes whose checks sample rows (the first, the last, an ignored target's), and
 * attention over packed sequences, causal or not. */
static void test_step_check_samples_rows_of_larger_outputs(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(72);
    const hd_bench_case cases[] = {
        {.op = HD_OP_SWIGLU_BACKWARD, .shape = {.dim = {300, 4000}}},
        {.op = HD_OP_ADD_RMS_NORM_BACKWARD, .shape = {.dim = {600, 2048}}},
        {.op = HD_OP_CROSS_ENTROPY, .shape = {.dim = {200, 7000}}},
        {.op = HD_OP_ROPE, .shape = {.dim = {700, 2048, 32}}},
        {.op = HD_OP_ATTENTION, .shape = {.dim = {200, 4, 2, 32}}},
        {.op = HD_OP_ATTENTION_BACKWARD, .shape = {.dim = {120, 4, 2, 16}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], &rng, NULL, true);
    static const size_t lengths[] = {7, 1, 12};
    hd_sequences seq = {lengths, 3};
    hd_bench_case a = {.op = HD_OP_ATTENTION, .shape = {.dim = {20, 4, 1, 8}}};
    hd_bench_case b = {.op = HD_OP_ATTENTION_BACKWARD, .shape = {.dim = {20, 4, 2, 8}}};
    for (int causal = 0; causal < 2; causal++) {
        check_case(&a, &rng, &seq, causal);
        check_case(&b, &rng, &seq, causal);
    }
}

/* d's outputs, computed from TF32-rounded operands, pass the check of its shape in tf32 and
 * fail it in fp32. */
static void expect_tf32_passes_fp32_fails(step_data *d, const char *what)
{
    char why[256];
    for (int precision = 0; precision < 2; precision++) {
        d->c.shape.precision = precision == 0 ? HD_PRECISION_TF32 : HD_PRECISION_FP32;
        hd_ref_expect e;
        assert_true(hd__ref_step_expect(d->c.op, &d->c.shape, &d->cp.p,
                                        (const float *const *)d->in, &e));
        double worst = hd__ref_step_compare(&e, (const float *const *)d->out, why, sizeof why);
        if (precision == 0 && !(worst <= 1.0))
            fail_msg("tf32 operands' %s is %g tolerances off: %s", what, worst, why);
        if (precision == 1 && !(worst > 1.0))
            fail_msg("tf32 operands' %s passes fp32's check (%g)", what, worst);
        hd__ref_step_expect_free(&e);
    }
}

/* n floats of x rounded to TF32, as the tensor cores read them, in a new buffer (free it). */
static float *tf32_copy(const float *x, size_t n)
{
    float *r = hd_test_floats(n);
    for (size_t i = 0; i < n; i++)
        r[i] = hd_test_tf32(x[i]);
    return r;
}

/* Attention's forward in tf32: an output computed from q, k and v rounded to TF32 (the
 * tensor cores' operands) passes the check of a tf32 shape, and fails fp32's. */
static void test_attention_check_admits_tf32_operands(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(74);
    hd_bench_case c = {.op = HD_OP_ATTENTION,
                       .shape = {.dim = {150, 4, 2, 64}, .precision = HD_PRECISION_TF32}};
    step_data d;
    make_data(&c, &rng, &d);
    const hd_shape *s = &d.c.shape;
    size_t T = s->dim[0], H = s->dim[1], Hk = s->dim[2], dim = s->dim[3];
    size_t n[3] = {T * H * dim, T * Hk * dim, T * Hk * dim};
    float *rounded[3];
    for (int t = 0; t < 3; t++)
        rounded[t] = tf32_copy(d.in[t], n[t]);
    double *out = hd_test_doubles(n[0]), *lse = hd_test_doubles(T * H);
    naive_attention(s, &d.cp.p, rounded[0], rounded[1], rounded[2], out, lse);
    round_into(d.out[0], out, n[0]);
    round_into(d.out[1], lse, T * H);
    expect_tf32_passes_fp32_fails(&d, "attention");
    for (int t = 0; t < 3; t++)
        free(rounded[t]);
    free(out);
    free(lse);
    free_data(&d);
}

/* Attention's backward in tf32 likewise: dq, dk and dv computed from q, k, v and dout rounded
 * to TF32 pass the check of a tf32 shape, and fail fp32's. */
static void test_attention_backward_check_admits_tf32_operands(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(75);
    hd_bench_case c = {.op = HD_OP_ATTENTION_BACKWARD,
                       .shape = {.dim = {120, 4, 2, 32}, .precision = HD_PRECISION_TF32}};
    step_data d;
    make_data(&c, &rng, &d);
    attention_backward_inputs(&d);
    const hd_shape *s = &d.c.shape;
    size_t T = s->dim[0], H = s->dim[1], Hk = s->dim[2], dim = s->dim[3];
    const float *rounded[6];
    float *copies[6] = {NULL};
    for (int t = 0; t < 6; t++) {
        rounded[t] = d.in[t];
        if (t == 3 || t == 4) /* out and lse: the given forward's */
            continue;
        copies[t] = tf32_copy(d.in[t], T * (t == 0 || t == 5 ? H : Hk) * dim);
        rounded[t] = copies[t];
    }
    double *want[3] = {hd_test_doubles(d.out_n[0]), hd_test_doubles(d.out_n[1]),
                       hd_test_doubles(d.out_n[2])};
    naive_attention_backward(s, &d.cp.p, rounded, want[0], want[1], want[2]);
    for (int o = 0; o < 3; o++)
        round_into(d.out[o], want[o], d.out_n[o]);
    expect_tf32_passes_fp32_fails(&d, "attention backward");
    for (int t = 0; t < 6; t++)
        free(copies[t]);
    for (int o = 0; o < 3; o++)
        free(want[o]);
    free_data(&d);
}

/* Beyond the budget for every row's logits the LM head's loss is held between bounds, which
 * its true value meets and a negative or absurd one does not; dh is checked on sampled rows. */
static void test_linear_cross_entropy_loss_is_bounded_at_scale(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(73);
    hd_bench_case c = {.op = HD_OP_LINEAR_CROSS_ENTROPY, .shape = {.dim = {64, 512, 9000}}};
    assert_true(64.0 * 512 * 9000 > HD_REF_STEP_MACS);
    step_data d;
    make_data(&c, &rng, &d);
    double loss, *dh = hd_test_doubles(d.out_n[1]);
    naive_linear_cross_entropy(&c.shape, &d.cp.p, d.in[0], d.in[1], &loss, dh);
    d.out[0][0] = (float)loss;
    round_into(d.out[1], dh, d.out_n[1]);
    hd_ref_expect e;
    assert_true(hd__ref_step_expect(c.op, &c.shape, &d.cp.p, (const float *const *)d.in, &e));
    assert_int_equal(e.bounded, 0);
    char why[256];
    const float *const *got = (const float *const *)d.out;
    assert_true(hd__ref_step_compare(&e, got, why, sizeof why) <= 1.0);
    assert_true(e.count[1] >= 2 * c.shape.dim[1]); /* dh: two rows at least */
    d.out[0][0] = -0.5f;
    assert_true(hd__ref_step_compare(&e, got, why, sizeof why) > 1.0);
    assert_non_null(strstr(why, "loss"));
    d.out[0][0] = 1e6f;
    assert_true(hd__ref_step_compare(&e, got, why, sizeof why) > 1.0);
    hd__ref_step_expect_free(&e);
    free(dh);
    free_data(&d);
}

/* The tools' scalars: targets in range or ignored (as many as hd__case_ignored_targets says),
 * the same from the same seed; the ids of an embedding in range; attention's heads and mask,
 * RoPE's head_dim and base from the shape. */
static void test_case_params_follow_the_shape_and_the_seed(void **state)
{
    (void)state;
    hd_bench_case ce = {.op = HD_OP_CROSS_ENTROPY, .shape = {.dim = {2048, 128256}}};
    hd_case_params a, b;
    assert_true(hd__case_params_make(&ce, 5, &a));
    assert_true(hd__case_params_make(&ce, 5, &b));
    size_t ignored = 0;
    for (size_t i = 0; i < 2048; i++) {
        assert_int_equal(a.ids[i], b.ids[i]);
        ignored += a.ids[i] == HD_CASE_IGNORE_INDEX;
        assert_true(a.ids[i] == HD_CASE_IGNORE_INDEX || (a.ids[i] >= 0 && a.ids[i] < 128256));
    }
    assert_int_equal(ignored, hd__case_ignored_targets(2048));
    assert_int_equal(ignored, 32);
    assert_int_equal(a.p.ignore_index, -100);
    assert_ptr_equal(a.p.ids, a.ids);
    hd__case_params_free(&a);
    hd__case_params_free(&b);
    assert_int_equal(hd__case_ignored_targets(1), 0);
    assert_int_equal(hd__case_ignored_targets(5), 1);

    hd_bench_case emb = {.op = HD_OP_EMBEDDING, .shape = {.dim = {100, 8, 3}}};
    assert_true(hd__case_params_make(&emb, 9, &a));
    for (size_t i = 0; i < 100; i++)
        assert_true(a.ids[i] >= 0 && a.ids[i] < 3);
    hd__case_params_free(&a);

    hd_bench_case at = {.op = HD_OP_ATTENTION_BACKWARD, .shape = {.dim = {2048, 32, 8, 128}}};
    assert_true(hd__case_params_make(&at, 1, &a));
    assert_true(a.p.heads == 32 && a.p.kv_heads == 8 && a.p.causal && a.ids == NULL);
    hd_bench_case rope = {.op = HD_OP_ROPE, .shape = {.dim = {2048, 4096, 64}}};
    assert_true(hd__case_params_make(&rope, 1, &a));
    assert_true(a.p.head_dim == 128 && a.p.theta == 500000.0f && !a.p.inverse);
    assert_true(hd__case_tensor_left_out(HD_OP_ROPE, 1));
    assert_true(hd__case_tensor_left_out(HD_OP_ADD_RMS_NORM_BACKWARD, 5)); /* dweight */
    assert_false(hd__case_tensor_left_out(HD_OP_ADD_RMS_NORM_BACKWARD, 4));
    assert_false(hd__case_tensor_left_out(HD_OP_ROPE, 0));
    assert_true(hd__case_reads_output(HD_OP_ADD));
    hd__case_params_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_check_passes_the_reference_and_catches_a_wrong_element),
        cmocka_unit_test(test_step_check_samples_rows_of_larger_outputs),
        cmocka_unit_test(test_attention_check_admits_tf32_operands),
        cmocka_unit_test(test_attention_backward_check_admits_tf32_operands),
        cmocka_unit_test(test_linear_cross_entropy_loss_is_bounded_at_scale),
        cmocka_unit_test(test_case_params_follow_the_shape_and_the_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
