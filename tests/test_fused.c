/*
 * The fused OpenCL kernels (PoCL in CI) against the float64 reference: through the public API
 * with the fused backend forced for the op (and hd_context_last_backend() checked), and through
 * the backend's slots directly for every kernel variant it lists (each once, on one small shape:
 * every distinct set of build options costs a program build, the suite's main cost on PoCL),
 * malformed variant strings, the split LoRA path (x*A in its own launch) and the LoRA epilogue
 * used by the hybrid plan. Shapes are small and odd: rows longer than a
 * work-group, rows shorter than the vector width, column counts that are not multiples of 4,
 * 1×1, one token and 16 tokens, ranks 0, 1, a prime and 64.
 *
 * Tolerances: GEMM and LoRA use the rounding bound k*FLT_EPSILON*sum|a||b| (factor below).
 * Softmax and the norms reduce in float through a tree (error ~ log2(cols) ulps of the sum):
 * softmax |err| <= 1e-9 + 3e-5*|ref|, norms |err| <= 3e-5 + 3e-5*|ref| for inputs in [-2, 2].
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testlib.h"

#include "autotune/reference_step.h"

#include "backends/fused/fused.h"
#include "backends/fused/internal.h"
#include "dispatch/context.h"
#include "dispatch/tensor.h"
#include "dispatch/tools.h"

#define GEMM_FACTOR 2.0
#define SOFTMAX_ATOL 1e-9
#define SOFTMAX_RTOL 3e-5
#define NORM_ATOL 3e-5
#define NORM_RTOL 3e-5
#define NORM_EPS 1e-5f

static int setup(void **state)
{
    hd_context *ctx = hd_test_context(false);
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        fail_msg("no fused backend: %s", hd_context_last_error(ctx));
    for (int op = 0; op < HD_OP_COUNT; op++)
        assert_int_equal(hd_context_set_backend(ctx, (hd_op)op, HD_BACKEND_FUSED), HD_OK);
    *state = ctx;
    return 0;
}

static int teardown(void **state)
{
    hd_context_destroy(*state);
    return 0;
}

static void expect_fused(hd_context *ctx, hd_status s, const char *what)
{
    hd_test_expect_ran_on(ctx, s, HD_BACKEND_FUSED, what);
}

/* A listed variant may ask for a larger work-group than the kernel compiled for this device
 * can run (register use): the backend declines it with HD_ERR_UNSUPPORTED, which the tuner
 * skips. Returns true (and says so) for exactly that case. */
static bool beyond_device_limit(hd_context *ctx, hd_status s, const char *what)
{
    if (s != HD_ERR_UNSUPPORTED || strstr(hd_context_last_error(ctx), "work-items per group") == NULL)
        return false;
    fprintf(stderr, "# %s: declined on this device: %s\n", what, hd_context_last_error(ctx));
    return true;
}

/* ---- row operations ---- */

static const hd_test_matrix_shape extra_row_shapes[] = {
    {1, 3},    /* shorter than the vector width */
    {2, 2},    {300, 8}, /* many short rows per work-group */
    {3, 1028}, /* aligned, longer than a work-group */
    {2, 5000}, /* beyond the default register capacity of one row slot: looped or wide */
    {4, 6},
};

typedef struct row_data {
    size_t rows, cols;
    float *x, *gamma, *beta;
    double *want;
} row_data;

static row_data row_data_make(hd_op op, size_t rows, size_t cols, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    row_data d = {rows, cols, hd_test_floats(rows * cols), hd_test_floats(cols),
                  hd_test_floats(cols), hd_test_doubles(rows * cols)};
    hd_test_fill(&rng, d.x, rows * cols, op == HD_OP_SOFTMAX ? -8.0f : -2.0f,
                 op == HD_OP_SOFTMAX ? 8.0f : 2.0f);
    hd_test_fill(&rng, d.gamma, cols, 0.5f, 1.5f);
    hd_test_fill(&rng, d.beta, cols, -1.0f, 1.0f);
    if (op == HD_OP_SOFTMAX)
        hd_ref_softmax(rows, cols, d.x, d.want);
    else if (op == HD_OP_LAYER_NORM)
        hd_ref_layer_norm(rows, cols, d.x, d.gamma, d.beta, NORM_EPS, d.want);
    else
        hd_ref_rms_norm(rows, cols, d.x, d.gamma, NORM_EPS, d.want);
    return d;
}

static void row_data_free(row_data *d)
{
    free(d->x);
    free(d->gamma);
    free(d->beta);
    free(d->want);
}

static void expect_row_close(hd_op op, const char *what, const float *got, const row_data *d)
{
    size_t n = d->rows * d->cols;
    if (op == HD_OP_SOFTMAX)
        hd_test_expect_close(what, got, d->want, n, SOFTMAX_ATOL, SOFTMAX_RTOL);
    else
        hd_test_expect_close(what, got, d->want, n, NORM_ATOL, NORM_RTOL);
}

static hd_status row_call(hd_context *ctx, hd_op op, hd_tensor *x, hd_tensor *g, hd_tensor *b,
                          hd_tensor *y)
{
    if (op == HD_OP_SOFTMAX)
        return hd_softmax(ctx, x, y);
    if (op == HD_OP_LAYER_NORM)
        return hd_layer_norm(ctx, x, g, b, NORM_EPS, y);
    return hd_rms_norm(ctx, x, g, NORM_EPS, y);
}

static void check_row_shape(hd_context *ctx, hd_op op, size_t rows, size_t cols, bool in_place,
                            uint64_t salt)
{
    row_data d = row_data_make(op, rows, cols, salt);
    hd_tensor *x = hd_test_tensor(ctx, rows, cols, d.x);
    hd_tensor *g = hd_test_tensor(ctx, 1, cols, d.gamma);
    hd_tensor *b = hd_test_tensor(ctx, 1, cols, d.beta);
    hd_tensor *y = in_place ? x : hd_test_tensor(ctx, rows, cols, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s %zux%zu%s", hd_op_name(op), rows, cols,
             in_place ? " in place" : "");
    expect_fused(ctx, row_call(ctx, op, x, g, b, y), what);
    float *got = hd_test_read(y);
    expect_row_close(op, what, got, &d);
    free(got);
    if (!in_place)
        hd_tensor_destroy(y);
    hd_tensor_destroy(x);
    hd_tensor_destroy(g);
    hd_tensor_destroy(b);
    row_data_free(&d);
}

static void check_row_op(hd_context *ctx, hd_op op)
{
    for (size_t i = 0; i < hd_test_row_shape_count; i++)
        check_row_shape(ctx, op, hd_test_row_shapes[i].rows, hd_test_row_shapes[i].cols, false,
                        100 * op + i);
    size_t extra = sizeof extra_row_shapes / sizeof extra_row_shapes[0];
    for (size_t i = 0; i < extra; i++)
        check_row_shape(ctx, op, extra_row_shapes[i].rows, extra_row_shapes[i].cols, false,
                        100 * op + 50 + i);
}

static void test_softmax_matches_reference(void **state)
{
    check_row_op(*state, HD_OP_SOFTMAX);
}

static void test_layer_norm_matches_reference(void **state)
{
    check_row_op(*state, HD_OP_LAYER_NORM);
}

static void test_rms_norm_matches_reference(void **state)
{
    check_row_op(*state, HD_OP_RMS_NORM);
}

/* Shapes drawn from the whole class (testlib), fresh each run, every other one in place. */
static void test_row_ops_random_shapes_match_reference(void **state)
{
    hd_rng rng = hd_test_rng(600);
    for (int op = HD_OP_SOFTMAX; op <= HD_OP_RMS_NORM; op++)
        for (int i = 0; i < 4; i++) {
            hd_test_matrix_shape s = hd_test_random_row_shape(&rng);
            check_row_shape(*state, (hd_op)op, s.rows, s.cols, i % 2 == 1,
                            610 + 10 * (uint64_t)op + (uint64_t)i);
        }
}

static void test_row_ops_in_place(void **state)
{
    for (int op = HD_OP_SOFTMAX; op <= HD_OP_RMS_NORM; op++) {
        check_row_shape(*state, (hd_op)op, 5, 1031, true, 700 + op);
        check_row_shape(*state, (hd_op)op, 9, 64, true, 710 + op);
    }
}

static void test_softmax_nan_row_is_nan_and_others_finite(void **state)
{
    hd_context *ctx = *state;
    float x[2 * 6] = {1, 2, NAN, 4, 5, 6, 1, 2, 3, 4, 5, 6};
    hd_tensor *t = hd_test_tensor(ctx, 2, 6, x);
    expect_fused(ctx, hd_softmax(ctx, t, t), "softmax with NaN");
    float *got = hd_test_read(t);
    for (int j = 0; j < 6; j++) {
        assert_true(isnan(got[j]));
        assert_true(isfinite(got[6 + j]) && got[6 + j] > 0.0f);
    }
    free(got);
    hd_tensor_destroy(t);
}

/* ---- the backend's slots directly, with variant strings ---- */

static const hd_backend_impl *fused_impl(hd_context *ctx, void **fstate)
{
    *fstate = ctx->backend_state[HD_BACKEND_FUSED];
    assert_non_null(ctx->backends[HD_BACKEND_FUSED]);
    return ctx->backends[HD_BACKEND_FUSED];
}

static void to_device(hd_tensor *t)
{
    assert_int_equal(hd__tensor_to_device(t), HD_OK);
}

/* Runs a row op on the fused slot with variant; y is marked written on success. */
static hd_status row_slot(hd_context *ctx, hd_op op, hd_tensor *x, hd_tensor *g, hd_tensor *b,
                          hd_tensor *y, const char *variant)
{
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    to_device(x);
    to_device(g);
    to_device(b);
    assert_int_equal(hd__tensor_to_device(y), HD_OK);
    hd_row_args args = {.x = x,
                        .gamma = op == HD_OP_SOFTMAX ? NULL : g,
                        .beta = op == HD_OP_LAYER_NORM ? b : NULL,
                        .eps = NORM_EPS,
                        .y = y,
                        .rows = x->rows,
                        .cols = x->cols,
                        .variant = variant};
    hd_status s = impl->run[op](fs, ctx, &(hd_op_args){.row = args});
    if (s == HD_OK)
        hd__tensor_written(y, HD_PLACE_DEVICE);
    return s;
}

/* One row op on the fused slot with variant on a rows×cols problem, against the reference. */
static void check_row_variant(hd_context *ctx, hd_op op, size_t rows, size_t cols,
                              const char *variant, uint64_t salt)
{
    row_data d = row_data_make(op, rows, cols, salt);
    hd_tensor *x = hd_test_tensor(ctx, rows, cols, d.x);
    hd_tensor *g = hd_test_tensor(ctx, 1, cols, d.gamma);
    hd_tensor *b = hd_test_tensor(ctx, 1, cols, d.beta);
    hd_tensor *y = hd_test_tensor(ctx, rows, cols, NULL);
    char what[128];
    snprintf(what, sizeof what, "%s %zux%zu [%s]", hd_op_name(op), rows, cols, variant);
    hd_status s = row_slot(ctx, op, x, g, b, y, variant);
    if (!beyond_device_limit(ctx, s, what)) {
        if (s != HD_OK)
            fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
        float *got = hd_test_read(y);
        expect_row_close(op, what, got, &d);
        free(got);
    }
    hd_tensor_destroy(x);
    hd_tensor_destroy(g);
    hd_tensor_destroy(b);
    hd_tensor_destroy(y);
    row_data_free(&d);
}

/* Every variant the backend lists for rows of 1024, 4096 and 13 floats, each once, on the
 * first of those lengths that lists it; the op rotates over the three kernels, so each variant
 * costs one program build while every op still meets registers, loops and several group
 * shapes. */
/* ---- softmax with masks ---- */

/* Row r of a masked softmax case: 0, the first three quarters -inf, the rest finite; 1, -inf
 * but the last; 2, every other value -inf; 3, all -inf (NaN throughout); 4, all -inf and a NaN
 * (NaN throughout). */
static void masked_row(size_t r, size_t cols, hd_rng *rng, float *x)
{
    for (size_t j = 0; j < cols; j++) {
        bool masked = r == 0   ? j < cols * 3 / 4
                      : r == 1 ? j + 1 < cols
                      : r == 2 ? j % 2 == 0
                               : true;
        x[j] = masked ? -INFINITY : hd_test_uniform(rng, -4.0f, 4.0f);
    }
    if (r == 4)
        x[cols / 2] = NAN;
}

/* Masked rows (-inf entries get 0; a row of -inf alone, or with a NaN, gives NaN throughout) on
 * the kernel that holds the row in registers and on the looped one, whose work-items each meet
 * runs of -inf alone, short and long rows, float4 and scalar loads. */
static void test_softmax_masked_rows_every_kernel(void **state)
{
    hd_context *ctx = *state;
    enum { ROWS = 5 };
    static const size_t col_counts[] = {13, 1024, 4099, 16388};
    static const char *const variants[] = {NULL, "CACHE=0", "WG=64 VEC=1 CACHE=0"};
    for (size_t c = 0; c < sizeof col_counts / sizeof col_counts[0]; c++) {
        size_t cols = col_counts[c];
        float *x = malloc(ROWS * cols * sizeof *x);
        assert_non_null(x);
        hd_rng rng = hd_test_rng(9300 + c);
        for (size_t r = 0; r < ROWS; r++)
            masked_row(r, cols, &rng, x + r * cols);
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            hd_tensor *tx = hd_test_tensor(ctx, ROWS, cols, x);
            hd_tensor *ty = hd_test_tensor(ctx, ROWS, cols, NULL);
            char what[96];
            snprintf(what, sizeof what, "masked softmax %dx%zu [%s]", ROWS, cols,
                     variants[v] ? variants[v] : "default");
            hd_status s = row_slot(ctx, HD_OP_SOFTMAX, tx, tx, tx, ty, variants[v]);
            if (s != HD_OK)
                fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
            float *got = hd_test_read(ty);
            for (size_t r = 0; r < ROWS; r++) {
                const float *xr = x + r * cols, *gr = got + r * cols;
                if (r >= 3) {
                    for (size_t j = 0; j < cols; j++)
                        if (!isnan(gr[j]))
                            fail_msg("%s: row %zu [%zu] = %g, not NaN", what, r, j, gr[j]);
                    continue;
                }
                double mx = -INFINITY, sum = 0.0;
                for (size_t j = 0; j < cols; j++)
                    mx = xr[j] > mx ? xr[j] : mx;
                for (size_t j = 0; j < cols; j++)
                    sum += exp((double)xr[j] - mx);
                for (size_t j = 0; j < cols; j++) {
                    double want = exp((double)xr[j] - mx) / sum;
                    if (!(fabs(gr[j] - want) <= 1e-5 * want + 1e-7))
                        fail_msg("%s: row %zu [%zu] = %g, want %g", what, r, j, gr[j], want);
                }
            }
            free(got);
            hd_tensor_destroy(tx);
            hd_tensor_destroy(ty);
        }
        free(x);
    }
}

/* ---- the norms at extreme magnitudes ---- */

/* One row of cols values of kind k (see norm_kinds), in x; eps the case runs with. */
typedef enum norm_kind {
    NORM_ALTERNATING_1E20, /* +-1e20 */
    NORM_RANDOM_1E30,      /* +-[0.5, 1] * 1e30, random signs */
    NORM_FLT_MAX,          /* FLT_MAX (RMS), +-FLT_MAX alternating (layer norm) */
    NORM_TINY_NO_EPS,      /* +-[0.5, 1] * 1e-30 with eps = 0 */
    NORM_FAR_FROM_ZERO,    /* mean 1e4, sigma 0.02 */
    NORM_CONSTANT_1E30,    /* every value 1e30 with eps > 0: layer norm's y is beta */
    NORM_TINY_WITH_EPS,    /* +-[0.5, 1] * 1e-30 with eps > 0, far above the variance */
    NORM_KIND_COUNT
} norm_kind;

static const char *const norm_kind_names[] = {
    "+-1e20",        "+-1e30",          "FLT_MAX", "+-1e-30 eps=0", "mean 1e4 sigma 0.02",
    "constant 1e30", "+-1e-30 eps=1e-5"};

static float norm_row(norm_kind k, hd_op op, size_t cols, hd_rng *rng, float *x)
{
    for (size_t j = 0; j < cols; j++) {
        float sign = hd_test_uniform(rng, 0, 1) < 0.5f ? -1.0f : 1.0f;
        switch (k) {
        case NORM_ALTERNATING_1E20:
            x[j] = j % 2 ? -1e20f : 1e20f;
            break;
        case NORM_RANDOM_1E30:
            x[j] = sign * hd_test_uniform(rng, 0.5f, 1.0f) * 1e30f;
            break;
        case NORM_FLT_MAX:
            x[j] = op == HD_OP_RMS_NORM || j % 2 ? FLT_MAX : -FLT_MAX;
            break;
        case NORM_TINY_NO_EPS:
        case NORM_TINY_WITH_EPS:
            x[j] = sign * hd_test_uniform(rng, 0.5f, 1.0f) * 1e-30f;
            break;
        case NORM_CONSTANT_1E30:
            x[j] = 1e30f;
            break;
        default:
            x[j] = 1e4f + hd_test_uniform(rng, -0.0346f, 0.0346f); /* sigma 0.02 */
            break;
        }
    }
    return k == NORM_TINY_NO_EPS ? 0.0f : NORM_EPS;
}

/* softmax backward on rows held in registers (default variant) and looped ones (CACHE=0), with
 * float4 loads and scalar ones, rows past a work-group's, against the float64 reference. */
static void test_softmax_backward_both_kernels_match_reference(void **state)
{
    hd_context *ctx = *state;
    static const size_t col_counts[] = {256, 67, 1};
    static const char *const variants[] = {NULL, "CACHE=0", "WG=64 ROWS=4"};
    enum { ROWS = 5 };
    for (size_t c = 0; c < sizeof col_counts / sizeof col_counts[0]; c++) {
        size_t cols = col_counts[c], n = ROWS * cols;
        hd_rng rng = hd_test_rng(2100 + c);
        /* y as the forward gives it, rows of probabilities: with rows of U(0, 1) the sum
         * dy . y reached about cols / 4 and its float rounding the absolute bound below */
        float *y = hd_test_random(&rng, n, 0.0f, 1.0f);
        for (size_t r = 0; r < ROWS; r++) {
            float sum = 0.0f;
            for (size_t j = 0; j < cols; j++)
                sum += y[r * cols + j];
            for (size_t j = 0; j < cols; j++)
                y[r * cols + j] /= sum;
        }
        float *dy = hd_test_random(&rng, n, -1.0f, 1.0f);
        double *want = hd_test_doubles(n);
        hd_ref_softmax_backward(ROWS, cols, y, dy, want);
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            hd_tensor *ty = hd_test_tensor(ctx, ROWS, cols, y);
            hd_tensor *tdy = hd_test_tensor(ctx, ROWS, cols, dy);
            hd_tensor *tdx = hd_test_tensor(ctx, ROWS, cols, NULL);
            void *fs;
            const hd_backend_impl *impl = fused_impl(ctx, &fs);
            to_device(ty);
            to_device(tdy);
            to_device(tdx);
            hd_row_backward_args args = {
                .x = ty, .dy = tdy, .dx = tdx, .rows = ROWS, .cols = cols, .variant = variants[v]};
            hd_status s =
                impl->run[HD_OP_SOFTMAX_BACKWARD](fs, ctx, &(hd_op_args){.row_backward = args});
            char what[96];
            snprintf(what, sizeof what, "softmax backward, %zu columns [%s]", cols,
                     variants[v] ? variants[v] : "default");
            if (s != HD_OK)
                fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
            hd__tensor_written(tdx, HD_PLACE_DEVICE);
            float *got = hd_test_read(tdx);
            hd_test_expect_close(what, got, want, n, 1e-6, 1e-5);
            free(got);
            hd_tensor_destroy(ty);
            hd_tensor_destroy(tdy);
            hd_tensor_destroy(tdx);
        }
        free(y);
        free(dy);
        free(want);
    }
}

