/*
 * dispatch-bench: every case of the chosen suites on every backend that takes it, on every
 * hybrid plan and on auto, in the device, sync and chain modes; checked against a float64
 * reference, judged against the measured roofline, and compared with a peer on request.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autotune/calibrate.h"
#include "autotune/measure.h"
#include "dispatch/tune_file.h"
#include "dispatch/tuning.h"
#include "bench/case.h"
#include "bench/compare.h"
#include "bench/results.h"
#include "bench/results_file.h"
#include "core/error.h"
#include "dispatch/tools.h"

#define MAX_SUITES 8
#define MAX_ROUNDS 16
/* An op this slow (seconds) is warmed up with one call per round. */
#define SLOW_OP_S 0.05

/* Exit codes (documented in --help and docs/tuner.md, "dispatch-bench"). */
enum {
    EXIT_DONE = 0,       /* every case ran or was skipped with a note; outputs written */
    EXIT_OUTPUT = 1,     /* an output file (or the gap table of --compare) could not be
                            written */
    EXIT_USAGE = 2,      /* bad command line, its --shapes, --compare and --ours files among it */
    EXIT_NO_CONTEXT = 3, /* the library could not start */
    EXIT_INTERRUPTED = 130, /* SIGINT or SIGTERM: the finished cases are written */
};

/* Set by SIGINT or SIGTERM: the run stops after the call in progress and writes what it has. */
static volatile sig_atomic_t interrupted;

/* Seconds an interrupted run may still take before the watchdog writes the finished cases
 * itself and exits: a kernel build (seconds on PoCL) or a long call cannot be cut short. */
#define STOP_GRACE_S 2.0

/* The finished cases, copied by the main thread after each case, for the watchdog thread; and
 * whether the outputs are written (by either thread, under the lock). */
static struct {
    pthread_mutex_t lock;
    hd_bench_run run; /* the run's header and its own copy of the finished records */
    bool written;
    bool ready; /* run holds a header */
    sem_t wake; /* posted by the interrupt handler */
} stopping = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void on_interrupt(int sig)
{
    static const char msg[] = "\ndispatch-bench: interrupted: stopping after the call in "
                              "progress and writing the finished cases (again: quit at once)\n";
    interrupted = 1;
    ssize_t ignored = write(hd__measure_stderr_fd(), msg, sizeof msg - 1);
    (void)ignored;
    signal(sig, SIG_DFL);
    sem_post(&stopping.wake);
}

typedef struct options {
    const hd_bench_suite *suites[MAX_SUITES];
    int suite_count;
    hd_bench_suite file; /* --shapes: the suite "file", its cases malloc'd */
    bool modes[HD_MEASURE_MODE_COUNT];
    bool backends[HD_BACKEND_COUNT];
    unsigned warmup, repeats, max_runs, chain, rounds;
    double budget_ms, peak_gflops, max_elements, case_budget_s, max_time_s;
    bool csv, list_cases, quiet, cpu_only;
    const char *json_path, *csv_path, *compare_path, *ours_path, *compare_mode, *device, *cache;
    uint64_t seed;
    json_t *peer, *ours; /* --compare's and --ours's files, read with the options */
} options;

static void usage(FILE *f)
{
    fputs("usage: dispatch-bench [options]\n"
          "  --suites LIST       comma list of seed, train, gemm, shapes, backward, step, ci,\n"
          "                      or all (every suite but ci) (default: seed; --suite is the\n"
          "                      same)\n"
          "  --shapes FILE       also time these cases, as the suite 'file' (default: them\n"
          "                      alone), one per line as dispatch-autotune --shapes reads them:\n"
          "                      'gemm M N K [nn|nt|tn|tt]', 'lora T IN OUT RANK [pt]',\n"
          "                      'softmax ROWS COLS', ...; and AdamW over a model's LoRA\n"
          "                      factors, 'adamw LAYERS HIDDEN KV_DIM MLP RANK'; '#' starts a\n"
          "                      comment\n"
          "  --modes LIST        device,sync,chain,host (default: device,sync,chain); host:\n"
          "                      chains on inputs written again from the host before each\n"
          "                      (what a loop over host data costs, the scheduler's moves in;\n"
          "                      not AdamW, which runs where its tensors are)\n"
          "  --backends LIST     cpu,clblast,fused,clblast+fused,auto (default: all)\n"
          "  --repeats N         at least N timed runs per mode (default 5, at most 10000)\n"
          "  --max-runs N        at most N timed runs per mode (default 1000, at most 10000)\n"
          "  --budget-ms MS      stop repeating a mode after MS milliseconds (default 300;\n"
          "                      less where a backend's share of --case-budget-s or --max-time\n"
          "                      is less: fewer runs, at least --repeats)\n"
          "  --rounds N          time the backends of a case in turn, N rounds per mode, each\n"
          "                      with 1/N of the runs and budget; report the median of the\n"
          "                      rounds' medians (default 3, at most 16)\n"
          "  --warmup N          untimed calls before timing (default 3, at least one per\n"
          "                      input set; at most 10000)\n"
          "  --chain N           ops per chain sample, at most 10000 (default 0: enough for\n"
          "                      ~2 ms, 4..256)\n"
          "  --peak-flops GFLOPS compute roof (default: the best GEMM rate measured in this run)\n"
          "  --max-elements N    skip cases holding more than N floats (says so)\n"
          "  --case-budget-s S   per case, skip each backend estimated (from the calibration,\n"
          "                      then from its checked call) to take more than its share of S\n"
          "                      seconds, with a note saying so (default 30; 0: unlimited)\n"
          "  --max-time S        the whole run within about S seconds: the case budget shrinks\n"
          "                      to share what is left among the cases left (default 0: no limit)\n"
          "  --csv               CSV on standard output instead of the table\n"
          "  --csv-out FILE      also write the CSV to FILE\n"
          "  --json FILE         also write the results as JSON (schema hd-bench/1); '-': JSON\n"
          "                      alone on standard output (the table goes to standard error)\n"
          "  --compare PEER.json print the gap table against a peer's results (the file is\n"
          "                      read and checked before any case runs: a regular file of at\n"
          "                      most 16 MiB, strict JSON without repeated member names, every\n"
          "                      field as schema hd-bench/1 says (bench/SCHEMA.md); the first\n"
          "                      field that is not is named, with its record, and the exit\n"
          "                      status is 2)\n"
          "  --ours OURS.json    with --compare: compare this file (read and checked alike)\n"
          "                      instead of running\n"
          "  --compare-mode M    device, sync or chain (default: per case, the first both have\n"
          "                      of device, chain, sync)\n"
          "  --list-cases        list the suites' cases (with --json FILE: as JSON, '-' = stdout)\n"
          "  --device SPEC       OpenCL device index or name substring (as $HD_DEVICE)\n"
          "  --cache PATH        the tuning cache auto uses (default: $HD_TUNE_CACHE, else\n"
          "                      $XDG_CACHE_HOME/hd-dispatch/tune.txt or\n"
          "                      ~/.cache/hd-dispatch/tune.txt)\n"
          "  --cpu-only          no OpenCL: the CPU backend alone\n"
          "  --seed N            random data seed, decimal, at most 2^63 - 1 (default: from\n"
          "                      the clock)\n"
          "  --quiet, -q         no progress lines\n"
          "  --version           the tool's and the library's version\n"
          "  --help              this text\n"
          "\n"
          "Progress goes to standard error: one line with the ETA on a terminal, else one line\n"
          "per case with the elapsed time. Ctrl-C stops after the call in progress (2 s at most:\n"
          "a kernel build is left unfinished) and writes the table, CSV and JSON of the finished\n"
          "cases.\n"
          "\n"
          "Exit status: 0 done (skipped cases carry a note); 1 an output (the gap table among\n"
          "them) could not be written; 2 bad command line, a --shapes, --compare or --ours file\n"
          "among it; 3 the library could not start; 130 interrupted (the finished cases are\n"
          "written).\n",
          f);
}

