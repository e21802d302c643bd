/* The context: the backends probed on this machine, the OpenCL runtime they share, the forced
 * choices, the tuning table and the last error. */
#ifndef HD_DISPATCH_CONTEXT_H
#define HD_DISPATCH_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

#include "backends/backend.h"
#include "dispatch/fault.h"

struct hd_cl_runtime;
struct hd_tune_table;

#define HD_ERROR_CAPACITY 4096

struct hd_context {
    char last_error[HD_ERROR_CAPACITY];
    void (*log)(void *user, const char *message); /* notes (hd__note); NULL: none */
    void *log_user;
    bool log_stderr; /* $HD_LOG=1 */

    /* Indexed by hd_backend; NULL where the backend is not built or not available here. A
     * plan of two backends has its composite instead of an impl and a state. */
    const hd_backend_impl *backends[HD_BACKEND_COUNT];
    void *backend_state[HD_BACKEND_COUNT];
    const hd_composite *composite[HD_BACKEND_COUNT];
    bool backend_unhealthy[HD_BACKEND_COUNT]; /* its device failed during this context */

    hd_backend forced[HD_OP_COUNT]; /* HD_BACKEND_AUTO: dispatcher chooses */
    hd_backend last_backend;
    bool outputs_changed; /* the running slot failed after writing an output (error.h) */
    hd_precision gemm_precision; /* what GEMMs run in: requested and available; in plan keys */

    struct hd_plan_memo *plans; /* memoized plans (dispatch/memo.h); NULL until first used */
    uint64_t plan_generation;   /* bumped by whatever can change a plan */

    struct hd_cl_runtime *cl;        /* NULL: no OpenCL device */
    const hd_device_ops *dev;        /* its hooks (backends/backend.h); NULL without one */
    bool pinned_host;                /* large tensors' host copies pinned ($HD_PINNED) */
    struct hd_tune_table *tune;      /* NULL: no tuning cache */
    char tune_cache_path[1024];      /* "" when none */
    hd_fault_spec fault;             /* $HD_FAULT, for tests (dispatch/fault.h) */
    size_t cpu_threads;              /* requested before the CPU backend's probe (0: default),
                                        the count in use after it */
};

/* Parses a backend specification ("cpu", "fused", "gemm=clblast,softmax=fused") into
 * forced[], checking names. Used for $HD_BACKEND and hd_context_options.backends. */
hd_status hd__parse_backend_spec(hd_context *ctx, const char *spec,
                                 hd_backend forced[HD_OP_COUNT]);

/* GEMM precision by name ("fp32", "fp32x3", "tf32"); false if unknown. Backends and ops by
 * name, whether a backend is usable and the backend an op is forced to are declared in
 * dispatch/tools.h: the tools ask them too. */
bool hd__precision_from_name(const char *name, hd_precision *p);

/* Marks b unhealthy after a device failure: the dispatcher stops choosing it. */
void hd__backend_mark_unhealthy(hd_context *ctx, hd_backend b);

/* Probes every registered backend into ctx (and the plans whose backends both probed), and
 * destroys their states again. */
hd_status hd__backends_probe(hd_context *ctx);
void hd__backends_destroy(hd_context *ctx);

/* Opens the tuning table named by the options or the environment (autotune/table.c). A
 * damaged file is reported as a note (the context's log) and ignored: the context works
 * without it. */
hd_status hd__tune_open(hd_context *ctx, const hd_context_options *opt);
void hd__tune_close(hd_context *ctx);

#endif
