/*
 * A context with stand-in backends for the selection and fallback suites, so that they test
 * the dispatcher's rules on every machine, with or without OpenCL. The stand-ins run on the
 * host, count their calls and remember the variant they were given; the CPU may be the real
 * one. A stand-in "fused" backend refuses row ops wider than FAKE_MAX_COLS and LoRA of more
 * than 16 tokens, as the real one does, to exercise supports(). Each stand-in copies its
 * first input into the output (row ops) or leaves the output as the CPU would not: tests that check
 * results use the real CPU.
 */
#ifndef HD_TESTS_FAKE_BACKENDS_H
#define HD_TESTS_FAKE_BACKENDS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/tune_file.h"
#include "dispatch/tune_table.h"
#include "dispatch/context.h"
#include "core/op.h"
#include "core/error.h"
#include "dispatch/memo.h"
#include "dispatch/select.h"
#include "tests/testlib.h"

#define FAKE_MAX_COLS 100000

typedef struct fake_state {
    int calls;
    char variant[HD_TUNE_STRING_MAX]; /* of the last call; "" for NULL */
    hd_status fail_with;              /* HD_OK: succeed */
    bool fail_after_writing;          /* fail as a slot that had begun adding into the outputs */
} fake_state;

static fake_state fake_states[HD_BACKEND_COUNT];

static inline hd_status fake_called(void *state, hd_context *ctx, const char *variant)
{
    fake_state *f = state;
    f->calls++;
    snprintf(f->variant, sizeof f->variant, "%s", variant ? variant : "");
    if (f->fail_with != HD_OK && f->fail_after_writing)
        hd__error_outputs_changed(ctx);
    if (f->fail_with != HD_OK)
        return hd__error(ctx, f->fail_with, "stand-in backend fails as told");
    return HD_OK;
}

static inline hd_status fake_run(void *s, hd_context *ctx, const hd_op_args *a)
{
    /* Every argument struct keeps its variant; the op table says which one the op uses. */
    return fake_called(s, ctx, a->gemm.variant);
}
static inline hd_status fake_run_lora(void *s, hd_context *ctx, const hd_op_args *a)
{
    return fake_called(s, ctx, a->lora.variant);
}
static inline hd_status fake_run_row(void *s, hd_context *ctx, const hd_op_args *a)
{
    return fake_called(s, ctx, a->row.variant);
}
static inline hd_status fake_run_row_backward(void *s, hd_context *ctx, const hd_op_args *a)
{
    return fake_called(s, ctx, a->row_backward.variant);
}
static inline hd_status fake_run_lora_backward(void *s, hd_context *ctx, const hd_op_args *a)
{
    return fake_called(s, ctx, a->lora_backward.variant);
}
static inline hd_status fake_run_step(void *s, hd_context *ctx, const hd_op_args *a)
{
    return fake_called(s, ctx, a->step.variant);
}
/* As the real fused backend: any GEMM, few-token LoRA (and any epilogue), rows up to a
 * limit. */
static inline bool fake_fused_supports(void *s, hd_op op, const hd_shape *shape, hd_part part)
{
    if (part == HD_PART_EPILOGUE || op == HD_OP_GEMM)
        return true;
    if (op == HD_OP_LORA)
        return shape->dim[0] <= 16;
    return shape->dim[1] <= FAKE_MAX_COLS;
}
static inline hd_status fake_probe(hd_context *ctx, const hd_backend_setup *setup, void **state)
{
    return HD_OK;
}

/* The stand-ins' estimates, of the shape of the real backends' (a launch, then the larger of
 * arithmetic and streaming), so that the cost-model rule is tested without a device. */
