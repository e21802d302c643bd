/* Schema hd-bench/1 as tables of fields, checked in the tables' order: bench/check_results.py
 * holds the same tables, so that both readers name the same first failure of a file. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bench/schema.h"

typedef enum kind {
    K_STRING,    /* a string without control characters */
    K_NAME,      /* a non-empty K_STRING */
    K_DATE,      /* YYYY-MM-DDTHH:MM:SSZ */
    K_ONE_OF,    /* one of the field's values */
    K_INT,       /* an integer token, within the field's range */
    K_NUMBER,    /* any number, within the field's range */
    K_BOOL,      /* true or false */
    K_OBJECT,    /* the field's members, no others */
    K_DIMS,      /* four integers, 0 to 2^24 */
    K_MODE_LIST, /* settings.modes: distinct mode names, at least one */
    K_MODES,     /* a result's modes: mode name -> the figures of that mode */
    K_RESULTS,   /* the array of results */
} kind;

typedef struct range {
    double lo, hi;
    bool lo_open; /* lo itself is out */
    const char *text;
} range;

typedef struct field {
    const char *name;
    kind kind;
    bool optional, nullable;
    const range *range;
    const char *const *values;   /* K_ONE_OF, NULL-terminated */
    const struct field *members; /* K_OBJECT, ended by a NULL name */
} field;

static const range non_negative = {0.0, INFINITY, false, "at least 0"};
static const range positive = {0.0, INFINITY, true, "greater than 0"};
static const range any_number = {-INFINITY, INFINITY, false, "any"};
static const range seconds = {1e-12, 1e6, false, "1e-12 to 1e6"};
static const range count32 = {0.0, 4294967295.0, false, "0 to 4294967295"};
static const range count32_from_1 = {1.0, 4294967295.0, false, "1 to 4294967295"};
static const range cores = {1.0, 16777216.0, false, "1 to 16777216"};
static const range dim = {0.0, 16777216.0, false, "0 to 16777216"};
static const range seed = {0.0, 9223372036854775807.0, false, "0 to 9223372036854775807"};
static const range layout = {0.0, 7.0, false, "0 to 7"};
static const range int32 = {-2147483648.0, 2147483647.0, false, "-2147483648 to 2147483647"};

static const char *const schema_names[] = {"hd-bench/1", NULL};
static const char *const kinds[] = {"gpu", "cpu", "none", NULL};
static const char *const statuses[] = {"ok", "n/a", "skipped", "wrong", "error", NULL};
static const char *const modes[] = {"device", "sync", "chain", "host", NULL};

#define STRING(n)                                                                                  \
    {                                                                                              \
        .name = n, .kind = K_STRING                                                                \
    }
#define NAME(n)                                                                                    \
    {                                                                                              \
        .name = n, .kind = K_NAME                                                                  \
    }
#define INT(n, r)                                                                                  \
    {                                                                                              \
        .name = n, .kind = K_INT, .range = &(r)                                                    \
    }
#define NUMBER(n, r)                                                                               \
    {                                                                                              \
        .name = n, .kind = K_NUMBER, .range = &(r)                                                 \
    }
#define NUMBER_OR_NULL(n, r)                                                                       \
    {                                                                                              \
        .name = n, .kind = K_NUMBER, .nullable = true, .range = &(r)                               \
    }
#define BOOL(n)                                                                                    \
    {                                                                                              \
        .name = n, .kind = K_BOOL                                                                  \
    }

