/* dispatch-autotune: the parts of the command, shared between its files. */
#ifndef HD_AUTOTUNE_TOOL_TOOL_H
#define HD_AUTOTUNE_TOOL_TOOL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "dispatch/tune_file.h"
#include "autotune/suites.h"

/* Exit codes (documented in --help and docs/tuner.md, "Exit status"). */
enum {
    EXIT_TUNED = 0,       /* every case has a record */
    EXIT_SOME_FAILED = 1, /* some cases had no correct candidate; the others were recorded */
    EXIT_USAGE = 2,       /* bad command line or --shapes file */
    EXIT_NO_CONTEXT = 3,  /* the library could not start, or calibration failed */
    EXIT_CACHE = 4,       /* the cache could not be read (--show) or written */
    EXIT_INTERRUPTED = 130,
};

typedef enum tool_level { LEVEL_QUICK, LEVEL_DEFAULT, LEVEL_FULL } tool_level;

/* How much effort a level spends per case. */
typedef struct tool_effort {
    size_t variants;         /* kernel variants per backend, its defaults not counted */
    size_t clblast_sets;     /* CLBlast parameter sets (a CLBlast build each), defaults apart */
    unsigned confirm_rounds; /* re-timings of the finalists, taking turns (0: none) */
    double budget_s;         /* timing budget per candidate */
    unsigned min_runs;       /* samples per candidate at least */
    double case_target_s;    /* the case budget: a candidate that would not finish within what
                                is left of it is skipped (0: no limit) */
    double cpu_limit_s;      /* skip the CPU candidate when one call would take longer */
    double run_target_s;     /* past this since the start, cases try only default parameters */
    /* Set per run, not per level: */
    bool defaults_only;              /* behind schedule: no variants */
    bool build_ahead;                /* the device's build-ahead workers run (--build-threads) */
    bool left_out[HD_BACKEND_COUNT]; /* backends not to time (--backends) */
    hd_tune_calibration cal;         /* the rates that estimate a candidate before it runs */
} tool_effort;

typedef struct tool_options {
    tool_level level;
    const char *cache;  /* NULL: as the library resolves it */
    const char *shapes; /* --shapes FILE */
    const char *suites; /* --suites LIST; NULL: seed,train,gemm */
    bool op_wanted[HD_OP_COUNT];
    bool backend_left_out[HD_BACKEND_COUNT]; /* --backends: those not named */
    bool force, dry_run, show, verbose, quiet, no_calibrate;
    double case_budget_s; /* --case-budget-s; negative: the level's case_target_s */
    double max_time_s;    /* --max-time; 0: no limit */
    int build_threads;    /* --build-threads; negative: 2 on a GPU, else 0 */
    const char *explain;  /* --explain "OP DIMS" */
    const char *device;
} tool_options;

typedef hd_bench_case_list tool_case_list;

extern volatile sig_atomic_t hd__tool_interrupted;

tool_effort hd__tool_effort(tool_level level);

/* Cases: the suites (or the --shapes file), filtered by --ops, without duplicates. Returns an
 * exit code: EXIT_TUNED on success, EXIT_USAGE with the reason on stderr. */
int hd__tool_cases(const tool_options *o, tool_case_list *out);
void hd__tool_cases_free(tool_case_list *l);

/* What tuning one case did beside its record. */
typedef struct tool_case_outcome {
    size_t skipped;   /* candidates not run: their estimate did not fit the case budget */
    bool over_budget; /* no record because every candidate was over the budget */
    bool incomplete;  /* no record because the budget left a contender's defaults untimed */
    bool untaken;     /* no record because no backend of the machine computes the case (an
                         operation the library has not yet on any backend here) */
    char best_clblast[HD_TUNE_STRING_MAX]; /* CLBlast's best variant: "-" for its defaults,
                                              "" when CLBlast did not run */
} tool_case_outcome;

/* Tunes one case on ctx within e->case_target_s seconds and fills *rec; false when no
 * candidate was correct or none fitted the budget (why says). Each candidate is estimated
 * before it runs (from the calibration, then from the checked calls of its backend), and one
 * that would not finish within what is left of the budget is skipped with a line on stderr.
 * With dry_run, prints the candidates instead of running them. */
bool hd__tool_tune_case(hd_context *ctx, const hd_bench_case *c, const tool_effort *e, bool verbose,
                        bool dry_run, hd_tune_record *rec, tool_case_outcome *out, char *why,
                        size_t why_size);

/* Seconds tuning case c is expected to take (within its budget), for the ETA. */
double hd__tool_estimate_case(hd_context *ctx, const hd_bench_case *c, const tool_effort *e);
/* Seconds the timing of every backend's default parameters for c is estimated to take (their
 * builds and checks, never charged to a case, left out): the least budget a case gets. */
double hd__tool_defaults_cost(hd_context *ctx, const hd_bench_case *c, const tool_effort *e);

/* Progress: a bar with ETA on a terminal, one line per case with the elapsed time otherwise;
 * nothing but the case lines with quiet. estimates (NULL: none) gives each case's expected
 * seconds, which the ETA sums over the cases left. */
void hd__tool_progress_start(size_t total, const double *estimates, bool quiet);
void hd__tool_progress_case(size_t index, const char *name);
void hd__tool_progress_done(size_t index, const char *line);
void hd__tool_progress_finish(void);

/* A time given in µs in the unit that suits it: "41.20 µs", "88.55 ms", "2.16 s". */
void hd__tool_time_text(double us, char *buf, size_t size);

/* The cache as an aligned table. */
void hd__tool_show(FILE *out, const hd_tune_file *f);

#endif
