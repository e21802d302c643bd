/*
 * The device runtime (runtime.h): the choice between OpenCL and the CUDA driver, and each
 * function handed to the one the device runs on. OpenCL is always open: it names the device
 * and compiles every kernel, for either runtime.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/opencl/runtime.h"
#include "backends/runtime/pool.h"
#include "backends/runtime/runtime.h"
#include "core/error.h"
#ifdef HD_HAVE_CUDA_RUNTIME
#include "backends/cuda/cuda.h"
#endif

struct hd_kernel {
    cl_kernel cl;
#ifdef HD_HAVE_CUDA_RUNTIME
    struct hd_cuda_kernel *cuda;
#endif
    size_t max_group;
    struct hd_kernel *next;
};

struct hd_runtime {
    struct hd_cl_runtime *cl;
#ifdef HD_HAVE_CUDA_RUNTIME
    struct hd_cuda *cuda; /* NULL: the device runs on OpenCL */
#endif
    hd_runtime_info info;
    char platform[320]; /* the OpenCL platform, and on CUDA the runtime too */
    struct hd_kernel *kernels;
};

#ifdef HD_HAVE_CUDA_RUNTIME
#define ON_CUDA(rt) ((rt)->cuda != NULL)
#else
#define ON_CUDA(rt) false
#endif

/* The CUDA runtime where the choice and the device allow it, else a note and OpenCL. */
static void choose_cuda(hd_runtime *rt, hd_context *ctx, const char *choice, bool fail_probe)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    hd_status s = hd__cuda_open(ctx, rt->cl, fail_probe, &rt->cuda);
    if (s == HD_OK) {
        hd__cuda_info(rt->cuda, &rt->info);
        snprintf(rt->platform, sizeof rt->platform, "%s (CUDA runtime)",
                 hd__cl_platform_name(rt->cl));
        hd__note(ctx, "device runtime: CUDA (%s)", hd__cl_device_name(rt->cl));
        return;
    }
    /* quiet on every other vendor's device unless CUDA was asked for */
    bool asked = strcasecmp(choice, "cuda") == 0;
    if (ctx != NULL && (asked || strstr(hd__cl_platform_name(rt->cl), "NVIDIA") != NULL))
        hd__note(ctx, "device runtime: OpenCL, as the CUDA runtime cannot run here: %s",
                 hd__report(ctx)->last_error);
    hd__error_clear(ctx);
#else
    (void)fail_probe;
    if (strcasecmp(choice, "cuda") == 0)
        hd__note(ctx, "device runtime: OpenCL, as this build has no CUDA runtime");
    (void)rt;
#endif
}

hd_status hd__rt_open(hd_context *ctx, const char *spec, const char *choice, bool fail_probe,
                      hd_runtime **out)
{
    *out = NULL;
    if (choice == NULL || choice[0] == '\0')
        choice = getenv("HD_RUNTIME");
    if (choice == NULL || choice[0] == '\0')
        choice = "auto";
    if (strcasecmp(choice, "auto") != 0 && strcasecmp(choice, "opencl") != 0 &&
        strcasecmp(choice, "cuda") != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "device runtime '%s': expected auto, opencl or cuda", choice);
    hd_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "the device runtime's state");
    hd_status s = hd__cl_runtime_create(ctx, spec, &rt->cl);
    if (s == HD_OK)
        s = hd__cl_runtime_info(rt->cl, ctx, &rt->info);
    if (s != HD_OK) {
        hd__rt_close(rt);
        return s;
    }
    snprintf(rt->platform, sizeof rt->platform, "%s", hd__cl_platform_name(rt->cl));
    if (strcasecmp(choice, "opencl") != 0)
        choose_cuda(rt, ctx, choice, fail_probe);
    *out = rt;
    return HD_OK;
}

