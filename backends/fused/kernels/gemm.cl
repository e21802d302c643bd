/*
 * The tiled GEMM family, shared part: C = alpha * op(A) * op(B) + beta * C, op(A) m x k,
 * op(B) k x n, C m x n, all row-major. A is stored m x k (TRANS_A = 0) or k x m (TRANS_A = 1),
 * B k x n (TRANS_B = 0) or n x k (TRANS_B = 1), each with its own row stride (lda, ldb, ldc),
 * so a transpose is a different load, never a copy. gemm_tile.cl (fp32 FMAs) and gemm_mma.cl
 * (tensor cores) follow this file and supply the arithmetic.
 *
 * Work decomposition: one work-group computes a BM x BN tile of C; tiles are launched in bands
 * of GROUP_M tile rows, column by column inside a band, so that the groups in flight share
 * rows of A and columns of B in the L2 cache. The k loop stages BK-deep slices of op(A) and
 * op(B) through local memory, double-buffered: the global loads of slice s + 1 go into
 * registers before the arithmetic of slice s and into the other buffer after it, so one
 * barrier per slice suffices (gemm_mma.cl with ASYNC: ASYNC - 1 slices in flight through
 * cp.async instead, no registers on the way). Loads read VEC_A (VEC_B) floats along the
 * stored row, through float4 pointers where the rows are 16-byte aligned (vload4 would let
 * the compiler split them: it cannot prove the alignment that the host guarantees), else as
 * four scalar loads off one address, each checked against the matrix's edge; edge tiles load
 * zeros outside the matrix, so any m, n, k work without padding copies.
 * Split-K (SPLIT_K = 1): the k range is cut into `slices` slices of kchunk (a multiple of BK);
 * each work-group writes its slice's unscaled partial tile to part[slice][m][n], and
 * gemm_splitk_reduce then adds the slices in order (deterministic) and applies alpha and beta.
 * Batches: matrix i of A, B and C starts i * stride_a (stride_b, stride_c) floats in; split-K
 * serves single products only.
 * A second product (a2, b2, k2 > 0; same transposes) is summed into the same tile after the
 * first: LoRA's y = x * W + (scale * x * A) * B without a second pass over y.
 *
 * Reads: A n / BN times and B m / BM times (mostly from L2), C once when beta != 0 (beta = 0
 * never reads C, so NaN there is ignored as BLAS does); writes C once. Split-K writes and reads
 * back the slices' partial tiles more.
 *
 * Tuning parameters (-D from the host; each default here is the host's default for products
 * that fill the device with large tiles; smaller ones get smaller tiles and split-K):
 *   BM, BN    tile of C per work-group
 *   BK        k depth of one local-memory stage
 *   VEC_A     4: A is read in runs of 4 along its stored rows; 1: scalar loads
 *   VEC_B     likewise for B
 *   ALIGN_A   1: A's rows are 16-byte aligned (lda % 4 == 0), a run is one float4 load; 0: four
 *             scalar loads off one address, which keep fewer addresses in registers than
 *             VEC_A = 1, one load per element with an address each
 *             (the mma.sync and warpgroup kernels' 16-byte copies need ALIGN_A = 1; the FMA
             kernel's cp.async copies unaligned rows 4 bytes at a time)
 *   ALIGN_B   likewise for B
 *   VEC_C     4: C is read and written in vectors where a run lies inside (ldc % 4 == 0)
 *   TRANS_A, TRANS_B   the stored layouts above
 *   SPLIT_K   1: k is cut into slices whose partial tiles gemm_splitk_reduce adds
 *   GROUP_M   tile rows per band of the launch order
 *   IDX32     1: every load's element offset in its matrix, a tile and a stage past the edges
 *             included, fits an int (host-checked), so the loads index in 32 bits: one
 *             multiply-add an address, where 64-bit offsets of int rows take several
 *             instructions each on GPUs, in the loop that feeds the products
 *   STAGE_ARG 1: the local-memory stages are the kernel's last argument, a __local array
 *             the host sizes, not arrays of the kernel: on the CUDA runtime such an argument
 *             is dynamic shared memory, up to the multiprocessor's opt-in limit, where a
 *             kernel's own arrays stop at OpenCL's 48 KiB (STAGE_PARAM, STAGE_ARRAYS)
 * and the arithmetic's own (gemm_tile.cl: RM, RN; gemm_mma.cl: WM, WN, PREC, ASYNC;
 * gemm_wgmma.cl: WN, ASYNC). THREADS
 * and the local layouts AS_AT(i, p), BS_AT(p, j) (row i or column j of the tile at depth p) are
 * defined per arithmetic below.
 */
