/*
 * LoRA backward with W frozen, everything queued. Many tokens, or a tuned variant, on the
 * tiled GEMM engine (tile.c):
 *   u  = scale * dy * B^T       tokens x rank, a temporary
 *   h  = x * A                  tokens x rank, a temporary
 *   dx = dy * W^T + u * A^T     one launch: the rank-r product is summed in dx's own tiles (k
 *                               extended by the rank), so dx is written once
 *   dA = x^T * u                in x rank, k = tokens deep: split-K where tiles are few
 *   dB = scale * h^T * dy       rank x out, likewise
 * Every transpose and every layout (hd_lora_backward_ex) is read in place, dA and dB written as
 * A and B are stored (u^T * x and scale * dy^T * h where they are transposed); neither W^T nor
 * A*B is ever formed. Where W and A are stored transposed apart, u * A^T takes a launch of its
 * own after dx's (the engine's second product shares the first's transposes). accumulate
 * makes beta 1.
 * A tuned variant sets dx's product, the largest; the others take their shapes' defaults.
 * Few tokens (at most HD_FUSED_MAX_ROWS) and no variant, as the router says
 * (HD_FUSED_ROUTE_FEW_TOKENS): with a rank up to 16, in any layout, every gradient in one
 * launch (kernels/lora_backward.cl) where the sums of u its groups each make stay small
 * (one_launch_fits: small weights); else u, h and dx on the few-row kernels (few_rows.c),
 * which read each weight once at full bandwidth, where the tiled engine walks the depth of a
 * one-row tile stage by stage (plan_few_tokens).
 * The temporaries are taken and every product prepared (parameters, builds, scratch) before
 * the first launch, so a refusal leaves every gradient as it was; only an enqueue that the
 * device itself refuses can stop the call after a gradient was written.
 */
#include <limits.h>
#include <stdio.h>

#include "backends/fused/internal.h"

/* The buffers of one call; NULL where a check runs without them. */
typedef struct backward_mems {
    hd_devmem x, w, a, b, dy, dx, da, db, u, h;
} backward_mems;

/* One product of a call: on the tiled engine, or on the few-row kernels. */
typedef struct backward_step {
    bool few_rows;
    hd_fused_tile_call tile;
    hd_fused_rows_call rows;
} backward_step;

/* The products of one call, in launch order. */
typedef struct backward_plan {
    backward_step step[6];
    size_t count;
} backward_plan;

static void add_tile(backward_plan *p, hd_fused_tile_call c)
{
    p->step[p->count++] = (backward_step){.tile = c};
}

static void add_rows(backward_plan *p, hd_fused_rows_call c)
{
    p->step[p->count++] = (backward_step){.few_rows = true, .rows = c};
}

static hd_fused_tile_call product(size_t m, size_t n, size_t k, float alpha, float beta,
                                  hd_fused_operand a, hd_fused_operand b, hd_devmem c,
                                  hd_precision precision)
{
    return (hd_fused_tile_call){.m = m,
                                .n = n,
                                .k = k,
                                .batch = 1,
                                .alpha = alpha,
                                .beta = beta,
                                .a = a,
                                .b = b,
                                .c = c,
                                .ldc = n,
                                .precision = precision};
}

/* dx = dy * W^T (+ u * A^T): W and A are read as stored, transposed in the default layout
 * (W in x out, A in x r) and as they are in PyTorch's (W out x in, A r x in). The rank-r
 * product joins dx's own launch where both take the same transpose (the engine's second
 * product shares the first's); *apart says it needs a launch of its own. */
static hd_fused_tile_call dx_product(const hd_lora_backward_args *l, float beta,
                                     const backward_mems *m, const char *variant, bool *apart)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    hd_fused_tile_call c =
        product(t, in, out, 1.0f, beta, (hd_fused_operand){m->dy, out, false},
                (hd_fused_operand){m->w, l->trans_w ? in : out, !l->trans_w}, m->dx, l->precision);
    c.variant = variant;
    *apart = r > 0 && l->trans_w != l->trans_a;
    if (r > 0 && !*apart) {
        c.k2 = r;
        c.a2 = (hd_fused_operand){m->u, r, false};
        c.b2 = (hd_fused_operand){m->a, l->trans_a ? in : r, !l->trans_a};
    }
    return c;
}

