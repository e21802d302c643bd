#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/results_file.h"
#include "bench/schema.h"
#include "core/file.h"

/* jansson's message with every byte outside printable ASCII shown as '?': it quotes the text
 * near the error, which a hostile file fills with what it likes (terminal escapes). */
static void parse_error(const char *name, const json_error_t *e, char *err, size_t err_cap)
{
    if (json_error_code(e) == json_error_stack_overflow) {
        snprintf(err, err_cap, "%s: nested more than %d deep", name, HD_BENCH_MAX_DEPTH);
        return;
    }
    char said[sizeof e->text];
    size_t n = 0;
    for (; e->text[n] != '\0' && n + 1 < sizeof said; n++) {
        unsigned char b = (unsigned char)e->text[n];
        said[n] = b >= 0x20 && b < 0x7f ? (char)b : '?';
    }
    said[n] = '\0';
    snprintf(err, err_cap, "%s: not valid JSON: %s (line %d, column %d)", name, said, e->line,
             e->column);
}

json_t *hd__bench_results_parse(const char *text, size_t len, const char *name, char *err,
                                size_t err_cap)
{
    json_error_t e;
    /* Any value at the top, so that "[]" is refused by the schema, in its words, as the
     * Python reader refuses it. */
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
    if (doc == NULL) {
        parse_error(name, &e, err, err_cap);
        return NULL;
    }
    if (!hd__bench_depth_ok(doc)) {
        snprintf(err, err_cap, "%s: nested more than %d deep", name, HD_BENCH_MAX_DEPTH);
        json_decref(doc);
        return NULL;
    }
    char why[600];
    if (!hd__bench_schema_check(doc, why, sizeof why)) {
        snprintf(err, err_cap, "%s: %s", name, why);
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* The whole of f, at most HD_BENCH_RESULTS_MAX_BYTES; size is what fstat said (the file may
 * grow meanwhile). NULL with err set on failure. */
static char *read_all(FILE *f, size_t size, const char *path, size_t *len, char *err,
                      size_t err_cap)
{
    size_t limit = HD_BENCH_RESULTS_MAX_BYTES + 1, cap = size < limit ? size + 1 : limit, n = 0;
    char *text = malloc(cap);
    while (text != NULL) {
        n += fread(text + n, 1, cap - n, f);
        if (n < cap || cap == limit)
            break;
        size_t grown = cap < limit / 2 ? cap * 2 : limit;
        char *t = realloc(text, grown);
        if (t == NULL)
            free(text);
        text = t;
        cap = grown;
    }
    if (text == NULL)
        snprintf(err, err_cap, "cannot read %s: out of memory", path);
    else if (ferror(f))
        snprintf(err, err_cap, "cannot read %s: %s", path, strerror(errno));
    else if (n > HD_BENCH_RESULTS_MAX_BYTES)
        snprintf(err, err_cap, "%s is larger than %zu MiB: not a result file", path,
                 HD_BENCH_RESULTS_MAX_BYTES >> 20);
    else {
        *len = n;
        return text;
    }
    free(text);
    return NULL;
}

json_t *hd__bench_results_load(const char *path, char *err, size_t err_cap)
{
    FILE *f = hd__file_open_regular(path, NULL, 0);
    if (f == NULL) {
        if (errno == EINVAL) /* what hd__file_open_regular says of anything but a file */
            snprintf(err, err_cap, "%s is not a regular file", path);
        else
            snprintf(err, err_cap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    size_t len = 0;
    if (fstat(fileno(f), &st) != 0)
        snprintf(err, err_cap, "cannot read %s: %s", path, strerror(errno));
    else if ((unsigned long long)st.st_size > HD_BENCH_RESULTS_MAX_BYTES)
        snprintf(err, err_cap, "%s is larger than %zu MiB: not a result file", path,
                 HD_BENCH_RESULTS_MAX_BYTES >> 20);
    else
        text = read_all(f, (size_t)st.st_size, path, &len, err, err_cap);
    fclose(f);
    if (text == NULL)
        return NULL;
    json_t *doc = hd__bench_results_parse(text, len, path, err, err_cap);
    free(text);
    return doc;
}
