/*
 * The plan memo: the scheduler's choice per (op, shape, where the inputs live, forced backend,
 * precision), kept in a small open-addressing hash table on the context so that a repeated
 * call plans in O(1) however many tuning records the cache holds. Every entry carries the
 * context's plan generation; anything that can change a choice (hd_context_set_backend, a
 * backend marked unhealthy, the tuning cache opened or closed) bumps the generation, which
 * drops every entry at once.
 */
#ifndef HD_DISPATCH_MEMO_H
#define HD_DISPATCH_MEMO_H

#include "dispatch/select.h"

struct hd_plan_memo;

/* The plan of a call: the memoized one, else hd__select()'s, then remembered. io must not be
 * NULL. */
void hd__select_memo(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                     hd_plan *plan);

/* Drops every memoized plan of ctx (by bumping its plan generation). */
void hd__plans_invalidate(hd_context *ctx);

/* Frees the memo (at context destruction). */
void hd__plans_free(hd_context *ctx);

/* hd__plans_stats(), what the tests and the dispatch-overhead benchmark read of the memo, is
 * declared in dispatch/tools.h. */

#endif
