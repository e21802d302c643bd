/*
 * The float64 reference's core, the one place a GEMM element is computed in double: CLBlast's
 * run-time check of a parameter set (in the library) and the tools' reference
 * (autotune/reference.c, which the tests, the tuner and the benchmark use) both build on it.
 */
#ifndef HD_BACKENDS_REFERENCE_H
#define HD_BACKENDS_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>

/* One output element in double and the sum of the magnitudes of its terms, which the element's
 * float32 rounding error scales with. */
typedef struct hd_f64_elem {
    double want, bound;
} hd_f64_elem;

/* Element (i, j) of alpha*op(A)*op(B), A and B row-major with leading dimensions lda and ldb
 * as stored (op(A) is m×k, op(B) k×n). */
hd_f64_elem hd__f64_gemm_elem(bool trans_a, bool trans_b, size_t k, float alpha, const float *a,
                              size_t lda, const float *b, size_t ldb, size_t i, size_t j);

#endif
