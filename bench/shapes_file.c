/* Cases as text, one per line of a shapes file ("gemm 1 4096 4096 nn", "lora 8 4096 4096 16
 * pt", "softmax 64 1024"): what dispatch-autotune --shapes tunes and dispatch-bench --shapes
 * times. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autotune/cache.h"
#include "bench/suites.h"
#include "dispatch/op.h"
#include "dispatch/tools.h"

bool hd__bench_case_parse(const char *text, hd_bench_case *out, char *why, size_t size)
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

bool hd__bench_case_list_add(hd_bench_case_list *l, const hd_bench_case *c)
{
    for (size_t i = 0; i < l->count; i++)
        if (l->cases[i].op == c->op && hd__op_same_shape(c->op, &l->cases[i].shape, &c->shape))
            return true;
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

bool hd__bench_shapes_read(const char *path, hd_bench_case_list *out, char *why, size_t size)
{
    *out = (hd_bench_case_list){NULL, 0, 0};
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, size, "%s: not a file", path);
        return false;
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, size, "%s: %s", path, strerror(errno));
        return false;
    }
    /* Whole lines, however long: a long comment must not become a line of its own. */
    char *line = NULL;
    size_t line_capacity = 0;
    int no = 0;
    bool ok = true;
    while (ok && getline(&line, &line_capacity, f) != -1) {
        no++;
        line[strcspn(line, "\r\n#")] = '\0';
        if (strspn(line, " \t") == strlen(line))
            continue;
        hd_bench_case c;
        char reason[300];
        if (!hd__bench_case_parse(line, &c, reason, sizeof reason)) {
            snprintf(why, size, "%s:%d: %s", path, no, reason);
            ok = false;
        } else if (!hd__bench_case_list_add(out, &c)) {
            snprintf(why, size, "%s: out of memory", path);
            ok = false;
        }
    }
    free(line);
    fclose(f);
    if (ok && out->count == 0) {
        snprintf(why, size, "%s: no case", path);
        ok = false;
    }
    if (!ok) {
        free(out->cases);
        *out = (hd_bench_case_list){NULL, 0, 0};
    }
    return ok;
}
