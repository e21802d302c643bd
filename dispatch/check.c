#include <math.h>
#include <stdint.h>

#include "dispatch/check.h"
#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/tensor.h"

/* Tensor `name` of function fn: of ctx and of element type `dtype`. */
static hd_status check_tensor_of(hd_context *ctx, const char *fn, const char *name,
                                 const hd_tensor *t, hd_dtype dtype)
{
    if (t->ctx != ctx)
        return hd__error(ctx, HD_ERR_WRONG_CONTEXT,
                         "%s: tensor '%s' was created in another context", fn, name);
    if (t->dtype != dtype)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: tensor '%s' holds %s, not %s", fn, name,
                         hd__dtype_holds(t->dtype), hd__dtype_holds(dtype));
    return HD_OK;
}

hd_status hd__check_tensors(hd_context *ctx, hd_op op, const char *fn, const hd_tensor *const t[])
{
    const hd_op_desc *d = hd__op(op);
    for (int i = 0; i < d->tensor_count; i++) {
        const char *name = d->tensors[i].name;
        if (t[i] == NULL && d->tensors[i].optional)
            continue;
        if (t[i] == NULL)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is NULL", fn, name);
        hd_status s = check_tensor_of(ctx, fn, name, t[i], HD_DTYPE_FP32);
        if (s != HD_OK)
            return s;
    }
    for (int o = 0; o < d->tensor_count; o++) {
        const hd_op_tensor *out = &d->tensors[o];
        if (out->role != HD_ROLE_OUTPUT || t[o] == NULL)
            continue;
        for (int i = 0; i < d->tensor_count; i++) {
            if (i == o || t[i] != t[o] || ((out->in_place_of >> i) & 1u))
                continue;
            return hd__error(ctx, HD_ERR_ALIASING, "%s: output '%s' is also %s '%s'", fn, out->name,
                             d->tensors[i].role == HD_ROLE_INPUT ? "input" : "output",
                             d->tensors[i].name);
        }
    }
    return HD_OK;
}

static hd_status shape_error(hd_context *ctx, const char *fn, const char *what, const hd_tensor *t,
                             const char *name, size_t rows, size_t cols)
{
    return hd__error(ctx, HD_ERR_SHAPE_MISMATCH, "%s: %s: '%s' is %zu x %zu, expected %zu x %zu",
                     fn, what, name, t->rows, t->cols, rows, cols);
}

static void set_io(hd_op op, const hd_tensor *const t[], hd_call *call)
{
    const hd_op_desc *d = hd__op(op);
    call->io.input_count = call->io.output_count = 0;
    for (int i = 0; i < d->tensor_count; i++) {
        if (t[i] == NULL)
            continue;
        if (d->tensors[i].role == HD_ROLE_OUTPUT)
            call->io.outputs[call->io.output_count++] = t[i];
        else
            call->io.inputs[call->io.input_count++] = t[i];
    }
}

/* GEMM and batched GEMM after the per-matrix sizes are known: the empty and scale-only
 * cases of BLAS, and the arguments. */
static void gemm_call(const hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                      size_t m, size_t n, size_t k, size_t batch, hd_call *call)
{
    call->args.gemm = (hd_gemm_args){.trans_a = p->trans_a,
                                     .trans_b = p->trans_b,
                                     .alpha = p->alpha,
                                     .beta = p->beta,
                                     .a = t[0],
                                     .b = t[1],
                                     .c = t[2],
                                     .m = m,
                                     .n = n,
                                     .k = k,
                                     .batch = batch,
                                     .precision = ctx->gemm_precision};
    call->shape = (hd_shape){.dim = {m, n, k, call->op == HD_OP_GEMM ? 0 : batch},
                             .trans_a = p->trans_a,
                             .trans_b = p->trans_b};
    set_io(call->op, t, call);
    call->io.output_read = p->beta != 0.0f;
    call->beta = p->beta;
    if (batch == 0 || m == 0 || n == 0)
        call->kind = HD_CALL_NOTHING;
    else if (k == 0 || p->alpha == 0.0f) /* every C_i = beta*C_i: the whole stack at once */
        call->kind = HD_CALL_SCALE_ONLY;
    else
        call->kind = HD_CALL_RUN;
}

