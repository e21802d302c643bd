/* The tools' check of the training step's ops (reference.h): the expectation of sampled
 * output elements, its comparison with an output, and the expectations of the elementwise
 * ops, RoPE, the embedding and residual + RMS norm. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "autotune/step_check.h"

#define GELU_K 0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_C 0.044715

/* ---- the sample list ---- */

void hd__ref_expect_add(hd_ref_expect *e, int o, size_t at, double want, double tol)
{
    if (e->no_memory)
        return;
    if (e->count[o] == e->cap[o]) {
        size_t cap = e->cap[o] ? 2 * e->cap[o] : 1024;
        hd_ref_sample *grown = realloc(e->sample[o], cap * sizeof *grown);
        if (grown == NULL) {
            e->no_memory = true;
            return;
        }
        e->sample[o] = grown;
        e->cap[o] = cap;
    }
    e->sample[o][e->count[o]++] = (hd_ref_sample){at, want, tol};
}

size_t hd__ref_step_rows_by_elems(size_t rows, size_t cols)
{
    size_t max = HD_REF_STEP_ELEMS / (cols > 0 ? cols : 1);
    return max < HD_REF_CHECK_ROWS ? HD_REF_CHECK_ROWS : max;
}

size_t hd__ref_step_rows_by_cost(size_t rows, double per_row)
{
    double fit = per_row > 0 ? (double)HD_REF_STEP_MACS / per_row : HD_REF_CHECK_ROWS;
    (void)rows;
    return fit >= HD_REF_CHECK_ROWS ? HD_REF_CHECK_ROWS : fit >= 2.0 ? (size_t)fit : 2;
}

void hd__ref_step_sequence(const hd_sequences *q, size_t rows, size_t i, size_t *start, size_t *len)
{
    *start = 0;
    *len = rows;
    for (size_t s = 0; q->count > 0 && s < q->count; s++) {
        if (i < *start + q->lengths[s]) {
            *len = q->lengths[s];
            return;
        }
        *start += q->lengths[s];
    }
}

/* ---- elementwise ops ---- */

static double sigmoid(double t)
{
    return 1.0 / (1.0 + exp(-t));
}

/* Each elementwise op at element k: the expected value of each output and its tolerance (16 u
 * of the magnitude of the formula's terms; add: its two terms' rounding). */
typedef void elem_fn(const float *const in[], float alpha, size_t k, double want[2], double tol[2]);

static void swiglu_elem(const float *const in[], float alpha, size_t k, double want[2],
                        double tol[2])
{
    (void)alpha;
    hd__ref_swiglu(1, in[0] + k, in[1] + k, want);
    tol[0] = 16 * HD_REF_U * fabs(want[0]) + HD_REF_EXACT;
}

static void swiglu_backward_elem(const float *const in[], float alpha, size_t k, double want[2],
                                 double tol[2])
{
    (void)alpha;
    double g = in[0][k], u = in[1][k], dy = in[2][k], s = sigmoid(g);
    hd__ref_swiglu_backward(1, in[0] + k, in[1] + k, in[2] + k, &want[0], &want[1]);
    /* dg's sum 1 + g (1 - s) cancels near g = -1.28: its terms' magnitudes */
    tol[0] = 16 * HD_REF_U * fabs(dy * u * s) * (1.0 + fabs(g) * (1.0 - s)) + HD_REF_EXACT;
    tol[1] = 16 * HD_REF_U * fabs(want[1]) + HD_REF_EXACT;
}

static void gelu_elem(const float *const in[], float alpha, size_t k, double want[2], double tol[2])
{
    (void)alpha;
    double x = in[0][k], z = GELU_K * (x + GELU_C * x * x * x), s = sigmoid(2 * z);
    hd__ref_gelu(1, in[0] + k, want);
    /* y = x sigmoid(2z): its roundings, and z's rounding through the sigmoid */
    tol[0] = 16 * HD_REF_U * (fabs(want[0]) + fabs(x) * s * (1 - s) * fabs(2 * z)) + HD_REF_EXACT;
}

static void gelu_backward_elem(const float *const in[], float alpha, size_t k, double want[2],
                               double tol[2])
{
    (void)alpha;
    double x = in[0][k], dy = in[1][k];
    double z = GELU_K * (x + GELU_C * x * x * x), s = sigmoid(2 * z);
    double slope = 2 * s * (1 - s) * GELU_K * fabs(x) * (1 + 3 * GELU_C * x * x);
    hd__ref_gelu_backward(1, in[0] + k, in[1] + k, want);
    tol[0] =
        16 * HD_REF_U * fabs(dy) * (s + slope * (1 + fabs(2 * z)) + s * (1 - s) * fabs(2 * z)) +
        HD_REF_EXACT;
}

