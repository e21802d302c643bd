/*
 * The safetensors header: JSON parsed by jansson (duplicate keys refused), then every entry
 * checked against the format and the size of the data buffer before the handle trusts it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "safetensors_internal.h"

#define METADATA_KEY "__metadata__"

/* Where a message about one tensor comes from. */
typedef struct where {
    const char *label, *name;
    char *msg;
    size_t size;
} where;

HD_ST_PRINTF(3, 4)
static hd_status bad(const where *w, hd_status s, const char *fmt, ...)
{
    if (w->msg == NULL || w->size == 0)
        return s;
    int n = snprintf(w->msg, w->size, "'%s': tensor '%s': ", w->label, w->name);
    if (n >= 0 && (size_t)n < w->size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->msg + n, w->size - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* A JSON integer in [0, max], else -1 (the format's sizes are unsigned). */
static int64_t count_value(const json_t *v, uint64_t max)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return -1;
    return (int64_t)json_integer_value(v);
}

static hd_status parse_dtype(const where *w, const json_t *v, hd_st_tensor *t)
{
    if (v == NULL)
        return bad(w, HD_ERR_INVALID_ARGUMENT, "no \"dtype\"");
    if (!json_is_string(v))
        return bad(w, HD_ERR_INVALID_ARGUMENT, "\"dtype\" is not a string");
    t->dtype = hd__st_dtype_parse(json_string_value(v));
    if (t->dtype == HD_ST_DTYPE_COUNT)
        return bad(w, HD_ERR_INVALID_ARGUMENT, "unknown dtype \"%.32s\"", json_string_value(v));
    return HD_OK;
}

static hd_status parse_shape(const where *w, const json_t *v, hd_st_tensor *t)
{
    if (v == NULL)
        return bad(w, HD_ERR_INVALID_ARGUMENT, "no \"shape\"");
    if (!json_is_array(v))
        return bad(w, HD_ERR_INVALID_ARGUMENT, "\"shape\" is not an array");
    size_t n = json_array_size(v);
    if (n > HD_ST_MAX_DIMS)
        return bad(w, HD_ERR_UNSUPPORTED, "%zu dimensions, more than the %d read here", n,
                   HD_ST_MAX_DIMS);
    t->ndim = (int)n;
    t->elements = 1;
    for (size_t d = 0; d < n; d++) {
        const json_t *e = json_array_get(v, d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return bad(w, HD_ERR_INVALID_ARGUMENT,
                       "\"shape\" entry %zu is not a non-negative integer", d);
        int64_t dim = count_value(e, SIZE_MAX);
        /* checked at every step, as the reference does: a later 0 does not excuse it */
        if (dim < 0 || (dim > 0 && t->elements > SIZE_MAX / (uint64_t)dim))
            return bad(w, HD_ERR_SIZE_OVERFLOW, "the element count of its shape overflows");
        t->shape[d] = (size_t)dim;
        t->elements *= (size_t)dim;
    }
    if (t->elements > UINT64_MAX / hd_st_dtype_size(t->dtype) ||
        t->elements > SIZE_MAX / hd_st_dtype_size(t->dtype))
        return bad(w, HD_ERR_SIZE_OVERFLOW, "the byte size of its shape overflows");
    return HD_OK;
}

static hd_status parse_offsets(const where *w, const json_t *v, uint64_t data_size, hd_st_tensor *t)
{
    if (v == NULL)
        return bad(w, HD_ERR_INVALID_ARGUMENT, "no \"data_offsets\"");
    int64_t b = json_array_size(v) == 2 ? count_value(json_array_get(v, 0), UINT64_MAX) : -1;
    int64_t e = json_array_size(v) == 2 ? count_value(json_array_get(v, 1), UINT64_MAX) : -1;
    if (!json_is_array(v) || b < 0 || e < 0)
        return bad(w, HD_ERR_INVALID_ARGUMENT,
                   "\"data_offsets\" is not an array of two non-negative integers");
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (t->begin > t->end)
        return bad(w, HD_ERR_INVALID_ARGUMENT, "data_offsets [%llu, %llu] begin after they end",
                   (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        return bad(w, HD_ERR_INVALID_ARGUMENT,
                   "data_offsets [%llu, %llu] end past the data (%llu bytes)",
                   (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)data_size);
    uint64_t want = (uint64_t)t->elements * hd_st_dtype_size(t->dtype);
    if (t->end - t->begin != want)
        return bad(w, HD_ERR_INVALID_ARGUMENT,
                   "its shape of %zu %s elements needs %llu bytes, data_offsets [%llu, %llu] "
                   "hold %llu",
                   t->elements, hd_st_dtype_name(t->dtype), (unsigned long long)want,
                   (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)(t->end - t->begin));
    return HD_OK;
}

static hd_status parse_tensor(const where *w, json_t *v, uint64_t data_size, hd_st_tensor *t)
{
    if (!json_is_object(v))
        return bad(w, HD_ERR_INVALID_ARGUMENT, "not a JSON object");
    const char *key;
    json_t *value;
    json_object_foreach(v, key, value)
    {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0)
            return bad(w, HD_ERR_INVALID_ARGUMENT, "unknown key \"%.64s\"", key);
    }
    hd_status s = parse_dtype(w, json_object_get(v, "dtype"), t);
    if (s == HD_OK)
        s = parse_shape(w, json_object_get(v, "shape"), t);
    if (s == HD_OK)
        s = parse_offsets(w, json_object_get(v, "data_offsets"), data_size, t);
    return s;
}

/* How many tensors and metadata entries the header holds, and the bytes of their strings
 * (NUL included); checks that "__metadata__" maps strings to strings. */
static hd_status measure(const char *label, json_t *root, size_t *tensors, size_t *entries,
                         size_t *bytes, char *msg, size_t size)
{
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        *bytes += strlen(key) + 1;
        if (strcmp(key, METADATA_KEY) != 0) {
            (*tensors)++;
            continue;
        }
        if (!json_is_object(value))
            return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                               "'%s': \"" METADATA_KEY "\" is not a JSON object", label);
        const char *k;
        json_t *v;
        json_object_foreach(value, k, v)
        {
            if (!json_is_string(v))
                return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                                   "'%s': \"" METADATA_KEY "\" entry '%.64s' is not a string",
                                   label, k);
            *bytes += strlen(k) + 1 + strlen(json_string_value(v)) + 1;
            (*entries)++;
        }
    }
    return HD_OK;
}

static char *keep(char **strings, const char *s)
{
    char *p = *strings;
    size_t n = strlen(s) + 1;
    memcpy(p, s, n);
    *strings += n;
    return p;
}

static void fill_metadata(hd_st_file *f, json_t *meta, char **strings)
{
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
    {
        hd_st_meta *m = &f->meta[f->meta_count++];
        m->key = keep(strings, k);
        m->value = keep(strings, json_string_value(v));
    }
}

static hd_status fill(hd_st_file *f, json_t *root, char *msg, size_t size)
{
    char *strings = f->strings;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        if (strcmp(key, METADATA_KEY) == 0) {
            fill_metadata(f, value, &strings);
            continue;
        }
        hd_st_tensor *t = &f->tensors[f->count++];
        memset(t, 0, sizeof *t);
        t->name = keep(&strings, key);
        where w = {f->label, t->name, msg, size};
        hd_status s = parse_tensor(&w, value, f->data_size, t);
        if (s != HD_OK)
            return s;
    }
    return HD_OK;
}

