/*
 * Tiled GEMM on Hopper's warpgroup tensor cores (sm_90a: wgmma.mma_async) through inline PTX
 * (follows gemm.cl, which describes the tile, the stages and the local layout). Hopper only:
 * the host builds this file where the device reports compute capability 9.0, and the
 * instructions that exist on sm_90a alone are written behind the "// @sm_90a@ " marker, which
 * the OpenCL runtime removes from the compiled PTX before retargeting it to sm_90a
 * (backends/opencl/program.c). A failed build falls back to gemm_mma.cl.
 *
 * Arithmetic: wgmma.m64nWNk8 with TF32 operands read from local memory as they were copied
 * (the tensor cores ignore an operand's 13 low bits: each operand is truncated to TF32, a
 * relative error below 2^-10) and fp32 accumulation; the error stays within 2^-9 of the sum
 * of the terms' magnitudes. A NaN whose payload lies in the 13 low bits alone reads as an
 * infinity.
 * Work decomposition: THREADS = (BM / 64) * (BN / WN) * 128: warpgroup w (four warps) owns a
 * 64 x WN block of the tile; each k8 step of a stage is one wgmma per warpgroup, whose
 * accumulators follow the PTX ISA (warp q of the group holds rows 16q + g and 16q + g + 8 of
 * each 8-column block j at columns 8j + 2t and 8j + 2t + 1, lane = 4g + t).
 * Stages: ASYNC buffers, copied through cp.async AHEAD stages ahead of the one the warpgroups
 * multiply. OVERLAP = 1: a warpgroup issues stage s's products and waits only for stage
 * s - 1's, so the tensor cores work through the next barrier; the buffer refilled after that
 * barrier is stage s - 2's, which every warpgroup has finished: ASYNC - 2 stages ahead.
 * OVERLAP = 0: each stage's products finish before the next barrier, which frees stage s - 1's
 * buffer: ASYNC - 1 stages ahead, the tensor cores idle across the barrier. The products run
 * several times faster than the copies feed them (wgmma from local memory alone, in tf32,
 * issues that fast with a barrier per product or without: the probes in BENCHMARKS.md as of
 * commit 89a17cb), so the stages in flight, which hide the copies' latency, can matter more
 * than the overlap.
 * An operand stored K-major (A untransposed, B transposed) with VEC 4 is copied in 16-byte
 * runs; any other in 4-byte copies, transposed on the way in.
 * Local memory reads: the warpgroups' descriptors name core matrices of 8 rows x 16 bytes,
 * 128 contiguous bytes each (gemm.cl's AS_AT), so the tensor cores read every bank once per
 * core matrix.
 *
 * MMA_EMULATE = 1 replaces the PTX by OpenCL C that reads the same local layout through the
 * same descriptor offsets, truncating operands as the tensor cores do, so that everything but
 * the instructions themselves can be tested where no tensor core is (PoCL in CI).
 *
 * AREG = 1: A does not go through local memory. Each work-item loads its own fragment of A
 * from global memory into registers (the PTX ISA's register layout of wgmma's A for tf32: in
 * warp q of the warpgroup, lane 4g + t holds rows 16q + g and 16q + g + 8 at depths t and
 * t + 4 of each k8 step), RING stages ahead, truncated to TF32 as the tensor cores read local
 * memory, and the products take A from those registers (wgmma's register form). Local memory
 * then holds B's stages alone: twice as many buffers for 128 x 128 tiles, and the latency of
 * A's loads is hidden by registers rather than by local memory. OVERLAP is 0: a stage's
 * registers are loaded again once its products have finished. Under MMA_EMULATE the
 * fragments go through a local scratch of one k8 step, which checks their layout.
 *
 * Tuning parameters: BM (a multiple of 64), BN, WN (64, 128 or 256, dividing BN), BK (a
 * multiple of 8), ASYNC (3 to 8 buffers, within the device's local memory), OVERLAP (1 or 0),
 * AREG (0 or 1).
 * STAGE_ARG (gemm.cl): the stages in the __local argument are A's ASYNC buffers, then B's
 * (B's alone with AREG).
 * A wider WN gives each barrier more products: 128 x 256 tiles of two warpgroups do twice the
 * work of 128 x 128 ones per stage on the same 256 work-items.
 */
