/* CLBlast status codes as hd_status values, with the code's name and number kept. */
#include "backends/clblast/clblast.h"
#include "core/error.h"

#define HD_CLBLAST_STATUS_MAP(X)                                                                   \
    X(CLBlastSuccess)                                                                              \
    X(CLBlastOpenCLCompilerNotAvailable)                                                           \
    X(CLBlastTempBufferAllocFailure)                                                               \
    X(CLBlastOpenCLOutOfResources)                                                                 \
    X(CLBlastOpenCLOutOfHostMemory)                                                                \
    X(CLBlastOpenCLBuildProgramFailure)                                                            \
    X(CLBlastInvalidValue)                                                                         \
    X(CLBlastInvalidCommandQueue)                                                                  \
    X(CLBlastInvalidMemObject)                                                                     \
    X(CLBlastInvalidBinary)                                                                        \
    X(CLBlastInvalidBuildOptions)                                                                  \
    X(CLBlastInvalidProgram)                                                                       \
    X(CLBlastInvalidProgramExecutable)                                                             \
    X(CLBlastInvalidKernelName)                                                                    \
    X(CLBlastInvalidKernelDefinition)                                                              \
    X(CLBlastInvalidKernel)                                                                        \
    X(CLBlastInvalidArgIndex)                                                                      \
    X(CLBlastInvalidArgValue)                                                                      \
    X(CLBlastInvalidArgSize)                                                                       \
    X(CLBlastInvalidKernelArgs)                                                                    \
    X(CLBlastInvalidLocalNumDimensions)                                                            \
    X(CLBlastInvalidLocalThreadsTotal)                                                             \
    X(CLBlastInvalidLocalThreadsDim)                                                               \
    X(CLBlastInvalidGlobalOffset)                                                                  \
    X(CLBlastInvalidEventWaitList)                                                                 \
    X(CLBlastInvalidEvent)                                                                         \
    X(CLBlastInvalidOperation)                                                                     \
    X(CLBlastInvalidBufferSize)                                                                    \
    X(CLBlastInvalidGlobalWorkSize)                                                                \
    X(CLBlastNotImplemented)                                                                       \
    X(CLBlastInvalidMatrixA)                                                                       \
    X(CLBlastInvalidMatrixB)                                                                       \
    X(CLBlastInvalidMatrixC)                                                                       \
    X(CLBlastInvalidVectorX)                                                                       \
    X(CLBlastInvalidVectorY)                                                                       \
    X(CLBlastInvalidDimension)                                                                     \
    X(CLBlastInvalidLeadDimA)                                                                      \
    X(CLBlastInvalidLeadDimB)                                                                      \
    X(CLBlastInvalidLeadDimC)                                                                      \
    X(CLBlastInvalidIncrementX)                                                                    \
    X(CLBlastInvalidIncrementY)                                                                    \
    X(CLBlastInsufficientMemoryA)                                                                  \
    X(CLBlastInsufficientMemoryB)                                                                  \
    X(CLBlastInsufficientMemoryC)                                                                  \
    X(CLBlastInsufficientMemoryX)                                                                  \
    X(CLBlastInsufficientMemoryY)                                                                  \
    X(CLBlastInsufficientMemoryTemp)                                                               \
    X(CLBlastInvalidBatchCount)                                                                    \
    X(CLBlastInvalidOverrideKernel)                                                                \
    X(CLBlastMissingOverrideParameter)                                                             \
    X(CLBlastInvalidLocalMemUsage)                                                                 \
    X(CLBlastNoHalfPrecision)                                                                      \
    X(CLBlastNoDoublePrecision)                                                                    \
    X(CLBlastInvalidVectorScalar)                                                                  \
    X(CLBlastInsufficientMemoryScalar)                                                             \
    X(CLBlastDatabaseError)                                                                        \
    X(CLBlastUnknownError)                                                                         \
    X(CLBlastUnexpectedError)

