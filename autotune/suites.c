/* The benchmark suites as data, the per-case figures (name, FLOPs, minimum bytes) from the
 * op table, and the tools' comma lists. */
#define _DEFAULT_SOURCE /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/suites.h"
#include "core/op.h"

#define GEMM(m, n, k)                                                                              \
    {                                                                                              \
        .op = HD_OP_GEMM, .shape = {.dim = {(m), (n), (k)} }                                       \
    }
#define GEMM_T(m, n, k, ta, tb)                                                                    \
    {                                                                                              \
        .op = HD_OP_GEMM, .shape = {.dim = {(m), (n), (k)}, .trans_a = ta, .trans_b = tb }         \
    }
#define LORA(t, in, out, r)                                                                        \
    {                                                                                              \
        .op = HD_OP_LORA, .shape = {.dim = {(t), (in), (out), (r)} }                               \
    }
/* LoRA with the weights as PyTorch and PEFT store them: W out×in, A r×in, B out×r. */
#define LORA_PT(t, in, out, r)                                                                     \
    {                                                                                              \
        .op = HD_OP_LORA, .shape = {                                                               \
            .dim = {(t), (in), (out), (r)},                                                        \
            .lora_layout = HD_LORA_LAYOUT_PYTORCH                                                  \
        }                                                                                          \
    }
/* A batch of GEMMs: m x n x k, batch of them (attention's per-head products). */
#define BATCHED(m, n, k, batch)                                                                    \
    {                                                                                              \
        .op = HD_OP_GEMM_BATCHED, .shape = {.dim = {(m), (n), (k), (batch)} }                      \
    }
#define ROWS(o, r, c)                                                                              \
    {                                                                                              \
        .op = (o), .shape = {.dim = {(r), (c)} }                                                   \
    }

/* The shapes of the original comparison: one-token LoRA at three widths, a rank sweep at
 * 1024², and the row ops on 64×1024; and the one-token LoRA with PyTorch's weights. */
static const hd_bench_case seed_cases[] = {
    LORA(1, 512, 512, 8),           LORA(1, 1024, 1024, 8),        LORA(1, 2048, 2048, 8),
    LORA(1, 1024, 1024, 4),         LORA(1, 1024, 1024, 16),       LORA(1, 1024, 1024, 32),
    LORA(1, 1024, 1024, 64),        ROWS(HD_OP_SOFTMAX, 64, 1024), ROWS(HD_OP_LAYER_NORM, 64, 1024),
    ROWS(HD_OP_RMS_NORM, 64, 1024), LORA_PT(1, 1024, 1024, 8),
};

static const hd_bench_case train_cases[] = {
    LORA(4096, 4096, 4096, 16),         LORA_PT(4096, 4096, 4096, 16),
    ROWS(HD_OP_SOFTMAX, 4096, 4096),    ROWS(HD_OP_SOFTMAX, 32768, 1024),
    ROWS(HD_OP_LAYER_NORM, 8192, 4096), ROWS(HD_OP_LAYER_NORM, 32768, 1024),
    ROWS(HD_OP_RMS_NORM, 8192, 4096),   ROWS(HD_OP_RMS_NORM, 32768, 1024),
};

#define LORA_BACKWARD(t, in, out, r)                                                               \
    {                                                                                              \
        .op = HD_OP_LORA_BACKWARD, .shape = {.dim = {(t), (in), (out), (r)} }                      \
    }

#define LORA_BACKWARD_PT(t, in, out, r)                                                            \
    {                                                                                              \
        .op = HD_OP_LORA_BACKWARD, .shape = {                                                      \
            .dim = {(t), (in), (out), (r)},                                                        \
            .lora_layout = HD_LORA_LAYOUT_PYTORCH                                                  \
        }                                                                                          \
    }

/* The backward passes: LoRA's at one token (1024², r 8) and at 4096 tokens (4096², r 16), in
 * both layouts, the row ops' on the train suite's shapes and the seed suite's 64x1024. */