#ifndef ASYNC
#define ASYNC 3
#endif
#ifndef OVERLAP
#define OVERLAP 1
#endif
#ifndef AREG
#define AREG 0 /* 1: A's fragments loaded from global memory straight into registers */
#endif
#if AREG && OVERLAP
#error "AREG runs with OVERLAP = 0: a stage's A registers are loaded again once its products finish"
#endif
#define AHEAD (ASYNC - 1 - OVERLAP) /* stages copied ahead of the one multiplied */
#if BM % 64 != 0 || BN % WN != 0 || (WN != 64 && WN != 128 && WN != 256) || BK % 8 != 0
#error "BM must be a multiple of 64, WN 64, 128 or 256 dividing BN, BK a multiple of 8"
#endif
#if ASYNC < 3 || ASYNC > 8 || (OVERLAP != 0 && OVERLAP != 1)
#error "ASYNC takes 3 to 8 buffers, OVERLAP 0 or 1"
#endif
#define WGROUPS_N (BN / WN)
#define ACC (WN / 2) /* accumulators per work-item */

#ifndef TMA
#define TMA 0
#endif
#if TMA
/* The operands as the Tensor Memory Accelerator writes them (gemm_tma.cl): each row's BK = 32
 * depths in 128 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8) (its 128-byte swizzle),
 * eight rows to a group of 1024 bytes. A k8 step reads 32 bytes of each row, inside one row:
 * the leading offset is unused. */
#define CORE_LBO 16
#define CORE_SBO 1024
#define DESCRIPTOR_LAYOUT 1ul /* the descriptor's layout type: 128-byte swizzle */
/* The byte of a stage the tensor cores read for byte offset `byte` (from a 1024-byte aligned
 * base). */
static inline int swizzled(int byte)
{
    return byte ^ (((byte >> 7) & 7) << 4);
}
/* The float of operand block off (a byte offset: its first row and k8 step) at row, depth kk. */
#define OPERAND_INDEX(off, row, kk) (swizzled((off) + (row)*128 + (kk)*4) / 4)
#else
/* Byte offsets between core matrices: along the depth (leading) and to the next 8 rows
 * (stride), as AS_AT and BS_AT lay them out. */
#define CORE_LBO 128
#define CORE_SBO (BK / 4 * 128)
#define DESCRIPTOR_LAYOUT 0ul /* no swizzle */
#define OPERAND_INDEX(off, row, kk) \
    (((off) + ((row) / 8) * CORE_SBO + ((kk) / 4) * CORE_LBO) / 4 + ((row) % 8) * 4 + (kk) % 4)
#endif

/* Keeps the compiler from moving accumulator reads or writes across the asynchronous
 * products (the assembler itself orders them against the wgmma instructions). */
static inline void fence_acc(float *d)
{
#if !MMA_EMULATE
#pragma unroll
    for (int i = 0; i < ACC; i++)
        asm volatile("" : "+f"(d[i])::"memory");
#endif
}

#if MMA_EMULATE
/* d += A * B for one 64 x WN x 8 step, A's 64 rows at byte offset a_off of as and B's WN
 * columns at b_off of bs, read through the core-matrix offsets the descriptors give the
 * tensor cores; each operand truncated to TF32. */
static inline void wgmma_step(float *d, __local const float *as, int a_off,
                              __local const float *bs, int b_off, int lid)
{
    int q = (lid % 128) / 32, g = lid % 32 / 4, t = lid % 4;
    for (int j = 0; j < WN / 8; j++) {
        for (int o = 0; o < 4; o++) {
            int row = 16 * q + g + 8 * (o >> 1), col = 8 * j + 2 * t + (o & 1);
            float sum = 0.0f;
            for (int kk = 0; kk < 8; kk++) {
                sum += as_float(as_uint(as[OPERAND_INDEX(a_off, row, kk)]) & 0xffffe000u) *
                       as_float(as_uint(bs[OPERAND_INDEX(b_off, col, kk)]) & 0xffffe000u);
            }
            d[4 * j + o] += sum;
        }
    }
}
#define WGMMA_BEGIN()
#define WGMMA_END()
#define WGMMA_DRAIN()
#else
/* The shared-memory matrix descriptor of the PTX ISA: start address, leading and stride byte
 * offsets, each >> 4, and the layout (DESCRIPTOR_LAYOUT). */