/* Every kind, on rows held in registers (default variant) and looped ones (CACHE=0), with
 * float4 loads (256 columns) and scalar ones (67), against the float64 reference. The CPU
 * backend was right on all of these; the fused kernels gave 0, beta, -inf or 3 % errors. */
static void test_norms_extreme_magnitudes_match_reference(void **state)
{
    hd_context *ctx = *state;
    static const size_t col_counts[] = {256, 67};
    static const char *const variants[] = {NULL, "CACHE=0"};
    enum { ROWS = 3 };
    for (int opi = 0; opi < 2; opi++) {
        hd_op op = opi ? HD_OP_RMS_NORM : HD_OP_LAYER_NORM;
        for (int k = 0; k < NORM_KIND_COUNT; k++) {
            for (size_t c = 0; c < 2; c++) {
                size_t cols = col_counts[c], n = ROWS * cols;
                hd_rng rng = hd_test_rng(2000 + (uint64_t)(k * 10 + c));
                float *x = hd_test_floats(n), eps = 0.0f;
                for (size_t r = 0; r < ROWS; r++)
                    eps = norm_row((norm_kind)k, op, cols, &rng, x + r * cols);
                float *g = hd_test_random(&rng, cols, 0.5f, 1.5f);
                float *b = hd_test_random(&rng, cols, -1.0f, 1.0f);
                double *want = hd_test_doubles(n);
                if (op == HD_OP_LAYER_NORM)
                    hd_ref_layer_norm(ROWS, cols, x, g, b, eps, want);
                else
                    hd_ref_rms_norm(ROWS, cols, x, g, eps, want);
                for (size_t v = 0; v < 2; v++) {
                    hd_tensor *tx = hd_test_tensor(ctx, ROWS, cols, x);
                    hd_tensor *tg = hd_test_tensor(ctx, 1, cols, g);
                    hd_tensor *tb = hd_test_tensor(ctx, 1, cols, b);
                    hd_tensor *ty = hd_test_tensor(ctx, ROWS, cols, NULL);
                    void *fs;
                    const hd_backend_impl *impl = fused_impl(ctx, &fs);
                    to_device(tx);
                    to_device(tg);
                    to_device(tb);
                    to_device(ty);
                    hd_row_args args = {.x = tx,
                                        .gamma = tg,
                                        .beta = op == HD_OP_LAYER_NORM ? tb : NULL,
                                        .eps = eps,
                                        .y = ty,
                                        .rows = ROWS,
                                        .cols = cols,
                                        .variant = variants[v]};
                    hd_status s = impl->run[op](fs, ctx, &(hd_op_args){.row = args});
                    char what[160];
                    snprintf(what, sizeof what, "%s of %s rows, %zu columns [%s]",
                             hd_op_name(op), norm_kind_names[k], cols,
                             variants[v] ? variants[v] : "default");
                    if (s != HD_OK)
                        fail_msg("%s: %s (%s)", what, hd_status_name(s),
                                 hd_context_last_error(ctx));
                    hd__tensor_written(ty, HD_PLACE_DEVICE);
                    float *got = hd_test_read(ty);
                    hd_test_expect_close(what, got, want, n, NORM_ATOL, NORM_RTOL);
                    free(got);
                    hd_tensor_destroy(tx);
                    hd_tensor_destroy(tg);
                    hd_tensor_destroy(tb);
                    hd_tensor_destroy(ty);
                }
                free(x);
                free(g);
                free(b);
                free(want);
            }
        }
    }
}

static void test_row_ops_every_variant(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    /* Variants the list leaves out for these lengths: the looped kernels with short rows,
     * VEC=1 on aligned rows, a register capacity that does not hold the row (runs looped). */
    static const struct {
        const char *variant;
        size_t cols;
    } forced[] = {{"WG=64 ROWS=8 CACHE=0", 13}, {"WG=32 ROWS=2 VEC=1 CACHE=1", 13},
                  {"WG=128 VEC=1", 1024},       {"ROWS=4", 1024},
                  {"CACHE=2", 4096}};
    static const size_t cols[] = {1024, 4096, 13};
    const char *seen[64];
    size_t seen_count = 0, tested = 0;
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
        const char *list[32];
        hd_shape shape = {.dim = {3, cols[c]}};
        size_t count = impl->variants(fs, HD_OP_SOFTMAX, &shape, HD_PART_WHOLE, list, 32);
        assert_true(count > 0);
        for (size_t i = 0; i < count; i++) {
            bool again = false;
            for (size_t j = 0; j < seen_count && !again; j++)
                again = strcmp(seen[j], list[i]) == 0;
            if (again)
                continue;
            assert_true(seen_count < 64);
            seen[seen_count++] = list[i];
            hd_op op = (hd_op)(HD_OP_SOFTMAX + tested % 3);
            check_row_variant(ctx, op, 3, cols[c], list[i], 900 + tested++);
        }
    }
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; i++) {
        hd_op op = (hd_op)(HD_OP_SOFTMAX + tested % 3);
        check_row_variant(ctx, op, 3, forced[i].cols, forced[i].variant, 900 + tested++);
    }
}

static void test_variant_malformed_is_rejected(void **state)
{
    hd_context *ctx = *state;
    static const char *const bad[] = {
        "WG", "WG=", "=4", "WG=abc", "FOO=1", "WG=256 WG=256", "WG=3", "VEC=2", "VEC=8",
        "WG=2048", "CACHE=17", "WG=256;", "WG=256\t", "-DWG=256", "WG=256 -cl-opt-disable",
        "WG=0256000", "ROWS=512 WG=256", "TN=8",
    };
    float x[3 * 5] = {0};
    hd_tensor *t = hd_test_tensor(ctx, 3, 5, x);
    hd_tensor *g = hd_test_tensor(ctx, 1, 5, x);
    hd_tensor *y = hd_test_tensor(ctx, 3, 5, NULL);
    float sentinel[3 * 5];
    for (int i = 0; i < 15; i++)
        sentinel[i] = (float)i + 0.5f;
    assert_int_equal(hd_tensor_write(y, sentinel), HD_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hd_status s = row_slot(ctx, HD_OP_RMS_NORM, t, g, g, y, bad[i]);
        if (s != HD_ERR_INVALID_ARGUMENT)
            fail_msg("variant '%s' gave %s", bad[i], hd_status_name(s));
        assert_true(strlen(hd_context_last_error(ctx)) > 0);
    }
    float *got = hd_test_read(y);
    hd_test_expect_same("output after rejected variants", got, sentinel, 15);
    free(got);

    /* GEMM parameters are another family: row names are unknown there. */
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_tensor *a = hd_test_tensor(ctx, 1, 5, x), *b = hd_test_tensor(ctx, 5, 3, x);
    to_device(a);
    to_device(b);
    to_device(y);
    hd_gemm_args ga = {.alpha = 1, .a = a, .b = b, .c = y, .m = 1, .n = 3, .k = 5,
                       .variant = "ROWS=4"};
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                     HD_ERR_INVALID_ARGUMENT);
    ga.variant = "TN=2 KS=2"; /* group of 4: too small for LoRA, fine for GEMM */
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}), HD_OK);
    ga.variant = "TN=64 KS=64"; /* group of 4096 */
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                     HD_ERR_INVALID_ARGUMENT);
    ga.variant = "OVERLAP=2"; /* 0 or 1 */
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                     HD_ERR_INVALID_ARGUMENT);
    ga.variant = "SPLIT=4"; /* LoRA only */
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                     HD_ERR_INVALID_ARGUMENT);
    /* tile sides are multiples of 16, results per work-item multiples of 4 */
    static const char *const bad_tile[] = {"BM=100", "BN=24", "BM=272",
                                           "RM=6",   "RN=20", "BM=96 RM=8 RN=12 BN=100"};
    for (size_t i = 0; i < sizeof bad_tile / sizeof bad_tile[0]; i++) {
        ga.variant = bad_tile[i];
        assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                         HD_ERR_INVALID_ARGUMENT);
    }
    ga.variant = "BM=48 BN=96 BK=16 RM=12 RN=12"; /* 4 x 8 work-items */
    assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}), HD_OK);
    static const char *const bad_kg[] = {"KG=0", "KG=65", "KG=", "KG=2 KG=2", "KG=x"};
    for (size_t i = 0; i < sizeof bad_kg / sizeof bad_kg[0]; i++) {
        ga.variant = bad_kg[i];
        assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = ga}),
                         HD_ERR_INVALID_ARGUMENT);
    }
    hd_tensor *ar = hd_test_tensor(ctx, 5, 2, x), *br = hd_test_tensor(ctx, 2, 3, x);
    to_device(ar);
    to_device(br);
    hd_lora_args la = {.x = a, .w = b, .a = ar, .b = br, .scale = 1, .y = y, .tokens = 1,
                       .in = 5, .out = 3, .rank = 2};
    static const char *const bad_split[] = {"SPLIT=65", "SPLIT=-1", "SPLIT=", "SPLIT=4 SPLIT=4"};
    for (size_t i = 0; i < sizeof bad_split / sizeof bad_split[0]; i++) {
        la.variant = bad_split[i];
        assert_int_equal(impl->run[HD_OP_LORA](fs, ctx, &(hd_op_args){.lora = la}),
                         HD_ERR_INVALID_ARGUMENT);
    }
    hd_tensor_destroy(ar);
    hd_tensor_destroy(br);
    assert_int_equal(hd_sync(ctx), HD_OK);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(t);
    hd_tensor_destroy(g);
    hd_tensor_destroy(y);
}

/* ---- GEMM ---- */

typedef struct gemm_case {
    size_t m, n, k;
    float alpha, beta;
    bool nan_c;
    bool trans_a, trans_b;
} gemm_case;

/* The error bound's factor (hd_test_expect_gemm_close) of a precision: fp32's, also for fp32x3
 * (within twice fp32's error, or 2^-20 of the terms' magnitudes on short sums), and 2^-9 of
 * the terms' magnitudes for one TF32 product (operands truncated to TF32 by the warpgroup
 * kernel, each within 2^-10). */
static double gemm_factor(hd_precision precision, size_t k)
{
    double floor = precision == HD_PRECISION_TF32     ? 16384.0
                   : precision == HD_PRECISION_FP32X3 ? 8.0
                                                      : 0.0;
    return GEMM_FACTOR + floor / (double)(k + 1);
}

/* check_gemm_in's variant for the backend's own choice of parameters in a precision other
 * than the context's: the fused slot called directly with no variant. */
static const char DEFAULT_PARAMETERS[] = "default parameters";

static void check_gemm_in(hd_context *ctx, const gemm_case *gc, const char *variant,
                          hd_precision precision, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    size_t m = gc->m, n = gc->n, k = gc->k;
    float *a = hd_test_floats(m * k), *b = hd_test_floats(k * n), *c = hd_test_floats(m * n);
    hd_test_fill(&rng, a, m * k, -1, 1);
    hd_test_fill(&rng, b, k * n, -1, 1);
    hd_test_fill(&rng, c, m * n, -1, 1);
    if (gc->nan_c)
        for (size_t i = 0; i < m * n; i++)
            c[i] = NAN;
    double *want = hd_test_doubles(m * n), *bound = hd_test_doubles(m * n);
    hd_ref_gemm(gc->trans_a, gc->trans_b, m, n, k, gc->alpha, a, b, gc->beta, c, want, bound);
    hd_tensor *ta = gc->trans_a ? hd_test_tensor(ctx, k, m, a) : hd_test_tensor(ctx, m, k, a);
    hd_tensor *tb = gc->trans_b ? hd_test_tensor(ctx, n, k, b) : hd_test_tensor(ctx, k, n, b);
    hd_tensor *tc = hd_test_tensor(ctx, m, n, c);
    char what[160];
    snprintf(what, sizeof what, "gemm %zux%zux%zu %c%c alpha %g beta %g%s %s [%s]", m, n, k,
             gc->trans_a ? 't' : 'n', gc->trans_b ? 't' : 'n', (double)gc->alpha,
             (double)gc->beta, gc->nan_c ? " NaN C" : "", hd_precision_name(precision),
             variant ? variant : "default");
    if (variant == NULL) {
        expect_fused(ctx,
                     hd_gemm(ctx, gc->trans_a, gc->trans_b, gc->alpha, ta, tb, gc->beta, tc),
                     what);
    } else {
        void *fs;
        const hd_backend_impl *impl = fused_impl(ctx, &fs);
        to_device(ta);
        to_device(tb);
        to_device(tc);
        hd_gemm_args args = {.trans_a = gc->trans_a,
                             .trans_b = gc->trans_b,
                             .alpha = gc->alpha,
                             .beta = gc->beta,
                             .a = ta,
                             .b = tb,
                             .c = tc,
                             .m = m,
                             .n = n,
                             .k = k,
                             .variant = variant == DEFAULT_PARAMETERS ? NULL : variant,
                             .precision = precision};
        hd_status s = impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = args});
        if (beyond_device_limit(ctx, s, what))
            variant = "declined";
        else if (s != HD_OK)
            fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
        hd__tensor_written(tc, HD_PLACE_DEVICE);
    }
    if (variant == NULL || strcmp(variant, "declined") != 0) {
        float *got = hd_test_read(tc);
        hd_test_expect_gemm_close(what, got, want, bound, m * n, k, gemm_factor(precision, k));
        free(got);
    }
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(tc);
    free(a);
    free(b);
    free(c);
    free(want);
    free(bound);
}

static void check_gemm(hd_context *ctx, const gemm_case *gc, const char *variant, uint64_t salt)
{
    check_gemm_in(ctx, gc, variant, hd_context_gemm_precision(ctx), salt);
}

static void test_gemm_few_rows_matches_reference(void **state)
{
    for (size_t i = 0; i < hd_test_gemm_shape_count; i++) {
        const hd_test_gemm_shape *s = &hd_test_gemm_shapes[i];
        if (s->m > 16)
            continue;
        gemm_case gc = {s->m, s->n, s->k, 1.0f, 0.0f, false, false, false};
        check_gemm(*state, &gc, NULL, 2000 + i);
    }
    static const gemm_case extra[] = {
        {1, 1, 1, 1.0f, 0.0f, false, false, false},     {1, 3, 5, 1.0f, 0.0f, false, false, false},
        {1, 1028, 37, 1.0f, 0.0f, false, false, false}, {3, 260, 1001, 1.0f, 0.0f, false, false, false},
        {5, 9, 300, 1.0f, 0.0f, false, false, false},   {16, 132, 97, 1.0f, 0.0f, false, false, false},
        {9, 64, 33, 1.0f, 0.0f, false, false, false},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        check_gemm(*state, &extra[i], NULL, 2100 + i);
    /* B stored n x k (the dot form): slots of several rows of B where A has several rows, n
     * not a multiple of them, k odd (scalar loads) */
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        gemm_case gc = extra[i];
        gc.trans_b = true;
        check_gemm(*state, &gc, NULL, 2170 + i);
    }
    /* One group per strip over k: several chunks of staged rows, B's loads running a round
     * ahead across them, the last chunk cut short. */
    static const gemm_case chunked[] = {
        {16, 36, 1037, 1.0f, 0.0f, false, false, false},
        {7, 20, 2311, 1.0f, 0.0f, false, false, false},
    };
    for (size_t i = 0; i < sizeof chunked / sizeof chunked[0]; i++) {
        check_gemm(*state, &chunked[i], "KG=1", 2150 + i);
        check_gemm(*state, &chunked[i], "KG=1 UNROLL=3", 2160 + i);
    }
}

