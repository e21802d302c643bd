/* The gap table of --compare. */
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

/* The fastest ok result for case in mode, among auto results only or among all others. */
static best find_best(const hd_json *results, const char *name, const char *mode, int want_auto)
{
    best b = {0.0, "-"};
    for (size_t i = 0; i < results->count; i++) {
        const hd_json *r = &results->items[i];
        const char *backend = hd__json_str(r, "backend", "");
        if (strcmp(hd__json_str(r, "case", ""), name) != 0 ||
            strcmp(hd__json_str(r, "status", ""), "ok") != 0 ||
            (want_auto >= 0 && (strcmp(backend, "auto") == 0) != want_auto))
            continue;
        double t = hd__json_num(hd__json_get(hd__json_get(r, "modes"), mode), "median_s", 0.0);
        if (t > 0 && (b.seconds == 0 || t < b.seconds)) {
            b.seconds = t;
            b.backend = backend;
        }
    }
    return b;
}

static const hd_json *results_of(const hd_json *doc, const char *which, char *err, size_t cap)
{
    const char *schema = hd__json_str(doc, "schema", "");
    const hd_json *results = hd__json_get(doc, "results");
    if (strcmp(schema, "hd-bench/1") != 0 || results == NULL || results->type != HD_JSON_ARRAY) {
        snprintf(err, cap, "%s file: not an hd-bench/1 result file", which);
        return NULL;
    }
    return results;
}

hd_json *hd__bench_compare_load(const char *path, const char *which, char *err, size_t err_cap)
{
    hd_json *doc = hd__json_load(path, err, err_cap);
    if (doc != NULL && results_of(doc, which, err, err_cap) == NULL) {
        size_t used = strlen(err);
        snprintf(err + used, err_cap - used, " (%s)", path);
        hd__json_free(doc);
        doc = NULL;
    }
    return doc;
}

static void format_time(char *buf, size_t cap, double s)
{
    hd__bench_time_text(buf, cap, s, 12);
}

static bool seen_before(const hd_json *results, size_t i)
{
    const char *name = hd__json_str(&results->items[i], "case", "");
    for (size_t j = 0; j < i; j++)
        if (strcmp(hd__json_str(&results->items[j], "case", ""), name) == 0)
            return true;
    return false;
}

int hd__bench_compare(FILE *out, const hd_json *ours, const hd_json *peer, const char *mode,
                      char *err, size_t err_cap)
{
    const hd_json *mine = results_of(ours, "our", err, err_cap);
    const hd_json *theirs = mine ? results_of(peer, "peer", err, err_cap) : NULL;
    if (theirs == NULL)
        return -1;
    const char *peer_name = hd__json_str(peer, "tool", "peer");
    fprintf(out, "\ngap table: ours vs %s (%s)\n", peer_name,
            hd__json_str(hd__json_get(peer, "device"), "name", "?"));
    fprintf(out, "ratio = peer time / our time: above 1 we are faster, below 1 the peer is\n");
    fprintf(out, "%-24s %-6s %12s %-14s %12s %-14s %12s %8s %8s\n", "case", "mode", "ours best",
            "(backend)", "auto", "(ran on)", "peer", "ratio", "auto");
    double log_sum = 0.0, log_sum_auto = 0.0;
    int n = 0, n_auto = 0, faster = 0;
    for (size_t i = 0; i < mine->count; i++) {
        if (seen_before(mine, i))
            continue;
        const char *name = hd__json_str(&mine->items[i], "case", "");
        const char *m = mode;
        for (size_t k = 0; m == NULL && k < sizeof mode_order / sizeof *mode_order; k++)
            if (find_best(mine, name, mode_order[k], 0).seconds > 0 &&
                find_best(theirs, name, mode_order[k], 0).seconds > 0)
                m = mode_order[k];
        if (m == NULL) {
            fprintf(out, "%-24s %-6s %12s %-14s %12s %-14s %12s %8s %8s\n", name, "-", "-", "", "-",
                    "", "-", "-", "-");
            continue;
        }
        best o = find_best(mine, name, m, 0), a = find_best(mine, name, m, 1);
        best p = find_best(theirs, name, m, 0);
        char to[32], ta[32], tp[32], r[16] = "-", ra[16] = "-";
        format_time(to, sizeof to, o.seconds);
        format_time(ta, sizeof ta, a.seconds);
        format_time(tp, sizeof tp, p.seconds);
        if (o.seconds > 0 && p.seconds > 0) {
            snprintf(r, sizeof r, "%.2fx", p.seconds / o.seconds);
            log_sum += log(p.seconds / o.seconds);
            n++;
            faster += p.seconds > o.seconds;
        }
        if (a.seconds > 0 && p.seconds > 0) {
            snprintf(ra, sizeof ra, "%.2fx", p.seconds / a.seconds);
            log_sum_auto += log(p.seconds / a.seconds);
            n_auto++;
        }
        char ob[20], ab[20];
        snprintf(ob, sizeof ob, "(%s)", o.backend);
        const char *ran_on = "-";
        for (size_t j = 0; j < mine->count; j++)
            if (strcmp(hd__json_str(&mine->items[j], "case", ""), name) == 0 &&
                strcmp(hd__json_str(&mine->items[j], "backend", ""), "auto") == 0)
                ran_on = hd__json_str(&mine->items[j], "ran_on", "-");
        snprintf(ab, sizeof ab, "(%s)", a.seconds > 0 ? ran_on : "-");
        fprintf(out, "%-24s %-6s %s %-14s %s %-14s %s %8s %8s\n", name, m, to, ob, ta, ab, tp, r,
                ra);
    }
    for (size_t i = 0; i < theirs->count; i++) {
        const char *name = hd__json_str(&theirs->items[i], "case", "");
        if (seen_before(theirs, i))
            continue;
        bool ours_has = false;
        for (size_t j = 0; j < mine->count && !ours_has; j++)
            ours_has = strcmp(hd__json_str(&mine->items[j], "case", ""), name) == 0;
        if (!ours_has)
            fprintf(out, "%-24s only in the peer file\n", name);
    }
    if (n > 0)
        fprintf(out, "geometric mean ratio: best %.2fx over %d cases (faster on %d)",
                exp(log_sum / n), n, faster);
    if (n_auto > 0)
        fprintf(out, ", auto %.2fx over %d", exp(log_sum_auto / n_auto), n_auto);
    fputc('\n', out);
    fputs("  ours best: the fastest of our backends forced on the case; auto: the dispatcher's\n"
          "  own choice (the backend it ran on); peer: the peer in the same mode (device events,\n"
          "  sync: one op and its wait, chain: per op of a queued chain); medians per call.\n",
          out);
    return 0;
}