static inline ulong descriptor(__local const float *base, int offset)
{
    uint addr = (uint)(size_t)base + (uint)offset;
    return (ulong)((addr & 0x3ffff) >> 4) | ((ulong)(CORE_LBO >> 4) << 16) |
           ((ulong)(CORE_SBO >> 4) << 32) | (DESCRIPTOR_LAYOUT << 62);
}

#define F4(d, i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define F16(d, i) F4(d, i), F4(d, (i) + 4), F4(d, (i) + 8), F4(d, (i) + 12)
#define F32(d, i) F16(d, i), F16(d, (i) + 16)
#define F64(d, i) F32(d, i), F32(d, (i) + 32)
#define F128(d, i) F64(d, i), F64(d, (i) + 64)

static inline void wgmma_step(float *d, __local const float *as, int a_off,
                              __local const float *bs, int b_off, int lid)
{
    ulong da = descriptor(as, a_off), db = descriptor(bs, b_off);
#if WN == 64
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, %32, %33, p, 1, 1;\n}\n"
                 : F32(d, 0)
                 : "l"(da), "l"(db), "r"(1));
#elif WN == 128
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "
                 "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, "
                 "%61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : F64(d, 0)
                 : "l"(da), "l"(db), "r"(1));
#else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
                 "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
                 "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
                 "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, "
                 "%77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
                 "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, "
                 "%106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "
                 "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "%128, %129, p, 1, 1;\n}\n"
                 : F128(d, 0)
                 : "l"(da), "l"(db), "r"(1));
#endif
}
#if AREG
/* As wgmma_step, with A's fragment in registers (fr: the work-item's four values of the 64 x 8
 * step, AREG's layout above), truncated to TF32 here, where the loads have long landed. */
static inline void wgmma_step_rs(float *d, const uint *fragment, __local const float *bs,
                                 int b_off)
{
    ulong db = descriptor(bs, b_off);
    uint fr[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        fr[i] = fragment[i] & 0xffffe000u;
#if WN == 64
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
                 "%30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                 : F32(d, 0)
                 : "r"(fr[0]), "r"(fr[1]), "r"(fr[2]), "r"(fr[3]), "l"(db), "r"(1));
#elif WN == 128
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
                 "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
                 "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
                 "%58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                 : F64(d, 0)
                 : "r"(fr[0]), "r"(fr[1]), "r"(fr[2]), "r"(fr[3]), "l"(db), "r"(1));
#else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "// @sm_90a@ wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
                 "%30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
                 "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
                 "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, "
                 "%72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, "
                 "%86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
                 "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, "
                 "%124, %125, %126, %127"
                 "}, {%128, %129, %130, %131}, %132, p, 1, 1;\n}\n"
                 : F128(d, 0)
                 : "r"(fr[0]), "r"(fr[1]), "r"(fr[2]), "r"(fr[3]), "l"(db), "r"(1));
#endif
}
#endif
/* The products of a stage: fenced against earlier register use and committed as one group;
 * WGMMA_END then waits for the group before it (OVERLAP 1: the stage before) or for this one
 * (OVERLAP 0), WGMMA_DRAIN for all. */
#define WGMMA_BEGIN() asm volatile("// @sm_90a@ wgmma.fence.sync.aligned;\n" ::: "memory")
#if OVERLAP
#define WGMMA_END() \
    asm volatile("// @sm_90a@ wgmma.commit_group.sync.aligned;\n" \
                 "// @sm_90a@ wgmma.wait_group.sync.aligned 1;\n" ::: "memory")
#else
#define WGMMA_END() \
    asm volatile("// @sm_90a@ wgmma.commit_group.sync.aligned;\n" \
                 "// @sm_90a@ wgmma.wait_group.sync.aligned 0;\n" ::: "memory")
#endif
#define WGMMA_DRAIN() \
    asm volatile("// @sm_90a@ wgmma.wait_group.sync.aligned 0;\n" ::: "memory")
#endif

/* Writes a warpgroup's 64 x WN block of results from its accumulators (the layout above), its
 * rows from row0 and columns from col0, those inside m x n. */
