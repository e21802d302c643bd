/*
 * Flash-style scaled dot-product attention, forward and backward (FlashAttention-2's algorithm:
 * one pass over tiles of keys with an online softmax; no tokens x tokens matrix in memory),
 * grouped-query heads, packed sequences. Follows elem.cl (act_t, act_load, act_store).
 *
 * Layout (row-major; act_t: float, or bf16 under ACT_BF16):
 *   q, out, dout, dq   act_t  tokens x (heads * HEAD_DIM); head h is columns h * HEAD_DIM ..
 *   k, v, dk, dv       act_t  tokens x (kv_heads * HEAD_DIM); query head h reads kv head
 *                             h / (heads / kv_heads)
 *   lse                float  tokens x heads: lse[i * heads + h] = the natural log of
 *                             sum_j exp(scale q_i . k_j) over row i's keys
 *   delta              float  tokens x heads: dout_i . out_i (attention_bwd_delta)
 *   kv_range           int    2 x tokens: [kv_range[2i], kv_range[2i + 1]) the keys of row i
 *   q_range            int    2 x tokens: [q_range[2j], q_range[2j + 1]) the rows that attend
 *                             to key j
 *   dk_part, dv_part   float  splits x tokens x (kv_heads * HEAD_DIM): the partial dk, dv of
 *                             each slice of a kv head's query heads (dkdv with splits > 1)
 * The host builds the range tables from the sequence lengths (row i of a sequence of rows
 * [b, b + n): keys [b, i + 1) when causal, [max(b, i + 1 - window), i + 1) with a sliding
 * window, else [b, b + n); q_range the inverse); every range is non-empty and both its ends
 * are non-decreasing in the row, so that a tile's span is [begin of its first row, end of its
 * last). Tiles of keys outside a query tile's span (above the causal diagonal, before the
 * window, in other sequences) are never visited; inside a visited tile a masked
 * pair gets the weight 0, which multiplies the other row's v (k in dq, q and dout in dk, dv):
 * an inf or NaN there reaches the rows of the tile that do not attend to it (0 * NaN, as in a
 * masked softmax followed by a product).
 *
 * Scores are taken in base 2: q is multiplied by qscale = scale * log2(e) (the host computes
 * it in double and rounds it to float) as it is staged, so that a weight is exp2(q' . k - m);
 * lse is converted to the natural log when written, and back when the backward reads it.
 * Arithmetic in float (fma), every sum in a fixed order: the same results on every run.
 *
 * Work decomposition. A work-item holds a register micro-tile of each product; the operands
 * pass through local memory in chunks that the work-group stages (double buffered: the global
 * loads of chunk n + 1 go to registers before the products of chunk n and to the other buffer
 * after them, one barrier per chunk). Products over the head dimension stage both operands
 * transposed, DK depths at a time (so a work-item reads runs of its rows and of its columns as
 * float4); products over keys or queries stage rows of v, k, q or dout.
 *
 * attention_forward: global (WG * heads, ceil(tokens / BQ)), local (WG, 1), WG = BQ / RQ * TC.
 * Group (h, t) holds query tile ntiles - 1 - t of head h (the tiles with the most keys under a
 * causal mask start first) and visits the tiles of BK keys of its span in order. Work-item
 * (tr, tc) = (id / TC, id % TC) owns rows tr * RQ .. + RQ: their scores against keys
 * tc * SN .. + SN of a key tile (SN = BK / TC), and their output columns tc * 4 + 4 * TC * g
 * .. + 4, g < DG (the head's columns padded to a multiple of 4 * TC). Per key tile: (1) the
 * scores, chunks of DK depths; (2) the rows' new maxima from the TC partial maxima of each row
 * (through local memory), the rescaling of the row's output and sum by exp2(m_old - m_new),
 * the weights into local memory transposed, each work-item's part of the row sums; (3) out +=
 * p v over rows of v staged VK at a time. At the end the TC parts of each row sum are added
 * (through local memory, in the same order by every work-item of the row).
 * attention_bwd_delta: DELTA_SLOT work-items per (row, head), DELTA_WG per group; global
 * (ceil(tokens * heads * DELTA_SLOT / DELTA_WG) * DELTA_WG), local (DELTA_WG). Reads out and
 * dout once.
 * attention_bwd_dq: as the forward with the DQ_ parameters (global (DQ_WG * heads,
 * ceil(tokens / DQ_BQ)), local (DQ_WG, 1)): per key tile (1) s = q' . k and dp = dout . v
 * together; (2) ds = p (dp - delta), p = exp2(s - lse), to local memory transposed; (3) dq +=
 * ds k over rows of k staged DQ_VK at a time; dq = scale * the sum at the end.
 * attention_bwd_dkdv: global (KV_WG * kv_heads * splits, ceil(tokens / KV_BK)), local (KV_WG,
 * 1), KV_WG = KV_BK / KV_RK * KV_TC; splits divides heads / kv_heads. Group (hk * splits + s, t)
 * holds key tile t of kv head hk and slice s of its query heads, and visits, for each of
 * them, the tiles of KV_BQ rows that attend to its keys. Work-item (tr, tc) owns keys
 * tr * KV_RK .. + KV_RK, their scores against rows tc * KV_SN .. + KV_SN of the query tile, and
 * their dk and dv columns as the forward's output columns (with KV_TC). Per query tile: (1)
 * s = k . q' and dp = v . dout; (2) p and ds to local memory transposed; (3) dv += p^T dout and
 * dk += ds^T q over rows of dout and q staged KV_QK at a time. dk and dv stay in registers over
 * the whole loop; splits = 1 writes them (dk times scale), splits > 1 writes each slice's
 * partial sums, which attention_bwd_dkdv_reduce adds in slice order (under a causal mask a kv
 * head's first key tiles carry the most work: split, they run in parallel).
 * attention_bwd_dkdv_reduce: one work-item per element, grid-stride (any global size).
 *
 * Bytes per element (e = 4, or 2 in bf16; n_k: the key tiles in the span of a row's query
 * tile, n_q: the query tiles whose spans hold a key; each about tokens / 2 / tile under a
 * causal mask; the repeated reads mostly from L2): the forward reads each element of q n_k
 * times, of k and v n_q times per query head of their kv head, writes out once (e) and lse (4
 * per row and head). delta reads out and dout once, writes 4 per row and head. dq reads q and
 * dout n_k times, k twice and v once per query tile whose span holds them and per query
 * head, lse and delta once; writes dq once. dkdv reads k and v once per query tile visited, q
 * and dout twice per key tile whose rows they attend to, lse and delta once per key tile;
 * writes dk and dv once (e), or, split, splits partial slices (4 bytes); the reduce reads the
 * slices and writes dk and dv once (e).
 *
 * Tuning parameters (-D from the host; the defaults here are the host's, for HEAD_DIM <= 128
 * and, where they differ, for HEAD_DIM > 128; every kernel's local memory stays under 48 KiB
 * with them):
 *   HEAD_DIM   the head dimension d (a multiple of 8, at most 256): one program per d
 *   BQ, DQ_BQ  query rows per work-group (forward, dq)
 *   BK, DQ_BK  keys per tile of the key loop (forward, dq)
 *   RQ, DQ_RQ  query rows per work-item (forward, dq)
 *   TC, DQ_TC  work-items across a tile's columns (forward, dq)
 *   DK, DQ_DK, KV_DK  depths per staged chunk of a product over the head dimension
 *   VK, DQ_VK  keys per staged chunk of v rows (forward), of k rows (dq)
 *   KV_BK      keys per work-group (dkdv)
 *   KV_RK      keys per work-item (dkdv)
 *   KV_BQ      query rows per tile of the query loop (dkdv)
 *   KV_TC      work-items across a tile's columns (dkdv)
 *   KV_QK      query rows per staged chunk of dout and q rows (dkdv)
 *   DELTA_WG, DELTA_SLOT  work-items per group, and per (row, head) (delta)
 *   FAST_EXP   1: native_exp2 (the device's own accuracy) in place of exp2
 *   DQ_ATOMIC  1: dq is summed by attention_bwd_dkdv_mma with atomic adds (attention_mma.cl),
 *              attention_bwd_delta zeroing it first; attention_bwd_dq is not run
 * Each divides its tile: BQ % RQ, BK % TC, BK % VK (likewise DQ_), KV_BK % KV_RK,
 * KV_BQ % KV_TC, KV_BQ % KV_QK, DELTA_WG % DELTA_SLOT == 0; DELTA_SLOT a power of two.
 */
