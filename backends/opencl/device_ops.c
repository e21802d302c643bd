/* The OpenCL runtime as the device place of tensors: the hooks dispatch/ reaches it through
 * (backends/backend.h). */
#include "backends/backend.h"
#include "backends/opencl/runtime.h"

extern const hd_device_ops hd__opencl_device_ops;

const hd_device_ops hd__opencl_device_ops = {
    .open = hd__cl_runtime_create,
    .close = hd__cl_runtime_destroy,
    .name = hd__cl_device_name,
    .finish = hd__cl_finish,
    .acquire = hd__cl_buffer_acquire,
    .release = hd__cl_buffer_release,
    .upload = hd__cl_upload,
    .download = hd__cl_download,
    .zero = hd__cl_zero,
    .host_alloc = hd__cl_host_alloc,
    .host_free = hd__cl_host_free,
    .is_gpu = hd__cl_device_is_gpu,
    .driver = hd__cl_driver_version,
    .platform = hd__cl_platform_name,
    .capture_begin = hd__cl_capture_begin,
    .capture_end = hd__cl_capture_end,
};
