#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

hd_status hd__error(hd_context *ctx, hd_status status, const char *fmt, ...)
{
    if (ctx == NULL)
        return status;
    hd_report *r = hd__report(ctx);
    int n = snprintf(r->last_error, sizeof r->last_error, "%s: ", hd_status_str(status));
    if (n < 0 || (size_t)n >= sizeof r->last_error)
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->last_error + n, sizeof r->last_error - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void hd__note(hd_context *ctx, const char *fmt, ...)
{
    hd_report *r = ctx != NULL ? hd__report(ctx) : NULL;
    if (r == NULL || (r->log == NULL && !r->log_stderr))
        return;
    char text[HD_ERROR_CAPACITY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (r->log != NULL)
        r->log(r->log_user, text);
    if (r->log_stderr)
        fprintf(stderr, "hd-dispatch: note: %s\n", text);
}

void hd__error_append(hd_context *ctx, const char *text)
{
    if (ctx == NULL || text == NULL)
        return;
    hd_report *r = hd__report(ctx);
    size_t used = strlen(r->last_error);
    if (used + 1 < sizeof r->last_error)
        snprintf(r->last_error + used, sizeof r->last_error - used, "%s", text);
}

void hd__error_outputs_changed(hd_context *ctx)
{
    if (ctx != NULL)
        hd__report(ctx)->outputs_changed = true;
}

void hd__error_clear(hd_context *ctx)
{
    if (ctx != NULL)
        hd__report(ctx)->last_error[0] = '\0';
}

/* A failed hd_context_create() destroys its context, and with it the message; the message
 * is kept here instead, one per thread, as contexts are used by one thread at a time. */
static _Thread_local char create_error[HD_ERROR_CAPACITY];

void hd__error_keep_create(hd_status status, const char *detail)
{
    if (status == HD_OK)
        create_error[0] = '\0';
    else if (detail != NULL && detail[0] != '\0')
        snprintf(create_error, sizeof create_error, "%s", detail);
    else
        snprintf(create_error, sizeof create_error, "%s: hd_context_create failed",
                 hd_status_str(status));
}

const char *hd_context_last_error(const hd_context *ctx)
{
    return ctx == NULL ? create_error : hd__report_const(ctx)->last_error;
}
