/* A tensor's handle and the state behind it: what every layer reads of a tensor. The handle
 * (context and shape) never changes; the state says where the contents are valid (host memory,
 * one buffer on the context's device, both, or neither: zeros) and what staying there has cost.
 * The residency functions that change the state are the dispatcher's (dispatch/tensor.h). */
#ifndef HD_CORE_TENSOR_H
#define HD_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

struct hd_device_buffer; /* the device backends' runtime owns it (hd_device_ops) */

typedef enum hd_place {
    HD_PLACE_HOST = 0,
    HD_PLACE_DEVICE = 1,
} hd_place;

/* Where a tensor's contents are and what staying there has cost: the state an operation
 * changes when it moves an input it takes as const. It lives behind the handle, so that const
 * stays honest: no cast is needed, and the handle itself (context and shape) never changes. */
typedef struct hd_tensor_state {
    float *host;                     /* NULL until first needed on the host; an int32
                                        tensor's holds int32_t (hd__tensor_host_ids()) */
    struct hd_device_buffer *device; /* NULL until first needed on the device */
    bool host_valid, device_valid;   /* neither: the tensor holds zeros */
    /* What staying where it is has cost since its last copy: the microseconds by which calls
     * that used it ran slower than they would have with it at the other place
     * (dispatch/select.c). Once this reaches the cost of one copy, the copy pays for itself
     * and the scheduler counts the tensor's migration as free; the copy resets it. A write
     * from the host leaves it as it is: every copy is paid for by staying that cost as much
     * since the one before, however the calls fall between writes, which keeps any sequence
     * of writes and calls within twice the better of always copying and never copying. */
    double stay_us;
    bool host_pinned; /* host came from the device's host_alloc (hd__host_alloc) */
} hd_tensor_state;

struct hd_tensor {
    hd_context *ctx;
    size_t rows, cols;
    hd_dtype dtype;         /* both types are 4 bytes an element */
    hd_tensor_state *state; /* allocated with the tensor */
};

/* An int32 tensor's ids, in its host copy: current whenever the tensor has been written or
 * placed on the host (hd__tensor_to_host(), which reads back the zeros of one prefetched before
 * any write), since only the host writes int32 tensors. */
static inline const int32_t *hd__tensor_host_ids(const hd_tensor *t)
{
    return (const int32_t *)(const void *)t->state->host;
}

/* What a tensor of element type d holds, for messages: "floats", "int32". */
static inline const char *hd__dtype_holds(hd_dtype d)
{
    return d == HD_DTYPE_I32 ? "int32" : "floats";
}

static inline size_t hd__tensor_count(const hd_tensor *t)
{
    return t->rows * t->cols; /* cannot overflow: checked at creation */
}

#endif
