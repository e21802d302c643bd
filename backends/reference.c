/* The float64 GEMM element (backends/reference.h). */
#include <math.h>

#include "backends/reference.h"

hd_f64_elem hd__f64_gemm_elem(bool trans_a, bool trans_b, size_t k, float alpha, const float *a,
                              size_t lda, const float *b, size_t ldb, size_t i, size_t j)
{
    double sum = 0.0, mag = 0.0;
    for (size_t p = 0; p < k; p++) {
        double x = trans_a ? (double)a[p * lda + i] : (double)a[i * lda + p];
        double y = trans_b ? (double)b[j * ldb + p] : (double)b[p * ldb + j];
        sum += x * y;
        mag += fabs(x * y);
    }
    return (hd_f64_elem){(double)alpha * sum, fabs((double)alpha) * mag};
}
