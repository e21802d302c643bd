/* The gap table of --compare, over documents that hd__bench_results_load() has checked. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bench/compare.h"
#include "bench/results.h"

static const char *const mode_order[] = {"device", "chain", "sync"};

typedef struct best {
    double seconds; /* 0: none */
    const char *backend;
} best;

/* A member's string, or fallback where it is absent or not a string. */
static const char *str(const json_t *obj, const char *key, const char *fallback)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s != NULL ? s : fallback;
}

/* The fastest ok result of a case in mode, among its auto results only or among all others;
 * rows: the case's results. */
static best find_best(const json_t *rows, const char *mode, bool want_auto)
{
    best b = {0.0, "-"};
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *r = json_array_get(rows, i);
        const char *backend = str(r, "backend", "");
        if (strcmp(str(r, "status", ""), "ok") != 0 || (strcmp(backend, "auto") == 0) != want_auto)
            continue;
        const json_t *figures = json_object_get(json_object_get(r, "modes"), mode);
        double t = json_number_value(json_object_get(figures, "median_s"));
        if (t > 0 && (b.seconds == 0 || t < b.seconds)) {
            b.seconds = t;
            b.backend = backend;
        }
    }
    return b;
}

/* The results grouped by case, the cases in the order of their first result (jansson keeps an
 * object's members in the order they were added): one pass, however many cases. NULL without
 * memory. */
static json_t *by_case(const json_t *results)
{
    json_t *groups = json_object();
    for (size_t i = 0; groups != NULL && i < json_array_size(results); i++) {
        json_t *r = json_array_get(results, i);
        const char *name = str(r, "case", "");
        json_t *rows = json_object_get(groups, name);
        if (rows == NULL && json_object_set_new(groups, name, rows = json_array()) != 0)
            rows = NULL;
        if (rows == NULL || json_array_append(rows, r) != 0) {
            json_decref(groups);
            groups = NULL;
        }
    }
    return groups;
}

static const json_t *results_of(const json_t *doc, const char *which, char *err, size_t cap)
{
    const json_t *results = json_object_get(doc, "results");
    if (strcmp(str(doc, "schema", ""), "hd-bench/1") != 0 || !json_is_array(results)) {
        snprintf(err, cap, "%s file: not an hd-bench/1 result file", which);
        return NULL;
    }
    return results;
}

static void format_time(char *buf, size_t cap, double s)
{
    hd__bench_time_text(buf, cap, s, 12);
}

typedef struct totals {
    double log_sum, log_sum_auto;
    int n, n_auto, faster;
} totals;

/* One line of the table: the case's mode (the one asked for, else the first of mode_order
 * that both sides measured), our best, auto, the peer and the ratios. */
static void print_case(FILE *out, const char *name, const json_t *mine, const json_t *theirs,
                       const char *mode, totals *t)
{
    const char *m = mode;
    for (size_t k = 0; m == NULL && k < sizeof mode_order / sizeof *mode_order; k++)
        if (find_best(mine, mode_order[k], false).seconds > 0 &&
            find_best(theirs, mode_order[k], false).seconds > 0)
            m = mode_order[k];
    if (m == NULL) {
        fprintf(out, "%-24s %-6s %12s %-14s %12s %-14s %12s %8s %8s\n", name, "-", "-", "", "-", "",
                "-", "-", "-");
        return;
    }
    best o = find_best(mine, m, false), a = find_best(mine, m, true);
    best p = find_best(theirs, m, false);
    char to[32], ta[32], tp[32], r[16] = "-", ra[16] = "-";
    format_time(to, sizeof to, o.seconds);
    format_time(ta, sizeof ta, a.seconds);
    format_time(tp, sizeof tp, p.seconds);
    if (o.seconds > 0 && p.seconds > 0) {
        snprintf(r, sizeof r, "%.2fx", p.seconds / o.seconds);
        t->log_sum += log(p.seconds / o.seconds);
        t->n++;
        t->faster += p.seconds > o.seconds;
    }
    if (a.seconds > 0 && p.seconds > 0) {
        snprintf(ra, sizeof ra, "%.2fx", p.seconds / a.seconds);
        t->log_sum_auto += log(p.seconds / a.seconds);
        t->n_auto++;
    }
    /* What auto ran on in this mode (a host-mode call may move the work elsewhere), else in
     * its reference check; of the case's last auto result. */
    const char *ran_on = "-";
    for (size_t j = 0; j < json_array_size(mine); j++) {
        const json_t *row = json_array_get(mine, j);
        if (strcmp(str(row, "backend", ""), "auto") != 0)
            continue;
        const json_t *in_mode = json_object_get(json_object_get(row, "modes"), m);
        ran_on = str(in_mode, "ran_on", str(row, "ran_on", "-"));
    }
    char ob[20], ab[20];
    snprintf(ob, sizeof ob, "(%s)", o.backend);
    snprintf(ab, sizeof ab, "(%s)", a.seconds > 0 ? ran_on : "-");
    fprintf(out, "%-24s %-6s %s %-14s %s %-14s %s %8s %8s\n", name, m, to, ob, ta, ab, tp, r, ra);
}

int hd__bench_compare(FILE *out, const json_t *ours, const json_t *peer, const char *mode,
                      char *err, size_t err_cap)
{
    const json_t *mine = results_of(ours, "our", err, err_cap);
    const json_t *theirs = mine ? results_of(peer, "peer", err, err_cap) : NULL;
    if (theirs == NULL)
        return -1;
    json_t *my_cases = by_case(mine), *their_cases = by_case(theirs);
    if (my_cases == NULL || their_cases == NULL) {
        snprintf(err, err_cap, "out of memory");
        json_decref(my_cases);
        json_decref(their_cases);
        return -1;
    }
    fprintf(out, "\ngap table: ours vs %s (%s)\n", str(peer, "tool", "peer"),
            str(json_object_get(peer, "device"), "name", "?"));
    fprintf(out, "ratio = peer time / our time: above 1 we are faster, below 1 the peer is\n");
    fprintf(out, "%-24s %-6s %12s %-14s %12s %-14s %12s %8s %8s\n", "case", "mode", "ours best",
            "(backend)", "auto", "(ran on)", "peer", "ratio", "auto");
    totals t = {0};
    for (void *it = json_object_iter(my_cases); it != NULL;
         it = json_object_iter_next(my_cases, it)) {
        const char *name = json_object_iter_key(it);
        print_case(out, name, json_object_iter_value(it), json_object_get(their_cases, name), mode,
                   &t);
    }
    for (void *it = json_object_iter(their_cases); it != NULL;
         it = json_object_iter_next(their_cases, it))
        if (json_object_get(my_cases, json_object_iter_key(it)) == NULL)
            fprintf(out, "%-24s only in the peer file\n", json_object_iter_key(it));
    json_decref(my_cases);
    json_decref(their_cases);
    if (t.n > 0)
        fprintf(out, "geometric mean ratio: best %.2fx over %d cases (faster on %d)",
                exp(t.log_sum / t.n), t.n, t.faster);
    if (t.n_auto > 0)
        fprintf(out, ", auto %.2fx over %d", exp(t.log_sum_auto / t.n_auto), t.n_auto);
    fputc('\n', out);
    fputs("  ours best: the fastest of our backends forced on the case; auto: the dispatcher's\n"
          "  own choice (the backend it ran on); peer: the peer in the same mode (device events,\n"
          "  sync: one op and its wait, chain: per op of a queued chain); medians per call.\n",
          out);
    return 0;
}