static void test_gemm_alpha_beta_and_nan_c(void **state)
{
    static const gemm_case cases[] = {
        {1, 12, 7, 1.0f, 0.0f, true, false, false},
        {3, 13, 11, 2.5f, 0.0f, true, false, false},
        {4, 16, 19, -1.5f, 0.5f, false, false, false},
        {1, 7, 3, 1.0f, 1.0f, false, false, false},
        {16, 20, 40, 0.25f, -2.0f, false, false, false},
        {2, 3, 1, -1.0f, 1.0f, false, false, false},
        /* B transposed: the dot form */
        {3, 13, 11, 2.5f, 0.0f, true, false, true},
        {7, 21, 16, -1.5f, 0.5f, false, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_gemm(*state, &cases[i], NULL, 2200 + i);
}

static void test_gemm_every_variant(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_shape shape = {.dim = {3, 260, 129}};
    const char *list[48];
    size_t count = impl->variants(fs, HD_OP_GEMM, &shape, HD_PART_WHOLE, list, 46);
    assert_true(count > 0);
    list[count++] = "VEC=1 UNROLL=3";
    list[count++] = "TN=1 KS=1";
    /* one shape per variant (one build each), alternating three rows and one row */
    for (size_t i = 0; i < count; i++) {
        gemm_case gc = {3, 260, 129, 1.5f, 0.5f, false, false, false};
        gemm_case one = {1, 8, 1, 1.0f, 0.0f, true, false, false};
        check_gemm(ctx, i % 2 ? &one : &gc, list[i], 2300 + i);
    }
}

/* The tiled engine's variants (those the tuner times for this context's precision, and
 * split-K), each on odd sizes in one of the four transpose combinations, with alpha, beta and,
 * every third, a NaN C that beta = 0 ignores. */
static void test_gemm_tiles_every_variant_and_transpose(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    const char *list[4][48];
    size_t count[4];
    for (int tr = 0; tr < 4; tr++) { /* the variants that fit each transpose combination */
        hd_shape shape = {.dim = {70, 45, 1100}, .trans_a = tr % 2 == 1, .trans_b = tr / 2 == 1};
        count[tr] = impl->variants(fs, HD_OP_GEMM, &shape, HD_PART_WHOLE, list[tr], 40);
        assert_true(count[tr] > 4);
        list[tr][count[tr]++] = "BM=16 BN=16 BK=4 RM=4 RN=4 SK=3";
        list[tr][count[tr]++] = "BM=32 BN=32 BK=8 RM=4 RN=4 SK=64"; /* more slices than stages */
    }
    size_t most = 0;
    for (int tr = 0; tr < 4; tr++)
        most = count[tr] > most ? count[tr] : most;
    for (size_t i = 0; i < most; i++) {
        int tr = (int)(i % 2) + 2 * (int)(i / 2 % 2); /* the combination gc below takes */
        if (i >= count[tr])
            continue;
        if (strstr(list[tr][i], "LEAD=") != NULL)
            continue; /* test_gemm_fma_lead_variants_match_reference */
        bool split = strstr(list[tr][i], "SK=") != NULL;
        gemm_case gc = {37 + 2 * i, 29 + 3 * i, split ? 301 : 67 + i, 1.5f, -0.5f, false,
                        i % 2 == 1, i / 2 % 2 == 1};
        if (i % 3 == 2) {
            gc.beta = 0.0f;
            gc.nan_c = true;
        }
        check_gemm(ctx, &gc, list[tr][i], 2400 + i);
    }
}

/* The fused backend's state with its tensor-core kernels on: the real ones where the device
 * has them, else their emulation (*emulating says which, for tensor_cores_end). Skips the test
 * where they failed here, or where it needs the warpgroup kernel (wgmma) and a device with
 * tensor cores has none. */
static hd_fused *tensor_cores_begin(hd_context *ctx, bool wgmma, bool *emulating)
{
    void *fs;
    fused_impl(ctx, &fs);
    hd_fused *f = fs;
    *emulating = !f->mma;
    if (f->mma_broken || (wgmma && !*emulating && !f->wgmma))
        skip();
    if (*emulating)
        f->mma = f->mma_emulated = f->wgmma = true;
    return f;
}

static void tensor_cores_end(hd_fused *f, bool emulating)
{
    if (emulating)
        f->mma = f->mma_emulated = f->wgmma = false;
}

/* The tensor-core kernels in fp32x3 and tf32: every variant the tuner offers, each transpose
 * combination, odd sizes, k = 1, k inside and past a 16-deep group, alpha and beta, NaN in a
 * C that beta = 0 ignores, split-K; the cp.async variants also in every transpose on sizes
 * that let them copy; tf32's warpgroup kernel (compute capability 9.0) likewise. Where the
 * device has tensor cores these are the real PTX kernels; elsewhere their emulation
 * (MMA_EMULATE in gemm_mma.cl and gemm_wgmma.cl), the same layouts, loads, fragments and
 * accumulation in OpenCL C, so that all but the instructions is checked in CI. */
static void test_gemm_tensor_core_kernels_match_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = tensor_cores_begin(ctx, false, &emulate);
    static const hd_precision precisions[] = {HD_PRECISION_FP32X3, HD_PRECISION_TF32};
    static const gemm_case edges[] = {
        {37, 29, 67, 1.5f, -0.5f, false, false, false}, {33, 45, 1, 1.0f, 0.0f, true, true, false},
        {70, 9, 17, 1.0f, 0.5f, false, false, true},    {5, 131, 33, -1.0f, 0.0f, true, true, true},
        {129, 66, 301, 1.0f, 0.0f, false, true, true},
    };
    for (size_t pi = 0; pi < 2; pi++) {
        hd_shape shape = {.dim = {70, 45, 1100}};
        const char *list[48];
        size_t count = hd__fused_tile_variants(f, &shape, precisions[pi], list, 46);
        assert_true(count > 4);
        list[count++] = "BM=64 BN=64 SK=3";
        for (size_t i = 0; i < count; i++) {
            bool split = strstr(list[i], "SK=") != NULL;
            gemm_case gc = edges[i % (sizeof edges / sizeof edges[0])];
            gc.trans_a = i % 2 == 1;
            gc.trans_b = i / 2 % 2 == 1;
            if (split)
                gc.k = 301;
            check_gemm_in(ctx, &gc, list[i], precisions[pi], 2700 + i + 50 * pi);
            /* The copies do not depend on the precision: the mma.sync kernel's are checked in
             * fp32x3 (tf32 runs the same ones). The warpgroup kernel's depend on its stage
             * depth alone: its first two variants (8 and 16 deep) cover them. Their emulation
             * is slow on PoCL. */
            bool wgmma = strstr(list[i], "WGMMA=") != NULL;
            if (strstr(list[i], "ASYNC=") == NULL || (wgmma && i >= 2) ||
                (!wgmma && precisions[pi] != HD_PRECISION_FP32X3))
                continue;
            /* cp.async copies only rows of whole float4s: sizes that are multiples of 4 but
             * not of the tiles, k = 4 (one partial stage) and a deep k past its last stage */
            static const size_t async_k[] = {100, 4, 1060}, wgmma_k[] = {100, 4, 260};
            for (int tr = 0; tr < 4; tr++) {
                gemm_case ac = {4 * (33 + i),
                                4 * (17 + 2 * tr),
                                (wgmma ? wgmma_k : async_k)[(i + tr) % 3],
                                tr % 2 ? 1.0f : -0.5f,
                                tr / 2 ? 0.25f : 0.0f,
                                tr == 0,
                                tr % 2 == 1,
                                tr / 2 == 1};
                check_gemm_in(ctx, &ac, list[i], precisions[pi], 2800 + 4 * i + tr + 100 * pi);
            }
        }
    }
    /* The parameters chosen from the shape: on tiles that fill the device, tf32's 128 x 256
     * warpgroup tiles (here wherever there are a few such tiles per compute unit). */
    static const gemm_case wide = {257, 300, 41, 1.0f, 0.5f, false, false, true};
    for (size_t pi = 0; pi < 2; pi++)
        check_gemm_in(ctx, &wide, DEFAULT_PARAMETERS, precisions[pi], 2990 + pi);
    /* The warpgroup kernel with A in registers (AREG): its fragments' layout and its ring of
     * stages, which turns over every few stages: a partial stage alone (k = 4), a ring not
     * filled (k = 20), several turns ending mid-stage (k = 203) and mid-ring (k = 260), each
     * transpose once, on tiles cut by the matrix's edge; B also unaligned (VEC 1 copies). */
    static const char *const areg[] = {"BM=128 BN=128 BK=8 WN=128 ASYNC=4 AREG=1 WGMMA=1",
                                       "BM=64 BN=64 BK=16 WN=64 ASYNC=3 AREG=1 WGMMA=1"};
    static const size_t areg_k[] = {4, 20, 203, 260};
    for (size_t v = 0; v < 2; v++)
        for (int tr = 2 * (int)v; tr < 2 * (int)v + 2; tr++) { /* each transpose once */
            gemm_case ac = {70 + 61 * v,      45 + 4 * (size_t)tr, areg_k[tr],
                            tr % 2 ? 1.0f : -0.5f, tr / 2 ? 0.25f : 0.0f, tr == 1,
                            tr >= 2,          tr % 2 == 0};
            check_gemm_in(ctx, &ac, areg[v], HD_PRECISION_TF32, 3000 + 4 * v + (size_t)tr);
        }
    /* a warpgroup kernel that failed to build would have passed on mma.sync's results */
    assert_false(f->wgmma_broken);
    tensor_cores_end(f, emulate);
}

/* The tiled GEMM's stages as a __local argument (STAGE_ARG) up to the CUDA runtime's dynamic
 * shared memory: tiles the tuner offers past 48 KiB of stages, of the warpgroup kernel (wide
 * and deep, 256 rows of four warpgroups, A in registers), of mma.sync (fp32x3) and of the FMA
 * kernel with cp.async copies (fp32), each transpose once over the warpgroup's, on tiles cut
 * by the matrix's edge, a partial stage alone and several rounds of the buffers. Where the
 * device runs on the CUDA runtime these are the real kernels; under the emulation the stage
 * memory is set as the H200's; on OpenCL's NVIDIA devices, the tiles their 48 KiB allow. */
static void test_gemm_stages_as_a_local_argument(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = tensor_cores_begin(ctx, true, &emulate);
    size_t saved = f->stage_mem, saved_local = f->local_mem;
    if (emulate) { /* the H200's: 48 KiB a kernel may declare, 227 KiB as dynamic memory */
        f->local_mem = 48 * 1024;
        f->stage_mem = 232448 - 1024;
    } else if (f->stage_mem == 0) {
        f->stage_mem = f->local_mem;
    }
    /* transposes (bit 0: A's, bit 1: B's) and depths spread over the variants, as the emulation
     * is slow on PoCL */
    static const struct {
        const char *variant;
        hd_precision precision;
        int tr;
        size_t k;
    } cases[] = {
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=6 WGMMA=1", HD_PRECISION_TF32, 0, 203},
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=6 WGMMA=1", HD_PRECISION_TF32, 3, 36},
        {"BM=256 BN=128 BK=16 WN=128 ASYNC=4 WGMMA=1", HD_PRECISION_TF32, 1, 4},
        {"BM=128 BN=256 BK=16 WN=256 ASYNC=8 AREG=1 WGMMA=1", HD_PRECISION_TF32, 2, 148},
        {"BM=128 BN=256 BK=16 WM=64 WN=64 ASYNC=4", HD_PRECISION_FP32X3, 0, 148},
        {"BM=128 BN=128 BK=16 RM=8 RN=16 ASYNC=4", HD_PRECISION_FP32, 0, 203},
    };
    hd_shape shape = {.dim = {300, 300, 300}};
    size_t offered = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *list[96];
        size_t count = hd__fused_tile_variants(f, &shape, cases[i].precision, list, 96);
        bool listed = false;
        for (size_t j = 0; j < count; j++)
            listed = listed || strcmp(list[j], cases[i].variant) == 0;
        if (!listed) /* past this device's local memory */
            continue;
        offered++;
        int tr = cases[i].tr;
        gemm_case gc = {131 + 70 * (size_t)(tr % 2),
                        97 + 160 * (size_t)(tr / 2),
                        cases[i].k,
                        tr % 2 ? 1.0f : -0.5f,
                        tr / 2 ? 0.25f : 0.0f,
                        tr == 0,
                        tr % 2 == 1,
                        tr / 2 == 1};
        check_gemm_in(ctx, &gc, cases[i].variant, cases[i].precision, 3300 + i);
    }
    assert_true(offered == sizeof cases / sizeof *cases ||
                (!emulate && f->stage_mem < 96 * 1024));
    assert_false(f->wgmma_broken || f->mma_broken || f->fma_async_broken);
    f->stage_mem = saved;
    f->local_mem = saved_local;
    tensor_cores_end(f, emulate);
}

/* Default parameters on shapes drawn from the whole class (testlib), fresh each run: few-row
 * kernels, dot form, tiles and the depth split as the shape takes them, in every transpose,
 * with alpha, beta and NaN in a C that beta = 0 ignores. */
static void test_gemm_random_shapes_match_reference(void **state)
{
    hd_rng rng = hd_test_rng(2600);
    for (int i = 0; i < 8; i++) {
        hd_test_gemm_shape s = hd_test_random_gemm_shape(&rng);
        bool beta_zero = i % 3 == 0;
        gemm_case gc = {.m = s.m,
                        .n = s.n,
                        .k = s.k,
                        .alpha = hd_test_uniform(&rng, -2.0f, 2.0f),
                        .beta = beta_zero ? 0.0f : hd_test_uniform(&rng, -1.0f, 1.0f),
                        .nan_c = beta_zero,
                        .trans_a = (i & 1) != 0,
                        .trans_b = (i & 2) != 0};
        check_gemm(*state, &gc, NULL, 2610 + (uint64_t)i);
    }
}

/* Default parameters on the shared shapes with more than 16 rows or a transpose (the tiled
 * engine's), and its edges: k = 1, k below and just past a stage, one row or column with
 * transposes, columns not a multiple of 4, tiles that cover the matrix many times. */
static void test_gemm_tiles_match_reference(void **state)
{
    for (size_t i = 0; i < hd_test_gemm_shape_count; i++) {
        const hd_test_gemm_shape *s = &hd_test_gemm_shapes[i];
        gemm_case gc = {s->m, s->n, s->k, 1.0f, 0.0f, false, i % 2 == 0, i % 3 == 0};
        if (s->m > 16 || gc.trans_a || gc.trans_b)
            check_gemm(*state, &gc, NULL, 2500 + i);
    }
    static const gemm_case edges[] = {
        {17, 19, 1, 1.0f, 0.0f, false, false, false},
        {33, 5, 7, 2.0f, 1.0f, false, true, true},
        {130, 67, 17, 1.0f, 0.0f, true, true, false},
        {1, 131, 9, 1.0f, 0.5f, false, true, false},
        {129, 1, 33, -1.0f, 0.0f, false, false, true},
        {1, 1, 1, 1.0f, 0.0f, false, true, true},
        {263, 130, 129, 0.5f, 2.0f, false, false, false},
        {20, 40, 2003, 1.0f, 0.0f, false, true, true},
        /* thin products, deep, few tiles (on PoCL too): the thin side across 16 or 32, the
         * depth split */
        {100, 13, 1031, 1.0f, 0.0f, false, false, true},
        {120, 29, 1100, 1.0f, 0.5f, false, true, false},
        {7, 100, 1500, 1.0f, 0.0f, true, true, false},
        {31, 90, 4099, -1.0f, 0.0f, false, false, false},
        {64, 16, 1100, 1.0f, 0.0f, false, false, false}, /* 64 along the long side */
        {9, 60, 1300, 1.0f, 0.25f, false, true, true},
        /* thin and shallow, a long side of many tiles */
        {1000, 7, 100, 1.0f, 0.0f, false, true, false},
        {3, 701, 50, 0.5f, 1.0f, true, false, true},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        check_gemm(*state, &edges[i], NULL, 2550 + i);
    /* thin tiles in many short slices (the default where their tiles are few on a GPU) */
    check_gemm(*state, &(gemm_case){64, 16, 4099, 1.0f, 0.5f, false, false, false},
               "BM=64 BN=16 BK=16 RM=8 RN=4 SK=64", 2580);
    check_gemm(*state, &(gemm_case){29, 64, 2600, 1.0f, 0.0f, true, true, true},
               "BM=32 BN=64 BK=16 RM=4 RN=8 SK=40", 2581);
    /* A tile whose stage of A does not split into runs of 4 over its work-items (16 x 4
     * floats, 64 work-items): A's loads scalar, B's in runs of 4, aligned or not */
    for (int tr = 0; tr < 4; tr++) {
        gemm_case gc = {37, 68 + (size_t)tr, 45 + 4 * (size_t)tr, 1.0f, tr == 2 ? 0.5f : 0.0f,
                        tr == 3, tr % 2 == 1, tr / 2 == 1}; /* NaN in C where beta is 0 */
        check_gemm(*state, &gc, "BM=16 BN=64 BK=4 RM=4 RN=4", 2570 + (size_t)tr);
    }
}

/* Batched GEMM on the tiled engine, every transpose combination, against the reference of
 * each matrix. */
static void test_gemm_batched_tiles_match_reference(void **state)
{
    hd_context *ctx = *state;
    const size_t batch = 3, m = 21, n = 34, k = 19;
    for (int tr = 0; tr < 4; tr++) {
        bool ta = tr & 1, tb = tr & 2;
        hd_rng rng = hd_test_rng(2600 + (uint64_t)tr);
        float *a = hd_test_floats(batch * m * k), *b = hd_test_floats(batch * k * n);
        hd_test_fill(&rng, a, batch * m * k, -1, 1);
        hd_test_fill(&rng, b, batch * k * n, -1, 1);
        hd_tensor *t_a = ta ? hd_test_tensor(ctx, batch * k, m, a)
                            : hd_test_tensor(ctx, batch * m, k, a);
        hd_tensor *t_b = tb ? hd_test_tensor(ctx, batch * n, k, b)
                            : hd_test_tensor(ctx, batch * k, n, b);
        hd_tensor *t_c = hd_test_tensor(ctx, batch * m, n, NULL);
        assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM_BATCHED, HD_BACKEND_FUSED),
                         HD_OK);
        expect_fused(ctx, hd_gemm_batched(ctx, batch, ta, tb, 1.0f, t_a, t_b, 0.0f, t_c),
                     "gemm_batched");
        float *got = hd_test_read(t_c);
        double *want = hd_test_doubles(m * n), *bound = hd_test_doubles(m * n);
        for (size_t i = 0; i < batch; i++) {
            hd_ref_gemm(ta, tb, m, n, k, 1.0f, a + i * m * k, b + i * k * n, 0.0f, NULL, want,
                        bound);
            hd_test_expect_gemm_close("gemm_batched tiles", got + i * m * n, want, bound, m * n,
                                      k, GEMM_FACTOR);
        }
        assert_int_equal(hd_context_set_backend(ctx, HD_OP_GEMM_BATCHED, HD_BACKEND_AUTO),
                         HD_OK);
        free(got);
        free(want);
        free(bound);
        free(a);
        free(b);
        hd_tensor_destroy(t_a);
        hd_tensor_destroy(t_b);
        hd_tensor_destroy(t_c);
    }
}

/* Shapes past the kernels' 32-bit indexing are declined, so the dispatcher moves on; tiled
 * variants that do not fit the device or split a stage unevenly are declined too. */
static void test_gemm_outside_design_is_declined(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_shape huge = {.dim = {1, (size_t)INT_MAX + 1, 8}};
    assert_false(impl->supports(fs, HD_OP_GEMM, &huge, HD_PART_WHOLE));
    hd_shape fine = {.dim = {17, 8, 8}, .trans_b = true};
    assert_true(impl->supports(fs, HD_OP_GEMM, &fine, HD_PART_WHOLE));
    hd_tensor *a = hd_test_tensor(ctx, 20, 8, NULL), *b = hd_test_tensor(ctx, 8, 8, NULL);
    hd_tensor *c = hd_test_tensor(ctx, 20, 8, NULL);
    to_device(a);
    to_device(b);
    to_device(c);
    static const char *const declined[] = {
        "BM=16 BN=128 BK=4 RM=4 RN=4",  /* 128 work-items for a 64-float stage of A */
        "BM=256 BN=256 BK=64 RM=4 RN=4", /* 4096 work-items */
        "BM=64 BN=64 BK=16 WM=32 WN=32", /* tensor-core parameters in fp32 */
        "BM=64 BN=64 OVERLAP=0",         /* the warpgroup kernel's parameter in fp32 */
        "BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=3", /* cp.async where it does not exist */
    };
    static const char *const capped = "BM=64 BN=64 REG=128";
    const hd_fused *f = fs;
    for (size_t i = 0; i < sizeof declined / sizeof declined[0] + 1; i++) {
        if ((i == 2 || i == 3) && hd_context_gemm_precision(ctx) != HD_PRECISION_FP32)
            continue;
        if (i == 4 && f->mma)
            continue;
        if (i == 5 && f->nv_options)
            continue; /* the register cap, elsewhere than NVIDIA's compiler */
        hd_gemm_args args = {.alpha = 1.0f, .a = a, .b = b, .c = c, .m = 20, .n = 8, .k = 8,
                             .variant = i < 5 ? declined[i] : capped};
        assert_int_equal(impl->run[HD_OP_GEMM](fs, ctx, &(hd_op_args){.gemm = args}), HD_ERR_UNSUPPORTED);
    }
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(c);
}

/* k split over KG work-groups per strip, combined by the last group to arrive: uneven
 * k-ranges, more groups than rows of B (empty ranges), 16 rows, alpha and beta with a NaN C
 * ignored at beta 0, columns not a multiple of 4, and calls queued back to back, so that the
 * counters must be back at zero after each launch and the scratch grows with the strips. */
