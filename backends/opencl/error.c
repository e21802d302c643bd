/* OpenCL error codes as names and as hd_status. */
#include "backends/opencl/runtime.h"
#include "core/error.h"

#define HD_CL_ERROR_MAP(X)                                                                         \
    X(CL_SUCCESS)                                                                                  \
    X(CL_DEVICE_NOT_FOUND)                                                                         \
    X(CL_DEVICE_NOT_AVAILABLE)                                                                     \
    X(CL_COMPILER_NOT_AVAILABLE)                                                                   \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE)                                                            \
    X(CL_OUT_OF_RESOURCES)                                                                         \
    X(CL_OUT_OF_HOST_MEMORY)                                                                       \
    X(CL_PROFILING_INFO_NOT_AVAILABLE)                                                             \
    X(CL_MEM_COPY_OVERLAP)                                                                         \
    X(CL_IMAGE_FORMAT_MISMATCH)                                                                    \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED)                                                               \
    X(CL_BUILD_PROGRAM_FAILURE)                                                                    \
    X(CL_MAP_FAILURE)                                                                              \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET)                                                             \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)                                                \
    X(CL_COMPILE_PROGRAM_FAILURE)                                                                  \
    X(CL_LINKER_NOT_AVAILABLE)                                                                     \
    X(CL_LINK_PROGRAM_FAILURE)                                                                     \
    X(CL_DEVICE_PARTITION_FAILED)                                                                  \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)                                                            \
    X(CL_INVALID_VALUE)                                                                            \
    X(CL_INVALID_DEVICE_TYPE)                                                                      \
    X(CL_INVALID_PLATFORM)                                                                         \
    X(CL_INVALID_DEVICE)                                                                           \
    X(CL_INVALID_CONTEXT)                                                                          \
    X(CL_INVALID_QUEUE_PROPERTIES)                                                                 \
    X(CL_INVALID_COMMAND_QUEUE)                                                                    \
    X(CL_INVALID_HOST_PTR)                                                                         \
    X(CL_INVALID_MEM_OBJECT)                                                                       \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)                                                          \
    X(CL_INVALID_IMAGE_SIZE)                                                                       \
    X(CL_INVALID_SAMPLER)                                                                          \
    X(CL_INVALID_BINARY)                                                                           \
    X(CL_INVALID_BUILD_OPTIONS)                                                                    \
    X(CL_INVALID_PROGRAM)                                                                          \
    X(CL_INVALID_PROGRAM_EXECUTABLE)                                                               \
    X(CL_INVALID_KERNEL_NAME)                                                                      \
    X(CL_INVALID_KERNEL_DEFINITION)                                                                \
    X(CL_INVALID_KERNEL)                                                                           \
    X(CL_INVALID_ARG_INDEX)                                                                        \
    X(CL_INVALID_ARG_VALUE)                                                                        \
    X(CL_INVALID_ARG_SIZE)                                                                         \
    X(CL_INVALID_KERNEL_ARGS)                                                                      \
    X(CL_INVALID_WORK_DIMENSION)                                                                   \
    X(CL_INVALID_WORK_GROUP_SIZE)                                                                  \
    X(CL_INVALID_WORK_ITEM_SIZE)                                                                   \
    X(CL_INVALID_GLOBAL_OFFSET)                                                                    \
    X(CL_INVALID_EVENT_WAIT_LIST)                                                                  \
    X(CL_INVALID_EVENT)                                                                            \
    X(CL_INVALID_OPERATION)                                                                        \
    X(CL_INVALID_GL_OBJECT)                                                                        \
    X(CL_INVALID_BUFFER_SIZE)                                                                      \
    X(CL_INVALID_MIP_LEVEL)                                                                        \
    X(CL_INVALID_GLOBAL_WORK_SIZE)                                                                 \
    X(CL_INVALID_PROPERTY)                                                                         \
    X(CL_INVALID_IMAGE_DESCRIPTOR)                                                                 \
    X(CL_INVALID_COMPILER_OPTIONS)                                                                 \
    X(CL_INVALID_LINKER_OPTIONS)                                                                   \
    X(CL_INVALID_DEVICE_PARTITION_COUNT)

/* Codes of extensions and newer versions that the 1.2 headers do not name. */
#define HD_CL_PLATFORM_NOT_FOUND_KHR        (-1001)
#define HD_CL_INVALID_PIPE_SIZE             (-69)
#define HD_CL_INVALID_DEVICE_QUEUE          (-70)
#define HD_CL_INVALID_SPEC_ID               (-71)
#define HD_CL_MAX_SIZE_RESTRICTION_EXCEEDED (-72)

const char *hd__cl_error_name(cl_int err)
{
    switch (err) {
#define HD_CL_ERROR_CASE(name)                                                                     \
    case name:                                                                                     \
        return #name;
        HD_CL_ERROR_MAP(HD_CL_ERROR_CASE)
#undef HD_CL_ERROR_CASE
    case HD_CL_PLATFORM_NOT_FOUND_KHR:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    case HD_CL_INVALID_PIPE_SIZE:
        return "CL_INVALID_PIPE_SIZE";
    case HD_CL_INVALID_DEVICE_QUEUE:
        return "CL_INVALID_DEVICE_QUEUE";
    case HD_CL_INVALID_SPEC_ID:
        return "CL_INVALID_SPEC_ID";
    case HD_CL_MAX_SIZE_RESTRICTION_EXCEEDED:
        return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

hd_status hd__cl_error(hd_context *ctx, cl_int err, const char *what)
{
    hd_status s;
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES: /* also what drivers report when device memory runs out */
    case CL_OUT_OF_HOST_MEMORY:
        /* the driver's host side out of memory: as CLBlast's status says it, a device that
         * cannot take this work now, not one to give up on for the context's life; the
         * dispatcher falls back, and the CPU may still have the memory the driver could not
         * get */
        s = HD_ERR_DEVICE_OUT_OF_MEMORY;
        break;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE:
    case CL_INVALID_BUILD_OPTIONS:
    case CL_INVALID_COMPILER_OPTIONS:
    case CL_COMPILER_NOT_AVAILABLE:
        s = HD_ERR_BUILD;
        break;
    default:
        s = HD_ERR_DEVICE;
        break;
    }
    return hd__error(ctx, s, "%s failed: %s (%d)", what, hd__cl_error_name(err), (int)err);
}
