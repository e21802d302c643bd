/* The float64 reference of the backward passes (see reference.h) for the tests, and the tools'
 * sampled check of their outputs (the tuner's and the benchmark's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference.h"
#include "core/op.h"

void hd__ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy, double *dx)
{
    for (size_t i = 0; i < rows; i++) {
        const float *yr = y + i * cols, *dyr = dy + i * cols;
        double dot = 0.0;
        for (size_t j = 0; j < cols; j++)
            dot += (double)yr[j] * dyr[j];
        for (size_t j = 0; j < cols; j++)
            dx[i * cols + j] = (double)yr[j] * ((double)dyr[j] - dot);
    }
}

/* Layer norm (center) and RMS norm: xhat = (x - mean) * r, g = gamma*dy,
 * dx = r * (g - mean(g) - xhat * mean(g*xhat)) (no mean(g) for RMS norm). */
void hd__ref_norm_backward(bool center, size_t rows, size_t cols, const float *x,
                           const float *gamma, const float *dy, float eps, double *dx,
                           double *dgamma, double *dbeta)
{
    for (size_t j = 0; j < cols; j++) {
        if (dgamma != NULL)
            dgamma[j] = 0.0;
        if (dbeta != NULL)
            dbeta[j] = 0.0;
    }
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols, *dyr = dy + i * cols;
        double mean = 0.0, sq = 0.0, sum_g = 0.0, sum_gx = 0.0;
        for (size_t j = 0; j < cols && center; j++)
            mean += xr[j];
        mean /= (double)cols;
        for (size_t j = 0; j < cols; j++)
            sq += ((double)xr[j] - mean) * ((double)xr[j] - mean);
        double r = 1.0 / sqrt(sq / (double)cols + (double)eps);
        for (size_t j = 0; j < cols; j++) {
            double g = (double)gamma[j] * dyr[j], xhat = ((double)xr[j] - mean) * r;
            sum_g += g;
            sum_gx += g * xhat;
            if (dgamma != NULL)
                dgamma[j] += (double)dyr[j] * xhat;
            if (dbeta != NULL)
                dbeta[j] += dyr[j];
        }
        double mg = center ? sum_g / (double)cols : 0.0, mgx = sum_gx / (double)cols;
        for (size_t j = 0; j < cols; j++) {
            double xhat = ((double)xr[j] - mean) * r;
            dx[i * cols + j] = r * ((double)gamma[j] * dyr[j] - mg - xhat * mgx);
        }
    }
}

/* out (m x n) = sum_p op(A)[i][p] * op(B)[p][j] in double, from double operands, and the sums
 * of the terms' magnitudes; accumulating into out and bound. */
static void ref_dgemm_add(bool ta, bool tb, size_t m, size_t n, size_t k, double alpha,
                          const double *a, const double *b, double *out, double *bound)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double sum = 0.0, mag = 0.0;
            for (size_t p = 0; p < k; p++) {
                double term =
                    alpha * (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
                sum += term;
                mag += fabs(term);
            }
            out[i * n + j] += sum;
            bound[i * n + j] += mag;
        }
}

/* n doubles holding p (NULL: zeros), or NULL without memory; n may be 0. */
static double *ref_doubles(const float *p, size_t n)
{
    double *d = malloc((n > 0 ? n : 1) * sizeof *d);
    for (size_t i = 0; d != NULL && i < n; i++)
        d[i] = p != NULL ? p[i] : 0.0;
    return d;
}

