/*
 * The few functions and types of NVIDIA's CUDA driver API (libcuda.so.1) the CUDA runtime uses,
 * declared here and loaded with dlopen: nothing of CUDA is needed to build the library, and a
 * machine without NVIDIA's driver runs it on OpenCL. The values are those of the driver API's
 * documentation (cuda.h of CUDA 12 and 13, unchanged across them).
 */
#ifndef HD_BACKENDS_CUDA_DRIVER_H
#define HD_BACKENDS_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

typedef int hd_cu_result; /* CUresult: 0 is success */
typedef int hd_cu_device;
typedef unsigned long long hd_cu_ptr; /* CUdeviceptr */
typedef struct hd_cu_context_ *hd_cu_context;
typedef struct hd_cu_module_ *hd_cu_module;
typedef struct hd_cu_function_ *hd_cu_function;
typedef struct hd_cu_stream_ *hd_cu_stream;
typedef struct hd_cu_event_ *hd_cu_event;

enum {
    HD_CU_SUCCESS = 0,
    HD_CU_ERROR_OUT_OF_MEMORY = 2,
    HD_CU_ERROR_NOT_READY = 600,

    HD_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    HD_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    HD_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    HD_CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    HD_CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    HD_CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    HD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    HD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    HD_CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH = 95,
    HD_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,

    HD_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    HD_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    HD_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,

    HD_CU_JIT_ERROR_LOG_BUFFER = 5,
    HD_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,

    HD_CU_STREAM_NON_BLOCKING = 1,
    HD_CU_EVENT_DEFAULT = 0,
};

/* The driver's functions, by the names libcuda exports (the _v2 entry points where the API
 * versioned them). */
#define HD_CUDA_DRIVER_FUNCTIONS(X)                                                                \
    X(cuInit, hd_cu_result, (unsigned flags))                                                      \
    X(cuDriverGetVersion, hd_cu_result, (int *version))                                            \
    X(cuGetErrorName, hd_cu_result, (hd_cu_result error, const char **name))                       \
    X(cuDeviceGetCount, hd_cu_result, (int *count))                                                \
    X(cuDeviceGet, hd_cu_result, (hd_cu_device * device, int ordinal))                             \
    X(cuDeviceGetAttribute, hd_cu_result, (int *value, int attribute, hd_cu_device device))        \
    X(cuDeviceTotalMem_v2, hd_cu_result, (size_t * bytes, hd_cu_device device))                    \
    X(cuDevicePrimaryCtxRetain, hd_cu_result, (hd_cu_context * ctx, hd_cu_device device))          \
    X(cuDevicePrimaryCtxRelease_v2, hd_cu_result, (hd_cu_device device))                           \
    X(cuCtxSetCurrent, hd_cu_result, (hd_cu_context ctx))                                          \
    X(cuStreamCreate, hd_cu_result, (hd_cu_stream * stream, unsigned flags))                       \
    X(cuStreamDestroy_v2, hd_cu_result, (hd_cu_stream stream))                                     \
    X(cuStreamSynchronize, hd_cu_result, (hd_cu_stream stream))                                    \
    X(cuEventCreate, hd_cu_result, (hd_cu_event * event, unsigned flags))                          \
    X(cuEventDestroy_v2, hd_cu_result, (hd_cu_event event))                                        \
    X(cuEventRecord, hd_cu_result, (hd_cu_event event, hd_cu_stream stream))                       \
    X(cuEventSynchronize, hd_cu_result, (hd_cu_event event))                                       \
    X(cuEventElapsedTime, hd_cu_result, (float *ms, hd_cu_event start, hd_cu_event end))           \
    X(cuMemAlloc_v2, hd_cu_result, (hd_cu_ptr * ptr, size_t bytes))                                \
    X(cuMemFree_v2, hd_cu_result, (hd_cu_ptr ptr))                                                 \
    X(cuMemAllocHost_v2, hd_cu_result, (void **ptr, size_t bytes))                                 \
    X(cuMemFreeHost, hd_cu_result, (void *ptr))                                                    \
    X(cuMemcpyHtoDAsync_v2, hd_cu_result,                                                          \
      (hd_cu_ptr dst, const void *src, size_t bytes, hd_cu_stream stream))                         \
    X(cuMemcpyDtoHAsync_v2, hd_cu_result,                                                          \
      (void *dst, hd_cu_ptr src, size_t bytes, hd_cu_stream stream))                               \
    X(cuMemcpyDtoDAsync_v2, hd_cu_result,                                                          \
      (hd_cu_ptr dst, hd_cu_ptr src, size_t bytes, hd_cu_stream stream))                           \
    X(cuMemsetD8Async, hd_cu_result,                                                               \
      (hd_cu_ptr dst, unsigned char value, size_t count, hd_cu_stream stream))                     \
    X(cuMemsetD32Async, hd_cu_result,                                                              \
      (hd_cu_ptr dst, unsigned value, size_t count, hd_cu_stream stream))                          \
    X(cuModuleLoadDataEx, hd_cu_result,                                                            \
      (hd_cu_module * module, const void *image, unsigned count, int *options, void **values))     \
    X(cuModuleUnload, hd_cu_result, (hd_cu_module module))                                         \
    X(cuModuleGetFunction, hd_cu_result,                                                           \
      (hd_cu_function * function, hd_cu_module module, const char *name))                          \
    X(cuFuncGetAttribute, hd_cu_result, (int *value, int attribute, hd_cu_function function))      \
    X(cuFuncSetAttribute, hd_cu_result, (hd_cu_function function, int attribute, int value))       \
    X(cuLaunchKernel, hd_cu_result,                                                                \
      (hd_cu_function function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,   \
       unsigned bz, unsigned shared_bytes, hd_cu_stream stream, void **params, void **extra))

