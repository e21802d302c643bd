/* The tuning cache file: parser, writer and the locked, atomic save. The format is described
 * in dispatch/tune_file.h. The parser treats its input as hostile: every length is bounded, every
 * number range-checked, and nothing it rejects is kept. */
#define _DEFAULT_SOURCE /* flock() */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "dispatch/context.h"
#include "core/error.h"
#include "core/file.h"
#include "core/op.h"
#include "dispatch/tools.h"

#define MAX_TOKENS 16

void hd__tune_file_init(hd_tune_file *f)
{
    memset(f, 0, sizeof *f);
}

void hd__tune_file_free(hd_tune_file *f)
{
    if (f == NULL)
        return;
    free(f->records);
    hd__tune_file_init(f);
}

static locale_t c_numeric;
static pthread_once_t c_numeric_once = PTHREAD_ONCE_INIT;

static void make_c_numeric(void)
{
    c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

/* Should newlocale() fail, c_numeric stays 0, and uselocale(0) changes nothing: the numbers
 * then follow the program's locale, as they would without this. */
locale_t hd__tune_numbers_begin(void)
{
    pthread_once(&c_numeric_once, make_c_numeric);
    return uselocale(c_numeric);
}

void hd__tune_numbers_end(locale_t previous)
{
    uselocale(previous);
}

/* Bytes a string of the format cannot hold become '?', as the writer writes them. */
static void spell_as_written(char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 0x20 && *s < 0x7f) || *s == '\t'))
            *s = '?';
}

void hd__tune_key_normalize(hd_tune_key *k)
{
    char *const fields[] = {k->library, k->platform, k->device, k->driver, k->clblast};
    const char *const empty[] = {"unknown", "none", "none", "none", "none"};
    for (int i = 0; i < 5; i++) {
        if (fields[i][0] == '\0')
            strcpy(fields[i], empty[i]);
        spell_as_written(fields[i]);
    }
}

bool hd__tune_has_transposes(hd_op op)
{
    return hd__op(op)->transposes;
}

int hd__tune_dim_count(hd_op op)
{
    return hd__op(op)->dims;
}

bool hd__tune_same_key(const hd_tune_record *a, const hd_tune_record *b)
{
    return a->op == b->op && a->precision == b->precision &&
           hd__op_same_shape(a->op, &a->shape, &b->shape);
}

hd_precision hd__tune_precision_of(hd_op op, hd_precision p)
{
    return hd__op(op)->compute_bound ? p : HD_PRECISION_FP32;
}

const hd_tune_record *hd__tune_find(const hd_tune_file *f, hd_op op, const hd_shape *shape,
                                    hd_precision precision)
{
    hd_tune_record probe = {
        .op = op, .shape = *shape, .precision = hd__tune_precision_of(op, precision)};
    for (size_t i = 0; i < f->count; i++)
        if (hd__tune_same_key(&f->records[i], &probe))
            return &f->records[i];
    return NULL;
}

static bool backend_named(hd_backend b)
{
    return b > HD_BACKEND_AUTO && b < HD_BACKEND_COUNT;
}

/* Whether r, its time and margin clamped, is a line the parser takes back. */
static bool record_writable(const hd_tune_record *r)
{
    if ((unsigned)r->op >= HD_OP_COUNT || (unsigned)r->precision >= HD_PRECISION_COUNT ||
        r->precision != hd__tune_precision_of(r->op, r->precision))
        return false;
    for (int d = 0; d < hd__tune_dim_count(r->op); d++)
        if (r->shape.dim[d] > HD_TUNE_DIM_MAX ||
            (r->shape.dim[d] == 0 && !hd__op(r->op)->zero_dim_ok[d]))
            return false;
    if (r->shape.lora_layout != 0 &&
        (!hd__op(r->op)->lora_layout || r->shape.lora_layout > HD_LORA_LAYOUT_PYTORCH))
        return false;
    if (!backend_named(r->backend) || memchr(r->variant, '\0', sizeof r->variant) == NULL)
        return false;
    if (!(r->median_us >= 0.0)) /* NaN too; 0 (a call that did nothing) is clamped up */
        return false;
    return r->runner_up == HD_BACKEND_AUTO ||
           (backend_named(r->runner_up) && r->runner_up != r->backend && !isnan(r->margin_pct));
}