static inline void store_warpgroup(gemm_out o, const float *acc, int row0, int col0, int m, int n)
{
    int lid = get_local_id(0), quarter = (lid % 128) / 32, g = lid % 32 / 4, t = lid % 4;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = row0 + 16 * quarter + g + 8 * h;
        if (row >= m)
            continue;
#pragma unroll
        for (int j = 0; j < WN / 8; j++) {
            int col = col0 + 8 * j + 2 * t;
            if (col < n)
                store_run(o, row, col, n,
                          (float4)(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], 0.0f, 0.0f), 2);
        }
    }
}

#if !TMA /* the rest: the stages copied through cp.async by every work-item */
/* CP_WAIT waits until at most AHEAD - 1 of the work-item's groups of copies (gemm.cl's
 * copy16, copy4, cp_commit) are in flight, the stage about to be multiplied landed, and fences
 * its landed copies against the tensor cores' reads (the async proxy). */
#if MMA_EMULATE
#define CP_WAIT()
#else
#define CP_WAIT_N(n) \
    asm volatile("cp.async.wait_group " #n ";\n// @sm_90a@ fence.proxy.async.shared::cta;" :: \
                     : "memory")
#if AHEAD == 1
#define CP_WAIT() CP_WAIT_N(0)
#elif AHEAD == 2
#define CP_WAIT() CP_WAIT_N(1)
#elif AHEAD == 3
#define CP_WAIT() CP_WAIT_N(2)
#elif AHEAD == 4
#define CP_WAIT() CP_WAIT_N(3)
#elif AHEAD == 5
#define CP_WAIT() CP_WAIT_N(4)
#elif AHEAD == 6
#define CP_WAIT() CP_WAIT_N(5)
#else
#define CP_WAIT() CP_WAIT_N(6)
#endif
#endif

/* Copies one operand's stage: rows (or columns) 0 .. SIDE - 1 of the tile from r0 on, depths
 * k0 .. k0 + BK - 1, zeros outside rows < rows and depths < kend. K_MAJOR: the operand is
 * stored with its depths contiguous (x[row * ld + depth]), else x[depth * ld + row]. 16-byte
 * runs go to 16 consecutive bytes of local memory (core-matrix rows), so a quarter-warp
 * fills 128 distinct bytes; 4-byte copies are spread so that a warp's 32 land in 32 banks
 * (8 rows by 4 depths) and read 32-byte sectors whole. */
#define COPY_OPERAND(SIDE, K_MAJOR, VEC, x, ld, r0, rows, k0, kend, dst, AT) \
    do { \
        int lid_ = get_local_id(0); \
        if ((K_MAJOR) && (VEC) == 4) { \
            _Pragma("unroll") for (int l = 0; l < SIDE * BK / (4 * THREADS); l++) { \
                int e = lid_ + l * THREADS; \
                int i = 8 * (e / (2 * BK)) + e % 8, p = 4 * ((e / 8) % (BK / 4)); \
                int row = (r0) + i, kk = (k0) + p; \
                int bytes = row < (rows) ? clamp(4 * ((kend) - kk), 0, 16) : 0; \
                copy16((dst) + 4 * e, bytes > 0 ? (x) + (size_t)row * (ld) + kk : (x), bytes); \
            } \
        } else { \
            _Pragma("unroll") for (int l = 0; l < SIDE * BK / THREADS; l++) { \
                int e = lid_ + l * THREADS, i, p; \
                if (K_MAJOR) { \
                    p = e % 4 + 4 * ((e / 32) % (BK / 4)); \
                    i = (e / 4) % 8 + 8 * (e / (8 * BK)); \
                } else { \
                    i = e % 8 + 8 * ((e / 32) % (SIDE / 8)); \
                    p = (e / 8) % 4 + 4 * (e / (4 * SIDE)); \
                } \
                int row = (r0) + i, kk = (k0) + p; \
                bool in = row < (rows) && kk < (kend); \
                size_t at = (K_MAJOR) ? (size_t)row * (ld) + kk : (size_t)kk * (ld) + row; \
                copy4((dst) + AT(i, p), in ? (x) + at : (x), in ? 4 : 0); \
            } \
        } \
    } while (0)

#define A_AT(i, p) AS_AT(i, p)
#define B_AT(j, p) BS_AT(p, j)

/* Issues the copies of stage s into as, bs (gemm.cl's stage_of: the first pair's stages, then
 * the second's). */
