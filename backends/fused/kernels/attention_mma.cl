/*
 * Attention on NVIDIA's tensor cores (sm_80 and later): attention.cl's forward, dq, and dk with
 * dv (the same arguments, results, range tables, base-2 scores and masks) with their products
 * on mma.sync (tensor_core.cl), built where the context's GEMM precision is tf32 or fp32x3
 * (ATT_MMA = 1, PREC = 1 or 3) and the device has tensor cores (or MMA_EMULATE = 1). The
 * backward's delta and its slices' sum stay attention.cl's. The forward is described here;
 * the backward's kernels, which share its products (block_dots, block_values), above each.
 *
 * Work decomposition: a work-group of MMA_BQ / 16 warps holds MMA_BQ query rows of one head
 * (tiles ordered as attention_forward's: the most keys first); warp w owns rows 16w .. + 15:
 * their scores against a tile of MMA_BK keys (MMA_BK / 8 blocks of 16 x 8) and their output
 * (HEAD_DIM / 8 blocks), both in registers, where lane 4g + t holds rows g and g + 8 at columns
 * 2t and 2t + 1 of each block. Local memory (`smem`, MMA_LOCAL_FLOATS floats): q' (q times
 * qscale, staged once), the tile's k, the tile's v, and under MMA_EMULATE each warp's scratch;
 * the kernel's own array within OpenCL's limit, or (MMA_LOCAL_ARG = 1, the CUDA runtime) its
 * last argument, dynamic local memory up to the device's opt-in limit.
 * k and v are copied by cp.async, each while the other is in use: the next tile's k during
 * the softmax and p v, the next tile's v during the next q' k^T.
 * Per key tile:
 *   (1) s = q' k^T over groups of 16 depths, in tensor_core.cl's slot order (slot t of step s
 *       is depth 4t + 2s: one float4 per row and group); rows are MMA_LDA floats apart, a
 *       stride of 16 banks, so the 8 lanes of a float4 read phase hit distinct banks;
 *   (2) the masks; each row's maximum over its quad's 4 lanes (shuffles); the rescaling of the
 *       output and of each lane's partial row sum; p = exp2(s - m) in place;
 *   (3) out += p v: the score blocks serve as A fragments unmoved, since a k slot may name any
 *       key as long as B's agrees: slot t of 8 keys is key 2t, slot t + 4 key 2t + 1, which is
 *       where a score block holds them; v's rows are MMA_LDV floats apart (an odd multiple of
 *       4 banks), so the lanes' reads of keys 2t, 2t + 1 and column g are conflict-free.
 * fp32x3 sums each group of 16 depths (16 keys) in a fresh accumulator added to the tile's
 * in fp32 (gemm_mma.cl says why). At the end each row's 4 partial sums are added over the
 * quad; every sum runs in a fixed order, so results repeat run to run.
 *
 * The head's depth is padded with zeros to a multiple of 16 in q' and k (MMA_D16); v's columns
 * are whole blocks of 8. Storage follows elem.cl's act_t: float rows are copied by cp.async;
 * bf16 rows are converted as they are staged.
 *
 * dq in any order (DQ_ATOMIC = 1, attention.cl): dk and dv's kernel also forms dq's part of its
 * keys, ds k, and adds it into dq (zeroed by the delta launch) with atomic adds, so that the
 * scores and their gradient are computed once (five products, FlashAttention-2's backward)
 * where dq's own kernel computes them again; the adds land in any order, so dq's last bits may
 * differ from run to run. Its k is then read both ways (rows MMA_LDB apart).
 *
 * Tuning parameters: MMA_BQ (query rows per work-group, a multiple of 16), MMA_BK (keys per
 * tile, a multiple of 16), both for the forward and dq; MMA_KBK (keys per work-group) and
 * MMA_KBQ (query rows per tile), multiples of 16, for dk and dv; MMA_RING (2: the backward
 * copies its next tile during this one's work; 1: after it, where two buffers do not fit);
 * PREC, FAST_EXP (attention.cl).
 */
#if ATT_MMA
#ifndef MMA_BQ
#define MMA_BQ 64 /* query rows per work-group (forward and dq) */
#endif
#ifndef MMA_BK
#define MMA_BK 64 /* keys per tile (forward and dq) */
#endif
#ifndef MMA_KBK
#define MMA_KBK 64 /* keys per work-group (dk and dv) */
#endif
#ifndef MMA_KBQ
#define MMA_KBQ 16 /* query rows per tile (dk and dv) */
#endif
#ifndef MMA_RING
#define MMA_RING 2 /* buffers of the backward's streamed tiles (dq's k, dk and dv's q and dout) */
#endif
#ifndef MMA_LOCAL_ARG
#define MMA_LOCAL_ARG 0 /* 1: the local memory is the kernel's last argument */
#endif
#if MMA_BQ % 16 != 0 || MMA_BK % 16 != 0 || MMA_KBK % 16 != 0 || MMA_KBQ % 16 != 0
#error "MMA_BQ, MMA_BK, MMA_KBK and MMA_KBQ must be multiples of 16"
#endif
#if MMA_RING != 1 && MMA_RING != 2
#error "MMA_RING is 1 or 2"
#endif
#if PREC != 1 && PREC != 3
#error "PREC must be 1 or 3"
#endif

