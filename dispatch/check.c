#include <math.h>

#include "dispatch/check.h"
#include "dispatch/context.h"
#include "dispatch/error.h"

static hd_status check_tensor(hd_context *ctx, const char *fn, const char *name, const hd_tensor *t)
{
    if (t == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is NULL", fn, name);
    if (t->ctx != ctx)
        return hd__error(ctx, HD_ERR_WRONG_CONTEXT,
                         "%s: tensor '%s' was created in another context", fn, name);
    return HD_OK;
}

static hd_status shape_error(hd_context *ctx, const char *fn, const char *what, const hd_tensor *t,
                             const char *name, size_t rows, size_t cols)
{
    return hd__error(ctx, HD_ERR_SHAPE_MISMATCH, "%s: %s: '%s' is %zu x %zu, expected %zu x %zu",
                     fn, what, name, t->rows, t->cols, rows, cols);
}

/* What GEMM and batched GEMM check before shapes: three tensors of ctx, c not an input. */
static hd_status check_gemm_tensors(hd_context *ctx, const char *fn, const hd_tensor *a,
                                    const hd_tensor *b, const hd_tensor *c)
{
    hd_status s;
    if ((s = check_tensor(ctx, fn, "a", a)) || (s = check_tensor(ctx, fn, "b", b)) ||
        (s = check_tensor(ctx, fn, "c", c)))
        return s;
    if (c == a || c == b)
        return hd__error(ctx, HD_ERR_ALIASING, "%s: output 'c' is also input '%s'", fn,
                         c == a ? "a" : "b");
    return HD_OK;
}

hd_status hd__check_gemm(hd_context *ctx, bool trans_a, bool trans_b, float alpha,
                         const hd_tensor *a, const hd_tensor *b, float beta, hd_tensor *c,
                         hd_gemm_args *args)
{
    static const char fn[] = "hd_gemm";
    hd_status s = check_gemm_tensors(ctx, fn, a, b, c);
    if (s != HD_OK)
        return s;
    size_t m = trans_a ? a->cols : a->rows;
    size_t k = trans_a ? a->rows : a->cols;
    size_t kb = trans_b ? b->cols : b->rows;
    size_t n = trans_b ? b->rows : b->cols;
    if (kb != k)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: op(a) is %zu x %zu but op(b) is %zu x %zu (inner dimensions differ)",
                         fn, m, k, kb, n);
    if (c->rows != m || c->cols != n)
        return shape_error(ctx, fn, "op(a)*op(b) does not fit the output", c, "c", m, n);
    *args = (hd_gemm_args){.trans_a = trans_a,
                           .trans_b = trans_b,
                           .alpha = alpha,
                           .beta = beta,
                           .a = a,
                           .b = b,
                           .c = c,
                           .m = m,
                           .n = n,
                           .k = k,
                           .precision = ctx->gemm_precision};
    return HD_OK;
}

hd_status hd__check_gemm_batched(hd_context *ctx, size_t batch, bool trans_a, bool trans_b,
                                 float alpha, const hd_tensor *a, const hd_tensor *b, float beta,
                                 hd_tensor *c, hd_gemm_args *args)
{
    static const char fn[] = "hd_gemm_batched";
    hd_status s = check_gemm_tensors(ctx, fn, a, b, c);
    if (s != HD_OK)
        return s;
    *args = (hd_gemm_args){.trans_a = trans_a,
                           .trans_b = trans_b,
                           .alpha = alpha,
                           .beta = beta,
                           .a = a,
                           .b = b,
                           .c = c,
                           .batch = 0,
                           .precision = ctx->gemm_precision};
    if (batch == 0)
        return HD_OK;
    const hd_tensor *t[] = {a, b, c};
    static const char *const names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++)
        if (t[i]->rows % batch != 0)
            return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                             "%s: '%s' has %zu rows, not a multiple of the batch of %zu", fn,
                             names[i], t[i]->rows, batch);
    size_t ra = a->rows / batch, rb = b->rows / batch, rc = c->rows / batch;
    size_t m = trans_a ? a->cols : ra, k = trans_a ? ra : a->cols;
    size_t kb = trans_b ? b->cols : rb, n = trans_b ? rb : b->cols;
    if (kb != k)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: each op(a) is %zu x %zu but each op(b) is %zu x %zu (inner "
                         "dimensions differ)",
                         fn, m, k, kb, n);
    if (rc != m || c->cols != n)
        return hd__error(ctx, HD_ERR_SHAPE_MISMATCH,
                         "%s: each op(a)*op(b) is %zu x %zu but each matrix of 'c' is %zu x %zu",
                         fn, m, n, rc, c->cols);
    args->m = m;
    args->n = n;
    args->k = k;
    args->batch = batch;
    return HD_OK;
}