#ifndef BM
#define BM 128 /* rows of C per work-group */
#endif
#ifndef BN
#define BN 128 /* columns of C per work-group */
#endif
#ifndef MMA
#define MMA 0 /* 1: the tensor-core arithmetic of gemm_mma.cl */
#endif
#ifndef STAGE_ARG
#define STAGE_ARG 0
#endif
/* The arguments every GEMM kernel of the family takes, in the host's order (tile.c): the
 * product, split-K's partials, the batch strides, LoRA's second product. */
#define GEMM_PARAMS                                                                                \
    const int m, const int n, const int k, const float alpha, __global const float *restrict a,   \
        const int lda, __global const float *restrict b, const int ldb, const float beta,         \
        __global float *restrict c, const int ldc, __global float *restrict part,                 \
        const int kchunk, const int slices, const ulong stride_a, const ulong stride_b,           \
        const ulong stride_c, __global const float *restrict a2, const int lda2,                  \
        __global const float *restrict b2, const int ldb2, const int k2
#if STAGE_ARG
#define STAGE_PARAM , __local float *restrict stage_mem
/* as[b] and bs[b], buffer b of A's and of B's stages, over the argument: A's first */
#define STAGE_ARRAYS(buffers, a_size, b_size)                                                      \
    __local float(*as)[a_size] = (__local float(*)[a_size])stage_mem;                               \
    __local float(*bs)[b_size] = (__local float(*)[b_size])(stage_mem + (buffers) * (a_size))
#else
#define STAGE_PARAM
#define STAGE_ARRAYS(buffers, a_size, b_size)                                                      \
    __local float as[buffers][a_size] __attribute__((aligned(16)));                                \
    __local float bs[buffers][b_size] __attribute__((aligned(16)))
#endif
#ifndef WGMMA
#define WGMMA 0 /* 1: the warpgroup tensor-core arithmetic of gemm_wgmma.cl (Hopper) */
#endif
#ifndef BK
#if MMA || WGMMA
#define BK 16 /* k depth of one local-memory stage */
#else
#define BK 8
#endif
#endif
#ifndef VEC_A
#define VEC_A 1 /* A loaded in runs of 4 (host: where a stage splits into them) */
#endif
#ifndef VEC_B
#define VEC_B 1 /* B loaded in runs of 4 (host: likewise) */
#endif
#ifndef ALIGN_A
#define ALIGN_A 1 /* runs of A are 16-byte aligned (host: lda % 4 == 0) */
#endif
#ifndef ALIGN_B
#define ALIGN_B 1 /* runs of B are 16-byte aligned (host: ldb % 4 == 0) */
#endif
#if WGMMA && ((VEC_A == 4 && !ALIGN_A) || (VEC_B == 4 && !ALIGN_B))
#error "the warpgroup kernel copies a run of 4 as 16 bytes: VEC_A (VEC_B) = 4 needs aligned rows"
#endif
#ifndef VEC_C
#define VEC_C 1 /* vector access to C (host: ldc % 4 == 0) */
#endif
#ifndef TRANS_A
#define TRANS_A 0 /* A stored k x m */
#endif
#ifndef TRANS_B
#define TRANS_B 0 /* B stored n x k */
#endif
#ifndef SPLIT_K
#define SPLIT_K 0 /* 1: write partial tiles for gemm_splitk_reduce */
#endif
#ifndef GROUP_M
#define GROUP_M 8 /* tile rows per band of the launch order */
#endif
#ifndef IDX32
#define IDX32 0 /* 1: the loads' offsets fit an int */
#endif
#if IDX32
typedef int gemm_idx; /* an element's offset in its matrix */
#else
typedef size_t gemm_idx;
#endif
#if WGMMA
/* Warpgroup tensor cores: groups of 128 work-items, each owning a 64 x WN block of the tile.
 * Both operands are kept depth-contiguous in core matrices of 8 rows by 4 depths (128
 * contiguous bytes, 16 per row): the core matrix of row group r and depth group d starts at
 * float (r * BK / 4 + d) * 32, the layout the products' descriptors name (gemm_wgmma.cl). */
