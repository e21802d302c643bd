/*
 * The device runtime: what the device backends and the tensors' device place ask of a GPU,
 * whichever driver runs it. Two implementations sit under it:
 *
 *   - OpenCL (backends/opencl/): every vendor; CLBlast runs on it;
 *   - the CUDA driver (backends/cuda/): NVIDIA alone. The kernels stay OpenCL C: NVIDIA's
 *     OpenCL compiler builds them (through the OpenCL runtime, its program cache included),
 *     their PTX is rewritten (backends/cuda/ptx.h) and loaded into the device's CUDA context,
 *     where they share one stream with NVIDIA's libraries and a work-group may take the
 *     multiprocessor's whole shared memory as dynamic local memory.
 *
 * hd__rt_open chooses (HD_RUNTIME / the context option: "auto", "opencl", "cuda"): on an
 * NVIDIA GPU where libcuda loads and a probe kernel gives the right results, CUDA; anything
 * else, or any failure on the way, OpenCL, with a note saying why. The backends' host code
 * calls these functions and never a driver's own.
 */
#ifndef HD_BACKENDS_RUNTIME_RUNTIME_H
#define HD_BACKENDS_RUNTIME_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

typedef struct hd_runtime hd_runtime;

/* Device memory as a kernel argument takes it: a cl_mem on OpenCL, a device address on CUDA;
 * 8 bytes on both. NULL is no memory. */
typedef struct hd_devmem_ *hd_devmem;

/* A device allocation from the runtime's pool. bytes is the size asked for; the allocation
 * may be larger (pooled sizes are rounded up). */
struct hd_device_buffer {
    hd_devmem mem;
    size_t bytes;
    size_t capacity;
};

/* A kernel, built once and owned by the runtime. */
typedef struct hd_kernel hd_kernel;

typedef enum hd_runtime_kind {
    HD_RUNTIME_OPENCL,
    HD_RUNTIME_CUDA,
} hd_runtime_kind;

/* What the backends plan their launches by. */
typedef struct hd_runtime_info {
    hd_runtime_kind kind;
    size_t max_group;       /* work-items of one group at most */
    size_t compute_units;   /* multiprocessors: how many groups fill the device */
    size_t local_mem;       /* local memory one group may hold, static and dynamic together */
    size_t static_local;    /* of it, what a kernel may declare in its source (OpenCL's limit) */
    size_t param_bytes;     /* a kernel's arguments together at most, in bytes */
    int nv_major, nv_minor; /* NVIDIA's compute capability; 0 elsewhere */
    bool nv_options;        /* the compiler takes NVIDIA's options (cl_nv_compiler_options) */
    bool tensor_maps;       /* hd__rt_tensor_map works: the CUDA runtime on Hopper and later */
    size_t clusters;        /* work-groups of one thread-block cluster at most (co-scheduled,
                               one barrier across them: hd__rt_launch_cluster); 0: none, as on
                               OpenCL */
    bool resident;          /* hd__rt_launch_resident runs every group of a launch at once
                               (CUDA's cooperative launches); false on OpenCL, which promises
                               nothing of the kind */
    bool dependent_launch;  /* programs are built with HD_DEPENDENT_LAUNCH = 1, and a kernel
                               whose body holds griddepcontrol.wait (the fused kernels'
                               AFTER_PREVIOUS_LAUNCH(), launch.cl) may begin while the launch
                               before it ends: the CUDA runtime on sm_90 and later */
} hd_runtime_info;

/* Work-groups per cluster a launch asks for at most: the size every Hopper device runs (CUDA's
 * portable cluster size). */
#define HD_RT_CLUSTER_MAX 8

/* Opens the device spec names (NULL: the first GPU, else the first device; as OpenCL lists
 * them) on the runtime choice names ("auto", "opencl", "cuda"; NULL or "": $HD_RUNTIME, else
 * auto). "cuda" where CUDA cannot run here falls back to OpenCL with a note, as auto does
 * (auto notes it on NVIDIA's devices alone). fail_probe makes the CUDA runtime's probe kernel
 * fail (fault injection, for tests). HD_ERR_BACKEND_UNAVAILABLE with a message when spec is
 * NULL and there is no device; HD_ERR_INVALID_ARGUMENT on a choice it does not know. */
hd_status hd__rt_open(hd_context *ctx, const char *spec, const char *choice, bool fail_probe,
                      hd_runtime **out);
void hd__rt_close(hd_runtime *rt); /* waits for the device; NULL is a no-op */

