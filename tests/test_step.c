/*
 * The training step's ops on every backend of the machine (the CPU, and the fused kernels on
 * the OpenCL device: PoCL in CI) against the float64 reference (autotune/reference_step.h):
 * random shapes with odd and prime sizes, single rows and columns, in-place calls, packed
 * sequences of unequal lengths, extreme inputs; the backward passes also against finite
 * differences of the reference's forward; every argument error with its outputs untouched.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "core/sequence.h"
#include "dispatch/tools.h"
#include "tests/testlib.h"

/* The backends that run the step's ops, where the context has them. */
static const hd_backend step_backends[] = {HD_BACKEND_CPU, HD_BACKEND_FUSED};
#define BACKEND_COUNT (sizeof step_backends / sizeof step_backends[0])

static hd_context *shared_ctx;

static int setup(void **state)
{
    shared_ctx = hd_test_context(false);
    (void)state;
    return 0;
}

static int teardown(void **state)
{
    hd_context_destroy(shared_ctx);
    (void)state;
    return 0;
}

/* A shape of the class the step's elementwise ops serve: one row or column now and then. */
static hd_test_matrix_shape random_shape(hd_rng *rng)
{
    hd_test_matrix_shape s = hd_test_random_row_shape(rng);
    if (s.rows * s.cols > 200000)
        s.rows = 200000 / s.cols + 1;
    return s;
}

/* ---- elementwise ops ---- */

typedef enum unary_kind { SWIGLU, SWIGLU_BACKWARD, GELU, GELU_BACKWARD, ADD } unary_kind;

/* Runs kind on inputs in[] (n elements each) with the backend forced, outputs read into got. */
static void run_elementwise(unary_kind kind, hd_backend b, size_t rows, size_t cols,
                            float *const in[], float *got[], bool in_place)
{
    hd_context *ctx = shared_ctx;
    hd_tensor *t[3], *out[2];
    for (int i = 0; i < 3; i++)
        t[i] = in[i] != NULL ? hd_test_tensor(ctx, rows, cols, in[i]) : NULL;
    hd_status s = HD_OK;
    hd_op op = HD_OP_SWIGLU;
    switch (kind) {
    case SWIGLU:
        op = HD_OP_SWIGLU;
        out[0] = in_place ? t[1] : hd_test_tensor(ctx, rows, cols, NULL);
        hd_test_use_backend(shared_ctx, op, b);
        s = hd_swiglu(ctx, t[0], t[1], out[0]);
        break;
    case SWIGLU_BACKWARD:
        op = HD_OP_SWIGLU_BACKWARD;
        out[0] = in_place ? t[0] : hd_test_tensor(ctx, rows, cols, NULL);
        out[1] = in_place ? t[2] : hd_test_tensor(ctx, rows, cols, NULL);
        hd_test_use_backend(shared_ctx, op, b);
        s = hd_swiglu_backward(ctx, t[0], t[1], t[2], out[0], out[1]);
        break;
    case GELU:
        op = HD_OP_GELU;
        out[0] = in_place ? t[0] : hd_test_tensor(ctx, rows, cols, NULL);
        hd_test_use_backend(shared_ctx, op, b);
        s = hd_gelu(ctx, t[0], out[0]);
        break;
    case GELU_BACKWARD:
        op = HD_OP_GELU_BACKWARD;
        out[0] = in_place ? t[1] : hd_test_tensor(ctx, rows, cols, NULL);
        hd_test_use_backend(shared_ctx, op, b);
        s = hd_gelu_backward(ctx, t[0], t[1], out[0]);
        break;
    case ADD:
        op = HD_OP_ADD;
        out[0] = t[1];
        hd_test_use_backend(shared_ctx, op, b);
        s = hd_add(ctx, -0.75f, t[0], out[0]);
        break;
    }
    hd_test_expect_ran_on(ctx, s, b, hd_op_name(op));
    hd_test_release_backend(shared_ctx, op);
    int outputs = kind == SWIGLU_BACKWARD ? 2 : 1;
    for (int i = 0; i < outputs; i++)
        got[i] = hd_test_read(out[i]);
    for (int i = 0; i < outputs; i++)
        if (!in_place && kind != ADD)
            hd_tensor_destroy(out[i]);
    for (int i = 0; i < 3; i++)
        hd_tensor_destroy(t[i]);
}

/* The reference of kind on the same inputs. */
static void reference_elementwise(unary_kind kind, size_t n, float *const in[], double *want[])
{
    switch (kind) {
    case SWIGLU:
        hd__ref_swiglu(n, in[0], in[1], want[0]);
        break;
    case SWIGLU_BACKWARD:
        hd__ref_swiglu_backward(n, in[0], in[1], in[2], want[0], want[1]);
        break;
    case GELU:
        hd__ref_gelu(n, in[0], want[0]);
        break;
    case GELU_BACKWARD:
        hd__ref_gelu_backward(n, in[0], in[1], want[0]);
        break;
    case ADD:
        hd__ref_add(n, -0.75f, in[0], in[1], want[0]);
        break;
    }
}

static const char *const kind_names[] = {"swiglu", "swiglu_backward", "gelu", "gelu_backward",
                                         "add"};
static const int kind_inputs[] = {2, 3, 1, 2, 2};

/* Within a few float ulps of each element's magnitude: the ops are a handful of roundings
 * deep, and their terms never cancel by more than the reference's own error covers. */
#define ELEMENTWISE_RTOL 1e-6
#define ELEMENTWISE_ATOL 1e-7

static void check_elementwise(unary_kind kind, hd_rng *rng, size_t rows, size_t cols, bool in_place,
                              float lo, float hi)
{
    size_t n = rows * cols;
    float *in[3] = {NULL, NULL, NULL};
    for (int i = 0; i < kind_inputs[kind]; i++)
        in[i] = hd_test_random(rng, n, i == 0 ? lo : -2.0f, i == 0 ? hi : 2.0f);
    double *want[2] = {hd_test_doubles(n), hd_test_doubles(n)};
    reference_elementwise(kind, n, in, want);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = step_backends[bi];
        if (!hd_context_has_backend(shared_ctx, b))
            continue;
        float *got[2] = {NULL, NULL};
        run_elementwise(kind, b, rows, cols, in, got, in_place);
        char what[160];
        for (int o = 0; o < (kind == SWIGLU_BACKWARD ? 2 : 1); o++) {
            snprintf(what, sizeof what, "%s output %d on %s, %zu x %zu%s", kind_names[kind], o,
                     hd_backend_name(b), rows, cols, in_place ? " in place" : "");
            hd_test_expect_close(what, got[o], want[o], n, ELEMENTWISE_ATOL * (hi - lo),
                                 ELEMENTWISE_RTOL);
            free(got[o]);
        }
    }
    for (int i = 0; i < 3; i++)
        free(in[i]);
    free(want[0]);
    free(want[1]);
}

