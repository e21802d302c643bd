/* The float64 reference of the backward passes (see reference.h), for the tests and, as the
 * tools learn ops of several outputs, their checks. */
#include <math.h>
#include <stdlib.h>

#include "autotune/reference.h"

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
