/* The context: the backends probed on this machine, the OpenCL runtime they share, the forced
 * choices, the tuning table and the last error. */
#ifndef HD_DISPATCH_CONTEXT_H
#define HD_DISPATCH_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

#include "backends/backend.h"
#include "core/error.h"
#include "core/names.h"
#include "dispatch/fault.h"

struct hd_runtime;
struct hd_tune_table;

struct hd_context {
    hd_report report; /* first: the layers below report through it (core/error.h) */

    /* Indexed by hd_backend; NULL where the backend is not built or not available here. A
     * plan of two backends has its composite instead of an impl and a state. */
    const hd_backend_impl *backends[HD_BACKEND_COUNT];
    void *backend_state[HD_BACKEND_COUNT];
    const hd_composite *composite[HD_BACKEND_COUNT];
    bool backend_unhealthy[HD_BACKEND_COUNT]; /* its device failed during this context */

    hd_backend forced[HD_OP_COUNT]; /* HD_BACKEND_AUTO: dispatcher chooses */
    hd_backend last_backend;
    hd_precision gemm_precision; /* what GEMMs run in: requested and available; in plan keys */
    bool deterministic;          /* every sum in a fixed order (hd_context_options) */

    struct hd_plan_memo *plans; /* memoized plans (dispatch/memo.h); NULL until first used */
    uint64_t plan_generation;   /* bumped by whatever can change a plan */

    struct hd_runtime *rt;           /* the device runtime; NULL: no device */
    const hd_device_ops *dev;        /* its hooks (backends/backend.h); NULL without one */
    bool pinned_host;                /* large tensors' host copies pinned ($HD_PINNED) */
    struct hd_tune_table *tune;      /* NULL: no tuning cache (dispatch/tuning.c) */
    char tune_cache_path[1024];      /* "" when none */
    hd_fault_spec fault;             /* $HD_FAULT, for tests (dispatch/fault.h) */
    struct hd_profile *profile;      /* $HD_PROFILE=1 (dispatch/profile.h); NULL: none */
    size_t cpu_threads;              /* requested before the CPU backend's probe (0: default),
                                        the count in use after it */
};

_Static_assert(offsetof(struct hd_context, report) == 0,
               "the report comes first: core/error.h reaches it from the context's address");

/* Parses a backend specification ("cpu", "fused", "gemm=clblast,softmax=fused") into
 * forced[], checking names. Used for $HD_BACKEND and hd_context_options.backends. */
hd_status hd__parse_backend_spec(hd_context *ctx, const char *spec,
                                 hd_backend forced[HD_OP_COUNT]);


/* Marks b unhealthy after a device failure: the dispatcher stops choosing it. */
void hd__backend_mark_unhealthy(hd_context *ctx, hd_backend b);

/* Probes every registered backend into ctx (and the plans whose backends both probed), and
 * destroys their states again. */
hd_status hd__backends_probe(hd_context *ctx);
void hd__backends_destroy(hd_context *ctx);


#endif