#ifndef HEAD_DIM
#define HEAD_DIM 128 /* the head dimension d */
#endif
#define ATT_WIDE (HEAD_DIM > 128) /* heads whose tiles are sized down to fit */

#ifndef BQ
#define BQ (ATT_WIDE ? 32 : 64) /* query rows per work-group (forward) */
#endif
#ifndef BK
#define BK 64 /* keys per tile (forward) */
#endif
#ifndef RQ
#define RQ (ATT_WIDE ? 4 : 8) /* query rows per work-item (forward) */
#endif
#ifndef TC
#define TC 16 /* work-items across a tile's columns (forward) */
#endif
#ifndef DK
#define DK 16 /* depths per staged chunk of q and k (forward) */
#endif
#ifndef VK
#define VK (ATT_WIDE ? 8 : 16) /* keys per staged chunk of v rows (forward) */
#endif
#ifndef DQ_BQ
#define DQ_BQ (ATT_WIDE ? 32 : 64) /* query rows per work-group (dq) */
#endif
#ifndef DQ_BK
#define DQ_BK 64 /* keys per tile (dq) */
#endif
#ifndef DQ_RQ
#define DQ_RQ (ATT_WIDE ? 4 : 8) /* query rows per work-item (dq) */
#endif
#ifndef DQ_TC
#define DQ_TC 16 /* work-items across a tile's columns (dq) */
#endif
#ifndef DQ_DK
#define DQ_DK 8 /* depths per staged chunk of q, dout, k and v (dq) */
#endif
#ifndef DQ_VK
#define DQ_VK (ATT_WIDE ? 8 : 16) /* keys per staged chunk of k rows (dq) */
#endif
#ifndef KV_BK
#define KV_BK (ATT_WIDE ? 32 : 128) /* keys per work-group (dkdv) */
#endif
#ifndef KV_RK
#define KV_RK (ATT_WIDE ? 2 : 8) /* keys per work-item (dkdv) */
#endif
#ifndef KV_BQ
#define KV_BQ 32 /* query rows per tile of the query loop (dkdv) */
#endif
#ifndef KV_TC
#define KV_TC 16 /* work-items across a tile's columns (dkdv) */
#endif
#ifndef KV_DK
#define KV_DK 8 /* depths per staged chunk of k, v, q and dout (dkdv) */
#endif
#ifndef KV_QK
#define KV_QK (ATT_WIDE ? 4 : 8) /* query rows per staged chunk of dout and q rows (dkdv) */
#endif
#ifndef DELTA_WG
#define DELTA_WG 256 /* work-items per work-group (delta) */
#endif
#ifndef DELTA_SLOT
#define DELTA_SLOT 16 /* work-items per (row, head) (delta) */
#endif
#ifndef DQ_ATOMIC
#define DQ_ATOMIC 0 /* 1: dq summed by dk and dv's kernel in any order (attention_mma.cl) */
#endif
#ifndef FAST_EXP
#define FAST_EXP 0 /* 1: native_exp2 */
#endif

#if HEAD_DIM % 8 != 0 || HEAD_DIM > 256
#error "HEAD_DIM must be a multiple of 8, at most 256"
#endif
#if BQ % RQ || BK % TC || BK % VK || DQ_BQ % DQ_RQ || DQ_BK % DQ_TC || DQ_BK % DQ_VK || \
    KV_BK % KV_RK || KV_BQ % KV_TC || KV_BQ % KV_QK || DELTA_WG % DELTA_SLOT || \
    (DELTA_SLOT & (DELTA_SLOT - 1))
#error "attention: a tile parameter does not divide its tile"
#endif
#if DQ_ATOMIC && ACT_BF16
#error "DQ_ATOMIC adds into a float dq"
#endif
/* delta's dq to zero, where dk and dv's kernel adds into it */
#if DQ_ATOMIC
#define DQ_ZEROED_PARAM , __global float *dq
#else
#define DQ_ZEROED_PARAM
#endif

#if FAST_EXP
#define EXP2(x) native_exp2(x)
#else
#define EXP2(x) exp2(x)
#endif

#define LOG2E_F 1.44269504088896341f
#define LN2_F   0.693147180559945309f

/* Columns of a head padded to whole float4 groups of `tc` work-items, and the groups per
 * work-item. */