const char *hd__clblast_status_name(CLBlastStatusCode code)
{
    switch (code) {
#define HD_CLBLAST_STATUS_CASE(name)                                                               \
    case name:                                                                                     \
        return #name;
        HD_CLBLAST_STATUS_MAP(HD_CLBLAST_STATUS_CASE)
#undef HD_CLBLAST_STATUS_CASE
    }
    return "an unknown CLBlast status";
}

static hd_status status_of(CLBlastStatusCode code)
{
    switch (code) {
    case CLBlastSuccess:
        return HD_OK;
    case CLBlastTempBufferAllocFailure:
    case CLBlastOpenCLOutOfResources:
    case CLBlastInsufficientMemoryTemp:
        return HD_ERR_DEVICE_OUT_OF_MEMORY;
    case CLBlastOpenCLOutOfHostMemory:
        /* The OpenCL driver's host side ran out: for the caller a device that cannot take the
         * work, so the dispatcher may still run it on the CPU. */
        return HD_ERR_DEVICE_OUT_OF_MEMORY;
    case CLBlastOpenCLCompilerNotAvailable:
    case CLBlastOpenCLBuildProgramFailure:
    case CLBlastInvalidBinary:
    case CLBlastInvalidBuildOptions:
    case CLBlastInvalidProgram:
    case CLBlastInvalidProgramExecutable:
        return HD_ERR_BUILD;
    case CLBlastNotImplemented:
    case CLBlastNoHalfPrecision:
    case CLBlastNoDoublePrecision:
    case CLBlastInvalidLocalMemUsage:
    case CLBlastInvalidLocalThreadsTotal:
    case CLBlastInvalidLocalThreadsDim:
    case CLBlastInvalidLocalNumDimensions:
        /* The device cannot run this configuration: another backend can. */
        return HD_ERR_UNSUPPORTED;
    case CLBlastInvalidMatrixA:
    case CLBlastInvalidMatrixB:
    case CLBlastInvalidMatrixC:
    case CLBlastInvalidVectorX:
    case CLBlastInvalidVectorY:
    case CLBlastInvalidDimension:
    case CLBlastInvalidLeadDimA:
    case CLBlastInvalidLeadDimB:
    case CLBlastInvalidLeadDimC:
    case CLBlastInvalidIncrementX:
    case CLBlastInvalidIncrementY:
    case CLBlastInsufficientMemoryA:
    case CLBlastInsufficientMemoryB:
    case CLBlastInsufficientMemoryC:
    case CLBlastInsufficientMemoryX:
    case CLBlastInsufficientMemoryY:
    case CLBlastInvalidBatchCount:
    case CLBlastInvalidOverrideKernel:
    case CLBlastMissingOverrideParameter:
    case CLBlastInvalidVectorScalar:
    case CLBlastInsufficientMemoryScalar:
    case CLBlastDatabaseError:
    case CLBlastUnknownError:
    case CLBlastUnexpectedError:
        /* The backend checks shapes, buffers and parameter sets before calling: reaching
         * these means a bug here or in CLBlast, not bad caller input. */
        return HD_ERR_INTERNAL;
    case CLBlastInvalidValue:
    case CLBlastInvalidCommandQueue:
    case CLBlastInvalidMemObject:
    case CLBlastInvalidKernelName:
    case CLBlastInvalidKernelDefinition:
    case CLBlastInvalidKernel:
    case CLBlastInvalidArgIndex:
    case CLBlastInvalidArgValue:
    case CLBlastInvalidArgSize:
    case CLBlastInvalidKernelArgs:
    case CLBlastInvalidGlobalOffset:
    case CLBlastInvalidEventWaitList:
    case CLBlastInvalidEvent:
    case CLBlastInvalidOperation:
    case CLBlastInvalidBufferSize:
    case CLBlastInvalidGlobalWorkSize:
        return HD_ERR_DEVICE;
    }
    return HD_ERR_DEVICE; /* a raw OpenCL code CLBlast passed through */
}

hd_status hd__clblast_error(hd_context *ctx, CLBlastStatusCode code, const char *what)
{
    hd_status s = status_of(code);
    if (s == HD_OK)
        return HD_OK;
    return hd__error(ctx, s, "%s: CLBlast %s (%d)", what, hd__clblast_status_name(code), (int)code);
}