#define MMA_WARPS (MMA_BQ / 16)
#define MMA_WG    (MMA_WARPS * 32)
#define MMA_D16   ((HEAD_DIM + 15) / 16 * 16)
#define MMA_LDA   (MMA_D16 + (MMA_D16 % 32 == 0 ? 16 : 0))
#define MMA_LDV   (HEAD_DIM + 4)
/* rows read both as float4 runs of depths and as single columns: a stride of 20 banks,
 * 2-way conflicts in one pair of lanes of a float4 phase, none in the columns */
#define MMA_LDB   (MMA_D16 + (MMA_D16 % 32 == 0 ? 20 : 4))
#define MMA_NS    (MMA_BK / 8)   /* score blocks of a warp */
#define MMA_NO    (HEAD_DIM / 8) /* output blocks of a warp */
#define MMA_KWARPS (MMA_KBK / 16)
#define MMA_KWG    (MMA_KWARPS * 32)
#define MMA_NQ     (MMA_KBQ / 8) /* score blocks of a warp (dk and dv) */
/* Each kernel's local memory; the host sizes `smem` by the same sums (attention.c:
 * mma_local_bytes). */
#define MMA_SCRATCH(warps) (MMA_EMULATE ? (warps) * 32 * 6 : 0)
#define MMA_LOCAL_FLOATS \
    ((MMA_BQ + MMA_BK) * MMA_LDA + MMA_BK * MMA_LDV + MMA_SCRATCH(MMA_WARPS))
#define MMA_DQ_FLOATS \
    ((2 * MMA_BQ + MMA_BK) * MMA_LDA + MMA_RING * MMA_BK * MMA_LDB + MMA_SCRATCH(MMA_WARPS))
/* dk and dv's k: read as A alone (rows MMA_LDA apart), or also as dq's B (MMA_LDB) */
#define MMA_KS_LD (DQ_ATOMIC ? MMA_LDB : MMA_LDA)
/* ds transposed for dq's product (DQ_ATOMIC): MMA_KBQ rows of the work-group's keys, MMA_LDS
 * apart (8 banks past a multiple of 32: a half-warp's float2 reads hit distinct banks), in the
 * tile's own buffer where they fit, else in an area of their own */
#define MMA_LDS        (MMA_KBK + 8)
#define MMA_DS_IN_TILE (MMA_LDS <= 2 * MMA_LDB)
#define MMA_DS_FLOATS  (DQ_ATOMIC && !MMA_DS_IN_TILE ? MMA_KBQ * MMA_LDS : 0)
#define MMA_KV_FLOATS \
    (MMA_KBK * (MMA_KS_LD + MMA_LDA) + 2 * MMA_RING * MMA_KBQ * MMA_LDB + MMA_DS_FLOATS + \
     MMA_SCRATCH(MMA_KWARPS))

/* x combined over the 4 lanes of its quad by op (bfly over lane bits 0, then 1: the same
 * order, so the same result, on each lane). */
#if MMA_EMULATE
#define QUAD_REDUCE(x, op, scratch, lane) \
    do { \
        _Pragma("unroll 1") for (int b_ = 1; b_ <= 2; b_ <<= 1) { \
            (scratch)[lane] = (x); \
            barrier(CLK_LOCAL_MEM_FENCE); \
            (x) = op((x), (scratch)[(lane) ^ b_]); \
            barrier(CLK_LOCAL_MEM_FENCE); \
        } \
    } while (0)
#else
static inline float lane_xor(float x, int bit)
{
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(bit));
    return r;
}
#define QUAD_REDUCE(x, op, scratch, lane) \
    do { \
        (x) = op((x), lane_xor((x), 1)); \
        (x) = op((x), lane_xor((x), 2)); \
    } while (0)
#endif
#define OP_MAX(a, b) fmax(a, b)
#define OP_ADD(a, b) ((a) + (b))

#if MMA_EMULATE
#define cp_wait_all_but_newest()
#define cp_wait_all()
#else
#define cp_wait_all_but_newest() asm volatile("cp.async.wait_group 1;" ::: "memory")
#define cp_wait_all()            asm volatile("cp.async.wait_group 0;" ::: "memory")
#endif

/* The kernels' local memory: their own array, or the argument (MMA_LOCAL_ARG). */
#if MMA_LOCAL_ARG
#define LOCAL_PARAM , __local float *smem
#define LOCAL_ARRAY(floats)
#else
#define LOCAL_PARAM
#define LOCAL_ARRAY(floats) __local float smem[floats] __attribute__((aligned(16)))
#endif

/* Rows row0 .. row0 + rows of a head (columns col .. col + HEAD_DIM of rows ld apart) into
 * dst, rows lds floats apart, `width` floats each (a multiple of 4, at least HEAD_DIM): zeros
 * past HEAD_DIM and for rows at or past limit; the work-group's `threads` work-items share
 * the copies. stage_scaled_rows: the same times f, through registers, landed at the next
 * barrier. */