/* The calibration with the real backends' defaults where a constant is missing. */
static inline hd_tune_calibration fake_cal(const hd_tune_calibration *cal)
{
    hd_tune_calibration c = cal != NULL ? *cal : (hd_tune_calibration){0};
    c.launch_us = c.launch_us > 0.0 ? c.launch_us : 10.0;
    c.copy_gbps = c.copy_gbps > 0.0 ? c.copy_gbps : 100.0;
    c.gemm_gflops = c.gemm_gflops > 0.0 ? c.gemm_gflops : 1000.0;
    return c;
}
static inline double fake_rate(const hd_tune_calibration *cal, double launches, double flops,
                               double gflops, double bytes)
{
    return launches * cal->launch_us + fmax(flops / (gflops * 1e3), bytes / (cal->copy_gbps * 1e3));
}
static inline double fake_gemm_us(const hd_tune_calibration *cal, double m, double n, double k)
{
    double fill = fmin(1.0, fmin(m, n) / 64.0);
    return fake_rate(cal, m * n * k > 16777216.0 ? 2.0 : 1.0, 2.0 * m * n * k,
                     cal->gemm_gflops * fill * fill, 4.0 * (m * k + k * n + m * n));
}
static inline double fake_clblast_estimate(void *st, hd_op op, const hd_shape *s, hd_part part,
                                           const hd_tune_calibration *cal)
{
    double d0 = (double)s->dim[0], d1 = (double)s->dim[1], d2 = (double)s->dim[2];
    double d3 = (double)s->dim[3];
    hd_tune_calibration c = fake_cal(cal);
    if (op == HD_OP_LORA)
        return fake_gemm_us(&c, d0, d2, d1) + fake_gemm_us(&c, d0, d3, d1) +
               fake_gemm_us(&c, d0, d2, d3);
    return fake_gemm_us(&c, d0, d1, d2);
}
static inline double fake_fused_estimate(void *st, hd_op op, const hd_shape *s, hd_part part,
                                         const hd_tune_calibration *cal)
{
    double flops = hd__op_flops(op, s), bytes = hd__op_bytes(op, s);
    if (part == HD_PART_EPILOGUE) {
        double t = (double)s->dim[0], in = (double)s->dim[1], out = (double)s->dim[2];
        double r = (double)s->dim[3];
        flops = 2.0 * t * r * (in + out);
        bytes = 4.0 * (t * in + in * r + r * out + 2.0 * t * out);
    }
    if (!hd__op(op)->compute_bound)
        flops = 0.0;
    hd_tune_calibration c = fake_cal(cal);
    bool strip = op != HD_OP_GEMM || (s->dim[0] <= 16 && !s->trans_a && !s->trans_b);
    return fake_rate(&c, 1.0, flops, c.gemm_gflops * (strip ? 0.25 : 0.5), bytes);
}

static inline double fake_cpu_estimate(void *st, hd_op op, const hd_shape *s, hd_part part,
                                       const hd_tune_calibration *cal)
{
    return hd__backend_cpu.estimate_us(st, op, s, part, cal);
}

static hd_backend_impl fake_cpu = {
    .name = "cpu",
    .id = HD_BACKEND_CPU,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .estimate_us = fake_cpu_estimate,
    .run = {[HD_OP_GEMM] = fake_run,
            [HD_OP_GEMM_BATCHED] = fake_run,
            [HD_OP_LORA] = fake_run_lora,
            [HD_OP_SOFTMAX] = fake_run_row,
            [HD_OP_LAYER_NORM] = fake_run_row,
            [HD_OP_RMS_NORM] = fake_run_row,
            [HD_OP_SOFTMAX_BACKWARD] = fake_run_row_backward,
            [HD_OP_LAYER_NORM_BACKWARD] = fake_run_row_backward,
            [HD_OP_RMS_NORM_BACKWARD] = fake_run_row_backward,
            [HD_OP_LORA_BACKWARD] = fake_run_lora_backward},
};
/* The device stand-ins run on the host: residency is the dispatcher's, not under test here;
 * their place for migration cost is set per test through fake_device_place. */
