/*
 * cuBLASLt through dlopen (blas.h). The types and values below are those of cuBLASLt's
 * documentation (cublasLt.h of CUDA 12 and 13, unchanged across them).
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/blas.h"
#include "core/error.h"

typedef int lt_status; /* cublasStatus_t: 0 is success */
typedef struct lt_handle_ *lt_handle;
typedef struct lt_desc_ *lt_desc;
typedef struct lt_layout_ *lt_layout;
typedef struct lt_pref_ *lt_pref;

typedef struct lt_algo {
    uint64_t data[8];
} lt_algo;

typedef struct lt_heuristic {
    lt_algo algo;
    size_t workspace_size;
    lt_status state;
    float waves_count;
    int reserved[4];
} lt_heuristic;

enum {
    LT_SUCCESS = 0,
    LT_ALLOC_FAILED = 3,
    LT_NOT_SUPPORTED = 15,
    LT_R_32F = 0,             /* cudaDataType CUDA_R_32F */
    LT_COMPUTE_32F = 68,      /* fp32 FMAs, nothing narrower */
    LT_COMPUTE_32F_TF32 = 77, /* CUBLAS_COMPUTE_32F_FAST_TF32 */
    LT_OP_N = 0,
    LT_OP_T = 1,
    LT_DESC_TRANSA = 3,
    LT_DESC_TRANSB = 4,
    LT_PREF_MAX_WORKSPACE_BYTES = 1,
    LT_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    LT_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    LT_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    LT_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

#define LT_FUNCTIONS(X)                                                                            \
    X(cublasLtCreate, lt_status, (lt_handle * handle))                                             \
    X(cublasLtDestroy, lt_status, (lt_handle handle))                                              \
    X(cublasLtMatmulDescCreate, lt_status, (lt_desc * desc, int compute, int scale_type))          \
    X(cublasLtMatmulDescDestroy, lt_status, (lt_desc desc))                                        \
    X(cublasLtMatmulDescSetAttribute, lt_status,                                                   \
      (lt_desc desc, int attribute, const void *value, size_t bytes))                              \
    X(cublasLtMatrixLayoutCreate, lt_status,                                                       \
      (lt_layout * layout, int type, uint64_t rows, uint64_t cols, int64_t ld))                    \
    X(cublasLtMatrixLayoutDestroy, lt_status, (lt_layout layout))                                  \
    X(cublasLtMatmulPreferenceCreate, lt_status, (lt_pref * pref))                                 \
    X(cublasLtMatmulPreferenceDestroy, lt_status, (lt_pref pref))                                  \
    X(cublasLtMatmulPreferenceSetAttribute, lt_status,                                             \
      (lt_pref pref, int attribute, const void *value, size_t bytes))                              \
    X(cublasLtMatmulAlgoGetHeuristic, lt_status,                                                   \
      (lt_handle handle, lt_desc desc, lt_layout a, lt_layout b, lt_layout c, lt_layout d,         \
       lt_pref pref, int requested, lt_heuristic *results, int *returned))                         \
    X(cublasLtMatmul, lt_status,                                                                   \
      (lt_handle handle, lt_desc desc, const void *alpha, const void *a, lt_layout a_layout,       \
       const void *b, lt_layout b_layout, const void *beta, const void *c, lt_layout c_layout,     \
       void *d, lt_layout d_layout, const lt_algo *algo, void *workspace, size_t workspace_bytes,  \
       void *stream))

typedef struct lt_library {
    void *library;
#define LT_MEMBER(name, ret, args) ret(*name) args;
    LT_FUNCTIONS(LT_MEMBER)
#undef LT_MEMBER
} lt_library;

/* One shape's descriptors and algorithm. */
typedef struct lt_plan {
    bool used;
    hd_rt_gemm key; /* its pointers, alpha and beta zero */
    size_t alignment[3];
    size_t workspace_bytes;
    lt_desc desc;
    lt_layout a, b, c;
    lt_algo algo;
    size_t workspace_needed;
} lt_plan;

#define LT_PLANS 16

struct hd_cublaslt {
    lt_library lib;
    lt_handle handle;
    lt_plan plans[LT_PLANS];
    unsigned next; /* the plan replaced next, round robin */
};

/* The column-major product cuBLASLt computes for a row-major hd_rt_gemm: D (m x n) = op(A) (m
 * x k) * op(B) (k x n), where A is the row-major call's b and B its a, each given by its stored
 * rows, columns and leading dimension as column-major storage sees them. */
typedef struct lt_dims {
    uint64_t m, n, k;
    bool trans_a, trans_b;
    uint64_t a_rows, a_cols, lda;
    uint64_t b_rows, b_cols, ldb;
    uint64_t c_rows, c_cols, ldc;
} lt_dims;

static void dims_of(const hd_rt_gemm *g, lt_dims *out)
{
    /* row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T: b first. A row-major
     * matrix r x c with leading dimension ld is the column-major c x r one with the same ld. */
    *out = (lt_dims){
        .m = g->n,
        .n = g->m,
        .k = g->k,
        .trans_a = g->trans_b,
        .trans_b = g->trans_a,
        .a_rows = g->trans_b ? g->k : g->n,
        .a_cols = g->trans_b ? g->n : g->k,
        .lda = g->ldb,
        .b_rows = g->trans_a ? g->m : g->k,
        .b_cols = g->trans_a ? g->k : g->m,
        .ldb = g->lda,
        .c_rows = g->n,
        .c_cols = g->m,
        .ldc = g->ldc,
    };
}

static hd_status lt_error(hd_context *ctx, lt_status r, const char *what)
{
    hd_status s = r == LT_NOT_SUPPORTED  ? HD_ERR_UNSUPPORTED
                  : r == LT_ALLOC_FAILED ? HD_ERR_DEVICE_OUT_OF_MEMORY
                                         : HD_ERR_DEVICE;
    return hd__error(ctx, s, "cuBLASLt: %s failed (status %d)", what, r);
}

static bool load_from(lt_library *lib, const char *path, char *why, size_t cap)
{
    /* kept mapped after the last close: contexts come and go, and loading it is slow */
    lib->library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (lib->library == NULL) {
        const char *err = dlerror();
        snprintf(why, cap, "%s could not be loaded (%s)", path, err != NULL ? err : "no reason");
        return false;
    }
    /* a data pointer from dlsym copied into a function pointer, as POSIX allows */
#define LT_LOAD(name, ret, args)                                                                   \
    {                                                                                              \
        void *found = dlsym(lib->library, #name);                                                  \
        memcpy(&lib->name, &found, sizeof found);                                                  \
        if (found == NULL) {                                                                       \
            snprintf(why, cap, "%s lacks %s", path, #name);                                        \
            dlclose(lib->library);                                                                 \
            lib->library = NULL;                                                                   \
            return false;                                                                          \
        }                                                                                          \
    }
    LT_FUNCTIONS(LT_LOAD)
#undef LT_LOAD
    return true;
}

static bool load(lt_library *lib, char *why, size_t cap)
{
    const char *named = getenv("HD_CUBLASLT_LIBRARY");
    if (named != NULL && named[0] != '\0')
        return load_from(lib, named, why, cap);
    static const char *const sonames[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
    char first[512] = "";
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
        if (load_from(lib, sonames[i], why, cap))
            return true;
        if (i == 0)
            memcpy(first, why, cap < sizeof first ? cap : sizeof first);
    }
    first[sizeof first - 1] = '\0';
    snprintf(why, cap, "%.400s; nor libcublasLt.so.12", first);
    return false;
}

hd_status hd__cublaslt_open(hd_context *ctx, hd_cublaslt **out)
{
    *out = NULL;
    hd_cublaslt *lt = calloc(1, sizeof *lt);
    if (lt == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "cuBLASLt: its state");
    char why[512];
    if (!load(&lt->lib, why, sizeof why)) {
        free(lt);
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "cuBLASLt: %s", why);
    }
    lt_status r = lt->lib.cublasLtCreate(&lt->handle);
    if (r != LT_SUCCESS) {
        dlclose(lt->lib.library);
        free(lt);
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "cuBLASLt: cublasLtCreate failed (status %d)", r);
    }
    *out = lt;
    return HD_OK;
}

static void plan_clear(const lt_library *lib, lt_plan *p)
{
    if (p->desc != NULL)
        lib->cublasLtMatmulDescDestroy(p->desc);
    lt_layout *const layouts[] = {&p->a, &p->b, &p->c};
    for (size_t i = 0; i < 3; i++)
        if (*layouts[i] != NULL)
            lib->cublasLtMatrixLayoutDestroy(*layouts[i]);
    memset(p, 0, sizeof *p);
}

void hd__cublaslt_close(hd_cublaslt *lt)
{
    if (lt == NULL)
        return;
    for (size_t i = 0; i < LT_PLANS; i++)
        plan_clear(&lt->lib, &lt->plans[i]);
    lt->lib.cublasLtDestroy(lt->handle);
    dlclose(lt->lib.library);
    free(lt);
}

/* The alignment cuBLASLt may assume of an address: its largest power of two, at most 256. */
static size_t alignment_of(hd_devmem mem)
{
    uintptr_t p = (uintptr_t)mem;
    size_t a = 256;
    while (a > 1 && p % a != 0)
        a /= 2;
    return a;
}

static hd_rt_gemm key_of(const hd_rt_gemm *g)
{
    hd_rt_gemm k = *g;
    k.a = k.b = k.c = NULL;
    k.alpha = k.beta = 0.0f;
    return k;
}

static bool plan_matches(const lt_plan *p, const hd_rt_gemm *key, const size_t alignment[3],
                         size_t workspace_bytes)
{
    return p->used && p->workspace_bytes == workspace_bytes &&
           memcmp(p->alignment, alignment, sizeof p->alignment) == 0 && p->key.m == key->m &&
           p->key.n == key->n && p->key.k == key->k && p->key.lda == key->lda &&
           p->key.ldb == key->ldb && p->key.ldc == key->ldc && p->key.trans_a == key->trans_a &&
           p->key.trans_b == key->trans_b && p->key.precision == key->precision;
}

static hd_status set_pref(hd_context *ctx, const lt_library *lib, lt_pref pref, int attribute,
                          uint64_t value)
{
    /* the workspace size is a uint64_t, the alignments uint32_t */
    uint32_t narrow = (uint32_t)value;
    lt_status r =
        attribute == LT_PREF_MAX_WORKSPACE_BYTES
            ? lib->cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value)
            : lib->cublasLtMatmulPreferenceSetAttribute(pref, attribute, &narrow, sizeof narrow);
    return r == LT_SUCCESS ? HD_OK : lt_error(ctx, r, "cublasLtMatmulPreferenceSetAttribute");
}