hd_status hd__prepare_gemm(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call)
{
    const char *fn = hd__op(HD_OP_GEMM)->fn;
    const hd_tensor *a = t[0], *b = t[1], *c = t[2];
    size_t m = p->trans_a ? a->cols : a->rows;
    size_t k = p->trans_a ? a->rows : a->cols;
    size_t kb = p->trans_b ? b->cols : b->rows;
    size_t n = p->trans_b ? b->rows : b->cols;
    if (kb != k)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: op(a) is %zu x %zu but op(b) is %zu x %zu (inner dimensions differ)",
                         fn, m, k, kb, n);
    if (c->rows != m || c->cols != n)
        return shape_error(ctx, fn, "op(a)*op(b) does not fit the output", c, "c", m, n);
    gemm_call(ctx, t, p, m, n, k, 1, call);
    return HD_OK;
}

hd_status hd__prepare_gemm_batched(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call)
{
    const hd_op_desc *d = hd__op(HD_OP_GEMM_BATCHED);
    const hd_tensor *a = t[0], *b = t[1], *c = t[2];
    size_t batch = p->batch;
    if (batch == 0) {
        gemm_call(ctx, t, p, 0, 0, 0, 0, call);
        return HD_OK;
    }
    for (int i = 0; i < 3; i++)
        if (t[i]->rows % batch != 0)
            return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                             "%s: '%s' has %zu rows, not a multiple of the batch of %zu", d->fn,
                             d->tensors[i].name, t[i]->rows, batch);
    size_t ra = a->rows / batch, rb = b->rows / batch, rc = c->rows / batch;
    size_t m = p->trans_a ? a->cols : ra, k = p->trans_a ? ra : a->cols;
    size_t kb = p->trans_b ? b->cols : rb, n = p->trans_b ? rb : b->cols;
    if (kb != k)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: each op(a) is %zu x %zu but each op(b) is %zu x %zu (inner "
                         "dimensions differ)",
                         d->fn, m, k, kb, n);
    if (rc != m || c->cols != n)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: each op(a)*op(b) is %zu x %zu but each matrix of 'c' is %zu x %zu",
                         d->fn, m, n, rc, c->cols);
    gemm_call(ctx, t, p, m, n, k, batch, call);
    return HD_OK;
}

/* LoRA's sizes as the default layout names them, and whether W, A and B are stored
 * transposed (hd_lora_layout). */
typedef struct lora_dims {
    size_t tokens, in, out, rank;
    bool tw, ta, tb;
} lora_dims;

/* The layout flags, and W, A and B against x as the flags store them: the forward's and the
 * backward's checks. */
static hd_status check_lora_weights(hd_context *ctx, const char *fn, unsigned layout,
                                    const hd_tensor *x, const hd_tensor *w, const hd_tensor *a,
                                    const hd_tensor *b, lora_dims *d)
{
    if (layout & ~(unsigned)HD_LORA_LAYOUT_PYTORCH)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: unknown layout flags 0x%x (expected HD_LORA_TRANS_W, _A, _B)", fn,
                         layout);
    /* Sizes as the default layout names them; a transposed tensor holds them the other way. */
    bool tw = layout & HD_LORA_TRANS_W, ta = layout & HD_LORA_TRANS_A,
         tb = layout & HD_LORA_TRANS_B;
    size_t tokens = x->rows, in = x->cols, out = tw ? w->rows : w->cols,
           rank = ta ? a->rows : a->cols;
    if ((tw ? w->cols : w->rows) != in)
        return tw ? shape_error(ctx, fn, "W (out x in) must have as many columns as x", w, "w", out,
                                in)
                  : shape_error(ctx, fn, "W must have as many rows as x has columns", w, "w", in,
                                out);
    if ((ta ? a->cols : a->rows) != in)
        return ta ? shape_error(ctx, fn, "A (rank x in) must have as many columns as x", a, "a",
                                rank, in)
                  : shape_error(ctx, fn, "A must have as many rows as x has columns", a, "a", in,
                                rank);
    if (tb ? (b->rows != out || b->cols != rank) : (b->rows != rank || b->cols != out))
        return tb ? shape_error(ctx, fn, "B must be out x rank", b, "b", out, rank)
                  : shape_error(ctx, fn, "B must be rank x out", b, "b", rank, out);
    /* The backends keep x*A (and, backward, dy*B^T beside it) as T x r temporaries of their
     * own: checked here, before any tensor is placed, for every backend at once. */
    if (rank > 0 && tokens > SIZE_MAX / 2 / sizeof(float) / rank)
        return hd__error(ctx, HD_ERR_SIZE_OVERFLOW,
                         "%s: the %zu x %zu low-rank temporaries do not fit in the address space",
                         fn, tokens, rank);
    *d = (lora_dims){tokens, in, out, rank, tw, ta, tb};
    return HD_OK;
}

