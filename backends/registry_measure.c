/* The device's measurement hooks, beside the registry's device hooks (registry.c): in the
 * tools' library only. */
#include <stddef.h>

#include "backends/backend.h"

#ifdef HD_HAVE_OPENCL
extern const hd_device_measure_ops hd__runtime_measure_ops; /* backends/runtime/measure.c */
#endif

const hd_device_measure_ops *hd__registry_device_measure(void)
{
#ifdef HD_HAVE_OPENCL
    return &hd__runtime_measure_ops;
#else
    return NULL;
#endif
}
