/*
 * The CUDA driver runtime (cuda.h). Every entry point makes the device's primary context
 * current on the calling thread first: contexts may move between threads, and the primary
 * context is the one NVIDIA's libraries (cuBLASLt) and frameworks use, so memory passes
 * between them as it is.
 *
 * Ordering: everything is queued on the runtime's one stream, which does not synchronize with
 * the legacy default stream. A pooled allocation is reused without waiting, as on OpenCL: its
 * next owner's commands run after its last owner's on the same stream.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/blas.h"
#include "backends/cuda/cuda.h"
#include "backends/cuda/driver.h"
#include "backends/cuda/ptx.h"
#include "backends/opencl/runtime.h"
#include "backends/runtime/pool.h"
#include "core/env.h"
#include "core/error.h"

/* The alignment of each __local argument in dynamic shared memory, as ptx.c declares its
 * base. */
#define HD_CUDA_LOCAL_ALIGN 128
/* A kernel's parameters at most: the driver API's classic limit (later drivers allow more for
 * newer PTX, which the OpenCL compiler's PTX does not declare). */
#define HD_CUDA_PARAM_BYTES 4096

/* Tensor maps in device memory: HD_CUDA_MAP_SLOTS of them, each map in one of the
 * HD_CUDA_MAP_WAYS slots of the set its description's hash names. */
#define HD_CUDA_MAP_BYTES 128
#define HD_CUDA_MAP_SLOTS 2048
#define HD_CUDA_MAP_WAYS  4
/* words of a description: address, rank, 3 sizes, 2 strides, 3 boxes */
#define HD_CUDA_MAP_KEY 10

/* The description a slot's map was encoded from (the map is a function of it alone). */
struct map_slot {
    uint64_t key[HD_CUDA_MAP_KEY];
    bool used;
};

/* A loaded module: the OpenCL program it was compiled as, and its rewrite's entries. */
typedef struct module {
    cl_program program;
    hd_cu_module module;
    hd_ptx_module ptx;
    struct module *next;
} module;

struct hd_cuda_kernel {
    hd_cu_function function;
    const hd_ptx_entry *entry;
    const module *from;
    char name[128];
    size_t max_group;
    size_t static_shared;
    size_t dynamic_allowed; /* dynamic shared memory the function may take without opting in */
    struct {                /* the last hd__cuda_resident_groups answer, and what it was for */
        bool known;
        size_t group, dynamic, groups;
    } resident;
    unsigned char *values;  /* each parameter's bytes, at offset[i] */
    size_t offset[HD_PTX_MAX_PARAMS];
    size_t local_bytes[HD_PTX_MAX_PARAMS]; /* a __local argument's size */
    bool set[HD_PTX_MAX_PARAMS];
    void *params[HD_PTX_MAX_PARAMS];
    struct hd_cuda_kernel *next;
};

/* Pinned host memory handed out, so that an upload from it waits (the copy reads it after the
 * call returns, where pageable memory is staged by the driver before). */
typedef struct pinned {
    void *p;
    size_t bytes;
    struct pinned *next;
} pinned;

struct hd_cuda {
    const hd_cuda_driver *d;
    hd_cu_device device;
    hd_cu_context context;
    hd_cu_stream stream;
    struct hd_cl_runtime *compiler;
    hd_runtime_info info;
    hd_pool pool;
    pinned *pinned;
    module *modules;
    hd_cuda_kernel *kernels;
    hd_cu_event start, end;
    bool capturing, started;
    /* tensor maps (hd__cuda_tensor_map): device slots of HD_CUDA_MAP_BYTES, their descriptions */
    hd_cu_ptr map_table;
    struct map_slot *map_slots;
    unsigned map_turn[HD_CUDA_MAP_SLOTS / HD_CUDA_MAP_WAYS];
    /* the vendor GEMM (hd__cuda_vendor_gemm): cuBLASLt, opened on the first ask, and the
     * workspace its algorithms share */
    bool blas_tried;
    hd_cublaslt *blas;
    hd_devmem blas_workspace;
};

static hd_status cu_error(const hd_cuda_driver *d, hd_context *ctx, hd_cu_result r,
                          const char *what)
{
    const char *name = NULL;
    if (d->cuGetErrorName(r, &name) != HD_CU_SUCCESS || name == NULL)
        name = "CUDA_ERROR_UNKNOWN";
    return hd__error(ctx,
                     r == HD_CU_ERROR_OUT_OF_MEMORY ? HD_ERR_DEVICE_OUT_OF_MEMORY : HD_ERR_DEVICE,
                     "%s failed: %s (%d)", what, name, r);
}

#define CHECK(cu, ctx, call, what)                                                                 \
    do {                                                                                           \
        hd_cu_result r_ = (call);                                                                  \
        if (r_ != HD_CU_SUCCESS)                                                                   \
            return cu_error((cu)->d, ctx, r_, what);                                               \
    } while (0)

static hd_cu_ptr ptr_of(hd_devmem mem)
{
    return (hd_cu_ptr)(uintptr_t)mem;
}

static hd_devmem mem_of(hd_cu_ptr ptr)
{
    return (hd_devmem)(uintptr_t)ptr;
}

static hd_status current(hd_cuda *cu, hd_context *ctx)
{
    CHECK(cu, ctx, cu->d->cuCtxSetCurrent(cu->context), "cuCtxSetCurrent");
    return HD_OK;
}

