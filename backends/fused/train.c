/*
 * Residual add + RMS norm (forward and backward), cross-entropy and its LM-head form on the
 * device (kernels/add_rms_norm.cl, cross_entropy.cl; the LM head's products on the tiled
 * engine, tile.c). Every kernel a call launches is built, every tiled product prepared and
 * every scratch buffer taken before the first launch, so that a refusal leaves the outputs as
 * they were; a launch the device refuses after an output was written says so
 * (hd__error_outputs_changed). Kernel parameters: the row family's (WG, ROWS, VEC, CACHE), the
 * tiled family's for the LM head's logits.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/fused/internal.h"
#include "core/op.h"

/* The backward's column launches: work-items per group of the partials (a few warps on any
 * device), rows per chunk of partials (enough work-items to fill a device from a few thousand
 * rows, short chains of dependent adds), and the combine's work-group, columns by slices of
 * each column's partials (add_rms_norm.cl's COMBINE_COLS and COMBINE_SLICES defaults). */
#define GRADS_GROUP   64
#define GRADS_CHUNK   256
#define COMBINE_COLS  32
#define COMBINE_GROUP (COMBINE_COLS * 8)
/* The backward's single pass: vectors per work-item held in registers at most, work-items per
 * group at least, and per slot (a row) at most. */
#define SINGLE_PASS_CACHE_MAX 4
#define SINGLE_PASS_GROUP     256
#define SINGLE_PASS_SLOT_MAX  512
/* The tiled engine's largest tile rows: chunks of whole tiles leave no wave of dh's product
 * (chunk rows x D, the vocabulary deep) to a row of tiles nearly empty. */
#define LOGITS_CHUNK_ALIGN 128
/* Cross-entropy's cluster kernel: work-items per group by the rule, the fewest that hold a row
 * (larger groups leave a cluster's eight waiting for multiprocessors to free at once), and
 * vectors each holds at most (its registers; the CACHE parameter's range). Past
 * CE_CLUSTER_REGISTERS_ALONE vectors a work-item, the rule keeps CE_CLUSTER_LOCAL_CACHE of them
 * in registers (also LOCAL=1's default), or a multiple where two work-groups' local memory
 * would not hold the rest, and the rest in local memory, so that the registers of more
 * work-groups fit a multiprocessor. */
#define CE_CLUSTER_GROUP           256
#define CE_CLUSTER_GROUP_MAX       512
#define CE_CLUSTER_CACHE_MAX       16
#define CE_CLUSTER_REGISTERS_ALONE 8
#define CE_CLUSTER_LOCAL_CACHE     4

static size_t ceil_div(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

static size_t row_groups(size_t rows, const hd_fused_params *p)
{
    return ceil_div(rows, (size_t)p->rows);
}

/* Builds (or finds built) each named kernel of the program before anything is launched. */
static hd_status build_first(hd_fused *f, hd_context *ctx, hd_fused_program program,
                             const char *options, const char *const names[], const size_t groups[],
                             hd_kernel *kernels[], int count)
{
    hd_status s = HD_OK;
    for (int i = 0; i < count && s == HD_OK; i++)
        s = hd__fused_kernel(f, ctx, program, options, names[i], groups[i], &kernels[i]);
    return s;
}

/* The row family's parameters for rows of cols and their build options. */
static hd_status row_options(hd_fused *f, hd_context *ctx, const char *variant, size_t cols,
                             hd_fused_params *p, bool *cached,
                             char options[HD_FUSED_OPTIONS_CAPACITY])
{
    hd_status s = hd__fused_rows_params(f, ctx, variant, cols, p, cached);
    if (s == HD_OK)
        hd__fused_options(HD_FUSED_FAMILY_ROWS, p, 0, options);
    return s;
}

/* ---- residual add + RMS norm ---- */

/* in: x, r, weight; out: h, y. One launch: the row held in registers where it fits. */
hd_status hd__fused_add_rms_norm(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    hd_fused_params p;
    bool cached;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd_kernel *k;
    hd_status s = row_options(f, ctx, a->variant, a->cols, &p, &cached, options);
    if (s == HD_OK)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ADD_RMS_NORM, options,
                             cached ? "add_rms_norm_cached" : "add_rms_norm_looped", (size_t)p.wg,
                             &k);
    if (s != HD_OK)
        return s;
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols;
    float eps = a->eps;
    const hd_fused_arg list[] = {
        HD_FUSED_TENSOR(a->in[0]),  HD_FUSED_TENSOR(a->in[1]),  HD_FUSED_TENSOR(a->in[2]),
        HD_FUSED_TENSOR(a->out[0]), HD_FUSED_TENSOR(a->out[1]), HD_FUSED_VALUE(rows),
        HD_FUSED_VALUE(cols),       HD_FUSED_VALUE(eps),
    };
    return hd__fused_launch_args(f, ctx, k, row_groups(a->rows, &p), (size_t)p.wg, list, 8);
}

/* dweight = the sum of each column's `chunks` partials in part, in a fixed order. */
static hd_status combine_partials(hd_fused *f, hd_context *ctx, hd_kernel *k,
                                  const struct hd_device_buffer *part, const hd_step_args *a,
                                  int32_t chunks)
{
    int32_t cols = (int32_t)a->cols;
    const hd_fused_arg list[] = {HD_FUSED_BUFFER(part), HD_FUSED_TENSOR(a->out[1]),
                                 HD_FUSED_VALUE(cols), HD_FUSED_VALUE(chunks)};
    return hd__fused_launch_args(f, ctx, k, ceil_div(a->cols, COMBINE_COLS), COMBINE_GROUP, list,
                                 4);
}

/* The single pass's parameters: slots of the fewest work-items (a power of two) whose
 * registers hold a row, as many rows per group as make SINGLE_PASS_GROUP work-items; false
 * where no slot holds the row. */