static void test_elementwise_ops_match_reference(void **state)
{
    hd_rng rng = hd_test_rng(11);
    static const hd_test_matrix_shape fixed[] = {{1, 1}, {1, 7}, {13, 1}, {3, 4}, {31, 257}};
    for (int kind = SWIGLU; kind <= ADD; kind++) {
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            check_elementwise((unary_kind)kind, &rng, fixed[i].rows, fixed[i].cols, false, -6, 6);
        for (int r = 0; r < 4; r++) {
            hd_test_matrix_shape s = random_shape(&rng);
            check_elementwise((unary_kind)kind, &rng, s.rows, s.cols, r % 2 == 1, -6, 6);
        }
    }
    (void)state;
}

/* Large magnitudes: sigmoid's exp far below and above zero, GELU's tails. */
static void test_elementwise_ops_at_large_inputs(void **state)
{
    hd_rng rng = hd_test_rng(12);
    for (int kind = SWIGLU; kind <= GELU_BACKWARD; kind++) {
        check_elementwise((unary_kind)kind, &rng, 5, 37, false, -90, 90);
        check_elementwise((unary_kind)kind, &rng, 3, 16, false, -1e4f, 1e4f);
    }
    (void)state;
}

/* The backward passes against central differences of the reference forward: d/dg and d/du of
 * sum(dy * swiglu(g, u)), d/dx of sum(dy * gelu(x)). */
static void test_elementwise_backward_matches_finite_differences(void **state)
{
    hd_rng rng = hd_test_rng(13);
    size_t n = 64;
    float *g = hd_test_random(&rng, n, -5, 5), *u = hd_test_random(&rng, n, -2, 2);
    float *dy = hd_test_random(&rng, n, -1, 1);
    double *dg = hd_test_doubles(n), *du = hd_test_doubles(n), *dx = hd_test_doubles(n);
    hd__ref_swiglu_backward(n, g, u, dy, dg, du);
    hd__ref_gelu_backward(n, g, dy, dx);
    for (size_t i = 0; i < n; i++) {
        double y[2], h = 1e-3;
        float gp[1] = {(float)(g[i] + h)}, gm[1] = {(float)(g[i] - h)};
        double hp = (double)gp[0] - g[i], hm = g[i] - (double)gm[0];
        hd__ref_swiglu(1, gp, &u[i], &y[0]);
        hd__ref_swiglu(1, gm, &u[i], &y[1]);
        double fd = dy[i] * (y[0] - y[1]) / (hp + hm);
        if (fabs(fd - dg[i]) > 1e-4 * (1.0 + fabs(dg[i])))
            fail_msg("swiglu dg[%zu]: %g, finite difference %g", i, dg[i], fd);
        hd__ref_gelu(1, gp, &y[0]);
        hd__ref_gelu(1, gm, &y[1]);
        fd = dy[i] * (y[0] - y[1]) / (hp + hm);
        if (fabs(fd - dx[i]) > 1e-4 * (1.0 + fabs(dx[i])))
            fail_msg("gelu dx[%zu]: %g, finite difference %g", i, dx[i], fd);
        double s = 1.0 / (1.0 + exp(-(double)g[i]));
        if (fabs(du[i] - (double)dy[i] * g[i] * s) > 1e-12 * (1.0 + fabs(du[i])))
            fail_msg("swiglu du[%zu]: %g, expected dy * silu(g) = %g", i, du[i],
                     (double)dy[i] * g[i] * s);
    }
    free(g);
    free(u);
    free(dy);
    free(dg);
    free(du);
    free(dx);
    (void)state;
}

/* ---- RoPE ---- */

/* Positions as the definition gives them: offset plus the index within each sequence. */
static void positions(const size_t *lengths, size_t count, size_t rows, size_t offset, int *pos)
{
    size_t r = 0;
    for (size_t q = 0; q < (count ? count : 1); q++)
        for (size_t k = 0; k < (count ? lengths[q] : rows); k++)
            pos[r++] = (int)(offset + k);
}

typedef struct rope_case {
    size_t rows, heads, d;
    size_t offset;
    const size_t *lengths;
    size_t count;
    bool inverse, in_place, table;
    float theta; /* 0: 10000 */
} rope_case;

/* On b, through the public call, or with variant (not NULL) as the tuner runs it; false where
 * the variant was refused (HD_ERR_UNSUPPORTED, HD_ERR_BUILD): nothing to check. */
static bool run_rope(hd_backend b, const hd_rope_options *opt, const hd_tensor *tx, hd_tensor *ty,
                     const char *variant, const char *what)
{
    hd_status s;
    if (variant == NULL) {
        s = hd_rope(shared_ctx, opt, tx, ty);
    } else {
        const hd_tensor *tensors[] = {tx, opt->inv_freq, ty};
        hd_op_params p = {.sequences = opt->sequences,
                          .head_dim = opt->head_dim,
                          .theta = opt->theta,
                          .position_offset = opt->position_offset,
                          .inverse = opt->inverse};
        hd_call call;
        assert_int_equal(hd__call_prepare(shared_ctx, HD_OP_ROPE, tensors, &p, &call), HD_OK);
        s = hd__call_run_on(shared_ctx, b, &call, variant);
        if (s == HD_ERR_UNSUPPORTED || s == HD_ERR_BUILD)
            return false;
    }
    hd_test_expect_ran_on(shared_ctx, s, b, what);
    return true;
}

/* Each backend through the public call, or the fused backend with variant; the runs that were
 * not refused. */
