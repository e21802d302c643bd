/* Writing the results: an aligned table for people, CSV for spreadsheets, JSON for peers,
 * plots and --compare. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "autotune/case_params.h"
#include "bench/results.h"
#include "core/op.h"

hd_bench_record *hd__bench_record_add(hd_bench_run *run)
{
    if (run->count == run->capacity) {
        size_t cap = run->capacity ? 2 * run->capacity : 64;
        hd_bench_record *r = realloc(run->records, cap * sizeof *r);
        if (r == NULL)
            return NULL;
        run->records = r;
        run->capacity = cap;
    }
    hd_bench_record *rec = &run->records[run->count++];
    memset(rec, 0, sizeof *rec);
    rec->check = -1.0;
    return rec;
}

const char *hd__bench_state_name(hd_bench_state s)
{
    static const char *const names[] = {"ok", "n/a", "skipped", "wrong", "error"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

double hd__bench_roofline_seconds(const hd_bench_roofline *roof, const hd_bench_case *c)
{
    double t_mem = roof->bandwidth > 0 ? hd__bench_case_bytes(c) / roof->bandwidth : 0.0;
    double t_flop = roof->peak_flops > 0 && hd__bench_case_compute_bound(c)
                        ? hd__bench_case_flops(c) / roof->peak_flops
                        : 0.0;
    return t_mem > t_flop ? t_mem : t_flop;
}

bool hd__bench_regret(const hd_bench_run *run, const hd_bench_record *rec, hd_measure_mode m,
                      double *percent, const char **best)
{
    if (rec->state != HD_BENCH_OK || !rec->have[m])
        return false;
    const hd_bench_record *winner = NULL;
    for (size_t i = 0; i < run->count; i++) {
        const hd_bench_record *r = &run->records[i];
        if (r == rec || strcmp(r->name, rec->name) != 0 || strcmp(r->suite, rec->suite) != 0 ||
            strcmp(r->backend, "auto") == 0 || r->state != HD_BENCH_OK || !r->have[m])
            continue;
        if (winner == NULL || r->m[m].median_s < winner->m[m].median_s)
            winner = r;
    }
    if (winner == NULL || winner->m[m].median_s <= 0)
        return false;
    *percent = 100.0 * (rec->m[m].median_s / winner->m[m].median_s - 1.0);
    *best = winner->backend;
    return true;
}

void hd__bench_time_text(char *buf, size_t cap, double s, int width)
{
    char text[32];
    if (s <= 0)
        snprintf(text, sizeof text, "-");
    else if (s < 1e-3)
        snprintf(text, sizeof text, "%.1f \u00b5s", s * 1e6);
    else if (s < 1.0)
        snprintf(text, sizeof text, "%.2f ms", s * 1e3);
    else
        snprintf(text, sizeof text, "%.3f s", s);
    int columns = 0;
    for (const char *p = text; *p; p++)
        columns += ((unsigned char)*p & 0xC0) != 0x80; /* UTF-8 continuation bytes take none */
    int pad = width > columns ? width - columns : 0;
    snprintf(buf, cap, "%*s%s", pad, "", text);
}

/* Time in a readable unit, right-aligned in width 10. */
static void format_time(char *buf, size_t cap, double s)
{
    hd__bench_time_text(buf, cap, s, 10);
}

typedef struct figures {
    double gflops, gbs, roof_pct;
} figures;

static figures figures_of(const hd_bench_run *run, const hd_bench_record *r, hd_measure_mode m)
{
    double t = r->m[m].median_s;
    figures f = {0, 0, 0};
    if (t <= 0)
        return f;
    f.gflops = hd__bench_case_flops(&r->c) / t * 1e-9;
    f.gbs = hd__bench_case_bytes(&r->c) / t * 1e-9;
    f.roof_pct = 100.0 * hd__bench_roofline_seconds(&run->roof, &r->c) / t;
    return f;
}

