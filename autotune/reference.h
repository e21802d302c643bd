/*
 * The tuner's correctness check: a candidate's output against a float64 host reference. Row
 * ops are checked in full; GEMM and LoRA outputs of more than HD_REF_FULL elements on a fixed
 * sample of HD_REF_SAMPLES elements (each a k-long dot product in double), so that checking a
 * 8192³ GEMM costs milliseconds, not minutes. Every input is row-major float32 as stored.
 */
#ifndef HD_AUTOTUNE_REFERENCE_H
#define HD_AUTOTUNE_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"

#define HD_REF_FULL    65536
#define HD_REF_SAMPLES 512

typedef struct hd_ref_inputs {
    const float *in[4]; /* GEMM a, b; LoRA x, w, a, b; rows x, gamma, beta */
    float alpha, beta;  /* GEMM */
    float scale;        /* LoRA */
    float eps;          /* norms */
} hd_ref_inputs;

/* Whether out (the op's whole output) matches the reference within the op's tolerance; on
 * false, why says where and by how much. */
bool hd__ref_check(hd_op op, const hd_shape *shape, const hd_ref_inputs *in, const float *out,
                   char *why, size_t size);

#endif