static size_t check_rope_as(const rope_case *c, hd_rng *rng, const char *variant)
{
    size_t ran = 0;
    size_t cols = c->heads * c->d, n = c->rows * cols;
    float *x = hd_test_random(rng, n, -1, 1);
    int *pos = malloc(c->rows * sizeof *pos);
    double *freq = hd_test_doubles(c->d / 2), *want = hd_test_doubles(n);
    float *table = hd_test_floats(c->d / 2);
    assert_non_null(pos);
    positions(c->lengths, c->count, c->rows, c->offset, pos);
    const float theta = c->theta > 0.0f ? c->theta : 10000.0f;
    hd__ref_rope_inv_freq(theta, c->d, freq);
    for (size_t i = 0; c->table && i < c->d / 2; i++) { /* a scaled table, as Llama 3's */
        table[i] = (float)(freq[i] / (i % 3 == 0 ? 8.0 : 1.0));
        freq[i] = table[i];
    }
    hd__ref_rope(c->rows, c->heads, c->d, pos, freq, c->inverse, x, want);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = step_backends[bi];
        if (variant != NULL ? b != HD_BACKEND_FUSED || !hd_context_has_backend(shared_ctx, b)
                            : !hd_test_use_backend(shared_ctx, HD_OP_ROPE, b))
            continue;
        hd_tensor *tx = hd_test_tensor(shared_ctx, c->rows, cols, x);
        hd_tensor *ty = c->in_place ? tx : hd_test_tensor(shared_ctx, c->rows, cols, NULL);
        hd_tensor *tf = c->table ? hd_test_tensor(shared_ctx, 1, c->d / 2, table) : NULL;
        hd_rope_options opt = {.head_dim = c->d,
                               .theta = theta,
                               .position_offset = c->offset,
                               .sequences = {c->lengths, c->count},
                               .inv_freq = tf,
                               .inverse = c->inverse};
        char what[200];
        snprintf(what, sizeof what, "rope on %s (%s): %zu rows, %zu heads of %zu, offset %zu%s%s",
                 hd_backend_name(b), variant != NULL ? variant : "its choice", c->rows, c->heads,
                 c->d, c->offset, c->inverse ? ", inverse" : "", c->table ? ", table" : "");
        if (run_rope(b, &opt, tx, ty, variant, what)) {
            ran++;
            float *got = hd_test_read(ty);
            /* Angles to within a few ulps of the exact product at any position (2^17 here). */
            hd_test_expect_close(what, got, want, n, 2e-6, 0);
            free(got);
        }
        if (!c->in_place)
            hd_tensor_destroy(ty);
        hd_tensor_destroy(tx);
        hd_tensor_destroy(tf);
        if (variant == NULL)
            hd_test_release_backend(shared_ctx, HD_OP_ROPE);
    }
    free(x);
    free(pos);
    free(freq);
    free(want);
    free(table);
    return ran;
}

static void check_rope(const rope_case *c, hd_rng *rng)
{
    check_rope_as(c, rng, NULL);
}

static void test_rope_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(21);
    static const size_t unequal[] = {1, 7, 64, 13};
    static const size_t with_empty[] = {5, 0, 3};
    const rope_case cases[] = {
        {.rows = 1, .heads = 1, .d = 2},
        {.rows = 17, .heads = 3, .d = 8},
        {.rows = 85, .heads = 4, .d = 64, .lengths = unequal, .count = 4},
        {.rows = 85, .heads = 4, .d = 64, .lengths = unequal, .count = 4, .inverse = true},
        {.rows = 8, .heads = 2, .d = 128, .offset = 131000, .in_place = true},
        {.rows = 8, .heads = 5, .d = 10, .lengths = with_empty, .count = 3, .table = true},
        {.rows = 33, .heads = 8, .d = 128, .offset = 77, .table = true, .in_place = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_rope(&cases[i], &rng);
    (void)state;
}

/* Calls whose positions differ only in their values (the same rows, another offset or other
 * sequences), or whose frequencies do (another base or head size), one after another and
 * back: the fused backend keeps each call's positions and frequencies on the device for the
 * next one, named by what they are made from, and must make them again when that changes. */
static void test_rope_follows_changing_positions(void **state)
{
    hd_rng rng = hd_test_rng(25);
    static const size_t split[] = {5, 7}, other[] = {7, 5};
    const rope_case cases[] = {
        {.rows = 12, .heads = 2, .d = 8},
        {.rows = 12, .heads = 2, .d = 8, .offset = 3},
        {.rows = 12, .heads = 2, .d = 8, .lengths = split, .count = 2},
        {.rows = 12, .heads = 2, .d = 8, .lengths = other, .count = 2, .inverse = true},
        {.rows = 12, .heads = 2, .d = 8},
        {.rows = 12, .heads = 1, .d = 16}, /* other frequencies, the same positions */
        {.rows = 12, .heads = 1, .d = 16, .theta = 500000.0f}, /* another base */
        {.rows = 12, .heads = 1, .d = 16},
        {.rows = 12, .heads = 2, .d = 8, .offset = 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_rope(&cases[i], &rng);
    (void)state;
}

/* Every variant the fused backend lists for the tuner (work-items per group, heads an item
 * rotates with one angle), as the tuner runs it: unequal sequences, the inverse, in place at a
 * large offset, a caller's table, 5 heads of 10 (a last item of fewer heads). */
static void test_rope_variants_match_reference(void **state)
{
    if (!hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED))
        skip();
    hd_rng rng = hd_test_rng(24);
    static const size_t unequal[] = {1, 7, 64, 13};
    const rope_case cases[] = {
        {.rows = 85, .heads = 4, .d = 64, .lengths = unequal, .count = 4, .inverse = true},
        {.rows = 3, .heads = 2, .d = 128, .offset = 131000, .in_place = true},
        {.rows = 13, .heads = 5, .d = 10, .table = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hd_shape shape = {.dim = {cases[i].rows, cases[i].heads * cases[i].d, cases[i].d / 2}};
        const char *variants[16];
        size_t count = hd__backend_variants(shared_ctx, HD_BACKEND_FUSED, HD_OP_ROPE, &shape,
                                            variants, 16);
        assert_true(count >= 4);
        size_t ran = 0;
        for (size_t v = 0; v < count; v++)
            ran += check_rope_as(&cases[i], &rng, variants[v]);
        assert_true(ran * 2 > count); /* groups of 256 and fewer run everywhere */
    }
    (void)state;
}

/* The inverse rotation undoes the forward: the backward of RoPE is RoPE by -a. */
static void test_rope_inverse_restores_input(void **state)
{
    hd_rng rng = hd_test_rng(22);
    size_t rows = 19, cols = 3 * 16;
    float *x = hd_test_random(&rng, rows * cols, -3, 3);
    double *want = hd_test_doubles(rows * cols);
    for (size_t i = 0; i < rows * cols; i++)
        want[i] = x[i];
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = step_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_ROPE, b))
            continue;
        hd_tensor *t = hd_test_tensor(shared_ctx, rows, cols, x);
        hd_rope_options opt = {.head_dim = 16, .theta = 500000.0f, .position_offset = 9};
        assert_int_equal(hd_rope(shared_ctx, &opt, t, t), HD_OK);
        opt.inverse = true;
        assert_int_equal(hd_rope(shared_ctx, &opt, t, t), HD_OK);
        float *got = hd_test_read(t);
        hd_test_expect_close("rope then its inverse", got, want, rows * cols, 2e-6, 1e-6);
        free(got);
        hd_tensor_destroy(t);
        hd_test_release_backend(shared_ctx, HD_OP_ROPE);
    }
    free(x);
    free(want);
    (void)state;
}

