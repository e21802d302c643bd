/* The tuning table of a context: loads the cache file for this device at context creation and
 * answers the selection's lookups. A missing file is normal; a file for another device,
 * driver or library version, or a damaged one, is a note (hd__note), and either way the
 * context works without it. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/table.h"
#include "dispatch/context.h"
#include "dispatch/device.h"
#include "dispatch/error.h"
#include "dispatch/memo.h"
#include "dispatch/select.h"

#ifdef HD_HAVE_CLBLAST
#include <clblast_c.h> /* CLBLAST_VERSION_*, for the key */
#endif

/* One record as the selection's scans read it: what they filter on and the log2 of its
 * dimensions, packed, so that a scan of the documented maximum of records stays in the CPU's
 * caches and takes no logarithm; the record itself is read only for the few that pass. */
typedef struct lookup_entry {
    double logdim[4]; /* log2(1 + dim) */
    uint32_t record;  /* index into file.records */
    uint8_t op, precision, layout, trans, backend, runner_up;
} lookup_entry;

struct hd_tune_table {
    hd_tune_file file;
    bool has_calibration;
    lookup_entry *entries; /* one per record, in the file's order */
    uint32_t *exact;       /* open addressing by the records' keys: record index + 1, 0 empty */
    size_t exact_slots;    /* a power of two, at least twice the records */
};

#define STR2(x) #x
#define STR(x)  STR2(x)

void hd__tune_context_key(const hd_context *ctx, hd_tune_key *key)
{
    memset(key, 0, sizeof *key);
    snprintf(key->library, sizeof key->library, "%s", hd_version());
    const char *platform = "none", *device = "none", *driver = "none";
    if (hd__device_present(ctx)) {
        platform = hd__device_platform(ctx);
        device = hd__device_name(ctx);
        driver = hd__device_driver(ctx);
    }
    snprintf(key->platform, sizeof key->platform, "%s", platform);
    snprintf(key->device, sizeof key->device, "%s", device);
    snprintf(key->driver, sizeof key->driver, "%s", driver);
#if defined(HD_HAVE_CLBLAST) && defined(CLBLAST_VERSION_MAJOR)
    snprintf(
        key->clblast, sizeof key->clblast, "%s",
        STR(CLBLAST_VERSION_MAJOR) "." STR(CLBLAST_VERSION_MINOR) "." STR(CLBLAST_VERSION_PATCH));
#elif defined(HD_HAVE_CLBLAST)
    snprintf(key->clblast, sizeof key->clblast, "unknown"); /* a CLBlast without the macros */
#else
    snprintf(key->clblast, sizeof key->clblast, "none");
#endif
    hd__tune_key_normalize(key);
}

/* An empty option is refused rather than taken for NULL: a caller's unset variable would
 * otherwise select $HD_TUNE_CACHE or the user's default cache, which the tuner then rewrites.
 * An empty $HD_TUNE_CACHE is unset, as the library's other variables. */
hd_tune_path hd__tune_resolve_path(const hd_context_options *opt, char *buf, size_t size)
{
    buf[0] = '\0';
    const char *p = opt != NULL ? opt->tune_cache : NULL;
    if (p != NULL && p[0] == '\0')
        return HD_TUNE_PATH_EMPTY;
    if (p == NULL)
        p = getenv("HD_TUNE_CACHE");
    size_t n = p != NULL && p[0] != '\0' ? (size_t)snprintf(buf, size, "%s", p)
                                           : hd__tune_default_path(buf, size);
    if (n >= size) {
        buf[0] = '\0';
        return HD_TUNE_PATH_TOO_LONG;
    }
    return n == 0 ? HD_TUNE_PATH_NONE : HD_TUNE_PATH_FOUND;
}

const char *hd__tune_key_mismatch(const hd_tune_key *file, const hd_tune_key *here)
{
    if (strcmp(file->library, here->library) != 0)
        return "library version";
    if (strcmp(file->platform, here->platform) != 0)
        return "platform";
    if (strcmp(file->device, here->device) != 0)
        return "device";
    if (strcmp(file->driver, here->driver) != 0)
        return "driver version";
    if (strcmp(file->clblast, here->clblast) != 0)
        return "CLBlast version";
    return NULL;
}

