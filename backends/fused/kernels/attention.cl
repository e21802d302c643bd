/*
 * Flash-style scaled dot-product attention, forward and backward (FlashAttention-2's algorithm:
 * one pass over tiles of keys with an online softmax; no tokens x tokens matrix in memory),
 * grouped-query heads, packed sequences. Follows elem.cl (act_t, act_load, act_store).
 *
 * Layout (row-major; act_t: float, or bf16 under ACT_BF16):
 *   q, out, dout, dq   act_t  tokens x (heads * HEAD_DIM); head h is columns h * HEAD_DIM ..
 *   k, v, dk, dv       act_t  tokens x (kv_heads * HEAD_DIM); query head h reads kv head
 *                             h / (heads / kv_heads)
 *   lse                float  tokens x heads: the natural log of sum_j exp(scale q_i . k_j)
 *   delta              float  tokens x heads: dout_i . out_i (attention_bwd_delta)
 *   kv_range           int    2 x tokens: [kv_range[2i], kv_range[2i + 1]) the keys of query
 *                             row i
 *   q_range            int    2 x tokens: [q_range[2j], q_range[2j + 1]) the query rows that
 *                             attend to key j
 *   dk_part, dv_part   float  splits x tokens x (kv_heads * HEAD_DIM): partial dk, dv of each
 *                             slice of a kv head's query heads (attention_bwd_dkdv, splits > 1)
 * The host builds the range tables from the sequence lengths (row i of a sequence starting at
 * row b of length n: keys [b, i + 1) causal, [b, b + n) full; the inverse for q_range); every
 * range is non-empty and both ends are non-decreasing in the row, which the kernels use to
 * find a tile's span from its first and last row. Masked elements are skipped by their
 * weights (0): the tiles never leave a query tile's span of keys (tiles of keys above the
 * causal diagonal are never visited), but inside a tile a masked key's v (k in the backward)
 * still meets a weight of 0, so an inf or NaN there reaches rows of the tile that do not
 * attend to it (as in a masked softmax followed by a product: 0 * NaN).
 *
 * Scores are taken in base 2: q is multiplied by qscale = scale * log2(e) (host: in double,
 * rounded to float) as it is staged, so that a weight is exp2(q' . k - m); lse is converted
 * to the natural log when written, and back (times log2(e)) when the backward reads it.
 * Products, sums and statistics are float (fma); every sum runs in a fixed order, so the
 * results are the same on every run.
 *
 * Work decomposition. attention_forward and attention_bwd_dq: a work-group of WG = BQ / RQ * TC
 * work-items holds a tile of BQ query rows of one head (global size (WG * heads, ceil(tokens /
 * BQ)), local (WG, 1); group (h, t) takes query tile ntiles - 1 - t, so that the query tiles
 * with the most keys under a causal mask start first) and visits the tiles of BK keys of its
 * span in order. Work-item (tr, tc) = (id / TC, id % TC) owns query rows tr * RQ .. + RQ of the
 * tile: their scores against keys tc * SN .. + SN of a key tile (SN = BK / TC) and their output
 * columns tc * 4 + 4 * TC * g .. + 4 (g < DG, the columns padded to DP, a multiple of 4 * TC).
 * Each key tile: (1) the scores q' . k (and in dq dout . v), reduced over the head dimension in
 * chunks of DK depths that the work-group stages transposed into local memory (double
 * buffered, the next chunk's global loads in registers during the current chunk's products);
 * (2) forward: the rows' maxima through local memory (TC partial maxima per row), the weights
 * p = exp2(s - m) and the rescaling of the row's output and sum by exp2(m_old - m_new); dq:
 * ds = p (dp - delta), p = exp2(s - lse); (3) p (ds) goes to local memory, transposed, and the
 * product with the tile's v (k) rows, staged VK keys at a time, is added to the output held in
 * registers (the row sum l is added there too, in key order, by every work-item of the row).
 * attention_bwd_dkdv: a work-group of KV_WG = KV_BK / KV_RK * KV_TC work-items holds KV_BK keys
 * of one kv head (global size (KV_WG * kv_heads * splits, ceil(tokens / KV_BK)), local
 * (KV_WG, 1); group (hk * splits + s, t): key tile t, the s-th slice of the kv head's query
 * heads) and visits, for each of its query heads, the tiles of KV_BQ query rows that attend to
 * its keys: s^T = k . q' and dp^T = v . dout staged as above, p = exp2(s - lse) and ds = p (dp
 * - delta) to local memory, then dv += p^T dout and dk += ds^T q over KV_QK query rows per
 * staged chunk, dk and dv held in registers for the whole loop. With splits = 1 the work-group
 * writes dk and dv; with splits > 1 (a causal kv head's earliest key tiles carry the most work:
 * split across its query heads, they run in parallel) each slice writes its partial sums, and
 * attention_bwd_dkdv_reduce adds the slices in order. attention_bwd_delta: DELTA_SLOT
 * work-items per (row, head), DELTA_WG per work-group; attention_bwd_dkdv_reduce: one
 * work-item per element, grid-stride.
 *
 * Traffic. Forward: q read once per key tile of its span... from L2; k, v read once per query
 * tile; out written once (plus lse). Backward: delta reads out and dout once; dq reads q, dout
 * once per key tile and k, v once per query tile; dkdv reads k, v once per query tile and q,
 * dout, lse, delta once per key tile; the reduce reads splits partials and writes dk, dv.
 *
 * Tuning parameters (-D from the host; the defaults here are the host's for HEAD_DIM <= 128,
 * and for HEAD_DIM > 128 where they differ; each kernel's local memory stays under 48 KiB):
 *   HEAD_DIM  the head dimension d (a multiple of 8, at most 256): one program per d
 *   BQ        query rows per work-group (forward, dq)
 *   BK        keys per tile of the key loop (forward, dq)
 *   RQ        query rows per work-item (forward, dq)
 *   TC        work-items across a tile's columns (forward, dq): WG = BQ / RQ * TC
 *   DK        depths per staged chunk of the products over the head dimension (all kernels)
 *   VK        keys per staged chunk of v (forward) and k (dq) rows
 *   KV_BK     keys per work-group (dkdv)
 *   KV_RK     keys per work-item (dkdv)
 *   KV_BQ     query rows per tile of the query loop (dkdv)
 *   KV_TC     work-items across a tile's columns (dkdv): KV_WG = KV_BK / KV_RK * KV_TC
 *   KV_QK     query rows per staged chunk of dout and q rows (dkdv)
 *   DELTA_WG, DELTA_SLOT   work-items per work-group and per (row, head) of attention_bwd_delta
 *   FAST_EXP  1: native_exp2 (the device's own precision) in place of exp2
 * Constraints: BQ % RQ == 0, BK % TC == 0, BK % VK == 0, KV_BK % KV_RK == 0, KV_BQ % KV_TC == 0,
 * KV_BQ % KV_QK == 0, DELTA_WG % DELTA_SLOT == 0, DELTA_SLOT a power of two.
 */
