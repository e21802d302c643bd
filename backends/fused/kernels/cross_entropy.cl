/*
 * Cross-entropy of logits over a vocabulary, with its gradient (the language model's loss).
 *
 * Per row i with target t_i != ignore_index: lse_i = log sum_j exp(logits[i][j]),
 * loss_i = lse_i - logits[i][t_i]; rows whose target is ignore_index have loss_i = 0. The loss
 * is sum_i loss_i * inv_count (inv_count = 1 / the rows not ignored, from the host, which also
 * handles a call with none). dlogits[i][j] = (softmax(logits_i)[j] - (j == t_i)) * inv_count for
 * counted rows, 0 for ignored ones.
 *
 * Layout: logits and dlogits rows x cols (cols = the vocabulary V), row-major, activations
 * (act_t, elem.cl: float, or bf16 under ACT_BF16); dlogits may be logits itself (in place).
 * targets: rows ints, each in [0, cols) or ignore_index (checked by the host). losses and lse:
 * rows floats; loss: 1 float. With VEC = 4, cols % 4 == 0 and the buffers start 16-byte aligned
 * (8 for bf16).
 *
 * Work decomposition as the row kernels (common.cl): a slot of T = WG / ROWS work-items per row,
 * ROWS rows per work-group, ceil(rows / ROWS) work-groups; work-item t of a slot takes vectors
 * t, t + T, ... (a row of up to 256k logits fits neither registers nor local memory: it is
 * looped). Pass 1 keeps per lane a running maximum m and the sum s of exp(x - m) (online
 * softmax: one read of the row), combined over the slot by one reduction of (m, s) pairs;
 * pass 2 reads the row again and writes dlogits: 4 + 4 + 4 bytes per element in fp32 (the
 * second read often from cache). The target's logit is read before the reduction, so that in
 * place its overwrite comes after. cross_entropy_mean then adds the rows' losses in a fixed
 * order in one work-group (a deterministic mean, no atomics).
 *
 * Range: exponents are taken of x - m <= 0 only, and dlogits as exp(x - m) / s (never through
 * exp(x - lse), where a logit of 1e4 would lose 1e-3 of x - lse to rounding), the loss as
 * (m - x_t) + log(s): logits of +-1e4 neither overflow nor lose digits. -inf logits (masks) are
 * legal and give 0 probability; a row of -inf gives lse = -inf and, if counted, a NaN loss and
 * gradient, as in PyTorch; +inf or NaN logits give NaN.
 *
 * Kernels:
 *   cross_entropy_rows: losses, lse (may be NULL) and dlogits (may be NULL: pass 1 only). An
 *     ignored row is read only when lse is wanted.
 *   cross_entropy_loss_rows: losses and lse only (evaluation): pass 1.
 *   cross_entropy_mean: loss[0] = sum of losses * inv_count; one work-group of WG.
 *
 *   cross_entropy_cluster (CLUSTER > 0): cross_entropy_rows with each row read once, held in
 *     registers across the CLUSTER work-groups of a thread-block cluster (below).
 *
 * Tuning parameters (-D): WG, ROWS, VEC (defaults in common.cl); CLUSTER (0, the default: no
 * cluster kernel), CACHE and LOCAL_CACHE (set by the host from the vocabulary) for the cluster
 * kernel.
 */
#ifndef CLUSTER
#define CLUSTER 0 /* work-groups sharing a row in cross_entropy_cluster; 0: not built */
#endif

/* (m, s) pairs, each standing for s * exp(m), added: the larger maximum kept. m starts at
 * -FLT_MAX rather than -inf, so that a -inf logit gives exp(-inf) = 0, never exp(-inf + inf). */
