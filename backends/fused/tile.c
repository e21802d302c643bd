/*
 * The tiled GEMM engine (kernels/gemm.cl with gemm_tile.cl, gemm_mma.cl or gemm_wgmma.cl):
 * parameters from the shape or a tuned variant, build options, split-K scratch and the
 * launches. fp32 runs the FMA kernel everywhere; fp32x3 and tf32 run the tensor-core kernel
 * where the device is NVIDIA with compute capability 8.0 or later and the kernel builds, else
 * the FMA kernel (at least as accurate), with a note. tf32 on compute capability 9.0 runs the
 * warpgroup kernel (wgmma), else, or where that does not build, the mma.sync one. On the CUDA
 * runtime the warpgroup kernel's stages are copied by the Tensor Memory Accelerator
 * (gemm_tma.cl) where both operands are stored depth-contiguous in 16-byte aligned rows; else,
 * or where the driver refuses their tensor maps, by cp.async.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backends/fused/internal.h"

/* Split-K scratch beyond this is not worth it: such products have tiles enough. */
#define SPLITK_PART_MAX_BYTES ((size_t)256 << 20)

bool hd__fused_is_tile_variant(const char *variant)
{
    return variant != NULL && (strncmp(variant, "BM=", 3) == 0 || strstr(variant, " BM=") != NULL);
}

/* Local memory a work-group of the warpgroup kernel leaves to the driver beside its stages. */
#define STAGE_MEM_RESERVE 1024

void hd__fused_tile_probe(hd_fused *f, const hd_runtime_info *info)
{
    f->local_mem = info->static_local;
    f->stage_mem = info->kind == HD_RUNTIME_CUDA && info->local_mem > info->static_local
                       ? info->local_mem - STAGE_MEM_RESERVE
                       : 0;
    f->nv_options = info->nv_options;
    f->mma = info->nv_major >= 8;
    /* wgmma exists on sm_90a alone: not on later architectures */
    f->wgmma = f->mma && info->nv_major == 9 && info->nv_minor == 0;
    f->tma = f->wgmma && info->tensor_maps && f->stage_mem > 0;
}

static void splitk_release(hd_fused *f)
{
    hd__rt_scratch_free(f->rt, f->splitk_part);
    f->splitk_part = NULL;
    f->splitk_bytes = 0;
}

/* The scratch of operand i's copies (freed once the queued launches using it ran), and the
 * record of what it held. */
static void repack_release(hd_fused *f, int i)
{
    hd__rt_scratch_free(f->rt, f->repack[i]);
    f->repack[i] = NULL;
    f->repack_bytes[i] = 0;
    f->repack_from[i].valid = false;
}

void hd__fused_tile_release(hd_fused *f)
{
    splitk_release(f);
    for (int i = 0; i < 4; i++)
        repack_release(f, i);
}

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* Whether this call runs on the tensor cores. */
static bool wants_mma(const hd_fused *f, hd_precision precision)
{
    return precision != HD_PRECISION_FP32 && f->mma && !f->mma_broken;
}

/* Whether it may run on the warpgroup kernel: tf32 on compute capability 9.0. */
static bool wants_wgmma(const hd_fused *f, hd_precision precision)
{
    return precision == HD_PRECISION_TF32 && wants_mma(f, precision) && f->wgmma &&
           !f->wgmma_broken;
}

/* Whether fp32x3 may run on the warpgroup kernel: with the copy engine alone (gemm_tma.cl,
 * PREC 3: its stages' small parts are made in local memory after the copies land). */
static bool wants_tma_x3(const hd_fused *f, hd_precision precision)
{
    return precision == HD_PRECISION_FP32X3 && wants_mma(f, precision) && f->wgmma &&
           !f->wgmma_broken && f->tma && !f->tma_broken;
}

/* The operands of a tiled call by index, as the TMA kernel, its tensor maps and the copies
 * before it take them: 0 A, 1 B, 2 A2, 3 B2 (LoRA's second product). */
static const hd_fused_operand *operand_of(const hd_fused_tile_call *c, int i)
{
    return i == 0 ? &c->a : i == 1 ? &c->b : i == 2 ? &c->a2 : &c->b2;
}

static void operand_set(hd_fused_tile_call *c, int i, hd_fused_operand o)
{
    *(i == 0 ? &c->a : i == 1 ? &c->b : i == 2 ? &c->a2 : &c->b2) = o;
}

/* What the kernel reads of operand i: its rows (op(A)'s, or op(B)'s columns), depth, matrices
 * and the floats between them (the second product's: one matrix). */
typedef struct operand_extent {
    size_t rows, depth, batch, stride;
} operand_extent;

static operand_extent operand_extent_of(const hd_fused_tile_call *c, int i)
{
    operand_extent e = {c->m, c->k, c->batch, c->stride_a};
    if (i % 2 == 1) {
        e.rows = c->n;
        e.stride = c->stride_b;
    }
    if (i >= 2) {
        e.depth = c->k2;
        e.batch = 1;
        e.stride = 0;
    }
    return e;
}

/* Whether operand i of c is stored depth-contiguous in aligned rows. */
static bool operand_ready(const hd_fused_tile_call *c, int i)
{
    const hd_fused_operand *o = operand_of(c, i);
    return o->trans == (i % 2 == 1) && o->ld % 4 == 0 && operand_extent_of(c, i).stride % 4 == 0;
}

/* Whether the warpgroup kernel may copy c's stages through the Tensor Memory Accelerator: both
 * operands of both products stored depth-contiguous (A m x k, B n x k), rows and matrices
 * 16-byte aligned (the tensor maps' strides). */
static bool tma_allows(const hd_fused *f, const hd_fused_tile_call *c)
{
    if (!f->tma || f->tma_broken)
        return false;
    for (int i = 0; i < (c->k2 > 0 ? 4 : 2); i++)
        if (!operand_ready(c, i))
            return false;
    return true;
}

/* Whether p names what only the warpgroup kernel's cp.async copies take: A's fragments in
 * registers, OVERLAP, or stages other than the copy engine's 32 deep. */
static bool names_cp_async_only(const hd_fused_params *p)
{
    return p->areg || p->overlap >= 0 || (p->bk != 0 && p->bk != 32);
}

/* Work-items of the warpgroup kernel: a warpgroup per 64 rows by wn columns of the tile, and
 * with the copy engine one more, which issues the copies. */
static size_t wgmma_threads(int bm, int bn, int wn, bool tma)
{
    return (size_t)(bm / 64) * (size_t)(bn / wn) * 128 + (tma ? 128 : 0);
}

/* Local memory the TMA kernel's stages are placed in from the argument's first 1024-byte
 * boundary (its swizzle's period; gemm_tma.cl), then its barriers. */
#define TMA_ALIGN_BYTES   1024
#define TMA_BARRIER_BYTES 24 /* three mbarriers per buffer at most */

/* Local memory of one buffer of the TMA kernel: both operands' stages, twice for fp32x3. */
static size_t tma_buffer_bytes(const hd_fused_params *p)
{
    size_t stage = ((size_t)p->bm + (size_t)p->bn) * (size_t)p->bk * sizeof(float);
    return stage * (p->tma_split ? 2 : 1) + TMA_BARRIER_BYTES;
}

/* Whether A's rows (B's), the second product's too (LoRA's: one layout serves both), are
 * 16-byte aligned: what lets the loads take whole float4 runs and cp.async copy them. */
static bool a_rows_aligned(const hd_fused_tile_call *c)
{
    return c->a.ld % 4 == 0 && (c->k2 == 0 || c->a2.ld % 4 == 0);
}

static bool b_rows_aligned(const hd_fused_tile_call *c)
{
    return c->b.ld % 4 == 0 && (c->k2 == 0 || c->b2.ld % 4 == 0);
}

/* Whether outer * ld + inner, counted with the kernel's reach past a matrix's edges (a tile
 * of rows or columns, a stage of depths), stays within limit. */
static bool extent_fits(size_t limit, size_t outer, size_t outer_reach, size_t ld, size_t inner,
                        size_t inner_reach)
{
    size_t rows = outer + outer_reach, last = inner + inner_reach;
    if (last > limit)
        return false;
    return ld == 0 || (rows <= limit / ld && rows * ld <= limit - last);
}

/* Whether the loads of every operand may index in 32 bits (gemm.cl's IDX32): A m x k (or
 * stored k x m), B k x n (or stored n x k), and LoRA's second pair, k2 deep. */
static bool offsets_fit_int(const hd_fused *f, const hd_fused_tile_call *c,
                            const hd_fused_params *p)
{
    size_t bm = (size_t)p->bm, bn = (size_t)p->bn, bk = (size_t)p->bk;
    size_t limit = f->index32_limit < (size_t)INT_MAX ? f->index32_limit : (size_t)INT_MAX;
    const hd_fused_operand *as[2] = {&c->a, &c->a2}, *bs[2] = {&c->b, &c->b2};
    size_t depth[2] = {c->k, c->k2};
    for (int i = 0; i < (c->k2 > 0 ? 2 : 1); i++) {
        const hd_fused_operand *a = as[i], *b = bs[i];
        bool a_fits = a->trans ? extent_fits(limit, depth[i], bk, a->ld, c->m, bm)
                               : extent_fits(limit, c->m, bm, a->ld, depth[i], bk);
        bool b_fits = b->trans ? extent_fits(limit, c->n, bn, b->ld, depth[i], bk)
                               : extent_fits(limit, depth[i], bk, b->ld, c->n, bn);
        if (!a_fits || !b_fits)
            return false;
    }
    return true;
}

static bool rows_aligned(const hd_fused_tile_call *c)
{
    return a_rows_aligned(c) && b_rows_aligned(c);
}

/* Whether the FMA kernel's ASYNC copies an operand of c through cp.async: the device has it
 * and an operand is stored depth-major (gemm.cl); where both are stored depth-contiguous (A
 * m x k, B n x k) ASYNC would only add a buffer. */
static bool copies_an_operand(const hd_fused *f, const hd_fused_tile_call *c)
{
    return f->mma && !f->fma_async_broken && (c->a.trans || !c->b.trans);
}

/* Whether the FMA kernel's ASYNC copies both operands of c (A stored k x m, B k x n). */
static bool copies_both(const hd_fused *f, const hd_fused_tile_call *c)
{
    return copies_an_operand(f, c) && c->a.trans && !c->b.trans;
}

/* Whether the operands the FMA kernel's ASYNC copies have 16-byte aligned rows: it copies
 * others 4 bytes at a time, which a variant must name (ASYNC) to get. */
static bool copied_rows_aligned(const hd_fused_tile_call *c)
{
    return (!c->a.trans || a_rows_aligned(c)) && (c->b.trans || b_rows_aligned(c));
}

/* Local memory of one stage of the warpgroup kernel, in bytes: B's alone with AREG (its
 * emulation's scratch of one A step is left out: PoCL's local memory is far larger). */
static size_t wgmma_stage_bytes(const hd_fused_params *p)
{
    return ((p->areg ? 0 : (size_t)p->bm) + (size_t)p->bn) * (size_t)p->bk * sizeof(float);
}

/* Local memory of one kernel (two stages of each operand, or ASYNC), as gemm.cl lays it out. */
static size_t local_bytes(const hd_fused_params *p, bool mma)
{
    if (p->tma == 1)
        return (size_t)p->async * tma_buffer_bytes(p) + TMA_ALIGN_BYTES;
    if (p->wgmma)
        return (size_t)p->async * wgmma_stage_bytes(p);
    size_t buffers = p->async > 0 ? (size_t)p->async : 2;
    size_t bm = (size_t)p->bm, bn = (size_t)p->bn, bk = (size_t)p->bk, a, b;
    if (mma) { /* depth-contiguous rows of MMA_STRIDE floats, 16 past a multiple of 32 */
        size_t stride = bk + (48 - bk % 32) % 32;
        a = bm * stride;
        b = bn * stride;
    } else { /* depth-major rows of BM + 4 (BN + 4) floats */
        a = bk * (bm + 4);
        b = bk * (bn + 4);
    }
    return buffers * (a + b) * sizeof(float);
}

/* Whether the stages of p are the kernel's __local argument (STAGE_ARG, gemm.cl), where the
 * runtime gives more local memory than a kernel may declare (the CUDA runtime): always for the
 * warpgroup kernel, whose defaults fill that memory; for the others only stages past what they
 * may declare (a tuned tile: their defaults stay within it). */
static bool stages_as_argument(const hd_fused *f, const hd_fused_params *p, bool mma)
{
    return p->tma == 1 || (f->stage_mem > 0 && (p->wgmma || local_bytes(p, mma) > f->local_mem));
}

/* Local memory the stages of p may take: the runtime's, as a __local argument (stage_mem),
 * else what a kernel may declare (0: unknown). */
static size_t stage_capacity(const hd_fused *f)
{
    return f->stage_mem > 0 ? f->stage_mem : f->local_mem;
}

/* Whether capacity bytes of local memory hold the stages of p (0: the size unknown, taken to). */
static bool stages_fit(const hd_fused_params *p, bool mma, size_t capacity)
{
    return capacity == 0 || local_bytes(p, mma) <= capacity;
}

