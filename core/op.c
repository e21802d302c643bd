/* The op table (core/op.h) and what is computed from it. */
#include <stdio.h>
#include <string.h>

#include "core/op.h"

/* Tensors by the dims of their rows and columns; T_ONE for a dimension of 1. */
#define IN(n, r, c, lo_, hi_)                                                                      \
    {                                                                                              \
        .name = n, .role = HD_ROLE_INPUT, .rows = r, .cols = c, .batch = HD_DIM_ONE, .lo = lo_,    \
        .hi = hi_                                                                                  \
    }
#define OUT(n, r, c)                                                                               \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .rows = r, .cols = c, .batch = HD_DIM_ONE               \
    }
#define OUT_IN_PLACE(n, r, c)                                                                      \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .in_place_of = 1u, .rows = r, .cols = c,                \
        .batch = HD_DIM_ONE                                                                        \
    }
/* A GEMM operand: stored transposed when trans_a (tr 1) or trans_b (tr 2) is set, its rows
 * repeated per matrix of a batch (dim b). */
#define GEMM_IN(n, r, c, tr, b)                                                                    \
    {                                                                                              \
        .name = n, .role = HD_ROLE_INPUT, .rows = r, .cols = c, .transpose = tr, .batch = b,       \
        .lo = -1, .hi = 1                                                                          \
    }
#define BATCH_OUT(n, r, c, b)                                                                      \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .rows = r, .cols = c, .batch = b                        \
    }
/* A gradient the caller may leave NULL, and dx, which may be dy (tensor index dy_index). */
#define GRAD_OUT(n, r, c)                                                                          \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .optional = true, .rows = r, .cols = c,                 \
        .batch = HD_DIM_ONE                                                                        \
    }
#define DX_IN_PLACE_OF(dy_index)                                                                   \
    {                                                                                              \
        .name = "dx", .role = HD_ROLE_OUTPUT, .in_place_of = 1u << (dy_index),                     \
        .rows = 0, .cols = 1, .batch = HD_DIM_ONE                                                  \
    }
/* LoRA's weights, and their gradients, stored transposed under the layout flag fl. */
#define WEIGHT_IN(n, r, c, fl)                                                                     \
    {                                                                                              \
        .name = n, .role = HD_ROLE_INPUT, .rows = r, .cols = c, .layout = fl, .batch = HD_DIM_ONE, \
        .lo = -1, .hi = 1                                                                          \
    }
#define WEIGHT_GRAD(n, r, c, fl)                                                                   \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .rows = r, .cols = c, .layout = fl, .batch = HD_DIM_ONE \
    }
/* An output the op reads before it writes it (an accumulation). */
#define OUT_UPDATED(n, r, c)                                                                       \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .read_too = true, .rows = r, .cols = c,                 \
        .batch = HD_DIM_ONE                                                                        \
    }
#define T_ONE HD_DIM_ONE
/* The training step's tensors: an output that may be the inputs of mask m (in place), an
 * optional input, and attention's heads x head_dim columns (dim h times dim d). */
#define OUT_MAY_BE(n, r, c, m)                                                                     \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .in_place_of = m, .rows = r, .cols = c,                 \
        .batch = HD_DIM_ONE                                                                        \
    }
#define GRAD_MAY_BE(n, r, c, m)                                                                    \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .optional = true, .in_place_of = m, .rows = r,          \
        .cols = c, .batch = HD_DIM_ONE                                                             \
    }
#define IN_OPTIONAL(n, r, c, lo_, hi_)                                                             \
    {                                                                                              \
        .name = n, .role = HD_ROLE_INPUT, .optional = true, .rows = r, .cols = c,                  \
        .batch = HD_DIM_ONE, .lo = lo_, .hi = hi_                                                  \
    }
#define HEADS_IN(n, h, d, lo_, hi_)                                                                \
    {                                                                                              \
        .name = n, .role = HD_ROLE_INPUT, .rows = 0, .cols = h, .cols_times = 1 + (d),             \
        .batch = HD_DIM_ONE, .lo = lo_, .hi = hi_                                                  \
    }
#define HEADS_OUT(n, h, d)                                                                         \
    {                                                                                              \
        .name = n, .role = HD_ROLE_OUTPUT, .rows = 0, .cols = h, .cols_times = 1 + (d),            \
        .batch = HD_DIM_ONE                                                                        \
    }
#define BIT(i) (1u << (i))

static double gemm_flops(const hd_shape *s)
{
    return 2.0 * (double)s->dim[0] * (double)s->dim[1] * (double)s->dim[2];
}