static hd_backend_impl fake_fused = {
    .name = "fused",
    .id = HD_BACKEND_FUSED,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .supports = fake_fused_supports,
    .estimate_us = fake_fused_estimate,
    .run = {[HD_OP_GEMM] = fake_run,
            [HD_OP_LORA] = fake_run_lora,
            [HD_OP_SOFTMAX] = fake_run_row,
            [HD_OP_LAYER_NORM] = fake_run_row,
            [HD_OP_RMS_NORM] = fake_run_row,
            [HD_OP_SOFTMAX_BACKWARD] = fake_run_row_backward,
            [HD_OP_LAYER_NORM_BACKWARD] = fake_run_row_backward,
            [HD_OP_RMS_NORM_BACKWARD] = fake_run_row_backward,
            [HD_OP_LORA_BACKWARD] = fake_run_lora_backward,
            /* the training step's ops, as the real fused backend offers them */
            [HD_OP_SWIGLU] = fake_run_step,
            [HD_OP_SWIGLU_BACKWARD] = fake_run_step,
            [HD_OP_GELU] = fake_run_step,
            [HD_OP_GELU_BACKWARD] = fake_run_step,
            [HD_OP_ADD] = fake_run_step,
            [HD_OP_ADD_RMS_NORM] = fake_run_step,
            [HD_OP_ADD_RMS_NORM_BACKWARD] = fake_run_step,
            [HD_OP_ROPE] = fake_run_step,
            [HD_OP_ATTENTION] = fake_run_step,
            [HD_OP_ATTENTION_BACKWARD] = fake_run_step,
            [HD_OP_CROSS_ENTROPY] = fake_run_step,
            [HD_OP_LINEAR_CROSS_ENTROPY] = fake_run_step,
            [HD_OP_EMBEDDING] = fake_run_step},
    .epilogue = {[HD_OP_LORA] = fake_run_lora},
};
static hd_backend_impl fake_clblast = {
    .name = "clblast",
    .id = HD_BACKEND_CLBLAST,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .estimate_us = fake_clblast_estimate,
    .run = {[HD_OP_GEMM] = fake_run, [HD_OP_GEMM_BATCHED] = fake_run, [HD_OP_LORA] = fake_run_lora},
};
/* The plan of two, composed from the stand-ins as the registry composes the real ones. */
static const hd_composite fake_hybrid = {
    .id = HD_BACKEND_CLBLAST_FUSED,
    .product = HD_BACKEND_CLBLAST,
    .epilogue = HD_BACKEND_FUSED,
};

/* A context with the stand-ins (and the real CPU backend when real_cpu), reading a tuning
 * cache with f's records, calibration and params (f may be NULL: no cache). */
static inline hd_context *fake_context(bool real_cpu, const hd_tune_file *f, const char *path)
{
    memset(fake_states, 0, sizeof fake_states);
    hd_context *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    ctx->report.log = hd_test_log;
    hd_test_notes_clear();
    hd__fault_init(ctx);
    if (real_cpu) {
        ctx->backends[HD_BACKEND_CPU] = &hd__backend_cpu;
        const hd_backend_setup setup = {.cpu_threads = ctx->cpu_threads};
        assert_int_equal(hd__backend_cpu.probe(ctx, &setup, &ctx->backend_state[HD_BACKEND_CPU]),
                         HD_OK);
        ctx->cpu_threads = hd__backend_cpu.cpu_threads(ctx->backend_state[HD_BACKEND_CPU]);
    } else {
        ctx->backends[HD_BACKEND_CPU] = &fake_cpu;
        ctx->backend_state[HD_BACKEND_CPU] = &fake_states[HD_BACKEND_CPU];
    }
    ctx->backends[HD_BACKEND_FUSED] = &fake_fused;
    ctx->backend_state[HD_BACKEND_FUSED] = &fake_states[HD_BACKEND_FUSED];
    ctx->backends[HD_BACKEND_CLBLAST] = &fake_clblast;
    ctx->backend_state[HD_BACKEND_CLBLAST] = &fake_states[HD_BACKEND_CLBLAST];
    ctx->composite[HD_BACKEND_CLBLAST_FUSED] = &fake_hybrid;

    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = f == NULL;
    opt.tune_cache = path;
    if (f != NULL) {
        hd_tune_file copy = *f;
        hd__tune_context_key(ctx, &copy.key);
        char msg[256];
        remove(path);
        assert_int_equal(hd__tune_save(path, &copy, msg, sizeof msg), HD_OK);
    }
    assert_int_equal(hd__tune_open(ctx, &opt), HD_OK);
    return ctx;
}

static inline hd_tune_record fake_record(hd_op op, size_t d0, size_t d1, size_t d2, size_t d3,
                                         hd_backend b, double us, hd_backend runner_up,
                                         double margin)
{
    hd_tune_record r = {.op = op,
                        .shape = {.dim = {d0, d1, d2, d3}},
                        .backend = b,
                        .median_us = us,
                        .runner_up = runner_up,
                        .margin_pct = margin};
    return r;
}

#endif
