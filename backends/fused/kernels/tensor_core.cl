/*
 * NVIDIA's tensor cores and asynchronous copies from OpenCL C, through inline PTX (sm_80 and
 * later), shared by the kernels that use them (gemm.cl and its tensor-core files,
 * attention_mma.cl). Its content is compiled only where one of their switches asks for it
 * (MMA, WGMMA, ASYNC, ATT_MMA; an undefined switch reads as 0), so that every program may
 * include the file and other compilers never see the PTX; a program with a switch on is built
 * for such devices alone, or with MMA_EMULATE = 1.
 *
 * MMA_EMULATE = 1 replaces the PTX by OpenCL C with the same results and fragment layout (the
 * fragments exchanged through local memory, products rounded as fp32; copies made at once), so
 * that everything but the instructions themselves can be tested where no tensor core is (PoCL
 * in CI).
 *
 * PREC: TF32 products per multiply of fp32 operands (split4): 1 (tf32) or 3 (fp32x3, each
 * operand split as big + small).
 */
#if MMA || WGMMA || ASYNC || ATT_MMA
#ifndef MMA_EMULATE
#define MMA_EMULATE 0 /* 1: OpenCL C in place of the PTX: tensor cores, cp.async (tests) */
#endif
#ifndef PREC
#define PREC 3 /* TF32 products per multiply: 3 (fp32x3) or 1 (tf32) */
#endif

/* TF32 operands as the tensor cores read them: an mma ignores the low 13 bits of each 32-bit
 * operand, so adding half of TF32's last place to the magnitude's bits (x's bits + 0x1000)
 * rounds x to nearest, ties away from zero, in one integer add; the carry of a mantissa of
 * ones goes into the exponent as it should, and an infinity stays infinite (the carry stays
 * in the ignored bits). */
#define TF32_HALF_ULP 0x1000u
#define TF32_KEPT 0xffffe000u

/* The four values of v as TF32 big parts and, for PREC = 3, small parts: small = x - big, exact
 * in fp32, itself rounded by the same add: four operations per value, where a split through
 * cvt.rna.tf32.f32, a mask and a finiteness test takes seven; the split runs on every fragment
 * read and competes with the mma for issue slots. A non-finite x has small = NaN (inf - inf),
 * and so has a finite x that rounds to infinity (within half a TF32 place of FLT_MAX): its
 * products are NaN. */
static inline void split4(float4 v, uint big[4], uint small[4])
{
    float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int d = 0; d < 4; d++) {
#if PREC == 3
        big[d] = as_uint(x[d]) + TF32_HALF_ULP;
        small[d] = as_uint(x[d] - as_float(big[d] & TF32_KEPT)) + TF32_HALF_ULP;
#else
        /* a NaN whose payload lies in the ignored bits would read as infinity */
        big[d] = isnan(x[d]) ? 0x7fc00000u : as_uint(x[d]) + TF32_HALF_ULP;
        small[d] = 0;
#endif
    }
}

#if MMA_EMULATE
/* d += a * b for one 16 x 8 x 8 block, the fragments exchanged through the warp's 32 * 6
 * floats of local scratch; every work-item of the group calls it the same number of times. */
static inline void mma_tf32(float4 *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                            __local float *x, int lane)
{
    __local float *mine = x + lane * 6;
    mine[0] = as_float(a0 & TF32_KEPT);
    mine[1] = as_float(a1 & TF32_KEPT);
    mine[2] = as_float(a2 & TF32_KEPT);
    mine[3] = as_float(a3 & TF32_KEPT);
    mine[4] = as_float(b0 & TF32_KEPT);
    mine[5] = as_float(b1 & TF32_KEPT);
    barrier(CLK_LOCAL_MEM_FENCE);
    int g = lane / 4, t = lane % 4;
    float r[4];
    for (int o = 0; o < 4; o++) {
        int row = g + 8 * (o >> 1), col = 2 * t + (o & 1);
        float sum = 0.0f;
        for (int k = 0; k < 8; k++)
            sum += x[(4 * (row % 8) + k % 4) * 6 + row / 8 + 2 * (k / 4)] *
                   x[(4 * col + k % 4) * 6 + 4 + k / 4];
        r[o] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *d += (float4)(r[0], r[1], r[2], r[3]);
}
#else
/* d += a * b for one 16 x 8 x 8 block. */
static inline void mma_tf32(float4 *d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1)
{
    float d0 = d->x, d1 = d->y, d2 = d->z, d3 = d->w;
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    *d = (float4)(d0, d1, d2, d3);
}
#endif

/* A kernel's functions that multiply take and pass the emulation's scratch (the warp's
 * 32 * 6 floats of local memory) and lane, named scratch and lane, through these. */
#if MMA_EMULATE
#define SCRATCH_PARAM , __local float *scratch, int lane
#define SCRATCH_PASS  , scratch, lane
/* kept rolled: PoCL compiles each barrier of an unrolled loop as a region of its own */
#define MMA_UNROLL _Pragma("unroll 1")
#else
#define SCRATCH_PARAM
#define SCRATCH_PASS
#define MMA_UNROLL _Pragma("unroll")
#endif

/* The product of step s (0 or 1) of a group of 16 depths, where slot t of step s names depth
 * 4t + 2s and slot t + 4 depth 4t + 2s + 1: a[h][d] holds depth 4t + d of row g + 8h, b[d]
 * depth 4t + d of column g, as split4 leaves a float4 of four depths. */
#define MMA_STEP(d, a, s, b) \
    mma_tf32(d, (a)[0][2 * (s)], (a)[1][2 * (s)], (a)[0][2 * (s) + 1], (a)[1][2 * (s) + 1], \
             (b)[2 * (s)], (b)[2 * (s) + 1] SCRATCH_PASS)

/* Copies of 16 and 4 bytes to local memory at dst: the first `bytes` (a multiple of 4, at
 * most the copy's size) from src, zeros after them. cp.async returns before the copy lands;
 * cp_commit closes the work-item's group of copies issued since the last (each kernel's
 * CP_WAIT then waits for all but its own count of groups). Emulated by plain copies. */
#if MMA_EMULATE
static inline void copy16(__local float *dst, __global const float *src, int bytes)
{
    float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int q = 0; q < bytes / 4; q++)
        e[q] = src[q];
    *(__local float4 *)dst = (float4)(e[0], e[1], e[2], e[3]);
}
static inline void copy4(__local float *dst, __global const float *src, int bytes)
{
    *dst = bytes > 0 ? *src : 0.0f;
}
#define cp_commit()
#else
static inline void copy16(__local float *dst, __global const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"((uint)(size_t)dst), "l"(src), "r"(bytes)
                 : "memory");
}
static inline void copy4(__local float *dst, __global const float *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :
                 : "r"((uint)(size_t)dst), "l"(src), "r"(bytes)
                 : "memory");
}
#define cp_commit() asm volatile("cp.async.commit_group;" ::: "memory")
#endif
#endif