static inline void stage_rows(__local float *dst, int lds, const __global act_t *src, size_t ld,
                              int col, int row0, int rows, int limit, int width, int id,
                              int threads)
{
    const int runs = width / 4;
    for (int e = id; e < rows * runs; e += threads) {
        const int r = e / runs, c = 4 * (e % runs), i = row0 + r;
        const bool in = i < limit && c < HEAD_DIM;
        const size_t at = in ? (size_t)i * ld + (size_t)(col + c) : 0;
#if ACT_BF16
        *(__local float4 *)(dst + r * lds + c) =
            in ? (float4)(act_load(src, at), act_load(src, at + 1), act_load(src, at + 2),
                          act_load(src, at + 3))
               : (float4)(0.0f);
#else
        copy16(dst + r * lds + c, src + at, in ? 16 : 0);
#endif
    }
}

static inline void stage_scaled_rows(__local float *dst, int lds, const __global act_t *src,
                                     size_t ld, int col, int row0, int rows, int limit,
                                     float f, int id, int threads)
{
    const int runs = MMA_D16 / 4;
    for (int e = id; e < rows * runs; e += threads) {
        const int r = e / runs, c = 4 * (e % runs), i = row0 + r;
        const size_t at = (size_t)i * ld + (size_t)(col + c);
        *(__local float4 *)(dst + r * lds + c) =
            i < limit && c < HEAD_DIM ? (float4)(act_load(src, at), act_load(src, at + 1),
                                                 act_load(src, at + 2), act_load(src, at + 3)) *
                                            f
                                      : (float4)(0.0f);
    }
}

/* s[0 .. nb) += a b^T for a warp: a's 16 rows from row a0 (lda floats apart), against nb
 * blocks of 8 rows of b (ldb apart), over MMA_D16 depths (both padded with zeros). */
static inline void block_dots(__local const float *a, int lda, int a0, __local const float *b,
                              int ldb, int g, int t, float4 *s, int nb SCRATCH_PARAM)
{
MMA_UNROLL
    for (int p = 0; p < MMA_D16; p += 16) {
        uint ab[2][4], as_[2][4];
MMA_UNROLL
        for (int h = 0; h < 2; h++)
            split4(*(__local const float4 *)(a + (a0 + g + 8 * h) * lda + p + 4 * t), ab[h],
                   as_[h]);
MMA_UNROLL
        for (int j = 0; j < nb; j++) {
            uint bb[4], bs[4];
            split4(*(__local const float4 *)(b + (8 * j + g) * ldb + p + 4 * t), bb, bs);
#if PREC == 3
            float4 part = (float4)(0.0f);
MMA_UNROLL
            for (int st = 0; st < 2; st++) {
                MMA_STEP(&part, as_, st, bb);
                MMA_STEP(&part, ab, st, bs);
                MMA_STEP(&part, ab, st, bb);
            }
            s[j] += part;
#else
MMA_UNROLL
            for (int st = 0; st < 2; st++)
                MMA_STEP(&s[j], ab, st, bb);
#endif
        }
    }
}

/* The A fragment of score block s as a key slot order names it: slot t (rows g, g + 8) is
 * key 2t (s.x, s.z), slot t + 4 key 2t + 1 (s.y, s.w). */
#define P_FRAG(s) ((float4)((s).x, (s).z, (s).y, (s).w))

/* o[0 .. no) += p x for a warp: p its nk score blocks (now weights, 8 keys each, a multiple
 * of 2), x the keys' rows (ldx floats apart), whose HEAD_DIM columns make HEAD_DIM / 8 blocks
 * of 8; o[n] is the block at column col0 + step * n (a block past HEAD_DIM reads block 0's
 * columns, for a result the caller drops). */
static inline void block_values(__local const float *x, int ldx, const float4 *p, int nk, int g,
                                int t, float4 *o, int no, int col0, int step SCRATCH_PARAM)
{
MMA_UNROLL
    for (int j = 0; j < nk; j += 2) {
        uint pb[2][4], ps[2][4];
        split4(P_FRAG(p[j]), pb[0], ps[0]);
        split4(P_FRAG(p[j + 1]), pb[1], ps[1]);
MMA_UNROLL
        for (int n = 0; n < no; n++) {
            /* keys 2t, 2t + 1 of blocks j and j + 1, column g of block n */
            const int col = col0 + step * n < HEAD_DIM ? col0 + step * n : 0;
            __local const float *c = x + (8 * j + 2 * t) * ldx + col + g;
            uint vb[4], vsm[4];
            split4((float4)(c[0], c[ldx], c[8 * ldx], c[9 * ldx]), vb, vsm);
#if PREC == 3
            float4 part = (float4)(0.0f);
MMA_UNROLL
            for (int u = 0; u < 2; u++) {
                mma_tf32(&part, ps[u][0], ps[u][1], ps[u][2], ps[u][3], vb[2 * u], vb[2 * u + 1]
                                                                             SCRATCH_PASS);
                mma_tf32(&part, pb[u][0], pb[u][1], pb[u][2], pb[u][3], vsm[2 * u],
                         vsm[2 * u + 1] SCRATCH_PASS);
                mma_tf32(&part, pb[u][0], pb[u][1], pb[u][2], pb[u][3], vb[2 * u], vb[2 * u + 1]
                                                                             SCRATCH_PASS);
            }
            o[n] += part;
#else
MMA_UNROLL
            for (int u = 0; u < 2; u++)
                mma_tf32(&o[n], pb[u][0], pb[u][1], pb[u][2], pb[u][3], vb[2 * u], vb[2 * u + 1]
                                                                              SCRATCH_PASS);
#endif
        }
    }
}

