/*
 * The op table: everything the library knows about an operation apart from how a backend
 * computes it. One row per hd_op (core/op.c) gives its name and public function, its
 * dimensions, its tensors and their shapes in those dimensions, its arithmetic, the tool's
 * value ranges and, where it has one, the leading product that a plan of two backends hands to
 * one backend's GEMM before another's epilogue (its argument checks are the dispatcher's:
 * hd__op_prepare, dispatch/check.h). The checks, the scheduler, the cache records, the suites,
 * the tuner, the reference and explain all read it; adding an operation is a row here (and in
 * HD_OP_MAP), its check, and the backends' slots.
 */
#ifndef HD_CORE_OP_H
#define HD_CORE_OP_H

#include <stdbool.h>
#include <stddef.h>

#include "core/args.h"

#define HD_OP_TENSOR_MAX 10 /* attention's backward: six inputs and three outputs */
#define HD_OP_DIM_MAX    4

/* A tensor's dimension in terms of the op's dims: HD_DIM_ONE, or the index of a dim. */
enum { HD_DIM_ONE = -1 };

typedef enum hd_tensor_role {
    HD_ROLE_INPUT = 1,
    HD_ROLE_OUTPUT = 2,
} hd_tensor_role;

typedef struct hd_op_tensor {
    const char *name; /* as the public function's parameter, in messages */
    hd_tensor_role role;
    bool optional;           /* may be NULL (a gradient the caller does not want) */
    unsigned in_place_of;    /* an output: bit i set where it may be tensors[i] (in place) */
    bool read_too;           /* an output whose values the op reads first (y += x): its bytes
                                count twice */
    signed char rows, cols;  /* dims (HD_DIM_ONE: 1) */
    signed char cols_times;  /* 0, or 1 + a dim the columns are multiplied by (attention's
                                heads x head_dim) */
    signed char transpose;   /* 0; 1 or 2: stored transposed when trans_a or trans_b is set */
    signed char layout;      /* 0, or the hd_lora_layout flag under which it is stored
                                transposed (LoRA's W, A and B, and their gradients) */
    signed char batch;       /* a dim that multiplies the rows (batched GEMM), or HD_DIM_ONE */
    float lo, hi;            /* the value range tools and tests draw inputs from */
} hd_op_tensor;

/* The scalar arguments of any op; each op reads its own. */
typedef struct hd_op_params {
    bool trans_a, trans_b;
    float alpha, beta;    /* GEMM; alpha: add */
    float scale;          /* LoRA */
    unsigned lora_layout; /* LoRA and its backward: hd_lora_layout flags (the _ex calls) */
    float eps;            /* norms */
    size_t batch;         /* batched GEMM */
    bool accumulate;      /* LoRA backward: add the gradients to the outputs */
    /* the training step's ops */
    hd_sequences sequences;     /* RoPE, attention */
    size_t head_dim;            /* RoPE */
    float theta;                /* RoPE */
    size_t position_offset;     /* RoPE */
    bool inverse;               /* RoPE */
    size_t heads, kv_heads;     /* attention */
    bool causal;                /* attention */
    size_t window;              /* attention: causal keys per row at most, 0: all */
    float attention_scale;      /* attention: 0 for 1/sqrt(head_dim) */
    const int32_t *ids;         /* cross-entropy's targets, embedding's ids: rows of them */
    const hd_tensor *id_tensor; /* the same as an int32 tensor (the _ids forms), or NULL */
    int32_t ignore_index;       /* cross-entropy */
} hd_op_params;

typedef enum hd_args_kind {
    HD_ARGS_GEMM,
    HD_ARGS_LORA,
    HD_ARGS_ROW,
    HD_ARGS_ROW_BACKWARD,
    HD_ARGS_LORA_BACKWARD,
    HD_ARGS_STEP,
} hd_args_kind;

