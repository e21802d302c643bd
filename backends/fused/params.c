/*
 * Kernel parameters from variant strings. The string is parsed into integers checked against
 * the values each kernel was written for; only those integers, never the caller's text, reach
 * the build options. Parameters a variant leaves out get defaults chosen from the shape.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "backends/fused/internal.h"

typedef struct param_spec {
    const char *name;
    int min, max;
    bool pow2;
    int step;      /* where not pow2: the values are multiples of step (0: any) */
    size_t offset; /* into hd_fused_params */
} param_spec;

#define SPEC(name, min, max, pow2, field)                                                          \
    {                                                                                              \
        name, min, max, pow2, 0, offsetof(hd_fused_params, field)                                  \
    }
/* A value that is a multiple of step, min..max. */
#define SPEC_STEP(name, min, max, step, field)                                                     \
    {                                                                                              \
        name, min, max, false, step, offsetof(hd_fused_params, field)                              \
    }

static const param_spec rows_spec[] = {
    SPEC("WG", 1, 1024, true, wg),
    SPEC("ROWS", 1, 1024, true, rows),
    SPEC("VEC", 1, 4, true, vec),
    SPEC("CACHE", 0, 16, false, cache),
    SPEC("UNITS", 1, 16, false, units),
    SPEC("PREFETCH", 0, 1, false, prefetch),
    SPEC("CLUSTER", 1, HD_RT_CLUSTER_MAX, true, cluster),
    SPEC("LOCAL", 0, 1, false, local),
};
static const param_spec gemv_spec[] = {
    SPEC("TN", 1, 256, true, tn),
    SPEC("KS", 1, 1024, true, ks),
    SPEC("VEC", 1, 4, true, vec),
    SPEC("UNROLL", 1, 16, false, unroll),
    SPEC("SPLIT", 0, HD_FUSED_MAX_SPLIT, false, split),
    SPEC("KG", 1, HD_FUSED_MAX_KG, false, kg),
};
static const param_spec update_spec[] = {
    SPEC("WG", 64, 1024, true, wg),
    SPEC("MR", 1, 16, true, mr),
    SPEC("VEC", 1, 4, true, vec),
};

static const param_spec tile_spec[] = {
    SPEC_STEP("BM", 16, 256, 16, bm),  SPEC_STEP("BN", 16, 256, 16, bn),
    SPEC("BK", 4, 64, true, bk),       SPEC_STEP("RM", 4, 16, 4, rm),
    SPEC_STEP("RN", 4, 16, 4, rn),     SPEC("WM", 16, 128, true, wm),
    SPEC("WN", 8, 256, true, wn),      SPEC("SK", 1, 64, false, sk),
    SPEC("REG", 64, 255, false, reg),  SPEC("ASYNC", 2, 8, false, async),
    SPEC("WGMMA", 0, 1, false, wgmma), SPEC("OVERLAP", 0, 1, false, overlap),
    SPEC("AREG", 0, 1, false, areg),   SPEC("LEAD", 1, 2, false, lead),
    SPEC("TMA", 0, 1, false, tma),
};

static const param_spec step_spec[] = {
    SPEC("WG", 32, 1024, true, wg),
    SPEC("VEC", 1, 4, true, vec),
    SPEC("HPI", 1, 8, false, hpi),
};

static const param_spec attention_spec[] = {
    SPEC("BQ", 16, 128, true, att_bq),  SPEC("BK", 16, 128, true, att_bk),
    SPEC("RQ", 1, 16, true, att_rq),    SPEC("TC", 4, 32, true, att_tc),
    SPEC("KBK", 16, 128, true, att_kbk), SPEC("KRK", 1, 8, true, att_krk),
    SPEC("KBQ", 16, 64, true, att_kbq), SPEC("FAST", 0, 1, false, att_fast),
    SPEC("FMA", 0, 1, false, att_fma),
};

static const param_spec *family_spec(hd_fused_family family, size_t *count)
{
    switch (family) {
    case HD_FUSED_FAMILY_ATTENTION:
        *count = sizeof attention_spec / sizeof attention_spec[0];
        return attention_spec;
    case HD_FUSED_FAMILY_STEP:
        *count = sizeof step_spec / sizeof step_spec[0];
        return step_spec;
    case HD_FUSED_FAMILY_TILE:
        *count = sizeof tile_spec / sizeof tile_spec[0];
        return tile_spec;
    case HD_FUSED_FAMILY_ROWS:
        *count = sizeof rows_spec / sizeof rows_spec[0];
        return rows_spec;
    case HD_FUSED_FAMILY_GEMV:
        *count = sizeof gemv_spec / sizeof gemv_spec[0];
        return gemv_spec;
    case HD_FUSED_FAMILY_UPDATE:
        break;
    }
    *count = sizeof update_spec / sizeof update_spec[0];
    return update_spec;
}