static bool single_pass_params(const hd_fused *f, const hd_fused_params *p, size_t cols,
                               hd_fused_params *one)
{
    size_t n = cols / (size_t)p->vec, slot = 1;
    while (slot * SINGLE_PASS_CACHE_MAX < n && slot < SINGLE_PASS_SLOT_MAX)
        slot *= 2;
    size_t wg = slot > SINGLE_PASS_GROUP ? slot : SINGLE_PASS_GROUP;
    if (n > SINGLE_PASS_CACHE_MAX * slot || wg > f->device_max_group)
        return false;
    *one = *p;
    one->wg = (int)wg;
    one->rows = (int)(wg / slot);
    one->cache = (int)ceil_div(n, slot);
    return true;
}

/* Whether the single pass loads a slot's next row during this one's reductions: the variant's
 * PREFETCH, else where the group is small enough for twice the registers of h, dy and dres (the
 * largest slots do not have them). */
static bool single_pass_prefetch(const hd_fused_params *one)
{
    return one->prefetch >= 0 ? one->prefetch == 1 : one->wg <= SINGLE_PASS_GROUP;
}

/* Work-groups of the single pass, each a chunk of rows (a multiple of ROWS, so that no slot
 * idles): the variant's UNITS per compute unit, else one where each keeps its next row's loads
 * in flight (prefetch), more where others must load while one reduces. Each group writes a row
 * of dweight's partials: more groups, more of them to add. */
static size_t single_pass_groups(const hd_fused *f, const hd_fused_params *one, size_t rows,
                                 size_t *chunk)
{
    size_t units = f->compute_units > 0 ? f->compute_units : 1;
    size_t per_unit = one->units > 0              ? (size_t)one->units
                      : single_pass_prefetch(one) ? 1
                      : one->cache >= 3           ? 2
                                                  : 4;
    size_t wanted = units * per_unit;
    size_t groups = rows < wanted ? rows : wanted;
    size_t per_group = (size_t)one->rows;
    *chunk = ceil_div(ceil_div(rows, groups), per_group) * per_group;
    return ceil_div(rows, *chunk);
}

/* The single pass's kernel and, with dweight, the combine's, from one program; *declined where
 * the compiled kernel cannot run a group of the slot's size (its registers), for the looped
 * kernels to take the call. */
static hd_status single_pass_kernels(hd_fused *f, hd_context *ctx, const hd_fused_params *one,
                                     bool dw, hd_kernel *k[2], bool *declined)
{
    char options[HD_FUSED_OPTIONS_CAPACITY], pass_options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_ROWS, one, 0, options);
    int len = snprintf(pass_options, sizeof pass_options, "%s -DPREFETCH=%d", options,
                       single_pass_prefetch(one));
    if (len < 0 || (size_t)len >= sizeof pass_options)
        return hd__error(ctx, HD_ERR_INTERNAL, "fused: build options too long");
    *declined = false;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_ADD_RMS_NORM, pass_options,
                                   "add_rms_norm_backward_fused", (size_t)one->wg, &k[0]);
    if (s == HD_ERR_UNSUPPORTED && one->wg > SINGLE_PASS_GROUP) {
        hd__error_clear(ctx);
        *declined = true;
        return HD_OK;
    }
    if (s == HD_OK && dw)
        s = hd__fused_kernel(f, ctx, HD_FUSED_ADD_RMS_NORM, pass_options,
                             "add_rms_norm_weight_combine", COMBINE_GROUP, &k[1]);
    return s;
}

/* dh (and dweight's partials per group, then their combine) in one pass over h and dy, where a
 * row fits a slot's registers. *done: whether it ran (or failed) here. */
static hd_status backward_single_pass(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                                      const hd_step_args *a, bool *done)
{
    hd_fused_params one;
    hd_kernel *k[2];
    bool declined = false, dw = a->out[1] != NULL;
    *done = single_pass_params(f, p, a->cols, &one);
    if (!*done)
        return HD_OK;
    hd_status s = single_pass_kernels(f, ctx, &one, dw, k, &declined);
    *done = !declined;
    if (s != HD_OK || declined)
        return s;
    size_t chunk, groups = single_pass_groups(f, &one, a->rows, &chunk);
    struct hd_device_buffer *part = NULL;
    if (dw && groups > SIZE_MAX / sizeof(float) / a->cols)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: %zu x %zu too large for the partials",
                         a->rows, a->cols);
    if (dw)
        s = hd__fused_buffer(f, ctx, groups * a->cols * sizeof(float), &part);
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols, nchunk = (int32_t)chunk;
    float eps = a->eps;
    const hd_fused_arg list[] = {
        HD_FUSED_TENSOR(a->in[0]), HD_FUSED_TENSOR(a->in[1]),  HD_FUSED_TENSOR(a->in[2]),
        HD_FUSED_TENSOR(a->in[3]), HD_FUSED_TENSOR(a->out[0]), HD_FUSED_BUFFER(part),
        HD_FUSED_VALUE(rows),      HD_FUSED_VALUE(cols),       HD_FUSED_VALUE(eps),
        HD_FUSED_VALUE(nchunk),
    };
    if (s == HD_OK)
        s = hd__fused_launch_args(f, ctx, k[0], groups, (size_t)one.wg, list, 10);
    if (s == HD_OK && dw && (s = combine_partials(f, ctx, k[1], part, a, (int32_t)groups)) != HD_OK)
        hd__error_outputs_changed(ctx); /* dh is written (over dy or dres, in place) */
    hd__fused_buffer_release(f, part);
    return s;
}

/* dh alone on rows too long for the registers: per row its statistics, mean(g * xhat) and dh,
 * each a pass over the row. */
static hd_status backward_rows(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                               const char *options, const hd_step_args *a)
{
    hd_kernel *k;
    hd_status s = hd__fused_kernel(f, ctx, HD_FUSED_ADD_RMS_NORM, options,
                                   "add_rms_norm_backward_rows", (size_t)p->wg, &k);
    if (s != HD_OK)
        return s;
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols;
    float eps = a->eps;
    const hd_fused_arg list[] = {
        HD_FUSED_TENSOR(a->in[0]), HD_FUSED_TENSOR(a->in[1]),  HD_FUSED_TENSOR(a->in[2]),
        HD_FUSED_TENSOR(a->in[3]), HD_FUSED_TENSOR(a->out[0]), HD_FUSED_VALUE(rows),
        HD_FUSED_VALUE(cols),      HD_FUSED_VALUE(eps),
    };
    return hd__fused_launch_args(f, ctx, k, row_groups(a->rows, p), (size_t)p->wg, list, 8);
}

