/* The tools' check of cross-entropy from logits and of the LM head's (reference.h): every row's
 * log-sum-exp for the loss where it is affordable, the gradient on sampled rows. */
#include <math.h>
#include <stdlib.h>

#include "autotune/reference_step.h"
#include "autotune/step_check.h"

/* The first row whose target is ignored, or rows: a check samples it among the others. */
static size_t first_ignored(const hd_op_params *p, size_t rows)
{
    size_t i = 0;
    while (i < rows && p->ids[i] != p->ignore_index)
        i++;
    return i;
}

static size_t counted_rows(const hd_op_params *p, size_t rows)
{
    size_t n = 0;
    for (size_t i = 0; i < rows; i++)
        n += p->ids[i] != p->ignore_index;
    return n;
}

/* ---- from logits ---- */

/* The loss within the rows' V-long sums of exps (relative error V u each, any order), the
 * roundings of lse = max + log(sum) and of each row's difference, and the mean's T-long sum. */
static double cross_entropy_loss_tol(size_t rows, size_t vocab, const float *x,
                                     const hd_op_params *p, const double *lse, double loss,
                                     size_t count)
{
    double terms = 0.0;
    for (size_t i = 0; i < rows; i++)
        if (p->ids[i] != p->ignore_index)
            terms +=
                (double)vocab + 8 +
                2 * (fabs(lse[i]) + log((double)vocab) + fabs((double)x[i * vocab + p->ids[i]]));
    return HD_REF_U * (terms / (double)count + ((double)rows + 4) * fabs(loss)) + HD_REF_EXACT;
}

/* Row i's dlogits: each probability within its sum's rounding (V u) and exp's argument's, and
 * (p - onehot) / count within the roundings of the subtraction, of 1 / count and of the
 * product; an ignored row exactly zero. */
static void cross_entropy_row(size_t vocab, const float *x, const hd_op_params *p, size_t i,
                              double lse, size_t count, double *want, hd_ref_expect *e)
{
    int32_t t = p->ids[i];
    hd__ref_cross_entropy(1, vocab, x, &t, p->ignore_index, NULL, NULL, want, NULL);
    bool counted = t != p->ignore_index;
    for (size_t j = 0; j < vocab; j++) {
        double prob = exp((double)x[j] - lse), off = prob - (j == (size_t)t);
        double tol =
            HD_REF_U / (double)count *
            (prob * ((double)vocab + 8 + 2 * (fabs((double)x[j] - lse) + log((double)vocab))) +
             4 * fabs(off));
        hd__ref_expect_add(e, 1, i * vocab + j, counted ? want[j] / (double)count : 0.0,
                           counted ? tol + HD_REF_EXACT : HD_REF_EXACT);
    }
}

bool hd__ref_expect_cross_entropy(const hd_shape *s, const hd_op_params *p, const float *const in[],
                                  hd_ref_expect *e)
{
    size_t rows = s->dim[0], vocab = s->dim[1], count = counted_rows(p, rows);
    size_t max = hd__ref_step_rows_by_elems(rows, vocab), ignored = first_ignored(p, rows);
    const float *x = in[0];
    double *lse = malloc((rows + vocab + 1) * sizeof *lse), loss;
    if (lse == NULL)
        return false;
    double *want = lse + rows;
    hd__ref_cross_entropy(rows, vocab, x, p->ids, p->ignore_index, NULL, lse, NULL, &loss);
    double tol = count > 0 ? cross_entropy_loss_tol(rows, vocab, x, p, lse, loss, count) : 0.0;
    hd__ref_expect_add(e, 0, 0, loss, tol);
    for (size_t si = 0; count > 0 && si < hd__ref_sample_count(rows, max); si++) {
        size_t i = hd__ref_sample(rows, max, si);
        cross_entropy_row(vocab, x + i * vocab, p, i, lse[i], count, want, e);
    }
    if (count > 0 && ignored < rows)
        cross_entropy_row(vocab, x + ignored * vocab, p, ignored, 0.0, count, want, e);
    free(lse);
    return !e->no_memory;
}

