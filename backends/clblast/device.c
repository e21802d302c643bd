/*
 * The process-wide side of CLBlast: the lock, and per OpenCL device the parameters CLBlast runs
 * with now and the verdicts on every set this process checked. CLBlast keys its overrides by
 * device, not by context, so two contexts on one device share this record.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/clblast/clblast.h"
#include "core/error.h"

static pthread_mutex_t clblast_mutex = PTHREAD_MUTEX_INITIALIZER;

void hd__clblast_lock(void)
{
    pthread_mutex_lock(&clblast_mutex);
}

void hd__clblast_unlock(void)
{
    pthread_mutex_unlock(&clblast_mutex);
}

typedef struct verdict {
    char variant[HD_CLBLAST_VARIANT_MAX]; /* the complete set, formatted */
    hd_status status;                     /* HD_OK: verified; else why it is never used */
} verdict;

typedef struct device_record {
    cl_device_id id;
    bool overridden;           /* current is what CLBlast runs with */
    hd_clblast_params current; /* complete once overridden */
    verdict *verdicts;         /* grows; kept for the process's life */
    size_t verdict_count, verdict_cap;
} device_record;

#define MAX_DEVICES 16
static device_record records[MAX_DEVICES];

static device_record *record_of(cl_device_id id)
{
    for (size_t i = 0; i < MAX_DEVICES; i++) {
        if (records[i].id == id)
            return &records[i];
        if (records[i].id == NULL) {
            records[i].id = id;
            return &records[i];
        }
    }
    return NULL;
}

static const verdict *find_verdict(const device_record *rec, const char *variant)
{
    for (size_t i = 0; i < rec->verdict_count; i++)
        if (strcmp(rec->verdicts[i].variant, variant) == 0)
            return &rec->verdicts[i];
    return NULL;
}

static void add_verdict(device_record *rec, const char *variant, hd_status status)
{
    if (rec->verdict_count == rec->verdict_cap) {
        size_t cap = rec->verdict_cap ? 2 * rec->verdict_cap : 16;
        verdict *v = realloc(rec->verdicts, cap * sizeof *v);
        if (v == NULL)
            return; /* the set is checked again next time: slower, still correct */
        rec->verdicts = v;
        rec->verdict_cap = cap;
    }
    verdict *v = &rec->verdicts[rec->verdict_count++];
    strncpy(v->variant, variant, sizeof v->variant - 1);
    v->variant[sizeof v->variant - 1] = '\0';
    v->status = status;
}

hd_status hd__clblast_device_query(hd_context *ctx, hd_cl_runtime *rt, hd_clblast_device *out)
{
    memset(out, 0, sizeof *out);
    cl_device_id id = hd__cl_device(rt);
    cl_ulong local = 0;
    size_t items[3] = {0, 0, 0};
    cl_int err = clGetDeviceInfo(id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof out->max_group_size,
                              &out->max_group_size, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(id, CL_DEVICE_VENDOR, sizeof out->vendor - 1, out->vendor, NULL);
    if (err != CL_SUCCESS)
        return hd__cl_error(ctx, err, "clGetDeviceInfo for CLBlast's parameter limits");
    out->id = id;
    out->is_gpu = hd__cl_device_is_gpu(rt);
    out->local_mem_bytes = (size_t)local;
    out->max_item[0] = items[0];
    out->max_item[1] = items[1];
    strncpy(out->name, hd__cl_device_name(rt), sizeof out->name - 1);
    return HD_OK;
}

/* Hands every present kernel of p to CLBlast. */
static hd_status override(hd_context *ctx, const hd_clblast_device *dev, const hd_clblast_params *p)
{
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        if (!p->has[k])
            continue;
        const char *names[16];
        size_t values[16];
        size_t n = hd__clblast_kernel_fields((hd_clblast_kernel)k, names, values, p);
        CLBlastStatusCode code =
            CLBlastOverrideParameters(dev->id, hd__clblast_kernel_name((hd_clblast_kernel)k),
                                      CLBlastPrecisionSingle, n, names, values);
        if (code != CLBlastSuccess)
            return hd__clblast_error(ctx, code, hd__clblast_kernel_name((hd_clblast_kernel)k));
    }
    return HD_OK;
}

/* Makes CLBlast run with the complete set p on the device, unless it already does. */
static hd_status switch_to(hd_context *ctx, const hd_clblast_device *dev, device_record *rec,
                           const hd_clblast_params *p)
{
    if (rec->overridden && hd__clblast_params_equal(&rec->current, p))
        return HD_OK;
    hd_status s = override(ctx, dev, p);
    if (s != HD_OK) {
        /* Part of p may have gone in: put the whole previous set back. */
        if (rec->overridden && override(NULL, dev, &rec->current) != HD_OK)
            rec->overridden = false;
        return s;
    }
    rec->current = *p;
    rec->overridden = true;
    return HD_OK;
}

/* Whether a verification's outcome is the parameter set's own (it passed, or it cannot run
 * here: refused, failed to build, unsupported, wrong): device failures may be passing. */