void hd__rt_close(hd_runtime *rt)
{
    if (rt == NULL)
        return;
    while (rt->kernels != NULL) {
        struct hd_kernel *k = rt->kernels;
        rt->kernels = k->next;
        free(k); /* the drivers' kernels belong to their runtimes */
    }
#ifdef HD_HAVE_CUDA_RUNTIME
    hd__cuda_close(rt->cuda);
#endif
    hd__cl_runtime_destroy(rt->cl);
    free(rt);
}

const hd_runtime_info *hd__rt_info(const hd_runtime *rt)
{
    return &rt->info;
}

const char *hd__rt_kind_name(const hd_runtime *rt)
{
    return ON_CUDA(rt) ? "cuda" : "opencl";
}

const char *hd__rt_device_name(const hd_runtime *rt)
{
    return hd__cl_device_name(rt->cl);
}

const char *hd__rt_driver_version(const hd_runtime *rt)
{
    return hd__cl_driver_version(rt->cl);
}

const char *hd__rt_platform_name(const hd_runtime *rt)
{
    return rt->platform;
}

bool hd__rt_is_gpu(const hd_runtime *rt)
{
    return hd__cl_device_is_gpu(rt->cl);
}

struct hd_cl_runtime *hd__rt_opencl(hd_runtime *rt)
{
    return ON_CUDA(rt) ? NULL : rt->cl;
}

hd_status hd__rt_finish(hd_runtime *rt, hd_context *ctx)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_finish(rt->cuda, ctx);
#endif
    return hd__cl_finish(rt->cl, ctx);
}

hd_status hd__rt_buffer_acquire(hd_runtime *rt, hd_context *ctx, size_t bytes,
                                struct hd_device_buffer **out)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_buffer_acquire(rt->cuda, ctx, bytes, out);
#endif
    return hd__cl_buffer_acquire(rt->cl, ctx, bytes, out);
}

void hd__rt_buffer_release(hd_runtime *rt, struct hd_device_buffer *buf)
{
    if (buf == NULL)
        return;
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd__cuda_buffer_release(rt->cuda, buf);
        return;
    }
#endif
    hd__cl_buffer_release(rt->cl, buf);
}

hd_status hd__rt_scratch_create(hd_runtime *rt, hd_context *ctx, size_t bytes, const char *what,
                                hd_devmem *out)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_scratch_create(rt->cuda, ctx, bytes, what, out);
#endif
    cl_mem mem = NULL;
    hd_status s = hd__cl_scratch_create(rt->cl, ctx, bytes, what, &mem);
    *out = (hd_devmem)(void *)mem;
    return s;
}

void hd__rt_scratch_free(hd_runtime *rt, hd_devmem mem)
{
    if (mem == NULL)
        return;
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd__cuda_scratch_free(rt->cuda, mem);
        return;
    }
#endif
    hd__cl_scratch_free(rt->cl, hd__cl_mem(mem));
}

hd_status hd__rt_upload(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                        const void *src, size_t bytes)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd_status s = hd__buffer_check_range(ctx, buf, bytes, "upload");
        return s != HD_OK ? s : hd__cuda_upload(rt->cuda, ctx, buf->mem, src, bytes);
    }
#endif
    return hd__cl_upload(rt->cl, ctx, buf, src, bytes); /* which checks the range itself */
}

hd_status hd__rt_download(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf, void *dst,
                          size_t bytes)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd_status s = hd__buffer_check_range(ctx, buf, bytes, "download");
        return s != HD_OK ? s : hd__cuda_download(rt->cuda, ctx, buf->mem, dst, bytes);
    }
#endif
    return hd__cl_download(rt->cl, ctx, buf, dst, bytes); /* which checks the range itself */
}

hd_status hd__rt_tensor_map(hd_runtime *rt, hd_context *ctx, const hd_rt_tensor_map_desc *desc,
                            hd_devmem *out)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_tensor_map(rt->cuda, ctx, desc, out);
#endif
    (void)rt;
    (void)desc;
    *out = NULL;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "tensor maps need the CUDA runtime (this device runs on OpenCL)");
}