static double gemm_batched_flops(const hd_shape *s)
{
    return gemm_flops(s) * (double)s->dim[3];
}

/* x*W, x*A, (xA)*B, and the scaled add. */
static double lora_flops(const hd_shape *s)
{
    double t = (double)s->dim[0], in = (double)s->dim[1], out = (double)s->dim[2];
    double r = (double)s->dim[3];
    return 2.0 * t * in * out + 2.0 * t * in * r + 2.0 * t * r * out + 2.0 * t * out;
}

static double softmax_flops(const hd_shape *s) /* max, subtract, exp, sum, divide */
{
    return 5.0 * (double)s->dim[0] * (double)s->dim[1];
}

static double layer_norm_flops(const hd_shape *s) /* mean, variance, normalise, scale, shift */
{
    return 7.0 * (double)s->dim[0] * (double)s->dim[1];
}

static double rms_norm_flops(const hd_shape *s)
{
    return 4.0 * (double)s->dim[0] * (double)s->dim[1];
}

/* Per element: the dot product of y and dy, then the scaled difference. */
static double softmax_backward_flops(const hd_shape *s)
{
    return 4.0 * (double)s->dim[0] * (double)s->dim[1];
}

/* Per element: the statistics, two row sums, dx, and the weight gradients. */
static double layer_norm_backward_flops(const hd_shape *s)
{
    return 14.0 * (double)s->dim[0] * (double)s->dim[1];
}

static double rms_norm_backward_flops(const hd_shape *s)
{
    return 10.0 * (double)s->dim[0] * (double)s->dim[1];
}

/* dy*B^T, x*A, dx = dy*W^T + scale*u*A^T, dA = scale*x^T*u, dB = scale*(xA)^T*dy. */
static double lora_backward_flops(const hd_shape *s)
{
    double t = (double)s->dim[0], in = (double)s->dim[1], out = (double)s->dim[2];
    double r = (double)s->dim[3];
    return 2.0 * t * in * out + 2.0 * t * r * (2.0 * out + 3.0 * in);
}

/* The training step's ops, per element of their first input: the elementwise ops' arithmetic
 * (an exp and a division counted as one each). */
static double elements(const hd_shape *s)
{
    return (double)s->dim[0] * (double)s->dim[1];
}
static double swiglu_flops(const hd_shape *s)
{
    return 5.0 * elements(s);
}
static double swiglu_backward_flops(const hd_shape *s)
{
    return 10.0 * elements(s);
}
static double gelu_flops(const hd_shape *s)
{
    return 9.0 * elements(s);
}
static double gelu_backward_flops(const hd_shape *s)
{
    return 16.0 * elements(s);
}
static double add_flops(const hd_shape *s)
{
    return 2.0 * elements(s);
}
static double add_rms_norm_flops(const hd_shape *s)
{
    return 5.0 * elements(s);
}
static double add_rms_norm_backward_flops(const hd_shape *s)
{
    return 11.0 * elements(s);
}
static double rope_flops(const hd_shape *s) /* a rotation: 3 per element, and the angle */
{
    return 4.0 * elements(s);
}

/* The score and output products (2 each per multiply-add), causal: half the pairs. */
static double attention_flops(const hd_shape *s)
{
    double t = (double)s->dim[0], h = (double)s->dim[1], d = (double)s->dim[3];
    return 2.0 * t * t * h * d;
}
/* Scores again, dv, dp, dq and dk: five products to the forward's two. */
static double attention_backward_flops(const hd_shape *s)
{
    return 2.5 * attention_flops(s);
}
/* logsumexp, the target's logit and the gradient: a few per logit */
static double cross_entropy_flops(const hd_shape *s)
{
    return 5.0 * elements(s);
}
/* h*W^T, then dh = dlogits*W: two products of T x V x D, and the rows' work */
static double linear_cross_entropy_flops(const hd_shape *s)
{
    double t = (double)s->dim[0], d = (double)s->dim[1], v = (double)s->dim[2];
    return 4.0 * t * v * d + 5.0 * t * v;
}
static double embedding_flops(const hd_shape *s) /* a copy: no arithmetic, the elements moved */
{
    return elements(s);
}

/* LoRA's leading product y = x*op(W), which a plan of two backends computes with one backend's
 * GEMM before the other's epilogue adds scale*(x*A)*B. */
