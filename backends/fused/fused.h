/*
 * What the fused-kernel backend offers other backends: the LoRA epilogue
 * y += scale * (x * A) * B, for the hybrid plan that lets CLBlast compute y = x * W first.
 */
#ifndef HD_BACKENDS_FUSED_FUSED_H
#define HD_BACKENDS_FUSED_FUSED_H

#include <stddef.h>

#include "backends/backend.h"
#include "backends/runtime/runtime.h"

/*
 * Queues y += scale * (x * A) * B on the context's OpenCL queue, one launch. x, A, B and y
 * (args->x, a, b, y; args->w is not used) must already be valid on the device; y is read and
 * written, and the caller records the write. fused_state is the fused backend's state
 * (its state, as its probe made it). Any number of tokens; rank 0 queues nothing.
 * args->variant takes "WG=.. MR=.. VEC=.." (MR: tokens per work-group), NULL for defaults.
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT (malformed variant), HD_ERR_UNSUPPORTED (rank above
 * 64, sizes beyond the kernel's 32-bit indexing, a work-group too large for the device),
 * HD_ERR_BUILD, HD_ERR_DEVICE. Does not wait. The same as prepare, then enqueue.
 */
hd_status hd__fused_lora_update(void *fused_state, hd_context *ctx, const hd_lora_args *args);

/* The epilogue once it has accepted its arguments and parameters: its kernel built and its
 * arguments set, only the launch left. A plan whose earlier stage writes y prepares this
 * first, so that a refusal leaves y untouched. kernel is NULL where nothing is to be done. */
typedef struct hd_fused_update {
    hd_kernel *kernel;
    size_t groups, group;
} hd_fused_update;

/* Everything of hd__fused_lora_update() but the launch; the same statuses. Queues nothing. */
hd_status hd__fused_lora_update_prepare(void *fused_state, hd_context *ctx,
                                        const hd_lora_args *args, hd_fused_update *out);
/* Queues the prepared launch: HD_OK or HD_ERR_DEVICE. */
hd_status hd__fused_lora_update_enqueue(void *fused_state, hd_context *ctx,
                                        const hd_fused_update *u);

/* Whether the epilogue's parameters accept args->variant for this shape, without building or
 * queueing anything: HD_OK, or the status the epilogue would return with its message. */
hd_status hd__fused_lora_update_check(void *fused_state, hd_context *ctx, const hd_lora_args *args);

/* Whether hd__fused_lora_update() takes this LoRA shape (tokens, in, out, rank). */
bool hd__fused_lora_update_supports(const hd_shape *shape);

/* Lists up to max variant strings worth timing for the epilogue on this shape; returns how
 * many. The strings are static. */
size_t hd__fused_lora_update_variants(const hd_shape *shape, const char **out, size_t max);

#endif