#ifndef WN
#define WN 128 /* columns of C per warpgroup */
#endif
#ifndef TMA
#define TMA 0 /* 1: stages copied by the Tensor Memory Accelerator (gemm_tma.cl) */
#endif
#if TMA /* the products' warpgroups and one that issues the copies */
#define THREADS ((BM / 64) * (BN / WN) * 128 + 128)
#else
#define THREADS ((BM / 64) * (BN / WN) * 128)
#endif
#define CORE_AT(r, p) (((((r) >> 3) * (BK / 4) + ((p) >> 2)) << 5) | (((r)&7) << 2) | ((p)&3))
#define AS_SIZE (BM * BK)
#define AS_AT(i, p) CORE_AT(i, p)
#define BS_SIZE (BN * BK)
#define BS_AT(p, j) CORE_AT(j, p)
/* (the register-staged loads below serve the other arithmetics; cp.async copies here) */
#define A_LOADS_ALONG_DEPTH 0
#define B_LOADS_ALONG_DEPTH 0
#define A_RUN_CONTIGUOUS 0
#define B_RUN_CONTIGUOUS 0
#elif MMA
/* Tensor cores: warps of 32 work-items, each owning a WM x WN block of the tile. Local memory
 * keeps both operands depth-contiguous (A as the tile's rows, B as its columns), so that a
 * work-item reads four consecutive depths of a row or column as one float4 (gemm_mma.cl). A
 * row is MMA_STRIDE floats, 16 past a multiple of 32: the 8 work-items of a quarter-warp, which
 * read rows g and g + 1 at depths 4t (t < 4), then meet 8 distinct 16-byte bank groups. An
 * operand stored depth-major (A with TRANS_A, B without TRANS_B) is transposed on its way in:
 * consecutive work-items load consecutive depths (two work-items share each 32-byte sector),
 * so that their scalar stores meet at most two to a bank. */
#ifndef WM
#define WM 64 /* rows of C per warp */
#endif
#ifndef WN
#define WN 32 /* columns of C per warp */
#endif
#ifndef ASYNC
#define ASYNC 0 /* stages in flight through cp.async (2 to 4); 0: register staging */
#endif
#define THREADS ((BM / WM) * (BN / WN) * 32)
#define MMA_STRIDE (BK + (48 - BK % 32) % 32)
/* Consecutive loads of a depth-major operand go along the depth. */
#define A_LOADS_ALONG_DEPTH TRANS_A
#define B_LOADS_ALONG_DEPTH (!TRANS_B)
/* A run of VEC loaded floats lies along the stored row: contiguous in local memory only for an
 * operand stored depth-contiguous. */
#define A_RUN_CONTIGUOUS (!TRANS_A)
#define B_RUN_CONTIGUOUS TRANS_B
/* With ASYNC, cp.async copies 16-byte runs as they are stored, so a depth-major operand stays
 * depth-major in local memory: BK rows of the tile's BM (BN) values, the run of 4 values at i
 * placed at run (i / 4) ^ (2 * ((p / 4) % 4)) of row p. A fragment read then takes four
 * scalars, and in each the 32 work-items of a warp (rows g < 8 of two runs, depth 4t + d for
 * the four t) meet 8 distinct runs mod 8, so 32 distinct banks (BM, BN multiples of 32). */
#define SWIZZLED(x, p) (((((x) >> 2) ^ (((p) >> 1) & 6)) << 2) | ((x)&3))
#if ASYNC && ((TRANS_A && BM % 32 != 0) || (!TRANS_B && BN % 32 != 0) || ASYNC < 2 || ASYNC > 4)
#error "ASYNC takes 2 to 4 stages, and a depth-major operand's tile side a multiple of 32"
#endif
#if ASYNC && TRANS_A
#define A_DEPTH_MAJOR 1
#define AS_SIZE (BK * BM)
#define AS_AT(i, p) ((p)*BM + SWIZZLED(i, p))
#else
#define A_DEPTH_MAJOR 0
#define AS_SIZE (BM * MMA_STRIDE)
#define AS_AT(i, p) ((i)*MMA_STRIDE + (p))
#endif
#if ASYNC && !TRANS_B
#define B_DEPTH_MAJOR 1
#define BS_SIZE (BK * BN)
#define BS_AT(p, j) ((p)*BN + SWIZZLED(j, p))
#else
#define B_DEPTH_MAJOR 0
#define BS_SIZE (BN * MMA_STRIDE)
#define BS_AT(p, j) ((j)*MMA_STRIDE + (p))
#endif
#define A_ASYNC ASYNC /* both operands are copied by cp.async */
#define B_ASYNC ASYNC
#else
/* FMAs: RM x RN results per work-item, read from local memory as float4 runs along i and j,
 * so both operands are kept depth-major; rows padded by 4 floats put one warp's transposed
 * stores in distinct banks and keep every row 16-byte aligned (the operands stored depth-major
 * need no padding, but ran slower without it: the case gemm 3000x3000x3000, commit 7558118).
 * With ASYNC (NVIDIA compute capability 8.0 and later), ASYNC buffers, ASYNC - 1 stages in
 * flight: cp.async copies the operands stored depth-major (A stored k x m, B stored k x n) as
 * they are stored; the others still go through registers, transposed on their way in. At
 * 4096^3 (16 x 8 per work-item) the other ways ran slower (commit 0117ef9): an A
 * stored m x k kept depth-contiguous and read four depths at a time, in NN; copied one float
 * per cp.async into the depth-major layout, in NN and NT; and both operands copied, the
 * depth-contiguous one kept as rows and read four depths at a time (it holds a run of four
 * depths of every row in registers at once). */
