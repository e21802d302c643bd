/* Device discovery, the runtime's lifecycle and its accessors. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/internal.h"
#include "dispatch/error.h"

/* Idle bytes the pool may keep: an eighth of device memory, at most this. */
#ifndef HD_CL_POOL_CAP_MAX
#define HD_CL_POOL_CAP_MAX ((size_t)1 << 30)
#endif

typedef struct device_ref {
    cl_platform_id platform;
    cl_device_id device;
} device_ref;

/* Every device of every platform, in platform order. A platform that fails to list its
 * devices is skipped: one broken ICD must not hide the others. */
static hd_status list_devices(hd_context *ctx, device_ref **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    cl_uint nplat = 0;
    if (clGetPlatformIDs(0, NULL, &nplat) != CL_SUCCESS || nplat == 0)
        return HD_OK; /* the ICD loader says CL_PLATFORM_NOT_FOUND_KHR when there is none */
    cl_platform_id *plats = calloc(nplat, sizeof *plats);
    if (plats == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to list OpenCL platforms");
    if (clGetPlatformIDs(nplat, plats, NULL) != CL_SUCCESS) {
        free(plats);
        return HD_OK;
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
            return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to list OpenCL devices");
        }
        refs = grown;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, devs, NULL) == CL_SUCCESS) {
            for (cl_uint d = 0; d < ndev; d++)
                refs[n++] = (device_ref){plats[p], devs[d]};
        }
        free(devs);
    }
    free(plats);
    *out = refs;
    *count = n;
    return HD_OK;
}

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
        for (size_t i = 0; i < count; i++) {
            cl_device_type type = 0;
            if (clGetDeviceInfo(refs[i].device, CL_DEVICE_TYPE, sizeof type, &type, NULL) ==
                    CL_SUCCESS &&
                (type & CL_DEVICE_TYPE_GPU))
                return i;
        }
        return 0;
    }
    size_t index;
    if (parse_index(spec, &index))
        return index < count ? index : count;
    for (size_t i = 0; i < count; i++) {
        char name[256], plat[256];
        info_string(refs[i].device, CL_DEVICE_NAME, name, sizeof name);
        platform_string(refs[i].platform, CL_PLATFORM_NAME, plat, sizeof plat);
        if (contains_nocase(name, spec) || contains_nocase(plat, spec))
            return i;
    }
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
        char name[256], plat[256], line[600];
        info_string(refs[i].device, CL_DEVICE_NAME, name, sizeof name);
        platform_string(refs[i].platform, CL_PLATFORM_NAME, plat, sizeof plat);
        snprintf(line, sizeof line, "\n  %zu: %s (%s)", i, name, plat);
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

static void describe(hd_cl_runtime *rt)
{
    info_string(rt->device, CL_DEVICE_NAME, rt->device_name, sizeof rt->device_name);
    info_string(rt->device, CL_DRIVER_VERSION, rt->driver_version, sizeof rt->driver_version);
    platform_string(rt->platform, CL_PLATFORM_NAME, rt->platform_name, sizeof rt->platform_name);
    platform_string(rt->platform, CL_PLATFORM_VERSION, rt->platform_version,
                    sizeof rt->platform_version);
    cl_device_type type = 0;
    clGetDeviceInfo(rt->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    rt->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    cl_ulong global = 0;
    clGetDeviceInfo(rt->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    clGetDeviceInfo(rt->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof rt->max_alloc, &rt->max_alloc,
                    NULL);
    rt->pool_cap_bytes =
        global / 8 < HD_CL_POOL_CAP_MAX ? (size_t)(global / 8) : HD_CL_POOL_CAP_MAX;
}

hd_status hd__cl_runtime_create(hd_context *ctx, const char *spec, hd_cl_runtime **out)
{
    *out = NULL;
    device_ref *refs;
    size_t count;
    hd_status s = list_devices(ctx, &refs, &count);
    if (s != HD_OK)
        return s;
    size_t pick = count == 0 ? 0 : choose(refs, count, spec);
    if (pick >= count) {
        s = spec != NULL
                ? no_match(ctx, refs, count, spec)
                : hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE, "no OpenCL platform or device found");
        free(refs);
        return s;
    }
    hd_cl_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL) {
        free(refs);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the OpenCL runtime");
    }
    rt->platform = refs[pick].platform;
    rt->device = refs[pick].device;
    free(refs);
    describe(rt);
    s = open_queue(rt, ctx);
    if (s != HD_OK) {
        hd__cl_runtime_destroy(rt);
        return s;
    }
    hd__cl_disk_cache_init(rt);
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
    hd__cl_programs_destroy(rt);
    hd__cl_pool_trim(rt);
    if (rt->queue != NULL)
        clReleaseCommandQueue(rt->queue);
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
