/* Device discovery, the runtime's lifecycle and its accessors. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/internal.h"
#include "core/error.h"

/* Idle bytes the pool may keep: an eighth of device memory, at most this. */

/* What discovery learnt about one device. Every query the runtime makes about a device it has
 * not opened yet is answered from here, so the driver is asked once per process. */
typedef struct device_ref {
    cl_platform_id platform;
    cl_device_id device;
    cl_device_type type;
    cl_ulong global_mem, max_alloc;
    char name[256], driver[128], platform_name[256], platform_version[256];
    /* pinned host memory handed out on this device by every runtime of the process: the cap
     * is the device's, however many contexts share it (host_memory.c) */
    atomic_size_t pinned_bytes;
} device_ref;

/* Discovery runs under one lock (list_devices): ICD loaders and drivers (PoCL among them)
 * initialise themselves on the first platform query and crash or report no device when
 * several threads make that query at once. The table is never freed: the handles stay
 * valid for the life of the process. */
static pthread_mutex_t discovery_lock = PTHREAD_MUTEX_INITIALIZER;
static bool discovery_done; /* under discovery_lock */
static device_ref *discovered;
static size_t discovered_count;
static bool discovery_out_of_memory;

static void info_string(cl_device_id dev, cl_device_info what, char *buf, size_t cap)
{
    if (clGetDeviceInfo(dev, what, cap, buf, NULL) != CL_SUCCESS)
        snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

static void platform_string(cl_platform_id plat, cl_platform_info what, char *buf, size_t cap)
{
    if (clGetPlatformInfo(plat, what, cap, buf, NULL) != CL_SUCCESS)
        snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

static void describe_ref(device_ref *r)
{
    info_string(r->device, CL_DEVICE_NAME, r->name, sizeof r->name);
    info_string(r->device, CL_DRIVER_VERSION, r->driver, sizeof r->driver);
    platform_string(r->platform, CL_PLATFORM_NAME, r->platform_name, sizeof r->platform_name);
    platform_string(r->platform, CL_PLATFORM_VERSION, r->platform_version,
                    sizeof r->platform_version);
    if (clGetDeviceInfo(r->device, CL_DEVICE_TYPE, sizeof r->type, &r->type, NULL) != CL_SUCCESS)
        r->type = 0;
    if (clGetDeviceInfo(r->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof r->global_mem, &r->global_mem,
                        NULL) != CL_SUCCESS)
        r->global_mem = 0;
    if (clGetDeviceInfo(r->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof r->max_alloc, &r->max_alloc,
                        NULL) != CL_SUCCESS)
        r->max_alloc = 0;
}

/* Every device of every platform, in platform order. A platform that fails to list its
 * devices is skipped: one broken ICD must not hide the others. */
static void discover(void)
{
    cl_uint nplat = 0;
    if (clGetPlatformIDs(0, NULL, &nplat) != CL_SUCCESS || nplat == 0)
        return; /* the ICD loader says CL_PLATFORM_NOT_FOUND_KHR when there is none */
    cl_platform_id *plats = calloc(nplat, sizeof *plats);
    if (plats == NULL) {
        discovery_out_of_memory = true;
        return;
    }
    if (clGetPlatformIDs(nplat, plats, NULL) != CL_SUCCESS) {
        free(plats);
        return;
    }
    device_ref *refs = NULL;
    size_t n = 0;
    for (cl_uint p = 0; p < nplat; p++) {
        cl_uint ndev = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS || ndev == 0)
            continue;
        cl_device_id *devs = calloc(ndev, sizeof *devs);
        device_ref *grown = realloc(refs, (n + ndev) * sizeof *refs);
        if (devs == NULL || grown == NULL) {
            free(devs);
            free(grown != NULL ? grown : refs);
            free(plats);
            discovery_out_of_memory = true;
            return;
        }
        refs = grown;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL) == CL_SUCCESS) {
            for (cl_uint d = 0; d < ndev; d++) {
                refs[n] = (device_ref){.platform = plats[p], .device = devs[d]};
                describe_ref(&refs[n++]);
            }
        }
        free(devs);
    }
    free(plats);
    discovered = refs;
    discovered_count = n;
}

/* Discovery runs once per process, and again after one that ran out of host memory: a single
 * failed allocation must not leave every later context without its device. The list, once
 * made, never changes: the handles taken under the lock stay valid after it. */