/* The long rows' launches in order: the rows' statistics, dweight's partials per chunk of rows
 * and column, their combine (dweight written), then dh (which may overwrite dy). */
enum { LONG_STATS, LONG_PARTIALS, LONG_COMBINE, LONG_APPLY, LONG_KERNELS };

typedef struct long_rows {
    hd_kernel *k[LONG_KERNELS];
    struct hd_device_buffer *stats, *part;
    size_t chunks, span; /* chunks of GRADS_CHUNK rows; columns rounded up to GRADS_GROUP */
} long_rows;

static hd_status long_rows_prepare(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                                   const char *options, const hd_step_args *a, long_rows *l)
{
    static const char *const names[LONG_KERNELS] = {
        "add_rms_norm_backward_stats", "add_rms_norm_weight_partials",
        "add_rms_norm_weight_combine", "add_rms_norm_backward_apply"};
    const size_t groups[LONG_KERNELS] = {(size_t)p->wg, GRADS_GROUP, COMBINE_GROUP, (size_t)p->wg};
    l->stats = l->part = NULL;
    l->chunks = ceil_div(a->rows, GRADS_CHUNK);
    l->span = ceil_div(a->cols, GRADS_GROUP) * GRADS_GROUP;
    if (l->span > (size_t)INT_MAX / l->chunks || l->chunks > SIZE_MAX / sizeof(float) / a->cols)
        return hd__error(ctx, HD_ERR_UNSUPPORTED, "fused: %zu x %zu too large for the partials",
                         a->rows, a->cols);
    hd_status s =
        build_first(f, ctx, HD_FUSED_ADD_RMS_NORM, options, names, groups, l->k, LONG_KERNELS);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, 4 * a->rows * sizeof(float), &l->stats);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, l->chunks * a->cols * sizeof(float), &l->part);
    return s;
}

static hd_status long_rows_launch(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                                  const hd_step_args *a, const long_rows *l)
{
    int32_t rows = (int32_t)a->rows, cols = (int32_t)a->cols, chunk = GRADS_CHUNK;
    int32_t chunks = (int32_t)l->chunks, span = (int32_t)l->span;
    float eps = a->eps;
    const hd_fused_arg stats[] = {
        HD_FUSED_TENSOR(a->in[0]), HD_FUSED_TENSOR(a->in[1]), HD_FUSED_TENSOR(a->in[2]),
        HD_FUSED_BUFFER(l->stats), HD_FUSED_VALUE(rows),      HD_FUSED_VALUE(cols),
        HD_FUSED_VALUE(eps),
    };
    const hd_fused_arg partials[] = {
        HD_FUSED_TENSOR(a->in[0]), HD_FUSED_TENSOR(a->in[2]), HD_FUSED_BUFFER(l->stats),
        HD_FUSED_BUFFER(l->part),  HD_FUSED_VALUE(rows),      HD_FUSED_VALUE(cols),
        HD_FUSED_VALUE(chunk),     HD_FUSED_VALUE(chunks),    HD_FUSED_VALUE(span),
    };
    const hd_fused_arg apply[] = {
        HD_FUSED_TENSOR(a->in[0]), HD_FUSED_TENSOR(a->in[1]), HD_FUSED_TENSOR(a->in[2]),
        HD_FUSED_TENSOR(a->in[3]), HD_FUSED_BUFFER(l->stats), HD_FUSED_TENSOR(a->out[0]),
        HD_FUSED_VALUE(rows),      HD_FUSED_VALUE(cols),
    };
    size_t groups = row_groups(a->rows, p);
    hd_status s = hd__fused_launch_args(f, ctx, l->k[LONG_STATS], groups, (size_t)p->wg, stats, 7);
    if (s == HD_OK)
        s = hd__fused_launch_args(f, ctx, l->k[LONG_PARTIALS], l->span / GRADS_GROUP * l->chunks,
                                  GRADS_GROUP, partials, 9);
    if (s == HD_OK)
        s = combine_partials(f, ctx, l->k[LONG_COMBINE], l->part, a, chunks);
    if (s == HD_OK && (s = hd__fused_launch_args(f, ctx, l->k[LONG_APPLY], groups, (size_t)p->wg,
                                                 apply, 8)) != HD_OK)
        hd__error_outputs_changed(ctx); /* dweight is written */
    return s;
}

/* dh and dweight on rows too long for the registers: deterministic, without atomics. */
static hd_status backward_long_rows(hd_fused *f, hd_context *ctx, const hd_fused_params *p,
                                    const char *options, const hd_step_args *a)
{
    long_rows l;
    hd_status s = long_rows_prepare(f, ctx, p, options, a, &l);
    if (s == HD_OK)
        s = long_rows_launch(f, ctx, p, a, &l);
    hd__fused_buffer_release(f, l.stats);
    hd__fused_buffer_release(f, l.part);
    return s;
}

/* in: h, weight, dy, dres (may be NULL); out: dh, dweight (may be NULL). The single pass where a
 * row fits a slot's registers; else the rows kernel, or with dweight the four launches. */
hd_status hd__fused_add_rms_norm_backward(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    hd_fused_params p;
    bool cached, done;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd_status s = row_options(f, ctx, a->variant, a->cols, &p, &cached, options);
    if (s == HD_OK)
        s = backward_single_pass(f, ctx, &p, a, &done);
    if (s != HD_OK || done)
        return s;
    return a->out[1] != NULL ? backward_long_rows(f, ctx, &p, options, a)
                             : backward_rows(f, ctx, &p, options, a);
}

/* ---- cross-entropy ---- */

/* The kernels of one call over rows of vocab logits: the rows' losses (and dlogits), then
 * their mean. The rows kernel is the looped one (CACHE does not apply), or with CLUSTER the
 * cluster kernel, each row held by `cluster` work-groups, in their registers and, with LOCAL,
 * their local memory, which exchange their rows' pairs through `pairs` (taken with the call's
 * other scratch, ce_take_pairs). */
