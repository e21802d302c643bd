/* The float64 reference of residual + RMS norm, cross-entropy and AdamW (reference_step.h). */
#include <math.h>

#include "autotune/reference_step.h"

void hd__ref_add_rms_norm(size_t rows, size_t cols, const float *x, const float *r, const float *w,
                          float eps, double *h, double *y)
{
    for (size_t i = 0; i < rows; i++) {
        const float *xr = x + i * cols, *rr = r + i * cols;
        double sq = 0.0;
        for (size_t j = 0; j < cols; j++) {
            double s = (double)xr[j] + rr[j];
            sq += s * s;
        }
        double rstd = 1.0 / sqrt(sq / (double)cols + (double)eps);
        for (size_t j = 0; j < cols; j++) {
            double s = (double)xr[j] + rr[j];
            if (h != NULL)
                h[i * cols + j] = s;
            y[i * cols + j] = s * rstd * w[j];
        }
    }
}

void hd__ref_add_rms_norm_backward(size_t rows, size_t cols, const float *h, const float *w,
                                   const float *dy, const float *dres, float eps, double *dh,
                                   double *dw)
{
    for (size_t j = 0; j < cols && dw != NULL; j++)
        dw[j] = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *hr = h + i * cols, *dyr = dy + i * cols;
        double sq = 0.0, sgx = 0.0;
        for (size_t j = 0; j < cols; j++)
            sq += (double)hr[j] * hr[j];
        double rstd = 1.0 / sqrt(sq / (double)cols + (double)eps);
        for (size_t j = 0; j < cols; j++)
            sgx += (double)w[j] * dyr[j] * (hr[j] * rstd);
        sgx /= (double)cols;
        for (size_t j = 0; j < cols; j++) {
            double xhat = hr[j] * rstd;
            dh[i * cols + j] = rstd * ((double)w[j] * dyr[j] - xhat * sgx) +
                               (dres != NULL ? dres[i * cols + j] : 0.0);
            if (dw != NULL)
                dw[j] += (double)dyr[j] * xhat;
        }
    }
}

/* log sum_j exp(x_j): NaN where a logit is NaN or +inf (PyTorch's log_softmax takes x - max,
 * inf - inf there), -inf for a row of -inf. */
static double row_lse(const float *x, size_t n)
{
    double m = -INFINITY;
    for (size_t j = 0; j < n; j++) {
        if (isnan(x[j]) || x[j] == INFINITY)
            return NAN;
        m = x[j] > m ? x[j] : m;
    }
    if (m == -INFINITY)
        return -INFINITY;
    double s = 0.0;
    for (size_t j = 0; j < n; j++)
        s += exp((double)x[j] - m);
    return m + log(s);
}

void hd__ref_cross_entropy(size_t rows, size_t vocab, const float *logits, const int32_t *targets,
                           int32_t ignore_index, double *losses, double *lse, double *dlogits,
                           double *loss)
{
    size_t count = 0;
    for (size_t i = 0; i < rows; i++)
        count += targets[i] != ignore_index;
    double total = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *x = logits + i * vocab;
        bool counted = targets[i] != ignore_index;
        double l = row_lse(x, vocab), li = counted ? l - x[targets[i]] : 0.0;
        total += li;
        if (losses != NULL)
            losses[i] = li;
        if (lse != NULL)
            lse[i] = l;
        for (size_t j = 0; j < vocab && dlogits != NULL; j++)
            dlogits[i * vocab + j] =
                counted ? (exp((double)x[j] - l) - (j == (size_t)targets[i])) / (double)count : 0.0;
    }
    if (loss != NULL)
        *loss = total / (double)count;
}

double hd__ref_grad_norm(size_t count, const float *const g[], const size_t n[])
{
    double sum = 0.0;
    for (size_t k = 0; k < count; k++)
        for (size_t j = 0; j < n[k]; j++)
            sum += (double)g[k][j] * g[k][j];
    return sqrt(sum);
}

double hd__ref_clip_coef(double total, float max_norm)
{
    double c = max_norm / (total + 1e-6);
    return c > 1.0 ? 1.0 : c;
}

void hd__ref_adamw(size_t n, const float *p, const float *g, const float *m, const float *v,
                   const hd_ref_adamw_params *hp, double coef, double *p_out, double *m_out,
                   double *v_out)
{
    double t = (double)hp->step, b1 = hp->beta1, b2 = hp->beta2;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t j = 0; j < n; j++) {
        double gj = g[j] * coef;
        double pj = p[j] * (1.0 - (double)hp->lr * hp->weight_decay);
        double mj = b1 * m[j] + (1.0 - b1) * gj;
        double vj = b2 * v[j] + (1.0 - b2) * gj * gj;
        p_out[j] = pj - hp->lr / bc1 * mj / (sqrt(vj / bc2) + hp->eps);
        m_out[j] = mj;
        v_out[j] = vj;
    }
}
