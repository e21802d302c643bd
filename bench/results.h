/* What dispatch-bench measured: one record per (case, backend), the roofline it is judged
 * against, and the writers: aligned table, CSV, JSON (schema "hd-bench/1", bench/SCHEMA.md). */
#ifndef HD_BENCH_RESULTS_H
#define HD_BENCH_RESULTS_H

#include <stdbool.h>
#include <stdio.h>

#include "autotune/measure.h"
#include "autotune/suites.h"

typedef enum hd_bench_state {
    HD_BENCH_OK = 0,  /* measured, result checked */
    HD_BENCH_NA,      /* the backend cannot run this case here (absent, declined, fell back) */
    HD_BENCH_SKIPPED, /* not run, and the note says why (estimate over budget, size guard) */
    HD_BENCH_WRONG,   /* ran, but the result failed the reference check: no timing reported */
    HD_BENCH_ERROR,   /* a call failed */
} hd_bench_state;

typedef struct hd_bench_record {
    const char *suite;
    hd_bench_case c;
    char name[64];
    char backend[24];  /* "cpu", "clblast", "fused", "clblast+fused", "auto" */
    hd_backend ran_on; /* what the op ran on: the backend itself, or auto's choice */
    hd_bench_state state;
    char note[192];
    double check; /* worst error / tolerance of the reference check; < 0: not checked */
    double op_s;  /* one call before timing (kernels built), for the budget; 0: not run */
    bool have[HD_MEASURE_MODE_COUNT];
    hd_measure_result m[HD_MEASURE_MODE_COUNT];
} hd_bench_record;

typedef struct hd_bench_roofline {
    double bandwidth; /* bytes per second */
    const char *bandwidth_source;
    double peak_flops; /* FLOP per second */
    const char *peak_source;
    double host_bandwidth;   /* memcpy, for the record */
    double device_bandwidth; /* OpenCL copy kernel; 0 without a device */
} hd_bench_roofline;

typedef struct hd_bench_run {
    hd_bench_record *records;
    size_t count, capacity;
    hd_bench_roofline roof;
    const char *device_name, *device_driver, *device_platform, *device_kind;
    bool modes[HD_MEASURE_MODE_COUNT];
    unsigned warmup, min_runs, max_runs, rounds;
    double budget_ms;
    unsigned long long seed;
    char date[32];
} hd_bench_run;

/* A new zeroed record appended to run, or NULL without memory. */
hd_bench_record *hd__bench_record_add(hd_bench_run *run);
const char *hd__bench_state_name(hd_bench_state s);

/* Roofline time of a case (the larger of its bytes over the bandwidth and its FLOPs over the
 * peak) and the figures of one mode of a record. */
double hd__bench_roofline_seconds(const hd_bench_roofline *roof, const hd_bench_case *c);
/* Auto's slowdown against the fastest forced backend of the same case in mode m, in percent;
 * false when either is missing. rec must be an auto record within run. */
bool hd__bench_regret(const hd_bench_run *run, const hd_bench_record *rec, hd_measure_mode m,
                      double *percent, const char **best);

void hd__bench_write_table(FILE *f, const hd_bench_run *run);
void hd__bench_write_csv(FILE *f, const hd_bench_run *run);
void hd__bench_write_json(FILE *f, const hd_bench_run *run);
/* The cases of the suites as JSON, for the peer scripts, and those of a --shapes file (extra,
 * or NULL) as one suite more. */
void hd__bench_write_cases_json(FILE *f, const hd_bench_suite *extra);

/* A time in seconds as "41.2 µs", "3.07 ms" or "1.384 s" ("-" for s <= 0), right-aligned to
 * width columns (0: not padded); "µ" counts as the one column it takes. */
void hd__bench_time_text(char *buf, size_t cap, double s, int width);

/* Writes s as a JSON string literal the schema's readers take: invalid UTF-8 as '?', control
 * characters as spaces. */
void hd__bench_json_string(FILE *f, const char *s);

#endif