typedef struct ce_kernels {
    hd_fused_params p;
    hd_kernel *rows, *mean;
    size_t cluster;        /* work-groups sharing a row, 0: the looped kernel */
    size_t launch_cluster; /* work-groups per cluster of the launch: 1 where emulated */
    size_t held;           /* vectors per work-item in local memory (LOCAL_CACHE) */
    struct hd_device_buffer *pairs;
} ce_kernels;

/* How each work-item of the cluster kernel holds its vectors of a row. */
typedef struct ce_hold {
    size_t cache; /* in registers (CACHE) */
    size_t held;  /* in local memory after them (LOCAL_CACHE) */
} ce_hold;

/* Local memory a work-group of wg may take for its held vectors where `groups` of them share
 * what the device gives one group (on Hopper's CUDA runtime 227 KiB, nearly a multiprocessor's
 * 228), less the kernel's own (its reduction's pairs). */
static size_t ce_local_limit(const hd_fused *f, size_t wg, size_t groups)
{
    size_t total = (f->stage_mem > 0 ? f->stage_mem : f->local_mem) / groups;
    size_t own = wg * 2 * sizeof(float);
    return total > own ? total - own : 0;
}

/* The local memory of a work-group of wg holding `held` vectors of vec a work-item (floats,
 * whatever the logits' type: the kernel keeps them widened). */
static size_t ce_held_bytes(size_t held, size_t wg, size_t vec)
{
    return held * wg * vec * sizeof(float);
}

/* Whether `cluster` groups of wg work-items hold a row of nv vectors of vec, and how (*h):
 * without local, in registers alone, `cache` each where the variant names it (> 0), else as
 * many as the row needs; with local, `cache` (else CE_CLUSTER_LOCAL_CACHE) in registers and
 * the rest in local memory, `groups` work-groups' worth of it within the device's for one. */
static bool ce_cluster_fits(const hd_fused *f, size_t nv, size_t vec, size_t cluster, size_t wg,
                            int cache, bool local, size_t groups, ce_hold *h)
{
    size_t need = ceil_div(ceil_div(nv, cluster), wg);
    size_t in_registers = local ? CE_CLUSTER_LOCAL_CACHE : need;
    h->cache = cache > 0 ? (size_t)cache : need < in_registers ? need : in_registers;
    h->held = local && need > h->cache ? need - h->cache : 0;
    return need <= h->cache + h->held && h->cache <= CE_CLUSTER_CACHE_MAX &&
           ce_held_bytes(h->held, wg, vec) <= ce_local_limit(f, wg, groups);
}

/* The rule where no variant is given: a row read once from a cluster of HD_RT_CLUSTER_MAX
 * groups where the device has such clusters and each work-item holds a vector at least. Up to
 * CE_CLUSTER_REGISTERS_ALONE vectors a work-item in registers; past it, where the vectors are
 * of 4 (16 bytes, which cp.async copies; clusters mean sm_90, which has it), the fewest
 * registers, in steps of CE_CLUSTER_LOCAL_CACHE, that leave the rest in local memory two
 * work-groups can share (one alone would leave its multiprocessor idle at the cluster's
 * barrier); else in the registers of larger groups. p's looped parameters otherwise. */
static void ce_cluster_rule(const hd_fused *f, size_t vocab, hd_fused_params *p)
{
    size_t vec = (size_t)p->vec, nv = vocab / vec, wg = CE_CLUSTER_GROUP;
    ce_hold h;
    if (f->clusters < HD_RT_CLUSTER_MAX || wg > f->device_max_group || nv < HD_RT_CLUSTER_MAX * wg)
        return;
    bool local = false;
    if (vec == 4 && ceil_div(ceil_div(nv, HD_RT_CLUSTER_MAX), wg) > CE_CLUSTER_REGISTERS_ALONE)
        for (int cache = CE_CLUSTER_LOCAL_CACHE; cache <= CE_CLUSTER_CACHE_MAX && !local;
             cache += CE_CLUSTER_LOCAL_CACHE)
            local = ce_cluster_fits(f, nv, vec, HD_RT_CLUSTER_MAX, wg, cache, true, 2, &h);
    if (!local) {
        while (wg < CE_CLUSTER_GROUP_MAX &&
               !ce_cluster_fits(f, nv, vec, HD_RT_CLUSTER_MAX, wg, 0, false, 1, &h))
            wg *= 2;
        if (wg > f->device_max_group || nv < HD_RT_CLUSTER_MAX * wg ||
            !ce_cluster_fits(f, nv, vec, HD_RT_CLUSTER_MAX, wg, 0, false, 1, &h))
            return;
    }
    p->cluster = HD_RT_CLUSTER_MAX;
    p->wg = (int)wg;
    p->rows = 1;
    p->cache = (int)h.cache;
    p->local = local;
}

/* The parameters of a call over rows of vocab logits with variant, every refusal said: the rows
 * family's; with CLUSTER (named) the cluster kernel's, checked against the device's clusters,
 * registers and local memory; without a variant the rule. A variant that leaves CLUSTER out
 * names the looped kernel. */