/* Whether the device's local memory holds the stages of p. */
static bool local_memory_holds(const hd_fused *f, const hd_fused_params *p, bool mma)
{
    return stages_fit(p, mma, stage_capacity(f));
}

/* Whether the stages of p fit in what a kernel may declare: the FMA kernel's defaults. */
static bool declared_memory_holds(const hd_fused *f, const hd_fused_params *p, bool mma)
{
    return stages_fit(p, mma, f->local_mem);
}

/* ---- the defaults: a table of named rules ----
 *
 * A parameter the variant leaves open is set by the first rule of `rules` below that serves the
 * call's kernel, finds the parameters it sets still open and applies to the shape; what is left
 * open then takes the plain defaults (fill_open). Each rule's comment names the benchmark case
 * or the commit whose measurements chose it; the figures are in those commits and in
 * BENCHMARKS.md's tables, not here. */

/* The three kernels the defaults serve. */
typedef enum tile_kind { TILE_FMA, TILE_MMA, TILE_WGMMA, TILE_TMA } tile_kind;

/* The parameters a rule sets, which the variant must leave open for it to apply. */
enum {
    OPEN_BM = 1u << 0,
    OPEN_BN = 1u << 1,
    OPEN_BK = 1u << 2,
    OPEN_RM = 1u << 3,
    OPEN_RN = 1u << 4,
    OPEN_WM = 1u << 5,
    OPEN_WN = 1u << 6,
    OPEN_SK = 1u << 7,
    OPEN_ASYNC = 1u << 8,
    OPEN_LEAD = 1u << 9,
    OPEN_OVERLAP = 1u << 10,
    OPEN_AREG = 1u << 11,
    OPEN_FMA_TILE = OPEN_BM | OPEN_BN | OPEN_BK | OPEN_RM | OPEN_RN,
};

/* The parameters p leaves open, as OPEN_ bits. */
static unsigned open_params(const hd_fused_params *p)
{
    return (p->bm == 0 ? OPEN_BM : 0u) | (p->bn == 0 ? OPEN_BN : 0u) | (p->bk == 0 ? OPEN_BK : 0u) |
           (p->rm == 0 ? OPEN_RM : 0u) | (p->rn == 0 ? OPEN_RN : 0u) | (p->wm == 0 ? OPEN_WM : 0u) |
           (p->wn == 0 ? OPEN_WN : 0u) | (p->sk == 0 ? OPEN_SK : 0u) |
           (p->async == 0 ? OPEN_ASYNC : 0u) | (p->lead == 0 ? OPEN_LEAD : 0u) |
           (p->overlap < 0 ? OPEN_OVERLAP : 0u) | (p->areg == 0 ? OPEN_AREG : 0u);
}

/* The FMA kernel's tiles for products whose 128 x 128 tiles (16 x 8 results per work-item)
 * give every unit work: those, the 64 x 128 (wide) or 128 x 64 (tall) ones of 8 x 8, or the
 * 64 x 96 (wide, narrow) and 96 x 64 (tall, narrow) ones of 4 x 12 and 12 x 4, which fit a
 * side that falls just past a multiple of 96 and well short of the next of 128 (521 columns:
 * six of 96, where five of 128 compute 640; the case gemm 4093x521x1031 TN). */
typedef enum fma_shape {
    FMA_LARGE,
    FMA_WIDE,
    FMA_TALL,
    FMA_WIDE_NARROW,
    FMA_TALL_NARROW
} fma_shape;

/* What the rules look at: the device, the call, its kernel, and how its tiles fill the device:
 * large where 128 x 128 tiles give every compute unit work, half_fill where, short of that,
 * 64 x 128 tiles give half of them work or more. */
typedef struct tile_case {
    const hd_fused *f;
    const hd_fused_tile_call *c;
    tile_kind kernel;
    size_t units;
    bool large, half_fill;
    fma_shape large_shape; /* the FMA kernel's large products: fma_tile_shape's choice */
} tile_case;

/* A tile of the FMA kernel: bm x bn, bk deep, rm x rn results per work-item. */
typedef struct fma_dims {
    int bm, bn, bk, rm, rn;
} fma_dims;

/* The FMA kernel's tiles by fma_shape, and two more the rules take. */
static const fma_dims fma_shape_dims[] = {
    [FMA_LARGE] = {128, 128, 8, 16, 8},      [FMA_WIDE] = {64, 128, 16, 8, 8},
    [FMA_TALL] = {128, 64, 16, 8, 8},        [FMA_WIDE_NARROW] = {64, 96, 16, 4, 12},
    [FMA_TALL_NARROW] = {96, 64, 16, 12, 4},
};
static const fma_dims tall_thin_dims = {128, 64, 16, 16, 4};
static const fma_dims shallow_dims = {32, 64, 16, 4, 4};

/* The FMA kernel's tile d, with 3 buffers through cp.async where that copies an operand with
 * aligned rows (unless the variant named ASYNC). */
static void fma_tile(const hd_fused *f, const hd_fused_tile_call *c, hd_fused_params *p, fma_dims d)
{
    p->bm = d.bm;
    p->bn = d.bn;
    p->bk = d.bk;
    p->rm = d.rm;
    p->rn = d.rn;
    if (p->async == 0 && copies_an_operand(f, c) && copied_rows_aligned(c))
        p->async = 3;
}

/* Deep products whose 128 x 128 tiles leave units idle but whose 64 x 128 ones, each cut into
 * 4 slices of the depth, come to half a wave or more (rows past the thin products' 32): there
 * those split tiles ran fastest in the sweeps of 64-row products (the case gemm 64x4096x4096;
 * commits 722b5e1, 24c3b0d); with fewer tiles the 64 x 64 ones keep more groups. */
static bool deep_few_tiles(size_t units, size_t m, size_t n, size_t k)
{
    return m > 32 && n >= 128 && k >= 1024 && ceil_div(m, 128) * ceil_div(n, 128) < units &&
           ceil_div(m, 64) * ceil_div(n, 128) * 8 >= units;
}

/* The depth split of deep_few_tiles' 64 x 128 tiles: slices for about two groups per unit,
 * 4 to 16, each at least 256 deep: the units hold two or three such groups, and one group
 * alone on a unit waits on its loads (gemm 64x4096x4096 ran faster in 8 slices than in 4). */
static size_t deep_split(size_t units, size_t m, size_t n, size_t k)
{
    size_t tiles = ceil_div(m, 64) * ceil_div(n, 128);
    size_t sk = 2 * units / tiles, deepest = k / 256;
    sk = sk < 4 ? 4 : sk > 16 ? 16 : sk;
    return sk < deepest ? sk : deepest;
}

/* The tiles that finish m x n first, counted in waves of three 64 x 128 groups per unit.
 * NVIDIA's 64K registers per unit hold two 128 x 128 groups: those run in whole waves of two
 * per unit, each `large_wave` long (less where cp.async copies both operands than through
 * registers), and a last wave part filled costs a whole one (the slots freed first take its
 * groups, two to a unit). The smaller groups run at about a unit's full rate however many of
 * them share it, so each unit's share of them, ceil(groups / units), sets their time: a third
 * of a wave each, a ninth more where unaligned rows' scalar loads take the registers of a
 * third group; a tile that leaves some units one group more than the others costs that group
 * on every unit. The narrow groups hold three quarters of a 64 x 128 group's results and took
 * more than that share of its time but less than nine tenths: 0.9 here, so that they are taken
 * only where they leave the busiest unit a tenth less or more. Ties go to the larger tiles.
 * (Commits c64d56f, ecbc99c, 14fd4d1.) */
static fma_shape fma_tile_shape(size_t units, const hd_fused_tile_call *c, double large_wave)
{
    size_t m = c->m, n = c->n, batch = c->batch;
    double small_group = rows_aligned(c) ? 1.0 / 3.0 : 1.0 / 2.7;
    double narrow_group = 0.9 * small_group;
    double cost[] = {
        [FMA_LARGE] =
            (double)ceil_div(ceil_div(m, 128) * ceil_div(n, 128) * batch, 2 * units) * large_wave,
        [FMA_WIDE] =
            (double)ceil_div(ceil_div(m, 64) * ceil_div(n, 128) * batch, units) * small_group,
        [FMA_TALL] =
            (double)ceil_div(ceil_div(m, 128) * ceil_div(n, 64) * batch, units) * small_group,
        [FMA_WIDE_NARROW] =
            (double)ceil_div(ceil_div(m, 64) * ceil_div(n, 96) * batch, units) * narrow_group,
        [FMA_TALL_NARROW] =
            (double)ceil_div(ceil_div(m, 96) * ceil_div(n, 64) * batch, units) * narrow_group,
    };
    /* in this order a later shape must be strictly faster: large, then wide before tall (as
     * before the narrow ones), then the narrow ones */
    static const fma_shape order[] = {FMA_LARGE, FMA_WIDE, FMA_TALL, FMA_WIDE_NARROW,
                                      FMA_TALL_NARROW};
    fma_shape best = FMA_LARGE;
    for (size_t i = 1; i < sizeof order / sizeof order[0]; i++)
        if (cost[order[i]] < cost[best])
            best = order[i];
    return best;
}

/* Whether the 64 x 128 tiles of a product whose 128 x 128 ones leave units idle should cut
 * the depth in two: where that lowers the groups of the busiest unit, 64 x 128 tiles more
 * than the units and at most one and a half times as many (each unit then runs two halves or
 * three where it ran one whole or two). Products whose units all ran two groups, as gemm
 * 512x4096x4096, ran slower cut (commit c64d56f). */
static bool halves_the_depth(size_t units, const hd_fused_tile_call *c)
{
    size_t tiles = ceil_div(c->m, 64) * ceil_div(c->n, 128);
    return c->batch == 1 && c->k >= 1024 && tiles > units && 2 * tiles <= 3 * units;
}

/* Products of half-fill size whose 64 x 128 tiles come to at most one a unit, 1000 to 2047
 * deep, single: there 128 x 64 tiles of 16 x 4 results, the depth cut in two (two groups a
 * unit, halves 500 deep or more), ran ahead of the 64 x 128 ones cut in four or not at all,
 * and of 64 x 64 tiles; 512 deep, the halves ran slower, and 2048 deep, 128 x 128 tiles cut
 * for two groups a unit (large_slices) ran ahead of them. Where A is stored m x k with rows
 * not 16-byte aligned, the 64 x 128 tiles halved ran ahead of the 128 x 64 ones (the cases
 * gemm 997x1009x1013 and gemm 1000x1000x1000; commit 014ea68). */
static bool one_group_a_unit(size_t units, const hd_fused_tile_call *c)
{
    return c->batch == 1 && c->k >= 1000 && c->k < 2048 &&
           ceil_div(c->m, 64) * ceil_div(c->n, 128) <= units;
}

/* The busiest unit's share of `groups` groups, each of `results` results cut in `slices`
 * slices: its groups times a slice's results. */
static double busiest_unit(size_t units, size_t groups, size_t slices, double results)
{
    return (double)ceil_div(groups * slices, units) * results / (double)slices;
}

/* Whether a product of half-fill size takes narrow tiles, 64 x 96 of 4 x 12 (*tall false) or
 * 96 x 64 of 12 x 4 (*tall true), cut in *sk slices (2 where at least 1024 deep and that
 * lightens the busiest unit): where the 64 x 128 tiles come to the units or more and the
 * narrow ones leave the busiest unit less to do than those (cut in two where
 * halves_the_depth says), a narrow group's results each weighed at 0.9 / 0.75 of a 64 x 128
 * group's (fma_tile_shape). 257 rows come to three tiles of 96 (288 computed) where 64 x 128
 * tiles compute 320 (the case lora 257x4096x14336 r16; commit 8667de4). */
static bool narrow_half_fill(size_t units, const hd_fused_tile_call *c, bool *tall, int *sk)
{
    size_t m = c->m, n = c->n, batch = c->batch;
    size_t wide = ceil_div(m, 64) * ceil_div(n, 128) * batch;
    if (wide < units)
        return false; /* fewer 64 x 128 tiles than units: cut deeper below (one_group_a_unit) */
    double best = busiest_unit(units, wide, halves_the_depth(units, c) ? 2 : 1, 64.0 * 128.0);
    size_t most_slices = batch == 1 && c->k >= 1024 ? 2 : 1;
    bool found = false;
    for (int t = 0; t < 2; t++) {
        size_t groups = t ? ceil_div(m, 96) * ceil_div(n, 64) : ceil_div(m, 64) * ceil_div(n, 96);
        for (size_t slices = 1; slices <= most_slices; slices++) {
            double w = busiest_unit(units, groups * batch, slices, 96.0 * 64.0) * (0.9 / 0.75);
            if (w < best) {
                best = w;
                *tall = t == 1;
                *sk = (int)slices;
                found = true;
            }
        }
    }
    return found;
}

/* Deep products of few 128 x 128 tiles, both sides at least 256 and filled to within a
 * tenth, rows 16-byte aligned, at least 2048 deep, not TT: the slices of those tiles for two
 * groups per unit, at most 16, each at least 256 deep; 0 where that leaves fewer than one and a
 * half groups per unit, or elsewhere. On NVIDIA such slices ran ahead of the 64 x 128 or 64 x 64
 * tiles that would otherwise take the product, cut or not (NN, NT and TN from 384 x 640 x 4096
 * to 1024 x 1024 x 8192); TT, and 256^2 x 16384, whose 16 slices of 4 tiles left half the
 * units idle, ran slower (commit 9a1f494). */
