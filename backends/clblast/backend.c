/* The CLBlast backend: probe, warm-up, its limits and estimate, tuner variants. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/clblast/clblast.h"
#include "core/error.h"
#include "core/op.h"

/* Without a calibration: the launch cost of a typical OpenCL driver and a mid-range GPU. */
#define DEFAULT_LAUNCH_US     10.0
#define DEFAULT_DEVICE_GFLOPS 1000.0
#define DEFAULT_DEVICE_GBPS   100.0

/* The backend states alive in this process, under the CLBlast lock. CLBlast caches its
 * programs per OpenCL context in a cache of its own for the whole process, and each program
 * holds its context: a context's memory outlives hd_context_destroy() until that cache is
 * cleared, which the last state does on its way out (clearing it earlier would make the
 * other contexts build their programs again). */
static int open_states;

static hd_status clblast_probe(hd_context *ctx, const hd_backend_setup *setup, void **state)
{
    *state = NULL;
    if (setup->device == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "clblast: no OpenCL device");
    /* CLBlast is OpenCL host code: it runs only where the device runs on OpenCL */
    if (hd__rt_opencl(setup->device) == NULL)
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "clblast: the device runs on the CUDA runtime (HD_RUNTIME=opencl "
                         "offers CLBlast)");
    hd_clblast_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "clblast: no memory for the backend state");
    st->rt = hd__rt_opencl(setup->device);
    hd_status s = hd__clblast_device_query(ctx, st->rt, &st->dev);
    if (s != HD_OK) {
        free(st);
        return s == HD_ERR_OUT_OF_MEMORY ? s : HD_ERR_BACKEND_UNAVAILABLE;
    }
    /* The base set: what CLBlast would run, with this device's known-good sets laid over it.
     * Nothing reaches CLBlast before the first call verifies the combination. */
    hd__clblast_params_shipped(&st->dev, &st->base);
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        hd_clblast_params known;
        if (hd__clblast_params_known(&st->dev, (hd_clblast_kernel)k, &known, 1) == 1)
            hd__clblast_params_merge(&st->base, &known);
    }
    hd__clblast_lock();
    open_states++;
    hd__clblast_unlock();
    *state = st;
    return HD_OK;
}

static void clblast_destroy(void *state)
{
    if (state == NULL)
        return;
    hd__clblast_lock();
    if (--open_states == 0)
        (void)CLBlastClearCache(); /* nothing left to report a failure to */
    hd__clblast_unlock();
    free(state);
}

/* The tuner's candidates: Xgemm sets for problems that take the indirect path under the base
 * threshold, XgemmDirect sets for the rest. */
static size_t clblast_variants(void *state, hd_op op, const hd_shape *shape, hd_part part,
                               const char **out, size_t max)
{
    hd_clblast_state *st = state;
    if ((op != HD_OP_GEMM && op != HD_OP_LORA && op != HD_OP_LORA_BACKWARD) ||
        part != HD_PART_WHOLE)
        return 0;
    /* GEMM (m, n, k) and LoRA and its backward (tokens, in, out): the largest product is the
     * first three. */
    double flops = (double)shape->dim[0] * (double)shape->dim[1] * (double)shape->dim[2];
    double t = (double)st->base.min_indirect_size;
    hd_clblast_kernel kernel = flops >= t * t * t ? HD_CLBLAST_XGEMM : HD_CLBLAST_XGEMM_DIRECT;
    enum { CAP = sizeof st->variant_text / sizeof st->variant_text[0] };
    hd_clblast_params sets[CAP];
    size_t n = hd__clblast_params_enumerate(&st->dev, kernel, sets, max < CAP ? max : CAP);
    for (size_t i = 0; i < n; i++) {
        hd__clblast_params_format(&sets[i], st->variant_text[i], sizeof st->variant_text[i]);
        out[i] = st->variant_text[i];
    }
    return n;
}

/* The set a call would run (the variant laid over the base set) must parse and be legal for
 * this device; whether CLBlast then accepts it is known only when the first call verifies it. */
