/*
 * A cuBLASLt in C for test_cublaslt (through $HD_CUBLASLT_LIBRARY): the functions of
 * backends/cuda/blas.c with cuBLASLt's documented semantics, column-major, on host memory in
 * place of device memory, so that the vendor GEMM's own part (the row-major call mapped onto
 * column-major descriptors, the kept plans, every refusal) runs where there is no GPU.
 * CUBLAS_COMPUTE_32F_FAST_TF32 rounds the operands to TF32 as the tensor cores read them.
 * Descriptors whose sizes disagree with each other, unknown attributes and values fail as
 * cuBLASLt fails them (CUBLAS_STATUS_INVALID_VALUE). $FAKE_CUBLASLT_NO_ALGO makes the heuristic
 * find none; fake_cublaslt_heuristics counts its calls. Built with FAKE_LACKS_MATMUL,
 * cublasLtMatmul is missing.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    OK = 0,
    INVALID_VALUE = 7,
    NOT_SUPPORTED = 15,
    COMPUTE_32F = 68,
    COMPUTE_32F_FAST_TF32 = 77,
};

typedef struct {
    int compute, transa, transb;
} desc;
typedef struct {
    uint64_t rows, cols;
    int64_t ld;
} layout;
typedef struct {
    uint64_t workspace;
} pref;
typedef struct {
    uint64_t data[8];
} algo;
typedef struct {
    algo a;
    size_t workspace_size;
    int state;
    float waves_count;
    int reserved[4];
} heuristic;

int fake_cublaslt_heuristics;
int fake_cublaslt_last_compute;

int cublasLtCreate(void **handle);
int cublasLtCreate(void **handle)
{
    *handle = malloc(1);
    return *handle != NULL ? OK : INVALID_VALUE;
}

int cublasLtDestroy(void *handle);
int cublasLtDestroy(void *handle)
{
    free(handle);
    return OK;
}

int cublasLtMatmulDescCreate(desc **d, int compute, int scale_type);
int cublasLtMatmulDescCreate(desc **d, int compute, int scale_type)
{
    if ((compute != COMPUTE_32F && compute != COMPUTE_32F_FAST_TF32) || scale_type != 0)
        return INVALID_VALUE;
    *d = calloc(1, sizeof **d);
    (*d)->compute = compute;
    return OK;
}

int cublasLtMatmulDescDestroy(desc *d);
int cublasLtMatmulDescDestroy(desc *d)
{
    free(d);
    return OK;
}

int cublasLtMatmulDescSetAttribute(desc *d, int attribute, const void *value, size_t bytes);
int cublasLtMatmulDescSetAttribute(desc *d, int attribute, const void *value, size_t bytes)
{
    int op;
    if (bytes != sizeof op || (attribute != 3 && attribute != 4))
        return INVALID_VALUE;
    memcpy(&op, value, sizeof op);
    if (op != 0 && op != 1)
        return INVALID_VALUE;
    *(attribute == 3 ? &d->transa : &d->transb) = op;
    return OK;
}

int cublasLtMatrixLayoutCreate(layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutCreate(layout **l, int type, uint64_t rows, uint64_t cols, int64_t ld)
{
    if (type != 0 || ld < (int64_t)rows || ld < 1)
        return INVALID_VALUE;
    *l = malloc(sizeof **l);
    **l = (layout){rows, cols, ld};
    return OK;
}

int cublasLtMatrixLayoutDestroy(layout *l);
int cublasLtMatrixLayoutDestroy(layout *l)
{
    free(l);
    return OK;
}

int cublasLtMatmulPreferenceCreate(pref **p);
int cublasLtMatmulPreferenceCreate(pref **p)
{
    *p = calloc(1, sizeof **p);
    return OK;
}

int cublasLtMatmulPreferenceDestroy(pref *p);
int cublasLtMatmulPreferenceDestroy(pref *p)
{
    free(p);
    return OK;
}

int cublasLtMatmulPreferenceSetAttribute(pref *p, int attribute, const void *value, size_t bytes);
int cublasLtMatmulPreferenceSetAttribute(pref *p, int attribute, const void *value, size_t bytes)
{
    if (attribute == 1 && bytes == sizeof p->workspace) {
        memcpy(&p->workspace, value, bytes);
        return OK;
    }
    uint32_t alignment;
    if (attribute < 5 || attribute > 8 || bytes != sizeof alignment)
        return INVALID_VALUE;
    memcpy(&alignment, value, bytes);
    return alignment >= 1 && alignment <= 256 && (alignment & (alignment - 1)) == 0 ? OK
                                                                                    : INVALID_VALUE;
}

/* op(A) m x k, op(B) k x n, C and D m x n */
static int consistent(const desc *d, const layout *a, const layout *b, const layout *c,
                      const layout *dd)
{
    uint64_t m = d->transa ? a->cols : a->rows, k = d->transa ? a->rows : a->cols;
    uint64_t kb = d->transb ? b->cols : b->rows, n = d->transb ? b->rows : b->cols;
    return k == kb && c->rows == m && c->cols == n && dd->rows == m && dd->cols == n &&
           c->ld == dd->ld;
}