/* ---- of the LM head ---- */

/* One row's logits z = h w^T in double and the tolerance of each (a D-long product at the
 * context's GEMM precision, from its terms' magnitudes); its lse and lse's tolerance (the
 * weights' share of the logits' and the V-long sum's). */
typedef struct lce_row {
    double *z, *dz; /* V each */
    double lse, dlse;
} lce_row;

static void lce_logits(const float *h, const float *w, size_t dim, size_t vocab,
                       hd_precision precision, lce_row *r)
{
    double max = -INFINITY, sum = 0.0, spread = 0.0;
    for (size_t v = 0; v < vocab; v++) {
        const float *wv = w + v * dim;
        double z = 0.0, mag = 0.0;
        for (size_t c = 0; c < dim; c++) {
            double term = (double)h[c] * wv[c];
            z += term;
            mag += fabs(term);
        }
        r->z[v] = z;
        r->dz[v] = hd__ref_matmul_tolerance((double)dim + 2, mag, 1.0, precision);
        max = z > max ? z : max;
    }
    for (size_t v = 0; v < vocab; v++)
        sum += exp(r->z[v] - max);
    r->lse = max + log(sum);
    for (size_t v = 0; v < vocab; v++)
        spread += exp(r->z[v] - r->lse) * r->dz[v];
    r->dlse = spread + ((double)vocab + 8) * HD_REF_U + 2 * HD_REF_U * fabs(r->lse);
}

/* Row i's dh = (softmax(z) - onehot(t)) w / count, each element within its weights' errors
 * (the logits' and lse's) and the second product's rounding; an ignored row exactly zero. */
static void lce_dh_row(const float *w, size_t dim, size_t vocab, const hd_op_params *p, size_t i,
                       size_t count, hd_precision precision, const lce_row *r, double *acc,
                       hd_ref_expect *e)
{
    int32_t t = p->ids[i];
    double *dh = acc, *weight_err = acc + dim, *mag = acc + 2 * dim;
    for (size_t c = 0; c < 3 * dim; c++)
        acc[c] = 0.0;
    for (size_t v = 0; t != p->ignore_index && v < vocab; v++) {
        double prob = exp(r->z[v] - r->lse), off = prob - (v == (size_t)t);
        double err = prob * (r->dz[v] + r->dlse + (4 + 2 * fabs(r->z[v] - r->lse)) * HD_REF_U);
        const float *wv = w + v * dim;
        for (size_t c = 0; c < dim; c++) {
            dh[c] += off * wv[c];
            weight_err[c] += err * fabs((double)wv[c]);
            mag[c] += fabs(off * wv[c]);
        }
    }
    for (size_t c = 0; c < dim && t == p->ignore_index; c++)
        hd__ref_expect_add(e, 1, i * dim + c, 0.0, HD_REF_EXACT);
    for (size_t c = 0; c < dim && t != p->ignore_index; c++) {
        double tol =
            weight_err[c] + hd__ref_matmul_tolerance((double)vocab + 4, mag[c], 1.0, precision);
        hd__ref_expect_add(e, 1, i * dim + c, dh[c] / (double)count, tol / (double)count);
    }
}

/* The loss's pieces over the rows computed: their sum and tolerance, and over the sampled rows
 * the part of the mean they give for certain (the least each row's loss can be). */
typedef struct lce_sums {
    double loss, tol;          /* every row computed */
    double least, sampled_tol; /* sampled rows: sum of max(0, l - tol), and of tol */
    size_t sampled;
} lce_sums;

static void lce_add_row(const hd_op_params *p, size_t i, bool sampled, const lce_row *r,
                        lce_sums *sums)
{
    int32_t t = p->ids[i];
    if (t == p->ignore_index)
        return;
    double l = r->lse - r->z[t];
    double tol = r->dlse + r->dz[t] + 2 * HD_REF_U * (fabs(r->lse) + fabs(r->z[t]));
    sums->loss += l;
    sums->tol += tol;
    if (!sampled)
        return;
    sums->least += l - tol > 0 ? l - tol : 0.0;
    sums->sampled_tol += tol;
    sums->sampled++;
}

