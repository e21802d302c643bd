/*
 * The CUDA driver runtime (runtime.c): one device's primary context, one stream, a pool of
 * device memory, and the OpenCL C kernels the OpenCL runtime compiles, their PTX rewritten
 * (ptx.h) and loaded as modules. backends/runtime/ is its one user: the functions mean what
 * the hd__rt_ functions of the same name mean (backends/runtime/runtime.h).
 */
#ifndef HD_BACKENDS_CUDA_CUDA_H
#define HD_BACKENDS_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/runtime/runtime.h"

struct hd_cl_runtime;
typedef struct hd_cuda hd_cuda;
typedef struct hd_cuda_kernel hd_cuda_kernel;

/* Opens the CUDA device that is the OpenCL runtime's device (matched by PCI address), which
 * keeps compiling the kernels, and runs a probe kernel through the whole path (compile,
 * rewrite, load, launch with a __local argument, read back). fail_probe makes the probe fail
 * as a wrong result would (fault injection, for tests). HD_ERR_BACKEND_UNAVAILABLE with the
 * reason in the context's message where CUDA cannot run here. */
hd_status hd__cuda_open(hd_context *ctx, struct hd_cl_runtime *compiler, bool fail_probe,
                        hd_cuda **out);
void hd__cuda_close(hd_cuda *cu); /* waits; NULL is a no-op */
void hd__cuda_info(const hd_cuda *cu, hd_runtime_info *out);
hd_status hd__cuda_tensor_map(hd_cuda *cu, hd_context *ctx, const hd_rt_tensor_map_desc *desc,
                              hd_devmem *out);

hd_status hd__cuda_finish(hd_cuda *cu, hd_context *ctx);
hd_status hd__cuda_buffer_acquire(hd_cuda *cu, hd_context *ctx, size_t bytes,
                                  struct hd_device_buffer **out);
void hd__cuda_buffer_release(hd_cuda *cu, struct hd_device_buffer *buf);
hd_status hd__cuda_scratch_create(hd_cuda *cu, hd_context *ctx, size_t bytes, const char *what,
                                  hd_devmem *out);
void hd__cuda_scratch_free(hd_cuda *cu, hd_devmem mem);
hd_status hd__cuda_upload(hd_cuda *cu, hd_context *ctx, hd_devmem dst, const void *src,
                          size_t bytes);
hd_status hd__cuda_download(hd_cuda *cu, hd_context *ctx, hd_devmem src, void *dst, size_t bytes);
hd_status hd__cuda_zero(hd_cuda *cu, hd_context *ctx, hd_devmem mem, size_t bytes);
hd_status hd__cuda_copy(hd_cuda *cu, hd_context *ctx, hd_devmem dst, size_t dst_offset,
                        hd_devmem src, size_t src_offset, size_t bytes);
void *hd__cuda_host_alloc(hd_cuda *cu, size_t bytes);
void hd__cuda_host_free(hd_cuda *cu, void *p);

hd_status hd__cuda_kernel(hd_cuda *cu, hd_context *ctx, const char *source, const char *options,
                          const char *name, hd_cuda_kernel **out);
size_t hd__cuda_kernel_max_group(const hd_cuda_kernel *k);
hd_status hd__cuda_set_arg(hd_context *ctx, hd_cuda_kernel *k, unsigned index, size_t size,
                           const void *value);
hd_status hd__cuda_launch(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k, const size_t groups[2],
                          size_t group);
hd_status hd__cuda_launch_cluster(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k,
                                  const size_t groups[2], size_t group, size_t cluster);
hd_status hd__cuda_launch_resident(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k,
                                   const size_t groups[2], size_t group);
hd_status hd__cuda_resident_groups(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k, size_t group,
                                   size_t *out);

bool hd__cuda_vendor_gemm_ready(hd_cuda *cu, hd_context *ctx);
hd_status hd__cuda_vendor_gemm(hd_cuda *cu, hd_context *ctx, const hd_rt_gemm *g);
hd_status hd__cuda_vendor_gemm_prepare(hd_cuda *cu, hd_context *ctx, const hd_rt_gemm *g);

void hd__cuda_capture_begin(hd_cuda *cu);
hd_status hd__cuda_capture_end(hd_cuda *cu, hd_context *ctx, double *seconds);

#endif