static size_t large_slices(size_t units, const hd_fused_tile_call *c)
{
    size_t m = c->m, n = c->n, tiles = ceil_div(m, 128) * ceil_div(n, 128);
    bool filled = 10 * 128 * ceil_div(m, 128) <= 11 * m && 10 * 128 * ceil_div(n, 128) <= 11 * n;
    if (c->batch != 1 || m < 256 || n < 256 || c->k < 2048 || !filled || !rows_aligned(c) ||
        (c->a.trans && c->b.trans))
        return 0;
    size_t sk = 2 * units / tiles, deepest = c->k / 256;
    sk = sk < deepest ? sk : deepest;
    sk = sk < 16 ? sk : 16;
    return sk >= 2 && 2 * tiles * sk >= 3 * units ? sk : 0;
}

/* Thin products, one side at most 32 and the other longer, as LoRA's rank-r ones (x * A,
 * dy * B^T, and the weight gradients summed over the tokens): 128 along the long side (64
 * where it is no longer), the thin side's 16 or 32 across, and the depth split 16 ways: well
 * ahead of 128 x 64 tiles and further still of 64 x 64 (4096 x 16 x 4096 in each transpose and
 * 16 x 4096 x 4096 TN; commit 1deff17). Whatever the long side: the square tiles of the other
 * rules would compute the thin side padded to 64 or 128, 4 to 32 times the products (LoRA's
 * x * A of 8192 tokens took 128 x 64 tiles for its 8 columns). */
static bool thin_product(const hd_fused_tile_call *c)
{
    return (c->m <= 32) != (c->n <= 32);
}

/* ---- the rules, in the order they are tried ---- */

/* tf32 on the warpgroup kernel: 128 x 256 tiles, whose two warpgroups do twice the products of
 * 128 x 128 ones per stage, where the matrices fill such a tile and the tiles the device; A's
 * fragments in registers (AREG), local memory holding B's stages alone: 16 deep in 3 buffers
 * where B is copied transposed (stored k x n), else 8 deep in 6 (commit e88f1af). */
static bool wgmma_wide_applies(const tile_case *t)
{
    const hd_fused_tile_call *c = t->c;
    return c->m >= 128 && c->n >= 256 &&
           ceil_div(c->m, 128) * ceil_div(c->n, 256) * c->batch >= t->units &&
           (t->f->local_mem == 0 || t->f->local_mem >= 3 * 256 * 16 * sizeof(float));
}

static void wgmma_wide(const tile_case *t, hd_fused_params *p)
{
    bool b_trans = t->c->b.trans;
    p->bm = 128;
    p->bn = 256;
    p->wn = 256;
    p->overlap = 0;
    p->areg = 1;
    p->bk = b_trans ? 8 : 16;
    p->async = b_trans ? 6 : 3;
}

/* The mma.sync kernel's large tiles, stages through cp.async, by precision: tf32 128 x 128 of
 * 128 x 32 warps in 3 stages; fp32x3 64 x 128 of 32 x 64 warps in 4. Both ran ahead of
 * 256 x 128 tiles staged through registers (gemm 4096x4096x4096 in each precision; commit
 * ea71641). */
static const struct {
    int bm, bn, wm, wn, async;
} mma_large_tiles[] = {
    [HD_PRECISION_FP32X3] = {64, 128, 32, 64, 4},
    [HD_PRECISION_TF32] = {128, 128, 128, 32, 3},
};

static bool is_large(const tile_case *t)
{
    return t->large;
}

static void mma_large(const tile_case *t, hd_fused_params *p)
{
    hd_precision prec =
        t->c->precision == HD_PRECISION_TF32 ? HD_PRECISION_TF32 : HD_PRECISION_FP32X3;
    p->bm = mma_large_tiles[prec].bm;
    p->bn = mma_large_tiles[prec].bn;
    p->wm = mma_large_tiles[prec].wm;
    p->wn = mma_large_tiles[prec].wn;
    p->async = mma_large_tiles[prec].async;
}

static bool thin_applies(const tile_case *t)
{
    return thin_product(t->c);
}

/* thin_product's tiles, and the depth cut for two groups per unit where the tiles are few
 * (LoRA's x*A of a few dozen tokens: one tile), slices down to 64 deep. The long side's operand
 * stored depth-contiguous (A m x k, B n x k), with groups enough to fill the units three times
 * over, takes stages 32 deep where the local memory holds them, each of its rows read in runs
 * of 128 bytes; with fewer groups the longer stages ran slower (commit 0abc742). */
static void thin_tile(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    size_t units = t->units;
    bool thin_n = c->n <= 32;
    size_t across = (thin_n ? c->n : c->m) <= 16 ? 16 : 32;
    size_t along = (thin_n ? c->m : c->n) <= 64 ? 64 : 128;
    p->bm = (int)(thin_n ? along : across);
    p->bn = (int)(thin_n ? across : along);
    p->rm = thin_n ? 8 : 4;
    p->rn = thin_n ? 4 : 8;
    bool named_bk = p->bk != 0;
    if (!named_bk)
        p->bk = 16;
    size_t tiles = ceil_div(thin_n ? c->m : c->n, along);
    size_t sk = c->k / 256 < 16 ? c->k / 256 : 16;
    if (tiles * sk < 2 * units) {
        sk = 2 * units / tiles;
        sk = sk < c->k / 64 ? sk : c->k / 64;
        sk = sk < 64 ? sk : 64;
    }
    bool long_depth_contiguous = thin_n ? !c->a.trans : c->b.trans;
    size_t groups = c->batch == 1 ? tiles * sk : tiles * c->batch;
    hd_fused_params deep = {.bm = p->bm, .bn = p->bn, .bk = 32};
    if (!named_bk && long_depth_contiguous && groups >= 3 * units &&
        declared_memory_holds(t->f, &deep, false))
        p->bk = 32;
    if (c->batch == 1)
        p->sk = (int)sk;
}

/* Whether cp.async copies A alone (B stored n x k) with rows not 16-byte aligned: its 4-byte
 * copies leave free the registers that scalar loads would take. */
static bool copies_unaligned_a(const tile_case *t)
{
    const hd_fused_tile_call *c = t->c;
    return copies_an_operand(t->f, c) && c->a.trans && c->b.trans && !a_rows_aligned(c);
}

/* 128 x 128 tiles copied by cp.async, both operands in 5 buffers (more stages in flight than
 * 3), or A alone with unaligned rows in 3, where the local memory holds them (commit 4bde5e1,
 * the case gemm 4093x521x1031 TN). */
static bool large_copied_applies(const tile_case *t)
{
    return t->large && t->large_shape == FMA_LARGE &&
           (copies_both(t->f, t->c) || copies_unaligned_a(t));
}

static void large_copied(const tile_case *t, hd_fused_params *p)
{
    hd_fused_params deep = {.bm = 128, .bn = 128, .bk = 8, .async = 5};
    if (copies_unaligned_a(t))
        deep.async = 3;
    if (p->async == 0 && declared_memory_holds(t->f, &deep, false))
        p->async = deep.async;
    fma_tile(t->f, t->c, p, fma_shape_dims[FMA_LARGE]);
}

/* On NVIDIA, elsewhere, 128 x 128 tiles through registers loaded two stages ahead (LEAD=2):
 * 16 deep where the tiles come to more than two waves of two per unit (half the barriers and
 * longer runs of the depth-contiguous operands' rows), 8 deep at fewer, where the 16-deep
 * ones ran slower, and where scalar loads of unaligned rows take more registers (commits
 * 14fd4d1, 7558118). */
static bool large_lead_applies(const tile_case *t)
{
    return t->large && t->large_shape == FMA_LARGE && t->f->mma && !copies_both(t->f, t->c);
}

static void large_lead(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    size_t tiles = ceil_div(c->m, 128) * ceil_div(c->n, 128) * c->batch;
    p->bm = p->bn = 128;
    p->bk = rows_aligned(c) && tiles > 4 * t->units ? 16 : 8;
    p->rm = 16;
    p->rn = 8;
    p->lead = 2;
}

/* Large products on the smaller tiles fma_tile_shape chose, where they leave the busiest unit
 * less to do than the large ones, whose last wave runs part empty (and 64 x 128 where the large
 * tiles won but neither rule above staged them), in 3 buffers through cp.async where it copies
 * an operand: both operands however their rows fall, 4 bytes at a time where unaligned (the
 * case gemm 4093x521x1031 TN; commit 4bde5e1). */
static void large_smaller(const tile_case *t, hd_fused_params *p)
{
    fma_shape shape = t->large_shape;
    if (copies_both(t->f, t->c) && p->async == 0)
        p->async = 3;
    fma_tile(t->f, t->c, p, fma_shape_dims[shape == FMA_LARGE ? FMA_WIDE : shape]);
}

/* Not large, on NVIDIA: 128 x 128 tiles of 16 x 8, 8 deep, cut for two groups per unit
 * (large_slices): in 5 buffers where cp.async copies both operands and the local memory holds
 * them, else through registers loaded two stages ahead. */
static bool large_slices_applies(const tile_case *t)
{
    return !t->large && t->f->mma && large_slices(t->units, t->c) > 0;
}

static void large_sliced(const tile_case *t, hd_fused_params *p)
{
    hd_fused_params deep = {.bm = 128, .bn = 128, .bk = 8, .async = 5};
    if (copies_both(t->f, t->c) && declared_memory_holds(t->f, &deep, false))
        p->async = 5;
    else
        p->lead = 2;
    p->bm = p->bn = 128;
    p->bk = 8;
    p->rm = 16;
    p->rn = 8;
    p->sk = (int)large_slices(t->units, t->c);
}

/* Half fill (below) where the 64 x 128 tiles come to at most one a unit (one_group_a_unit):
 * 128 x 64 tiles of 16 x 4 through registers, the depth cut in two; where A is stored m x k
 * with unaligned rows, loaded a scalar at a time along the depth, 64 x 128 tiles of 8 x 8
 * instead (a quarter of the 128 x 64 ones' loads of A per work-item), B copied by cp.async
 * where stored k x n (4 bytes at a time where unaligned). */
static bool one_group_applies(const tile_case *t)
{
    return t->half_fill && one_group_a_unit(t->units, t->c);
}

static void one_group(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    if (c->a.trans || a_rows_aligned(c)) {
        p->bm = tall_thin_dims.bm;
        p->bn = tall_thin_dims.bn;
        p->bk = tall_thin_dims.bk;
        p->rm = tall_thin_dims.rm;
        p->rn = tall_thin_dims.rn;
    } else {
        fma_tile(t->f, c, p, fma_shape_dims[FMA_WIDE]);
        if (p->async == 0 && copies_an_operand(t->f, c))
            p->async = 3;
    }
    p->sk = 2;
}

/* Half fill where a side falls just past a multiple of 128: the narrow tiles
 * (narrow_half_fill). */
static bool narrow_applies(const tile_case *t)
{
    bool tall = false;
    int sk = 1;
    return t->half_fill && narrow_half_fill(t->units, t->c, &tall, &sk);
}

static void narrow(const tile_case *t, hd_fused_params *p)
{
    bool tall = false;
    int sk = 1;
    narrow_half_fill(t->units, t->c, &tall, &sk);
    fma_tile(t->f, t->c, p, fma_shape_dims[tall ? FMA_TALL_NARROW : FMA_WIDE_NARROW]);
    p->sk = sk;
}

/* Half fill: tiles of 64 x 128, 8 x 8 results per work-item, where they give half the compute
 * units work or more: faster than 64 x 64 tiles, with or without cp.async (the cases gemm
 * 512x4096x4096 and gemm 997x1009x1013), the depth cut in two where that lightens the busiest
 * unit (halves_the_depth). */
static bool is_half_fill(const tile_case *t)
{
    return t->half_fill;
}

static void half_fill(const tile_case *t, hd_fused_params *p)
{
    fma_tile(t->f, t->c, p, fma_shape_dims[FMA_WIDE]);
    if (halves_the_depth(t->units, t->c))
        p->sk = 2;
}

/* deep_few_tiles: 64 x 128 tiles as above, the depth cut for about two groups per unit. */
static bool deep_applies(const tile_case *t)
{
    return deep_few_tiles(t->units, t->c->m, t->c->n, t->c->k);
}

static void deep(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    fma_tile(t->f, c, p, fma_shape_dims[FMA_WIDE]);
    if (p->sk == 0 && c->batch == 1)
        p->sk = (int)deep_split(t->units, c->m, c->n, c->k);
}

/* Shallow products whose 64 x 64 tiles, 32 or more, are fewer than the units: 32 x 64 tiles,
 * twice as many groups (they won where the tuner timed both: gemm 512x512x512 and gemm
 * 100x1000x1000; commit 0abc742); where those still leave a quarter of the units or more idle,
 * the depth cut for about two groups per unit, slices at least 128 deep (gemm 100x1000x1000
 * in every transpose, and 200 x 700 x 900; gemm 512x512x512, whose tiles nearly fill the
 * units, ran as fast either way; commit fced272). */