#ifndef RM
#define RM 8 /* rows of C per work-item */
#endif
#ifndef RN
#define RN 8 /* columns of C per work-item */
#endif
#ifndef ASYNC
#define ASYNC 0 /* buffers of cp.async stages (2 to 8); 0: register staging */
#endif
#if ASYNC && (ASYNC < 2 || ASYNC > 8)
#error "ASYNC takes 2 to 8 buffers"
#endif
#define THREADS ((BM / RM) * (BN / RN))
#define A_ASYNC (ASYNC && TRANS_A)
#define B_ASYNC (ASYNC && !TRANS_B)
#define AS_STRIDE (BM + 4)
#define AS_SIZE (BK * AS_STRIDE)
#define AS_AT(i, p) ((p) * AS_STRIDE + (i))
#define BS_STRIDE (BN + 4)
#define BS_SIZE (BK * BS_STRIDE)
#define BS_AT(p, j) ((p) * BS_STRIDE + (j))
/* Depth-major local rows: A's loaded runs are contiguous there only when A is stored k x m. */
#define A_RUN_CONTIGUOUS TRANS_A
#define B_RUN_CONTIGUOUS (!TRANS_B)
#define A_LOADS_ALONG_DEPTH 0
#define B_LOADS_ALONG_DEPTH 0
#endif

#define A_LOADS (BM * BK / (VEC_A * THREADS))
#define B_LOADS (BK * BN / (VEC_B * THREADS))
#if !(WGMMA && TMA) && ((BM * BK) % (VEC_A * THREADS) != 0 || (BK * BN) % (VEC_B * THREADS) != 0)
#error "a stage must split evenly over the work-items"
#endif


/* What work-group g computes: tile (bm, bn) of k slice `slice` of matrix `batch`. Groups run
 * matrix by matrix, slice by slice; inside a slice, in bands of GROUP_M tile rows. */
typedef struct tile_pos {
    int bm, bn, slice, batch;
} tile_pos;

static inline tile_pos tile_of(int g, int m, int n, int slices)
{
    tile_pos pos;
    int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    int tiles = tiles_m * tiles_n;
    pos.batch = g / (tiles * slices);
    g %= tiles * slices;
    pos.slice = g / tiles;
    int t = g % tiles;
    int width = GROUP_M * tiles_n;
    int first = (t / width) * GROUP_M;
    int rows = min(tiles_m - first, GROUP_M);
    pos.bm = first + (t % width) % rows;
    pos.bn = (t % width) / rows;
    return pos;
}

/* Load e of a stage of A: its row in the tile (i) and depth (p), VEC_A wide along the stored
 * row; consecutive loads along the stored row, or along the depth where the layout asks it. */
static inline void a_coord(int e, int *i, int *p)
{
#if A_LOADS_ALONG_DEPTH
    *p = e % BK;
    *i = (e / BK) * VEC_A;
#elif TRANS_A
    *p = e / (BM / VEC_A);
    *i = (e % (BM / VEC_A)) * VEC_A;
#else
    *i = e / (BK / VEC_A);
    *p = (e % (BK / VEC_A)) * VEC_A;
#endif
}

