/* The one table of backends and of the plans that compose two of them. The fallback order,
 * when nothing else decides: the fused kernels, CLBlast's GEMM with the fused epilogue,
 * CLBlast, and the CPU last, which always works. */
#include <stddef.h>

#include "backends/backend.h"

#ifdef HD_HAVE_CLBLAST
#include <clblast_c.h> /* CLBLAST_VERSION_*, for the tuning cache's device key */
#endif

#ifdef HD_HAVE_OPENCL
extern const hd_device_ops hd__runtime_device_ops; /* backends/runtime/device_ops.c */
#endif

static const hd_backend_impl *const backends[] = {
#ifdef HD_HAVE_OPENCL
    &hd__backend_fused,
#endif
#ifdef HD_HAVE_CLBLAST
    &hd__backend_clblast,
#endif
    &hd__backend_cpu,
};

static const hd_composite composites[] = {
    {.id = HD_BACKEND_CLBLAST_FUSED, .product = HD_BACKEND_CLBLAST, .epilogue = HD_BACKEND_FUSED},
};

static const hd_backend order[] = {
    HD_BACKEND_FUSED,
    HD_BACKEND_CLBLAST_FUSED,
    HD_BACKEND_CLBLAST,
    HD_BACKEND_CPU,
};

const hd_backend_impl *const *hd__registry_backends(size_t *count)
{
    *count = sizeof backends / sizeof backends[0];
    return backends;
}

const hd_composite *hd__registry_composites(size_t *count)
{
    *count = sizeof composites / sizeof composites[0];
    return composites;
}

const hd_backend *hd__registry_order(size_t *count)
{
    *count = sizeof order / sizeof order[0];
    return order;
}

hd_backend hd__registry_last_resort(void)
{
    return order[sizeof order / sizeof order[0] - 1];
}

const hd_device_ops *hd__registry_device(void)
{
#ifdef HD_HAVE_OPENCL
    return &hd__runtime_device_ops;
#else
    return NULL;
#endif
}

#define STR2(x) #x
#define STR(x)  STR2(x)

const char *hd__registry_clblast_version(void)
{
#if defined(HD_HAVE_CLBLAST) && defined(CLBLAST_VERSION_MAJOR)
    return STR(CLBLAST_VERSION_MAJOR) "." STR(CLBLAST_VERSION_MINOR) "." STR(CLBLAST_VERSION_PATCH);
#elif defined(HD_HAVE_CLBLAST)
    return "unknown"; /* a CLBlast without the macros */
#else
    return "none";
#endif
}