static bool shallow_applies(const tile_case *t)
{
    const hd_fused_tile_call *c = t->c;
    size_t tiles = ceil_div(c->m, 64) * ceil_div(c->n, 64);
    return !t->large && c->batch == 1 && c->k < 1024 && c->m >= 64 && c->n >= 64 && tiles >= 32 &&
           tiles < t->units;
}

static void shallow(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    p->bm = shallow_dims.bm;
    p->bn = shallow_dims.bn;
    p->rm = shallow_dims.rm;
    p->rn = shallow_dims.rn;
    p->bk = shallow_dims.bk;
    size_t small = ceil_div(c->m, 32) * ceil_div(c->n, 64);
    if (4 * small <= 3 * t->units) {
        size_t sk = 2 * t->units / small, deepest = c->k / 128;
        sk = sk < deepest ? sk : deepest;
        p->sk = (int)(sk < 16 ? sk : 16);
    }
}

/* tf32 with the copy engine: 128 x 256 tiles of two warpgroups, 4 buffers of 32 deep, where the
 * matrices fill such a tile and the tiles the device (fp32x3, whose buffers take twice the
 * memory, keeps the 128 x 128 tiles of fill_open). */
static bool tma_wide_applies(const tile_case *t)
{
    const hd_fused_tile_call *c = t->c;
    return c->precision == HD_PRECISION_TF32 && c->m >= 128 && c->n >= 256 &&
           ceil_div(c->m, 128) * ceil_div(c->n, 256) * c->batch >= t->units;
}

static void tma_wide(const tile_case *t, hd_fused_params *p)
{
    (void)t;
    p->bm = 128;
    p->bn = 256;
    p->wn = 256;
}

/* A rule: the kernel it serves, the parameters it sets (which the variant must leave open),
 * whether it applies to the call, and what it sets. */
typedef struct tile_rule {
    tile_kind kernel;
    unsigned sets;
    bool (*applies)(const tile_case *t);
    void (*set)(const tile_case *t, hd_fused_params *p);
} tile_rule;

static const tile_rule rules[] = {
    {TILE_WGMMA, OPEN_BM | OPEN_BN | OPEN_WN | OPEN_BK | OPEN_ASYNC | OPEN_OVERLAP | OPEN_AREG,
     wgmma_wide_applies, wgmma_wide},
    {TILE_TMA, OPEN_BM | OPEN_BN | OPEN_WN, tma_wide_applies, tma_wide},
    {TILE_MMA, OPEN_BM | OPEN_BN | OPEN_WM | OPEN_WN | OPEN_ASYNC, is_large, mma_large},
    {TILE_FMA, OPEN_BM | OPEN_BN | OPEN_RM | OPEN_RN | OPEN_SK, thin_applies, thin_tile},
    {TILE_FMA, OPEN_FMA_TILE, large_copied_applies, large_copied},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_ASYNC | OPEN_LEAD, large_lead_applies, large_lead},
    {TILE_FMA, OPEN_FMA_TILE, is_large, large_smaller},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_SK | OPEN_ASYNC | OPEN_LEAD, large_slices_applies,
     large_sliced},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_SK, one_group_applies, one_group},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_SK, narrow_applies, narrow},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_SK, is_half_fill, half_fill},
    {TILE_FMA, OPEN_FMA_TILE, deep_applies, deep},
    {TILE_FMA, OPEN_FMA_TILE | OPEN_SK, shallow_applies, shallow},
};

/* The warpgroup kernel's parameters still open: warpgroups 128 wide where the tile's width
 * allows, else 64; 8 deep; a stage's products through the next barrier unless A's fragments
 * are in registers; as many buffers as the local memory holds, 3 to 6 (8 with B's alone). */
static void wgmma_fill(const hd_fused *f, hd_fused_params *p)
{
    if (p->wn == 0)
        p->wn = p->bn % 128 == 0 ? 128 : 64;
    if (p->bk == 0)
        p->bk = 8;
    if (p->overlap < 0)
        p->overlap = p->areg ? 0 : 1;
    if (p->async == 0) {
        size_t most = p->areg ? 8 : 6;
        size_t capacity = stage_capacity(f);
        size_t fit = capacity > 0 ? capacity / wgmma_stage_bytes(p) : most;
        p->async = fit < 3 ? 3 : fit > most ? (int)most : (int)fit;
    }
}

/* The TMA kernel's parameters still open: warpgroups as wide as the tile up to 256 columns,
 * 32 deep (one swizzled row), as many buffers as the local memory holds, 3 to 8. */
static void tma_fill(const hd_fused *f, hd_fused_params *p)
{
    if (p->wn == 0)
        p->wn = p->bn % 256 == 0 ? 256 : p->bn % 128 == 0 ? 128 : 64;
    p->bk = 32;
    if (p->async == 0) {
        size_t capacity = stage_capacity(f), per = tma_buffer_bytes(p);
        size_t fit = capacity > TMA_ALIGN_BYTES ? (capacity - TMA_ALIGN_BYTES) / per : 8;
        p->async = fit < 3 ? 3 : fit > 8 ? 8 : (int)fit;
    }
}

/* The parameters no rule set: 128 x 128 tiles where large, else 64 x 64; the kernel's own
 * defaults; and split-K where the tiles leave units idle and the depth is 1024 or more, for
 * about a group per unit, at least 4 slices on the FMA kernel (fewer left the units waiting on
 * one group's whole depth: commit 722b5e1), each at least 256 deep, at most 16. */
static void fill_open(const tile_case *t, hd_fused_params *p)
{
    const hd_fused_tile_call *c = t->c;
    if (p->bm == 0)
        p->bm = t->large ? 128 : 64;
    if (p->bn == 0)
        p->bn = t->large ? 128 : 64;
    if (t->kernel == TILE_TMA) {
        tma_fill(t->f, p);
    } else if (t->kernel == TILE_WGMMA) {
        wgmma_fill(t->f, p);
    } else if (t->kernel == TILE_MMA) {
        if (p->bk == 0)
            p->bk = 16;
        if (p->wm == 0)
            p->wm = p->bm >= 256 ? 128 : p->bm >= 128 ? 64 : 32;
        if (p->wn == 0)
            p->wn = 32;
    } else {
        if (p->bk == 0)
            p->bk = t->large ? 8 : 16;
        if (p->rm == 0)
            p->rm = p->bm >= 128 ? 8 : 4;
        if (p->rn == 0)
            p->rn = p->bn >= 128 ? 8 : 4;
    }
    if (p->sk == 0) {
        size_t tiles = ceil_div(c->m, (size_t)p->bm) * ceil_div(c->n, (size_t)p->bn) * c->batch;
        size_t sk = 1, units = t->units;
        if (c->batch == 1 && tiles < units && c->k >= 1024)
            sk = units / tiles < 4 && t->kernel == TILE_FMA ? 4 : units / tiles;
        size_t deepest = c->k / 256 > 0 ? c->k / 256 : 1;
        p->sk = (int)(sk < deepest ? (sk < 16 ? sk : 16) : deepest);
    }
}

/* Defaults from the shape for the parameters the variant left open: the first rule that
 * applies, then fill_open. mma: the call runs on the tensor cores (p->wgmma: the warpgroup
 * kernel). */
static void default_tile(const hd_fused *f, const hd_fused_tile_call *c, bool mma,
                         hd_fused_params *p)
{
    size_t units = f->compute_units > 0 ? f->compute_units : 1;
    bool large = ceil_div(c->m, 128) * ceil_div(c->n, 128) * c->batch >= units;
    tile_case t = {
        .f = f,
        .c = c,
        .kernel = p->tma == 1 ? TILE_TMA
                  : p->wgmma  ? TILE_WGMMA
                              : (mma ? TILE_MMA : TILE_FMA),
        .units = units,
        .large = large,
        .half_fill = !large && 2 * ceil_div(c->m, 64) * ceil_div(c->n, 128) * c->batch >= units,
    };
    /* The FMA kernel's large products take the tiles fma_tile_shape finds fastest: the
     * 128 x 128 ones staged as the rules large_copied and large_lead say, else 64 x 128 in
     * their place (large_smaller). The large waves cost a little less where cp.async copies
     * both operands (A stored k x m, B k x n) than through registers (commit 7558118). */
    if (t.kernel == TILE_FMA && large)
        t.large_shape = fma_tile_shape(units, c, copies_both(f, c) ? 1.2 : 1.3);
    unsigned open = open_params(p);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const tile_rule *r = &rules[i];
        if (r->kernel == t.kernel && (r->sets & ~open) == 0 && r->applies(&t)) {
            r->set(&t, p);
            break;
        }
    }
    fill_open(&t, p);
}

static hd_status unsupported(hd_context *ctx, const char *why, const hd_fused_params *p)
{
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "fused: tiled GEMM BM=%d BN=%d BK=%d RM=%d RN=%d WM=%d WN=%d: %s", p->bm,
                     p->bn, p->bk, p->rm, p->rn, p->wm, p->wn, why);
}

/* The parameters of call c: the variant's, the rest from the shape; checked against what the
 * kernels were written for and what the device offers. *threads: work-items per group. */
static hd_status tile_params(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c, bool mma,
                             hd_fused_params *p, size_t *threads)
{
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_TILE, c->variant, p);
    if (s != HD_OK)
        return s;
    bool warp_params = p->wm != 0 || p->wn != 0 || p->overlap >= 0;
    if (warp_params && !mma)
        return unsupported(ctx,
                           "WM, WN and OVERLAP are the tensor-core kernels', which this context "
                           "does not run",
                           p);
    if (mma && (p->rm != 0 || p->rn != 0))
        mma = false; /* an fp32 variant: FMAs are at least as accurate */
    if (!mma && p->async != 0) {
        if (!f->mma)
            return unsupported(ctx,
                               "ASYNC copies through cp.async, of NVIDIA compute capability 8.0 "
                               "and later",
                               p);
        if (f->fma_async_broken)
            p->async = 0; /* its build failed here: the stages go through registers */
    }
    /* the warpgroup kernel: tf32's, through cp.async or the copy engine; fp32x3's through the
     * copy engine alone */
    bool x3 = c->precision == HD_PRECISION_FP32X3;
    bool wgmma = mma && (x3 ? wants_tma_x3(f, c->precision) && tma_allows(f, c)
                            : wants_wgmma(f, c->precision));
    if (p->wgmma && !wgmma)
        return unsupported(ctx,
                           "WGMMA is the warpgroup kernel of compute capability 9.0 (tf32's, and "
                           "fp32x3's with TMA), which this context does not run here",
                           p);
    bool names_cp_async = p->tma == 0 || names_cp_async_only(p);
    if (wgmma && p->wm == 0 && !(x3 && names_cp_async))
        p->wgmma = 1; /* the default here, unless the variant names mma.sync warps */
    bool tma = p->wgmma && tma_allows(f, c);
    if (p->tma == 1 && !tma)
        return unsupported(ctx,
                           "TMA is the warpgroup kernel's on the CUDA runtime of compute "
                           "capability 9.0, with both operands stored depth-contiguous (A m x k, "
                           "B n x k) in 16-byte aligned rows",
                           p);
    if (p->tma == 1 && names_cp_async_only(p))
        return unsupported(ctx, "TMA takes BK=32 and neither AREG nor OVERLAP", p);
    if (p->tma < 0) /* the copy engine where it serves, unless the variant names cp.async's */
        p->tma = tma && !names_cp_async;
    if (x3 && p->wgmma && !p->tma)
        return unsupported(ctx, "fp32x3 runs on the warpgroup kernel with TMA alone", p);
    p->tma_split = x3 && p->tma;
    if (p->overlap >= 0 && !p->wgmma)
        return unsupported(ctx, "OVERLAP is the warpgroup kernel's", p);
    if (p->areg && !p->wgmma)
        return unsupported(ctx, "AREG is the warpgroup kernel's", p);
    if (p->areg && p->overlap == 1)
        return unsupported(ctx, "AREG runs with OVERLAP=0", p);
    if (p->lead > 1 && mma)
        return unsupported(ctx, "LEAD is the FMA kernel's", p);
    default_tile(f, c, mma, p);
    if (p->wgmma) {
        if (p->bm % 64 != 0 || (p->wn != 64 && p->wn != 128 && p->wn != 256) ||
            p->bn % p->wn != 0 || p->bk % 8 != 0 || p->async < 3)
            return unsupported(ctx,
                               "WGMMA needs BM a multiple of 64, WN 64, 128 or 256 dividing BN, "
                               "BK a multiple of 8 and ASYNC at least 3",
                               p);
        *threads = wgmma_threads(p->bm, p->bn, p->wn, p->tma);
    } else if (mma) {
        if (p->async > 4)
            return unsupported(ctx, "the mma.sync kernel takes ASYNC 2 to 4", p);
        if (p->wm % 16 != 0 || p->bm % p->wm != 0 || p->bn % p->wn != 0 || p->bk % 16 != 0)
            return unsupported(ctx, "WM (WN) must divide BM (BN) and BK be a multiple of 16", p);
        if (p->async != 0 && (p->bm % 32 != 0 || p->bn % 32 != 0))
            return unsupported(ctx, "ASYNC needs BM and BN multiples of 32", p);
        *threads = (size_t)(p->bm / p->wm) * (size_t)(p->bn / p->wn) * 32;
    } else {
        if (p->bm % p->rm != 0 || p->bn % p->rn != 0)
            return unsupported(ctx, "RM (RN) must divide BM (BN)", p);
        if (p->async > 8)
            return unsupported(ctx, "the FMA kernel takes ASYNC 2 to 8", p);
        *threads = (size_t)(p->bm / p->rm) * (size_t)(p->bn / p->rn);
    }
    size_t stage_a = (size_t)p->bm * (size_t)p->bk, stage_b = (size_t)p->bk * (size_t)p->bn;
    if (*threads > f->device_max_group || *threads > 1024 ||
        (!p->tma && (stage_a % *threads != 0 || stage_b % *threads != 0)))
        return unsupported(ctx, "the work-items do not split a stage evenly, or are too many", p);
    if (!local_memory_holds(f, p, mma))
        return unsupported(ctx, "the stages exceed the device's local memory", p);
    if (p->sk > 1 && c->batch > 1)
        return unsupported(ctx, "split-K serves single products only", p);
    if (p->reg != 0 && !f->nv_options)
        return unsupported(ctx, "REG needs NVIDIA's compiler options", p);
    /* slices of whole stages: the slices actually cut, which can be fewer than SK */
    size_t kchunk = ceil_div(ceil_div(c->k, (size_t)p->sk), (size_t)p->bk) * (size_t)p->bk;
    p->sk = (int)ceil_div(c->k, kchunk);
    return HD_OK;
}

