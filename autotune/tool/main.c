/* dispatch-autotune: measures which backend is fastest per operation and shape on this
 * machine and records it in the tuning cache that every context reads. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/calibrate.h"
#include "autotune/choose.h"
#include "autotune/measure.h"
#include "dispatch/tune_file.h"
#include "dispatch/tuning.h"
#include "autotune/tool/tool.h"
#include "dispatch/device.h"
#include "core/error.h"
#include "core/op.h"
#include "dispatch/tools.h"

volatile sig_atomic_t hd__tool_interrupted = 0;

/* Seconds an interrupted run may still take: a kernel build (seconds on PoCL) or a long call
 * in progress cannot be cut short, and every record is already saved, by rename, as it is
 * found; so past this the tool simply exits. */
#define STOP_GRACE_S 2

static void on_stop_timeout(int sig)
{
    (void)sig;
    static const char msg[] = "dispatch-autotune: stopped in the middle of a kernel build or "
                              "call; the cases tuned so far are saved\n";
    ssize_t ignored = write(hd__measure_stderr_fd(), msg, sizeof msg - 1);
    (void)ignored;
    _exit(EXIT_INTERRUPTED);
}

static void on_interrupt(int sig)
{
    static const char msg[] = "\ndispatch-autotune: interrupted: stopping after the call in "
                              "progress; the cases tuned so far are saved (again: quit at once)\n";
    hd__tool_interrupted = 1;
    ssize_t ignored = write(hd__measure_stderr_fd(), msg, sizeof msg - 1);
    (void)ignored;
    signal(sig, SIG_DFL);
    alarm(STOP_GRACE_S);
}

static const char usage[] =
    "usage: dispatch-autotune [options]\n"
    "\n"
    "Calibrates the OpenCL device, then for each operation and shape times every correct\n"
    "candidate (each backend, the CLBlast+fused plan, kernel parameter variants, CLBlast\n"
    "parameter sets), checked against a float64 reference, and records the fastest in the\n"
    "tuning cache. Records are saved as they are found: an interrupted run resumes where it\n"
    "stopped.\n"
    "\n"
    "  --quick            fewer variants and repeats (about a minute on an H100)\n"
    "  --full             more variants and repeats (not with --quick)\n"
    "  --suites LIST      benchmark suites to tune (default seed,train,gemm,backward; also\n"
    "                     shapes, ci, or all: every suite but ci)\n"
    "  --shapes FILE      tune these cases instead, one per line: 'gemm M N K [nn|nt|tn|tt]',\n"
    "                     'gemm_batched M N K BATCH [nn|..]', 'lora T IN OUT RANK' (then pt\n"
    "                     for PyTorch's layout, or layout1..7: hd_lora_layout's flags),\n"
    "                     'softmax|layer_norm|rms_norm ROWS COLS', their backward ops\n"
    "                     'softmax_backward ROWS COLS', ..., 'lora_backward T IN OUT RANK'\n"
    "                     (pt or layout1..7 as LoRA's)\n"
    "  --ops LIST         only these operations (gemm,lora,softmax,layer_norm,rms_norm,\n"
    "                     gemm_batched, and each one's _backward but GEMM's)\n"
    "  --backends LIST    time only these backends (cpu,clblast,fused,clblast+fused; default:\n"
    "                     every one this machine has); a case's record names the fastest of\n"
    "                     them\n"
    "  --force            re-tune cases the cache already holds\n"
    "  --cache PATH       the cache file (default: $HD_TUNE_CACHE, else\n"
    "                     $XDG_CACHE_HOME/hd-dispatch/tune.txt or ~/.cache/hd-dispatch/tune.txt)\n"
    "  --device SPEC      OpenCL device: index or name substring (as $HD_DEVICE)\n"
    "  --dry-run          list the cases and candidates, run nothing\n"
    "  --show             print the cache as a table and exit\n"
    "  --explain 'OP DIMS'  print how a context with this cache chooses for one case\n"
    "  --case-budget-s S  per case, skip each candidate whose estimate (from the calibration,\n"
    "                     then from its checked call) does not fit in what is left of S s\n"
    "                     (default 20; 2 with --quick, 120 with --full; 0: unlimited)\n"
    "  --max-time S       the whole run within about S seconds: the case budget shrinks to\n"
    "                     share what is left among the cases left, but while time is left\n"
    "                     not below what timing each backend's defaults takes; past it the\n"
    "                     cases left are skipped (default 0: no limit)\n"
    "  --build-threads N  threads that build the kernel variants' programs ahead, while the\n"
    "                     candidates before them are timed (0 to 4; default on a GPU 2 with\n"
    "                     8 cores or more, 1 with 4 to 7, else 0; 0 where the OpenCL device\n"
    "                     is the CPU, whose cores the timings use)\n"
    "  --verbose          every candidate's time or why it was rejected\n"
    "  --quiet            no progress lines (the summary of each case is still printed)\n"
    "  --version          the tool's and the library's version\n"
    "  --help             this text\n"
    "\n"
    "Progress goes to standard error: a bar with the ETA (from the estimates) on a terminal,\n"
    "else one line per case with the elapsed time. Ctrl-C stops after the call in progress\n"
    "(2 s at most: a kernel build is left unfinished; every record is saved as it is found).\n"
    "\n"
    "Exit status: 0 every case recorded, skipped over its budget, or of an operation no\n"
    "backend here computes; 1 some cases had no correct candidate (the others were\n"
    "recorded); 2 bad command line or shapes file; 3 the\n"
    "library could not start or calibrate; 4 the cache could not be read or written; 130\n"
    "interrupted (what was measured is saved).\n";