/* A query tile's place (the forward's and dq's work-group): head h and its kv head's columns,
 * rows q0 .. q0 + MMA_BQ (the tiles with the most keys first), the rows' strides, the span
 * [lo, hi) of keys its rows attend to, and this lane's two rows with their key ranges (rows
 * past the matrix get an empty range: every weight 0). */
typedef struct query_tile {
    int h, q0, qcol, kcol, lo, hi, r0, r1;
    size_t ldq, ldk;
    int2 rg0, rg1;
} query_tile;

static inline query_tile query_tile_of(const __global int *kv_range, int tokens, int heads,
                                       int kv_heads, int warp, int g)
{
    query_tile q;
    q.h = (int)get_group_id(0);
    q.q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * MMA_BQ;
    q.ldq = (size_t)heads * HEAD_DIM;
    q.ldk = (size_t)kv_heads * HEAD_DIM;
    q.qcol = q.h * HEAD_DIM;
    q.kcol = q.h / (heads / kv_heads) * HEAD_DIM;
    const int last = min(q.q0 + MMA_BQ, tokens) - 1;
    q.lo = kv_range[2 * (size_t)q.q0];
    q.hi = kv_range[2 * (size_t)last + 1];
    q.r0 = q.q0 + 16 * warp + g;
    q.r1 = q.r0 + 8;
    q.rg0 = q.r0 < tokens ? vload2(q.r0, kv_range) : (int2)(0, 0);
    q.rg1 = q.r1 < tokens ? vload2(q.r1, kv_range) : (int2)(0, 0);
    return q;
}

/* A warp's output blocks o (HEAD_DIM / 8 of them) into its two rows of the query tile qt in
 * dst, row r0's times f0 and r1's times f1; rows past the matrix are left out. */
static inline void store_query_rows(__global act_t *dst, const query_tile *qt, const float4 *o,
                                    float f0, float f1, int tokens, int t)
{
#pragma unroll
    for (int n = 0; n < MMA_NO; n++) {
        const int c = qt->qcol + 8 * n + 2 * t;
        if (qt->r0 < tokens) {
            act_store(dst, (size_t)qt->r0 * qt->ldq + c, o[n].x * f0);
            act_store(dst, (size_t)qt->r0 * qt->ldq + c + 1, o[n].y * f0);
        }
        if (qt->r1 < tokens) {
            act_store(dst, (size_t)qt->r1 * qt->ldq + c, o[n].z * f1);
            act_store(dst, (size_t)qt->r1 * qt->ldq + c + 1, o[n].w * f1);
        }
    }
}