static bool set_own_verdict(hd_status s)
{
    return s == HD_OK || s == HD_ERR_INVALID_ARGUMENT || s == HD_ERR_BUILD ||
           s == HD_ERR_UNSUPPORTED || s == HD_ERR_INTERNAL;
}

/* The verdict on the complete set p, checking it now if this process has not: legality,
 * override, a run through each path against the reference. The device's previous parameters
 * are back in place when it returns, whatever the verdict. */
static hd_status check_set(hd_clblast_state *st, hd_context *ctx, device_record *rec,
                           const hd_clblast_params *p)
{
    char variant[HD_CLBLAST_VARIANT_MAX];
    hd__clblast_params_format(p, variant, sizeof variant);
    const verdict *v = find_verdict(rec, variant);
    if (v != NULL) {
        if (v->status != HD_OK)
            return hd__error(ctx, v->status,
                             "CLBlast parameter set was rejected before on this device: %s",
                             variant);
        return HD_OK;
    }

    char why[200];
    if (!hd__clblast_params_legal(p, &st->dev, why, sizeof why)) {
        add_verdict(rec, variant, HD_ERR_INVALID_ARGUMENT);
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "illegal CLBlast parameter set (%s): %s",
                         why, variant);
    }

    bool had = rec->overridden;
    hd_clblast_params previous = rec->current;
    hd_clblast_params probe;
    hd__clblast_verify_params(p, &probe);
    hd_status s = switch_to(ctx, &st->dev, rec, &probe);
    if (s == HD_OK)
        s = hd__clblast_check_results(st, ctx, &probe);
    if (had) {
        hd_status back = switch_to(NULL, &st->dev, rec, &previous);
        if (back != HD_OK && s == HD_OK)
            s = hd__error(ctx, back, "could not restore CLBlast's previous parameters");
    }
    if (set_own_verdict(s))
        add_verdict(rec, variant, s);
    if (s != HD_OK) {
        hd__error_append(ctx, " (parameter set: ");
        hd__error_append(ctx, variant);
        hd__error_append(ctx, ")");
    }
    return s;
}

/* The device-level record of the tuning cache: the CLBlast parameters that won most GEMM cases
 * on this device become the base set, laid over it when the context opens the cache. They are
 * verified like any set when a call first needs them; one that fails is dropped for the
 * shipped values. */
void hd__clblast_take_cached_base(hd_clblast_state *st, hd_context *ctx, const char *value)
{
    hd_clblast_params p;
    if (hd__clblast_params_parse(ctx, value, &p) == HD_OK)
        hd__clblast_params_merge(&st->base, &p);
    else
        hd__note(ctx, "tuning cache: CLBlast parameters not used: %s", hd_context_last_error(ctx));
    hd__error_clear(ctx);
}

hd_status hd__clblast_prepare(hd_clblast_state *st, hd_context *ctx, const char *variant)
{
    device_record *rec = record_of(st->dev.id);
    if (rec == NULL)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "CLBlast: more than %d OpenCL devices in use",
                         MAX_DEVICES);
    hd_clblast_params want = st->base;
    if (variant != NULL && variant[0] != '\0') {
        hd_clblast_params over;
        hd_status s = hd__clblast_params_parse(ctx, variant, &over);
        if (s != HD_OK)
            return s;
        hd__clblast_params_merge(&want, &over);
    }
    if (!(rec->overridden && hd__clblast_params_equal(&rec->current, &want))) {
        hd_status s = check_set(st, ctx, rec, &want);
        hd_clblast_params shipped;
        hd__clblast_params_shipped(&st->dev, &shipped);
        if (s != HD_OK && set_own_verdict(s) && (variant == NULL || variant[0] == '\0') &&
            !hd__clblast_params_equal(&st->base, &shipped)) {
            /* A known-good set that fails here for its own fault (another driver, say) is
             * dropped for good; a passing device failure (out of memory) keeps it. */
            st->base = shipped;
            return hd__clblast_prepare(st, ctx, NULL);
        }
        if (s != HD_OK)
            return s;
    }
    return switch_to(ctx, &st->dev, rec, &want);
}

hd_status hd__clblast_params_verify(hd_clblast_state *st, hd_context *ctx,
                                    const hd_clblast_params *p)
{
    hd_clblast_params want = st->base;
    hd__clblast_params_merge(&want, p);
    hd__clblast_lock();
    device_record *rec = record_of(st->dev.id);
    hd_status s = rec != NULL ? check_set(st, ctx, rec, &want)
                              : hd__error(ctx, HD_ERR_UNSUPPORTED, "CLBlast: too many devices");
    hd__clblast_unlock();
    return s;
}

hd_status hd__clblast_params_apply(hd_clblast_state *st, hd_context *ctx,
                                   const hd_clblast_params *p)
{
    hd_status s = hd__clblast_params_verify(st, ctx, p);
    if (s == HD_OK)
        hd__clblast_params_merge(&st->base, p);
    return s;
}