static hd_status ce_params(hd_fused *f, hd_context *ctx, const char *variant, size_t vocab,
                           ce_kernels *k)
{
    bool cached;
    k->pairs = NULL;
    k->held = 0;
    hd_fused_params named; /* what the variant itself says, defaults left open */
    hd_status s = hd__fused_params_parse(ctx, HD_FUSED_FAMILY_ROWS, variant, &named);
    if (s == HD_OK)
        s = hd__fused_rows_params(f, ctx, variant, vocab, &k->p, &cached);
    if (s != HD_OK)
        return s;
    k->p.cache = 0;
    k->p.local = 0;
    if (named.cluster == 0 && (variant == NULL || *variant == '\0'))
        ce_cluster_rule(f, vocab, &k->p);
    else if (named.cluster == 0 && named.local)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: cross-entropy's LOCAL=1 holds rows in the cluster kernel: name "
                         "CLUSTER too");
    if (named.cluster > 0) {
        size_t cluster = (size_t)named.cluster;
        if (named.rows > 1)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "fused: cross-entropy's CLUSTER takes a row per work-group, not "
                             "ROWS=%d",
                             named.rows);
        if (cluster > 1 && cluster > f->clusters && !f->clusters_emulated)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: CLUSTER=%zu needs thread-block clusters of %zu, the device's "
                             "runtime has %s%zu",
                             cluster, cluster, f->clusters > 0 ? "up to " : "", f->clusters);
        k->p.cluster = (int)cluster;
        k->p.rows = 1;
        k->p.cache = named.cache;
        k->p.local = named.local;
    }
    k->cluster = (size_t)k->p.cluster;
    k->launch_cluster = f->clusters_emulated ? 1 : k->cluster;
    if (k->cluster == 0)
        return HD_OK;
    size_t wg = (size_t)k->p.wg, vec = (size_t)k->p.vec;
    ce_hold h;
    if (!ce_cluster_fits(f, vocab / vec, vec, k->cluster, wg, k->p.cache, k->p.local, 1, &h)) {
        if (!k->p.local)
            return hd__error(ctx, HD_ERR_UNSUPPORTED,
                             "fused: a row of %zu logits is more than CLUSTER=%zu groups of %zu "
                             "work-items hold in %zu vectors each (at most %d)",
                             vocab, k->cluster, wg, h.cache, CE_CLUSTER_CACHE_MAX);
        return hd__error(ctx, HD_ERR_UNSUPPORTED,
                         "fused: a row of %zu logits is more than CLUSTER=%zu groups of %zu "
                         "work-items hold in %zu vectors each in registers (at most %d) and %zu "
                         "in local memory (%zu bytes a group, at most %zu here)",
                         vocab, k->cluster, wg, h.cache, CE_CLUSTER_CACHE_MAX, h.held,
                         ce_held_bytes(h.held, wg, vec), ce_local_limit(f, wg, 1));
    }
    k->p.cache = (int)h.cache;
    k->held = h.held;
    return HD_OK;
}

hd_status hd__fused_cross_entropy_params(hd_fused *f, hd_context *ctx, const char *variant,
                                         size_t vocab, hd_fused_params *p, size_t *held)
{
    ce_kernels k = {0};
    hd_status s = ce_params(f, ctx, variant, vocab, &k);
    *p = k.p;
    *held = k.held;
    return s;
}

static hd_status ce_build(hd_fused *f, hd_context *ctx, const char *variant, size_t vocab,
                          ce_kernels *k)
{
    hd_status s = ce_params(f, ctx, variant, vocab, k);
    if (s != HD_OK)
        return s;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    hd__fused_options(HD_FUSED_FAMILY_ROWS, &k->p, 0, options);
    if (k->cluster > 0) {
        size_t len = strlen(options);
        snprintf(options + len, sizeof options - len, " -DCLUSTER=%zu%s -DLOCAL_CACHE=%zu%s",
                 k->cluster, f->clusters_emulated ? " -DCLUSTER_EMULATE=1" : "", k->held,
                 k->held > 0 && f->mma && !f->mma_emulated ? " -DLOCAL_ASYNC=1" : "");
    }
    const char *const names[] = {k->cluster > 0 ? "cross_entropy_cluster" : "cross_entropy_rows",
                                 "cross_entropy_mean"};
    const size_t groups[] = {(size_t)k->p.wg, (size_t)k->p.wg};
    hd_kernel *built[2];
    s = build_first(f, ctx, HD_FUSED_CROSS_ENTROPY, options, names, groups, built, 2);
    k->rows = built[0];
    k->mean = built[1];
    return s;
}

/* The cluster kernel's pairs for launches of up to rows rows (none for the looped kernel). */
static hd_status ce_take_pairs(hd_fused *f, hd_context *ctx, ce_kernels *k, size_t rows)
{
    if (k->cluster == 0)
        return HD_OK;
    return hd__fused_buffer(f, ctx, rows * k->cluster * 2 * sizeof(float), &k->pairs);
}

/* One launch of the rows kernel: losses[i] for rows rows of logits, dlogits (NULL: none; may
 * be logits) scaled by inv_count. */
typedef struct ce_rows_call {
    const struct hd_device_buffer *logits, *targets, *losses, *dlogits;
    size_t rows, vocab;
    int32_t ignore_index;
    float inv_count;
} ce_rows_call;

static hd_status ce_rows(hd_fused *f, hd_context *ctx, const ce_kernels *k, const ce_rows_call *c)
{
    int32_t rows = (int32_t)c->rows, cols = (int32_t)c->vocab, ignore = c->ignore_index;
    float inv = c->inv_count;
    if (k->cluster == 0) {
        const hd_fused_arg list[] = {
            HD_FUSED_BUFFER(c->logits), HD_FUSED_BUFFER(c->targets), HD_FUSED_BUFFER(c->losses),
            HD_FUSED_BUFFER(NULL),      HD_FUSED_BUFFER(c->dlogits), HD_FUSED_VALUE(rows),
            HD_FUSED_VALUE(cols),       HD_FUSED_VALUE(ignore),      HD_FUSED_VALUE(inv),
        };
        return hd__fused_launch_args(f, ctx, k->rows, row_groups(c->rows, &k->p), (size_t)k->p.wg,
                                     list, 9);
    }
    const hd_fused_arg list[] = {
        HD_FUSED_BUFFER(c->logits),
        HD_FUSED_BUFFER(c->targets),
        HD_FUSED_BUFFER(c->losses),
        HD_FUSED_BUFFER(NULL),
        HD_FUSED_BUFFER(c->dlogits),
        HD_FUSED_BUFFER(k->pairs),
        HD_FUSED_VALUE(rows),
        HD_FUSED_VALUE(cols),
        HD_FUSED_VALUE(ignore),
        HD_FUSED_VALUE(inv),
        HD_FUSED_LOCAL(ce_held_bytes(k->held, (size_t)k->p.wg, (size_t)k->p.vec)),
    };
    return hd__fused_launch_cluster_args(f, ctx, k->rows, c->rows * k->launch_cluster,
                                         (size_t)k->p.wg, k->launch_cluster, list,
                                         k->held > 0 ? 11 : 10);
}