tool_effort hd__tool_effort(tool_level level)
{
    switch (level) {
    case LEVEL_QUICK:
        return (tool_effort){.variants = 3,
                             .clblast_sets = 1,
                             .confirm_rounds = 1,
                             .budget_s = 0.03,
                             .min_runs = 3,
                             .case_target_s = 2.0,
                             .cpu_limit_s = 0.02,
                             .run_target_s = 75.0};
    case LEVEL_FULL:
        return (tool_effort){.variants = 64,
                             .clblast_sets = 23,
                             .confirm_rounds = 5,
                             .budget_s = 0.3,
                             .min_runs = 10,
                             .case_target_s = 120.0,
                             .cpu_limit_s = 2.0,
                             .run_target_s = 3600.0};
    case LEVEL_DEFAULT:
        break;
    }
    return (tool_effort){.variants = 64,
                         .clblast_sets = 4,
                         .confirm_rounds = 3,
                         .budget_s = 0.08,
                         .min_runs = 5,
                         .case_target_s = 20.0,
                         .cpu_limit_s = 0.2,
                         .run_target_s = 420.0};
}

static bool want_op(const char *name, void *arg)
{
    bool *wanted = arg;
    hd_op op;
    if (!hd__op_from_name(name, &op)) {
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: --ops: unknown operation '%s' (expected %s)\n", name,
                hd__bench_op_names());
        return false;
    }
    wanted[op] = true;
    return true;
}

static bool want_backend(const char *name, void *arg)
{
    bool *left_out = arg;
    hd_backend b;
    if (!hd__backend_from_name(name, &b) || b == HD_BACKEND_AUTO) {
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: --backends: unknown backend '%s' (expected cpu, clblast, "
                "fused or clblast+fused)\n",
                name);
        return false;
    }
    left_out[b] = false;
    return true;
}

/* Fills left_out[] from "fused,clblast": every backend not named is left out. */
static bool parse_backends(const char *list, bool left_out[HD_BACKEND_COUNT])
{
    for (int i = 0; i < HD_BACKEND_COUNT; i++)
        left_out[i] = true;
    return hd__bench_list_each("dispatch-autotune: --backends", list, want_backend, left_out);
}

/* Fills wanted[] from "gemm,lora"; false, with a message naming the bad item, if one is not
 * an operation or the list is empty. */