static bool is_pow2(long v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

size_t hd__fused_pow2_ceil(size_t v)
{
    size_t p = 1;
    while (p < v && p <= SIZE_MAX / 2)
        p *= 2;
    return p;
}

static int *field(hd_fused_params *p, const param_spec *s)
{
    return (int *)((char *)p + s->offset);
}

/* One "NAME=value" token of length len at tok. */
static hd_status parse_token(hd_context *ctx, const param_spec *spec, size_t count,
                             const char *tok, size_t len, hd_fused_params *out, bool *seen)
{
    const char *eq = memchr(tok, '=', len);
    size_t name_len = eq ? (size_t)(eq - tok) : 0;
    size_t digits = eq ? len - name_len - 1 : 0;
    if (eq == NULL || name_len == 0 || digits == 0 || digits > 5)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: malformed variant token '%.*s' (want NAME=number)",
                         (int)(len > 40 ? 40 : len), tok);
    long value = 0;
    for (size_t i = 0; i < digits; i++) {
        char c = eq[1 + i];
        if (c < '0' || c > '9')
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "fused: variant value in '%.*s' is not a number",
                             (int)(len > 40 ? 40 : len), tok);
        value = value * 10 + (c - '0');
    }
    for (size_t i = 0; i < count; i++) {
        if (strlen(spec[i].name) != name_len || memcmp(spec[i].name, tok, name_len) != 0)
            continue;
        if (seen[i])
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: variant names %s twice",
                             spec[i].name);
        if (value < spec[i].min || value > spec[i].max || (spec[i].pow2 && !is_pow2(value)) ||
            (spec[i].step > 0 && value % spec[i].step != 0) ||
            (spec[i].pow2 && strcmp(spec[i].name, "VEC") == 0 && value == 2)) {
            char step[40] = "";
            if (spec[i].step > 0)
                snprintf(step, sizeof step, " (multiples of %d)", spec[i].step);
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "fused: variant value %s=%ld is outside %d..%d%s", spec[i].name, value,
                             spec[i].min, spec[i].max, spec[i].pow2 ? " (powers of two)" : step);
        }
        seen[i] = true;
        *field(out, &spec[i]) = (int)value;
        return HD_OK;
    }
    return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: unknown variant parameter '%.*s'",
                     (int)(name_len > 40 ? 40 : name_len), tok);
}

hd_status hd__fused_params_parse(hd_context *ctx, hd_fused_family family, const char *variant,
                                 hd_fused_params *out)
{
    memset(out, 0, sizeof *out);
    out->cache = -1; /* CACHE=0 is a choice (the looped kernel), so unset is -1 */
    out->prefetch = -1; /* PREFETCH=0 too (the single pass loads each row in its turn) */
    out->split = -1; /* as is SPLIT=0 (one launch) */
    out->overlap = -1; /* and OVERLAP=0 (the warpgroup kernel's products finish each stage) */
    out->tma = -1;     /* and TMA=0 (its stages copied by cp.async) */
    if (variant == NULL)
        return HD_OK;
    size_t count;
    const param_spec *spec = family_spec(family, &count);
    bool seen[16] = {false};
    const char *p = variant;
    for (;;) {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            return HD_OK;
        size_t len = strcspn(p, " ");
        hd_status s = parse_token(ctx, spec, count, p, len, out, seen);
        if (s != HD_OK)
            return s;
        p += len;
    }
}

static hd_status too_large_group(hd_fused *f, hd_context *ctx, size_t group)
{
    if (group <= f->device_max_group)
        return HD_OK;
    return hd__error(ctx, HD_ERR_UNSUPPORTED,
                     "fused: work-group of %zu exceeds the device's maximum of %zu", group,
                     f->device_max_group);
}