#ifndef HEAD_DIM
#define HEAD_DIM 128 /* the head dimension d */
#endif
#ifndef BQ
#if HEAD_DIM > 128
#define BQ 32 /* query rows per work-group (forward, dq) */
#else
#define BQ 64
#endif
#endif
#ifndef BK
#define BK 64 /* keys per tile (forward, dq) */
#endif
#ifndef RQ
#if HEAD_DIM > 128
#define RQ 4 /* query rows per work-item (forward, dq) */
#else
#define RQ 8
#endif
#endif
#ifndef TC
#define TC 16 /* work-items across a tile's columns (forward, dq) */
#endif
#ifndef DK
#define DK 8 /* depths per staged chunk of a product over the head dimension */
#endif
#ifndef VK
#if HEAD_DIM > 128
#define VK 8 /* keys per staged chunk of v (forward) or k (dq) rows */
#else
#define VK 16
#endif
#endif
#ifndef KV_BK
#define KV_BK 64 /* keys per work-group (dkdv) */
#endif
#ifndef KV_RK
#define KV_RK 4 /* keys per work-item (dkdv) */
#endif
#ifndef KV_BQ
#define KV_BQ 32 /* query rows per tile of the query loop (dkdv) */
#endif
#ifndef KV_TC
#define KV_TC 16 /* work-items across a tile's columns (dkdv) */
#endif
#ifndef KV_QK
#if HEAD_DIM > 128
#define KV_QK 4 /* query rows per staged chunk of dout and q rows (dkdv) */
#else
#define KV_QK 8
#endif
#endif
#ifndef DELTA_WG
#define DELTA_WG 256 /* work-items per work-group (delta) */
#endif
#ifndef DELTA_SLOT
#define DELTA_SLOT 16 /* work-items per (row, head) (delta) */
#endif
#ifndef FAST_EXP
#define FAST_EXP 0 /* 1: native_exp2 */
#endif

#if HEAD_DIM % 8 != 0 || HEAD_DIM > 256
#error "HEAD_DIM must be a multiple of 8, at most 256"
#endif
#if BQ % RQ != 0 || BK % TC != 0 || BK % VK != 0 || KV_BK % KV_RK != 0 || KV_BQ % KV_TC != 0 || \
    KV_BQ % KV_QK != 0 || DELTA_WG % DELTA_SLOT != 0 || (DELTA_SLOT & (DELTA_SLOT - 1)) != 0
#error "attention: a tile parameter does not divide its tile"
#endif

#if FAST_EXP
#define EXP2(x) native_exp2(x)
#else
#define EXP2(x) exp2(x)
#endif

#define LOG2E_F 1.44269504088896341f
#define LN2_F   0.693147180559945309f