static bool parse_ops(const char *list, bool wanted[HD_OP_COUNT])
{
    for (int i = 0; i < HD_OP_COUNT; i++)
        wanted[i] = false;
    return hd__bench_list_each("dispatch-autotune: --ops", list, want_op, wanted);
}

/* The list after the option at argv[*i] (of `what` names), parsed by parse into out; false
 * with a message where it is missing or bad. */
static bool list_option(int argc, char **argv, int *i, const char *what,
                        bool (*parse)(const char *list, bool *out), bool *out)
{
    if (*i + 1 >= argc) {
        fprintf(hd__measure_stderr(), "dispatch-autotune: %s needs a list of %s names\n", argv[*i],
                what);
        return false;
    }
    return parse(argv[++*i], out);
}

static int parse_args(int argc, char **argv, tool_options *o)
{
    memset(o, 0, sizeof *o);
    o->level = LEVEL_DEFAULT;
    o->case_budget_s = -1.0; /* the level's */
    o->build_threads = -1;   /* by the device */
    for (int i = 0; i < HD_OP_COUNT; i++)
        o->op_wanted[i] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **value = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            exit(EXIT_TUNED);
        } else if (strcmp(a, "--version") == 0) {
            printf("dispatch-autotune %s (library %s)\n", HD_VERSION_STRING, hd_version());
            exit(EXIT_TUNED);
        } else if (strcmp(a, "--quick") == 0 || strcmp(a, "--full") == 0) {
            tool_level level = a[2] == 'q' ? LEVEL_QUICK : LEVEL_FULL;
            if (o->level != LEVEL_DEFAULT && o->level != level) {
                fprintf(hd__measure_stderr(),
                        "dispatch-autotune: --quick and --full exclude each other\n");
                return EXIT_USAGE;
            }
            o->level = level;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            o->quiet = true;
        } else if (strcmp(a, "--case-budget-s") == 0 || strcmp(a, "--max-time") == 0) {
            double *target = a[2] == 'c' ? &o->case_budget_s : &o->max_time_s;
            char *end = NULL;
            errno = 0;
            double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1.0;
            if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || errno == ERANGE ||
                !isfinite(v) || !(v >= 0)) {
                fprintf(hd__measure_stderr(),
                        "dispatch-autotune: %s: '%s' is not a finite number >= 0\n", a,
                        i + 1 < argc ? argv[i + 1] : "");
                return EXIT_USAGE;
            }
            *target = v;
            i++;
        } else if (strcmp(a, "--build-threads") == 0) {
            char *end = NULL;
            errno = 0;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || errno == ERANGE || v < 0 ||
                v > 4) {
                fprintf(hd__measure_stderr(),
                        "dispatch-autotune: --build-threads: '%s' is not 0 to 4\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return EXIT_USAGE;
            }
            o->build_threads = (int)v;
            i++;
        } else if (strcmp(a, "--force") == 0) {
            o->force = true;
        } else if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
        } else if (strcmp(a, "--show") == 0) {
            o->show = true;
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            o->verbose = true;
        } else if (strcmp(a, "--cache") == 0) {
            value = &o->cache;
        } else if (strcmp(a, "--shapes") == 0) {
            value = &o->shapes;
        } else if (strcmp(a, "--suites") == 0) {
            value = &o->suites;
        } else if (strcmp(a, "--device") == 0) {
            value = &o->device;
        } else if (strcmp(a, "--explain") == 0) {
            value = &o->explain;
        } else if (strcmp(a, "--ops") == 0) {
            if (!list_option(argc, argv, &i, "operation", parse_ops, o->op_wanted))
                return EXIT_USAGE;
        } else if (strcmp(a, "--backends") == 0) {
            if (!list_option(argc, argv, &i, "backend", parse_backends, o->backend_left_out))
                return EXIT_USAGE;
        } else {
            fprintf(hd__measure_stderr(), "dispatch-autotune: unknown option '%s' (see --help)\n",
                    a);
            return EXIT_USAGE;
        }
        if (value != NULL) {
            if (i + 1 >= argc) {
                fprintf(hd__measure_stderr(), "dispatch-autotune: %s needs a value\n", a);
                return EXIT_USAGE;
            }
            *value = argv[++i];
        }
    }
    return EXIT_TUNED;
}