hd_status hd__prepare_lora(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call)
{
    const char *fn =
        p->lora_layout == HD_LORA_LAYOUT_DEFAULT ? hd__op(HD_OP_LORA)->fn : "hd_lora_forward_ex";
    const hd_tensor *x = t[0], *w = t[1], *a = t[2], *b = t[3], *y = t[4];
    unsigned layout = p->lora_layout;
    lora_dims d = {0};
    hd_status s = check_lora_weights(ctx, fn, layout, x, w, a, b, &d);
    if (s != HD_OK)
        return s;
    size_t tokens = d.tokens, in = d.in, out = d.out, rank = d.rank;
    bool tw = d.tw, ta = d.ta, tb = d.tb;
    if (y->rows != tokens || y->cols != out)
        return shape_error(ctx, fn, "y must be tokens x out", y, "y", tokens, out);
    call->args.lora = (hd_lora_args){.x = x,
                                     .w = w,
                                     .a = a,
                                     .b = b,
                                     .scale = p->scale,
                                     .y = t[4],
                                     .tokens = tokens,
                                     .in = in,
                                     .out = out,
                                     .rank = rank,
                                     .precision = ctx->gemm_precision,
                                     .trans_w = tw,
                                     .trans_a = ta,
                                     .trans_b = tb};
    call->shape = (hd_shape){.dim = {tokens, in, out, rank}, .lora_layout = layout};
    set_io(HD_OP_LORA, t, call);
    call->beta = 0.0f;
    if (tokens == 0 || out == 0)
        call->kind = HD_CALL_NOTHING;
    else if (in == 0) /* x*W and x*A are sums of nothing */
        call->kind = HD_CALL_SCALE_ONLY;
    else
        call->kind = HD_CALL_RUN;
    return HD_OK;
}

/* Softmax and the norms: t is x, the parameters (one row as wide as x), y. */
static hd_status prepare_rows(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                              bool has_eps, hd_call *call)
{
    const hd_op_desc *d = hd__op(call->op);
    const hd_tensor *x = t[0];
    int last = d->tensor_count - 1;
    const hd_tensor *y = t[last];
    for (int i = 1; i < last; i++)
        if (t[i]->rows != 1 || t[i]->cols != x->cols)
            return shape_error(ctx, d->fn, "parameters are one row as wide as x", t[i],
                               d->tensors[i].name, 1, x->cols);
    if (y->rows != x->rows || y->cols != x->cols)
        return shape_error(ctx, d->fn, "y must have the shape of x", y, "y", x->rows, x->cols);
    if (has_eps && !(isfinite(p->eps) && p->eps >= 0.0f))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g",
                         d->fn, (double)p->eps);
    call->args.row = (hd_row_args){.x = x,
                                   .gamma = last > 1 ? t[1] : NULL,
                                   .beta = last > 2 ? t[2] : NULL,
                                   .eps = p->eps,
                                   .y = y,
                                   .rows = x->rows,
                                   .cols = x->cols};
    call->shape = (hd_shape){.dim = {x->rows, x->cols}};
    set_io(call->op, t, call);
    call->kind = x->rows == 0 || x->cols == 0 ? HD_CALL_NOTHING : HD_CALL_RUN;
    return HD_OK;
}

hd_status hd__prepare_softmax(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                              hd_call *call)
{
    return prepare_rows(ctx, t, p, false, call);
}

hd_status hd__prepare_norm(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call)
{
    return prepare_rows(ctx, t, p, true, call);
}