/* A score kept where key lies in range, else -inf; a weight kept, else 0. */
#define MASKED(score, key, range) ((key) >= (range).x && (key) < (range).y ? (score) : -INFINITY)
#define ZEROED(w, key, range)     ((key) >= (range).x && (key) < (range).y ? (w) : 0.0f)

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void
attention_forward_mma(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                      const __global int *kv_range, __global act_t *out, __global float *lse,
                      int tokens, int heads, int kv_heads, float qscale LOCAL_PARAM)
{
    AFTER_PREVIOUS_LAUNCH();
    LOCAL_ARRAY(MMA_LOCAL_FLOATS);
    __local float *qs = smem, *ks = qs + MMA_BQ * MMA_LDA, *vs = ks + MMA_BK * MMA_LDA;
    const int id = (int)get_local_id(0), warp = id / 32, lane = id % 32, g = lane / 4, t = lane % 4;
#if MMA_EMULATE
    __local float *scratch = smem + MMA_LOCAL_FLOATS - MMA_SCRATCH(MMA_WARPS) + warp * 32 * 6;
#endif
    const query_tile qt = query_tile_of(kv_range, tokens, heads, kv_heads, warp, g);

    stage_rows(ks, MMA_LDA, k, qt.ldk, qt.kcol, qt.lo, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
    cp_commit();
    stage_rows(vs, MMA_LDV, v, qt.ldk, qt.kcol, qt.lo, MMA_BK, qt.hi, HEAD_DIM, id, MMA_WG);
    cp_commit();
    stage_scaled_rows(qs, MMA_LDA, q, qt.ldq, qt.qcol, qt.q0, MMA_BQ, tokens, qscale, id, MMA_WG);

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float4 o[MMA_NO];
#pragma unroll
    for (int n = 0; n < MMA_NO; n++)
        o[n] = (float4)(0.0f);

    for (int j0 = qt.lo; j0 < qt.hi; j0 += MMA_BK) {
        const int next = j0 + MMA_BK;
        /* (1) the tile's k has landed (its v may still be in flight) */
        cp_wait_all_but_newest();
        barrier(CLK_LOCAL_MEM_FENCE);
        float4 s[MMA_NS];
#pragma unroll
        for (int j = 0; j < MMA_NS; j++)
            s[j] = (float4)(0.0f);
        block_dots(qs, MMA_LDA, 16 * warp, ks, MMA_LDA, g, t, s, MMA_NS SCRATCH_PASS);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < qt.hi)
            stage_rows(ks, MMA_LDA, k, qt.ldk, qt.kcol, next, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
        cp_commit();

        /* (2) masks, the rows' maxima, the rescaling, the weights */
        float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < MMA_NS; j++) {
            const int key = j0 + 8 * j + 2 * t;
            s[j] = (float4)(MASKED(s[j].x, key, qt.rg0), MASKED(s[j].y, key + 1, qt.rg0),
                            MASKED(s[j].z, key, qt.rg1), MASKED(s[j].w, key + 1, qt.rg1));
            /* fmax passes over NaN: its weight is NaN */
            x0 = fmax(x0, fmax(s[j].x, s[j].y));
            x1 = fmax(x1, fmax(s[j].z, s[j].w));
        }
        QUAD_REDUCE(x0, OP_MAX, scratch, lane);
        QUAD_REDUCE(x1, OP_MAX, scratch, lane);
        const float n0 = fmax(m0, x0), n1 = fmax(m1, x1);
        /* a row without a finite score yet keeps weights exp2(-inf - 0) = 0 */
        const float mu0 = n0 == -INFINITY ? 0.0f : n0, mu1 = n1 == -INFINITY ? 0.0f : n1;
        const float a0 = EXP2(m0 - mu0), a1 = EXP2(m1 - mu1);
        m0 = n0;
        m1 = n1;
        l0 *= a0;
        l1 *= a1;
#pragma unroll
        for (int j = 0; j < MMA_NS; j++) {
            s[j] = (float4)(EXP2(s[j].x - mu0), EXP2(s[j].y - mu0), EXP2(s[j].z - mu1),
                            EXP2(s[j].w - mu1));
            l0 += s[j].x + s[j].y;
            l1 += s[j].z + s[j].w;
        }
#pragma unroll
        for (int n = 0; n < MMA_NO; n++)
            o[n] *= (float4)(a0, a0, a1, a1);

        /* (3) the tile's v has landed (the next k may still be in flight) */
        cp_wait_all_but_newest();
        barrier(CLK_LOCAL_MEM_FENCE);
        block_values(vs, MMA_LDV, s, MMA_NS, g, t, o, MMA_NO, 0, 8 SCRATCH_PASS);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < qt.hi)
            stage_rows(vs, MMA_LDV, v, qt.ldk, qt.kcol, next, MMA_BK, qt.hi, HEAD_DIM, id, MMA_WG);
        cp_commit();
    }

    QUAD_REDUCE(l0, OP_ADD, scratch, lane);
    QUAD_REDUCE(l1, OP_ADD, scratch, lane);
    const float f0 = 1.0f / l0, f1 = 1.0f / l1;
    store_query_rows(out, &qt, o, f0, f1, tokens, t);
    if (t == 0 && qt.r0 < tokens)
        lse[(size_t)qt.r0 * heads + qt.h] = (m0 + log2(l0)) * LN2_F;
    if (t == 0 && qt.r1 < tokens)
        lse[(size_t)qt.r1 * heads + qt.h] = (m1 + log2(l1)) * LN2_F;
}

/* ---- backward ---- */