static bool add_suite_of(const hd_bench_suite *s, options *o)
{
    for (int i = 0; i < o->suite_count; i++)
        if (o->suites[i] == s)
            return true;
    if (o->suite_count == MAX_SUITES)
        return false;
    o->suites[o->suite_count++] = s;
    return true;
}

/* --shapes FILE: its cases become the suite "file". */
static bool add_shapes_file(const char *path, options *o)
{
    if (o->file.cases != NULL) {
        fprintf(stderr, "dispatch-bench: --shapes given twice\n");
        return false;
    }
    hd_bench_case_list file;
    char why[640];
    if (!hd__bench_shapes_read(path, &file, why, sizeof why)) {
        fprintf(stderr, "dispatch-bench: --shapes %s\n", why);
        return false;
    }
    o->file = (hd_bench_suite){
        .name = "file", .description = path, .cases = file.cases, .count = file.count};
    return add_suite_of(&o->file, o);
}

static bool add_suite(const char *name, void *arg)
{
    options *o = arg;
    const hd_bench_suite *named[HD_BENCH_SUITES_MAX];
    size_t n = hd__bench_suites_named(name, named);
    if (n == 0) {
        fprintf(stderr, "dispatch-bench: unknown suite '%s' (expected %s)\n", name,
                hd__bench_suite_names());
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (!add_suite_of(named[i], o))
            return false;
    return true;
}

static bool add_mode(const char *name, void *arg)
{
    options *o = arg;
    hd_measure_mode m;
    if (!hd__measure_mode_from_name(name, &m)) {
        fprintf(stderr,
                "dispatch-bench: unknown mode '%s' (expected device, sync, chain or host)\n", name);
        return false;
    }
    o->modes[m] = true;
    return true;
}

static bool add_backend(const char *name, void *arg)
{
    options *o = arg;
    hd_backend b;
    if (!hd__backend_from_name(name, &b)) {
        fprintf(stderr,
                "dispatch-bench: unknown backend '%s' (expected cpu, clblast, fused, "
                "clblast+fused or auto)\n",
                name);
        return false;
    }
    o->backends[b] = true;
    return true;
}

static bool parse_list(const char *opt, const char *list, bool (*item)(const char *, void *),
                       options *o)
{
    char who[64];
    snprintf(who, sizeof who, "dispatch-bench: %s", opt);
    return hd__bench_list_each(who, list, item, o);
}

/* Seconds, milliseconds, GFLOP/s, elements: a finite number >= 0 (inf and 1e400 are not). */
static bool parse_number(const char *opt, const char *arg, double *out)
{
    char *end;
    errno = 0;
    *out = arg ? strtod(arg, &end) : 0.0;
    if (arg == NULL || end == arg || *end != '\0' || errno == ERANGE || !isfinite(*out) ||
        !(*out >= 0)) {
        fprintf(stderr, "dispatch-bench: %s: '%s' is not a finite number >= 0\n", opt,
                arg ? arg : "");
        return false;
    }
    return true;
}

/* Decimal digits alone, at most max: no sign, exponent, fraction or blank, which strtoull
 * would take, wrap or read as another base. */
static bool parse_decimal(const char *arg, unsigned long long max, unsigned long long *out)
{
    if (arg == NULL || arg[0] < '0' || arg[0] > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (*end != '\0' || errno == ERANGE || v > max)
        return false;
    *out = v;
    return true;
}

/* A count of calls or rounds, 0 to max. */
static bool parse_count(const char *opt, const char *arg, unsigned max, unsigned *out)
{
    unsigned long long v;
    if (!parse_decimal(arg, max, &v)) {
        fprintf(stderr, "dispatch-bench: %s: '%s' is not a whole number from 0 to %u\n", opt,
                arg ? arg : "", max);
        return false;
    }
    *out = (unsigned)v;
    return true;
}

/* At most 2^63 - 1: the results' JSON carries the seed as an integer, and JSON readers
 * (jansson among them) take 64-bit signed integers. */
static bool parse_seed(const char *opt, const char *arg, uint64_t *out)
{
    unsigned long long v;
    if (!parse_decimal(arg, INT64_MAX, &v)) {
        fprintf(stderr, "dispatch-bench: %s: '%s' is not a whole number from 0 to %lld\n", opt,
                arg ? arg : "", (long long)INT64_MAX);
        return false;
    }
    *out = v;
    return true;
}

/* The options that take a value, for the message when the value is missing. */
static bool takes_value(const char *a)
{
    static const char *const with_value[] = {
        "--suites",     "--suite",        "--modes",         "--backends", "--repeats",
        "--max-runs",   "--budget-ms",    "--rounds",        "--warmup",   "--chain",
        "--peak-flops", "--max-elements", "--case-budget-s", "--max-time", "--seed",
        "--csv-out",    "--json",         "--compare",       "--ours",     "--compare-mode",
        "--device",     "--cache",        "--shapes"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(a, with_value[i]) == 0)
            return true;
    return false;
}

/* --compare's file and --ours's, read and checked before anything runs: a run of the suites
 * must not end in a peer file that was never there. False with the reason said. */
static bool load_compared(options *o)
{
    char err[1200];
    if (o->compare_path == NULL) {
        const char *alone = o->ours_path != NULL ? "--ours"
                            : o->compare_mode    ? "--compare-mode"
                                                 : NULL;
        if (alone != NULL)
            fprintf(stderr,
                    "dispatch-bench: %s is an option of --compare PEER.json, which is not given\n",
                    alone);
        return alone == NULL;
    }
    if ((o->peer = hd__bench_results_load(o->compare_path, err, sizeof err)) == NULL ||
        (o->ours_path != NULL &&
         (o->ours = hd__bench_results_load(o->ours_path, err, sizeof err)) == NULL)) {
        fprintf(stderr, "dispatch-bench: %s: %s\n", o->peer == NULL ? "--compare" : "--ours", err);
        return false;
    }
    return true;
}

/* Returns 0 to go on, 1 for a clean exit (--help, --version), 2 for a usage error. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){.warmup = 3,
                   .repeats = 5,
                   .max_runs = 1000,
                   .rounds = 3,
                   .budget_ms = 300,
                   .case_budget_s = 30};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->seed = ((uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec) & INT64_MAX;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double num = 0;
        bool ok = true, takes = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("dispatch-bench %s (library %s)\n", HD_VERSION_STRING, hd_version());
            return 1;
        } else if (strncmp(a, "--", 2) == 0 && v == NULL && takes_value(a)) {
            fprintf(stderr, "dispatch-bench: %s needs a value\n", a);
            return 2;
        } else if ((strcmp(a, "--suites") == 0 || strcmp(a, "--suite") == 0) && v) {
            ok = parse_list(a, v, add_suite, o);
        } else if (strcmp(a, "--shapes") == 0 && v) {
            ok = add_shapes_file(v, o);
        } else if (strcmp(a, "--modes") == 0 && v) {
            ok = parse_list(a, v, add_mode, o);
        } else if (strcmp(a, "--backends") == 0 && v) {
            ok = parse_list(a, v, add_backend, o);
        } else if (strcmp(a, "--repeats") == 0) {
            ok = parse_count(a, v, HD_MEASURE_MAX_RUNS, &o->repeats);
        } else if (strcmp(a, "--max-runs") == 0) {
            ok = parse_count(a, v, HD_MEASURE_MAX_RUNS, &o->max_runs);
            o->max_runs = o->max_runs < 1 ? 1 : o->max_runs;
        } else if (strcmp(a, "--budget-ms") == 0 && (ok = parse_number(a, v, &num))) {
            o->budget_ms = num;
        } else if (strcmp(a, "--rounds") == 0) {
            ok = parse_count(a, v, MAX_ROUNDS, &o->rounds);
            o->rounds = o->rounds < 1 ? 1 : o->rounds;
        } else if (strcmp(a, "--warmup") == 0) {
            ok = parse_count(a, v, HD_MEASURE_MAX_RUNS, &o->warmup);
        } else if (strcmp(a, "--chain") == 0) {
            ok = parse_count(a, v, HD_MEASURE_MAX_RUNS, &o->chain);
        } else if (strcmp(a, "--peak-flops") == 0 && (ok = parse_number(a, v, &num))) {
            o->peak_gflops = num;
        } else if (strcmp(a, "--max-elements") == 0 && (ok = parse_number(a, v, &num))) {
            o->max_elements = num;
        } else if (strcmp(a, "--case-budget-s") == 0 && (ok = parse_number(a, v, &num))) {
            o->case_budget_s = num;
        } else if (strcmp(a, "--max-time") == 0 && (ok = parse_number(a, v, &num))) {
            o->max_time_s = num;
        } else if (strcmp(a, "--seed") == 0) {
            ok = parse_seed(a, v, &o->seed);
        } else if (strcmp(a, "--csv-out") == 0 && v) {
            o->csv_path = v;
        } else if (strcmp(a, "--json") == 0 && v) {
            o->json_path = v;
        } else if (strcmp(a, "--compare") == 0 && v) {
            o->compare_path = v;
        } else if (strcmp(a, "--ours") == 0 && v) {
            o->ours_path = v;
        } else if (strcmp(a, "--compare-mode") == 0 && v) {
            hd_measure_mode m;
            ok = hd__measure_mode_from_name(v, &m);
            if (!ok)
                fprintf(stderr,
                        "dispatch-bench: --compare-mode: unknown mode '%s' (expected "
                        "device, sync or chain)\n",
                        v);
            o->compare_mode = v;
        } else if (strcmp(a, "--device") == 0 && v) {
            o->device = v;
        } else if (strcmp(a, "--cache") == 0 && v) {
            ok = v[0] != '\0';
            if (!ok)
                fprintf(stderr, "dispatch-bench: --cache: the path is empty (leave the option "
                                "out for $HD_TUNE_CACHE or the default path)\n");
            o->cache = v;
        } else {
            takes = false;
            if (!ok) /* a value the parser refused, and said so */
                return 2;
            if (strcmp(a, "--csv") == 0)
                o->csv = true;
            else if (strcmp(a, "--list-cases") == 0)
                o->list_cases = true;
            else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0)
                o->quiet = true;
            else if (strcmp(a, "--cpu-only") == 0)
                o->cpu_only = true;
            else {
                fprintf(stderr, "dispatch-bench: unknown option '%s' (see --help)\n", a);
                return 2;
            }
        }
        if (!ok) /* the parser said what was wrong */
            return 2;
        i += takes;
    }
    if (o->csv && o->json_path != NULL && strcmp(o->json_path, "-") == 0) {
        fprintf(stderr, "dispatch-bench: --csv and --json - both want standard output\n");
        return 2;
    }
    if (!load_compared(o))
        return 2;
    if (o->suite_count == 0)
        add_suite("seed", o);
    bool any = false;
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++)
        any |= o->modes[m];
    for (int m = 0; m < HD_MEASURE_MODE_COUNT && !any; m++)
        o->modes[m] = m != HD_MEASURE_HOST; /* host only when asked for */
    any = false;
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        any |= o->backends[b];
    for (int b = 0; b < HD_BACKEND_COUNT && !any; b++)
        o->backends[b] = true;
    return 0;
}