static hd_status expect_shape(hd_context *ctx, const char *fn, const hd_tensor *t, const char *name,
                              size_t rows, size_t cols, const char *what)
{
    if (t == NULL || (t->rows == rows && t->cols == cols))
        return HD_OK;
    return shape_error(ctx, fn, what, t, name, rows, cols);
}

/* t: x (softmax: y), [weight,] dy, dx[, weight gradients]; the op table gives the order. */
hd_status hd__prepare_row_backward(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call)
{
    const hd_op_desc *d = hd__op(call->op);
    bool norm = call->op != HD_OP_SOFTMAX_BACKWARD;
    const hd_tensor *x = t[0], *gamma = norm ? t[1] : NULL, *dy = t[norm ? 2 : 1];
    const hd_tensor *dx = t[norm ? 3 : 2];
    const hd_tensor *dgamma = norm ? t[4] : NULL;
    const hd_tensor *dbeta = call->op == HD_OP_LAYER_NORM_BACKWARD ? t[5] : NULL;
    size_t rows = x->rows, cols = x->cols;
    hd_status s = expect_shape(ctx, d->fn, dy, "dy", rows, cols, "dy must have the shape of x");
    if (s == HD_OK)
        s = expect_shape(ctx, d->fn, dx, "dx", rows, cols, "dx must have the shape of x");
    if (s == HD_OK && norm)
        s = expect_shape(ctx, d->fn, gamma, d->tensors[1].name, 1, cols,
                         "parameters are one row as wide as x");
    for (int i = norm ? 4 : d->tensor_count; i < d->tensor_count && s == HD_OK; i++)
        s = expect_shape(ctx, d->fn, t[i], d->tensors[i].name, 1, cols,
                         "a weight gradient is one row as wide as x");
    if (s != HD_OK)
        return s;
    if (norm && !(isfinite(p->eps) && p->eps >= 0.0f))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g",
                         d->fn, (double)p->eps);
    call->args.row_backward = (hd_row_backward_args){.x = x,
                                                     .gamma = gamma,
                                                     .dy = dy,
                                                     .eps = p->eps,
                                                     .dx = dx,
                                                     .dgamma = dgamma,
                                                     .dbeta = dbeta,
                                                     .rows = rows,
                                                     .cols = cols};
    call->shape = (hd_shape){.dim = {rows, cols}};
    set_io(call->op, t, call);
    call->beta = 0.0f;
    if (cols == 0)
        call->kind = HD_CALL_NOTHING;
    else if (rows == 0) /* weight gradients are sums over no rows */
        call->kind = dgamma != NULL || dbeta != NULL ? HD_CALL_SCALE_ONLY : HD_CALL_NOTHING;
    else
        call->kind = HD_CALL_RUN;
    return HD_OK;
}

hd_status hd__prepare_lora_backward(hd_context *ctx, const hd_tensor *const t[],
                                    const hd_op_params *p, hd_call *call)
{
    const char *fn = p->lora_layout == HD_LORA_LAYOUT_DEFAULT ? hd__op(HD_OP_LORA_BACKWARD)->fn
                                                              : "hd_lora_backward_ex";
    const hd_tensor *x = t[0], *w = t[1], *a = t[2], *b = t[3], *dy = t[4];
    lora_dims d = {0};
    hd_status s = check_lora_weights(ctx, fn, p->lora_layout, x, w, a, b, &d);
    size_t tokens = d.tokens, in = d.in, out = d.out, rank = d.rank;
    if (s == HD_OK)
        s = expect_shape(ctx, fn, dy, "dy", tokens, out, "dy must be tokens x out");
    if (s == HD_OK)
        s = expect_shape(ctx, fn, t[5], "dx", tokens, in, "dx must have the shape of x");
    if (s == HD_OK)
        s = expect_shape(ctx, fn, t[6], "da", a->rows, a->cols, "dA must have the shape of A");
    if (s == HD_OK)
        s = expect_shape(ctx, fn, t[7], "db", b->rows, b->cols, "dB must have the shape of B");
    if (s != HD_OK)
        return s;
    call->args.lora_backward = (hd_lora_backward_args){.x = x,
                                                       .w = w,
                                                       .a = a,
                                                       .b = b,
                                                       .scale = p->scale,
                                                       .dy = dy,
                                                       .dx = t[5],
                                                       .da = t[6],
                                                       .db = t[7],
                                                       .accumulate = p->accumulate,
                                                       .tokens = tokens,
                                                       .in = in,
                                                       .out = out,
                                                       .rank = rank,
                                                       .precision = ctx->gemm_precision,
                                                       .trans_w = d.tw,
                                                       .trans_a = d.ta,
                                                       .trans_b = d.tb};
    call->shape = (hd_shape){.dim = {tokens, in, out, rank}, .lora_layout = p->lora_layout};
    set_io(HD_OP_LORA_BACKWARD, t, call);
    call->io.output_read = p->accumulate;
    call->beta = 0.0f;
    if (tokens > 0 && in > 0 && out > 0)
        call->kind = HD_CALL_RUN;
    else /* every gradient is a sum over nothing: zero, or nothing to add */
        call->kind = p->accumulate ? HD_CALL_NOTHING : HD_CALL_SCALE_ONLY;
    return HD_OK;
}