/* ---- operands copied for the TMA kernel ----
 *
 * tf32's warpgroup products read both operands depth-contiguous (the tensor cores take TF32
 * from local memory in that order alone), and the copy engine moves rows 16-byte aligned. An
 * operand stored otherwise (A k x m, B k x n, rows of an odd length) is copied so, once per
 * call (gemm_repack), where the TMA kernel's products then pay for the copy. Per float of the
 * operand, the copy reads and writes 8 bytes at the device's bandwidth, and the product does
 * 2 flops per row (column) of the other side, which the cp.async kernel runs at under half the
 * TMA kernel's rate: past a few hundred rows of the other side the copy costs less than the
 * time it saves, at the bandwidth and rates BENCHMARKS.md gives ("Device runtimes on the
 * H200"); REPACK_MIN_SIDE leaves a margin over that, and REPACK_MIN_FLOPS keeps small products,
 * where a launch more weighs, in place.
 * LoRA's second product (A2, B2: its rank deep) is copied with the first where that is.
 * A variant naming TMA=1 copies whatever the shape; TMA=0 never. A caller whose B
 * is unwritten since its earlier calls on it (hd_fused_tile_call.b_unchanged: the LM head's
 * chunks) reuses the copy of B the last of them made, where no other B was copied since. */

/* Scratch the copies may take at most: past it, cp.async's kernel reads the operands where
 * they are. */
#define REPACK_MAX_BYTES ((size_t)4 << 30)
/* Rows (columns) of the other side from which an operand's copy pays, and the flops below which
 * a product is too small for the copy's launch. */
#define REPACK_MIN_SIDE  512
#define REPACK_MIN_FLOPS 1e9

typedef struct repack_plan {
    bool any;
    bool copied[4];          /* A, B, A2, B2 */
    size_t bytes[4];         /* of each copy */
    hd_fused_tile_call view; /* the call as the kernel runs it: the copies in place of the
                                operands (their memory NULL until repack_scratch sets it) */
} repack_plan;

/* Which operands of c to copy before the TMA kernel runs it (r->any false: none, the call runs
 * as it is). */
static hd_status repack_plan_of(const hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                                repack_plan *r)
{
    memset(r, 0, sizeof *r);
    r->view = *c;
    if (!f->tma || f->tma_broken || c->m == 0 || c->n == 0 ||
        !(wants_wgmma(f, c->precision) || wants_tma_x3(f, c->precision)))
        return HD_OK;
    hd_fused_params p;
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_TILE, c->variant, &p);
    if (s != HD_OK)
        return s;
    /* a variant of another kernel, or of cp.async's copies */
    if (p.tma == 0 || p.wm != 0 || p.rm != 0 || names_cp_async_only(&p))
        return HD_OK;
    size_t total = 0;
    bool large =
        2.0 * (double)c->m * (double)c->n * (double)c->k * (double)c->batch >= REPACK_MIN_FLOPS;
    for (int i = 0; i < 4; i++) {
        operand_extent e = operand_extent_of(c, i);
        if (operand_ready(c, i) || e.depth == 0)
            continue;
        /* A is read once per tile column, B once per tile row */
        bool pays = large && (i >= 2 || (i % 2 == 0 ? c->n : c->m) >= REPACK_MIN_SIDE);
        if (p.tma != 1 && !pays)
            return HD_OK; /* the cp.async kernel reads the operands in place */
        size_t ld = (e.depth + 3) / 4 * 4;
        r->copied[i] = true;
        r->bytes[i] = e.batch * e.rows * ld * sizeof(float);
        total += r->bytes[i];
        operand_set(&r->view, i, (hd_fused_operand){NULL, ld, i % 2 == 1});
        if (i == 0)
            r->view.stride_a = c->batch > 1 ? e.rows * ld : 0;
        else if (i == 1)
            r->view.stride_b = c->batch > 1 ? e.rows * ld : 0;
        r->any = true;
    }
    if (total > REPACK_MAX_BYTES) {
        if (p.tma == 1)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: TMA=1 would copy %zu bytes of operands, over the %zu allowed",
                             total, REPACK_MAX_BYTES);
        memset(r, 0, sizeof *r);
        r->view = *c;
    }
    return HD_OK;
}

/* The scratch of the plan's copies, their memory set in its view. */
static hd_status repack_scratch(hd_fused *f, hd_context *ctx, repack_plan *r)
{
    static const char *const what[4] = {"A copied for the TMA GEMM", "B copied for the TMA GEMM",
                                        "A2 copied for the TMA GEMM", "B2 copied for the TMA GEMM"};
    for (int i = 0; i < 4; i++) {
        if (!r->copied[i])
            continue;
        if (r->bytes[i] > f->repack_bytes[i]) {
            repack_release(f, i);
            hd_status s = hd__rt_scratch_create(f->rt, ctx, r->bytes[i], what[i], &f->repack[i]);
            if (s != HD_OK)
                return s;
            f->repack_bytes[i] = r->bytes[i];
        }
        hd_fused_operand copy = *operand_of(&r->view, i);
        copy.mem = f->repack[i];
        operand_set(&r->view, i, copy);
    }
    return HD_OK;
}

/* Queues the plan's copies (gemm_repack) from c's operands into its view's. */
static hd_status repack_launch(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                               const repack_plan *r)
{
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_GEMM_TILE, "", "gemm_repack", 256, &k);
    for (int i = 0; i < 4 && s == HD_OK; i++) {
        if (!r->copied[i])
            continue;
        const hd_fused_operand *from = operand_of(c, i), *to = operand_of(&r->view, i);
        operand_extent e = operand_extent_of(c, i);
        int32_t rows32 = (int32_t)e.rows, depth32 = (int32_t)e.depth, lds = (int32_t)from->ld,
                ldd = (int32_t)to->ld;
        /* stored depth-major: A k x m (trans), B k x n (not trans) */
        int32_t trans = from->trans != (i % 2 == 1);
        uint64_t stride_src = e.stride, stride_dst = (uint64_t)(e.rows * to->ld);
        struct hd_fused_repack_source source = {from->mem, from->ld, e.rows,      e.depth,
                                                e.batch,   e.stride, from->trans, true};
        struct hd_fused_repack_source *made = &f->repack_from[i];
        if (i == 1 && c->b_unchanged && made->valid && made->mem == source.mem &&
            made->ld == source.ld && made->rows == e.rows && made->depth == e.depth &&
            made->batch == e.batch && made->stride == e.stride && made->trans == source.trans)
            continue; /* the copy an earlier call made */
        const hd_fused_arg args[] = {
            HD_FUSED_VALUE(rows32),  HD_FUSED_VALUE(depth32), HD_FUSED_VALUE(from->mem),
            HD_FUSED_VALUE(lds),     HD_FUSED_VALUE(trans),   HD_FUSED_VALUE(stride_src),
            HD_FUSED_VALUE(to->mem), HD_FUSED_VALUE(ldd),     HD_FUSED_VALUE(stride_dst)};
        size_t groups[2] = {ceil_div(e.rows, 32) * ceil_div(e.depth, 32), e.batch};
        s = hd__fused_launch_grid(f, ctx, k, groups, 256, args, 9);
        *made = source;
        made->valid = s == HD_OK;
    }
    return s;
}

hd_status hd__fused_tile_resolve(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                                 hd_fused_params *p)
{
    repack_plan r;
    hd_status s = repack_plan_of(f, ctx, c, &r);
    if (s != HD_OK)
        return s;
    size_t threads;
    return tile_params(f, ctx, &r.view, wants_mma(f, c->precision), p, &threads);
}

hd_status hd__fused_tile_check(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c)
{
    hd_fused_params p;
    return hd__fused_tile_resolve(f, ctx, c, &p);
}

/* VEC for an operand: runs of 4 where the stage splits into them evenly over the work-items
 * (one float4 load each where the rows are aligned, else four scalar loads; the warpgroup
 * kernel's VEC means 16-byte copies, aligned ones alone). */
static int vec_of(bool aligned, size_t stage, size_t threads, bool wgmma)
{
    return (aligned || !wgmma) && stage % (4 * threads) == 0 ? 4 : 1;
}

static hd_status splitk_scratch(hd_fused *f, hd_context *ctx, size_t bytes, hd_devmem *out)
{
    if (bytes > SPLITK_PART_MAX_BYTES)
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: split-K needs %zu bytes of partials, over the %zu allowed", bytes,
                         SPLITK_PART_MAX_BYTES);
    if (bytes > f->splitk_bytes) {
        splitk_release(f); /* freed once the queued launches using it ran */
        hd_status s = hd__rt_scratch_create(f->rt, ctx, bytes, "split-K partials", &f->splitk_part);
        if (s != HD_OK)
            return s;
        f->splitk_bytes = bytes;
    }
    *out = f->splitk_part;
    return HD_OK;
}

/* The program, kernel name and build options of call c with its resolved parameters p (mma:
 * on the tensor cores); *copies says whether the mma.sync or FMA kernel copies through
 * cp.async. */
static hd_status tile_build(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                            const hd_fused_params *p, size_t threads, bool mma,
                            hd_fused_program *program, const char **name,
                            char options[HD_FUSED_OPTIONS_CAPACITY], bool *copies)
{
    /* one layout for both products: aligned only where both pairs' rows are */
    bool aligned_a = a_rows_aligned(c), aligned_b = b_rows_aligned(c);
    size_t stage_a = (size_t)p->bm * (size_t)p->bk, stage_b = (size_t)p->bk * (size_t)p->bn;
    int vec_a = vec_of(aligned_a, stage_a, threads, p->wgmma);
    int vec_b = vec_of(aligned_b, stage_b, threads, p->wgmma);
    size_t cap = HD_FUSED_OPTIONS_CAPACITY;
    int len = snprintf(options, cap,
                       "-DBM=%d -DBN=%d -DBK=%d -DVEC_A=%d -DVEC_B=%d -DALIGN_A=%d -DALIGN_B=%d "
                       "-DVEC_C=%d -DTRANS_A=%d -DTRANS_B=%d -DSPLIT_K=%d",
                       p->bm, p->bn, p->bk, vec_a, vec_b, (int)aligned_a, (int)aligned_b,
                       c->ldc % 4 == 0 ? 4 : 1, (int)c->a.trans, (int)c->b.trans, p->sk > 1);
    /* cp.async copies runs of 4: the FMA kernel copies the operands stored depth-major (A
     * stored k x m, B stored k x n), 16 bytes at a time where their rows are aligned, else 4;
     * the mma.sync kernel copies both operands, 16-byte runs alone, and stages rows that do
     * not allow them through registers (the warpgroup kernel copies those 4 bytes at a time) */
    bool copies_a = mma || c->a.trans, copies_b = mma || !c->b.trans;
    int async = (!copies_a || (vec_a == 4 && (aligned_a || !mma))) &&
                        (!copies_b || (vec_b == 4 && (aligned_b || !mma)))
                    ? p->async
                    : 0;
    if (len < 0 || (size_t)len >= cap)
        len = (int)cap;
    else if (p->tma)
        len += snprintf(options + len, cap - (size_t)len,
                        " -DWGMMA=1 -DTMA=1 -DPREC=%d -DWN=%d -DASYNC=%d%s", p->tma_split ? 3 : 1,
                        p->wn, p->async, f->mma_emulated ? " -DMMA_EMULATE=1" : "");
    else if (p->wgmma)
        len += snprintf(options + len, cap - (size_t)len,
                        " -DWGMMA=1 -DWN=%d -DASYNC=%d -DOVERLAP=%d -DAREG=%d%s", p->wn, p->async,
                        p->overlap, p->areg, f->mma_emulated ? " -DMMA_EMULATE=1" : "");
    else if (mma)
        len += snprintf(options + len, cap - (size_t)len,
                        " -DMMA=1 -DWM=%d -DWN=%d -DPREC=%d -DASYNC=%d%s", p->wm, p->wn,
                        c->precision == HD_PRECISION_TF32 ? 1 : 3, async,
                        f->mma_emulated ? " -DMMA_EMULATE=1" : "");
    else
        len += snprintf(options + len, cap - (size_t)len, " -DRM=%d -DRN=%d -DASYNC=%d%s%s",
                        p->rm, p->rn, async, p->lead > 1 ? " -DLEAD=2" : "",
                        async && f->mma_emulated ? " -DMMA_EMULATE=1" : "");
    if (!p->tma && stages_as_argument(f, p, mma) && len >= 0 && (size_t)len < cap)
        len += snprintf(options + len, cap - (size_t)len, " -DSTAGE_ARG=1");
    /* the FMA and mma.sync kernels read through gemm.cl's loads and copies; the warpgroup
     * kernels have their own, and the option would only split their programs in two */
    if (!p->wgmma && offsets_fit_int(f, c, p) && len >= 0 && (size_t)len < cap)
        len += snprintf(options + len, cap - (size_t)len, " -DIDX32=1");
    /* fewer registers per work-item let two work-groups share an SM */
    if (p->reg != 0 && len >= 0 && (size_t)len < cap)
        len += snprintf(options + len, cap - (size_t)len, " -cl-nv-maxrregcount=%d", p->reg);
    if (len < 0 || (size_t)len >= cap)
        return hd__error(ctx, HD_ERR_INTERNAL,
                         "fused: the tiled GEMM's build options are too long");
    *copies = async != 0;
    *program = p->wgmma ? HD_FUSED_GEMM_WGMMA : mma ? HD_FUSED_GEMM_MMA : HD_FUSED_GEMM_TILE;
    *name = p->tma ? "gemm_wgmma_tma" : p->wgmma ? "gemm_wgmma" : mma ? "gemm_mma" : "gemm_tile";
    return HD_OK;
}