/* Descriptors for the shape, and the heuristic's first algorithm for them. */
static hd_status plan_make(hd_cublaslt *lt, hd_context *ctx, lt_plan *p)
{
    const lt_library *lib = &lt->lib;
    lt_dims d;
    dims_of(&p->key, &d);
    int compute = p->key.precision == HD_PRECISION_TF32 ? LT_COMPUTE_32F_TF32 : LT_COMPUTE_32F;
    lt_status r = lib->cublasLtMatmulDescCreate(&p->desc, compute, LT_R_32F);
    if (r != LT_SUCCESS)
        return lt_error(ctx, r, "cublasLtMatmulDescCreate");
    int ta = d.trans_a ? LT_OP_T : LT_OP_N, tb = d.trans_b ? LT_OP_T : LT_OP_N;
    if ((r = lib->cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSA, &ta, sizeof ta)) !=
            LT_SUCCESS ||
        (r = lib->cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSB, &tb, sizeof tb)) !=
            LT_SUCCESS)
        return lt_error(ctx, r, "cublasLtMatmulDescSetAttribute");
    if ((r = lib->cublasLtMatrixLayoutCreate(&p->a, LT_R_32F, d.a_rows, d.a_cols,
                                             (int64_t)d.lda)) != LT_SUCCESS ||
        (r = lib->cublasLtMatrixLayoutCreate(&p->b, LT_R_32F, d.b_rows, d.b_cols,
                                             (int64_t)d.ldb)) != LT_SUCCESS ||
        (r = lib->cublasLtMatrixLayoutCreate(&p->c, LT_R_32F, d.c_rows, d.c_cols,
                                             (int64_t)d.ldc)) != LT_SUCCESS)
        return lt_error(ctx, r, "cublasLtMatrixLayoutCreate");
    lt_pref pref = NULL;
    if ((r = lib->cublasLtMatmulPreferenceCreate(&pref)) != LT_SUCCESS)
        return lt_error(ctx, r, "cublasLtMatmulPreferenceCreate");
    /* the column-major A is the row-major call's b, its B the call's a */
    hd_status s = set_pref(ctx, lib, pref, LT_PREF_MAX_WORKSPACE_BYTES, p->workspace_bytes);
    if (s == HD_OK)
        s = set_pref(ctx, lib, pref, LT_PREF_MIN_ALIGNMENT_A_BYTES, p->alignment[1]);
    if (s == HD_OK)
        s = set_pref(ctx, lib, pref, LT_PREF_MIN_ALIGNMENT_B_BYTES, p->alignment[0]);
    if (s == HD_OK)
        s = set_pref(ctx, lib, pref, LT_PREF_MIN_ALIGNMENT_C_BYTES, p->alignment[2]);
    if (s == HD_OK)
        s = set_pref(ctx, lib, pref, LT_PREF_MIN_ALIGNMENT_D_BYTES, p->alignment[2]);
    lt_heuristic found = {0};
    int returned = 0;
    if (s == HD_OK &&
        (r = lib->cublasLtMatmulAlgoGetHeuristic(lt->handle, p->desc, p->a, p->b, p->c, p->c, pref,
                                                 1, &found, &returned)) != LT_SUCCESS)
        s = lt_error(ctx, r, "cublasLtMatmulAlgoGetHeuristic");
    lib->cublasLtMatmulPreferenceDestroy(pref);
    if (s == HD_OK && (returned < 1 || found.state != LT_SUCCESS))
        s = hd__error(ctx, HD_ERR_UNSUPPORTED, "cuBLASLt: no algorithm for %zu x %zu x %zu in %s",
                      p->key.m, p->key.n, p->key.k, hd_precision_name(p->key.precision));
    if (s != HD_OK)
        return s;
    p->algo = found.algo;
    p->workspace_needed = found.workspace_size;
    return HD_OK;
}