typedef struct hd_op_desc { /* the op's name is HD_OP_MAP's (hd_op_name()) */
    const char *fn;         /* the public function, for messages */
    const char *ids_fn; /* its _ids form's (the ids in a tensor, hd_op_params.id_tensor), or NULL */
    int dims;         /* how many of hd_shape.dim the op uses */
    const char *dim_names[HD_OP_DIM_MAX];
    /* Dims written after the others with a prefix in case texts ("lora 1x64x64 r8"), from
     * first_suffix_dim on; 0 where every dim is joined by 'x'. */
    int first_suffix_dim;
    char suffix_prefix[HD_OP_DIM_MAX];
    bool transposes;                 /* the shape carries trans_a and trans_b */
    bool lora_layout;                /* the shape carries hd_lora_layout flags */
    bool zero_dim_ok[HD_OP_DIM_MAX]; /* a dim that may be 0 in a tuned case (LoRA's rank) */
    bool compute_bound;              /* reported in GFLOP/s; costed by its multiply-adds */
    hd_args_kind args;               /* which member of hd_op_args its slots read */
    int tensor_count;
    hd_op_tensor tensors[HD_OP_TENSOR_MAX]; /* in the public function's order */
    /* Floating-point operations of one call (2 per multiply-add; row ops count their
     * arithmetic per element). */
    double (*flops)(const hd_shape *shape);
    /* The op's leading product, for plans of two backends: the GEMM's shape and, when args
     * is not NULL, the GEMM arguments that leave the product in the op's output for an
     * epilogue to finish. NULL: the op has no such split. */
    void (*product)(const hd_shape *shape, const hd_op_args *args, hd_shape *product,
                    hd_gemm_args *gemm);
} hd_op_desc;

extern const hd_op_desc hd__op_table[HD_OP_COUNT];

static inline const hd_op_desc *hd__op(hd_op op)
{
    return &hd__op_table[op];
}

/* The public function a call of op with p came through, for its messages: the _ids form where
 * p holds an id tensor. */
static inline const char *hd__op_fn(hd_op op, const hd_op_params *p)
{
    const hd_op_desc *d = hd__op(op);
    return p != NULL && p->id_tensor != NULL && d->ids_fn != NULL ? d->ids_fn : d->fn;
}

/* A tensor's rows and columns for a call of the given shape, as the op expects them. */
void hd__op_tensor_shape(hd_op op, int i, const hd_shape *shape, size_t *rows, size_t *cols);

/* Floats held by every tensor of one call. */
double hd__op_elements(hd_op op, const hd_shape *shape);
/* The fewest bytes one call moves: each tensor once, an output that every call reads first
 * (hd_op_tensor.read_too: hd_add's y) twice. GEMM's C with beta != 0 counts once: the shape does
 * not say whether it is read. */
double hd__op_bytes(hd_op op, const hd_shape *shape);
double hd__op_flops(hd_op op, const hd_shape *shape);
/* Multiply-adds for compute-bound ops, elements of the first input for the others: the
 * measure of "small" in the scheduler's default rule. */
double hd__op_work(hd_op op, const hd_shape *shape);

typedef enum hd_text_style {
    HD_TEXT_KEY,  /* messages and explain: "gemm 1x4096x4096 nt", "softmax 64x1024" */
    HD_TEXT_CASE, /* benchmark case names: "gemm 1x4096x4096", "gemm 31x7x64 TN" */
} hd_text_style;

/* The text of (op, shape) in a style; returns what snprintf returns. */
int hd__op_text(hd_op op, const hd_shape *shape, hd_text_style style, char *buf, size_t size);

/* LoRA's layout flags as the case names, the tuning cache and a shapes file spell them: "" for
 * the default, "pt" for HD_LORA_LAYOUT_PYTORCH, "layoutN" for the other flags N; buf holds the
 * text where it is not a literal. */
const char *hd__lora_layout_name(unsigned layout, char buf[8]);

/* The flags the len bytes at text name ("pt", "layout1" to "layout7"); false for anything
 * else, the default layout's empty name included. */
bool hd__lora_layout_from_name(const char *text, size_t len, unsigned *layout);

/* Whether two shapes are the same call of op (its dims and, where it has them, transposes and
 * LoRA layout flags). */
bool hd__op_same_shape(hd_op op, const hd_shape *a, const hd_shape *b);

#endif