#define WG    (BQ / RQ * TC)         /* work-items per work-group (forward, dq) */
#define SN    (BK / TC)              /* score columns per work-item (forward, dq) */
#define DP    ((HEAD_DIM + 4 * TC - 1) / (4 * TC) * 4 * TC) /* head columns, padded */
#define DG    (DP / (4 * TC))        /* float4 groups of output columns per work-item */
#define NDK   ((HEAD_DIM + DK - 1) / DK) /* chunks of the head dimension */
#define LDQ   (BQ + 4)               /* row stride of a transposed chunk of BQ rows */
#define LDK   (BK + 4)               /* ... of BK rows */
#define KV_WG (KV_BK / KV_RK * KV_TC) /* work-items per work-group (dkdv) */
#define KV_SN (KV_BQ / KV_TC)        /* score columns per work-item (dkdv) */
#define KV_DP ((HEAD_DIM + 4 * KV_TC - 1) / (4 * KV_TC) * 4 * KV_TC)
#define KV_DG (KV_DP / (4 * KV_TC))
#define LDKV  (KV_BK + 4)
#define LDQQ  (KV_BQ + 4)

/* Registers of one work-item's share of a staged chunk of `rows` rows x `depth` values. */
#define SHARE(rows, depth, threads) (((rows) * (depth) + (threads)-1) / (threads))

/* dst[0 .. n) = p[0 .. n), p in local memory, as float4, float2 or float loads (the widest
 * that n and p's alignment, a multiple of it, allow); n a constant. */
#define RUN4(dst, p, n) \
    for (int u_ = 0; u_ < (n); u_ += 4) { \
        const float4 t_ = *(const __local float4 *)((p) + u_); \
        dst[u_] = t_.x; \
        dst[u_ + 1] = t_.y; \
        dst[u_ + 2] = t_.z; \
        dst[u_ + 3] = t_.w; \
    }
#define RUN2(dst, p, n) \
    for (int u_ = 0; u_ < (n); u_ += 2) { \
        const float2 t_ = *(const __local float2 *)((p) + u_); \
        dst[u_] = t_.x; \
        dst[u_ + 1] = t_.y; \
    }
#define RUN1(dst, p, n) \
    for (int u_ = 0; u_ < (n); u_++) \
        dst[u_] = (p)[u_];
#if RQ % 4 == 0
#define LOAD_RQ RUN4
#elif RQ % 2 == 0
#define LOAD_RQ RUN2
#else
#define LOAD_RQ RUN1
#endif
#if SN % 4 == 0
#define LOAD_SN RUN4
#elif SN % 2 == 0
#define LOAD_SN RUN2
#else
#define LOAD_SN RUN1
#endif
#if KV_RK % 4 == 0
#define LOAD_KV_RK RUN4
#elif KV_RK % 2 == 0
#define LOAD_KV_RK RUN2
#else
#define LOAD_KV_RK RUN1
#endif
#if KV_SN % 4 == 0
#define LOAD_KV_SN RUN4
#elif KV_SN % 2 == 0
#define LOAD_KV_SN RUN2
#else
#define LOAD_KV_SN RUN1
#endif

/* A work-item's share of a chunk of `depth` columns c0 .. of a head (columns from col of each
 * row, ld apart) for rows row0 .. row0 + rows, times f: element e = id + threads * u of the
 * chunk is row e / depth, column e % depth (consecutive work-items read consecutive columns);
 * zero for rows at or past limit and columns past HEAD_DIM. */
inline void chunk_load(__private float *reg, const __global act_t *src, size_t ld, int col,
                       int row0, int rows, int limit, int c0, int depth, float f, int id,
                       int threads)
{
    for (int u = 0; u < SHARE(rows, depth, threads); u++) {
        const int e = id + threads * u, r = e / depth, c = c0 + e % depth, i = row0 + r;
        reg[u] = e < rows * depth && i < limit && c < HEAD_DIM
                     ? act_load(src, (size_t)i * ld + (size_t)(col + c)) * f
                     : 0.0f;
    }
}

/* Stores a share loaded by chunk_load transposed: dst[(e % depth) * lds + e / depth]. */
inline void chunk_store_t(__local float *dst, int lds, const __private float *reg, int rows,
                          int depth, int id, int threads)
{
    for (int u = 0; u < SHARE(rows, depth, threads); u++) {
        const int e = id + threads * u;
        if (e < rows * depth)
            dst[(e % depth) * lds + e / depth] = reg[u];
    }
}

/* Stores a share loaded by chunk_load as rows: dst[(e / depth) * depth + e % depth]. */
inline void chunk_store(__local float *dst, const __private float *reg, int rows, int depth,
                        int id, int threads)
{
    for (int u = 0; u < SHARE(rows, depth, threads); u++) {
        const int e = id + threads * u;
        if (e < rows * depth)
            dst[e] = reg[u];
    }
}

/* ---- forward ---- */

/* Local memory of attention_forward: the staging area (chunks of q' and k transposed, double
 * buffered; then chunks of v rows, double buffered), the weights p transposed, the partial
 * row maxima and the rows' key ranges. */
