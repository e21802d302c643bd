#include <string.h>

#include "backends/cpu/cpu.h"

#ifdef HD_HAVE_OPENBLAS
#include <cblas.h>
#include <limits.h>
#endif

/* Plain C SGEMM for builds without OpenBLAS. The inner loop runs along a row of B and C, so it
 * vectorizes for the untransposed B; transposed B is read through a strided index. */
static void sgemm_c(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                    const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                    size_t ldc)
{
    for (size_t i = 0; i < m; i++) {
        float *c_row = c + i * ldc;
        if (beta == 0.0f)
            memset(c_row, 0, n * sizeof *c_row);
        else if (beta != 1.0f)
            for (size_t j = 0; j < n; j++)
                c_row[j] *= beta;
        for (size_t p = 0; p < k; p++) {
            float a_ip = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
            if (trans_b) {
                for (size_t j = 0; j < n; j++)
                    c_row[j] += a_ip * b[j * ldb + p];
            } else {
                const float *b_row = b + p * ldb;
                for (size_t j = 0; j < n; j++)
                    c_row[j] += a_ip * b_row[j];
            }
        }
    }
}

void hd__cpu_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                   size_t ldc)
{
#ifdef HD_HAVE_OPENBLAS
    /* CBLAS takes int dimensions; larger problems take the C path rather than overflow. */
    if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
        ldc <= INT_MAX) {
        if (beta == 0.0f) /* BLAS may compute 0*NaN; the contract says beta = 0 ignores C */
            for (size_t i = 0; i < m; i++)
                memset(c + i * ldc, 0, n * sizeof *c);
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                    (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    sgemm_c(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

hd_status hd__cpu_gemm(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    (void)state;
    (void)ctx;
    hd__cpu_sgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a->host, g->a->cols,
                  g->b->host, g->b->cols, g->beta, g->c->host, g->c->cols);
    return HD_OK;
}

/* Matrix i of each tensor starts i*rows*cols floats in; the leading dimension is the width. */
hd_status hd__cpu_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    (void)state;
    (void)ctx;
    size_t stride_a = g->m * g->k, stride_b = g->k * g->n, stride_c = g->m * g->n;
    for (size_t i = 0; i < g->batch; i++)
        hd__cpu_sgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                      g->a->host + i * stride_a, g->a->cols, g->b->host + i * stride_b,
                      g->b->cols, g->beta, g->c->host + i * stride_c, g->c->cols);
    return HD_OK;
}