/* ---- embedding ---- */

static void test_embedding_copies_table_rows(void **state)
{
    hd_rng rng = hd_test_rng(31);
    /* rows of several turns of a work-group's work-items (WG * VEC = 1024 floats by default),
     * the last one partial */
    static const size_t dims[][3] = {{1, 1, 1},      {9, 13, 5},    {64, 128, 1000},
                                     {7, 4, 3},      {3, 4100, 7},  {5, 2051, 11},
                                     {2, 12288, 3}};
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
        size_t rows = dims[c][0], cols = dims[c][1], vocab = dims[c][2];
        float *table = hd_test_random(&rng, vocab * cols, -1, 1);
        int32_t *ids = malloc(rows * sizeof *ids);
        assert_non_null(ids);
        for (size_t r = 0; r < rows; r++)
            ids[r] = (int32_t)(hd_test_uniform(&rng, 0, (float)vocab - 0.01f));
        ids[rows - 1] = (int32_t)vocab - 1;
        double *want = hd_test_doubles(rows * cols);
        hd__ref_embedding(rows, cols, ids, table, want);
        for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
            hd_backend b = step_backends[bi];
            if (!hd_test_use_backend(shared_ctx, HD_OP_EMBEDDING, b))
                continue;
            hd_tensor *tt = hd_test_tensor(shared_ctx, vocab, cols, table);
            /* the ids as a host array, then as an int32 tensor, a column and a row */
            for (int form = 0; form < 3; form++) {
                hd_tensor *to = hd_test_tensor(shared_ctx, rows, cols, NULL);
                hd_tensor *tid = form > 0 ? hd_test_ids_as(shared_ctx, rows, ids, form == 2) : NULL;
                const char *what = form == 0   ? "embedding"
                                   : form == 1 ? "embedding_ids, a column"
                                               : "embedding_ids, a row";
                hd_test_expect_ran_on(shared_ctx,
                                      tid != NULL ? hd_embedding_ids(shared_ctx, tt, tid, to)
                                                  : hd_embedding(shared_ctx, tt, ids, to),
                                      b, what);
                float *got = hd_test_read(to);
                hd_test_expect_close(what, got, want, rows * cols, 0, 0);
                free(got);
                hd_tensor_destroy(to);
                hd_tensor_destroy(tid);
            }
            hd_tensor_destroy(tt);
            hd_test_release_backend(shared_ctx, HD_OP_EMBEDDING);
        }
        free(table);
        free(ids);
        free(want);
    }
    (void)state;
}

/* Every embedding variant the fused backend lists for the tuner, as the tuner runs it: rows
 * of several turns of a work-group's work-items and a partial one (4100 columns), of whole
 * turns (12288), and of a width that takes scalars (2051). */
static void test_embedding_variants_match_reference(void **state)
{
    if (!hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED))
        skip();
    hd_rng rng = hd_test_rng(32);
    static const size_t dims[][3] = {{3, 4100, 7}, {2, 12288, 3}, {4, 2051, 5}};
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
        size_t rows = dims[c][0], cols = dims[c][1], vocab = dims[c][2];
        float *table = hd_test_random(&rng, vocab * cols, -1, 1);
        int32_t ids[4];
        for (size_t r = 0; r < rows; r++)
            ids[r] = (int32_t)((r * 5 + c) % vocab);
        double *want = hd_test_doubles(rows * cols);
        hd__ref_embedding(rows, cols, ids, table, want);
        hd_tensor *tt = hd_test_tensor(shared_ctx, vocab, cols, table);
        hd_tensor *to = hd_test_tensor(shared_ctx, rows, cols, NULL);
        hd_shape shape = {.dim = {rows, cols, vocab}};
        const char *variants[16];
        size_t count = hd__backend_variants(shared_ctx, HD_BACKEND_FUSED, HD_OP_EMBEDDING, &shape,
                                            variants, 16);
        assert_true(count >= (cols % 4 == 0 ? 3u : 1u));
        for (size_t v = 0; v < count; v++) {
            const hd_tensor *tensors[] = {tt, to};
            hd_op_params p = {.ids = ids};
            hd_call call;
            assert_int_equal(hd__call_prepare(shared_ctx, HD_OP_EMBEDDING, tensors, &p, &call),
                             HD_OK);
            hd_test_expect_ran_on(shared_ctx,
                                  hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, variants[v]),
                                  HD_BACKEND_FUSED, variants[v]);
            float *got = hd_test_read(to);
            hd_test_expect_close(variants[v], got, want, rows * cols, 0, 0);
            free(got);
        }
        hd_tensor_destroy(tt);
        hd_tensor_destroy(to);
        free(table);
        free(want);
    }
    (void)state;
}

/* An id tensor written again between calls: each call reads what was written last, on every
 * backend (the device's copy is made again after each write, and kept between writes). */
