/* The arguments of one op as a backend's slot takes them (one struct per kind of op, in the
 * union hd_op_args) and the shape of a call as the dispatcher keys it: what the op table
 * (core/op.h), the backends (backends/backend.h) and the dispatcher share. */
#ifndef HD_CORE_ARGS_H
#define HD_CORE_ARGS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

#include "core/tensor.h"

typedef struct hd_gemm_args {
    bool trans_a, trans_b;
    float alpha, beta;
    const hd_tensor *a, *b;
    const hd_tensor *c;     /* written: the state behind the handle */
    size_t m, n, k;         /* op(A) is m×k, op(B) k×n, C m×n */
    const char *variant;    /* tuned kernel parameters, "NAME=value NAME=value"; NULL: default */
    size_t batch;           /* gemm_batched: matrices stacked by rows in each tensor (m, n, k per
                               matrix); unused by gemm */
    hd_precision precision; /* the context's GEMM arithmetic; backends without tensor-core
                               kernels compute fp32, which is at least as accurate */
} hd_gemm_args;

typedef struct hd_lora_args {
    const hd_tensor *x, *w, *a, *b;
    float scale;
    const hd_tensor *y;
    size_t tokens, in, out, rank; /* x tokens×in, op(W) in×out, op(A) in×rank, op(B) rank×out */
    const char *variant;          /* as for GEMM */
    hd_precision precision;       /* as for GEMM, for x*W */
    /* hd_lora_forward_ex()'s layout: W stored out×in, A rank×in, B out×rank. A slot that
     * cannot read a layout in place returns HD_ERR_UNSUPPORTED (and its supports() says so). */
    bool trans_w, trans_a, trans_b;
} hd_lora_args;

/* Softmax, layer norm and RMS norm: one row at a time, y may be x. */
typedef struct hd_row_args {
    const hd_tensor *x;
    const hd_tensor *gamma; /* layer norm: scale; RMS norm: weight; softmax: NULL */
    const hd_tensor *beta;  /* layer norm: shift; otherwise NULL */
    float eps;
    const hd_tensor *y;
    size_t rows, cols;
    const char *variant; /* as for GEMM */
} hd_row_args;

/* The backward of a row op, one row at a time: softmax reads y (in x) and dy; the norms read
 * x, their weight (gamma) and dy. dx may be dy. Weight gradients (dgamma: layer norm's gamma
 * or RMS norm's weight; dbeta: layer norm's beta) may be NULL: not wanted. With rows = 0
 * (cols >= 1) the dispatcher zeroes the weight gradients itself; a slot sees rows, cols >= 1. */
typedef struct hd_row_backward_args {
    const hd_tensor *x; /* softmax: its output y */
    const hd_tensor *gamma;
    const hd_tensor *dy;
    float eps;
    const hd_tensor *dx, *dgamma, *dbeta; /* written */
    size_t rows, cols;
    const char *variant; /* as for GEMM */
} hd_row_backward_args;

/* LoRA backward with W frozen: dx (may be NULL), da and db from x, W, A, B and dy, each
 * overwritten or, with accumulate, added to. A slot sees tokens, in, out >= 1; rank may be 0
 * (da and db are then empty). */
typedef struct hd_lora_backward_args {
    const hd_tensor *x, *w, *a, *b;
    float scale;
    const hd_tensor *dy;
    const hd_tensor *dx, *da, *db; /* written; dx may be NULL */
    bool accumulate;
    size_t tokens, in, out, rank;
    const char *variant;    /* as for GEMM */
    hd_precision precision; /* as for GEMM */
    /* hd_lora_backward_ex()'s layout, as the forward's: W stored out×in, A (and dA) rank×in,
     * B (and dB) out×rank. */
    bool trans_w, trans_a, trans_b;
} hd_lora_backward_args;

/* The training step's ops (hd_args_kind HD_ARGS_STEP): SwiGLU, GELU, add, add + RMS norm, RoPE,
 * attention, cross-entropy (and its LM-head form), embedding, and their backward passes. The
 * op's tensors come in the op table's order, inputs in in[] and outputs in out[] (an optional
 * tensor the caller left out is NULL); each op reads the scalars its row names. A slot sees
 * checked, non-empty problems (rows, cols >= 1), every id in range and every sequence length
 * summing to the rows; the host arrays stay valid during the slot only. */
