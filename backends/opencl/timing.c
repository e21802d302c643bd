/* Device-time capture around enqueued commands: the backends hand their commands' events to
 * it while the tools time a call. The calibration measurements (copy bandwidth, launch
 * latency, uploads) are the tools' alone: measure.c, in the tools' library. */
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/internal.h"
#include "core/error.h"

void hd__cl_capture_discard(hd_cl_runtime *rt)
{
    while (rt->capture_head != NULL) {
        struct hd_cl_event_chunk *c = rt->capture_head;
        rt->capture_head = c->next;
        for (size_t i = 0; i < c->used; i++)
            if (c->events[i] != NULL)
                clReleaseEvent(c->events[i]);
        free(c);
    }
    rt->capture_tail = NULL;
    rt->capturing = false;
}

void hd__cl_capture_begin(hd_cl_runtime *rt)
{
    hd__cl_capture_discard(rt);
    rt->capturing = true;
}

/* Slots live in fixed chunks, so a slot handed out stays valid while later ones are added. */
cl_event *hd__cl_event_slot(hd_cl_runtime *rt)
{
    if (!rt->capturing)
        return NULL;
    struct hd_cl_event_chunk *c = rt->capture_tail;
    if (c == NULL || c->used == HD_CL_EVENT_CHUNK) {
        struct hd_cl_event_chunk *fresh = calloc(1, sizeof *fresh);
        if (fresh == NULL)
            return NULL; /* the command runs untimed */
        if (c == NULL)
            rt->capture_head = fresh;
        else
            c->next = fresh;
        rt->capture_tail = c = fresh;
    }
    cl_event *slot = &c->events[c->used++];
    *slot = NULL;
    return slot;
}

hd_status hd__cl_capture_mark(hd_cl_runtime *rt, hd_context *ctx)
{
    cl_event *slot = hd__cl_event_slot(rt);
    if (slot == NULL)
        return HD_OK;
    cl_int err = clEnqueueMarkerWithWaitList(rt->queue, 0, NULL, slot);
    return err == CL_SUCCESS ? HD_OK : hd__cl_error(ctx, err, "clEnqueueMarkerWithWaitList");
}

hd_status hd__cl_capture_end(hd_cl_runtime *rt, hd_context *ctx, double *seconds)
{
    *seconds = 0.0;
    rt->capturing = false;
    hd_status s = hd__cl_finish(rt, ctx);
    cl_ulong first = 0, last = 0;
    bool any = false;
    for (struct hd_cl_event_chunk *c = rt->capture_head; c != NULL && s == HD_OK; c = c->next) {
        for (size_t i = 0; i < c->used && s == HD_OK; i++) {
            cl_ulong start, end;
            if (c->events[i] == NULL)
                continue; /* a command that set no event (a library call that did nothing) */
            cl_int err = clGetEventProfilingInfo(c->events[i], CL_PROFILING_COMMAND_START,
                                                 sizeof start, &start, NULL);
            if (err == CL_SUCCESS)
                err = clGetEventProfilingInfo(c->events[i], CL_PROFILING_COMMAND_END, sizeof end,
                                              &end, NULL);
            if (err != CL_SUCCESS) {
                s = hd__cl_error(ctx, err, "clGetEventProfilingInfo");
                break;
            }
            if (!any || start < first)
                first = start;
            if (!any || end > last)
                last = end;
            any = true;
        }
    }
    hd__cl_capture_discard(rt);
    if (s == HD_OK && any && last > first)
        *seconds = (double)(last - first) * 1e-9;
    return s;
}