static void test_embedding_ids_follow_writes(void **state)
{
    hd_rng rng = hd_test_rng(33);
    const size_t rows = 37, cols = 20, vocab = 11;
    float *table = hd_test_random(&rng, vocab * cols, -1, 1);
    int32_t first[37], second[37];
    for (size_t r = 0; r < rows; r++) {
        first[r] = (int32_t)(r % vocab);
        second[r] = (int32_t)((r * 7 + 3) % vocab);
    }
    double *want_first = hd_test_doubles(rows * cols), *want_second = hd_test_doubles(rows * cols);
    hd__ref_embedding(rows, cols, first, table, want_first);
    hd__ref_embedding(rows, cols, second, table, want_second);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = step_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_EMBEDDING, b))
            continue;
        hd_tensor *tt = hd_test_tensor(shared_ctx, vocab, cols, table);
        hd_tensor *to = hd_test_tensor(shared_ctx, rows, cols, NULL);
        hd_tensor *tid = hd_test_ids(shared_ctx, rows, first);
        const int32_t *order[] = {first, first, second, second, first};
        for (size_t call = 0; call < sizeof order / sizeof order[0]; call++) {
            if (call > 0 && order[call] != order[call - 1])
                assert_int_equal(hd_tensor_write_raw(tid, order[call]), HD_OK);
            hd_test_expect_ran_on(shared_ctx, hd_embedding_ids(shared_ctx, tt, tid, to), b,
                                  "embedding_ids after a write");
            float *got = hd_test_read(to);
            hd_test_expect_close("embedding_ids after a write", got,
                                 order[call] == first ? want_first : want_second, rows * cols, 0,
                                 0);
            free(got);
        }
        hd_tensor_destroy(tt);
        hd_tensor_destroy(to);
        hd_tensor_destroy(tid);
        hd_test_release_backend(shared_ctx, HD_OP_EMBEDDING);
    }
    free(table);
    free(want_first);
    free(want_second);
    (void)state;
}

/* ---- attention ---- */

typedef struct attention_case {
    size_t tokens, heads, kv_heads, head_dim;
    const size_t *lengths;
    size_t count;
    bool causal;
    float range;   /* q and k uniform in +-range: large ranges make the online softmax rescale */
    size_t window; /* causal keys per row at most (a sliding window), 0: all */
} attention_case;

/* Within a few float roundings of each output's scale: the sums run over a row's keys, and an
 * element's error grows with the largest term of its sum, not its own size; the terms are of
 * the inputs' order (v and dout within +-1), which floors the scale at 1 where the sums cancel
 * (a one-key row's dq is exactly 0). */
static void expect_attention_close(const char *what, const float *got, const double *want, size_t n,
                                   double rel)
{
    hd_test_expect_close(what, got, want, n, rel * (hd_test_max_abs(want, n) + 1.0), 0);
}

static void check_attention(const attention_case *c, hd_rng *rng)
{
    size_t t = c->tokens, qd = c->heads * c->head_dim, kd = c->kv_heads * c->head_dim;
    float *q = hd_test_random(rng, t * qd, -c->range, c->range);
    float *k = hd_test_random(rng, t * kd, -c->range, c->range);
    float *v = hd_test_random(rng, t * kd, -1, 1), *dout = hd_test_random(rng, t * qd, -1, 1);
    int lens[64];
    for (size_t i = 0; i < c->count; i++)
        lens[i] = (int)c->lengths[i];
    if (c->count == 0)
        lens[0] = (int)t;
    hd_ref_attention_shape rs = {t,           c->heads,
                                 c->kv_heads, c->head_dim,
                                 lens,        c->count ? c->count : 1,
                                 c->causal,   1.0 / sqrt((double)c->head_dim),
                                 c->window};
    double *out = hd_test_doubles(t * qd), *lse = hd_test_doubles(t * c->heads);
    double *dq = hd_test_doubles(t * qd), *dk = hd_test_doubles(t * kd);
    double *dv = hd_test_doubles(t * kd);
    hd__ref_attention(&rs, q, k, v, out, lse);
    hd__ref_attention_backward(&rs, q, k, v, dout, dq, dk, dv);
    float *outf = hd_test_floats(t * qd), *lsef = hd_test_floats(t * c->heads);
    for (size_t i = 0; i < t * qd; i++)
        outf[i] = (float)out[i];
    for (size_t i = 0; i < t * c->heads; i++)
        lsef[i] = (float)lse[i];
    hd_attention_options opt = {.heads = c->heads,
                                .kv_heads = c->kv_heads,
                                .causal = c->causal,
                                .sequences = {c->lengths, c->count},
                                .window = c->window};
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = step_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_ATTENTION, b) ||
            !hd_test_use_backend(shared_ctx, HD_OP_ATTENTION_BACKWARD, b))
            continue;
        hd_context *ctx = shared_ctx;
        hd_tensor *tq = hd_test_tensor(ctx, t, qd, q), *tk = hd_test_tensor(ctx, t, kd, k);
        hd_tensor *tv = hd_test_tensor(ctx, t, kd, v), *to = hd_test_tensor(ctx, t, qd, NULL);
        hd_tensor *tl = hd_test_tensor(ctx, t, c->heads, NULL);
        char what[160];
        snprintf(what, sizeof what,
                 "attention on %s: %zu tokens, %zu/%zu heads of %zu%s%s, window %zu",
                 hd_backend_name(b), t, c->heads, c->kv_heads, c->head_dim,
                 c->causal ? ", causal" : "", c->count ? ", packed" : "", c->window);
        hd_test_expect_ran_on(ctx, hd_attention(ctx, &opt, tq, tk, tv, to, tl), b, what);
        float *got = hd_test_read(to), *got_lse = hd_test_read(tl);
        expect_attention_close(what, got, out, t * qd, 2e-5 * (1.0 + c->range));
        /* lse carries a score's rounding, which is relative to the terms of q . k (up to
         * head_dim * range^2 times the scale), not to lse itself, which may be near 0 */
        double score_terms = (double)c->head_dim * c->range * c->range * rs.scale;
        hd_test_expect_close(what, got_lse, lse, t * c->heads,
                             2e-5 * hd_test_max_abs(lse, t * c->heads) +
                                 8.0 * FLT_EPSILON * score_terms,
                             0);
        free(got);
        free(got_lse);
        hd_tensor *tout = hd_test_tensor(ctx, t, qd, outf),
                  *tlse = hd_test_tensor(ctx, t, c->heads, lsef);
        hd_tensor *tdo = hd_test_tensor(ctx, t, qd, dout), *tdq = hd_test_tensor(ctx, t, qd, NULL);
        hd_tensor *tdk = hd_test_tensor(ctx, t, kd, NULL), *tdv = hd_test_tensor(ctx, t, kd, NULL);
        hd_test_expect_ran_on(
            ctx, hd_attention_backward(ctx, &opt, tq, tk, tv, tout, tlse, tdo, tdq, tdk, tdv), b,
            what);
        float *gq = hd_test_read(tdq), *gk = hd_test_read(tdk), *gv = hd_test_read(tdv);
        double rel = 1e-4 * (1.0 + c->range);
        expect_attention_close("dq", gq, dq, t * qd, rel);
        expect_attention_close("dk", gk, dk, t * kd, rel);
        expect_attention_close("dv", gv, dv, t * kd, rel);
        free(gq);
        free(gk);
        free(gv);
        hd_tensor *all[] = {tq, tk, tv, to, tl, tout, tlse, tdo, tdq, tdk, tdv};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            hd_tensor_destroy(all[i]);
        hd_test_release_backend(shared_ctx, HD_OP_ATTENTION);
        hd_test_release_backend(shared_ctx, HD_OP_ATTENTION_BACKWARD);
    }
    float *f[] = {q, k, v, dout, outf, lsef};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        free(f[i]);
    double *dd[] = {out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++)
        free(dd[i]);
}