static void table_header(FILE *f, const hd_bench_run *run, const char *suite)
{
    fprintf(f, "\nsuite %s    roofline: %.1f GB/s (%s), %.1f GFLOP/s (%s)\n", suite,
            run->roof.bandwidth * 1e-9, run->roof.bandwidth_source, run->roof.peak_flops * 1e-9,
            run->roof.peak_source);
    fprintf(f, "%-24s %-14s %-6s %10s %10s %10s %9s %8s %6s  %s\n", "case", "backend", "mode",
            "median", "min", "max", "GFLOP/s", "GB/s", "%roof", "note");
}

static void table_row(FILE *f, const hd_bench_run *run, const hd_bench_record *r)
{
    if (r->state != HD_BENCH_OK) {
        fprintf(f, "%-24s %-14s %-6s %10s %10s %10s %9s %8s %6s  %s: %s\n", r->name, r->backend,
                "-", "-", "-", "-", "-", "-", "-", hd__bench_state_name(r->state), r->note);
        return;
    }
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        if (!r->have[m])
            continue;
        const hd_measure_result *x = &r->m[m];
        char med[24], mn[24], mx[24], note[256] = "";
        format_time(med, sizeof med, x->median_s);
        format_time(mn, sizeof mn, x->min_s);
        format_time(mx, sizeof mx, x->max_s);
        figures fg = figures_of(run, r, (hd_measure_mode)m);
        size_t used = 0;
        if (x->host_timed)
            used += (size_t)snprintf(note + used, sizeof note - used, "host-timed ");
        if (m == HD_MEASURE_CHAIN || m == HD_MEASURE_HOST)
            used += (size_t)snprintf(note + used, sizeof note - used, "x%u ", x->chain_length);
        if (strcmp(r->backend, "auto") == 0) {
            double regret;
            const char *best;
            /* what the mode's last call ran on: in the host mode, where the moves led */
            hd_backend ran_on = x->ran_on != HD_BACKEND_AUTO ? x->ran_on : r->ran_on;
            used += (size_t)snprintf(note + used, sizeof note - used, "-> %s ",
                                     hd_backend_name(ran_on));
            if (hd__bench_regret(run, r, (hd_measure_mode)m, &regret, &best))
                used += (size_t)snprintf(note + used, sizeof note - used, "regret %+.1f%% vs %s ",
                                         regret, best);
        }
        if (r->note[0] != '\0' && used < sizeof note)
            snprintf(note + used, sizeof note - used, "%s", r->note);
        char gf[16] = "-";
        if (hd__bench_case_compute_bound(&r->c))
            snprintf(gf, sizeof gf, "%9.1f", fg.gflops);
        fprintf(f, "%-24s %-14s %-6s %s %s %s %9s %8.2f %5.0f%%  %s\n", r->name, r->backend,
                hd__measure_mode_name((hd_measure_mode)m), med, mn, mx, gf, fg.gbs, fg.roof_pct,
                note);
    }
}

/* What the columns and notes of a suite's table mean, printed under it. */
static void table_legend(FILE *f)
{
    fputs("\n  modes: device = device events around one op; sync = host wall time of one op and\n"
          "  the wait for it; chain = N ops queued, one wait, time per op (xN: N ops per chain);\n"
          "  host = a chain on inputs written again from the host before it, moves included.\n"
          "  host-timed: the op ran on the CPU, which has no device events: host wall time.\n"
          "  median, min, max: per call, over all timed runs. GFLOP/s, GB/s: the op's FLOPs and\n"
          "  fewest bytes over the median. %roof: the roofline time (bytes at the bandwidth,\n"
          "  FLOPs at the peak above) over the median; 100% is the machine's limit.\n"
          "  auto: the dispatcher's own choice; -> the backend it ran on; regret: how much\n"
          "  slower auto was than the fastest backend forced on the same case.\n"
          "  n/a: the backend cannot run the case here; skipped: not run, the note says why.\n",
          f);
}