/* dA and dB as A and B are stored: x^T * u (in x r) or u^T * x (r x in), and
 * scale * h^T * dy (r x out) or scale * dy^T * h (out x r); tokens deep, on the tiled engine. */
static void add_weight_gradients(const hd_lora_backward_args *l, const backward_mems *m,
                                 backward_plan *p)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    if (r == 0)
        return;
    bool ta = l->trans_a, tb = l->trans_b;
    float beta = l->accumulate ? 1.0f : 0.0f;
    hd_precision prec = l->precision;
    hd_fused_operand x_t = {m->x, in, true}, x = {m->x, in, false}, u_t = {m->u, r, true},
                     u = {m->u, r, false}, h_t = {m->h, r, true}, h = {m->h, r, false},
                     dy_t = {m->dy, out, true}, dy = {m->dy, out, false};
    add_tile(p, ta ? product(r, in, t, 1.0f, beta, u_t, x, m->da, prec)
                   : product(in, r, t, 1.0f, beta, x_t, u, m->da, prec));
    add_tile(p, tb ? product(out, r, t, l->scale, beta, dy_t, h, m->db, prec)
                   : product(r, out, t, l->scale, beta, h_t, dy, m->db, prec));
}

/* A few-row product C (m x n) = alpha * A * op(B) + beta * C, op(B) = B^T where B is stored
 * n x k (the dot form), else B stored k x n. */
static hd_fused_rows_call few(size_t m, size_t n, size_t k, float alpha, float beta, hd_devmem a,
                              hd_devmem b, bool b_trans, hd_devmem c)
{
    return (hd_fused_rows_call){.m = m,
                                .n = n,
                                .k = k,
                                .alpha = alpha,
                                .beta = beta,
                                .a = a,
                                .b = b,
                                .c = c,
                                .b_trans = b_trans};
}

/* Few tokens: u, h and dx on the few-row kernels, each reading its weights once at full
 * bandwidth. Each product takes the dot form where its weight is stored with the product's
 * depth along its rows (B as r x out for u; W as in x out and A as in x r for dx, both in one
 * launch), the strip kernel where the depth runs down its columns (PyTorch's layout). */
static void plan_few_tokens(const hd_lora_backward_args *l, const backward_mems *m,
                            backward_plan *p)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool tw = l->trans_w, ta = l->trans_a, tb = l->trans_b;
    float beta = l->accumulate ? 1.0f : 0.0f;
    p->count = 0;
    if (r > 0) {
        add_rows(p, few(t, r, out, l->scale, 0.0f, m->dy, m->b, !tb, m->u));
        add_rows(p, few(t, r, in, 1.0f, 0.0f, m->x, m->a, ta, m->h));
    }
    if (l->dx != NULL) {
        hd_fused_rows_call dx = few(t, in, out, 1.0f, beta, m->dy, m->w, !tw, m->dx);
        bool joined = r > 0 && !tw && !ta; /* the dot form's second product */
        if (joined) {
            dx.k2 = r;
            dx.a2 = m->u;
            dx.b2 = m->a;
        }
        add_rows(p, dx);
        if (r > 0 && !joined)
            add_rows(p, few(t, in, r, 1.0f, 1.0f, m->u, m->a, !ta, m->dx));
    }
    add_weight_gradients(l, m, p);
}

static void plan_backward(const hd_lora_backward_args *l, const backward_mems *m, backward_plan *p)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    bool ta = l->trans_a, tb = l->trans_b, apart = false;
    float beta = l->accumulate ? 1.0f : 0.0f;
    hd_precision prec = l->precision;
    p->count = 0;
    if (r > 0) {
        add_tile(p, product(t, r, out, l->scale, 0.0f, (hd_fused_operand){m->dy, out, false},
                            (hd_fused_operand){m->b, tb ? r : out, !tb}, m->u, prec));
        add_tile(p, product(t, r, in, 1.0f, 0.0f, (hd_fused_operand){m->x, in, false},
                            (hd_fused_operand){m->a, ta ? in : r, ta}, m->h, prec));
    }
    if (l->dx != NULL) {
        add_tile(p, dx_product(l, beta, m, l->variant, &apart));
        if (apart)
            add_tile(p, product(t, in, r, 1.0f, 1.0f, (hd_fused_operand){m->u, r, false},
                                (hd_fused_operand){m->a, ta ? in : r, !ta}, m->dx, prec));
    }
    add_weight_gradients(l, m, p);
}