const hd_runtime_info *hd__rt_info(const hd_runtime *rt);
const char *hd__rt_kind_name(const hd_runtime *rt); /* "opencl" or "cuda" */
const char *hd__rt_device_name(const hd_runtime *rt);
const char *hd__rt_driver_version(const hd_runtime *rt);
/* The OpenCL platform's name, with " (CUDA runtime)" after it where the device runs on CUDA:
 * the tuning cache's key, so that each runtime keeps its own timings. */
const char *hd__rt_platform_name(const hd_runtime *rt);
bool hd__rt_is_gpu(const hd_runtime *rt);
/* The OpenCL runtime the device runs on (CLBlast's), NULL while it runs on CUDA. */
struct hd_cl_runtime *hd__rt_opencl(hd_runtime *rt);

/* Waits for the device; a late failure is reported here. */
hd_status hd__rt_finish(hd_runtime *rt, hd_context *ctx);

/* Device memory from the pool, released back to it; contents undefined. */
hd_status hd__rt_buffer_acquire(hd_runtime *rt, hd_context *ctx, size_t bytes,
                                struct hd_device_buffer **out);
void hd__rt_buffer_release(hd_runtime *rt, struct hd_device_buffer *buf); /* NULL: no-op */
/* Memory a backend keeps across calls outside the pool, reserved now (a full device says so
 * here, not at a later launch), the pool's idle buffers handed back and the allocation tried
 * again where the device is full; NULL and the error said, naming what, on failure. Freed by
 * hd__rt_scratch_free once the launches queued on it no longer need it (it waits for none:
 * the memory goes back after them). */
hd_status hd__rt_scratch_create(hd_runtime *rt, hd_context *ctx, size_t bytes, const char *what,
                                hd_devmem *out);
void hd__rt_scratch_free(hd_runtime *rt, hd_devmem mem); /* NULL: no-op */

/* Copies. Upload returns once src may be reused; download waits for the data (and for all
 * earlier work). zero and copy are queued. Offsets and sizes in bytes. */
hd_status hd__rt_upload(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                        const void *src, size_t bytes);
hd_status hd__rt_download(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf, void *dst,
                          size_t bytes);
hd_status hd__rt_zero(hd_runtime *rt, hd_context *ctx, hd_devmem mem, size_t bytes);
hd_status hd__rt_copy(hd_runtime *rt, hd_context *ctx, hd_devmem dst, size_t dst_offset,
                      hd_devmem src, size_t src_offset, size_t bytes);

/* Pinned host memory of at least bytes, or NULL where the runtime cannot give it (the caller
 * then takes ordinary memory); freed before the runtime closes. Neither waits for the device. */
void *hd__rt_host_alloc(hd_runtime *rt, size_t bytes);
void hd__rt_host_free(hd_runtime *rt, void *p);

/* The kernel name of the program (source, options), building the program on first use (the
 * OpenCL runtime's memory and disk caches; on CUDA the PTX rewritten and loaded once). A
 * failed build returns HD_ERR_BUILD with the compiler's log, or on CUDA the construct the
 * rewrite refused, in the context's message. source is recognised by its address first: its
 * text must not change while the runtime lives. The runtime adds -D HD_DEPENDENT_LAUNCH=1 to
 * options where info.dependent_launch; options and that fit in HD_RT_OPTIONS_CAPACITY. */
#define HD_RT_OPTIONS_CAPACITY 512
hd_status hd__rt_kernel(hd_runtime *rt, hd_context *ctx, const char *source, const char *options,
                        const char *name, hd_kernel **out);
/* Work-items of one group the kernel runs with at most. */
size_t hd__rt_kernel_max_group(const hd_kernel *k);
/* Queues the programs of (source, options) on the build-ahead workers (hd__rt_build_ahead_start,
 * the tuner's), so that the first hd__rt_kernel finds them built. */
void hd__rt_build_ahead(hd_runtime *rt, const char *source, const char *options);

/* Sets argument index of k: size bytes from value, or where value is NULL, a __local array of
 * size bytes (dynamic local memory). Arguments stay set until set again. */
hd_status hd__rt_set_arg(hd_context *ctx, hd_kernel *k, unsigned index, size_t size,
                         const void *value);
/* Queues k over groups[0] x groups[1] work-groups of group work-items each (a group is
 * group x 1: get_global_id(0) runs to groups[0] * group, get_global_id(1) to groups[1]). */
hd_status hd__rt_launch(hd_runtime *rt, hd_context *ctx, hd_kernel *k, const size_t groups[2],
                        size_t group);
/* As hd__rt_launch, the groups in thread-block clusters of `cluster` consecutive groups along
 * dimension 0 (groups[0] a multiple of it), which the device runs at once, so that their
 * work-items may wait for each other (barrier.cluster). HD_ERR_UNSUPPORTED where the runtime
 * has no clusters of that size (info.clusters). cluster 1 is hd__rt_launch. */