/* Opens the span of a capture before the first command queued in it. */
static void capture_open(hd_cuda *cu)
{
    if (cu->capturing && !cu->started)
        cu->started = cu->d->cuEventRecord(cu->start, cu->stream) == HD_CU_SUCCESS;
}

/* ---- memory ---- */

static hd_pool_result pool_alloc(void *owner, size_t bytes, hd_devmem *out)
{
    hd_cuda *cu = owner;
    hd_cu_ptr p = 0;
    hd_cu_result r = cu->d->cuMemAlloc_v2(&p, bytes);
    if (r != HD_CU_SUCCESS)
        return r == HD_CU_ERROR_OUT_OF_MEMORY ? HD_POOL_FULL : HD_POOL_FAILED;
    *out = mem_of(p);
    return HD_POOL_OK;
}

static void pool_free(void *owner, hd_devmem mem)
{
    hd_cuda *cu = owner;
    /* cuMemFree waits for the work queued on the memory: no launch reads freed memory */
    cu->d->cuMemFree_v2(ptr_of(mem));
}

hd_status hd__cuda_buffer_acquire(hd_cuda *cu, hd_context *ctx, size_t bytes,
                                  struct hd_device_buffer **out)
{
    hd_status s = current(cu, ctx);
    return s != HD_OK ? s : hd__pool_acquire(&cu->pool, ctx, bytes, out);
}

void hd__cuda_buffer_release(hd_cuda *cu, struct hd_device_buffer *buf)
{
    if (current(cu, NULL) == HD_OK)
        hd__pool_release(&cu->pool, buf);
}

hd_status hd__cuda_scratch_create(hd_cuda *cu, hd_context *ctx, size_t bytes, const char *what,
                                  hd_devmem *out)
{
    *out = NULL;
    hd_status s = current(cu, ctx);
    return s != HD_OK ? s : hd__pool_scratch(&cu->pool, ctx, bytes, what, out);
}

void hd__cuda_scratch_free(hd_cuda *cu, hd_devmem mem)
{
    if (mem != NULL && current(cu, NULL) == HD_OK)
        pool_free(cu, mem);
}

static bool is_pinned(const hd_cuda *cu, const void *p, size_t bytes)
{
    const char *c = p;
    for (const pinned *q = cu->pinned; q != NULL; q = q->next) {
        const char *base = q->p;
        if (c >= base && c < base + q->bytes)
            return true;
        if (c < base && c + bytes > base)
            return true;
    }
    return false;
}

hd_status hd__cuda_upload(hd_cuda *cu, hd_context *ctx, hd_devmem dst, const void *src,
                          size_t bytes)
{
    hd_status s = current(cu, ctx);
    if (s != HD_OK || bytes == 0)
        return s;
    /* not in a capture's span, as OpenCL's uploads are not: device time is the device's work */
    CHECK(cu, ctx, cu->d->cuMemcpyHtoDAsync_v2(ptr_of(dst), src, bytes, cu->stream),
          "cuMemcpyHtoDAsync");
    /* from pageable memory the driver has staged src when the call returns; pinned memory it
     * reads later, so the caller's src must stay until the copy ran */
    if (is_pinned(cu, src, bytes))
        CHECK(cu, ctx, cu->d->cuStreamSynchronize(cu->stream), "cuStreamSynchronize");
    return HD_OK;
}

hd_status hd__cuda_download(hd_cuda *cu, hd_context *ctx, hd_devmem src, void *dst, size_t bytes)
{
    hd_status s = current(cu, ctx);
    if (s != HD_OK || bytes == 0)
        return s;
    CHECK(cu, ctx, cu->d->cuMemcpyDtoHAsync_v2(dst, ptr_of(src), bytes, cu->stream),
          "cuMemcpyDtoHAsync");
    CHECK(cu, ctx, cu->d->cuStreamSynchronize(cu->stream), "cuStreamSynchronize");
    return HD_OK;
}

hd_status hd__cuda_zero(hd_cuda *cu, hd_context *ctx, hd_devmem mem, size_t bytes)
{
    hd_status s = current(cu, ctx);
    if (s != HD_OK || bytes == 0)
        return s;
    capture_open(cu);
    if (bytes % 4 == 0)
        CHECK(cu, ctx, cu->d->cuMemsetD32Async(ptr_of(mem), 0, bytes / 4, cu->stream),
              "cuMemsetD32Async");
    else
        CHECK(cu, ctx, cu->d->cuMemsetD8Async(ptr_of(mem), 0, bytes, cu->stream),
              "cuMemsetD8Async");
    return HD_OK;
}

hd_status hd__cuda_copy(hd_cuda *cu, hd_context *ctx, hd_devmem dst, size_t dst_offset,
                        hd_devmem src, size_t src_offset, size_t bytes)
{
    hd_status s = current(cu, ctx);
    if (s != HD_OK || bytes == 0)
        return s;
    capture_open(cu);
    CHECK(cu, ctx,
          cu->d->cuMemcpyDtoDAsync_v2(ptr_of(dst) + dst_offset, ptr_of(src) + src_offset, bytes,
                                      cu->stream),
          "cuMemcpyDtoDAsync");
    return HD_OK;
}

void *hd__cuda_host_alloc(hd_cuda *cu, size_t bytes)
{
    pinned *q = malloc(sizeof *q);
    void *p = NULL;
    if (q == NULL || current(cu, NULL) != HD_OK ||
        cu->d->cuMemAllocHost_v2(&p, bytes > 0 ? bytes : 1) != HD_CU_SUCCESS) {
        free(q);
        return NULL;
    }
    *q = (pinned){.p = p, .bytes = bytes, .next = cu->pinned};
    cu->pinned = q;
    return p;
}

