/* The cases dispatch-autotune tunes: the benchmark suites or a --shapes file, by --ops. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autotune/tool/tool.h"
#include "dispatch/op.h"
#include "dispatch/tools.h"

bool hd__tool_parse_case(const char *text, hd_bench_case *out, char *why, size_t size)
{
    char name[32], trans[8] = "nn";
    unsigned long long d[4] = {0, 0, 0, 0};
    int name_end = 0; /* after the blanks before the name too */
    int n = sscanf(text, " %31s%n", name, &name_end);
    hd_op op;
    if (n < 1) {
        snprintf(why, size, "empty case");
        return false;
    }
    if (!hd__op_from_name(name, &op)) {
        snprintf(why, size, "unknown operation '%s' (expected %s)", name, hd__bench_op_names());
        return false;
    }
    /* The op's dims, then (where it has them) its transposes, "nn" when left out. */
    const hd_op_desc *desc = hd__op(op);
    int dims = desc->dims, used = 0;
    const char *p = text + name_end;
    for (int i = 0; i < dims; i++, p += used)
        if (sscanf(p, " %llu%n", &d[i], &used) != 1) {
            snprintf(why, size, "'%s': %s takes %d dimensions (%s%s%s%s%s%s%s)", text, name, dims,
                     desc->dim_names[0], dims > 1 ? " " : "", dims > 1 ? desc->dim_names[1] : "",
                     dims > 2 ? " " : "", dims > 2 ? desc->dim_names[2] : "", dims > 3 ? " " : "",
                     dims > 3 ? desc->dim_names[3] : "");
            return false;
        }
    /* then LoRA's layout where it is not the default: pt or layout1 to layout7 */
    char rest[8] = "", more[2] = "";
    int extra = sscanf(p, " %7s %1s", rest, more);
    unsigned layout = 0;
    if (desc->transposes && extra >= 1)
        memcpy(trans, rest, sizeof trans);
    bool layout_ok = extra < 1;
    if (desc->lora_layout && extra == 1)
        layout_ok = hd__lora_layout_from_name(rest, strlen(rest), &layout);
    if (extra > 1 || (!desc->transposes && extra == 1 && !layout_ok) || strlen(trans) != 2 ||
        strspn(trans, "nt") != 2) {
        snprintf(why, size, "'%s': expected %s %s%s", text, name,
                 desc->transposes ? "dimensions and " : "",
                 desc->transposes     ? "[nn|nt|tn|tt]"
                 : desc->lora_layout ? "dimensions and, for another layout, pt or layout1..7"
                                     : "dimensions only");
        return false;
    }
    memset(out, 0, sizeof *out);
    out->shape.lora_layout = layout;
    out->op = op;
    for (int i = 0; i < dims; i++) {
        if ((d[i] == 0 && !desc->zero_dim_ok[i]) || d[i] > HD_TUNE_DIM_MAX) {
            snprintf(why, size, "'%s': dimension %d out of range", text, i + 1);
            return false;
        }
        out->shape.dim[i] = (size_t)d[i];
    }
    out->shape.trans_a = trans[0] == 't';
    out->shape.trans_b = trans[1] == 't';
    return true;
}

static bool add_case(tool_case_list *l, const hd_bench_case *c)
{
    for (size_t i = 0; i < l->count; i++) {
        const hd_bench_case *o = &l->cases[i];
        if (o->op == c->op && hd__op_same_shape(c->op, &o->shape, &c->shape))
            return true;
    }
    if (l->count == l->capacity) {
        size_t cap = l->capacity ? 2 * l->capacity : 32;
        hd_bench_case *p = realloc(l->cases, cap * sizeof *p);
        if (p == NULL)
            return false;
        l->cases = p;
        l->capacity = cap;
    }
    l->cases[l->count++] = *c;
    return true;
}

static int from_file(const tool_options *o, tool_case_list *l)
{
    struct stat st;
    if (stat(o->shapes, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "dispatch-autotune: --shapes %s: not a file\n", o->shapes);
        return EXIT_USAGE;
    }
    FILE *f = fopen(o->shapes, "r");
    if (f == NULL) {
        fprintf(stderr, "dispatch-autotune: --shapes %s: %s\n", o->shapes, strerror(errno));
        return EXIT_USAGE;
    }
    /* Whole lines, however long: a long comment must not become a line of its own. */
    char *line = NULL;
    size_t capacity = 0;
    int no = 0, rc = EXIT_TUNED;
    while (rc == EXIT_TUNED && getline(&line, &capacity, f) != -1) {
        no++;
        line[strcspn(line, "\r\n#")] = '\0';
        if (strspn(line, " \t") == strlen(line))
            continue;
        hd_bench_case c;
        char why[300];
        if (!hd__tool_parse_case(line, &c, why, sizeof why)) {
            fprintf(stderr, "dispatch-autotune: %s:%d: %s\n", o->shapes, no, why);
            rc = EXIT_USAGE;
        } else if (o->op_wanted[c.op] && !add_case(l, &c)) {
            rc = EXIT_USAGE;
        }
    }
    free(line);
    fclose(f);
    if (rc == EXIT_TUNED && l->count == 0) {
        fprintf(stderr, "dispatch-autotune: --shapes %s: no case (of the operations asked for)\n",
                o->shapes);
        rc = EXIT_USAGE;
    }
    return rc;
}

/* A suite's cases of the operations asked for, LoRA's in each layout they name: a record is
 * keyed by the layout too, since the backends' speeds differ by layout (BENCHMARKS.md). */
static int add_suite(const tool_options *o, const hd_bench_suite *s, tool_case_list *l)
{
    for (size_t i = 0; i < s->count; i++)
        if (o->op_wanted[s->cases[i].op] && !add_case(l, &s->cases[i]))
            return EXIT_USAGE;
    return EXIT_TUNED;
}

static int from_suites(const tool_options *o, tool_case_list *l)
{
    const char *list = o->suites ? o->suites : "seed,train,gemm,backward";
    const char *p = list;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char name[32];
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "dispatch-autotune: bad suite list '%s'\n", list);
            return EXIT_USAGE;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        size_t count;
        const hd_bench_suite *all = hd__bench_suites(&count), *s = hd__bench_suite_find(name);
        if (s == NULL && strcmp(name, "all") != 0) {
            fprintf(stderr, "dispatch-autotune: unknown suite '%s' (expected %s)\n", name,
                    hd__bench_suite_names());
            return EXIT_USAGE;
        }
        for (size_t i = 0; i < count; i++)
            if ((s != NULL ? &all[i] == s : hd__bench_suite_in_all(&all[i])) &&
                add_suite(o, &all[i], l) != EXIT_TUNED)
                return EXIT_USAGE;
        p += len + (p[len] == ',');
    }
    return EXIT_TUNED;
}

int hd__tool_cases(const tool_options *o, tool_case_list *out)
{
    memset(out, 0, sizeof *out);
    int rc = o->shapes ? from_file(o, out) : from_suites(o, out);
    if (rc != EXIT_TUNED)
        hd__tool_cases_free(out); /* the cases before the bad one */
    return rc;
}

void hd__tool_cases_free(tool_case_list *l)
{
    free(l->cases);
    memset(l, 0, sizeof *l);
}
