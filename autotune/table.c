/* The tuning table of a context: loads the cache file for this device at context creation and
 * answers the selection's lookups. A missing file is normal; a file for another device,
 * driver or library version, or a damaged one, is a note (hd__note), and either way the
 * context works without it. */
#include <math.h>
#include <stdarg.h>
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

struct hd_tune_table {
    hd_tune_file file;
    bool has_calibration;
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
        ctx->tune != NULL
            ? (hd_tune_record *)hd__tune_find(&ctx->tune->file, op, shape, ctx->gemm_precision)
            : NULL;
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
    return HD_OK;
}

void hd__tune_close(hd_context *ctx)
{
    if (ctx == NULL || ctx->tune == NULL)
        return;
    hd__tune_file_free(&ctx->tune->file);
    free(ctx->tune);
    ctx->tune = NULL;
    hd__plans_invalidate(ctx);
}

const hd_tune_record *hd__tune_exact(const hd_context *ctx, hd_op op, const hd_shape *shape)
{
    if (ctx->tune == NULL)
        return NULL;
    const hd_tune_record *r = hd__tune_find(&ctx->tune->file, op, shape, ctx->gemm_precision);
    return r != NULL && !r->disabled ? r : NULL;
}

static double log_gap(size_t a, size_t b)
{
    return fabs(log2(1.0 + (double)a) - log2(1.0 + (double)b));
}

/* The nearest record of op in the given LoRA layout (0 for ops without one). */
static const hd_tune_record *nearest_in_layout(const hd_context *ctx, hd_op op,
                                               const hd_shape *shape, unsigned layout,
                                               double *distance)
{
    const hd_tune_file *f = &ctx->tune->file;
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    int dims = hd__tune_dim_count(op);
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        if (r->op != op || r->disabled ||
            r->precision != hd__tune_precision_of(op, ctx->gemm_precision) ||
            r->shape.lora_layout != layout)
            continue;
        if (hd__tune_has_transposes(op) &&
            (r->shape.trans_a != shape->trans_a || r->shape.trans_b != shape->trans_b))
            continue;
        double sum = 0.0;
        bool near = true;
        for (int d = 0; d < dims && near; d++) {
            double g = log_gap(r->shape.dim[d], shape->dim[d]);
            near = g <= HD_TUNE_NEAR_DIM;
            sum += g;
        }
        if (near && sum < best_d) {
            best = r;
            best_d = sum;
        }
    }
    if (best != NULL && distance != NULL)
        *distance = best_d;
    return best;
}

/* Whether r holds a time of backend b, in the precision the context computes op in. */
static bool timed(const hd_context *ctx, const hd_tune_record *r, hd_op op, hd_backend b)
{
    return r->op == op && !r->disabled && (r->backend == b || r->runner_up == b) &&
           r->precision == hd__tune_precision_of(op, ctx->gemm_precision);
}

static bool same_layout(hd_op op, const hd_tune_record *r, const hd_shape *shape)
{
    return r->shape.lora_layout == shape->lora_layout &&
           (!hd__tune_has_transposes(op) ||
            (r->shape.trans_a == shape->trans_a && r->shape.trans_b == shape->trans_b));
}

const hd_tune_record *hd__tune_nearest_timing(const hd_context *ctx, hd_op op,
                                              const hd_shape *shape, hd_backend b)
{
    if (ctx->tune == NULL)
        return NULL;
    const hd_tune_file *f = &ctx->tune->file;
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    bool best_same = false;
    int dims = hd__tune_dim_count(op);
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        if (!timed(ctx, r, op, b))
            continue;
        bool same = same_layout(op, r, shape);
        double sum = 0.0;
        for (int d = 0; d < dims; d++)
            sum += log_gap(r->shape.dim[d], shape->dim[d]);
        if ((same && !best_same) || (same == best_same && sum < best_d)) {
            best = r;
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
