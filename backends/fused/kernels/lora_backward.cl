/*
 * LoRA backward for few tokens in one launch, in every layout (T <= MR <= 16, r <= 64; all
 * row-major): x T x in, dy T x out, dx T x in; W in x out, or out x in where TRANS_W (PyTorch's
 * layout); A in x r, or r x in where TRANS_A; B r x out, or out x r where TRANS_B; dA and dB
 * stored as A and B are.
 *   u  = scale * dy * B^T          (T x r, never stored)
 *   dx = dy * W^T + u * A^T
 *   dA = x^T * u
 *   dB = scale * (x * A)^T * dy
 * each overwritten (beta = 0) or added to (beta = 1). VEC = 4 where W's rows allow float4 loads
 * (out % 4 == 0, or in % 4 == 0 where TRANS_W), DB_VEC = 4 where out % 4 == 0; the buffers
 * start 16-byte aligned.
 *
 * Work decomposition: work-groups of GROUP = WARPS * 32 work-items, of two kinds, so that
 * every gradient comes out of the one launch (each launch on a queue costs microseconds of
 * its own, more than these products at one token).
 *   dx groups, the first dx_groups. W in x out (its rows are dx's dot products): group g first
 *   sums dy * B^T into local memory (lowrank_h_strided; redundant across the groups, B and dy
 *   from cache), then warp w takes row i = g * WARPS + w of W: its 32 work-items stride over
 *   the row VEC at a time, each reading W[i] once and dy's rows at the same columns (from
 *   cache), keeping a sum per token, add u[t] . A[i], and the sums are added through local
 *   memory; work-item t writes dx[t][i]. The group then writes dA's entries of row i.
 *   W out x in (its rows run along dx's columns): group g takes a block of CB = 64 columns and
 *   the kg-th range of W's rows (kg ranges of chunk rows, so that the blocks times the ranges
 *   fill the device): its work-items form CW = CB / VEC columns of vectors by RW = GROUP / CW
 *   row slices, each summing dy[t][o] * W[o][i..] over its rows, and the slices are added
 *   through local memory. Every group sums u first (only those of range 0 use it: they add
 *   u[t] . A[i] and write dA's entries of their columns). The barriers sit under no condition
 *   but the kind of group: PoCL compiled a barrier under a second, nested condition (uniform
 *   as it was) into writes past the outputs. With kg > 1 every group stores its sums as a
 *   partial, and the last of a block's groups to arrive adds the kg partials in order of range
 *   (as gemv.cl's strip_combine: deterministic, no float atomics) and writes dx.
 *   dB groups, the rest: each sums h = x * A into local memory, then work-item l takes DB_VEC
 *   consecutive columns o of dy and writes dB's entries (q, o) = scale * sum over t of
 *   h[t][q] * dy[t][o] for every q.
 * Reads: W once; B and dy once per dx group, x and A once per dB group, from cache
 * (the host runs this kernel only where B is small beside W); writes every gradient once,
 * reads it where beta = 1.
 *
 * Tuning parameters: WARPS (GROUP = 32 * WARPS, a power of two), MR, VEC, DB_VEC.
 */
#ifndef WARPS
#define WARPS 8
#endif
#if GROUP != WARPS * 32
#error "GROUP must be WARPS * 32"
#endif
#ifndef TRANS_W
#define TRANS_W 0
#endif
#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef DB_VEC
#define DB_VEC VEC
#endif

/* Entry (i, q) of A and dA as the in x r operand, entry (q, o) of dB as r x out; the strides
 * of A and B as the in x r and out x r operands of lowrank_h_strided. */
#if TRANS_A
#define A_AT(m, i, q) (m)[(size_t)(q) * (size_t)in + (size_t)(i)]
#define A_SP 1
#define A_SQ in
#else
#define A_AT(m, i, q) (m)[(size_t)(i) * (size_t)r + (size_t)(q)]
#define A_SP r
#define A_SQ 1
#endif
#if TRANS_B
#define DB_AT(q, o) db[(size_t)(o) * (size_t)r + (size_t)(q)]
#define B_SP r
#define B_SQ 1
#else
#define DB_AT(q, o) db[(size_t)(q) * (size_t)out + (size_t)(o)]
#define B_SP 1
#define B_SQ out
#endif

#define RED_FLOATS 4096

inline void put(__global float *at, float v, float beta)
{
    *at = beta != 0.0f ? *at + v : v;
}