/* ---- the training step's ops ---- */

/* The step's arguments from the op table's order: inputs into in[], outputs into out[]. */
static void step_tensors(hd_op op, const hd_tensor *const t[], hd_step_args *a)
{
    const hd_op_desc *d = hd__op(op);
    int in = 0, out = 0;
    for (int i = 0; i < d->tensor_count; i++) {
        if (d->tensors[i].role == HD_ROLE_OUTPUT)
            a->out[out++] = t[i];
        else
            a->in[in++] = t[i];
    }
}

/* Every tensor of the call (present) against its row of the op table for shape s. */
static hd_status expect_table_shapes(hd_context *ctx, hd_op op, const char *fn,
                                     const hd_tensor *const t[], const hd_shape *s)
{
    const hd_op_desc *d = hd__op(op);
    for (int i = 0; i < d->tensor_count; i++) {
        size_t rows, cols;
        hd__op_tensor_shape(op, i, s, &rows, &cols);
        hd_status st = expect_shape(ctx, fn, t[i], d->tensors[i].name, rows, cols,
                                    "the tensors' shapes do not agree");
        if (st != HD_OK)
            return st;
    }
    return HD_OK;
}

/* The call of a step op of shape s: its arguments, io and kind (nothing to do when the first
 * tensor is empty). */
static void step_call(hd_op op, const hd_tensor *const t[], const hd_shape *s, hd_call *call)
{
    call->shape = *s;
    step_tensors(op, t, &call->args.step);
    call->args.step.rows = t[0]->rows;
    call->args.step.cols = t[0]->cols;
    set_io(op, t, call);
    call->beta = 0.0f;
    call->kind = t[0]->rows == 0 || t[0]->cols == 0 ? HD_CALL_NOTHING : HD_CALL_RUN;
}

static hd_status check_eps(hd_context *ctx, const char *fn, float eps)
{
    if (isfinite(eps) && eps >= 0.0f)
        return HD_OK;
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g", fn,
                     (double)eps);
}

/* SwiGLU, GELU, add and their backward passes: every tensor of the first's shape. add reads
 * its output. */
hd_status hd__prepare_elementwise(hd_context *ctx, const hd_tensor *const t[],
                                  const hd_op_params *p, hd_call *call)
{
    hd_shape s = {.dim = {t[0]->rows, t[0]->cols}};
    hd_status st = expect_table_shapes(ctx, call->op, hd__op_fn(call->op, p), t, &s);
    if (st != HD_OK)
        return st;
    step_call(call->op, t, &s, call);
    call->args.step.alpha = p->alpha;
    call->io.output_read = call->op == HD_OP_ADD;
    return HD_OK;
}

hd_status hd__prepare_add_rms_norm(hd_context *ctx, const hd_tensor *const t[],
                                   const hd_op_params *p, hd_call *call)
{
    hd_shape s = {.dim = {t[0]->rows, t[0]->cols}};
    hd_status st = expect_table_shapes(ctx, call->op, hd__op_fn(call->op, p), t, &s);
    if (st == HD_OK)
        st = check_eps(ctx, hd__op(call->op)->fn, p->eps);
    if (st != HD_OK)
        return st;
    step_call(call->op, t, &s, call);
    call->args.step.eps = p->eps;
    if (call->op == HD_OP_ADD_RMS_NORM_BACKWARD && t[0]->rows == 0 && t[0]->cols > 0 &&
        t[5] != NULL)
        call->kind = HD_CALL_SCALE_ONLY; /* dweight: a sum over no rows */
    return HD_OK;
}