static hd_status clblast_check_variant(void *state, hd_context *ctx, hd_op op,
                                       const hd_shape *shape, hd_part part, const char *variant)
{
    hd_clblast_state *st = state;
    (void)shape;
    if ((op != HD_OP_GEMM && op != HD_OP_LORA && op != HD_OP_GEMM_BATCHED &&
         op != HD_OP_LORA_BACKWARD) ||
        part != HD_PART_WHOLE)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "CLBlast: %s takes no variants",
                         hd_op_name(op));
    hd_clblast_params over, want = st->base;
    hd_status s = hd__clblast_params_parse(ctx, variant, &over);
    if (s != HD_OK)
        return s;
    hd__clblast_params_merge(&want, &over);
    char why[200];
    if (!hd__clblast_params_legal(&want, &st->dev, why, sizeof why))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "illegal CLBlast parameter set (%s): %.200s",
                         why, variant);
    return HD_OK;
}

/* One GEMM of m×n×k on pooled buffers whose contents do not matter. Lock held. */
static hd_status scratch_gemm(hd_clblast_state *st, hd_context *ctx, size_t m, size_t n, size_t k, size_t batch)
{
    struct hd_device_buffer *buf[3] = {NULL, NULL, NULL};
    size_t bytes[3] = {batch * m * k * 4, batch * k * n * 4, batch * m * n * 4};
    hd_status s = HD_OK;
    for (int i = 0; i < 3 && s == HD_OK; i++)
        s = hd__cl_buffer_acquire(st->rt, ctx, bytes[i], &buf[i]);
    if (s == HD_OK && batch == 1) {
        s = hd__clblast_sgemm(st, ctx, true, false, false, m, n, k, 1.0f, hd__cl_mem(buf[0]->mem),
                              0, k, hd__cl_mem(buf[1]->mem), 0, n, 0.0f, hd__cl_mem(buf[2]->mem), 0,
                              n);
    } else if (s == HD_OK) {
        cl_command_queue queue = hd__cl_queue(st->rt);
        CLBlastStatusCode code = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f,
            hd__cl_mem(buf[0]->mem), 0, k, m * k, hd__cl_mem(buf[1]->mem), 0, n, k * n, 0.0f,
            hd__cl_mem(buf[2]->mem), 0, n, m * n, batch, &queue, NULL);
        if (code != CLBlastSuccess)
            s = hd__clblast_error(ctx, code, "CLBlastSgemmStridedBatched (warm-up)");
    }
    if (s == HD_OK)
        s = hd__cl_finish(st->rt, ctx);
    for (int i = 0; i < 3; i++)
        if (buf[i] != NULL)
            hd__cl_buffer_release(st->rt, buf[i]);
    return s;
}

/* CLBlast compiles a program per OpenCL context and routine on first use: the direct and
 * indirect paths of GEMM share one, the batched routine has its own. */
static hd_status clblast_warmup(void *state, hd_context *ctx)
{
    hd_clblast_state *st = state;
    hd__clblast_lock();
    hd_status s = hd__clblast_prepare(st, ctx, NULL);
    size_t t = st->base.min_indirect_size;
    if (s == HD_OK)
        s = scratch_gemm(st, ctx, 8, 8, 8, 1);
    if (s == HD_OK)
        s = scratch_gemm(st, ctx, t + 1, t + 1, t + 1, 1);
    if (s == HD_OK)
        s = scratch_gemm(st, ctx, 8, 8, 8, 2);
    hd__clblast_unlock();
    return s;
}

/*
 * One m×n×k GEMM: launches x launch latency + the larger of compute and streaming time.
 * CLBlast reaches the device's GEMM rate only with both sides of C at least a tile wide;
 * problems past the indirect threshold (XGEMM_MIN_INDIRECT_SIZE cubed) take the indirect
 * path, whose pad and transpose kernels add a launch.
 */
static double gemm_us(const hd_clblast_state *st, const hd_tune_calibration *cal, double m,
                      double n, double k, double batch)
{
    double launch = cal != NULL && cal->launch_us > 0.0 ? cal->launch_us : DEFAULT_LAUNCH_US;
    /* CLBlast's own rate where the calibration measured it, else the best device GEMM's */
    double gflops = cal != NULL && cal->clblast_gflops > 0.0 ? cal->clblast_gflops
                    : cal != NULL && cal->gemm_gflops > 0.0  ? cal->gemm_gflops
                                                             : DEFAULT_DEVICE_GFLOPS;
    double gbps = cal != NULL && cal->copy_gbps > 0.0 ? cal->copy_gbps : DEFAULT_DEVICE_GBPS;
    double tile_fill = fmin(1.0, fmin(m, n) / 64.0);
    double t = st != NULL ? (double)st->base.min_indirect_size : 256.0;
    double launches = m * n * k * batch > t * t * t ? 2.0 : 1.0;
    double compute = 2.0 * m * n * k * batch / (gflops * tile_fill * tile_fill * 1e3);
    double stream = 4.0 * batch * (m * k + k * n + m * n) / (gbps * 1e3);
    return launches * launch + fmax(compute, stream);
}

