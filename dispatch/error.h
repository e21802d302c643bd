/* The context's error message: every failure leaves one sentence of detail on the context. */
#ifndef HD_DISPATCH_ERROR_H
#define HD_DISPATCH_ERROR_H

#include <hd/dispatch.h>

#if defined(__GNUC__)
#define HD_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define HD_PRINTF(fmt, args)
#endif

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
