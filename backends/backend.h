/*
 * The private backend interface. Each backend is one `static const hd_backend_impl` with
 * designated initializers, listed in the registry (backends/registry.c). The dispatcher checks
 * every argument, chooses a backend, makes the inputs valid at the backend's place, and then
 * calls one op slot; a slot therefore sees only well-formed, non-empty problems (rows, m, n,
 * k >= 1; LoRA rank may be 0) and never aliased GEMM/LoRA outputs.
 *
 * A slot returns HD_OK once the work is queued (device backends) or done (CPU), or an error
 * with the context's message set through hd__error(). HD_ERR_UNSUPPORTED, and any device error,
 * make the dispatcher try the next backend; so a slot must leave outputs untouched when it
 * fails. Members marked (optional) may be NULL.
 */
#ifndef HD_BACKENDS_BACKEND_H
#define HD_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#include "core/args.h"
#include "core/tensor.h"

/* The first backend or plan of hd_backend: "auto" comes first in HD_BACKEND_MAP, the rest are
 * backends and plans, so that `for (b = HD_BACKEND_FIRST; b < HD_BACKEND_COUNT; b++)` visits
 * each without naming one. */
#define HD_BACKEND_FIRST (HD_BACKEND_AUTO + 1)
_Static_assert(HD_BACKEND_AUTO == 0, "auto must come first in HD_BACKEND_MAP");

/* The device's measured constants for the cost model, from the tuning cache; 0 means not
 * measured, and each backend then uses its own default. */
typedef struct hd_tune_calibration {
    double launch_us;   /* one small kernel, enqueue to completion, device events */
    double copy_gbps;   /* device-to-device copy, GB/s */
    double host_gbps;   /* host-to-device upload, GB/s */
    double gemm_gflops; /* best device SGEMM rate seen on a large square GEMM */
    double fused_gflops;   /* the fused backend's own on that GEMM, its default parameters */
    double clblast_gflops; /* CLBlast's own on that GEMM */
    double cpu_gflops;  /* CPU SGEMM rate */
    double cpu_gbps;    /* CPU streaming bandwidth (read + write) */
} hd_tune_calibration;

/* Which part of an op a backend is asked about: the whole op, or its epilogue after another
 * backend computed the op's leading product into the output (a plan of two backends; the op
 * table names the product). */
typedef enum hd_part {
    HD_PART_WHOLE = 0,
    HD_PART_EPILOGUE,
} hd_part;

struct hd_runtime;       /* the device runtime the device backends share (backends/runtime) */
struct hd_device_buffer; /* a tensor's storage at the device place */

/* What a backend's probe gets of the context, once: the device runtime, the thread count,
 * whether its sums must run in a fixed order. */
typedef struct hd_backend_setup {
    struct hd_runtime *device;    /* the device runtime the device backends share; NULL: none */
    size_t cpu_threads;           /* CPU threads asked for; 0: the default */
    bool deterministic;           /* every sum in a fixed order (hd_context_options) */
} hd_backend_setup;

/* One op (or its epilogue) on a backend: args->gemm, lora or row as the op table says. */
typedef hd_status (*hd_op_slot)(void *state, hd_context *ctx, const hd_op_args *args);