int cublasLtMatmulAlgoGetHeuristic(void *handle, desc *d, layout *a, layout *b, layout *c,
                                   layout *dd, pref *p, int requested, heuristic *results,
                                   int *returned);
int cublasLtMatmulAlgoGetHeuristic(void *handle, desc *d, layout *a, layout *b, layout *c,
                                   layout *dd, pref *p, int requested, heuristic *results,
                                   int *returned)
{
    (void)handle;
    fake_cublaslt_heuristics++;
    *returned = 0;
    if (requested < 1 || !consistent(d, a, b, c, dd))
        return INVALID_VALUE;
    if (getenv("FAKE_CUBLASLT_NO_ALGO") != NULL)
        return NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].a.data[0] = 42;
    results[0].workspace_size = p->workspace < 4096 ? p->workspace : 4096;
    *returned = 1;
    return OK;
}

#ifndef FAKE_LACKS_MATMUL
static float tf32(float x)
{
    if (!isfinite(x))
        return x;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + 0x1000u) & ~0x1fffu; /* 13 low bits rounded off, to nearest */
    memcpy(&x, &u, sizeof x);
    return x;
}

int cublasLtMatmul(void *handle, desc *d, const float *alpha, const float *a, layout *la,
                   const float *b, layout *lb, const float *beta, const float *c, layout *lc,
                   float *out, layout *ld, const algo *al, void *workspace, size_t workspace_bytes,
                   void *stream);
int cublasLtMatmul(void *handle, desc *d, const float *alpha, const float *a, layout *la,
                   const float *b, layout *lb, const float *beta, const float *c, layout *lc,
                   float *out, layout *ld, const algo *al, void *workspace, size_t workspace_bytes,
                   void *stream)
{
    (void)handle;
    (void)stream;
    if (!consistent(d, la, lb, lc, ld) || al == NULL || al->data[0] != 42 ||
        (workspace_bytes > 0 && workspace == NULL))
        return INVALID_VALUE;
    fake_cublaslt_last_compute = d->compute;
    uint64_t m = ld->rows, n = ld->cols, k = d->transa ? la->rows : la->cols;
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) {
            double sum = 0.0;
            for (uint64_t p = 0; p < k; p++) {
                float x = d->transa ? a[i * la->ld + p] : a[p * la->ld + i];
                float y = d->transb ? b[p * lb->ld + j] : b[j * lb->ld + p];
                if (d->compute == COMPUTE_32F_FAST_TF32) {
                    x = tf32(x);
                    y = tf32(y);
                }
                sum += (double)x * y;
            }
            double r = *alpha * sum;
            if (*beta != 0.0f)
                r += (double)*beta * c[j * lc->ld + i];
            out[j * ld->ld + i] = (float)r;
        }
    return OK;
}
#endif
