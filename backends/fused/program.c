/*
 * Program sources, the kernel cache and launches. Each program kind's source is its kernel
 * files concatenated behind launch.cl (how every kernel orders itself after the launch before
 * it) and the shared prelude, assembled once per context; built programs
 * are cached by the OpenCL runtime (memory and disk), and the kernels this backend fetched are
 * remembered here by (kind, options, name) so a queued op costs one short lookup.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/fused/internal.h"

static const char *const softmax_parts[] = {hd__fused_cl_common, hd__fused_cl_softmax, NULL};
static const char *const layer_norm_parts[] = {hd__fused_cl_common, hd__fused_cl_layer_norm, NULL};
static const char *const rms_norm_parts[] = {hd__fused_cl_common, hd__fused_cl_rms_norm, NULL};
static const char *const gemv_parts[] = {hd__fused_cl_common, hd__fused_cl_gemv, NULL};
static const char *const gemv_nt_parts[] = {hd__fused_cl_common, hd__fused_cl_gemv_nt, NULL};
static const char *const lora_parts[] = {hd__fused_cl_common, hd__fused_cl_gemv,
                                         hd__fused_cl_lowrank, hd__fused_cl_lora, NULL};
static const char *const lora_update_parts[] = {hd__fused_cl_common, hd__fused_cl_lowrank,
                                                hd__fused_cl_lora_update, NULL};
static const char *const lora_backward_parts[] = {hd__fused_cl_common, hd__fused_cl_lowrank,
                                                  hd__fused_cl_lora_backward, NULL};
static const char *const gemm_tile_parts[] = {hd__fused_cl_tensor_core, hd__fused_cl_gemm,
                                              hd__fused_cl_gemm_tile, NULL};
static const char *const gemm_mma_parts[] = {hd__fused_cl_tensor_core, hd__fused_cl_gemm,
                                             hd__fused_cl_gemm_mma, NULL};
static const char *const gemm_wgmma_parts[] = {hd__fused_cl_tensor_core, hd__fused_cl_gemm,
                                               hd__fused_cl_gemm_wgmma, hd__fused_cl_gemm_tma,
                                               NULL};
static const char *const rows_backward_parts[] = {hd__fused_cl_common, hd__fused_cl_rows_backward,
                                                  NULL};
static const char *const elementwise_parts[] = {hd__fused_cl_elem, hd__fused_cl_elementwise,
                                                NULL};
static const char *const rope_parts[] = {hd__fused_cl_elem, hd__fused_cl_rope, NULL};
static const char *const embedding_parts[] = {hd__fused_cl_elem, hd__fused_cl_embedding, NULL};
static const char *const attention_parts[] = {hd__fused_cl_elem, hd__fused_cl_tensor_core,
                                              hd__fused_cl_attention, hd__fused_cl_attention_mma,
                                              NULL};
static const char *const add_rms_norm_parts[] = {hd__fused_cl_common, hd__fused_cl_elem,
                                                 hd__fused_cl_add_rms_norm, NULL};
static const char *const cross_entropy_parts[] = {hd__fused_cl_common, hd__fused_cl_elem,
                                                  hd__fused_cl_cross_entropy, NULL};
static const char *const adamw_parts[] = {hd__fused_cl_common, hd__fused_cl_adamw, NULL};
static const char *const *const parts[HD_FUSED_PROGRAM_COUNT] = {
    [HD_FUSED_SOFTMAX] = softmax_parts,
    [HD_FUSED_LAYER_NORM] = layer_norm_parts,
    [HD_FUSED_RMS_NORM] = rms_norm_parts,
    [HD_FUSED_GEMV] = gemv_parts,
    [HD_FUSED_GEMV_NT] = gemv_nt_parts,
    [HD_FUSED_LORA] = lora_parts,
    [HD_FUSED_LORA_UPDATE] = lora_update_parts,
    [HD_FUSED_LORA_BACKWARD] = lora_backward_parts,
    [HD_FUSED_GEMM_TILE] = gemm_tile_parts,
    [HD_FUSED_GEMM_MMA] = gemm_mma_parts,
    [HD_FUSED_GEMM_WGMMA] = gemm_wgmma_parts,
    [HD_FUSED_ROWS_BACKWARD] = rows_backward_parts,
    [HD_FUSED_ELEMENTWISE] = elementwise_parts,
    [HD_FUSED_ROPE] = rope_parts,
    [HD_FUSED_EMBEDDING] = embedding_parts,
    [HD_FUSED_ATTENTION] = attention_parts,
    [HD_FUSED_ADD_RMS_NORM] = add_rms_norm_parts,
    [HD_FUSED_CROSS_ENTROPY] = cross_entropy_parts,
    [HD_FUSED_ADAMW] = adamw_parts,
};

hd_status hd__fused_sources_create(hd_fused *f)
{
    for (int k = 0; k < HD_FUSED_PROGRAM_COUNT; k++) {
        const size_t launch_len = strlen(hd__fused_cl_launch);
        size_t len = launch_len + 2;
        for (const char *const *p = parts[k]; *p != NULL; p++)
            len += strlen(*p) + 1;
        char *src = malloc(len);
        if (src == NULL)
            return HD_ERR_OUT_OF_MEMORY;
        char *w = src;
        memcpy(w, hd__fused_cl_launch, launch_len);
        w += launch_len;
        *w++ = '\n';
        for (const char *const *p = parts[k]; *p != NULL; p++) {
            size_t n = strlen(*p);
            memcpy(w, *p, n);
            w += n;
            *w++ = '\n';
        }
        *w = '\0';
        f->source[k] = src;
    }
    return HD_OK;
}

void hd__fused_sources_destroy(hd_fused *f)
{
    for (int k = 0; k < HD_FUSED_PROGRAM_COUNT; k++) {
        free(f->source[k]);
        f->source[k] = NULL;
    }
}

static hd_status fetch_kernel(hd_fused *f, hd_context *ctx, hd_fused_program program,
                              const char *options, const char *name,
                              struct hd_fused_kernel_entry *e)
{
    hd_status s = hd__rt_kernel(f->rt, ctx, f->source[program], options, name, &e->kernel);
    if (s != HD_OK)
        return s;
    e->program = program;
    e->name = name;
    e->max_group = hd__rt_kernel_max_group(e->kernel);
    return HD_OK;
}

hd_status hd__fused_kernel(hd_fused *f, hd_context *ctx, hd_fused_program program,
                           const char *options, const char *name, size_t group, hd_kernel **out)
{
    struct hd_fused_kernel_entry *hit = NULL, fresh;
    for (size_t i = 0; i < f->kernel_count && hit == NULL; i++) {
        struct hd_fused_kernel_entry *e = &f->kernels[i];
        if (e->program == program && strcmp(e->name, name) == 0 && strcmp(e->options, options) == 0)
            hit = e;
    }
    if (hit == NULL) {
        if (strlen(options) >= sizeof fresh.options)
            return hd__error(ctx, HD_ERR_INTERNAL, "fused: build options too long");
        hit = f->kernel_count < HD_FUSED_KERNEL_CACHE ? &f->kernels[f->kernel_count] : &fresh;
        hd_status s = fetch_kernel(f, ctx, program, options, name, hit);
        if (s != HD_OK)
            return s;
        strcpy(hit->options, options);
        if (hit != &fresh)
            f->kernel_count++;
    }
    if (group > hit->max_group)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: kernel %s (%s) runs at most %zu work-items per group, not %zu",
                         name, options, hit->max_group, group);
    *out = hit->kernel;
    return HD_OK;
}

void hd__fused_build_ahead(hd_fused *f, hd_context *ctx, hd_fused_program program,
                           const char *options)
{
    hd__rt_build_ahead(f->rt, f->source[program], options);
}

hd_status hd__fused_set_arg(hd_context *ctx, hd_kernel *k, uint32_t index, size_t size,
                            const void *value)
{
    return hd__rt_set_arg(ctx, k, index, size, value);
}

hd_status hd__fused_set_args(hd_context *ctx, hd_kernel *k, const void *const *values,
                             const size_t *sizes, uint32_t count)
{
    hd_status s = HD_OK;
    for (uint32_t i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_set_arg(ctx, k, i, sizes[i], values[i]);
    return s;
}

hd_status hd__fused_launch(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t groups, size_t group)
{
    return hd__rt_launch(f->rt, ctx, k, (const size_t[2]){groups, 1}, group);
}

hd_status hd__fused_launch_args(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t groups,
                                size_t group, const hd_fused_arg *args, int count)
{
    return hd__fused_launch_grid(f, ctx, k, (const size_t[2]){groups, 1}, group, args, count);
}

static hd_status set_args(hd_context *ctx, hd_kernel *k, const hd_fused_arg *args, int count)
{
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++) {
        const hd_fused_arg *a = &args[i];
        switch (a->kind) {
        case HD_FUSED_ARG_BUFFER: {
            hd_devmem mem = a->buffer != NULL ? a->buffer->mem : NULL;
            s = hd__fused_set_arg(ctx, k, (uint32_t)i, sizeof mem, &mem);
            break;
        }
        case HD_FUSED_ARG_VALUE:
            s = hd__fused_set_arg(ctx, k, (uint32_t)i, a->size, a->value);
            break;
        case HD_FUSED_ARG_LOCAL:
            s = hd__fused_set_arg(ctx, k, (uint32_t)i, a->size, NULL);
            break;
        }
    }
    return s;
}

hd_status hd__fused_launch_grid(hd_fused *f, hd_context *ctx, hd_kernel *k, const size_t groups[2],
                                size_t group, const hd_fused_arg *args, int count)
{
    hd_status s = set_args(ctx, k, args, count);
    return s == HD_OK ? hd__rt_launch(f->rt, ctx, k, groups, group) : s;
}

hd_status hd__fused_resident_groups(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t group,
                                    size_t *out)
{
    if (f->resident_emulated) {
        *out = 1;
        return HD_OK;
    }
    hd_status s = hd__rt_resident_groups(f->rt, ctx, k, group, out);
    if (f->resident_cap > 0 && *out > f->resident_cap)
        *out = f->resident_cap;
    return s;
}

hd_status hd__fused_launch_resident_args(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t groups,
                                         size_t group, const hd_fused_arg *args, int count)
{
    hd_status s = set_args(ctx, k, args, count);
    if (s != HD_OK)
        return s;
    const size_t grid[2] = {groups, 1};
    if (f->resident_emulated && groups <= 1) /* one group runs alone on any runtime */
        return hd__rt_launch(f->rt, ctx, k, grid, group);
    return hd__rt_launch_resident(f->rt, ctx, k, grid, group);
}

