/* $HD_PROFILE=1: where a program's time goes, per operation and backend. Each operation then
 * waits for the work queued before it, runs, and waits for its own work, and its wall time is
 * added to the context's table, which hd_context_destroy() prints to stderr; the first call
 * of each shape of each operation on each backend, which builds its kernels, is shown apart.
 * The waits take away the overlap of host and device: the figures are for finding where the
 * time goes, not for the total. */
#ifndef HD_DISPATCH_PROFILE_H
#define HD_DISPATCH_PROFILE_H

#include <hd/dispatch.h>

#include "core/args.h"

/* The table's rows: the ops of HD_OP_MAP, and AdamW, which is not one of them. */
#define HD_PROFILE_ADAMW HD_OP_COUNT
#define HD_PROFILE_ROWS  (HD_OP_COUNT + 1)

/* A shape an operation has run at on a backend. */
typedef struct hd_profile_shape {
    int row;
    hd_backend backend;
    hd_shape shape;
} hd_profile_shape;

/* Each (op, backend)'s first call of each shape apart from the others: it builds the kernels
 * (a tiled product's of that shape, a row op's of that width). */
typedef struct hd_profile {
    double first[HD_PROFILE_ROWS][HD_BACKEND_COUNT];   /* the first calls of the shapes */
    double seconds[HD_PROFILE_ROWS][HD_BACKEND_COUNT]; /* the calls after them */
    unsigned long calls[HD_PROFILE_ROWS][HD_BACKEND_COUNT];
    unsigned long shapes[HD_PROFILE_ROWS][HD_BACKEND_COUNT];
    hd_profile_shape *seen; /* every (row, backend, shape) so far */
    size_t seen_count, seen_capacity;
} hd_profile;

/* Reads $HD_PROFILE into ctx (the table, or none). HD_OK, or HD_ERR_OUT_OF_MEMORY. */
hd_status hd__profile_init(hd_context *ctx);
/* Waits for the work queued so far and returns the time, where profiling: the start of a
 * call's span. */
double hd__profile_begin(hd_context *ctx);
/* Waits for the call's work and adds its span to row (an hd_op or HD_PROFILE_ADAMW) under the
 * backend it ran on, apart where it is the first call of shape there (NULL: the row has one
 * shape); nothing where not profiling or where the call failed. */
void hd__profile_end(hd_context *ctx, int row, const hd_shape *shape, double begin,
                     hd_status status);
/* Prints the table to stderr and frees it. */
void hd__profile_finish(hd_context *ctx);

#endif
