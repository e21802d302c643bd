/*
 * Attention's forward on NVIDIA's tensor cores (sm_80 and later): attention.cl's forward (the
 * same arguments, results, range tables, base-2 scores and masks) with its two products on
 * mma.sync (tensor_core.cl), built where the context's GEMM precision is tf32 or fp32x3
 * (ATT_MMA = 1, PREC = 1 or 3) and the device has tensor cores (or MMA_EMULATE = 1).
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
 * Tuning parameters: MMA_BQ (query rows per work-group, a multiple of 16), MMA_BK (keys per
 * tile, a multiple of 16), PREC, FAST_EXP (attention.cl).
 */
#if ATT_MMA
#ifndef MMA_BQ
#define MMA_BQ 64
#endif
#ifndef MMA_BK
#define MMA_BK 64
#endif
#ifndef MMA_LOCAL_ARG
#define MMA_LOCAL_ARG 0 /* 1: the local memory is the kernel's last argument */
#endif
#if MMA_BQ % 16 != 0 || MMA_BK % 16 != 0
#error "MMA_BQ and MMA_BK must be multiples of 16"
#endif
#if PREC != 1 && PREC != 3
#error "PREC must be 1 or 3"
#endif

#define MMA_WARPS (MMA_BQ / 16)
#define MMA_WG    (MMA_WARPS * 32)
#define MMA_D16   ((HEAD_DIM + 15) / 16 * 16)
#define MMA_LDA   (MMA_D16 + (MMA_D16 % 32 == 0 ? 16 : 0))
#define MMA_LDV   (HEAD_DIM + 4)
#define MMA_NS    (MMA_BK / 8)   /* score blocks of a warp */
#define MMA_NO    (HEAD_DIM / 8) /* output blocks of a warp */
/* The host sizes `smem` by the same sum (attention.c: mma_local_bytes). */
#define MMA_SCRATCH (MMA_EMULATE ? MMA_WARPS * 32 * 6 : 0)
#define MMA_LOCAL_FLOATS \
    ((MMA_BQ + MMA_BK) * MMA_LDA + MMA_BK * MMA_LDV + MMA_SCRATCH)

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
#else
#define cp_wait_all_but_newest() asm volatile("cp.async.wait_group 1;" ::: "memory")
#endif

/* Rows row0 .. row0 + rows of a head (columns col .. col + HEAD_DIM of rows ld apart) into
 * dst, rows lds floats apart, `width` floats each (a multiple of 4, at least HEAD_DIM): zeros
 * past HEAD_DIM and for rows at or past limit. */