static inline void b_coord(int e, int *p, int *j)
{
#if B_LOADS_ALONG_DEPTH
    *p = e % BK;
    *j = (e / BK) * VEC_B;
#elif TRANS_B
    *j = e / (BK / VEC_B);
    *p = (e % (BK / VEC_B)) * VEC_B;
#else
    *p = e / (BN / VEC_B);
    *j = (e % (BN / VEC_B)) * VEC_B;
#endif
}

/* Loads the stage of A at depth k0 into ra: zeros outside rows < m and depths < kend. An
 * aligned run lies wholly inside or outside, since ALIGN_A = 1 only where the stored row
 * length is a multiple of 4 and kend is k or a multiple of BK; an unaligned one is checked
 * element by element. */
static inline void load_a(__global const float *restrict a, int lda, int m0, int k0, int m,
                          int kend, float ra[A_LOADS * VEC_A])
{
    int lid = get_local_id(0);
#pragma unroll
    for (int l = 0; l < A_LOADS; l++) {
        int i, p;
        a_coord(lid + l * THREADS, &i, &p);
        int row = m0 + i, kk = k0 + p;
        bool in = row < m && kk < kend;
#if TRANS_A
        gemm_idx at = (gemm_idx)kk * lda + row;
#else
        gemm_idx at = (gemm_idx)row * lda + kk;
#endif
#if VEC_A == 4 && ALIGN_A
        float4 v = in ? *(__global const float4 *)(a + at) : (float4)(0.0f);
        ra[l * 4 + 0] = v.x;
        ra[l * 4 + 1] = v.y;
        ra[l * 4 + 2] = v.z;
        ra[l * 4 + 3] = v.w;
#elif VEC_A == 4
#pragma unroll
        for (int q = 0; q < 4; q++) {
#if TRANS_A
            bool in_q = row + q < m && kk < kend;
#else
            bool in_q = row < m && kk + q < kend;
#endif
            ra[l * 4 + q] = in_q ? a[at + q] : 0.0f;
        }
#else
        ra[l] = in ? a[at] : 0.0f;
#endif
    }
}

static inline void load_b(__global const float *restrict b, int ldb, int n0, int k0, int n,
                          int kend, float rb[B_LOADS * VEC_B])
{
    int lid = get_local_id(0);
#pragma unroll
    for (int l = 0; l < B_LOADS; l++) {
        int p, j;
        b_coord(lid + l * THREADS, &p, &j);
        int col = n0 + j, kk = k0 + p;
        bool in = kk < kend && col < n;
#if TRANS_B
        gemm_idx at = (gemm_idx)col * ldb + kk;
#else
        gemm_idx at = (gemm_idx)kk * ldb + col;
#endif
#if VEC_B == 4 && ALIGN_B
        float4 v = in ? *(__global const float4 *)(b + at) : (float4)(0.0f);
        rb[l * 4 + 0] = v.x;
        rb[l * 4 + 1] = v.y;
        rb[l * 4 + 2] = v.z;
        rb[l * 4 + 3] = v.w;
#elif VEC_B == 4
#pragma unroll
        for (int q = 0; q < 4; q++) {
#if TRANS_B
            bool in_q = col < n && kk + q < kend;
#else
            bool in_q = col + q < n && kk < kend;
#endif
            rb[l * 4 + q] = in_q ? b[at + q] : 0.0f;
        }
#else
        rb[l] = in ? b[at] : 0.0f;
#endif
    }
}

/* Stores a stage's registers into local memory at AS_AT / BS_AT: a loaded float4 as one
 * vector where it stays contiguous there (both layouts keep such runs 16-byte aligned). */
static inline void store_a(__local float *as, const float ra[A_LOADS * VEC_A])
{
    int lid = get_local_id(0);
#pragma unroll
    for (int l = 0; l < A_LOADS; l++) {
        int i, p;
        a_coord(lid + l * THREADS, &i, &p);
#if VEC_A == 4 && A_RUN_CONTIGUOUS
        *(__local float4 *)(as + AS_AT(i, p)) =
            (float4)(ra[l * 4], ra[l * 4 + 1], ra[l * 4 + 2], ra[l * 4 + 3]);
#else
#pragma unroll
        for (int v = 0; v < VEC_A; v++) {
#if TRANS_A
            as[AS_AT(i + v, p)] = ra[l * VEC_A + v];
#else
            as[AS_AT(i, p + v)] = ra[l * VEC_A + v];
#endif
        }
#endif
    }
}