static void lora_product(const hd_shape *s, const hd_op_args *args, hd_shape *product,
                         hd_gemm_args *g)
{
    *product = (hd_shape){.dim = {s->dim[0], s->dim[2], s->dim[1]},
                          .trans_b = (s->lora_layout & HD_LORA_TRANS_W) != 0,
                          .precision = s->precision};
    if (args == NULL)
        return;
    const hd_lora_args *l = &args->lora;
    *g = (hd_gemm_args){.trans_b = l->trans_w, /* W read in place, as stored */
                        .alpha = 1.0f,
                        .beta = 0.0f,
                        .a = l->x,
                        .b = l->w,
                        .c = l->y,
                        .m = l->tokens,
                        .n = l->out,
                        .k = l->in,
                        .precision = l->precision};
}

const hd_op_desc hd__op_table[HD_OP_COUNT] = {
    [HD_OP_GEMM] =
        {
            .fn = "hd_gemm",
            .dims = 3,
            .dim_names = {"m", "n", "k"},
            .transposes = true,
            .compute_bound = true,
            .args = HD_ARGS_GEMM,
            .tensor_count = 3,
            .tensors = {GEMM_IN("a", 0, 2, 1, T_ONE), GEMM_IN("b", 2, 1, 2, T_ONE), OUT("c", 0, 1)},
            .flops = gemm_flops,
        },
    [HD_OP_LORA] =
        {
            .fn = "hd_lora_forward",
            .dims = 4,
            .dim_names = {"tokens", "in", "out", "rank"},
            .first_suffix_dim = 3,
            .suffix_prefix = {[3] = 'r'},
            .zero_dim_ok = {[3] = true},
            .compute_bound = true,
            .args = HD_ARGS_LORA,
            .tensor_count = 5,
            .lora_layout = true,
            .tensors = {IN("x", 0, 1, -1, 1), WEIGHT_IN("w", 1, 2, HD_LORA_TRANS_W),
                        WEIGHT_IN("a", 1, 3, HD_LORA_TRANS_A),
                        WEIGHT_IN("b", 3, 2, HD_LORA_TRANS_B), OUT("y", 0, 2)},
            .flops = lora_flops,
            .product = lora_product,
        },
    [HD_OP_SOFTMAX] =
        {
            .fn = "hd_softmax",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW,
            .tensor_count = 2,
            .tensors = {IN("x", 0, 1, -4, 4), OUT_IN_PLACE("y", 0, 1)},
            .flops = softmax_flops,
        },
    [HD_OP_LAYER_NORM] =
        {
            .fn = "hd_layer_norm",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW,
            .tensor_count = 4,
            .tensors = {IN("x", 0, 1, -2, 3), IN("gamma", T_ONE, 1, 0.5f, 1.5f),
                        IN("beta", T_ONE, 1, -0.5f, 0.5f), OUT_IN_PLACE("y", 0, 1)},
            .flops = layer_norm_flops,
        },
    [HD_OP_RMS_NORM] =
        {
            .fn = "hd_rms_norm",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW,
            .tensor_count = 3,
            .tensors = {IN("x", 0, 1, -2, 3), IN("weight", T_ONE, 1, 0.5f, 1.5f),
                        OUT_IN_PLACE("y", 0, 1)},
            .flops = rms_norm_flops,
        },
    [HD_OP_GEMM_BATCHED] =
        {
            .fn = "hd_gemm_batched",
            .dims = 4,
            .dim_names = {"m", "n", "k", "batch"},
            .first_suffix_dim = 3,
            .suffix_prefix = {[3] = 'x'},
            .transposes = true,
            .compute_bound = true,
            .args = HD_ARGS_GEMM,
            .tensor_count = 3,
            .tensors = {GEMM_IN("a", 0, 2, 1, 3), GEMM_IN("b", 2, 1, 2, 3),
                        BATCH_OUT("c", 0, 1, 3)},
            .flops = gemm_batched_flops,
        },
    [HD_OP_SOFTMAX_BACKWARD] =
        {
            .fn = "hd_softmax_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW_BACKWARD,
            .tensor_count = 3,
            .tensors = {IN("y", 0, 1, 0.0f, 0.1f), IN("dy", 0, 1, -1, 1), DX_IN_PLACE_OF(1)},
            .flops = softmax_backward_flops,
        },
    [HD_OP_LAYER_NORM_BACKWARD] =
        {
            .fn = "hd_layer_norm_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW_BACKWARD,
            .tensor_count = 6,
            .tensors = {IN("x", 0, 1, -2, 3), IN("gamma", T_ONE, 1, 0.5f, 1.5f),
                        IN("dy", 0, 1, -1, 1), DX_IN_PLACE_OF(2), GRAD_OUT("dgamma", T_ONE, 1),
                        GRAD_OUT("dbeta", T_ONE, 1)},
            .flops = layer_norm_backward_flops,
        },
    [HD_OP_RMS_NORM_BACKWARD] =
        {
            .fn = "hd_rms_norm_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_ROW_BACKWARD,
            .tensor_count = 5,
            .tensors = {IN("x", 0, 1, -2, 3), IN("weight", T_ONE, 1, 0.5f, 1.5f),
                        IN("dy", 0, 1, -1, 1), DX_IN_PLACE_OF(2), GRAD_OUT("dweight", T_ONE, 1)},
            .flops = rms_norm_backward_flops,
        },
    [HD_OP_LORA_BACKWARD] =
        {
            .fn = "hd_lora_backward",
            .lora_layout = true,
            .dims = 4,
            .dim_names = {"tokens", "in", "out", "rank"},
            .first_suffix_dim = 3,
            .suffix_prefix = {[3] = 'r'},
            .zero_dim_ok = {[3] = true},
            .compute_bound = true,
            .args = HD_ARGS_LORA_BACKWARD,
            .tensor_count = 8,
            .tensors = {IN("x", 0, 1, -1, 1), WEIGHT_IN("w", 1, 2, HD_LORA_TRANS_W),
                        WEIGHT_IN("a", 1, 3, HD_LORA_TRANS_A),
                        WEIGHT_IN("b", 3, 2, HD_LORA_TRANS_B), IN("dy", 0, 2, -1, 1),
                        GRAD_OUT("dx", 0, 1), WEIGHT_GRAD("da", 1, 3, HD_LORA_TRANS_A),
                        WEIGHT_GRAD("db", 3, 2, HD_LORA_TRANS_B)},
            .flops = lora_backward_flops,
        },
    [HD_OP_SWIGLU] =
        {
            .fn = "hd_swiglu",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 3,
            .tensors = {IN("g", 0, 1, -4, 4), IN("u", 0, 1, -2, 2),
                        OUT_MAY_BE("y", 0, 1, BIT(0) | BIT(1))},
            .flops = swiglu_flops,
        },
    [HD_OP_SWIGLU_BACKWARD] =
        {
            .fn = "hd_swiglu_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 5,
            .tensors = {IN("g", 0, 1, -4, 4), IN("u", 0, 1, -2, 2), IN("dy", 0, 1, -1, 1),
                        OUT_MAY_BE("dg", 0, 1, BIT(0) | BIT(2)),
                        OUT_MAY_BE("du", 0, 1, BIT(1) | BIT(2))},
            .flops = swiglu_backward_flops,
        },
    [HD_OP_GELU] =
        {
            .fn = "hd_gelu",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 2,
            .tensors = {IN("x", 0, 1, -4, 4), OUT_IN_PLACE("y", 0, 1)},
            .flops = gelu_flops,
        },
    [HD_OP_GELU_BACKWARD] =
        {
            .fn = "hd_gelu_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 3,
            .tensors = {IN("x", 0, 1, -4, 4), IN("dy", 0, 1, -1, 1), DX_IN_PLACE_OF(1)},
            .flops = gelu_backward_flops,
        },
    [HD_OP_ADD] =
        {
            .fn = "hd_add",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 2,
            .tensors = {IN("x", 0, 1, -1, 1), OUT_UPDATED("y", 0, 1)},
            .flops = add_flops,
        },
    [HD_OP_ADD_RMS_NORM] =
        {
            .fn = "hd_add_rms_norm",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 5,
            .tensors = {IN("x", 0, 1, -2, 3), IN("r", 0, 1, -1, 1),
                        IN("weight", T_ONE, 1, 0.5f, 1.5f), OUT_MAY_BE("h", 0, 1, BIT(0) | BIT(1)),
                        OUT("y", 0, 1)},
            .flops = add_rms_norm_flops,
        },
    [HD_OP_ADD_RMS_NORM_BACKWARD] =
        {
            .fn = "hd_add_rms_norm_backward",
            .dims = 2,
            .dim_names = {"rows", "cols"},
            .args = HD_ARGS_STEP,
            .tensor_count = 6,
            .tensors = {IN("h", 0, 1, -2, 3), IN("weight", T_ONE, 1, 0.5f, 1.5f),
                        IN("dy", 0, 1, -1, 1), IN_OPTIONAL("dres", 0, 1, -1, 1),
                        OUT_MAY_BE("dh", 0, 1, BIT(2) | BIT(3)), GRAD_OUT("dweight", T_ONE, 1)},
            .flops = add_rms_norm_backward_flops,
        },
    [HD_OP_ROPE] =
        {
            .fn = "hd_rope",
            .dims = 3,
            .dim_names = {"rows", "cols", "pairs"}, /* pairs: head_dim / 2 */
            .first_suffix_dim = 2,
            .suffix_prefix = {[2] = 'p'},
            .args = HD_ARGS_STEP,
            .tensor_count = 3,
            .tensors = {IN("x", 0, 1, -2, 2), IN_OPTIONAL("inv_freq", T_ONE, 2, 0.0f, 1.0f),
                        OUT_IN_PLACE("y", 0, 1)},
            .flops = rope_flops,
        },
    [HD_OP_ATTENTION] =
        {
            .fn = "hd_attention",
            .dims = 4,
            .dim_names = {"tokens", "heads", "kv_heads", "head_dim"},
            .first_suffix_dim = 1,
            .suffix_prefix = {[1] = 'h', [2] = 'k', [3] = 'd'},
            .compute_bound = true,
            .args = HD_ARGS_STEP,
            .tensor_count = 5,
            .tensors = {HEADS_IN("q", 1, 3, -2, 2), HEADS_IN("k", 2, 3, -2, 2),
                        HEADS_IN("v", 2, 3, -1, 1), HEADS_OUT("out", 1, 3), GRAD_OUT("lse", 0, 1)},
            .flops = attention_flops,
        },
    [HD_OP_ATTENTION_BACKWARD] =
        {
            .fn = "hd_attention_backward",
            .dims = 4,
            .dim_names = {"tokens", "heads", "kv_heads", "head_dim"},
            .first_suffix_dim = 1,
            .suffix_prefix = {[1] = 'h', [2] = 'k', [3] = 'd'},
            .compute_bound = true,
            .args = HD_ARGS_STEP,
            .tensor_count = 9,
            .tensors = {HEADS_IN("q", 1, 3, -2, 2), HEADS_IN("k", 2, 3, -2, 2),
                        HEADS_IN("v", 2, 3, -1, 1), HEADS_IN("out", 1, 3, -1, 1),
                        IN("lse", 0, 1, 0, 1), HEADS_IN("dout", 1, 3, -1, 1), HEADS_OUT("dq", 1, 3),
                        HEADS_OUT("dk", 2, 3), HEADS_OUT("dv", 2, 3)},
            .flops = attention_backward_flops,
        },
    [HD_OP_CROSS_ENTROPY] =
        {
            .fn = "hd_cross_entropy",
            .ids_fn = "hd_cross_entropy_ids",
            .dims = 2,
            .dim_names = {"rows", "vocab"},
            .args = HD_ARGS_STEP,
            .tensor_count = 3,
            .tensors = {IN("logits", 0, 1, -8, 8), OUT("loss", T_ONE, T_ONE),
                        GRAD_MAY_BE("dlogits", 0, 1, BIT(0))},
            .flops = cross_entropy_flops,
        },
    [HD_OP_LINEAR_CROSS_ENTROPY] =
        {
            .fn = "hd_linear_cross_entropy",
            .ids_fn = "hd_linear_cross_entropy_ids",
            .dims = 3,
            .dim_names = {"rows", "dim", "vocab"},
            .first_suffix_dim = 2,
            .suffix_prefix = {[2] = 'v'},
            .compute_bound = true,
            .args = HD_ARGS_STEP,
            .tensor_count = 4,
            .tensors = {IN("h", 0, 1, -1, 1), IN("w", 2, 1, -0.1f, 0.1f), OUT("loss", T_ONE, T_ONE),
                        GRAD_OUT("dh", 0, 1)},
            .flops = linear_cross_entropy_flops,
        },
    [HD_OP_EMBEDDING] =
        {
            .fn = "hd_embedding",
            .ids_fn = "hd_embedding_ids",
            .dims = 3,
            .dim_names = {"rows", "dim", "vocab"},
            .first_suffix_dim = 2,
            .suffix_prefix = {[2] = 'v'},
            .args = HD_ARGS_STEP,
            .tensor_count = 2,
            .tensors = {IN("table", 2, 1, -1, 1), OUT("out", 0, 1)},
            .flops = embedding_flops,
        },
};

