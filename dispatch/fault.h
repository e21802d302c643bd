/*
 * Test-only fault injection, compiled only into the internal library that the tests link
 * (HD_FAULT_INJECTION), never into libdispatch.so or the installed tools.
 * $HD_FAULT="<backend>:<step>[,<backend>:<step>...]" (read once, at context creation) makes the
 * named backend fail at the named step with HD_ERR_DEVICE, as if its device had failed there,
 * so that tests can prove the fallback of every operation. Steps the dispatcher checks itself:
 * "probe" (the backend is not available), "probe-device" (its probe fails as a failing device
 * would), "migrate" (moving inputs to its place), "launch" (just before its op slot or its
 * scale hook), and "*:open" (opening the OpenCL device fails). Device backends may check
 * further steps of their own, e.g. "build", with hd__fault(). A backend of "*" matches all but
 * the last resort (the CPU). An item it cannot read is ignored with a note; a step no one
 * checks is simply never met.
 */
#ifndef HD_DISPATCH_FAULT_H
#define HD_DISPATCH_FAULT_H

#include <stdbool.h>

#include <hd/dispatch.h>

#define HD_FAULT_MAX 4

typedef struct hd_fault_spec {
    hd_backend backend[HD_FAULT_MAX]; /* HD_BACKEND_AUTO: "*" */
    char step[HD_FAULT_MAX][16];
    int count;
} hd_fault_spec;

#ifdef HD_FAULT_INJECTION
/* Reads $HD_FAULT into ctx. */
void hd__fault_init(hd_context *ctx);

/* Whether b must fail at step; if so, records "injected fault: <backend> at <step>" as the
 * context's HD_ERR_DEVICE message, so the caller just returns HD_ERR_DEVICE. */
bool hd__fault(hd_context *ctx, hd_backend b, const char *step);
#else
/* The installed library has no fault injection: $HD_FAULT is not even read. Macros, not
 * inline functions: an unoptimized build would emit those, and the library's symbols must
 * show no fault injection (tests/check_layers.sh). */
#define hd__fault_init(ctx)     ((void)(ctx))
#define hd__fault(ctx, b, step) ((void)(ctx), (void)(b), (void)(step), false)
#endif

#endif