inline float2 lse_combine(float2 a, float2 b)
{
    const float m = fmax(a.x, b.x);
    return (float2)(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}
SLOT_REDUCTION(slot_lse, float2, lse_combine)

/* The row's (m, s) over the slot: m the largest logit (-FLT_MAX for a row of -inf), s the sum
 * of exp(x - m); n = 0 (a dead or skipped row) gives (-FLT_MAX, 0). Every work-item of the group
 * calls it. red: WG float2. */
inline float2 row_lse(const __global act_t *lr, int n, __local float2 *red, int slot, int t)
{
    floatv m = (floatv)(-FLT_MAX), s = (floatv)(0.0f);
    for (int j = t; j < n; j += T) {
        const floatv v = act_loadv(lr, j);
        const floatv mn = fmax(m, v); /* a NaN v leaves m, and makes s NaN below */
        s = s * exp(m - mn) + exp(v - mn);
        m = mn;
    }
#if VEC == 4
    const float2 ms = lse_combine(lse_combine((float2)(m.x, s.x), (float2)(m.y, s.y)),
                                  lse_combine((float2)(m.z, s.z), (float2)(m.w, s.w)));
#else
    const float2 ms = (float2)(m, s);
#endif
    return slot_lse(ms, red, slot, t);
}

/* Row `row`'s loss and lse from its (m, s) and target logit xt; the slot's work-item 0 writes
 * them. */
inline void write_loss(__global float *losses, __global float *lse, int row, bool counted,
                       float2 ms, float xt)
{
    losses[row] = counted ? (ms.x - xt) + log(ms.y) : 0.0f;
    if (lse != 0)
        lse[row] = ms.x + log(ms.y);
}

/* The one-hot of the target within its vector: 1 in the target's lane (VEC = 4), or 1. */
inline floatv target_hot(int target)
{
#if VEC == 4
    const int tl = target % VEC;
    return (float4)(tl == 0 ? 1.0f : 0.0f, tl == 1 ? 1.0f : 0.0f, tl == 2 ? 1.0f : 0.0f,
                    tl == 3 ? 1.0f : 0.0f);
#else
    return 1.0f;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
cross_entropy_rows(const __global act_t *logits, const __global int *targets,
                   __global float *losses, __global float *lse, __global act_t *dlogits, int rows,
                   int cols, int ignore_index, float inv_count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float2 red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int target = live ? targets[row] : ignore_index;
    const bool counted = target != ignore_index; /* false where !live */
    const int n = counted || (live && lse != 0) ? cols / VEC : 0;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;

    const float xt = counted && t == 0 ? act_load(logits, off + (size_t)target) : 0.0f;
    const float2 ms = row_lse(logits + off, n, red, slot, t);
    if (live && t == 0)
        write_loss(losses, lse, row, counted, ms, xt);
    if (!live || dlogits == 0)
        return;
    const int nv = cols / VEC;
    if (!counted) {
        for (int j = t; j < nv; j += T)
            act_storev(dlogits + off, j, (floatv)(0.0f));
        return;
    }
    const float inv_s = 1.0f / ms.y;
    const int tj = target / VEC;
    const floatv hot = target_hot(target);
    for (int j = t; j < nv; j += T) {
        floatv p = exp(act_loadv(logits + off, j) - ms.x) * inv_s;
        if (j == tj)
            p -= hot;
        act_storev(dlogits + off, j, p * inv_count);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
cross_entropy_loss_rows(const __global act_t *logits, const __global int *targets,
                        __global float *losses, __global float *lse, int rows, int cols,
                        int ignore_index)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float2 red[WG];
    const int t = (int)get_local_id(0) % T, slot = (int)get_local_id(0) / T;
    const int row = (int)get_group_id(0) * ROWS + slot;
    const bool live = row < rows;
    const int target = live ? targets[row] : ignore_index;
    const bool counted = target != ignore_index;
    const size_t off = (size_t)(live ? row : 0) * (size_t)cols;

    const float xt = counted && t == 0 ? act_load(logits, off + (size_t)target) : 0.0f;
    const float2 ms = row_lse(logits + off, live ? cols / VEC : 0, red, slot, t);
    if (live && t == 0)
        write_loss(losses, lse, row, counted, ms, xt);
}

/* loss[0] = (sum of losses[0 .. rows-1]) * inv_count, by one work-group in the same order every
 * run (group_pair_sum, common.cl). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
cross_entropy_mean(const __global float *losses, __global float *loss, int rows, float inv_count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float rh[WG], rl[WG];
    const float sum = group_pair_sum(losses, rows, rh, rl);
    if (get_local_id(0) == 0)
        loss[0] = sum * inv_count;
}

#if CLUSTER
/*
 * cross_entropy_cluster: the row's logits read once. CLUSTER work-groups share a row, rank r
 * holding vectors [r * chunk, min(nv, (r + 1) * chunk)) of it (nv = cols / VEC, chunk =
 * ceil(nv / CLUSTER) <= WG * CACHE), work-item l the vectors l, l + WG, ... of that range, CACHE
 * of them in registers: e = exp(x - m_l), against the work-item's own maximum m_l, so that each
 * logit takes one exp. Each work-group finds its range's (m, s), writes it to
 * part[row * CLUSTER + r] (float2, rows * CLUSTER of them), and waits at the cluster's
 * barrier (release and acquire at cluster scope: every rank's pair is then visible to every
 * other); each then adds the row's CLUSTER pairs in rank order, the same sum in every rank,
 * and writes its range of dlogits from its registers, e * exp(m_l - m) / s (one exp per
 * work-item; within a few ulps of exp(x - m) / s, and never an exponent above 0). Global
 * memory, not the cluster's shared memory, carries the pairs: no work-group may read another's
 * local memory after that one exits, so a second barrier would be needed. Grid: rows * CLUSTER work-groups of WG, in
 * clusters of CLUSTER (hd__rt_launch_cluster). CLUSTER = 1 needs no cluster (one work-group
 * holds the row) and runs on any device.
 *
 * LOCAL_CACHE > 0: each work-item holds LOCAL_CACHE more vectors of its range in local memory
 * (held, LOCAL_CACHE * WG vectors a work-group), after its CACHE in registers. A cluster of 8
 * holds an eighth of a row of 128k logits in each work-group, 64 KB: in registers alone two
 * work-groups fit a multiprocessor, each waiting at the cluster's barrier between its loads and
 * its writes; with most of it in local memory, which cp.async fills without registers
 * (LOCAL_ASYNC), more work-groups fit, and more of the row is in flight. Each work-item reads
 * and writes only its own vectors there: no barrier.
 *
 * CLUSTER_EMULATE = 1: one work-group per row plays every rank in turn, with a work-group
 * barrier for the cluster's; the same arithmetic in the same order, where no device has
 * clusters (tests). Its registers are loaded again for the writes.
 */
#if ROWS != 1
#error "cross_entropy.cl: the cluster kernel takes ROWS = 1"
#endif
#if CACHE < 1
#error "cross_entropy.cl: the cluster kernel holds CACHE >= 1 vectors per work-item"
#endif
#ifndef CLUSTER_EMULATE
#define CLUSTER_EMULATE 0
#endif

#ifndef LOCAL_CACHE
#define LOCAL_CACHE 0 /* vectors per work-item held in local memory, past the CACHE in registers */
#endif
#ifndef LOCAL_ASYNC
#define LOCAL_ASYNC 0 /* 1: NVIDIA sm_80+, whose cp.async fills local memory without registers */
#endif
#if LOCAL_CACHE
#define HELD_PARAM , __local floatv *held
#define HELD_ARG   , held
/* Vector j of lr into held[i], landed by held_wait: where LOCAL_ASYNC allows (16-byte fp32
 * vectors) by cp.async, else through a register. */
inline void held_copy(__local floatv *held, int i, const __global act_t *lr, int j)
{
#if LOCAL_ASYNC && VEC == 4 && !ACT_BF16
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint)(size_t)(held + i)),
                 "l"(lr + (size_t)j * 4)
                 : "memory");
#else
    held[i] = act_loadv(lr, j);
#endif
}
inline void held_wait(void)
{
#if LOCAL_ASYNC && VEC == 4 && !ACT_BF16
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
#else
#define HELD_PARAM
#define HELD_ARG
#endif

/* Work-item l's vectors of the range [begin, end) of row lr into e as exp(x - m_l) (0 past it),
 * m_l the work-item's largest logit (-FLT_MAX for none), returned in *mine; and the range's
 * (m, s) over the work-group: one exp per logit, as the maximum comes first. Its vectors
 * CACHE .. CACHE + LOCAL_CACHE - 1 are held in local memory, held[c * WG + l], their copies
 * issued before the register loads. */
inline float2 range_hold(const __global act_t *lr, int begin, int end, int l, floatv e[CACHE],
                         float *mine, __local float2 *red HELD_PARAM)
{
#if LOCAL_CACHE
#pragma unroll
    for (int c = 0; c < LOCAL_CACHE; c++) {
        const int j = begin + l + (CACHE + c) * WG;
        if (j < end)
            held_copy(held, c * WG + l, lr, j);
        else
            held[c * WG + l] = (floatv)(-INFINITY);
    }
#endif
    floatv mv = (floatv)(-FLT_MAX);
#pragma unroll
    for (int c = 0; c < CACHE; c++) {
        const int j = begin + l + c * WG;
        e[c] = j < end ? act_loadv(lr, j) : (floatv)(-INFINITY);
        mv = fmax(mv, e[c]); /* a NaN x leaves m, and makes s NaN below */
    }
#if LOCAL_CACHE
    held_wait();
#pragma unroll
    for (int c = 0; c < LOCAL_CACHE; c++)
        mv = fmax(mv, held[c * WG + l]);
#endif
    const float m = HMAX(mv);
    floatv sv = (floatv)(0.0f);
#pragma unroll
    for (int c = 0; c < CACHE; c++) {
        e[c] = exp(e[c] - m);
        sv += e[c];
    }
#if LOCAL_CACHE
#pragma unroll
    for (int c = 0; c < LOCAL_CACHE; c++) {
        const floatv x = exp(held[c * WG + l] - m);
        held[c * WG + l] = x;
        sv += x;
    }
#endif
    *mine = m;
    return slot_lse((float2)(m, HSUM(sv)), red, 0, l);
}

/* dlogits vector j from its held e = exp(x - m_l) and f = exp(m_l - m) / s. */
inline void held_write(__global act_t *dl, int j, floatv e, float f, int tj, floatv hot,
                       bool counted, float inv_count)
{
    floatv p = e * f;
    if (j == tj)
        p -= hot;
    act_storev(dl, j, counted ? p * inv_count : (floatv)(0.0f));
}

/* dlogits of the range from the held e = exp(x - m_l): (e * exp(m_l - m) / s - onehot) *
 * inv_count, or 0 for a row not counted. */
inline void range_write(__global act_t *dl, int begin, int end, int l, const floatv e[CACHE],
                        float m_l, bool counted, float2 ms, int target,
                        float inv_count HELD_PARAM)
{
    const float f = exp(m_l - ms.x) / ms.y;
    const int tj = counted ? target / VEC : -1;
    const floatv hot = target_hot(target);
#pragma unroll
    for (int c = 0; c < CACHE; c++) {
        const int j = begin + l + c * WG;
        if (j < end)
            held_write(dl, j, e[c], f, tj, hot, counted, inv_count);
    }
#if LOCAL_CACHE
#pragma unroll
    for (int c = 0; c < LOCAL_CACHE; c++) {
        const int j = begin + l + (CACHE + c) * WG;
        if (j < end)
            held_write(dl, j, held[c * WG + l], f, tj, hot, counted, inv_count);
    }
#endif
}

/* Every work-item of every work-group of the cluster, after the writes before it are visible
 * to all of them; a work-group barrier where one work-group plays the cluster. */
inline void cluster_barrier(void)
{
#if CLUSTER_EMULATE || CLUSTER == 1
    barrier(CLK_GLOBAL_MEM_FENCE);
#else
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
cross_entropy_cluster(const __global act_t *logits, const __global int *targets,
                      __global float *losses, __global float *lse, __global act_t *dlogits,
                      __global float2 *part, int rows, int cols, int ignore_index,
                      float inv_count HELD_PARAM)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float2 red[WG];
    const int l = (int)get_local_id(0);
#if CLUSTER_EMULATE
    const int row = (int)get_group_id(0), first = 0;
#else
    const int row = (int)get_group_id(0) / CLUSTER, first = (int)get_group_id(0) % CLUSTER;
#endif
    const int target = targets[row];
    const bool counted = target != ignore_index;
    const int nv = counted || lse != 0 ? cols / VEC : 0; /* an ignored row unread unless lse */
    const int chunk = (cols / VEC + CLUSTER - 1) / CLUSTER;
    const size_t off = (size_t)row * (size_t)cols;
    /* the target's logit, before any rank overwrites it in place */
    const float xt = counted && first == 0 && l == 0 ? act_load(logits, off + (size_t)target) : 0.0f;
    floatv e[CACHE];
    float m_l;
#if CLUSTER_EMULATE
    for (int r = 0; r < CLUSTER; r++) {
        const float2 ms = range_hold(logits + off, min(nv, r * chunk), min(nv, (r + 1) * chunk), l,
                                     e, &m_l, red HELD_ARG);
        if (l == 0)
            part[row * CLUSTER + r] = ms;
    }
#else
    const int begin = min(nv, first * chunk), end = min(nv, (first + 1) * chunk);
    const float2 mine = range_hold(logits + off, begin, end, l, e, &m_l, red HELD_ARG);
    if (l == 0)
        part[row * CLUSTER + first] = mine;
#endif
    cluster_barrier();
    const volatile __global float2 *pairs = part + row * CLUSTER;
    float2 ms = (float2)(-FLT_MAX, 0.0f);
    for (int r = 0; r < CLUSTER; r++)
        ms = lse_combine(ms, pairs[r]);
    if (first == 0 && l == 0)
        write_loss(losses, lse, row, counted, ms, xt);
    if (dlogits == 0)
        return;
#if CLUSTER_EMULATE
    for (int r = 0; r < CLUSTER; r++) { /* each work-item rewrites what it reads itself */
        const int b = min(cols / VEC, r * chunk), end = min(cols / VEC, (r + 1) * chunk);
        range_hold(logits + off, min(nv, b), min(nv, end), l, e, &m_l, red HELD_ARG);
        range_write(dlogits + off, b, end, l, e, m_l, counted, ms, target, inv_count HELD_ARG);
    }
#else
    range_write(dlogits + off, first * chunk, min(cols / VEC, (first + 1) * chunk), l, e, m_l,
                counted, ms, target, inv_count HELD_ARG);
#endif
}
#endif