typedef struct hd_backend_impl {
    const char *name;
    hd_backend id;
    hd_place place; /* where the backend needs its tensors */

    /* Prepares the backend for ctx with what setup gives it, which it keeps in its state (a
     * backend reads nothing of the context: ctx is where it reports). Returns
     * HD_ERR_BACKEND_UNAVAILABLE (with a message) when it cannot run here, which is not an
     * error for the context. *state is passed to every slot. */
    hd_status (*probe)(hd_context *ctx, const hd_backend_setup *setup, void **state);
    void (*destroy)(void *state); /* (optional) */

    /* The CPU threads the backend runs with, as its probe resolved setup->cpu_threads.
     * (optional: it runs none of its own) */
    size_t (*cpu_threads)(void *state);

    /* Whether the backend takes this shape of op (or of its epilogue), by its own limits;
     * NULL: every shape its slots take. (optional) */
    bool (*supports)(void *state, hd_op op, const hd_shape *shape, hd_part part);

    /* The backend's own estimate of one call in microseconds, its inputs already at its
     * place, from the device's calibration (NULL or zero fields: the backend's defaults).
     * The scheduler's cost model compares these. (optional: not costed) */
    double (*estimate_us)(void *state, hd_op op, const hd_shape *shape, hd_part part,
                          const hd_tune_calibration *cal);

    /* Lists up to max kernel-parameter variants worth timing for (op, shape, part), as
     * strings the slots accept in args->variant; returns how many. The autotuner times each.
     * (optional) */
    size_t (*variants)(void *state, hd_op op, const hd_shape *shape, hd_part part, const char **out,
                       size_t max);

    /* Whether the backend computes GEMMs in precision p here (fp32: every backend); NULL: fp32
     * only. The context runs fp32 when no backend takes the requested mode. (optional) */
    bool (*runs_precision)(void *state, hd_precision p);

    /* Whether the slot of op (or of its epilogue) would accept variant for shape on this device,
     * checked without building or running anything: HD_OK, or the status the slot would
     * return, with its message. The tuning table drops a record whose variant fails here, so
     * that a damaged or foreign cache cannot make a valid call fail. (optional: NULL, not
     * checked at load; a variant that fails at a call still falls back) */
    hd_status (*check_variant)(void *state, hd_context *ctx, hd_op op, const hd_shape *shape,
                               hd_part part, const char *variant);

    /* As check_variant, and where it passes, the programs the slot would build for variant
     * queued on the device runtime's build-ahead workers (the tuner's, while it times the
     * candidate before), so that the first call finds them built; a backend may queue only
     * those that take long to build. (optional: nothing is built ahead) */
    hd_status (*build_ahead)(void *state, hd_context *ctx, hd_op op, const hd_shape *shape,
                             hd_part part, const char *variant);

    /* Sets the backend's device-level parameter set `name` for this context (what the tuning
     * cache's "param" lines hold, read by the backend itself on first use: CLBlast's "base",
     * the set every call without a variant runs with) to value, checked as check_variant
     * checks a variant: HD_OK, or the status and message of the refusal with the previous set
     * kept. Later calls of the context run with it; the cache's value no longer applies.
     * (optional: none to set) */
    hd_status (*set_params)(void *state, hd_context *ctx, const char *name, const char *value);

    /* Takes the tuning cache's device-level parameter set `name` for this backend (a "param"
     * line), as the context hands it over when it opens the cache: kept and laid over the
     * backend's defaults for the calls to come, each set checked when a call first needs it (a
     * check runs kernels), as set_params' are not. One that cannot be read is a note.
     * (optional: the backend keeps no such set) */
    void (*cached_params)(void *state, hd_context *ctx, const char *name, const char *value);

    /* Builds or compiles whatever the first call would. (optional) */
    hd_status (*warmup)(void *state, hd_context *ctx);

    /* t = beta*t where t is valid at the backend's place (beta = 0 ignores t's contents, NaN
     * included): GEMM with k = 0 or alpha = 0, which has no product to compute but must not
     * fetch a device-resident C to the host. Queued, not waited for. HD_ERR_UNSUPPORTED
     * declines. (optional) */
    hd_status (*scale)(void *state, hd_context *ctx, const hd_tensor *t, float beta);

    hd_op_slot run[HD_OP_COUNT];      /* the whole op; NULL: not offered */
    hd_op_slot epilogue[HD_OP_COUNT]; /* the op after its product; NULL: not offered */

    /* One AdamW step over every tensor of args (hd_adamw(), not an op of the table: it takes
     * any number of tensors), all of them valid at the backend's place. As a slot: HD_OK once
     * queued or done; a failure before anything was written leaves every tensor as it was
     * (the dispatcher then runs it on the host), one after says hd__error_outputs_changed().
     * (optional) */
    hd_status (*adamw)(void *state, hd_context *ctx, const hd_adamw_args *args);
} hd_backend_impl;

/* The device place, as the device backends' runtime provides it: opening the device, its
 * buffers and copies, and waiting. dispatch/ reaches the device only through these hooks
 * (ggml's buffer type is the model), so it includes nothing of backends/opencl/. */
