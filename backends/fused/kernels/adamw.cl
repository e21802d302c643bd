/*
 * AdamW over up to SLOTS tensors per launch (torch.optim.AdamW's update, step t >= 1), with the
 * optional global gradient-norm clip of torch.nn.utils.clip_grad_norm_ applied before it.
 *
 * Per element, g' = g * coef:
 *   p = p * decay; m = beta1 * m + (1 - beta1) * g'; v = beta2 * v + (1 - beta2) * g'^2;
 *   p = p - step_size * m / (sqrt(v) * inv_bc2_sqrt + eps),
 * with the factors computed by the host in double and passed as floats: decay = 1 - lr * wd,
 * step_size = lr / (1 - beta1^t), inv_bc2_sqrt = 1 / sqrt(1 - beta2^t), and 1 - beta1, 1 - beta2
 * (as PyTorch forms them). Clipping: total = sqrt(sum over every tensor of the step of g^2),
 * coef = min(1, max_norm / (total + 1e-6)) (NaN where total is NaN, as PyTorch's clamp); the
 * gradients themselves are not modified. Without clipping coef = 1.
 *
 * Layout: tensor k (k < SLOTS) is p_k, g_k, m_k, v_k, each len_k floats (fp32 parameters, their
 * gradients and the optimizer's state; p, m, v updated in place); unused slots have length 0
 * (their buffers may be any valid buffer). start_k: the first work-group of tensor k, the prefix
 * sums of ceil(len_k / SPAN) (start_0 = 0, an unused slot starting where the groups end).
 * Work decomposition: work-group b serves tensor k, the last with start_k <= b, elements
 * (b - start_k) * SPAN .. + SPAN - 1 of it; work-item l the elements l, l + WG, ... of that
 * span (ELEMS of them, coalesced). The tensor is found by comparing b with each start: the
 * same path for the whole group, a few instructions a slot.
 *
 * Kernels:
 *   adamw_grad_norm: partials[part0 + b] = sum of g^2 over work-group b's span (4 bytes read per
 *     element); then the last work-group to finish, of all `groups` of this call's launches
 *     (several where there are more than SLOTS tensors, writing consecutive ranges of one
 *     partials buffer), counted on *count, writes total[0] = sqrt(the sum of the partials),
 *     added in a fixed order as a pair sum (the same result on every run), and sets *count
 *     back to 0.
 *   adamw_update: the step; reads total[0] for the clip (total NULL: no clip). 16 bytes read,
 *     12 written per element.
 *   adamw_update_after_norm: adamw_update queued right after adamw_grad_norm (or another of
 *     itself, on other tensors), which write none of p, g, m and v: each work-item loads its
 *     elements before waiting for that launch (READS_AHEAD_OF_PREVIOUS_LAUNCH, launch.cl), so
 *     that as a dependent launch its groups' loads overlap the norm's last groups and sum.
 *     With EVICT_FIRST = 1 (NVIDIA's PTX) p, m and v are loaded and stored with the evict-first
 *     hint (.cs), so that they pass through L2 without pushing out the gradients, which the
 *     norm's launch has just read and which are read again from there.
 *   adamw_resident: both in one launch whose groups all run at once (a cooperative launch: the
 *     host launches no more than the device holds). Work-group b takes spans b, b + G, ... (G
 *     the launch's groups) of the `spans` that the starts number. It sums their g^2, keeping the
 *     g of its first HOLD spans in registers; the last group to arrive on *count adds the
 *     partials into the norm, writes total[0], sets *count back to 0 and raises *flag; the
 *     others wait until *flag leaves the value they read before arriving. Then each steps its
 *     spans, with the g it holds (read again past HOLD spans): where G * HOLD spans cover the
 *     tensors, g is read once, 28 bytes moved per element in all, and no second launch waits on
 *     the first. clip = 0: total[0] is written (the norm wanted) but not applied.
 *
 * Tuning parameters (-D; defaults below): WG (common.cl), ELEMS, SLOTS (8, 16 or 32: as many as
 * the device's kernel parameter space holds), HOLD. ROWS must be 1. EVICT_FIRST (0 or 1, set
 * by the host on NVIDIA's devices): the hint above.
 */
#ifndef ELEMS
#define ELEMS 8 /* elements per work-item of a work-group's span */
#endif
#ifndef SLOTS
#define SLOTS 8 /* tensors per launch: OpenCL's least parameter space holds 8 (the host asks for
                   16 or 32 where the device's holds them) */