#define PADDED(tc) ((HEAD_DIM + 4 * (tc)-1) / (4 * (tc)) * 4 * (tc))
#define CHUNKS(dk) ((HEAD_DIM + (dk)-1) / (dk)) /* chunks of the head dimension */

#define WG    (BQ / RQ * TC)     /* work-items per work-group (forward) */
#define SN    (BK / TC)          /* score columns per work-item */
#define DP    PADDED(TC)
#define DG    (DP / (4 * TC))    /* float4 groups of output columns per work-item */
#define LDQ   (BQ + 4)           /* row stride of a transposed chunk of BQ rows */
#define LDK   (BK + 4)           /* ... of BK rows */

#define DQ_WG  (DQ_BQ / DQ_RQ * DQ_TC)
#define DQ_SN  (DQ_BK / DQ_TC)
#define DQ_DP  PADDED(DQ_TC)
#define DQ_DG  (DQ_DP / (4 * DQ_TC))
#define DQ_LDQ (DQ_BQ + 4)
#define DQ_LDK (DQ_BK + 4)

#define KV_WG  (KV_BK / KV_RK * KV_TC)
#define KV_SN  (KV_BQ / KV_TC)
#define KV_DP  PADDED(KV_TC)
#define KV_DG  (KV_DP / (4 * KV_TC))
#define KV_LDK (KV_BK + 4)
#define KV_LDQ (KV_BQ + 4)

/* Registers of one work-item's share of a staged chunk of rows x depth values. */
#define SHARE(rows, depth, threads) (((rows) * (depth) + (threads)-1) / (threads))

/* Runs of n consecutive floats between private dst (src) and local p, a multiple of the
 * run's vector width from an aligned start: float4, float2 or float accesses. Local memory
 * is read as float4 through a cast (vload4 would let the compiler split it: it cannot prove
 * the alignment that the layouts give), so every local array is declared 16-byte aligned:
 * a float array alone is aligned to 4 bytes, and NVIDIA's devices fault on a vector access
 * that is not aligned to its size. */
#define RUN_LOAD4(dst, p, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_ += 4) { \
            const float4 t_ = *(const __local float4 *)((p) + u_); \
            dst[u_] = t_.x; \
            dst[u_ + 1] = t_.y; \
            dst[u_ + 2] = t_.z; \
            dst[u_ + 3] = t_.w; \
        } \
    } while (0)
#define RUN_LOAD2(dst, p, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_ += 2) { \
            const float2 t_ = *(const __local float2 *)((p) + u_); \
            dst[u_] = t_.x; \
            dst[u_ + 1] = t_.y; \
        } \
    } while (0)
#define RUN_LOAD1(dst, p, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_++) dst[u_] = (p)[u_]; \
    } while (0)
#define RUN_STORE4(p, src, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_ += 4) { \
            __local float4 *d_ = (__local float4 *)((p) + u_); \
            *d_ = (float4)(src[u_], src[u_ + 1], src[u_ + 2], src[u_ + 3]); \
        } \
    } while (0)
#define RUN_STORE2(p, src, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_ += 2) { \
            __local float2 *d_ = (__local float2 *)((p) + u_); \
            *d_ = (float2)(src[u_], src[u_ + 1]); \
        } \
    } while (0)
#define RUN_STORE1(p, src, n) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < (n); u_++)(p)[u_] = src[u_]; \
    } while (0)

/* The run accesses of each micro-tile side, as wide as its length allows. */
#if RQ % 4 == 0
#define LOAD_RQ  RUN_LOAD4
#define STORE_RQ RUN_STORE4
#elif RQ % 2 == 0
#define LOAD_RQ  RUN_LOAD2
#define STORE_RQ RUN_STORE2
#else
#define LOAD_RQ  RUN_LOAD1
#define STORE_RQ RUN_STORE1
#endif
#if SN % 4 == 0
#define LOAD_SN RUN_LOAD4
#elif SN % 2 == 0
#define LOAD_SN RUN_LOAD2
#else
#define LOAD_SN RUN_LOAD1
#endif
#if DQ_RQ % 4 == 0
#define LOAD_DQ_RQ  RUN_LOAD4
#define STORE_DQ_RQ RUN_STORE4
#elif DQ_RQ % 2 == 0
#define LOAD_DQ_RQ  RUN_LOAD2
#define STORE_DQ_RQ RUN_STORE2
#else
#define LOAD_DQ_RQ  RUN_LOAD1
#define STORE_DQ_RQ RUN_STORE1
#endif
#if DQ_SN % 4 == 0
#define LOAD_DQ_SN RUN_LOAD4
#elif DQ_SN % 2 == 0
#define LOAD_DQ_SN RUN_LOAD2
#else
#define LOAD_DQ_SN RUN_LOAD1
#endif
#if KV_RK % 4 == 0
#define LOAD_KV_RK  RUN_LOAD4
#define STORE_KV_RK RUN_STORE4
#elif KV_RK % 2 == 0
#define LOAD_KV_RK  RUN_LOAD2
#define STORE_KV_RK RUN_STORE2
#else
#define LOAD_KV_RK  RUN_LOAD1
#define STORE_KV_RK RUN_STORE1
#endif
#if KV_SN % 4 == 0
#define LOAD_KV_SN RUN_LOAD4
#elif KV_SN % 2 == 0
#define LOAD_KV_SN RUN_LOAD2
#else
#define LOAD_KV_SN RUN_LOAD1
#endif

/* The staging of a chunk, as macros so that their loops are unrolled with the kernel's
 * constants (reg: a private array of SHARE(rows, depth, threads) floats).
 * CHUNK_LOAD: work-item id's share of the chunk of `depth` columns c0 .. of a head (whose
 * columns start at col in each row, rows ld apart) of rows row0 .. row0 + rows, times f:
 * element e = id + threads * u is row e / depth, column e % depth (consecutive work-items read
 * consecutive columns); zero for rows at or past limit and columns past HEAD_DIM.
 * CHUNK_STORE_T: the share stored transposed, element e at dst[(e % depth) * lds + e / depth].
 * CHUNK_STORE: the share stored as rows, element e at dst[e]. */