hd_fused_tile_call hd__fused_lora_backward_dx_call(hd_context *ctx, const hd_shape *shape,
                                                   const char *variant)
{
    const backward_mems none = {NULL};
    const hd_lora_backward_args l = {.tokens = shape->dim[0],
                                     .in = shape->dim[1],
                                     .out = shape->dim[2],
                                     .rank = shape->dim[3],
                                     .precision = shape->precision,
                                     .trans_w = (shape->lora_layout & HD_LORA_TRANS_W) != 0,
                                     .trans_a = (shape->lora_layout & HD_LORA_TRANS_A) != 0};
    bool apart;
    return dx_product(&l, 0.0f, &none, variant, &apart);
}

hd_status hd__fused_lora_backward_check(hd_fused *f, hd_context *ctx, const hd_shape *shape,
                                        const char *variant)
{
    hd_fused_tile_call c = hd__fused_lora_backward_dx_call(ctx, shape, variant);
    return hd__fused_tile_check(f, ctx, &c);
}

static hd_status prepare_step(hd_fused *f, hd_context *ctx, const backward_step *step)
{
    return step->few_rows ? hd__fused_rows_prepare(f, ctx, &step->rows)
                          : hd__fused_tile_prepare(f, ctx, &step->tile);
}

/* Prepares every product of the plan; again from the start if a tensor-core build failed on
 * the way (the products before it were prepared for the tensor cores, which the launches will
 * no longer use), so that the launches meet exactly what was prepared. */
static hd_status prepare_all(hd_fused *f, hd_context *ctx, const backward_plan *plan)
{
    bool broken = f->mma_broken;
    hd_status s = HD_OK;
    for (size_t i = 0; i < plan->count && s == HD_OK; i++)
        s = prepare_step(f, ctx, &plan->step[i]);
    for (size_t i = 0; s == HD_OK && f->mma_broken != broken && i < plan->count; i++)
        s = prepare_step(f, ctx, &plan->step[i]);
    return s;
}

/* The call's variant: a layout without tuning records of its own takes the default layout's
 * nearest record, so a variant tuned for the default layout that this layout's dx cannot run
 * (its tiles in local memory differ) is left for the defaults, with a note, rather than
 * refused. */
static const char *variant_for_layout(hd_fused *f, hd_context *ctx, const hd_lora_backward_args *l)
{
    if (l->variant == NULL || !(l->trans_w || l->trans_a))
        return l->variant;
    hd_shape s = {.dim = {l->tokens, l->in, l->out, l->rank},
                  .lora_layout =
                      (l->trans_w ? HD_LORA_TRANS_W : 0u) | (l->trans_a ? HD_LORA_TRANS_A : 0u)};
    if (hd__fused_lora_backward_check(f, ctx, &s, l->variant) == HD_OK)
        return l->variant;
    hd__error_clear(ctx);
    hd__note(ctx, "fused: LoRA backward in this layout runs its defaults, not '%.100s'",
             l->variant);
    return NULL;
}

/* The rank up to which few tokens run in one launch. */
#define ONE_LAUNCH_MAX_RANK 16

/* Each dx group of the one launch sums u = dy * B^T itself, reading dy and B (tokens + rank
 * rows of out floats) from cache: the launch is worth it while all the groups together read
 * at most this many bytes that way. Small weights (1024^2 at rank 8, 1 to 16 tokens, as the
 * case lora_backward 1x1024x1024 r8) ran faster in one launch than in the few-row kernels'
 * five; 4096^2 at rank 16 and one token, which reads several times this much so, ran slower
 * (commit 302c853). */
#define ONE_LAUNCH_MAX_PROLOGUE_BYTES ((size_t)32 << 20)

/* The one launch's groups: W in x out, a group per WARPS rows of W; W out x in, blocks of
 * COLUMN_BLOCK columns of dx times `ranges` ranges of `chunk` rows of W. */
enum { WARPS = 8, GROUP = WARPS * 32, COLUMN_BLOCK = 64 };

typedef struct one_launch {
    size_t blocks, ranges, chunk, dx_groups;
} one_launch;