/* loss = the rows' losses added in a fixed order, times inv_count: one work-group. */
static hd_status ce_mean(hd_fused *f, hd_context *ctx, const ce_kernels *k,
                         const struct hd_device_buffer *losses, const hd_tensor *loss, size_t rows,
                         float inv_count)
{
    int32_t n = (int32_t)rows;
    float inv = inv_count;
    const hd_fused_arg list[] = {HD_FUSED_BUFFER(losses), HD_FUSED_TENSOR(loss), HD_FUSED_VALUE(n),
                                 HD_FUSED_VALUE(inv)};
    return hd__fused_launch_args(f, ctx, k->mean, 1, (size_t)k->p.wg, list, 4);
}

/* 1 / the rows counted: infinite for none, which makes the mean of no loss 0 * inf = NaN, as
 * PyTorch's, while every ignored row's gradient stays 0. */
static float inv_count(size_t counted)
{
    return (float)(1.0 / (double)counted);
}

/* in: logits; out: loss, dlogits (may be NULL, may be logits). */
hd_status hd__fused_cross_entropy(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    ce_kernels k = {0};
    const struct hd_device_buffer *targets = NULL;
    struct hd_device_buffer *uploaded = NULL, *losses = NULL;
    hd_status s = ce_build(f, ctx, a->variant, a->vocab, &k);
    if (s == HD_OK)
        s = ce_take_pairs(f, ctx, &k, a->rows);
    if (s == HD_OK)
        s = hd__fused_ids(f, ctx, a, &targets, &uploaded);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, a->rows * sizeof(float), &losses);
    float inv = inv_count(a->counted);
    const hd_tensor *dl = a->out[1];
    const ce_rows_call c = {a->in[0]->state->device,
                            targets,
                            losses,
                            dl != NULL ? dl->state->device : NULL,
                            a->rows,
                            a->vocab,
                            a->ignore_index,
                            inv};
    if (s == HD_OK)
        s = ce_rows(f, ctx, &k, &c);
    if (s == HD_OK && (s = ce_mean(f, ctx, &k, losses, a->out[0], a->rows, inv)) != HD_OK &&
        dl != NULL)
        hd__error_outputs_changed(ctx); /* dlogits is written (over logits, in place) */
    hd__fused_buffer_release(f, uploaded);
    hd__fused_buffer_release(f, losses);
    hd__fused_buffer_release(f, k.pairs);
    return s;
}

/* ---- cross-entropy of the LM head ---- */

/* One call of hd_linear_cross_entropy: the tokens in chunks of at most `chunk`, each through
 * logits_c = h_c * w^T, the rows kernel in place on them, dh_c = dlogits_c * w. One chunk reads
 * h, the targets and the losses and writes dh where they are; several go through scratch, each
 * chunk copied in and out at its offset. The products run on the runtime's vendor GEMM where
 * it has one (cuBLASLt, on the stream the rows kernel runs on), else on the tiled engine. */
typedef struct lm_head {
    const hd_step_args *a;
    size_t chunk;
    bool whole;  /* one chunk */
    bool vendor; /* the products on the vendor GEMM */
    float inv_count;
    ce_kernels ce;
    const struct hd_device_buffer *targets;                     /* all rows */
    struct hd_device_buffer *uploaded_targets;                  /* targets, where uploaded */
    struct hd_device_buffer *losses, *logits;                   /* all rows; the chunk's logits */
    struct hd_device_buffer *h_c, *targets_c, *losses_c, *dh_c; /* scratch: several chunks */
    hd_fused_tile_call products[2][2]; /* [logits, dh][a full chunk, the last] */
} lm_head;

/* Rows per chunk: as few chunks as `bytes` of logits allow, of equal rows, rounded up to
 * whole tiles where that stays within it (2048 rows of 128256 words in HD_FUSED_LOGITS_BYTES:
 * two chunks of 1024, where 1046 and 1002 left dh's product a ninth row of tiles holding 22
 * rows, and a third wave). */
size_t hd__fused_lm_head_chunk_rows(size_t rows, size_t vocab, size_t bytes)
{
    size_t most = bytes / sizeof(float) / vocab;
    most = most > 0 ? most : 1;
    if (most >= rows)
        return rows;
    size_t even = ceil_div(rows, ceil_div(rows, most));
    size_t whole = ceil_div(even, LOGITS_CHUNK_ALIGN) * LOGITS_CHUNK_ALIGN;
    return whole <= most ? whole : even;
}

/* logits_c (m x V) = h_c * w^T (w stored V x D), or dh_c (m x D) = dlogits_c * w. */
static hd_fused_tile_call lm_head_product(const lm_head *l, bool dh, size_t m)
{
    const hd_step_args *a = l->a;
    size_t d = a->cols, v = a->vocab;
    hd_devmem w = a->in[1]->state->device->mem, logits = l->logits->mem;
    hd_devmem h = l->whole ? a->in[0]->state->device->mem : l->h_c->mem;
    hd_devmem out = dh ? (l->whole ? a->out[1]->state->device->mem : l->dh_c->mem) : logits;
    hd_fused_tile_call c = {
        .m = m,
        .n = dh ? d : v,
        .k = dh ? v : d,
        .batch = 1,
        .alpha = 1.0f,
        .beta = 0.0f,
        .a = dh ? (hd_fused_operand){logits, v, false} : (hd_fused_operand){h, d, false},
        .b = {w, d, !dh},
        .c = out,
        .ldc = dh ? d : v,
        .precision = a->precision,
        .variant = dh || hd__fused_is_vendor_variant(a->variant) ? NULL : a->variant};
    return c;
}

/* Whether the products of an LM head call run on the vendor GEMM: where variant names it (its
 * prepare then refuses what the vendor GEMM cannot take), and where no variant is given and it
 * takes them (the rule: its products run there at the vendor's rate, which the tiled engine's
 * FMA kernel does not reach on large fp32 products); the tiled engine otherwise. */
static bool lm_head_on_vendor(const hd_fused *f, hd_context *ctx, const char *variant,
                              const hd_fused_tile_call *logits)
{
    if (hd__fused_is_vendor_variant(variant))
        return true;
    return (variant == NULL || variant[0] == '\0') && hd__fused_vendor_takes(f, ctx, logits);
}