static hd_context *open_context(const tool_options *o, const char *path, bool use_cache)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.device = o->device;
    opt.tune_cache = path;
    opt.no_tune_cache = !use_cache; /* tuning starts from the untuned defaults */
    hd_context *ctx = NULL;
    hd_status s = hd_context_create(&ctx, &opt);
    if (s != HD_OK) {
        fprintf(hd__measure_stderr(), "dispatch-autotune: cannot create a context: %s\n",
                hd_context_last_error(NULL));
        return NULL;
    }
    return ctx;
}

static int show(const char *path)
{
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[256];
    hd_status s = hd__tune_load(path, &f, msg, sizeof msg);
    if (s != HD_OK) {
        fprintf(hd__measure_stderr(), "dispatch-autotune: %s\n", msg);
        return EXIT_CACHE;
    }
    printf("cache    %s\n", path);
    hd__tool_show(stdout, &f);
    if (f.bad_lines > 0)
        printf("%zu bad line(s) ignored, the first at line %zu: %s\n", f.bad_lines,
               f.first_bad_line, f.first_problem);
    hd__tune_file_free(&f);
    return EXIT_TUNED;
}

static int explain(const tool_options *o, const char *path)
{
    hd_bench_case c;
    char why[512];
    if (!hd__bench_case_parse(o->explain, &c, why, sizeof why)) {
        fprintf(hd__measure_stderr(), "dispatch-autotune: --explain: %s\n", why);
        return EXIT_USAGE;
    }
    if (hd__bench_case_is_adamw(&c)) {
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: --explain: AdamW has no plan to explain: it runs where its "
                "tensors are (the device where the first parameter is valid there, else the "
                "host)\n");
        return EXIT_USAGE;
    }
    hd_context *ctx = open_context(o, path, true);
    if (ctx == NULL)
        return EXIT_NO_CONTEXT;
    if (hd_context_last_error(ctx)[0] != '\0')
        printf("context: %s\n", hd_context_last_error(ctx));
    char text[4096];
    hd_status s = hd__explain_shape(ctx, c.op, &c.shape, text, sizeof text);
    if (s == HD_OK)
        fputs(text, stdout);
    hd_context_destroy(ctx);
    return s == HD_OK ? EXIT_TUNED : EXIT_USAGE;
}

/* Saves one record (or none) and the calibration/params of part into the cache. */
static bool save(const char *path, const hd_tune_file *part)
{
    char msg[512];
    if (hd__tune_save(path, part, msg, sizeof msg) == HD_OK) {
        if (msg[0] != '\0') /* lines of the file it could not read, kept as comments */
            fprintf(hd__measure_stderr(), "dispatch-autotune: %s\n", msg);
        return true;
    }
    fprintf(hd__measure_stderr(), "dispatch-autotune: cannot save the cache: %s\n", msg);
    return false;
}

/* The CLBlast parameter set that won most GEMM cases becomes the device's base set. */
typedef struct tally {
    char variant[HD_TUNE_STRING_MAX];
    unsigned wins;
} tally;

static void count_win(tally *t, size_t *n, size_t cap, const char *variant)
{
    if (variant[0] == '\0')
        return;
    for (size_t i = 0; i < *n; i++)
        if (strcmp(t[i].variant, variant) == 0) {
            t[i].wins++;
            return;
        }
    if (*n < cap) {
        snprintf(t[*n].variant, sizeof t[*n].variant, "%s", variant);
        t[(*n)++].wins = 1;
    }
}

