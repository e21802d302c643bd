/*
 * A context with stand-in backends for the selection and fallback suites, so that they test
 * the dispatcher's rules on every machine, with or without OpenCL. The stand-ins run on the
 * host, count their calls and remember the variant they were given; the CPU may be the real
 * one. A stand-in "fused" backend refuses row ops wider than FAKE_MAX_COLS, to exercise
 * supports(). Each stand-in copies its first input into the output (row ops) or leaves the
 * output as the CPU would not: tests that check results use the real CPU.
 */
#ifndef HD_TESTS_FAKE_BACKENDS_H
#define HD_TESTS_FAKE_BACKENDS_H

#include <stdlib.h>
#include <string.h>

#include "autotune/cache.h"
#include "autotune/table.h"
#include "dispatch/context.h"
#include "dispatch/error.h"
#include "dispatch/select.h"
#include "tests/testlib.h"

#define FAKE_MAX_COLS 100000

typedef struct fake_state {
    int calls;
    char variant[HD_TUNE_STRING_MAX]; /* of the last call; "" for NULL */
    hd_status fail_with;              /* HD_OK: succeed */
} fake_state;

static fake_state fake_states[HD_BACKEND_COUNT];

static inline hd_status fake_called(void *state, hd_context *ctx, const char *variant)
{
    fake_state *f = state;
    f->calls++;
    snprintf(f->variant, sizeof f->variant, "%s", variant ? variant : "");
    if (f->fail_with != HD_OK)
        return hd__error(ctx, f->fail_with, "stand-in backend fails as told");
    return HD_OK;
}

static inline hd_status fake_gemm(void *s, hd_context *ctx, const hd_gemm_args *a)
{
    return fake_called(s, ctx, a->variant);
}
static inline hd_status fake_lora(void *s, hd_context *ctx, const hd_lora_args *a)
{
    return fake_called(s, ctx, a->variant);
}
static inline hd_status fake_row(void *s, hd_context *ctx, const hd_row_args *a)
{
    return fake_called(s, ctx, a->variant);
}
static inline bool fake_fused_supports(void *s, hd_op op, const hd_shape *shape)
{
    return op == HD_OP_GEMM || op == HD_OP_LORA || shape->dim[1] <= FAKE_MAX_COLS;
}
static inline hd_status fake_probe(hd_context *ctx, void **state)
{
    return HD_OK;
}

static const hd_backend_impl fake_cpu = {
    .name = "cpu",
    .id = HD_BACKEND_CPU,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .gemm = fake_gemm,
    .gemm_batched = fake_gemm,
    .lora = fake_lora,
    .softmax = fake_row,
    .layer_norm = fake_row,
    .rms_norm = fake_row,
};
/* The device stand-ins run on the host: residency is the dispatcher's, not under test here;
 * their place for migration cost is set per test through fake_device_place. */
static hd_backend_impl fake_fused = {
    .name = "fused",
    .id = HD_BACKEND_FUSED,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .supports = fake_fused_supports,
    .gemm = fake_gemm,
    .lora = fake_lora,
    .softmax = fake_row,
    .layer_norm = fake_row,
    .rms_norm = fake_row,
};
static hd_backend_impl fake_clblast = {
    .name = "clblast",
    .id = HD_BACKEND_CLBLAST,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .gemm = fake_gemm,
    .gemm_batched = fake_gemm,
    .lora = fake_lora,
};
static hd_backend_impl fake_hybrid = {
    .name = "clblast+fused",
    .id = HD_BACKEND_CLBLAST_FUSED,
    .place = HD_PLACE_HOST,
    .probe = fake_probe,
    .lora = fake_lora,
};

/* A context with the stand-ins (and the real CPU backend when real_cpu), reading a tuning
 * cache with f's records, calibration and params (f may be NULL: no cache). */
static inline hd_context *fake_context(bool real_cpu, const hd_tune_file *f, const char *path)
{
    memset(fake_states, 0, sizeof fake_states);
    hd_context *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    hd__fault_init(ctx);
    if (real_cpu) {
        ctx->backends[HD_BACKEND_CPU] = &hd__backend_cpu;
        assert_int_equal(hd__backend_cpu.probe(ctx, &ctx->backend_state[HD_BACKEND_CPU]), HD_OK);
    } else {
        ctx->backends[HD_BACKEND_CPU] = &fake_cpu;
        ctx->backend_state[HD_BACKEND_CPU] = &fake_states[HD_BACKEND_CPU];
    }
    ctx->backends[HD_BACKEND_FUSED] = &fake_fused;
    ctx->backend_state[HD_BACKEND_FUSED] = &fake_states[HD_BACKEND_FUSED];
    ctx->backends[HD_BACKEND_CLBLAST] = &fake_clblast;
    ctx->backend_state[HD_BACKEND_CLBLAST] = &fake_states[HD_BACKEND_CLBLAST];
    ctx->backends[HD_BACKEND_CLBLAST_FUSED] = &fake_hybrid;
    ctx->backend_state[HD_BACKEND_CLBLAST_FUSED] = &fake_states[HD_BACKEND_CLBLAST_FUSED];

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
