/*
 * The benchmark suites: named lists of cases, data only, shared by dispatch-bench and
 * dispatch-autotune (and, through `dispatch-bench --list-cases --json`, by the peer scripts).
 *
 *   seed   the shapes of the original comparison: LoRA forward with one token, softmax and the
 *          norms on 64×1024
 *   train  LoRA fine-tuning sizes: 4096 tokens, 4096-wide rows, 32768 short rows
 *   gemm   square 64..8192 and the token-count sweep over a 4096×4096 weight
 *   shapes GEMM and LoRA as fine-tuning meets them (tokens, widths, transposes, odd sizes)
 *   ci     a few small odd shapes that run in seconds on PoCL
 *   backward  the backward ops on the seed and train shapes
 *   step   a decoder's training step: Llama-3-8B's shapes at 2048 tokens (hidden 4096, 32
 *          heads, 8 KV heads of 128, MLP 14336, vocabulary 128256) and a small model's at 512
 *          (hidden 1024, 16 and 4 heads of 64, MLP 2816, vocabulary 32000), and AdamW over
 *          the LoRA factors (rank 16) of two layers of each
 *
 * A case is an operation and its shape, as the dispatcher keys it (backends/backend.h): GEMM
 * dim = {m, n, k} with transposes (C m×n = op(A) m×k · op(B) k×n); LoRA dim = {tokens, in,
 * out, rank}; softmax, layer norm and RMS norm dim = {rows, cols}; the step's ops as the op
 * table names their dims: the elementwise ops, add, add + RMS norm and cross-entropy {rows,
 * cols}, RoPE {rows, cols, pairs}, attention {tokens, heads, kv_heads, head_dim}, the LM
 * head's cross-entropy and the embedding {rows, dim, vocab}. Their scalars are
 * autotune/case_params.h's.
 *
 * AdamW (hd_adamw) is no op of the table: it takes lists of tensors. Its case names a model,
 * and the optimizer steps the LoRA factors of its decoder layers: dim = {layers, hidden,
 * kv_dim, mlp} and rank, for each layer A (rank x in) and B (out x rank), as PEFT stores them,
 * of the seven projections q (hidden -> hidden), k and v (hidden -> kv_dim), o (hidden ->
 * hidden), gate and up (hidden -> mlp) and down (mlp -> hidden) (hd__bench_adamw_tensors).
 *
 * Not part of the library: in the tools' library hd_tools (autotune/meson.build), which both
 * tools and the tests link.
 */
#ifndef HD_AUTOTUNE_SUITES_H
#define HD_AUTOTUNE_SUITES_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"

typedef struct hd_bench_case {
    hd_op op;       /* HD_BENCH_OP_ADAMW: AdamW over a model's LoRA factors */
    hd_shape shape; /* AdamW: dim = {layers, hidden, kv_dim, mlp} */
    size_t rank;    /* AdamW: the LoRA factors' rank; 0 for the table's ops */
} hd_bench_case;

/* The op of an AdamW case: past the table's, as dispatch/profile.h's row of AdamW is, so that
 * no function of the table takes it for one of its ops (those that check the range refuse
 * it; the tools ask hd__bench_case_is_adamw() before any other). */
#define HD_BENCH_OP_ADAMW ((hd_op)HD_OP_COUNT)
/* The largest layer count of an AdamW case: more than any model has, few enough that its
 * tensor list is held at once. */
#define HD_BENCH_ADAMW_MAX_LAYERS 1024
/* The LoRA factors of one layer: A and B of seven projections. */
#define HD_BENCH_ADAMW_LAYER_TENSORS 14

bool hd__bench_case_is_adamw(const hd_bench_case *c);
/* "adamw", or the name of the case's op. */
const char *hd__bench_case_op_name(const hd_bench_case *c);
/* The tensors an AdamW case steps, in order (A then B of q, k, v, o, gate, up, down, layer by
 * layer): the shape of the first max into rows and cols; returns how many there are in all
 * (HD_BENCH_ADAMW_LAYER_TENSORS per layer). */
size_t hd__bench_adamw_tensors(const hd_bench_case *c, size_t rows[], size_t cols[], size_t max);
/* The floats of one of an AdamW case's lists: every parameter of the model's LoRA factors. */
double hd__bench_adamw_parameters(const hd_bench_case *c);

typedef struct hd_bench_suite {
    const char *name;
    const char *description;
    const hd_bench_case *cases;
    size_t count;
} hd_bench_suite;

