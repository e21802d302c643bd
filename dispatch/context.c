/* Context lifecycle, forced backends and the environment overrides. */
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"
#include "dispatch/context.h"
#include "dispatch/memo.h"
#include "dispatch/profile.h"
#include "dispatch/tools.h"
#include "dispatch/tuning.h"

/* More threads than any machine this runs on has cores: a larger $HD_THREADS is a typo. */
#define HD_MAX_CPU_THREADS 4096

void hd_context_options_init(hd_context_options *opt)
{
    if (opt != NULL)
        memset(opt, 0, sizeof *opt);
}

static const char *nonempty(const char *s)
{
    return s != NULL && s[0] != '\0' ? s : NULL;
}

static const char *backend_name_of(int i)
{
    return hd_backend_name((hd_backend)i);
}

static const char *op_name_of(int i)
{
    return hd_op_name((hd_op)i);
}

/* The error for a name of the specification that names nothing, with every name there is. */
static hd_status unknown_name(hd_context *ctx, const char *spec, const char *kind, const char *name,
                              const char *(*name_of)(int), int count)
{
    hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
              "backend specification '%s': unknown %s '%s' (expected one of", spec, kind, name);
    for (int i = 0; i < count; i++) {
        hd__error_append(ctx, i == 0 ? " " : ", ");
        hd__error_append(ctx, name_of(i));
    }
    hd__error_append(ctx, ")");
    return HD_ERR_INVALID_ARGUMENT;
}

/* Splits "op=backend,op=backend" (or a lone backend name for every op) at commas. Spaces
 * around names are not allowed: the specification is short and exact. */
hd_status hd__parse_backend_spec(hd_context *ctx, const char *spec, hd_backend forced[HD_OP_COUNT])
{
    hd_backend parsed[HD_OP_COUNT];
    for (int i = 0; i < HD_OP_COUNT; i++)
        parsed[i] = forced[i];

    const char *p = spec;
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "backend specification '%s': empty or overlong item", spec);
        memcpy(item, p, len);
        item[len] = '\0';

        char *eq = strchr(item, '=');
        hd_backend b;
        if (eq == NULL) {
            if (!hd__backend_from_name(item, &b))
                return unknown_name(ctx, spec, "backend", item, backend_name_of, HD_BACKEND_COUNT);
            for (int i = 0; i < HD_OP_COUNT; i++)
                parsed[i] = b;
        } else {
            *eq = '\0';
            hd_op op;
            if (!hd__op_from_name(item, &op))
                return unknown_name(ctx, spec, "operation", item, op_name_of, HD_OP_COUNT);
            if (!hd__backend_from_name(eq + 1, &b))
                return unknown_name(ctx, spec, "backend", eq + 1, backend_name_of,
                                    HD_BACKEND_COUNT);
            parsed[op] = b;
        }
        p += len;
        if (*p == ',' && *++p == '\0') /* "cpu,": an item missing, not a finished list */
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "backend specification '%s': empty item after the last comma", spec);
    }
    for (int i = 0; i < HD_OP_COUNT; i++)
        forced[i] = parsed[i];
    return HD_OK;
}

/* The CPU backend's thread count: the option, else $HD_THREADS, else 0 (the backend's
 * default). A typo in the variable is an error rather than a silent default; blanks around
 * the number are no typo, as around a switch's value (core/env.h). */
static hd_status cpu_threads_requested(hd_context *ctx, const hd_context_options *opt)
{
    if (opt->threads < 0 || opt->threads > HD_MAX_CPU_THREADS)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "threads %d: expected a number of threads from 0 (default) to %d",
                         opt->threads, HD_MAX_CPU_THREADS);
    ctx->cpu_threads = (size_t)opt->threads;
    const char *env = getenv("HD_THREADS");
    if (ctx->cpu_threads > 0 || env == NULL)
        return HD_OK;
    size_t len;
    const char *digits = hd__env_trim(env, &len);
    if (len == 0)
        return HD_OK;
    bool number = strspn(digits, "0123456789") == len;
    size_t n = 0;
    for (size_t i = 0; number && i < len && n <= HD_MAX_CPU_THREADS; i++)
        n = 10 * n + (size_t)(digits[i] - '0');
    if (!number || n > HD_MAX_CPU_THREADS)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "HD_THREADS='%s': expected a number of threads from 0 (default) to %d",
                         env, HD_MAX_CPU_THREADS);
    ctx->cpu_threads = n;
    return HD_OK;
}