static size_t dim_of(const hd_shape *s, int d)
{
    return d == HD_DIM_ONE ? 1 : s->dim[d];
}

void hd__op_tensor_shape(hd_op op, int i, const hd_shape *s, size_t *rows, size_t *cols)
{
    const hd_op_tensor *t = &hd__op(op)->tensors[i];
    size_t r = dim_of(s, t->rows), c = dim_of(s, t->cols);
    if (t->cols_times != 0)
        c *= dim_of(s, t->cols_times - 1);
    bool swap = (t->transpose == 1 && s->trans_a) || (t->transpose == 2 && s->trans_b);
    swap |= t->layout != 0 && (s->lora_layout & (unsigned)t->layout) != 0;
    *rows = (swap ? c : r) * dim_of(s, t->batch);
    *cols = swap ? r : c;
}

/* The floats of every tensor of one call, those of an output it also reads twice where
 * reads_too (the floats it moves). */
static double tensor_floats(hd_op op, const hd_shape *s, bool reads_too)
{
    double sum = 0.0;
    for (int i = 0; i < hd__op(op)->tensor_count; i++) {
        size_t r, c;
        hd__op_tensor_shape(op, i, s, &r, &c);
        bool twice = reads_too && hd__op(op)->tensors[i].read_too;
        sum += (double)r * (double)c * (twice ? 2.0 : 1.0);
    }
    return sum;
}