hd_status hd__tune_put(hd_tune_file *f, const hd_tune_record *r)
{
    if (!record_writable(r))
        return HD_ERR_INVALID_ARGUMENT;
    hd_tune_record c = *r;
    c.median_us = fmin(fmax(c.median_us, HD_TUNE_TIME_MIN_US), HD_TUNE_TIME_MAX_US);
    c.margin_pct = c.runner_up == HD_BACKEND_AUTO
                       ? 0.0
                       : fmin(fmax(c.margin_pct, HD_TUNE_MARGIN_MIN_PCT), HD_TUNE_MARGIN_MAX_PCT);
    r = &c;
    for (size_t i = 0; i < f->count; i++)
        if (hd__tune_same_key(&f->records[i], r)) {
            f->records[i] = *r;
            return HD_OK;
        }
    if (f->count >= HD_TUNE_RECORD_MAX)
        return HD_ERR_CACHE_INVALID;
    if (f->count == f->capacity) {
        size_t cap = f->capacity ? f->capacity * 2 : 64;
        hd_tune_record *p = realloc(f->records, cap * sizeof *p);
        if (p == NULL)
            return HD_ERR_OUT_OF_MEMORY;
        f->records = p;
        f->capacity = cap;
    }
    f->records[f->count++] = *r;
    return HD_OK;
}

hd_status hd__tune_put_param(hd_tune_file *f, const hd_tune_param *p)
{
    /* the name is written bare: one plain word */
    size_t len = strnlen(p->name, sizeof p->name);
    if (!backend_named(p->backend) || len == 0 || len == sizeof p->name ||
        strnlen(p->value, sizeof p->value) == sizeof p->value)
        return HD_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < len; i++)
        if (p->name[i] <= ' ' || p->name[i] >= 0x7f || p->name[i] == '"' || p->name[i] == '\\')
            return HD_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < f->param_count; i++)
        if (f->params[i].backend == p->backend && strcmp(f->params[i].name, p->name) == 0) {
            f->params[i] = *p;
            return HD_OK;
        }
    if (f->param_count >= HD_TUNE_PARAM_MAX)
        return HD_ERR_CACHE_INVALID;
    f->params[f->param_count++] = *p;
    return HD_OK;
}

/* ---- tokens ---- */

typedef struct token {
    const char *text; /* bare token: points into the line; quoted: into the unescaped copy */
    size_t len;
    bool quoted;
} token;

/* Splits line (NUL-terminated, printable ASCII checked by the caller) into tokens; quoted
 * strings are unescaped into store. Returns the count, or -1 on a malformed string or more
 * than MAX_TOKENS tokens. */
static int tokenize(const char *line, token *tok, char *store)
{
    int n = 0;
    const char *p = line;
    char *out = store;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            return n;
        if (n == MAX_TOKENS)
            return -1;
        if (*p == '"') {
            tok[n] = (token){.text = out, .quoted = true};
            for (p++; *p != '"'; p++) {
                if (*p == '\0')
                    return -1; /* unterminated */
                if (*p == '\\') {
                    p++;
                    if (*p != '"' && *p != '\\')
                        return -1;
                }
                *out++ = *p;
            }
            p++;
            tok[n].len = (size_t)(out - tok[n].text);
            *out++ = '\0';
            if (*p != ' ' && *p != '\t' && *p != '\0')
                return -1; /* "abc"def */
        } else {
            tok[n] = (token){.text = p};
            while (*p != '\0' && *p != ' ' && *p != '\t') {
                if (*p == '"' || *p == '\\')
                    return -1;
                p++;
            }
            tok[n].len = (size_t)(p - tok[n].text);
        }
        n++;
    }
}