void hd__bench_write_table(FILE *f, const hd_bench_run *run)
{
    const char *suite = NULL;
    const char *last_case = NULL;
    for (size_t i = 0; i < run->count; i++) {
        const hd_bench_record *r = &run->records[i];
        if (suite == NULL || strcmp(suite, r->suite) != 0) {
            if (suite != NULL)
                table_legend(f);
            suite = r->suite;
            table_header(f, run, suite);
            last_case = NULL;
        } else if (last_case != NULL && strcmp(last_case, r->name) != 0) {
            fputc('\n', f);
        }
        last_case = r->name;
        table_row(f, run, r);
    }
    if (suite != NULL)
        table_legend(f);
}

static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void hd__bench_write_csv(FILE *f, const hd_bench_run *run)
{
    fprintf(f, "suite,case,op,d0,d1,d2,d3,trans_a,trans_b,backend,ran_on,status,mode,median_s,"
               "min_s,max_s,runs,chain_length,host_timed,gflops,gbs,roofline_pct,regret_pct,"
               "note\n");
    for (size_t i = 0; i < run->count; i++) {
        const hd_bench_record *r = &run->records[i];
        for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
            bool have = r->state == HD_BENCH_OK && r->have[m];
            if (!have && (r->state == HD_BENCH_OK || m > 0))
                continue; /* one row for a case that did not run, one per mode otherwise */
            const size_t *d = r->c.shape.dim;
            fprintf(f, "%s,", r->suite);
            csv_field(f, r->name);
            fprintf(f, ",%s,%zu,%zu,%zu,%zu,%d,%d,%s,%s,%s,", hd__bench_case_op_name(&r->c), d[0],
                    d[1], d[2], d[3], r->c.shape.trans_a, r->c.shape.trans_b, r->backend,
                    hd_backend_name(r->ran_on), hd__bench_state_name(r->state));
            if (have) {
                const hd_measure_result *x = &r->m[m];
                figures fg = figures_of(run, r, (hd_measure_mode)m);
                double regret = 0;
                const char *best;
                bool has_regret = strcmp(r->backend, "auto") == 0 &&
                                  hd__bench_regret(run, r, (hd_measure_mode)m, &regret, &best);
                fprintf(f, "%s,%.9g,%.9g,%.9g,%u,%u,%d,%.6g,%.6g,%.4g,",
                        hd__measure_mode_name((hd_measure_mode)m), x->median_s, x->min_s, x->max_s,
                        x->runs, x->chain_length, x->host_timed, fg.gflops, fg.gbs, fg.roof_pct);
                if (has_regret)
                    fprintf(f, "%.4g", regret);
                fputc(',', f);
            } else {
                fprintf(f, ",,,,,,,,,,,");
            }
            csv_field(f, r->note);
            fputc('\n', f);
        }
    }
}

/* The length of the UTF-8 sequence at p (RFC 3629: no overlong forms, surrogates or code
 * points past U+10FFFF), or 0 where p does not start a valid one. */
static size_t utf8_length(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

/* The schema's readers refuse invalid UTF-8 and control characters in strings (bench/SCHEMA.md):
 * a device name or a note that holds them is written with each such byte as '?', and each
 * control character (C0, DEL, C1) as a space. */
void hd__bench_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p != '\0';) {
        size_t n = utf8_length(p);
        if (n == 0)
            fputc('?', f);
        else if ((n == 1 && (*p < 0x20 || *p == 0x7f)) || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0))
            fputc(' ', f);
        else if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else
            fwrite(p, 1, n, f);
        p += n ? n : 1;
    }
    fputc('"', f);
}

/* A number, or null when it is not finite (JSON has no NaN). */
static void json_number(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            colon += colon[1] == ' ' ? 2 : 1;
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(buf, cap, "%s", colon);
            break;
        }
    }
    fclose(f);
}