bool hd__ref_lora_backward(size_t tokens, size_t in, size_t out, size_t rank, const float *x,
                           const float *w, const float *a, const float *b, float scale,
                           const float *dy, double *dx, double *da, double *db, double *bound_dx,
                           double *bound_da, double *bound_db)
{
    size_t t = tokens, r = rank;
    enum { X, W, A, B, DY, U, H, UB, HB, JUNK, BX, BA, BB, GX, GA, GB, COUNT };
    const size_t n[COUNT] = {t * in, in * out, in * r,  r * out, t * out,
                             t * r,  t * r,    t * r,   t * r,   t * in + in * r + r * out,
                             t * in, in * r,   r * out, t * in,  in * r,
                             r * out};
    const float *from[COUNT] = {x, w, a, b, dy};
    double *m[COUNT];
    bool ok = true;
    for (int i = 0; i < COUNT; i++)
        ok &= (m[i] = ref_doubles(from[i], n[i])) != NULL;
    if (ok) {
        /* u = dy*B^T and h = x*A are rounded to float by the op before their second product:
         * the bounds of that product carry the magnitudes of their terms (UB, HB), not |u|
         * and |h|. */
        ref_dgemm_add(false, true, t, r, out, 1.0, m[DY], m[B], m[U], m[UB]);
        ref_dgemm_add(false, false, t, r, in, 1.0, m[X], m[A], m[H], m[HB]);
        ref_dgemm_add(false, true, t, in, out, 1.0, m[DY], m[W], m[GX], m[BX]);
        ref_dgemm_add(false, true, t, in, r, scale, m[U], m[A], m[GX], m[JUNK]);
        ref_dgemm_add(false, true, t, in, r, scale, m[UB], m[A], m[JUNK], m[BX]);
        ref_dgemm_add(true, false, in, r, t, scale, m[X], m[U], m[GA], m[JUNK]);
        ref_dgemm_add(true, false, in, r, t, scale, m[X], m[UB], m[JUNK], m[BA]);
        ref_dgemm_add(true, false, r, out, t, scale, m[H], m[DY], m[GB], m[JUNK]);
        ref_dgemm_add(true, false, r, out, t, scale, m[HB], m[DY], m[JUNK], m[BB]);
        double *want[3] = {dx, da, db}, *bound[3] = {bound_dx, bound_da, bound_db};
        for (int o = 0; o < 3; o++)
            for (size_t i = 0; i < n[GX + o]; i++) {
                if (want[o] != NULL)
                    want[o][i] = m[GX + o][i];
                if (bound[o] != NULL)
                    bound[o][i] = m[BX + o][i];
            }
    }
    for (int i = 0; i < COUNT; i++)
        free(m[i]);
    return ok;
}

/* ---- the tools' check: sampled elements against the reference ---- */

size_t hd__ref_sample(size_t n, size_t max, size_t j)
{
    if (n <= max)
        return j;
    return (size_t)((double)j * (double)(n - 1) / (double)(max - 1) + 0.5);
}

size_t hd__ref_affordable(double per_element, size_t want)
{
    double fit = per_element > 0.0 ? (double)HD_REF_CHECK_MACS / per_element : (double)want;
    size_t n = fit >= (double)want ? want : (size_t)fit;
    return n > HD_REF_MIN_SAMPLES ? n : want < HD_REF_MIN_SAMPLES ? want : HD_REF_MIN_SAMPLES;
}

size_t hd__ref_sample_count(size_t n, size_t max)
{
    return n < max ? n : max;
}

double hd__ref_error_ratio(double err, double tol)
{
    if (isnan(err))
        return INFINITY;
    return err / tol;
}

/* The row ops' backward (in: x or y, [gamma,] dy): dx on the sampled rows, and the weight
 * gradients over every row (one row of the reference at a time). */