double hd__op_elements(hd_op op, const hd_shape *s)
{
    return tensor_floats(op, s, false);
}

double hd__op_bytes(hd_op op, const hd_shape *s)
{
    return 4.0 * tensor_floats(op, s, true);
}

double hd__op_flops(hd_op op, const hd_shape *s)
{
    return hd__op(op)->flops(s);
}

double hd__op_work(hd_op op, const hd_shape *s)
{
    if (hd__op(op)->compute_bound)
        return hd__op_flops(op, s) / 2.0;
    size_t r, c;
    hd__op_tensor_shape(op, 0, s, &r, &c);
    return (double)r * (double)c;
}

int hd__op_text(hd_op op, const hd_shape *s, hd_text_style style, char *buf, size_t size)
{
    const hd_op_desc *d = hd__op(op);
    int joined = d->first_suffix_dim > 0 ? d->first_suffix_dim : d->dims;
    char text[160];
    size_t len = (size_t)snprintf(text, sizeof text, "%s ", hd_op_name(op));
    for (int i = 0; i < joined && len < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%zu", i ? "x" : "", s->dim[i]);
    bool upper = style == HD_TEXT_CASE;
    if (d->transposes && (!upper || s->trans_a || s->trans_b) && len < sizeof text)
        len += (size_t)snprintf(text + len, sizeof text - len, " %c%c",
                                s->trans_a ? (upper ? 'T' : 't') : (upper ? 'N' : 'n'),
                                s->trans_b ? (upper ? 'T' : 't') : (upper ? 'N' : 'n'));
    for (int i = joined; i < d->dims && len < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, " %c%zu", d->suffix_prefix[i],
                                s->dim[i]);
    char layout[8];
    if (d->lora_layout && s->lora_layout != 0 && len < sizeof text) /* the _ex calls */
        len += (size_t)snprintf(text + len, sizeof text - len, " %s",
                                hd__lora_layout_name(s->lora_layout, layout));
    return snprintf(buf, size, "%s", text);
}

const char *hd__lora_layout_name(unsigned layout, char buf[8])
{
    if (layout == 0)
        return "";
    if (layout == HD_LORA_LAYOUT_PYTORCH)
        return "pt";
    memcpy(buf, "layout", 6); /* three flags: one digit (the calls refuse any other bit) */
    buf[6] = (char)('0' + (layout & 7u));
    buf[7] = '\0';
    return buf;
}

bool hd__lora_layout_from_name(const char *text, size_t len, unsigned *layout)
{
    if (len == 2 && memcmp(text, "pt", 2) == 0) {
        *layout = HD_LORA_LAYOUT_PYTORCH;
        return true;
    }
    if (len != 7 || memcmp(text, "layout", 6) != 0 || text[6] < '1' || text[6] > '7')
        return false;
    *layout = (unsigned)(text[6] - '0');
    return true;
}

bool hd__op_same_shape(hd_op op, const hd_shape *a, const hd_shape *b)
{
    const hd_op_desc *d = hd__op(op);
    for (int i = 0; i < d->dims; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    if (d->lora_layout && a->lora_layout != b->lora_layout)
        return false;
    return !d->transposes || (a->trans_a == b->trans_a && a->trans_b == b->trans_b);
}