static const field machine_fields[] = {
    STRING("hostname"),
    STRING("os"),
    STRING("cpu"),
    {.name = "cores", .kind = K_INT, .nullable = true, .range = &cores},
    {0},
};
static const field device_fields[] = {
    STRING("name"),
    STRING("driver"),
    STRING("platform"),
    {.name = "kind", .kind = K_ONE_OF, .values = kinds},
    {0},
};
static const field roofline_fields[] = {
    NUMBER_OR_NULL("bandwidth_gbs", positive),
    STRING("bandwidth_source"),
    NUMBER_OR_NULL("peak_gflops", positive),
    STRING("peak_source"),
    NUMBER_OR_NULL("host_bandwidth_gbs", non_negative),
    NUMBER_OR_NULL("device_bandwidth_gbs", non_negative),
    {0},
};
static const field settings_fields[] = {
    {.name = "modes", .kind = K_MODE_LIST},
    INT("warmup", count32),
    INT("min_runs", count32),
    INT("max_runs", count32),
    {.name = "rounds", .kind = K_INT, .optional = true, .range = &count32_from_1},
    {.name = "seed", .kind = K_INT, .nullable = true, .range = &seed},
    NUMBER("budget_ms", non_negative),
    {0},
};
static const field mode_fields[] = {
    NUMBER("median_s", seconds),
    NUMBER("min_s", seconds),
    NUMBER("max_s", seconds),
    INT("runs", count32_from_1),
    INT("chain_length", count32_from_1),
    BOOL("host_timed"),
    NUMBER_OR_NULL("gflops", non_negative),
    NUMBER_OR_NULL("gbs", non_negative),
    NUMBER_OR_NULL("roofline_pct", non_negative),
    {.name = "ran_on", .kind = K_NAME, .optional = true},
    {.name = "regret_pct",
     .kind = K_NUMBER,
     .optional = true,
     .nullable = true,
     .range = &any_number},
    {.name = "best_backend", .kind = K_NAME, .optional = true},
    {0},
};
/* A step op's or AdamW's scalars (autotune/case_params.h), each where the case has it. */
static const field params_fields[] = {
    {.name = "alpha", .kind = K_NUMBER, .optional = true, .range = &any_number},
    {.name = "eps", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {.name = "theta", .kind = K_NUMBER, .optional = true, .range = &positive},
    {.name = "position_offset", .kind = K_INT, .optional = true, .range = &dim},
    {.name = "inverse", .kind = K_BOOL, .optional = true},
    {.name = "causal", .kind = K_BOOL, .optional = true},
    {.name = "ignore_index", .kind = K_INT, .optional = true, .range = &int32},
    {.name = "ignored", .kind = K_INT, .optional = true, .range = &dim},
    {.name = "rank", .kind = K_INT, .optional = true, .range = &dim},
    {.name = "lr", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {.name = "beta1", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {.name = "beta2", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {.name = "weight_decay", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {.name = "max_grad_norm", .kind = K_NUMBER, .optional = true, .range = &non_negative},
    {0},
};
static const field result_fields[] = {
    NAME("suite"),
    NAME("case"),
    NAME("op"),
    {.name = "dims", .kind = K_DIMS},
    BOOL("trans_a"),
    BOOL("trans_b"),
    {.name = "lora_layout", .kind = K_INT, .optional = true, .range = &layout},
    {.name = "params", .kind = K_OBJECT, .optional = true, .members = params_fields},
    NUMBER("flops", non_negative),
    NUMBER("bytes", non_negative),
    NAME("backend"),
    STRING("ran_on"),
    {.name = "status", .kind = K_ONE_OF, .values = statuses},
    STRING("note"),
    NUMBER_OR_NULL("check", non_negative),
    {.name = "modes", .kind = K_MODES},
    {0},
};
static const field document_fields[] = {
    {.name = "schema", .kind = K_ONE_OF, .values = schema_names},
    NAME("tool"),
    STRING("version"),
    {.name = "date", .kind = K_DATE},
    {.name = "machine", .kind = K_OBJECT, .members = machine_fields},
    {.name = "device", .kind = K_OBJECT, .members = device_fields},
    {.name = "roofline", .kind = K_OBJECT, .nullable = true, .members = roofline_fields},
    {.name = "settings", .kind = K_OBJECT, .members = settings_fields},
    {.name = "results", .kind = K_RESULTS},
    {0},
};
static const field document = {.name = "(document)", .kind = K_OBJECT, .members = document_fields};

/* Where the check is: the path of the value in hand, and the message of its first failure. */
typedef struct checker {
    char path[512];
    size_t len;
    char *err;
    size_t err_cap;
} checker;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static bool
fail(checker *c, const char *fmt, ...)
{
    int used = snprintf(c->err, c->err_cap, "%s: ", c->len ? c->path : "(document)");
    if (used >= 0 && (size_t)used < c->err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + used, c->err_cap - (size_t)used, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* Appends ".name" (a member name shown as printable ASCII, other bytes as '?', at most 64 of
 * them) or "[index]" to the path; returns the length to go back to. */
static size_t push_member(checker *c, const char *name)
{
    size_t back = c->len, cap = sizeof c->path;
    if (c->len > 0 && c->len + 1 < cap)
        c->path[c->len++] = '.';
    for (size_t i = 0; name[i] != '\0' && i < 64 && c->len + 1 < cap; i++) {
        unsigned char b = (unsigned char)name[i];
        c->path[c->len++] = b >= 0x20 && b < 0x7f ? (char)b : '?';
    }
    c->path[c->len] = '\0';
    return back;
}

static size_t push_index(checker *c, size_t i)
{
    size_t back = c->len;
    int n = snprintf(c->path + c->len, sizeof c->path - c->len, "[%zu]", i);
    if (n > 0)
        c->len = c->len + (size_t)n < sizeof c->path ? c->len + (size_t)n : sizeof c->path - 1;
    return back;
}

static void pop(checker *c, size_t back)
{
    c->len = back;
    c->path[back] = '\0';
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        break;
    }
    return "null";
}

static const char *expected_name(kind k)
{
    switch (k) {
    case K_STRING:
    case K_NAME:
    case K_DATE:
    case K_ONE_OF:
        return "a string";
    case K_INT:
        return "an integer";
    case K_NUMBER:
        return "a number";
    case K_BOOL:
        return "a boolean";
    case K_OBJECT:
    case K_MODES:
        return "an object";
    case K_DIMS:
    case K_MODE_LIST:
    case K_RESULTS:
        break;
    }
    return "an array";
}

static bool has_type(kind k, const json_t *v)
{
    switch (k) {
    case K_STRING:
    case K_NAME:
    case K_DATE:
    case K_ONE_OF:
        return json_is_string(v);
    case K_INT:
        return json_is_integer(v);
    case K_NUMBER:
        return json_is_number(v);
    case K_BOOL:
        return json_is_boolean(v);
    case K_OBJECT:
    case K_MODES:
        return json_is_object(v);
    case K_DIMS:
    case K_MODE_LIST:
    case K_RESULTS:
        break;
    }
    return json_is_array(v);
}

/* C0 and C1 control characters and DEL, in UTF-8 (jansson has checked the encoding). */
static bool has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x20 || b == 0x7f || (b == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] < 0xa0))
            return true;
    }
    return false;
}

static bool is_date(const char *s, size_t n)
{
    static const char form[] = "dddd-dd-ddTdd:dd:ddZ";
    if (n != sizeof form - 1)
        return false;
    for (size_t i = 0; i < n; i++)
        if (form[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != form[i])
            return false;
    return true;
}

static bool check_one_of(checker *c, const char *const *values, const char *s)
{
    size_t count = 0;
    for (; values[count] != NULL; count++)
        if (strcmp(values[count], s) == 0)
            return true;
    char list[128] = "";
    for (size_t i = 0, used = 0; i < count && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", values[i]);
    return fail(c, "expected %s%s", count > 1 ? "one of " : "", list);
}

static bool check_string(checker *c, const field *f, const json_t *v)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (has_control(s, n))
        return fail(c, "holds a control character");
    if (f->kind == K_NAME && n == 0)
        return fail(c, "must not be empty");
    if (f->kind == K_DATE && !is_date(s, n))
        return fail(c, "not a date of the form YYYY-MM-DDTHH:MM:SSZ");
    if (f->kind == K_ONE_OF)
        return check_one_of(c, f->values, s);
    return true;
}

static bool check_range(checker *c, const range *r, double x)
{
    if (x < r->lo || (r->lo_open && x == r->lo) || x > r->hi)
        return fail(c, "out of range (%s)", r->text);
    return true;
}

static bool check_value(checker *c, const field *f, const json_t *v);

static bool check_members(checker *c, const field *members, const json_t *obj)
{
    for (const field *m = members; m->name != NULL; m++) {
        const json_t *v = json_object_get(obj, m->name);
        size_t back = push_member(c, m->name);
        if (v == NULL && !m->optional)
            return fail(c, "missing");
        if (v != NULL && !check_value(c, m, v))
            return false;
        pop(c, back);
    }
    for (void *it = json_object_iter((json_t *)obj); it != NULL;
         it = json_object_iter_next((json_t *)obj, it)) {
        const char *key = json_object_iter_key(it);
        const field *m = members;
        while (m->name != NULL && strcmp(m->name, key) != 0)
            m++;
        if (m->name == NULL) {
            push_member(c, key);
            return fail(c, "unknown field");
        }
    }
    return true;
}

static bool check_dims(checker *c, const json_t *v)
{
    if (json_array_size(v) != 4)
        return fail(c, "expected 4 values, got %zu", json_array_size(v));
    static const field d = {.name = "dims", .kind = K_INT, .range = &dim};
    for (size_t i = 0; i < 4; i++) {
        size_t back = push_index(c, i);
        if (!check_value(c, &d, json_array_get(v, i)))
            return false;
        pop(c, back);
    }
    return true;
}

static bool check_mode_list(checker *c, const json_t *v)
{
    if (json_array_size(v) == 0)
        return fail(c, "must not be empty");
    static const field m = {.name = "modes", .kind = K_ONE_OF, .values = modes};
    for (size_t i = 0; i < json_array_size(v); i++) {
        size_t back = push_index(c, i);
        const json_t *e = json_array_get(v, i);
        if (!check_value(c, &m, e))
            return false;
        for (size_t j = 0; j < i; j++)
            if (json_equal((json_t *)json_array_get(v, j), (json_t *)e))
                return fail(c, "repeated");
        pop(c, back);
    }
    return true;
}

static double number(const json_t *obj, const char *key)
{
    return json_number_value(json_object_get(obj, key));
}

static bool check_modes(checker *c, const json_t *v)
{
    static const field figures = {.name = "mode", .kind = K_OBJECT, .members = mode_fields};
    for (void *it = json_object_iter((json_t *)v); it != NULL;
         it = json_object_iter_next((json_t *)v, it)) {
        const char *key = json_object_iter_key(it);
        const json_t *m = json_object_iter_value(it);
        size_t back = push_member(c, key);
        bool known = false;
        for (size_t i = 0; modes[i] != NULL; i++)
            known = known || strcmp(modes[i], key) == 0;
        if (!known)
            return fail(c, "unknown mode");
        if (!check_value(c, &figures, m))
            return false;
        double lo = number(m, "min_s"), mid = number(m, "median_s"), hi = number(m, "max_s");
        if (!(lo <= mid && mid <= hi))
            return fail(c, "not min_s <= median_s <= max_s");
        pop(c, back);
    }
    return true;
}

static const char *text(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* The rules between a result's fields, once each field has passed. */
static bool check_result_rules(checker *c, const json_t *r)
{
    const char *status = text(r, "status"), *backend = text(r, "backend");
    bool ok = strcmp(status, "ok") == 0;
    bool timed = json_object_size(json_object_get(r, "modes")) > 0;
    size_t back = push_member(c, "modes");
    if (ok && !timed)
        return fail(c, "status ok without timings");
    if (!ok && timed)
        return fail(c, "timings with status %s", status);
    pop(c, back);
    back = push_member(c, "note");
    if (!ok && text(r, "note")[0] == '\0')
        return fail(c, "status %s without a note saying why", status);
    pop(c, back);
    back = push_member(c, "ran_on");
    if (ok && strcmp(backend, "auto") != 0 && strcmp(text(r, "ran_on"), backend) != 0)
        return fail(c, "not the forced backend");
    pop(c, back);
    return true;
}

static bool check_results(checker *c, const json_t *v)
{
    static const field result = {.name = "result", .kind = K_OBJECT, .members = result_fields};
    for (size_t i = 0; i < json_array_size(v); i++) {
        size_t back = push_index(c, i);
        const json_t *r = json_array_get(v, i);
        if (!check_value(c, &result, r) || !check_result_rules(c, r))
            return false;
        pop(c, back);
    }
    return true;
}

static bool check_value(checker *c, const field *f, const json_t *v)
{
    if (json_is_null(v) && f->nullable)
        return true;
    if (!has_type(f->kind, v))
        return fail(c, "expected %s%s, got %s", expected_name(f->kind),
                    f->nullable ? " or null" : "", type_name(v));
    switch (f->kind) {
    case K_STRING:
    case K_NAME:
    case K_DATE:
    case K_ONE_OF:
        return check_string(c, f, v);
    case K_INT:
        return check_range(c, f->range, (double)json_integer_value(v));
    case K_NUMBER:
        return check_range(c, f->range, json_number_value(v));
    case K_BOOL:
        return true;
    case K_OBJECT:
        return check_members(c, f->members, v);
    case K_DIMS:
        return check_dims(c, v);
    case K_MODE_LIST:
        return check_mode_list(c, v);
    case K_MODES:
        return check_modes(c, v);
    case K_RESULTS:
        return check_results(c, v);
    }
    return true;
}

bool hd__bench_schema_check(const json_t *doc, char *err, size_t err_cap)
{
    checker c = {.err = err, .err_cap = err_cap};
    return check_value(&c, &document, doc);
}

static bool depth_within(const json_t *v, int depth)
{
    if (depth > HD_BENCH_MAX_DEPTH)
        return false;
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!depth_within(json_array_get(v, i), depth + 1))
                return false;
    } else if (json_is_object(v)) {
        for (void *it = json_object_iter((json_t *)v); it != NULL;
             it = json_object_iter_next((json_t *)v, it))
            if (!depth_within(json_object_iter_value(it), depth + 1))
                return false;
    }
    return true;
}

bool hd__bench_depth_ok(const json_t *doc)
{
    return depth_within(doc, 1);
}
