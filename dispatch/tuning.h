/*
 * What the scheduler reads of the tuning cache: the record of one tuned call, the device's
 * calibration, and the lookups of the context's tuning table. The cache reader
 * (autotune/cache.c, autotune/table.c, in the library) provides them; the scheduler needs
 * nothing else of autotune/, and nothing of the tools.
 */
#ifndef HD_DISPATCH_TUNING_H
#define HD_DISPATCH_TUNING_H

#include <stdbool.h>

#include "backends/backend.h"

#define HD_TUNE_STRING_MAX 256

typedef struct hd_tune_record {
    hd_op op;
    hd_shape shape;
    hd_backend backend;
    char variant[HD_TUNE_STRING_MAX]; /* "" for the default */
    double median_us;
    hd_precision precision; /* the GEMM arithmetic it was tuned in (compute-bound ops; written
                               as "gemm.fp32x3"), HD_PRECISION_FP32 for the others */
    hd_backend runner_up; /* HD_BACKEND_AUTO: none */
    double margin_pct;    /* runner-up time / winner time - 1, in percent; negative where the
                             tuner preferred a slower winner (dispatch-autotune's rules) */
    bool disabled;        /* this context's: its variant failed at a call (autotune/table.c);
                             never read from or written to the file */
} hd_tune_record;

/* The record for exactly (op, shape), or NULL. */
const hd_tune_record *hd__tune_exact(const hd_context *ctx, hd_op op, const hd_shape *shape);

/* Stops using the record for exactly (op, shape) in this context, for rules 2 and 3 of the
 * selection: its variant failed at a call. The file is not changed. */
void hd__tune_disable(hd_context *ctx, hd_op op, const hd_shape *shape);

/* The tuned record of op closest to shape in log space (same transposes for GEMM), whose every
 * dimension is within HD_TUNE_NEAR_DIM (autotune/table.h); NULL if none. *distance: the sum
 * over dimensions. */
const hd_tune_record *hd__tune_nearest(const hd_context *ctx, hd_op op, const hd_shape *shape,
                                       double *distance);

/* The tuned record of op that timed backend b (its winner or runner-up) closest to shape in
 * log space, at any distance: records of the shape's own transposes and LoRA layout first,
 * else of any. NULL if no record of op timed b. For the cost model, which scales b's estimate
 * by how it compared with the time measured there. */
const hd_tune_record *hd__tune_nearest_timing(const hd_context *ctx, hd_op op,
                                              const hd_shape *shape, hd_backend b);

/* A device-level param of backend b (e.g. CLBlast "base"), or NULL. Backends read theirs
 * when they first need it: the table opens after the backends are probed. */
const char *hd__tune_param(const hd_context *ctx, hd_backend b, const char *name);

/* The device's calibration from the cache, or NULL when it holds none. */
const hd_tune_calibration *hd__tune_calibration(const hd_context *ctx);

/* The record's margin for a person: "3.0% ahead of fused", "2.5% behind (preferred over)
 * cpu" where the tuner preferred a slower winner, "" when nothing else ran. */
void hd__tune_margin_text(const hd_tune_record *r, char *buf, size_t size);

#endif
