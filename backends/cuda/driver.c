/*
 * Loading libcuda with dlopen (driver.h). The first call loads and initializes it; every later
 * call, from any thread, gets the same table or the same reason.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/driver.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static hd_cuda_driver driver;
static bool loaded;
static char load_failure[256];

/* cuEventElapsedTime_v2 where the driver has it (CUDA 12.8 on): the unversioned name is kept
 * for old programs and may be retired. */
static void *symbol(void *library, const char *name)
{
    if (strcmp(name, "cuEventElapsedTime") == 0) {
        void *v2 = dlsym(library, "cuEventElapsedTime_v2");
        if (v2 != NULL)
            return v2;
    }
    return dlsym(library, name);
}

static void load(void)
{
    const char *path = getenv("HD_CUDA_LIBRARY");
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    driver.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (driver.library == NULL) {
        const char *err = dlerror();
        snprintf(load_failure, sizeof load_failure, "%s could not be loaded (%s)", path,
                 err != NULL ? err : "no reason given");
        return;
    }
    /* a data pointer from dlsym copied into a function pointer, as POSIX allows */
#define HD_CUDA_DRIVER_LOAD(name, ret, args)                                                       \
    {                                                                                              \
        void *found = symbol(driver.library, #name);                                               \
        memcpy(&driver.name, &found, sizeof found);                                                \
    }                                                                                              \
    if (driver.name == NULL) {                                                                     \
        snprintf(load_failure, sizeof load_failure, "%s lacks %s", path, #name);                   \
        return;                                                                                    \
    }
    HD_CUDA_DRIVER_FUNCTIONS(HD_CUDA_DRIVER_LOAD)
#undef HD_CUDA_DRIVER_LOAD
    {
        void *found = dlsym(driver.library, "cuTensorMapEncodeTiled");
        memcpy(&driver.cuTensorMapEncodeTiled, &found, sizeof found);
        found = dlsym(driver.library, "cuLaunchKernelEx");
        memcpy(&driver.cuLaunchKernelEx, &found, sizeof found);
        found = dlsym(driver.library, "cuLaunchCooperativeKernel");
        memcpy(&driver.cuLaunchCooperativeKernel, &found, sizeof found);
        found = dlsym(driver.library, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
        memcpy(&driver.cuOccupancyMaxActiveBlocksPerMultiprocessor, &found, sizeof found);
    }
    hd_cu_result r = driver.cuInit(0);
    if (r != HD_CU_SUCCESS) {
        const char *name = NULL;
        if (driver.cuGetErrorName(r, &name) != HD_CU_SUCCESS || name == NULL)
            name = "an unknown error";
        snprintf(load_failure, sizeof load_failure, "cuInit failed: %s (%d)", name, r);
        return;
    }
    loaded = true;
}

const hd_cuda_driver *hd__cuda_driver(char *why, size_t cap)
{
    pthread_once(&once, load);
    if (!loaded && cap > 0)
        snprintf(why, cap, "%s", load_failure);
    return loaded ? &driver : NULL;
}