static void test_gemm_k_groups_match_reference(void **state)
{
    static const struct {
        gemm_case gc;
        const char *variant;
    } cases[] = {
        {{1, 260, 1001, 1.0f, 0.0f, false, false, false}, "KG=3"},
        {{3, 20, 5, 1.5f, 0.5f, false, false, false}, "KG=8"},
        {{16, 132, 97, 1.0f, 0.0f, true, false, false}, "KG=3"},
        {{2, 13, 300, -0.5f, 2.0f, false, false, false}, "KG=3"},
        {{1, 1028, 400, 1.0f, 0.0f, false, false, false}, "KG=3"},
        {{1, 8, 1, 1.0f, 0.0f, true, false, false}, "KG=3"},
        {{5, 9, 77, 1.0f, 1.0f, false, false, false}, "TN=8 KS=32 UNROLL=2 KG=3"},
        /* rows staged in chunks of depths: several chunks, the last one partial */
        {{7, 36, 2999, 1.0f, 0.0f, false, false, false}, NULL},
        {{16, 20, 1500, 0.5f, 1.0f, false, false, false}, "TN=32 KS=8 UNROLL=8 KG=3"},
        {{3, 132, 5001, 1.0f, 0.0f, false, false, false}, "TN=4 KS=64 UNROLL=16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_gemm(*state, &cases[i].gc, cases[i].variant, 2400 + i);
}

/* The KG the backend picks when the variant leaves it open, for an H100's 132 compute units:
 * enough groups for the one-token shapes whose strips alone leave the SMs idle, none where a
 * split would leave a work-item less than one unrolled round of loads, none for several rows
 * or the split LoRA path. */
static void test_gemv_default_k_groups(void **state)
{
    hd_context *ctx = *state;
    hd_fused f = {.device_max_group = 1024, .compute_units = 132};
    hd_fused_params p;
    const hd_lora_args l2048 = {.tokens = 1, .in = 2048, .out = 2048, .rank = 8};
    const hd_lora_args l512 = {.tokens = 1, .in = 512, .out = 512, .rank = 8};
    /* one token: 32 wide strips (16 vectors) of 2048 columns, split 16 ways over k */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 2048, 2048, 1, &l2048, &p), HD_OK);
    assert_int_equal(p.tn, 16);
    assert_int_equal(p.split, 0);
    assert_int_equal(p.kg, 16);
    const hd_lora_args l16 = {.tokens = 16, .in = 2048, .out = 2048, .rank = 8};
    /* several tokens: 8 strips of 64 vectors by 4 k-slices, split while the groups stay
     * within one per compute unit: 16 ways */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 2048, 2048, 16, &l16, &p), HD_OK);
    assert_int_equal(p.tn, 64);
    assert_int_equal(p.ks, 4);
    assert_int_equal(p.unroll, 8);
    assert_int_equal(p.split, 0);
    assert_int_equal(p.kg, 16);
    /* rank 64: x*A in the same launch for one token and for several */
    const hd_lora_args l64 = {.tokens = 1, .in = 2048, .out = 2048, .rank = 64};
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 2048, 2048, 1, &l64, &p), HD_OK);
    assert_int_equal(p.split, 0);
    assert_int_equal(p.kg, 16);
    const hd_lora_args l64x4 = {.tokens = 4, .in = 2048, .out = 2048, .rank = 64};
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 2048, 2048, 4, &l64x4, &p), HD_OK);
    assert_int_equal(p.split, 0);
    assert_int_equal(p.kg, 16);
    /* the split stays a variant */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, "SPLIT=8", 2048, 2048, 4, &l64x4, &p), HD_OK);
    assert_int_equal(p.split, 8);
    /* 8 strips; k-groups stop where a work-item would get less than one round (16 x 4 rows) */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 512, 512, 1, &l512, &p), HD_OK);
    assert_int_equal(p.kg, 8);
    /* GEMM, one row: 128 strips of 8 vectors by 32 k-slices, split while the groups stay
     * within 8 per compute unit: 8 ways */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 4096, 4096, 1, NULL, &p), HD_OK);
    assert_int_equal(p.tn, 8);
    assert_int_equal(p.ks, 32);
    assert_int_equal(p.kg, 8);
    /* GEMM: up to 8 rows in 32 strips of 32 vectors, 2 groups per compute unit (KG=8); 16
     * rows in 16 strips of 64, one per compute unit (KG=8 too) */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 4096, 4096, 8, NULL, &p), HD_OK);
    assert_int_equal(p.tn, 32);
    assert_int_equal(p.unroll, 4);
    assert_int_equal(p.kg, 8);
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 4096, 4096, 16, NULL, &p), HD_OK);
    assert_int_equal(p.tn, 64);
    assert_int_equal(p.kg, 8);
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 4096, 100, 1, NULL, &p), HD_OK);
    assert_int_equal(p.kg, 1);
    assert_int_equal(hd__fused_gemv_params(&f, ctx, "KG=7", 4096, 4096, 16, NULL, &p), HD_OK);
    assert_int_equal(p.kg, 7);
    f.compute_units = 1; /* 8 groups fill it: 2 strips may split in four */
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 64, 4096, 1, NULL, &p), HD_OK);
    assert_int_equal(p.kg, 4);
    f.compute_units = 132;
    /* LoRA of several tokens over a large W: strips of 128 vectors by 2 k-slices; 4096² keeps
     * 64 by 4, as does a large W of few columns */
    const hd_lora_args l8 = {.tokens = 8, .in = 4096, .out = 14336, .rank = 16};
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 14336, 4096, 8, &l8, &p), HD_OK);
    assert_int_equal(p.tn, 128);
    assert_int_equal(p.ks, 2);
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 4096, 4096, 8, &l8, &p), HD_OK);
    assert_int_equal(p.tn, 64);
    assert_int_equal(hd__fused_gemv_params(&f, ctx, NULL, 2048, 32768, 8, &l8, &p), HD_OK);
    assert_int_equal(p.tn, 64);
}

/* An fp32 product m x n x k of one matrix without buffers, each operand's rows as long as its
 * stored layout makes them: what the defaults' checks resolve. */
static hd_fused_tile_call product_of(size_t m, size_t n, size_t k, bool ta, bool tb)
{
    return (hd_fused_tile_call){.m = m,
                                .n = n,
                                .k = k,
                                .batch = 1,
                                .alpha = 1.0f,
                                .a = {NULL, ta ? m : k, ta},
                                .b = {NULL, tb ? k : n, tb},
                                .ldc = n,
                                .precision = HD_PRECISION_FP32};
}

/* The cost model's estimate of the tiled engine: the fused backend's own GEMM rate from the
 * calibration where it has one, else half the best device rate (a cache of an older
 * calibration); the GEMV-style kernels of one-token GEMMs a quarter of the best rate either
 * way. */
static void test_tile_estimate_takes_the_measured_rate(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_shape big = {.dim = {4096, 4096, 4096}}, one = {.dim = {1, 4096, 4096}};
    hd_tune_calibration old = {.launch_us = 10, .copy_gbps = 3000, .gemm_gflops = 50000};
    hd_tune_calibration own = old;
    own.fused_gflops = 45000;
    double flops = 2.0 * 4096.0 * 4096.0 * 4096.0;
    double half = impl->estimate_us(fs, HD_OP_GEMM, &big, HD_PART_WHOLE, &old);
    double measured = impl->estimate_us(fs, HD_OP_GEMM, &big, HD_PART_WHOLE, &own);
    assert_true(fabs(half - (10.0 + flops / 25000e3)) < 1e-6 * half);
    assert_true(fabs(measured - (10.0 + flops / 45000e3)) < 1e-6 * measured);
    assert_true(fabs(impl->estimate_us(fs, HD_OP_GEMM, &one, HD_PART_WHOLE, &old) -
                     impl->estimate_us(fs, HD_OP_GEMM, &one, HD_PART_WHOLE, &own)) < 1e-9);
}

/* The tiled engine's defaults on a 132-unit device (fp32, no tensor cores): 64 x 128 tiles
 * where they fill it (128 x 64 where those leave the busiest unit fewer groups; 128 x 128 ones
 * of 16 x 8 where cp.async copies both operands: below), cut in two where that lightens the
 * busiest unit, in 4 to 16 slices where they come to half a wave (about two groups per unit), 64 x
 * 64 ones below that (32 x 64 where 32 or more of those are fewer than the units on a shallow
 * product, the depth cut where those leave a quarter of the units idle), and thin products
 * split into more, shorter slices where their tiles are few. */
static void test_gemm_tile_defaults(void **state)
{
    hd_context *ctx = *state;
    hd_fused f = {.device_max_group = 1024, .compute_units = 132};
    static const struct {
        size_t m, n, k;
        int bm, bn, rm, rn, sk;
    } cases[] = {
        {4096, 4096, 4096, 64, 128, 8, 8, 1}, /* fills the units */
        {1536, 4096, 4096, 64, 128, 8, 8, 1}, /* likewise */
        {64, 4096, 4096, 64, 128, 8, 8, 8},   /* 32 tiles of 64 x 128: 256 groups */
        {64, 11008, 4096, 64, 128, 8, 8, 4},  /* 86: half the units, still split */
        {128, 4096, 4096, 64, 128, 8, 8, 4},  /* 64 tiles */
        {40, 2304, 4096, 64, 128, 8, 8, 14},  /* 18 tiles */
        {64, 4096, 1024, 64, 128, 8, 8, 4},   /* slices at least 256 deep */
        {37, 997, 1031, 64, 64, 4, 4, 4},     /* 8 of 64 x 128: 64 x 64 keeps more groups */
        {4096, 16, 4096, 128, 16, 8, 4, 16},  /* thin, 32 tiles */
        {64, 16, 4096, 64, 16, 8, 4, 64},     /* thin, one tile (LoRA's x*A) */
        {16, 4096, 4096, 16, 128, 4, 8, 16},  /* thin the other way */
        {64, 16, 1024, 64, 16, 8, 4, 16},     /* slices at least 64 deep */
        /* thin whatever the long side and the depth, where square tiles would pad the thin
         * side to 64 or 128 (LoRA's x*A of 8192 tokens) */
        {8192, 16, 4096, 128, 16, 8, 4, 16},
        {8192, 8, 1024, 128, 16, 8, 4, 4},    /* 64 tiles, 4 slices: about two groups a unit */
        {8192, 4, 512, 128, 16, 8, 4, 4},     /* likewise, slices 128 deep */
        {32768, 16, 4096, 128, 16, 8, 4, 16}, /* 256 tiles */
        {16, 8192, 8192, 16, 128, 4, 8, 16},
        {100, 8, 40, 128, 16, 8, 4, 1},       /* too shallow to cut */
        {512, 512, 512, 32, 64, 4, 4, 1},     /* shallow, 64 tiles of 64 x 64: 32 x 64 */
        {100, 1000, 1000, 32, 64, 4, 4, 4},   /* likewise, 32 of 64 x 64, 64 of 32 x 64 */
        {200, 700, 900, 32, 64, 4, 4, 3},     /* 77 of 32 x 64 */
        {384, 512, 768, 32, 64, 4, 4, 2},     /* 96 */
        {128, 2048, 512, 32, 64, 4, 4, 1},    /* 128: nearly every unit has one */
        {256, 256, 256, 64, 64, 4, 4, 1},     /* 16 of 64 x 64: kept */
        {384, 4096, 8192, 64, 128, 8, 8, 2},  /* 192 of 64 x 128: halves, 3 a unit at most */
        {1536, 1024, 1024, 64, 128, 8, 8, 2}, /* likewise */
        {512, 4096, 4096, 64, 128, 8, 8, 1},  /* 256: 2 a unit whole or 4 halves */
        {1024, 2048, 1024, 64, 128, 8, 8, 1}, /* likewise */
        {3001, 700, 1500, 128, 64, 8, 8, 1},  /* 264 of 128 x 64: 2 a unit, 282 of 64 x 128 */
        /* 64 x 128 tiles at most one a unit, 1000 to 2047 deep: 128 x 64 of 16 x 4, halved */
        {1024, 1024, 1024, 128, 64, 16, 4, 2},
        {2048, 512, 1500, 128, 64, 16, 4, 2},
        {1000, 1000, 999, 64, 128, 8, 8, 1},  /* not as deep */
        {1000, 1000, 1001, 64, 128, 8, 8, 2}, /* A's rows unaligned: 64 x 128, halved */
        {997, 1009, 1013, 64, 128, 8, 8, 2},
        {1000, 1001, 1000, 128, 64, 16, 4, 2}, /* B's alone unaligned: 128 x 64 */
        {1024, 1024, 512, 64, 128, 8, 8, 1},
        /* half-fill, a side just past a multiple of 128: narrow tiles, cut in two where deep
         * (257 rows: 3 tiles of 96 a column, 5 of 64) */
        {257, 4096, 14336, 96, 64, 12, 4, 2},
        {2000, 560, 2048, 64, 96, 4, 12, 2},
        {257, 4096, 512, 64, 96, 4, 12, 1},
        {385, 4096, 4096, 64, 128, 8, 8, 1}, /* 5 of 96 compute 480 rows: 64 x 128 */
        /* 521 of a side come to 6 tiles of 96, where 5 of 128 compute 640: 387 groups of 64 x
         * 96 (3 a unit) against 288 of 64 x 128 (3 a unit) or 160 of 128 x 128 (a wave) */
        {521, 4093, 1031, 64, 96, 4, 12, 1},
        {4093, 521, 1031, 64, 96, 4, 12, 1},
        /* 380 groups of 96 x 64, 3 a unit, against 285 of 64 x 128 or 290 of 128 x 64, also 3 */
        {3620, 609, 1024, 96, 64, 12, 4, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hd_fused_tile_call c = product_of(cases[i].m, cases[i].n, cases[i].k, false, false);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        char what[64];
        snprintf(what, sizeof what, "%zu x %zu x %zu", cases[i].m, cases[i].n, cases[i].k);
        if (p.bm != cases[i].bm || p.bn != cases[i].bn || p.rm != cases[i].rm ||
            p.rn != cases[i].rn || p.sk != cases[i].sk)
            fail_msg("%s: BM=%d BN=%d RM=%d RN=%d SK=%d", what, p.bm, p.bn, p.rm, p.rn, p.sk);
    }
    /* the depth splits hold in every transpose */
    for (int tr = 1; tr < 4; tr++) {
        static const struct {
            size_t m, n, k;
            int sk;
        } split[] = {{64, 4096, 4096, 8}, {40, 2304, 4096, 14}, {100, 1000, 1000, 4}};
        for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
            hd_fused_tile_call c =
                product_of(split[i].m, split[i].n, split[i].k, tr % 2 == 1, tr / 2 == 1);
            hd_fused_params p;
            assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
            if (p.sk != split[i].sk)
                fail_msg("%zu x %zu x %zu (%d%d): SK=%d", split[i].m, split[i].n, split[i].k,
                         tr % 2, tr / 2, p.sk);
        }
    }
    /* the tuner's candidates for the split products lead with the default's tile cut into
     * the nearest slice counts below and above the default's (8: 4 and 16; 14: 8 and 16) */
    static const struct {
        size_t m, n;
        const char *first, *second;
    } fronts[] = {
        {64, 4096, "BM=64 BN=128 BK=16 RM=8 RN=8 SK=4", "BM=64 BN=128 BK=16 RM=8 RN=8 SK=16"},
        {40, 2304, "BM=64 BN=128 BK=16 RM=8 RN=8 SK=8", "BM=64 BN=128 BK=16 RM=8 RN=8 SK=16"},
    };
    for (size_t i = 0; i < sizeof fronts / sizeof fronts[0]; i++) {
        hd_shape shape = {.dim = {fronts[i].m, fronts[i].n, 4096}};
        const char *list[46];
        size_t count = hd__fused_tile_variants(&f, &shape, HD_PRECISION_FP32, list, 46);
        assert_true(count >= 2);
        const char *a = fronts[i].first, *b = fronts[i].second;
        if (!((strcmp(list[0], a) == 0 && strcmp(list[1], b) == 0) ||
              (strcmp(list[0], b) == 0 && strcmp(list[1], a) == 0)))
            fail_msg("%zu x %zu: the list starts with \"%s\", \"%s\"", fronts[i].m, fronts[i].n,
                     list[0], list[1]);
    }
    /* thin products: 32 deep where the long side's operand is stored depth-contiguous (A m x k,
     * B n x k) and the groups fill the units three times over (512 groups here), else 16 */
    static const struct {
        size_t m, n;
        bool ta, tb;
        int bk;
    } thin[] = {
        {4096, 16, false, false, 32}, {4096, 16, true, false, 16}, {4096, 16, false, true, 32},
        {16, 4096, false, false, 16}, {16, 4096, false, true, 32}, {16, 4096, true, true, 32},
        {2048, 16, false, false, 16}, {16, 2048, true, true, 16},
    };
    for (size_t i = 0; i < sizeof thin / sizeof thin[0]; i++) {
        size_t k = 4096, m = thin[i].m, n = thin[i].n;
        hd_fused_tile_call c = product_of(m, n, k, thin[i].ta, thin[i].tb);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        if (p.bk != thin[i].bk || p.sk != 16)
            fail_msg("thin %zu x %zu (%d%d): BK=%d SK=%d", m, n, thin[i].ta, thin[i].tb, p.bk,
                     p.sk);
    }
    /* ... counting a batch's matrices where the depth is not split, and where the local memory
     * holds the longer stages */
    hd_fused_tile_call thin_call = product_of(4096, 16, 4096, false, false);
    hd_fused_params tp;
    f.local_mem = 32 * 1024;
    assert_int_equal(hd__fused_tile_resolve(&f, ctx, &thin_call, &tp), HD_OK);
    assert_int_equal(tp.bk, 16);
    f.local_mem = 0;
    thin_call = product_of(16, 4096, 4096, false, true);
    thin_call.batch = 2; /* 64 groups, no split (a single product splits into 512) */
    assert_int_equal(hd__fused_tile_resolve(&f, ctx, &thin_call, &tp), HD_OK);
    assert_int_equal(tp.sk, 1);
    assert_int_equal(tp.bk, 16);
    /* shallow products of 32 x 64 tiles go 16 deep */
    hd_fused_tile_call shallow = product_of(512, 512, 512, false, false);
    assert_int_equal(hd__fused_tile_resolve(&f, ctx, &shallow, &tp), HD_OK);
    assert_int_equal(tp.bm, 32);
    assert_int_equal(tp.bk, 16);
    /* with cp.async (NVIDIA): 128 x 128 tiles of 16 x 8 where it copies both operands (TN, 5
     * buffers 8 deep), 3 buffers wherever it copies one; elsewhere 128 x 128 tiles of 16 x 8
     * through registers loaded two stages ahead (LEAD=2) where their waves come out ahead (16
     * deep past two waves), else 64 x 128 */
    f.mma = true;
    static const struct {
        size_t m, n;
        bool lead;
    } waves[] = {
        {2048, 2048, true},  /* one wave of 128 x 128 (1.3), against 4 of 64 x 128 a unit (1.33) */
        {4096, 4096, true},  /* 4 waves (5.2) against 16 a unit (5.33) */
        {8192, 4096, true},  /* 8 waves (10.4) against 32 (10.67) */
        {3000, 3000, false}, /* 3 waves (3.9) against 9 (3.0) */
        {1536, 4096, false}, /* 2 waves (2.6) against 6 (2.0) */
    };
    for (size_t i = 0; i < sizeof waves / sizeof waves[0]; i++) {
        hd_fused_tile_call c = product_of(waves[i].m, waves[i].n, 4096, false, true);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        /* 16 deep past two waves of two per unit (528 tiles), else 8 */
        int bk = waves[i].lead && waves[i].m * waves[i].n <= 528 * 128 * 128 ? 8 : 16;
        if ((p.lead == 2) != waves[i].lead || p.bm != (waves[i].lead ? 128 : 64) ||
            p.rm != (waves[i].lead ? 16 : 8) || p.bk != bk || p.async != 0)
            fail_msg("%zu x %zu NT: BM=%d RM=%d LEAD=%d ASYNC=%d", waves[i].m, waves[i].n, p.bm,
                     p.rm, p.lead, p.async);
    }
    for (int tr = 0; tr < 4; tr++) {
        bool ta = tr & 1, tb = tr & 2;
        hd_fused_tile_call c = product_of(2048, 2048, 2048, ta, tb);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        bool tn = ta && !tb;
        assert_int_equal(p.bm, 128);
        assert_int_equal(p.rm, 16);
        assert_int_equal(p.bk, 8); /* one wave: 8 deep through registers too */
        assert_int_equal(p.lead, tn ? 0 : 2);
        assert_int_equal(p.async, tn ? 5 : 0);
    }
    /* TN whose 128 x 128 tiles leave the last wave part empty: 64 x 128 tiles, 3 buffers
     * (4-byte copies where the rows are unaligned); where the 128 x 128 ones fill their waves,
     * those, 5 buffers */
    static const struct {
        size_t m, n, k;
        int bm, bk, async, lead;
    } tn_cases[] = {
        {4096, 520, 1032, 64, 16, 3, 0},
        {4093, 521, 1031, 64, 16, 3, 0}, /* 3 a unit at most, against a wave of 128 x 128 */
        {8191, 333, 1024, 64, 16, 3, 0}, /* likewise */
        {4095, 4095, 4095, 128, 8, 5, 0},
        {4096, 4096, 4096, 128, 8, 5, 0},
        {11008, 4096, 2048, 128, 8, 5, 0}, /* 11 waves of 1.2 (13.2), against 42 a unit (14) */
    };
    for (size_t i = 0; i < sizeof tn_cases / sizeof tn_cases[0]; i++) {
        hd_fused_tile_call c = product_of(tn_cases[i].m, tn_cases[i].n, tn_cases[i].k, true, false);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        if (p.bm != tn_cases[i].bm || p.bk != tn_cases[i].bk || p.async != tn_cases[i].async ||
            p.lead != tn_cases[i].lead)
            fail_msg("%zu x %zu x %zu TN: BM=%d BK=%d ASYNC=%d LEAD=%d", tn_cases[i].m,
                     tn_cases[i].n, tn_cases[i].k, p.bm, p.bk, p.async, p.lead);
    }
    /* deep products of few 128 x 128 tiles, both sides 256 or more and filled to a tenth, rows
     * aligned, 2048 deep or more, not TT: those tiles cut for two groups per unit (where that
     * gives one and a half or more), in 5 buffers where cp.async copies both operands (TN),
     * else loaded two stages ahead */
    static const struct {
        size_t m, n, k;
        bool ta, tb;
        int bm, sk, async, lead;
    } few_deep[] = {
        {512, 512, 8192, true, false, 128, 16, 5, 0}, /* 16 tiles: 16 slices, the most */
        {512, 512, 8192, false, true, 128, 16, 0, 2},
        {768, 768, 4096, false, false, 128, 7, 0, 2},   /* 36 tiles: 7 */
        {1024, 1024, 4096, false, false, 128, 4, 0, 2}, /* 64: 4 */
        {520, 1000, 5000, true, false, 64, 4, 3, 0},    /* 520 rows in 640: 64 x 128, 4 slices */
        {1024, 1024, 1024, false, false, 128, 2, 0, 0}, /* 1024 deep: 128 x 64, 2 slices */
        {1024, 1024, 4095, false, false, 64, 4, 3, 0},  /* A's rows unaligned: likewise */
        {256, 128, 8192, false, false, 64, 16, 0, 0},   /* a side under 256 */
        {896, 896, 4096, true, true, 64, 4, 3, 0},      /* TT: 64 x 128, 4 slices */
        {256, 256, 16384, false, false, 64, 8, 0, 0},   /* 4 tiles, 64 groups at 16 slices */
    };
    for (size_t i = 0; i < sizeof few_deep / sizeof few_deep[0]; i++) {
        hd_fused_tile_call c =
            product_of(few_deep[i].m, few_deep[i].n, few_deep[i].k, few_deep[i].ta, few_deep[i].tb);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        if (p.bm != few_deep[i].bm || p.sk != few_deep[i].sk || p.async != few_deep[i].async ||
            p.lead != few_deep[i].lead)
            fail_msg("%zu x %zu x %zu (%d%d): BM=%d SK=%d ASYNC=%d LEAD=%d", few_deep[i].m,
                     few_deep[i].n, few_deep[i].k, few_deep[i].ta, few_deep[i].tb, p.bm, p.sk,
                     p.async, p.lead);
    }
    /* TT copies A: where its rows are unaligned, 3 buffers of 4-byte copies in place of the
     * registers loaded two stages ahead (aligned rows keep those, above); NN, which copies B,
     * keeps them in either case */
    for (int unaligned_tt = 0; unaligned_tt < 2; unaligned_tt++) {
        hd_fused_tile_call c = product_of(4095, 4095, 4095, unaligned_tt, unaligned_tt);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        if (p.bm != 128 || p.rm != 16 || p.bk != 8 || p.async != (unaligned_tt ? 3 : 0) ||
            p.lead != (unaligned_tt ? 0 : 2))
            fail_msg("4095^3 %s: BM=%d RM=%d BK=%d ASYNC=%d LEAD=%d", unaligned_tt ? "TT" : "NN",
                     p.bm, p.rm, p.bk, p.async, p.lead);
    }
    /* at most one 64 x 128 tile a unit, 1000 to 2047 deep, A stored m x k with unaligned rows:
     * 64 x 128 tiles halved, 3 buffers where cp.async copies B (stored k x n, however its rows
     * fall), none where it copies nothing (NT) */
    for (int tb = 0; tb < 2; tb++) {
        hd_fused_tile_call c = product_of(997, 1009, 1013, false, tb);
        hd_fused_params p;
        assert_int_equal(hd__fused_tile_resolve(&f, ctx, &c, &p), HD_OK);
        if (p.bm != 64 || p.bn != 128 || p.sk != 2 || p.async != (tb ? 0 : 3))
            fail_msg("997 x 1009 x 1013 %s: BM=%d BN=%d SK=%d ASYNC=%d", tb ? "NT" : "NN", p.bm,
                     p.bn, p.sk, p.async);
    }
    /* 5 buffers where the local memory holds them, else 3 */
    f.local_mem = 5 * 2 * 8 * 132 * sizeof(float);
    hd_fused_tile_call deep = product_of(4096, 4096, 4096, true, false);
    hd_fused_params p;
    assert_int_equal(hd__fused_tile_resolve(&f, ctx, &deep, &p), HD_OK);
    assert_int_equal(p.async, 5);
    f.local_mem = 5 * 2 * 8 * 132 * sizeof(float) - 1;
    assert_int_equal(hd__fused_tile_resolve(&f, ctx, &deep, &p), HD_OK);
    assert_int_equal(p.async, 3);
}