static double check_rows_backward(hd_op op, const hd_shape *shape, const float *const in[],
                                  const float *const got[], int outputs, float eps)
{
    bool norm = op != HD_OP_SOFTMAX_BACKWARD, center = op == HD_OP_LAYER_NORM_BACKWARD;
    size_t rows = shape->dim[0], cols = shape->dim[1];
    const float *x = in[0], *gamma = norm ? in[1] : NULL, *dy = in[norm ? 2 : 1];
    double *m = calloc(5 * (cols > 0 ? cols : 1), sizeof *m);
    if (m == NULL)
        return INFINITY;
    double *dx = m, *dg = m + cols, *db = m + 2 * cols, *sum_g = m + 3 * cols,
           *sum_b = m + 4 * cols;
    double worst = 0.0;
    size_t next = 0, si = 0; /* the next sampled row */
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols, *dyr = dy + i * cols;
        if (norm)
            hd__ref_norm_backward(center, 1, cols, xr, gamma, dyr, eps, dx, dg, center ? db : NULL);
        else if (i == next)
            hd__ref_softmax_backward(1, cols, xr, dyr, dx);
        for (size_t j = 0; norm && j < cols; j++) {
            sum_g[j] += dg[j];
            sum_b[j] += db[j];
        }
        if (i != next)
            continue;
        for (size_t j = 0; j < cols; j++) {
            double e = hd__ref_error_ratio(fabs((double)got[0][i * cols + j] - dx[j]),
                                           hd__ref_row_tolerance(op, dx[j]));
            worst = e > worst ? e : worst;
        }
        si++;
        next = si < hd__ref_sample_count(rows, HD_REF_CHECK_ROWS)
                   ? hd__ref_sample(rows, HD_REF_CHECK_ROWS, si)
                   : rows;
    }
    /* sums over the rows: float sums of rows terms on a device */
    double atol = 1e-5 * (1.0 + sqrt((double)rows));
    for (int o = 1; norm && o < outputs; o++)
        for (size_t j = 0; got[o] != NULL && j < cols; j++) {
            double want = o == 1 ? sum_g[j] : sum_b[j];
            double e =
                hd__ref_error_ratio(fabs((double)got[o][j] - want), atol + 1e-3 * fabs(want));
            worst = e > worst ? e : worst;
        }
    free(m);
    return worst;
}

/* A weight gradient of LoRA's backward, g[c][q] = scale * sum over the tokens of a[i][c] *
 * v[i][q] (dA: a = x, v = u; dB: a = dy, v = h), on sampled columns c of a (t x width) and every
 * q < r; vb holds the sums of the terms' magnitudes behind v, k the length of the longest sum
 * behind an element. got holds g as r x width (q_major) or width x r. The worst error over its
 * tolerance. */
static double check_weight_grad(size_t t, size_t r, const float *a, size_t width, const double *v,
                                const double *vb, double scale, double k, const float *got,
                                bool q_major, hd_precision precision)
{
    double worst = 0.0;
    for (size_t q = 0; q < r; q++)
        for (size_t sc = 0; sc < hd__ref_sample_count(width, HD_REF_CHECK_COLS); sc++) {
            size_t c = hd__ref_sample(width, HD_REF_CHECK_COLS, sc);
            double want = 0.0, bound = 0.0;
            for (size_t i = 0; i < t; i++) {
                want += scale * a[i * width + c] * v[i * r + q];
                bound += fabs(scale * a[i * width + c]) * vb[i * r + q];
            }
            double tol = hd__ref_matmul_tolerance(k, bound, 2.0, precision);
            double e = hd__ref_error_ratio(
                fabs((double)got[q_major ? q * width + c : c * r + q] - want), tol);
            worst = e > worst ? e : worst;
        }
    return worst;
}

void hd__ref_backward_memo_free(hd_ref_backward_memo *memo)
{
    free(memo->lowrank);
    memset(memo, 0, sizeof *memo);
}

static bool memo_holds(const hd_ref_backward_memo *memo, const hd_shape *s, const float *const in[])
{
    if (memo == NULL || memo->lowrank == NULL ||
        !hd__op_same_shape(HD_OP_LORA_BACKWARD, &memo->shape, s))
        return false;
    for (int i = 0; i < 5; i++)
        if (memo->in[i] != in[i])
            return false;
    return true;
}

/* LoRA's backward (in: x, W, A, B, dy; out: dx, dA, dB) on sampled elements: u = dy*B^T and
 * h = x*A in double for every token (what dA and dB sum over; from memo where it holds them),
 * then each sampled element with the sum of its terms' magnitudes as the bound (u's and h's
 * own through ub and hb). */