static void json_machine(FILE *f)
{
    char host[256] = "unknown", cpu[256];
    gethostname(host, sizeof host - 1);
    cpu_model(cpu, sizeof cpu);
    struct utsname u;
    char os[600] = "unknown";
    if (uname(&u) == 0)
        snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    fputs("  \"machine\": {\"hostname\": ", f);
    hd__bench_json_string(f, host);
    fputs(", \"os\": ", f);
    hd__bench_json_string(f, os);
    fputs(", \"cpu\": ", f);
    hd__bench_json_string(f, cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores >= 1)
        fprintf(f, ", \"cores\": %ld},\n", cores);
    else
        fputs(", \"cores\": null},\n", f);
}

static void json_header(FILE *f, const hd_bench_run *run)
{
    fputs("{\n  \"schema\": \"hd-bench/1\",\n  \"tool\": \"dispatch-bench\",\n  \"version\": ", f);
    hd__bench_json_string(f, hd_version());
    fputs(",\n  \"date\": ", f);
    hd__bench_json_string(f, run->date);
    fputs(",\n", f);
    json_machine(f);
    fputs("  \"device\": {\"name\": ", f);
    hd__bench_json_string(f, run->device_name);
    fputs(", \"driver\": ", f);
    hd__bench_json_string(f, run->device_driver);
    fputs(", \"platform\": ", f);
    hd__bench_json_string(f, run->device_platform);
    fputs(", \"kind\": ", f);
    hd__bench_json_string(f, run->device_kind);
    /* A roof not measured (a run stopped before the calibration) is null, not 0. */
    fputs("},\n  \"roofline\": {\"bandwidth_gbs\": ", f);
    json_number(f, run->roof.bandwidth > 0 ? run->roof.bandwidth * 1e-9 : NAN);
    fputs(", \"bandwidth_source\": ", f);
    hd__bench_json_string(f, run->roof.bandwidth_source);
    fputs(", \"peak_gflops\": ", f);
    json_number(f, run->roof.peak_flops > 0 ? run->roof.peak_flops * 1e-9 : NAN);
    fputs(", \"peak_source\": ", f);
    hd__bench_json_string(f, run->roof.peak_source);
    fputs(", \"host_bandwidth_gbs\": ", f);
    json_number(f, run->roof.host_bandwidth * 1e-9);
    fputs(", \"device_bandwidth_gbs\": ", f);
    json_number(f, run->roof.device_bandwidth * 1e-9);
    fputs("},\n  \"settings\": {\"modes\": [", f);
    bool first = true;
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        if (run->modes[m]) {
            fprintf(f, "%s\"%s\"", first ? "" : ", ", hd__measure_mode_name((hd_measure_mode)m));
            first = false;
        }
    }
    fprintf(f,
            "], \"warmup\": %u, \"min_runs\": %u, \"max_runs\": %u, \"rounds\": %u, "
            "\"seed\": %llu, \"budget_ms\": ",
            run->warmup, run->min_runs, run->max_runs, run->rounds, run->seed);
    json_number(f, run->budget_ms);
    fputs("},\n", f);
}