#endif
#ifndef EVICT_FIRST
#define EVICT_FIRST 0 /* 1: p, m and v loaded and stored with PTX's evict-first hint */
#endif
#ifndef HOLD
#define HOLD 2 /* spans of g a work-item of adamw_resident keeps in registers */
#endif
#if ROWS != 1
#error "adamw.cl: ROWS must be 1"
#endif
#define SPAN (WG * ELEMS) /* elements per work-group */

/* X(k) for each slot k < SLOTS: EACH_SLOT in order (the parameters), EACH_SLOT_DOWN from the
 * last (the search for a work-group's tensor). */
#define SLOTS_8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define SLOTS_16(X) SLOTS_8(X) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define SLOTS_32(X)                                                                              \
    SLOTS_16(X) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28)    \
        X(29) X(30) X(31)
#define SLOTS_8_DOWN(X) X(7) X(6) X(5) X(4) X(3) X(2) X(1) X(0)
#define SLOTS_16_DOWN(X) X(15) X(14) X(13) X(12) X(11) X(10) X(9) X(8) SLOTS_8_DOWN(X)
#define SLOTS_32_DOWN(X)                                                                         \
    X(31) X(30) X(29) X(28) X(27) X(26) X(25) X(24) X(23) X(22) X(21) X(20) X(19) X(18) X(17)    \
        X(16) SLOTS_16_DOWN(X)
#if SLOTS == 8
#define EACH_SLOT      SLOTS_8
#define EACH_SLOT_DOWN SLOTS_8_DOWN
#elif SLOTS == 16
#define EACH_SLOT      SLOTS_16
#define EACH_SLOT_DOWN SLOTS_16_DOWN
#elif SLOTS == 32
#define EACH_SLOT      SLOTS_32
#define EACH_SLOT_DOWN SLOTS_32_DOWN
#else
#error "adamw.cl: SLOTS must be 8, 16 or 32"
#endif

/* The parameters of slot k: its tensors' buffers, length and first work-group. */
#define NORM_PARAMS(k) const __global float *g##k, int len##k, int start##k,
#define UPDATE_PARAMS(k)                                                                         \
    __global float *p##k, const __global float *g##k, __global float *m##k, __global float *v##k, \
        int len##k, int start##k,

/* Span `span` (of the numbering the starts give) of slot k's tensor, where k is the last slot
 * starting at or before it: each slot's code names its own parameters, so that no pointer is
 * chosen at run time (a pointer picked from many parameters made the compiler copy them all to
 * each work-item's stack). */
