/* The float64 host reference and the tools' one check of a forward op (see reference.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autotune/reference.h"
#include "backends/reference.h"
#include "core/op.h"

static double at(const float *m, size_t cols, size_t r, size_t c)
{
    return (double)m[r * cols + c];
}

static hd_ref_elem gemm_elem(const hd_shape *s, const hd_ref_inputs *in, size_t i, size_t j)
{
    size_t m = s->dim[0], n = s->dim[1], k = s->dim[2];
    return hd__f64_gemm_elem(s->trans_a, s->trans_b, k, in->alpha, in->in[0], s->trans_a ? m : k,
                             in->in[1], s->trans_b ? k : n, i, j);
}

/* x*op(W) as a GEMM element, then the low-rank term: each (x*op(A))[i][q] as a GEMM element
 * too. A transposed weight is read where it is stored, as the backends read it. */
static hd_ref_elem lora_elem(const hd_shape *s, const hd_ref_inputs *in, size_t i, size_t j)
{
    size_t d_in = s->dim[1], d_out = s->dim[2], r = s->dim[3];
    const float *x = in->in[0], *w = in->in[1], *a = in->in[2], *b = in->in[3];
    bool tw = s->lora_layout & HD_LORA_TRANS_W, ta = s->lora_layout & HD_LORA_TRANS_A,
         tb = s->lora_layout & HD_LORA_TRANS_B;
    hd_f64_elem xw =
        hd__f64_gemm_elem(false, tw, d_in, 1.0f, x, d_in, w, tw ? d_in : d_out, i, j);
    double sum = xw.want, mag = xw.bound;
    for (size_t q = 0; q < r; q++) {
        hd_f64_elem xa = hd__f64_gemm_elem(false, ta, d_in, 1.0f, x, d_in, a, ta ? d_in : r, i, q);
        double bq = tb ? at(b, r, j, q) : at(b, d_out, q, j);
        sum += in->scale * xa.want * bq;
        mag += fabs((double)in->scale) * xa.bound * fabs(bq);
    }
    return (hd_ref_elem){sum, mag};
}

hd_ref_elem hd__ref_matmul_elem(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, size_t bi,
                                size_t i, size_t j)
{
    if (op == HD_OP_LORA)
        return lora_elem(shape, in, i, j);
    hd_ref_inputs one = *in;
    one.in[0] += bi * shape->dim[0] * shape->dim[2]; /* the bi-th matrix of a batch */
    one.in[1] += bi * shape->dim[2] * shape->dim[1];
    return gemm_elem(shape, &one, i, j);
}

double hd__ref_matmul_cost(hd_op op, const hd_shape *shape)
{
    return op == HD_OP_LORA ? (double)shape->dim[1] * (1.0 + (double)shape->dim[3])
                            : (double)shape->dim[2];
}

double hd__ref_matmul_tolerance(double k, double bound, double scale, hd_precision precision)
{
    double rel = scale * k * FLT_EPSILON;
    if (precision == HD_PRECISION_TF32)
        rel += HD_REF_TF32;
    return rel * bound + 1e-30;
}

/* Records e's error over its tolerance in *worst where it is the worst so far, and where. */
static void note_error(double got, double want, double tol, size_t i, size_t j, double *worst,
                       char *why, size_t size)
{
    double r = isfinite(got) ? hd__ref_error_ratio(fabs(got - want), tol) : INFINITY;
    if (r <= *worst)
        return;
    *worst = r;
    snprintf(why, size, "element (%zu, %zu): got %.9g, want %.9g (tolerance %.3g)", i, j, got,
             want, tol);
}

double hd__ref_row_tolerance(hd_op op, double want)
{
    /* softmax's values lie in [0, 1] and sum to 1 per row; the norms' are of the order of
     * gamma and beta; the backward ops' dx is a difference of terms of dy's size */
    double atol = op == HD_OP_SOFTMAX ? 1e-6 : 1e-5;
    double rtol = hd__ref_is_backward(op) ? 1e-3 : 1e-4;
    return atol + rtol * fabs(want);
}

/* A fixed, spread-out sample of (i, j) positions within the float64 budget: every position of
 * small outputs. */
