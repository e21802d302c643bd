/* Tensors and their residency. A tensor's contents live in up to two places: host memory and
 * one buffer on the context's device. Each place has a valid flag; an operation makes its
 * inputs valid where it runs (copying lazily), and after writing an output marks that place
 * the only valid one. A tensor that was never written reads as zeros. The functions below
 * take const tensors: they change the state behind the handle, never the handle. */
#ifndef HD_DISPATCH_TENSOR_H
#define HD_DISPATCH_TENSOR_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#include "core/tensor.h"

/* Makes t's contents valid at place (copying, waiting for the device as needed). */
hd_status hd__tensor_to_host(const hd_tensor *t);
hd_status hd__tensor_to_device(const hd_tensor *t);
hd_status hd__tensor_to_place(const hd_tensor *t, hd_place place);

/* Gives t storage at place without making its contents valid there: for an output whose
 * every element the operation overwrites. */
hd_status hd__tensor_reserve(const hd_tensor *t, hd_place place);

/* Records that an operation wrote t at place: the other place becomes stale. */
void hd__tensor_written(const hd_tensor *t, hd_place place);

/* Bytes that would have to move to make t valid at place: 0 if it already is. Used by the
 * dispatcher to count migration cost in its choice. */
size_t hd__tensor_migration_bytes(const hd_tensor *t, hd_place place);

/* Queues a copy of t to the context's device when it is not valid there (no device: nothing).
 * hd_tensor_prefetch() is this, for callers. */
hd_status hd__tensor_prefetch(const hd_tensor *t);

#endif