hd_status hd__fused_rows_params(hd_fused *f, hd_context *ctx, const char *variant, size_t cols,
                                hd_fused_params *p, bool *cached)
{
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_ROWS, variant, p);
    if (s != HD_OK)
        return s;
    if (p->vec == 0 || cols % 4 != 0)
        p->vec = cols % 4 == 0 ? 4 : 1;
    size_t nv = cols / (size_t)p->vec;
    /* Defaults stay at 256 work-items: larger groups run only where the compiled kernel's
     * register use allows them, which variants find out. */
    size_t limit = f->device_max_group < 256 ? f->device_max_group : 256;
    if (p->wg == 0 && p->rows == 0) {
        /* About four vectors per work-item, 256 items per group. */
        size_t t = hd__fused_pow2_ceil((nv + 3) / 4);
        if (t > limit)
            t = hd__fused_pow2_ceil(limit + 1) / 2; /* largest power of two <= limit */
        size_t wg = t < 256 ? 256 : t;
        while (wg > limit)
            wg /= 2;
        p->wg = (int)wg;
        p->rows = (int)(wg / t > 0 ? wg / t : 1);
    } else if (p->wg == 0) {
        p->wg = p->rows > 256 ? p->rows : 256;
    } else if (p->rows == 0) {
        size_t t = hd__fused_pow2_ceil((nv + 3) / 4);
        p->rows = t >= (size_t)p->wg ? 1 : (int)((size_t)p->wg / t);
    }
    if (p->rows > p->wg)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: ROWS=%d exceeds WG=%d", p->rows,
                         p->wg);
    size_t t = (size_t)(p->wg / p->rows);
    size_t need = (nv + t - 1) / t;
    if (p->cache < 0)
        p->cache = need <= 16 ? (int)hd__fused_pow2_ceil(need) : 0;
    *cached = p->cache > 0 && need <= (size_t)p->cache;
    return too_large_group(f, ctx, (size_t)p->wg);
}

/* KG when the variant leaves it open: the strips alone are n / (TN * VEC) work-groups, 64 for
 * n = 2048 at the one-row GEMM's default strip, fewer than a large GPU's compute units and far
 * from enough loads in flight. Double KG while every work-item still gets one full unrolled
 * round of UNROLL loads and the groups stay within 8 per compute unit for one row (8 x 256
 * work-items fill an SM).
 * Several rows stage x through local memory chunk by chunk and LoRA's compute their share of
 * x*A first, costs that fewer, longer groups pay less often: their groups stay within 64
 * strip vectors per compute unit (2 groups of 32-vector strips, 1 of 64). One row gains (the
 * cases lora 1x2048x2048 r8 and gemm 1x4096x4096 with strips of 4 vectors); GEMM 8 x 4096²
 * (32-vector strips, the case gemm 8x4096x4096) was fastest at KG=8, ahead of 4, 16 and 32
 * with 8 loads per round (commit ea6b433; BENCHMARKS.md at 89a17cb). The one-token split LoRA
 * path sums all x*A partials in every group, so it keeps KG=1. */
static int default_kg(const hd_fused *f, const hd_fused_params *p, size_t n, size_t k,
                      size_t rows)
{
    if (rows <= 1 && p->split > 0)
        return 1;
    size_t strips = (n / (size_t)p->vec + (size_t)p->tn - 1) / (size_t)p->tn;
    size_t per_cu = rows > 1 ? (p->tn < 64 ? 64 / (size_t)p->tn : 1) : 8;
    size_t target = per_cu * (f->compute_units > 0 ? f->compute_units : 1);
    size_t round = (size_t)p->ks * (size_t)p->unroll;
    int kg = 1, most = rows > 1 ? 32 : 16;
    while (kg < most && strips * (size_t)kg * 2 <= target && k / ((size_t)kg * 2) >= round)
        kg *= 2;
    return kg;
}