hd_status hd__check_lora(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                         const hd_tensor *a, const hd_tensor *b, float scale, hd_tensor *y,
                         hd_lora_args *args)
{
    static const char fn[] = "hd_lora_forward";
    hd_status s;
    if ((s = check_tensor(ctx, fn, "x", x)) || (s = check_tensor(ctx, fn, "w", w)) ||
        (s = check_tensor(ctx, fn, "a", a)) || (s = check_tensor(ctx, fn, "b", b)) ||
        (s = check_tensor(ctx, fn, "y", y)))
        return s;
    const hd_tensor *inputs[] = {x, w, a, b};
    static const char *const names[] = {"x", "w", "a", "b"};
    for (int i = 0; i < 4; i++)
        if (y == inputs[i])
            return hd__error(ctx, HD_ERR_ALIASING, "%s: output 'y' is also input '%s'", fn,
                             names[i]);
    size_t tokens = x->rows, in = x->cols, out = w->cols, rank = a->cols;
    if (w->rows != in)
        return shape_error(ctx, fn, "W must have as many rows as x has columns", w, "w", in, out);
    if (a->rows != in)
        return shape_error(ctx, fn, "A must have as many rows as x has columns", a, "a", in, rank);
    if (b->rows != rank || b->cols != out)
        return shape_error(ctx, fn, "B must be rank x out", b, "b", rank, out);
    if (y->rows != tokens || y->cols != out)
        return shape_error(ctx, fn, "y must be tokens x out", y, "y", tokens, out);
    *args = (hd_lora_args){.x = x,
                           .w = w,
                           .a = a,
                           .b = b,
                           .scale = scale,
                           .y = y,
                           .tokens = tokens,
                           .in = in,
                           .out = out,
                           .rank = rank,
                           .precision = ctx->gemm_precision};
    return HD_OK;
}

hd_status hd__check_rows(hd_context *ctx, const char *fn, const hd_tensor *x,
                         const hd_tensor *gamma, const hd_tensor *beta, bool has_eps, float eps,
                         hd_tensor *y, hd_row_args *args)
{
    hd_status s;
    if ((s = check_tensor(ctx, fn, "x", x)) || (s = check_tensor(ctx, fn, "y", y)))
        return s;
    const char *gamma_name = beta != NULL ? "gamma" : "weight";
    const hd_tensor *params[] = {gamma, beta};
    const char *param_names[] = {gamma_name, "beta"};
    for (int i = 0; i < 2; i++) {
        if (params[i] == NULL)
            continue;
        if ((s = check_tensor(ctx, fn, param_names[i], params[i])))
            return s;
        if (params[i]->rows != 1 || params[i]->cols != x->cols)
            return shape_error(ctx, fn, "parameters are one row as wide as x", params[i],
                               param_names[i], 1, x->cols);
        if (params[i] == y)
            return hd__error(ctx, HD_ERR_ALIASING, "%s: output 'y' is also parameter '%s'", fn,
                             param_names[i]);
    }
    if (y->rows != x->rows || y->cols != x->cols)
        return shape_error(ctx, fn, "y must have the shape of x", y, "y", x->rows, x->cols);
    if (has_eps && !(isfinite(eps) && eps >= 0.0f))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "%s: eps must be finite and >= 0, got %g",
                         fn, (double)eps);
    *args = (hd_row_args){
        .x = x, .gamma = gamma, .beta = beta, .eps = eps, .y = y, .rows = x->rows, .cols = x->cols};
    return HD_OK;
}