/* W out x in: the ranges of W's rows per column block, so that the blocks times the ranges
 * give each compute unit about two groups, each range at least 64 rows (chunk rows, a
 * multiple of 16), at most 16 ranges. W in x out, or no dx: one range. */
static one_launch one_launch_groups(const hd_fused *f, const hd_lora_backward_args *l)
{
    one_launch g = {
        .blocks = (l->in + COLUMN_BLOCK - 1) / COLUMN_BLOCK, .ranges = 1, .chunk = l->out};
    if (l->trans_w && l->dx != NULL) {
        size_t units = f->compute_units > 0 ? f->compute_units : 1;
        size_t kg = (2 * units + g.blocks - 1) / g.blocks, most = (l->out + 63) / 64;
        kg = kg > most ? most : kg > 16 ? 16 : kg < 1 ? 1 : kg;
        g.chunk = ((l->out + kg - 1) / kg + 15) / 16 * 16;
        g.ranges = (l->out + g.chunk - 1) / g.chunk;
    }
    g.dx_groups = l->trans_w ? g.blocks * g.ranges : (l->in + WARPS - 1) / WARPS;
    return g;
}

/* Whether a call of few tokens (HD_FUSED_ROUTE_FEW_TOKENS) runs in one launch. */
static bool one_launch_fits(const hd_fused *f, const hd_lora_backward_args *l)
{
    size_t t = l->tokens, in = l->in, out = l->out, r = l->rank;
    if (!(t >= 1 && r >= 1 && r <= ONE_LAUNCH_MAX_RANK && in >= 1 && out >= 1 &&
          in <= (size_t)INT_MAX / 16 && out <= (size_t)INT_MAX / 16 && in * r <= (size_t)INT_MAX &&
          r * out <= (size_t)INT_MAX))
        return false;
    one_launch g = one_launch_groups(f, l);
    return g.dx_groups * (t + r) * out * sizeof(float) <= ONE_LAUNCH_MAX_PROLOGUE_BYTES;
}

/* Few tokens: every gradient from one launch of lora_backward_few, in the call's layout. */
static hd_status backward_one_launch(hd_fused *f, hd_context *ctx, const hd_lora_backward_args *l)
{
    int vec = (l->trans_w ? l->in : l->out) % 4 == 0 ? 4 : 1;
    int db_vec = l->out % 4 == 0 ? 4 : 1;
    char options[HD_FUSED_OPTIONS_CAPACITY];
    snprintf(options, sizeof options,
             "-DGROUP=%d -DWARPS=%d -DMR=%zu -DVEC=%d -DDB_VEC=%d -DTRANS_W=%d -DTRANS_A=%d "
             "-DTRANS_B=%d",
             GROUP, WARPS, hd__fused_pow2_ceil(l->tokens), vec, db_vec, l->trans_w, l->trans_a,
             l->trans_b);
    hd_kernel *k;
    hd_status s =
        hd__fused_kernel(f, ctx, HD_FUSED_LORA_BACKWARD, options, "lora_backward_few", GROUP, &k);
    if (s != HD_OK)
        return s;
    one_launch g = one_launch_groups(f, l);
    size_t db_groups = (l->out / (size_t)db_vec + GROUP - 1) / GROUP;
    hd_devmem x = hd__fused_mem(l->x), w = hd__fused_mem(l->w), a = hd__fused_mem(l->a),
              b = hd__fused_mem(l->b), dy = hd__fused_mem(l->dy), da = hd__fused_mem(l->da),
              db = hd__fused_mem(l->db);
    /* without dx the kernel never writes it, nor with one range the partials or counters: any
     * valid buffer fills those arguments */
    hd_devmem dx = l->dx != NULL ? hd__fused_mem(l->dx) : da, part, count;
    hd_fused_params kg = {.kg = (int)g.ranges, .tn = COLUMN_BLOCK / vec, .vec = vec};
    if ((s = hd__fused_kg_buffers(f, ctx, &kg, g.blocks, l->tokens, da, &part, &count)) != HD_OK)
        return s;
    int32_t tokens = (int32_t)l->tokens, in = (int32_t)l->in, out = (int32_t)l->out,
            rank = (int32_t)l->rank, rp = (int32_t)hd__fused_pow2_ceil(l->rank);
    float scale = l->scale, beta = l->accumulate ? 1.0f : 0.0f;
    int32_t has_dx = l->dx != NULL, dx_count = (int32_t)g.dx_groups,
            range_count = (int32_t)g.ranges, range_rows = (int32_t)g.chunk;
    const void *values[] = {&tokens, &in,       &out,         &rank,       &rp, &scale, &beta,
                            &has_dx, &dx_count, &range_count, &range_rows, &x,  &w,     &a,
                            &b,      &dy,       &dx,          &da,         &db, &part,  &count};
    const size_t sizes[] = {sizeof tokens,      sizeof in,         sizeof out,
                            sizeof rank,        sizeof rp,         sizeof scale,
                            sizeof beta,        sizeof has_dx,     sizeof dx_count,
                            sizeof range_count, sizeof range_rows, sizeof(hd_devmem),
                            sizeof(hd_devmem),  sizeof(hd_devmem), sizeof(hd_devmem),
                            sizeof(hd_devmem),  sizeof(hd_devmem), sizeof(hd_devmem),
                            sizeof(hd_devmem),  sizeof(hd_devmem), sizeof(hd_devmem)};
    s = hd__fused_set_args(ctx, k, values, sizes, 21);
    return s == HD_OK ? hd__fused_launch(f, ctx, k, g.dx_groups + db_groups, GROUP) : s;
}