typedef struct hd_device_ops {
    /* Opens the device spec names (NULL: the default one) on the runtime choice names
     * ("auto", "opencl", "cuda"; NULL: $HD_RUNTIME, else auto; fail_probe: fault injection,
     * backends/runtime/runtime.h). HD_ERR_BACKEND_UNAVAILABLE, with a message, when spec is
     * NULL and there is none. */
    hd_status (*open)(hd_context *ctx, const char *spec, const char *choice, bool fail_probe,
                      struct hd_runtime **out);
    void (*close)(struct hd_runtime *rt); /* waits for the queue */
    const char *(*name)(const struct hd_runtime *rt);
    const char *(*runtime)(const struct hd_runtime *rt);         /* "opencl" or "cuda" */
    hd_status (*finish)(struct hd_runtime *rt, hd_context *ctx); /* waits; late errors */
    hd_status (*acquire)(struct hd_runtime *rt, hd_context *ctx, size_t bytes,
                         struct hd_device_buffer **out);
    void (*release)(struct hd_runtime *rt, struct hd_device_buffer *buf);
    hd_status (*upload)(struct hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                        const void *src, size_t bytes); /* returns once src may be reused */
    hd_status (*download)(struct hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                          void *dst, size_t bytes); /* waits */
    hd_status (*zero)(struct hd_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                      size_t bytes);
    /* Host memory the copies above move at the link's full speed (pinned), contents
     * undefined; NULL where the device cannot give it. Freed before the device closes. */
    void *(*host_alloc)(struct hd_runtime *rt, size_t bytes);
    void (*host_free)(struct hd_runtime *rt, void *p);

    /* What the tools measure and record of the device (dispatch/device.h). */
    bool (*is_gpu)(const struct hd_runtime *rt);
    const char *(*driver)(const struct hd_runtime *rt);
    const char *(*platform)(const struct hd_runtime *rt);
    /* Device time of what the backends queue between the two calls (waits). */
    void (*capture_begin)(struct hd_runtime *rt);
    hd_status (*capture_end)(struct hd_runtime *rt, hd_context *ctx, double *seconds);
} hd_device_ops;

/* The version of CLBlast this build links, as the tuning cache's device key holds it:
 * "MAJOR.MINOR.PATCH", "unknown" where its header does not say, "none" without CLBlast. */
const char *hd__registry_clblast_version(void);

/* The device hooks of this build (backends/registry.c); NULL when built without a device. */
const hd_device_ops *hd__registry_device(void);

/* The device's calibration measurements, for the tools alone: in the tools' library
 * (backends/opencl/measure.c, backends/registry_measure.c), never in libdispatch. */
typedef struct hd_device_measure_ops {
    /* Device copy bandwidth (read plus written bytes per second) and the cost of an empty
     * launch in device and host time (both wait). */
    hd_status (*copy_bandwidth)(struct hd_runtime *rt, hd_context *ctx, size_t bytes,
                                double *bytes_per_second);
    hd_status (*launch_latency)(struct hd_runtime *rt, hd_context *ctx, double *device_seconds,
                                double *host_seconds);
    /* The fastest of repeats uploads of bytes from src, each timed to completion (waits). */
    hd_status (*upload_seconds)(struct hd_runtime *rt, hd_context *ctx, const void *src,
                                size_t bytes, unsigned repeats, double *best_seconds);
    /* Worker threads that build programs the backends queue through their build_ahead hooks
     * (at most 4; idempotent), and the queued builds not yet started dropped (with wait, once
     * those under way have ended). */
    hd_status (*build_ahead_start)(struct hd_runtime *rt, hd_context *ctx, unsigned workers);
    void (*build_ahead_cancel)(struct hd_runtime *rt, bool wait);
} hd_device_measure_ops;

/* The measurement hooks of this build's device; NULL when built without one. */
const hd_device_measure_ops *hd__registry_device_measure(void);

/* A plan of two backends, composed by the scheduler: the product backend's GEMM slot computes
 * the op's leading product (the op table's product) into the output, then the epilogue
 * backend's epilogue slot finishes the op. Both run at one place, in one queue order. */
typedef struct hd_composite {
    hd_backend id;       /* the plan's name and number, as a backend's */
    hd_backend product;  /* its GEMM slot runs first */
    hd_backend epilogue; /* its epilogue slot runs second, with the plan's variant */
} hd_composite;

/* The registry (backends/registry.c): the backends in probe order, the plans of two, and the
 * order in which the scheduler falls back through them when nothing else decides. */
const hd_backend_impl *const *hd__registry_backends(size_t *count);
/* The last of the fallback order: the backend that always works (the CPU), never marked
 * unhealthy. */
hd_backend hd__registry_last_resort(void);
const hd_composite *hd__registry_composites(size_t *count);
const hd_backend *hd__registry_order(size_t *count);

extern const hd_backend_impl hd__backend_cpu;
#ifdef HD_HAVE_OPENCL
extern const hd_backend_impl hd__backend_fused;
#endif
#ifdef HD_HAVE_CLBLAST
extern const hd_backend_impl hd__backend_clblast;
#endif

#endif