static inline void copy_stage(const gemm_pairs *q, int s, int m0, int n0, int m, int n,
                              __local float *as, __local float *bs)
{
    stage_source src = stage_of(q, s);
#if !AREG
    COPY_OPERAND(BM, !TRANS_A, VEC_A, src.a, src.lda, m0, m, src.k0, src.kend, as, A_AT);
#endif
    COPY_OPERAND(BN, TRANS_B, VEC_B, src.b, src.ldb, n0, n, src.k0, src.kend, bs, B_AT);
}

#if AREG
#define A_FRAG (4 * (BK / 8)) /* A values a work-item holds per stage: four per k8 step */
#define RING (AHEAD + 1)      /* stages of A in registers: the one multiplied, those ahead */

/* Loads the work-item's fragments of stage s of A into fr (the layout above), zeros outside
 * rows < m and the pair's depths, and past the last stage. row0: the warpgroup's first row.
 * Nothing here uses the loaded values: an instruction that did would stall the work-item
 * until they arrive, which is what loading RING stages ahead avoids. */
static inline void load_a_fragments(const gemm_pairs *q, int s, int stages, int row0, int m,
                                    uint fr[A_FRAG])
{
    if (s >= stages) {
#pragma unroll
        for (int i = 0; i < A_FRAG; i++)
            fr[i] = 0u;
        return;
    }
    stage_source src = stage_of(q, s);
    int lid = get_local_id(0), quarter = (lid % 128) / 32, g = lid % 32 / 4, t = lid % 4;
#pragma unroll
    for (int i = 0; i < A_FRAG; i++) {
        int row = row0 + 16 * quarter + g + 8 * (i & 1);
        int kk = src.k0 + 8 * (i / 4) + t + 4 * ((i >> 1) & 1);
        bool in = row < m && kk < src.kend;
#if TRANS_A
        size_t at = (size_t)kk * src.lda + row;
#else
        size_t at = (size_t)row * src.lda + kk;
#endif
        fr[i] = in ? as_uint(src.a[at]) : 0u; /* truncated where used: nothing waits here */
    }
}

#if MMA_EMULATE
/* The register form through a local scratch of one 64 x 8 step per warpgroup (AS_AT's layout,
 * the warpgroup's rows from wm0): each work-item stores its fragment where the layout above
 * says it belongs, and wgmma_step reads the scratch as it reads A's local stages. */
static inline void wgmma_step_rs_emulated(float *d, const uint *fr, __local float *scratch,
                                          int wm0, __local const float *bs, int b_off, int lid)
{
    int quarter = (lid % 128) / 32, g = lid % 32 / 4, t = lid % 4;
    barrier(CLK_LOCAL_MEM_FENCE); /* the previous step's reads are done */
    for (int o = 0; o < 4; o++)
        scratch[AS_AT(wm0 + 16 * quarter + g + 8 * (o & 1), t + 4 * (o >> 1))] = as_float(fr[o]);
    barrier(CLK_LOCAL_MEM_FENCE);
    wgmma_step(d, scratch, (wm0 / 8) * CORE_SBO, bs, b_off, lid);
}
#endif
#endif

