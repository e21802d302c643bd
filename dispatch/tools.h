/*
 * The tools' interface: everything dispatch-autotune, dispatch-bench, the dispatch-overhead
 * benchmark and the tools' library hd_tools (autotune/) may do to a context beyond
 * include/hd/dispatch.h. A tool prepares a call of an op from tensors and scalars as the
 * public functions do, then runs it on a backend or plan and variant of its choosing with no
 * fallback (what the tuner times is then one candidate, run as the dispatcher would run it),
 * or through the scheduler as a public call does, or through a backend's slot alone, to see
 * what the dispatcher adds to it. It asks which backends take a call, where they run, which
 * variants they list and what they estimate a call at, sets a backend's device parameter set,
 * and asks which backend an op is forced to and how often the plan memo answered. The
 * context's fields, the scheduler's plans, the argument checks and the backends' states stay
 * behind these functions, so that dispatch/ can change them without a tool noticing;
 * tests/check_layers.sh keeps the tools to this header.
 *
 * Beside it the tools include core/ (the op table: names, dims, tensors, flops, value ranges;
 * files, which the cache writer opens as the reader does; errors: the tools' library fails as
 * the library does, a status returned and one sentence on the context, so that a tool prints
 * hd_context_last_error() alike after a failed measurement and a failed call),
 * dispatch/device.h (the device as they measure it), dispatch/tuning.h and
 * dispatch/tune_file.h (the records they write), and backends/backend.h for the calibration.
 *
 * The dispatcher's own headers include this one for the call type.
 */
#ifndef HD_DISPATCH_TOOLS_H
#define HD_DISPATCH_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#include "backends/backend.h"
#include "core/names.h"
#include "core/op.h"

/* The tensors one call reads and writes, for migration costs and residency. */
typedef struct hd_call_tensors {
    const hd_tensor *inputs[HD_OP_TENSOR_MAX];
    int input_count;
    const hd_tensor *outputs[HD_OP_TENSOR_MAX];
    int output_count;
    bool output_read; /* the op reads its outputs' old contents (GEMM with beta != 0) */
} hd_call_tensors;

/* What a checked call amounts to before any backend is asked. */
typedef enum hd_call_kind {
    HD_CALL_RUN = 0,    /* a non-empty problem for a backend */
    HD_CALL_NOTHING,    /* an empty output: nothing to do */
    HD_CALL_SCALE_ONLY, /* C = beta*C (GEMM with k = 0 or alpha = 0): no product to compute */
} hd_call_kind;

/* One checked call of an operation: what hd__call_prepare() builds and the run functions
 * take. A tool keeps it and runs it as often as it likes: its tensors are referenced, not
 * owned, and must outlive it. */
typedef struct hd_call {
    hd_op op;
    hd_call_kind kind;
    hd_shape shape;
    hd_call_tensors io;
    hd_op_args args;
    float beta; /* HD_CALL_SCALE_ONLY: the output becomes beta times itself */
    /* HD_CALL_SCALE_ONLY: the outputs after the first are zeroed, not scaled (a loss of NaN
     * over no term, and its gradients of 0) */
    bool zero_after_first;
} hd_call;

/* Checks a call of op with tensors t (in the op table's order) and scalars p, and builds it:
 * the table's checks of every tensor (NULL, context, aliasing), then the op's own. Touches
 * nothing. */
hd_status hd__call_prepare(hd_context *ctx, hd_op op, const hd_tensor *const t[],
                           const hd_op_params *p, hd_call *call);

/* hd__call_prepare(), then the scheduler: what every public operation does. */
hd_status hd__call(hd_context *ctx, hd_op op, const hd_tensor *const t[], const hd_op_params *p);

/* Runs call on backend or plan b (usable in ctx, taking the call) with the kernel parameters
 * of variant (NULL: the defaults): makes the inputs valid at b's place, runs its slot (a
 * plan: each stage's), then records the outputs as written there and b as the last backend.
 * No fallback: a failure is returned with the outputs untouched. */
hd_status hd__call_run_on(hd_context *ctx, hd_backend b, hd_call *call, const char *variant);

/* Runs b's slot (a plan: each stage's) on call with its defaults and nothing around it: no
 * tensor made valid at b's place, nothing recorded, no fallback. b must be usable in ctx and
 * take the call, whose tensors must already be valid at b's place. What a call costs without
 * the dispatcher, for the dispatch-overhead benchmark. */
hd_status hd__call_run_slot(hd_context *ctx, hd_backend b, const hd_call *call);

/* Whether backend or plan b is present and healthy in ctx (a plan: both its backends). */
bool hd__backend_usable(const hd_context *ctx, hd_backend b);

/* Whether backend b is usable in ctx and takes (op, shape): it has the slot and its
 * supports() agrees. */
bool hd__backend_takes(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape);

/* Whether backend b is usable in ctx and has an AdamW slot: hd_adamw() runs on it where the
 * first parameter is valid at its place (dispatch/adamw.c). False for plans and auto. */
bool hd__backend_runs_adamw(const hd_context *ctx, hd_backend b);

/* Where backend or plan b needs its tensors (a plan: where its first stage runs); b must be
 * usable in ctx. */
hd_place hd__backend_place(const hd_context *ctx, hd_backend b);

/* b's own estimate of one call with its inputs in place, in microseconds (a plan: the sum of
 * its stages), from cal (NULL or zero fields: the backend's default rates): what the
 * scheduler's cost model compares, and what the tools budget their runs by. Negative where b
 * does not estimate. */
double hd__backend_estimate_us(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                               const hd_tune_calibration *cal);

/* The kernel-parameter variants b lists for (op, shape), for the tuner (a plan: its
 * epilogue's); returns how many, at most max. The strings belong to the backend and live as
 * long as ctx. */
size_t hd__backend_variants(const hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                            const char **out, size_t max);

/* As hd__backend_check_variant(), and where it passes, the programs b's slot would build for
 * variant queued on the device's build-ahead workers (hd__device_build_ahead_start()); HD_OK
 * where b builds nothing ahead. */
hd_status hd__backend_build_ahead(hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                                  const char *variant);

/* Sets backend b's device-level parameter set `name` to value in ctx (backends/backend.h's
 * set_params: CLBlast's "base"), as the tuner records it in the cache's "param" lines: the
 * context's later calls run with it. HD_OK; HD_ERR_BACKEND_UNAVAILABLE (b absent, unhealthy,
 * a plan or auto), HD_ERR_UNSUPPORTED (b has no such set), HD_ERR_INVALID_ARGUMENT (a value b
 * refuses: the previous set is kept), each with the context's message. */
hd_status hd__backend_set_params(hd_context *ctx, hd_backend b, const char *name,
                                 const char *value);

/* The backend op is forced to (HD_BACKEND_AUTO: none), for tools that force one for a while
 * and put the old choice back with hd_context_set_backend(). */
hd_backend hd__forced_backend(const hd_context *ctx, hd_op op);

/* Plan memo statistics: lookups answered from the memo, and plans made. */
void hd__plans_stats(const hd_context *ctx, unsigned long *hits, unsigned long *misses);


/* hd_context_explain() for a shape as the op table holds it (with LoRA's layout flags, which
 * the public call's dims cannot carry). */
hd_status hd__explain_shape(hd_context *ctx, hd_op op, const hd_shape *shape, char *buf,
                            size_t size);

/* "gemm 1x4096x4096 nt", "softmax 64x1024": the key of a call in messages. */
void hd__shape_text(hd_op op, const hd_shape *shape, char *buf, size_t size);

#endif
