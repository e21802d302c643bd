/*
 * Which of dispatch-autotune's timed candidates a case records. The fastest is not always the
 * one: a margin smaller than the noise of the comparison, or than a cost the timing of one case
 * alone does not see, goes to the candidate that is cheaper to run in a real program.
 *
 *   1. Where the OpenCL device is a GPU, the fastest device candidate is recorded instead of
 *      the CPU backend unless the CPU wins by more than HD_TUNE_PREFER_DEVICE. The CPU's time is
 *      host wall time, which on a shared many-core host moves between processes more than
 *      device time does: on a GPU machine a 64³ SGEMM's host time moved widely between the
 *      tuner, the benchmark a minute later and a standalone loop before both, while CLBlast's
 *      device time stayed steady (BENCHMARKS.md at commit 89a17cb).
 *   2. Then a backend's defaults are recorded instead of its variant unless the variant wins by
 *      more than HD_TUNE_PREFER_DEFAULTS: the defaults need no extra program. A CLBlast
 *      parameter set other than the device's costs a swap of CLBlast's parameters whenever the
 *      calls before it ran with another set (in a training step, every other GEMM shape), so it
 *      must win by more: HD_TUNE_PREFER_CLBLAST_DEFAULTS.
 *   3. Among finalists of several backends on a GPU (hd__tune_balanced), a CLBlast finalist not
 *      timed queued back to back (the case's budget left no time for it) is charged
 *      HD_TUNE_CLBLAST_QUEUED over its device time, about what its calls cost beyond it queued
 *      at gemm 4096x4096x4096 and gemm 2048x11008x4096 NT, where a record won on a smaller
 *      lead in device time ran behind the fused engine queued (commit 705c746).
 */
#ifndef HD_AUTOTUNE_CHOOSE_H
#define HD_AUTOTUNE_CHOOSE_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#define HD_TUNE_PREFER_DEVICE           0.15
#define HD_TUNE_PREFER_DEFAULTS         0.02
#define HD_TUNE_PREFER_CLBLAST_DEFAULTS 0.10
#define HD_TUNE_CLBLAST_QUEUED          0.05

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

/* Among n finalists of backend[i] timed in two modes (device_s; queued_s, NaN where that timing
 * failed or was not made), the index whose worse ratio to its mode's best is least, ties to the
 * lower device time: a finalist within x % of the best in both modes wherever one is. On a GPU
 * (gpu), a CLBlast finalist without a queued time is weighed at its device time charged
 * HD_TUNE_CLBLAST_QUEUED (rule 3 above). (size_t)-1 for n = 0. */
size_t hd__tune_balanced(const double *device_s, const double *queued_s, const hd_backend *backend,
                         size_t n, bool gpu);

/* The order in which dispatch-autotune times cand[0..count) into order (count indices):
 * every backend's defaults first, so that one backend's variants cannot spend the budget the
 * others' defaults need, the defaults by their estimated call est_s[backend] (indexed by
 * hd_backend), fastest first, ties in list order, so that a case budget that runs out leaves
 * the likely slowest untimed (the CPU's call of a row op's backward, timed first, left the
 * fused kernel's far faster call untimed, and the record took the CPU: BENCHMARKS.md at commit
 * 89a17cb); then the variants, those of the backend estimated fastest first, each backend's as
 * listed. The tuner orders the variants again by the defaults' measured times once those ran,
 * so that the budget tunes the backend that leads (gemm 1024x1024x1024 was recorded on fused's
 * defaults with most candidates untimed, where the fused tile listed second runs faster:
 * commit 7234281). */
void hd__tune_order(const hd_tune_candidate *cand, size_t count, const double *est_s,
                    size_t *order);

/* A case's budget in a run limited in time: left_s seconds for cases_left cases (this one
 * among them), each expected to take overrun_s beyond its budget (what the cases so far took
 * beyond theirs, on the mean: the defaults' builds and checks, which are never charged to a
 * case, and the confirming rounds); at least least_s (timing every backend's defaults), or
 * all that is left where less is, and never below 1 ms. */
double hd__tune_case_share(double left_s, size_t cases_left, double overrun_s, double least_s);

/* Whether a comparison is complete enough to record winner: the backend whose defaults the
 * budget left untimed (untimed_s[b] > 0, their estimated call, indexed by hd_backend) with an
 * estimate under hopeless times the winner's time winner_s, or HD_BACKEND_AUTO where there is
 * none. A record says its backend is the fastest, which such a backend was not timed against
 * (at the end of a --max-time run, LoRA backward at 4096 tokens was recorded for CLBlast, timed
 * alone, where the fused backend, left untimed, is the faster: commit faee50d); without one the
 * scheduler's cost model chooses. */
hd_backend hd__tune_untimed_contender(const double *untimed_s, hd_backend winner, double winner_s,
                                      double hopeless);

/* What the tuner makes of a candidate's checked call (its kernels built): first_s long, against
 * its estimated call estimate_s, the fastest call timed so far best_s (0: none yet) and left_s
 * of the case's budget; ran_again: first_s is already the faster of two calls. */
typedef enum hd_tune_checked {
    HD_TUNE_CHECKED_TIME,        /* time it */
    HD_TUNE_CHECKED_RUN_AGAIN,   /* run it once more and keep the faster call, then ask again */
    HD_TUNE_CHECKED_STALLED,     /* untimed: counted at its estimate, not at this call */
    HD_TUNE_CHECKED_HOPELESS,    /* left out: over 20 times the best, and 50 ms or more */
    HD_TUNE_CHECKED_OVER_BUDGET, /* untimed: three such calls would not fit the budget left */
} hd_tune_checked;

/* A call that took over four times its estimate, where it decides the candidate's fate
 * (hopeless, or over the budget), most likely waited on the host (behind a build-ahead
 * worker's build, or anything else the host does) and says nothing of the candidate's speed
 * (fused's defaults for gemm 4096x4096x512 TN took hundreds of times their usual run on their
 * checked call, and the case was recorded for the slower CLBlast: commit 2abf65c): it runs
 * once more where the budget holds it; where it does not, the candidate stays untimed
 * at its estimate, so that a backend's defaults so stalled still keep a slower winner from its
 * record (hd__tune_untimed_contender). */
hd_tune_checked hd__tune_checked_call(double first_s, double estimate_s, double best_s,
                                      double left_s, bool ran_again);

#endif
