/*
 * Which of dispatch-autotune's timed candidates a case records. The fastest is not always the
 * one: a margin smaller than the noise of the comparison, or than a cost the timing of one case
 * alone does not see, goes to the candidate that is cheaper to run in a real program.
 *
 *   1. Where the OpenCL device is a GPU, the fastest device candidate is recorded instead of
 *      the CPU backend unless the CPU wins by more than HD_TUNE_PREFER_DEVICE. The CPU's time is
 *      host wall time, which on a shared many-core host moves between processes more than
 *      device time does: on the H100 machine a 64³ SGEMM's host time moved widely between the
 *      tuner, the benchmark a minute later and a standalone loop before both, while CLBlast's
 *      device time stayed steady (BENCHMARKS.md).
 *   2. Then a backend's defaults are recorded instead of its variant unless the variant wins by
 *      more than HD_TUNE_PREFER_DEFAULTS: the defaults need no extra program. A CLBlast
 *      parameter set other than the device's costs a swap of CLBlast's parameters whenever the
 *      calls before it ran with another set (in a training step, every other GEMM shape), so it
 *      must win by more: HD_TUNE_PREFER_CLBLAST_DEFAULTS.
 */
#ifndef HD_AUTOTUNE_CHOOSE_H
#define HD_AUTOTUNE_CHOOSE_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#define HD_TUNE_PREFER_DEVICE           0.15
#define HD_TUNE_PREFER_DEFAULTS         0.02
#define HD_TUNE_PREFER_CLBLAST_DEFAULTS 0.10

typedef struct hd_tune_candidate {
    hd_backend backend;
    const char *variant; /* NULL: the backend's default parameters */
    double median_s;
    bool ok; /* correct and timed; the others are never chosen */
} hd_tune_candidate;

/* The fastest ok candidate of backend b, or with b = HD_BACKEND_AUTO of any backend but the
 * CPU; with defaults_only, of those with default parameters. -1 if there is none. */
int hd__tune_fastest(const hd_tune_candidate *cand, size_t count, hd_backend b, bool defaults_only);

/* The candidate to record among cand[0..count), given the fastest one (an index of an ok
 * candidate) and whether the OpenCL device is a GPU. Returns fastest or another ok index. */
int hd__tune_choose(const hd_tune_candidate *cand, size_t count, int fastest, bool device_is_gpu);

/* Among n finalists timed in two modes (device_s; queued_s, NaN where that timing failed or was
 * not made), the index whose worse ratio to its mode's best is least, ties to the lower device
 * time: a finalist within x % of the best in both modes wherever one is. (size_t)-1 for n = 0. */
size_t hd__tune_balanced(const double *device_s, const double *queued_s, size_t n);

/* The order in which dispatch-autotune times cand[0..count) into order (count indices):
 * every backend's defaults first, so that one backend's variants cannot spend the budget the
 * others' defaults need, the defaults by their estimated call est_s[backend] (indexed by
 * hd_backend), fastest first, ties in list order, so that a case budget that runs out leaves
 * the likely slowest untimed (H100: the CPU's call of a row op's backward went first and left
 * the fused kernel's far faster call untimed, and the record took the CPU); then the variants
 * as listed. */
void hd__tune_order(const hd_tune_candidate *cand, size_t count, const double *est_s,
                    size_t *order);

#endif
