/* An AdamW case made real (an instance of bench/case.h holds one): hd_adamw() over the LoRA
 * factors of a model (hd__bench_adamw_tensors), its four lists (the parameters, their gradients,
 * the two moments) in input sets of random contents; the tensors placed where the backend being
 * timed runs, since AdamW runs where its tensors are; the step with the case's hyperparameters
 * and its gradient clipping (autotune/case_params.h); and one step checked against the
 * float64 reference. */
#ifndef HD_BENCH_ADAMW_CASE_H
#define HD_BENCH_ADAMW_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "autotune/calibrate.h"
#include "bench/case.h"

#define HD_BENCH_ADAMW_LISTS 4 /* params, grads, m, v: hd_adamw()'s order */

typedef struct hd_bench_adamw {
    hd_context *ctx;
    hd_bench_case c;
    uint64_t seed; /* of the contents: every set written again from it holds the same */
    size_t count;  /* tensors per list */
    size_t *rows, *cols;
    size_t sets;
    /* lists[s][l]: list l of set s, count tensors */
    hd_tensor **lists[HD_BENCH_MAX_SETS][HD_BENCH_ADAMW_LISTS];
    long step;      /* the step the last call took: each call takes the next, as a trainer's */
    bool on_device; /* where the tensors are valid: every one alike (hd__bench_adamw_place) */
} hd_bench_adamw;

/* Creates the lists of AdamW case c in `sets` input sets and writes them from seed: parameters
 * uniform in [-1, 1), gradients in [-0.1, 0.1) (their norm far above the clip's, which then
 * scales them), first moments in [-0.01, 0.01) and second in [0, 0.001), as a run leaves them;
 * valid on the host. On failure everything made is freed and the context's message says why. */
hd_status hd__bench_adamw_create(hd_context *ctx, const hd_bench_case *c, uint64_t seed,
                                 size_t sets, hd_bench_adamw *a);
void hd__bench_adamw_destroy(hd_bench_adamw *a);

/* Where backend b runs AdamW, the tensors there: on the device (hd_tensor_prefetch of every
 * one) for a device backend, and for auto as a training step leaves them where the context has
 * a device that runs AdamW (its forward and backward ran there); on the host (each written
 * again from the seed) for the CPU, and for auto without such a device. Nothing moves where
 * they already are. */
hd_status hd__bench_adamw_place(hd_bench_adamw *a, hd_backend b);

/* One step on input set `set`: hd_adamw() over its lists, the next step number. */
hd_status hd__bench_adamw_run(hd_context *ctx, hd_bench_adamw *a, size_t set);

/* Reads set 0's lists, takes one step on it, waits, and compares its parameters and moments
 * with the float64 step from what they held (hd__ref_check_adamw): *worst is the largest error
 * over its tolerance, <= 1 passes. Returns HD_OK (whether or not it passed) or the failing
 * status. */
hd_status hd__bench_adamw_check(hd_bench_adamw *a, double *worst);

/* Seconds one step of case c is expected to take on backend b before anything runs, for the
 * budget: its bytes at the calibration's bandwidth where b runs (the device's copy rate, the
 * host's memcpy rate; 1 GB/s where cal has none) and one launch, times HD_ESTIMATE_MARGIN. */
double hd__bench_adamw_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                  hd_backend b, const hd_bench_case *c);

#endif