hd_status hd__fused_gemv_params(hd_fused *f, hd_context *ctx, const char *variant, size_t n,
                                size_t k, size_t rows, const hd_lora_args *lora,
                                hd_fused_params *p)
{
    const bool needs_rank = lora != NULL;
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_GEMV, variant, p);
    if (s != HD_OK)
        return s;
    if (p->vec == 0 || n % 4 != 0)
        p->vec = n % 4 == 0 ? 4 : 1;
    /* GEMM of one row: strips of 8 vectors by 32 k-slices with 8 loads in flight per
     * work-item, so that a quarter-warp reads 128 contiguous bytes of a row of W (strips of 4
     * vectors read half sectors and ran slower as n grew). One-token LoRA: every work-group
     * recomputes its k-range of x*A, so few wide strips (16 vectors, 16 k-slices, 4 loads per
     * round) split many ways over k (KG below) keep that prologue short: close to the fastest
     * variant of each shape of the seed suite (lora 1x512x512 to 1x2048x2048, r 4 to 64),
     * faster than the GEMM's strip in one launch or split (r = 64; commit f3a4999). Several
     * rows read x from local memory (gemv.cl). GEMM up to 8 rows: strips of 32 vectors by 8
     * k-slices with 4 loads per round, 2 groups per SM (KG below), the fastest tried at gemm
     * 8x4096x4096 and gemm 4x5504x2048. LoRA, and GEMM of 9 to 16 rows: strips of 64 vectors
     * by 4 k-slices with 8 loads per round, one group per SM, which halves the groups that
     * compute x*A: faster than the best 32 x 8 strips at 4, 8 and 16 tokens of 4096^2 at
     * rank 16 (the case lora 8x4096x4096 r16) and at gemm 16x4096x4096 (commit e92e151;
     * BENCHMARKS.md at 89a17cb). */
    const bool wide = needs_rank && rows <= 1;
    const bool wider = rows > 1 && (needs_rank || rows > 8);
    /* LoRA of several tokens over a large W (2^25 elements and up, 4096 columns or more):
     * strips of 128 vectors by 2 k-slices, faster there, slower on 4096^2 (commit 1f2aa2c) */
    const bool widest = wider && needs_rank && n >= 4096 && n * k >= ((size_t)1 << 25);
    if (p->tn == 0)
        p->tn = widest ? 128 : wider ? 64 : rows > 1 ? 32 : wide ? 16 : 8;
    if (p->ks == 0)
        p->ks = 256 / p->tn > 0 ? 256 / p->tn : 1;
    if (p->unroll == 0)
        p->unroll = rows > 1 ? (p->tn >= 64 ? 8 : 4) : wide ? 4 : 8;
    if (!needs_rank && p->split >= 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "fused: SPLIT applies to LoRA only");
    /* x*A in the same launch unless the variant splits it: each work-group computes it over
     * its own k-range only, and a second launch costs more than that prologue (the cases lora
     * 16x1024x1024 r64 and lora 1x1024x1024 r64, both faster in one launch than split: commit
     * e92e151) */
    if (needs_rank && p->split < 0)
        p->split = 0;
    if (needs_rank && lora->rank == 0)
        p->split = 0; /* nothing to split */
    if (p->kg == 0)
        p->kg = default_kg(f, p, n, k, rows);
    long group = (long)p->tn * p->ks;
    if (group > 1024 || group * p->vec > 4096)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: TN*KS=%ld must be at most 1024 and TN*KS*VEC at most 4096",
                         group);
    if (needs_rank && group < 64)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: the LoRA kernel needs TN*KS >= 64 (got %ld)", group);
    return too_large_group(f, ctx, (size_t)group);
}

hd_status hd__fused_update_params(hd_fused *f, hd_context *ctx, const char *variant,
                                  size_t out_cols, hd_fused_params *p)
{
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_UPDATE, variant, p);
    if (s != HD_OK)
        return s;
    if (p->vec == 0 || out_cols % 4 != 0)
        p->vec = out_cols % 4 == 0 ? 4 : 1;
    if (p->wg == 0)
        p->wg = 256;
    if (p->mr == 0)
        p->mr = 8;
    return too_large_group(f, ctx, (size_t)p->wg);
}

void hd__fused_options(hd_fused_family family, const hd_fused_params *p, size_t rows,
                       char out[HD_FUSED_OPTIONS_CAPACITY])
{
    switch (family) {
    case HD_FUSED_FAMILY_ROWS:
        snprintf(out, HD_FUSED_OPTIONS_CAPACITY, "-DWG=%d -DROWS=%d -DVEC=%d -DCACHE=%d", p->wg,
                 p->rows, p->vec, p->cache);
        return;
    case HD_FUSED_FAMILY_GEMV:
        snprintf(out, HD_FUSED_OPTIONS_CAPACITY,
                 "-DTN=%d -DKS=%d -DVEC=%d -DUNROLL=%d -DMR=%zu -DKG=%d", p->tn, p->ks, p->vec,
                 p->unroll, hd__fused_pow2_ceil(rows), p->kg);
        return;
    case HD_FUSED_FAMILY_TILE: /* formatted by tile.c, which knows the shape's layouts */
    case HD_FUSED_FAMILY_STEP: /* by step.c, which knows each kernel's parameters */
    case HD_FUSED_FAMILY_ATTENTION: /* by attention.c */
    case HD_FUSED_FAMILY_UPDATE:
        break;
    }
    snprintf(out, HD_FUSED_OPTIONS_CAPACITY, "-DWG=%d -DVEC=%d -DMR=%d", p->wg, p->vec, p->mr);
}