static void test_attention_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(41);
    static const size_t unequal[] = {1, 7, 40, 13};
    static const size_t ones[] = {1, 1, 1};
    const attention_case cases[] = {
        {1, 1, 1, 8, NULL, 0, true, 1, 0},
        {3, 1, 1, 8, ones, 3, true, 1, 0},
        {61, 4, 1, 64, unequal, 4, true, 1, 0},
        {61, 4, 2, 72, unequal, 4, false, 1, 0},
        {37, 2, 2, 16, NULL, 0, false, 2, 0},
        {70, 8, 2, 32, NULL, 0, true, 2, 0},
        {29, 2, 1, 256, NULL, 0, true, 1, 0},
        {45, 4, 4, 8, NULL, 0, true, 30, 0}, /* scores of hundreds: the softmax rescales often */
        /* sliding windows: shorter than some sequences and longer than others, of one key
         * (each row itself alone), and across tiles of keys */
        {61, 4, 1, 64, unequal, 4, true, 1, 5},
        {70, 8, 2, 32, NULL, 0, true, 2, 1},
        {97, 4, 2, 128, NULL, 0, true, 1, 33},
        {45, 4, 4, 8, NULL, 0, true, 30, 16},
        {29, 2, 1, 256, NULL, 0, true, 1, 29},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_attention(&cases[i], &rng);
    (void)state;
}

/* The range tables the backends read, as the header defines them: a row's keys are those of
 * its sequence, up to itself when causal, the last `window` of them with a window; a key's
 * rows are exactly the rows whose range holds it; no range is empty and both ends never
 * decrease. Worked out by hand for sequences of 5 and 3 with a window of 2, then checked
 * against the definition for random packings and windows. */
static void test_attention_ranges_follow_sequences_and_windows(void **state)
{
    const size_t two[] = {5, 3};
    int32_t kv[16], q[16];
    hd__sequence_attention_ranges(two, 2, 8, true, 2, kv, q);
    const int32_t kv_want[16] = {0, 1, 0, 2, 1, 3, 2, 4, 3, 5, 5, 6, 5, 7, 6, 8};
    const int32_t q_want[16] = {0, 2, 1, 3, 2, 4, 3, 5, 4, 5, 5, 7, 6, 8, 7, 8};
    assert_memory_equal(kv, kv_want, sizeof kv);
    assert_memory_equal(q, q_want, sizeof q);
    hd_rng rng = hd_test_rng(46);
    for (int trial = 0; trial < 200; trial++) {
        size_t lengths[6], count = (size_t)hd_test_uniform(&rng, 0, 5.99f), rows = 0;
        for (size_t s = 0; s < count; s++)
            rows += lengths[s] = 1 + (size_t)hd_test_uniform(&rng, 0, 12.99f);
        if (count == 0)
            rows = 1 + (size_t)hd_test_uniform(&rng, 0, 29.99f);
        bool causal = trial % 3 != 0;
        size_t window = causal ? (size_t)hd_test_uniform(&rng, 0, 8.99f) : 0;
        int32_t kvr[2 * 80], qr[2 * 80]; /* at most 5 sequences of 13 */
        hd__sequence_attention_ranges(lengths, count, rows, causal, window, kvr, qr);
        size_t begin = 0, s = 0;
        for (size_t i = 0; i < rows; i++) {
            size_t end = count == 0 ? rows : begin + lengths[s];
            for (size_t j = 0; j < rows; j++) {
                bool attends = j >= begin && j < end && (!causal || j <= i) &&
                               (window == 0 || i - j < window || j > i);
                bool in_kv = (int32_t)j >= kvr[2 * i] && (int32_t)j < kvr[2 * i + 1];
                bool in_q = (int32_t)i >= qr[2 * j] && (int32_t)i < qr[2 * j + 1];
                if (attends != in_kv || attends != in_q)
                    fail_msg("%zu sequences, causal %d, window %zu: row %zu, key %zu: attends %d, "
                             "kv range %d, q range %d",
                             count, causal, window, i, j, attends, in_kv, in_q);
            }
            assert_true(kvr[2 * i] < kvr[2 * i + 1] && qr[2 * i] < qr[2 * i + 1]);
            if (i > 0)
                assert_true(kvr[2 * i] >= kvr[2 * i - 2] && kvr[2 * i + 1] >= kvr[2 * i - 1] &&
                            qr[2 * i] >= qr[2 * i - 2] && qr[2 * i + 1] >= qr[2 * i - 1]);
            if (count > 0 && i + 1 == end) {
                begin = end;
                s++;
            }
        }
    }
    (void)state;
}

/* Calls of the same tokens whose sequences or windows differ, one after another and back: the
 * fused backend keeps each call's range tables on the device for the next one (a step's
 * layers), and must copy them again when they change. */
