/* Recursive-descent JSON reader; depth is bounded so a hostile file cannot exhaust the stack,
 * and a file's size so that it cannot exhaust memory. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/json.h"

#define MAX_DEPTH 64

typedef struct parser {
    const char *p, *start;
    char *err;
    size_t err_cap;
    bool failed;
} parser;

static void fail(parser *ps, const char *what)
{
    if (!ps->failed)
        snprintf(ps->err, ps->err_cap, "JSON: %s at byte %td", what, ps->p - ps->start);
    ps->failed = true;
}

static void skip_space(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')
        ps->p++;
}

static void value_free(hd_json *v)
{
    for (size_t i = 0; i < v->count; i++)
        value_free(&v->items[i]);
    free(v->items);
    free(v->string);
    free(v->key);
}

static char *parse_string(parser *ps)
{
    ps->p++; /* opening quote */
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    while (s != NULL && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\0' || (unsigned char)c < 0x20) {
            fail(ps, "unterminated string");
            break;
        }
        if (c == '\\') {
            char e = *ps->p++;
            switch (e) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case '"':
            case '\\':
            case '/':
                c = e;
                break;
            case 'u': {
                unsigned code = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *ps->p++;
                    unsigned d = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
                                 : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                                 : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
                                                        : 16u;
                    if (d > 15) {
                        fail(ps, "bad \\u escape");
                        free(s);
                        return NULL;
                    }
                    code = code * 16 + d;
                }
                if (code == 0) { /* it would end the string early for every reader of it */
                    fail(ps, "\\u0000 in a string");
                    free(s);
                    return NULL;
                }
                c = code < 0x80 ? (char)code : '?'; /* names here are ASCII */
                break;
            }
            default:
                fail(ps, "bad escape");
                free(s);
                return NULL;
            }
        }
        if (n + 2 > cap) {
            char *t = realloc(s, cap *= 2);
            if (t == NULL) {
                free(s);
                s = NULL;
                break;
            }
            s = t;
        }
        s[n++] = c;
    }
    if (s == NULL) {
        fail(ps, "out of memory");
        return NULL;
    }
    if (ps->failed) {
        free(s);
        return NULL;
    }
    ps->p++; /* closing quote */
    s[n] = '\0';
    return s;
}

static bool parse_value(parser *ps, hd_json *v, int depth);

static const char *skip_digits(const char *p)
{
    while (*p >= '0' && *p <= '9')
        p++;
    return p;
}

/* A number as JSON spells it, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, and finite as a
 * double: no hex, inf, nan, leading '+' or zeros, which strtod alone would take. */
static bool parse_number(parser *ps, hd_json *v)
{
    const char *p = ps->p + (*ps->p == '-');
    bool ok = *p >= '0' && *p <= '9';
    p = *p == '0' ? p + 1 : skip_digits(p);
    if (ok && *p == '.') {
        ok = p[1] >= '0' && p[1] <= '9';
        p = skip_digits(p + 1);
    }
    if (ok && (*p == 'e' || *p == 'E')) {
        p += 1 + (p[1] == '+' || p[1] == '-');
        ok = *p >= '0' && *p <= '9';
        p = skip_digits(p);
    }
    char *end = NULL;
    v->type = HD_JSON_NUMBER;
    v->number = ok ? strtod(ps->p, &end) : 0.0;
    if (!ok || end != p) {
        fail(ps, "malformed number");
        return false;
    }
    if (!isfinite(v->number)) {
        fail(ps, "number out of range");
        return false;
    }
    ps->p = p;
    return true;
}

static bool append(parser *ps, hd_json *v, size_t *cap, hd_json **slot)
{
    if (v->count == *cap) {
        size_t c = *cap ? 2 * *cap : 4;
        hd_json *t = realloc(v->items, c * sizeof *t);
        if (t == NULL) {
            fail(ps, "out of memory");
            return false;
        }
        v->items = t;
        *cap = c;
    }
    *slot = &v->items[v->count++];
    memset(*slot, 0, sizeof **slot);
    return true;
}

static bool parse_container(parser *ps, hd_json *v, int depth)
{
    bool object = *ps->p == '{';
    char close = object ? '}' : ']';
    v->type = object ? HD_JSON_OBJECT : HD_JSON_ARRAY;
    ps->p++;
    skip_space(ps);
    size_t cap = 0;
    if (*ps->p == close) {
        ps->p++;
        return true;
    }
    for (;;) {
        hd_json *item;
        if (!append(ps, v, &cap, &item))
            return false;
        skip_space(ps);
        if (object) {
            if (*ps->p != '"') {
                fail(ps, "expected a member name");
                return false;
            }
            if ((item->key = parse_string(ps)) == NULL)
                return false;
            skip_space(ps);
            if (*ps->p++ != ':') {
                fail(ps, "expected ':'");
                return false;
            }
        }
        if (!parse_value(ps, item, depth + 1))
            return false;
        skip_space(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return true;
        }
        fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return false;
    }
}

