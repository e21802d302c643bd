/*
 * A libcuda that is there but cannot run anything, for the CUDA runtime's fallback tests
 * (test_cuda_runtime, through $HD_CUDA_LIBRARY): every function of backends/cuda/driver.h
 * fails with CUDA_ERROR_NO_DEVICE (100), as the driver does on a machine without an NVIDIA GPU;
 * built with FAKE_LACKS_LAUNCH, cuLaunchKernel is missing, as in a driver too old.
 */
#include <stddef.h>

#include "backends/cuda/driver.h"

#define FAKE_NO_DEVICE 100

#define FAKE_DEFINE(name, ret, args)                                                               \
    ret name args;                                                                                 \
    ret name args                                                                                  \
    {                                                                                              \
        return FAKE_NO_DEVICE;                                                                     \
    }

#define cuGetErrorName fake_unused_cuGetErrorName /* defined below, with a name to give */
#ifdef FAKE_LACKS_LAUNCH
#define cuLaunchKernel fake_unused_cuLaunchKernel
#endif
HD_CUDA_DRIVER_FUNCTIONS(FAKE_DEFINE)
#undef cuGetErrorName

hd_cu_result cuGetErrorName(hd_cu_result error, const char **name);
hd_cu_result cuGetErrorName(hd_cu_result error, const char **name)
{
    *name = error == FAKE_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
