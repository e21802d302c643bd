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
 * Tuning parameters (-D; defaults in common.cl): WG, ROWS, VEC.
 */

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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
cross_entropy_rows(const __global act_t *logits, const __global int *targets,
                   __global float *losses, __global float *lse, __global act_t *dlogits, int rows,
                   int cols, int ignore_index, float inv_count)
{
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
#if VEC == 4
    const int tl = target % VEC;
    const float4 hot = (float4)(tl == 0 ? 1.0f : 0.0f, tl == 1 ? 1.0f : 0.0f,
                                tl == 2 ? 1.0f : 0.0f, tl == 3 ? 1.0f : 0.0f);
#else
    const float hot = 1.0f;
#endif
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
    __local float rh[WG], rl[WG];
    const float sum = group_pair_sum(losses, rows, rh, rl);
    if (get_local_id(0) == 0)
        loss[0] = sum * inv_count;
}