/* The packed sequences of a call of rows rows: lengths summing to them. */
static hd_status check_sequences(hd_context *ctx, const char *fn, const hd_sequences *q,
                                 size_t rows, size_t *longest)
{
    *longest = rows;
    if (q->count == 0)
        return HD_OK;
    if (q->lengths == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: %zu sequences but their lengths are NULL", fn, q->count);
    size_t sum = 0, most = 0;
    for (size_t i = 0; i < q->count; i++) {
        if (q->lengths[i] > rows - sum)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "%s: the sequences' lengths add up to more than the %zu rows (at "
                             "sequence %zu)",
                             fn, rows, i);
        sum += q->lengths[i];
        most = q->lengths[i] > most ? q->lengths[i] : most;
    }
    if (sum != rows)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: the sequences' lengths add up to %zu, not the %zu rows", fn, sum,
                         rows);
    *longest = most;
    return HD_OK;
}

static void set_sequences(const hd_sequences *q, hd_step_args *a)
{
    a->seq_lengths = q->count > 0 ? q->lengths : NULL;
    a->seq_count = q->count;
}

/* Positions held exactly as floats in the kernels' angles. */
#define ROPE_POSITION_LIMIT ((size_t)1 << 24)

hd_status hd__prepare_rope(hd_context *ctx, const hd_tensor *const t[], const hd_op_params *p,
                           hd_call *call)
{
    const char *fn = hd__op(HD_OP_ROPE)->fn;
    const hd_tensor *x = t[0], *freq = t[1];
    size_t d = p->head_dim, longest;
    if (d == 0 || d % 2 != 0 || x->cols % d != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: head_dim %zu must be even, > 0 and divide the %zu columns of x", fn,
                         d, x->cols);
    if (freq == NULL && !(isfinite(p->theta) && p->theta > 1.0f))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: theta must be finite and > 1, got %g",
                         fn, (double)p->theta);
    hd_status st = check_sequences(ctx, fn, &p->sequences, x->rows, &longest);
    if (st != HD_OK)
        return st;
    if (longest > 0 && (p->position_offset >= ROPE_POSITION_LIMIT ||
                        longest - 1 >= ROPE_POSITION_LIMIT - p->position_offset))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: positions reach %zu + %zu, past the 2^24 the angles hold exactly", fn,
                         p->position_offset, longest - 1);
    hd_shape s = {.dim = {x->rows, x->cols, d / 2}};
    if ((st = expect_table_shapes(ctx, HD_OP_ROPE, fn, t, &s)) != HD_OK)
        return st;
    step_call(HD_OP_ROPE, t, &s, call);
    hd_step_args *a = &call->args.step;
    set_sequences(&p->sequences, a);
    a->head_dim = d;
    a->theta = p->theta;
    a->position_offset = p->position_offset;
    a->inverse = p->inverse;
    return HD_OK;
}

#define ATTENTION_MAX_HEAD_DIM 256