static void list_suite(FILE *f, const hd_bench_suite *s)
{
    fprintf(f, "%s: %s\n", s->name, s->description);
    for (size_t j = 0; j < s->count; j++) {
        char name[64];
        hd__bench_case_name(&s->cases[j], name, sizeof name);
        fprintf(f, "  %-26s %10.3g FLOP %10.3g bytes\n", name, hd__bench_case_flops(&s->cases[j]),
                hd__bench_case_bytes(&s->cases[j]));
    }
}

/* Every suite's cases, and those of a --shapes file (extra, or NULL). */
static void list_cases(FILE *f, const hd_bench_suite *extra)
{
    size_t n;
    const hd_bench_suite *s = hd__bench_suites(&n);
    for (size_t i = 0; i < n; i++)
        list_suite(f, &s[i]);
    if (extra != NULL)
        list_suite(f, extra);
}

/* ---- progress ---- */

static bool progress_on;  /* a terminal: one line, rewritten */
static bool progress_log; /* not a terminal and not --quiet: one line per case */

static void progress(const char *fmt, ...) HD_PRINTF(1, 2);

/* The ETA of the run, set at the start of each case and shown at the end of every line. */
static char progress_eta[48];

static void progress(const char *fmt, ...)
{
    if (!progress_on)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r\033[K", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (fmt[0] != '\0' && progress_eta[0] != '\0')
        fprintf(stderr, "  (ETA %s)", progress_eta);
    fflush(stderr);
}

/* ---- calibration: the roofline and the CPU rates the skip estimate uses ---- */

/* The best rate of a square n³ GEMM on backend b (AUTO: the dispatcher's choice), timed in
 * mode: on the CPU backend at 512³ the compute roof of a CPU-only machine and the skip
 * estimate's rate; on a GPU at 4096³ the device's compute roof. A roof is what the machine
 * reached, so the fastest run counts, not the median the tuner's cost model uses. 0 when it
 * cannot be measured. */
static double gemm_rate(hd_context *ctx, hd_backend b, size_t n, hd_measure_mode mode)
{
    hd_measure_result r;
    if (hd__calibrate_gemm(ctx, b, n, mode, 0.3, &r) != HD_OK || r.min_s <= 0.0)
        return 0.0;
    return 2.0 * (double)n * (double)n * (double)n / r.min_s;
}

static void calibrate(hd_context *ctx, hd_bench_run *run, const options *o, double *cpu_rate)
{
    bool gpu = hd__measure_device_is_gpu(ctx);
    progress("calibrating: memory bandwidth, CPU GEMM rate");
    hd__measure_host_bandwidth((size_t)128 << 20, &run->roof.host_bandwidth);
    if (hd__measure_has_device(ctx) &&
        hd__measure_device_bandwidth(ctx, (size_t)256 << 20, &run->roof.device_bandwidth) != HD_OK)
        run->roof.device_bandwidth = 0.0;
    *cpu_rate = gemm_rate(ctx, HD_BACKEND_CPU, 512, HD_MEASURE_SYNC);
    if (gpu && run->roof.device_bandwidth > 0) {
        run->roof.bandwidth = run->roof.device_bandwidth;
        run->roof.bandwidth_source = "OpenCL copy kernel";
    } else {
        run->roof.bandwidth = run->roof.host_bandwidth;
        run->roof.bandwidth_source = "memcpy";
    }
    if (o->peak_gflops > 0) {
        run->roof.peak_flops = o->peak_gflops * 1e9;
        run->roof.peak_source = "--peak-flops";
    } else if (gpu) {
        /* A suite without large GEMMs (seed) must not take its own rates as the roof. */
        progress("calibrating: device GEMM rate (4096^3)");
        run->roof.peak_flops = gemm_rate(ctx, HD_BACKEND_AUTO, 4096, HD_MEASURE_DEVICE);
        run->roof.peak_source = "best measured GEMM";
    } else {
        run->roof.peak_flops = *cpu_rate;
        run->roof.peak_source = "best measured GEMM";
    }
}

/* After the run: without --peak-flops, the compute roof is the best GEMM or LoRA rate any
 * forced backend reached. */
static void settle_peak(hd_bench_run *run, const options *o)
{
    if (o->peak_gflops > 0)
        return;
    for (size_t i = 0; i < run->count; i++) {
        const hd_bench_record *r = &run->records[i];
        if (r->state != HD_BENCH_OK || !hd__bench_case_compute_bound(&r->c))
            continue;
        for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++)
            if (r->have[m] && r->m[m].median_s > 0 &&
                hd__bench_case_flops(&r->c) / r->m[m].median_s > run->roof.peak_flops)
                run->roof.peak_flops = hd__bench_case_flops(&r->c) / r->m[m].median_s;
    }
}

