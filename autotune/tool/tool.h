/* dispatch-autotune: the parts of the command, shared between its files. */
#ifndef HD_AUTOTUNE_TOOL_TOOL_H
#define HD_AUTOTUNE_TOOL_TOOL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "autotune/cache.h"
#include "bench/suites.h"

/* Exit codes (documented in --help and README.md). */
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
    double case_target_s;    /* stop trying further variants of a case past this */
    double cpu_limit_s;      /* skip the CPU candidate when one call would take longer */
    double run_target_s;     /* past this since the start, cases try only default parameters */
} tool_effort;

typedef struct tool_options {
    tool_level level;
    const char *cache;  /* NULL: as the library resolves it */
    const char *shapes; /* --shapes FILE */
    const char *suites; /* --suites LIST; NULL: seed,train,gemm */
    bool op_wanted[HD_OP_COUNT];
    bool force, dry_run, show, verbose, no_calibrate;
    const char *explain; /* --explain "OP DIMS" */
    const char *device;
} tool_options;

typedef struct tool_case_list {
    hd_bench_case *cases;
    size_t count, capacity;
} tool_case_list;

extern volatile sig_atomic_t hd__tool_interrupted;

tool_effort hd__tool_effort(tool_level level);

/* Cases: the suites (or the --shapes file), filtered by --ops, without duplicates. Returns an
 * exit code: EXIT_TUNED on success, EXIT_USAGE with the reason on stderr. */
int hd__tool_cases(const tool_options *o, tool_case_list *out);
void hd__tool_cases_free(tool_case_list *l);
/* Parses "gemm 1 4096 4096 [nn]", "lora 1 1024 1024 8", "softmax 64 1024". */
bool hd__tool_parse_case(const char *text, hd_bench_case *out, char *why, size_t size);

/* Tunes one case on ctx and fills *rec; false when no candidate was correct (why says).
 * best_clblast gets CLBlast's best variant: "-" for its defaults, "" when CLBlast did not run. With
 * dry_run, prints the candidates instead of running them. */
bool hd__tool_tune_case(hd_context *ctx, const hd_bench_case *c, const tool_effort *e, bool verbose,
                        bool dry_run, hd_tune_record *rec, char *best_clblast, size_t best_size,
                        char *why, size_t why_size);

/* Progress: a bar with ETA on a terminal, one line per case otherwise. */
void hd__tool_progress_start(size_t total);
void hd__tool_progress_case(size_t index, const char *name);
void hd__tool_progress_done(size_t index, const char *line);
void hd__tool_progress_finish(void);

/* The cache as an aligned table. */
void hd__tool_show(FILE *out, const hd_tune_file *f);

#endif