#define NORM_SPAN(k)                                                                             \
    if (!found && span >= start##k) {                                                            \
        found = true;                                                                            \
        sq += span_sumsq(g##k, len##k, (span - start##k) * SPAN, l);                              \
    }
#define UPDATE_SPAN(k)                                                                           \
    if (!found && span >= start##k) {                                                            \
        found = true;                                                                            \
        span_update(p##k, g##k, m##k, v##k, len##k, (span - start##k) * SPAN, l, &f);            \
    }
/* adamw_resident's form: the tensor of span `span` picked by a chain of selections ahead of
 * code written once, its gradient (PICK_G: tg) or its parameters and moments (PICK_PMV: tp, tm,
 * tv, and tg for a span not held), its length (tlen, 0 where span is past the last) and first
 * element (tbase). Its work per span goes through HOLD + 2 places (each held span's, the
 * rest's, both phases): repeated per slot, as NORM_SPAN and UPDATE_SPAN repeat theirs, it
 * outgrew the instruction cache (Nsight Compute: most of the warps' stalls were on instruction
 * fetch). The phases pick apart, so that no pointer of a held span stays live across the wait.
 * adamw_update_after_norm picks its one span's tensor the same way (SPAN_PMV). */
#define PICK_G(k)                                                                                \
    if (!found && span >= start##k) {                                                            \
        found = true;                                                                            \
        tg = g##k;                                                                               \
        tlen = len##k;                                                                           \
        tbase = (span - start##k) * SPAN;                                                        \
    }
#define PICK_PMV(k)                                                                              \
    if (!found && span >= start##k) {                                                            \
        found = true;                                                                            \
        tp = p##k;                                                                               \
        tg = g##k;                                                                               \
        tm = m##k;                                                                               \
        tv = v##k;                                                                               \
        tlen = len##k;                                                                           \
        tbase = (span - start##k) * SPAN;                                                        \
    }
#define SPAN_G                                                                                   \
    const __global float *tg = g0;                                                               \
    int tlen = 0, tbase = 0;                                                                     \
    bool found = span >= spans;                                                                  \
    EACH_SLOT_DOWN(PICK_G)
#define SPAN_PMV                                                                                 \
    __global float *tp = p0, *tm = m0, *tv = v0;                                                 \
    const __global float *tg = g0;                                                               \
    int tlen = 0, tbase = 0;                                                                     \
    bool found = span >= spans;                                                                  \
    EACH_SLOT_DOWN(PICK_PMV)

/* A load and a store of p, m or v: through L2 with the evict-first hint under EVICT_FIRST. */
#if EVICT_FIRST
inline float load_once(const __global float *at)
{
    float x;
    asm volatile("ld.global.cs.f32 %0, [%1];" : "=f"(x) : "l"(at));
    return x;
}

inline void store_once(__global float *at, float x)
{
    asm volatile("st.global.cs.f32 [%0], %1;" ::"l"(at), "f"(x) : "memory");
}
#else
#define load_once(at)     (*(at))
#define store_once(at, x) (*(at) = (x))
#endif

/* The sum of g^2 over work-item l's elements of the span at base. */
inline float span_sumsq(const __global float *g, int len, int base, int l)
{
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        if (at < len)
            sq += g[at] * g[at];
    }
    return sq;
}

/* As span_sumsq, the elements kept in held (0 past the tensor). */
inline float span_hold(const __global float *g, int len, int base, int l, float held[ELEMS])
{
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        held[i] = at < len ? g[at] : 0.0f;
        sq += held[i] * held[i];
    }
    return sq;
}

/* The step's factors (see the top), coef the clip's. */
typedef struct adamw_factors {
    float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_bc2_sqrt, eps,
        coef;
} adamw_factors;

/* The clip's factor for the norm total: min(1, max_norm / (total + 1e-6)), a NaN staying NaN as
 * in PyTorch's clamp. */
inline float clip_coef(float max_norm, float total)
{
    const float c = max_norm / (total + 1e-6f);
    return c > 1.0f ? 1.0f : c;
}

/* Work-item l's p, m and v of the span at base into pv, mv, vv (0 past the tensor). */
inline void span_load(const __global float *p, const __global float *m, const __global float *v,
                      int len, int base, int l, float pv[ELEMS], float mv[ELEMS],
                      float vv[ELEMS])
{
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        const bool in = at < len;
        pv[i] = in ? load_once(p + at) : 0.0f;
        mv[i] = in ? load_once(m + at) : 0.0f;
        vv[i] = in ? load_once(v + at) : 0.0f;
    }
}

/* The step on work-item l's elements of the span at base, from their p, m and v (pv, mv, vv)
 * and gradients g (unclipped). */
inline void span_store(__global float *p, __global float *m, __global float *v, int len, int base,
                       int l, const adamw_factors *f, const float g[ELEMS],
                       const float pv[ELEMS], const float mv[ELEMS], const float vv[ELEMS])
{
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        if (at < len) {
            const float gi = g[i] * f->coef;
            const float mi = f->beta1 * mv[i] + f->one_minus_beta1 * gi;
            const float vi = f->beta2 * vv[i] + f->one_minus_beta2 * (gi * gi);
            const float pi = pv[i] * f->decay;
            store_once(p + at, pi - f->step_size * (mi / (sqrt(vi) * f->inv_bc2_sqrt + f->eps)));
            store_once(m + at, mi);
            store_once(v + at, vi);
        }
    }
}

/* The step on work-item l's elements of the span at base, their gradients g (unclipped): every
 * p, m and v loaded before the first store, which the compiler may not move them past (the
 * tensors could overlap, for all it knows), so that a work-item has all its loads in flight. */
inline void span_step(__global float *p, __global float *m, __global float *v, int len, int base,
                      int l, const adamw_factors *f, const float g[ELEMS])
{
    float pv[ELEMS], mv[ELEMS], vv[ELEMS];
    span_load(p, m, v, len, base, l, pv, mv, vv);
    span_store(p, m, v, len, base, l, f, g, pv, mv, vv);
}

/* The step on work-item l's elements of the span at base, g read with them. */
inline void span_update(__global float *p, const __global float *g, __global float *m,
                        __global float *v, int len, int base, int l, const adamw_factors *f)
{
    float gv[ELEMS];
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        gv[i] = at < len ? g[at] : 0.0f;
    }
    span_step(p, m, v, len, base, l, f, gv);
}

/* Work-item 0's arrival of its group: the group's partial sum written and fenced device-wide
 * before the group is counted (as gemv.cl's strip_combine); true for the last of `groups` to
 * arrive, which sets the count back to 0. */
