/* The cases dispatch-autotune tunes: the benchmark suites or a --shapes file, by --ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tool/tool.h"
#include "core/op.h"
#include "dispatch/tools.h"

/* Whether the tuner takes case c: one of the operations asked for. AdamW's cases are
 * dispatch-bench's alone: AdamW has no backend to choose, it runs where its tensors are. */
static bool tuned(const tool_options *o, const hd_bench_case *c)
{
    return !hd__bench_case_is_adamw(c) && o->op_wanted[c->op];
}

static int from_file(const tool_options *o, tool_case_list *l)
{
    hd_bench_case_list file;
    char why[640];
    if (!hd__bench_shapes_read(o->shapes, &file, why, sizeof why)) {
        fprintf(stderr, "dispatch-autotune: --shapes %s\n", why);
        return EXIT_USAGE;
    }
    int rc = EXIT_TUNED;
    for (size_t i = 0; i < file.count && rc == EXIT_TUNED; i++) {
        char name[64];
        hd__bench_case_name(&file.cases[i], name, sizeof name);
        if (hd__bench_case_is_adamw(&file.cases[i]))
            fprintf(stderr,
                    "dispatch-autotune: --shapes %s: %s is not tuned (AdamW runs where its "
                    "tensors are; dispatch-bench times it)\n",
                    o->shapes, name);
        else if (tuned(o, &file.cases[i]) && !hd__bench_case_list_add(l, &file.cases[i]))
            rc = EXIT_USAGE;
    }
    free(file.cases);
    if (rc == EXIT_TUNED && l->count == 0) {
        fprintf(stderr, "dispatch-autotune: --shapes %s: no case (of the operations asked for)\n",
                o->shapes);
        rc = EXIT_USAGE;
    }
    return rc;
}

/* A suite's cases of the operations asked for, LoRA's in each layout they name: a record is
 * keyed by the layout too, since the backends' speeds differ by layout (the cases lora
 * 1x1024x1024 r8 and lora 1x1024x1024 r8 pt; commit 68020f6). */
static int add_suite(const tool_options *o, const hd_bench_suite *s, tool_case_list *l)
{
    for (size_t i = 0; i < s->count; i++)
        if (tuned(o, &s->cases[i]) && !hd__bench_case_list_add(l, &s->cases[i]))
            return EXIT_USAGE;
    return EXIT_TUNED;
}

typedef struct suite_cases {
    const tool_options *o;
    tool_case_list *l;
} suite_cases;

/* One name of --suites: its cases (every suite's but ci's for "all") into the list. */
static bool add_named_suite(const char *name, void *arg)
{
    const suite_cases *sc = arg;
    const hd_bench_suite *named[HD_BENCH_SUITES_MAX];
    size_t n = hd__bench_suites_named(name, named);
    if (n == 0) {
        fprintf(stderr, "dispatch-autotune: unknown suite '%s' (expected %s)\n", name,
                hd__bench_suite_names());
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (add_suite(sc->o, named[i], sc->l) != EXIT_TUNED)
            return false;
    return true;
}

static int from_suites(const tool_options *o, tool_case_list *l)
{
    suite_cases sc = {o, l};
    const char *list = o->suites ? o->suites : "seed,train,gemm,backward";
    if (!hd__bench_list_each("dispatch-autotune: --suites", list, add_named_suite, &sc))
        return EXIT_USAGE;
    if (l->count == 0) {
        char ops[256] = "";
        for (int op = 0; op < HD_OP_COUNT; op++)
            if (o->op_wanted[op])
                snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", ops[0] ? "," : "",
                         hd_op_name((hd_op)op));
        fprintf(stderr,
                "dispatch-autotune: no case matched: the suites '%s' hold none of --ops '%s'\n",
                list, ops);
        return EXIT_USAGE;
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