__kernel __attribute__((reqd_work_group_size(THREADS, 1, 1))) void
gemm_wgmma(GEMM_PARAMS STAGE_PARAM)
{
    AFTER_PREVIOUS_LAUNCH_ENDS();
/* A_STAGE(s), B_STAGE(s): the buffers of stage s. With AREG, A never enters local memory
 * (copy_stage copies B alone): no buffer, but the emulation's scratch of one A step. */
#if AREG && MMA_EMULATE
    __local float as[1][AS_SIZE] __attribute__((aligned(128)));
#define A_STAGE(s) as[0]
#elif AREG
#define A_STAGE(s) ((__local float *)0)
#elif STAGE_ARG
#define A_STAGE(s) (stage_mem + (s) * AS_SIZE)
#else
    __local float as[ASYNC][AS_SIZE] __attribute__((aligned(128)));
#define A_STAGE(s) as[s]
#endif
#if STAGE_ARG
#define B_STAGE(s) (stage_mem + (AREG ? 0 : ASYNC * AS_SIZE) + (s) * BS_SIZE)
#else
    __local float bs[ASYNC][BS_SIZE] __attribute__((aligned(128)));
#define B_STAGE(s) bs[s]
#endif
    tile_pos pos = tile_of(get_group_id(0), m, n, slices);
    a += pos.batch * stride_a;
    b += pos.batch * stride_b;
    c += pos.batch * stride_c;
    int m0 = pos.bm * BM, n0 = pos.bn * BN;
    int kbegin = pos.slice * kchunk, kend = min(k, kbegin + kchunk);
    int lid = get_local_id(0), wg = lid / 128;
    int wm0 = (wg / WGROUPS_N) * 64, wn0 = (wg % WGROUPS_N) * WN;
    /* the warpgroup's first core matrices: row group wm0 / 8 of A, column group wn0 / 8 of B */
    int a_base = (wm0 / 8) * CORE_SBO, b_base = (wn0 / 8) * CORE_SBO;

    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++)
        acc[i] = 0.0f;

    gemm_pairs q = gemm_pairs_of(pos, a, lda, b, ldb, kbegin, kend, a2, lda2, b2, ldb2, k2);
    int stages = q.stages + q.stages2;
    /* Every work-item commits a group per stage, empty past the last, so that CP_WAIT counts
     * alike; stage s + AHEAD goes into the buffer of stage s - 1 - OVERLAP, whose products
     * every warpgroup waited for before the barrier. */
    for (int s = 0; s < AHEAD; s++) {
        if (s < stages)
            copy_stage(&q, s, m0, n0, m, n, A_STAGE(s), B_STAGE(s));
        cp_commit();
    }
#if AREG
    /* A's stages in a ring of registers, indexed by constants: the loop runs RING stages per
     * turn, stage s0 + u in slot u, which is loaded with stage s0 + u + RING once its
     * products have finished. */
    uint afr[RING][A_FRAG];
#pragma unroll
    for (int u = 0; u < RING; u++)
        load_a_fragments(&q, u, stages, m0 + wm0, m, afr[u]);
    for (int s0 = 0; s0 < stages; s0 += RING) {
#pragma unroll
        for (int u = 0; u < RING; u++) {
            int s = s0 + u;
            if (s >= stages)
                break;
            CP_WAIT();
            barrier(CLK_LOCAL_MEM_FENCE);
            int next = s + AHEAD;
            if (next < stages)
                copy_stage(&q, next, m0, n0, m, n, A_STAGE(next % ASYNC), B_STAGE(next % ASYNC));
            cp_commit();
            __local const float *sb = B_STAGE(s % ASYNC);
            fence_acc(acc);
            WGMMA_BEGIN();
#pragma unroll
            for (int kk = 0; kk < BK / 8; kk++)
#if MMA_EMULATE
                wgmma_step_rs_emulated(acc, afr[u] + 4 * kk, as[0], wm0, sb,
                                       b_base + 2 * kk * CORE_LBO, lid);
#else
                wgmma_step_rs(acc, afr[u] + 4 * kk, sb, b_base + 2 * kk * CORE_LBO);
#endif
            WGMMA_END();
            fence_acc(acc);
            load_a_fragments(&q, s + RING, stages, m0 + wm0, m, afr[u]);
        }
    }
#else
    for (int s = 0; s < stages; s++) {
        CP_WAIT();
        barrier(CLK_LOCAL_MEM_FENCE);
        int next = s + AHEAD;
        if (next < stages)
            copy_stage(&q, next, m0, n0, m, n, A_STAGE(next % ASYNC), B_STAGE(next % ASYNC));
        cp_commit();
        __local const float *sa = A_STAGE(s % ASYNC), *sb = B_STAGE(s % ASYNC);
        fence_acc(acc);
        WGMMA_BEGIN();
#pragma unroll
        for (int kk = 0; kk < BK / 8; kk++)
            wgmma_step(acc, sa, a_base + 2 * kk * CORE_LBO, sb, b_base + 2 * kk * CORE_LBO, lid);
        WGMMA_END();
        fence_acc(acc);
    }
#endif
    WGMMA_DRAIN();
    fence_acc(acc);

    store_warpgroup(out_of(c, ldc, alpha, beta, part, pos, m, n), acc, m0 + wm0, n0 + wn0, m, n);
}
#endif
