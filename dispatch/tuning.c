/* The context's tuning: the cache file for this device opened at context creation (a missing
 * file is normal; a file for another device, driver or library version, or a damaged one, is a
 * note, and either way the context works without it), its device-level params handed to their
 * backends, the records whose variants a backend rejects dropped, and the lookups of
 * dispatch/tuning.h answered from the table (dispatch/tune_table.c) in the context's
 * precision. Whatever changes the table invalidates the context's plans. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "dispatch/context.h"
#include "dispatch/device.h"
#include "dispatch/memo.h"
#include "dispatch/select.h"
#include "dispatch/tune_table.h"

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
    snprintf(key->clblast, sizeof key->clblast, "%s", hd__registry_clblast_version());
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
                     r->variant, ctx->report.last_error);
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

/* Each device-level param of the file goes to its backend, to be used from its first call. */
static void hand_params(hd_context *ctx, const hd_tune_file *f)
{
    for (size_t i = 0; i < f->param_count; i++) {
        const hd_tune_param *p = &f->params[i];
        hd_backend b = p->backend;
        if ((unsigned)b >= HD_BACKEND_COUNT || ctx->backends[b] == NULL ||
            ctx->backends[b]->cached_params == NULL)
            continue;
        ctx->backends[b]->cached_params(ctx->backend_state[b], ctx, p->name, p->value);
    }
}

/* Loads path into f: HD_OK, or a status after which the context runs untuned (HD_OK returned
 * by the caller, a note given where worth it), or HD_ERR_OUT_OF_MEMORY. */
static hd_status load_for_context(hd_context *ctx, const char *path, hd_tune_file *f)
{
    char msg[256];
    hd_status s = hd__tune_load(path, f, msg, sizeof msg);
    if (s == HD_ERR_OUT_OF_MEMORY)
        return hd__error(ctx, s, "tuning cache '%s': %s", path, msg);
    if (s == HD_ERR_IO) {
        if (access(path, F_OK) == 0) /* there but unreadable: worth telling */
            hd__note(ctx, "tuning cache not used: %s", msg);
        return s;
    }
    if (s != HD_OK) {
        hd__note(ctx, "tuning cache '%s' is invalid and was ignored: %s", path, msg);
        return s;
    }
    hd_tune_key here;
    hd__tune_context_key(ctx, &here);
    const char *differs = hd__tune_key_mismatch(&f->key, &here);
    if (differs != NULL) {
        hd__note(ctx,
                 "tuning cache '%s' was written for another %s (device '%s', driver '%s', "
                 "library %s); its records are ignored: run dispatch-autotune",
                 path, differs, f->key.device, f->key.driver, f->key.library);
        return HD_ERR_CACHE_INVALID;
    }
    if (f->bad_lines > 0)
        hd__note(ctx,
                 "tuning cache '%s' is invalid in part: %zu bad line(s) ignored, the first "
                 "at line %zu: %s",
                 path, f->bad_lines, f->first_bad_line, f->first_problem);
    return HD_OK;
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

    hd_tune_file f;
    hd__tune_file_init(&f);
    hd_status s = load_for_context(ctx, path, &f);
    if (s != HD_OK) {
        hd__tune_file_free(&f);
        return s == HD_ERR_OUT_OF_MEMORY ? s : HD_OK;
    }
    hand_params(ctx, &f);
    drop_rejected_variants(ctx, &f, path);
    hd_tune_table *t = hd__tune_table_create(&f);
    if (t == NULL) {
        hd__tune_file_free(&f);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the tuning table");
    }
    ctx->tune = t;
    hd__plans_invalidate(ctx); /* plans may name the old records */
    return HD_OK;
}

void hd__tune_close(hd_context *ctx)
{
    if (ctx == NULL || ctx->tune == NULL)
        return;
    hd__tune_table_destroy(ctx->tune);
    ctx->tune = NULL;
    hd__plans_invalidate(ctx);
}

void hd__tune_disable(hd_context *ctx, hd_op op, const hd_shape *shape)
{
    hd_tune_record *r = ctx->tune != NULL
                            ? hd__tune_table_exact(ctx->tune, op, shape, ctx->gemm_precision)
                            : NULL;
    if (r != NULL) {
        r->disabled = true;
        hd__plans_invalidate(ctx); /* plans may name it */
    }
}

const hd_tune_record *hd__tune_exact(const hd_context *ctx, hd_op op, const hd_shape *shape)
{
    if (ctx->tune == NULL)
        return NULL;
    const hd_tune_record *r = hd__tune_table_exact(ctx->tune, op, shape, ctx->gemm_precision);
    return r != NULL && !r->disabled ? r : NULL;
}

const hd_tune_record *hd__tune_nearest(const hd_context *ctx, hd_op op, const hd_shape *shape,
                                       double *distance)
{
    return ctx->tune != NULL ? hd__tune_table_nearest(ctx->tune, op, shape, ctx->gemm_precision,
                                                      distance)
                             : NULL;
}

const hd_tune_record *hd__tune_nearest_timing(const hd_context *ctx, hd_op op,
                                              const hd_shape *shape, hd_backend b)
{
    return ctx->tune != NULL
               ? hd__tune_table_nearest_timing(ctx->tune, op, shape, ctx->gemm_precision, b)
               : NULL;
}

const hd_tune_calibration *hd__tune_calibration(const hd_context *ctx)
{
    return ctx->tune != NULL ? hd__tune_table_calibration(ctx->tune) : NULL;
}

const char *hd__tune_param(const hd_context *ctx, hd_backend b, const char *name)
{
    return ctx != NULL && ctx->tune != NULL ? hd__tune_table_param(ctx->tune, b, name) : NULL;
}
