/*
 * The PTX rewrite for the CUDA driver (ptx.h says what it rewrites and what it refuses). One
 * pass over the lines; the output grows in a buffer of its own.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/ptx.h"

#define DYNAMIC_SHARED "hd_dynamic_shared"

typedef struct text {
    char *data;
    size_t len, cap;
    bool failed;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap > 0 ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *grown = realloc(t->data, cap);
        if (grown == NULL) {
            t->failed = true;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void puts_(text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* The __local pointer parameters met so far: their names are unique in the module (NVIDIA's
 * compiler names them ENTRY_param_N). */
typedef struct local_names {
    char (*name)[160];
    size_t count, cap;
} local_names;

static bool local_add(local_names *l, const char *name)
{
    if (l->count == l->cap) {
        size_t cap = l->cap > 0 ? l->cap * 2 : 8;
        void *grown = realloc(l->name, cap * sizeof *l->name);
        if (grown == NULL)
            return false;
        l->name = grown;
        l->cap = cap;
    }
    snprintf(l->name[l->count++], sizeof l->name[0], "%s", name);
    return true;
}

static bool ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/* Whether line names the identifier name as a whole token. */
static bool names(const char *line, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(line, name); p != NULL; p = strstr(p + 1, name))
        if ((p == line || !ident_char(p[-1])) && !ident_char(p[n]))
            return true;
    return false;
}

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static bool starts(const char *p, const char *word)
{
    return strncmp(p, word, strlen(word)) == 0;
}

static bool refuse(char *why, size_t cap, size_t line, const char *fmt, ...)
{
    int n = snprintf(why, cap, "PTX line %zu: ", line);
    if (n >= 0 && (size_t)n < cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + n, cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* The size in bytes of a parameter's type token (".u64", ".f32", ".b8"), 0 if unknown. */
static unsigned type_bytes(const char *tok)
{
    if (tok[0] != '.' || strchr("usbf", tok[1]) == NULL)
        return 0;
    unsigned bits = (unsigned)strtoul(tok + 2, NULL, 10);
    return bits % 8 == 0 ? bits / 8 : 0;
}

/* Rewrites one parameter line of an entry (".param .u64 .ptr .shared .align 4 NAME,") into
 * out, recording it in e. false with why set on a parameter it does not know. */
static bool param_line(const char *line, size_t line_no, hd_ptx_entry *e, local_names *locals,
                       text *out, char *why, size_t cap)
{
    char copy[512];
    if (strlen(line) >= sizeof copy)
        return refuse(why, cap, line_no, "parameter line too long");
    strcpy(copy, line);
    char *ptr = strstr(copy, ".ptr ");
    bool local = false;
    if (ptr != NULL) {
        const char *space = skip_space(ptr + 5);
        size_t drop;
        if (starts(space, ".global"))
            drop = (size_t)(space + 7 - ptr);
        else if (starts(space, ".shared"))
            drop = (size_t)(space + 7 - ptr), local = true;
        else
            return refuse(why, cap, line_no,
                          "a pointer parameter of a state space CUDA passes "
                          "otherwise (%.40s)",
                          space);
        while (ptr[drop] == ' ' || ptr[drop] == '\t')
            drop++;
        if (starts(ptr + drop, ".align")) { /* the pointee's alignment, part of .ptr */
            drop += 6;
            while (ptr[drop] == ' ' || ptr[drop] == '\t' || isdigit((unsigned char)ptr[drop]))
                drop++;
        }
        memmove(ptr, ptr + drop, strlen(ptr + drop) + 1);
    }
    /* the type is the token after .param, the name the last identifier (before any [N]) */
    const char *p = skip_space(strstr(copy, ".param") + 6);
    if (starts(p, ".align")) { /* ".param .align 32 .b8 NAME[32]": a vector or struct */
        p = skip_space(p + 6);
        while (isdigit((unsigned char)*p))
            p++;
        p = skip_space(p);
    }
    unsigned bytes = type_bytes(p);
    const char *end = copy + strlen(copy);
    while (end > copy && !ident_char(end[-1]) && end[-1] != ']')
        end--;
    unsigned count = 1;
    if (end > copy && end[-1] == ']') {
        const char *open = end - 1;
        while (open > copy && *open != '[')
            open--;
        count = (unsigned)strtoul(open + 1, NULL, 10);
        end = open;
    }
    const char *start = end;
    while (start > copy && ident_char(start[-1]))
        start--;
    if (bytes == 0 || count == 0 || end == start || (size_t)(end - start) >= sizeof e->name)
        return refuse(why, cap, line_no, "a parameter the rewrite does not read");
    if (e->param_count == HD_PTX_MAX_PARAMS)
        return refuse(why, cap, line_no, "more than %d parameters", HD_PTX_MAX_PARAMS);
    if (local && bytes != 4 && bytes != 8)
        return refuse(why, cap, line_no, "a __local pointer of %u bytes", bytes);
    e->params[e->param_count++] = (hd_ptx_param){.local = local, .bytes = bytes * count};
    if (local) {
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)(end - start), start);
        if (!local_add(locals, name))
            return refuse(why, cap, line_no, "out of memory");
    }
    puts_(out, copy);
    return true;
}

