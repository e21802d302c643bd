/* GEMM and strided-batched GEMM through CLBlast on the context's queue. */
#include "backends/clblast/clblast.h"
#include "core/error.h"

static CLBlastTranspose transpose(bool t)
{
    return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

hd_status hd__clblast_sgemm(hd_clblast_state *st, hd_context *ctx, bool locked, bool trans_a, bool trans_b, size_t m,
                            size_t n, size_t k, float alpha, cl_mem a, size_t a_off, size_t lda,
                            cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off,
                            size_t ldc)
{
    /* CLBlast rejects empty dimensions; the dispatcher never sends them, but stay safe. */
    if (m == 0 || n == 0 || k == 0)
        return hd__error(ctx, HD_ERR_INTERNAL,
                         "CLBlast GEMM with an empty dimension (%zu, %zu, "
                         "%zu)",
                         m, n, k);
    cl_command_queue queue = hd__cl_queue(st->rt);
    hd_status s = hd__cl_capture_mark(st->rt, ctx); /* CLBlast reports its last kernel only */
    if (s != HD_OK)
        return s;
    if (!locked)
        hd__clblast_lock();
    CLBlastStatusCode code = CLBlastSgemm(
        CLBlastLayoutRowMajor, transpose(trans_a), transpose(trans_b), m, n, k, alpha, a, a_off,
        lda, b, b_off, ldb, beta, c, c_off, ldc, &queue, hd__cl_event_slot(st->rt));
    if (!locked)
        hd__clblast_unlock();
    if (code != CLBlastSuccess)
        return hd__clblast_error(ctx, code, "CLBlastSgemm");
    return HD_OK;
}

hd_status hd__clblast_gemm(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    hd_clblast_state *st = state;
    hd__clblast_lock();
    hd_status s = hd__clblast_prepare(st, ctx, g->variant);
    if (s == HD_OK)
        s = hd__clblast_sgemm(st, ctx, true, g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha,
                              hd__cl_mem(g->a->state->device->mem), 0, g->a->cols,
                              hd__cl_mem(g->b->state->device->mem), 0, g->b->cols, g->beta,
                              hd__cl_mem(g->c->state->device->mem), 0, g->c->cols);
    hd__clblast_unlock();
    return s;
}

/* Each tensor stacks batch equal matrices by rows, so matrix i starts i*rows*cols floats in:
 * that is CLBlast's stride, and the leading dimension is the tensor's width. */
hd_status hd__clblast_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *g)
{
    if (g->batch == 0 || g->m == 0 || g->n == 0 || g->k == 0)
        return hd__error(ctx, HD_ERR_INTERNAL, "CLBlast batched GEMM with an empty dimension");
    hd_clblast_state *st = state;
    size_t stride_a = g->m * g->k, stride_b = g->k * g->n, stride_c = g->m * g->n;
    cl_command_queue queue = hd__cl_queue(st->rt);
    hd__clblast_lock();
    hd_status s = hd__clblast_prepare(st, ctx, g->variant);
    if (s == HD_OK)
        s = hd__cl_capture_mark(st->rt, ctx); /* CLBlast reports its last kernel only */
    CLBlastStatusCode code = CLBlastSuccess;
    if (s == HD_OK)
        code = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, transpose(g->trans_a), transpose(g->trans_b), g->m, g->n, g->k,
            g->alpha, hd__cl_mem(g->a->state->device->mem), 0, g->a->cols, stride_a,
            hd__cl_mem(g->b->state->device->mem), 0, g->b->cols, stride_b, g->beta,
            hd__cl_mem(g->c->state->device->mem), 0, g->c->cols, stride_c, g->batch, &queue,
            hd__cl_event_slot(st->rt));
    hd__clblast_unlock();
    if (s == HD_OK && code != CLBlastSuccess)
        s = hd__clblast_error(ctx, code, "CLBlastSgemmStridedBatched");
    return s;
}

/* t = beta*t on the device: zeros for beta = 0 (BLAS ignores C then, NaN included), else one
 * CLBlastSscal. */
hd_status hd__clblast_scale(void *state, hd_context *ctx, const hd_tensor *t, float beta)
{
    hd_clblast_state *st = state;
    size_t n = t->rows * t->cols;
    if (beta == 0.0f)
        return hd__cl_zero(st->rt, ctx, hd__cl_mem(t->state->device->mem), n * sizeof(float));
    cl_command_queue queue = hd__cl_queue(st->rt);
    hd__clblast_lock();
    CLBlastStatusCode code =
        CLBlastSscal(n, beta, hd__cl_mem(t->state->device->mem), 0, 1, &queue, NULL);
    hd__clblast_unlock();
    return code == CLBlastSuccess ? HD_OK : hd__clblast_error(ctx, code, "CLBlastSscal");
}