#define F_QK_BUF  (DK * (LDQ + LDK))
#define F_V_BUF   (VK * DP)
#define F_STAGE   (2 * F_QK_BUF > 2 * F_V_BUF ? 2 * F_QK_BUF : 2 * F_V_BUF)
#define F_QSHARE  SHARE(BQ, DK, WG)
#define F_KSHARE  SHARE(BK, DK, WG)
#define F_VSHARE  SHARE(VK, DP, WG)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
attention_forward(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                  const __global int *kv_range, __global act_t *out, __global float *lse,
                  int tokens, int heads, int kv_heads, float qscale)
{
    __local float stage[F_STAGE];
    __local float ps[BK * LDQ];
    __local float mx[TC * BQ];
    __local int2 rng[BQ];

    const int id = (int)get_local_id(0), tr = id / TC, tc = id % TC;
    const int h = (int)get_group_id(0), hk = h / (heads / kv_heads);
    const int q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * BQ;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int qcol = h * HEAD_DIM, kcol = hk * HEAD_DIM;
    const int last = min(q0 + BQ, tokens) - 1;
    const int lo = kv_range[2 * q0], hi = kv_range[2 * last + 1];

    for (int r = id; r < BQ; r += WG)
        rng[r] = q0 + r < tokens ? vload2(q0 + r, kv_range) : (int2)(0, 0);

    float m[RQ], l[RQ];
    float4 o[RQ][DG];
    for (int r = 0; r < RQ; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int g = 0; g < DG; g++)
            o[r][g] = (float4)(0.0f);
    }

    for (int j0 = lo; j0 < hi; j0 += BK) {
        /* (1) s = q' . k over the head dimension, chunk by chunk */
        float s[RQ][SN];
        for (int r = 0; r < RQ; r++)
            for (int c = 0; c < SN; c++)
                s[r][c] = 0.0f;
        {
            float rq[F_QSHARE], rk[F_KSHARE];
            chunk_load(rq, q, ldq, qcol, q0, BQ, tokens, 0, DK, qscale, id, WG);
            chunk_load(rk, k, ldk, kcol, j0, BK, hi, 0, DK, 1.0f, id, WG);
            chunk_store_t(stage, LDQ, rq, BQ, DK, id, WG);
            chunk_store_t(stage + DK * LDQ, LDK, rk, BK, DK, id, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int n = 0; n < NDK; n++) {
                const __local float *qc = stage + (n & 1) * F_QK_BUF, *kc = qc + DK * LDQ;
                __local float *next = stage + ((n + 1) & 1) * F_QK_BUF;
                if (n + 1 < NDK) {
                    chunk_load(rq, q, ldq, qcol, q0, BQ, tokens, (n + 1) * DK, DK, qscale, id, WG);
                    chunk_load(rk, k, ldk, kcol, j0, BK, hi, (n + 1) * DK, DK, 1.0f, id, WG);
                }
                for (int kk = 0; kk < DK; kk++) {
                    float a[RQ], b[SN];
                    LOAD_RQ(a, qc + kk * LDQ + tr * RQ, RQ)
                    LOAD_SN(b, kc + kk * LDK + tc * SN, SN)
                    for (int r = 0; r < RQ; r++)
                        for (int c = 0; c < SN; c++)
                            s[r][c] = fma(a[r], b[c], s[r][c]);
                }
                if (n + 1 < NDK) {
                    chunk_store_t(next, LDQ, rq, BQ, DK, id, WG);
                    chunk_store_t(next + DK * LDQ, LDK, rk, BK, DK, id, WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }

        /* (2) masks and the partial maxima (of SN scores) of each row; the first chunk of v
         * staged meanwhile (the staging area is free after the last barrier) */
        for (int r = 0; r < RQ; r++) {
            const int2 rg = rng[tr * RQ + r];
            float mr = -INFINITY;
            for (int c = 0; c < SN; c++) {
                const int j = j0 + tc * SN + c;
                s[r][c] = j >= rg.x && j < rg.y ? s[r][c] : -INFINITY;
                mr = fmax(mr, s[r][c]); /* fmax passes over NaN: its weight below is NaN */
            }
            mx[tc * BQ + tr * RQ + r] = mr;
        }
        float rv[F_VSHARE];
        chunk_load(rv, v, ldk, kcol, j0, VK, hi, 0, DP, 1.0f, id, WG);
        chunk_store(stage, rv, VK, DP, id, WG);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* the rows' new maxima (every work-item of a row takes the TC partial maxima in the
         * same order), the rescaling of what the row holds, the weights into ps transposed */
        float mn[RQ];
        for (int r = 0; r < RQ; r++)
            mn[r] = m[r];
        for (int t = 0; t < TC; t++) {
            float pm[RQ];
            LOAD_RQ(pm, mx + t * BQ + tr * RQ, RQ)
            for (int r = 0; r < RQ; r++)
                mn[r] = fmax(mn[r], pm[r]);
        }
        for (int r = 0; r < RQ; r++) {
            /* a row with no finite score yet keeps weights exp2(-inf - 0) = 0 */
            const float mu = mn[r] == -INFINITY ? 0.0f : mn[r], alpha = EXP2(m[r] - mu);
            m[r] = mn[r];
            l[r] *= alpha;
            for (int g = 0; g < DG; g++)
                o[r][g] *= alpha;
            for (int c = 0; c < SN; c++)
                ps[(tc * SN + c) * LDQ + tr * RQ + r] = EXP2(s[r][c] - mu);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* (3) o += p v and l += p over the tile's keys, VK rows of v per staged chunk */
        for (int n = 0; n < BK / VK; n++) {
            const __local float *vc = stage + (n & 1) * F_V_BUF;
            if (n + 1 < BK / VK)
                chunk_load(rv, v, ldk, kcol, j0 + (n + 1) * VK, VK, hi, 0, DP, 1.0f, id, WG);
            for (int jj = 0; jj < VK; jj++) {
                float p[RQ];
                LOAD_RQ(p, ps + (n * VK + jj) * LDQ + tr * RQ, RQ)
                for (int g = 0; g < DG; g++) {
                    const float4 w = *(const __local float4 *)(vc + jj * DP + tc * 4 + 4 * TC * g);
                    for (int r = 0; r < RQ; r++)
                        o[r][g] = fma((float4)(p[r]), w, o[r][g]);
                }
                for (int r = 0; r < RQ; r++)
                    l[r] += p[r];
            }
            if (n + 1 < BK / VK)
                chunk_store(stage + ((n + 1) & 1) * F_V_BUF, rv, VK, DP, id, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    for (int r = 0; r < RQ; r++) {
        const int i = q0 + tr * RQ + r;
        if (i >= tokens)
            break;
        const float inv = 1.0f / l[r];
        for (int g = 0; g < DG; g++) {
            const float4 x = o[r][g] * inv;
            const float e[4] = {x.x, x.y, x.z, x.w};
            for (int u = 0; u < 4; u++) {
                const int c = tc * 4 + 4 * TC * g + u;
                if (c < HEAD_DIM)
                    act_store(out, (size_t)i * ldq + (size_t)(qcol + c), e[u]);
            }
        }
        if (tc == 0)
            lse[(size_t)i * heads + h] = (m[r] + log2(l[r])) * LN2_F;
    }
}

/* ---- backward ---- */

/* delta[i * heads + h] = dout_i . out_i over head h's columns: DELTA_SLOT work-items per
 * (row, head), each summing columns t, t + DELTA_SLOT, ..., then a tree in local memory (a
 * fixed order). */
__kernel __attribute__((reqd_work_group_size(DELTA_WG, 1, 1))) void
attention_bwd_delta(const __global act_t *out, const __global act_t *dout, __global float *delta,
                    int tokens, int heads)
{
    __local float red[DELTA_WG];
    const int id = (int)get_local_id(0), t = id % DELTA_SLOT;
    const size_t pair = get_group_id(0) * (size_t)(DELTA_WG / DELTA_SLOT) + id / DELTA_SLOT;
    const bool live = pair < (size_t)tokens * (size_t)heads;
    float sum = 0.0f;
    if (live) {
        const size_t base = pair * HEAD_DIM; /* (row, head) pairs are HEAD_DIM apart */
        for (int c = t; c < HEAD_DIM; c += DELTA_SLOT)
            sum = fma(act_load(dout, base + c), act_load(out, base + c), sum);
    }
    red[id] = sum;
    for (int w = DELTA_SLOT / 2; w > 0; w /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t < w)
            red[id] += red[id + w];
    }
    if (live && t == 0)
        delta[pair] = red[id];
}

/* Local memory of attention_bwd_dq: the staging area (chunks of q', dout, k and v transposed,
 * double buffered; then chunks of k rows, double buffered), ds transposed, the rows' key
 * ranges. */
#define Q_S_BUF  (DK * (2 * LDQ + 2 * LDK))
#define Q_K_BUF  (VK * DP)
#define Q_STAGE  (2 * Q_S_BUF > 2 * Q_K_BUF ? 2 * Q_S_BUF : 2 * Q_K_BUF)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
attention_bwd_dq(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                 const __global act_t *dout, const __global float *lse,
                 const __global float *delta, const __global int *kv_range, __global act_t *dq,
                 int tokens, int heads, int kv_heads, float qscale, float scale)
{
    __local float stage[Q_STAGE];
    __local float dss[BK * LDQ];
    __local int2 rng[BQ];

    const int id = (int)get_local_id(0), tr = id / TC, tc = id % TC;
    const int h = (int)get_group_id(0), hk = h / (heads / kv_heads);
    const int q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * BQ;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int qcol = h * HEAD_DIM, kcol = hk * HEAD_DIM;
    const int last = min(q0 + BQ, tokens) - 1;
    const int lo = kv_range[2 * q0], hi = kv_range[2 * last + 1];

    for (int r = id; r < BQ; r += WG)
        rng[r] = q0 + r < tokens ? vload2(q0 + r, kv_range) : (int2)(0, 0);

    float lse2[RQ], dl[RQ];
    float4 acc[RQ][DG];
    for (int r = 0; r < RQ; r++) {
        const int i = q0 + tr * RQ + r;
        lse2[r] = i < tokens ? lse[(size_t)i * heads + h] * LOG2E_F : 0.0f;
        dl[r] = i < tokens ? delta[(size_t)i * heads + h] : 0.0f;
        for (int g = 0; g < DG; g++)
            acc[r][g] = (float4)(0.0f);
    }

    for (int j0 = lo; j0 < hi; j0 += BK) {
        /* (1) s = q' . k and dp = dout . v over the head dimension, chunk by chunk */
        float s[RQ][SN], dp[RQ][SN];
        for (int r = 0; r < RQ; r++)
            for (int c = 0; c < SN; c++)
                s[r][c] = dp[r][c] = 0.0f;
        {
            float rq[F_QSHARE], rg[F_QSHARE], rk[F_KSHARE], rv[F_KSHARE];
            for (int n = -1; n < NDK; n++) {
                /* n = -1 only stages chunk 0 */
                const __local float *qc = stage + (n & 1) * Q_S_BUF, *gc = qc + DK * LDQ;
                const __local float *kc = gc + DK * LDQ, *vc = kc + DK * LDK;
                __local float *next = stage + ((n + 1) & 1) * Q_S_BUF;
                if (n + 1 < NDK) {
                    const int c0 = (n + 1) * DK;
                    chunk_load(rq, q, ldq, qcol, q0, BQ, tokens, c0, DK, qscale, id, WG);
                    chunk_load(rg, dout, ldq, qcol, q0, BQ, tokens, c0, DK, 1.0f, id, WG);
                    chunk_load(rk, k, ldk, kcol, j0, BK, hi, c0, DK, 1.0f, id, WG);
                    chunk_load(rv, v, ldk, kcol, j0, BK, hi, c0, DK, 1.0f, id, WG);
                }
                for (int kk = 0; kk < DK && n >= 0; kk++) {
                    float a[RQ], ga[RQ], b[SN], w[SN];
                    LOAD_RQ(a, qc + kk * LDQ + tr * RQ, RQ)
                    LOAD_RQ(ga, gc + kk * LDQ + tr * RQ, RQ)
                    LOAD_SN(b, kc + kk * LDK + tc * SN, SN)
                    LOAD_SN(w, vc + kk * LDK + tc * SN, SN)
                    for (int r = 0; r < RQ; r++)
                        for (int c = 0; c < SN; c++) {
                            s[r][c] = fma(a[r], b[c], s[r][c]);
                            dp[r][c] = fma(ga[r], w[c], dp[r][c]);
                        }
                }
                if (n + 1 < NDK) {
                    chunk_store_t(next, LDQ, rq, BQ, DK, id, WG);
                    chunk_store_t(next + DK * LDQ, LDQ, rg, BQ, DK, id, WG);
                    chunk_store_t(next + 2 * DK * LDQ, LDK, rk, BK, DK, id, WG);
                    chunk_store_t(next + 2 * DK * LDQ + DK * LDK, LDK, rv, BK, DK, id, WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }

        /* (2) ds = p (dp - delta), p = exp2(s - lse), 0 where masked, into dss transposed */
        for (int r = 0; r < RQ; r++) {
            const int2 rgn = rng[tr * RQ + r];
            for (int c = 0; c < SN; c++) {
                const int j = j0 + tc * SN + c;
                const bool ok = j >= rgn.x && j < rgn.y;
                const float p = EXP2(s[r][c] - lse2[r]);
                dss[(tc * SN + c) * LDQ + tr * RQ + r] = ok ? p * (dp[r][c] - dl[r]) : 0.0f;
            }
        }

        /* (3) dq += ds k over the tile's keys, VK rows of k per staged chunk */
        float rk2[F_VSHARE];
        chunk_load(rk2, k, ldk, kcol, j0, VK, hi, 0, DP, 1.0f, id, WG);
        chunk_store(stage, rk2, VK, DP, id, WG);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int n = 0; n < BK / VK; n++) {
            const __local float *kc = stage + (n & 1) * Q_K_BUF;
            if (n + 1 < BK / VK)
                chunk_load(rk2, k, ldk, kcol, j0 + (n + 1) * VK, VK, hi, 0, DP, 1.0f, id, WG);
            for (int jj = 0; jj < VK; jj++) {
                float w[RQ];
                LOAD_RQ(w, dss + (n * VK + jj) * LDQ + tr * RQ, RQ)
                for (int g = 0; g < DG; g++) {
                    const float4 x = *(const __local float4 *)(kc + jj * DP + tc * 4 + 4 * TC * g);
                    for (int r = 0; r < RQ; r++)
                        acc[r][g] = fma((float4)(w[r]), x, acc[r][g]);
                }
            }
            if (n + 1 < BK / VK)
                chunk_store(stage + ((n + 1) & 1) * Q_K_BUF, rk2, VK, DP, id, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    for (int r = 0; r < RQ; r++) {
        const int i = q0 + tr * RQ + r;
        if (i >= tokens)
            break;
        for (int g = 0; g < DG; g++) {
            const float4 x = acc[r][g] * scale;
            const float e[4] = {x.x, x.y, x.z, x.w};
            for (int u = 0; u < 4; u++) {
                const int c = tc * 4 + 4 * TC * g + u;
                if (c < HEAD_DIM)
                    act_store(dq, (size_t)i * ldq + (size_t)(qcol + c), e[u]);
            }
        }
    }
}

/* Local memory of attention_bwd_dkdv: the staging area (chunks of k, v, q' and dout
 * transposed, double buffered; then chunks of dout and q rows, double buffered), p and ds
 * transposed (query-major), the keys' query ranges. */
#define KV_S_BUF  (DK * (2 * LDKV + 2 * LDQQ))
#define KV_R_BUF  (KV_QK * KV_DP)
#define KV_STAGE  (2 * KV_S_BUF > 4 * KV_R_BUF ? 2 * KV_S_BUF : 4 * KV_R_BUF)
#define KV_KSHARE SHARE(KV_BK, DK, KV_WG)
#define KV_QSHARE SHARE(KV_BQ, DK, KV_WG)
#define KV_RSHARE SHARE(KV_QK, KV_DP, KV_WG)

__kernel __attribute__((reqd_work_group_size(KV_WG, 1, 1))) void
attention_bwd_dkdv(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                   const __global act_t *dout, const __global float *lse,
                   const __global float *delta, const __global int *q_range, __global act_t *dk,
                   __global act_t *dv, __global float *dk_part, __global float *dv_part,
                   int tokens, int heads, int kv_heads, int splits, float qscale, float scale)
{
    __local float stage[KV_STAGE];
    __local float ps[KV_BQ * LDKV], dss[KV_BQ * LDKV];
    __local int2 rng[KV_BK];

    const int id = (int)get_local_id(0), tr = id / KV_TC, tc = id % KV_TC;
    const int hk = (int)get_group_id(0) / splits, slice = (int)get_group_id(0) % splits;
    const int per = heads / kv_heads / splits, h0 = hk * (heads / kv_heads) + slice * per;
    const int k0 = (int)get_group_id(1) * KV_BK;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int kcol = hk * HEAD_DIM;
    const int last = min(k0 + KV_BK, tokens) - 1;
    const int lo = q_range[2 * k0], hi = q_range[2 * last + 1];

    for (int r = id; r < KV_BK; r += KV_WG)
        rng[r] = k0 + r < tokens ? vload2(k0 + r, q_range) : (int2)(0, 0);

    float4 dka[KV_RK][KV_DG], dva[KV_RK][KV_DG];
    for (int r = 0; r < KV_RK; r++)
        for (int g = 0; g < KV_DG; g++)
            dka[r][g] = dva[r][g] = (float4)(0.0f);

    for (int h = h0; h < h0 + per; h++) {
        const int qcol = h * HEAD_DIM;
        for (int i0 = lo; i0 < hi; i0 += KV_BQ) {
            /* (1) s = k . q' and dp = v . dout over the head dimension, chunk by chunk */
            float s[KV_RK][KV_SN], dp[KV_RK][KV_SN];
            for (int r = 0; r < KV_RK; r++)
                for (int c = 0; c < KV_SN; c++)
                    s[r][c] = dp[r][c] = 0.0f;
            {
                float rk[KV_KSHARE], rv[KV_KSHARE], rq[KV_QSHARE], rg[KV_QSHARE];
                for (int n = -1; n < NDK; n++) {
                    /* n = -1 only stages chunk 0 */
                    const __local float *kc = stage + (n & 1) * KV_S_BUF, *vc = kc + DK * LDKV;
                    const __local float *qc = vc + DK * LDKV, *gc = qc + DK * LDQQ;
                    __local float *next = stage + ((n + 1) & 1) * KV_S_BUF;
                    if (n + 1 < NDK) {
                        const int c0 = (n + 1) * DK;
                        chunk_load(rk, k, ldk, kcol, k0, KV_BK, tokens, c0, DK, 1.0f, id, KV_WG);
                        chunk_load(rv, v, ldk, kcol, k0, KV_BK, tokens, c0, DK, 1.0f, id, KV_WG);
                        chunk_load(rq, q, ldq, qcol, i0, KV_BQ, hi, c0, DK, qscale, id, KV_WG);
                        chunk_load(rg, dout, ldq, qcol, i0, KV_BQ, hi, c0, DK, 1.0f, id, KV_WG);
                    }
                    for (int kk = 0; kk < DK && n >= 0; kk++) {
                        float a[KV_RK], w[KV_RK], b[KV_SN], ga[KV_SN];
                        LOAD_KV_RK(a, kc + kk * LDKV + tr * KV_RK, KV_RK)
                        LOAD_KV_RK(w, vc + kk * LDKV + tr * KV_RK, KV_RK)
                        LOAD_KV_SN(b, qc + kk * LDQQ + tc * KV_SN, KV_SN)
                        LOAD_KV_SN(ga, gc + kk * LDQQ + tc * KV_SN, KV_SN)
                        for (int r = 0; r < KV_RK; r++)
                            for (int c = 0; c < KV_SN; c++) {
                                s[r][c] = fma(a[r], b[c], s[r][c]);
                                dp[r][c] = fma(w[r], ga[c], dp[r][c]);
                            }
                    }
                    if (n + 1 < NDK) {
                        chunk_store_t(next, LDKV, rk, KV_BK, DK, id, KV_WG);
                        chunk_store_t(next + DK * LDKV, LDKV, rv, KV_BK, DK, id, KV_WG);
                        chunk_store_t(next + 2 * DK * LDKV, LDQQ, rq, KV_BQ, DK, id, KV_WG);
                        chunk_store_t(next + 2 * DK * LDKV + DK * LDQQ, LDQQ, rg, KV_BQ, DK, id,
                                      KV_WG);
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
            }

            /* (2) p = exp2(s - lse) and ds = p (dp - delta), 0 where masked, transposed */
            for (int c = 0; c < KV_SN; c++) {
                const int i = i0 + tc * KV_SN + c;
                const bool live = i < tokens;
                const float lse2 = live ? lse[(size_t)i * heads + h] * LOG2E_F : 0.0f;
                const float dl = live ? delta[(size_t)i * heads + h] : 0.0f;
                for (int r = 0; r < KV_RK; r++) {
                    const int2 rgn = rng[tr * KV_RK + r];
                    const bool ok = i >= rgn.x && i < rgn.y;
                    const float p = EXP2(s[r][c] - lse2);
                    ps[(tc * KV_SN + c) * LDKV + tr * KV_RK + r] = ok ? p : 0.0f;
                    dss[(tc * KV_SN + c) * LDKV + tr * KV_RK + r] = ok ? p * (dp[r][c] - dl) : 0.0f;
                }
            }

            /* (3) dv += p^T dout and dk += ds^T q over the tile's query rows, KV_QK rows of
             * dout and q per staged chunk */
            float rg2[KV_RSHARE], rq2[KV_RSHARE];
            chunk_load(rg2, dout, ldq, qcol, i0, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
            chunk_load(rq2, q, ldq, qcol, i0, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
            chunk_store(stage, rg2, KV_QK, KV_DP, id, KV_WG);
            chunk_store(stage + KV_R_BUF, rq2, KV_QK, KV_DP, id, KV_WG);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int n = 0; n < KV_BQ / KV_QK; n++) {
                const __local float *gc = stage + (n & 1) * 2 * KV_R_BUF, *qc = gc + KV_R_BUF;
                __local float *next = stage + ((n + 1) & 1) * 2 * KV_R_BUF;
                if (n + 1 < KV_BQ / KV_QK) {
                    const int i1 = i0 + (n + 1) * KV_QK;
                    chunk_load(rg2, dout, ldq, qcol, i1, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
                    chunk_load(rq2, q, ldq, qcol, i1, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
                }
                for (int ii = 0; ii < KV_QK; ii++) {
                    float pw[KV_RK], dw[KV_RK];
                    LOAD_KV_RK(pw, ps + (n * KV_QK + ii) * LDKV + tr * KV_RK, KV_RK)
                    LOAD_KV_RK(dw, dss + (n * KV_QK + ii) * LDKV + tr * KV_RK, KV_RK)
                    for (int g = 0; g < KV_DG; g++) {
                        const int at = ii * KV_DP + tc * 4 + 4 * KV_TC * g;
                        const float4 x = *(const __local float4 *)(gc + at);
                        const float4 y = *(const __local float4 *)(qc + at);
                        for (int r = 0; r < KV_RK; r++) {
                            dva[r][g] = fma((float4)(pw[r]), x, dva[r][g]);
                            dka[r][g] = fma((float4)(dw[r]), y, dka[r][g]);
                        }
                    }
                }
                if (n + 1 < KV_BQ / KV_QK) {
                    chunk_store(next, rg2, KV_QK, KV_DP, id, KV_WG);
                    chunk_store(next + KV_R_BUF, rq2, KV_QK, KV_DP, id, KV_WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }
    }

    for (int r = 0; r < KV_RK; r++) {
        const int j = k0 + tr * KV_RK + r;
        if (j >= tokens)
            break;
        for (int g = 0; g < KV_DG; g++) {
            const float4 x = dka[r][g] * scale, y = dva[r][g];
            const float ek[4] = {x.x, x.y, x.z, x.w}, ev[4] = {y.x, y.y, y.z, y.w};
            for (int u = 0; u < 4; u++) {
                const int c = tc * 4 + 4 * KV_TC * g + u;
                if (c >= HEAD_DIM)
                    continue;
                const size_t at = (size_t)j * ldk + (size_t)(kcol + c);
                if (splits == 1) {
                    act_store(dk, at, ek[u]);
                    act_store(dv, at, ev[u]);
                } else {
                    const size_t sat = (size_t)slice * (size_t)tokens * ldk + at;
                    dk_part[sat] = ek[u];
                    dv_part[sat] = ev[u];
                }
            }
        }
    }
}

/* dk, dv = the sums of the splits slices of dk_part, dv_part (each tokens x kv_cols), in slice
 * order; one work-item per element, grid-stride. */
__kernel void attention_bwd_dkdv_reduce(const __global float *dk_part,
                                        const __global float *dv_part, __global act_t *dk,
                                        __global act_t *dv, int tokens, int kv_cols, int splits)
{
    const size_t n = (size_t)tokens * (size_t)kv_cols;
    for (size_t e = get_global_id(0); e < n; e += get_global_size(0)) {
        float a = dk_part[e], b = dv_part[e];
        for (int s = 1; s < splits; s++) {
            a += dk_part[(size_t)s * n + e];
            b += dv_part[(size_t)s * n + e];
        }
        act_store(dk, e, a);
        act_store(dv, e, b);
    }
}