static const hd_bench_case backward_cases[] = {
    LORA_BACKWARD(1, 1024, 1024, 8),
    LORA_BACKWARD(4096, 4096, 4096, 16),
    LORA_BACKWARD_PT(1, 1024, 1024, 8),
    LORA_BACKWARD_PT(4096, 4096, 4096, 16),
    ROWS(HD_OP_SOFTMAX_BACKWARD, 64, 1024),
    ROWS(HD_OP_LAYER_NORM_BACKWARD, 64, 1024),
    ROWS(HD_OP_RMS_NORM_BACKWARD, 64, 1024),
    ROWS(HD_OP_SOFTMAX_BACKWARD, 4096, 4096),
    ROWS(HD_OP_SOFTMAX_BACKWARD, 32768, 1024),
    ROWS(HD_OP_LAYER_NORM_BACKWARD, 8192, 4096),
    ROWS(HD_OP_LAYER_NORM_BACKWARD, 32768, 1024),
    ROWS(HD_OP_RMS_NORM_BACKWARD, 8192, 4096),
    ROWS(HD_OP_RMS_NORM_BACKWARD, 32768, 1024),
};

static const hd_bench_case gemm_cases[] = {
    GEMM(64, 64, 64),          GEMM(128, 128, 128),    GEMM(256, 256, 256),
    GEMM(512, 512, 512),       GEMM(1024, 1024, 1024), GEMM(2048, 2048, 2048),
    GEMM(4096, 4096, 4096),    GEMM(8192, 8192, 8192), GEMM(1, 4096, 4096),
    GEMM(16, 4096, 4096),      GEMM(8192, 4096, 4096), BATCHED(256, 256, 64, 16),
    BATCHED(512, 64, 512, 12),
};

/* The space as LoRA fine-tuning meets it, beyond the named suites: token counts 1 to 8192;
 * widths 512 to 16384, among them the MLP widths of 1024, 2048 and 4096 hidden sizes (2816 /
 * 3584, 5504 / 7168, 11008 / 14336: about 2.7x and 3.5x); the three products of a training
 * step (x*W as NN, dy*W^T as NT, x^T*dy as TN) and TT; odd and prime sizes. */
static const hd_bench_case shapes_cases[] = {
    GEMM(1000, 1000, 1000),
    GEMM(100, 1000, 1000),
    GEMM(3000, 3000, 3000),
    GEMM(512, 4096, 4096),
    GEMM_T(512, 4096, 4096, false, true),
    GEMM_T(4096, 4096, 512, true, false),
    GEMM(8, 4096, 4096),
    GEMM(64, 4096, 4096),
    GEMM(1, 16384, 4096),
    GEMM(2048, 11008, 4096),
    GEMM(2048, 4096, 11008),
    GEMM_T(2048, 11008, 4096, false, true),
    GEMM_T(11008, 4096, 2048, true, false),
    GEMM(1024, 14336, 4096),
    GEMM_T(1024, 4096, 14336, false, true),
    GEMM(256, 2816, 1024),
    GEMM_T(1024, 2816, 256, true, false),
    GEMM(4, 5504, 2048),
    GEMM_T(32, 7168, 2048, false, true),
    GEMM(8192, 512, 512),
    GEMM_T(512, 512, 8192, true, false),
    GEMM(997, 1009, 1013),
    GEMM_T(127, 4099, 2053, false, true),
    GEMM_T(4093, 521, 1031, true, false),
    GEMM_T(61, 16381, 509, true, true),
    GEMM(8192, 3584, 1024),
    LORA(1, 4096, 4096, 16),
    LORA(8, 4096, 4096, 16),
    LORA(64, 4096, 4096, 16),
    LORA(512, 4096, 4096, 16),
    LORA(2048, 4096, 11008, 16),
    LORA(2048, 11008, 4096, 8),
    LORA(1024, 2048, 5504, 32),
    LORA(8192, 1024, 2816, 8),
    LORA(16, 1024, 1024, 64),
    LORA(3, 2048, 2048, 8),
    LORA(37, 1031, 997, 13),
    LORA(8192, 512, 512, 4),
    LORA(257, 4096, 14336, 16),
    LORA(1, 8192, 8192, 16),
    LORA(2, 512, 3584, 8),
};

/* The training step's ops: rows x cols for the elementwise ops, add and add + RMS norm and
 * cross-entropy; rows x cols, pairs (head_dim / 2) for RoPE; tokens, heads, kv heads and
 * head_dim for attention; rows x dim, vocabulary for the LM head's cross-entropy and the
 * embedding. */
#define DIMS3(o, a, b, c)                                                                          \
    {                                                                                              \
        .op = (o), .shape = {.dim = {(a), (b), (c)} }                                              \
    }
#define DIMS4(o, a, b, c, d)                                                                       \
    {                                                                                              \
        .op = (o), .shape = {.dim = {(a), (b), (c), (d)} }                                         \
    }