/* Bounds of the loss where not every row's logits are affordable: at least what the sampled
 * rows give (a cross-entropy is never negative; the other rows each within the sampled rows'
 * mean tolerance of 0), at most log V + 2 |h_i| max_v |w_v| per counted row (every logit is
 * within |h_i| |w_v| of 0). As the middle and half-width of the interval. */
static void lce_loss_bounds(const hd_shape *s, const hd_op_params *p, const float *h,
                            const float *w, size_t count, const lce_sums *sums, hd_ref_expect *e)
{
    size_t rows = s->dim[0], dim = s->dim[1], vocab = s->dim[2];
    double wmax = 0.0, most = 0.0;
    for (size_t v = 0; v < vocab; v++) {
        double sq = 0.0;
        for (size_t c = 0; c < dim; c++)
            sq += (double)w[v * dim + c] * w[v * dim + c];
        wmax = sq > wmax ? sq : wmax;
    }
    for (size_t i = 0; i < rows; i++) {
        double sq = 0.0;
        for (size_t c = 0; c < dim && p->ids[i] != p->ignore_index; c++)
            sq += (double)h[i * dim + c] * h[i * dim + c];
        most += p->ids[i] != p->ignore_index ? log((double)vocab) + 2 * sqrt(sq * wmax) : 0.0;
    }
    double others = (double)(count - sums->sampled) *
                    (sums->sampled > 0 ? sums->sampled_tol / (double)sums->sampled : 0.0);
    double lo = (sums->least - others) / (double)count, hi = most / (double)count * (1 + 1e-3);
    lo = lo > 0 ? lo * (1 - 1e-3) : 0.0;
    e->bounded = 0;
    hd__ref_expect_add(e, 0, 0, (lo + hi) / 2, (hi - lo) / 2 + HD_REF_EXACT);
}

/* Rows of dh as many as the budget affords at 2 V D multiply-adds each (an ignored one among
 * them); every row's logits for the loss where T V D fits the budget, else its bounds. */
bool hd__ref_expect_linear_cross_entropy(const hd_shape *s, const hd_op_params *p,
                                         const float *const in[], hd_ref_expect *e)
{
    size_t rows = s->dim[0], dim = s->dim[1], vocab = s->dim[2], count = counted_rows(p, rows);
    const float *h = in[0], *w = in[1];
    double work = (double)dim * (double)vocab;
    size_t max = hd__ref_step_rows_by_cost(rows, 2 * work), ignored = first_ignored(p, rows);
    bool every_row = (double)rows * work <= (double)HD_REF_STEP_MACS;
    double *m = malloc((2 * vocab + 3 * dim + 1) * sizeof *m);
    if (m == NULL)
        return false;
    lce_row r = {.z = m, .dz = m + vocab};
    lce_sums sums = {0};
    size_t next = 0, si = 0; /* the next sampled row */
    for (size_t i = 0; i < rows && count > 0; i++) {
        bool sampled = i == next || i == ignored;
        if (!sampled && !every_row)
            continue;
        if (p->ids[i] != p->ignore_index) { /* an ignored row's dh is zero: no logits */
            lce_logits(h + i * dim, w, dim, vocab, s->precision, &r);
            lce_add_row(p, i, sampled, &r, &sums);
        }
        if (sampled)
            lce_dh_row(w, dim, vocab, p, i, count, s->precision, &r, m + 2 * vocab, e);
        if (i == next) {
            si++;
            next = si < hd__ref_sample_count(rows, max) ? hd__ref_sample(rows, max, si) : rows;
        }
    }
    if (count > 0 && every_row)
        hd__ref_expect_add(e, 0, 0, sums.loss / (double)count,
                           (sums.tol + ((double)rows + 4) * HD_REF_U * fabs(sums.loss)) /
                                   (double)count +
                               HD_REF_EXACT);
    else if (count > 0)
        lce_loss_bounds(s, p, h, w, count, &sums, e);
    free(m);
    return !e->no_memory;
}
