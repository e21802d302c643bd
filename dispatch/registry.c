/* The one table of backends, in the order the dispatcher falls back through when nothing
 * else decides: the fused kernels, CLBlast, the hybrid plan, and the CPU last, which always
 * works. */
#include <stddef.h>

#include "dispatch/context.h"
#include "dispatch/error.h"

static const hd_backend_impl *const registry[] = {
#ifdef HD_HAVE_OPENCL
    &hd__backend_fused,
#endif
#ifdef HD_HAVE_CLBLAST
    &hd__backend_clblast,
    &hd__backend_clblast_fused,
#endif
    &hd__backend_cpu,
};

hd_status hd__registry_probe(hd_context *ctx)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        const hd_backend_impl *impl = registry[i];
        void *state = NULL;
        if (hd__fault(ctx, impl->id, "probe"))
            continue; /* as if the device had failed while probing: the message stays */
        hd_status s = impl->probe(ctx, &state);
        if (s == HD_ERR_BACKEND_UNAVAILABLE)
            continue; /* not on this machine: the message stays in last_error */
        if (s != HD_OK)
            return s;
        ctx->backends[impl->id] = impl;
        ctx->backend_state[impl->id] = state;
    }
    return HD_OK;
}

void hd__registry_destroy(hd_context *ctx)
{
    /* Reverse order: the hybrid plan borrows the states of the backends before it. */
    for (int b = HD_BACKEND_COUNT - 1; b >= 0; b--) {
        const hd_backend_impl *impl = ctx->backends[b];
        if (impl != NULL && impl->destroy != NULL)
            impl->destroy(ctx->backend_state[b]);
        ctx->backends[b] = NULL;
        ctx->backend_state[b] = NULL;
    }
}

const hd_backend_impl *const *hd__registry_list(size_t *count)
{
    *count = sizeof registry / sizeof registry[0];
    return registry;
}
