/*
 * What the tools' checks of the training step's ops share (step_check.c, step_check_attention.c,
 * step_check_entropy.c): the sample list, the rows a check can afford, positions in packed
 * sequences, and each op's expectation (reference.h says what each checks and how far).
 */
#ifndef HD_AUTOTUNE_STEP_CHECK_H
#define HD_AUTOTUNE_STEP_CHECK_H

#include <float.h>
#include <stdbool.h>
#include <stddef.h>

#include "autotune/reference.h"

/* float's unit roundoff, 2^-24: every tolerance below is a count of it times a magnitude */
#define HD_REF_U (FLT_EPSILON / 2)
/* The tolerance of an element that must come out exact (a copy, a zeroed row): any difference
 * fails, none passes. */
#define HD_REF_EXACT DBL_MIN

/* Appends element `at` of output o with its expected value and tolerance; without memory sets
 * e->no_memory (the comparison then fails). */
void hd__ref_expect_add(hd_ref_expect *e, int o, size_t at, double want, double tol);

/* The rows of `rows` a check samples (hd__ref_sample's max): up to HD_REF_STEP_ELEMS elements
 * of cols each, at least HD_REF_CHECK_ROWS; or as many as HD_REF_STEP_MACS affords at per_row
 * multiply-adds each, at least 2 (the first and the last) and at most HD_REF_CHECK_ROWS. */
size_t hd__ref_step_rows_by_elems(size_t rows, size_t cols);
size_t hd__ref_step_rows_by_cost(size_t rows, double per_row);

/* Row i's sequence among the packed sequences q of rows rows (none: one of every row): its
 * first row and length. */
void hd__ref_step_sequence(const hd_sequences *q, size_t rows, size_t i, size_t *start,
                           size_t *len);

typedef bool hd_ref_expect_fn(const hd_shape *s, const hd_op_params *p, const float *const in[],
                              hd_ref_expect *e);

/* Attention and its backward from sampled rows (step_check_attention.c). */
hd_ref_expect_fn hd__ref_expect_attention;
hd_ref_expect_fn hd__ref_expect_attention_backward;
/* Cross-entropy from logits, and of the LM head (step_check_entropy.c). */
hd_ref_expect_fn hd__ref_expect_cross_entropy;
hd_ref_expect_fn hd__ref_expect_linear_cross_entropy;

#endif