/* ---- LoRA ---- */

typedef struct lora_data {
    size_t tokens, in, out, rank;
    float scale;
    float *x, *w, *a, *b;
    double *want, *bound;
} lora_data;

static lora_data lora_data_make(size_t tokens, size_t in, size_t out, size_t rank,
                                uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    lora_data d = {tokens, in, out, rank, 0.75f,
                   hd_test_floats(tokens * in), hd_test_floats(in * out),
                   hd_test_floats(in * rank), hd_test_floats(rank * out),
                   hd_test_doubles(tokens * out), hd_test_doubles(tokens * out)};
    hd_test_fill(&rng, d.x, tokens * in, -1, 1);
    hd_test_fill(&rng, d.w, in * out, -1, 1);
    hd_test_fill(&rng, d.a, in * rank, -1, 1);
    hd_test_fill(&rng, d.b, rank * out, -1, 1);
    hd_ref_lora(tokens, in, out, rank, d.x, d.w, d.a, d.b, d.scale, d.want, d.bound);
    return d;
}

static void lora_data_free(lora_data *d)
{
    free(d->x);
    free(d->w);
    free(d->a);
    free(d->b);
    free(d->want);
    free(d->bound);
}

/* LoRA's forward on the fused backend against the float64 reference, in precision, with the
 * weights in PyTorch's layout (pt: W out x in, A rank x in, B out x rank) or the library's;
 * variant NULL: through hd_lora_forward (the library's layout, the context's precision). */
static void check_lora_in(hd_context *ctx, size_t tokens, size_t in, size_t out, size_t rank,
                          const char *variant, hd_precision precision, bool pt, uint64_t salt)
{
    assert_true(variant != NULL || (!pt && precision == hd_context_gemm_precision(ctx)));
    lora_data d = lora_data_make(tokens, in, out, rank, salt);
    float *wt = pt ? hd_test_transposed(d.w, in, out) : NULL;
    float *at = pt ? hd_test_transposed(d.a, in, rank) : NULL;
    float *bt = pt ? hd_test_transposed(d.b, rank, out) : NULL;
    hd_tensor *x = hd_test_tensor(ctx, tokens, in, d.x);
    hd_tensor *w = pt ? hd_test_tensor(ctx, out, in, wt) : hd_test_tensor(ctx, in, out, d.w);
    hd_tensor *a = pt ? hd_test_tensor(ctx, rank, in, at) : hd_test_tensor(ctx, in, rank, d.a);
    hd_tensor *b = pt ? hd_test_tensor(ctx, out, rank, bt) : hd_test_tensor(ctx, rank, out, d.b);
    hd_tensor *y = hd_test_tensor(ctx, tokens, out, NULL);
    char what[160];
    snprintf(what, sizeof what, "lora T=%zu %zux%zu r=%zu%s %s [%s]", tokens, in, out, rank,
             pt ? " pt" : "", hd_precision_name(precision), variant ? variant : "default");
    if (variant == NULL) {
        expect_fused(ctx, hd_lora_forward(ctx, x, w, a, b, d.scale, y), what);
    } else {
        void *fs;
        const hd_backend_impl *impl = fused_impl(ctx, &fs);
        to_device(x);
        to_device(w);
        to_device(a);
        to_device(b);
        assert_int_equal(hd__tensor_reserve(y, HD_PLACE_DEVICE), HD_OK);
        hd_lora_args args = {.x = x,
                             .w = w,
                             .a = a,
                             .b = b,
                             .scale = d.scale,
                             .y = y,
                             .tokens = tokens,
                             .in = in,
                             .out = out,
                             .rank = rank,
                             .variant = variant,
                             .precision = precision,
                             .trans_w = pt,
                             .trans_a = pt,
                             .trans_b = pt};
        hd_status s = impl->run[HD_OP_LORA](fs, ctx, &(hd_op_args){.lora = args});
        if (beyond_device_limit(ctx, s, what))
            variant = "declined";
        else if (s != HD_OK)
            fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
        hd__tensor_written(y, HD_PLACE_DEVICE);
    }
    if (variant == NULL || strcmp(variant, "declined") != 0) {
        float *got = hd_test_read(y);
        hd_test_expect_gemm_close(what, got, d.want, d.bound, tokens * out, in + rank,
                                  gemm_factor(precision, in + rank));
        free(got);
    }
    hd_tensor_destroy(x);
    hd_tensor_destroy(w);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(y);
    free(wt);
    free(at);
    free(bt);
    lora_data_free(&d);
}

static void check_lora(hd_context *ctx, size_t tokens, size_t in, size_t out, size_t rank,
                       const char *variant, uint64_t salt)
{
    check_lora_in(ctx, tokens, in, out, rank, variant, hd_context_gemm_precision(ctx), false, salt);
}

/* Each copy-engine tile (TMA=1) the tuner offers in precision, on products A m x k times B
 * stored n x k: tiles cut by the matrix's edge, depths below, at and past a stage in rows of
 * whole 16-byte runs, alpha, beta and NaN in a C that beta = 0 ignores. How many it checked. */
static size_t check_tma_tiles(hd_context *ctx, const hd_fused *f, hd_precision precision,
                              uint64_t salt)
{
    hd_shape shape = {.dim = {300, 300, 300}, .trans_b = true};
    const char *list[96];
    size_t count = hd__fused_tile_variants(f, &shape, precision, list, 96), offered = 0;
    static const size_t depths[] = {204, 4, 32, 76};
    for (size_t i = 0; i < count; i++) {
        if (strstr(list[i], "TMA=1") == NULL)
            continue;
        size_t o = offered++;
        gemm_case gc = {131 + 70 * (o % 2),
                        97 + 160 * (o / 2 % 2),
                        depths[o % 4],
                        o % 2 ? 1.0f : -0.5f,
                        o / 2 % 2 ? 0.25f : 0.0f,
                        o % 3 == 0,
                        false,
                        true};
        check_gemm_in(ctx, &gc, list[i], precision, salt + i);
    }
    return offered;
}

/* The warpgroup kernel with its stages copied by the Tensor Memory Accelerator (gemm_tma.cl), in
 * tf32 and in fp32x3: both operands stored depth-contiguous (A m x k, B n x k), each tile the
 * tuner offers, on
 * tiles cut by the matrix's edge, depths below, at and past a stage (4, 32, 204), alpha, beta
 * and NaN in a C that beta = 0 ignores, split-K, the defaults' choice, a batch and LoRA's second
 * product (in PyTorch's layout). Where the device runs on the CUDA runtime of a Hopper these
 * are the real kernels and tensor maps; elsewhere their emulation (MMA_EMULATE: the copies as
 * loads into the same swizzled layout), with the H200's local memory. On a Hopper on OpenCL
 * the kernel is refused, and tf32 runs on cp.async's. */
