/*
 * The context's tuning: the record of one tuned call, the device's calibration, and the
 * lookups of the context's tuning table, in the context's GEMM precision (dispatch/tuning.c,
 * over the passive table of dispatch/tune_table.c and the file reader of
 * dispatch/tune_file.c); opening and closing the table for a context; the device key a cache
 * file must carry here. The scheduler needs nothing else of the cache, and nothing of the
 * tools.
 */
#ifndef HD_DISPATCH_TUNING_H
#define HD_DISPATCH_TUNING_H

#include <stdbool.h>

#include "backends/backend.h"

struct hd_tune_key;

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
    bool disabled;        /* this context's: its variant failed at a call (dispatch/tuning.c);
                             never read from or written to the file */
} hd_tune_record;

/* The record for exactly (op, shape), or NULL. */
const hd_tune_record *hd__tune_exact(const hd_context *ctx, hd_op op, const hd_shape *shape);

/* Stops using the record for exactly (op, shape) in this context, for rules 2 and 3 of the
 * selection: its variant failed at a call. The file is not changed. */
void hd__tune_disable(hd_context *ctx, hd_op op, const hd_shape *shape);

/* The tuned record of op closest to shape in log space (same transposes for GEMM), whose every
 * dimension is within HD_TUNE_NEAR_DIM (dispatch/tune_table.h); NULL if none. *distance: the sum
 * over dimensions. */
const hd_tune_record *hd__tune_nearest(const hd_context *ctx, hd_op op, const hd_shape *shape,
                                       double *distance);

/* The tuned record of op that timed backend b (its winner or runner-up) closest to shape in
 * log space, at any distance: records of the shape's own transposes and LoRA layout first,
 * else of any. NULL if no record of op timed b. For the cost model, which scales b's estimate
 * by how it compared with the time measured there. */
const hd_tune_record *hd__tune_nearest_timing(const hd_context *ctx, hd_op op,
                                              const hd_shape *shape, hd_backend b);

/* A device-level param of backend b (e.g. CLBlast "base"), or NULL. The backends get theirs
 * through their cached_params hook when the table opens (backends/backend.h). */
const char *hd__tune_param(const hd_context *ctx, hd_backend b, const char *name);

/* The device's calibration from the cache, or NULL when it holds none. */
const hd_tune_calibration *hd__tune_calibration(const hd_context *ctx);

/* The record's margin for a person: "3.0% ahead of fused", "2.5% behind (preferred over)
 * cpu" where the tuner preferred a slower winner, "" when nothing else ran. */
void hd__tune_margin_text(const hd_tune_record *r, char *buf, size_t size);

/* Opens the tuning table named by the options or the environment. A damaged file is reported
 * as a note (the context's log) and ignored: the context works without it. Each of the file's
 * device-level params goes to its backend (cached_params); records whose variants their
 * backend rejects are dropped with a note; the context's plans are invalidated. */
hd_status hd__tune_open(hd_context *ctx, const hd_context_options *opt);
void hd__tune_close(hd_context *ctx);

/* This context's device key: what a cache file must carry to be used here, normalised
 * (hd__tune_key_normalize) as a file written with it reads back. */
void hd__tune_context_key(const hd_context *ctx, struct hd_tune_key *key);
/* The first field in which a file's key differs from the context's ("device", "driver
 * version", ...), NULL when the file is for this context. */
const char *hd__tune_key_mismatch(const struct hd_tune_key *file, const struct hd_tune_key *here);

typedef enum hd_tune_path {
    HD_TUNE_PATH_FOUND,
    HD_TUNE_PATH_NONE,     /* no option, $HD_TUNE_CACHE, $XDG_CACHE_HOME or $HOME */
    HD_TUNE_PATH_EMPTY,    /* the tune_cache option is "" */
    HD_TUNE_PATH_TOO_LONG, /* the path does not fit the buffer */
} hd_tune_path;

/* The cache path the context would use (options, $HD_TUNE_CACHE, default) into buf; buf is ""
 * unless HD_TUNE_PATH_FOUND. */
hd_tune_path hd__tune_resolve_path(const hd_context_options *opt, char *buf, size_t size);

#endif
