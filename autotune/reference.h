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
/* Multiply-adds a check of a GEMM or LoRA output may spend in float64 (tens of milliseconds): an
 * element of x*W costs k of them, one of LoRA in * (1 + rank); checks of larger products
 * sample fewer elements (never under HD_REF_MIN_SAMPLES). */
#define HD_REF_CHECK_MACS  (1u << 25)
#define HD_REF_MIN_SAMPLES 64

typedef struct hd_ref_inputs {
    const float *in[4];     /* GEMM a, b; LoRA x, w, a, b; rows x, gamma, beta */
    float alpha, beta;      /* GEMM */
    float scale;            /* LoRA */
    float eps;              /* norms */
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
/* Float64 multiply-adds one output element of GEMM (k) or LoRA (in * (1 + rank)) costs
 * hd__ref_matmul_elem: what a check's sample size is budgeted by (hd__ref_affordable). */
double hd__ref_matmul_cost(hd_op op, const hd_shape *shape);

/* The tools' one check of an op of one output (the tuner's and the benchmark's; the backward
 * ops of several outputs have hd__ref_check_backward, on the same tolerances): out, the op's
 * whole output, against the reference. GEMM and LoRA: every element of an output of up to
 * HD_REF_FULL elements, else a fixed sample of HD_REF_SAMPLES, as many as the float64 budget
 * affords, each within hd__ref_matmul_tolerance(k + 2, its terms' magnitudes, 2, precision), k
 * the length of its float sum (LoRA: in + rank + 1); row ops: rows spread over the output, first
 * and last included, up to HD_REF_ROW_ELEMS elements' worth (at least HD_REF_CHECK_ROWS rows),
 * each element within hd__ref_row_tolerance. Returns the worst error over its tolerance: at
 * most 1 passes; NaN, or no memory, gives infinity. why says where the worst one was. */
double hd__ref_check(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, const float *out,
                     char *why, size_t size);
#define HD_REF_ROW_ELEMS (1u << 22)

/* How far an element of a row op's output (forward or dx of a backward) may be from want. */
double hd__ref_row_tolerance(hd_op op, double want);

/* The backward passes in double, whole outputs, from the float inputs the ops read. Softmax:
 * y (its output), dy -> dx. The norms (center: layer norm; else RMS norm, gamma its weight):
 * x, gamma, dy -> dx and, where not NULL, dgamma and dbeta (1 x cols). LoRA with W frozen:
 * dx (may be NULL), dA, dB, and the sums of the magnitudes of each element's terms (each may
 * be NULL), which its float rounding error scales with; false without memory. */
void hd__ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy,
                              double *dx);
void hd__ref_norm_backward(bool center, size_t rows, size_t cols, const float *x,
                           const float *gamma, const float *dy, float eps, double *dx,
                           double *dgamma, double *dbeta);
bool hd__ref_lora_backward(size_t tokens, size_t in, size_t out, size_t rank, const float *x,
                           const float *w, const float *a, const float *b, float scale,
                           const float *dy, double *dx, double *da, double *db, double *bound_dx,
                           double *bound_da, double *bound_db);

/* The sampled checks: at least HD_REF_CHECK_ROWS rows of a row op's output; the backward
 * ops' dx on up to HD_REF_CHECK_ROWS rows and LoRA's gradients on HD_REF_CHECK_COLS columns. */
#define HD_REF_CHECK_ROWS 16
#define HD_REF_CHECK_COLS 256
/* The j-th of hd__ref_sample_count(n, max) indices sampled from n: all of them up to max, else
 * max spread evenly, first and last included. */
size_t hd__ref_sample(size_t n, size_t max, size_t j);
/* How many of `want` elements costing per_element multiply-adds each a check affords:
 * HD_REF_CHECK_MACS worth, at least HD_REF_MIN_SAMPLES and at most want. */
size_t hd__ref_affordable(double per_element, size_t want);
size_t hd__ref_sample_count(size_t n, size_t max);
/* err / tol, infinite where err is NaN: at most 1 passes. */
double hd__ref_error_ratio(double err, double tol);

/* Whether op is a backward op, checked by hd__ref_check_backward(). */
bool hd__ref_is_backward(hd_op op);

/* What the checks of one case share from candidate to candidate: LoRA's u = dy*B^T and
 * h = x*A in double with their terms' magnitudes, the bulk of its check's time (seconds for a
 * 4096-token layer of 4096^2). Start it zeroed; the first check on a shape and inputs fills
 * it, later checks on the same shape and input pointers reuse it (the caller keeps those
 * inputs unchanged meanwhile); hd__ref_backward_memo_free releases it. */
typedef struct hd_ref_backward_memo {
    hd_shape shape;
    const float *in[5];
    double *lowrank; /* u, ub, h, hb: tokens x rank each */
} hd_ref_backward_memo;
void hd__ref_backward_memo_free(hd_ref_backward_memo *memo);
/* Fills memo for op on shape and in (nothing for ops without a shared part): a caller that
 * times its checks can pay for the shared part before the clock starts. */
void hd__ref_backward_prepare(hd_op op, const hd_shape *shape, const float *const in[],
                              hd_ref_backward_memo *memo);

/* The tools' check of a backward op (the tuner's and the benchmark's). in: the op's inputs in
 * the op table's order (softmax: y, dy; the norms: x, weight, dy; LoRA: x, W, A, B, dy); got:
 * its outputs (dx, then the weight gradients), outputs of them; one that is NULL (not computed)
 * is not checked. dx on
 * up to 16 rows (LoRA: and 256 columns) spread over the output, the weight gradients on every
 * column (LoRA's dA and dB on 256 rows or columns), each against the reference with a
 * tolerance from its sum's length and its terms' magnitudes. Returns the worst error over its
 * tolerance: at most 1 passes; NaN, or no memory, gives infinity. memo: NULL, or what checks
 * of the same case share (above). */
double hd__ref_check_backward(hd_op op, const hd_shape *shape, const float *const in[],
                              const float *const got[], int outputs, float scale, float eps,
                              hd_precision precision, hd_ref_backward_memo *memo);

#endif