/* The kept plan for g, made where there is none. */
static hd_status plan_for(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g,
                          size_t workspace_bytes, lt_plan **out)
{
    hd_rt_gemm key = key_of(g);
    size_t alignment[3] = {alignment_of(g->a), alignment_of(g->b), alignment_of(g->c)};
    for (size_t i = 0; i < LT_PLANS; i++)
        if (plan_matches(&lt->plans[i], &key, alignment, workspace_bytes)) {
            *out = &lt->plans[i];
            return HD_OK;
        }
    lt_plan *p = &lt->plans[lt->next];
    lt->next = (lt->next + 1) % LT_PLANS;
    plan_clear(&lt->lib, p);
    p->key = key;
    memcpy(p->alignment, alignment, sizeof alignment);
    p->workspace_bytes = workspace_bytes;
    hd_status s = plan_make(lt, ctx, p);
    if (s != HD_OK) {
        plan_clear(&lt->lib, p);
        return s;
    }
    p->used = true;
    *out = p;
    return HD_OK;
}

static hd_status plan_of(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g,
                         size_t workspace_bytes, lt_plan **out)
{
    if (g->precision != HD_PRECISION_FP32 && g->precision != HD_PRECISION_TF32)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "cuBLASLt: runs fp32 and tf32, not %s",
                         hd_precision_name(g->precision));
    return plan_for(lt, ctx, g, workspace_bytes, out);
}

hd_status hd__cublaslt_prepare(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g,
                               size_t workspace_bytes)
{
    lt_plan *p;
    return plan_of(lt, ctx, g, workspace_bytes, &p);
}

hd_status hd__cublaslt_gemm(hd_cublaslt *lt, hd_context *ctx, const hd_rt_gemm *g, void *stream,
                            hd_devmem workspace, size_t workspace_bytes)
{
    lt_plan *p = NULL;
    hd_status s = plan_of(lt, ctx, g, workspace != NULL ? workspace_bytes : 0, &p);
    if (s != HD_OK)
        return s;
    lt_status r = lt->lib.cublasLtMatmul(lt->handle, p->desc, &g->alpha, g->b, p->a, g->a, p->b,
                                         &g->beta, g->c, p->c, g->c, p->c, &p->algo, workspace,
                                         p->workspace_needed, stream);
    return r == LT_SUCCESS ? HD_OK : lt_error(ctx, r, "cublasLtMatmul");
}