/* dA's entries (i, q) for the rows i in [i0, i0 + span) of x^T: scale * sum over t of
 * x[t][i] * u[t][q], u in local memory. Consecutive work-items take consecutive entries as dA
 * stores them. */
inline void write_da(const __global float *x, int tokens, int in, int r, int i0, int span,
                     float scale, float beta, __local const float *uh, __global float *da,
                     int lid)
{
    for (int e = lid; e < span * r; e += GROUP) {
#if TRANS_A
        const int i = i0 + e % span, q = e / span;
#else
        const int i = i0 + e / r, q = e % r;
#endif
        if (i >= in)
            continue;
        float s = 0.0f;
        for (int t = 0; t < tokens; t++)
            s = fma(x[(size_t)t * (size_t)in + i], uh[t * RMAX + q], s);
        put(&A_AT(da, i, q), scale * s, beta);
    }
}

#if TRANS_W
#define CB 64
#define CW (CB / VEC)
#define RW (GROUP / CW)
/* tokens whose sums fit the reduction buffer at once: RW x CB floats each */
#define TCH (RED_FLOATS / (RW * CB) < MR ? RED_FLOATS / (RW * CB) : MR)
#if GROUP % CW != 0 || TCH < 1
#error "the column block does not fit the work-group"
#endif

/* The last group of a column block to arrive: dx = the sum of the block's kg partials, in
 * order of range, read past any non-coherent cache. */
inline void combine_columns(int tokens, int in, float beta, __global float *dx, int i0, int kg,
                            __global float *part, int lid)
{
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    const volatile __global float *p =
        (const volatile __global float *)(part + (size_t)(i0 / CB) * (size_t)kg * (MR * CB));
    for (int e = lid; e < tokens * CB; e += GROUP) {
        const int t = e / CB, col = e % CB, i = i0 + col;
        if (i >= in)
            continue;
        float v = p[t * CB + col];
        for (int g = 1; g < kg; g++)
            v += p[g * (MR * CB) + t * CB + col];
        put(dx + (size_t)t * (size_t)in + i, v, beta);
    }
}

/* dx for the block of columns [i0, i0 + CB) over W's rows [o0, o1): see the top. Every
 * work-item of the group calls it, with or without dx (has_dx), with one range or several:
 * its barriers are under no condition (see the top). */
inline void dx_columns(int tokens, int in, int out, int r, float scale, float beta, int has_dx,
                       const __global float *w, const __global float *a, const __global float *dy,
                       __global float *dx, int i0, int o0, int o1, int kg, int range,
                       __local const float *uh, __local float *red, __global float *part,
                       volatile __global int *count, __local int *last, int lid)
{
    const int cw = lid % CW, rw = lid / CW, iv = i0 / VEC + cw, nv = in / VEC;
    floatv acc[MR];
#pragma unroll
    for (int t = 0; t < MR; t++)
        acc[t] = (floatv)(0.0f);
    if (has_dx && iv < nv) {
#pragma unroll 4
        for (int o = o0 + rw; o < o1; o += RW) {
            const floatv wv = ((const __global floatv *)(w + (size_t)o * (size_t)in))[iv];
#pragma unroll
            for (int t = 0; t < MR; t++)
                if (t < tokens)
                    acc[t] = fma((floatv)(dy[(size_t)t * (size_t)out + o]), wv, acc[t]);
        }
    }
    __global float *own = part + ((size_t)(i0 / CB) * (size_t)kg + (size_t)range) * (MR * CB);
#pragma unroll
    for (int t0 = 0; t0 < MR; t0 += TCH) {
#pragma unroll
        for (int j = 0; j < TCH; j++)
            if (t0 + j < MR)
                ((__local floatv *)red)[(j * RW + rw) * CW + cw] = acc[t0 + j];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < TCH * CB; e += GROUP) {
            const int t = t0 + e / CB, col = e % CB, i = i0 + col;
            if (!has_dx || t >= tokens || i >= in)
                continue;
            float v = 0.0f;
            for (int s = 0; s < RW; s++)
                v += red[((e / CB) * RW + s) * CB + col];
            if (range == 0)
                for (int q = 0; q < r; q++)
                    v = fma(scale * uh[t * RMAX + q], A_AT(a, i, q), v);
            if (kg > 1)
                own[t * CB + col] = v;
            else
                put(dx + (size_t)t * (size_t)in + i, v, beta);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        const int arrived = kg > 1 ? atomic_inc(count + i0 / CB) : 0;
        *last = kg > 1 && arrived == kg - 1;
        if (*last)
            atomic_xchg(count + i0 / CB, 0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (*last)
        combine_columns(tokens, in, beta, dx, i0, kg, part, lid);
}
#endif

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1))) void
lora_backward_few(const int tokens, const int in, const int out, const int r, const int rp,
                  const float scale, const float beta, const int has_dx, const int dx_groups,
                  const int kg, const int chunk, const __global float *x,
                  const __global float *w, const __global float *a, const __global float *b,
                  const __global float *dy, __global float *dx, __global float *da,
                  __global float *db, __global float *part, volatile __global int *count)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[RED_FLOATS] __attribute__((aligned(16)));
    __local float uh[MR * RMAX];