static double check_matmul(hd_op op, const hd_shape *s, const hd_ref_inputs *in, const float *out,
                           char *why, size_t size)
{
    bool gemm = op != HD_OP_LORA;
    /* The output, the table's last tensor: batch matrices of rows x cols stacked by rows. */
    const hd_op_desc *d = hd__op(op);
    const hd_op_tensor *o = &d->tensors[d->tensor_count - 1];
    size_t out_rows, cols;
    hd__op_tensor_shape(op, d->tensor_count - 1, s, &out_rows, &cols);
    size_t batch = o->batch == HD_DIM_ONE ? 1 : s->dim[o->batch];
    size_t rows = out_rows / batch;
    /* the length of the longest float sum behind an element; LoRA adds its scaled term */
    double k = gemm ? (double)s->dim[2] : (double)(s->dim[1] + s->dim[3] + 1);
    double per = hd__ref_matmul_cost(op, s);
    size_t total = batch * rows * cols;
    size_t count = total <= HD_REF_FULL ? hd__ref_affordable(per, total)
                                        : hd__ref_affordable(per, HD_REF_SAMPLES);
    unsigned long long state = 0x9e3779b97f4a7c15ull;
    double worst = 0.0;
    for (size_t t = 0; t < count; t++) {
        size_t idx = t;
        if (count != total) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            idx = (size_t)((state >> 17) % total);
        }
        size_t bi = idx / (rows * cols), i = idx % (rows * cols) / cols, j = idx % cols;
        hd_ref_elem e = hd__ref_matmul_elem(op, s, in, bi, i, j);
        /* k + 2: alpha's and the output's roundings, and room for fp32x3's dropped term of
         * the two small parts at the shortest depths */
        double tol = hd__ref_matmul_tolerance(k + 2.0, e.bound, 2.0, in->precision);
        note_error((double)out[idx], e.want, tol, i, j, &worst, why, size);
    }
    return worst;
}

void hd__ref_row(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, size_t i, double *want)
{
    size_t cols = shape->dim[1];
    const float *row = in->in[0] + i * cols, *g = in->in[1], *b = in->in[2];
    if (op == HD_OP_SOFTMAX) {
        double mx = -INFINITY, total = 0.0;
        for (size_t j = 0; j < cols; j++)
            mx = fmax(mx, row[j]);
        for (size_t j = 0; j < cols; j++)
            total += want[j] = exp((double)row[j] - mx);
        for (size_t j = 0; j < cols; j++)
            want[j] /= total;
    } else if (op == HD_OP_LAYER_NORM) {
        double mean = 0.0, var = 0.0;
        for (size_t j = 0; j < cols; j++)
            mean += row[j];
        mean /= (double)cols;
        for (size_t j = 0; j < cols; j++)
            var += ((double)row[j] - mean) * ((double)row[j] - mean);
        double inv = 1.0 / sqrt(var / (double)cols + in->eps);
        for (size_t j = 0; j < cols; j++)
            want[j] = ((double)row[j] - mean) * inv * g[j] + b[j];
    } else if (op == HD_OP_RMS_NORM) {
        double sq = 0.0;
        for (size_t j = 0; j < cols; j++)
            sq += (double)row[j] * row[j];
        double inv = 1.0 / sqrt(sq / (double)cols + in->eps);
        for (size_t j = 0; j < cols; j++)
            want[j] = (double)row[j] * inv * g[j];
    } else { /* no forward row op of that name: nothing can match */
        for (size_t j = 0; j < cols; j++)
            want[j] = NAN;
    }
}

/* Rows spread over the output, first and last included, up to HD_REF_ROW_ELEMS elements'
 * worth (every row of a small output). */
static double check_rows(hd_op op, const hd_shape *s, const hd_ref_inputs *in, const float *out,
                         char *why, size_t size)
{
    size_t rows = s->dim[0], cols = s->dim[1];
    double *want = malloc((cols > 0 ? cols : 1) * sizeof *want);
    if (want == NULL) {
        snprintf(why, size, "out of memory for the reference");
        return INFINITY;
    }
    size_t max = HD_REF_ROW_ELEMS / (cols > 0 ? cols : 1);
    max = max < HD_REF_CHECK_ROWS ? HD_REF_CHECK_ROWS : max;
    double worst = 0.0;
    for (size_t si = 0; si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        if (op == HD_OP_SOFTMAX_BACKWARD)
            hd__ref_softmax_backward(1, cols, in->in[0] + i * cols, in->in[1] + i * cols, want);
        else
            hd__ref_row(op, s, in, i, want);
        for (size_t j = 0; j < cols; j++)
            note_error((double)out[i * cols + j], want[j], hd__ref_row_tolerance(op, want[j]), i, j,
                       &worst, why, size);
    }
    free(want);
    return worst;
}

typedef double (*ref_check_fn)(hd_op op, const hd_shape *shape, const hd_ref_inputs *in,
                               const float *out, char *why, size_t size);

/* Each op's check of one output; NULL: none (the backward ops of several outputs have
 * hd__ref_check_backward). */
static const ref_check_fn checks[HD_OP_COUNT] = {
    [HD_OP_GEMM] = check_matmul,
    [HD_OP_GEMM_BATCHED] = check_matmul,
    [HD_OP_LORA] = check_matmul,
    [HD_OP_SOFTMAX] = check_rows,
    [HD_OP_LAYER_NORM] = check_rows,
    [HD_OP_RMS_NORM] = check_rows,
    [HD_OP_SOFTMAX_BACKWARD] = check_rows,
};

double hd__ref_check(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, const float *out,
                     char *why, size_t size)
{
    why[0] = '\0';
    if ((unsigned)op < HD_OP_COUNT && checks[op] != NULL)
        return checks[op](op, shape, in, out, why, size);
    snprintf(why, size, "no reference for %s", hd_op_name(op));
    return INFINITY;
}
