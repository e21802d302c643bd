/*
 * AdamW over up to 8 tensors per launch (torch.optim.AdamW's update, step t >= 1), with the
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
 * Layout: tensor k (k < 8) is p_k, g_k, m_k, v_k, each lens.sk floats (fp32 parameters, their
 * gradients and the optimizer's state; p, m, v updated in place); unused slots have length 0
 * (their buffers may be any valid buffer). starts.sk: the first work-group of tensor k, the
 * prefix sums of ceil(lens.sk / SPAN) (starts.s0 = 0); the grid has starts.s7 +
 * ceil(lens.s7 / SPAN) work-groups of WG.
 * Work decomposition: work-group b serves tensor k, the last with starts.sk <= b, elements
 * (b - starts.sk) * SPAN .. + SPAN - 1 of it; work-item l the elements l, l + WG, ... of that
 * span (ELEMS of them, coalesced).
 *
 * Kernels:
 *   adamw_grad_sumsq: partials[part0 + b] = sum of g^2 over work-group b's span (4 bytes read
 *     per element). Several launches (more than 8 tensors) write consecutive ranges of one
 *     partials buffer.
 *   adamw_grad_norm: one work-group of WG; total[0] = sqrt(the sum of partials[0 .. count-1]),
 *     added in a fixed order as a pair sum (the same result on every run).
 *   adamw_update: the step; reads total[0] for the clip (total NULL: no clip). 16 bytes read,
 *     12 written per element.
 *
 * Tuning parameters (-D; defaults below): WG (common.cl), ELEMS. ROWS must be 1.
 */
#ifndef ELEMS
#define ELEMS 4 /* elements per work-item of a work-group's span */
#endif
#if ROWS != 1
#error "adamw.cl: ROWS must be 1"
#endif
#define SPAN (WG * ELEMS) /* elements per work-group */

/* The tensor that work-group b serves: the last slot whose first group is at most b (empty
 * slots before it start where it does, and are passed over). */
inline int adamw_slot(int8 starts, int b)
{
    return (b >= starts.s1) + (b >= starts.s2) + (b >= starts.s3) + (b >= starts.s4) +
           (b >= starts.s5) + (b >= starts.s6) + (b >= starts.s7);
}

inline int pick_int(int8 v, int k)
{
    return k == 0 ? v.s0 : k == 1 ? v.s1 : k == 2 ? v.s2 : k == 3 ? v.s3 :
           k == 4 ? v.s4 : k == 5 ? v.s5 : k == 6 ? v.s6 : v.s7;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_grad_sumsq(const __global float *g0, const __global float *g1, const __global float *g2,
                 const __global float *g3, const __global float *g4, const __global float *g5,
                 const __global float *g6, const __global float *g7, int8 lens, int8 starts,
                 __global float *partials, int part0)
{
    __local float red[WG];
    const int l = (int)get_local_id(0), b = (int)get_group_id(0);
    const int k = adamw_slot(starts, b);
    const __global float *g = k == 0 ? g0 : k == 1 ? g1 : k == 2 ? g2 : k == 3 ? g3 :
                              k == 4 ? g4 : k == 5 ? g5 : k == 6 ? g6 : g7;
    const int len = pick_int(lens, k), base = (b - pick_int(starts, k)) * SPAN;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        if (at < len)
            sq += g[at] * g[at];
    }
    sq = slot_sum(sq, red, 0, l);
    if (l == 0)
        partials[part0 + b] = sq;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_grad_norm(const __global float *partials, int count, __global float *total)
{
    __local float rh[WG], rl[WG];
    const float sum = group_pair_sum(partials, count, rh, rl);
    if (get_local_id(0) == 0)
        total[0] = sqrt(sum);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
adamw_update(__global float *p0, const __global float *g0, __global float *m0, __global float *v0,
             __global float *p1, const __global float *g1, __global float *m1, __global float *v1,
             __global float *p2, const __global float *g2, __global float *m2, __global float *v2,
             __global float *p3, const __global float *g3, __global float *m3, __global float *v3,
             __global float *p4, const __global float *g4, __global float *m4, __global float *v4,
             __global float *p5, const __global float *g5, __global float *m5, __global float *v5,
             __global float *p6, const __global float *g6, __global float *m6, __global float *v6,
             __global float *p7, const __global float *g7, __global float *m7, __global float *v7,
             int8 lens, int8 starts, float decay, float beta1, float one_minus_beta1, float beta2,
             float one_minus_beta2, float step_size, float inv_bc2_sqrt, float eps,
             const __global float *total, float max_norm)
{
    const int l = (int)get_local_id(0), b = (int)get_group_id(0);
    const int k = adamw_slot(starts, b);
    __global float *p = k == 0 ? p0 : k == 1 ? p1 : k == 2 ? p2 : k == 3 ? p3 :
                        k == 4 ? p4 : k == 5 ? p5 : k == 6 ? p6 : p7;
    const __global float *g = k == 0 ? g0 : k == 1 ? g1 : k == 2 ? g2 : k == 3 ? g3 :
                              k == 4 ? g4 : k == 5 ? g5 : k == 6 ? g6 : g7;
    __global float *m = k == 0 ? m0 : k == 1 ? m1 : k == 2 ? m2 : k == 3 ? m3 :
                        k == 4 ? m4 : k == 5 ? m5 : k == 6 ? m6 : m7;
    __global float *v = k == 0 ? v0 : k == 1 ? v1 : k == 2 ? v2 : k == 3 ? v3 :
                        k == 4 ? v4 : k == 5 ? v5 : k == 6 ? v6 : v7;
    const int len = pick_int(lens, k), base = (b - pick_int(starts, k)) * SPAN;
    float coef = 1.0f;
    if (total != 0) {
        const float c = max_norm / (total[0] + 1e-6f);
        coef = c > 1.0f ? 1.0f : c; /* a NaN c stays NaN, as PyTorch's clamp */
    }
#pragma unroll
    for (int i = 0; i < ELEMS; i++) {
        const int at = base + i * WG + l;
        if (at < len) {
            const float gi = g[at] * coef;
            const float mi = beta1 * m[at] + one_minus_beta1 * gi;
            const float vi = beta2 * v[at] + one_minus_beta2 * (gi * gi);
            const float pi = p[at] * decay;
            p[at] = pi - step_size * (mi / (sqrt(vi) * inv_bc2_sqrt + eps));
            m[at] = mi;
            v[at] = vi;
        }
    }
}