/* The kernel for p, building the tensor-core one if need be; a failed build of the default
 * tensor-core kernel marks it broken for the context and gives the next kernel instead. */
static hd_status tile_kernel(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                             hd_fused_params *p, size_t *threads, hd_kernel **out)
{
    bool mma = wants_mma(f, c->precision);
    hd_status s = tile_params(f, ctx, c, mma, p, threads);
    if (s != HD_OK)
        return s;
    mma = mma && p->wm != 0;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd_fused_program program = HD_FUSED_GEMM_TILE; /* set by tile_build where it succeeds */
    const char *name = NULL;
    bool async = false;
    s = tile_build(f, ctx, c, p, *threads, mma, &program, &name, options, &async);
    if (s != HD_OK)
        return s;
    s = hd__fused_kernel(f, ctx, program, options, name, *threads, out);
    /* a variant the call names that does not build fails alone: the tuner moves on, the
     * dispatcher sets its record aside, and the context keeps its kernels */
    if (s == HD_ERR_BUILD && c->variant != NULL && c->variant[0] != '\0')
        return s;
    if (p->tma) {
        if (s != HD_ERR_BUILD)
            return s;
        /* the stages through cp.async instead, for this context */
        f->tma_broken = true;
        hd_fused_tile_call cp_async = *c;
        cp_async.variant = NULL;
        s = tile_kernel(f, ctx, &cp_async, p, threads, out);
        if (s == HD_OK)
            hd__note(ctx, "fused: the GEMM's copies through the Tensor Memory Accelerator did not "
                          "build on this device; its stages go through cp.async");
        return s;
    }
    if (p->wgmma) {
        if (s != HD_ERR_BUILD)
            return s;
        /* the mma.sync kernel instead, for this context */
        f->wgmma_broken = true;
        hd_fused_tile_call mma_sync = *c;
        mma_sync.variant = NULL;
        s = tile_kernel(f, ctx, &mma_sync, p, threads, out);
        if (s == HD_OK)
            hd__note(ctx, "fused: the warpgroup tensor-core GEMM did not build on this device; "
                          "tf32 runs on mma.sync");
        return s;
    }
    if (s == HD_ERR_BUILD && !mma && async) {
        /* the FMA kernel with register staging, for this context */
        f->fma_async_broken = true;
        s = tile_kernel(f, ctx, c, p, threads, out);
        if (s == HD_OK)
            hd__note(ctx, "fused: the GEMM's cp.async copies did not build on this device; its "
                          "stages go through registers");
        return s;
    }
    if (s == HD_ERR_BUILD && mma) {
        f->mma_broken = true;
        hd__fused_params_parse(ctx, HD_FUSED_FAMILY_TILE, NULL, p);
        hd_fused_tile_call fp32 = *c;
        fp32.variant = NULL;
        s = tile_kernel(f, ctx, &fp32, p, threads, out);
        if (s == HD_OK)
            hd__note(ctx, "fused: the tensor-core GEMM did not build on this device; GEMMs run "
                          "in fp32");
    }
    return s;
}

hd_status hd__fused_tile_build_ahead(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *call)
{
    repack_plan r;
    hd_status s = repack_plan_of(f, ctx, call, &r);
    if (s != HD_OK)
        return s;
    const hd_fused_tile_call *c = &r.view;
    bool mma = wants_mma(f, c->precision);
    hd_fused_params p;
    size_t threads;
    s = tile_params(f, ctx, c, mma, &p, &threads);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd_fused_program program = HD_FUSED_GEMM_TILE; /* set by tile_build where it succeeds */
    const char *name = NULL;
    bool copies = false;
    s = tile_build(f, ctx, c, &p, threads, mma && p.wm != 0, &program, &name, options, &copies);
    if (s == HD_OK)
        hd__fused_build_ahead(f, ctx, program, options);
    return s;
}

static bool fits_int(size_t v)
{
    return v <= (size_t)INT_MAX;
}

/* Everything of a tiled product that can refuse it, queueing nothing: the 32-bit ranges, the
 * parameters, the kernels' builds and the split-K scratch. */
static hd_status tile_setup(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                            hd_fused_params *p, size_t *threads, hd_kernel **k, hd_devmem *part)
{
    if (!fits_int(c->m) || !fits_int(c->n) || !fits_int(c->k) || !fits_int(c->a.ld) ||
        !fits_int(c->b.ld) || !fits_int(c->ldc) || !fits_int(c->k2) || !fits_int(c->a2.ld) ||
        !fits_int(c->b2.ld))
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: the tiled GEMM indexes rows and columns with 32-bit integers");
    hd_status s = tile_kernel(f, ctx, c, p, threads, k);
    if (s != HD_OK)
        return s;
    size_t slices = (size_t)p->sk;
    size_t tiles = ceil_div(c->m, (size_t)p->bm) * ceil_div(c->n, (size_t)p->bn);
    if (tiles > (size_t)INT_MAX / slices / c->batch)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: %zu tiles exceed the launch's range",
                         tiles * slices);
    *part = c->c;
    if (slices == 1)
        return HD_OK;
    hd_kernel *reduce;
    if ((s = splitk_scratch(f, ctx, slices * c->m * c->n * sizeof(float), part)) != HD_OK)
        return s;
    return hd__fused_kernel(f, ctx, HD_FUSED_GEMM_TILE, "", "gemm_splitk_reduce", 256, &reduce);
}

hd_status hd__fused_tile_prepare(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c)
{
    repack_plan r;
    hd_status s = repack_plan_of(f, ctx, c, &r);
    if (s == HD_OK && r.any)
        s = repack_scratch(f, ctx, &r);
    hd_fused_params p;
    size_t threads;
    hd_kernel *k;
    hd_devmem part;
    if (s == HD_OK)
        s = tile_setup(f, ctx, &r.view, &p, &threads, &k, &part);
    if (s == HD_OK && r.any)
        s = hd__fused_kernel(f, ctx, HD_FUSED_GEMM_TILE, "", "gemm_repack", 256, &k);
    return s;
}

/* The tensor maps of the TMA kernel's operands A, B, A2 and B2 (gemm_tma.cl): each of rank 3
 * (depth, row, matrix), the boxes one stage's. Without a second product its maps are the
 * first's, never read. Under the emulation the operands themselves stand in (it reads them). */
static hd_status tma_maps(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c,
                          const hd_fused_params *p, hd_devmem maps[4])
{
    for (int i = 0; i < 4; i++) {
        const hd_fused_operand *o = operand_of(c, i);
        if (i >= 2 && c->k2 == 0) {
            maps[i] = maps[i - 2];
            continue;
        }
        if (f->mma_emulated) {
            maps[i] = o->mem;
            continue;
        }
        operand_extent e = operand_extent_of(c, i);
        hd_rt_tensor_map_desc d = {
            .mem = o->mem,
            .rank = 3,
            .dim = {e.depth, e.rows, e.batch},
            .stride = {o->ld * sizeof(float),
                       (e.batch > 1 ? e.stride : e.rows * o->ld) * sizeof(float)},
            .box = {(uint32_t)p->bk, (uint32_t)(i % 2 == 1 ? p->bn : p->bm), 1},
        };
        hd_status s = hd__rt_tensor_map(f->rt, ctx, &d, &maps[i]);
        if (s != HD_OK)
            return s;
    }
    return HD_OK;
}

/* hd__fused_tile_gemm of a call whose operands the kernel reads where they are. */
static hd_status tile_gemm(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c)
{
    hd_fused_params p;
    size_t threads;
    hd_kernel *k;
    hd_devmem part, maps[4];
    hd_status s = tile_setup(f, ctx, c, &p, &threads, &k, &part);
    if (s == HD_OK && p.tma && (s = tma_maps(f, ctx, c, &p, maps)) == HD_ERR_UNSUPPORTED &&
        (c->variant == NULL || strstr(c->variant, "TMA=") == NULL)) {
        /* the driver refused a map (an operand's address not 16-byte aligned): cp.async's
         * copies, as the variant would run them */
        char variant[HD_FUSED_OPTIONS_CAPACITY];
        int len = snprintf(variant, sizeof variant, "%s%sTMA=0", c->variant ? c->variant : "",
                           c->variant ? " " : "");
        if (len < 0 || (size_t)len >= sizeof variant)
            return s;
        hd__error_clear(ctx);
        hd_fused_tile_call cp_async = *c;
        cp_async.variant = variant;
        return tile_gemm(f, ctx, &cp_async);
    }
    if (s != HD_OK)
        return s;
    size_t slices = (size_t)p.sk;
    size_t kchunk = ceil_div(ceil_div(c->k, slices), (size_t)p.bk) * (size_t)p.bk;
    size_t tiles = ceil_div(c->m, (size_t)p.bm) * ceil_div(c->n, (size_t)p.bn);

    int32_t m = (int32_t)c->m, n = (int32_t)c->n, kk = (int32_t)c->k, lda = (int32_t)c->a.ld,
            ldb = (int32_t)c->b.ld, ldc = (int32_t)c->ldc, chunk = (int32_t)kchunk,
            nslices = (int32_t)slices;
    float alpha = c->alpha, beta = c->beta;
    uint64_t sa = c->stride_a, sb = c->stride_b, sc = c->stride_c;
    /* without a second product its buffers are the first's, never read (k2 = 0) */
    hd_devmem a2 = c->k2 > 0 ? c->a2.mem : c->a.mem, b2 = c->k2 > 0 ? c->b2.mem : c->b.mem;
    int32_t lda2 = (int32_t)c->a2.ld, ldb2 = (int32_t)c->b2.ld, k2 = (int32_t)c->k2;
    const void *values[] = {&m,    &n,    &kk,   &alpha, &c->a.mem, &lda,     &c->b.mem, &ldb,
                            &beta, &c->c, &ldc,  &part,  &chunk,    &nslices, &sa,       &sb,
                            &sc,   &a2,   &lda2, &b2,    &ldb2,     &k2};
    const size_t sizes[] = {
        sizeof m,    sizeof n,          sizeof kk,         sizeof alpha,   sizeof(hd_devmem),
        sizeof lda,  sizeof(hd_devmem), sizeof ldb,        sizeof beta,    sizeof(hd_devmem),
        sizeof ldc,  sizeof(hd_devmem), sizeof chunk,      sizeof nslices, sizeof sa,
        sizeof sb,   sizeof sc,         sizeof(hd_devmem), sizeof lda2,    sizeof(hd_devmem),
        sizeof ldb2, sizeof k2};
    s = hd__fused_set_args(ctx, k, values, sizes, 22);
    bool mma = p.wm != 0; /* the tensor-core kernel's parameters name its warps */
    unsigned stage_index = 22;
    for (unsigned i = 0; p.tma && i < 4 && s == HD_OK; i++) /* the TMA kernel's maps */
        s = hd__fused_set_arg(ctx, k, stage_index++, sizeof(hd_devmem), &maps[i]);
    if (s == HD_OK && stages_as_argument(f, &p, mma)) /* the stages: dynamic local memory */
        s = hd__fused_set_arg(ctx, k, stage_index, local_bytes(&p, mma), NULL);
    if (s != HD_OK ||
        (s = hd__fused_launch(f, ctx, k, tiles * slices * c->batch, threads)) != HD_OK ||
        slices == 1)
        return s;

    hd_kernel *reduce;
    if ((s = hd__fused_kernel(f, ctx, HD_FUSED_GEMM_TILE, "", "gemm_splitk_reduce", 256,
                              &reduce)) != HD_OK)
        return s;
    const void *rvalues[] = {&m, &n, &alpha, &beta, &c->c, &ldc, &part, &nslices};
    const size_t rsizes[] = {sizeof m,          sizeof n,   sizeof alpha,      sizeof beta,
                             sizeof(hd_devmem), sizeof ldc, sizeof(hd_devmem), sizeof nslices};
    if ((s = hd__fused_set_args(ctx, reduce, rvalues, rsizes, 8)) != HD_OK)
        return s;
    return hd__fused_launch(f, ctx, reduce, ceil_div(c->m * c->n, 256), 256);
}

