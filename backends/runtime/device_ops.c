/* The device runtime as the device place of tensors: the hooks dispatch/ reaches it through
 * (backends/backend.h). */
#include "backends/backend.h"
#include "backends/runtime/runtime.h"

extern const hd_device_ops hd__runtime_device_ops;

static hd_status zero(hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf, size_t bytes)
{
    return hd__rt_zero(rt, ctx, buf->mem, bytes < buf->capacity ? bytes : buf->capacity);
}

const hd_device_ops hd__runtime_device_ops = {
    .open = hd__rt_open,
    .close = hd__rt_close,
    .name = hd__rt_device_name,
    .runtime = hd__rt_kind_name,
    .finish = hd__rt_finish,
    .acquire = hd__rt_buffer_acquire,
    .release = hd__rt_buffer_release,
    .upload = hd__rt_upload,
    .download = hd__rt_download,
    .zero = zero,
    .host_alloc = hd__rt_host_alloc,
    .host_free = hd__rt_host_free,
    .is_gpu = hd__rt_is_gpu,
    .driver = hd__rt_driver_version,
    .platform = hd__rt_platform_name,
    .capture_begin = hd__rt_capture_begin,
    .capture_end = hd__rt_capture_end,
};
