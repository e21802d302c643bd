#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/env.h"
#include "core/error.h"
#include "dispatch/context.h"
#include "dispatch/profile.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

hd_status hd__profile_init(hd_context *ctx)
{
    ctx->profile = NULL;
    if (!hd__env_bool(ctx, "HD_PROFILE", false))
        return HD_OK;
    ctx->profile = calloc(1, sizeof *ctx->profile);
    return ctx->profile != NULL
               ? HD_OK
               : hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the profile ($HD_PROFILE)");
}

double hd__profile_begin(hd_context *ctx)
{
    if (ctx->profile == NULL)
        return 0.0;
    (void)hd_sync(ctx); /* a late error stays for the call that waits next */
    return now_seconds();
}

void hd__profile_end(hd_context *ctx, int row, double begin, hd_status status)
{
    hd_profile *p = ctx->profile;
    if (p == NULL || status != HD_OK)
        return;
    (void)hd_sync(ctx);
    hd_backend b = ctx->last_backend;
    double span = now_seconds() - begin;
    if (p->calls[row][b]++ == 0)
        p->first[row][b] = span;
    else
        p->seconds[row][b] += span;
}

static const char *row_name(int row)
{
    return row == HD_PROFILE_ADAMW ? "adamw" : hd_op_name((hd_op)row);
}

void hd__profile_finish(hd_context *ctx)
{
    hd_profile *p = ctx->profile;
    if (p == NULL)
        return;
    double total = 0.0;
    for (int r = 0; r < HD_PROFILE_ROWS; r++)
        for (int b = 0; b < HD_BACKEND_COUNT; b++)
            total += p->seconds[r][b];
    fprintf(stderr,
            "hd-dispatch profile (each call waited for; after the first calls, %.3f s in all):\n",
            total);
    fprintf(stderr, "  %-24s %-14s %8s %12s %12s %6s %12s\n", "operation", "backend", "calls",
            "total ms", "per call us", "share", "first ms");
    for (int r = 0; r < HD_PROFILE_ROWS; r++)
        for (int b = 0; b < HD_BACKEND_COUNT; b++) {
            unsigned long later = p->calls[r][b] > 0 ? p->calls[r][b] - 1 : 0;
            if (p->calls[r][b] == 0)
                continue;
            fprintf(stderr, "  %-24s %-14s %8lu %12.3f %12.1f %5.1f%% %12.3f\n", row_name(r),
                    hd_backend_name((hd_backend)b), p->calls[r][b], 1e3 * p->seconds[r][b],
                    later > 0 ? 1e6 * p->seconds[r][b] / (double)later : 0.0,
                    total > 0.0 ? 100.0 * p->seconds[r][b] / total : 0.0, 1e3 * p->first[r][b]);
        }
    free(p);
    ctx->profile = NULL;
}