/* ---- one case ---- */

typedef struct bench_state {
    hd_context *ctx;
    const options *o;
    hd_bench_run *run;
    bool gpu;
    double cpu_rate;
    hd_tune_calibration cal; /* the estimates' rates: the tuner's, then this run's */
    size_t done, total;
    double start;          /* when the cases began */
    double *case_est_s;    /* each case's estimate, for the ETA; NULL: none */
    size_t timed, skipped; /* backends of the current case */
    double mode_budget_s;  /* the current case's time per backend and mode (mode_budget_s()) */
} bench_state;

/* The rates the estimates run on: the tuner's calibration where the cache has one, with this
 * run's own measurements in their place where it made them. */
static void estimate_rates(bench_state *st)
{
    const hd_tune_calibration *cal = hd__tune_calibration(st->ctx);
    if (cal != NULL)
        st->cal = *cal;
    if (st->cpu_rate > 0)
        st->cal.cpu_gflops = st->cpu_rate / 1e9;
    if (st->run->roof.host_bandwidth > 0)
        st->cal.cpu_gbps = st->run->roof.host_bandwidth / 1e9;
    if (st->gpu && st->run->roof.peak_flops > 0)
        st->cal.gemm_gflops = st->run->roof.peak_flops / 1e9;
    if (st->run->roof.device_bandwidth > 0)
        st->cal.copy_gbps = st->run->roof.device_bandwidth / 1e9;
}

/* Untimed calls before each round: a slow op is warm after one (kernels built, data resident),
 * and on a 2 s op the default three per round and mode cost more than the timing itself. */
static unsigned round_warmup(const options *o, double op_s)
{
    return op_s > SLOW_OP_S && o->warmup > 1 ? 1 : o->warmup;
}

/* Seconds one backend takes on a case whose op takes op_s: a check, then per mode the larger
 * of the mode's time budget and the minimum calls (with the warm-up of every round). */
static double estimate_backend_s(const bench_state *st, double op_s)
{
    unsigned warmup = round_warmup(st->o, op_s);
    double total = op_s * 3; /* the first, the timed and the checked call */
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        if (!st->o->modes[m])
            continue;
        bool chained = m == HD_MEASURE_CHAIN || m == HD_MEASURE_HOST;
        double calls = st->o->repeats * (chained ? 2.0 : 1.0) + (double)warmup * st->o->rounds;
        double t = calls * op_s;
        total += t > st->mode_budget_s ? t : st->mode_budget_s;
    }
    return total;
}

/* Seconds one call of case c is expected to take on b, before anything runs; auto as the
 * fastest backend it may choose. */
static double estimate_op_s(const bench_state *st, hd_backend b, const hd_bench_case *c)
{
    if (b != HD_BACKEND_AUTO)
        return hd__bench_case_estimate_s(st->ctx, &st->cal, b, c);
    double best = INFINITY;
    for (int i = 0; i < HD_BACKEND_COUNT; i++)
        if (i != HD_BACKEND_AUTO && hd__bench_case_takes(st->ctx, (hd_backend)i, c))
            best = fmin(best, hd__bench_case_estimate_s(st->ctx, &st->cal, (hd_backend)i, c));
    return isinf(best) ? hd__bench_case_estimate_s(st->ctx, &st->cal, HD_BACKEND_CPU, c) : best;
}

/* The seconds the current case may take: --case-budget-s, or less where --max-time leaves
 * less per case left; 0 for no limit, negative when the time is up. */
static double case_limit_s(const bench_state *st)
{
    double limit = st->o->case_budget_s;
    if (st->o->max_time_s > 0) {
        double left = st->o->max_time_s - (hd__measure_now() - st->start);
        double share = left / (double)(st->total - st->done);
        if (share <= 0)
            return -1.0;
        if (limit <= 0 || share < limit)
            limit = share;
    }
    return limit;
}

/* How many of the asked-for backends take case c here (auto always does): the ones that
 * share its budget, since a backend that declines costs nothing. */
static int takers(const bench_state *st, const hd_bench_case *c)
{
    int n = 0;
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        n += st->o->backends[b] &&
             (b == HD_BACKEND_AUTO || hd__bench_case_takes(st->ctx, (hd_backend)b, c));
    return n > 0 ? n : 1;
}

/* A backend's share of the case budget: 0 for no limit. */
static double backend_limit_s(const bench_state *st, const hd_bench_case *c)
{
    double limit = case_limit_s(st);
    return limit > 0 ? limit / takers(st, c) : limit;
}

/* The time each backend may spend on each mode of case c: --budget-ms, or less where the
 * backend's share of the case budget is less, so that a case the budget cannot hold at the
 * full --budget-ms is timed with fewer runs (still at least --repeats) rather than skipped.
 * A part of the share is left for the first and the checked call. */
static double mode_budget_s(const bench_state *st, const hd_bench_case *c)
{
    double full = st->o->budget_ms * 1e-3;
    double limit = backend_limit_s(st, c);
    int modes = 0;
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++)
        modes += st->o->modes[m];
    if (limit <= 0 || modes == 0)
        return full;
    double share = limit / (modes + 1);
    return share < full ? share : full;
}

/* Seconds case c is expected to take in all (the backends over their share count as
 * skipped, nearly free), for the ETA. */