/* dq on the tensor cores: attention_bwd_dq's arguments and results. A work-group of MMA_BQ
 * query rows of head h (as the forward's); per key tile of MMA_BK: s = q' k^T and
 * dp = dout v^T (block_dots), ds = p (dp - delta) with p = exp2(s - lse), 0 where masked,
 * then dq += ds k (block_values: the ds blocks as A fragments, k's rows as B). Local memory:
 * q' and dout (staged once), the tile's v (read as runs of depths) and k in MMA_RING buffers
 * (read both ways, MMA_LDB). With two, the next tile's k is copied during the whole of this
 * tile's work, into the buffer the last tile's ds k has finished with; with one, after this
 * tile's ds k. The next v is copied during ds and ds k. */
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void
attention_bwd_dq_mma(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                     const __global act_t *dout, const __global float *lse,
                     const __global float *delta, const __global int *kv_range,
                     __global act_t *dq, int tokens, int heads, int kv_heads, float qscale,
                     float scale LOCAL_PARAM)
{
    AFTER_PREVIOUS_LAUNCH();
    LOCAL_ARRAY(MMA_DQ_FLOATS);
    __local float *qs = smem, *gs = qs + MMA_BQ * MMA_LDA, *vs = gs + MMA_BQ * MMA_LDA;
    __local float *kbuf = vs + MMA_BK * MMA_LDA; /* MMA_RING tiles of MMA_BK * MMA_LDB */
    const int id = (int)get_local_id(0), warp = id / 32, lane = id % 32, g = lane / 4, t = lane % 4;
#if MMA_EMULATE
    __local float *scratch = smem + MMA_DQ_FLOATS - MMA_SCRATCH(MMA_WARPS) + warp * 32 * 6;
#endif
    const query_tile qt = query_tile_of(kv_range, tokens, heads, kv_heads, warp, g);
    const float lse0 = qt.r0 < tokens ? lse[(size_t)qt.r0 * heads + qt.h] * LOG2E_F : 0.0f;
    const float lse1 = qt.r1 < tokens ? lse[(size_t)qt.r1 * heads + qt.h] * LOG2E_F : 0.0f;
    const float dl0 = qt.r0 < tokens ? delta[(size_t)qt.r0 * heads + qt.h] : 0.0f;
    const float dl1 = qt.r1 < tokens ? delta[(size_t)qt.r1 * heads + qt.h] : 0.0f;

    stage_rows(vs, MMA_LDA, v, qt.ldk, qt.kcol, qt.lo, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
    stage_rows(kbuf, MMA_LDB, k, qt.ldk, qt.kcol, qt.lo, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
    stage_rows(gs, MMA_LDA, dout, qt.ldq, qt.qcol, qt.q0, MMA_BQ, tokens, MMA_D16, id, MMA_WG);
    cp_commit();
    stage_scaled_rows(qs, MMA_LDA, q, qt.ldq, qt.qcol, qt.q0, MMA_BQ, tokens, qscale, id, MMA_WG);

    float4 acc[MMA_NO];
#pragma unroll
    for (int n = 0; n < MMA_NO; n++)
        acc[n] = (float4)(0.0f);

    for (int j0 = qt.lo, buf = 0; j0 < qt.hi; j0 += MMA_BK, buf = (buf + 1) % MMA_RING) {
        const int next = j0 + MMA_BK;
        __local float *ks = kbuf + buf * MMA_BK * MMA_LDB;
        /* the tile's k and v have landed, and every warp is past the last tile's ds k */
        cp_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE);
#if MMA_RING == 2
        if (next < qt.hi)
            stage_rows(kbuf + (buf ^ 1) * MMA_BK * MMA_LDB, MMA_LDB, k, qt.ldk, qt.kcol, next,
                       MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
        cp_commit();
#endif
        float4 s[MMA_NS], dp[MMA_NS];
#pragma unroll
        for (int j = 0; j < MMA_NS; j++)
            s[j] = dp[j] = (float4)(0.0f);
        block_dots(qs, MMA_LDA, 16 * warp, ks, MMA_LDB, g, t, s, MMA_NS SCRATCH_PASS);
        block_dots(gs, MMA_LDA, 16 * warp, vs, MMA_LDA, g, t, dp, MMA_NS SCRATCH_PASS);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < qt.hi)
            stage_rows(vs, MMA_LDA, v, qt.ldk, qt.kcol, next, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
        cp_commit();
#pragma unroll
        for (int j = 0; j < MMA_NS; j++) {
            const int key = j0 + 8 * j + 2 * t;
            const float4 p = (float4)(EXP2(s[j].x - lse0), EXP2(s[j].y - lse0),
                                      EXP2(s[j].z - lse1), EXP2(s[j].w - lse1));
            s[j] = (float4)(ZEROED(p.x * (dp[j].x - dl0), key, qt.rg0),
                            ZEROED(p.y * (dp[j].y - dl0), key + 1, qt.rg0),
                            ZEROED(p.z * (dp[j].z - dl1), key, qt.rg1),
                            ZEROED(p.w * (dp[j].w - dl1), key + 1, qt.rg1));
        }
        block_values(ks, MMA_LDB, s, MMA_NS, g, t, acc, MMA_NO, 0, 8 SCRATCH_PASS);
#if MMA_RING == 1
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < qt.hi)
            stage_rows(ks, MMA_LDB, k, qt.ldk, qt.kcol, next, MMA_BK, qt.hi, MMA_D16, id, MMA_WG);
        cp_commit();
#endif
    }

    store_query_rows(dq, &qt, acc, scale, scale, tokens, t);
}

/* Tile u of dk and dv's sequence of query tiles (head h0 + u / per_head, rows lo + u % per_head
 * * MMA_KBQ, zeros from hi): its q into dst, its dout MMA_KBQ rows after (the kernel's names). */
#define STAGE_QUERY_TILE(dst, u)                                                                \
    do {                                                                                        \
        const int col_ = (h0 + (u) / per_head) * HEAD_DIM, i0_ = lo + (u) % per_head * MMA_KBQ; \
        stage_rows((dst), MMA_LDB, q, ldq, col_, i0_, MMA_KBQ, hi, MMA_D16, id, MMA_KWG);       \
        stage_rows((dst) + MMA_KBQ * MMA_LDB, MMA_LDB, dout, ldq, col_, i0_, MMA_KBQ, hi,       \
                   MMA_D16, id, MMA_KWG);                                                       \
    } while (0)

#if DQ_ATOMIC
/* *at += x, in whatever order the work-groups' adds land: PTX's reduction where it runs, else
 * (the emulation) a compare-and-swap loop. */
static inline void add_to(__global float *at, float x)
{
#if MMA_EMULATE
    volatile __global uint *word = (volatile __global uint *)at;
    uint seen = *word, was;
    while ((was = atomic_cmpxchg(word, seen, as_uint(as_float(seen) + x))) != seen)
        seen = was;
#else
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(at), "f"(x) : "memory");
#endif
}

/* 8-column blocks of dq's product that a warp of dk and dv's kernel takes */
#define MMA_DQ_BLOCKS ((MMA_NO + MMA_KWARPS - 1) / MMA_KWARPS)

/* dq += scale ds k for a tile of MMA_KBQ query rows (head column qcol, rows i0 ..; those at or
 * past hi have no key here and are left out), ds transposed in local memory (MMA_LDS apart,
 * the work-group's MMA_KBK keys as columns) against k's rows: per 16 rows, warp w takes blocks
 * w, w + MMA_KWARPS, .. of dq's columns (block_values, ds's blocks as A fragments) and adds
 * them into dq. */
