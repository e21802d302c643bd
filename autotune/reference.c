/* Float64 host reference for the tuner (see reference.h). Tolerances: GEMM and LoRA elements
 * may differ by 8·k·ε·Σ|terms| (the rounding bound of a k-long float sum, with room for
 * blocked summation orders); row ops by 1e-5 + 1e-4·|want|. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "autotune/reference.h"

typedef struct elem {
    double want, bound;
} elem;

static double at(const float *m, size_t cols, size_t r, size_t c)
{
    return (double)m[r * cols + c];
}

static elem gemm_elem(const hd_shape *s, const hd_ref_inputs *in, size_t i, size_t j)
{
    size_t m = s->dim[0], n = s->dim[1], k = s->dim[2];
    double sum = 0.0, mag = 0.0;
    for (size_t p = 0; p < k; p++) {
        double a = s->trans_a ? at(in->in[0], m, p, i) : at(in->in[0], k, i, p);
        double b = s->trans_b ? at(in->in[1], k, j, p) : at(in->in[1], n, p, j);
        sum += a * b;
        mag += fabs(a * b);
    }
    return (elem){in->alpha * sum, fabs((double)in->alpha) * mag};
}

static elem lora_elem(const hd_shape *s, const hd_ref_inputs *in, size_t i, size_t j)
{
    size_t d_in = s->dim[1], d_out = s->dim[2], r = s->dim[3];
    const float *x = in->in[0], *w = in->in[1], *a = in->in[2], *b = in->in[3];
    double sum = 0.0, mag = 0.0;
    for (size_t p = 0; p < d_in; p++) {
        double t = at(x, d_in, i, p) * at(w, d_out, p, j);
        sum += t;
        mag += fabs(t);
    }
    for (size_t q = 0; q < r; q++) {
        double xa = 0.0, xa_mag = 0.0;
        for (size_t p = 0; p < d_in; p++) {
            double t = at(x, d_in, i, p) * at(a, r, p, q);
            xa += t;
            xa_mag += fabs(t);
        }
        double bq = at(b, d_out, q, j);
        sum += in->scale * xa * bq;
        mag += fabs((double)in->scale) * xa_mag * fabs(bq);
    }
    return (elem){sum, mag};
}

static bool close_enough(double got, elem e, double k, char *why, size_t size, size_t i, size_t j)
{
    double tol = 8.0 * (k + 2.0) * FLT_EPSILON * e.bound + 1e-30;
    if (isfinite(got) && fabs(got - e.want) <= tol)
        return true;
    snprintf(why, size, "element (%zu, %zu): got %.9g, want %.9g (tolerance %.3g)", i, j, got,
             e.want, tol);
    return false;
}

/* A fixed, spread-out sample of (i, j) positions: every position for small outputs. */
static bool check_matmul(hd_op op, const hd_shape *s, const hd_ref_inputs *in, const float *out,
                         char *why, size_t size)
{
    bool gemm = op != HD_OP_LORA;
    size_t batch = op == HD_OP_GEMM_BATCHED ? s->dim[3] : 1;
    size_t rows = s->dim[0], cols = gemm ? s->dim[1] : s->dim[2];
    double k = gemm ? (double)s->dim[2] : (double)(s->dim[1] + s->dim[3]);
    size_t total = batch * rows * cols;
    size_t count = total <= HD_REF_FULL ? total : HD_REF_SAMPLES;
    unsigned long long state = 0x9e3779b97f4a7c15ull;
    for (size_t t = 0; t < count; t++) {
        size_t idx = t;
        if (count != total) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            idx = (size_t)((state >> 17) % total);
        }
        size_t bi = idx / (rows * cols), i = idx % (rows * cols) / cols, j = idx % cols;
        hd_ref_inputs one = *in;
        one.in[0] += bi * s->dim[0] * s->dim[2]; /* the bi-th matrix of a batch */
        one.in[1] += bi * s->dim[2] * s->dim[1];
        elem e = gemm ? gemm_elem(s, &one, i, j) : lora_elem(s, in, i, j);
        if (!close_enough((double)out[idx], e, k, why, size, i, j))
            return false;
    }
    return true;
}

static bool check_rows(hd_op op, const hd_shape *s, const hd_ref_inputs *in, const float *out,
                       char *why, size_t size)
{
    size_t rows = s->dim[0], cols = s->dim[1];
    const float *x = in->in[0], *g = in->in[1], *b = in->in[2];
    for (size_t i = 0; i < rows; i++) {
        const float *row = x + i * cols;
        double a = 0.0, c = 0.0;
        if (op == HD_OP_SOFTMAX) {
            a = -INFINITY;
            for (size_t j = 0; j < cols; j++)
                a = fmax(a, row[j]);
            for (size_t j = 0; j < cols; j++)
                c += exp((double)row[j] - a);
        } else if (op == HD_OP_LAYER_NORM) {
            for (size_t j = 0; j < cols; j++)
                a += row[j];
            a /= (double)cols;
            for (size_t j = 0; j < cols; j++)
                c += ((double)row[j] - a) * ((double)row[j] - a);
            c = 1.0 / sqrt(c / (double)cols + in->eps);
        } else {
            for (size_t j = 0; j < cols; j++)
                c += (double)row[j] * row[j];
            c = 1.0 / sqrt(c / (double)cols + in->eps);
        }
        for (size_t j = 0; j < cols; j++) {
            double want;
            if (op == HD_OP_SOFTMAX)
                want = exp((double)row[j] - a) / c;
            else if (op == HD_OP_LAYER_NORM)
                want = ((double)row[j] - a) * c * g[j] + b[j];
            else
                want = (double)row[j] * c * g[j];
            double got = out[i * cols + j];
            double tol = 1e-5 + 1e-4 * fabs(want);
            if (!isfinite(got) || fabs(got - want) > tol) {
                snprintf(why, size, "element (%zu, %zu): got %.9g, want %.9g", i, j, got, want);
                return false;
            }
        }
    }
    return true;
}

bool hd__ref_check(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, const float *out,
                   char *why, size_t size)
{
    why[0] = '\0';
    switch (op) {
    case HD_OP_GEMM:
    case HD_OP_GEMM_BATCHED:
    case HD_OP_LORA:
        return check_matmul(op, shape, in, out, why, size);
    case HD_OP_SOFTMAX:
    case HD_OP_LAYER_NORM:
    case HD_OP_RMS_NORM:
        return check_rows(op, shape, in, out, why, size);
    default:
        snprintf(why, size, "no reference for %s", hd_op_name(op));
        return false;
    }
}
