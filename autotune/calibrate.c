/* Calibration: the few device constants the cost model in dispatch/select.c runs on. */
#include <stdlib.h>
#include <string.h>

#include "autotune/calibrate.h"
#include "autotune/measure.h"
#include "dispatch/device.h"
#include "core/error.h"
#include "core/op.h"
#include "dispatch/tools.h"

typedef struct gemm_job {
    hd_tensor *a, *b, *c;
} gemm_job;

static hd_status run_gemm(hd_context *ctx, void *user, size_t set)
{
    (void)set;
    gemm_job *j = user;
    return hd_gemm(ctx, false, false, 1.0f, j->a, j->b, 0.0f, j->c);
}

hd_status hd__calibrate_gemm(hd_context *ctx, hd_backend b, size_t n, hd_measure_mode mode,
                             double budget_s, hd_measure_result *out)
{
    memset(out, 0, sizeof *out);
    if (b != HD_BACKEND_AUTO && !hd_context_has_backend(ctx, b))
        return HD_OK;
    gemm_job j = {0};
    hd_status s = hd_tensor_create(ctx, n, n, &j.a);
    if (s == HD_OK)
        s = hd_tensor_create(ctx, n, n, &j.b);
    if (s == HD_OK)
        s = hd_tensor_create(ctx, n, n, &j.c);
    float *data = s == HD_OK ? malloc(n * n * sizeof *data) : NULL;
    if (s == HD_OK && data == NULL)
        s = hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "calibration: no memory for a %zu² GEMM", n);
    if (s == HD_OK) {
        for (size_t i = 0; i < n * n; i++)
            data[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        s = hd_tensor_write(j.a, data);
        if (s == HD_OK)
            s = hd_tensor_write(j.b, data);
    }
    free(data);
    hd_backend was = hd__forced_backend(ctx, HD_OP_GEMM);
    if (s == HD_OK)
        s = hd_context_set_backend(ctx, HD_OP_GEMM, b);
    hd_measure_result r;
    if (s == HD_OK) {
        hd_measure_config cfg;
        hd__measure_config_init(&cfg, mode);
        cfg.warmup = 1;
        cfg.min_runs = 3;
        cfg.budget_s = budget_s;
        s = hd__measure(ctx, &cfg, run_gemm, &j, &r);
    }
    if (hd_context_set_backend(ctx, HD_OP_GEMM, was) != HD_OK)
        hd_context_set_backend(ctx, HD_OP_GEMM, HD_BACKEND_AUTO);
    if (s == HD_OK && (b == HD_BACKEND_AUTO || r.ran_on == b))
        *out = r;
    hd_tensor_destroy(j.a);
    hd_tensor_destroy(j.b);
    hd_tensor_destroy(j.c);
    /* A backend that cannot run this GEMM only lacks a figure. */
    return s == HD_ERR_UNSUPPORTED ? HD_OK : s;
}

/* GFLOP/s of backend b on an n³ GEMM by its median time (the typical call the cost model
 * predicts); 0 when b cannot run it. The CPU is timed to completion, a device by its events. */
static hd_status gemm_rate(hd_context *ctx, hd_backend b, size_t n, double budget_s, double *gflops)
{
    hd_measure_result r;
    hd_status s = hd__calibrate_gemm(
        ctx, b, n, b == HD_BACKEND_CPU ? HD_MEASURE_SYNC : HD_MEASURE_DEVICE, budget_s, &r);
    *gflops = s == HD_OK && r.median_s > 0.0
                  ? 2.0 * (double)n * (double)n * (double)n / r.median_s * 1e-9
                  : 0.0;
    return s;
}

/* The host link as tensors meet it: from host memory taken the way theirs is (pinned where
 * the context pins large tensors). */
static hd_status upload_rate(hd_context *ctx, size_t bytes, double *gbps)
{
    *gbps = 0.0;
    bool pinned;
    char *src = hd__host_alloc(ctx, bytes, false, &pinned);
    if (src == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "calibration: no memory for the upload");
    memset(src, 1, bytes);
    double best_s = 0.0;
    hd_status s = hd__device_upload_seconds(ctx, src, bytes, 4, &best_s);
    hd__host_free(ctx, src, pinned);
    *gbps = s == HD_OK && best_s > 0.0 ? (double)bytes / best_s * 1e-9 : 0.0;
    return s;
}

hd_status hd__calibrate(hd_context *ctx, bool quick, hd_tune_calibration *out)
{
    memset(out, 0, sizeof *out);
    hd_status s = HD_OK;
    double bps = 0.0;
    if (hd__device_present(ctx)) {
        bool gpu = hd__device_is_gpu(ctx);
        double dev_s = 0.0, host_s = 0.0;
        s = hd__device_launch_latency(ctx, &dev_s, &host_s);
        out->launch_us = host_s * 1e6;
        size_t copy_bytes = gpu ? (quick ? 64u : 256u) << 20 : 16u << 20;
        if (s == HD_OK)
            s = hd__device_copy_bandwidth(ctx, copy_bytes, &bps);
        out->copy_gbps = bps * 1e-9;
        if (s == HD_OK)
            s = upload_rate(ctx, gpu ? 64u << 20 : 16u << 20, &out->host_gbps);
        size_t n = gpu ? (quick ? 2048 : 4096) : (quick ? 128 : 512);
        const hd_backend device_gemms[] = {HD_BACKEND_CLBLAST, HD_BACKEND_FUSED};
        double *own[] = {&out->clblast_gflops, &out->fused_gflops};
        for (size_t i = 0; i < 2 && s == HD_OK; i++) {
            s = gemm_rate(ctx, device_gemms[i], n, quick ? 0.1 : 0.3, own[i]);
            if (*own[i] > out->gemm_gflops)
                out->gemm_gflops = *own[i];
        }
    }
    if (s == HD_OK)
        s = gemm_rate(ctx, HD_BACKEND_CPU, quick ? 256 : 512, quick ? 0.1 : 0.3, &out->cpu_gflops);
    if (s == HD_OK && hd__measure_host_bandwidth(64u << 20, &bps) == HD_OK)
        out->cpu_gbps = bps * 1e-9;
    return s;
}

double hd__calibrate_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                hd_backend b, hd_op op, const hd_shape *shape)
{
    double us = hd__backend_estimate_us(ctx, b, op, shape, cal);
    if (us < 0.0) /* a backend without an estimate: the CPU's default streaming at 1 GB/s */
        us = hd__op_bytes(op, shape) / 1e3 + hd__op_flops(op, shape) / 1e4;
    return HD_ESTIMATE_MARGIN * us * 1e-6;
}