static inline void add_ds_k(__local const float *ds, __local const float *ks, __global float *dq,
                            size_t ldq, int qcol, int i0, int hi, float scale, int warp, int g,
                            int t SCRATCH_PARAM)
{
    for (int r = 0; r < MMA_KBQ; r += 16) {
        float4 p[MMA_KBK / 8], o[MMA_DQ_BLOCKS];
#pragma unroll
        for (int j = 0; j < MMA_KBK / 8; j++) {
            __local const float *a = ds + (r + g) * MMA_LDS + 8 * j + 2 * t;
            p[j] = (float4)(vload2(0, a), vload2(0, a + 8 * MMA_LDS));
        }
#pragma unroll
        for (int n = 0; n < MMA_DQ_BLOCKS; n++)
            o[n] = (float4)(0.0f);
        block_values(ks, MMA_KS_LD, p, MMA_KBK / 8, g, t, o, MMA_DQ_BLOCKS, 8 * warp,
                     8 * MMA_KWARPS SCRATCH_PASS);
        const int r0 = i0 + r + g, r1 = r0 + 8;
#pragma unroll
        for (int n = 0; n < MMA_DQ_BLOCKS; n++) {
            const int c = 8 * (warp + MMA_KWARPS * n);
            if (c >= HEAD_DIM)
                break;
            __global float *at0 = dq + (size_t)r0 * ldq + (size_t)(qcol + c + 2 * t);
            __global float *at1 = at0 + 8 * ldq;
            if (r0 < hi) {
                add_to(at0, o[n].x * scale);
                add_to(at0 + 1, o[n].y * scale);
            }
            if (r1 < hi) {
                add_to(at1, o[n].z * scale);
                add_to(at1 + 1, o[n].w * scale);
            }
        }
    }
}
#define DQ_SUM_PARAM , __global float *dq
#else
#define DQ_SUM_PARAM
#endif

/* dk and dv on the tensor cores: attention_bwd_dkdv's arguments, grid and results (partial
 * slices where splits > 1), work-groups of MMA_KBK keys, warp w owning keys 16w .. + 15. Per
 * query head of the slice and tile of MMA_KBQ rows that attend to the keys: s = k q^T times
 * qscale and dp = v dout^T (block_dots; q and dout copied as they are, read both ways), p =
 * exp2(s - lse), 0 where masked, dv += p dout, ds = p (dp - delta), dk += ds q (block_values).
 * Local memory: k and v (staged once), and MMA_RING buffers of a tile's q and dout: the tiles
 * of every head of the slice run as one sequence, the next one's copied during this one's work
 * into the buffer the last one has finished with (two), or after this one's work (one).
 * Under DQ_ATOMIC, per tile also dq += ds k (add_ds_k), ds passed through local memory: the
 * tile's buffer once both products are done with it, or its own area after the tiles. */