bool hd__rt_vendor_gemm_ready(hd_runtime *rt, hd_context *ctx)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_vendor_gemm_ready(rt->cuda, ctx);
#endif
    (void)rt;
    (void)ctx;
    return false;
}

hd_status hd__rt_vendor_gemm_prepare(hd_runtime *rt, hd_context *ctx, const hd_rt_gemm *g)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_vendor_gemm_prepare(rt->cuda, ctx, g);
#endif
    (void)rt;
    (void)g;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "the vendor GEMM needs the CUDA runtime (this device runs on OpenCL)");
}

hd_status hd__rt_vendor_gemm(hd_runtime *rt, hd_context *ctx, const hd_rt_gemm *g)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_vendor_gemm(rt->cuda, ctx, g);
#endif
    (void)rt;
    (void)g;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "the vendor GEMM needs the CUDA runtime (this device runs on OpenCL)");
}

hd_status hd__rt_zero(hd_runtime *rt, hd_context *ctx, hd_devmem mem, size_t bytes)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_zero(rt->cuda, ctx, mem, bytes);
#endif
    return hd__cl_zero(rt->cl, ctx, hd__cl_mem(mem), bytes);
}

hd_status hd__rt_copy(hd_runtime *rt, hd_context *ctx, hd_devmem dst, size_t dst_offset,
                      hd_devmem src, size_t src_offset, size_t bytes)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_copy(rt->cuda, ctx, dst, dst_offset, src, src_offset, bytes);
#endif
    return hd__cl_copy(rt->cl, ctx, hd__cl_mem(dst), dst_offset, hd__cl_mem(src), src_offset,
                       bytes);
}

void *hd__rt_host_alloc(hd_runtime *rt, size_t bytes)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_host_alloc(rt->cuda, bytes);
#endif
    return hd__cl_host_alloc(rt->cl, bytes);
}

void hd__rt_host_free(hd_runtime *rt, void *p)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd__cuda_host_free(rt->cuda, p);
        return;
    }
#endif
    hd__cl_host_free(rt->cl, p);
}

/* The options a program is built with: the caller's, and where launches may depend on each
 * other programmatically, HD_DEPENDENT_LAUNCH = 1 (the fused kernels' launch.cl). false where
 * they do not fit in cap. */
static bool built_with(const hd_runtime *rt, const char *options, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s%s", options,
                     rt->info.dependent_launch ? " -D HD_DEPENDENT_LAUNCH=1" : "");
    return n >= 0 && (size_t)n < cap;
}

hd_status hd__rt_kernel(hd_runtime *rt, hd_context *ctx, const char *source, const char *options,
                        const char *name, hd_kernel **out)
{
    char all[HD_RT_OPTIONS_CAPACITY];
    if (!built_with(rt, options, all, sizeof all))
        return hd__error(ctx, HD_ERR_INTERNAL, "build options too long: %s", options);
    options = all;
    struct hd_kernel *k = calloc(1, sizeof *k);
    if (k == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "a kernel record");
    hd_status s;
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        s = hd__cuda_kernel(rt->cuda, ctx, source, options, name, &k->cuda);
        if (s == HD_OK)
            k->max_group = hd__cuda_kernel_max_group(k->cuda);
    } else
#endif
    {
        cl_program program;
        s = hd__cl_program(rt->cl, ctx, source, options, &program);
        if (s == HD_OK)
            s = hd__cl_kernel(rt->cl, ctx, program, name, &k->cl);
        if (s == HD_OK)
            s = hd__cl_kernel_max_group(rt->cl, ctx, k->cl, &k->max_group);
    }
    if (s != HD_OK) {
        free(k);
        return s;
    }
    for (struct hd_kernel *known = rt->kernels; known != NULL; known = known->next) {
#ifdef HD_HAVE_CUDA_RUNTIME
        bool same = known->cuda == k->cuda && known->cl == k->cl;
#else
        bool same = known->cl == k->cl;
#endif
        if (same) { /* the drivers' runtimes keep each kernel once: so does this list */
            free(k);
            *out = known;
            return HD_OK;
        }
    }
    k->next = rt->kernels;
    rt->kernels = k;
    *out = k;
    return HD_OK;
}