/* in[1]: y before the call */
static void add_elem(const float *const in[], float alpha, size_t k, double want[2], double tol[2])
{
    hd__ref_add(1, alpha, in[0] + k, in[1] + k, want);
    tol[0] =
        4 * HD_REF_U * (fabs((double)in[1][k]) + fabs((double)alpha * in[0][k])) + HD_REF_EXACT;
}

static elem_fn *elem_of(hd_op op)
{
    switch (op) {
    case HD_OP_SWIGLU:
        return swiglu_elem;
    case HD_OP_SWIGLU_BACKWARD:
        return swiglu_backward_elem;
    case HD_OP_GELU:
        return gelu_elem;
    case HD_OP_GELU_BACKWARD:
        return gelu_backward_elem;
    default:
        return add_elem;
    }
}

static bool expect_elementwise(const hd_shape *s, const hd_op_params *p, const float *const in[],
                               hd_ref_expect *e)
{
    size_t rows = s->dim[0], cols = s->dim[1], max = hd__ref_step_rows_by_elems(rows, cols);
    elem_fn *fn = elem_of(e->op);
    for (size_t si = 0; si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        for (size_t j = 0; j < cols; j++) {
            double want[2], tol[2];
            fn(in, p->alpha, i * cols + j, want, tol);
            for (int o = 0; o < e->outputs; o++)
                hd__ref_expect_add(e, o, i * cols + j, want[o], tol[o]);
        }
    }
    return !e->no_memory;
}

/* ---- RoPE ---- */

/* Row i's position: the offset plus its index within its sequence. */
static int rope_position(const hd_op_params *p, size_t rows, size_t i)
{
    size_t start, len;
    hd__ref_step_sequence(&p->sequences, rows, i, &start, &len);
    return (int)(p->position_offset + (i - start));
}

/* x's rows rotated as the reference rotates them (the frequencies from theta, or in[1]), each
 * element within 32 u of its pair's magnitudes. */
static bool expect_rope(const hd_shape *s, const hd_op_params *p, const float *const in[],
                        hd_ref_expect *e)
{
    size_t rows = s->dim[0], cols = s->dim[1], pairs = s->dim[2], d = 2 * pairs;
    size_t max = hd__ref_step_rows_by_elems(rows, cols);
    double *freq = malloc((pairs + cols) * sizeof *freq);
    if (freq == NULL)
        return false;
    double *out = freq + pairs;
    if (in[1] != NULL)
        for (size_t q = 0; q < pairs; q++)
            freq[q] = in[1][q];
    else
        hd__ref_rope_inv_freq(p->theta, d, freq);
    for (size_t si = 0; si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        const float *x = in[0] + i * cols;
        int pos = rope_position(p, rows, i);
        hd__ref_rope(1, cols / d, d, &pos, freq, p->inverse, x, out);
        for (size_t j = 0; j < cols; j++) {
            size_t pair = j % d < pairs ? j + pairs : j - pairs;
            double tol = 32 * HD_REF_U * (fabs((double)x[j]) + fabs((double)x[pair]));
            hd__ref_expect_add(e, 0, i * cols + j, out[j], tol + HD_REF_EXACT);
        }
    }
    free(freq);
    return !e->no_memory;
}

/* ---- embedding: a copy ---- */

static bool expect_embedding(const hd_shape *s, const hd_op_params *p, const float *const in[],
                             hd_ref_expect *e)
{
    size_t rows = s->dim[0], cols = s->dim[1], max = hd__ref_step_rows_by_elems(rows, cols);
    double *out = malloc((cols > 0 ? cols : 1) * sizeof *out);
    if (out == NULL)
        return false;
    for (size_t si = 0; si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        int id = (int)p->ids[i];
        hd__ref_embedding(1, cols, &id, in[0], out);
        for (size_t j = 0; j < cols; j++)
            hd__ref_expect_add(e, 0, i * cols + j, out[j], HD_REF_EXACT);
    }
    free(out);
    return !e->no_memory;
}

/* ---- residual add + RMS norm ---- */

/* h and y of the sampled rows: h within one rounding of x + r, y within the n-long sum of
 * squares' rounding (any order) halved by the square root, a few roundings more, and the
 * rounding of h carried through (which matters where x + r cancels). */