static double estimate_case_s(const bench_state *st, const hd_bench_case *c)
{
    double share = st->o->case_budget_s > 0 ? st->o->case_budget_s / takers(st, c) : 0;
    double total = 0.0;
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        if (!st->o->backends[b] ||
            (b != HD_BACKEND_AUTO && !hd_context_has_backend(st->ctx, (hd_backend)b)))
            continue;
        double t = estimate_backend_s(st, estimate_op_s(st, (hd_backend)b, c));
        total += share > 0 && t > share ? 0.0 : t;
    }
    return total;
}

/* A record that says why a case or a backend did not run. */
static void add_note_record(bench_state *st, const char *suite, const hd_bench_case *c,
                            const char *name, const char *backend, hd_bench_state state,
                            const char *note)
{
    hd_bench_record *r = hd__bench_record_add(st->run);
    if (r == NULL)
        return;
    r->suite = suite;
    r->c = *c;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->backend, sizeof r->backend, "%s", backend);
    r->state = state;
    snprintf(r->note, sizeof r->note, "%s", note);
}

/* What the rounds of one mode gathered for one backend of a case. */
typedef struct round_samples {
    double median_s[MAX_ROUNDS];
    unsigned count;
    hd_measure_result all; /* min, max, runs and the rest, over the rounds */
} round_samples;

/* One round of mode m for the backend of record r: a share of the runs and of the budget.
 * False (with the record's state and note set) when the backend failed or fell back. */
static bool measure_round(bench_state *st, hd_bench_instance *inst, hd_bench_record *r,
                          hd_backend b, hd_measure_mode m, double last_median, unsigned chain,
                          round_samples *rs)
{
    const unsigned rounds = st->o->rounds;
    progress("[%zu/%zu] %s: %s on %s, %s, round %u of %u", st->done + 1, st->total, r->suite,
             r->name, r->backend, hd__measure_mode_name(m), rs->count + 1, rounds);
    if (hd__bench_instance_use(inst, b) != HD_OK) {
        r->state = HD_BENCH_ERROR;
        snprintf(r->note, sizeof r->note, "%.180s", hd_context_last_error(st->ctx));
        return false;
    }
    hd_measure_config cfg;
    hd__measure_config_init(&cfg, m);
    /* the calls before each round also undo what the other backends' rounds moved or swapped */
    cfg.warmup = round_warmup(st->o, last_median > 0 ? last_median : r->op_s);
    cfg.min_runs = (st->o->repeats + rounds - 1) / rounds;
    cfg.max_runs = (st->o->max_runs + rounds - 1) / rounds;
    cfg.budget_s = st->mode_budget_s / rounds;
    cfg.chain_length = chain;
    cfg.input_sets = inst->sets;
    cfg.reset = hd__bench_instance_reset;
    hd_measure_result res;
    hd_status s = hd__measure(st->ctx, &cfg, hd__bench_instance_run, inst, &res);
    hd__bench_instance_release(inst);
    if (s != HD_OK) {
        r->state = HD_BENCH_ERROR;
        snprintf(r->note, sizeof r->note, "%s mode: %s", hd__measure_mode_name(m),
                 hd_context_last_error(st->ctx));
        return false;
    }
    if (b != HD_BACKEND_AUTO && res.ran_on != b) {
        r->state = HD_BENCH_NA;
        snprintf(r->note, sizeof r->note, "fell back to %s while timing",
                 hd_backend_name(res.ran_on));
        return false;
    }
    if (rs->count == 0) {
        rs->all = res;
    } else {
        rs->all.min_s = fmin(rs->all.min_s, res.min_s);
        rs->all.max_s = fmax(rs->all.max_s, res.max_s);
        rs->all.runs += res.runs;
        rs->all.host_timed |= res.host_timed;
        rs->all.ran_on = res.ran_on; /* auto's choice may change: the last one is reported */
    }
    rs->median_s[rs->count++] = res.median_s;
    return true;
}

/* Calls per sample in the chained modes of a case whose op takes op_s (0: measure.c sizes the
 * chain after the warm-up). A chain of slow ops adds nothing but time: two are enough to
 * overlap the wait. */
static unsigned chain_length(const options *o, hd_measure_mode m, double op_s)
{
    if (m != HD_MEASURE_CHAIN && m != HD_MEASURE_HOST)
        return 0;
    if (o->chain > 0)
        return o->chain;
    if (op_s > SLOW_OP_S)
        return 2;
    return m == HD_MEASURE_HOST ? hd__measure_chain_length(op_s) : 0;
}

/* The fastest time one call of the case took on the backends to be timed: their medians in
 * the mode measured last, else their checked call. */
static double fastest_op_s(const bench_state *st, const size_t *record_index,
                           const double *last_median, size_t n)
{
    double best = 0.0;
    for (size_t i = 0; i < n; i++) {
        const hd_bench_record *r = &st->run->records[record_index[i]];
        double t = last_median[i] > 0 ? last_median[i] : r->op_s;
        if (r->state == HD_BENCH_OK && t > 0 && (best == 0.0 || t < best))
            best = t;
    }
    return best;
}

/* The note of the records of a case the host mode does not time (AdamW: inputs written from
 * the host would run it on the host whatever the backend). */
static void note_no_host_mode(bench_state *st, const size_t *record_index, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hd_bench_record *r = &st->run->records[record_index[i]];
        if (r->state == HD_BENCH_OK)
            snprintf(r->note, sizeof r->note,
                     "host mode not timed: AdamW runs where its tensors are");
    }
}

/*
 * Times the backends that passed their check (the records at record_index[0..n), the backend
 * of each in bs), mode by mode. The backends take turns, one round each, rounds times over: a
 * drift of the device (clocks, temperature, other work on the host) then shows in every
 * backend's figures alike instead of favouring whichever was timed in a quiet moment, which
 * matters when auto and the backend it picks run the same kernel. The order rotates from round
 * to round, so that no backend always follows the same one: what a backend's calls leave behind
 * (runtime threads still busy, caches holding its data, CLBlast's parameters swapped) then
 * falls on every backend alike. Each mode reports the median of the rounds' medians, the
 * extremes and the number of runs over all rounds.
 *
 * The host mode times a loop that writes its inputs from the host and then calls the op a
 * chain of times, so two things are set apart there. Every backend gets the same chain, sized
 * for the fastest: the write's copy is shared by the chain's calls, and a backend given fewer
 * calls (by a warm-up that ran slow) would pay more of it per call. And every backend runs on
 * inputs of its own, with the same contents, made for this mode: where a tensor lives and how
 * it moved after its last writes is what the dispatcher learns from a program's loop, and
 * rounds of other backends on shared inputs (a CPU round that never moved them) are no loop a
 * program runs; all of them made at once, none has host memory older or warmer than another's.
 */
