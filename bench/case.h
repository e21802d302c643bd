/* One benchmark case made real: its tensors filled with fresh random data (in several input sets
 * when they fit in a cache), the call that runs it, and the check of one result against a
 * float64 reference. An op of the table is called through the dispatcher with its tensors in
 * the table's order; an AdamW case, which is no op of the table, through hd_adamw() with its
 * lists (bench/adamw_case.h). */
#ifndef HD_BENCH_CASE_H
#define HD_BENCH_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "autotune/case_params.h"
#include "autotune/reference.h"
#include "autotune/suites.h"

#define HD_BENCH_MAX_SETS    4
#define HD_BENCH_MAX_INPUTS  6 /* attention's backward */
#define HD_BENCH_MAX_OUTPUTS 3

struct hd_bench_adamw;

typedef struct hd_bench_instance {
    hd_context *ctx;
    hd_bench_case c;
    uint64_t seed; /* of the inputs' contents: an instance made again from it holds the same */
    size_t sets;
    /* the op table's inputs and outputs in its order: GEMM A B; LoRA x W A B; rows x gamma beta;
     * the backward ops' inputs (dy among them) and their gradients; the step's ops'. NULL where
     * the case leaves an optional input out (hd__case_tensor_left_out) */
    hd_tensor *in[HD_BENCH_MAX_SETS][HD_BENCH_MAX_INPUTS];
    /* their contents, kept for the host mode (keep_host), else NULL */
    float *host[HD_BENCH_MAX_SETS][HD_BENCH_MAX_INPUTS];
    int inputs;
    hd_tensor *out[HD_BENCH_MAX_OUTPUTS]; /* out[0]: y, C, or dx */
    int outputs;
    /* an output the op reads (add's y): what it holds before a checked call, from the seed */
    float *before[HD_BENCH_MAX_OUTPUTS];
    hd_case_params params; /* the call's scalars (LoRA's scale, the norms' eps, ...) and ids,
                              the ids as the int32 tensor the call takes */
    hd_ref_expect expect;  /* a step op's sampled expected values, made at the first check */
    bool expected;
    struct hd_bench_adamw *adamw; /* an AdamW case's lists (its tensors, not in or out), or NULL */
} hd_bench_instance;

/* Uniform in [lo, hi) from the state, nudged off zero so that no input is ever all zeros by
 * chance: the contents of every benchmark input. */
void hd__bench_fill(uint64_t *state, float *p, size_t n, float lo, float hi);

/* Whether backend b of ctx computes case c: takes its op and shape, or for an AdamW case has
 * an AdamW slot. */
bool hd__bench_case_takes(const hd_context *ctx, hd_backend b, const hd_bench_case *c);

/* Seconds one call of case c is expected to take on backend b before anything runs
 * (hd__calibrate_estimate_s, hd__bench_adamw_estimate_s), for the tools' budgets. */
double hd__bench_case_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                 hd_backend b, const hd_bench_case *c);

/* Whether the host mode times the case: not AdamW's, which runs where its tensors are, so
 * that inputs written again from the host would run it on the host whatever the backend. */
bool hd__bench_case_has_host_mode(const hd_bench_case *c);

/* Creates the tensors of c and fills every input with random values from seed (never zeros):
 * 3 input sets when all of them together stay under 64 MiB, else 1. keep_host keeps a host
 * copy of every input for hd__bench_instance_reset() (the host mode). On failure everything
 * made is freed and the context's message says why. */
hd_status hd__bench_instance_create(hd_context *ctx, const hd_bench_case *c, uint64_t seed,
                                    bool keep_host, hd_bench_instance *inst);
void hd__bench_instance_destroy(hd_bench_instance *inst);

/* The calls that follow run on backend b (HD_BACKEND_AUTO: the dispatcher's choice): the op
 * forced to b, or an AdamW case's tensors placed where b runs (hd__bench_adamw_place). Returns
 * HD_OK, or the refusal with the context's message. hd__bench_instance_release() undoes it:
 * the op no longer forced (an AdamW case's tensors stay where they are), the context's last
 * error kept. */
hd_status hd__bench_instance_use(hd_bench_instance *inst, hd_backend b);
void hd__bench_instance_release(hd_bench_instance *inst);

/* The measured call: runs the case with input set `set`; an hd_measure_fn. */
hd_status hd__bench_instance_run(hd_context *ctx, void *inst, size_t set);

/* Writes input set `set` again from the host (the host mode's reset; an hd_measure_fn): the
 * inputs are then valid on the host alone, as a program's freshly written data. Needs an
 * instance made with keep_host, of a case with a host mode. */
hd_status hd__bench_instance_reset(hd_context *ctx, void *inst, size_t set);

/* Runs set 0 once, waits, and compares the output with a float64 reference on sampled rows
 * and columns (every row of small cases; the row ops' backward: dx on sampled rows, the weight
 * gradients whole; LoRA's backward: dx on sampled elements, dA and dB on sampled rows and
 * columns of each rank; the step's ops as hd__ref_step_expect samples them, its float64 part
 * made at the first check and kept for the others; an output the op reads starts from
 * `before`; AdamW's step as hd__bench_adamw_check() checks it). *worst is the
 * largest error divided by its tolerance: <= 1 passes. Returns HD_OK (whether or not it passed) or
 * the failing status. */
hd_status hd__bench_instance_check(hd_bench_instance *inst, double *worst);

#endif