void hd__cuda_host_free(hd_cuda *cu, void *p)
{
    for (pinned **q = &cu->pinned; *q != NULL; q = &(*q)->next) {
        if ((*q)->p == p) {
            pinned *gone = *q;
            *q = gone->next;
            free(gone);
            if (current(cu, NULL) == HD_OK)
                cu->d->cuMemFreeHost(p);
            return;
        }
    }
}

/* ---- kernels ---- */

static hd_status load_module(hd_cuda *cu, hd_context *ctx, cl_program program, module **out)
{
    for (module *m = cu->modules; m != NULL; m = m->next)
        if (m->program == program) {
            *out = m;
            return HD_OK;
        }
    bool failed = false;
    char *ptx = hd__cl_program_text(program, &failed);
    if (ptx == NULL)
        return hd__error(ctx, HD_ERR_BUILD, "CUDA runtime: the program's PTX could not be read");
    module *m = calloc(1, sizeof *m);
    char why[256];
    if (m == NULL || !hd__ptx_for_cuda(ptx, strlen(ptx), &m->ptx, why, sizeof why)) {
        free(ptx);
        free(m);
        return m == NULL ? hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CUDA runtime: a module record")
                         : hd__error(ctx, HD_ERR_BUILD,
                                     "CUDA runtime: the PTX rewrite refused the program: %s", why);
    }
    free(ptx);
    char log[2048] = "";
    int options[2] = {HD_CU_JIT_ERROR_LOG_BUFFER, HD_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[2] = {log, (void *)(uintptr_t)sizeof log};
    hd_cu_result r = cu->d->cuModuleLoadDataEx(&m->module, m->ptx.text, 2, options, values);
    if (r != HD_CU_SUCCESS) {
        hd__ptx_module_free(&m->ptx);
        free(m);
        const char *name = NULL;
        if (cu->d->cuGetErrorName(r, &name) != HD_CU_SUCCESS || name == NULL)
            name = "CUDA_ERROR_UNKNOWN";
        return hd__error(
            ctx, r == HD_CU_ERROR_OUT_OF_MEMORY ? HD_ERR_DEVICE_OUT_OF_MEMORY : HD_ERR_BUILD,
            "cuModuleLoadDataEx failed: %s (%d): %s", name, r, log[0] != '\0' ? log : "no log");
    }
    m->program = program;
    m->next = cu->modules;
    cu->modules = m;
    *out = m;
    return HD_OK;
}

static hd_status new_kernel(hd_cuda *cu, hd_context *ctx, module *m, const char *name,
                            hd_cuda_kernel **out)
{
    const hd_ptx_entry *entry = hd__ptx_entry(&m->ptx, name);
    if (entry == NULL)
        return hd__error(ctx, HD_ERR_INTERNAL, "CUDA runtime: no kernel %s in its program", name);
    hd_cuda_kernel *k = calloc(1, sizeof *k);
    if (k == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CUDA runtime: a kernel record");
    size_t total = 0;
    for (unsigned i = 0; i < entry->param_count; i++) {
        k->offset[i] = total;
        total += (entry->params[i].bytes + 15) / 16 * 16;
    }
    k->values = calloc(1, total > 0 ? total : 1);
    int threads = 0, shared = 0;
    hd_cu_result r = cu->d->cuModuleGetFunction(&k->function, m->module, name);
    if (r == HD_CU_SUCCESS)
        r = cu->d->cuFuncGetAttribute(&threads, HD_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                      k->function);
    if (r == HD_CU_SUCCESS)
        r = cu->d->cuFuncGetAttribute(&shared, HD_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->function);
    if (k->values == NULL || r != HD_CU_SUCCESS) {
        free(k->values);
        free(k);
        return r != HD_CU_SUCCESS ? cu_error(cu->d, ctx, r, "cuModuleGetFunction")
                                  : hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CUDA runtime: arguments");
    }
    for (unsigned i = 0; i < entry->param_count; i++)
        k->params[i] = k->values + k->offset[i];
    k->entry = entry;
    k->from = m;
    snprintf(k->name, sizeof k->name, "%s", name);
    k->max_group = (size_t)threads;
    k->static_shared = (size_t)shared;
    size_t default_limit = 48 * 1024;
    k->dynamic_allowed = default_limit > k->static_shared ? default_limit - k->static_shared : 0;
    k->next = cu->kernels;
    cu->kernels = k;
    *out = k;
    return HD_OK;
}

hd_status hd__cuda_kernel(hd_cuda *cu, hd_context *ctx, const char *source, const char *options,
                          const char *name, hd_cuda_kernel **out)
{
    hd_status s = current(cu, ctx);
    cl_program program = NULL;
    if (s == HD_OK)
        s = hd__cl_program(cu->compiler, ctx, source, options, &program);
    module *m = NULL;
    if (s == HD_OK)
        s = load_module(cu, ctx, program, &m);
    if (s != HD_OK)
        return s;
    for (hd_cuda_kernel *k = cu->kernels; k != NULL; k = k->next)
        if (k->from == m && strcmp(k->name, name) == 0) {
            *out = k;
            return HD_OK;
        }
    return new_kernel(cu, ctx, m, name, out);
}

size_t hd__cuda_kernel_max_group(const hd_cuda_kernel *k)
{
    return k->max_group;
}

hd_status hd__cuda_set_arg(hd_context *ctx, hd_cuda_kernel *k, unsigned index, size_t size,
                           const void *value)
{
    if (index >= k->entry->param_count)
        return hd__error(ctx, HD_ERR_INTERNAL, "CUDA runtime: %s has no argument %u", k->name,
                         index);
    const hd_ptx_param *p = &k->entry->params[index];
    /* value NULL is a __local array's size, or for a pointer to global memory, as in OpenCL, no
     * buffer */
    if ((p->local && value != NULL) || (!p->local && size != p->bytes))
        return hd__error(ctx, HD_ERR_INTERNAL,
                         "CUDA runtime: argument %u of %s takes %s, not %zu bytes", index, k->name,
                         p->local ? "a __local array's size" : "its value", size);
    if (p->local)
        k->local_bytes[index] = size;
    else if (value == NULL)
        memset(k->params[index], 0, size);
    else
        memcpy(k->params[index], value, size);
    k->set[index] = true;
    return HD_OK;
}

/* How a launch runs its groups: as the device frees room for them, in thread-block clusters,
 * or all at once (resident). */
typedef struct launch_form {
    size_t cluster; /* groups per cluster; 1: none */
    bool resident;
} launch_form;

/* The dynamic shared memory of k's __local arguments, each where any of its types may start
 * (tensor-core operands too); with offsets, their offsets written into its parameters. */
static size_t dynamic_bytes(hd_cuda_kernel *k, bool offsets)
{
    size_t dynamic = 0;
    for (unsigned i = 0; i < k->entry->param_count; i++) {
        if (!k->entry->params[i].local)
            continue;
        dynamic = (dynamic + HD_CUDA_LOCAL_ALIGN - 1) / HD_CUDA_LOCAL_ALIGN * HD_CUDA_LOCAL_ALIGN;
        uint64_t offset = dynamic;
        if (offsets && k->entry->params[i].bytes == 4) {
            uint32_t narrow = (uint32_t)offset;
            memcpy(k->params[i], &narrow, sizeof narrow);
        } else if (offsets) {
            memcpy(k->params[i], &offset, sizeof offset);
        }
        dynamic += k->local_bytes[i];
    }
    return dynamic;
}

static hd_status launch(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k, const size_t groups[2],
                        size_t group, launch_form form)
{
    for (unsigned i = 0; i < k->entry->param_count; i++)
        if (!k->set[i])
            return hd__error(ctx, HD_ERR_INTERNAL, "CUDA runtime: argument %u of %s not set", i,
                             k->name);
    size_t dynamic = dynamic_bytes(k, true);
    if (groups[0] == 0 || groups[1] == 0)
        return HD_OK;
    if (groups[0] > 0x7fffffff || groups[1] > 65535 || group > k->max_group)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: %s over %zu x %zu groups of %zu is past CUDA's grid",
                         k->name, groups[0], groups[1], group);
    size_t cluster = form.cluster;
    if (cluster > 1 && (cluster > cu->info.clusters || groups[0] % cluster != 0))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: %s in clusters of %zu over %zu groups: the device takes "
                         "clusters of up to %zu that divide the groups",
                         k->name, cluster, groups[0], cu->info.clusters);
    if (form.resident && !cu->info.resident)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: %s: the driver or the device runs no cooperative launches",
                         k->name);
    if (k->static_shared + dynamic > cu->info.local_mem)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: %s asks for %zu bytes of local memory, the device gives "
                         "%zu",
                         k->name, k->static_shared + dynamic, cu->info.local_mem);
    hd_status s = current(cu, ctx);
    if (s != HD_OK)
        return s;
    if (dynamic > k->dynamic_allowed) {
        CHECK(cu, ctx,
              cu->d->cuFuncSetAttribute(
                  k->function, HD_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dynamic),
              "cuFuncSetAttribute (dynamic shared memory)");
        k->dynamic_allowed = dynamic;
    }
    capture_open(cu);
    /* A kernel that waits for the launch before it (launch.cl) may begin while that one ends:
     * its groups are placed as the last of the other's run, not after all of them have
     * finished. A cooperative launch takes no attributes, and waits as any launch does. */
    bool dependent = cu->info.dependent_launch && k->entry->waits_on_previous && !form.resident;
    if (cluster > 1 || dependent) {
        hd_cu_launch_attribute attrs[2];
        unsigned count = 0;
        if (cluster > 1) {
            attrs[count] = (hd_cu_launch_attribute){.id = HD_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
            attrs[count].value.cluster_dim.x = (unsigned)cluster;
            attrs[count].value.cluster_dim.y = attrs[count].value.cluster_dim.z = 1;
            count++;
        }
        if (dependent) {
            attrs[count] = (hd_cu_launch_attribute){
                .id = HD_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
            attrs[count].value.programmatic_serialization_allowed = 1;
            count++;
        }
        const hd_cu_launch_config config = {
            .grid_x = (unsigned)groups[0],
            .grid_y = (unsigned)groups[1],
            .grid_z = 1,
            .block_x = (unsigned)group,
            .block_y = 1,
            .block_z = 1,
            .shared_bytes = (unsigned)dynamic,
            .stream = cu->stream,
            .attrs = attrs,
            .attr_count = count,
        };
        CHECK(cu, ctx, cu->d->cuLaunchKernelEx(&config, k->function, k->params, NULL),
              "cuLaunchKernelEx");
        return HD_OK;
    }
    if (form.resident) {
        CHECK(cu, ctx,
              cu->d->cuLaunchCooperativeKernel(k->function, (unsigned)groups[0],
                                               (unsigned)groups[1], 1, (unsigned)group, 1, 1,
                                               (unsigned)dynamic, cu->stream, k->params),
              "cuLaunchCooperativeKernel");
        return HD_OK;
    }
    CHECK(cu, ctx,
          cu->d->cuLaunchKernel(k->function, (unsigned)groups[0], (unsigned)groups[1], 1,
                                (unsigned)group, 1, 1, (unsigned)dynamic, cu->stream, k->params,
                                NULL),
          "cuLaunchKernel");
    return HD_OK;
}

hd_status hd__cuda_launch(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k, const size_t groups[2],
                          size_t group)
{
    return launch(cu, ctx, k, groups, group, (launch_form){.cluster = 1});
}

hd_status hd__cuda_launch_cluster(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k,
                                  const size_t groups[2], size_t group, size_t cluster)
{
    return launch(cu, ctx, k, groups, group, (launch_form){.cluster = cluster});
}

hd_status hd__cuda_launch_resident(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k,
                                   const size_t groups[2], size_t group)
{
    return launch(cu, ctx, k, groups, group, (launch_form){.cluster = 1, .resident = true});
}

hd_status hd__cuda_resident_groups(hd_cuda *cu, hd_context *ctx, hd_cuda_kernel *k, size_t group,
                                   size_t *out)
{
    *out = 0;
    if (!cu->info.resident)
        return HD_OK;
    size_t dynamic = dynamic_bytes(k, false);
    if (k->resident.known && k->resident.group == group && k->resident.dynamic == dynamic) {
        *out = k->resident.groups; /* asked before each launch: the driver once */
        return HD_OK;
    }
    hd_status s = current(cu, ctx);
    if (s != HD_OK)
        return s;
    int blocks = 0;
    CHECK(cu, ctx,
          cu->d->cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k->function, (int)group,
                                                             dynamic),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    *out = blocks > 0 ? (size_t)blocks * cu->info.compute_units : 0;
    k->resident.known = true;
    k->resident.group = group;
    k->resident.dynamic = dynamic;
    k->resident.groups = *out;
    return HD_OK;
}

/* ---- timing and waiting ---- */

void hd__cuda_capture_begin(hd_cuda *cu)
{
    cu->capturing = true;
    cu->started = false;
}

hd_status hd__cuda_capture_end(hd_cuda *cu, hd_context *ctx, double *seconds)
{
    *seconds = 0.0;
    bool started = cu->started;
    cu->capturing = cu->started = false;
    hd_status s = current(cu, ctx);
    if (s != HD_OK)
        return s;
    if (!started)
        return hd__cuda_finish(cu, ctx);
    CHECK(cu, ctx, cu->d->cuEventRecord(cu->end, cu->stream), "cuEventRecord");
    CHECK(cu, ctx, cu->d->cuEventSynchronize(cu->end), "cuEventSynchronize");
    float ms = 0.0f;
    CHECK(cu, ctx, cu->d->cuEventElapsedTime(&ms, cu->start, cu->end), "cuEventElapsedTime");
    *seconds = (double)ms * 1e-3;
    return HD_OK;
}

hd_status hd__cuda_finish(hd_cuda *cu, hd_context *ctx)
{
    hd_status s = current(cu, ctx);
    if (s != HD_OK)
        return s;
    CHECK(cu, ctx, cu->d->cuStreamSynchronize(cu->stream), "cuStreamSynchronize");
    return HD_OK;
}

/* ---- opening ---- */

/* The probe: a group's __local arrays, barriers, and every launch register the rewrite maps. */
static const char probe_source[] =
    "kernel void hd_cuda_probe(global int *out, local int *a, local int *b, int add)\n"
    "{\n"
    "    const int l = (int)get_local_id(0), last = (int)get_local_size(0) - 1;\n"
    "    a[l] = (int)get_global_id(0) + add;\n"
    "    b[l] = 3 * l;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[get_global_id(0)] = (a[last - l] + b[last - l]) * (int)get_num_groups(0) +\n"
    "                            (int)get_group_id(0) + 1000 * (int)get_global_id(1);\n"
    "}\n";

enum { PROBE_GROUP = 64, PROBE_GROUPS = 3, PROBE_ADD = 5 };

static hd_status run_probe(hd_cuda *cu, hd_context *ctx, bool fail_probe)
{
    hd_cuda_kernel *k = NULL;
    hd_status s = hd__cuda_kernel(cu, ctx, probe_source, "", "hd_cuda_probe", &k);
    struct hd_device_buffer *buf = NULL;
    int out[PROBE_GROUP * PROBE_GROUPS];
    if (s == HD_OK)
        s = hd__cuda_buffer_acquire(cu, ctx, sizeof out, &buf);
    const int add = PROBE_ADD;
    if (s == HD_OK)
        s = hd__cuda_set_arg(ctx, k, 0, sizeof buf->mem, &buf->mem);
    if (s == HD_OK)
        s = hd__cuda_set_arg(ctx, k, 1, PROBE_GROUP * sizeof(int), NULL);
    if (s == HD_OK)
        s = hd__cuda_set_arg(ctx, k, 2, PROBE_GROUP * sizeof(int), NULL);
    if (s == HD_OK)
        s = hd__cuda_set_arg(ctx, k, 3, sizeof add, &add);
    if (s == HD_OK)
        s = hd__cuda_launch(cu, ctx, k, (const size_t[2]){PROBE_GROUPS, 1}, PROBE_GROUP);
    if (s == HD_OK)
        s = hd__cuda_download(cu, ctx, buf->mem, out, sizeof out);
    if (buf != NULL)
        hd__cuda_buffer_release(cu, buf);
    for (int g = 0; g < PROBE_GROUPS && s == HD_OK; g++) {
        for (int l = 0; l < PROBE_GROUP && s == HD_OK; l++) {
            int mirrored = PROBE_GROUP - 1 - l;
            int want = (g * PROBE_GROUP + mirrored + PROBE_ADD + 3 * mirrored) * PROBE_GROUPS + g;
            if (out[g * PROBE_GROUP + l] != want || fail_probe)
                s = hd__error(ctx, HD_ERR_DEVICE,
                              "CUDA runtime: the probe kernel gave %d at %d, not %d%s",
                              out[g * PROBE_GROUP + l], g * PROBE_GROUP + l, want,
                              fail_probe ? " (injected fault)" : "");
        }
    }
    return s;
}

static hd_status unavailable(hd_context *ctx, const char *why)
{
    return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "CUDA runtime: %s", why);
}