static void test_gemm_tma_kernel_matches_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = tensor_cores_begin(ctx, true, &emulate);
    size_t saved = f->stage_mem, saved_local = f->local_mem;
    bool saved_tma = f->tma;
    if (emulate) {
        f->local_mem = 48 * 1024;
        f->stage_mem = 232448 - 1024;
        f->tma = true;
    }
    hd_fused_tile_call nt = product_of(300, 300, 300, false, true);
    nt.precision = HD_PRECISION_TF32;
    if (!f->tma) { /* OpenCL: no tensor maps; the variant is refused, the default is cp.async's */
        hd_fused_params p;
        nt.variant = "BM=128 BN=256 BK=32 WN=256 ASYNC=4 TMA=1";
        assert_int_equal(hd__fused_tile_check(f, ctx, &nt), HD_ERR_UNSUPPORTED);
        nt.variant = NULL;
        assert_int_equal(hd__fused_tile_resolve(f, ctx, &nt, &p), HD_OK);
        assert_int_equal(p.tma, 0);
        tensor_cores_end(f, emulate);
        return;
    }
    assert_true(check_tma_tiles(ctx, f, HD_PRECISION_TF32, 3400) >= 6);
    /* fp32x3 on the copy engine (PREC 3: each operand's small parts made in local memory): each
     * tile the tuner offers, the defaults (128 x 128), an operand copied first, and the mma.sync
     * kernel where a variant names its warps */
    assert_true(check_tma_tiles(ctx, f, HD_PRECISION_FP32X3, 3440) >= 4);
    hd_fused_params p;
    hd_fused_tile_call x3 = product_of(4096, 4096, 4096, false, true);
    x3.precision = HD_PRECISION_FP32X3;
    assert_int_equal(hd__fused_tile_resolve(f, ctx, &x3, &p), HD_OK);
    assert_true(p.tma == 1 && p.tma_split == 1 && p.bm == 128 && p.bn == 128 && p.bk == 32);
    x3.variant = "BM=128 BN=128 BK=16 WM=64 WN=32";
    assert_int_equal(hd__fused_tile_resolve(f, ctx, &x3, &p), HD_OK);
    assert_true(p.tma == 0 && p.wgmma == 0);
    x3.variant = "WGMMA=1 TMA=0";
    assert_int_equal(hd__fused_tile_check(f, ctx, &x3), HD_ERR_UNSUPPORTED);
    static const gemm_case x3_wide = {257, 300, 204, 1.0f, 0.5f, false, false, true};
    check_gemm_in(ctx, &x3_wide, DEFAULT_PARAMETERS, HD_PRECISION_FP32X3, 3460);
    static const gemm_case x3_nn = {131, 97, 201, -1.0f, 0.0f, true, true, false};
    check_gemm_in(ctx, &x3_nn, "BM=64 BN=64 WN=64 TMA=1", HD_PRECISION_FP32X3, 3461);
    /* split-K, and the defaults: the copy engine wherever the operands allow, the 128 x 256
     * tiles where they fill the device, cp.async's kernel for the other layouts */
    static const gemm_case split = {70, 45, 300, 1.0f, 0.5f, false, false, true};
    check_gemm_in(ctx, &split, "BM=64 BN=64 WN=64 SK=3 TMA=1", HD_PRECISION_TF32, 3480);
    static const gemm_case wide = {257, 300, 41, 1.0f, 0.5f, false, false, true};
    check_gemm_in(ctx, &wide, DEFAULT_PARAMETERS, HD_PRECISION_TF32, 3481);
    nt.variant = NULL;
    assert_int_equal(hd__fused_tile_resolve(f, ctx, &nt, &p), HD_OK);
    assert_int_equal(p.tma, 1);
    hd_fused_tile_call big = product_of(4096, 4096, 4096, false, true);
    big.precision = HD_PRECISION_TF32;
    assert_int_equal(hd__fused_tile_resolve(f, ctx, &big, &p), HD_OK);
    assert_true(p.tma == 1 && p.bm == 128 && p.bn == 256 && p.bk == 32);
    /* Operands stored otherwise (A k x m, B k x n, or both; rows of odd lengths) are copied
     * depth-contiguous first (gemm_repack) where TMA=1 asks, or where the product is large
     * enough to pay for the copy; small ones run on cp.async's kernel in place. */
    for (int tr = 0; tr < 4; tr++) {
        hd_fused_tile_call small = product_of(70, 45, 300, tr != 1, tr == 0);
        small.precision = HD_PRECISION_TF32;
        if (tr == 3) /* depth-contiguous, rows of 301 floats */
            small = product_of(70, 45, 301, false, true), small.precision = HD_PRECISION_TF32;
        assert_int_equal(hd__fused_tile_resolve(f, ctx, &small, &p), HD_OK);
        assert_int_equal(p.tma, 0);
        hd_fused_tile_call large = product_of(4096, 4096, tr == 3 ? 4095 : 4096, tr != 1, tr == 0);
        large.precision = HD_PRECISION_TF32;
        assert_int_equal(hd__fused_tile_resolve(f, ctx, &large, &p), HD_OK);
        assert_true(p.tma == 1 && p.bm == 128 && p.bn == 256);
        gemm_case gc = {131,
                        97,
                        tr == 3 ? 203 : 201,
                        1.0f,
                        tr % 2 ? 0.5f : 0.0f,
                        tr == 2,
                        tr != 1 && tr != 3,
                        tr == 0 || tr == 3};
        check_gemm_in(ctx, &gc, "BM=128 BN=128 WN=128 TMA=1", HD_PRECISION_TF32, 3470 + tr);
        check_gemm_in(ctx, &gc, "BM=64 BN=64 WN=64 TMA=0", HD_PRECISION_TF32, 3475 + tr);
    }
    nt.variant = "TMA=1 BK=16";
    assert_int_equal(hd__fused_tile_check(f, ctx, &nt), HD_ERR_UNSUPPORTED);
    nt.variant = "TMA=1 AREG=1";
    assert_int_equal(hd__fused_tile_check(f, ctx, &nt), HD_ERR_UNSUPPORTED);

    /* a batch of three, each matrix's tensor map a box apart */
    const size_t batch = 3, m = 70, n = 45, k = 36;
    hd_rng rng = hd_test_rng(3490);
    float *a = hd_test_floats(batch * m * k), *b = hd_test_floats(batch * n * k);
    hd_test_fill(&rng, a, batch * m * k, -1, 1);
    hd_test_fill(&rng, b, batch * n * k, -1, 1);
    hd_tensor *t_a = hd_test_tensor(ctx, batch * m, k, a),
              *t_b = hd_test_tensor(ctx, batch * n, k, b);
    hd_tensor *t_c = hd_test_tensor(ctx, batch * m, n, NULL);
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    to_device(t_a);
    to_device(t_b);
    assert_int_equal(hd__tensor_reserve(t_c, HD_PLACE_DEVICE), HD_OK);
    hd_gemm_args batched = {.trans_b = true,
                            .alpha = 1.0f,
                            .a = t_a,
                            .b = t_b,
                            .c = t_c,
                            .m = m,
                            .n = n,
                            .k = k,
                            .batch = batch,
                            .variant = "BM=64 BN=64 WN=64 TMA=1",
                            .precision = HD_PRECISION_TF32};
    hd_status s = impl->run[HD_OP_GEMM_BATCHED](fs, ctx, &(hd_op_args){.gemm = batched});
    if (s != HD_OK)
        fail_msg("gemm_batched (TMA): %s (%s)", hd_status_name(s), hd_context_last_error(ctx));
    hd__tensor_written(t_c, HD_PLACE_DEVICE);
    float *got = hd_test_read(t_c);
    double *want = hd_test_doubles(m * n), *bound = hd_test_doubles(m * n);
    for (size_t i = 0; i < batch; i++) {
        hd_ref_gemm(false, true, m, n, k, 1.0f, a + i * m * k, b + i * n * k, 0.0f, NULL, want,
                    bound);
        hd_test_expect_gemm_close("gemm_batched (TMA)", got + i * m * n, want, bound, m * n, k,
                                  gemm_factor(HD_PRECISION_TF32, k));
    }
    hd_tensor_destroy(t_a);
    hd_tensor_destroy(t_b);
    hd_tensor_destroy(t_c);
    free(got);
    free(want);
    free(bound);
    free(a);
    free(b);

    /* LoRA on the tiled engine: x * W^T + (s * x * A^T) * B^T in PyTorch's layout, the second
     * product's stages after the first's (a rank past one stage, 40, and one inside it, 12);
     * and in the library's layout (W in x out, B rank x out), W and B copied first, with a rank
     * whose rows are no whole 16-byte runs (5) */
    static const size_t ranks[] = {40, 12, 5};
    for (size_t r = 0; r < 3; r++)
        check_lora_in(ctx, 131, 204, 97, ranks[r], "BM=128 BN=128 BK=32 WN=128 ASYNC=6 TMA=1",
                      HD_PRECISION_TF32, r < 2, 3495 + r);
    /* B unwritten since an earlier call (the LM head's chunks): the copy of B that call made
     * serves; a different B, or one written since (the flag off), is copied again */
    {
        hd_rng brng = hd_test_rng(3499);
        float *a0 = hd_test_floats(m * k), *a1 = hd_test_floats(m * k);
        float *b0 = hd_test_floats(k * n), *b1 = hd_test_floats(k * n);
        hd_test_fill(&brng, a0, m * k, -1, 1);
        hd_test_fill(&brng, a1, m * k, -1, 1);
        hd_test_fill(&brng, b0, k * n, -1, 1);
        hd_test_fill(&brng, b1, k * n, -1, 1);
        hd_tensor *ta[2] = {hd_test_tensor(ctx, m, k, a0), hd_test_tensor(ctx, m, k, a1)};
        hd_tensor *tb[2] = {hd_test_tensor(ctx, k, n, b0), hd_test_tensor(ctx, k, n, b1)};
        hd_tensor *tc = hd_test_tensor(ctx, m, n, NULL);
        static const struct {
            int a, b;
            bool unchanged;
            int b_holds; /* the data tb[b] holds by then */
        } calls[] = {{0, 0, false, 0}, {1, 0, true, 0}, {0, 1, true, 1}, {1, 1, false, 0}};
        double *bwant = hd_test_doubles(m * n), *bbound = hd_test_doubles(m * n);
        for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
            const float *b_data = calls[i].b_holds ? b1 : b0;
            if (i == 3) /* tb[1] rewritten with b0 */
                assert_int_equal(hd_tensor_write(tb[1], b0), HD_OK);
            to_device(ta[calls[i].a]);
            to_device(tb[calls[i].b]);
            assert_int_equal(hd__tensor_reserve(tc, HD_PLACE_DEVICE), HD_OK);
            hd_fused_tile_call call = {.m = m,
                                       .n = n,
                                       .k = k,
                                       .batch = 1,
                                       .alpha = 1.0f,
                                       .a = {hd__fused_mem(ta[calls[i].a]), k, false},
                                       .b = {hd__fused_mem(tb[calls[i].b]), n, false},
                                       .c = hd__fused_mem(tc),
                                       .ldc = n,
                                       .precision = HD_PRECISION_TF32,
                                       .variant = "BM=64 BN=64 WN=64 TMA=1",
                                       .b_unchanged = calls[i].unchanged};
            s = hd__fused_tile_gemm(f, ctx, &call);
            if (s != HD_OK)
                fail_msg("B unchanged, call %zu: %s (%s)", i, hd_status_name(s),
                         hd_context_last_error(ctx));
            hd__tensor_written(tc, HD_PLACE_DEVICE);
            hd_ref_gemm(false, false, m, n, k, 1.0f, calls[i].a ? a1 : a0, b_data, 0.0f, NULL,
                        bwant, bbound);
            float *bgot = hd_test_read(tc);
            hd_test_expect_gemm_close("TMA, B unchanged", bgot, bwant, bbound, m * n, k,
                                      gemm_factor(HD_PRECISION_TF32, k));
            free(bgot);
        }
        for (int i = 0; i < 2; i++) {
            hd_tensor_destroy(ta[i]);
            hd_tensor_destroy(tb[i]);
        }
        hd_tensor_destroy(tc);
        free(a0);
        free(a1);
        free(b0);
        free(b1);
        free(bwant);
        free(bbound);
    }
    /* a kernel that failed to build would have passed on cp.async's results */
    assert_false(f->tma_broken || f->wgmma_broken || f->mma_broken);
    f->stage_mem = saved;
    f->local_mem = saved_local;
    f->tma = saved_tma;
    tensor_cores_end(f, emulate);
}

/* Many tokens, and ranks past the strip kernels' 64, on the tiled engine (x * W with the
 * low-rank product in the same tiles): odd and prime sizes, rank 0 and 1, widths and ranks
 * not a multiple of 4 (scalar loads), and each tile variant the tuner times for one shape,
 * also on few tokens. */
static void test_lora_tiles_match_reference(void **state)
{
    hd_context *ctx = *state;
    static const size_t cases[][4] = {
        {17, 31, 29, 5}, {33, 257, 127, 64}, {64, 64, 64, 16}, {41, 37, 43, 0},
        {19, 64, 68, 1}, {5, 61, 67, 65},    {130, 96, 100, 12}, {23, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_lora(ctx, cases[i][0], cases[i][1], cases[i][2], cases[i][3], NULL, 3100 + i);
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_shape shape = {.dim = {70, 96, 80, 8}};
    const char *list[48];
    size_t count = impl->variants(fs, HD_OP_LORA, &shape, HD_PART_WHOLE, list, 40);
    assert_true(count > 4);
    for (size_t i = 0; i < count; i++)
        check_lora(ctx, i % 2 ? 3 : 37 + i, 96, 80 + 4 * i, i % 3 ? 8 : 3, list[i], 3150 + i);
}

/* LoRA in tf32 on the warpgroup kernel with A in registers (emulated where no Hopper is): the
 * low-rank product (scale * x * A) * B runs through the same ring of A's stages as x * W, its
 * own depth of rank stages after x * W's; uneven tiles, ranks that end mid-stage. */
static void test_lora_tf32_a_in_registers_matches_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = tensor_cores_begin(ctx, true, &emulate);
    hd_precision saved = ctx->gemm_precision;
    ctx->gemm_precision = HD_PRECISION_TF32;
    check_lora(ctx, 130, 96, 300, 8, "BM=128 BN=256 BK=16 WN=256 ASYNC=3 AREG=1 WGMMA=1", 3200);
    check_lora(ctx, 70, 45, 131, 5, "BM=64 BN=64 BK=16 WN=64 ASYNC=3 AREG=1 WGMMA=1", 3201);
    check_lora(ctx, 129, 64, 520, 19, NULL, 3202); /* the defaults: wide tiles, AREG */
    ctx->gemm_precision = saved;
    assert_false(f->wgmma_broken);
    tensor_cores_end(f, emulate);
}

/* ---- attention on the tensor cores ---- */

typedef struct tc_attention_case {
    size_t tokens, heads, kv_heads, head_dim;
    const size_t *lengths; /* count packed sequences; NULL: one */
    size_t count;
    bool causal;
    float range; /* q and k uniform in +-range */
} tc_attention_case;

/* Whether a tuner's tile was declined for this device's local memory or work-group limit (said,
 * and true); any other failure fails the test. */
static bool tile_declined(hd_context *ctx, hd_status s, const char *what)
{
    if (s == HD_OK)
        return false;
    const char *why = hd_context_last_error(ctx);
    if (s != HD_ERR_UNSUPPORTED ||
        (strstr(why, "bytes of local memory") == NULL && strstr(why, "exceed the device") == NULL))
        fail_msg("%s: %s", what, why);
    fprintf(stderr, "# %s: declined on this device: %s\n", what, why);
    return true;
}

/* A case's random inputs from seed (q and k within +-range, v and dout within +-1; dout for
 * the backward alone, NULL else) and its shape for the float64 reference. */
typedef struct tc_inputs {
    size_t qd, kd; /* q's and k's columns */
    float *q, *k, *v, *dout;
    int lens[16];
    hd_ref_attention_shape rs; /* its seq_lens are lens: the struct stays where it was made */
} tc_inputs;

static void tc_inputs_make(const tc_attention_case *c, uint64_t seed, bool backward,
                           tc_inputs *in)
{
    hd_rng rng = hd_test_rng(seed);
    size_t t = c->tokens;
    in->qd = c->heads * c->head_dim;
    in->kd = c->kv_heads * c->head_dim;
    in->q = hd_test_random(&rng, t * in->qd, -c->range, c->range);
    in->k = hd_test_random(&rng, t * in->kd, -c->range, c->range);
    in->v = hd_test_random(&rng, t * in->kd, -1, 1);
    in->dout = backward ? hd_test_random(&rng, t * in->qd, -1, 1) : NULL;
    assert_true(c->count <= sizeof in->lens / sizeof in->lens[0]);
    for (size_t i = 0; i < c->count; i++)
        in->lens[i] = (int)c->lengths[i];
    if (c->count == 0)
        in->lens[0] = (int)t;
    in->rs = (hd_ref_attention_shape){.tokens = t,
                                      .heads = c->heads,
                                      .kv_heads = c->kv_heads,
                                      .head_dim = c->head_dim,
                                      .seq_lens = in->lens,
                                      .nseq = c->count ? c->count : 1,
                                      .causal = c->causal,
                                      .scale = 1.0 / sqrt((double)c->head_dim)};
}

static void tc_inputs_free(tc_inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->dout);
}

/* The options of case c (the public call's), its parameters (the dispatcher's), and its
 * description in test messages. */
static hd_attention_options tc_options(const tc_attention_case *c)
{
    return (hd_attention_options){.heads = c->heads,
                                  .kv_heads = c->kv_heads,
                                  .causal = c->causal,
                                  .sequences = {c->lengths, c->count}};
}

static hd_op_params tc_params(const tc_attention_case *c)
{
    return (hd_op_params){.heads = c->heads,
                          .kv_heads = c->kv_heads,
                          .causal = c->causal,
                          .sequences = {c->lengths, c->count}};
}

static void tc_describe(char *what, size_t size, const hd_context *ctx,
                        const tc_attention_case *c, const char *op, const char *variant)
{
    snprintf(what, size, "%s %s, %zu tokens, %zu/%zu heads of %zu%s%s, variant %s",
             hd_precision_name(ctx->gemm_precision), op, c->tokens, c->heads, c->kv_heads,
             c->head_dim, c->causal ? ", causal" : "", c->count ? ", packed" : "",
             variant != NULL ? variant : "default");
}

/* Runs the forward of c on the fused backend with variant (NULL: through the public call)
 * in the context's precision, checks out and lse against the float64 reference within rel
 * of their scale, and returns out (the caller frees it); NULL where the variant's tile does
 * not fit this device. */