/* One decoder's training step of a model with hidden size `hid`, `heads` query heads and `kv`
 * key/value heads of head_dim `hd`, MLP width `mlp` and vocabulary `voc`, on t tokens (one
 * sequence): the MLP's activations (SwiGLU, and GELU for GPT-style models) and their backward,
 * the residual stream's add, its add + RMS norm and backward, RoPE on q and on k, attention
 * and its backward, the loss from logits and from the LM head, and the embedding. */
#define STEP_CASES(t, hid, heads, kv, hd, mlp, voc)                                                \
    ROWS(HD_OP_SWIGLU, t, mlp), ROWS(HD_OP_SWIGLU_BACKWARD, t, mlp), ROWS(HD_OP_ADD, t, hid),      \
        ROWS(HD_OP_ADD_RMS_NORM, t, hid), ROWS(HD_OP_ADD_RMS_NORM_BACKWARD, t, hid),               \
        DIMS3(HD_OP_ROPE, t, (heads) * (hd), (hd) / 2),                                            \
        DIMS3(HD_OP_ROPE, t, (kv) * (hd), (hd) / 2), DIMS4(HD_OP_ATTENTION, t, heads, kv, hd),     \
        DIMS4(HD_OP_ATTENTION_BACKWARD, t, heads, kv, hd), ROWS(HD_OP_CROSS_ENTROPY, t, voc),      \
        DIMS3(HD_OP_LINEAR_CROSS_ENTROPY, t, hid, voc), DIMS3(HD_OP_EMBEDDING, t, hid, voc),       \
        ROWS(HD_OP_GELU, t, mlp), ROWS(HD_OP_GELU_BACKWARD, t, mlp)

/* AdamW over the LoRA factors of rank r of `layers` decoder layers of hidden size `hid`, k and
 * v projections kv wide and MLP width `mlp` (hd__bench_adamw_tensors). */
#define ADAMW(layers, hid, kv, mlp, r)                                                             \
    {                                                                                              \
        .op = HD_BENCH_OP_ADAMW, .shape = {.dim = {(layers), (hid), (kv), (mlp)}}, .rank = (r)     \
    }

/* Llama-3-8B's shapes at 2048 tokens (hidden 4096, 32 heads and 8 KV heads of 128, MLP 14336,
 * vocabulary 128256), then a small model's at 512 (hidden 1024, 16 and 4 heads of 64, MLP
 * 2816, vocabulary 32000); each with the optimizer's step over the rank-16 LoRA factors of two
 * of its layers. */
static const hd_bench_case step_cases[] = {
    STEP_CASES(2048, 4096, 32, 8, 128, 14336, 128256),
    STEP_CASES(512, 1024, 16, 4, 64, 2816, 32000),
    ADAMW(2, 4096, 8 * 128, 14336, 16),
    ADAMW(2, 1024, 4 * 64, 2816, 16),
};