/* Every suite, in the order "seed", "train", "gemm", "shapes", "ci", "backward", "step". */
const hd_bench_suite *hd__bench_suites(size_t *count);
/* The suite of that name, or NULL. */
const hd_bench_suite *hd__bench_suite_find(const char *name);
/* The most suites a name of --suites stands for. */
#define HD_BENCH_SUITES_MAX 16
/* The suites a name of --suites stands for, into out (HD_BENCH_SUITES_MAX): "all" every suite
 * but ci (whose cases the others hold at the sizes that matter), else the suite of that name.
 * Returns how many; 0 where name is no suite. */
size_t hd__bench_suites_named(const char *name, const hd_bench_suite *out[HD_BENCH_SUITES_MAX]);
/* "seed, train, ..., backward or all", for the tools' messages; "a, b or c" of every operation's
 * name; the same with adamw last, which a case may also name. Static strings. */
const char *hd__bench_suite_names(void);
const char *hd__bench_op_names(void);
const char *hd__bench_case_op_names(void);

/* The tools' comma lists (--suites, --ops, --modes, --backends): calls item(name, arg) for
 * each name of list in order, however long, until one returns false (having said why). A list
 * with no name ("" or commas alone) or with an empty name ("a,,b", "a,") is refused, said on
 * stderr after who ("dispatch-bench: --modes"). Returns whether every name was taken. */
bool hd__bench_list_each(const char *who, const char *list, bool (*item)(const char *, void *),
                         void *arg);

/* A case's stable name, the key that joins results with peers: "gemm 1x4096x4096" (m×n×k, with
 * " TN"-style suffix when a side is transposed), "lora 1x1024x1024 r8" (tokens×in×out; " pt"
 * with the weights in PyTorch's layout), "gemm_batched 64x64x64 x8" (m×n×k, batch),
 * "softmax 64x1024" (rows×cols), "adamw 2x4096x1024x14336 r16" (layers×hidden×kv_dim×mlp,
 * rank). Returns what snprintf returns. */
int hd__bench_case_name(const hd_bench_case *c, char *buf, size_t cap);

/* Floating-point operations of one call (2 per multiply-add; the row ops and AdamW count their
 * arithmetic per element): the GFLOP/s figure. */
double hd__bench_case_flops(const hd_bench_case *c);
/* The fewest bytes one call must move: each input read once, the output written once (AdamW:
 * the parameters, gradients and moments read, the parameters and moments written). */
double hd__bench_case_bytes(const hd_bench_case *c);
/* Floats held by the inputs and the output of one call. */
double hd__bench_case_elements(const hd_bench_case *c);
/* Whether the op is reported in GFLOP/s (GEMM, LoRA) rather than only GB/s. */
int hd__bench_case_compute_bound(const hd_bench_case *c);

/* A growing list of cases, each held once (autotune/shapes_file.c): cases malloc'd, the owner
 * frees them. hd__bench_case_list_add appends c unless the list holds the same op and shape;
 * false when out of memory. */
typedef struct hd_bench_case_list {
    hd_bench_case *cases;
    size_t count, capacity;
} hd_bench_case_list;
bool hd__bench_case_list_add(hd_bench_case_list *l, const hd_bench_case *c);

/* Shapes files (autotune/shapes_file.c), read by both tools' --shapes: one case per line, as the
 * tuning cache spells them ("gemm 1 4096 4096 [nn|nt|tn|tt]", "lora 8 4096 4096 16 [pt]",
 * "softmax 64 1024", ...), or AdamW's "adamw LAYERS HIDDEN KV_DIM MLP RANK" (each from 1,
 * layers at most HD_BENCH_ADAMW_MAX_LAYERS; timed by dispatch-bench, never tuned: it runs
 * where its tensors are), '#' to the end of a line a comment, blank lines ignored. Words are
 * separated by blanks (space, TAB); a dimension is decimal digits alone, at most
 * HD_TUNE_DIM_MAX (hd__tune_dim_parse, as the cache reads it). hd__bench_case_parse reads one
 * case; false with the reason in why. hd__bench_shapes_read reads a file's cases, each once,
 * into *out (at least one); false with the reason ("PATH:LINE: ...", a NUL byte in a line
 * included; "PATH: no case"; "PATH: cannot read line N: <strerror>") in why and *out empty,
 * nothing allocated. */
bool hd__bench_case_parse(const char *text, hd_bench_case *out, char *why, size_t size);
bool hd__bench_shapes_read(const char *path, hd_bench_case_list *out, char *why, size_t size);

#endif
