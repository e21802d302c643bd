/* The tuning table of a context. */
#include "dispatch/context.h"

hd_status hd__tune_open(hd_context *ctx, const hd_context_options *opt)
{
    (void)ctx;
    (void)opt;
    return HD_OK;
}

void hd__tune_close(hd_context *ctx)
{
    (void)ctx;
}