static inline void stage_rows(__local float *dst, int lds, const __global act_t *src, size_t ld,
                              int col, int row0, int rows, int limit, int width, int id)
{
    const int runs = width / 4;
    for (int e = id; e < rows * runs; e += MMA_WG) {
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

/* s += q' k^T for warp `warp`'s 16 rows against the tile's MMA_BK keys. */
static inline void tile_scores(__local const float *qs, __local const float *ks, int warp, int g,
                               int t, float4 s[MMA_NS] SCRATCH_PARAM)
{
MMA_UNROLL
    for (int p = 0; p < MMA_D16; p += 16) {
        uint ab[2][4], as_[2][4];
MMA_UNROLL
        for (int h = 0; h < 2; h++)
            split4(*(__local const float4 *)(qs + (16 * warp + g + 8 * h) * MMA_LDA + p + 4 * t),
                   ab[h], as_[h]);
MMA_UNROLL
        for (int j = 0; j < MMA_NS; j++) {
            uint bb[4], bs[4];
            split4(*(__local const float4 *)(ks + (8 * j + g) * MMA_LDA + p + 4 * t), bb, bs);
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

/* o += p v for a warp: p its score blocks, now weights; v the tile's rows. */
static inline void tile_values(__local const float *vs, const float4 s[MMA_NS], int g, int t,
                               float4 o[MMA_NO] SCRATCH_PARAM)
{
MMA_UNROLL
    for (int j = 0; j < MMA_NS; j += 2) {
        uint pb[2][4], ps[2][4];
        split4(P_FRAG(s[j]), pb[0], ps[0]);
        split4(P_FRAG(s[j + 1]), pb[1], ps[1]);
MMA_UNROLL
        for (int n = 0; n < MMA_NO; n++) {
            /* keys 2t, 2t + 1 of blocks j and j + 1, column g of block n */
            __local const float *c = vs + (8 * j + 2 * t) * MMA_LDV + 8 * n + g;
            uint vb[4], vsm[4];
            split4((float4)(c[0], c[MMA_LDV], c[8 * MMA_LDV], c[9 * MMA_LDV]), vb, vsm);
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

/* A score kept where key lies in range, else -inf. */
#define MASKED(score, key, range) ((key) >= (range).x && (key) < (range).y ? (score) : -INFINITY)

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void
attention_forward_mma(const __global act_t *q, const __global act_t *k, const __global act_t *v,
                      const __global int *kv_range, __global act_t *out, __global float *lse,
                      int tokens, int heads, int kv_heads, float qscale
#if MMA_LOCAL_ARG
                      , __local float *smem
#endif
)
{
#if !MMA_LOCAL_ARG
    __local float smem[MMA_LOCAL_FLOATS] __attribute__((aligned(16)));
#endif
    __local float *qs = smem, *ks = qs + MMA_BQ * MMA_LDA, *vs = ks + MMA_BK * MMA_LDA;
    const int id = (int)get_local_id(0), warp = id / 32, lane = id % 32, g = lane / 4, t = lane % 4;
#if MMA_EMULATE
    __local float *scratch = vs + MMA_BK * MMA_LDV + warp * 32 * 6;
#else
    __local float *scratch = NULL;
#endif
    const int h = (int)get_group_id(0), hk = h / (heads / kv_heads);
    const int q0 = ((int)get_num_groups(1) - 1 - (int)get_group_id(1)) * MMA_BQ;
    const size_t ldq = (size_t)heads * HEAD_DIM, ldk = (size_t)kv_heads * HEAD_DIM;
    const int qcol = h * HEAD_DIM, kcol = hk * HEAD_DIM;
    const int last = min(q0 + MMA_BQ, tokens) - 1;
    const int lo = kv_range[2 * (size_t)q0], hi = kv_range[2 * (size_t)last + 1];
    /* this lane's two rows; rows past the matrix get an empty range: every weight 0 */
    const int r0 = q0 + 16 * warp + g, r1 = r0 + 8;
    const int2 rg0 = r0 < tokens ? vload2(r0, kv_range) : (int2)(0, 0);
    const int2 rg1 = r1 < tokens ? vload2(r1, kv_range) : (int2)(0, 0);

    stage_rows(ks, MMA_LDA, k, ldk, kcol, lo, MMA_BK, hi, MMA_D16, id);
    cp_commit();
    stage_rows(vs, MMA_LDV, v, ldk, kcol, lo, MMA_BK, hi, HEAD_DIM, id);
    cp_commit();
    for (int e = id; e < MMA_BQ * (MMA_D16 / 4); e += MMA_WG) {
        const int r = e / (MMA_D16 / 4), c = 4 * (e % (MMA_D16 / 4)), i = q0 + r;
        const size_t at = (size_t)i * ldq + (size_t)(qcol + c);
        *(__local float4 *)(qs + r * MMA_LDA + c) =
            i < tokens && c < HEAD_DIM ? (float4)(act_load(q, at), act_load(q, at + 1),
                                                  act_load(q, at + 2), act_load(q, at + 3)) *
                                             qscale
                                       : (float4)(0.0f);
    }

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float4 o[MMA_NO];
#pragma unroll
    for (int n = 0; n < MMA_NO; n++)
        o[n] = (float4)(0.0f);

    for (int j0 = lo; j0 < hi; j0 += MMA_BK) {
        const int next = j0 + MMA_BK;
        /* (1) the tile's k has landed (its v may still be in flight) */
        cp_wait_all_but_newest();
        barrier(CLK_LOCAL_MEM_FENCE);
        float4 s[MMA_NS];
#pragma unroll
        for (int j = 0; j < MMA_NS; j++)
            s[j] = (float4)(0.0f);
        tile_scores(qs, ks, warp, g, t, s SCRATCH_PASS);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < hi)
            stage_rows(ks, MMA_LDA, k, ldk, kcol, next, MMA_BK, hi, MMA_D16, id);
        cp_commit();

        /* (2) masks, the rows' maxima, the rescaling, the weights */
        float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < MMA_NS; j++) {
            const int key = j0 + 8 * j + 2 * t;
            s[j] = (float4)(MASKED(s[j].x, key, rg0), MASKED(s[j].y, key + 1, rg0),
                            MASKED(s[j].z, key, rg1), MASKED(s[j].w, key + 1, rg1));
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
        tile_values(vs, s, g, t, o SCRATCH_PASS);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < hi)
            stage_rows(vs, MMA_LDV, v, ldk, kcol, next, MMA_BK, hi, HEAD_DIM, id);
        cp_commit();
    }

    QUAD_REDUCE(l0, OP_ADD, scratch, lane);
    QUAD_REDUCE(l1, OP_ADD, scratch, lane);
    const float f0 = 1.0f / l0, f1 = 1.0f / l1;
#pragma unroll
    for (int n = 0; n < MMA_NO; n++) {
        const int c = qcol + 8 * n + 2 * t;
        if (r0 < tokens) {
            act_store(out, (size_t)r0 * ldq + c, o[n].x * f0);
            act_store(out, (size_t)r0 * ldq + c + 1, o[n].y * f0);
        }
        if (r1 < tokens) {
            act_store(out, (size_t)r1 * ldq + c, o[n].z * f1);
            act_store(out, (size_t)r1 * ldq + c + 1, o[n].w * f1);
        }
    }
    if (t == 0 && r0 < tokens)
        lse[(size_t)r0 * heads + h] = (m0 + log2(l0)) * LN2_F;
    if (t == 0 && r1 < tokens)
        lse[(size_t)r1 * heads + h] = (m1 + log2(l1)) * LN2_F;
}
#endif
