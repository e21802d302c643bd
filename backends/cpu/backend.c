#include <stdlib.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/step.h"
#include "core/error.h"
#include "core/op.h"

/* Without a calibration: a few cores' SGEMM rate and streaming bandwidth. */
#define DEFAULT_CPU_GFLOPS 50.0
#define DEFAULT_CPU_GBPS   10.0

/* setup->cpu_threads is the request (0: default); the state keeps the count in use. */
static hd_status cpu_probe(hd_context *ctx, const hd_backend_setup *setup, void **state)
{
    hd_cpu_state *cpu = calloc(1, sizeof *cpu);
    if (cpu == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CPU backend: no memory for its state");
    cpu->threads = hd__cpu_threads_resolve(setup->cpu_threads);
    if (hd__cpu_pool_create(cpu->threads, &cpu->pool) != HD_OK) {
        free(cpu);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CPU backend: no memory for its threads");
    }
    *state = cpu;
    return HD_OK;
}

/* No launch and no copy: the larger of the arithmetic and the streaming at the host's rates. */
static double cpu_estimate_us(void *state, hd_op op, const hd_shape *shape, hd_part part,
                              const hd_tune_calibration *cal)
{
    (void)state;
    (void)part;
    double gflops = cal != NULL && cal->cpu_gflops > 0.0 ? cal->cpu_gflops : DEFAULT_CPU_GFLOPS;
    double gbps = cal != NULL && cal->cpu_gbps > 0.0 ? cal->cpu_gbps : DEFAULT_CPU_GBPS;
    double compute = hd__op(op)->compute_bound ? hd__op_flops(op, shape) / (gflops * 1e3) : 0.0;
    double stream = hd__op_bytes(op, shape) / (gbps * 1e3);
    return compute > stream ? compute : stream;
}

static size_t cpu_threads(void *state)
{
    return ((hd_cpu_state *)state)->threads;
}

static hd_status cpu_scale(void *state, hd_context *ctx, const hd_tensor *t, float beta)
{
    (void)state;
    (void)ctx;
    size_t n = t->rows * t->cols;
    for (size_t i = 0; i < n; i++)
        t->state->host[i] = beta == 0.0f ? 0.0f : beta * t->state->host[i];
    return HD_OK;
}

static hd_status cpu_gemm(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd__cpu_blas_begin(cpu_threads(state));
    hd_status s = hd__cpu_gemm(state, ctx, &args->gemm);
    hd__cpu_blas_end();
    return s;
}
static hd_status cpu_gemm_batched(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd__cpu_blas_begin(cpu_threads(state));
    hd_status s = hd__cpu_gemm_batched(state, ctx, &args->gemm);
    hd__cpu_blas_end();
    return s;
}
static hd_status cpu_lora(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd__cpu_blas_begin(cpu_threads(state));
    hd_status s = hd__cpu_lora(state, ctx, &args->lora);
    hd__cpu_blas_end();
    return s;
}
static hd_status cpu_softmax(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_softmax(state, ctx, &args->row);
}
static hd_status cpu_layer_norm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_layer_norm(state, ctx, &args->row);
}
static hd_status cpu_rms_norm(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_rms_norm(state, ctx, &args->row);
}

static void cpu_destroy(void *state)
{
    hd_cpu_state *cpu = state;
    if (cpu == NULL)
        return;
    hd__cpu_pool_destroy(cpu->pool);
    free(cpu);
}

static hd_status cpu_softmax_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_softmax_backward(state, ctx, &args->row_backward);
}
static hd_status cpu_layer_norm_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_layer_norm_backward(state, ctx, &args->row_backward);
}
static hd_status cpu_rms_norm_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    return hd__cpu_rms_norm_backward(state, ctx, &args->row_backward);
}
static hd_status cpu_lora_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd__cpu_blas_begin(cpu_threads(state));
    hd_status s = hd__cpu_lora_backward(state, ctx, &args->lora_backward);
    hd__cpu_blas_end();
    return s;
}

const hd_backend_impl hd__backend_cpu = {
    .name = "cpu",
    .id = HD_BACKEND_CPU,
    .place = HD_PLACE_HOST,
    .probe = cpu_probe,
    .destroy = cpu_destroy,
    .cpu_threads = cpu_threads,
    .estimate_us = cpu_estimate_us,
    .scale = cpu_scale,
    .run =
        {
            [HD_OP_GEMM] = cpu_gemm,
            [HD_OP_GEMM_BATCHED] = cpu_gemm_batched,
            [HD_OP_LORA] = cpu_lora,
            [HD_OP_SOFTMAX] = cpu_softmax,
            [HD_OP_LAYER_NORM] = cpu_layer_norm,
            [HD_OP_RMS_NORM] = cpu_rms_norm,
            [HD_OP_SOFTMAX_BACKWARD] = cpu_softmax_backward,
            [HD_OP_LAYER_NORM_BACKWARD] = cpu_layer_norm_backward,
            [HD_OP_RMS_NORM_BACKWARD] = cpu_rms_norm_backward,
            [HD_OP_LORA_BACKWARD] = cpu_lora_backward,
            [HD_OP_SWIGLU] = hd__cpu_swiglu_slot,
            [HD_OP_SWIGLU_BACKWARD] = hd__cpu_swiglu_backward_slot,
            [HD_OP_GELU] = hd__cpu_gelu_slot,
            [HD_OP_GELU_BACKWARD] = hd__cpu_gelu_backward_slot,
            [HD_OP_ADD] = hd__cpu_add_slot,
            [HD_OP_ROPE] = hd__cpu_rope_slot,
            [HD_OP_EMBEDDING] = hd__cpu_embedding_slot,
            [HD_OP_ATTENTION] = hd__cpu_attention_slot,
            [HD_OP_ATTENTION_BACKWARD] = hd__cpu_attention_backward_slot,
            [HD_OP_ADD_RMS_NORM] = hd__cpu_add_rms_norm_slot,
            [HD_OP_ADD_RMS_NORM_BACKWARD] = hd__cpu_add_rms_norm_backward_slot,
            [HD_OP_CROSS_ENTROPY] = hd__cpu_cross_entropy_slot,
            [HD_OP_LINEAR_CROSS_ENTROPY] = hd__cpu_linear_cross_entropy_slot,
        },
    .adamw = hd__cpu_adamw_slot,
};
