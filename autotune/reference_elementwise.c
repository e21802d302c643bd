/* The float64 reference of the elementwise ops, RoPE and the embedding (reference_step.h). */
#include <math.h>

#include "autotune/reference_step.h"

#define GELU_K 0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_C 0.044715

static double sigmoid(double t)
{
    return 1.0 / (1.0 + exp(-t));
}

void hd__ref_swiglu(size_t n, const float *g, const float *u, double *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (double)g[i] * sigmoid(g[i]) * (double)u[i];
}

void hd__ref_swiglu_backward(size_t n, const float *g, const float *u, const float *dy, double *dg,
                             double *du)
{
    for (size_t i = 0; i < n; i++) {
        double gi = g[i], s = sigmoid(gi);
        du[i] = (double)dy[i] * gi * s;
        dg[i] = (double)dy[i] * (double)u[i] * s * (1.0 + gi * (1.0 - s));
    }
}

void hd__ref_gelu(size_t n, const float *x, double *y)
{
    for (size_t i = 0; i < n; i++) {
        double xi = x[i];
        y[i] = 0.5 * xi * (1.0 + tanh(GELU_K * (xi + GELU_C * xi * xi * xi)));
    }
}

void hd__ref_gelu_backward(size_t n, const float *x, const float *dy, double *dx)
{
    for (size_t i = 0; i < n; i++) {
        double xi = x[i], t = tanh(GELU_K * (xi + GELU_C * xi * xi * xi));
        double slope =
            0.5 * (1.0 + t) + 0.5 * xi * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * xi * xi);
        dx[i] = (double)dy[i] * slope;
    }
}

void hd__ref_add(size_t n, float alpha, const float *x, const float *y, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (double)y[i] + (double)alpha * (double)x[i];
}

void hd__ref_rope(size_t rows, size_t heads, size_t d, const int *pos, const double *inv_freq,
                  bool inverse, const float *x, double *out)
{
    size_t pairs = d / 2, cols = heads * d;
    for (size_t r = 0; r < rows; r++)
        for (size_t h = 0; h < heads; h++)
            for (size_t i = 0; i < pairs; i++) {
                double a = (double)pos[r] * inv_freq[i], c = cos(a), s = sin(a);
                if (inverse)
                    s = -s;
                size_t at = r * cols + h * d + i;
                double x0 = x[at], x1 = x[at + pairs];
                out[at] = x0 * c - x1 * s;
                out[at + pairs] = x1 * c + x0 * s;
            }
}

void hd__ref_rope_inv_freq(double theta, size_t d, double *inv_freq)
{
    for (size_t i = 0; i < d / 2; i++)
        inv_freq[i] = pow(theta, -2.0 * (double)i / (double)d);
}

void hd__ref_embedding(size_t rows, size_t cols, const int *ids, const float *table, double *out)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < cols; j++)
            out[r * cols + j] = table[(size_t)ids[r] * cols + j];
}