hd_status hd__fused_tile_gemm(hd_fused *f, hd_context *ctx, const hd_fused_tile_call *c)
{
    repack_plan r;
    hd_status s = repack_plan_of(f, ctx, c, &r);
    if (s != HD_OK || !r.any)
        return s != HD_OK ? s : tile_gemm(f, ctx, c);
    if ((s = repack_scratch(f, ctx, &r)) != HD_OK || (s = repack_launch(f, ctx, c, &r)) != HD_OK)
        return s;
    return tile_gemm(f, ctx, &r.view);
}

hd_status hd__fused_scale_rows(hd_fused *f, hd_context *ctx, hd_devmem c, size_t rows, size_t cols,
                               float beta)
{
    if (rows == 0 || cols == 0)
        return HD_OK;
    if (rows > INT_MAX || cols > INT_MAX)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: scaling %zu x %zu: a side over %d",
                         rows, cols, INT_MAX);
    /* the split-K reduction of no slices: C = beta * C + alpha * 0, one fma per element */
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_GEMM_TILE, "", "gemm_splitk_reduce", 256, &k);
    if (s != HD_OK)
        return s;
    int32_t m = (int32_t)rows, n = (int32_t)cols, ld = (int32_t)cols, none = 0;
    float alpha = 1.0f, b = beta;
    const void *values[] = {&m, &n, &alpha, &b, &c, &ld, &c, &none};
    const size_t sizes[] = {sizeof m,          sizeof n,  sizeof alpha,      sizeof b,
                            sizeof(hd_devmem), sizeof ld, sizeof(hd_devmem), sizeof none};
    if ((s = hd__fused_set_args(ctx, k, values, sizes, 8)) != HD_OK)
        return s;
    return hd__fused_launch(f, ctx, k, ceil_div(rows * cols, 256), 256);
}

/* One tile variant of the tuner's list, with the numbers its text names (wm_or_rm 0: the
 * warpgroup kernel's). */
typedef struct tile_variant {
    const char *text;
    int bm, bn, bk, wm_or_rm, wn_or_rn, async;
} tile_variant;

/* Whether v fits the device: its work-items and its local memory, so that the tuner is not
 * offered what must fail (split: a TMA tile's buffers hold fp32x3's small parts too). */
static bool variant_fits_split(const hd_fused *f, const tile_variant *v, bool mma, bool split)
{
    /* the warpgroup kernel's variants name no warp rows: its warpgroups are 64 rows by WN */
    bool wgmma = mma && v->wm_or_rm == 0;
    hd_fused_params p = {.bm = v->bm,
                         .bn = v->bn,
                         .bk = v->bk,
                         .async = v->async,
                         .wgmma = wgmma,
                         .areg = wgmma && strstr(v->text, "AREG=1") != NULL,
                         .tma = wgmma && strstr(v->text, "TMA=1") != NULL};
    p.tma_split = p.tma && split;
    size_t threads;
    if (wgmma) {
        threads = wgmma_threads(v->bm, v->bn, v->wn_or_rn, p.tma);
    } else if (mma) {
        p.wm = v->wm_or_rm;
        p.wn = v->wn_or_rn;
        threads = (size_t)(v->bm / v->wm_or_rm) * (size_t)(v->bn / v->wn_or_rn) * 32;
    } else {
        threads = (size_t)(v->bm / v->wm_or_rm) * (size_t)(v->bn / v->wn_or_rn);
    }
    return threads <= f->device_max_group && local_memory_holds(f, &p, mma);
}

static bool variant_fits(const hd_fused *f, const tile_variant *v, bool mma)
{
    return variant_fits_split(f, v, mma, false);
}

/* The fp32 tiles that won most often where sweeps timed every variant (GEMM, LoRA and LoRA
 * backward, from a few tiles to thousands, each transpose; commit a9422b2), first in the list
 * in this order, so that a tuner whose time or count runs out before the list does
 * (dispatch-autotune's --max-time, --quick) has timed them. The large shapes' defaults (128 x
 * 128 tiles 16 deep, or in 5 buffers) are not among them: they are timed as the defaults, and
 * placed here they took the time in which the small shapes' tuning reached their own tiles. */
static const char *const fma_first[] = {
    "BM=64 BN=128 BK=16 RM=8 RN=8",         "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2",
    "BM=128 BN=128 BK=8 RM=16 RN=8",
    "BM=128 BN=128 BK=16 RM=8 RN=16",       "BM=128 BN=64 BK=16 RM=8 RN=8",
    "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3", "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=4",
    "BM=32 BN=64 BK=16 RM=4 RN=4",          "BM=64 BN=64 BK=32 RM=4 RN=4",
    "BM=128 BN=64 BK=16 RM=8 RN=4",         "BM=64 BN=64 BK=8 RM=8 RN=8",
};

/* Moves the entries of list[0..n) that fma_first names to its front, in fma_first's order;
 * the others keep theirs. */
static void fma_first_to_front(const char **list, size_t n)
{
    size_t front = 0;
    for (size_t rank = 0; rank < sizeof fma_first / sizeof fma_first[0]; rank++)
        for (size_t i = front; i < n; i++)
            if (strcmp(list[i], fma_first[rank]) == 0) {
                const char *hit = list[i];
                memmove(list + front + 1, list + front, (i - front) * sizeof *list);
                list[front++] = hit;
                break;
            }
}

/* Puts text at the front of list[0..n) (cap entries at most), moving it there if the list
 * holds it; returns the new count. */
static size_t to_front(const char **list, size_t n, size_t cap, const char *text)
{
    size_t at = 0;
    while (at < n && strcmp(list[at], text) != 0)
        at++;
    if (at == n) {
        if (n == cap)
            at = --n; /* full: the last entry makes room */
        n++;
    }
    memmove(list + 1, list, at * sizeof *list);
    list[0] = text;
    return n;
}

/* Tile shapes worth timing: large and small tiles, deep and shallow stages; the tensor-core
 * kernel's by warp layout; split-K where tiles are few. */