hd_status hd__fused_lora_backward(void *state, hd_context *ctx, const hd_lora_backward_args *l)
{
    hd_fused *f = state;
    if (l->variant != NULL && !hd__fused_is_tile_variant(l->variant))
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "fused: LoRA backward takes the tiled engine's variants, not '%.100s'",
                         l->variant);
    hd_lora_backward_args call = *l;
    call.variant = variant_for_layout(f, ctx, l);
    l = &call;
    const hd_shape shape = {.dim = {l->tokens, l->in, l->out, l->rank}};
    bool few_tokens = hd__fused_route(f, HD_OP_LORA_BACKWARD, &shape, HD_PART_WHOLE,
                                      l->variant) == HD_FUSED_ROUTE_FEW_TOKENS;
    if (few_tokens && one_launch_fits(f, l))
        return backward_one_launch(f, ctx, l);
    size_t low_rank_bytes = l->tokens * l->rank * sizeof(float);
    struct hd_device_buffer *u = NULL, *h = NULL;
    hd_status s = HD_OK;
    if (l->rank > 0 && (s = hd__rt_buffer_acquire(f->rt, ctx, low_rank_bytes, &u)) == HD_OK)
        s = hd__rt_buffer_acquire(f->rt, ctx, low_rank_bytes, &h);
    backward_mems m = {.x = hd__fused_mem(l->x),
                       .w = hd__fused_mem(l->w),
                       .dy = hd__fused_mem(l->dy),
                       .dx = l->dx != NULL ? hd__fused_mem(l->dx) : NULL};
    if (s == HD_OK && l->rank > 0) {
        m.a = hd__fused_mem(l->a);
        m.b = hd__fused_mem(l->b);
        m.da = hd__fused_mem(l->da);
        m.db = hd__fused_mem(l->db);
        m.u = u->mem;
        m.h = h->mem;
    }
    backward_plan plan;
    if (few_tokens)
        plan_few_tokens(l, &m, &plan);
    else
        plan_backward(l, &m, &plan);
    if (s == HD_OK)
        s = prepare_all(f, ctx, &plan);
    bool wrote = false; /* a launch has written (or added into) one of the caller's gradients */
    for (size_t i = 0; i < plan.count && s == HD_OK; i++) {
        const backward_step *step = &plan.step[i];
        s = step->few_rows ? hd__fused_rows_gemm(f, ctx, &step->rows)
                           : hd__fused_tile_gemm(f, ctx, &step->tile);
        hd_devmem out = step->few_rows ? step->rows.c : step->tile.c;
        wrote = wrote || (s == HD_OK && out != m.u && out != m.h);
    }
    if (s != HD_OK && wrote) /* a refused enqueue after the first gradient was written */
        hd__error_outputs_changed(ctx);
    /* The queue is in order: whoever takes u or h from the pool next runs after these. */
    if (u != NULL)
        hd__rt_buffer_release(f->rt, u);
    if (h != NULL)
        hd__rt_buffer_release(f->rt, h);
    return s;
}
