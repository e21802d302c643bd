/* Choosing the backend of one call: the order in which the dispatcher tries backends. */
#ifndef HD_DISPATCH_SELECT_H
#define HD_DISPATCH_SELECT_H

#include "backends/backend.h"
#include "dispatch/tools.h"

/* Which rule put the first backend of a plan first. */
typedef enum hd_select_rule {
    HD_SELECT_NONE = 0, /* nothing takes the call */
    HD_SELECT_FORCED,   /* hd_context_set_backend() or $HD_BACKEND */
    HD_SELECT_TUNED,    /* the cache's record for exactly this shape */
    HD_SELECT_NEAREST,  /* the cache's record for the nearest shape */
    HD_SELECT_COST,     /* the cost model: backends' estimates and moving the inputs */
    HD_SELECT_DEFAULT,  /* the default order */
} hd_select_rule;

typedef struct hd_plan {
    hd_backend order[HD_BACKEND_COUNT];    /* usable backends that take the call, best first */
    const char *variant[HD_BACKEND_COUNT]; /* for order[i]: tuned kernel parameters, or NULL */
    int count;
    hd_select_rule rule;
    /* What decided, for hd__plan_reason(): formatting it on every call would cost more than
     * a small op's dispatch may. */
    const struct hd_tune_record *record; /* tuned and nearest: the record */
    double distance;                     /* nearest: log2 distance */
    bool runner_up_first;                /* the record's runner-up, for migration */
    bool small;                          /* default: small problem with inputs on the host */
    bool calibrated;                     /* cost: from the cache's calibration, not defaults */
    /* Indexed by hd_backend, for the explain call; negative where not estimated. */
    double model_us[HD_BACKEND_COUNT];   /* cost model, migration included */
    double migrate_us[HD_BACKEND_COUNT]; /* moving the inputs to the backend's place */
    double
        resident_us[HD_BACKEND_COUNT]; /* the call with its inputs in place: tuned or estimated */
    /* What running at the first backend's place costs over the best backend elsewhere whose
     * inputs are not there yet (0: nothing); charged to those inputs after the call. */
    double regret_us;
    hd_place regret_place;
} hd_plan;

/* Plans a call. io may be NULL: then no input needs to move (the explain call). */
void hd__select(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                hd_plan *plan);

/* Whether a backend takes a call, where it runs, the variants it lists and its own estimate
 * are declared in dispatch/tools.h: the tools ask them too. */

/* Whether b would accept variant for (op, shape), checked without running anything (a plan:
 * its epilogue's check): HD_OK, or the status its slot would return, with the message; HD_OK
 * where b does not check. */
hd_status hd__backend_check_variant(hd_context *ctx, hd_backend b, hd_op op, const hd_shape *shape,
                                    const char *variant);

/* Whether t's staying has cost as much as one copy of it since its last copy, so that the
 * scheduler moves it for free (the break-even rule of residency). */
bool hd__tensor_move_paid(const hd_context *ctx, const hd_tensor *t);

/* The tensors a call reads: its inputs, then the outputs it also reads. */
#define HD_PLAN_READ_MAX (2 * HD_OP_TENSOR_MAX)

/* Before a call runs on plan's first backend: each tensor it reads (its inputs, and outputs it
 * also reads, as GEMM's C with beta != 0) takes the share of the plan's regret that its bytes
 * not yet at the other place make of all such bytes, as the tensors are before the call. */
void hd__plan_regret_shares(const hd_plan *plan, const hd_call_tensors *io,
                            double share[HD_PLAN_READ_MAX]);
/* After the call ran there: charges each read tensor its share of the regret. */
void hd__plan_account(const hd_plan *plan, const hd_call_tensors *io,
                      const double share[HD_PLAN_READ_MAX]);

/* Why plan's first backend was chosen, in one line. */
void hd__plan_reason(const hd_plan *plan, char *buf, size_t size);

#endif