hd_status hd__rt_launch_cluster(hd_runtime *rt, hd_context *ctx, hd_kernel *k,
                                const size_t groups[2], size_t group, size_t cluster);
/* The work-groups of group work-items of k (its __local arguments as set) that the device runs
 * all at once: 0 where the runtime cannot promise it (info.resident false). */
hd_status hd__rt_resident_groups(hd_runtime *rt, hd_context *ctx, hd_kernel *k, size_t group,
                                 size_t *out);
/* As hd__rt_launch, every group running at once, so that groups may wait for each other through
 * global memory: at most hd__rt_resident_groups of them, else the launch fails.
 * HD_ERR_UNSUPPORTED where info.resident is false. */
hd_status hd__rt_launch_resident(hd_runtime *rt, hd_context *ctx, hd_kernel *k,
                                 const size_t groups[2], size_t group);

/* An fp32 tensor of rank 1 to 3 as the Tensor Memory Accelerator (Hopper's bulk tensor copies,
 * cp.async.bulk.tensor) reads it: its sizes innermost first, the byte strides of dimensions 1
 * and 2, the box one copy moves, in the 128-byte swizzle, zeros outside the tensor. */
typedef struct hd_rt_tensor_map_desc {
    hd_devmem mem;
    unsigned rank;
    uint64_t dim[3];
    uint64_t stride[2];
    uint32_t box[3];
} hd_rt_tensor_map_desc;

/* The device address of the tensor map of desc, a kernel argument as device memory is. Maps are
 * kept by their descriptions in a table of device memory, so that calls on the same tensors
 * encode and upload none; a new map is copied into the table on the stream, ordered after the
 * launches queued before it. HD_ERR_UNSUPPORTED where the runtime has none (info.tensor_maps
 * false) or the driver refuses desc (an address or stride not 16-byte aligned, a box too
 * large). */
hd_status hd__rt_tensor_map(hd_runtime *rt, hd_context *ctx, const hd_rt_tensor_map_desc *desc,
                            hd_devmem *out);

/* A product for the vendor's GEMM library: c (m x n, row-major, ldc) = alpha * op(a) * op(b) +
 * beta * c, a m x k (stored k x m where trans_a), b k x n (stored n x k where trans_b), each
 * row-major with its leading dimension; beta = 0 ignores c's contents. */
typedef struct hd_rt_gemm {
    size_t m, n, k;
    hd_devmem a, b, c;
    size_t lda, ldb, ldc;
    bool trans_a, trans_b;
    float alpha, beta;
    hd_precision precision; /* fp32 (fp32 FMAs) or tf32 */
} hd_rt_gemm;

/* Whether hd__rt_vendor_gemm runs here: the CUDA runtime where cuBLASLt loads (tried once, on
 * the first ask; where it cannot, a note says why and the answer stays false). False on OpenCL. */
bool hd__rt_vendor_gemm_ready(hd_runtime *rt, hd_context *ctx);
/* Queues g on the vendor's GEMM (cuBLASLt, on the CUDA runtime's stream, in order with the
 * kernels), its workspace the runtime's. HD_ERR_UNSUPPORTED, with a message, where there is none
 * (hd__rt_vendor_gemm_ready false), for fp32x3, or for a shape it has no algorithm for; nothing
 * is queued on failure. */
hd_status hd__rt_vendor_gemm(hd_runtime *rt, hd_context *ctx, const hd_rt_gemm *g);
/* Everything of hd__rt_vendor_gemm that can refuse g (an algorithm for its shape, precision and
 * addresses' alignment, which it keeps for the call), queueing nothing: an op of several
 * products prepares each before it writes an output. */
hd_status hd__rt_vendor_gemm_prepare(hd_runtime *rt, hd_context *ctx, const hd_rt_gemm *g);

/* Device time of what is queued between capture_begin and capture_end: from the first
 * command's start to the last one's end (capture_end waits). capture_mark opens the span
 * before a library call that queues several commands of its own (CLBlast), so that the span
 * holds them all. */
void hd__rt_capture_begin(hd_runtime *rt);
hd_status hd__rt_capture_mark(hd_runtime *rt, hd_context *ctx);
hd_status hd__rt_capture_end(hd_runtime *rt, hd_context *ctx, double *seconds);

/* The build-ahead workers (the OpenCL runtime's; the programs they build serve both
 * runtimes). */
hd_status hd__rt_build_ahead_start(hd_runtime *rt, hd_context *ctx, unsigned workers);
void hd__rt_build_ahead_cancel(hd_runtime *rt, bool wait);

#endif