hd_status hd__prepare_attention(hd_context *ctx, const hd_tensor *const t[],
                                const hd_op_params *p, hd_call *call)
{
    const char *fn = hd__op(call->op)->fn;
    const hd_tensor *q = t[0];
    size_t h = p->heads, hk = p->kv_heads, longest;
    if (h == 0 || hk == 0 || h % hk != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: kv_heads (%zu) must divide heads (%zu), both > 0", fn, hk, h);
    if (q->cols % h != 0)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: q's %zu columns are not heads (%zu) x head_dim", fn, q->cols, h);
    size_t d = q->cols / h;
    if (d == 0 || d % 8 != 0 || d > ATTENTION_MAX_HEAD_DIM)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "%s: head_dim %zu (q's columns / heads) must be a multiple of 8 up to %d",
                         fn, d, ATTENTION_MAX_HEAD_DIM);
    float scale = p->attention_scale == 0.0f ? (float)(1.0 / sqrt((double)d)) : p->attention_scale;
    if (!(isfinite(scale) && scale > 0.0f))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: scale must be finite and > 0, got %g",
                         fn, (double)p->attention_scale);
    if (p->window > 0 && !p->causal)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "%s: a sliding window of %zu goes with a causal mask", fn, p->window);
    hd_status st = check_sequences(ctx, fn, &p->sequences, q->rows, &longest);
    if (st != HD_OK)
        return st;
    hd_shape s = {.dim = {q->rows, h, hk, d}};
    if ((st = expect_table_shapes(ctx, call->op, fn, t, &s)) != HD_OK)
        return st;
    step_call(call->op, t, &s, call);
    hd_step_args *a = &call->args.step;
    set_sequences(&p->sequences, a);
    a->heads = h;
    a->kv_heads = hk;
    a->head_dim = d;
    a->causal = p->causal;
    a->window = p->window;
    a->scale = scale;
    a->precision = ctx->gemm_precision;
    return HD_OK;
}

/* The ids given as a tensor (the _ids forms): int32, rows x 1 or 1 x rows (a vector either
 * way, as PyTorch's are 1-D), of this context, its host copy current; *ids is set to that copy.
 * Without a tensor, *ids is the caller's array. */
static hd_status resolve_ids(hd_context *ctx, const char *fn, const char *what,
                             const hd_op_params *p, size_t rows, const int32_t **ids)
{
    *ids = p->ids;
    const hd_tensor *t = p->id_tensor;
    if (t == NULL)
        return HD_OK;
    hd_status s = check_tensor_of(ctx, fn, what, t, HD_DTYPE_I32);
    if (s != HD_OK)
        return s;
    if (!((t->rows == rows && t->cols == 1) || (t->rows == 1 && t->cols == rows)))
        return shape_error(ctx, fn, "one id per row, a column or a row", t, what, rows, 1);
    s = hd__tensor_to_host(t); /* current already, but for one never written */
    if (s == HD_OK)
        *ids = hd__tensor_host_ids(t);
    return s;
}

/* The id tensor, where one was given, is read where the call runs: an input of the call. */
static void add_id_tensor(const hd_op_params *p, hd_call *call)
{
    if (p->id_tensor != NULL)
        call->io.inputs[call->io.input_count++] = p->id_tensor;
    call->args.step.id_tensor = p->id_tensor;
}

/* ids[0 .. rows-1] each in [0, vocab), or ignore_index where targets may be ignored; counts
 * those not ignored. */
static hd_status check_ids(hd_context *ctx, const char *fn, const char *what, const int32_t *ids,
                           size_t rows, size_t vocab, bool may_ignore, int32_t ignore_index,
                           size_t *counted)
{
    *counted = 0;
    if (rows > 0 && ids == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    for (size_t i = 0; i < rows; i++) {
        if (may_ignore && ids[i] == ignore_index)
            continue;
        if (ids[i] < 0 || (uint64_t)ids[i] >= (uint64_t)vocab)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "%s: %s[%zu] = %ld is outside [0, %zu)%s", fn, what, i, (long)ids[i],
                             vocab, may_ignore ? " and not the ignore index" : "");
        (*counted)++;
    }
    return HD_OK;
}

/* Cross-entropy from logits, and the LM head's (h, w): the targets, and the loss of no counted
 * row written as NaN (a mean over nothing) by the scale hook. */