size_t hd__rt_kernel_max_group(const hd_kernel *k)
{
    return k->max_group;
}

void hd__rt_build_ahead(hd_runtime *rt, const char *source, const char *options)
{
    char all[HD_RT_OPTIONS_CAPACITY];
    if (built_with(rt, options, all, sizeof all)) /* else hd__rt_kernel will say so */
        hd__cl_build_ahead(rt->cl, source, all);
}

hd_status hd__rt_set_arg(hd_context *ctx, hd_kernel *k, unsigned index, size_t size,
                         const void *value)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (k->cuda != NULL)
        return hd__cuda_set_arg(ctx, k->cuda, index, size, value);
#endif
    return hd__cl_set_arg(ctx, k->cl, index, size, value);
}

hd_status hd__rt_launch(hd_runtime *rt, hd_context *ctx, hd_kernel *k, const size_t groups[2],
                        size_t group)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_launch(rt->cuda, ctx, k->cuda, groups, group);
#endif
    return hd__cl_launch(rt->cl, ctx, k->cl, groups, group);
}

hd_status hd__rt_launch_cluster(hd_runtime *rt, hd_context *ctx, hd_kernel *k,
                                const size_t groups[2], size_t group, size_t cluster)
{
    if (cluster <= 1)
        return hd__rt_launch(rt, ctx, k, groups, group);
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_launch_cluster(rt->cuda, ctx, k->cuda, groups, group, cluster);
#endif
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "%s runtime: no thread-block clusters (a launch in clusters of %zu)",
                     hd__rt_kind_name(rt), cluster);
}

hd_status hd__rt_resident_groups(hd_runtime *rt, hd_context *ctx, hd_kernel *k, size_t group,
                                 size_t *out)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_resident_groups(rt->cuda, ctx, k->cuda, group, out);
#endif
    (void)rt;
    (void)ctx;
    (void)k;
    (void)group;
    *out = 0;
    return HD_OK;
}

hd_status hd__rt_launch_resident(hd_runtime *rt, hd_context *ctx, hd_kernel *k,
                                 const size_t groups[2], size_t group)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_launch_resident(rt->cuda, ctx, k->cuda, groups, group);
#endif
    (void)k;
    (void)groups;
    (void)group;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "%s runtime: no launches whose groups all run at once", hd__rt_kind_name(rt));
}

void hd__rt_capture_begin(hd_runtime *rt)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt)) {
        hd__cuda_capture_begin(rt->cuda);
        return;
    }
#endif
    hd__cl_capture_begin(rt->cl);
}

hd_status hd__rt_capture_mark(hd_runtime *rt, hd_context *ctx)
{
    /* on CUDA every command opens the span itself: nothing runs outside the runtime's stream */
    return ON_CUDA(rt) ? HD_OK : hd__cl_capture_mark(rt->cl, ctx);
}

hd_status hd__rt_capture_end(hd_runtime *rt, hd_context *ctx, double *seconds)
{
#ifdef HD_HAVE_CUDA_RUNTIME
    if (ON_CUDA(rt))
        return hd__cuda_capture_end(rt->cuda, ctx, seconds);
#endif
    return hd__cl_capture_end(rt->cl, ctx, seconds);
}

hd_status hd__rt_build_ahead_start(hd_runtime *rt, hd_context *ctx, unsigned workers)
{
    return hd__cl_build_ahead_start(rt->cl, ctx, workers);
}

void hd__rt_build_ahead_cancel(hd_runtime *rt, bool wait)
{
    hd__cl_build_ahead_cancel(rt->cl, wait);
}
