#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/env.h"
#include "core/error.h"
#include "core/op.h"
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

/* Whether (row, backend, shape) is new to p, which then holds it; a table that cannot grow
 * counts the call as a later one. */
static bool first_of_shape(hd_profile *p, int row, hd_backend b, const hd_shape *shape)
{
    const hd_shape none = {.dim = {0}};
    const hd_shape *key = shape != NULL ? shape : &none;
    for (size_t i = 0; i < p->seen_count; i++) {
        const hd_profile_shape *e = &p->seen[i];
        if (e->row == row && e->backend == b && e->shape.precision == key->precision &&
            (row == HD_PROFILE_ADAMW || hd__op_same_shape((hd_op)row, &e->shape, key)))
            return false;
    }
    if (p->seen_count == p->seen_capacity) {
        size_t capacity = p->seen_capacity > 0 ? 2 * p->seen_capacity : 64;
        hd_profile_shape *grown = realloc(p->seen, capacity * sizeof *grown);
        if (grown == NULL)
            return false;
        p->seen = grown;
        p->seen_capacity = capacity;
    }
    p->seen[p->seen_count++] = (hd_profile_shape){row, b, *key};
    return true;
}

void hd__profile_end(hd_context *ctx, int row, const hd_shape *shape, double begin,
                     hd_status status)
{
    hd_profile *p = ctx->profile;
    if (p == NULL || status != HD_OK)
        return;
    (void)hd_sync(ctx);
    hd_backend b = ctx->last_backend;
    double span = now_seconds() - begin;
    p->calls[row][b]++;
    if (first_of_shape(p, row, b, shape)) {
        p->shapes[row][b]++;
        p->first[row][b] += span;
    } else {
        p->seconds[row][b] += span;
    }
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
            "hd-dispatch profile (each call waited for; after the first call of each shape, "
            "%.3f s in all):\n",
            total);
    fprintf(stderr, "  %-24s %-14s %8s %12s %12s %6s %7s %12s\n", "operation", "backend", "calls",
            "total ms", "per call us", "share", "shapes", "first ms");
    for (int r = 0; r < HD_PROFILE_ROWS; r++)
        for (int b = 0; b < HD_BACKEND_COUNT; b++) {
            unsigned long later = p->calls[r][b] - p->shapes[r][b];
            if (p->calls[r][b] == 0)
                continue;
            fprintf(stderr, "  %-24s %-14s %8lu %12.3f %12.1f %5.1f%% %7lu %12.3f\n",
                    row_name(r), hd_backend_name((hd_backend)b), p->calls[r][b],
                    1e3 * p->seconds[r][b],
                    later > 0 ? 1e6 * p->seconds[r][b] / (double)later : 0.0,
                    total > 0.0 ? 100.0 * p->seconds[r][b] / total : 0.0, p->shapes[r][b],
                    1e3 * p->first[r][b]);
        }
    free(p->seen);
    free(p);
    ctx->profile = NULL;
}