/* Odd and prime sizes, a transposed GEMM, a 1-row op: every op, seconds on PoCL. */
static const hd_bench_case ci_cases[] = {
    GEMM(17, 33, 9),
    GEMM_T(31, 7, 64, true, false),
    GEMM_T(1, 64, 48, false, true),
    LORA(1, 64, 48, 4),
    LORA(5, 37, 29, 3),
    LORA_PT(5, 37, 29, 3),
    ROWS(HD_OP_SOFTMAX, 3, 100),
    ROWS(HD_OP_LAYER_NORM, 7, 129),
    ROWS(HD_OP_RMS_NORM, 1, 1000),
    ROWS(HD_OP_SOFTMAX_BACKWARD, 3, 100),
    ROWS(HD_OP_LAYER_NORM_BACKWARD, 7, 129),
    ROWS(HD_OP_RMS_NORM_BACKWARD, 1, 1000),
    LORA_BACKWARD(5, 37, 29, 3),
    LORA_BACKWARD_PT(5, 37, 29, 3),
    /* the step's ops: 3 heads of 16 with a GQA group of 3, a vocabulary of 300 */
    ROWS(HD_OP_SWIGLU, 5, 37),
    ROWS(HD_OP_SWIGLU_BACKWARD, 5, 37),
    ROWS(HD_OP_GELU, 3, 100),
    ROWS(HD_OP_GELU_BACKWARD, 3, 100),
    ROWS(HD_OP_ADD, 7, 129),
    ROWS(HD_OP_ADD_RMS_NORM, 7, 129),
    ROWS(HD_OP_ADD_RMS_NORM_BACKWARD, 7, 129),
    DIMS3(HD_OP_ROPE, 9, 48, 8),
    DIMS4(HD_OP_ATTENTION, 19, 3, 1, 16),
    DIMS4(HD_OP_ATTENTION_BACKWARD, 19, 3, 1, 16),
    ROWS(HD_OP_CROSS_ENTROPY, 9, 300),
    DIMS3(HD_OP_LINEAR_CROSS_ENTROPY, 9, 24, 300),
    DIMS3(HD_OP_EMBEDDING, 9, 24, 300),
    /* AdamW: 14 tensors, more than the fused kernels take in one launch */
    ADAMW(1, 48, 16, 80, 3),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const hd_bench_suite suites[] = {
    {"seed", "one-token LoRA and 64x1024 row ops (the original comparison)", seed_cases,
     COUNT(seed_cases)},
    {"train", "fine-tuning sizes: 4096 tokens, long and many rows", train_cases,
     COUNT(train_cases)},
    {"gemm",
     "square 64..8192, 1/16/8192 tokens over a 4096x4096 weight, batches of attention-sized "
     "products",
     gemm_cases, COUNT(gemm_cases)},
    {"shapes",
     "GEMM and LoRA as fine-tuning meets them: 1-8192 tokens, widths 512-16384 with "
     "MLP widths, every transpose, odd and prime sizes",
     shapes_cases, COUNT(shapes_cases)},
    {"ci", "small odd shapes for continuous integration", ci_cases, COUNT(ci_cases)},
    {"backward",
     "LoRA's backward at 1 and 4096 tokens in both layouts, the row ops' on the seed and train "
     "shapes (dx and weight gradients)",
     backward_cases, COUNT(backward_cases)},
    {"step",
     "a decoder's training step: Llama-3-8B's shapes at 2048 tokens and a small model's at 512 "
     "(SwiGLU, GELU, add, add + RMS norm, RoPE, attention, cross-entropy, the LM head's, "
     "embedding; forward and backward), and AdamW over two layers' rank-16 LoRA factors",
     step_cases, COUNT(step_cases)},
};

const hd_bench_suite *hd__bench_suites(size_t *count)
{
    if (count != NULL)
        *count = COUNT(suites);
    return suites;
}

const hd_bench_suite *hd__bench_suite_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < COUNT(suites); i++)
        if (strcmp(suites[i].name, name) == 0)
            return &suites[i];
    return NULL;
}

_Static_assert(COUNT(suites) <= HD_BENCH_SUITES_MAX, "raise HD_BENCH_SUITES_MAX");

size_t hd__bench_suites_named(const char *name, const hd_bench_suite *out[HD_BENCH_SUITES_MAX])
{
    size_t n = 0;
    for (size_t i = 0; i < COUNT(suites); i++)
        if (strcmp(name, "all") == 0 ? strcmp(suites[i].name, "ci") != 0
                                     : strcmp(suites[i].name, name) == 0)
            out[n++] = &suites[i];
    return n;
}

/* "a, b, c or d" of count names, into buf (static storage of the caller). */
static const char *join_names(char *buf, size_t cap, const char *(*name)(size_t), size_t count)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < count && len < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        int n = snprintf(buf + len, cap - len, "%s%s", sep, name(i));
        len += n > 0 ? (size_t)n : 0;
    }
    return buf;
}

static const char *suite_or_all(size_t i)
{
    return i < COUNT(suites) ? suites[i].name : "all";
}

/* The table's ops, then adamw. */
static const char *op_name(size_t i)
{
    return i == HD_OP_COUNT ? "adamw" : hd_op_name((hd_op)i);
}

const char *hd__bench_suite_names(void)
{
    static char text[160];
    return text[0] != '\0' ? text : join_names(text, sizeof text, suite_or_all, COUNT(suites) + 1);
}

const char *hd__bench_op_names(void)
{
    static char text[384];
    return text[0] != '\0' ? text : join_names(text, sizeof text, op_name, HD_OP_COUNT);
}

const char *hd__bench_case_op_names(void)
{
    static char text[384];
    return text[0] != '\0' ? text : join_names(text, sizeof text, op_name, HD_OP_COUNT + 1);
}

