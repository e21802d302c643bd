/* A small JSON reader for --compare: whole documents into a tree of values. Strict enough for
 * files that dispatch-bench and the peer scripts write; anything malformed is refused, with the
 * byte offset, rather than guessed at. */
#ifndef HD_BENCH_JSON_H
#define HD_BENCH_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum hd_json_type {
    HD_JSON_NULL,
    HD_JSON_BOOL,
    HD_JSON_NUMBER,
    HD_JSON_STRING,
    HD_JSON_ARRAY,
    HD_JSON_OBJECT,
} hd_json_type;

typedef struct hd_json hd_json;
struct hd_json {
    hd_json_type type;
    bool boolean;
    double number;
    char *string;   /* STRING */
    char *key;      /* member name inside an OBJECT */
    hd_json *items; /* ARRAY, OBJECT: count children */
    size_t count;
};

/* The largest file hd__json_load() reads: a result file of every suite is far smaller. */
#define HD_JSON_MAX_BYTES ((size_t)256 << 20)

/* Parses text (NUL-terminated) as strict JSON: numbers as JSON spells them and finite as a
 * double, no escaped NUL (backslash u0000) in a string. Returns NULL and a message in err on
 * failure. */
hd_json *hd__json_parse(const char *text, char *err, size_t err_cap);
/* Reads and parses a file of at most HD_JSON_MAX_BYTES without a NUL byte. Returns NULL and a
 * message naming the file in err on failure (strerror's reason where the system gave one). */
hd_json *hd__json_load(const char *path, char *err, size_t err_cap);
void hd__json_free(hd_json *v);

/* Member of an object by name, or NULL (also when v is not an object). */
const hd_json *hd__json_get(const hd_json *v, const char *key);
/* The string of a member, or fallback. */
const char *hd__json_str(const hd_json *v, const char *key, const char *fallback);
/* The number of a member, or fallback (also for null). */
double hd__json_num(const hd_json *v, const char *key, double fallback);

#endif