static bool expect_add_rms_norm(const hd_shape *s, const hd_op_params *p, const float *const in[],
                                hd_ref_expect *e)
{
    size_t rows = s->dim[0], n = s->dim[1], max = hd__ref_step_rows_by_elems(rows, n);
    const float *x = in[0], *r = in[1], *w = in[2];
    double *h = malloc(2 * (n > 0 ? n : 1) * sizeof *h), *y = h + n;
    if (h == NULL)
        return false;
    for (size_t si = 0; si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        hd__ref_add_rms_norm(1, n, x + i * n, r + i * n, w, p->eps, h, y);
        double sq = 0.0;
        for (size_t j = 0; j < n; j++)
            sq += h[j] * h[j];
        double rstd = 1.0 / sqrt(sq / (double)n + (double)p->eps);
        for (size_t j = 0; j < n; j++) {
            double terms = fabs((double)x[i * n + j]) + fabs((double)r[i * n + j]);
            hd__ref_expect_add(e, 0, i * n + j, h[j], 2 * HD_REF_U * terms + HD_REF_EXACT);
            double tol = ((double)n / 2 + 8) * HD_REF_U * fabs(y[j]) +
                         2 * HD_REF_U * terms * rstd * fabs((double)w[j]);
            hd__ref_expect_add(e, 1, i * n + j, y[j], tol + HD_REF_EXACT);
        }
    }
    free(h);
    return !e->no_memory;
}

/* Row i of the backward's dh with its tolerance: the n-long sums (the squares and g * xhat)
 * and rstd's rounding over the terms of rstd (g - xhat m), dres's addition. */
static void add_rms_norm_dh_row(size_t n, const float *h, const float *w, const float *dy,
                                const float *dres, float eps, size_t row, double *dh,
                                hd_ref_expect *e)
{
    hd__ref_add_rms_norm_backward(1, n, h, w, dy, dres, eps, dh, NULL);
    double sq = 0.0, sgx = 0.0;
    for (size_t j = 0; j < n; j++)
        sq += (double)h[j] * h[j];
    double rstd = 1.0 / sqrt(sq / (double)n + (double)eps);
    for (size_t j = 0; j < n; j++)
        sgx += fabs((double)w[j] * dy[j] * h[j] * rstd);
    for (size_t j = 0; j < n; j++) {
        double terms = rstd * (fabs((double)w[j] * dy[j]) + fabs(h[j] * rstd) * sgx / (double)n);
        double tol = (2.0 * (double)n + 16) * HD_REF_U * terms +
                     4 * HD_REF_U * (dres != NULL ? fabs((double)dres[j]) : 0.0);
        hd__ref_expect_add(e, 0, row * n + j, dh[j], tol + HD_REF_EXACT);
    }
}

/* dh on the sampled rows; dweight (a sum over every row of dy * xhat) on every column, within
 * the T-long sum's rounding and xhat's (rstd's n-long sum) of its terms' magnitudes. */
static bool expect_add_rms_norm_backward(const hd_shape *s, const hd_op_params *p,
                                         const float *const in[], hd_ref_expect *e)
{
    size_t rows = s->dim[0], n = s->dim[1], max = hd__ref_step_rows_by_elems(rows, n);
    const float *h = in[0], *w = in[1], *dy = in[2], *dres = in[3];
    double *m = calloc(4 * (n > 0 ? n : 1), sizeof *m);
    if (m == NULL)
        return false;
    double *dh = m, *dw = m + n, *sum = m + 2 * n, *mag = m + 3 * n;
    size_t next = 0, si = 0; /* the next sampled row */
    for (size_t i = 0; i < rows; i++) {
        hd__ref_add_rms_norm_backward(1, n, h + i * n, w, dy + i * n, NULL, p->eps, dh, dw);
        for (size_t j = 0; j < n; j++) {
            sum[j] += dw[j];
            mag[j] += fabs(dw[j]);
        }
        if (i != next)
            continue;
        add_rms_norm_dh_row(n, h + i * n, w, dy + i * n, dres ? dres + i * n : NULL, p->eps, i, dh,
                            e);
        si++;
        next = si < hd__ref_sample_count(rows, max) ? hd__ref_sample(rows, max, si) : rows;
    }
    double k = (double)rows + (double)n + 8;
    for (size_t j = 0; j < n && e->outputs > 1; j++)
        hd__ref_expect_add(e, 1, j, sum[j], k * HD_REF_U * mag[j] + HD_REF_EXACT);
    free(m);
    return !e->no_memory;
}

/* ---- the check ---- */

