#include "backends/cpu/cpu.h"

static hd_status cpu_probe(hd_context *ctx, void **state)
{
    (void)ctx;
    *state = NULL; /* stateless: OpenBLAS and OpenMP keep their own thread pools */
    return HD_OK;
}

const hd_backend_impl hd__backend_cpu = {
    .name = "cpu",
    .id = HD_BACKEND_CPU,
    .place = HD_PLACE_HOST,
    .probe = cpu_probe,
    .gemm = hd__cpu_gemm,
    .gemm_batched = hd__cpu_gemm_batched,
    .lora = hd__cpu_lora,
    .softmax = hd__cpu_softmax,
    .layer_norm = hd__cpu_layer_norm,
    .rms_norm = hd__cpu_rms_norm,
};