static inline void store_b(__local float *bs, const float rb[B_LOADS * VEC_B])
{
    int lid = get_local_id(0);
#pragma unroll
    for (int l = 0; l < B_LOADS; l++) {
        int p, j;
        b_coord(lid + l * THREADS, &p, &j);
#if VEC_B == 4 && B_RUN_CONTIGUOUS
        *(__local float4 *)(bs + BS_AT(p, j)) =
            (float4)(rb[l * 4], rb[l * 4 + 1], rb[l * 4 + 2], rb[l * 4 + 3]);
#else
#pragma unroll
        for (int v = 0; v < VEC_B; v++) {
#if TRANS_B
            bs[BS_AT(p + v, j)] = rb[l * VEC_B + v];
#else
            bs[BS_AT(p, j + v)] = rb[l * VEC_B + v];
#endif
        }
#endif
    }
}

/* The products a work-group sums: op(A) * op(B) over its k slice [kbegin, kend) and, in slice
 * 0, a second product op(A2) * op(B2) over [0, k2) (LoRA's (s*x*A) * B beside x * W; k2 = 0
 * elsewhere), as one run of stages: the first pair's, then the second's. */
typedef struct gemm_pairs {
    __global const float *a, *b, *a2, *b2;
    int lda, ldb, lda2, ldb2;
    int kbegin, kend, k2;
    int stages, stages2;
} gemm_pairs;

/* The pairs of the work-group at pos: its slice's stages of the first pair, and the second
 * pair's in slice 0 alone. */
static inline gemm_pairs gemm_pairs_of(tile_pos pos, __global const float *a, int lda,
                                       __global const float *b, int ldb, int kbegin, int kend,
                                       __global const float *a2, int lda2,
                                       __global const float *b2, int ldb2, int k2)
{
    gemm_pairs q = {a, b, a2, b2, lda, ldb, lda2, ldb2, kbegin, kend, k2,
                    max((kend - kbegin + BK - 1) / BK, 0), pos.slice == 0 ? (k2 + BK - 1) / BK : 0};
    return q;
}

/* Where stage s reads: its pair's matrices and row strides, its first depth, and the end of
 * the pair's depths. */
typedef struct stage_source {
    __global const float *a, *b;
    int lda, ldb, k0, kend;
} stage_source;

static inline stage_source stage_of(const gemm_pairs *q, int s)
{
    stage_source r;
    if (s < q->stages) {
        r.a = q->a;
        r.b = q->b;
        r.lda = q->lda;
        r.ldb = q->ldb;
        r.k0 = q->kbegin + s * BK;
        r.kend = q->kend;
    } else {
        r.a = q->a2;
        r.b = q->b2;
        r.lda = q->lda2;
        r.ldb = q->ldb2;
        r.k0 = (s - q->stages) * BK;
        r.kend = q->k2;
    }
    return r;
}

static inline void load_stage(const gemm_pairs *q, int s, int m0, int n0, int m, int n,
                              float ra[A_LOADS * VEC_A], float rb[B_LOADS * VEC_B])
{
    stage_source src = stage_of(q, s);
    load_a(src.a, src.lda, m0, src.k0, m, src.kend, ra);
    load_b(src.b, src.ldb, n0, src.k0, n, src.kend, rb);
}

/* One operand's part of stage s, for kernels that copy the other with cp.async. */
static inline void load_stage_a(const gemm_pairs *q, int s, int m0, int m,
                                float ra[A_LOADS * VEC_A])
{
    stage_source src = stage_of(q, s);
    load_a(src.a, src.lda, m0, src.k0, m, src.kend, ra);
}

static inline void load_stage_b(const gemm_pairs *q, int s, int n0, int n,
                                float rb[B_LOADS * VEC_B])
{
    stage_source src = stage_of(q, s);
    load_b(src.b, src.ldb, n0, src.k0, n, src.kend, rb);
}

#if ASYNC && !WGMMA
#if (A_ASYNC && VEC_A != 4) || (B_ASYNC && VEC_B != 4)
#error "ASYNC copies runs of 4: VEC_A (VEC_B) must be 4 where A (B) is copied"
#endif
#define A_RUNS (BM * BK / (4 * THREADS))
#define B_RUNS (BK * BN / (4 * THREADS))

/* CP_WAIT waits until at most ASYNC - 2 of the work-item's groups of copies (copy16,
 * cp_commit) are in flight. */