static void json_modes(FILE *f, const hd_bench_run *run, const hd_bench_record *r)
{
    fputs("\"modes\": {", f);
    bool first = true;
    for (int m = 0; m < HD_MEASURE_MODE_COUNT; m++) {
        if (r->state != HD_BENCH_OK || !r->have[m])
            continue;
        const hd_measure_result *x = &r->m[m];
        figures fg = figures_of(run, r, (hd_measure_mode)m);
        fprintf(f, "%s\n      \"%s\": {\"median_s\": ", first ? "" : ",",
                hd__measure_mode_name((hd_measure_mode)m));
        json_number(f, x->median_s);
        fputs(", \"min_s\": ", f);
        json_number(f, x->min_s);
        fputs(", \"max_s\": ", f);
        json_number(f, x->max_s);
        fprintf(f,
                ", \"runs\": %u, \"chain_length\": %u, \"host_timed\": %s, \"gflops\": ", x->runs,
                x->chain_length, x->host_timed ? "true" : "false");
        json_number(f, hd__bench_case_compute_bound(&r->c) ? fg.gflops : NAN);
        fputs(", \"gbs\": ", f);
        json_number(f, fg.gbs);
        fputs(", \"roofline_pct\": ", f);
        json_number(f, fg.roof_pct);
        double regret;
        const char *best;
        if (strcmp(r->backend, "auto") == 0 && x->ran_on != HD_BACKEND_AUTO) {
            fputs(", \"ran_on\": ", f);
            hd__bench_json_string(f, hd_backend_name(x->ran_on));
        }
        if (strcmp(r->backend, "auto") == 0 &&
            hd__bench_regret(run, r, (hd_measure_mode)m, &regret, &best)) {
            fputs(", \"regret_pct\": ", f);
            json_number(f, regret);
            fputs(", \"best_backend\": ", f);
            hd__bench_json_string(f, best);
        }
        fputc('}', f);
        first = false;
    }
    fputs(first ? "}" : "\n    }", f);
}

/* One member of an object being written: the separator before it, then the member. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
json_member(FILE *f, bool *first, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(*first ? "" : ", ", f);
    vfprintf(f, fmt, ap);
    va_end(ap);
    *first = false;
}

/* An AdamW case's rank and hyperparameters (autotune/case_params.h), for the peers. */
static void json_adamw_params(FILE *f, const hd_bench_case *c)
{
    hd_adamw_options o = hd__case_adamw_options(1);
    fprintf(f,
            ", \"params\": {\"rank\": %zu, \"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, "
            "\"eps\": %.9g, \"weight_decay\": %.9g, \"max_grad_norm\": %.9g}",
            c->rank, (double)o.lr, (double)o.beta1, (double)o.beta2, (double)o.eps,
            (double)o.weight_decay, (double)o.max_grad_norm);
}

/* The case's scalars that its dims do not say (autotune/case_params.h), for the peers. */
static void json_params(FILE *f, const hd_bench_case *c)
{
    if (hd__bench_case_is_adamw(c)) {
        json_adamw_params(f, c);
        return;
    }
    unsigned has = hd__case_scalars(c->op);
    hd_case_params cp;
    if (has == 0 || !hd__case_params_make(c, 0, &cp))
        return;
    const hd_op_params *p = &cp.p;
    bool first = true;
    fputs(", \"params\": {", f);
    if (has & HD_CASE_HAS_ALPHA)
        json_member(f, &first, "\"alpha\": %.9g", (double)p->alpha);
    if (has & HD_CASE_HAS_EPS)
        json_member(f, &first, "\"eps\": %.9g", (double)p->eps);
    if (has & HD_CASE_HAS_ROPE)
        json_member(f, &first, "\"theta\": %.9g, \"position_offset\": %zu, \"inverse\": %s",
                    (double)p->theta, p->position_offset, p->inverse ? "true" : "false");
    if (has & HD_CASE_HAS_CAUSAL)
        json_member(f, &first, "\"causal\": %s", p->causal ? "true" : "false");
    if (has & HD_CASE_HAS_TARGETS)
        json_member(f, &first, "\"ignore_index\": %ld, \"ignored\": %zu", (long)p->ignore_index,
                    hd__case_ignored_targets(c->shape.dim[0]));
    fputc('}', f);
    hd__case_params_free(&cp);
}