/* cuTensorMapEncodeTiled's enumerations, the values of cuda.h. */
enum {
    HD_CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    HD_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    HD_CU_TENSOR_MAP_SWIZZLE_128B = 3,
    HD_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    HD_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, /* zeros */
};

/* cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute), with the attributes the
 * runtime sets: the thread-block cluster's dimensions (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
 * and a programmatic dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
 * its value programmaticStreamSerializationAllowed). */
enum {
    HD_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    HD_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};
typedef struct hd_cu_launch_attribute {
    int id;
    char pad[8 - sizeof(int)];
    union {
        char bytes[64]; /* CUlaunchAttributeValue's size */
        struct {
            unsigned x, y, z;
        } cluster_dim;
        int programmatic_serialization_allowed;
    } value;
} hd_cu_launch_attribute;
typedef struct hd_cu_launch_config {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    hd_cu_stream stream;
    hd_cu_launch_attribute *attrs;
    unsigned attr_count;
} hd_cu_launch_config;

#define HD_CUDA_DRIVER_MEMBER(name, ret, args) ret(*name) args;
typedef struct hd_cuda_driver {
    void *library;
    HD_CUDA_DRIVER_FUNCTIONS(HD_CUDA_DRIVER_MEMBER)
    /* CUDA 12.0 on, compute capability 9.0 on: NULL where the driver lacks it (the copy
     * engine's tensor maps are then not offered; everything else runs) */
    hd_cu_result (*cuTensorMapEncodeTiled)(void *map, int type, unsigned rank, void *address,
                                           const unsigned long long *dim,
                                           const unsigned long long *strides, const unsigned *box,
                                           const unsigned *element_strides, int interleave,
                                           int swizzle, int l2_promotion, int oob_fill);
    /* CUDA 12.0 on: NULL where the driver lacks it (no thread-block clusters) */
    hd_cu_result (*cuLaunchKernelEx)(const hd_cu_launch_config *config, hd_cu_function function,
                                     void **params, void **extra);
    /* CUDA 9.0 on: NULL where the driver lacks either (no launches of resident groups) */
    hd_cu_result (*cuLaunchCooperativeKernel)(hd_cu_function function, unsigned grid_x,
                                              unsigned grid_y, unsigned grid_z, unsigned block_x,
                                              unsigned block_y, unsigned block_z,
                                              unsigned shared_bytes, hd_cu_stream stream,
                                              void **params);
    hd_cu_result (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks,
                                                                hd_cu_function function, int block,
                                                                size_t shared_bytes);
} hd_cuda_driver;
#undef HD_CUDA_DRIVER_MEMBER

/* Loads the driver (once per process, kept until exit): libcuda.so.1, or the file
 * $HD_CUDA_LIBRARY names, and initializes it. NULL with the reason in why where it is not
 * there, lacks a function, or cuInit fails. Thread-safe. */
const hd_cuda_driver *hd__cuda_driver(char *why, size_t cap);

#endif