/* Measures the device's constants and saves them into the cache at path. */
static int calibrate(hd_context *ctx, const tool_options *o, const char *path, hd_tune_file *part)
{
    if (hd__calibrate(ctx, o->level == LEVEL_QUICK, &part->cal) != HD_OK) {
        fprintf(hd__measure_stderr(), "dispatch-autotune: calibration failed: %s\n",
                hd_context_last_error(ctx));
        return EXIT_NO_CONTEXT;
    }
    printf("calibration: launch %.1f \u00b5s, copy %.1f GB/s, host link %.1f GB/s, "
           "GEMM %.0f GFLOP/s (fused %.0f, CLBlast %.0f), CPU GEMM %.0f GFLOP/s, CPU copy %.1f "
           "GB/s\n",
           part->cal.launch_us, part->cal.copy_gbps, part->cal.host_gbps, part->cal.gemm_gflops,
           part->cal.fused_gflops, part->cal.clblast_gflops, part->cal.cpu_gflops,
           part->cal.cpu_gbps);
    return save(path, part) ? EXIT_TUNED : EXIT_CACHE;
}

/* The progress line of a tuned case. */
static void describe(const char *name, const hd_tune_record *rec, char *line, size_t size)
{
    const char *with = rec->variant[0] ? " with " : "";
    char margin[64], time[32];
    hd__tune_margin_text(rec, margin, sizeof margin);
    hd__tool_time_text(rec->median_us, time, sizeof time);
    if (rec->runner_up != HD_BACKEND_AUTO)
        snprintf(line, size, "%s: %s %s, %s%s%s", name, hd_backend_name(rec->backend), time, margin,
                 with, rec->variant);
    else
        snprintf(line, size, "%s: %s %s (the only candidate)%s%s", name,
                 hd_backend_name(rec->backend), time, with, rec->variant);
}

/* The CLBlast set that won most GEMM cases becomes the device's base set, once CLBlast has
 * taken it as one in ctx (as a context reading the cache will); CLBlast's shipped defaults
 * winning needs no record. */
static int save_clblast_base(hd_context *ctx, const tally *wins, size_t nwins, const char *path,
                             hd_tune_file *part)
{
    size_t top = 0;
    for (size_t i = 1; i < nwins; i++)
        if (wins[i].wins > wins[top].wins)
            top = i;
    if (nwins == 0 || strcmp(wins[top].variant, "-") == 0)
        return EXIT_TUNED;
    hd_tune_param p = {.backend = HD_BACKEND_CLBLAST, .name = "base"};
    snprintf(p.value, sizeof p.value, "%s", wins[top].variant);
    if (hd__backend_set_params(ctx, p.backend, p.name, p.value) != HD_OK) {
        printf("CLBlast device parameters not recorded: %s\n", hd_context_last_error(ctx));
        return EXIT_TUNED;
    }
    part->count = 0;
    if (hd__tune_put_param(part, &p) != HD_OK || !save(path, part))
        return EXIT_CACHE;
    printf("CLBlast device parameters (best on %u GEMM case(s)): %s\n", wins[top].wins, p.value);
    return EXIT_TUNED;
}