hd_status hd__prepare_cross_entropy(hd_context *ctx, const hd_tensor *const t[],
                                    const hd_op_params *p, hd_call *call)
{
    const char *fn = hd__op_fn(call->op, p);
    bool linear = call->op == HD_OP_LINEAR_CROSS_ENTROPY;
    const hd_tensor *first = t[0];
    size_t rows = first->rows, vocab = linear ? t[1]->rows : first->cols;
    if (linear && first->cols == 0)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH, "%s: h has no columns", fn);
    hd_shape s = linear ? (hd_shape){.dim = {rows, first->cols, vocab}}
                        : (hd_shape){.dim = {rows, vocab}};
    hd_status st = expect_table_shapes(ctx, call->op, fn, t, &s);
    size_t counted = 0;
    const int32_t *ids = NULL;
    if (st == HD_OK)
        st = resolve_ids(ctx, fn, "targets", p, rows, &ids);
    if (st == HD_OK)
        st = check_ids(ctx, fn, "targets", ids, rows, vocab, true, p->ignore_index, &counted);
    if (st != HD_OK)
        return st;
    step_call(call->op, t, &s, call);
    add_id_tensor(p, call);
    hd_step_args *a = &call->args.step;
    a->ids = ids;
    a->ignore_index = p->ignore_index;
    a->counted = counted;
    a->vocab = vocab;
    a->precision = ctx->gemm_precision;
    /* No row, or no logit in a row: the mean is over nothing, NaN; the gradients are empty,
     * but for the LM head's dh over an empty vocabulary, which is 0 (every target ignored). */
    if (rows == 0 || vocab == 0) {
        call->kind = HD_CALL_SCALE_ONLY;
        call->beta = NAN;
        call->zero_after_first = true;
    }
    return HD_OK;
}

hd_status hd__prepare_embedding(hd_context *ctx, const hd_tensor *const t[],
                                const hd_op_params *p, hd_call *call)
{
    const hd_tensor *table = t[0], *out = t[1];
    hd_shape s = {.dim = {out->rows, table->cols, table->rows}};
    const char *fn = hd__op_fn(HD_OP_EMBEDDING, p);
    hd_status st = expect_table_shapes(ctx, HD_OP_EMBEDDING, fn, t, &s);
    size_t counted;
    const int32_t *ids = NULL;
    if (st == HD_OK)
        st = resolve_ids(ctx, fn, "ids", p, out->rows, &ids);
    if (st == HD_OK)
        st = check_ids(ctx, fn, "ids", ids, out->rows, table->rows, false, 0, &counted);
    if (st != HD_OK)
        return st;
    step_call(HD_OP_EMBEDDING, t, &s, call);
    add_id_tensor(p, call);
    call->args.step.rows = out->rows;
    call->args.step.cols = table->cols;
    call->args.step.ids = ids;
    call->args.step.vocab = table->rows;
    call->kind = out->rows == 0 || out->cols == 0 ? HD_CALL_NOTHING : HD_CALL_RUN;
    return HD_OK;
}

hd_prepare_fn *const hd__op_prepare[HD_OP_COUNT] = {
    [HD_OP_GEMM] = hd__prepare_gemm,
    [HD_OP_LORA] = hd__prepare_lora,
    [HD_OP_SOFTMAX] = hd__prepare_softmax,
    [HD_OP_LAYER_NORM] = hd__prepare_norm,
    [HD_OP_RMS_NORM] = hd__prepare_norm,
    [HD_OP_GEMM_BATCHED] = hd__prepare_gemm_batched,
    [HD_OP_SOFTMAX_BACKWARD] = hd__prepare_row_backward,
    [HD_OP_LAYER_NORM_BACKWARD] = hd__prepare_row_backward,
    [HD_OP_RMS_NORM_BACKWARD] = hd__prepare_row_backward,
    [HD_OP_LORA_BACKWARD] = hd__prepare_lora_backward,
    [HD_OP_SWIGLU] = hd__prepare_elementwise,
    [HD_OP_SWIGLU_BACKWARD] = hd__prepare_elementwise,
    [HD_OP_GELU] = hd__prepare_elementwise,
    [HD_OP_GELU_BACKWARD] = hd__prepare_elementwise,
    [HD_OP_ADD] = hd__prepare_elementwise,
    [HD_OP_ADD_RMS_NORM] = hd__prepare_add_rms_norm,
    [HD_OP_ADD_RMS_NORM_BACKWARD] = hd__prepare_add_rms_norm,
    [HD_OP_ROPE] = hd__prepare_rope,
    [HD_OP_ATTENTION] = hd__prepare_attention,
    [HD_OP_ATTENTION_BACKWARD] = hd__prepare_attention,
    [HD_OP_CROSS_ENTROPY] = hd__prepare_cross_entropy,
    [HD_OP_LINEAR_CROSS_ENTROPY] = hd__prepare_cross_entropy,
    [HD_OP_EMBEDDING] = hd__prepare_embedding,
};