static bool parse_value(parser *ps, hd_json *v, int depth)
{
    if (depth > MAX_DEPTH) {
        fail(ps, "nested too deeply");
        return false;
    }
    skip_space(ps);
    char c = *ps->p;
    if (c == '{' || c == '[')
        return parse_container(ps, v, depth);
    if (c == '"') {
        v->type = HD_JSON_STRING;
        return (v->string = parse_string(ps)) != NULL;
    }
    if (strncmp(ps->p, "true", 4) == 0 || strncmp(ps->p, "false", 5) == 0) {
        v->type = HD_JSON_BOOL;
        v->boolean = c == 't';
        ps->p += v->boolean ? 4 : 5;
        return true;
    }
    if (strncmp(ps->p, "null", 4) == 0) {
        v->type = HD_JSON_NULL;
        ps->p += 4;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(ps, v);
    fail(ps, "unexpected character");
    return false;
}

hd_json *hd__json_parse(const char *text, char *err, size_t err_cap)
{
    parser ps = {text, text, err, err_cap, false};
    hd_json *v = calloc(1, sizeof *v);
    if (v == NULL) {
        snprintf(err, err_cap, "JSON: out of memory");
        return NULL;
    }
    if (parse_value(&ps, v, 0)) {
        skip_space(&ps);
        if (*ps.p != '\0')
            fail(&ps, "trailing text");
    }
    if (ps.failed) {
        hd__json_free(v);
        return NULL;
    }
    return v;
}

/* The whole file f into a malloc'd NUL-terminated text, read in growing chunks up to
 * HD_JSON_MAX_BYTES and one byte more to tell a larger file, each chunk checked for a NUL byte
 * (no JSON holds one, so /dev/zero fails at its first chunk). NULL with err set on failure. */
static char *read_text(FILE *f, const char *path, char *err, size_t err_cap)
{
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    while (text != NULL) {
        size_t got = fread(text + n, 1, cap - n - 1, f);
        bool nul = memchr(text + n, '\0', got) != NULL;
        n += got;
        if (nul || ferror(f) || n > HD_JSON_MAX_BYTES) {
            if (nul)
                snprintf(err, err_cap, "cannot read %s: it holds a NUL byte", path);
            else if (ferror(f))
                snprintf(err, err_cap, "cannot read %s: %s", path, strerror(errno));
            else
                snprintf(err, err_cap, "%s is larger than %zu MiB: not a result file", path,
                         HD_JSON_MAX_BYTES >> 20);
            free(text);
            return NULL;
        }
        if (n < cap - 1) { /* the end of the file */
            text[n] = '\0';
            return text;
        }
        size_t grown = cap * 2 < HD_JSON_MAX_BYTES + 2 ? cap * 2 : HD_JSON_MAX_BYTES + 2;
        char *t = realloc(text, grown);
        if (t == NULL)
            free(text);
        text = t;
        cap = grown;
    }
    snprintf(err, err_cap, "cannot read %s: out of memory", path);
    return NULL;
}

hd_json *hd__json_load(const char *path, char *err, size_t err_cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_cap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = read_text(f, path, err, err_cap);
    fclose(f);
    if (text == NULL)
        return NULL;
    hd_json *v = hd__json_parse(text, err, err_cap);
    free(text);
    if (v == NULL) {
        size_t used = strlen(err);
        snprintf(err + used, err_cap - used, " in %s", path);
    }
    return v;
}

void hd__json_free(hd_json *v)
{
    if (v == NULL)
        return;
    value_free(v);
    free(v);
}

const hd_json *hd__json_get(const hd_json *v, const char *key)
{
    if (v == NULL || v->type != HD_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->items[i].key, key) == 0)
            return &v->items[i];
    return NULL;
}

const char *hd__json_str(const hd_json *v, const char *key, const char *fallback)
{
    const hd_json *m = hd__json_get(v, key);
    return m != NULL && m->type == HD_JSON_STRING ? m->string : fallback;
}

double hd__json_num(const hd_json *v, const char *key, double fallback)
{
    const hd_json *m = hd__json_get(v, key);
    return m != NULL && m->type == HD_JSON_NUMBER ? m->number : fallback;
}