/* "mov.b32 %rN, %envregK;" with K in 0..8, rewritten; false with why set otherwise. */
static bool envreg_line(const char *line, size_t line_no, text *out, char *why, size_t cap)
{
    const char *p = skip_space(line);
    char reg[64];
    unsigned k;
    int used = 0;
    if ((!starts(p, "mov.b32") && !starts(p, "mov.u32")) ||
        sscanf(p + 7, " %63[^, \t] , %%envreg%u%n", reg, &k, &used) != 2 || used == 0)
        return refuse(why, cap, line_no, "%%envreg read otherwise than by a 32-bit mov");
    const char *rest = skip_space(p + 7 + used);
    if (*rest != ';' || k > 8)
        return refuse(why, cap, line_no, "%%envreg%u, a launch register the rewrite does not know",
                      k);
    static const char *const groups[3] = {"%nctaid.x", "%nctaid.y", "%nctaid.z"};
    char rewritten[160];
    snprintf(rewritten, sizeof rewritten, "\tmov.u32 \t%s, %s;", reg, k >= 6 ? groups[k - 6] : "0");
    puts_(out, rewritten);
    return true;
}

/* A line that reads a __local pointer parameter: "ld.param.u64 %rd, [NAME];", rewritten to add
 * the dynamic shared memory's address. false with why set on any other use. */
static bool local_read_line(const char *line, const char *name, size_t line_no, text *out,
                            char *why, size_t cap)
{
    const char *p = skip_space(line);
    char type[8], reg[64], operand[200];
    if (!starts(p, "ld.param.") ||
        sscanf(p + 9, "%7[a-z0-9] %63[^, \t] , [%199[^]]", type, reg, operand) != 3 ||
        strcmp(operand, name) != 0)
        return refuse(why, cap, line_no,
                      "a __local pointer parameter used otherwise than "
                      "loaded whole");
    const char *width;
    if (strcmp(type, "u64") == 0 || strcmp(type, "b64") == 0 || strcmp(type, "s64") == 0)
        width = "64";
    else if (strcmp(type, "u32") == 0 || strcmp(type, "b32") == 0 || strcmp(type, "s32") == 0)
        width = "32";
    else
        return refuse(why, cap, line_no, "a __local pointer parameter loaded as .%s", type);
    char added[4096 + 256];
    snprintf(added, sizeof added,
             "%s\n\t{ .reg .u%s %%hd_base; mov.u%s %%hd_base, " DYNAMIC_SHARED
             "; add.u%s %s, %s, %%hd_base; }",
             line, width, width, width, reg, reg);
    puts_(out, added);
    return true;
}

static const char *const unknown_constructs[] = {
    ".texref", ".samplerref", ".surfref", "tex.", "tld4.", "suld.", "sust.", "suq.", "txq."};