size_t hd__tune_escape(char *dst, size_t size, const char *src, size_t len)
{
    size_t n = 0, i = 0;
    for (; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        char piece[8];
        int w = (c >= 0x20 && c < 0x7f) || c == '\t' ? snprintf(piece, sizeof piece, "%c", c)
                                                     : snprintf(piece, sizeof piece, "\\x%02x", c);
        if (n + (size_t)w >= size)
            break;
        memcpy(dst + n, piece, (size_t)w);
        n += (size_t)w;
    }
    if (size > 0)
        dst[n] = '\0';
    return i;
}

const char *hd__tune_shown(char *buf, size_t size, const char *s, size_t len, size_t max)
{
    if (size < 4) {
        if (size > 0)
            buf[0] = '\0';
        return buf;
    }
    size_t n = len > max ? max : len;
    size_t taken = hd__tune_escape(buf, size - 3, s, n);
    if (taken < len)
        strcat(buf, "...");
    return buf;
}

/* A token as a message quotes it: its first 40 bytes, then "..." where it is longer. */
static const char *tok_shown(const token *t, char buf[48])
{
    return hd__tune_shown(buf, 48, t->text, t->len, 40);
}

static bool tok_is(const token *t, const char *word)
{
    return !t->quoted && t->len == strlen(word) && memcmp(t->text, word, t->len) == 0;
}

/* Copies a token into dst (size bytes with the NUL); false when it does not fit or is empty. */
static bool tok_copy(const token *t, char *dst, size_t size)
{
    if (t->len == 0 || t->len >= size)
        return false;
    memcpy(dst, t->text, t->len);
    dst[t->len] = '\0';
    return true;
}

bool hd__tune_trans_parse(const char *text, size_t len, bool *trans_a, bool *trans_b)
{
    if (len != 2 || (text[0] != 'n' && text[0] != 't') || (text[1] != 'n' && text[1] != 't'))
        return false;
    *trans_a = text[0] == 't';
    *trans_b = text[1] == 't';
    return true;
}

bool hd__tune_dim_parse(const char *text, size_t len, size_t lo, size_t *out)
{
    if (len == 0)
        return false;
    while (len > 1 && text[0] == '0') { /* leading zeros count for nothing, however many */
        text++;
        len--;
    }
    if (len > 9)
        return false; /* 9 digits without leading zeros already exceed HD_TUNE_DIM_MAX */
    size_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return false;
        v = v * 10 + (size_t)(text[i] - '0');
    }
    if (v < lo || v > HD_TUNE_DIM_MAX)
        return false;
    *out = v;
    return true;
}

/* A LoRA layout other than the default (hd__lora_layout_from_name()). */
static bool tok_layout(const token *t, unsigned *out)
{
    return !t->quoted && hd__lora_layout_from_name(t->text, t->len, out);
}