static void json_case_fields(FILE *f, const hd_bench_case *c, const char *name)
{
    fputs("\"case\": ", f);
    hd__bench_json_string(f, name);
    const size_t *d = c->shape.dim;
    fprintf(f,
            ", \"op\": \"%s\", \"dims\": [%zu, %zu, %zu, %zu], \"trans_a\": %s, "
            "\"trans_b\": %s, \"flops\": %.17g, \"bytes\": %.17g",
            hd__bench_case_op_name(c), d[0], d[1], d[2], d[3], c->shape.trans_a ? "true" : "false",
            c->shape.trans_b ? "true" : "false", hd__bench_case_flops(c), hd__bench_case_bytes(c));
    /* hd_lora_layout: 7 is PyTorch's W out×in, A r×in, B out×r */
    if (!hd__bench_case_is_adamw(c) && hd__op(c->op)->lora_layout)
        fprintf(f, ", \"lora_layout\": %u", c->shape.lora_layout);
    json_params(f, c);
}

void hd__bench_write_json(FILE *f, const hd_bench_run *run)
{
    json_header(f, run);
    fputs("  \"results\": [", f);
    for (size_t i = 0; i < run->count; i++) {
        const hd_bench_record *r = &run->records[i];
        fprintf(f, "%s\n    {\"suite\": ", i ? "," : "");
        hd__bench_json_string(f, r->suite);
        fputs(", ", f);
        json_case_fields(f, &r->c, r->name);
        fputs(",\n     \"backend\": ", f);
        hd__bench_json_string(f, r->backend);
        fputs(", \"ran_on\": ", f);
        hd__bench_json_string(f, r->state == HD_BENCH_OK ? hd_backend_name(r->ran_on) : "");
        fprintf(f, ", \"status\": \"%s\", \"note\": ", hd__bench_state_name(r->state));
        hd__bench_json_string(f, r->note);
        fputs(", \"check\": ", f);
        json_number(f, r->check >= 0 ? r->check : NAN);
        fputs(",\n     ", f);
        json_modes(f, run, r);
        fputc('}', f);
    }
    fputs("\n  ]\n}\n", f);
}

/* An AdamW case's tensors, [rows, cols] each in hd_adamw()'s order, so that a peer steps the
 * same list (the cases' file only: a result names its case by its dims and params). */
static void json_adamw_tensors(FILE *f, const hd_bench_case *c)
{
    hd_bench_case layer = *c; /* every layer's list is the first's */
    layer.shape.dim[0] = 1;
    size_t rows[HD_BENCH_ADAMW_LAYER_TENSORS], cols[HD_BENCH_ADAMW_LAYER_TENSORS];
    hd__bench_adamw_tensors(&layer, rows, cols, HD_BENCH_ADAMW_LAYER_TENSORS);
    fputs(", \"tensors\": [", f);
    for (size_t l = 0; l < c->shape.dim[0]; l++)
        for (size_t k = 0; k < HD_BENCH_ADAMW_LAYER_TENSORS; k++)
            fprintf(f, "%s[%zu, %zu]", l + k > 0 ? ", " : "", rows[k], cols[k]);
    fputc(']', f);
}

static void write_suite_json(FILE *f, const hd_bench_suite *s, bool first)
{
    fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
    hd__bench_json_string(f, s->name);
    fputs(", \"description\": ", f);
    hd__bench_json_string(f, s->description);
    fputs(", \"cases\": [", f);
    for (size_t j = 0; j < s->count; j++) {
        char name[64];
        hd__bench_case_name(&s->cases[j], name, sizeof name);
        fprintf(f, "%s\n      {", j ? "," : "");
        json_case_fields(f, &s->cases[j], name);
        if (hd__bench_case_is_adamw(&s->cases[j]))
            json_adamw_tensors(f, &s->cases[j]);
        fputc('}', f);
    }
    fputs("]}", f);
}

void hd__bench_write_cases_json(FILE *f, const hd_bench_suite *extra)
{
    size_t n;
    const hd_bench_suite *s = hd__bench_suites(&n);
    fputs("{\n  \"schema\": \"hd-bench-cases/1\",\n  \"suites\": [", f);
    for (size_t i = 0; i < n; i++)
        write_suite_json(f, &s[i], i == 0);
    if (extra != NULL)
        write_suite_json(f, extra, n == 0);
    fputs("\n  ]\n}\n", f);
}
