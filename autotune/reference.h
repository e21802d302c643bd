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

#include "autotune/reference_step.h"
#include "backends/backend.h"
#include "backends/reference.h"
#include "core/op.h"

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

/* The relative error tf32 allows a product of two fp32 operands reduced to TF32's 10 mantissa
 * bits, rounded or (Hopper's warpgroup kernel) truncated. */
#define HD_REF_TF32 (1.0 / 512.0)

/* How far a GEMM or LoRA element may be from the reference: a k-long float sum's rounding bound
 * (`scale` times k·ε, relative to the sum of the terms' magnitudes `bound`); fp32x3 is held to
 * the same bound as fp32, tf32 adds its operands' rounding (HD_REF_TF32 of `bound`). */
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

/* ---- the training step's ops (step_check.c, step_check_attention.c, step_check_entropy.c) ----
 *
 * The tools' check of the step's ops (the tuner's and the benchmark's), in two parts: the
 * expected values of sampled output elements with their tolerances, from the op's inputs
 * (hd__ref_step_expect: the float64 part, milliseconds to a second or two on the largest
 * cases, which the tools compute once per case), then a comparison of an output with them
 * (hd__ref_step_compare: as many candidates as there are). What is sampled and how far an
 * element may be:
 *
 *   swiglu, gelu, their backward, add: rows spread over the output, first and last included,
 *     up to HD_REF_STEP_ELEMS elements' worth (at least HD_REF_CHECK_ROWS rows); each element
 *     within 16 u of the magnitude of its formula's terms (u = 2^-24: a handful of roundings,
 *     and exp's few ulps), add within 4 u of |y| + |alpha x|.
 *   rope: rows as above; within 32 u of |x_i| + |x_(i+d/2)| (a rotation, its cosine and sine
 *     formed to within a few ulps at any position).
 *   embedding: rows as above; exactly the table's row.
 *   add_rms_norm: h (within 2 u of |x| + |r|) and y on rows as above, y within (n/2 + 8) u of
 *     |y| (an n-long float sum of squares, any order, under a square root); its backward: dh
 *     on those rows within (2n + 16) u of its terms' magnitudes, dweight on every column (a sum
 *     over every row, within (T + n + 8) u of the magnitudes of its terms).
 *   cross_entropy: dlogits on sampled rows (an ignored one among them), each element within
 *     (V + 8 + 2 |x - lse| + 2 log V) u of its probability, and 4 u of |p - onehot|, over the
 *     rows counted (V: the vocabulary, a V-long sum of exps); the loss over every row (T V
 *     exps).
 *   linear_cross_entropy: dh on sampled rows, as many as HD_REF_STEP_MACS affords (at least
 *     2, first and last), from the row's logits in double, within a tolerance from the
 *     logits' D-long products (the context's GEMM precision) and the V-long sums; the loss
 *     exactly where every row's logits fit that budget (T V D multiply-adds), else between
 *     bounds: at least the mean's part from the sampled rows (a cross-entropy is never
 *     negative), at most log V + 2 |h_i| max_v |w_v| per row.
 *   attention, its backward: rows as many as HD_REF_STEP_MACS affords (2 to
 *     HD_REF_CHECK_ROWS, first and last included), each computed from the op's inputs as
 *     defined (the backward's weights exp(scale q.k - lse) from the given lse, delta from the
 *     given out: what FlashAttention's backward computes), with tolerances from the
 *     d-long scores' and the n-long sums' float rounding (linear bounds).
 *
 * in: the op's inputs in the op table's order (NULL where the call leaves an optional one
 * out), then the contents before the call of each output the op reads (add's y). p: the
 * call's scalars (hd__case_params_make). got (compare): the op's outputs in the table's order
 * (NULL where not computed: not checked). */
#define HD_REF_STEP_OUTPUTS 3
#define HD_REF_STEP_ELEMS   (1u << 20)
#define HD_REF_STEP_MACS    (1u << 28)

typedef struct hd_ref_sample {
    size_t at; /* element index in its output */
    double want, tol;
} hd_ref_sample;

typedef struct hd_ref_expect {
    hd_op op;
    int outputs;
    size_t cols[HD_REF_STEP_OUTPUTS]; /* each output's columns, for messages */
    hd_ref_sample *sample[HD_REF_STEP_OUTPUTS];
    size_t count[HD_REF_STEP_OUTPUTS], cap[HD_REF_STEP_OUTPUTS];
    bool no_memory;
    /* An output held between bounds rather than to a value (linear cross-entropy's loss at
     * scale): its index, else -1; want and tol are then the bounds' middle and half-width. */
    int bounded;
} hd_ref_expect;

/* Whether op is one of the training step's, checked by the functions below. */
bool hd__ref_is_step(hd_op op);
/* The expected values of op's sampled outputs into *e (freed by hd__ref_step_expect_free).
 * False without memory or for an op of no check. */
bool hd__ref_step_expect(hd_op op, const hd_shape *shape, const hd_op_params *p,
                         const float *const in[], hd_ref_expect *e);
/* The worst error over its tolerance of got against e: at most 1 passes; a non-finite element,
 * or an expectation made without memory, gives infinity; a bounded output counts 0 within its
 * bounds, else its distance from their middle over their half-width. why says where the worst
 * one was. */
double hd__ref_step_compare(const hd_ref_expect *e, const float *const got[], char *why,
                            size_t size);
void hd__ref_step_expect_free(hd_ref_expect *e);
/* Both at once, for one check. */
double hd__ref_check_step(hd_op op, const hd_shape *shape, const hd_op_params *p,
                          const float *const in[], const float *const got[], char *why,
                          size_t size);

/* AdamW's lists over count tensors, n[k] floats each: the state before a step (p, g, m, v), or
 * what a backend's step left (p, m, v; g unused). */
typedef struct hd_ref_adamw_lists {
    size_t count;
    const size_t *n;
    const float *const *p, *const *g, *const *m, *const *v;
} hd_ref_adamw_lists;

/* The tools' check of one AdamW step (hd_adamw) with the clip to max_grad_norm (0: none), from
 * the state before it, against the float64 step (hd__ref_adamw with hd__ref_clip_coef of
 * hd__ref_grad_norm): the worst error over its tolerance of every element of p, m and v after
 * it (at most 1 passes; a non-finite element, or no memory for the reference, gives
 * infinity), why saying where it was ("m[3][17]: got ..."). An element's tolerance is a count
 * of float's unit roundoff times the magnitude of its terms; the parameter's takes the
 * update's bound from the first moment's terms rather than from the moment, which may cancel
 * to nothing; the count is larger where the clip scales the gradients, since its coefficient
 * comes from a norm the backend sums in float over every gradient. */
double hd__ref_check_adamw(const hd_ref_adamw_lists *before, const hd_ref_adamw_params *hp,
                           float max_grad_norm, const hd_ref_adamw_lists *after, char *why,
                           size_t size);

#endif