#define CHUNK_LOAD(reg, src, ld, col, row0, rows, limit, c0, depth, f, id, threads) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < SHARE(rows, depth, threads); u_++) { \
            const int e_ = (id) + (threads)*u_; \
            const int i_ = (row0) + (int)((uint)e_ / (depth)); \
            const int c_ = (c0) + (int)((uint)e_ % (depth)); \
            reg[u_] = e_ < (rows) * (depth) && i_ < (limit) && c_ < HEAD_DIM \
                          ? act_load(src, (size_t)i_ * (ld) + (size_t)((col) + c_)) * (f) \
                          : 0.0f; \
        } \
    } while (0)
#define CHUNK_STORE_T(dst, lds, reg, rows, depth, id, threads) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < SHARE(rows, depth, threads); u_++) { \
            const int e_ = (id) + (threads)*u_; \
            if (e_ < (rows) * (depth)) \
                (dst)[(int)((uint)e_ % (depth)) * (lds) + (int)((uint)e_ / (depth))] = reg[u_]; \
        } \
    } while (0)
#define CHUNK_STORE(dst, reg, rows, depth, id, threads) \
    do { \
        _Pragma("unroll") for (int u_ = 0; u_ < SHARE(rows, depth, threads); u_++) { \
            const int e_ = (id) + (threads)*u_; \
            if (e_ < (rows) * (depth)) \
                (dst)[e_] = reg[u_]; \
        } \
    } while (0)

/* Writes the float4 groups vals[0 .. groups) of a row's output columns (group g: columns
 * tc * 4 + 4 * tcs * g .. + 4 from dst + at), times f, those below HEAD_DIM (a multiple of 8:
 * a group lies wholly below or past it). */
#define STORE_COLUMNS(dst, at, vals, groups, tc, tcs, f) \
    do { \
        _Pragma("unroll") for (int g_ = 0; g_ < (groups); g_++) { \
            const float4 y_ = (vals)[g_] * (f); \
            const int c_ = (tc)*4 + 4 * (tcs)*g_; \
            if (c_ < HEAD_DIM) { \
                act_store(dst, (at) + c_, y_.x); \
                act_store(dst, (at) + c_ + 1, y_.y); \
                act_store(dst, (at) + c_ + 2, y_.z); \
                act_store(dst, (at) + c_ + 3, y_.w); \
            } \
        } \
    } while (0)

/* ---- forward ---- */

/* Local memory: the staging area (chunks of q' and k transposed, then of v rows; each double
 * buffered), the weights transposed, the rows' partial maxima, the rows' key ranges. */
#define F_QK_BUF (DK * (LDQ + LDK))
#define F_V_BUF  (VK * DP)
#define F_STAGE  (F_QK_BUF > F_V_BUF ? 2 * F_QK_BUF : 2 * F_V_BUF)
#define F_QSHARE SHARE(BQ, DK, WG)
#define F_KSHARE SHARE(BK, DK, WG)
#define F_VSHARE SHARE(VK, DP, WG)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
attention_forward(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                  const __global int *kv_range, __global act_t *out, __global float *lse,
                  int tokens, int heads, int kv_heads, float qscale)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float stage[F_STAGE] __attribute__((aligned(16)));
    __local float ps[BK * LDQ] __attribute__((aligned(16)));
    __local float mx[TC * BQ] __attribute__((aligned(16)));
    __local int2 rng[BQ];

    const int id = (int)get_local_id(0), tr = id / TC, tc = id % TC;
    const int h = (int)get_group_id(0), hk = h / (heads / kv_heads);
    const int q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * BQ;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int qcol = h * HEAD_DIM, kcol = hk * HEAD_DIM;
    const int last = min(q0 + BQ, tokens) - 1;
    const int lo = kv_range[2 * (size_t)q0], hi = kv_range[2 * (size_t)last + 1];

    /* rows past the matrix get an empty range: every weight 0, never written */
    for (int r = id; r < BQ; r += WG)
        rng[r] = q0 + r < tokens ? vload2(q0 + r, kv_range) : (int2)(0, 0);

    float m[RQ], l[RQ];
    float4 o[RQ][DG];
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int g = 0; g < DG; g++)
            o[r][g] = (float4)(0.0f);
    }

    for (int j0 = lo; j0 < hi; j0 += BK) {
        /* (1) s = q' . k, chunk by chunk of the head dimension (n = -1 stages chunk 0) */
        float s[RQ][SN];
#pragma unroll
        for (int r = 0; r < RQ; r++)
#pragma unroll
            for (int c = 0; c < SN; c++)
                s[r][c] = 0.0f;
        {
            float rq[F_QSHARE], rk[F_KSHARE];
            for (int n = -1; n < CHUNKS(DK); n++) {
                const __local float *qc = stage + (n & 1) * F_QK_BUF, *kc = qc + DK * LDQ;
                __local float *next = stage + ((n + 1) & 1) * F_QK_BUF;
                if (n + 1 < CHUNKS(DK)) {
                    const int c0 = (n + 1) * DK;
                    CHUNK_LOAD(rq, q, ldq, qcol, q0, BQ, tokens, c0, DK, qscale, id, WG);
                    CHUNK_LOAD(rk, k, ldk, kcol, j0, BK, hi, c0, DK, 1.0f, id, WG);
                }
                if (n >= 0) {
#pragma unroll
                    for (int kk = 0; kk < DK; kk++) {
                        float a[RQ], b[SN];
                        LOAD_RQ(a, qc + kk * LDQ + tr * RQ, RQ);
                        LOAD_SN(b, kc + kk * LDK + tc * SN, SN);
#pragma unroll
                        for (int r = 0; r < RQ; r++)
#pragma unroll
                            for (int c = 0; c < SN; c++)
                                s[r][c] = fma(a[r], b[c], s[r][c]);
                    }
                }
                if (n + 1 < CHUNKS(DK)) {
                    CHUNK_STORE_T(next, LDQ, rq, BQ, DK, id, WG);
                    CHUNK_STORE_T(next + DK * LDQ, LDK, rk, BK, DK, id, WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }

        /* (2) masks and each row's maximum over this work-item's SN scores; the first chunk
         * of v staged meanwhile (the staging area is free after the last barrier) */
        float part[RQ];
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            const int2 rg = rng[tr * RQ + r];
            part[r] = -INFINITY;
#pragma unroll
            for (int c = 0; c < SN; c++) {
                const int j = j0 + tc * SN + c;
                s[r][c] = j >= rg.x && j < rg.y ? s[r][c] : -INFINITY;
                part[r] = fmax(part[r], s[r][c]); /* passes over NaN: its weight is NaN */
            }
        }
        STORE_RQ(mx + tc * BQ + tr * RQ, part, RQ);
        float rv[F_VSHARE];
        CHUNK_LOAD(rv, v, ldk, kcol, j0, VK, hi, 0, DP, 1.0f, id, WG);
        CHUNK_STORE(stage, rv, VK, DP, id, WG);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* the rows' new maxima (every work-item of a row takes the TC partial maxima in the
         * same order), the rescaling of what the rows hold, the weights into ps transposed */
        float mn[RQ];
#pragma unroll
        for (int r = 0; r < RQ; r++)
            mn[r] = m[r];
        for (int t = 0; t < TC; t++) {
            LOAD_RQ(part, mx + t * BQ + tr * RQ, RQ);
#pragma unroll
            for (int r = 0; r < RQ; r++)
                mn[r] = fmax(mn[r], part[r]);
        }
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            /* a row without a finite score yet keeps weights exp2(-inf - 0) = 0 */
            const float mu = mn[r] == -INFINITY ? 0.0f : mn[r], alpha = EXP2(m[r] - mu);
            m[r] = mn[r];
#pragma unroll
            for (int g = 0; g < DG; g++)
                o[r][g] *= alpha;
            /* this work-item's part of the row sum, over its SN weights */
            l[r] *= alpha;
#pragma unroll
            for (int c = 0; c < SN; c++) {
                s[r][c] = EXP2(s[r][c] - mu);
                l[r] += s[r][c];
            }
        }
#pragma unroll
        for (int c = 0; c < SN; c++) {
            float col[RQ];
#pragma unroll
            for (int r = 0; r < RQ; r++)
                col[r] = s[r][c];
            STORE_RQ(ps + (tc * SN + c) * LDQ + tr * RQ, col, RQ);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* (3) out += p v over the tile's keys, VK rows of v per staged chunk */
        for (int n = 0; n < BK / VK; n++) {
            const __local float *vc = stage + (n & 1) * F_V_BUF;
            if (n + 1 < BK / VK)
                CHUNK_LOAD(rv, v, ldk, kcol, j0 + (n + 1) * VK, VK, hi, 0, DP, 1.0f, id, WG);
#pragma unroll
            for (int jj = 0; jj < VK; jj++) {
                float p[RQ];
                LOAD_RQ(p, ps + (n * VK + jj) * LDQ + tr * RQ, RQ);
#pragma unroll
                for (int g = 0; g < DG; g++) {
                    const float4 w = *(const __local float4 *)(vc + jj * DP + tc * 4 + 4 * TC * g);
#pragma unroll
                    for (int r = 0; r < RQ; r++)
                        o[r][g] = fma((float4)(p[r]), w, o[r][g]);
                }
            }
            if (n + 1 < BK / VK)
                CHUNK_STORE(stage + ((n + 1) & 1) * F_V_BUF, rv, VK, DP, id, WG);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    /* the row sums: the TC parts of each row added in the same order by all its work-items
     * (the last barrier of the loop has freed mx) */
    STORE_RQ(mx + tc * BQ + tr * RQ, l, RQ);
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int r = 0; r < RQ; r++)
        l[r] = 0.0f;
    for (int t = 0; t < TC; t++) {
        float part[RQ];
        LOAD_RQ(part, mx + t * BQ + tr * RQ, RQ);
#pragma unroll
        for (int r = 0; r < RQ; r++)
            l[r] += part[r];
    }
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int i = q0 + tr * RQ + r;
        if (i < tokens) {
            STORE_COLUMNS(out, (size_t)i * ldq + (size_t)qcol, o[r], DG, tc, TC, 1.0f / l[r]);
            if (tc == 0)
                lse[(size_t)i * heads + h] = (m[r] + log2(l[r])) * LN2_F;
        }
    }
}