static int tune(const tool_options *o, const char *path)
{
    tool_case_list cases;
    int rc = hd__tool_cases(o, &cases);
    if (rc != EXIT_TUNED)
        return rc;
    hd_context *ctx = open_context(o, path, false);
    if (ctx == NULL) {
        hd__tool_cases_free(&cases);
        return EXIT_NO_CONTEXT;
    }
    hd_tune_file part;
    hd__tune_file_init(&part);
    hd__tune_context_key(ctx, &part.key);

    /* What the cache already holds for this device: skipped unless --force. A cache there
     * that cannot be read is refused by every save, so it is said before anything is
     * measured. */
    hd_tune_file have;
    hd__tune_file_init(&have);
    char msg[256];
    hd_status loaded = hd__tune_load(path, &have, msg, sizeof msg);
    if (loaded == HD_OK && hd__tune_key_mismatch(&have.key, &part.key) != NULL)
        hd__tune_file_free(&have);
    if (loaded != HD_OK && !o->dry_run && access(path, F_OK) == 0) {
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: the cache '%s' cannot be read (%s): not replaced, so that "
                "its records are kept; repair or remove it\n",
                path, msg);
        rc = EXIT_CACHE;
        goto done;
    }
    tool_effort effort = hd__tool_effort(o->level);
    if (o->case_budget_s >= 0)
        effort.case_target_s = o->case_budget_s;
    memcpy(effort.left_out, o->backend_left_out, sizeof effort.left_out);
    printf("device: %s; cache: %s; %zu case(s)\n", hd_context_device_name(ctx), path, cases.count);

    if (!o->dry_run && (rc = calibrate(ctx, o, path, &part)) != EXIT_TUNED)
        goto done;
    effort.cal = part.cal;
    memset(&part.cal, 0, sizeof part.cal); /* saved once; later saves keep it by merging */
    /* Build-ahead workers: a GPU's compiler runs beside the timings, on 2 of 8 cores or more
     * (1 of 4 to 7; the tool's own thread checks results on the host meanwhile); a CPU
     * device's would take the cores its candidates are timed on. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned threads = o->build_threads >= 0             ? (unsigned)o->build_threads
                       : !hd__measure_device_is_gpu(ctx) ? 0u
                       : cores >= 8                      ? 2u
                       : cores >= 4                      ? 1u
                                                         : 0u;
    if (!o->dry_run && threads > 0) {
        if (hd__device_build_ahead_start(ctx, threads) == HD_OK) {
            effort.build_ahead = true;
        } else {
            fprintf(hd__measure_stderr(),
                    "dispatch-autotune: no builds ahead (%s): each variant builds as it "
                    "runs\n",
                    hd_context_last_error(ctx));
            hd__error_clear(ctx);
        }
    }

    /* the cases to tune (all with --force, else those the cache does not hold), their estimates
     * and how many are left */
    double *estimates = calloc(cases.count ? cases.count : 1, sizeof *estimates);
    size_t tune_left = 0;
    for (size_t i = 0; i < cases.count; i++) {
        if (!o->force && hd__tune_find(&have, cases.cases[i].op, &cases.cases[i].shape,
                                       hd_context_gemm_precision(ctx)) != NULL)
            continue;
        tune_left++;
        if (estimates != NULL && !o->dry_run)
            estimates[i] = hd__tool_estimate_case(ctx, &cases.cases[i], &effort);
    }
    double start = hd__measure_now();
    /* What the cases tuned so far took beyond the budgets they were given (the uncharged
     * builds and checks of the defaults, the confirming rounds), summed: the cases left are
     * expected to take as much each, and their budgets leave room for it. */
    double overrun_s = 0.0;
    size_t overrun_cases = 0;
    tally wins[32];
    size_t nwins = 0;
    size_t failed = 0;
    if (!o->dry_run)
        hd__tool_progress_start(cases.count, estimates, o->quiet);
    for (size_t i = 0; i < cases.count && !hd__tool_interrupted; i++) {
        const hd_bench_case *c = &cases.cases[i];
        char name[96], line[1024], why[512];
        hd__bench_case_name(c, name, sizeof name);
        if (!o->force &&
            hd__tune_find(&have, c->op, &c->shape, hd_context_gemm_precision(ctx)) != NULL) {
            snprintf(line, sizeof line, "%s: in the cache already (--force re-tunes)", name);
            hd__tool_progress_done(i, line);
            continue;
        }
        if (o->dry_run)
            printf("%s:\n", name);
        hd__tool_progress_case(i, name);
        /* Behind schedule: the remaining cases compare the backends' defaults only. With
         * --max-time, each case gets at most its share of the time left, less what each case left
         * has taken beyond its budget so far (without that room the last cases of a run met the end
         * of the time with nothing timed: commit faee50d), and at least what timing every backend's
         * defaults takes while any time is left: a case whose share ran out would otherwise keep no
         * record. Past the time, the cases left are skipped. */
        tool_effort now = effort;
        double case_start = hd__measure_now(), spent = case_start - start;
        now.defaults_only = spent > effort.run_target_s;
        if (o->max_time_s > 0) {
            double left = o->max_time_s - spent;
            double overrun = overrun_cases > 0 ? overrun_s / (double)overrun_cases : 0.0;
            double share =
                hd__tune_case_share(left, tune_left, overrun, hd__tool_defaults_cost(ctx, c, &now));
            if (now.case_target_s <= 0 || share < now.case_target_s)
                now.case_target_s = share;
        }
        hd_tune_record rec;
        tool_case_outcome outcome;
        bool tuned = hd__tool_tune_case(ctx, c, &now, o->verbose, o->dry_run, &rec, &outcome, why,
                                        sizeof why);
        tune_left--;
        if (o->max_time_s > 0 && !o->dry_run) {
            double took = hd__measure_now() - case_start;
            overrun_s += took > now.case_target_s ? took - now.case_target_s : 0.0;
            overrun_cases++;
        }
        if (!tuned) {
            if (o->dry_run)
                continue;
            failed += !hd__tool_interrupted && !outcome.over_budget && !outcome.incomplete &&
                      !outcome.untaken;
            snprintf(line, sizeof line, "%s: %s%s", name,
                     outcome.over_budget ? "" : "no record: ", why);
            hd__tool_progress_done(i, line);
            continue;
        }
        if (c->op == HD_OP_GEMM)
            count_win(wins, &nwins, sizeof wins / sizeof wins[0], outcome.best_clblast);
        rec.precision = hd__tune_precision_of(c->op, hd_context_gemm_precision(ctx));
        part.count = 0;
        hd_status put = hd__tune_put(&part, &rec);
        if (put != HD_OK)
            fprintf(hd__measure_stderr(),
                    "dispatch-autotune: %s: the record cannot be written (%s)\n", name,
                    hd_status_str(put));
        if (put != HD_OK || !save(path, &part)) {
            rc = EXIT_CACHE;
            break;
        }
        describe(name, &rec, line, sizeof line);
        if (outcome.skipped > 0) {
            size_t used = strlen(line);
            snprintf(line + used, sizeof line - used,
                     " (%zu candidate(s) over the case budget "
                     "not run)",
                     outcome.skipped);
        }
        hd__tool_progress_done(i, line);
    }
    free(estimates);
    if (!o->dry_run)
        hd__tool_progress_finish();

    if (rc == EXIT_TUNED)
        rc = save_clblast_base(ctx, wins, nwins, path, &part);
    if (rc == EXIT_TUNED && hd__tool_interrupted)
        rc = EXIT_INTERRUPTED;
    else if (rc == EXIT_TUNED && failed > 0)
        rc = EXIT_SOME_FAILED;