hd_status hd__fused_launch_cluster_args(hd_fused *f, hd_context *ctx, hd_kernel *k, size_t groups,
                                        size_t group, size_t cluster, const hd_fused_arg *args,
                                        int count)
{
    hd_status s = set_args(ctx, k, args, count);
    return s == HD_OK ? hd__rt_launch_cluster(f->rt, ctx, k, (const size_t[2]){groups, 1}, group,
                                              cluster)
                      : s;
}

hd_status hd__fused_buffer(hd_fused *f, hd_context *ctx, size_t bytes,
                           struct hd_device_buffer **out)
{
    return hd__rt_buffer_acquire(f->rt, ctx, bytes > 0 ? bytes : 1, out);
}

hd_status hd__fused_upload(hd_fused *f, hd_context *ctx, const void *src, size_t bytes,
                           struct hd_device_buffer **out)
{
    hd_status s = hd__fused_buffer(f, ctx, bytes, out);
    if (s == HD_OK && bytes > 0 && (s = hd__rt_upload(f->rt, ctx, *out, src, bytes)) != HD_OK) {
        hd__rt_buffer_release(f->rt, *out);
        *out = NULL;
    }
    return s;
}

hd_status hd__fused_ids(hd_fused *f, hd_context *ctx, const hd_step_args *a,
                        const struct hd_device_buffer **ids, struct hd_device_buffer **owned)
{
    *owned = NULL;
    if (a->id_tensor != NULL) {
        *ids = a->id_tensor->state->device;
        return HD_OK;
    }
    hd_status s = hd__fused_upload(f, ctx, a->ids, a->rows * sizeof *a->ids, owned);
    *ids = *owned;
    return s;
}

hd_status hd__fused_copy(hd_fused *f, hd_context *ctx, const struct hd_device_buffer *dst,
                         size_t dst_offset, const struct hd_device_buffer *src, size_t src_offset,
                         size_t bytes)
{
    return hd__rt_copy(f->rt, ctx, dst->mem, dst_offset, src->mem, src_offset, bytes);
}

void hd__fused_buffer_release(hd_fused *f, struct hd_device_buffer *buf)
{
    hd__rt_buffer_release(f->rt, buf);
}
