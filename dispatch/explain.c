/* hd_context_explain(): the selection of one (op, shape), in words. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/select.h"
#include "dispatch/tools.h"
#include "dispatch/tuning.h"

static const char *rule_name(hd_select_rule r)
{
    switch (r) {
    case HD_SELECT_FORCED:
        return "forced";
    case HD_SELECT_TUNED:
        return "tuned";
    case HD_SELECT_NEAREST:
        return "nearest";
    case HD_SELECT_COST:
        return "cost model";
    case HD_SELECT_DEFAULT:
        return "default";
    case HD_SELECT_NONE:
        break;
    }
    return "none";
}

typedef struct out {
    char *buf;
    size_t size, len;
} out;

static void say(out *o, const char *fmt, ...) HD_PRINTF(2, 3);

static void say(out *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->size - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len = o->len + (size_t)n < o->size ? o->len + (size_t)n : o->size - 1;
}

hd_status hd_context_explain(hd_context *ctx, hd_op op, const size_t dims[4], char *buf,
                             size_t size)
{
    if (ctx == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd__error_clear(ctx);
    if (dims == NULL || buf == NULL || size == 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "hd_context_explain: dims or buf is NULL, or size is 0");
    if ((unsigned)op >= HD_OP_COUNT)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "hd_context_explain: unknown operation %d",
                         (int)op);
    /* The op's dims, then (an op with transposes and a dim to spare) the transposes. */
    const hd_op_desc *d = hd__op(op);
    hd_shape shape = {.dim = {0}};
    for (int i = 0; i < d->dims; i++)
        shape.dim[i] = dims[i];
    if (d->transposes && d->dims < HD_OP_DIM_MAX) {
        if (dims[d->dims] > 3)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "hd_context_explain: %s dims[%d] holds the transposes (0-3)",
                             hd_op_name(op), d->dims);
        shape.trans_a = (dims[d->dims] & 1) != 0;
        shape.trans_b = (dims[d->dims] & 2) != 0;
    }
    return hd__explain_shape(ctx, op, &shape, buf, size);
}

hd_status hd__explain_shape(hd_context *ctx, hd_op op, const hd_shape *shape, char *buf,
                            size_t size)
{
    hd_plan plan;
    hd__select(ctx, op, shape, NULL, &plan);
    char key[96];
    hd__op_text(op, shape, HD_TEXT_KEY, key, sizeof key);
    out o = {buf, size, 0};
    buf[0] = '\0';
    say(&o, "%s: ", key);
    if (plan.count == 0) {
        say(&o, "no backend of this context takes it\n");
        return HD_OK;
    }
    char reason[512];
    hd__plan_reason(&plan, reason, sizeof reason);
    say(&o, "chosen %s by rule '%s': %s\n", hd_backend_name(plan.order[0]), rule_name(plan.rule),
        reason);
    if (plan.variant[0] != NULL)
        say(&o, "  variant: %s\n", plan.variant[0]);
    say(&o, "  candidates in order:");
    for (int i = 0; i < plan.count; i++) {
        hd_backend b = plan.order[i];
        say(&o, " %s", hd_backend_name(b));
        if (plan.model_us[b] >= 0.0)
            say(&o, " (model %.2f us)", plan.model_us[b]);
    }
    say(&o, "\n");
    for (int b = HD_BACKEND_FIRST; b < HD_BACKEND_COUNT; b++) {
        bool present = ctx->backends[b] != NULL || ctx->composite[b] != NULL;
        if (present && !hd__backend_takes(ctx, (hd_backend)b, op, shape))
            say(&o, "  %s: %s\n", hd_backend_name((hd_backend)b),
                ctx->backend_unhealthy[b] ? "unhealthy (its device failed)"
                                          : "does not take this shape");
    }
    say(&o, "  tuning cache: %s%s\n", ctx->tune_cache_path[0] ? ctx->tune_cache_path : "none",
        ctx->tune != NULL ? "" : " (not loaded)");
    return HD_OK;
}