static float *check_tc_attention(hd_context *ctx, const tc_attention_case *c, const char *variant,
                                 double rel, uint64_t seed)
{
    tc_inputs in;
    tc_inputs_make(c, seed, false, &in);
    size_t t = c->tokens, qd = in.qd, kd = in.kd;
    float *q = in.q, *k = in.k, *v = in.v;
    double *out = hd_test_doubles(t * qd), *lse = hd_test_doubles(t * c->heads);
    hd__ref_attention(&in.rs, q, k, v, out, lse);
    hd_tensor *tq = hd_test_tensor(ctx, t, qd, q), *tk = hd_test_tensor(ctx, t, kd, k);
    hd_tensor *tv = hd_test_tensor(ctx, t, kd, v), *to = hd_test_tensor(ctx, t, qd, NULL);
    hd_tensor *tl = hd_test_tensor(ctx, t, c->heads, NULL);
    char what[160];
    tc_describe(what, sizeof what, ctx, c, "attention", variant);
    const hd_op_params p = tc_params(c);
    const hd_attention_options opt = tc_options(c);
    float *got = NULL;
    if (variant == NULL) {
        expect_fused(ctx, hd_attention(ctx, &opt, tq, tk, tv, to, tl), what);
    } else {
        const hd_tensor *tensors[] = {tq, tk, tv, to, tl};
        hd_call call;
        assert_int_equal(hd__call_prepare(ctx, HD_OP_ATTENTION, tensors, &p, &call), HD_OK);
        if (tile_declined(ctx, hd__call_run_on(ctx, HD_BACKEND_FUSED, &call, variant), what))
            goto done;
    }
    got = hd_test_read(to);
    float *got_lse = hd_test_read(tl);
    hd_test_expect_close(what, got, out, t * qd, rel * (hd_test_max_abs(out, t * qd) + 1.0), 0);
    hd_test_expect_close(what, got_lse, lse, t * c->heads,
                         rel * (hd_test_max_abs(lse, t * c->heads) + 1.0), 0);
    free(got_lse);
done:;
    hd_tensor *all[] = {tq, tk, tv, to, tl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    tc_inputs_free(&in);
    free(out);
    free(lse);
    return got;
}

/* The backward of c on the fused backend with variant (NULL: through the public call) in the
 * context's precision: dq, dk and dv against the float64 reference within rel of their scale,
 * from the reference's out and lse. Returns dq (the caller frees it), or NULL where the
 * variant's tile does not fit this device. */
static float *check_tc_attention_backward(hd_context *ctx, const tc_attention_case *c,
                                          const char *variant, double rel, uint64_t seed)
{
    tc_inputs in;
    tc_inputs_make(c, seed, true, &in);
    size_t t = c->tokens, qd = in.qd, kd = in.kd;
    float *q = in.q, *k = in.k, *v = in.v, *dout = in.dout;
    double *out = hd_test_doubles(t * qd), *lse = hd_test_doubles(t * c->heads);
    double *dq = hd_test_doubles(t * qd), *dk = hd_test_doubles(t * kd);
    double *dv = hd_test_doubles(t * kd);
    hd__ref_attention(&in.rs, q, k, v, out, lse);
    hd__ref_attention_backward(&in.rs, q, k, v, dout, dq, dk, dv);
    float *outf = hd_test_floats(t * qd), *lsef = hd_test_floats(t * c->heads);
    for (size_t i = 0; i < t * qd; i++)
        outf[i] = (float)out[i];
    for (size_t i = 0; i < t * c->heads; i++)
        lsef[i] = (float)lse[i];
    hd_tensor *tq = hd_test_tensor(ctx, t, qd, q), *tk = hd_test_tensor(ctx, t, kd, k);
    hd_tensor *tv = hd_test_tensor(ctx, t, kd, v), *to = hd_test_tensor(ctx, t, qd, outf);
    hd_tensor *tl = hd_test_tensor(ctx, t, c->heads, lsef), *tg = hd_test_tensor(ctx, t, qd, dout);
    hd_tensor *tdq = hd_test_tensor(ctx, t, qd, NULL), *tdk = hd_test_tensor(ctx, t, kd, NULL);
    hd_tensor *tdv = hd_test_tensor(ctx, t, kd, NULL);
    char what[160];
    tc_describe(what, sizeof what, ctx, c, "attention backward", variant);
    const hd_op_params p = tc_params(c);
    const hd_attention_options opt = tc_options(c);
    bool ran = true;
    if (variant == NULL) {
        expect_fused(ctx, hd_attention_backward(ctx, &opt, tq, tk, tv, to, tl, tg, tdq, tdk, tdv),
                     what);
    } else {
        const hd_tensor *tensors[] = {tq, tk, tv, to, tl, tg, tdq, tdk, tdv};
        hd_call call;
        assert_int_equal(hd__call_prepare(ctx, HD_OP_ATTENTION_BACKWARD, tensors, &p, &call),
                         HD_OK);
        ran = !tile_declined(ctx, hd__call_run_on(ctx, HD_BACKEND_FUSED, &call, variant), what);
    }
    float *got_dq = NULL;
    if (ran) {
        const hd_tensor *got[] = {tdq, tdk, tdv};
        const double *want[] = {dq, dk, dv};
        const size_t n[] = {t * qd, t * kd, t * kd};
        for (int i = 0; i < 3; i++) {
            float *g = hd_test_read(got[i]);
            hd_test_expect_close(what, g, want[i], n[i],
                                 rel * (hd_test_max_abs(want[i], n[i]) + 1.0), 0);
            if (i == 0)
                got_dq = g;
            else
                free(g);
        }
    }
    hd_tensor *all[] = {tq, tk, tv, to, tl, tg, tdq, tdk, tdv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hd_tensor_destroy(all[i]);
    tc_inputs_free(&in);
    float *fl[] = {outf, lsef};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        free(fl[i]);
    double *dd[] = {out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++)
        free(dd[i]);
    return got_dq;
}

/* How many of n floats differ in their bits between a and b (both freed). */
static size_t bits_differ(float *a, float *b, size_t n)
{
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    free(a);
    free(b);
    return differ;
}

/* Attention's forward and backward on the tensor cores (attention_mma.cl; emulated where the
 * device has none), in fp32x3 and tf32 against the float64 reference: one token, odd counts,
 * packed sequences of unequal lengths, grouped heads, causal and full, head dimensions that
 * are and are not multiples of 16 (8, 72) up to 256, several query and key tiles (the copies
 * of the next tile while this one is used, the online rescaling), scores of hundreds (fp32x3);
 * every variant the tuner lists (in fp32x3: the tiles are tf32's too), each run or declined
 * for this device's local memory; the local memory as the kernels' own array and as their
 * argument (the CUDA runtime's; emulated on OpenCL); the tiles chosen within OpenCL's 48 KiB
 * and the FMA kernels where none fit (emulated). The backward with dq added by dk and dv's
 * kernel (atomic adds, the default) on every case and variant, and in its own kernel (a
 * deterministic context) with its dq tiles, packed and unequal sequences, local memory as an
 * argument and within 48 KiB; the two give other bits on a case of several key tiles (both
 * ran). Both precisions give other bits than the FMA kernels on most elements of
 * the same data, forward and backward (the tensor cores ran), and, deterministic, the same
 * bits when run again. */
static void test_attention_on_tensor_cores(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = tensor_cores_begin(ctx, false, &emulate);
    hd_precision saved = ctx->gemm_precision;
    static const size_t unequal[] = {1, 7, 40, 13};
    const tc_attention_case cases[] = {
        {1, 1, 1, 8, NULL, 0, true, 1},       {61, 4, 1, 64, unequal, 4, true, 1},
        {61, 4, 2, 72, unequal, 4, false, 1}, {150, 2, 1, 128, NULL, 0, true, 1},
        {29, 2, 1, 256, NULL, 0, false, 1},   {45, 2, 2, 8, NULL, 0, true, 30},
    };
    const tc_attention_case every_variant = {100, 1, 1, 64, NULL, 0, true, 1};
    /* fp32 runs them as fp32x3 does (3xTF32), as PyTorch's scaled_dot_product_attention */
    const hd_precision precisions[] = {HD_PRECISION_FP32X3, HD_PRECISION_TF32, HD_PRECISION_FP32};
    for (size_t pi = 0; pi < 3; pi++) {
        ctx->gemm_precision = precisions[pi];
        double rel = precisions[pi] == HD_PRECISION_TF32 ? 2e-3 : 4e-5;
        double rel_backward = precisions[pi] == HD_PRECISION_TF32 ? 4e-3 : 2e-4;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].range > 2 && precisions[pi] == HD_PRECISION_TF32)
                continue; /* tf32 keeps 11 bits of a score of hundreds */
            free(check_tc_attention(ctx, &cases[i], NULL, rel * (1.0 + cases[i].range),
                                    4100 + i));
            free(check_tc_attention_backward(ctx, &cases[i], NULL,
                                             rel_backward * (1.0 + cases[i].range), 4150 + i));
        }
        if (precisions[pi] != HD_PRECISION_FP32)
            continue; /* the tiles are the same in all three: each variant once, with fp32's
                         FMA variants */
        const char *variants[32];
        hd_shape shape = {.dim = {100, 1, 1, 64}, .precision = precisions[pi]};
        size_t n = hd__fused_step_variants(f, HD_OP_ATTENTION, &shape, variants, 32);
        assert_true(n > 0);
        assert_string_equal(variants[n - 2], "FMA=1");
        for (size_t i = 0; i < n; i++)
            free(check_tc_attention(ctx, &every_variant, variants[i], rel * 2.0, 4200 + i));
        /* dq added by dk and dv's kernel: its variants; then dq's own kernel, deterministic:
         * the dq tiles it adds */
        for (int deterministic = 0; deterministic < 2; deterministic++) {
            f->deterministic = deterministic;
            n = hd__fused_step_variants(f, HD_OP_ATTENTION_BACKWARD, &shape, variants, 32);
            assert_true(n > 0);
            for (size_t i = 0; i < n; i++)
                if (!deterministic || strncmp(variants[i], "BQ=", 3) == 0)
                    free(check_tc_attention_backward(ctx, &every_variant, variants[i],
                                                     rel_backward * 2.0, 4250 + i));
        }
        f->deterministic = false;
    }
    /* dq added by dk and dv's kernel, and by its own: other sums, other bits */
    ctx->gemm_precision = HD_PRECISION_FP32X3;
    size_t n_dq = cases[3].tokens * cases[3].heads * cases[3].head_dim;
    float *any_order = check_tc_attention_backward(ctx, &cases[3], NULL, 2e-4, 4160);
    f->deterministic = true;
    float *fixed_order = check_tc_attention_backward(ctx, &cases[3], NULL, 2e-4, 4160);
    f->deterministic = false;
    size_t dq_differ = bits_differ(any_order, fixed_order, n_dq);
    fprintf(stderr, "# dq differs on %zu of %zu\n", dq_differ, n_dq);
    assert_true(dq_differ > n_dq / 4);
    /* the local memory as the kernels' argument, as the CUDA runtime passes it (emulated where
     * the runtime takes their own arrays, as NVIDIA's OpenCL does: its __local arguments do
     * not serve these kernels' copies) */
    size_t saved_stage_mem = f->stage_mem;
    if (f->stage_mem == 0 && emulate)
        f->stage_mem = f->local_mem;
    ctx->gemm_precision = HD_PRECISION_FP32X3;
    free(check_tc_attention(ctx, &cases[3], NULL, 4e-5 * 2.0, 4400));
    free(check_tc_attention_backward(ctx, &cases[2], NULL, 2e-4 * 2.0, 4401));
    f->deterministic = true;
    free(check_tc_attention_backward(ctx, &cases[2], NULL, 2e-4 * 2.0, 4401));
    f->stage_mem = saved_stage_mem;
    /* the same data on the FMA kernels (FMA=1, fp32), in fp32x3 and tf32 (tensor cores): the
     * tensor cores ran; deterministic from here */
    const tc_attention_case *same = &cases[1];
    size_t n_out = same->tokens * same->heads * same->head_dim;
    for (size_t pi = 0; pi < 2; pi++) {
        double rel = precisions[pi] == HD_PRECISION_TF32 ? 4e-3 : 4e-4;
        ctx->gemm_precision = HD_PRECISION_FP32;
        float *fma = check_tc_attention(ctx, same, "FMA=1", 4e-5, 4300);
        float *fma_dq = check_tc_attention_backward(ctx, same, "FMA=1", 4e-4, 4301);
        ctx->gemm_precision = precisions[pi];
        float *tc = check_tc_attention(ctx, same, NULL, rel, 4300);
        float *tc_dq = check_tc_attention_backward(ctx, same, NULL, rel, 4301);
        /* and the same bits again: every sum in a fixed order */
        float *again = check_tc_attention(ctx, same, NULL, rel, 4300);
        float *again_dq = check_tc_attention_backward(ctx, same, NULL, rel, 4301);
        assert_int_equal(bits_differ(again, tc, n_out), 0);
        assert_int_equal(bits_differ(again_dq, tc_dq, n_out), 0);
        tc = check_tc_attention(ctx, same, NULL, rel, 4300);
        tc_dq = check_tc_attention_backward(ctx, same, NULL, rel, 4301);
        assert_true(bits_differ(fma, tc, n_out) > n_out / 2);
        assert_true(bits_differ(fma_dq, tc_dq, n_out) > n_out / 2);
    }
    /* within OpenCL's 48 KiB of local memory (emulated): the default tiles halved until they
     * fit, the backward's streamed tiles in one buffer at heads of 128 (the tensor cores ran:
     * other bits than the FMA kernels'); where 16 x 16 does not (the forward at heads of 256)
     * and past heads of 128 (the backward), the FMA kernels' bits */
    if (emulate) {
        size_t saved_local = f->local_mem;
        f->local_mem = 48 * 1024;
        f->stage_mem = 0;
        ctx->gemm_precision = HD_PRECISION_FP32X3;
        free(check_tc_attention(ctx, &cases[3], NULL, 4e-5 * 2.0, 4500));
        float *tc_one = check_tc_attention_backward(ctx, &cases[3], NULL, 2e-4 * 2.0, 4501);
        f->deterministic = false;
        free(check_tc_attention_backward(ctx, &cases[3], NULL, 2e-4 * 2.0, 4501));
        f->deterministic = true;
        ctx->gemm_precision = HD_PRECISION_FP32;
        float *fma_one = check_tc_attention_backward(ctx, &cases[3], "FMA=1", 2e-4 * 2.0, 4501);
        size_t n_one = cases[3].tokens * cases[3].heads * cases[3].head_dim;
        assert_true(bits_differ(fma_one, tc_one, n_one) > n_one / 2);
        ctx->gemm_precision = HD_PRECISION_FP32X3;
        const tc_attention_case *wide = &cases[4];
        size_t n_wide = wide->tokens * wide->heads * wide->head_dim;
        float *tc = check_tc_attention(ctx, wide, NULL, 4e-5 * 2.0, 4502);
        float *tc_dq = check_tc_attention_backward(ctx, wide, NULL, 2e-4 * 2.0, 4503);
        ctx->gemm_precision = HD_PRECISION_FP32;
        float *fma = check_tc_attention(ctx, wide, "FMA=1", 4e-5 * 2.0, 4502);
        float *fma_dq = check_tc_attention_backward(ctx, wide, "FMA=1", 2e-4 * 2.0, 4503);
        assert_int_equal(bits_differ(fma, tc, n_wide), 0);
        assert_int_equal(bits_differ(fma_dq, tc_dq, n_wide), 0);
        f->local_mem = saved_local;
        f->stage_mem = saved_stage_mem;
    }
    f->deterministic = false;
    ctx->gemm_precision = saved;
    assert_false(f->attention_mma_broken);
    tensor_cores_end(f, emulate);
}

/* The fused backend's state with the FMA kernel's cp.async copies on: the real ones where the
 * device has them (NVIDIA compute capability 8.0 and later), else their emulation (*emulating
 * says which, for cp_async_end). */
static hd_fused *cp_async_begin(hd_context *ctx, bool *emulating)
{
    void *fs;
    fused_impl(ctx, &fs);
    hd_fused *f = fs;
    *emulating = !f->mma;
    if (*emulating)
        f->mma = f->mma_emulated = true;
    return f;
}

static void cp_async_end(hd_fused *f, bool emulating)
{
    if (emulating)
        f->mma = f->mma_emulated = false;
}

/* The FMA kernel with its register-staged operands loaded two stages ahead (LEAD=2), with and
 * without cp.async (emulated where NVIDIA's is not): every transpose, stage counts odd and
 * even, one stage, one depth, a partial last stage; unaligned rows (scalar loads and 4-byte
 * copies) too, and LoRA's second product through the same registers; the tuner's and the
 * defaults' LEAD tiles (128 x 128, 16 x 8, 8 and 16 deep), which
 * test_gemm_tiles_every_variant_and_transpose leaves to this test, without copies on an even
 * and an odd count of stages. */
static void test_gemm_fma_lead_variants_match_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = cp_async_begin(ctx, &emulate);
    static const char *const variants[] = {"BM=64 BN=64 BK=8 RM=4 RN=4 LEAD=2",
                                           "BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=3 LEAD=2"};
    /* stages of 8 deep (the first variant): 1, 2, 3, 13; of 16: 9, 2, 4, 1 */
    static const size_t ks[] = {1, 16, 24, 100, 131, 32, 64, 4};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++)
        for (int tr = 0; tr < 4; tr++) {
            size_t i = 4 * v + (size_t)tr;
            bool odd = i % 3 == 2; /* unaligned rows: scalar loads, 4-byte copies */
            gemm_case gc = {4 * (9 + 3 * i) + odd, 4 * (5 + 2 * i) + odd, ks[i % 8],
                            tr % 2 ? 1.0f : -0.5f, tr / 2 ? 0.25f : 0.0f, i % 5 == 0,
                            tr % 2 == 1, tr / 2 == 1};
            check_gemm_in(ctx, &gc, variants[v], HD_PRECISION_FP32, 3400 + i);
        }
    static const char lead_tile[] = "BM=128 BN=128 BK=8 RM=16 RN=8 LEAD=2";
    check_gemm_in(ctx, &(gemm_case){132, 136, 32, 1.0f, 0.5f, false, false, true}, lead_tile,
                  HD_PRECISION_FP32, 3420);
    check_gemm_in(ctx, &(gemm_case){129, 260, 40, -1.0f, 0.0f, true, false, true}, lead_tile,
                  HD_PRECISION_FP32, 3421);
    /* the defaults' 16-deep LEAD tile: stages odd and even in count, the last one partial,
     * scalar rows */
    static const char deep_tile[] = "BM=128 BN=128 BK=16 RM=16 RN=8 LEAD=2";
    check_gemm_in(ctx, &(gemm_case){132, 136, 80, 1.0f, 0.5f, false, false, true}, deep_tile,
                  HD_PRECISION_FP32, 3422);
    check_gemm_in(ctx, &(gemm_case){129, 260, 40, -1.0f, 0.0f, true, false, false}, deep_tile,
                  HD_PRECISION_FP32, 3423);
    check_gemm_in(ctx, &(gemm_case){131, 68, 23, 0.5f, 0.25f, false, true, true}, deep_tile,
                  HD_PRECISION_FP32, 3424);
    check_lora(ctx, 37, 96, 84, 8, variants[1], 3440);
    cp_async_end(f, emulate);
}

/* The FMA kernel's cp.async variants (fp32; compute capability 8.0 and later, emulated
 * elsewhere like the tensor-core kernels): each in one transpose combination, in turn the one
 * that copies both operands, B, A and neither, so that every combination runs with several
 * variants (a build each: every variant in every combination cost CI minutes); the first four
 * on sizes whose rows are 16-byte aligned (multiples of 4: a partial stage, k = 4, a deep k
 * past its last stage, edge tiles), the next four on sizes whose rows are not (the copies then
 * take 4 bytes each), and so on; with alpha, beta and a NaN C that beta = 0 ignores; LoRA's
 * tiles too. */
static void test_gemm_fma_async_variants_match_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = cp_async_begin(ctx, &emulate);
    hd_shape shape = {.dim = {700, 450, 1100}};
    const char *list[48];
    size_t count = hd__fused_tile_variants(f, &shape, HD_PRECISION_FP32, list, 46);
    size_t tested = 0;
    static const size_t ks[] = {100, 4, 1060, 37};
    static const int turns[] = {1, 0, 3, 2}; /* tn copies both, nn B, tt A, nt neither */
    for (size_t i = 0; i < count; i++) {
        if (strstr(list[i], "ASYNC=") == NULL || strstr(list[i], "REG=") != NULL)
            continue;
        int tr = turns[tested % 4];
        bool odd = (tested / 4) % 2 == 1; /* unaligned rows: 4-byte copies */
        gemm_case gc = {4 * (33 + i) + odd,
                        4 * (17 + 2 * (size_t)tr) + odd,
                        ks[(i + (size_t)tr) % 4],
                        tr % 2 ? 1.0f : -0.5f,
                        tr / 2 ? 0.25f : 0.0f,
                        tr == 0,
                        tr % 2 == 1,
                        tr / 2 == 1};
        check_gemm_in(ctx, &gc, list[i], HD_PRECISION_FP32, 3100 + 4 * i + (size_t)tr);
        tested++;
    }
    assert_true(tested >= 8);
    /* LoRA's tiles: the low-rank product's stages through the same copies */
    check_lora(ctx, 37, 96, 84, 8, "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3", 3190);
    check_lora(ctx, 70, 100, 131, 13, "BM=128 BN=128 BK=8 RM=16 RN=8 ASYNC=3", 3191);
    /* the depth split over four slices with the copies (the default of deep products with
     * few tiles), LoRA's second product in the first slice */
    static const char split_async[] = "BM=64 BN=128 BK=16 RM=8 RN=8 ASYNC=3 SK=4";
    check_gemm_in(ctx, &(gemm_case){68, 260, 1060, 0.5f, 0.25f, false, false, false}, split_async,
                  HD_PRECISION_FP32, 3193);
    check_gemm_in(ctx, &(gemm_case){45, 132, 1031, 1.0f, 0.0f, true, true, false}, split_async,
                  HD_PRECISION_FP32, 3194);
    check_lora(ctx, 45, 1032, 260, 16, split_async, 3192);
    assert_false(f->fma_async_broken);
    cp_async_end(f, emulate);
}

/* The loads' 64-bit offsets, which the tiled GEMM takes where an operand's offsets pass an int
 * (index32_limit lowered to reach them with small matrices): A and B through registers in
 * each stored layout, both copied by cp.async (emulated off NVIDIA), LoRA's second pair. */
static void test_gemm_64bit_offsets_match_reference(void **state)
{
    hd_context *ctx = *state;
    bool emulate;
    hd_fused *f = cp_async_begin(ctx, &emulate);
    f->index32_limit = 0;
    static const char tile[] = "BM=64 BN=64 BK=16 RM=4 RN=4";
    check_gemm_in(ctx, &(gemm_case){70, 37, 45, 1.0f, 0.0f, false, false, false}, tile,
                  HD_PRECISION_FP32, 3500);
    check_gemm_in(ctx, &(gemm_case){33, 68, 100, -0.5f, 0.25f, true, true, true}, tile,
                  HD_PRECISION_FP32, 3501);
    check_gemm_in(ctx, &(gemm_case){68, 132, 37, 1.0f, 0.5f, false, true, false},
                  "BM=64 BN=64 BK=16 RM=4 RN=4 ASYNC=3", HD_PRECISION_FP32, 3502);
    check_lora(ctx, 37, 96, 84, 8, tile, 3503);
    f->index32_limit = INT_MAX;
    assert_false(f->fma_async_broken);
    cp_async_end(f, emulate);
}