bool hd__ptx_for_cuda(const char *ptx, size_t len, hd_ptx_module *out, char *why, size_t why_cap)
{
    memset(out, 0, sizeof *out);
    if (why_cap > 0)
        why[0] = '\0';
    while (len > 0 && ptx[len - 1] == '\0')
        len--;
    if (memchr(ptx, '\0', len) != NULL)
        return refuse(why, why_cap, 0, "a NUL byte inside the text");
    text t = {0};
    local_names locals = {0};
    hd_ptx_entry *entry = NULL, **tail = &out->entries;
    bool in_params = false, seen_target = false, ok = true;
    int metadata_depth = -1; /* >= 0 inside .metadata_section */
    char line[4096];
    size_t line_no = 0;
    for (size_t at = 0; at < len && ok;) {
        const char *nl = memchr(ptx + at, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - (ptx + at)) : len - at;
        line_no++;
        if (n >= sizeof line) {
            ok = refuse(why, why_cap, line_no, "line too long");
            break;
        }
        memcpy(line, ptx + at, n);
        line[n] = '\0';
        at += n + 1;
        const char *p = skip_space(line);

        if (metadata_depth < 0 && starts(p, ".metadata_section"))
            metadata_depth = 0;
        if (metadata_depth >= 0) { /* OpenCL's kernel attributes: dropped to the closing brace */
            bool opened = metadata_depth > 0;
            for (const char *c = line; *c != '\0'; c++) {
                if (*c == '{')
                    metadata_depth++, opened = true;
                else if (*c == '}')
                    metadata_depth--;
            }
            if (opened && metadata_depth <= 0)
                metadata_depth = -1;
            continue;
        }
        if (starts(p, ".target")) {
            char target[256];
            snprintf(target, sizeof target, "%s", line);
            char *flag = strstr(target, "texmode_independent");
            if (flag != NULL) {
                char *cut = flag; /* the flag and the comma before or after it */
                while (cut > target && (cut[-1] == ' ' || cut[-1] == ','))
                    cut--;
                const char *after = flag + strlen("texmode_independent");
                memmove(cut, after, strlen(after) + 1);
            }
            if (strstr(target, "texmode") != NULL)
                ok = refuse(why, why_cap, line_no, "a texture mode CUDA does not take");
            puts_(&t, target);
            puts_(&t, "\n");
            seen_target = true;
            continue;
        }
        if (starts(p, ".address_size")) {
            puts_(&t, line);
            puts_(&t, "\n\n.extern .shared .align 128 .b8 " DYNAMIC_SHARED "[];\n");
            continue;
        }
        const char *entry_word = starts(p, ".visible") ? skip_space(p + 8) : p;
        if (starts(entry_word, ".func") ||
            (starts(p, ".weak") && starts(skip_space(p + 5), ".func")))
            entry = NULL; /* a function's body follows: not an entry's */
        if (starts(entry_word, ".entry")) {
            hd_ptx_entry *e = calloc(1, sizeof *e);
            if (e == NULL) {
                ok = refuse(why, why_cap, line_no, "out of memory");
                break;
            }
            *tail = e;
            tail = &e->next;
            entry = e;
            const char *name = skip_space(entry_word + 6);
            size_t k = 0;
            while (ident_char(name[k]) && k + 1 < sizeof e->name)
                k++;
            memcpy(e->name, name, k);
            e->name[k] = '\0';
            puts_(&t, ".visible .entry ");
            puts_(&t, name);
            puts_(&t, "\n");
            const char *open = strchr(name, '(');
            in_params = open == NULL || strchr(open, ')') == NULL;
            continue;
        }
        if (in_params) {
            if (strstr(p, ".param") != NULL) {
                ok = param_line(line, line_no, entry, &locals, &t, why, why_cap);
                puts_(&t, "\n");
            } else {
                puts_(&t, line);
                puts_(&t, "\n");
            }
            if (strchr(p, ')') != NULL)
                in_params = false;
            continue;
        }
        for (size_t u = 0; u < sizeof unknown_constructs / sizeof *unknown_constructs && ok; u++)
            if (strstr(p, unknown_constructs[u]) != NULL && !starts(p, "//"))
                ok = refuse(why, why_cap, line_no, "%s, which the rewrite does not know",
                            unknown_constructs[u]);
        if (!ok)
            break;
        if (entry != NULL && strstr(p, "griddepcontrol.wait") != NULL && !starts(p, "//"))
            entry->waits_on_previous = true;
        if (strstr(p, "%envreg") != NULL && !starts(p, "//")) {
            ok = envreg_line(line, line_no, &t, why, why_cap);
            puts_(&t, "\n");
            continue;
        }
        const char *local = NULL;
        for (size_t l = 0; l < locals.count && local == NULL; l++)
            if (names(p, locals.name[l]))
                local = locals.name[l];
        if (local != NULL && !starts(p, "//")) {
            ok = local_read_line(line, local, line_no, &t, why, why_cap);
            puts_(&t, "\n");
            continue;
        }
        puts_(&t, line);
        puts_(&t, "\n");
    }
    free(locals.name);
    if (ok && !seen_target)
        ok = refuse(why, why_cap, line_no, "no .target line: not PTX");
    if (ok && t.failed)
        ok = refuse(why, why_cap, line_no, "out of memory");
    if (!ok) {
        free(t.data);
        hd__ptx_module_free(out);
        return false;
    }
    out->text = t.data;
    out->len = t.len;
    return true;
}

void hd__ptx_module_free(hd_ptx_module *m)
{
    while (m->entries != NULL) {
        hd_ptx_entry *e = m->entries;
        m->entries = e->next;
        free(e);
    }
    free(m->text);
    m->text = NULL;
    m->len = 0;
}

const hd_ptx_entry *hd__ptx_entry(const hd_ptx_module *m, const char *name)
{
    for (const hd_ptx_entry *e = m->entries; e != NULL; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}
