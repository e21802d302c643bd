/*
 * The float64 host reference of the tools and the tests (dispatch-autotune, dispatch-bench,
 * tests/testlib.c), on the GEMM element of backends/reference.h, element by element
 * or row by row so that a check of a large output costs milliseconds, not minutes; and the
 * tuner's correctness check built on it. Every input is row-major float32 as stored.
 */
#ifndef HD_AUTOTUNE_REFERENCE_H
#define HD_AUTOTUNE_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "backends/reference.h"

#define HD_REF_FULL    65536
#define HD_REF_SAMPLES 512

typedef struct hd_ref_inputs {
    const float *in[4]; /* GEMM a, b; LoRA x, w, a, b; rows x, gamma, beta */
    float alpha, beta;  /* GEMM */
    float scale;        /* LoRA */
    float eps;          /* norms */
    hd_precision precision; /* GEMM and LoRA: the arithmetic checked (tolerances below) */
} hd_ref_inputs;

/* One output element in double and the sum of the magnitudes of its terms, which the element's
 * float32 rounding error scales with (backends/reference.h). */
typedef hd_f64_elem hd_ref_elem;

/* Element (i, j) of GEMM (of matrix bi of a batch; beta taken as 0) or of the LoRA forward. */
hd_ref_elem hd__ref_matmul_elem(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, size_t bi,
                                size_t i, size_t j);
/* Row i of a row op, into want (shape->dim[1] values). */
void hd__ref_row(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, size_t i, double *want);

/* How far a GEMM or LoRA element may be from the reference: a k-long float sum's rounding bound
 * (`scale` times k·ε, relative to the sum of the terms' magnitudes `bound`); fp32x3 is held to
 * the same bound as fp32, tf32 adds its operands' rounding (2^-9 of `bound`). */
double hd__ref_matmul_tolerance(double k, double bound, double scale, hd_precision precision);

/* The tuner's check. Row ops are checked in full; GEMM and LoRA outputs of more than
 * HD_REF_FULL elements on a fixed sample of HD_REF_SAMPLES elements.
 * Whether out (the op's whole output) matches the reference within the op's tolerance; on
 * false, why says where and by how much. */
bool hd__ref_check(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, const float *out,
                   char *why, size_t size);

#endif