static void test_lora_few_tokens_matches_reference(void **state)
{
    for (size_t i = 0; i < hd_test_lora_shape_count; i++) {
        const hd_test_lora_shape *s = &hd_test_lora_shapes[i];
        if (s->tokens <= 16)
            check_lora(*state, s->tokens, s->in, s->out, s->rank, NULL, 3000 + i);
    }
    static const hd_test_lora_shape extra[] = {
        {1, 1, 1, 0},    {1, 64, 36, 0},   {1, 37, 12, 1},  {1, 129, 260, 7},
        {16, 61, 40, 64}, {16, 33, 5, 13}, {1, 300, 64, 64}, {2, 1, 3, 2},
        /* several rows of x staged in chunks of depths, the last one partial */
        {5, 2999, 36, 16}, {16, 1301, 20, 3}, {2, 4099, 9, 8},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        check_lora(*state, extra[i].tokens, extra[i].in, extra[i].out, extra[i].rank, NULL,
                   3100 + i);
}

static void test_lora_every_variant(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_shape shape = {.dim = {1, 100, 68, 8}};
    const char *list[48];
    size_t count = impl->variants(fs, HD_OP_LORA, &shape, HD_PART_WHOLE, list, 46);
    assert_true(count > 0);
    list[count++] = "VEC=1 TN=2 KS=32 UNROLL=1";
    list[count++] = "TN=2 KS=32 SPLIT=3";
    /* one shape per variant (one build each), alternating one token at rank 8 and three at 64 */
    for (size_t i = 0; i < count; i++) {
        if (i % 2)
            check_lora(ctx, 3, 45, 20, 64, list[i], 3200 + i);
        else
            check_lora(ctx, 1, 100, 68, 8, list[i], 3200 + i);
    }
    /* four k-slices: rows of B past the 8 * KS kept in registers come from the loop */
    check_lora(ctx, 2, 70, 260, 64, "TN=64 KS=4 UNROLL=2", 3290);
    /* strips of 128 vectors by 2 k-slices, x*A in the pass: rank 64 (two work-items to each
     * column of A), rank 3, and scalar columns */
    check_lora(ctx, 5, 301, 1032, 64, "TN=128 KS=2 UNROLL=8", 3291);
    check_lora(ctx, 16, 77, 1030, 3, "TN=128 KS=2 UNROLL=8", 3292);
    /* past the strip kernels' limits the tiled engine takes over; past 32-bit sizes, nobody */
    hd_shape big_rank = {.dim = {1, 8, 8, 65}}, many = {.dim = {17, 8, 8, 4}};
    hd_shape huge = {.dim = {17, (size_t)INT_MAX + 1, 8, 4}};
    assert_true(impl->supports(fs, HD_OP_LORA, &big_rank, HD_PART_WHOLE));
    assert_true(impl->supports(fs, HD_OP_LORA, &many, HD_PART_WHOLE));
    assert_false(impl->supports(fs, HD_OP_LORA, &huge, HD_PART_WHOLE));
}

/* The split path (x*A in its own launch, then the W pass) with split counts that divide the
 * rows of A unevenly, exceed them, or leave one part; the default choice at large rank. */
static void test_lora_split_matches_reference(void **state)
{
    static const struct {
        size_t tokens, in, out, rank;
        const char *variant;
    } cases[] = {
        {1, 300, 64, 64, "SPLIT=1"},  {1, 300, 64, 64, "SPLIT=7"},  {1, 45, 20, 33, "SPLIT=64"},
        {3, 257, 36, 64, "SPLIT=5"},  {16, 61, 40, 64, "SPLIT=2"},  {1, 37, 13, 5, "SPLIT=4"},
        {1, 300, 64, 64, NULL},       {3, 600, 20, 40, NULL},       {1, 1, 1, 1, "SPLIT=64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_lora(*state, cases[i].tokens, cases[i].in, cases[i].out, cases[i].rank,
                   cases[i].variant, 3500 + i);
}

/* LoRA with k split over KG groups: each group's partial x*A over its rows of A times B, so
 * ranks 0, 1, 13 and 64, one and 16 tokens, more groups than rows, and with the split x*A
 * launch (the low-rank term then added by group 0 only); the default KG on this device. */
static void test_lora_k_groups_match_reference(void **state)
{
    static const struct {
        size_t tokens, in, out, rank;
        const char *variant;
    } cases[] = {
        {1, 1100, 64, 8, "KG=3"},
        {1, 129, 260, 7, "KG=4"},
        {16, 61, 40, 64, "KG=3"},
        {3, 33, 5, 13, "KG=3"},
        {1, 37, 12, 1, "KG=64"},
        {1, 64, 36, 0, "KG=3"},
        {3, 257, 36, 64, "SPLIT=5 KG=3"},
        {1, 300, 64, 64, "SPLIT=7 KG=4"},
        {1, 1100, 64, 8, NULL},
        {1, 4100, 20, 8, NULL},
        /* several tokens, one group per strip: x staged in several chunks, W's loads running
         * a round ahead across them */
        {13, 1031, 36, 13, "KG=1"},
        {5, 2053, 20, 64, "KG=1 UNROLL=3"},
        {9, 3001, 12, 1, "KG=1"},
        {2, 1500, 8, 0, "KG=1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_lora(*state, cases[i].tokens, cases[i].in, cases[i].out, cases[i].rank,
                   cases[i].variant, 3700 + i);
}

/* Two split calls queued back to back share the partials buffer: the second's x*A launch
 * must not overwrite what the first's W pass reads. */
static void test_lora_split_back_to_back(void **state)
{
    hd_context *ctx = *state;
    const size_t in = 300, out = 64, rank = 64;
    lora_data d1 = lora_data_make(1, in, out, rank, 3600);
    lora_data d2 = lora_data_make(1, in, out, rank, 3601);
    hd_tensor *w = hd_test_tensor(ctx, in, out, d1.w), *a = hd_test_tensor(ctx, in, rank, d1.a);
    hd_tensor *b = hd_test_tensor(ctx, rank, out, d1.b);
    hd_tensor *x1 = hd_test_tensor(ctx, 1, in, d1.x), *x2 = hd_test_tensor(ctx, 1, in, d2.x);
    hd_tensor *y1 = hd_test_tensor(ctx, 1, out, NULL), *y2 = hd_test_tensor(ctx, 1, out, NULL);
    expect_fused(ctx, hd_lora_forward(ctx, x1, w, a, b, d1.scale, y1), "split lora 1");
    expect_fused(ctx, hd_lora_forward(ctx, x2, w, a, b, d1.scale, y2), "split lora 2");
    /* the second call's reference: its own x with the first call's weights */
    hd_ref_lora(1, in, out, rank, d2.x, d1.w, d1.a, d1.b, d1.scale, d2.want, d2.bound);
    float *got1 = hd_test_read(y1), *got2 = hd_test_read(y2);
    hd_test_expect_gemm_close("split lora 1", got1, d1.want, d1.bound, out, in + rank,
                              GEMM_FACTOR);
    hd_test_expect_gemm_close("split lora 2", got2, d2.want, d2.bound, out, in + rank,
                              GEMM_FACTOR);
    free(got1);
    free(got2);
    hd_tensor_destroy(w);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(x1);
    hd_tensor_destroy(x2);
    hd_tensor_destroy(y1);
    hd_tensor_destroy(y2);
    lora_data_free(&d1);
    lora_data_free(&d2);
}

/* The epilogue y += scale * (x*A) * B of the hybrid plan, called directly. */
static void check_lora_update(hd_context *ctx, size_t tokens, size_t in, size_t out,
                              size_t rank, const char *variant, uint64_t salt)
{
    lora_data d = lora_data_make(tokens, in, out, rank, salt);
    hd_rng rng = hd_test_rng(salt + 1);
    float *y0 = hd_test_floats(tokens * out);
    hd_test_fill(&rng, y0, tokens * out, -1, 1);
    /* want = y0 + scale * (x*A)*B: the reference with W = 0 plus y0 */
    float *zero = calloc(in * out + 1, sizeof *zero);
    assert_non_null(zero);
    hd_ref_lora(tokens, in, out, rank, d.x, zero, d.a, d.b, d.scale, d.want, d.bound);
    for (size_t i = 0; i < tokens * out; i++) {
        d.want[i] += y0[i];
        d.bound[i] += fabs(y0[i]);
    }
    hd_tensor *x = hd_test_tensor(ctx, tokens, in, d.x), *a = hd_test_tensor(ctx, in, rank, d.a);
    hd_tensor *b = hd_test_tensor(ctx, rank, out, d.b), *y = hd_test_tensor(ctx, tokens, out, y0);
    to_device(x);
    to_device(a);
    to_device(b);
    to_device(y);
    hd_lora_args args = {.x = x, .a = a, .b = b, .scale = d.scale, .y = y, .tokens = tokens,
                         .in = in, .out = out, .rank = rank, .variant = variant};
    char what[128];
    snprintf(what, sizeof what, "lora update T=%zu %zux%zu r=%zu [%s]", tokens, in, out, rank,
             variant ? variant : "default");
    hd_status s = hd__fused_lora_update(ctx->backend_state[HD_BACKEND_FUSED], ctx, &args);
    if (!beyond_device_limit(ctx, s, what)) {
        if (s != HD_OK)
            fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
        hd__tensor_written(y, HD_PLACE_DEVICE);
        float *got = hd_test_read(y);
        hd_test_expect_gemm_close(what, got, d.want, d.bound, tokens * out, in + rank + 1,
                                  GEMM_FACTOR);
        free(got);
    }
    free(y0);
    free(zero);
    hd_tensor_destroy(x);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(y);
    lora_data_free(&d);
}

static void test_lora_update_adds_low_rank_term(void **state)
{
    hd_context *ctx = *state;
    static const hd_test_lora_shape shapes[] = {
        {37, 29, 31, 5}, {100, 64, 128, 64}, {1, 1, 1, 1}, {19, 40, 8, 1}, {64, 17, 260, 13},
        {5, 6, 7, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_lora_update(ctx, shapes[i].tokens, shapes[i].in, shapes[i].out, shapes[i].rank,
                          NULL, 3300 + i);
    hd_shape shape = {.dim = {100, 64, 128, 8}};
    const char *list[16];
    size_t count = hd__fused_lora_update_variants(&shape, list, 15);
    assert_true(count > 0);
    list[count++] = "WG=64 MR=1 VEC=1";
    for (size_t i = 0; i < count; i++)
        check_lora_update(ctx, 33, 20, 36, 9, list[i], 3400 + i);
}

static void test_lora_update_rejects_bad_input(void **state)
{
    hd_context *ctx = *state;
    hd_shape big = {.dim = {4, 8, 8, 65}};
    assert_false(hd__fused_lora_update_supports(&big));
    hd_tensor *x = hd_test_tensor(ctx, 4, 8, NULL), *a = hd_test_tensor(ctx, 8, 65, NULL);
    hd_tensor *b = hd_test_tensor(ctx, 65, 8, NULL), *y = hd_test_tensor(ctx, 4, 8, NULL);
    to_device(x);
    to_device(a);
    to_device(b);
    to_device(y);
    hd_lora_args args = {.x = x, .a = a, .b = b, .scale = 1, .y = y, .tokens = 4, .in = 8,
                         .out = 8, .rank = 65};
    void *fs = ctx->backend_state[HD_BACKEND_FUSED];
    assert_int_equal(hd__fused_lora_update(fs, ctx, &args), HD_ERR_UNSUPPORTED);
    args.rank = 4;
    args.variant = "WG=32";
    assert_int_equal(hd__fused_lora_update(fs, ctx, &args), HD_ERR_INVALID_ARGUMENT);
    args.variant = "WG=64 MR=3";
    assert_int_equal(hd__fused_lora_update(fs, ctx, &args), HD_ERR_INVALID_ARGUMENT);
    args.variant = "MR=4 TN=8";
    assert_int_equal(hd__fused_lora_update(fs, ctx, &args), HD_ERR_INVALID_ARGUMENT);
    hd_tensor_destroy(x);
    hd_tensor_destroy(a);
    hd_tensor_destroy(b);
    hd_tensor_destroy(y);
}

/* ---- chains, migration, warmup ---- */

/* softmax and RMS norm queued on the device, then layer norm on the CPU, then a read: the CPU
 * op must wait for the device and take its result. */
static void test_chain_device_then_cpu_then_read(void **state)
{
    hd_context *ctx = *state;
    const size_t rows = 7, cols = 301;
    hd_rng rng = hd_test_rng(4000);
    float *x = hd_test_floats(rows * cols), *g = hd_test_floats(cols), *b = hd_test_floats(cols);
    hd_test_fill(&rng, x, rows * cols, -4, 4);
    hd_test_fill(&rng, g, cols, 0.5f, 1.5f);
    hd_test_fill(&rng, b, cols, -1, 1);
    hd_tensor *tx = hd_test_tensor(ctx, rows, cols, x), *tg = hd_test_tensor(ctx, 1, cols, g);
    hd_tensor *tb = hd_test_tensor(ctx, 1, cols, b), *t1 = hd_test_tensor(ctx, rows, cols, NULL);
    expect_fused(ctx, hd_softmax(ctx, tx, t1), "chain softmax");
    expect_fused(ctx, hd_rms_norm(ctx, t1, tg, NORM_EPS, t1), "chain rms norm");
    assert_true(t1->state->device_valid && !t1->state->host_valid);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LAYER_NORM, HD_BACKEND_CPU), HD_OK);
    hd_status s = hd_layer_norm(ctx, t1, tg, tb, NORM_EPS, t1);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LAYER_NORM, HD_BACKEND_FUSED), HD_OK);
    assert_int_equal(s, HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);

    double *d1 = hd_test_doubles(rows * cols), *d2 = hd_test_doubles(rows * cols);
    float *f = hd_test_floats(rows * cols);
    hd_ref_softmax(rows, cols, x, d1);
    for (size_t i = 0; i < rows * cols; i++)
        f[i] = (float)d1[i];
    hd_ref_rms_norm(rows, cols, f, g, NORM_EPS, d2);
    for (size_t i = 0; i < rows * cols; i++)
        f[i] = (float)d2[i];
    hd_ref_layer_norm(rows, cols, f, g, b, NORM_EPS, d1);
    float *got = hd_test_read(t1);
    hd_test_expect_close("device, device, cpu chain", got, d1, rows * cols, 1e-4, 1e-4);
    free(got);
    free(f);
    free(d1);
    free(d2);
    free(x);
    free(g);
    free(b);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tg);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(t1);
}

static void test_warmup_builds_defaults(void **state)
{
    hd_context *ctx = *state;
    void *fs;
    const hd_backend_impl *impl = fused_impl(ctx, &fs);
    hd_status s = impl->warmup(fs, ctx);
    if (s != HD_OK)
        fail_msg("warmup: %s (%s)", hd_status_name(s), hd_context_last_error(ctx));
    /* hd_context_warmup() over every backend is the context and CLBlast suites' subject: on
     * PoCL, CLBlast's kernels alone take most of a minute to build. */
}

/* The LM head's chunks of logits: as few as HD_FUSED_LOGITS_BYTES of logits allow, of equal rows,
 * whole tiles of 128 rows where that fits; every row in one chunk or another. */
static void test_lm_head_chunks_are_few_even_and_whole_tiles(void **state)
{
    const size_t budget = HD_FUSED_LOGITS_BYTES;
    /* Llama 3's head at 2048 tokens: two chunks of 1024 rows */
    assert_int_equal(hd__fused_lm_head_chunk_rows(2048, 128256, budget), 1024);
    /* logits within the budget: one chunk */
    assert_int_equal(hd__fused_lm_head_chunk_rows(1046, 128256, budget), 1046);
    assert_int_equal(hd__fused_lm_head_chunk_rows(1, 32000, budget), 1);
    /* a row past the budget: a row at a time */
    assert_int_equal(hd__fused_lm_head_chunk_rows(3, budget, budget), 1);
    hd_rng rng = hd_test_rng(41);
    for (int i = 0; i < 2000; i++) {
        size_t rows = 1 + (size_t)hd_test_uniform(&rng, 0.0f, 20000.0f);
        size_t vocab = 1 + (size_t)hd_test_uniform(&rng, 0.0f, 300000.0f);
        size_t most = budget / sizeof(float) / vocab,
               chunk = hd__fused_lm_head_chunk_rows(rows, vocab, budget);
        most = most > 0 ? most : 1;
        size_t chunks = (rows + chunk - 1) / chunk, fewest = (rows + most - 1) / most;
        if (chunk < 1 || chunk > rows || chunk > most || chunks != fewest)
            fail_msg("%zu rows of %zu words: chunks of %zu rows (at most %zu, %zu chunks, not %zu)",
                     rows, vocab, chunk, most, chunks, fewest);
        /* whole tiles where they fit within the budget, else equal rows */
        size_t even = (rows + fewest - 1) / fewest, whole = (even + 127) / 128 * 128;
        if (chunks > 1 && chunk != (whole <= most ? whole : even))
            fail_msg("%zu rows of %zu words: chunks of %zu rows", rows, vocab, chunk);
    }
    (void)state;
}

static void test_probe_without_device_is_unavailable(void **state)
{
    hd_context *cpu = hd_test_context(true);
    void *fs = (void *)1;
    const hd_backend_setup no_device = {.device = NULL};
    assert_int_equal(hd__backend_fused.probe(cpu, &no_device, &fs), HD_ERR_BACKEND_UNAVAILABLE);
    assert_null(fs);
    assert_false(hd_context_has_backend(cpu, HD_BACKEND_FUSED));
    hd_context_destroy(cpu);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_matches_reference),
        cmocka_unit_test(test_layer_norm_matches_reference),
        cmocka_unit_test(test_rms_norm_matches_reference),
        cmocka_unit_test(test_row_ops_random_shapes_match_reference),
        cmocka_unit_test(test_row_ops_in_place),
        cmocka_unit_test(test_softmax_nan_row_is_nan_and_others_finite),
        cmocka_unit_test(test_softmax_masked_rows_every_kernel),
        cmocka_unit_test(test_norms_extreme_magnitudes_match_reference),
        cmocka_unit_test(test_softmax_backward_both_kernels_match_reference),
        cmocka_unit_test(test_row_ops_every_variant),
        cmocka_unit_test(test_variant_malformed_is_rejected),
        cmocka_unit_test(test_gemm_few_rows_matches_reference),
        cmocka_unit_test(test_gemm_alpha_beta_and_nan_c),
        cmocka_unit_test(test_gemm_every_variant),
        cmocka_unit_test(test_gemm_tiles_every_variant_and_transpose),
        cmocka_unit_test(test_gemm_fma_lead_variants_match_reference),
        cmocka_unit_test(test_gemm_fma_async_variants_match_reference),
        cmocka_unit_test(test_gemm_64bit_offsets_match_reference),
        cmocka_unit_test(test_gemm_tiles_match_reference),
        cmocka_unit_test(test_gemm_random_shapes_match_reference),
        cmocka_unit_test(test_gemm_tensor_core_kernels_match_reference),
        cmocka_unit_test(test_gemm_stages_as_a_local_argument),
        cmocka_unit_test(test_gemm_tma_kernel_matches_reference),
        cmocka_unit_test(test_gemm_batched_tiles_match_reference),
        cmocka_unit_test(test_gemm_outside_design_is_declined),
        cmocka_unit_test(test_gemm_k_groups_match_reference),
        cmocka_unit_test(test_gemv_default_k_groups),
        cmocka_unit_test(test_gemm_tile_defaults),
        cmocka_unit_test(test_tile_estimate_takes_the_measured_rate),
        cmocka_unit_test(test_lora_few_tokens_matches_reference),
        cmocka_unit_test(test_lora_tiles_match_reference),
        cmocka_unit_test(test_lora_tf32_a_in_registers_matches_reference),
        cmocka_unit_test(test_attention_on_tensor_cores),
        cmocka_unit_test(test_lora_every_variant),
        cmocka_unit_test(test_lora_split_matches_reference),
        cmocka_unit_test(test_lora_split_back_to_back),
        cmocka_unit_test(test_lora_k_groups_match_reference),
        cmocka_unit_test(test_lora_update_adds_low_rank_term),
        cmocka_unit_test(test_lora_update_rejects_bad_input),
        cmocka_unit_test(test_chain_device_then_cpu_then_read),
        cmocka_unit_test(test_warmup_builds_defaults),
        cmocka_unit_test(test_lm_head_chunks_are_few_even_and_whole_tiles),
        cmocka_unit_test(test_probe_without_device_is_unavailable),
    };
    /* The program-binary cache is the OpenCL runtime suite's subject. Here it would only cost
     * time: asking PoCL for a program's binary compiles every kernel of it for any work-group
     * size, on top of the compile for the size each launch uses. */
    setenv("HD_PROGRAM_CACHE", "0", 1);
    hd_test_filter_from_env();
    hd_test_seed();
    return cmocka_run_group_tests(tests, setup, teardown);
}