done:
    hd__tune_file_free(&part);
    hd__tune_file_free(&have);
    hd__tool_cases_free(&cases);
    hd_context_destroy(ctx);
    return rc;
}

int main(int argc, char **argv)
{
    /* Line by line even into a pipe (main.sh's tee), so that results and the progress lines
     * on standard error appear in the order they happened. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    tool_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != EXIT_TUNED)
        return rc;
    char path[1024];
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = o.cache;
    switch (hd__tune_resolve_path(&opt, path, sizeof path)) {
    case HD_TUNE_PATH_FOUND:
        break;
    case HD_TUNE_PATH_NONE:
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: no cache path: set --cache, $HD_TUNE_CACHE or "
                "$HOME\n");
        return EXIT_USAGE;
    case HD_TUNE_PATH_EMPTY:
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: --cache: the path is empty (leave the option out "
                "for $HD_TUNE_CACHE or the default path)\n");
        return EXIT_USAGE;
    case HD_TUNE_PATH_TOO_LONG:
        fprintf(hd__measure_stderr(),
                "dispatch-autotune: the cache path is too long (more than %zu bytes)\n",
                sizeof path - 1);
        return EXIT_USAGE;
    }
    if (o.show)
        return show(path);
    if (o.explain != NULL)
        return explain(&o, path);
    hd__measure_keep_stderr(); /* before the handlers that write to it */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_stop_timeout;
    sigaction(SIGALRM, &sa, NULL);
    hd__measure_set_stop_flag(&hd__tool_interrupted);
    /* A reader of standard output that went away (tee stopped by the same Ctrl-C) must not
     * kill the tool before it has written its files. */
    signal(SIGPIPE, SIG_IGN);
    return tune(&o, path);
}