/* Each step op's expectation; the attention and cross-entropy ones live in their own files. */
static hd_ref_expect_fn *const expecters[HD_OP_COUNT] = {
    [HD_OP_SWIGLU] = expect_elementwise,
    [HD_OP_SWIGLU_BACKWARD] = expect_elementwise,
    [HD_OP_GELU] = expect_elementwise,
    [HD_OP_GELU_BACKWARD] = expect_elementwise,
    [HD_OP_ADD] = expect_elementwise,
    [HD_OP_ADD_RMS_NORM] = expect_add_rms_norm,
    [HD_OP_ADD_RMS_NORM_BACKWARD] = expect_add_rms_norm_backward,
    [HD_OP_ROPE] = expect_rope,
    [HD_OP_ATTENTION] = hd__ref_expect_attention,
    [HD_OP_ATTENTION_BACKWARD] = hd__ref_expect_attention_backward,
    [HD_OP_CROSS_ENTROPY] = hd__ref_expect_cross_entropy,
    [HD_OP_LINEAR_CROSS_ENTROPY] = hd__ref_expect_linear_cross_entropy,
    [HD_OP_EMBEDDING] = expect_embedding,
};

bool hd__ref_is_step(hd_op op)
{
    return (unsigned)op < HD_OP_COUNT && expecters[op] != NULL;
}

bool hd__ref_step_expect(hd_op op, const hd_shape *shape, const hd_op_params *p,
                         const float *const in[], hd_ref_expect *e)
{
    memset(e, 0, sizeof *e);
    e->op = op;
    e->bounded = -1;
    if (!hd__ref_is_step(op)) {
        e->no_memory = true; /* nothing to compare with: every comparison fails */
        return false;
    }
    const hd_op_desc *d = hd__op(op);
    for (int i = 0; i < d->tensor_count && e->outputs < HD_REF_STEP_OUTPUTS; i++) {
        size_t rows, cols;
        hd__op_tensor_shape(op, i, shape, &rows, &cols);
        if (d->tensors[i].role == HD_ROLE_OUTPUT)
            e->cols[e->outputs++] = cols;
    }
    bool ok = expecters[op](shape, p, in, e);
    e->no_memory |= !ok;
    return ok;
}

/* The name of output o of op, for messages. */
static const char *output_name(hd_op op, int o)
{
    const hd_op_desc *d = hd__op(op);
    for (int i = 0, n = 0; i < d->tensor_count; i++)
        if (d->tensors[i].role == HD_ROLE_OUTPUT && n++ == o)
            return d->tensors[i].name;
    return "?";
}

double hd__ref_step_compare(const hd_ref_expect *e, const float *const got[], char *why,
                            size_t size)
{
    why[0] = '\0';
    if (e->no_memory) {
        snprintf(why, size, "no reference (%s)",
                 hd__ref_is_step(e->op) ? "out of memory" : "not a step operation");
        return INFINITY;
    }
    double worst = 0.0;
    for (int o = 0; o < e->outputs; o++)
        for (size_t k = 0; got[o] != NULL && k < e->count[o]; k++) {
            const hd_ref_sample *s = &e->sample[o][k];
            double g = got[o][s->at];
            /* a NaN expected (a mean over no row) is met by a NaN alone */
            double r = isnan(s->want) ? (isnan(g) ? 0.0 : INFINITY)
                       : isfinite(g)  ? hd__ref_error_ratio(fabs(g - s->want), s->tol)
                                      : INFINITY;
            if (o == e->bounded && r <= 1.0)
                r = 0.0; /* within bounds: they say nothing of its precision */
            if (!(r > worst))
                continue;
            worst = r;
            snprintf(why, size, "%s (%zu, %zu): got %.9g, %s %.9g (%s %.3g)", output_name(e->op, o),
                     s->at / e->cols[o], s->at % e->cols[o], g, o == e->bounded ? "within" : "want",
                     s->want, o == e->bounded ? "give or take" : "tolerance", s->tol);
        }
    return worst;
}

void hd__ref_step_expect_free(hd_ref_expect *e)
{
    for (int o = 0; o < HD_REF_STEP_OUTPUTS; o++)
        free(e->sample[o]);
    memset(e, 0, sizeof *e);
    e->bounded = -1;
}

double hd__ref_check_step(hd_op op, const hd_shape *shape, const hd_op_params *p,
                          const float *const in[], const float *const got[], char *why, size_t size)
{
    hd_ref_expect e;
    hd__ref_step_expect(op, shape, p, in, &e);
    double worst = hd__ref_step_compare(&e, got, why, size);
    hd__ref_step_expect_free(&e);
    return worst;
}