/* GEMM as one CLBlast call; LoRA as its three (x*W, x*A, then (xA)*B onto y); LoRA's backward
 * as its six (dy*W^T, u*A^T onto dx, u, h, dA, dB; lora_backward.c), without dx where the
 * caller wants none, which the shape does not say: the estimate counts it. */
static double clblast_estimate_us(void *state, hd_op op, const hd_shape *s, hd_part part,
                                  const hd_tune_calibration *cal)
{
    const hd_clblast_state *st = state;
    double d0 = (double)s->dim[0], d1 = (double)s->dim[1], d2 = (double)s->dim[2];
    double d3 = (double)s->dim[3];
    (void)part;
    if (op == HD_OP_LORA_BACKWARD)
        return gemm_us(st, cal, d0, d1, d2, 1.0) +
               (d3 > 0.0 ? gemm_us(st, cal, d0, d1, d3, 1.0) + gemm_us(st, cal, d0, d3, d2, 1.0) +
                               gemm_us(st, cal, d0, d3, d1, 1.0) +
                               gemm_us(st, cal, d1, d3, d0, 1.0) + gemm_us(st, cal, d3, d2, d0, 1.0)
                         : 0.0);
    if (op == HD_OP_LORA)
        return gemm_us(st, cal, d0, d2, d1, 1.0) +
               (d3 > 0.0 ? gemm_us(st, cal, d0, d3, d1, 1.0) + gemm_us(st, cal, d0, d2, d3, 1.0)
                         : 0.0);
    return gemm_us(st, cal, d0, d1, d2, op == HD_OP_GEMM_BATCHED ? d3 : 1.0);
}

static hd_status clblast_gemm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__clblast_gemm(state, ctx, &args->gemm);
}
static hd_status clblast_gemm_batched(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__clblast_gemm_batched(state, ctx, &args->gemm);
}
static hd_status clblast_lora(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__clblast_lora(state, ctx, &args->lora);
}
static hd_status clblast_lora_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__clblast_lora_backward(state, ctx, &args->lora_backward);
}

/* The device's base set ("base"), laid over the current one (the shipped set, or the cache's,
 * read first as a first call would) once verified on the device (hd__clblast_params_apply:
 * legality, CLBlast's override, a GEMM through each path against the reference). */
static hd_status clblast_set_params(void *state, hd_context *ctx, const char *name,
                                    const char *value)
{
    hd_clblast_state *st = state;
    if (strcmp(name, "base") != 0)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CLBlast has no device parameter set '%.40s' (it has 'base')", name);
    hd_clblast_params over;
    hd_status s = hd__clblast_params_parse(ctx, value, &over);
    if (s != HD_OK)
        return s;
    return hd__clblast_params_apply(st, ctx, &over);
}

static void clblast_cached_params(void *state, hd_context *ctx, const char *name,
                                  const char *value)
{
    if (strcmp(name, "base") == 0)
        hd__clblast_take_cached_base(state, ctx, value);
    else
        hd__note(ctx, "tuning cache: CLBlast has no device parameter set '%.40s'", name);
}

const hd_backend_impl hd__backend_clblast = {
    .name = "clblast",
    .id = HD_BACKEND_CLBLAST,
    .place = HD_PLACE_DEVICE,
    .probe = clblast_probe,
    .destroy = clblast_destroy,
    .estimate_us = clblast_estimate_us,
    .variants = clblast_variants,
    .check_variant = clblast_check_variant,
    .set_params = clblast_set_params,
    .cached_params = clblast_cached_params,
    .warmup = clblast_warmup,
    .scale = hd__clblast_scale,
    .run =
        {
            [HD_OP_GEMM] = clblast_gemm,
            [HD_OP_GEMM_BATCHED] = clblast_gemm_batched,
            [HD_OP_LORA] = clblast_lora,
            [HD_OP_LORA_BACKWARD] = clblast_lora_backward,
        },
};
