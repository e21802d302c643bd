/* The context's backends: probing the registry's backends, composing the plans of two whose
 * backends both probed, and tearing the states down again. */
#include "core/error.h"
#include "dispatch/context.h"

hd_status hd__backends_probe(hd_context *ctx)
{
    size_t n;
    const hd_backend_impl *const *list = hd__registry_backends(&n);
    const hd_backend_setup setup = {
        .device = ctx->rt, .cpu_threads = ctx->cpu_threads, .deterministic = ctx->deterministic};
    for (size_t i = 0; i < n; i++) {
        const hd_backend_impl *impl = list[i];
        void *state = NULL;
        hd_status s = hd__fault(ctx, impl->id, "probe")          ? HD_ERR_BACKEND_UNAVAILABLE
                      : hd__fault(ctx, impl->id, "probe-device") ? HD_ERR_DEVICE
                                                                 : impl->probe(ctx, &setup, &state);
        if (s == HD_ERR_OUT_OF_MEMORY || s == HD_ERR_INVALID_ARGUMENT)
            return s;     /* the host's memory, or the caller's options: the context's own error */
        if (s != HD_OK) { /* not on this machine, or its device fails it: a note, not an error */
            hd__note(ctx, "backend %s not available: %s", impl->name, ctx->report.last_error);
            hd__error_clear(ctx);
            continue;
        }
        ctx->backends[impl->id] = impl;
        ctx->backend_state[impl->id] = state;
        if (impl->cpu_threads != NULL)
            ctx->cpu_threads = impl->cpu_threads(state);
    }
    /* A plan's epilogue reads what its product wrote in place, after it: both stages must work
     * on the same place, where the product's writes come before the epilogue's reads (one
     * device's in-order queue, or the host). */
    const hd_composite *plans = hd__registry_composites(&n);
    for (size_t i = 0; i < n; i++) {
        const hd_backend_impl *product = ctx->backends[plans[i].product];
        const hd_backend_impl *epilogue = ctx->backends[plans[i].epilogue];
        if (product != NULL && epilogue != NULL && product->place == epilogue->place &&
            !hd__fault(ctx, plans[i].id, "probe"))
            ctx->composite[plans[i].id] = &plans[i];
    }
    return HD_OK;
}

void hd__backends_destroy(hd_context *ctx)
{
    for (int b = 0; b < HD_BACKEND_COUNT; b++) {
        const hd_backend_impl *impl = ctx->backends[b];
        if (impl != NULL && impl->destroy != NULL)
            impl->destroy(ctx->backend_state[b]);
        ctx->backends[b] = NULL;
        ctx->backend_state[b] = NULL;
        ctx->composite[b] = NULL;
    }
}