bool hd__bench_list_each(const char *who, const char *list, bool (*item)(const char *, void *),
                         void *arg)
{
    if (list[strspn(list, ",")] == '\0') {
        fprintf(stderr, "%s: the list is empty%s\n", who, list[0] != '\0' ? " (commas alone)" : "");
        return false;
    }
    char *names = strdup(list);
    if (names == NULL) {
        fprintf(stderr, "%s: out of memory\n", who);
        return false;
    }
    bool ok = true;
    for (char *p = names; ok;) {
        size_t len = strcspn(p, ",");
        bool last = p[len] == '\0';
        p[len] = '\0';
        if (len == 0)
            fprintf(stderr, "%s: an empty name in the list '%s'\n", who, list);
        ok = len > 0 && item(p, arg);
        if (last)
            break;
        p += len + 1;
    }
    free(names);
    return ok;
}

bool hd__bench_case_is_adamw(const hd_bench_case *c)
{
    return c->op == HD_BENCH_OP_ADAMW;
}

const char *hd__bench_case_op_name(const hd_bench_case *c)
{
    return hd__bench_case_is_adamw(c) ? "adamw" : hd_op_name(c->op);
}

/* The projections of a decoder layer that carry LoRA factors, in and out as indices of an
 * AdamW case's dims (1 hidden, 2 kv_dim, 3 mlp). */
static const struct {
    int in, out;
} projections[HD_BENCH_ADAMW_LAYER_TENSORS / 2] = {
    {1, 1}, /* q */
    {1, 2}, /* k */
    {1, 2}, /* v */
    {1, 1}, /* o */
    {1, 3}, /* gate */
    {1, 3}, /* up */
    {3, 1}, /* down */
};

size_t hd__bench_adamw_tensors(const hd_bench_case *c, size_t rows[], size_t cols[], size_t max)
{
    const size_t *d = c->shape.dim;
    size_t n = 0;
    for (size_t layer = 0; layer < d[0] && n < max; layer++)
        for (size_t k = 0; k < COUNT(projections) && n < max; k++) {
            rows[n] = c->rank; /* A: rank x in */
            cols[n++] = d[projections[k].in];
            if (n < max) { /* B: out x rank */
                rows[n] = d[projections[k].out];
                cols[n++] = c->rank;
            }
        }
    return d[0] * HD_BENCH_ADAMW_LAYER_TENSORS;
}

double hd__bench_adamw_parameters(const hd_bench_case *c)
{
    double per_layer = 0.0;
    for (size_t k = 0; k < COUNT(projections); k++)
        per_layer += (double)c->rank *
                     (double)(c->shape.dim[projections[k].in] + c->shape.dim[projections[k].out]);
    return (double)c->shape.dim[0] * per_layer;
}

/* AdamW's arithmetic per parameter: the norm's square and sum, the clip, the decay, the
 * moments' seven operations, the update's six (a square root, a division among them). */
#define ADAMW_FLOPS_PER_PARAMETER 17.0
/* Its bytes per parameter: the parameter, gradient and moments read, the parameter and moments
 * written, 4 bytes each. */
#define ADAMW_BYTES_PER_PARAMETER 28.0

int hd__bench_case_name(const hd_bench_case *c, char *buf, size_t cap)
{
    const size_t *d = c->shape.dim;
    if (hd__bench_case_is_adamw(c))
        return snprintf(buf, cap, "adamw %zux%zux%zux%zu r%zu", d[0], d[1], d[2], d[3], c->rank);
    return hd__op_text(c->op, &c->shape, HD_TEXT_CASE, buf, cap);
}

double hd__bench_case_flops(const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c))
        return ADAMW_FLOPS_PER_PARAMETER * hd__bench_adamw_parameters(c);
    return hd__op_flops(c->op, &c->shape);
}

double hd__bench_case_elements(const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c)) /* the four lists */
        return 4.0 * hd__bench_adamw_parameters(c);
    return hd__op_elements(c->op, &c->shape);
}

double hd__bench_case_bytes(const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c))
        return ADAMW_BYTES_PER_PARAMETER * hd__bench_adamw_parameters(c);
    /* beta = 0 in the benchmark, so C is written and never read: every tensor moves once. */
    return hd__op_bytes(c->op, &c->shape);
}

int hd__bench_case_compute_bound(const hd_bench_case *c)
{
    return !hd__bench_case_is_adamw(c) && hd__op(c->op)->compute_bound;
}
