/*
 * The scalars of a tools' case: what dispatch-autotune and dispatch-bench pass with a case's
 * tensors, and what `dispatch-bench --list-cases --json` hands the peers, fixed here once so
 * that every tool runs the same call. A case's shape says its dims; the rest is this:
 *
 *   GEMM, batched GEMM  alpha 1, beta 0
 *   LoRA and backward   scale 0.5
 *   norms               eps 1e-5
 *   the training step's ops as a Llama-3 model's LoRA step runs them: one sequence of every
 *   row; add's alpha 1; add + RMS norm's eps 1e-5, its backward without dweight (the norms'
 *   weights frozen); RoPE's base 500000 from position 0, its frequencies from the base (the
 *   inv_freq tensor left out), forward; attention causal, its scale 1/sqrt(d), heads and
 *   kv_heads from the shape; cross-entropy's ignore index -100 on a few targets
 *   (hd__case_ignored_targets), every other target and embedding's ids drawn in range from
 *   the case's seed
 *   AdamW               torch.optim.AdamW's defaults (lr 1e-3, betas 0.9 and 0.999, eps 1e-8,
 *                       weight decay 0.01), the gradients first clipped to a total norm of 1.0
 *                       as transformers' Trainer clips them by default (max_grad_norm)
 */
#ifndef HD_AUTOTUNE_CASE_PARAMS_H
#define HD_AUTOTUNE_CASE_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune/suites.h"
#include "core/op.h"

#define HD_CASE_ALPHA        1.0f
#define HD_CASE_SCALE        0.5f
#define HD_CASE_EPS          1e-5f
#define HD_CASE_THETA        500000.0f
#define HD_CASE_IGNORE_INDEX (-100)

#define HD_CASE_ADAMW_LR            1e-3f
#define HD_CASE_ADAMW_BETA1         0.9f
#define HD_CASE_ADAMW_BETA2         0.999f
#define HD_CASE_ADAMW_EPS           1e-8f
#define HD_CASE_ADAMW_WEIGHT_DECAY  0.01f
#define HD_CASE_ADAMW_MAX_GRAD_NORM 1.0f

typedef struct hd_case_params {
    hd_op_params p; /* p.ids points into ids, p.id_tensor is id_tensor */
    int32_t *ids;   /* cross-entropy's targets or embedding's ids, a row's each; else NULL */
    size_t id_count;
    hd_tensor *id_tensor; /* those ids as an int32 tensor (hd__case_params_id_tensor), or NULL */
} hd_case_params;

/* The scalars of case c, its ids drawn from seed (the same seed, the same ids). False without
 * memory, *out then empty. */
bool hd__case_params_make(const hd_bench_case *c, uint64_t seed, hd_case_params *out);
/* Where the case has ids: puts them in an int32 tensor of ctx (id_count x 1), which the call
 * then takes (p.id_tensor: the _ids forms, as the trainer calls them and PyTorch's ids stay on
 * the device). Without ids, nothing. */
hd_status hd__case_params_id_tensor(hd_context *ctx, hd_case_params *cp);
/* Writes the ids into that tensor again, as a caller that takes them from the host does. */
hd_status hd__case_params_write_ids(hd_case_params *cp);
/* Frees the ids and their tensor; a zeroed or freed hd_case_params is a harmless no-op. */
void hd__case_params_free(hd_case_params *cp);

/* Whether the tools leave tensor i of op out (NULL in the call): RoPE's inv_freq, since the
 * case takes its frequencies from the base; add + RMS norm backward's dweight, since LoRA
 * keeps the norms' weights frozen (and PyTorch's autograd then computes no such sum). */
bool hd__case_tensor_left_out(hd_op op, int i);

/* Whether op reads what its output holds (add: y += alpha * x): the tools write that output
 * from the host before a checked call, and the check takes its contents. */
bool hd__case_reads_output(hd_op op);

/* The scalars of an op that its case's shape does not say and a peer needs, as flags: what
 * `dispatch-bench --json` writes in a case's "params" (bench/SCHEMA.md). */
enum {
    HD_CASE_HAS_ALPHA = 1,    /* add's alpha */
    HD_CASE_HAS_EPS = 2,      /* add + RMS norm's eps */
    HD_CASE_HAS_ROPE = 4,     /* RoPE's theta, position offset and direction */
    HD_CASE_HAS_CAUSAL = 8,   /* attention's mask */
    HD_CASE_HAS_TARGETS = 16, /* cross-entropy's ignore index and how many targets are it */
};
unsigned hd__case_scalars(hd_op op);

/* An AdamW case's options for its step number `step` (1 for the first): the hyperparameters
 * above, no grad_norm tensor. */
hd_adamw_options hd__case_adamw_options(long step);

/* How many of rows targets a cross-entropy case ignores: rows / 64, at least 1 from 2 rows on,
 * none of 1 row (its mean would be over nothing). Target k * rows / n of each k < n is the
 * ignore index. */
size_t hd__case_ignored_targets(size_t rows);

#endif