static double check_lora_backward(const hd_shape *s, const float *const in[],
                                  const float *const got[], float scale, hd_precision precision,
                                  hd_ref_backward_memo *memo)
{
    size_t t = s->dim[0], d_in = s->dim[1], d_out = s->dim[2], r = s->dim[3];
    const float *x = in[0], *w = in[1], *a = in[2], *b = in[3], *dy = in[4];
    /* W, A and B (and dA, dB) as the layout flags store them */
    bool tw = s->lora_layout & HD_LORA_TRANS_W, ta = s->lora_layout & HD_LORA_TRANS_A,
         tb = s->lora_layout & HD_LORA_TRANS_B;
    bool held = memo_holds(memo, s, in);
    double sc = scale, *m = held ? memo->lowrank : calloc(4 * (t * r > 0 ? t * r : 1), sizeof *m);
    if (m == NULL)
        return INFINITY;
    double *u = m, *ub = m + t * r, *h = m + 2 * t * r, *hb = m + 3 * t * r;
    for (size_t i = 0; !held && i < t; i++)
        for (size_t q = 0; q < r; q++) {
            for (size_t o = 0; o < d_out; o++) {
                double term = (double)dy[i * d_out + o] * b[tb ? o * r + q : q * d_out + o];
                u[i * r + q] += term;
                ub[i * r + q] += fabs(term);
            }
            for (size_t p = 0; p < d_in; p++) {
                double term = (double)x[i * d_in + p] * a[ta ? q * d_in + p : p * r + q];
                h[i * r + q] += term;
                hb[i * r + q] += fabs(term);
            }
        }
    double worst = 0.0;
    /* dx (t x in): sampled rows and columns */
    for (size_t si = 0; got[0] != NULL && si < hd__ref_sample_count(t, HD_REF_CHECK_ROWS); si++)
        for (size_t sj = 0; sj < hd__ref_sample_count(d_in, HD_REF_CHECK_COLS); sj++) {
            size_t i = hd__ref_sample(t, HD_REF_CHECK_ROWS, si),
                   j = hd__ref_sample(d_in, HD_REF_CHECK_COLS, sj);
            double want = 0.0, bound = 0.0;
            for (size_t o = 0; o < d_out; o++) {
                double term = (double)dy[i * d_out + o] * w[tw ? o * d_in + j : j * d_out + o];
                want += term;
                bound += fabs(term);
            }
            for (size_t q = 0; q < r; q++) {
                want += sc * u[i * r + q] * a[ta ? q * d_in + j : j * r + q];
                bound += fabs(sc * a[ta ? q * d_in + j : j * r + q]) * ub[i * r + q];
            }
            double tol = hd__ref_matmul_tolerance((double)(d_out + r + 1), bound, 2.0, precision);
            double e = hd__ref_error_ratio(fabs((double)got[0][i * d_in + j] - want), tol);
            worst = e > worst ? e : worst;
        }
    /* dA and dB on sampled rows or columns of each rank: sums over the tokens */
    if (got[1] != NULL)
        worst = fmax(worst, check_weight_grad(t, r, x, d_in, u, ub, sc, (double)(t + d_out + 1),
                                              got[1], ta, precision));
    if (got[2] != NULL)
        worst = fmax(worst, check_weight_grad(t, r, dy, d_out, h, hb, sc, (double)(t + d_in + 1),
                                              got[2], !tb, precision));
    if (held)
        return worst;
    if (memo != NULL) { /* kept for the next check of the case */
        hd__ref_backward_memo_free(memo);
        memo->shape = *s;
        memcpy(memo->in, in, sizeof memo->in);
        memo->lowrank = m;
    } else {
        free(m);
    }
    return worst;
}

void hd__ref_backward_prepare(hd_op op, const hd_shape *shape, const float *const in[],
                              hd_ref_backward_memo *memo)
{
    const float *none[3] = {NULL, NULL, NULL}; /* no output to check: the shared part alone */
    if (op == HD_OP_LORA_BACKWARD)
        check_lora_backward(shape, in, none, 1.0f, HD_PRECISION_FP32, memo);
}

bool hd__ref_is_backward(hd_op op)
{
    hd_args_kind args = hd__op(op)->args;
    return args == HD_ARGS_ROW_BACKWARD || args == HD_ARGS_LORA_BACKWARD;
}

double hd__ref_check_backward(hd_op op, const hd_shape *shape, const float *const in[],
                              const float *const got[], int outputs, float scale, float eps,
                              hd_precision precision, hd_ref_backward_memo *memo)
{
    if (op == HD_OP_LORA_BACKWARD)
        return check_lora_backward(shape, in, got, scale, precision, memo);
    return check_rows_backward(op, shape, in, got, outputs, eps);
}