size_t hd__fused_tile_variants(const hd_fused *f, const hd_shape *s, hd_precision precision,
                               const char **out, size_t max)
{
    /* the whole list, ordered, then its first max: the tiles fma_first names come first even
     * where the caller takes few */
    const char *all[96];
    const size_t cap = sizeof all / sizeof all[0];
    static const tile_variant fma_tiles[] = {
        {"BM=128 BN=128 BK=8 RM=8 RN=8", 128, 128, 8, 8, 8, 0},
        {"BM=128 BN=128 BK=16 RM=8 RN=8", 128, 128, 16, 8, 8, 0},
        {"BM=128 BN=64 BK=16 RM=8 RN=4", 128, 64, 16, 8, 4, 0},
        {"BM=64 BN=128 BK=16 RM=4 RN=8", 64, 128, 16, 4, 8, 0},
        {"BM=64 BN=64 BK=16 RM=4 RN=4", 64, 64, 16, 4, 4, 0},
        {"BM=64 BN=64 BK=8 RM=8 RN=8", 64, 64, 8, 8, 8, 0},
        {"BM=32 BN=64 BK=16 RM=4 RN=4", 32, 64, 16, 4, 4, 0},
        {"BM=128 BN=128 BK=16 RM=8 RN=16", 128, 128, 16, 8, 16, 0},
        {"BM=128 BN=128 BK=8 RM=16 RN=8", 128, 128, 8, 16, 8, 0},
        {"BM=64 BN=64 BK=32 RM=4 RN=4", 64, 64, 32, 4, 4, 0},
        {"BM=64 BN=128 BK=16 RM=8 RN=8", 64, 128, 16, 8, 8, 0},
        {"BM=128 BN=64 BK=16 RM=8 RN=8", 128, 64, 16, 8, 8, 0},
        {"BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2", 128, 128, 8, 16, 8, 0},
        {"BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2", 128, 128, 16, 16, 8, 0},
        {"BM=64 BN=96 BK=16 RM=4 RN=12", 64, 96, 16, 4, 12, 0},
        {"BM=96 BN=64 BK=16 RM=12 RN=4", 96, 64, 16, 12, 4, 0},
        {"BM=128 BN=64 BK=16 RM=16 RN=4", 128, 64, 16, 16, 4, 0},
    };
    static const tile_variant mma_tiles[] = {
        {"BM=128 BN=128 BK=16 WM=64 WN=32", 128, 128, 16, 64, 32, 0},
        {"BM=128 BN=128 BK=16 WM=32 WN=64", 128, 128, 16, 32, 64, 0},
        {"BM=128 BN=128 BK=16 WM=64 WN=64", 128, 128, 16, 64, 64, 0},
        {"BM=128 BN=128 BK=16 WM=128 WN=32", 128, 128, 16, 128, 32, 0},
        {"BM=256 BN=128 BK=16 WM=64 WN=64", 256, 128, 16, 64, 64, 0},
        {"BM=128 BN=256 BK=16 WM=64 WN=64", 128, 256, 16, 64, 64, 0},
        {"BM=256 BN=128 BK=16 WM=128 WN=32", 256, 128, 16, 128, 32, 0},
        {"BM=128 BN=64 BK=16 WM=32 WN=32", 128, 64, 16, 32, 32, 0},
        {"BM=64 BN=128 BK=16 WM=32 WN=32", 64, 128, 16, 32, 32, 0},
        {"BM=64 BN=64 BK=16 WM=32 WN=32", 64, 64, 16, 32, 32, 0},
        {"BM=64 BN=64 BK=32 WM=32 WN=32", 64, 64, 32, 32, 32, 0},
        {"BM=64 BN=64 BK=32 WM=64 WN=32", 64, 64, 32, 64, 32, 0},
        {"BM=128 BN=128 BK=16 WM=64 WN=32 ASYNC=3", 128, 128, 16, 64, 32, 3},
        {"BM=128 BN=128 BK=16 WM=64 WN=64 ASYNC=3", 128, 128, 16, 64, 64, 3},
        {"BM=128 BN=128 BK=16 WM=128 WN=32 ASYNC=3", 128, 128, 16, 128, 32, 3},
        {"BM=256 BN=128 BK=16 WM=128 WN=32 ASYNC=2", 256, 128, 16, 128, 32, 2},
        {"BM=256 BN=128 BK=16 WM=64 WN=64 ASYNC=2", 256, 128, 16, 64, 64, 2},
        {"BM=128 BN=64 BK=16 WM=64 WN=32 ASYNC=4", 128, 64, 16, 64, 32, 4},
        {"BM=64 BN=128 BK=16 WM=32 WN=64 ASYNC=4", 64, 128, 16, 32, 64, 4},
        {"BM=64 BN=64 BK=16 WM=32 WN=32 ASYNC=4", 64, 64, 16, 32, 32, 4},
        /* past 48 KiB of stages: where they are dynamic local memory (the CUDA runtime) */
        {"BM=128 BN=128 BK=16 WM=64 WN=64 ASYNC=4", 128, 128, 16, 64, 64, 4},
        {"BM=128 BN=256 BK=16 WM=64 WN=64 ASYNC=4", 128, 256, 16, 64, 64, 4},
        {"BM=256 BN=128 BK=16 WM=64 WN=64 ASYNC=4", 256, 128, 16, 64, 64, 4},
    };
    /* tf32 on compute capability 9.0: the warpgroup kernel's tiles, its buffers filling the
     * local memory (NVIDIA's OpenCL gives 48 KiB, and refuses more through a __local
     * argument too; the CUDA runtime up to the opt-in limit). On OpenCL 256 work-items at
     * most: groups of 512 ran none of the tiles tried (128 x 128 of 64 x 64 blocks, 256 x
     * 128, 128 x 256 of 64 x 128 blocks), also with the registers capped at 128 through
     * -cl-nv-maxrregcount; on the CUDA runtime 256 x 128 tiles of four warpgroups ran
     * right (test_fused); 128 x 256 tiles run as two warpgroups of 64 x 256; 256 x 256 of
     * four such warpgroups did not build on the H200 (512 work-items of 128 accumulators
     * each would take all of a multiprocessor's 64 Ki registers). With A's fragments in
     * registers (AREG) the local memory holds B's stages alone, which lets 128 x 256 tiles
     * take 16-deep stages (commits e9c5a86, e88f1af). */
    static const tile_variant wgmma_tiles[] = {
        {"BM=128 BN=128 BK=8 WN=128 ASYNC=6 WGMMA=1", 128, 128, 8, 0, 128, 6},
        {"BM=128 BN=128 BK=16 WN=128 ASYNC=3 WGMMA=1", 128, 128, 16, 0, 128, 3},
        {"BM=128 BN=256 BK=8 WN=256 ASYNC=4 WGMMA=1", 128, 256, 8, 0, 256, 4},
        /* past 48 KiB of stages: where they are dynamic local memory (the CUDA runtime) */
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=4 WGMMA=1", 128, 256, 16, 0, 256, 4},
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=6 WGMMA=1", 128, 256, 16, 0, 256, 6},
        {"BM=128 BN=256 BK=32 WN=256 ASYNC=4 WGMMA=1", 128, 256, 32, 0, 256, 4},
        {"BM=128 BN=256 BK=8 WN=256 ASYNC=8 WGMMA=1", 128, 256, 8, 0, 256, 8},
        {"BM=256 BN=128 BK=16 WN=128 ASYNC=4 WGMMA=1", 256, 128, 16, 0, 128, 4},
        {"BM=128 BN=128 BK=32 WN=128 ASYNC=4 WGMMA=1", 128, 128, 32, 0, 128, 4},
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=8 AREG=1 WGMMA=1", 128, 256, 16, 0, 256, 8},
        {"BM=128 BN=256 BK=8 WN=256 ASYNC=4 OVERLAP=0 WGMMA=1", 128, 256, 8, 0, 256, 4},
        {"BM=128 BN=128 BK=8 WN=128 ASYNC=6 OVERLAP=0 WGMMA=1", 128, 128, 8, 0, 128, 6},
        {"BM=64 BN=256 BK=8 WN=256 ASYNC=4 OVERLAP=0 WGMMA=1", 64, 256, 8, 0, 256, 4},
        {"BM=128 BN=128 BK=16 WN=128 ASYNC=3 OVERLAP=0 WGMMA=1", 128, 128, 16, 0, 128, 3},
        {"BM=64 BN=256 BK=8 WN=256 ASYNC=4 WGMMA=1", 64, 256, 8, 0, 256, 4},
        {"BM=64 BN=256 BK=8 WN=128 ASYNC=4 WGMMA=1", 64, 256, 8, 0, 128, 4},
        {"BM=64 BN=128 BK=8 WN=128 ASYNC=8 WGMMA=1", 64, 128, 8, 0, 128, 8},
        {"BM=64 BN=128 BK=16 WN=128 ASYNC=4 WGMMA=1", 64, 128, 16, 0, 128, 4},
        {"BM=128 BN=64 BK=16 WN=64 ASYNC=4 WGMMA=1", 128, 64, 16, 0, 64, 4},
        {"BM=64 BN=64 BK=16 WN=64 ASYNC=4 WGMMA=1", 64, 64, 16, 0, 64, 4},
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1", 128, 256, 16, 0, 256, 3},
        {"BM=128 BN=256 BK=8 WN=256 ASYNC=6 AREG=1 WGMMA=1", 128, 256, 8, 0, 256, 6},
        {"BM=64 BN=256 BK=8 WN=256 ASYNC=6 AREG=1 WGMMA=1", 64, 256, 8, 0, 256, 6},
        {"BM=128 BN=128 BK=16 WN=128 ASYNC=6 AREG=1 WGMMA=1", 128, 128, 16, 0, 128, 6},
    };
    /* compute capability 8.0 and later, fp32: the FMA tiles with the operands stored
     * depth-major copied by cp.async, more stages in flight (none where A is stored m x k and
     * B n x k: both go through registers) */
    static const tile_variant fma_async_tiles[] = {
        /* past 48 KiB of stages: where they are dynamic local memory (the CUDA runtime) */
        {"BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=4", 128, 128, 16, 8, 16, 4},
        {"BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=8", 128, 128, 8, 16, 8, 8},
        {"BM=128 BN=128 BK=8 RM=8 RN=8 ASYNC=3", 128, 128, 8, 8, 8, 3},
        {"BM=128 BN=128 BK=8 RM=8 RN=8 ASYNC=4", 128, 128, 8, 8, 8, 4},
        {"BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3", 128, 128, 8, 16, 8, 3},
        {"BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=4", 128, 128, 8, 16, 8, 4},
        {"BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=5", 128, 128, 8, 16, 8, 5},
        {"BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=2", 128, 128, 16, 8, 16, 2},
        {"BM=128 BN=64 BK=16 RM=8 RN=8 ASYNC=3", 128, 64, 16, 8, 8, 3},
        {"BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3", 64, 128, 16, 8, 8, 3},
        {"BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=4", 64, 64, 16, 4, 4, 4},
        {"BM=64 BN=96 BK=16 RM=4 RN=12 ASYNC=3", 64, 96, 16, 4, 12, 3},
        {"BM=96 BN=64 BK=16 RM=12 RN=4 ASYNC=3", 96, 64, 16, 12, 4, 3},
    };
    static const char *const split[] = {"BM=64 BN=64 SK=2", "BM=64 BN=64 SK=4", "BM=64 BN=64 SK=8",
                                        "BM=64 BN=64 SK=16"};
    /* fp32, where the large tiles leave compute units idle: them and the half-size ones with
     * the depth cut in two or four */
    static const char *const split_large[] = {
        "BM=128 BN=128 BK=8 RM=16 RN=8 SK=2", "BM=64 BN=128 BK=16 RM=8 RN=8 SK=2",
        "BM=128 BN=64 BK=16 RM=8 RN=8 SK=2", "BM=64 BN=128 BK=16 RM=8 RN=8 SK=4",
        "BM=128 BN=64 BK=16 RM=16 RN=4 SK=2"};
    /* NVIDIA: the large tiles again at 128 registers, two work-groups per SM */
    static const char *const fma_capped[] = {"BM=128 BN=128 BK=8 RM=8 RN=8 REG=128",
                                             "BM=128 BN=128 BK=16 RM=8 RN=8 REG=128"};
    static const char fma_async_capped[] = "BM=128 BN=128 BK=8 RM=8 RN=8 ASYNC=4 REG=128";
    static const char *const mma_capped[] = {"BM=128 BN=128 BK=16 WM=64 WN=32 REG=128",
                                             "BM=128 BN=128 BK=16 WM=64 WN=64 REG=168",
                                             "BM=64 BN=128 BK=16 WM=32 WN=32 REG=128"};
    /* the same with stages copied by the Tensor Memory Accelerator (32 deep): one warpgroup
     * more, which issues the copies; operands stored otherwise are copied depth-contiguous
     * first (repack_plan_of), which their timing includes */
    static const tile_variant tma_tiles[] = {
        {"BM=128 BN=256 BK=32 WN=256 ASYNC=4 TMA=1", 128, 256, 32, 0, 256, 4},
        {"BM=128 BN=256 BK=32 WN=256 ASYNC=3 TMA=1", 128, 256, 32, 0, 256, 3},
        {"BM=128 BN=128 BK=32 WN=128 ASYNC=6 TMA=1", 128, 128, 32, 0, 128, 6},
        {"BM=256 BN=128 BK=32 WN=128 ASYNC=4 TMA=1", 256, 128, 32, 0, 128, 4},
        {"BM=128 BN=128 BK=32 WN=64 ASYNC=6 TMA=1", 128, 128, 32, 0, 64, 6},
        {"BM=64 BN=256 BK=32 WN=256 ASYNC=6 TMA=1", 64, 256, 32, 0, 256, 6},
        {"BM=64 BN=128 BK=32 WN=128 ASYNC=8 TMA=1", 64, 128, 32, 0, 128, 8},
        {"BM=64 BN=64 BK=32 WN=64 ASYNC=8 TMA=1", 64, 64, 32, 0, 64, 8},
    };
    /* fp32x3 on the copy engine: buffers twice as large (each operand's small parts), three
     * products a step */
    static const tile_variant tma_split_tiles[] = {
        {"BM=128 BN=128 BK=32 WN=128 ASYNC=3 TMA=1", 128, 128, 32, 0, 128, 3},
        {"BM=128 BN=128 BK=32 WN=64 ASYNC=3 TMA=1", 128, 128, 32, 0, 64, 3},
        {"BM=64 BN=128 BK=32 WN=128 ASYNC=4 TMA=1", 64, 128, 32, 0, 128, 4},
        {"BM=128 BN=64 BK=32 WN=64 ASYNC=4 TMA=1", 128, 64, 32, 0, 64, 4},
        {"BM=64 BN=256 BK=32 WN=256 ASYNC=3 TMA=1", 64, 256, 32, 0, 256, 3},
        {"BM=64 BN=64 BK=32 WN=64 ASYNC=6 TMA=1", 64, 64, 32, 0, 64, 6},
    };
    bool mma = wants_mma(f, precision);
    const tile_variant *tiles = mma ? mma_tiles : fma_tiles;
    size_t count =
        mma ? sizeof mma_tiles / sizeof mma_tiles[0] : sizeof fma_tiles / sizeof fma_tiles[0];
    size_t n = 0;
    bool tma = wants_wgmma(f, precision) && f->tma && !f->tma_broken;
    for (size_t i = 0; tma && i < sizeof tma_tiles / sizeof tma_tiles[0] && n < cap; i++)
        if (variant_fits(f, &tma_tiles[i], true))
            all[n++] = tma_tiles[i].text;
    bool x3 = wants_tma_x3(f, precision);
    for (size_t i = 0; x3 && i < sizeof tma_split_tiles / sizeof tma_split_tiles[0] && n < cap; i++)
        if (variant_fits_split(f, &tma_split_tiles[i], true, true))
            all[n++] = tma_split_tiles[i].text;
    for (size_t i = 0;
         wants_wgmma(f, precision) && i < sizeof wgmma_tiles / sizeof wgmma_tiles[0] && n < cap;
         i++)
        if (variant_fits(f, &wgmma_tiles[i], true))
            all[n++] = wgmma_tiles[i].text;
    for (size_t i = 0; i < count && n < cap; i++)
        if (variant_fits(f, &tiles[i], mma))
            all[n++] = tiles[i].text;
    bool copies = s->trans_a || !s->trans_b;
    for (size_t i = 0; !mma && f->mma && !f->fma_async_broken && copies &&
                       i < sizeof fma_async_tiles / sizeof fma_async_tiles[0] && n < cap;
         i++)
        if (variant_fits(f, &fma_async_tiles[i], false))
            all[n++] = fma_async_tiles[i].text;
    const char *const *capped = mma ? mma_capped : fma_capped;
    size_t capped_count = mma ? 3 : 2;
    for (size_t i = 0; f->nv_options && i < capped_count && n < cap; i++)
        all[n++] = capped[i];
    if (!mma && f->mma && !f->fma_async_broken && copies && f->nv_options && n < cap)
        all[n++] = fma_async_capped;
    size_t units = f->compute_units > 0 ? f->compute_units : 1;
    bool few_tiles = ceil_div(s->dim[0], 64) * ceil_div(s->dim[1], 64) < 2 * units;
    for (size_t i = 0; few_tiles && s->dim[2] >= 1024 && i < 4 && n < cap; i++)
        all[n++] = split[i];
    bool idle_units = ceil_div(s->dim[0], 128) * ceil_div(s->dim[1], 128) < units;
    for (size_t i = 0; !mma && idle_units && s->dim[2] >= 1024 &&
                       i < sizeof split_large / sizeof split_large[0] && n < cap;
         i++)
        all[n++] = split_large[i];
    if (!mma)
        fma_first_to_front(all, n);
    /* the split tiles of deep_few_tiles first: the default's tile cut into the nearest of 4,
     * 8 and 16 slices below and above the default's count, through registers and, where it
     * copies an operand, cp.async */
    if (!mma && deep_few_tiles(units, s->dim[0], s->dim[1], s->dim[2])) {
        static const char *const plain[] = {"BM=64 BN=128 BK=16 RM=8 RN=8 SK=4",
                                            "BM=64 BN=128 BK=16 RM=8 RN=8 SK=8",
                                            "BM=64 BN=128 BK=16 RM=8 RN=8 SK=16"};
        static const char *const copied[] = {"BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 SK=4",
                                             "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 SK=8",
                                             "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 SK=16"};
        size_t sk = deep_split(units, s->dim[0], s->dim[1], s->dim[2]);
        for (size_t i = 0; i < 3; i++) { /* the nearest counts below and above the default's */
            size_t slices = (size_t)4 << i;
            bool below = slices < sk && (i == 2 || ((size_t)4 << (i + 1)) >= sk);
            bool above = slices > sk && (i == 0 || ((size_t)4 << (i - 1)) <= sk);
            if (!below && !above)
                continue;
            if (f->mma && !f->fma_async_broken && copies)
                n = to_front(all, n, cap, copied[i]);
            n = to_front(all, n, cap, plain[i]);
        }
    }
    n = n < max ? n : max;
    memcpy(out, all, n * sizeof *out);
    return n;
}