static void measure_case(bench_state *st, hd_bench_instance *inst, const size_t *record_index,
                         const hd_backend *bs, size_t n)
{
    double last_median[HD_BACKEND_COUNT + 1] = {0.0};
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        if (!st->o->modes[m])
            continue;
        bool host = m == HD_MEASURE_HOST;
        if (host && !hd__bench_case_has_host_mode(&inst->c)) {
            note_no_host_mode(st, record_index, n);
            continue;
        }
        unsigned host_chain =
            host ? chain_length(st->o, m, fastest_op_s(st, record_index, last_median, n)) : 0;
        hd_bench_instance own[HD_BACKEND_COUNT + 1];
        bool have_own[HD_BACKEND_COUNT + 1] = {false};
        for (size_t i = 0; host && i < n; i++) {
            hd_bench_record *r = &st->run->records[record_index[i]];
            if (r->state != HD_BENCH_OK)
                continue;
            have_own[i] =
                hd__bench_instance_create(st->ctx, &inst->c, inst->seed, true, &own[i]) == HD_OK;
            if (!have_own[i])
                snprintf(r->note, sizeof r->note, "host mode not timed: its own inputs: %.150s",
                         hd_context_last_error(st->ctx));
        }
        round_samples rs[HD_BACKEND_COUNT + 1];
        memset(rs, 0, sizeof rs);
        for (unsigned round = 0; round < st->o->rounds && !interrupted; round++) {
            for (size_t k = 0; k < n && !interrupted; k++) {
                size_t i = (k + round) % n;
                hd_bench_record *r = &st->run->records[record_index[i]];
                unsigned chain = host ? host_chain : chain_length(st->o, m, last_median[i]);
                if (r->state == HD_BENCH_OK && (!host || have_own[i]))
                    measure_round(st, host ? &own[i] : inst, r, bs[i], (hd_measure_mode)m,
                                  last_median[i], chain, &rs[i]);
            }
        }
        for (size_t i = 0; i < n; i++)
            if (have_own[i])
                hd__bench_instance_destroy(&own[i]);
        for (size_t i = 0; i < n; i++) {
            hd_bench_record *r = &st->run->records[record_index[i]];
            if (r->state != HD_BENCH_OK || rs[i].count == 0)
                continue;
            r->m[m] = rs[i].all;
            r->m[m].median_s = hd__measure_median(rs[i].median_s, rs[i].count);
            r->have[m] = true;
            last_median[i] = r->m[m].median_s;
        }
    }
}

/* Adds the record of backend b on the case and checks its result; true when it is to be
 * timed. */
static bool check_backend(bench_state *st, hd_bench_instance *inst, const char *suite,
                          const char *name, hd_backend b, size_t *index)
{
    hd_bench_record *r = hd__bench_record_add(st->run);
    if (r == NULL)
        return false;
    *index = (size_t)(r - st->run->records);
    r->suite = suite;
    r->c = inst->c;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->backend, sizeof r->backend, "%s", hd_backend_name(b));
    if (b != HD_BACKEND_AUTO && !hd_context_has_backend(st->ctx, b)) {
        r->state = HD_BENCH_NA;
        snprintf(r->note, sizeof r->note, "not available on this machine");
        return false;
    }
    if (b != HD_BACKEND_AUTO && hd__bench_case_is_adamw(&inst->c) &&
        !hd__bench_case_takes(st->ctx, b, &inst->c)) {
        r->state = HD_BENCH_NA;
        snprintf(r->note, sizeof r->note, "%s does not run AdamW", r->backend);
        return false;
    }
    if (hd__bench_instance_use(inst, b) != HD_OK) {
        r->state = HD_BENCH_NA;
        snprintf(r->note, sizeof r->note, "%.180s", hd_context_last_error(st->ctx));
        return false;
    }
    /* What cannot finish within its share of the budget is not started: one call, once
     * queued, cannot be stopped. */
    double limit = backend_limit_s(st, &inst->c);
    double est = estimate_backend_s(st, estimate_op_s(st, b, &inst->c));
    if (limit < 0 || (limit > 0 && est > limit)) {
        hd__bench_instance_release(inst);
        r->state = HD_BENCH_SKIPPED;
        if (limit < 0)
            snprintf(r->note, sizeof r->note, "no time left (--max-time %.0f s)",
                     st->o->max_time_s);
        else
            snprintf(r->note, sizeof r->note,
                     "est. %.3g s > budget %.3g s (from the calibration; --case-budget-s)", est,
                     limit);
        return false;
    }
    /* A first call builds the kernels the shape needs, moves the inputs and touches the
     * output's fresh pages: its time is not the op's. */
    progress("[%zu/%zu] %s: %s on %s, first call (builds kernels)", st->done + 1, st->total, suite,
             name, r->backend);
    double t0 = hd__measure_now();
    hd_status s = hd__bench_instance_run(st->ctx, inst, 0);
    if (s == HD_OK)
        s = hd_sync(st->ctx);
    double first_s = hd__measure_now() - t0;
    /* One call alone, the op's own time: the checked call also reads every input back and
     * runs the reference, which on a large row op takes far longer than the op. */
    progress("[%zu/%zu] %s: %s on %s, check", st->done + 1, st->total, suite, name, r->backend);
    t0 = hd__measure_now();
    if (s == HD_OK)
        s = hd__bench_instance_run(st->ctx, inst, 0);
    if (s == HD_OK)
        s = hd_sync(st->ctx);
    double op_s = hd__measure_now() - t0;
    r->op_s = op_s;
    if (s == HD_OK)
        s = hd__bench_instance_check(inst, &r->check);
    r->ran_on = hd_context_last_backend(st->ctx);
    hd__bench_instance_release(inst);
    /* A backend far slower than the estimate (PoCL running CLBlast, say) is caught here, by
     * the time its checked call really took. */
    est = estimate_backend_s(st, op_s);
    if (interrupted) {
        r->state = HD_BENCH_SKIPPED;
        snprintf(r->note, sizeof r->note, "interrupted");
    } else if (s != HD_OK) {
        r->state = HD_BENCH_ERROR;
        snprintf(r->note, sizeof r->note, "%.180s", hd_context_last_error(st->ctx));
    } else if (b != HD_BACKEND_AUTO && r->ran_on != b) {
        r->state = HD_BENCH_NA;
        snprintf(r->note, sizeof r->note, "declined; the call fell back to %s",
                 hd_backend_name(r->ran_on));
    } else if (!(r->check <= 1.0)) {
        r->state = HD_BENCH_WRONG;
        snprintf(r->note, sizeof r->note, "result off the float64 reference: %.3g x tolerance",
                 r->check);
    } else if (limit > 0 && est > limit) {
        r->state = HD_BENCH_SKIPPED;
        snprintf(r->note, sizeof r->note,
                 "est. %.3g s > budget %.3g s (one call took %.3g s, the first %.3g s; "
                 "--case-budget-s)",
                 est, limit, op_s, first_s);
    } else {
        return true;
    }
    return false;
}

/* Whether any backend of the context, whether timed or not, takes c. */
static bool any_backend_takes(const bench_state *st, const hd_bench_case *c)
{
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        if (b != HD_BACKEND_AUTO && hd__bench_case_takes(st->ctx, (hd_backend)b, c))
            return true;
    return false;
}

/* Whether a mode asked for times case c (AdamW has no host mode). */
static bool any_mode_times(const options *o, const hd_bench_case *c)
{
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++)
        if (o->modes[m] && (m != HD_MEASURE_HOST || hd__bench_case_has_host_mode(c)))
            return true;
    return false;
}