/* ---- backward ---- */

/* delta[i * heads + h] = dout_i . out_i over head h's columns: DELTA_SLOT work-items per
 * (row, head), each summing columns t, t + DELTA_SLOT, ..., then a tree in local memory. */
__kernel __attribute__((reqd_work_group_size(DELTA_WG, 1, 1))) void
attention_bwd_delta(const __global act_t *out, const __global act_t *dout, __global float *delta,
                    int tokens, int heads DQ_ZEROED_PARAM)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[DELTA_WG];
    const int id = (int)get_local_id(0), t = id % DELTA_SLOT;
    const size_t pair = get_group_id(0) * (size_t)(DELTA_WG / DELTA_SLOT) + id / DELTA_SLOT;
    const bool live = pair < (size_t)tokens * (size_t)heads;
    float sum = 0.0f;
    if (live) {
        const size_t base = pair * HEAD_DIM; /* (row, head) pairs lie HEAD_DIM apart */
        for (int c = t; c < HEAD_DIM; c += DELTA_SLOT)
            sum = fma(act_load(dout, base + c), act_load(out, base + c), sum);
#if DQ_ATOMIC
        for (int c = t; c < HEAD_DIM; c += DELTA_SLOT)
            dq[base + c] = 0.0f;
#endif
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

/* Local memory of dq: the staging area (chunks of q', dout, k and v transposed, then of k
 * rows; each double buffered), ds transposed, the rows' key ranges. */
#define Q_S_BUF  (DQ_DK * (2 * DQ_LDQ + 2 * DQ_LDK))
#define Q_K_BUF  (DQ_VK * DQ_DP)
#define Q_STAGE  (Q_S_BUF > Q_K_BUF ? 2 * Q_S_BUF : 2 * Q_K_BUF)
#define Q_QSHARE SHARE(DQ_BQ, DQ_DK, DQ_WG)
#define Q_KSHARE SHARE(DQ_BK, DQ_DK, DQ_WG)
#define Q_RSHARE SHARE(DQ_VK, DQ_DP, DQ_WG)

__kernel __attribute__((reqd_work_group_size(DQ_WG, 1, 1))) void
attention_bwd_dq(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                 const __global act_t *dout, const __global float *lse,
                 const __global float *delta, const __global int *kv_range, __global act_t *dq,
                 int tokens, int heads, int kv_heads, float qscale, float scale)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float stage[Q_STAGE] __attribute__((aligned(16)));
    __local float dss[DQ_BK * DQ_LDQ] __attribute__((aligned(16)));
    __local int2 rng[DQ_BQ];

    const int id = (int)get_local_id(0), tr = id / DQ_TC, tc = id % DQ_TC;
    const int h = (int)get_group_id(0), hk = h / (heads / kv_heads);
    const int q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * DQ_BQ;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int qcol = h * HEAD_DIM, kcol = hk * HEAD_DIM;
    const int last = min(q0 + DQ_BQ, tokens) - 1;
    const int lo = kv_range[2 * (size_t)q0], hi = kv_range[2 * (size_t)last + 1];

    for (int r = id; r < DQ_BQ; r += DQ_WG)
        rng[r] = q0 + r < tokens ? vload2(q0 + r, kv_range) : (int2)(0, 0);

    float lse2[DQ_RQ], dl[DQ_RQ];
    float4 acc[DQ_RQ][DQ_DG];
#pragma unroll
    for (int r = 0; r < DQ_RQ; r++) {
        const int i = q0 + tr * DQ_RQ + r;
        lse2[r] = i < tokens ? lse[(size_t)i * heads + h] * LOG2E_F : 0.0f;
        dl[r] = i < tokens ? delta[(size_t)i * heads + h] : 0.0f;
#pragma unroll
        for (int g = 0; g < DQ_DG; g++)
            acc[r][g] = (float4)(0.0f);
    }

    for (int j0 = lo; j0 < hi; j0 += DQ_BK) {
        /* (1) s = q' . k and dp = dout . v, chunk by chunk (n = -1 stages chunk 0) */
        float s[DQ_RQ][DQ_SN], dp[DQ_RQ][DQ_SN];
#pragma unroll
        for (int r = 0; r < DQ_RQ; r++)
#pragma unroll
            for (int c = 0; c < DQ_SN; c++)
                s[r][c] = dp[r][c] = 0.0f;
        {
            float rq[Q_QSHARE], rg[Q_QSHARE], rk[Q_KSHARE], rv[Q_KSHARE];
            for (int n = -1; n < CHUNKS(DQ_DK); n++) {
                const __local float *qc = stage + (n & 1) * Q_S_BUF, *gc = qc + DQ_DK * DQ_LDQ;
                const __local float *kc = gc + DQ_DK * DQ_LDQ, *vc = kc + DQ_DK * DQ_LDK;
                __local float *next = stage + ((n + 1) & 1) * Q_S_BUF;
                if (n + 1 < CHUNKS(DQ_DK)) {
                    const int c0 = (n + 1) * DQ_DK;
                    CHUNK_LOAD(rq, q, ldq, qcol, q0, DQ_BQ, tokens, c0, DQ_DK, qscale, id, DQ_WG);
                    CHUNK_LOAD(rg, dout, ldq, qcol, q0, DQ_BQ, tokens, c0, DQ_DK, 1.0f, id, DQ_WG);
                    CHUNK_LOAD(rk, k, ldk, kcol, j0, DQ_BK, hi, c0, DQ_DK, 1.0f, id, DQ_WG);
                    CHUNK_LOAD(rv, v, ldk, kcol, j0, DQ_BK, hi, c0, DQ_DK, 1.0f, id, DQ_WG);
                }
                if (n >= 0) {
#pragma unroll
                    for (int kk = 0; kk < DQ_DK; kk++) {
                        float a[DQ_RQ], ga[DQ_RQ], b[DQ_SN], w[DQ_SN];
                        LOAD_DQ_RQ(a, qc + kk * DQ_LDQ + tr * DQ_RQ, DQ_RQ);
                        LOAD_DQ_RQ(ga, gc + kk * DQ_LDQ + tr * DQ_RQ, DQ_RQ);
                        LOAD_DQ_SN(b, kc + kk * DQ_LDK + tc * DQ_SN, DQ_SN);
                        LOAD_DQ_SN(w, vc + kk * DQ_LDK + tc * DQ_SN, DQ_SN);
#pragma unroll
                        for (int r = 0; r < DQ_RQ; r++)
#pragma unroll
                            for (int c = 0; c < DQ_SN; c++) {
                                s[r][c] = fma(a[r], b[c], s[r][c]);
                                dp[r][c] = fma(ga[r], w[c], dp[r][c]);
                            }
                    }
                }
                if (n + 1 < CHUNKS(DQ_DK)) {
                    CHUNK_STORE_T(next, DQ_LDQ, rq, DQ_BQ, DQ_DK, id, DQ_WG);
                    CHUNK_STORE_T(next + DQ_DK * DQ_LDQ, DQ_LDQ, rg, DQ_BQ, DQ_DK, id, DQ_WG);
                    CHUNK_STORE_T(next + 2 * DQ_DK * DQ_LDQ, DQ_LDK, rk, DQ_BK, DQ_DK, id, DQ_WG);
                    CHUNK_STORE_T(next + 2 * DQ_DK * DQ_LDQ + DQ_DK * DQ_LDK, DQ_LDK, rv, DQ_BK,
                                  DQ_DK, id, DQ_WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }

        /* (2) ds = p (dp - delta), p = exp2(s - lse), 0 where masked, into dss transposed; the
         * first chunk of k rows staged meanwhile */
#pragma unroll
        for (int r = 0; r < DQ_RQ; r++) {
            const int2 rgn = rng[tr * DQ_RQ + r];
#pragma unroll
            for (int c = 0; c < DQ_SN; c++) {
                const int j = j0 + tc * DQ_SN + c;
                const float p = EXP2(s[r][c] - lse2[r]);
                s[r][c] = j >= rgn.x && j < rgn.y ? p * (dp[r][c] - dl[r]) : 0.0f;
            }
        }
#pragma unroll
        for (int c = 0; c < DQ_SN; c++) {
            float col[DQ_RQ];
#pragma unroll
            for (int r = 0; r < DQ_RQ; r++)
                col[r] = s[r][c];
            STORE_DQ_RQ(dss + (tc * DQ_SN + c) * DQ_LDQ + tr * DQ_RQ, col, DQ_RQ);
        }
        float rk2[Q_RSHARE];
        CHUNK_LOAD(rk2, k, ldk, kcol, j0, DQ_VK, hi, 0, DQ_DP, 1.0f, id, DQ_WG);
        CHUNK_STORE(stage, rk2, DQ_VK, DQ_DP, id, DQ_WG);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* (3) dq += ds k over the tile's keys, DQ_VK rows of k per staged chunk */
        for (int n = 0; n < DQ_BK / DQ_VK; n++) {
            const __local float *kc = stage + (n & 1) * Q_K_BUF;
            if (n + 1 < DQ_BK / DQ_VK)
                CHUNK_LOAD(rk2, k, ldk, kcol, j0 + (n + 1) * DQ_VK, DQ_VK, hi, 0, DQ_DP, 1.0f, id,
                           DQ_WG);
#pragma unroll
            for (int jj = 0; jj < DQ_VK; jj++) {
                float w[DQ_RQ];
                LOAD_DQ_RQ(w, dss + (n * DQ_VK + jj) * DQ_LDQ + tr * DQ_RQ, DQ_RQ);
#pragma unroll
                for (int g = 0; g < DQ_DG; g++) {
                    const float4 x =
                        *(const __local float4 *)(kc + jj * DQ_DP + tc * 4 + 4 * DQ_TC * g);
#pragma unroll
                    for (int r = 0; r < DQ_RQ; r++)
                        acc[r][g] = fma((float4)(w[r]), x, acc[r][g]);
                }
            }
            if (n + 1 < DQ_BK / DQ_VK)
                CHUNK_STORE(stage + ((n + 1) & 1) * Q_K_BUF, rk2, DQ_VK, DQ_DP, id, DQ_WG);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

#pragma unroll
    for (int r = 0; r < DQ_RQ; r++) {
        const int i = q0 + tr * DQ_RQ + r;
        if (i < tokens)
            STORE_COLUMNS(dq, (size_t)i * ldq + (size_t)qcol, acc[r], DQ_DG, tc, DQ_TC, scale);
    }
}

/* Local memory of dkdv: the staging area (chunks of k, v, q' and dout transposed, then of
 * dout and q rows; each double buffered), p and ds transposed (query-major), the keys' query
 * ranges. */
#define KV_S_BUF  (KV_DK * (2 * KV_LDK + 2 * KV_LDQ))
#define KV_R_BUF  (KV_QK * KV_DP)
#define KV_STAGE  (KV_S_BUF > 2 * KV_R_BUF ? 2 * KV_S_BUF : 4 * KV_R_BUF)
#define KV_KSHARE SHARE(KV_BK, KV_DK, KV_WG)
#define KV_QSHARE SHARE(KV_BQ, KV_DK, KV_WG)
#define KV_RSHARE SHARE(KV_QK, KV_DP, KV_WG)

__kernel __attribute__((reqd_work_group_size(KV_WG, 1, 1))) void
attention_bwd_dkdv(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                   const __global act_t *dout, const __global float *lse,
                   const __global float *delta, const __global int *q_range, __global act_t *dk,
                   __global act_t *dv, __global float *dk_part, __global float *dv_part,
                   int tokens, int heads, int kv_heads, int splits, float qscale, float scale)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float stage[KV_STAGE] __attribute__((aligned(16)));
    __local float ps[KV_BQ * KV_LDK] __attribute__((aligned(16)));
    __local float dss[KV_BQ * KV_LDK] __attribute__((aligned(16)));
    __local int2 rng[KV_BK];

    const int id = (int)get_local_id(0), tr = id / KV_TC, tc = id % KV_TC;
    const int hk = (int)get_group_id(0) / splits, slice = (int)get_group_id(0) % splits;
    const int per = heads / kv_heads / splits, h0 = hk * (heads / kv_heads) + slice * per;
    const int k0 = (int)get_group_id(1) * KV_BK;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int kcol = hk * HEAD_DIM;
    const int last = min(k0 + KV_BK, tokens) - 1;
    const int lo = q_range[2 * (size_t)k0], hi = q_range[2 * (size_t)last + 1];

    /* keys past the matrix get an empty range: every weight 0, never written */
    for (int r = id; r < KV_BK; r += KV_WG)
        rng[r] = k0 + r < tokens ? vload2(k0 + r, q_range) : (int2)(0, 0);

    float4 dka[KV_RK][KV_DG], dva[KV_RK][KV_DG];
#pragma unroll
    for (int r = 0; r < KV_RK; r++)
#pragma unroll
        for (int g = 0; g < KV_DG; g++)
            dka[r][g] = dva[r][g] = (float4)(0.0f);

    for (int h = h0; h < h0 + per; h++) {
        const int qcol = h * HEAD_DIM;
        for (int i0 = lo; i0 < hi; i0 += KV_BQ) {
            /* (1) s = k . q' and dp = v . dout, chunk by chunk (n = -1 stages chunk 0) */
            float s[KV_RK][KV_SN], dp[KV_RK][KV_SN];
#pragma unroll
            for (int r = 0; r < KV_RK; r++)
#pragma unroll
                for (int c = 0; c < KV_SN; c++)
                    s[r][c] = dp[r][c] = 0.0f;
            {
                float rk[KV_KSHARE], rv[KV_KSHARE], rq[KV_QSHARE], rg[KV_QSHARE];
                for (int n = -1; n < CHUNKS(KV_DK); n++) {
                    const __local float *kc = stage + (n & 1) * KV_S_BUF, *vc = kc + KV_DK * KV_LDK;
                    const __local float *qc = vc + KV_DK * KV_LDK, *gc = qc + KV_DK * KV_LDQ;
                    __local float *next = stage + ((n + 1) & 1) * KV_S_BUF;
                    if (n + 1 < CHUNKS(KV_DK)) {
                        const int c0 = (n + 1) * KV_DK;
                        CHUNK_LOAD(rk, k, ldk, kcol, k0, KV_BK, tokens, c0, KV_DK, 1.0f, id, KV_WG);
                        CHUNK_LOAD(rv, v, ldk, kcol, k0, KV_BK, tokens, c0, KV_DK, 1.0f, id, KV_WG);
                        CHUNK_LOAD(rq, q, ldq, qcol, i0, KV_BQ, hi, c0, KV_DK, qscale, id, KV_WG);
                        CHUNK_LOAD(rg, dout, ldq, qcol, i0, KV_BQ, hi, c0, KV_DK, 1.0f, id, KV_WG);
                    }
                    if (n >= 0) {
#pragma unroll
                        for (int kk = 0; kk < KV_DK; kk++) {
                            float a[KV_RK], w[KV_RK], b[KV_SN], ga[KV_SN];
                            LOAD_KV_RK(a, kc + kk * KV_LDK + tr * KV_RK, KV_RK);
                            LOAD_KV_RK(w, vc + kk * KV_LDK + tr * KV_RK, KV_RK);
                            LOAD_KV_SN(b, qc + kk * KV_LDQ + tc * KV_SN, KV_SN);
                            LOAD_KV_SN(ga, gc + kk * KV_LDQ + tc * KV_SN, KV_SN);
#pragma unroll
                            for (int r = 0; r < KV_RK; r++)
#pragma unroll
                                for (int c = 0; c < KV_SN; c++) {
                                    s[r][c] = fma(a[r], b[c], s[r][c]);
                                    dp[r][c] = fma(w[r], ga[c], dp[r][c]);
                                }
                        }
                    }
                    if (n + 1 < CHUNKS(KV_DK)) {
                        CHUNK_STORE_T(next, KV_LDK, rk, KV_BK, KV_DK, id, KV_WG);
                        CHUNK_STORE_T(next + KV_DK * KV_LDK, KV_LDK, rv, KV_BK, KV_DK, id, KV_WG);
                        CHUNK_STORE_T(next + 2 * KV_DK * KV_LDK, KV_LDQ, rq, KV_BQ, KV_DK, id,
                                      KV_WG);
                        CHUNK_STORE_T(next + 2 * KV_DK * KV_LDK + KV_DK * KV_LDQ, KV_LDQ, rg,
                                      KV_BQ, KV_DK, id, KV_WG);
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
            }

            /* (2) p = exp2(s - lse) and ds = p (dp - delta), 0 where masked, into ps and dss
             * transposed; the first chunks of dout and q rows staged meanwhile */
#pragma unroll
            for (int c = 0; c < KV_SN; c++) {
                const int i = i0 + tc * KV_SN + c;
                const bool live = i < tokens;
                const float lse2 = live ? lse[(size_t)i * heads + h] * LOG2E_F : 0.0f;
                const float dl = live ? delta[(size_t)i * heads + h] : 0.0f;
                float pc[KV_RK], dc[KV_RK];
#pragma unroll
                for (int r = 0; r < KV_RK; r++) {
                    const int2 rgn = rng[tr * KV_RK + r];
                    const bool ok = i >= rgn.x && i < rgn.y;
                    const float p = EXP2(s[r][c] - lse2);
                    pc[r] = ok ? p : 0.0f;
                    dc[r] = ok ? p * (dp[r][c] - dl) : 0.0f;
                }
                STORE_KV_RK(ps + (tc * KV_SN + c) * KV_LDK + tr * KV_RK, pc, KV_RK);
                STORE_KV_RK(dss + (tc * KV_SN + c) * KV_LDK + tr * KV_RK, dc, KV_RK);
            }
            float rg2[KV_RSHARE], rq2[KV_RSHARE];
            CHUNK_LOAD(rg2, dout, ldq, qcol, i0, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
            CHUNK_LOAD(rq2, q, ldq, qcol, i0, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
            CHUNK_STORE(stage, rg2, KV_QK, KV_DP, id, KV_WG);
            CHUNK_STORE(stage + KV_R_BUF, rq2, KV_QK, KV_DP, id, KV_WG);
            barrier(CLK_LOCAL_MEM_FENCE);

            /* (3) dv += p^T dout and dk += ds^T q over the tile's rows, KV_QK rows of dout
             * and q per staged chunk */
            for (int n = 0; n < KV_BQ / KV_QK; n++) {
                const __local float *gc = stage + (n & 1) * 2 * KV_R_BUF, *qc = gc + KV_R_BUF;
                __local float *next = stage + ((n + 1) & 1) * 2 * KV_R_BUF;
                if (n + 1 < KV_BQ / KV_QK) {
                    const int i1 = i0 + (n + 1) * KV_QK;
                    CHUNK_LOAD(rg2, dout, ldq, qcol, i1, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
                    CHUNK_LOAD(rq2, q, ldq, qcol, i1, KV_QK, hi, 0, KV_DP, 1.0f, id, KV_WG);
                }
#pragma unroll
                for (int ii = 0; ii < KV_QK; ii++) {
                    float pw[KV_RK], dw[KV_RK];
                    LOAD_KV_RK(pw, ps + (n * KV_QK + ii) * KV_LDK + tr * KV_RK, KV_RK);
                    LOAD_KV_RK(dw, dss + (n * KV_QK + ii) * KV_LDK + tr * KV_RK, KV_RK);
#pragma unroll
                    for (int g = 0; g < KV_DG; g++) {
                        const int at = ii * KV_DP + tc * 4 + 4 * KV_TC * g;
                        const float4 x = *(const __local float4 *)(gc + at);
                        const float4 y = *(const __local float4 *)(qc + at);
#pragma unroll
                        for (int r = 0; r < KV_RK; r++) {
                            dva[r][g] = fma((float4)(pw[r]), x, dva[r][g]);
                            dka[r][g] = fma((float4)(dw[r]), y, dka[r][g]);
                        }
                    }
                }
                if (n + 1 < KV_BQ / KV_QK) {
                    CHUNK_STORE(next, rg2, KV_QK, KV_DP, id, KV_WG);
                    CHUNK_STORE(next + KV_R_BUF, rq2, KV_QK, KV_DP, id, KV_WG);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < KV_RK; r++) {
        const int j = k0 + tr * KV_RK + r;
        if (j >= tokens)
            continue;
        const size_t at = (size_t)j * ldk + (size_t)kcol;
        if (splits == 1) {
            STORE_COLUMNS(dk, at, dka[r], KV_DG, tc, KV_TC, scale);
            STORE_COLUMNS(dv, at, dva[r], KV_DG, tc, KV_TC, 1.0f);
        } else {
            const size_t sat = (size_t)slice * (size_t)tokens * ldk + at;
#pragma unroll
            for (int g = 0; g < KV_DG; g++) {
                const int c = tc * 4 + 4 * KV_TC * g;
                if (c < HEAD_DIM) {
                    vstore4(dka[r][g] * scale, 0, dk_part + sat + c);
                    vstore4(dva[r][g], 0, dv_part + sat + c);
                }
            }
        }
    }
}

/* dk, dv = the sums of the splits slices of dk_part, dv_part (each tokens x kv_cols floats),
 * in slice order; one work-item per element, grid-stride. */
__kernel void attention_bwd_dkdv_reduce(const __global float *dk_part,
                                        const __global float *dv_part, __global act_t *dk,
                                        __global act_t *dv, int tokens, int kv_cols, int splits)
{
    AFTER_PREVIOUS_LAUNCH();
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