#define HD_STEP_INPUTS  6
#define HD_STEP_OUTPUTS 4
typedef struct hd_step_args {
    const hd_tensor *in[HD_STEP_INPUTS];
    const hd_tensor *out[HD_STEP_OUTPUTS];
    size_t rows, cols; /* of the first input: tokens x features */
    float alpha;       /* add: y += alpha * x */
    float eps;         /* add + RMS norm */
    /* RoPE and attention */
    const size_t *seq_lengths; /* packed sequences' lengths, seq_count of them; NULL: one */
    size_t seq_count;
    size_t head_dim;
    /* RoPE: inv_freq[i] = theta^(-2i/head_dim) unless in[1] gives the frequencies */
    double theta;
    size_t position_offset;
    bool inverse;
    /* attention */
    size_t heads, kv_heads;
    bool causal;
    size_t window; /* causal keys per row at most (a sliding window), 0: all */
    float scale;   /* the scores' factor, resolved (never 0) */
    /* cross-entropy and embedding: ids or targets, rows of them, each in [0, vocab) or
     * ignore_index (targets only) */
    const int32_t *ids;
    const hd_tensor *id_tensor; /* the _ids forms: the ids as an int32 tensor, valid where the
                                   slot runs (ids is then its host copy); else NULL */
    int32_t ignore_index;
    size_t counted; /* targets not ignored */
    size_t vocab;
    const char *variant;    /* as for GEMM */
    hd_precision precision; /* the LM head's products, attention's */
} hd_step_args;

/* AdamW over count tensors (hd_adamw(); not an op of the table, since it takes any number of
 * tensors): the caller's arrays, checked (count >= 1 tensors of matching shapes, no tensor
 * twice, every hyperparameter in range) and valid where the slot runs. With max_grad_norm > 0
 * the gradients are clipped by their global norm; grad_norm (may be NULL) receives that norm. */
typedef struct hd_adamw_args {
    hd_tensor *const *params;
    const hd_tensor *const *grads;
    hd_tensor *const *m, *const *v;
    size_t count;
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    float max_grad_norm;        /* 0: no clipping */
    const hd_tensor *grad_norm; /* written (1 x 1); NULL: not wanted */
} hd_adamw_args;

/* The per-step factors of torch.optim.AdamW, computed in double and rounded once, so that
 * every backend updates with the same floats. */
typedef struct hd_adamw_factors {
    float decay;                  /* 1 - lr * weight_decay */
    float beta1, one_minus_beta1; /* first moment: beta1 and 1 - beta1 */
    float beta2, one_minus_beta2; /* second moment */
    float step_size;              /* lr / (1 - beta1^step) */
    float inv_bc2_sqrt;           /* 1 / sqrt(1 - beta2^step) */
    float eps;
} hd_adamw_factors;

/* The factors of step `step` (>= 1) for the hyperparameters given. */
static inline hd_adamw_factors hd__adamw_factors(float lr, float beta1, float beta2, float eps,
                                                 float weight_decay, int64_t step)
{
    double t = (double)step;
    hd_adamw_factors f = {
        .decay = (float)(1.0 - (double)lr * weight_decay),
        .beta1 = beta1,
        .one_minus_beta1 = (float)(1.0 - beta1),
        .beta2 = beta2,
        .one_minus_beta2 = (float)(1.0 - beta2),
        .step_size = (float)(lr / (1.0 - pow(beta1, t))),
        .inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(beta2, t))),
        .eps = eps,
    };
    return f;
}

/* The shape of one call, as the dispatcher keys it: GEMM (m, n, k), LoRA (tokens, in, out,
 * rank), row ops (rows, cols). */
typedef struct hd_shape {
    size_t dim[4];
    bool trans_a, trans_b; /* GEMM only */
    unsigned lora_layout;  /* LoRA and its backward: hd_lora_layout flags, 0 by default */
    /* The context's GEMM arithmetic, stamped by the dispatcher on every shape it hands a
     * backend (its variants, checks and estimates of compute-bound ops depend on it); not part
     * of the shape's identity (hd__op_same_shape), since the memo and cache key it apart. */
    hd_precision precision;
} hd_shape;

/* The argument struct of each op's backend slot (the op table says which member). */
typedef union hd_op_args {
    hd_gemm_args gemm; /* GEMM and batched GEMM */
    hd_lora_args lora;
    hd_row_args row;
    hd_row_backward_args row_backward;
    hd_lora_backward_args lora_backward;
    hd_step_args step;
} hd_op_args;

#endif