static hd_status list_devices(hd_context *ctx, device_ref **out, size_t *count)
{
    pthread_mutex_lock(&discovery_lock);
    if (!discovery_done) {
        discovery_out_of_memory = false;
        discover();
        discovery_done = !discovery_out_of_memory;
    }
    bool out_of_memory = discovery_out_of_memory;
    *out = discovered;
    *count = discovered_count;
    pthread_mutex_unlock(&discovery_lock);
    if (out_of_memory)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to list OpenCL devices");
    return HD_OK;
}

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++) {
        size_t i = 0;
        while (i < n && hay[i] != '\0' &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return n == 0;
}

static bool parse_index(const char *spec, size_t *index)
{
    if (*spec == '\0')
        return false;
    size_t v = 0;
    for (const char *p = spec; *p != '\0'; p++) {
        if (!isdigit((unsigned char)*p) || v > 100000)
            return false;
        v = v * 10 + (size_t)(*p - '0');
    }
    *index = v;
    return true;
}

/* The chosen device's position in refs, or count when spec matches none. */
static size_t choose(const device_ref *refs, size_t count, const char *spec)
{
    if (spec == NULL) {
        for (size_t i = 0; i < count; i++)
            if (refs[i].type & CL_DEVICE_TYPE_GPU)
                return i;
        return 0;
    }
    size_t index;
    if (parse_index(spec, &index))
        return index < count ? index : count;
    for (size_t i = 0; i < count; i++)
        if (contains_nocase(refs[i].name, spec) || contains_nocase(refs[i].platform_name, spec))
            return i;
    return count;
}

static hd_status no_match(hd_context *ctx, const device_ref *refs, size_t count, const char *spec)
{
    hd_status s = hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                            "OpenCL device '%s' matches no device (give an index or a part of "
                            "the name); devices:",
                            spec);
    if (count == 0)
        hd__error_append(ctx, " none");
    for (size_t i = 0; i < count; i++) {
        char line[600];
        snprintf(line, sizeof line, "\n  %zu: %s (%s)", i, refs[i].name, refs[i].platform_name);
        hd__error_append(ctx, line);
    }
    return s;
}

static hd_status open_queue(hd_cl_runtime *rt, hd_context *ctx)
{
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)rt->platform, 0};
    rt->context = clCreateContext(props, 1, &rt->device, NULL, NULL, &err);
    if (rt->context == NULL)
        return hd__cl_error(ctx, err, "clCreateContext");
    rt->queue = clCreateCommandQueue(rt->context, rt->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (rt->queue == NULL)
        return hd__cl_error(ctx, err, "clCreateCommandQueue");
    return HD_OK;
}

static void describe(hd_cl_runtime *rt, device_ref *r)
{
    snprintf(rt->device_name, sizeof rt->device_name, "%s", r->name);
    snprintf(rt->driver_version, sizeof rt->driver_version, "%s", r->driver);
    snprintf(rt->platform_name, sizeof rt->platform_name, "%s", r->platform_name);
    snprintf(rt->platform_version, sizeof rt->platform_version, "%s", r->platform_version);
    rt->is_gpu = (r->type & CL_DEVICE_TYPE_GPU) != 0;
    rt->binaries_are_ptx = strstr(r->platform_name, "NVIDIA") != NULL;
    rt->driver_caches_kernels = strstr(r->platform_name, "Portable Computing Language") != NULL;
    rt->max_alloc = r->max_alloc;
    hd__cl_pool_init(rt, r->global_mem, r->max_alloc);
    rt->pinned_cap = r->global_mem / 8 < SIZE_MAX ? (size_t)(r->global_mem / 8) : SIZE_MAX;
    rt->pinned_bytes = &r->pinned_bytes;
}

hd_status hd__cl_runtime_create(hd_context *ctx, const char *spec, hd_cl_runtime **out)
{
    *out = NULL;
    device_ref *refs; /* the device's pinned count is written */
    size_t count;
    hd_status s = list_devices(ctx, &refs, &count);
    if (s != HD_OK)
        return s;
    size_t pick = count == 0 ? 0 : choose(refs, count, spec);
    if (pick >= count) {
        s = spec != NULL
                ? no_match(ctx, refs, count, spec)
                : hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "no OpenCL platform or device found");
        return s;
    }
    hd_cl_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the OpenCL runtime");
    rt->platform = refs[pick].platform;
    rt->device = refs[pick].device;
    describe(rt, &refs[pick]);
    s = open_queue(rt, ctx);
    if (s != HD_OK) {
        hd__cl_runtime_destroy(rt);
        return s;
    }
    hd__cl_disk_cache_init(ctx, rt);
    *out = rt;
    return HD_OK;
}