static bool tok_double(const token *t, double lo, double hi, double *out)
{
    char buf[48];
    if (t->quoted || !tok_copy(t, buf, sizeof buf))
        return false;
    if (strspn(buf, "0123456789.eE+-") != t->len)
        return false; /* no hex, inf or nan spellings */
    char *end;
    errno = 0;
    locale_t previous = hd__tune_numbers_begin();
    double v = strtod(buf, &end);
    hd__tune_numbers_end(previous);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool tok_backend(const token *t, hd_backend *out)
{
    char buf[32];
    return !t->quoted && tok_copy(t, buf, sizeof buf) && hd__backend_from_name(buf, out) &&
           *out != HD_BACKEND_AUTO;
}

/* A variant: "-" for the default, or a quoted string. */
static bool tok_variant(const token *t, char *dst, size_t size)
{
    if (tok_is(t, "-")) {
        dst[0] = '\0';
        return true;
    }
    return t->quoted && tok_copy(t, dst, size);
}

/* ---- lines ---- */

typedef struct parser {
    hd_tune_file *f;
    size_t line_no;
    bool have_cal;
} parser;

static bool bad_line(parser *ps, const char *fmt, ...) HD_PRINTF(2, 3);

static bool bad_line(parser *ps, const char *fmt, ...)
{
    hd_tune_file *f = ps->f;
    if (f->bad_lines++ == 0) {
        f->first_bad_line = ps->line_no;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->first_problem, sizeof f->first_problem, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool parse_record(parser *ps, hd_op op, hd_precision precision, const token *tok, int n)
{
    int dims = hd__tune_dim_count(op);
    int want = 1 + dims + hd__tune_has_transposes(op) + 5;
    /* LoRA's records of another layout than the default name it after the dimensions */
    bool layout = hd__op(op)->lora_layout && n == want + 1;
    char shown[48];
    if (n != want && !layout)
        return bad_line(ps, "%s record with %d fields, expected %d", hd_op_name(op), n, want);
    hd_tune_record r = {.op = op, .precision = precision};
    int i = 1;
    for (int d = 0; d < dims; d++, i++) {
        size_t lo = hd__op(op)->zero_dim_ok[d] ? 0 : 1; /* LoRA's rank may be 0 */
        if (tok[i].quoted || !hd__tune_dim_parse(tok[i].text, tok[i].len, lo, &r.shape.dim[d]))
            return bad_line(ps, "dimension %d (%s) '%s' is not a whole number in [%zu, %zu]", d + 1,
                            hd__op(op)->dim_names[d], tok_shown(&tok[i], shown), lo,
                            HD_TUNE_DIM_MAX);
    }
    if (hd__tune_has_transposes(op)) {
        const token *t = &tok[i++];
        if (t->quoted || !hd__tune_trans_parse(t->text, t->len, &r.shape.trans_a, &r.shape.trans_b))
            return bad_line(ps, "transposes '%s' are not nn, nt, tn or tt", tok_shown(t, shown));
    }
    if (layout && !tok_layout(&tok[i], &r.shape.lora_layout))
        return bad_line(ps,
                        "%s record with %d fields: '%s' after the dimensions is not a "
                        "layout, pt or layout1 to layout7",
                        hd_op_name(op), n, tok_shown(&tok[i], shown));
    i += layout;
    if (!tok_backend(&tok[i], &r.backend))
        return bad_line(ps, "unknown backend '%s'", tok_shown(&tok[i], shown));
    i++;
    if (!tok_variant(&tok[i], r.variant, sizeof r.variant))
        return bad_line(ps, "variant '%s' is not - or a quoted string under %d bytes",
                        tok_shown(&tok[i], shown), HD_TUNE_STRING_MAX);
    i++;
    if (!tok_double(&tok[i], HD_TUNE_TIME_MIN_US, HD_TUNE_TIME_MAX_US, &r.median_us))
        return bad_line(ps, "median time '%s' is not a number of microseconds in [%g, %g]",
                        tok_shown(&tok[i], shown), HD_TUNE_TIME_MIN_US, HD_TUNE_TIME_MAX_US);
    i++;
    if (tok_is(&tok[i], "-") && tok_is(&tok[i + 1], "-")) {
        r.runner_up = HD_BACKEND_AUTO;
    } else {
        if (tok_is(&tok[i], "-") || tok_is(&tok[i + 1], "-"))
            return bad_line(ps, "runner-up and margin are '-' together or not at all");
        if (!tok_backend(&tok[i], &r.runner_up))
            return bad_line(ps, "unknown runner-up backend '%s'", tok_shown(&tok[i], shown));
        if (r.runner_up == r.backend)
            return bad_line(ps, "runner-up '%s' is the winner's backend",
                            hd_backend_name(r.backend));
        if (!tok_double(&tok[i + 1], HD_TUNE_MARGIN_MIN_PCT, HD_TUNE_MARGIN_MAX_PCT, &r.margin_pct))
            return bad_line(ps, "margin '%s' is not a percentage in [%g, %g]",
                            tok_shown(&tok[i + 1], shown), HD_TUNE_MARGIN_MIN_PCT,
                            HD_TUNE_MARGIN_MAX_PCT);
    }
    if (hd__tune_find(ps->f, r.op, &r.shape, r.precision) != NULL)
        return bad_line(ps, "duplicate record for the same operation and shape");
    if (ps->f->count >= HD_TUNE_RECORD_MAX)
        return bad_line(ps, "more than %d records", HD_TUNE_RECORD_MAX);
    if (hd__tune_put(ps->f, &r) != HD_OK)
        return bad_line(ps, "out of memory");
    return true;
}

#define CAL_ITEM(field)                                                                            \
    {                                                                                              \
#field, offsetof(hd_tune_calibration, field)                                               \
    }
const hd_tune_cal_item hd__tune_cal_items[] = {
    CAL_ITEM(launch_us),  CAL_ITEM(copy_gbps), CAL_ITEM(host_gbps),    CAL_ITEM(gemm_gflops),
    CAL_ITEM(cpu_gflops), CAL_ITEM(cpu_gbps),  CAL_ITEM(fused_gflops), CAL_ITEM(clblast_gflops),
};
#undef CAL_ITEM
const size_t hd__tune_cal_item_count = sizeof hd__tune_cal_items / sizeof hd__tune_cal_items[0];

static bool parse_calibration(parser *ps, const token *tok, int n)
{
    if (ps->have_cal)
        return bad_line(ps, "second calibration line");
    hd_tune_calibration cal = {0};
    char shown[48];
    for (int i = 1; i < n; i++) {
        const char *eq = tok[i].quoted ? NULL : memchr(tok[i].text, '=', tok[i].len);
        if (eq == NULL)
            return bad_line(ps, "calibration item '%s' has no '='", tok_shown(&tok[i], shown));
        size_t name_len = (size_t)(eq - tok[i].text);
        double *field = NULL;
        for (size_t k = 0; k < hd__tune_cal_item_count; k++) {
            const char *name = hd__tune_cal_items[k].name;
            if (strlen(name) == name_len && memcmp(name, tok[i].text, name_len) == 0)
                field = (double *)((char *)&cal + hd__tune_cal_items[k].offset);
        }
        token value = {.text = eq + 1, .len = tok[i].len - name_len - 1};
        if (field == NULL || *field != 0.0 ||
            !tok_double(&value, HD_TUNE_CAL_MIN, HD_TUNE_CAL_MAX, field))
            return bad_line(ps, "calibration item '%s' is unknown, repeated or out of range",
                            tok_shown(&tok[i], shown));
    }
    ps->have_cal = true;
    ps->f->cal = cal;
    return true;
}

static bool parse_param(parser *ps, const token *tok, int n)
{
    hd_tune_param p;
    if (n != 4 || !tok_backend(&tok[1], &p.backend) || tok[2].quoted ||
        !tok_copy(&tok[2], p.name, sizeof p.name) || !tok[3].quoted ||
        !tok_copy(&tok[3], p.value, sizeof p.value))
        return bad_line(ps, "param line must be: param BACKEND NAME \"VALUE\"");
    for (size_t i = 0; i < ps->f->param_count; i++)
        if (ps->f->params[i].backend == p.backend && strcmp(ps->f->params[i].name, p.name) == 0)
            return bad_line(ps, "duplicate param");
    hd_status s = hd__tune_put_param(ps->f, &p);
    if (s != HD_OK)
        return bad_line(ps, "%s",
                        s == HD_ERR_CACHE_INVALID   ? "more than the params a cache holds"
                        : s == HD_ERR_OUT_OF_MEMORY ? "out of memory"
                                                    : "a param name must be one plain word");
    return true;
}

static bool parse_body_line(parser *ps, const token *tok, int n)
{
    hd_op op;
    char word[32], shown[48];
    if (tok[0].quoted || !tok_copy(&tok[0], word, sizeof word))
        return bad_line(ps, "line does not start with a keyword: '%s'", tok_shown(&tok[0], shown));
    if (strcmp(word, "calibration") == 0)
        return parse_calibration(ps, tok, n);
    if (strcmp(word, "param") == 0)
        return parse_param(ps, tok, n);
    /* "gemm" or, for a record tuned in another GEMM arithmetic, "gemm.fp32x3" */
    hd_precision precision = HD_PRECISION_FP32;
    char *dot = strchr(word, '.');
    if (dot != NULL) {
        *dot = '\0';
        if (!hd__precision_from_name(dot + 1, &precision) || precision == HD_PRECISION_FP32)
            return bad_line(ps, "unknown precision in '%s'", tok_shown(&tok[0], shown));
    }
    if (hd__op_from_name(word, &op)) {
        if (precision != hd__tune_precision_of(op, precision))
            return bad_line(ps, "%s records carry no precision", hd_op_name(op));
        return parse_record(ps, op, precision, tok, n);
    }
    return bad_line(ps, "unknown keyword '%s'", tok_shown(&tok[0], shown));
}

/* Header line `index` (0..5): returns false with msg set when it is not what must be there. */
static bool parse_header_line(hd_tune_file *f, int index, const token *tok, int n, char *msg,
                              size_t size)
{
    static const char *const words[] = {"hd-tune", "library", "platform",
                                        "device",  "driver",  "clblast"};
    if (n != 2 || !tok_is(&tok[0], words[index])) {
        snprintf(msg, size, "expected a '%s' line", words[index]);
        return false;
    }
    bool ok = true;
    switch (index) {
    case 0:
        ok = tok_is(&tok[1], "1");
        if (!ok) {
            snprintf(msg, size, "format version '%.*s' is not %d",
                     (int)(tok[1].len > 20 ? 20 : tok[1].len), tok[1].text, HD_TUNE_FORMAT);
            return false;
        }
        break;
    case 1:
        ok = tok_copy(&tok[1], f->key.library, sizeof f->key.library);
        break;
    case 2:
        ok = tok[1].quoted && tok_copy(&tok[1], f->key.platform, sizeof f->key.platform);
        break;
    case 3:
        ok = tok[1].quoted && tok_copy(&tok[1], f->key.device, sizeof f->key.device);
        break;
    case 4:
        ok = tok[1].quoted && tok_copy(&tok[1], f->key.driver, sizeof f->key.driver);
        break;
    case 5:
        ok = tok_copy(&tok[1], f->key.clblast, sizeof f->key.clblast);
        break;
    }
    if (!ok)
        snprintf(msg, size, "malformed '%s' line", words[index]);
    return ok;
}

/* A comment is free text: it may hold any bytes, quotes and words, so it is recognised before
 * any of the checks that records must pass. */
static size_t leading_blanks(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
    return i;
}

static bool is_comment(const char *p, size_t len)
{
    size_t i = leading_blanks(p, len);
    return i < len && p[i] == '#';
}

static bool is_blank(const char *p, size_t len)
{
    return leading_blanks(p, len) == len;
}

bool hd__tune_printable(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((p[i] < 0x20 && p[i] != '\t') || p[i] >= 0x7f)
            return false;
    return true;
}

hd_status hd__tune_parse(const char *text, size_t len, hd_tune_file *f, char *msg, size_t size)
{
    return hd__tune_parse_lines(text, len, f, NULL, NULL, msg, size);
}

hd_status hd__tune_parse_lines(const char *text, size_t len, hd_tune_file *f, hd_tune_line_fn *fn,
                               void *arg, char *msg, size_t size)
{
    parser ps = {.f = f};
    int header = 0; /* header lines read so far */
    char line[HD_TUNE_LINE_MAX + 1];
    char store[HD_TUNE_LINE_MAX + 1];
    char header_msg[160];
    token tok[MAX_TOKENS];
    size_t pos = 0;
    msg[0] = '\0';

    while (pos < len) {
        ps.line_no++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t line_len = nl ? (size_t)(nl - start) : len - pos;
        pos += line_len + (nl != NULL);
        if (line_len > 0 && start[line_len - 1] == '\r')
            line_len--;

        /* Comments and blank lines, of any length and with or without their newline, are
         * skipped before the checks that records must pass. */
        if (is_comment(start, line_len)) {
            if (fn != NULL)
                fn(arg, HD_TUNE_LINE_COMMENT, ps.line_no, start, line_len);
            continue;
        }
        if (is_blank(start, line_len))
            continue;
        const char *problem = NULL;
        char too_long[64];
        if (nl == NULL) {
            problem = "last line is cut short (no newline)";
        } else if (line_len > HD_TUNE_LINE_MAX) {
            snprintf(too_long, sizeof too_long, "line longer than %d bytes", HD_TUNE_LINE_MAX);
            problem = too_long;
        }
        if (problem == NULL && !hd__tune_printable(start, line_len))
            problem = "line holds bytes that are not printable ASCII";
        int n = 0;
        if (problem == NULL) {
            memcpy(line, start, line_len);
            line[line_len] = '\0';
            n = tokenize(line, tok, store);
            if (n < 0)
                problem = "malformed quoted string or too many fields";
        }
        if (problem == NULL && n == 0)
            continue; /* blank once tokenized (never, after is_blank) */

        if (header < 6) {
            if (problem == NULL &&
                !parse_header_line(f, header, tok, n, header_msg, sizeof header_msg))
                problem = header_msg;
            if (problem != NULL) {
                snprintf(msg, size, "line %zu: %s", ps.line_no, problem);
                hd__tune_file_free(f);
                return HD_ERR_CACHE_INVALID;
            }
            header++;
            continue;
        }
        if (problem != NULL)
            bad_line(&ps, "%s", problem);
        if ((problem != NULL || !parse_body_line(&ps, tok, n)) && fn != NULL)
            fn(arg, HD_TUNE_LINE_BAD, ps.line_no, start, line_len);
    }
    if (header < 6) {
        snprintf(msg, size, "%s",
                 header == 0 ? "empty file or no 'hd-tune' header" : "file ends inside the header");
        hd__tune_file_free(f);
        return HD_ERR_CACHE_INVALID;
    }
    return HD_OK;
}

hd_status hd__tune_load(const char *path, hd_tune_file *f, char *msg, size_t size)
{
    return hd__tune_load_lines(path, f, NULL, NULL, msg, size);
}

hd_status hd__tune_load_lines(const char *path, hd_tune_file *f, hd_tune_line_fn *fn, void *arg,
                              char *msg, size_t size)
{
    FILE *fp = hd__file_open_regular(path, msg, size);
    if (fp == NULL)
        return HD_ERR_IO;
    char *buf = malloc(HD_TUNE_FILE_MAX + 1);
    if (buf == NULL) {
        fclose(fp);
        snprintf(msg, size, "no memory to read '%s'", path);
        return HD_ERR_OUT_OF_MEMORY;
    }
    size_t len = fread(buf, 1, HD_TUNE_FILE_MAX + 1, fp);
    bool failed = ferror(fp) != 0;
    fclose(fp);
    hd_status s;
    if (failed) {
        snprintf(msg, size, "cannot read '%s'", path);
        s = HD_ERR_IO;
    } else if (len > HD_TUNE_FILE_MAX) {
        snprintf(msg, size, "'%s' is larger than %zu bytes", path, HD_TUNE_FILE_MAX);
        s = HD_ERR_CACHE_INVALID;
    } else {
        s = hd__tune_parse_lines(buf, len, f, fn, arg, msg, size);
    }
    free(buf);
    return s;
}

void hd__tune_margin_text(const hd_tune_record *r, char *buf, size_t size)
{
    if (r->runner_up == HD_BACKEND_AUTO)
        snprintf(buf, size, "%s", "");
    else
        snprintf(buf, size, "%.1f%% %s %s", fabs(r->margin_pct),
                 r->margin_pct < 0.0 ? "behind (preferred over)" : "ahead of",
                 hd_backend_name(r->runner_up));
}

size_t hd__tune_default_path(char *buf, size_t size)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    int n;
    if (xdg != NULL && xdg[0] == '/') {
        n = snprintf(buf, size, "%s/hd-dispatch/tune.txt", xdg);
    } else {
        const char *home = getenv("HOME");
        if (home == NULL || home[0] != '/')
            return 0;
        n = snprintf(buf, size, "%s/.cache/hd-dispatch/tune.txt", home);
    }
    return n > 0 ? (size_t)n : 0;
}