static void test_attention_follows_changing_sequences(void **state)
{
    hd_rng rng = hd_test_rng(44);
    static const size_t split[] = {10, 14}, other[] = {14, 10};
    const attention_case cases[] = {
        {24, 2, 1, 8, NULL, 0, true, 1, 0},  {24, 2, 1, 8, split, 2, true, 1, 0},
        {24, 2, 1, 8, other, 2, true, 1, 0}, {24, 2, 1, 8, other, 2, false, 1, 0},
        {24, 2, 1, 8, NULL, 0, true, 1, 0},  {24, 2, 1, 8, NULL, 0, true, 1, 6},
        {24, 2, 1, 8, NULL, 0, true, 1, 7},  {24, 2, 1, 8, split, 2, true, 1, 7},
        {24, 2, 1, 8, NULL, 0, true, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_attention(&cases[i], &rng);
    (void)state;
}

/* Every tile variant the fused backend lists for the tuner computes attention right: each
 * runs as the tuner runs it (the call prepared once, the variant given, no fallback). */
static void test_attention_variants_match_reference(void **state)
{
    hd_context *ctx = shared_ctx;
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        skip();
    hd_rng rng = hd_test_rng(43);
    size_t t = 37, h = 4, hk = 2, d = 64;
    float *q = hd_test_random(&rng, t * h * d, -1, 1), *k = hd_test_random(&rng, t * hk * d, -1, 1);
    float *v = hd_test_random(&rng, t * hk * d, -1, 1);
    int lens[1] = {(int)t};
    hd_ref_attention_shape rs = {t, h, hk, d, lens, 1, true, 1.0 / sqrt((double)d), 0};
    double *out = hd_test_doubles(t * h * d);
    hd__ref_attention(&rs, q, k, v, out, NULL);
    hd_tensor *tq = hd_test_tensor(ctx, t, h * d, q), *tk = hd_test_tensor(ctx, t, hk * d, k);
    hd_tensor *tv = hd_test_tensor(ctx, t, hk * d, v), *to = hd_test_tensor(ctx, t, h * d, NULL);
    const hd_tensor *tensors[] = {tq, tk, tv, to, NULL};
    hd_op_params p = {.heads = h, .kv_heads = hk, .causal = true};
    hd_call call;
    assert_int_equal(hd__call_prepare(ctx, HD_OP_ATTENTION, tensors, &p, &call), HD_OK);
    const char *variants[32];
    size_t n =
        hd__backend_variants(ctx, HD_BACKEND_FUSED, HD_OP_ATTENTION, &call.shape, variants, 32);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++) {
        hd_call c = call;
        hd_status s = hd__call_run_on(ctx, HD_BACKEND_FUSED, &c, variants[i]);
        if (s == HD_ERR_BUILD || s == HD_ERR_UNSUPPORTED) /* a tile the device cannot hold */
            continue;
        if (s != HD_OK)
            fail_msg("variant %s: %s", variants[i], hd_context_last_error(ctx));
        float *got = hd_test_read(to);
        char what[96];
        snprintf(what, sizeof what, "attention, variant %s", variants[i]);
        expect_attention_close(what, got, out, t * h * d, 2e-5);
        free(got);
    }
    hd_tensor *all[] = {tq, tk, tv, to};
    for (size_t i = 0; i < 4; i++)
        hd_tensor_destroy(all[i]);
    free(q);
    free(k);
    free(v);
    free(out);
    (void)state;
}

static void test_attention_refuses_bad_arguments(void **state)
{
    hd_context *ctx = shared_ctx;
    float zeros[8 * 32] = {0};
    hd_tensor *q = hd_test_tensor(ctx, 8, 32, zeros), *k = hd_test_tensor(ctx, 8, 16, zeros);
    hd_tensor *v = hd_test_tensor(ctx, 8, 16, zeros), *out = hd_test_tensor(ctx, 8, 32, zeros);
    hd_attention_options opt = {.heads = 4, .kv_heads = 3};
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_INVALID_ARGUMENT);
    opt = (hd_attention_options){.heads = 2, .kv_heads = 1}; /* head_dim 16; k is 8 x 16 */
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_OK);
    opt = (hd_attention_options){.heads = 8, .kv_heads = 4}; /* head_dim 4: not a multiple of 8 */
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_UNSUPPORTED);
    opt = (hd_attention_options){.heads = 4, .kv_heads = 1}; /* k should be 8 x 8 */
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_SHAPE_MISMATCH);
    size_t lengths[] = {3, 4};
    opt = (hd_attention_options){.heads = 2, .kv_heads = 1, .sequences = {lengths, 2}};
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_INVALID_ARGUMENT);
    opt = (hd_attention_options){.heads = 2, .kv_heads = 1, .scale = -1.0f};
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_INVALID_ARGUMENT);
    opt = (hd_attention_options){.heads = 2, .kv_heads = 1, .window = 3}; /* not causal */
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, out, NULL), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "goes with a causal mask"));
    assert_int_equal(hd_attention(ctx, NULL, q, k, v, out, NULL), HD_ERR_INVALID_ARGUMENT);
    opt = (hd_attention_options){.heads = 2, .kv_heads = 1};
    assert_int_equal(hd_attention(ctx, &opt, q, k, v, q, NULL), HD_ERR_ALIASING);
    hd_tensor *all[] = {q, k, v, out};
    for (size_t i = 0; i < 4; i++)
        hd_tensor_destroy(all[i]);
    (void)state;
}

/* ---- argument errors: a clear status, every output untouched ---- */

