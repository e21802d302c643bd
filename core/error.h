/* The context's error message: every failure leaves one sentence of detail on the context. */
#ifndef HD_CORE_ERROR_H
#define HD_CORE_ERROR_H

#include <stdbool.h>

#include <hd/dispatch.h>

#if defined(__GNUC__)
#define HD_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define HD_PRINTF(fmt, args)
#endif

#define HD_ERROR_CAPACITY 4096

/* What every layer reports through on a context: its last error and where its notes go.
 * struct hd_context (dispatch/context.h) begins with one, so that the code under dispatch/
 * reports on a context without knowing anything else of it. */
typedef struct hd_report {
    char last_error[HD_ERROR_CAPACITY];
    void (*log)(void *user, const char *message); /* notes (hd__note); NULL: none */
    void *log_user;
    bool log_stderr;      /* $HD_LOG=1 */
    bool outputs_changed; /* the running slot failed after writing an output */
} hd_report;

static inline hd_report *hd__report(hd_context *ctx)
{
    return (hd_report *)(void *)ctx;
}
static inline const hd_report *hd__report_const(const hd_context *ctx)
{
    return (const hd_report *)(const void *)ctx;
}

/* Records "<status text>: <formatted detail>" as the context's last error and returns status,
 * so that failures read `return hd__error(ctx, HD_ERR_..., "...", ...);`. ctx may be NULL. */
hd_status hd__error(hd_context *ctx, hd_status status, const char *fmt, ...) HD_PRINTF(3, 4);

/* A note: one sentence for the context's log callback (and stderr with $HD_LOG=1); never
 * the last error. Formatting is skipped when nobody listens. ctx may be NULL. */
void hd__note(hd_context *ctx, const char *fmt, ...) HD_PRINTF(2, 3);

/* Appends further detail (a build log, say) to the last error, truncating to the buffer. */
void hd__error_append(hd_context *ctx, const char *text);

/* Said by a backend slot that fails after it has begun writing the call's outputs (a device
 * failing between its launches). Where the call reads what it writes (accumulating, in place),
 * no other backend may run it then, since it would start from contents that are no longer the
 * caller's; otherwise the next backend overwrites them as usual. */
void hd__error_outputs_changed(hd_context *ctx);

/* Clears the last error: called at the start of every public operation. */
void hd__error_clear(hd_context *ctx);

/* Records the outcome of hd_context_create() for hd_context_last_error(NULL): HD_OK clears
 * it; an error keeps detail (the dying context's message; NULL or "": the status text). */
void hd__error_keep_create(hd_status status, const char *detail);

#endif