static void run_case(bench_state *st, const char *suite, const hd_bench_case *c, size_t index)
{
    char name[64], note[192];
    hd__bench_case_name(c, name, sizeof name);
    double elements = hd__bench_case_elements(c);
    if (st->o->max_elements > 0 && elements > st->o->max_elements) {
        snprintf(note, sizeof note, "%.0f elements > --max-elements %.0f", elements,
                 st->o->max_elements);
        add_note_record(st, suite, c, name, "-", HD_BENCH_SKIPPED, note);
        return;
    }
    if (case_limit_s(st) < 0) {
        snprintf(note, sizeof note, "no time left (--max-time %.0f s)", st->o->max_time_s);
        add_note_record(st, suite, c, name, "-", HD_BENCH_SKIPPED, note);
        return;
    }
    if (!any_mode_times(st->o, c)) {
        add_note_record(st, suite, c, name, "-", HD_BENCH_SKIPPED,
                        "the host mode alone was asked for, and AdamW runs where its tensors are");
        return;
    }
    if (!any_backend_takes(st, c)) { /* an operation not yet on any backend here */
        snprintf(note, sizeof note, "no backend here computes %s", hd__bench_case_op_name(c));
        add_note_record(st, suite, c, name, "-", HD_BENCH_NA, note);
        return;
    }
    hd_bench_instance inst;
    progress("[%zu/%zu] %s: %s, making random inputs", st->done + 1, st->total, suite, name);
    /* no host copies: the host mode makes inputs of its own for each backend */
    if (hd__bench_instance_create(st->ctx, c, st->o->seed + 0x9e3779b97f4a7c15u * (index + 1),
                                  false, &inst) != HD_OK) {
        snprintf(note, sizeof note, "%.180s", hd_context_last_error(st->ctx));
        add_note_record(st, suite, c, name, "-", HD_BENCH_ERROR, note);
        return;
    }
    /* every forced backend, then auto */
    st->mode_budget_s = mode_budget_s(st, c);
    size_t record_index[HD_BACKEND_COUNT + 1];
    hd_backend timed[HD_BACKEND_COUNT + 1];
    size_t n = 0;
    for (int i = 1; i <= HD_BACKEND_COUNT && !interrupted; i++) {
        hd_backend b = (hd_backend)(i % HD_BACKEND_COUNT);
        if (st->o->backends[b] && check_backend(st, &inst, suite, name, b, &record_index[n]))
            timed[n++] = b;
    }
    measure_case(st, &inst, record_index, timed, n);
    hd__bench_instance_destroy(&inst);
}

static void format_duration(char *buf, size_t size, double s)
{
    if (s < 60)
        snprintf(buf, size, "%.1f s", s);
    else
        snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

/* The ETA on a terminal: the estimates of the cases left, each within its budget, scaled by
 * how the finished cases compared with theirs (within a factor of 4 either way: the model
 * knows nothing of kernel builds or of other work on the machine). */
static void progress_case_start(const bench_state *st, const char *suite, const hd_bench_case *c)
{
    if (!progress_on || st->case_est_s == NULL)
        return;
    double left = 0.0, done = 0.0;
    for (size_t i = 0; i < st->total; i++)
        *(i < st->done ? &done : &left) += st->case_est_s[i];
    double scale = done > 0 ? (hd__measure_now() - st->start) / done : 1.0;
    left *= scale < 0.25 ? 0.25 : scale > 4.0 ? 4.0 : scale;
    char name[64];
    hd__bench_case_name(c, name, sizeof name);
    format_duration(progress_eta, sizeof progress_eta, left);
    progress("[%zu/%zu] %s: %s", st->done + 1, st->total, suite, name);
}

/* One line per finished case where the output is not a terminal (logs, CI, tee). */
static void progress_case_done(const bench_state *st, const char *suite, const hd_bench_case *c,
                               size_t first_record, double case_s)
{
    if (!progress_log)
        return;
    size_t ok = 0, skipped = 0, other = 0;
    for (size_t i = first_record; i < st->run->count; i++) {
        hd_bench_state state = st->run->records[i].state;
        ok += state == HD_BENCH_OK;
        skipped += state == HD_BENCH_SKIPPED;
        other += state != HD_BENCH_OK && state != HD_BENCH_SKIPPED;
    }
    char name[64], took[32], elapsed[32];
    hd__bench_case_name(c, name, sizeof name);
    format_duration(took, sizeof took, case_s);
    format_duration(elapsed, sizeof elapsed, hd__measure_now() - st->start);
    fprintf(stderr,
            "[%zu/%zu] %s: %s: %zu timed, %zu skipped, %zu n/a or failed in %s "
            "(elapsed %s)\n",
            st->done + 1, st->total, suite, name, ok, skipped, other, took, elapsed);
}

/* ---- output ---- */

static int compare_with_peer(const hd_bench_run *run, const options *o)
{
    char err[800] = "";
    json_t *made = NULL; /* ours, from this run's records, read as --ours would read them */
    if (o->ours == NULL) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (mem != NULL) {
            hd__bench_write_json(mem, run);
            fclose(mem);
            made = hd__bench_results_parse(text, len, "this run's results", err, sizeof err);
        }
        free(text);
    }
    const json_t *ours = o->ours != NULL ? o->ours : made;
    int rc = ours != NULL
                 ? hd__bench_compare(stdout, ours, o->peer, o->compare_mode, err, sizeof err)
                 : -1;
    if (rc != 0)
        fprintf(stderr, "dispatch-bench: --compare: %s\n", err[0] ? err : "out of memory");
    json_decref(made);
    return rc == 0 ? 0 : 1;
}

/* An output file, '-' standard output where dash is true; NULL, said with the reason, where it
 * cannot be opened. */