static int by_offset(const void *pa, const void *pb)
{
    const hd_st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name); /* empty tensors at one offset: a fixed order */
}

static int by_name(const void *pa, const void *pb)
{
    const hd_st_tensor *const *a = pa, *const *b = pb;
    return strcmp((*a)->name, (*b)->name);
}

/* The tensors, by offset, must cover the data exactly: no byte twice, none left out. */
static hd_status check_coverage(const hd_st_file *f, char *msg, size_t size)
{
    uint64_t at = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < f->count; i++) {
        const hd_st_tensor *t = &f->tensors[i];
        if (t->begin < at)
            return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                               "'%s': tensors '%s' and '%s' overlap (bytes %llu to %llu)", f->label,
                               prev, t->name, (unsigned long long)t->begin, (unsigned long long)at);
        if (t->begin > at)
            return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                               "'%s': bytes %llu to %llu of the data belong to no tensor (a "
                               "gap before '%s')",
                               f->label, (unsigned long long)at, (unsigned long long)t->begin,
                               t->name);
        if (t->end > at) {
            at = t->end;
            prev = t->name;
        }
    }
    if (at != f->data_size)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': the data's last %llu bytes (from %llu) belong to no tensor",
                           f->label, (unsigned long long)(f->data_size - at),
                           (unsigned long long)at);
    return HD_OK;
}

static hd_status allocate(hd_st_file *f, size_t tensors, size_t entries, size_t bytes, char *msg,
                          size_t size)
{
    f->tensors = malloc((tensors > 0 ? tensors : 1) * sizeof *f->tensors);
    f->by_name = malloc((tensors > 0 ? tensors : 1) * sizeof *f->by_name);
    f->meta = malloc((entries > 0 ? entries : 1) * sizeof *f->meta);
    f->strings = malloc(bytes > 0 ? bytes : 1);
    if (f->tensors == NULL || f->by_name == NULL || f->meta == NULL || f->strings == NULL)
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "'%s': no memory for the header",
                           f->label);
    return HD_OK;
}

static void forget(hd_st_file *f)
{
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    f->tensors = NULL;
    f->by_name = NULL;
    f->meta = NULL;
    f->strings = NULL;
    f->count = f->meta_count = 0;
}

static hd_status parse_object(hd_st_file *f, json_t *root, char *msg, size_t size)
{
    if (!json_is_object(root))
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': the header is not a JSON object", f->label);
    size_t tensors = 0, entries = 0, bytes = 0;
    hd_status s = measure(f->label, root, &tensors, &entries, &bytes, msg, size);
    if (s == HD_OK)
        s = allocate(f, tensors, entries, bytes, msg, size);
    if (s == HD_OK)
        s = fill(f, root, msg, size);
    if (s != HD_OK)
        return s;
    qsort(f->tensors, f->count, sizeof *f->tensors, by_offset);
    for (size_t i = 0; i < f->count; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->count, sizeof *f->by_name, by_name);
    return check_coverage(f, msg, size);
}

hd_status hd__st_parse_header(hd_st_file *f, const char *json, size_t len, char *msg, size_t size)
{
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL) {
        enum json_error_code code = json_error_code(&err);
        const char *what = code == json_error_invalid_utf8    ? "is not valid UTF-8"
                           : code == json_error_duplicate_key ? "repeats a key"
                                                              : "is not valid JSON";
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': the header %s: %s (at byte %d of %zu)", f->label, what, err.text,
                           err.position, len);
    }
    hd_status s = parse_object(f, root, msg, size);
    json_decref(root);
    if (s != HD_OK)
        forget(f);
    return s;
}