#if MMA_EMULATE
#define CP_WAIT()
#elif ASYNC == 2
#define CP_WAIT() asm volatile("cp.async.wait_group 0;" ::: "memory")
#elif ASYNC == 3
#define CP_WAIT() asm volatile("cp.async.wait_group 1;" ::: "memory")
#elif ASYNC == 4
#define CP_WAIT() asm volatile("cp.async.wait_group 2;" ::: "memory")
#elif ASYNC == 5
#define CP_WAIT() asm volatile("cp.async.wait_group 3;" ::: "memory")
#elif ASYNC == 6
#define CP_WAIT() asm volatile("cp.async.wait_group 4;" ::: "memory")
#elif ASYNC == 7
#define CP_WAIT() asm volatile("cp.async.wait_group 5;" ::: "memory")
#else
#define CP_WAIT() asm volatile("cp.async.wait_group 6;" ::: "memory")
#endif

/* Copies a run of 4 floats at src, of which the first `bytes` lie inside the matrix, to dst:
 * one 16-byte copy where the rows are aligned (ALIGNED), else four of 4 bytes, each float
 * landing at its place in dst, `step` floats apart. */
static inline void copy_run(__local float *dst, int step, __global const float *src, int bytes,
                            bool aligned)
{
    if (aligned) {
        copy16(dst, src, bytes);
        return;
    }
#pragma unroll
    for (int q = 0; q < 4; q++)
        copy4(dst + q * step, bytes > 4 * q ? src + q : src, bytes > 4 * q ? 4 : 0);
}

/* Issues the copies of stage s into as and bs (each where A_ASYNC, B_ASYNC): runs of 4 along
 * the stored rows, zeros outside rows < m (columns < n) and depths < kend; a run that crosses
 * kend (or m, n) copies only its part inside. The source pointer of an empty part is the
 * matrix's start, never read. Runs of rows not 16-byte aligned go 4 bytes at a time. */
static inline void copy_stage(const gemm_pairs *q, int s, int m0, int n0, int m, int n,
                              __local float *as, __local float *bs)
{
    stage_source src = stage_of(q, s);
    int lid = get_local_id(0);
#if A_ASYNC
#pragma unroll
    for (int l = 0; l < A_RUNS; l++) {
        int e = lid + l * THREADS;
#if TRANS_A
        int p = e / (BM / 4), i = (e % (BM / 4)) * 4, kk = src.k0 + p, row = m0 + i;
        int bytes = kk < src.kend ? clamp(4 * (m - row), 0, 16) : 0;
        gemm_idx at = (gemm_idx)kk * src.lda + row;
#else
        int i = e / (BK / 4), p = (e % (BK / 4)) * 4, kk = src.k0 + p, row = m0 + i;
        int bytes = row < m ? clamp(4 * (src.kend - kk), 0, 16) : 0;
        gemm_idx at = (gemm_idx)row * src.lda + kk;
#endif
#if TRANS_A
        int step = AS_AT(i + 1, p) - AS_AT(i, p);
#else
        int step = AS_AT(i, p + 1) - AS_AT(i, p);
#endif
        copy_run(as + AS_AT(i, p), step, bytes > 0 ? src.a + at : src.a, bytes, ALIGN_A);
    }
#endif
#if B_ASYNC
#pragma unroll
    for (int l = 0; l < B_RUNS; l++) {
        int e = lid + l * THREADS;
#if !TRANS_B
        int p = e / (BN / 4), j = (e % (BN / 4)) * 4, kk = src.k0 + p, col = n0 + j;
        int bytes = kk < src.kend ? clamp(4 * (n - col), 0, 16) : 0;
        gemm_idx at = (gemm_idx)kk * src.ldb + col;
#else
        int j = e / (BK / 4), p = (e % (BK / 4)) * 4, kk = src.k0 + p, col = n0 + j;
        int bytes = col < n ? clamp(4 * (src.kend - kk), 0, 16) : 0;
        gemm_idx at = (gemm_idx)col * src.ldb + kk;
#endif
#if !TRANS_B
        int step = BS_AT(p, j + 1) - BS_AT(p, j);
#else
        int step = BS_AT(p + 1, j) - BS_AT(p, j);
#endif
        copy_run(bs + BS_AT(p, j), step, bytes > 0 ? src.b + at : src.b, bytes, ALIGN_B);
    }
#endif
}
#endif

/* Where a tile's results go: C scaled by alpha and beta, or, under split-K, the slice's
 * partial tile, unscaled. */