static hd_status open_device(hd_context *ctx, const hd_context_options *opt)
{
    const hd_device_ops *dev = hd__registry_device();
    /* read even where there is no device to disable: a bad value is worth its note anywhere */
    bool env_off = hd__env_bool(ctx, "HD_DISABLE_OPENCL", false);
    if (dev == NULL || opt->disable_opencl || env_off)
        return HD_OK;
    const char *spec = nonempty(opt->device) ? opt->device : nonempty(getenv("HD_DEVICE"));
    const char *runtime = nonempty(opt->runtime);
    bool fail_probe = hd__fault(ctx, HD_BACKEND_AUTO, "cuda-probe");
    hd__error_clear(ctx);
    hd_status s = hd__fault(ctx, HD_BACKEND_AUTO, "open")
                      ? HD_ERR_DEVICE
                      : dev->open(ctx, spec, runtime, fail_probe, &ctx->rt);
    if (s != HD_OK && s != HD_ERR_OUT_OF_MEMORY && s != HD_ERR_INVALID_ARGUMENT && spec == NULL) {
        /* no OpenCL here, or a device that cannot be used now (another process holds it in
         * exclusive mode, its driver fails): the CPU serves alone, which is worth a note, not
         * an error. A device the user named is an error: they asked for that one. */
        hd__note(ctx, "no usable OpenCL device, the CPU serves alone: %s", ctx->report.last_error);
        hd__error_clear(ctx);
        return HD_OK;
    }
    if (s == HD_OK)
        ctx->dev = dev;
    /* pinned host copies: on a GPU unless $HD_PINNED is off; elsewhere only when it is on */
    ctx->pinned_host = s == HD_OK && dev->host_alloc != NULL &&
                       hd__env_bool(ctx, "HD_PINNED", dev->is_gpu(ctx->rt));
    return s;
}

/* The requested GEMM precision (options, then $HD_GEMM_PRECISION), lowered to fp32 with a note
 * where no backend of the context runs it. */
static hd_status choose_precision(hd_context *ctx, const hd_context_options *opt)
{
    hd_precision want = opt->gemm_precision;
    const char *env = nonempty(getenv("HD_GEMM_PRECISION"));
    if ((unsigned)want >= HD_PRECISION_COUNT)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "gemm_precision %d is not a precision",
                         (int)want);
    if (want == HD_PRECISION_FP32 && env != NULL && !hd__precision_from_name(env, &want))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "HD_GEMM_PRECISION='%.40s' is not fp32, fp32x3 or tf32", env);
    ctx->gemm_precision = HD_PRECISION_FP32;
    if (want == HD_PRECISION_FP32)
        return HD_OK;
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        const hd_backend_impl *impl = ctx->backends[b];
        if (impl != NULL && impl->runs_precision != NULL &&
            impl->runs_precision(ctx->backend_state[b], want)) {
            ctx->gemm_precision = want;
            return HD_OK;
        }
    }
    hd__note(ctx,
             "GEMM precision %s needs tensor cores (NVIDIA sm_80+) that this context "
             "lacks; GEMMs run in fp32",
             hd_precision_name(want));
    return HD_OK;
}

hd_status hd_context_create(hd_context **out, const hd_context_options *opt)
{
    if (out == NULL) {
        hd__error_keep_create(HD_ERR_INVALID_ARGUMENT,
                              "invalid argument: hd_context_create: context pointer is NULL");
        return HD_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    hd_context_options defaults;
    if (opt == NULL) {
        hd_context_options_init(&defaults);
        opt = &defaults;
    }

    hd_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL) {
        hd__error_keep_create(HD_ERR_OUT_OF_MEMORY, NULL);
        return HD_ERR_OUT_OF_MEMORY;
    }

    ctx->report.log = opt->log;
    ctx->report.log_user = opt->log_user;
    ctx->report.log_stderr = hd__env_bool(ctx, "HD_LOG", false);
    hd__fault_init(ctx);
    ctx->deterministic = opt->deterministic || hd__env_bool(ctx, "HD_DETERMINISTIC", false);
    hd_status s = hd__profile_init(ctx);
    if (s == HD_OK)
        s = cpu_threads_requested(ctx, opt);
    if (s == HD_OK)
        s = open_device(ctx, opt);
    if (s == HD_OK)
        s = hd__backends_probe(ctx);
    if (s == HD_OK)
        s = choose_precision(ctx, opt);
    if (s == HD_OK) {
        const char *spec = nonempty(opt->backends) ? opt->backends : nonempty(getenv("HD_BACKEND"));
        if (spec != NULL)
            s = hd__parse_backend_spec(ctx, spec, ctx->forced);
    }
    if (s == HD_OK)
        s = hd__tune_open(ctx, opt);
    if (s == HD_OK && opt->warmup)
        s = hd_context_warmup(ctx);
    hd__error_keep_create(s, ctx->report.last_error);
    if (s != HD_OK) {
        hd_context_destroy(ctx);
        return s;
    }
    hd__error_clear(ctx); /* a context that works has no error to tell */
    *out = ctx;
    return HD_OK;
}