static FILE *open_output(const char *path, bool dash)
{
    if (dash && strcmp(path, "-") == 0)
        return stdout;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fprintf(stderr, "dispatch-bench: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* Closes (standard output: flushes) an output of open_output; false, said with the reason,
 * where a write or the close failed. */
static bool close_output(FILE *f, const char *path)
{
    bool ok = ferror(f) == 0;
    /* a write that failed earlier: errno as that write left it, which later stdio calls that
     * succeed usually keep (C does not promise it); EIO where it is 0 */
    int err = ok ? 0 : errno;
    if (f == stdout ? fflush(f) != 0 : fclose(f) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok)
        fprintf(stderr, "dispatch-bench: cannot write %s: %s\n",
                f == stdout ? "standard output" : path, strerror(err != 0 ? err : EIO));
    return ok;
}

/* The run written by writer into path (as open_output takes it); false where that failed, said. */
static bool write_run(const char *path, bool dash, void (*writer)(FILE *, const hd_bench_run *),
                      const hd_bench_run *run)
{
    FILE *f = open_output(path, dash);
    if (f == NULL)
        return false;
    writer(f, run);
    return close_output(f, path);
}

static int write_outputs(hd_bench_run *run, const options *o)
{
    /* JSON on standard output stands alone there: the table moves to standard error. */
    bool json_stdout = o->json_path != NULL && strcmp(o->json_path, "-") == 0;
    if (o->csv)
        hd__bench_write_csv(stdout, run);
    else if (!json_stdout)
        hd__bench_write_table(stdout, run);
    else if (!o->quiet)
        hd__bench_write_table(stderr, run);
    if (!json_stdout && !close_output(stdout, NULL)) /* --csv with --json - is refused */
        return EXIT_OUTPUT;
    if ((o->csv_path != NULL && !write_run(o->csv_path, false, hd__bench_write_csv, run)) ||
        (o->json_path != NULL && !write_run(o->json_path, true, hd__bench_write_json, run)))
        return EXIT_OUTPUT;
    if (o->peer == NULL)
        return EXIT_DONE;
    int rc = compare_with_peer(run, o); /* the gap table, on standard output */
    return close_output(stdout, NULL) ? rc : EXIT_OUTPUT;
}

/* Copies the run as it stands (its finished cases) for the watchdog. */
static void publish(const hd_bench_run *run)
{
    pthread_mutex_lock(&stopping.lock);
    size_t n = run->count;
    hd_bench_record *copy = realloc(stopping.run.records, (n ? n : 1) * sizeof *copy);
    if (copy != NULL) {
        if (n > 0) /* no records yet: run->records may be NULL, which memcpy may not take */
            memcpy(copy, run->records, n * sizeof *copy);
        stopping.run = *run;
        stopping.run.records = copy;
        stopping.run.capacity = n;
        stopping.ready = true;
    }
    pthread_mutex_unlock(&stopping.lock);
}

static bool outputs_written(void)
{
    pthread_mutex_lock(&stopping.lock);
    bool written = stopping.written;
    pthread_mutex_unlock(&stopping.lock);
    return written;
}

/* Waits for an interrupt; if the main thread has not written the outputs STOP_GRACE_S later
 * (it is inside a kernel build or a long call), writes those of the finished cases and exits. */
static void *watchdog(void *arg)
{
    const options *o = arg;
    while (sem_wait(&stopping.wake) != 0)
        ;
    double until = hd__measure_now() + STOP_GRACE_S;
    while (hd__measure_now() < until) {
        if (outputs_written())
            return NULL;
        nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
    }
    pthread_mutex_lock(&stopping.lock);
    if (stopping.written || !stopping.ready) {
        pthread_mutex_unlock(&stopping.lock);
        return NULL;
    }
    dprintf(hd__measure_stderr_fd(), /* fd 2 may be a kernel build's capture now */
            "\ndispatch-bench: a kernel build or call is still running: writing the %zu "
            "finished record(s) and stopping there\n",
            stopping.run.count);
    settle_peak(&stopping.run, o);
    write_outputs(&stopping.run, o);
    fflush(NULL);
    _exit(EXIT_INTERRUPTED);
}

static int run_suites(const options *o)
{
    hd_context_options copt;
    hd_context_options_init(&copt);
    copt.device = o->device;
    copt.disable_opencl = o->cpu_only;
    copt.tune_cache = o->cache;
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, &copt) != HD_OK) {
        fprintf(stderr, "dispatch-bench: cannot create a context: %s\n",
                hd_context_last_error(NULL));
        return EXIT_NO_CONTEXT;
    }
    hd_bench_run run = {.warmup = o->warmup,
                        .min_runs = o->repeats,
                        .max_runs = o->max_runs,
                        .rounds = o->rounds,
                        .budget_ms = o->budget_ms,
                        .seed = o->seed};
    memcpy(run.modes, o->modes, sizeof run.modes);
    run.device_name = hd_context_device_name(ctx);
    run.device_driver = hd__measure_device_driver(ctx);
    run.device_platform = hd__measure_device_platform(ctx);
    bool gpu = hd__measure_device_is_gpu(ctx);
    run.device_kind = gpu ? "gpu" : hd__measure_has_device(ctx) ? "cpu" : "none";
    time_t now = time(NULL);
    strftime(run.date, sizeof run.date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

    /* From here an interrupt is answered within STOP_GRACE_S, kernel builds included. */
    publish(&run);
    pthread_t dog;
    if (pthread_create(&dog, NULL, watchdog, (void *)o) == 0)
        pthread_detach(dog);
    progress("building kernels");
    if (hd_context_warmup(ctx) != HD_OK)
        fprintf(stderr, "dispatch-bench: warm-up: %s\n", hd_context_last_error(ctx));

    bench_state st = {.ctx = ctx, .o = o, .run = &run, .gpu = gpu,
                      .mode_budget_s = o->budget_ms * 1e-3};
    calibrate(ctx, &run, o, &st.cpu_rate);
    estimate_rates(&st);
    for (int i = 0; i < o->suite_count; i++)
        st.total += o->suites[i]->count;
    st.case_est_s = calloc(st.total ? st.total : 1, sizeof *st.case_est_s);
    size_t index = 0;
    for (int i = 0; i < o->suite_count && st.case_est_s != NULL; i++) {
        const hd_bench_suite *s = o->suites[i];
        for (size_t j = 0; j < s->count; j++)
            st.case_est_s[index++] = estimate_case_s(&st, &s->cases[j]);
    }
    st.start = hd__measure_now();
    publish(&run); /* with the roofline the calibration measured */
    index = 0;
    for (int i = 0; i < o->suite_count && !interrupted; i++) {
        const hd_bench_suite *s = o->suites[i];
        for (size_t j = 0; j < s->count && !interrupted; j++, st.done++) {
            size_t first = run.count;
            double t0 = hd__measure_now();
            progress_case_start(&st, s->name, &s->cases[j]);
            run_case(&st, s->name, &s->cases[j], index++);
            if (interrupted) { /* an unfinished case is not reported */
                run.count = first;
                break;
            }
            progress_case_done(&st, s->name, &s->cases[j], first, hd__measure_now() - t0);
            publish(&run);
        }
    }
    progress_eta[0] = '\0';
    progress("%s", "");
    if (interrupted)
        fprintf(stderr, "dispatch-bench: interrupted after %zu of %zu cases; writing them\n",
                st.done, st.total);
    pthread_mutex_lock(&stopping.lock); /* the watchdog may be writing: then it exits the tool */
    settle_peak(&run, o);
    int rc = write_outputs(&run, o);
    stopping.written = true;
    free(stopping.run.records);
    stopping.run.records = NULL;
    pthread_mutex_unlock(&stopping.lock);
    free(st.case_est_s);
    free(run.records);
    hd_context_destroy(ctx);
    return interrupted ? EXIT_INTERRUPTED : rc;
}

/* What the tool does with the options parsed: list the cases, compare files, or run. */
static int run(const options *o)
{
    progress_on = !o->quiet && isatty(STDERR_FILENO);
    progress_log = !o->quiet && !progress_on;
    const hd_bench_suite *file = o->file.cases != NULL ? &o->file : NULL;
    if (o->list_cases) {
        if (o->json_path == NULL) {
            list_cases(stdout, file);
            return close_output(stdout, NULL) ? EXIT_DONE : EXIT_OUTPUT;
        }
        FILE *f = open_output(o->json_path, true);
        if (f == NULL)
            return EXIT_OUTPUT;
        hd__bench_write_cases_json(f, file);
        return close_output(f, o->json_path) ? EXIT_DONE : EXIT_OUTPUT;
    }
    if (o->ours != NULL) {
        int rc = compare_with_peer(NULL, o);
        return close_output(stdout, NULL) ? rc : EXIT_OUTPUT;
    }
    sem_init(&stopping.wake, 0, 0); /* before the handler that posts it */
    hd__measure_keep_stderr();      /* before the handlers that write to it */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    hd__measure_set_stop_flag(&interrupted);
    /* A reader of standard output that went away (tee stopped by the same Ctrl-C) must not
     * kill the tool before it has written its files. */
    signal(SIGPIPE, SIG_IGN);
    return run_suites(o);
}

int main(int argc, char **argv)
{
    /* Line by line even into a pipe (main.sh's tee), so that results and the progress lines
     * on standard error appear in the order they happened. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    options o;
    int rc = parse_options(argc, argv, &o);
    rc = rc == 0 ? run(&o) : rc == 1 ? 0 : 2;
    free((void *)o.file.cases);
    json_decref(o.peer);
    json_decref(o.ours);
    return rc;
}