typedef struct gemm_out {
    __global float *base;
    int ld;
    float alpha, beta;
} gemm_out;

static inline gemm_out out_of(__global float *c, int ldc, float alpha, float beta,
                              __global float *part, tile_pos pos, int m, int n)
{
    gemm_out o;
#if SPLIT_K
    o.base = part + (size_t)pos.slice * m * n;
    o.ld = n;
    o.alpha = 1.0f;
    o.beta = 0.0f;
#else
    o.base = c;
    o.ld = ldc;
    o.alpha = alpha;
    o.beta = beta;
#endif
    return o;
}

static inline float scaled(gemm_out o, float v, __global const float *at)
{
    return o.beta != 0.0f ? fma(o.beta, *at, o.alpha * v) : o.alpha * v;
}

/* Writes the first len (2 or 4) of v at (row, col..), the columns below n. */
static inline void store_run(gemm_out o, int row, int col, int n, float4 v, int len)
{
    __global float *at = o.base + (size_t)row * o.ld + col;
#if VEC_C == 4
    if (col + len <= n) {
        /* aligned: ldc and col are multiples of 4 (of 2 for a pair) */
        if (len == 4) {
            float4 r = o.alpha * v;
            if (o.beta != 0.0f)
                r = fma((float4)(o.beta), *(__global float4 *)at, r);
            *(__global float4 *)at = r;
        } else {
            float2 r = o.alpha * v.xy;
            if (o.beta != 0.0f)
                r = fma((float2)(o.beta), *(__global float2 *)at, r);
            *(__global float2 *)at = r;
        }
        return;
    }
#endif
    float e[4] = {v.x, v.y, v.z, v.w};
    for (int q = 0; q < len && col + q < n; q++)
        at[q] = scaled(o, e[q], at + q);
}

/* C = alpha * (the sum of the slices' partial m x n results, in slice order) + beta * C, one
 * element per work-item. */
__kernel void gemm_splitk_reduce(const int m, const int n, const float alpha, const float beta,
                                 __global float *restrict c, const int ldc,
                                 __global const float *restrict part, const int slices)
{
    AFTER_PREVIOUS_LAUNCH();
    size_t e = get_global_id(0), total = (size_t)m * n;
    if (e >= total)
        return;
    float sum = 0.0f;
    for (int s = 0; s < slices; s++)
        sum += part[(size_t)s * total + e];
    __global float *at = c + (e / (size_t)n) * ldc + e % (size_t)n;
    *at = beta != 0.0f ? fma(beta, *at, alpha * sum) : alpha * sum;
}

/* An operand copied depth-contiguous for the TMA kernel (gemm_tma.cl, which reads rows of
 * 16-byte aligned depths): dst[r * ldd + d] = op(X)[r][d] for rows r < rows and depths
 * d < depth of each matrix of the batch (work-group dimension 1; stride_src and stride_dst
 * floats apart). X is stored rows x depth (trans = 0: x[r * lds + d]: a copy into aligned rows)
 * or depth x rows (trans = 1: x[d * lds + r]). A work-group moves a 32 x 32 block through local
 * memory, reading along the stored rows and writing along dst's. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
gemm_repack(const int rows, const int depth, __global const float *restrict x, const int lds,
            const int trans, const ulong stride_src, __global float *restrict dst, const int ldd,
            const ulong stride_dst)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float block[32][33];
    int blocks_d = (depth + 31) / 32;
    int r0 = get_group_id(0) / blocks_d * 32, d0 = get_group_id(0) % blocks_d * 32;
    x += get_group_id(1) * stride_src;
    dst += get_group_id(1) * stride_dst;
    int lid = get_local_id(0), lane = lid % 32, line = lid / 32;
    for (int i = line; i < 32; i += 8) {
        /* trans: line i of the block is depth d0 + i, lanes along rows; else row r0 + i */
        int r = trans ? r0 + lane : r0 + i, d = trans ? d0 + i : d0 + lane;
        float v = 0.0f;
        if (r < rows && d < depth)
            v = trans ? x[(size_t)d * lds + r] : x[(size_t)r * lds + d];
        if (trans)
            block[lane][i] = v;
        else
            block[i][lane] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = line; i < 32; i += 8)
        if (r0 + i < rows && d0 + lane < depth)
            dst[(size_t)(r0 + i) * ldd + d0 + lane] = block[i][lane];
}
