#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/fault.h"
#include "dispatch/tools.h"

#ifdef HD_FAULT_INJECTION

void hd__fault_init(hd_context *ctx)
{
    hd_fault_spec *f = &ctx->fault;
    f->count = 0;
    const char *spec = getenv("HD_FAULT");
    if (spec == NULL)
        return;
    while (*spec != '\0' && f->count < HD_FAULT_MAX) {
        size_t len = strcspn(spec, ",");
        char item[64];
        bool taken = false;
        if (len < sizeof item) {
            memcpy(item, spec, len);
            item[len] = '\0';
            char *colon = strchr(item, ':');
            hd_backend b = HD_BACKEND_AUTO;
            if (colon != NULL && colon[1] != '\0' && strlen(colon + 1) < sizeof f->step[0]) {
                *colon = '\0';
                if (strcmp(item, "*") == 0 || hd__backend_from_name(item, &b)) {
                    f->backend[f->count] = b;
                    strcpy(f->step[f->count], colon + 1);
                    f->count++;
                    taken = true;
                }
            }
        }
        if (!taken) /* a test that misspells its fault must not pass without it */
            hd__note(ctx, "HD_FAULT item '%.*s' ignored: expected <backend or *>:<step>",
                     (int)(len < 64 ? len : 64), spec);
        spec += len;
        if (*spec == ',')
            spec++;
    }
}

bool hd__fault(hd_context *ctx, hd_backend b, const char *step)
{
    if (ctx == NULL)
        return false;
    const hd_fault_spec *f = &ctx->fault;
    for (int i = 0; i < f->count; i++) {
        /* "*": every backend but the last resort, which has no device to fail */
        bool who = f->backend[i] == b ||
                   (f->backend[i] == HD_BACKEND_AUTO && b != hd__registry_last_resort());
        if (who && strcmp(f->step[i], step) == 0) {
            hd__error(ctx, HD_ERR_DEVICE, "injected fault: backend '%s' fails at %s",
                      hd_backend_name(b), step);
            return true;
        }
    }
    return false;
}

#endif