void hd__cl_runtime_destroy(hd_cl_runtime *rt)
{
    if (rt == NULL)
        return;
    if (rt->queue != NULL)
        clFinish(rt->queue);
    hd__cl_capture_discard(rt);
    hd__cl_staging_reclaim(rt, true);
    hd__cl_build_ahead_destroy(rt);
    hd__cl_programs_destroy(rt);
    hd__cl_pool_trim(rt);
    if (rt->queue != NULL)
        clReleaseCommandQueue(rt->queue);
    if (rt->map_queue != NULL)
        clReleaseCommandQueue(rt->map_queue);
    if (rt->context != NULL)
        clReleaseContext(rt->context);
    free(rt);
}

cl_context hd__cl_context(const hd_cl_runtime *rt)
{
    return rt->context;
}

cl_device_id hd__cl_device(const hd_cl_runtime *rt)
{
    return rt->device;
}

cl_command_queue hd__cl_queue(const hd_cl_runtime *rt)
{
    return rt->queue;
}

const char *hd__cl_device_name(const hd_cl_runtime *rt)
{
    return rt->device_name;
}

const char *hd__cl_driver_version(const hd_cl_runtime *rt)
{
    return rt->driver_version;
}

const char *hd__cl_platform_name(const hd_cl_runtime *rt)
{
    return rt->platform_name;
}

bool hd__cl_device_is_gpu(const hd_cl_runtime *rt)
{
    return rt->is_gpu;
}

hd_status hd__cl_finish(hd_cl_runtime *rt, hd_context *ctx)
{
    cl_int err = clFinish(rt->queue);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clFinish");
    hd__cl_staging_reclaim(rt, false);
    return HD_OK;
}

/* NVIDIA's device queries (cl_nv_device_attribute_query), by the values of its extension. */
#define HD_CL_NV_COMPUTE_CAPABILITY_MAJOR 0x4000
#define HD_CL_NV_COMPUTE_CAPABILITY_MINOR 0x4001
#define HD_CL_NV_PCI_BUS_ID               0x4008
#define HD_CL_NV_PCI_SLOT_ID              0x4009
#define HD_CL_NV_PCI_DOMAIN_ID            0x400A

static bool has_extension(const hd_cl_runtime *rt, const char *name)
{
    char ext[8192] = "";
    return clGetDeviceInfo(rt->device, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL) ==
               CL_SUCCESS &&
           strstr(ext, name) != NULL;
}

static bool nv_query(const hd_cl_runtime *rt, cl_uint param, int *value)
{
    cl_uint v = 0;
    if (clGetDeviceInfo(rt->device, param, sizeof v, &v, NULL) != CL_SUCCESS)
        return false;
    *value = (int)v;
    return true;
}

bool hd__cl_nv_pci_address(const hd_cl_runtime *rt, int *domain, int *bus, int *slot)
{
    return has_extension(rt, "cl_nv_device_attribute_query") &&
           nv_query(rt, HD_CL_NV_PCI_DOMAIN_ID, domain) && nv_query(rt, HD_CL_NV_PCI_BUS_ID, bus) &&
           nv_query(rt, HD_CL_NV_PCI_SLOT_ID, slot);
}

hd_status hd__cl_runtime_info(hd_cl_runtime *rt, hd_context *ctx, hd_runtime_info *out)
{
    memset(out, 0, sizeof *out);
    out->kind = HD_RUNTIME_OPENCL;
    cl_uint units = 0;
    cl_ulong local = 0;
    cl_int err = clGetDeviceInfo(rt->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof out->max_group,
                                 &out->max_group, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(rt->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(rt->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(rt->device, CL_DEVICE_MAX_PARAMETER_SIZE, sizeof out->param_bytes,
                              &out->param_bytes, NULL);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clGetDeviceInfo");
    out->compute_units = units;
    out->local_mem = out->static_local = (size_t)local;
    out->nv_options = has_extension(rt, "cl_nv_compiler_options");
    if (has_extension(rt, "cl_nv_device_attribute_query") &&
        (!nv_query(rt, HD_CL_NV_COMPUTE_CAPABILITY_MAJOR, &out->nv_major) ||
         !nv_query(rt, HD_CL_NV_COMPUTE_CAPABILITY_MINOR, &out->nv_minor)))
        out->nv_major = out->nv_minor = 0;
    return HD_OK;
}