/* The CUDA device at the OpenCL device's PCI address. */
static hd_status find_device(hd_cuda *cu, hd_context *ctx)
{
    int domain, bus, slot, count = 0;
    if (!hd__cl_nv_pci_address(cu->compiler, &domain, &bus, &slot))
        return unavailable(ctx, "the OpenCL device is not NVIDIA's");
    CHECK(cu, ctx, cu->d->cuDeviceGetCount(&count), "cuDeviceGetCount");
    for (int i = 0; i < count; i++) {
        hd_cu_device dev;
        int d = -1, b = -1, s = -1;
        if (cu->d->cuDeviceGet(&dev, i) != HD_CU_SUCCESS ||
            cu->d->cuDeviceGetAttribute(&d, HD_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev) !=
                HD_CU_SUCCESS ||
            cu->d->cuDeviceGetAttribute(&b, HD_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev) !=
                HD_CU_SUCCESS ||
            cu->d->cuDeviceGetAttribute(&s, HD_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev) !=
                HD_CU_SUCCESS)
            continue;
        if (d == domain && b == bus && s == slot) {
            cu->device = dev;
            return HD_OK;
        }
    }
    char why[160];
    snprintf(why, sizeof why, "no CUDA device at the OpenCL device's PCI address %04x:%02x:%02x",
             (unsigned)domain, (unsigned)bus, (unsigned)slot);
    return unavailable(ctx, why);
}