static hd_status lm_head_gemm(hd_fused *f, hd_context *ctx, const lm_head *l,
                              const hd_fused_tile_call *c)
{
    return l->vendor ? hd__fused_vendor_gemm(f, ctx, c) : hd__fused_tile_gemm(f, ctx, c);
}

static hd_status lm_head_scratch(hd_fused *f, hd_context *ctx, lm_head *l)
{
    const hd_step_args *a = l->a;
    size_t n = l->chunk, d = a->cols;
    hd_status s = hd__fused_ids(f, ctx, a, &l->targets, &l->uploaded_targets);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, a->rows * sizeof(float), &l->losses);
    if (s == HD_OK)
        s = hd__fused_buffer(f, ctx, n * a->vocab * sizeof(float), &l->logits);
    if (s == HD_OK && !l->whole)
        s = hd__fused_buffer(f, ctx, n * d * sizeof(float), &l->h_c);
    if (s == HD_OK && !l->whole)
        s = hd__fused_buffer(f, ctx, n * sizeof(int32_t), &l->targets_c);
    if (s == HD_OK && !l->whole)
        s = hd__fused_buffer(f, ctx, n * sizeof(float), &l->losses_c);
    if (s == HD_OK && !l->whole && a->out[1] != NULL)
        s = hd__fused_buffer(f, ctx, n * d * sizeof(float), &l->dh_c);
    return s;
}

