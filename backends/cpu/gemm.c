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

#ifdef HD_HAVE_OPENBLAS
/* One row or one column of C is a matrix-vector product. OpenBLAS's SGEMM packs its operands
 * for blocking even then, which costs several times the single pass over the matrix that
 * SGEMV makes: the one-token case of LoRA lives here. */
static bool sgemv_if_vector(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                            float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                            float *c, size_t ldc)
{
    if (m == 1) { /* c (1×n) = alpha * op(B)^T · a */
        int inc_a = trans_a ? (int)lda : 1;
        if (trans_b) /* B is n×k */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, (int)ldb, a,
                        inc_a, 1.0f, c, 1);
        else /* B is k×n */
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, alpha, b, (int)ldb, a, inc_a,
                        1.0f, c, 1);
        return true;
    }
    if (n == 1) { /* c (m×1, stride ldc) = alpha * op(A) · b */
        int inc_b = trans_b ? 1 : (int)ldb;
        if (trans_a) /* A is k×m */
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)m, alpha, a, (int)lda, b, inc_b,
                        1.0f, c, (int)ldc);
        else
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, alpha, a, (int)lda, b,
                        inc_b, 1.0f, c, (int)ldc);
        return true;
    }
    return false;
}
#endif

void hd__cpu_sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                   const float *a, size_t lda, const float *b, size_t ldb, float beta, float *c,
                   size_t ldc)
{
#ifdef HD_HAVE_OPENBLAS
    /* CBLAS takes int dimensions; larger problems take the C path rather than overflow. */
    if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
        ldc <= INT_MAX) {
        /* BLAS may compute 0*NaN; the contract says beta = 0 ignores C. Scaling C here once
         * lets the vector path accumulate with beta = 1. */
        for (size_t i = 0; i < m && beta != 1.0f; i++) {
            float *row = c + i * ldc;
            for (size_t j = 0; j < n; j++)
                row[j] = beta == 0.0f ? 0.0f : beta * row[j];
        }
        if (!sgemv_if_vector(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc))
            cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                        trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
                        (int)lda, b, (int)ldb, 1.0f, c, (int)ldc);
        return;
    }
#endif
    sgemm_c(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

hd_status hd__cpu_gemm(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    (void)state;
    (void)ctx;
    hd__cpu_sgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, g->a->state->host, g->a->cols,
                  g->b->state->host, g->b->cols, g->beta, g->c->state->host, g->c->cols);
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
                      g->a->state->host + i * stride_a, g->a->cols,
                      g->b->state->host + i * stride_b, g->b->cols, g->beta,
                      g->c->state->host + i * stride_c, g->c->cols);
    return HD_OK;
}