#if TRANS_W
    __local int last;
#endif
    const int lid = (int)get_local_id(0), g = (int)get_group_id(0);
    if (g < dx_groups) {
#if TRANS_W
        const int block = g / kg, range = g % kg, i0 = block * CB;
        const int o0 = min(range * chunk, out), o1 = min(o0 + chunk, out);
        lowrank_h_strided(dy, tokens, out, 0, out, b, B_SP, B_SQ, r, rp, uh, red, lid);
        dx_columns(tokens, in, out, r, scale, beta, has_dx, w, a, dy, dx, i0, o0, o1, kg, range,
                   uh, red, part, count, &last, lid);
        if (range == 0)
            write_da(x, tokens, in, r, i0, CB, scale, beta, uh, da, lid);
#else
        lowrank_h_strided(dy, tokens, out, 0, out, b, B_SP, B_SQ, r, rp, uh, red, lid);
        const int warp = lid / 32, lane = lid % 32, i = g * WARPS + warp;
        const int ov = out / VEC;
        float acc[MR];
#pragma unroll
        for (int t = 0; t < MR; t++)
            acc[t] = 0.0f;
        if (has_dx && i < in) {
            const __global floatv *wi = (const __global floatv *)(w + (size_t)i * (size_t)out);
            const __global floatv *dyv = (const __global floatv *)dy;
#pragma unroll 4
            for (int p = lane; p < ov; p += 32) {
                const floatv wv = wi[p];
#pragma unroll
                for (int t = 0; t < MR; t++)
                    if (t < tokens)
                        acc[t] += HSUM(dyv[t * ov + p] * wv);
            }
            for (int q = lane; q < r; q += 32) {
                const float aq = scale * A_AT(a, i, q);
#pragma unroll
                for (int t = 0; t < MR; t++)
                    acc[t] = fma(uh[t * RMAX + q], aq, acc[t]);
            }
        }
        /* the 32 sums of each warp, per token: red holds MR * GROUP <= 4096 floats */
#pragma unroll
        for (int t = 0; t < MR; t++)
            red[t * GROUP + lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int width = 16; width > 0; width /= 2) {
            if (lane < width) {
#pragma unroll
                for (int t = 0; t < MR; t++)
                    red[t * GROUP + lid] += red[t * GROUP + lid + width];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (has_dx && i < in && lane < tokens)
            put(dx + (size_t)lane * (size_t)in + i, red[lane * GROUP + warp * 32], beta);
        write_da(x, tokens, in, r, g * WARPS, WARPS, scale, beta, uh, da, lid);
#endif
    } else {
        lowrank_h_strided(x, tokens, in, 0, in, a, A_SP, A_SQ, r, rp, uh, red, lid);
        const int o = ((g - dx_groups) * GROUP + lid) * DB_VEC;
        if (o < out) {
            float d[MR][DB_VEC];
#pragma unroll
            for (int t = 0; t < MR; t++)
#pragma unroll
                for (int c = 0; c < DB_VEC; c++)
                    d[t][c] = t < tokens ? dy[(size_t)t * (size_t)out + o + c] : 0.0f;
            for (int q = 0; q < r; q++) {
                float s[DB_VEC];
#pragma unroll
                for (int c = 0; c < DB_VEC; c++)
                    s[c] = 0.0f;
#pragma unroll
                for (int t = 0; t < MR; t++)
                    if (t < tokens)
#pragma unroll
                        for (int c = 0; c < DB_VEC; c++)
                            s[c] = fma(uh[t * RMAX + q], d[t][c], s[c]);
#pragma unroll
                for (int c = 0; c < DB_VEC; c++)
                    put(&DB_AT(q, o + c), scale * s[c], beta);
            }
        }
    }
}