__kernel __attribute__((reqd_work_group_size(MMA_KWG, 1, 1))) void
attention_bwd_dkdv_mma(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                       const __global act_t *dout, const __global float *lse,
                       const __global float *delta, const __global int *q_range,
                       __global act_t *dk, __global act_t *dv, __global float *dk_part,
                       __global float *dv_part, int tokens, int heads, int kv_heads, int splits,
                       float qscale, float scale DQ_SUM_PARAM LOCAL_PARAM)
{
    AFTER_PREVIOUS_LAUNCH();
    LOCAL_ARRAY(MMA_KV_FLOATS);
    __local float *ks = smem, *vs = ks + MMA_KBK * MMA_KS_LD, *tiles = vs + MMA_KBK * MMA_LDA;
    const int id = (int)get_local_id(0), warp = id / 32, lane = id % 32, g = lane / 4, t = lane % 4;
#if MMA_EMULATE
    __local float *scratch = smem + MMA_KV_FLOATS - MMA_SCRATCH(MMA_KWARPS) + warp * 32 * 6;
#endif
    const int hk = (int)get_group_id(0) / splits, slice = (int)get_group_id(0) % splits;
    const int per = heads / kv_heads / splits, h0 = hk * (heads / kv_heads) + slice * per;
    const int k0 = (int)get_group_id(1) * MMA_KBK;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int kcol = hk * HEAD_DIM;
    const int last = min(k0 + MMA_KBK, tokens) - 1;
    const int lo = q_range[2 * (size_t)k0], hi = q_range[2 * (size_t)last + 1];
    /* this lane's two keys; keys past the matrix get an empty range: every weight 0 */
    const int j0 = k0 + 16 * warp + g, j1 = j0 + 8;
    const int2 rg0 = j0 < tokens ? vload2(j0, q_range) : (int2)(0, 0);
    const int2 rg1 = j1 < tokens ? vload2(j1, q_range) : (int2)(0, 0);
    /* the tiles of the slice's heads, one sequence (STAGE_QUERY_TILE) */
    const int per_head = hi > lo ? (hi - lo + MMA_KBQ - 1) / MMA_KBQ : 0, count = per * per_head;

    stage_rows(ks, MMA_KS_LD, k, ldk, kcol, k0, MMA_KBK, tokens, MMA_D16, id, MMA_KWG);
    stage_rows(vs, MMA_LDA, v, ldk, kcol, k0, MMA_KBK, tokens, MMA_D16, id, MMA_KWG);
    if (count > 0)
        STAGE_QUERY_TILE(tiles, 0);
    cp_commit();

    float4 dka[MMA_NO], dva[MMA_NO];
#pragma unroll
    for (int n = 0; n < MMA_NO; n++)
        dka[n] = dva[n] = (float4)(0.0f);

    for (int u = 0; u < count; u++) {
        const int h = h0 + u / per_head, i0 = lo + u % per_head * MMA_KBQ;
        __local float *qs = tiles + u % MMA_RING * 2 * MMA_KBQ * MMA_LDB;
        __local float *gs = qs + MMA_KBQ * MMA_LDB;
        /* the tile has landed, and every warp is past the last one */
        cp_wait_all();
        barrier(CLK_LOCAL_MEM_FENCE);
#if MMA_RING == 2
        if (u + 1 < count)
            STAGE_QUERY_TILE(tiles + ((u + 1) & 1) * 2 * MMA_KBQ * MMA_LDB, u + 1);
        cp_commit();
#endif
        float4 s[MMA_NQ], dp[MMA_NQ];
#pragma unroll
        for (int j = 0; j < MMA_NQ; j++)
            s[j] = dp[j] = (float4)(0.0f);
        block_dots(ks, MMA_KS_LD, 16 * warp, qs, MMA_LDB, g, t, s, MMA_NQ SCRATCH_PASS);
        block_dots(vs, MMA_LDA, 16 * warp, gs, MMA_LDB, g, t, dp, MMA_NQ SCRATCH_PASS);
        /* p in s, then (after dv's product) ds; delta of the lane's two rows per block */
        float dl[MMA_NQ][2];
#pragma unroll
        for (int j = 0; j < MMA_NQ; j++) {
            const int i = i0 + 8 * j + 2 * t;
            const float l0 = i < tokens ? lse[(size_t)i * heads + h] * LOG2E_F : 0.0f;
            const float l1 = i + 1 < tokens ? lse[(size_t)(i + 1) * heads + h] * LOG2E_F : 0.0f;
            dl[j][0] = i < tokens ? delta[(size_t)i * heads + h] : 0.0f;
            dl[j][1] = i + 1 < tokens ? delta[(size_t)(i + 1) * heads + h] : 0.0f;
            s[j] = (float4)(ZEROED(EXP2(s[j].x * qscale - l0), i, rg0),
                            ZEROED(EXP2(s[j].y * qscale - l1), i + 1, rg0),
                            ZEROED(EXP2(s[j].z * qscale - l0), i, rg1),
                            ZEROED(EXP2(s[j].w * qscale - l1), i + 1, rg1));
        }
        block_values(gs, MMA_LDB, s, MMA_NQ, g, t, dva, MMA_NO, 0, 8 SCRATCH_PASS);
#pragma unroll
        for (int j = 0; j < MMA_NQ; j++)
            s[j] *= dp[j] - (float4)(dl[j][0], dl[j][1], dl[j][0], dl[j][1]);
        block_values(qs, MMA_LDB, s, MMA_NQ, g, t, dka, MMA_NO, 0, 8 SCRATCH_PASS);
#if DQ_ATOMIC
        __local float *ds = MMA_DS_IN_TILE ? qs : tiles + 2 * MMA_RING * MMA_KBQ * MMA_LDB;
        /* every warp is past both products (the tile's buffer is free) and the last ds */
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int j = 0; j < MMA_NQ; j++) {
            /* s[j]: keys 16 warp + g (x, y) and + 8 (z, w), rows 8j + 2t (x, z) and + 1 */
            __local float *at = ds + (8 * j + 2 * t) * MMA_LDS + 16 * warp + g;
            at[0] = s[j].x;
            at[MMA_LDS] = s[j].y;
            at[8] = s[j].z;
            at[MMA_LDS + 8] = s[j].w;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        add_ds_k(ds, ks, dq, ldq, h * HEAD_DIM, i0, hi, scale, warp, g, t SCRATCH_PASS);
#endif
#if MMA_RING == 1
        barrier(CLK_LOCAL_MEM_FENCE);
        if (u + 1 < count)
            STAGE_QUERY_TILE(qs, u + 1);
        cp_commit();
#endif
    }

#pragma unroll
    for (int u = 0; u < 2; u++) {
        const int j = u == 0 ? j0 : j1;
        if (j >= tokens)
            continue;
        const size_t at = (size_t)j * ldk + (size_t)kcol;
        const size_t sat = (size_t)slice * (size_t)tokens * ldk + at;
#pragma unroll
        for (int n = 0; n < MMA_NO; n++) {
            const int c = 8 * n + 2 * t;
            const float2 dkv = (u == 0 ? dka[n].xy : dka[n].zw) * scale;
            const float2 dvv = u == 0 ? dva[n].xy : dva[n].zw;
            if (splits == 1) {
                act_store(dk, at + c, dkv.x);
                act_store(dk, at + c + 1, dkv.y);
                act_store(dv, at + c, dvv.x);
                act_store(dv, at + c + 1, dvv.y);
            } else {
                vstore2(dkv, 0, dk_part + sat + c);
                vstore2(dvv, 0, dv_part + sat + c);
            }
        }
    }
}
#endif