static void test_step_ops_refuse_bad_arguments(void **state)
{
    hd_context *ctx = shared_ctx;
    float seven[12] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
    hd_tensor *a = hd_test_tensor(ctx, 3, 4, seven), *b = hd_test_tensor(ctx, 3, 4, seven);
    hd_tensor *y = hd_test_tensor(ctx, 3, 4, seven), *wrong = hd_test_tensor(ctx, 4, 3, seven);
    hd_tensor *table = hd_test_tensor(ctx, 2, 4, seven);
    assert_int_equal(hd_swiglu(ctx, a, wrong, y), HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_swiglu(ctx, NULL, b, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_swiglu_backward(ctx, a, b, y, wrong, wrong), HD_ERR_ALIASING);
    assert_int_equal(hd_gelu_backward(ctx, a, b, wrong), HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_add(ctx, 1.0f, a, a), HD_ERR_ALIASING);
    hd_test_expect_unchanged("y after refused calls", y, seven);
    hd_test_expect_unchanged("wrong after refused calls", wrong, seven);

    hd_rope_options opt = {.head_dim = 3, .theta = 10000.0f};
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT); /* odd head_dim */
    opt.head_dim = 8;
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT); /* 8 does not divide 4 */
    opt.head_dim = 4;
    opt.theta = NAN;
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT);
    opt.theta = 10000.0f;
    size_t lengths[] = {2, 2};
    opt.sequences = (hd_sequences){lengths, 2};
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT); /* 4 rows, not 3 */
    opt.sequences = (hd_sequences){NULL, 2};
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT);
    opt.sequences = (hd_sequences){NULL, 0};
    opt.position_offset = (size_t)1 << 24;
    assert_int_equal(hd_rope(ctx, &opt, a, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_rope(ctx, NULL, a, y), HD_ERR_INVALID_ARGUMENT);
    hd_test_expect_unchanged("y after refused RoPE", y, seven);

    int32_t ids[3] = {0, 2, 1}; /* 2 is past the table's 2 rows */
    const int32_t square_ids_in_range[3] = {1, 0, 1};
    assert_int_equal(hd_embedding(ctx, table, ids, y), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "ids[1] = 2"));
    ids[1] = -1;
    assert_int_equal(hd_embedding(ctx, table, ids, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_embedding(ctx, table, NULL, y), HD_ERR_INVALID_ARGUMENT);
    hd_test_expect_unchanged("y after refused embeddings", y, seven);
    /* the ids as a tensor: int32 of 3 x 1, of this context, every id in range */
    hd_tensor *tid = hd_test_ids(ctx, 3, ids);
    ids[1] = 2;
    assert_int_equal(hd_tensor_write_raw(tid, ids), HD_OK);
    assert_int_equal(hd_embedding_ids(ctx, table, tid, y), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "hd_embedding_ids: ids[1] = 2"));
    assert_int_equal(hd_embedding_ids(ctx, table, NULL, y), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "hd_embedding_ids: tensor 'ids' is NULL"));
    assert_int_equal(hd_embedding_ids(ctx, table, a, y), HD_ERR_INVALID_ARGUMENT); /* floats */
    hd_tensor *wrong_ids = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 3, 2, HD_DTYPE_I32, &wrong_ids), HD_OK);
    assert_int_equal(hd_embedding_ids(ctx, table, wrong_ids, y), HD_ERR_SHAPE_MISMATCH);
    hd_tensor_destroy(wrong_ids);
    assert_int_equal(hd_tensor_create_ex(ctx, 2, 1, HD_DTYPE_I32, &wrong_ids), HD_OK);
    assert_int_equal(hd_embedding_ids(ctx, table, wrong_ids, y), HD_ERR_SHAPE_MISMATCH);
    hd_context *other = hd_test_context(true);
    hd_tensor *other_ids = NULL;
    assert_int_equal(hd_tensor_create_ex(other, 3, 1, HD_DTYPE_I32, &other_ids), HD_OK);
    assert_int_equal(hd_embedding_ids(ctx, table, other_ids, y), HD_ERR_WRONG_CONTEXT);
    assert_non_null(strstr(hd_context_last_error(ctx),
                           "hd_embedding_ids: tensor 'ids' was created in another context"));
    /* an int32 tensor where an op takes floats */
    hd_tensor *int_table = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 2, 4, HD_DTYPE_I32, &int_table), HD_OK);
    assert_int_equal(hd_embedding(ctx, int_table, square_ids_in_range, y), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "'table' holds int32"));
    assert_int_equal(hd_swiglu(ctx, a, b, int_table), HD_ERR_INVALID_ARGUMENT);
    hd_test_expect_unchanged("y after refused embeddings of id tensors", y, seven);
    hd_tensor_destroy(tid);
    hd_tensor_destroy(wrong_ids);
    hd_tensor_destroy(int_table);
    hd_tensor_destroy(other_ids);
    hd_context_destroy(other);
    /* a square table as its own output: refused, as every output aliasing an input */
    hd_tensor *square = hd_test_tensor(ctx, 3, 3, NULL);
    const int32_t square_ids[3] = {2, 0, 1};
    assert_int_equal(hd_embedding(ctx, square, square_ids, square), HD_ERR_ALIASING);
    hd_tensor_destroy(square);

    hd_tensor *t[] = {a, b, y, wrong, table};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        hd_tensor_destroy(t[i]);
    (void)state;
}

/* Empty problems do nothing, on any backend. */
static void test_step_ops_on_empty_tensors_do_nothing(void **state)
{
    hd_context *ctx = shared_ctx;
    hd_tensor *e = hd_test_tensor(ctx, 0, 5, NULL), *f = hd_test_tensor(ctx, 0, 5, NULL);
    hd_tensor *g = hd_test_tensor(ctx, 0, 5, NULL);
    assert_int_equal(hd_swiglu(ctx, e, f, g), HD_OK);
    assert_int_equal(hd_gelu(ctx, e, g), HD_OK);
    assert_int_equal(hd_add(ctx, 2.0f, e, g), HD_OK);
    hd_tensor *table = hd_test_tensor(ctx, 4, 5, NULL);
    assert_int_equal(hd_embedding(ctx, table, NULL, g), HD_OK);
    hd_tensor *no_ids = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 0, 1, HD_DTYPE_I32, &no_ids), HD_OK);
    assert_int_equal(hd_embedding_ids(ctx, table, no_ids, g), HD_OK);
    hd_tensor_destroy(no_ids);
    hd_tensor_destroy(e);
    hd_tensor_destroy(f);
    hd_tensor_destroy(g);
    hd_tensor_destroy(table);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_ops_match_reference),
        cmocka_unit_test(test_elementwise_ops_at_large_inputs),
        cmocka_unit_test(test_elementwise_backward_matches_finite_differences),
        cmocka_unit_test(test_rope_matches_reference),
        cmocka_unit_test(test_rope_variants_match_reference),
        cmocka_unit_test(test_rope_follows_changing_positions),
        cmocka_unit_test(test_rope_inverse_restores_input),
        cmocka_unit_test(test_embedding_copies_table_rows),
        cmocka_unit_test(test_embedding_variants_match_reference),
        cmocka_unit_test(test_embedding_ids_follow_writes),
        cmocka_unit_test(test_attention_matches_reference),
        cmocka_unit_test(test_attention_variants_match_reference),
        cmocka_unit_test(test_attention_follows_changing_sequences),
        cmocka_unit_test(test_attention_ranges_follow_sequences_and_windows),
        cmocka_unit_test(test_attention_refuses_bad_arguments),
        cmocka_unit_test(test_step_ops_refuse_bad_arguments),
        cmocka_unit_test(test_step_ops_on_empty_tensors_do_nothing),
    };
    hd_test_filter_from_env();
    return cmocka_run_group_tests(tests, setup, teardown);
}