/* Every record whose variant its backend would reject here (hd_backend_impl.check_variant)
 * is dropped, with one note naming the first: a variant is the cache's text, and a valid call
 * must not fail on it. Records of backends this context lacks are never chosen, so they stay. */
static double log_dim(size_t d)
{
    return log2(1.0 + (double)d);
}

/* The hash of a record's key (hd__tune_same_key's fields: op, precision, the op's dimensions,
 * its transposes and LoRA layout where it has them). */
static uint64_t key_hash(hd_op op, hd_precision precision, const hd_shape *s)
{
    const hd_op_desc *d = hd__op(op);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the fields as 64-bit words */
    uint64_t words[8] = {(uint64_t)op, (uint64_t)precision,
                         d->transposes ? (uint64_t)s->trans_a + 2u * s->trans_b : 0,
                         d->lora_layout ? (uint64_t)s->lora_layout : 0};
    for (int i = 0; i < d->dims; i++)
        words[4 + i] = (uint64_t)s->dim[i];
    for (int w = 0; w < 8; w++)
        for (int b = 0; b < 8; b++)
            h = (h ^ ((words[w] >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
    return h;
}

/* The lookup entries and the exact-key hash of t's records; false without memory. */
static bool build_index(struct hd_tune_table *t)
{
    const hd_tune_file *f = &t->file;
    size_t slots = 16;
    while (slots < 2 * f->count)
        slots *= 2;
    t->entries = malloc((f->count > 0 ? f->count : 1) * sizeof *t->entries);
    t->exact = calloc(slots, sizeof *t->exact);
    t->exact_slots = slots;
    if (t->entries == NULL || t->exact == NULL)
        return false;
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        lookup_entry *e = &t->entries[i];
        for (int d = 0; d < 4; d++)
            e->logdim[d] = log_dim(r->shape.dim[d]);
        e->record = (uint32_t)i;
        e->op = (uint8_t)r->op;
        e->precision = (uint8_t)r->precision;
        e->layout = (uint8_t)r->shape.lora_layout;
        e->trans = (uint8_t)(r->shape.trans_a + 2 * r->shape.trans_b);
        e->backend = (uint8_t)r->backend;
        e->runner_up = (uint8_t)r->runner_up;
        size_t at = (size_t)key_hash(r->op, r->precision, &r->shape) & (slots - 1);
        while (t->exact[at] != 0) /* the parser keeps one record per key */
            at = (at + 1) & (slots - 1);
        t->exact[at] = (uint32_t)i + 1;
    }
    return true;
}

static void table_free(struct hd_tune_table *t)
{
    hd__tune_file_free(&t->file);
    free(t->entries);
    free(t->exact);
    free(t);
}

/* The record of exactly (op, shape) in the context's precision, disabled or not. */
static hd_tune_record *find_exact(const struct hd_tune_table *t, hd_op op, const hd_shape *shape,
                                  hd_precision context_precision)
{
    hd_tune_record probe = {.op = op,
                            .shape = *shape,
                            .precision = hd__tune_precision_of(op, context_precision)};
    size_t at = (size_t)key_hash(op, probe.precision, shape) & (t->exact_slots - 1);
    for (; t->exact[at] != 0; at = (at + 1) & (t->exact_slots - 1)) {
        hd_tune_record *r = &t->file.records[t->exact[at] - 1];
        if (hd__tune_same_key(r, &probe))
            return r;
    }
    return NULL;
}

static void drop_rejected_variants(hd_context *ctx, hd_tune_file *f, const char *path)
{
    char first[800] = "";
    size_t kept = 0, dropped = 0;
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        hd_backend b = r->backend;
        bool present = (unsigned)b < HD_BACKEND_COUNT && b != HD_BACKEND_AUTO &&
                       (ctx->backends[b] != NULL || ctx->composite[b] != NULL);
        bool bad = r->variant[0] != '\0' && present &&
                   hd__backend_check_variant(ctx, b, r->op, &r->shape, r->variant) != HD_OK;
        if (bad && dropped++ == 0) {
            char key[96];
            hd__shape_text(r->op, &r->shape, key, sizeof key);
            snprintf(first, sizeof first, "%s -> %s \"%.200s\": %.300s", key, hd_backend_name(b),
                     r->variant, ctx->last_error);
        }
        if (!bad)
            f->records[kept++] = *r;
    }
    f->count = kept;
    hd__error_clear(ctx);
    if (dropped > 0)
        hd__note(ctx,
                 "tuning cache '%s': %zu record(s) dropped whose parameters the backend rejects, "
                 "the first: %s",
                 path, dropped, first);
}

void hd__tune_disable(hd_context *ctx, hd_op op, const hd_shape *shape)
{
    hd_tune_record *r =
        ctx->tune != NULL ? find_exact(ctx->tune, op, shape, ctx->gemm_precision) : NULL;
    if (r != NULL) {
        r->disabled = true;
        hd__plans_invalidate(ctx); /* plans may name it */
    }
}

hd_status hd__tune_open(hd_context *ctx, const hd_context_options *opt)
{
    ctx->tune = NULL;
    ctx->tune_cache_path[0] = '\0';
    if (opt->no_tune_cache)
        return HD_OK;
    switch (hd__tune_resolve_path(opt, ctx->tune_cache_path, sizeof ctx->tune_cache_path)) {
    case HD_TUNE_PATH_FOUND:
        break;
    case HD_TUNE_PATH_NONE:
        return HD_OK; /* no home directory: run untuned */
    case HD_TUNE_PATH_EMPTY:
        hd__note(ctx, "tuning cache not used: the tune_cache option is \"\" (NULL selects "
                      "$HD_TUNE_CACHE or the default path; no_tune_cache reads none)");
        return HD_OK;
    case HD_TUNE_PATH_TOO_LONG:
        hd__note(ctx, "tuning cache not used: its path is longer than %zu bytes",
                 sizeof ctx->tune_cache_path - 1);
        return HD_OK;
    }
    const char *path = ctx->tune_cache_path;

    struct hd_tune_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the tuning table");
    hd__tune_file_init(&t->file);
    char msg[256];
    hd_status s = hd__tune_load(path, &t->file, msg, sizeof msg);
    if (s == HD_ERR_OUT_OF_MEMORY) {
        free(t);
        return hd__error(ctx, s, "tuning cache '%s': %s", path, msg);
    }
    if (s == HD_ERR_IO) {
        if (access(path, F_OK) == 0) /* there but unreadable: worth telling */
            hd__note(ctx, "tuning cache not used: %s", msg);
        free(t);
        return HD_OK;
    }
    if (s != HD_OK) {
        free(t);
        hd__note(ctx, "tuning cache '%s' is invalid and was ignored: %s", path, msg);
        return HD_OK;
    }

    hd_tune_key here;
    hd__tune_context_key(ctx, &here);
    const char *differs = hd__tune_key_mismatch(&t->file.key, &here);
    if (differs != NULL) {
        hd__note(ctx,
                 "tuning cache '%s' was written for another %s (device '%s', driver '%s', "
                 "library %s); its records are ignored: run dispatch-autotune",
                 path, differs, t->file.key.device, t->file.key.driver, t->file.key.library);
        hd__tune_file_free(&t->file);
        free(t);
        return HD_OK;
    }
    if (t->file.bad_lines > 0)
        hd__note(ctx,
                 "tuning cache '%s' is invalid in part: %zu bad line(s) ignored, the first "
                 "at line %zu: %s",
                 path, t->file.bad_lines, t->file.first_bad_line, t->file.first_problem);
    const hd_tune_calibration *c = &t->file.cal;
    t->has_calibration = c->launch_us > 0.0 || c->gemm_gflops > 0.0 || c->host_gbps > 0.0;
    ctx->tune = t;
    hd__plans_invalidate(ctx); /* plans may name the old records */
    drop_rejected_variants(ctx, &t->file, path);
    if (!build_index(t)) {
        ctx->tune = NULL;
        table_free(t);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the tuning table");
    }
    return HD_OK;
}

void hd__tune_close(hd_context *ctx)
{
    if (ctx == NULL || ctx->tune == NULL)
        return;
    table_free(ctx->tune);
    ctx->tune = NULL;
    hd__plans_invalidate(ctx);
}

const hd_tune_record *hd__tune_exact(const hd_context *ctx, hd_op op, const hd_shape *shape)
{
    if (ctx->tune == NULL)
        return NULL;
    const hd_tune_record *r = find_exact(ctx->tune, op, shape, ctx->gemm_precision);
    return r != NULL && !r->disabled ? r : NULL;
}

/* A scan's shape as the entries hold theirs: log2(1 + dim) once per scan, and the fields
 * the scans filter on. */
typedef struct lookup_query {
    double logdim[4];
    int dims;
    uint8_t precision, trans;
    bool transposes;
} lookup_query;

static lookup_query make_query(const hd_context *ctx, hd_op op, const hd_shape *shape)
{
    lookup_query q = {.dims = hd__tune_dim_count(op),
                      .precision = (uint8_t)hd__tune_precision_of(op, ctx->gemm_precision),
                      .trans = (uint8_t)(shape->trans_a + 2 * shape->trans_b),
                      .transposes = hd__tune_has_transposes(op)};
    for (int d = 0; d < q.dims; d++)
        q.logdim[d] = log_dim(shape->dim[d]);
    return q;
}

/* The nearest record of op in the given LoRA layout (0 for ops without one). */
static const hd_tune_record *nearest_in_layout(const hd_context *ctx, hd_op op,
                                               const hd_shape *shape, unsigned layout,
                                               double *distance)
{
    const struct hd_tune_table *t = ctx->tune;
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    lookup_query q = make_query(ctx, op, shape);
    for (size_t i = 0; i < t->file.count; i++) {
        const lookup_entry *e = &t->entries[i];
        if (e->op != op || e->precision != q.precision || e->layout != layout ||
            (q.transposes && e->trans != q.trans))
            continue;
        double sum = 0.0;
        bool near = true;
        for (int d = 0; d < q.dims && near; d++) {
            double g = fabs(e->logdim[d] - q.logdim[d]);
            near = g <= HD_TUNE_NEAR_DIM;
            sum += g;
        }
        if (near && sum < best_d && !t->file.records[e->record].disabled) {
            best = &t->file.records[e->record];
            best_d = sum;
        }
    }
    if (best != NULL && distance != NULL)
        *distance = best_d;
    return best;
}

const hd_tune_record *hd__tune_nearest_timing(const hd_context *ctx, hd_op op,
                                              const hd_shape *shape, hd_backend b)
{
    if (ctx->tune == NULL)
        return NULL;
    const struct hd_tune_table *t = ctx->tune;
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    bool best_same = false;
    lookup_query q = make_query(ctx, op, shape);
    for (size_t i = 0; i < t->file.count; i++) {
        const lookup_entry *e = &t->entries[i];
        /* records that timed b (its winner or runner-up) in the context's precision */
        if (e->op != op || e->precision != q.precision || (e->backend != b && e->runner_up != b))
            continue;
        /* the shape's own transposes and layout first */
        bool same = e->layout == shape->lora_layout && (!q.transposes || e->trans == q.trans);
        double sum = 0.0;
        for (int d = 0; d < q.dims; d++)
            sum += fabs(e->logdim[d] - q.logdim[d]);
        if (((same && !best_same) || (same == best_same && sum < best_d)) &&
            !t->file.records[e->record].disabled) {
            best = &t->file.records[e->record];
            best_d = sum;
            best_same = same;
        }
    }
    return best;
}

/* Records of the shape's own LoRA layout first; a cache without any near one in that layout
 * gives the nearest of the default layout (the backends that cannot read the shape's layout
 * then fall out at the choice). */
const hd_tune_record *hd__tune_nearest(const hd_context *ctx, hd_op op, const hd_shape *shape,
                                       double *distance)
{
    if (ctx->tune == NULL)
        return NULL;
    const hd_tune_record *r = nearest_in_layout(ctx, op, shape, shape->lora_layout, distance);
    if (r == NULL && shape->lora_layout != 0)
        r = nearest_in_layout(ctx, op, shape, 0, distance);
    return r;
}

const hd_tune_calibration *hd__tune_calibration(const hd_context *ctx)
{
    return ctx->tune != NULL && ctx->tune->has_calibration ? &ctx->tune->file.cal : NULL;
}

const char *hd__tune_param(const hd_context *ctx, hd_backend b, const char *name)
{
    if (ctx == NULL || ctx->tune == NULL)
        return NULL;
    const hd_tune_file *f = &ctx->tune->file;
    for (size_t i = 0; i < f->param_count; i++)
        if (f->params[i].backend == b && strcmp(f->params[i].name, name) == 0)
            return f->params[i].value;
    return NULL;
}
