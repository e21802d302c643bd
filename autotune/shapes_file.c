/* Cases as text, one per line of a shapes file ("gemm 1 4096 4096 nn", "lora 8 4096 4096 16
 * pt", "softmax 64 1024", "adamw 2 4096 1024 14336 16"): what dispatch-autotune --shapes tunes
 * (AdamW's cases aside) and dispatch-bench --shapes times. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dispatch/tune_file.h"
#include "autotune/suites.h"
#include "core/op.h"
#include "dispatch/tools.h"

#define SHOWN_SIZE (80 * 4 + 4) /* 80 bytes as \xHH each, "..." and the NUL */

/* The next word of *p, blanks (space, TAB) around it: its start and length, *p moved past it;
 * NULL at the end of the text. */
static const char *next_word(const char **p, size_t *len)
{
    const char *s = *p + strspn(*p, " \t");
    *len = strcspn(s, " \t");
    *p = s + *len;
    return *len > 0 ? s : NULL;
}

/* s[0..len) for a message: each byte outside printable ASCII and TAB as \xHH (a CR would
 * otherwise hide what precedes it), "..." after the first 80 bytes. */
static const char *shown(const char *s, size_t len, char buf[SHOWN_SIZE])
{
    return hd__tune_shown(buf, SHOWN_SIZE, s, len, 80);
}

/* What may follow op's dimensions, for the message of a line that has something else. */
static void say_expected(const char *text, const char *name, const hd_op_desc *desc, char *why,
                         size_t size)
{
    char buf[SHOWN_SIZE];
    snprintf(why, size, "'%s': expected %s %s%s", shown(text, strlen(text), buf), name,
             desc->transposes ? "dimensions and " : "",
             desc->transposes    ? "[nn|nt|tn|tt]"
             : desc->lora_layout ? "dimensions and, for another layout, pt or layout1..7"
                                 : "dimensions only");
}

/* The word after the dimensions, where op takes one: GEMM's transposes, LoRA's layout. */
static bool parse_suffix(const char *word, size_t len, const hd_op_desc *desc, hd_shape *shape)
{
    if (desc->transposes && hd__tune_trans_parse(word, len, &shape->trans_a, &shape->trans_b))
        return true;
    return desc->lora_layout && hd__lora_layout_from_name(word, len, &shape->lora_layout);
}

/* An AdamW case's words after its name: layers, hidden, kv_dim, mlp and rank, each from 1
 * (layers at most HD_BENCH_ADAMW_MAX_LAYERS), and nothing after them. */
static bool parse_adamw(const char *text, const char *p, hd_bench_case *out, char *why, size_t size)
{
    static const char *const names[] = {"layers", "hidden", "kv_dim", "mlp", "rank"};
    char buf[SHOWN_SIZE], buf2[SHOWN_SIZE];
    size_t value[5], len;
    memset(out, 0, sizeof *out);
    out->op = HD_BENCH_OP_ADAMW;
    for (int i = 0; i < 5; i++) {
        const char *word = next_word(&p, &len);
        if (word == NULL) {
            snprintf(why, size, "'%s': adamw takes 5 dimensions (layers hidden kv_dim mlp rank)",
                     shown(text, strlen(text), buf));
            return false;
        }
        if (!hd__tune_dim_parse(word, len, 1, &value[i]) ||
            (i == 0 && value[i] > HD_BENCH_ADAMW_MAX_LAYERS)) {
            snprintf(why, size, "'%s': dimension %d (%s) '%s' is not a whole number from 1 to %zu",
                     shown(text, strlen(text), buf), i + 1, names[i], shown(word, len, buf2),
                     i == 0 ? (size_t)HD_BENCH_ADAMW_MAX_LAYERS : HD_TUNE_DIM_MAX);
            return false;
        }
    }
    if (next_word(&p, &len) != NULL) {
        snprintf(why, size, "'%s': expected adamw and its 5 dimensions only",
                 shown(text, strlen(text), buf));
        return false;
    }
    for (int i = 0; i < 4; i++)
        out->shape.dim[i] = value[i];
    out->rank = value[4];
    return true;
}