void hd_context_destroy(hd_context *ctx)
{
    if (ctx == NULL)
        return;
    hd__profile_finish(ctx);
    hd__tune_close(ctx);
    hd__plans_free(ctx);
    hd__backends_destroy(ctx);
    if (ctx->dev != NULL)
        ctx->dev->close(ctx->rt);
    free(ctx);
}

hd_precision hd_context_gemm_precision(const hd_context *ctx)
{
    return ctx != NULL ? ctx->gemm_precision : HD_PRECISION_FP32;
}

bool hd_context_deterministic(const hd_context *ctx)
{
    return ctx != NULL && ctx->deterministic;
}

int hd_context_cpu_threads(const hd_context *ctx)
{
    return ctx == NULL || ctx->backends[HD_BACKEND_CPU] == NULL ? 0 : (int)ctx->cpu_threads;
}

const char *hd_context_device_name(const hd_context *ctx)
{
    if (ctx != NULL && ctx->dev != NULL)
        return ctx->dev->name(ctx->rt);
    return "none";
}

const char *hd_context_device_runtime(const hd_context *ctx)
{
    if (ctx != NULL && ctx->dev != NULL)
        return ctx->dev->runtime(ctx->rt);
    return "none";
}

bool hd__backend_usable(const hd_context *ctx, hd_backend b)
{
    if ((unsigned)b >= HD_BACKEND_COUNT || ctx->backend_unhealthy[b])
        return false;
    const hd_composite *plan = ctx->composite[b];
    if (plan != NULL)
        return hd__backend_usable(ctx, plan->product) && hd__backend_usable(ctx, plan->epilogue);
    return ctx->backends[b] != NULL;
}

bool hd_context_has_backend(const hd_context *ctx, hd_backend b)
{
    return ctx != NULL && b != HD_BACKEND_AUTO && hd__backend_usable(ctx, b);
}

void hd__backend_mark_unhealthy(hd_context *ctx, hd_backend b)
{
    /* the last resort, on the host, has no device to fail: it stays */
    if ((unsigned)b < HD_BACKEND_COUNT && b != HD_BACKEND_AUTO && b != hd__registry_last_resort()) {
        ctx->backend_unhealthy[b] = true;
        hd__plans_invalidate(ctx);
    }
}

hd_status hd_context_set_backend(hd_context *ctx, hd_op op, hd_backend b)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if ((unsigned)op >= HD_OP_COUNT)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "unknown operation %d", (int)op);
    if ((unsigned)b >= HD_BACKEND_COUNT)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)b);
    if (b != HD_BACKEND_AUTO && !hd__backend_usable(ctx, b))
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "backend '%s' is not available in this context", hd_backend_name(b));
    ctx->forced[op] = b;
    hd__plans_invalidate(ctx);
    return HD_OK;
}

hd_status hd__backend_set_params(hd_context *ctx, hd_backend b, const char *name,
                                 const char *value)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if (name == NULL || value == NULL)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "a device parameter set needs a name and a value");
    if ((unsigned)b >= HD_BACKEND_COUNT || ctx->composite[b] != NULL || b == HD_BACKEND_AUTO ||
        !hd__backend_usable(ctx, b))
        return hd__error(ctx, HD_ERR_BACKEND_UNAVAILABLE,
                         "no backend '%s' in this context to set parameters of",
                         (unsigned)b < HD_BACKEND_COUNT ? hd_backend_name(b) : "?");
    const hd_backend_impl *impl = ctx->backends[b];
    if (impl->set_params == NULL)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "backend '%s' has no device parameters",
                         hd_backend_name(b));
    hd_status s = impl->set_params(ctx->backend_state[b], ctx, name, value);
    if (s == HD_OK)
        hd__plans_invalidate(ctx); /* a plan's estimates may rest on the old set */
    return s;
}

hd_backend hd__forced_backend(const hd_context *ctx, hd_op op)
{
    return (unsigned)op < HD_OP_COUNT ? ctx->forced[op] : HD_BACKEND_AUTO;
}

hd_backend hd_context_last_backend(const hd_context *ctx)
{
    return ctx == NULL ? HD_BACKEND_AUTO : ctx->last_backend;
}

hd_status hd_context_warmup(hd_context *ctx)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        if (!hd__backend_usable(ctx, (hd_backend)b) || ctx->backends[b] == NULL ||
            ctx->backends[b]->warmup == NULL)
            continue;
        hd_status s = ctx->backends[b]->warmup(ctx->backend_state[b], ctx);
        if (s != HD_OK)
            return s;
    }
    return hd_sync(ctx);
}

hd_status hd_sync(hd_context *ctx)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if (ctx->dev != NULL)
        return ctx->dev->finish(ctx->rt, ctx);
    return HD_OK;
}