static void lm_head_release(hd_fused *f, lm_head *l)
{
    struct hd_device_buffer *const all[] = {
        l->uploaded_targets, l->losses,   l->logits, l->h_c,
        l->targets_c,        l->losses_c, l->dh_c,   l->ce.pairs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd__fused_buffer_release(f, all[i]);
}

/* Everything that can refuse the call, before anything is queued: the kernels, the scratch,
 * and each product of a full chunk and of the last. */
static hd_status lm_head_prepare(hd_fused *f, hd_context *ctx, lm_head *l)
{
    const hd_step_args *a = l->a;
    size_t last = a->rows - (ceil_div(a->rows, l->chunk) - 1) * l->chunk;
    hd_status s = ce_build(f, ctx, NULL, a->vocab, &l->ce);
    if (s == HD_OK)
        s = ce_take_pairs(f, ctx, &l->ce, l->chunk);
    if (s == HD_OK)
        s = lm_head_scratch(f, ctx, l);
    int products = a->out[1] != NULL ? 2 : 1;
    for (int dh = 0; dh < products && s == HD_OK; dh++)
        for (int which = 0; which < 2 && s == HD_OK; which++)
            l->products[dh][which] = lm_head_product(l, dh, which == 0 ? l->chunk : last);
    l->vendor = s == HD_OK && lm_head_on_vendor(f, ctx, a->variant, &l->products[0][0]);
    for (int dh = 0; dh < products && s == HD_OK; dh++)
        for (int which = 0; which < 2 && s == HD_OK; which++)
            s = l->vendor ? hd__fused_vendor_prepare(f, ctx, &l->products[dh][which])
                          : hd__fused_tile_prepare(f, ctx, &l->products[dh][which]);
    return s;
}

/* Rows r0 .. r0 + n - 1: h_c in, its logits, their losses (and dlogits in place) and, with
 * dh, dh_c out. *wrote: whether dh has been written. */
static hd_status lm_head_chunk(hd_fused *f, hd_context *ctx, const lm_head *l, size_t r0, size_t n,
                               bool *wrote)
{
    const hd_step_args *a = l->a;
    const hd_tensor *dh = a->out[1];
    size_t d = a->cols, which = n == l->chunk ? 0 : 1;
    hd_status s = HD_OK;
    if (!l->whole) {
        s = hd__fused_copy(f, ctx, l->h_c, 0, a->in[0]->state->device, r0 * d * sizeof(float),
                           n * d * sizeof(float));
        if (s == HD_OK)
            s = hd__fused_copy(f, ctx, l->targets_c, 0, l->targets, r0 * sizeof(int32_t),
                               n * sizeof(int32_t));
    }
    if (s == HD_OK)
        s = lm_head_gemm(f, ctx, l, &l->products[0][which]);
    const ce_rows_call c = {l->logits,
                            l->whole ? l->targets : l->targets_c,
                            l->whole ? l->losses : l->losses_c,
                            dh != NULL ? l->logits : NULL,
                            n,
                            a->vocab,
                            a->ignore_index,
                            l->inv_count};
    if (s == HD_OK)
        s = ce_rows(f, ctx, &l->ce, &c);
    if (s == HD_OK && !l->whole)
        s = hd__fused_copy(f, ctx, l->losses, r0 * sizeof(float), l->losses_c, 0,
                           n * sizeof(float));
    if (s != HD_OK || dh == NULL)
        return s;
    hd_fused_tile_call dh_product = l->products[1][which];
    dh_product.b_unchanged = r0 > 0; /* w, which an earlier chunk's dh may have copied */
    s = lm_head_gemm(f, ctx, l, &dh_product);
    if (s == HD_OK && !l->whole)
        s = hd__fused_copy(f, ctx, dh->state->device, r0 * d * sizeof(float), l->dh_c, 0,
                           n * d * sizeof(float));
    *wrote = *wrote || s == HD_OK;
    return s;
}

/* in: h, w; out: loss, dh (may be NULL). The rows' losses gathered over the chunks, their mean
 * taken once. */
hd_status hd__fused_linear_cross_entropy(void *state, hd_context *ctx, const hd_op_args *args)
{
    hd_fused *f = state;
    const hd_step_args *a = &args->step;
    lm_head l = {.a = a,
                 .chunk = hd__fused_lm_head_chunk_rows(a->rows, a->vocab, f->logits_bytes),
                 .inv_count = inv_count(a->counted)};
    l.whole = l.chunk == a->rows;
    hd_status s = lm_head_prepare(f, ctx, &l);
    bool wrote = false;
    for (size_t r0 = 0; r0 < a->rows && s == HD_OK; r0 += l.chunk)
        s = lm_head_chunk(f, ctx, &l, r0, a->rows - r0 < l.chunk ? a->rows - r0 : l.chunk, &wrote);
    if (s == HD_OK)
        s = ce_mean(f, ctx, &l.ce, l.losses, a->out[0], a->rows, l.inv_count);
    if (s != HD_OK && wrote)
        hd__error_outputs_changed(ctx);
    lm_head_release(f, &l);
    return s;
}

/* ---- what the dispatcher and the tuner ask ---- */

bool hd__fused_train_op(hd_op op)
{
    return op == HD_OP_ADD_RMS_NORM || op == HD_OP_ADD_RMS_NORM_BACKWARD ||
           op == HD_OP_CROSS_ENTROPY || op == HD_OP_LINEAR_CROSS_ENTROPY;
}

/* Sizes within the kernels' int arguments; the backward's statistics take 4 floats a row. */
bool hd__fused_train_supports(hd_op op, const hd_shape *s)
{
    for (int d = 0; d < hd__op(op)->dims; d++)
        if (s->dim[d] > (size_t)INT_MAX)
            return false;
    return op != HD_OP_ADD_RMS_NORM_BACKWARD || s->dim[0] <= (size_t)INT_MAX / 4;
}

/* The logits product of an LM head call of shape s (rows, dim, vocab), without buffers. */
static hd_fused_tile_call lm_head_logits_call(const hd_fused *f, const hd_shape *s,
                                              const char *variant)
{
    size_t rows = s->dim[0], d = s->dim[1], v = s->dim[2];
    return (hd_fused_tile_call){.m = hd__fused_lm_head_chunk_rows(rows, v, f->logits_bytes),
                                .n = v,
                                .k = d,
                                .batch = 1,
                                .a = {NULL, d, false},
                                .b = {NULL, d, true},
                                .ldc = v,
                                .precision = s->precision,
                                .variant = variant};
}

hd_status hd__fused_train_check(hd_fused *f, hd_context *ctx, hd_op op, const hd_shape *s,
                                const char *variant)
{
    if (op == HD_OP_LINEAR_CROSS_ENTROPY) {
        hd_fused_tile_call c = lm_head_logits_call(f, s, variant);
        return hd__fused_is_vendor_variant(variant) ? hd__fused_vendor_check(f, ctx, &c)
                                                    : hd__fused_tile_check(f, ctx, &c);
    }
    if (op == HD_OP_CROSS_ENTROPY) {
        ce_kernels k;
        return ce_params(f, ctx, variant, s->dim[1], &k);
    }
    hd_fused_params p;
    bool cached;
    return hd__fused_rows_params(f, ctx, variant, s->dim[1], &p, &cached);
}

/* Rows family variants: the forward's register capacity and group shapes; the backward's and
 * cross-entropy's looped kernels, where CACHE does not apply; the backward's single pass, which
 * sizes its own slots and takes UNITS and PREFETCH alone; cross-entropy's cluster kernel, whose
 * CACHE follows from the vocabulary (refused where its registers, and with LOCAL its local
 * memory, cannot hold a row), listed where the device runs clusters of its size. */
static const struct {
    hd_op op;
    const char *text;
    size_t wg, cluster; /* its work-groups' size and clusters' (0: none) */
} row_variants[] = {
    {HD_OP_ADD_RMS_NORM, "WG=256 ROWS=1 CACHE=4", 256, 0},
    {HD_OP_ADD_RMS_NORM, "WG=256 ROWS=4 CACHE=4", 256, 0},
    {HD_OP_ADD_RMS_NORM, "WG=512 ROWS=1 CACHE=4", 512, 0},
    {HD_OP_ADD_RMS_NORM, "WG=1024 ROWS=1 CACHE=8", 1024, 0},
    {HD_OP_ADD_RMS_NORM, "WG=256 ROWS=1 CACHE=0", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "WG=256 ROWS=4", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "WG=256 ROWS=1", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "WG=512 ROWS=1", 512, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "WG=1024 ROWS=1", 1024, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "UNITS=2", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "UNITS=2 PREFETCH=0", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "UNITS=4 PREFETCH=0", 256, 0},
    {HD_OP_ADD_RMS_NORM_BACKWARD, "UNITS=8 PREFETCH=0", 256, 0},
    {HD_OP_CROSS_ENTROPY, "WG=256 ROWS=1", 256, 0},
    {HD_OP_CROSS_ENTROPY, "WG=512 ROWS=1", 512, 0},
    {HD_OP_CROSS_ENTROPY, "WG=1024 ROWS=1", 1024, 0},
    {HD_OP_CROSS_ENTROPY, "WG=128 ROWS=1", 128, 0},
    {HD_OP_CROSS_ENTROPY, "WG=256 ROWS=4", 256, 0},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=8 WG=256", 256, 8},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=8 WG=256 LOCAL=1", 256, 8},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=8 WG=256 CACHE=8 LOCAL=1", 256, 8},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=8 WG=128", 128, 8},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=8 WG=512", 512, 8},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=4 WG=512", 512, 4},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=4 WG=1024", 1024, 4},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=1 WG=1024", 1024, 1},
    {HD_OP_CROSS_ENTROPY, "CLUSTER=1 WG=512", 512, 1},
};

size_t hd__fused_train_variants(const hd_fused *f, hd_op op, const hd_shape *s, const char **out,
                                size_t max)
{
    if (op == HD_OP_LINEAR_CROSS_ENTROPY) {
        hd_fused_tile_call c = lm_head_logits_call(f, s, NULL);
        hd_shape logits = {.dim = {c.m, c.n, c.k}, .trans_b = true};
        size_t n = 0;
        if (max > 0 && hd__fused_vendor_takes(f, NULL, &c))
            out[n++] = HD_FUSED_VENDOR;
        return n + hd__fused_tile_variants(f, &logits, s->precision, out + n, max - n);
    }
    size_t n = 0;
    for (size_t i = 0; i < sizeof row_variants / sizeof row_variants[0] && n < max; i++)
        if (row_variants[i].op == op && row_variants[i].wg <= f->device_max_group &&
            (row_variants[i].cluster <= 1 || row_variants[i].cluster <= f->clusters ||
             f->clusters_emulated))
            out[n++] = row_variants[i].text;
    return n;
}