static hd_status device_info(hd_cuda *cu, hd_context *ctx)
{
    int threads = 0, units = 0, optin = 0, shared = 0, major = 0, minor = 0, cooperative = 0;
    size_t total = 0;
    const struct {
        int *value;
        int attribute;
    } attrs[] = {
        {&threads, HD_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
        {&units, HD_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
        {&optin, HD_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
        {&shared, HD_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
        {&major, HD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
        {&minor, HD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof *attrs; i++)
        CHECK(cu, ctx, cu->d->cuDeviceGetAttribute(attrs[i].value, attrs[i].attribute, cu->device),
              "cuDeviceGetAttribute");
    CHECK(cu, ctx, cu->d->cuDeviceTotalMem_v2(&total, cu->device), "cuDeviceTotalMem");
    /* optional: a driver that does not know the attribute runs no cooperative launches */
    if (cu->d->cuDeviceGetAttribute(&cooperative, HD_CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH,
                                    cu->device) != HD_CU_SUCCESS)
        cooperative = 0;
    hd_runtime_info compiled;
    hd_status s = hd__cl_runtime_info(cu->compiler, ctx, &compiled);
    if (s != HD_OK)
        return s;
    cu->info = (hd_runtime_info){
        .kind = HD_RUNTIME_CUDA,
        .max_group = (size_t)threads,
        .compute_units = (size_t)units,
        .local_mem = (size_t)(optin > shared ? optin : shared),
        .static_local = compiled.static_local, /* what the OpenCL compiler lets a kernel declare */
        .param_bytes =
            compiled.param_bytes < HD_CUDA_PARAM_BYTES ? compiled.param_bytes : HD_CUDA_PARAM_BYTES,
        .nv_major = major,
        .nv_minor = minor,
        .nv_options = compiled.nv_options,
        .tensor_maps = major >= 9 && cu->d->cuTensorMapEncodeTiled != NULL,
        .clusters = major >= 9 && cu->d->cuLaunchKernelEx != NULL ? HD_RT_CLUSTER_MAX : 0,
        .resident = cooperative != 0 && cu->d->cuLaunchCooperativeKernel != NULL &&
                    cu->d->cuOccupancyMaxActiveBlocksPerMultiprocessor != NULL,
        .dependent_launch = major >= 9 && cu->d->cuLaunchKernelEx != NULL &&
                            hd__env_bool(ctx, "HD_CUDA_DEPENDENT_LAUNCH", true),
    };
    hd__pool_init(&cu->pool, cu, pool_alloc, pool_free, total);
    return HD_OK;
}

hd_status hd__cuda_open(hd_context *ctx, struct hd_cl_runtime *compiler, bool fail_probe,
                        hd_cuda **out)
{
    *out = NULL;
    char why[256] = "";
    const hd_cuda_driver *d = hd__cuda_driver(why, sizeof why);
    if (d == NULL)
        return unavailable(ctx, why);
    hd_cuda *cu = calloc(1, sizeof *cu);
    if (cu == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CUDA runtime: its state");
    cu->d = d;
    cu->compiler = compiler;
    hd_status s = find_device(cu, ctx);
    hd_cu_result r = HD_CU_SUCCESS;
    if (s == HD_OK) {
        r = d->cuDevicePrimaryCtxRetain(&cu->context, cu->device);
        if (r != HD_CU_SUCCESS)
            s = cu_error(d, ctx, r, "cuDevicePrimaryCtxRetain");
    }
    if (s == HD_OK)
        s = current(cu, ctx);
    if (s == HD_OK && (r = d->cuStreamCreate(&cu->stream, HD_CU_STREAM_NON_BLOCKING)) != 0)
        s = cu_error(d, ctx, r, "cuStreamCreate");
    if (s == HD_OK && ((r = d->cuEventCreate(&cu->start, HD_CU_EVENT_DEFAULT)) != 0 ||
                       (r = d->cuEventCreate(&cu->end, HD_CU_EVENT_DEFAULT)) != 0))
        s = cu_error(d, ctx, r, "cuEventCreate");
    if (s == HD_OK)
        s = device_info(cu, ctx);
    if (s == HD_OK)
        s = run_probe(cu, ctx, fail_probe);
    if (s != HD_OK) {
        hd__cuda_close(cu);
        return s;
    }
    *out = cu;
    return HD_OK;
}

void hd__cuda_close(hd_cuda *cu)
{
    if (cu == NULL)
        return;
    const hd_cuda_driver *d = cu->d;
    if (cu->context != NULL && d->cuCtxSetCurrent(cu->context) == HD_CU_SUCCESS) {
        if (cu->stream != NULL)
            d->cuStreamSynchronize(cu->stream);
        hd__pool_trim(&cu->pool);
        while (cu->kernels != NULL) {
            hd_cuda_kernel *k = cu->kernels;
            cu->kernels = k->next;
            free(k->values);
            free(k);
        }
        while (cu->modules != NULL) {
            module *m = cu->modules;
            cu->modules = m->next;
            d->cuModuleUnload(m->module);
            hd__ptx_module_free(&m->ptx);
            free(m);
        }
        if (cu->map_table != 0)
            d->cuMemFree_v2(cu->map_table);
        hd__cublaslt_close(cu->blas);
        if (cu->blas_workspace != NULL)
            pool_free(cu, cu->blas_workspace);
        free(cu->map_slots);
        while (cu->pinned != NULL) {
            pinned *q = cu->pinned;
            cu->pinned = q->next;
            d->cuMemFreeHost(q->p);
            free(q);
        }
        if (cu->start != NULL)
            d->cuEventDestroy_v2(cu->start);
        if (cu->end != NULL)
            d->cuEventDestroy_v2(cu->end);
        if (cu->stream != NULL)
            d->cuStreamDestroy_v2(cu->stream);
        d->cuDevicePrimaryCtxRelease_v2(cu->device);
    }
    free(cu);
}

/* ---- tensor maps ---- */

/* desc as words, its unused dimensions zero: equal descriptions, equal keys */
static void map_key(const hd_rt_tensor_map_desc *desc, uint64_t key[HD_CUDA_MAP_KEY])
{
    memset(key, 0, HD_CUDA_MAP_KEY * sizeof *key);
    key[0] = (uint64_t)(uintptr_t)desc->mem;
    key[1] = desc->rank;
    for (unsigned i = 0; i < desc->rank; i++) {
        key[2 + i] = desc->dim[i];
        key[7 + i] = desc->box[i];
        if (i > 0)
            key[4 + i] = desc->stride[i - 1];
    }
}

static uint64_t map_hash(const uint64_t key[HD_CUDA_MAP_KEY])
{
    uint64_t h = 1469598103934665603u; /* FNV-1a over the words */
    for (size_t i = 0; i < HD_CUDA_MAP_KEY; i++)
        h = (h ^ key[i]) * 1099511628211u;
    return h;
}

/* The map of desc encoded into bytes. */
static hd_status map_encode(hd_cuda *cu, hd_context *ctx, const hd_rt_tensor_map_desc *desc,
                            unsigned char bytes[HD_CUDA_MAP_BYTES])
{
    unsigned long long dim[3], strides[2];
    unsigned box[3], unit[3] = {1, 1, 1};
    for (unsigned i = 0; i < desc->rank; i++) {
        dim[i] = desc->dim[i];
        box[i] = desc->box[i];
        if (i > 0)
            strides[i - 1] = desc->stride[i - 1];
    }
    hd_cu_result r = cu->d->cuTensorMapEncodeTiled(
        bytes, HD_CU_TENSOR_MAP_DATA_TYPE_FLOAT32, desc->rank, (void *)(uintptr_t)desc->mem, dim,
        strides, box, unit, HD_CU_TENSOR_MAP_INTERLEAVE_NONE, HD_CU_TENSOR_MAP_SWIZZLE_128B,
        HD_CU_TENSOR_MAP_L2_PROMOTION_L2_256B, HD_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != HD_CU_SUCCESS) /* an address, stride or box the copy engine does not take */
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: cuTensorMapEncodeTiled refused the tensor (%d)", r);
    return HD_OK;
}

hd_status hd__cuda_tensor_map(hd_cuda *cu, hd_context *ctx, const hd_rt_tensor_map_desc *desc,
                              hd_devmem *out)
{
    *out = NULL;
    if (!cu->info.tensor_maps)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "CUDA runtime: tensor maps need compute capability 9.0 and a driver "
                         "with cuTensorMapEncodeTiled");
    if (desc->rank < 1 || desc->rank > 3)
        return hd__error(ctx, HD_ERR_INTERNAL, "CUDA runtime: a tensor map of rank %u", desc->rank);
    struct map_slot map = {.used = true};
    map_key(desc, map.key);
    size_t set = (size_t)(map_hash(map.key) % (HD_CUDA_MAP_SLOTS / HD_CUDA_MAP_WAYS));
    struct map_slot *ways = cu->map_slots != NULL ? cu->map_slots + set * HD_CUDA_MAP_WAYS : NULL;
    if (ways != NULL)
        for (size_t w = 0; w < HD_CUDA_MAP_WAYS; w++)
            if (ways[w].used && memcmp(ways[w].key, map.key, sizeof map.key) == 0) {
                *out = mem_of(cu->map_table + (set * HD_CUDA_MAP_WAYS + w) * HD_CUDA_MAP_BYTES);
                return HD_OK;
            }
    /* a new description: encoded (a refusal leaves the table as it was), then copied into
     * the set's ways in turn */
    unsigned char bytes[HD_CUDA_MAP_BYTES] __attribute__((aligned(64)));
    hd_status s = map_encode(cu, ctx, desc, bytes);
    if (s == HD_OK)
        s = current(cu, ctx);
    if (s != HD_OK)
        return s;
    if (cu->map_slots == NULL) {
        cu->map_slots = calloc(HD_CUDA_MAP_SLOTS, sizeof *cu->map_slots);
        if (cu->map_slots == NULL)
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "CUDA runtime: tensor maps' descriptions");
        hd_cu_result r =
            cu->d->cuMemAlloc_v2(&cu->map_table, (size_t)HD_CUDA_MAP_SLOTS * HD_CUDA_MAP_BYTES);
        if (r != HD_CU_SUCCESS) {
            free(cu->map_slots);
            cu->map_slots = NULL;
            cu->map_table = 0;
            return cu_error(cu->d, ctx, r, "cuMemAlloc (tensor maps)");
        }
        ways = cu->map_slots + set * HD_CUDA_MAP_WAYS;
    }
    /* the copy runs on the stream after the launches queued on the map it replaces, before
     * those queued on this one (kernels order their reads of a map after it: gemm_tma.cl's
     * fence) */
    size_t slot = cu->map_turn[set]++ % HD_CUDA_MAP_WAYS;
    hd_cu_ptr at = cu->map_table + (set * HD_CUDA_MAP_WAYS + slot) * HD_CUDA_MAP_BYTES;
    ways[slot].used = false; /* until the copy is queued: a failed one leaves no stale map */
    /* from pageable memory: the driver has staged it when the call returns */
    CHECK(cu, ctx, cu->d->cuMemcpyHtoDAsync_v2(at, bytes, HD_CUDA_MAP_BYTES, cu->stream),
          "cuMemcpyHtoDAsync (tensor map)");
    ways[slot] = map;
    *out = mem_of(at);
    return HD_OK;
}

void hd__cuda_info(const hd_cuda *cu, hd_runtime_info *out)
{
    *out = cu->info;
}

/* ---- the vendor GEMM ---- */

/* What cuBLASLt's algorithms may use as workspace: what NVIDIA recommends for Hopper. */
#define HD_CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

bool hd__cuda_vendor_gemm_ready(hd_cuda *cu, hd_context *ctx)
{
    if (cu->blas_tried)
        return cu->blas != NULL;
    cu->blas_tried = true;
    /* cuBLASLt takes the calling thread's current context: the runtime's primary one */
    hd_status s = current(cu, ctx);
    if (s == HD_OK)
        s = hd__cublaslt_open(ctx, &cu->blas);
    if (s == HD_OK) {
        /* where the device has no room for it, its algorithms that need none still run */
        if (hd__cuda_scratch_create(cu, ctx, HD_CUDA_BLAS_WORKSPACE, "cuBLASLt's workspace",
                                    &cu->blas_workspace) != HD_OK)
            hd__error_clear(ctx);
        hd__note(ctx, "vendor GEMM: cuBLASLt");
        return true;
    }
    hd__note(ctx, "vendor GEMM: none, the fused kernels' products run instead: %s",
             ctx != NULL ? hd__report(ctx)->last_error : "cuBLASLt could not be opened");
    hd__error_clear(ctx);
    return false;
}

/* cuBLASLt open and the runtime's context current, or why not. */
static hd_status blas_current(hd_cuda *cu, hd_context *ctx)
{
    if (!hd__cuda_vendor_gemm_ready(cu, ctx))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "vendor GEMM: cuBLASLt could not be opened (the log says why)");
    return current(cu, ctx);
}

static size_t blas_workspace_bytes(const hd_cuda *cu)
{
    return cu->blas_workspace != NULL ? HD_CUDA_BLAS_WORKSPACE : 0;
}

hd_status hd__cuda_vendor_gemm_prepare(hd_cuda *cu, hd_context *ctx, const hd_rt_gemm *g)
{
    hd_status s = blas_current(cu, ctx);
    return s != HD_OK ? s : hd__cublaslt_prepare(cu->blas, ctx, g, blas_workspace_bytes(cu));
}

hd_status hd__cuda_vendor_gemm(hd_cuda *cu, hd_context *ctx, const hd_rt_gemm *g)
{
    hd_status s = blas_current(cu, ctx);
    if (s != HD_OK)
        return s;
    capture_open(cu);
    return hd__cublaslt_gemm(cu->blas, ctx, g, cu->stream, cu->blas_workspace,
                             blas_workspace_bytes(cu));
}