bool hd__bench_case_parse(const char *text, hd_bench_case *out, char *why, size_t size)
{
    const char *p = text;
    size_t len;
    const char *word = next_word(&p, &len);
    char name[32], buf[SHOWN_SIZE], buf2[SHOWN_SIZE];
    hd_op op;
    if (word == NULL) {
        snprintf(why, size, "empty case");
        return false;
    }
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), word);
    if (strcmp(name, "adamw") == 0)
        return parse_adamw(text, p, out, why, size);
    if (len >= sizeof name || !hd__op_from_name(name, &op)) {
        snprintf(why, size, "unknown operation '%s' (expected %s)", shown(word, len, buf),
                 hd__bench_case_op_names());
        return false;
    }
    /* The op's dims, digits alone as the cache writes them, then (where it has them) its
     * transposes, "nn" when left out, or LoRA's layout where it is not the default. */
    const hd_op_desc *desc = hd__op(op);
    memset(out, 0, sizeof *out);
    out->op = op;
    for (int i = 0; i < desc->dims; i++) {
        size_t lo = desc->zero_dim_ok[i] ? 0 : 1;
        if ((word = next_word(&p, &len)) == NULL) {
            int d = desc->dims;
            snprintf(why, size, "'%s': %s takes %d dimensions (%s%s%s%s%s%s%s)",
                     shown(text, strlen(text), buf), name, d, desc->dim_names[0], d > 1 ? " " : "",
                     d > 1 ? desc->dim_names[1] : "", d > 2 ? " " : "",
                     d > 2 ? desc->dim_names[2] : "", d > 3 ? " " : "",
                     d > 3 ? desc->dim_names[3] : "");
            return false;
        }
        if (!hd__tune_dim_parse(word, len, lo, &out->shape.dim[i])) {
            snprintf(why, size,
                     "'%s': dimension %d (%s) '%s' is not a whole number from %zu to %zu",
                     shown(text, strlen(text), buf), i + 1, desc->dim_names[i],
                     shown(word, len, buf2), lo, HD_TUNE_DIM_MAX);
            return false;
        }
    }
    if (((word = next_word(&p, &len)) != NULL && !parse_suffix(word, len, desc, &out->shape)) ||
        (word != NULL && next_word(&p, &len) != NULL)) {
        say_expected(text, name, desc, why, size);
        return false;
    }
    return true;
}

static bool same_case(const hd_bench_case *a, const hd_bench_case *b)
{
    if (a->op != b->op)
        return false;
    if (hd__bench_case_is_adamw(a))
        return memcmp(a->shape.dim, b->shape.dim, sizeof a->shape.dim) == 0 && a->rank == b->rank;
    return hd__op_same_shape(a->op, &a->shape, &b->shape);
}

bool hd__bench_case_list_add(hd_bench_case_list *l, const hd_bench_case *c)
{
    for (size_t i = 0; i < l->count; i++)
        if (same_case(&l->cases[i], c))
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
    while (ok) {
        errno = 0;
        ssize_t got = getline(&line, &line_capacity, f);
        if (got < 0) {
            /* not the end of the file: what was read is not all of it (glibc's getline says
             * ENOMEM without setting the stream's error) */
            if (ferror(f) || errno == ENOMEM) {
                snprintf(why, size, "%s: cannot read line %d: %s", path, no + 1,
                         strerror(errno != 0 ? errno : EIO));
                ok = false;
            }
            break;
        }
        no++;
        if (memchr(line, '\0', (size_t)got) != NULL) {
            snprintf(why, size, "%s:%d: the line holds a NUL byte", path, no);
            ok = false;
            break;
        }
        line[strcspn(line, "\n#")] = '\0';
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\r') /* a CRLF file's line end */
            line[--len] = '\0';
        if (strspn(line, " \t") == len)
            continue;
        hd_bench_case c;
        char reason[512];
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