inline bool arrive(__global float *partial, float sq, volatile __global int *count, int groups)
{
    *partial = sq;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    const int arrived = atomic_inc(count);
    if (arrived == groups - 1)
        atomic_xchg(count, 0);
    return arrived == groups - 1;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_grad_norm(EACH_SLOT(NORM_PARAMS) __global float *partials, int part0, int groups,
                volatile __global int *count, __global float *total)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float rh[WG], rl[WG];
    __local int last;
    const int l = (int)get_local_id(0), b = (int)get_group_id(0), span = b;
    bool found = false;
    float sq = 0.0f;
    EACH_SLOT_DOWN(NORM_SPAN)
    sq = slot_sum(sq, rh, 0, l);
    if (l == 0)
        last = arrive(partials + part0 + b, sq, count, groups);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!last)
        return;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    const float sum = group_pair_sum(partials, groups, rh, rl);
    if (l == 0)
        total[0] = sqrt(sum);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_update(EACH_SLOT(UPDATE_PARAMS) float decay, float beta1, float one_minus_beta1, float beta2,
             float one_minus_beta2, float step_size, float inv_bc2_sqrt, float eps,
             const __global float *total, float max_norm)
{
    AFTER_PREVIOUS_LAUNCH();
    const int l = (int)get_local_id(0), span = (int)get_group_id(0);
    adamw_factors f = {decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                       step_size, inv_bc2_sqrt, eps, 1.0f};
    if (total != 0)
        f.coef = clip_coef(max_norm, total[0]);
    bool found = false;
    EACH_SLOT_DOWN(UPDATE_SPAN)
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_update_after_norm(EACH_SLOT(UPDATE_PARAMS) float decay, float beta1, float one_minus_beta1,
                        float beta2, float one_minus_beta2, float step_size, float inv_bc2_sqrt,
                        float eps, const __global float *total, float max_norm)
{
    READS_AHEAD_OF_PREVIOUS_LAUNCH();
    const int l = (int)get_local_id(0), span = (int)get_group_id(0);
    const int spans = (int)get_num_groups(0);
    SPAN_PMV
    float gv[ELEMS], pv[ELEMS], mv[ELEMS], vv[ELEMS];
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = tbase + i * WG + l;
        gv[i] = at < tlen ? tg[at] : 0.0f;
    }
    span_load(tp, tm, tv, tlen, tbase, l, pv, mv, vv);
    AFTER_PREVIOUS_LAUNCH();
    adamw_factors f = {decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                       step_size, inv_bc2_sqrt, eps, 1.0f};
    if (total != 0)
        f.coef = clip_coef(max_norm, total[0]);
    span_store(tp, tm, tv, tlen, tbase, l, &f, gv, pv, mv, vv);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_resident(EACH_SLOT(UPDATE_PARAMS) int spans, float decay, float beta1,
               float one_minus_beta1, float beta2, float one_minus_beta2, float step_size,
               float inv_bc2_sqrt, float eps, __global float *partials,
               volatile __global int *count, volatile __global int *flag, __global float *total,
               float max_norm, int clip)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float rh[WG], rl[WG];
    __local int last, seen;
    __local float norm;
    const int l = (int)get_local_id(0), b = (int)get_group_id(0);
    const int groups = (int)get_num_groups(0);
    float keep[HOLD][ELEMS]; /* the g of the first HOLD spans, indexed by constants alone */
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < HOLD; j++) {
        const int span = b + j * groups;
        SPAN_G
        sq += span_hold(tg, tlen, tbase, l, keep[j]);
    }
    for (int span = b + HOLD * groups; span < spans; span += groups) {
        SPAN_G
        sq += span_sumsq(tg, tlen, tbase, l);
    }
    sq = slot_sum(sq, rh, 0, l);
    if (l == 0) {
        seen = *flag; /* before arriving: the flag is raised only once every group has */
        last = arrive(partials + b, sq, count, groups);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (last) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        const float sum = group_pair_sum(partials, groups, rh, rl);
        if (l == 0) {
            norm = sqrt(sum);
            total[0] = norm;
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            atomic_inc(flag);
        }
    } else if (l == 0) {
        while (*flag == seen)
            ;
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        norm = ((volatile __global const float *)total)[0];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    adamw_factors f = {decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                       step_size, inv_bc2_sqrt, eps, 1.0f};
    if (clip)
        f.coef = clip_coef(max_norm, norm);
#pragma unroll
    for (int j = 0; j < HOLD; j++) {
        const int span = b + j * groups;
        SPAN_PMV
        span_step(tp, tm, tv, tlen, tbase, l, &f, keep[j]);
    }
    for (int span = b + HOLD * groups; span < spans; span += groups) {
        SPAN_PMV
        span_update(tp, tg, tm, tv, tlen, tbase, l, &f);
    }
}
