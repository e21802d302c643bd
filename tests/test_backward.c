/*
 * The backward passes: hd_softmax_backward, hd_layer_norm_backward, hd_rms_norm_backward and
 * hd_lora_backward against the float64 reference (tests/testlib.c) on every shape of the
 * shared lists and on shapes drawn at random from the whole class, and against central finite
 * differences of the forward in double on small shapes (odd, prime, one row, rank 1, rank 0);
 * overwrite and accumulate; optional outputs; in place; empty problems; and every error path,
 * with the outputs untouched after an error.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference.h"
#include "tests/testlib.h"

#define EPS         1e-5f
#define ROW_ATOL    2e-5
#define ROW_RTOL    2e-4
#define FD_STEP     1e-6
#define FD_ATOL     1e-4 /* the op in float against the differences of the forward in double */
#define FD_RTOL     1e-3
#define REF_FD_ATOL 1e-7 /* the reference against the differences: both in double */

/* Small shapes for the finite differences: one element, one row, one column, odd, prime. */
static const hd_test_matrix_shape fd_row_shapes[] = {{1, 1}, {1, 7},  {7, 1},
                                                     {3, 5}, {2, 13}, {5, 31}};
static const hd_test_lora_shape fd_lora_shapes[] = {
    {1, 1, 1, 1}, {1, 13, 7, 3}, {3, 11, 5, 1}, {5, 7, 13, 2}, {7, 13, 11, 0}, {2, 5, 3, 4},
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The backend the row ops are expected to run on, and how much their tolerance grows there
 * (the fused kernels sum in float where the CPU sums in double). */
static hd_backend expected = HD_BACKEND_CPU;
static double row_tolerance = 1.0;
/* The norms' eps in run_row_backward and row_reference (test_norm_backward_any_magnitude sets
 * 0 for a while). */
static float row_eps = EPS;
/* The backend LoRA's backward is expected to run on, and the layout its weights are stored in
 * (hd_lora_backward_ex): the LoRA cases build the default layout's data and store W, A, B, dA
 * and dB transposed where the layout says, so that one reference serves every layout. */
static hd_backend lora_expected = HD_BACKEND_CPU;
static unsigned lora_layout = HD_LORA_LAYOUT_DEFAULT;

static int setup(void **state)
{
    *state = hd_test_context(true);
    return 0;
}

static int teardown(void **state)
{
    hd_context_destroy(*state);
    expected = HD_BACKEND_CPU;
    row_tolerance = 1.0;
    lora_expected = HD_BACKEND_CPU;
    lora_layout = HD_LORA_LAYOUT_DEFAULT;
    return 0;
}

/* A context of this machine with the row ops' backward forced onto the fused kernels (PoCL in
 * CI); the case is skipped without them. */
static int setup_fused(void **state)
{
    hd_context *ctx = hd_test_context(false);
    *state = ctx;
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        return 0;
    const hd_op ops[] = {HD_OP_SOFTMAX_BACKWARD, HD_OP_LAYER_NORM_BACKWARD,
                         HD_OP_RMS_NORM_BACKWARD};
    for (int i = 0; i < 3; i++)
        assert_int_equal(hd_context_set_backend(ctx, ops[i], HD_BACKEND_FUSED), HD_OK);
    expected = HD_BACKEND_FUSED;
    row_tolerance = 4.0;
    return 0;
}

/* A context of this machine with LoRA's backward forced onto backend b (PoCL in CI); the
 * case is skipped where b is missing. */
static int setup_lora_on(void **state, hd_backend b)
{
    hd_context *ctx = hd_test_context(false);
    *state = ctx;
    /* without b (CLBlast where the device runs on the CUDA runtime, say) the case runs on the
     * CPU, as expected stays */
    if (!hd_context_has_backend(ctx, b))
        b = HD_BACKEND_CPU;
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_LORA_BACKWARD, b), HD_OK);
    lora_expected = b;
    return 0;
}

static int setup_lora_fused(void **state)
{
    return setup_lora_on(state, HD_BACKEND_FUSED);
}

static int setup_lora_clblast(void **state)
{
    return setup_lora_on(state, HD_BACKEND_CLBLAST);
}

/* Each backend with the weights in PyTorch's layout, and with W and A transposed apart (the
 * fused backend's second launch). */
static int setup_lora_cpu_pytorch(void **state)
{
    setup(state);
    lora_layout = HD_LORA_LAYOUT_PYTORCH;
    return 0;
}

static int setup_lora_fused_pytorch(void **state)
{
    lora_layout = HD_LORA_LAYOUT_PYTORCH;
    return setup_lora_on(state, HD_BACKEND_FUSED);
}

static int setup_lora_fused_w_b(void **state)
{
    lora_layout = HD_LORA_TRANS_W | HD_LORA_TRANS_B;
    return setup_lora_on(state, HD_BACKEND_FUSED);
}

static int setup_lora_clblast_pytorch(void **state)
{
    lora_layout = HD_LORA_LAYOUT_PYTORCH;
    return setup_lora_on(state, HD_BACKEND_CLBLAST);
}

static int setup_lora_cpu_a(void **state)
{
    setup(state);
    lora_layout = HD_LORA_TRANS_A;
    return 0;
}

/* ---- the forwards in double, for the finite differences ---- */

typedef enum row_kind { SOFTMAX, LAYER_NORM, RMS_NORM } row_kind;

/* y of one forward row op on double inputs; gamma (the weight) ignored by softmax. */
static void forward_rows(row_kind kind, size_t rows, size_t cols, const double *x,
                         const double *gamma, double eps, double *y)
{
    for (size_t i = 0; i < rows; i++) {
        const double *xr = x + i * cols;
        double *yr = y + i * cols;
        if (kind == SOFTMAX) {
            double mx = -INFINITY, sum = 0.0;
            for (size_t j = 0; j < cols; j++)
                mx = fmax(mx, xr[j]);
            for (size_t j = 0; j < cols; j++)
                sum += yr[j] = exp(xr[j] - mx);
            for (size_t j = 0; j < cols; j++)
                yr[j] /= sum;
            continue;
        }
        double mean = 0.0, sq = 0.0;
        for (size_t j = 0; j < cols && kind == LAYER_NORM; j++)
            mean += xr[j] / (double)cols;
        for (size_t j = 0; j < cols; j++)
            sq += (xr[j] - mean) * (xr[j] - mean);
        double r = 1.0 / sqrt(sq / (double)cols + eps);
        for (size_t j = 0; j < cols; j++)
            yr[j] = (xr[j] - mean) * r * gamma[j]; /* beta's gradient is sum dy: no need */
    }
}

/* The loss sum(dy * y) of a row op, the value whose gradients the backward computes. */
static double row_loss(row_kind kind, size_t rows, size_t cols, const double *x,
                       const double *gamma, double eps, const double *dy)
{
    double *y = hd_test_doubles(rows * cols), loss = 0.0;
    forward_rows(kind, rows, cols, x, gamma, eps, y);
    for (size_t i = 0; i < rows * cols; i++)
        loss += dy[i] * y[i];
    free(y);
    return loss;
}

/* Central differences of row_loss over each element of p (x or gamma), into grad. */
static void row_differences(row_kind kind, size_t rows, size_t cols, double *x, double *gamma,
                            double eps, const double *dy, double *p, size_t n, double *grad)
{
    for (size_t k = 0; k < n; k++) {
        double keep = p[k];
        p[k] = keep + FD_STEP;
        double up = row_loss(kind, rows, cols, x, gamma, eps, dy);
        p[k] = keep - FD_STEP;
        double down = row_loss(kind, rows, cols, x, gamma, eps, dy);
        p[k] = keep;
        grad[k] = (up - down) / (2.0 * FD_STEP);
    }
}

static double *widen(const float *p, size_t n)
{
    double *d = hd_test_doubles(n);
    for (size_t i = 0; i < n; i++)
        d[i] = p[i];
    return d;
}

/* Both the op (float) and the reference (double) against the differences. */
static void expect_differences(const char *what, const float *got, const double *ref,
                               const double *fd, size_t n)
{
    char name[160];
    snprintf(name, sizeof name, "%s: the reference against finite differences", what);
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i] - fd[i]) > REF_FD_ATOL * (1.0 + fabs(fd[i])))
            fail_msg("%s: element %zu: reference %.12g, differences %.12g", name, i, ref[i], fd[i]);
    snprintf(name, sizeof name, "%s: the op against finite differences", what);
    hd_test_expect_close(name, got, fd, n, FD_ATOL, FD_RTOL);
}

/* ---- row ops: the reference and the differences ---- */

typedef struct row_case {
    size_t rows, cols;
    float *x, *gamma, *dy; /* softmax: x is its output y, from the forward */
    double *xd, *gd, *dyd;
} row_case;

static row_case row_case_make(hd_context *ctx, row_kind kind, size_t rows, size_t cols,
                              uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    row_case c = {.rows = rows, .cols = cols};
    size_t n = rows * cols;
    c.x = hd_test_random(&rng, n, -2.0f, 2.0f);
    c.gamma = hd_test_random(&rng, cols, 0.5f, 1.5f);
    c.dy = hd_test_random(&rng, n, -1.0f, 1.0f);
    if (kind == SOFTMAX) { /* y = softmax(x), through the library's own forward */
        hd_tensor *tx = hd_test_tensor(ctx, rows, cols, c.x);
        assert_int_equal(hd_softmax(ctx, tx, tx), HD_OK);
        float *y = hd_test_read(tx);
        c.xd = widen(c.x, n); /* the forward's input, for the differences */
        memcpy(c.x, y, n * sizeof *y);
        free(y);
        hd_tensor_destroy(tx);
    } else {
        c.xd = widen(c.x, n);
    }
    c.gd = widen(c.gamma, cols);
    c.dyd = widen(c.dy, n);
    return c;
}

static void row_case_free(row_case *c)
{
    free(c->x);
    free(c->gamma);
    free(c->dy);
    free(c->xd);
    free(c->gd);
    free(c->dyd);
}

/* Runs the backward of kind on c (dx in place of dy when in_place); dg and db (layer norm's
 * dbeta) come back when asked for. */
static float *run_row_backward(hd_context *ctx, row_kind kind, const row_case *c, bool in_place,
                               float **dg, float **db)
{
    size_t rows = c->rows, cols = c->cols;
    hd_tensor *tx = hd_test_tensor(ctx, rows, cols, c->x);
    hd_tensor *tg = hd_test_tensor(ctx, 1, cols, c->gamma);
    hd_tensor *tdy = hd_test_tensor(ctx, rows, cols, c->dy);
    hd_tensor *tdx = in_place ? tdy : hd_test_tensor(ctx, rows, cols, NULL);
    hd_tensor *tdg = dg != NULL ? hd_test_tensor(ctx, 1, cols, NULL) : NULL;
    hd_tensor *tdb = db != NULL ? hd_test_tensor(ctx, 1, cols, NULL) : NULL;
    hd_status s = kind == SOFTMAX ? hd_softmax_backward(ctx, tx, tdy, tdx)
                  : kind == RMS_NORM
                      ? hd_rms_norm_backward(ctx, tx, tg, tdy, row_eps, tdx, tdg)
                      : hd_layer_norm_backward(ctx, tx, tg, tdy, row_eps, tdx, tdg, tdb);
    hd_test_expect_ran_on(ctx, s, expected, "row backward");
    float *dx = hd_test_read(tdx);
    if (dg != NULL)
        *dg = hd_test_read(tdg);
    if (db != NULL)
        *db = hd_test_read(tdb);
    hd_test_expect_unchanged("x", tx, c->x);
    hd_test_expect_unchanged("gamma", tg, c->gamma);
    if (!in_place)
        hd_test_expect_unchanged("dy", tdy, c->dy);
    hd_tensor_destroy(tx);
    hd_tensor_destroy(tg);
    hd_tensor_destroy(tdy);
    if (!in_place)
        hd_tensor_destroy(tdx);
    hd_tensor_destroy(tdg);
    hd_tensor_destroy(tdb);
    return dx;
}

static void row_reference(row_kind kind, const row_case *c, double *dx, double *dg, double *db)
{
    if (kind == SOFTMAX)
        hd_ref_softmax_backward(c->rows, c->cols, c->x, c->dy, dx);
    else if (kind == RMS_NORM)
        hd_ref_rms_norm_backward(c->rows, c->cols, c->x, c->gamma, c->dy, row_eps, dx, dg);
    else
        hd_ref_layer_norm_backward(c->rows, c->cols, c->x, c->gamma, c->dy, row_eps, dx, dg, db);
}

/* The backward of kind on c against the float64 reference (and, with differences, the
 * reference against central differences). */
static void check_row_case(hd_context *ctx, row_kind kind, const char *what, const row_case *cp,
                           bool differences)
{
    row_case c = *cp;
    size_t rows = c.rows, cols = c.cols, n = rows * cols;
    bool norm = kind != SOFTMAX;
    float *dg = NULL, *db = NULL;
    float *dx =
        run_row_backward(ctx, kind, &c, false, norm ? &dg : NULL, kind == LAYER_NORM ? &db : NULL);
    double *want = hd_test_doubles(n), *want_g = hd_test_doubles(cols);
    double *want_b = hd_test_doubles(cols);
    row_reference(kind, &c, want, want_g, want_b);
    double atol = ROW_ATOL * row_tolerance, rtol = ROW_RTOL * row_tolerance;
    hd_test_expect_close(what, dx, want, n, atol, rtol);
    if (norm) /* sums over the rows: the error grows with them */
        hd_test_expect_close(what, dg, want_g, cols, atol * (double)rows, rtol);
    if (kind == LAYER_NORM)
        hd_test_expect_close(what, db, want_b, cols, atol * (double)rows, rtol);
    if (differences) {
        double *fd = hd_test_doubles(n > cols ? n : cols);
        row_differences(kind, rows, cols, c.xd, c.gd, EPS, c.dyd, c.xd, n, fd);
        expect_differences(what, dx, want, fd, n);
        if (norm) {
            row_differences(kind, rows, cols, c.xd, c.gd, EPS, c.dyd, c.gd, cols, fd);
            expect_differences(what, dg, want_g, fd, cols);
        }
        free(fd);
    }
    free(dx);
    free(dg);
    free(db);
    free(want);
    free(want_g);
    free(want_b);
}

static const char *const row_kind_names[] = {"softmax_backward", "layer_norm_backward",
                                             "rms_norm_backward"};

static void check_row_backward(hd_context *ctx, row_kind kind, size_t rows, size_t cols,
                               bool differences, uint64_t salt)
{
    char what[160];
    snprintf(what, sizeof what, "%s %zux%zu", row_kind_names[kind], rows, cols);
    row_case c = row_case_make(ctx, kind, rows, cols, salt);
    check_row_case(ctx, kind, what, &c, differences);
    row_case_free(&c);
}

static void check_row_kind(hd_context *ctx, row_kind kind)
{
    if (!hd_context_has_backend(ctx, expected))
        skip();
    for (size_t i = 0; i < COUNT(fd_row_shapes); i++)
        check_row_backward(ctx, kind, fd_row_shapes[i].rows, fd_row_shapes[i].cols, true,
                           100 * kind + i);
    for (size_t i = 0; i < hd_test_row_shape_count; i++)
        check_row_backward(ctx, kind, hd_test_row_shapes[i].rows, hd_test_row_shapes[i].cols, false,
                           100 * kind + 50 + i);
    /* above the threshold where rows and columns are split across threads */
    check_row_backward(ctx, kind, 97, 1031, false, 100 * kind + 99);
    /* rows over several of the fused kernels' chunks of weight-gradient partials */
    check_row_backward(ctx, kind, 601, 67, false, 100 * kind + 98);
    /* rows too long for the fused kernels' single pass (its registers): the three-launch path */
    check_row_backward(ctx, kind, 5, 2053, false, 100 * kind + 97);
    /* shapes drawn from the whole class (testlib), fresh each run */
    hd_rng rng = hd_test_rng(190 + (uint64_t)kind);
    for (int i = 0; i < 3; i++) {
        hd_test_matrix_shape s = hd_test_random_row_shape(&rng);
        check_row_backward(ctx, kind, s.rows, s.cols, false, 100 * kind + 90 + (uint64_t)i);
    }
}

static void test_softmax_backward_matches_reference_and_differences(void **state)
{
    check_row_kind(*state, SOFTMAX);
}

static void test_layer_norm_backward_matches_reference_and_differences(void **state)
{
    check_row_kind(*state, LAYER_NORM);
}

static void test_rms_norm_backward_matches_reference_and_differences(void **state)
{
    check_row_kind(*state, RMS_NORM);
}

/* Layer norm's rows far from zero against their spread (means up to 1e4 with deviations of
 * 0.02, as the forward takes them): the mean is kept as a pair, so the deviations keep their
 * digits. Every fused path: the single pass (with the weight gradients), dx alone, and rows
 * too long for the single pass. */
static void test_layer_norm_backward_far_from_zero(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, expected))
        skip();
    const struct {
        size_t rows, cols;
        double offset, spread;
    } cases[] = {{7, 37, 1e4, 0.01}, {5, 1031, -3e3, 0.05}, {3, 2053, 1e3, 0.02},
                 {64, 256, 250.0, 1.0}, {2, 8, 1e4, 0.01}};
    for (size_t i = 0; i < COUNT(cases); i++) {
        row_case c = row_case_make(ctx, LAYER_NORM, cases[i].rows, cases[i].cols, 600 + i);
        size_t n = c.rows * c.cols;
        for (size_t j = 0; j < n; j++) {
            c.x[j] = (float)(cases[i].offset + cases[i].spread * c.x[j]);
            c.xd[j] = c.x[j];
        }
        char what[160];
        snprintf(what, sizeof what, "layer_norm_backward %zux%zu, mean %g, spread %g", c.rows,
                 c.cols, cases[i].offset, cases[i].spread);
        check_row_case(ctx, LAYER_NORM, what, &c, false);
        float *alone = run_row_backward(ctx, LAYER_NORM, &c, false, NULL, NULL);
        double *want = hd_test_doubles(n), *want_g = hd_test_doubles(c.cols);
        double *want_b = hd_test_doubles(c.cols);
        row_reference(LAYER_NORM, &c, want, want_g, want_b);
        hd_test_expect_close(what, alone, want, n, ROW_ATOL * row_tolerance,
                             ROW_RTOL * row_tolerance);
        free(alone);
        free(want);
        free(want_g);
        free(want_b);
        row_case_free(&c);
    }
}

/* got against want, both divided by want's largest finite magnitude: dx scales as 1/|x|, so
 * rows of 1e30 have gradients of 1e-30 that an absolute tolerance alone would pass as zeros. */
static void expect_close_scaled(const char *what, const float *got, const double *want, size_t n)
{
    double top = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(want[i]))
            top = fmax(top, fabs(want[i]));
    top = top > 0.0 ? top : 1.0;
    float *g = malloc(n * sizeof *g);
    double *w = hd_test_doubles(n);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)((double)got[i] / top);
        w[i] = want[i] / top;
    }
    hd_test_expect_close(what, g, w, n, ROW_ATOL * row_tolerance, ROW_RTOL * row_tolerance);
    free(g);
    free(w);
}

/* The norms' backward at any magnitude, as their forward takes it: rows of +-1e20, random 1e30
 * and 1e37 magnitudes, random 1e-30 with eps = 0, and constant rows of 1e30 with eps > 0 (layer
 * norm's variance is 0 there, so 1/std is 1/sqrt(eps)); and on each side of the fused single
 * pass's checks, which sum unscaled first: random 1e15 (squares in range), with dy of 1e25
 * (g * x out of range), random 1e-8 with eps = 0 (squares above the subnormals). Each with the
 * weight gradients and dx alone, in rows that fit the single pass and rows past it (its three
 * launches). Then one infinite dy: its column's dbeta infinite, dgamma infinite or NaN as the
 * reference says, its row's dx not finite, the other rows as before. */
static void test_norm_backward_any_magnitude(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, expected))
        skip();
    static const struct {
        const char *name;
        double magnitude;
        float eps;
        int pattern;     /* 0 alternating signs, 1 random in +-[0.5, 1], 2 constant */
        double dy_scale; /* dy's random +-1 scaled */
    } kinds[] = {
        {"+-1e20", 1e20, EPS, 0, 1},
        {"random 1e30", 1e30, EPS, 1, 1},
        {"random 1e37", 1e37, EPS, 1, 1},
        {"random 1e-30, eps 0", 1e-30, 0.0f, 1, 1},
        {"constant 1e30", 1e30, EPS, 2, 1},
        {"random 1e15", 1e15, EPS, 1, 1},
        {"random 1e15, dy 1e25", 1e15, EPS, 1, 1e25},
        {"random 1e-8, eps 0", 1e-8, 0.0f, 1, 1},
    };
    static const struct {
        size_t rows, cols;
    } shapes[] = {{5, 67}, {4, 2053}};
    for (int kind = LAYER_NORM; kind <= RMS_NORM; kind++)
        for (size_t k = 0; k < COUNT(kinds); k++)
            for (size_t sh = 0; sh < COUNT(shapes); sh++) {
                row_case c = row_case_make(ctx, (row_kind)kind, shapes[sh].rows, shapes[sh].cols,
                                           700 + 10 * k + sh);
                size_t n = c.rows * c.cols;
                hd_rng rng = hd_test_rng(750 + 10 * k + sh);
                for (size_t j = 0; j < n; j++) {
                    double v = kinds[k].magnitude;
                    if (kinds[k].pattern == 0)
                        v = j % 2 ? -v : v;
                    else if (kinds[k].pattern == 1)
                        v *= (hd_test_uniform(&rng, 0, 1) < 0.5f ? -1.0 : 1.0) *
                             hd_test_uniform(&rng, 0.5f, 1.0f);
                    c.x[j] = (float)v;
                    c.xd[j] = c.x[j];
                    c.dy[j] = (float)(c.dy[j] * kinds[k].dy_scale);
                    c.dyd[j] = c.dy[j];
                }
                row_eps = kinds[k].eps;
                char what[160];
                snprintf(what, sizeof what, "%s %zux%zu, %s rows", row_kind_names[kind], c.rows,
                         c.cols, kinds[k].name);
                float *dg = NULL, *db = NULL;
                float *dx = run_row_backward(ctx, (row_kind)kind, &c, false, &dg,
                                             kind == LAYER_NORM ? &db : NULL);
                float *alone = run_row_backward(ctx, (row_kind)kind, &c, false, NULL, NULL);
                double *want = hd_test_doubles(n), *want_g = hd_test_doubles(c.cols);
                double *want_b = hd_test_doubles(c.cols);
                row_reference((row_kind)kind, &c, want, want_g, want_b);
                expect_close_scaled(what, dx, want, n);
                expect_close_scaled(what, alone, want, n);
                /* the weight gradients sum dy (times xhat, of order 1) over the rows: their
                 * rounding scales with dy, and a sum that cancels is held to it */
                double atol = ROW_ATOL * row_tolerance * (double)c.rows * kinds[k].dy_scale;
                hd_test_expect_close(what, dg, want_g, c.cols, atol, ROW_RTOL * row_tolerance);
                if (kind == LAYER_NORM)
                    hd_test_expect_close(what, db, want_b, c.cols, atol, ROW_RTOL * row_tolerance);
                free(dx);
                free(alone);
                free(dg);
                free(db);
                free(want);
                free(want_g);
                free(want_b);
                row_case_free(&c);
            }
    row_eps = EPS;
    for (int kind = LAYER_NORM; kind <= RMS_NORM; kind++)
        for (size_t sh = 0; sh < COUNT(shapes); sh++) {
            row_case c = row_case_make(ctx, (row_kind)kind, 601, shapes[sh].cols, 790 + sh);
            size_t n = c.rows * c.cols, at = 5 * c.cols + 3;
            c.dy[at] = INFINITY;
            c.dyd[at] = INFINITY;
            char what[160];
            snprintf(what, sizeof what, "%s 601x%zu, dy[5][3] = inf", row_kind_names[kind], c.cols);
            float *dg = NULL, *db = NULL;
            float *dx = run_row_backward(ctx, (row_kind)kind, &c, false, &dg,
                                         kind == LAYER_NORM ? &db : NULL);
            double *want = hd_test_doubles(n), *want_g = hd_test_doubles(c.cols);
            double *want_b = hd_test_doubles(c.cols);
            row_reference((row_kind)kind, &c, want, want_g, want_b);
            assert_true(isinf(want_g[3]) || isnan(want_g[3]));
            double atol = ROW_ATOL * row_tolerance * (double)c.rows;
            hd_test_expect_close(what, dg, want_g, c.cols, atol, ROW_RTOL * row_tolerance);
            if (kind == LAYER_NORM) {
                assert_true(isinf(db[3]) && db[3] > 0);
                hd_test_expect_close(what, db, want_b, c.cols, atol, ROW_RTOL * row_tolerance);
            }
            for (size_t j = 0; j < c.cols; j++)
                if (isfinite(dx[5 * c.cols + j]))
                    fail_msg("%s: dx[5][%zu] = %g is finite", what, j, dx[5 * c.cols + j]);
            hd_test_expect_close(what, dx, want, 5 * c.cols, ROW_ATOL * row_tolerance,
                                 ROW_RTOL * row_tolerance);
            hd_test_expect_close(what, dx + 6 * c.cols, want + 6 * c.cols, n - 6 * c.cols,
                                 ROW_ATOL * row_tolerance, ROW_RTOL * row_tolerance);
            free(dx);
            free(dg);
            free(db);
            free(want);
            free(want_g);
            free(want_b);
            row_case_free(&c);
        }
}

/* dx == dy gives the same bits as a separate dx, with the weight gradients and without them;
 * the weight gradients are optional, and without them dx agrees within the rounding (the
 * single pass that sums them reduces a row in another order). */
static void test_row_backward_in_place_and_without_weight_gradients(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, expected))
        skip();
    for (int kind = SOFTMAX; kind <= RMS_NORM; kind++) {
        row_case c = row_case_make(ctx, (row_kind)kind, 67, 530, 400 + (uint64_t)kind);
        size_t n = c.rows * c.cols;
        float *dg = NULL, *db = NULL;
        bool norm = kind != SOFTMAX;
        float *apart = run_row_backward(ctx, (row_kind)kind, &c, false, norm ? &dg : NULL,
                                        kind == LAYER_NORM ? &db : NULL);
        float *apart_alone = run_row_backward(ctx, (row_kind)kind, &c, false, NULL, NULL);
        float *in_place = run_row_backward(ctx, (row_kind)kind, &c, true, NULL, NULL);
        hd_test_expect_same("in place", in_place, apart_alone, n);
        double *with_grads = malloc(n * sizeof *with_grads);
        assert_non_null(with_grads);
        for (size_t i = 0; i < n; i++)
            with_grads[i] = apart[i];
        hd_test_expect_close("without the weight gradients", apart_alone, with_grads, n,
                             ROW_ATOL * row_tolerance, ROW_RTOL * row_tolerance);
        free(with_grads);
        free(in_place);
        free(apart_alone);
        float *dg_in_place = NULL;
        in_place =
            run_row_backward(ctx, (row_kind)kind, &c, true, norm ? &dg_in_place : NULL, NULL);
        hd_test_expect_same("in place with the weight gradient", in_place, apart, n);
        if (norm)
            hd_test_expect_same("weight gradient in place", dg_in_place, dg, c.cols);
        free(in_place);
        free(dg_in_place);
        free(apart);
        free(dg);
        free(db);
        row_case_free(&c);
    }
}

/* The weight gradients are reduced in a fixed order: two runs give the same bits. */
static void test_norm_backward_weight_gradients_are_deterministic(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, expected))
        skip();
    row_case c = row_case_make(ctx, LAYER_NORM, 301, 517, 500);
    float *g1, *b1, *g2, *b2;
    free(run_row_backward(ctx, LAYER_NORM, &c, false, &g1, &b1));
    free(run_row_backward(ctx, LAYER_NORM, &c, false, &g2, &b2));
    hd_test_expect_same("dgamma run twice", g2, g1, c.cols);
    hd_test_expect_same("dbeta run twice", b2, b1, c.cols);
    free(g1);
    free(b1);
    free(g2);
    free(b2);
    row_case_free(&c);
}

/* Zero rows: the weight gradients are sums over nothing, set to zeros; zero columns: nothing. */
static void test_norm_backward_without_rows_zeroes_the_weight_gradients(void **state)
{
    hd_context *ctx = *state;
    float ones[5] = {1, 1, 1, 1, 1}, zeros[5] = {0};
    hd_tensor *x = hd_test_tensor(ctx, 0, 5, NULL), *dy = hd_test_tensor(ctx, 0, 5, NULL);
    hd_tensor *dx = hd_test_tensor(ctx, 0, 5, NULL), *g = hd_test_tensor(ctx, 1, 5, ones);
    hd_tensor *dg = hd_test_tensor(ctx, 1, 5, ones), *db = hd_test_tensor(ctx, 1, 5, ones);
    assert_int_equal(hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, dg, db), HD_OK);
    hd_test_expect_unchanged("dgamma", dg, zeros);
    hd_test_expect_unchanged("dbeta", db, zeros);
    assert_int_equal(hd_tensor_write(dg, ones), HD_OK);
    assert_int_equal(hd_rms_norm_backward(ctx, x, g, dy, EPS, dx, dg), HD_OK);
    hd_test_expect_unchanged("dweight", dg, zeros);
    assert_int_equal(hd_softmax_backward(ctx, x, dy, dy), HD_OK);
    hd_tensor *e[] = {x, dy, dx, g, dg, db};
    for (size_t i = 0; i < COUNT(e); i++)
        hd_tensor_destroy(e[i]);
}

/* ---- LoRA ---- */

typedef struct lora_case {
    size_t t, in, out, r;
    float scale;
    float *x, *w, *a, *b, *dy;
} lora_case;

static lora_case lora_case_make(size_t t, size_t in, size_t out, size_t r, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    lora_case c = {t, in, out, r, 0.75f, NULL, NULL, NULL, NULL, NULL};
    c.x = hd_test_random(&rng, t * in, -1, 1);
    c.w = hd_test_random(&rng, in * out, -1, 1);
    c.a = hd_test_random(&rng, in * r, -1, 1);
    c.b = hd_test_random(&rng, r * out, -1, 1);
    c.dy = hd_test_random(&rng, t * out, -1, 1);
    return c;
}

static void lora_case_free(lora_case *c)
{
    free(c->x);
    free(c->w);
    free(c->a);
    free(c->b);
    free(c->dy);
}

/* The gradients the op computes, each added to start (NULL: zeros) when accumulating. */
typedef struct lora_grads {
    float *dx, *da, *db;
} lora_grads;

static void lora_grads_free(lora_grads *g)
{
    free(g->dx);
    free(g->da);
    free(g->db);
}

/* p (rows x cols; NULL: zeros) as a tensor stored in the layout of the LoRA cases: transposed
 * when flag is in it. *held gets what the tensor holds, for the check that it is unchanged. */
static hd_tensor *weight_tensor(hd_context *ctx, size_t rows, size_t cols, const float *p,
                                unsigned flag, float **held)
{
    bool t = (lora_layout & flag) != 0;
    *held = hd_test_floats(rows * cols);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            (*held)[t ? j * rows + i : i * cols + j] = p != NULL ? p[i * cols + j] : 0.0f;
    return hd_test_tensor(ctx, t ? cols : rows, t ? rows : cols, *held);
}

/* A weight gradient read back into the default layout (rows x cols). */
static float *weight_read(const hd_tensor *g, size_t rows, size_t cols, unsigned flag)
{
    float *stored = hd_test_read(g);
    if (!(lora_layout & flag))
        return stored;
    float *back = hd_test_floats(rows * cols);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            back[i * cols + j] = stored[j * rows + i];
    free(stored);
    return back;
}

static lora_grads run_lora_backward(hd_context *ctx, const lora_case *c, bool want_dx,
                                    bool accumulate, const lora_grads *start)
{
    float *held[5];
    hd_tensor *x = hd_test_tensor(ctx, c->t, c->in, c->x);
    hd_tensor *w = weight_tensor(ctx, c->in, c->out, c->w, HD_LORA_TRANS_W, &held[0]);
    hd_tensor *a = weight_tensor(ctx, c->in, c->r, c->a, HD_LORA_TRANS_A, &held[1]);
    hd_tensor *b = weight_tensor(ctx, c->r, c->out, c->b, HD_LORA_TRANS_B, &held[2]);
    hd_tensor *dy = hd_test_tensor(ctx, c->t, c->out, c->dy);
    hd_tensor *dx = want_dx ? hd_test_tensor(ctx, c->t, c->in, start ? start->dx : NULL) : NULL;
    hd_tensor *da =
        weight_tensor(ctx, c->in, c->r, start ? start->da : NULL, HD_LORA_TRANS_A, &held[3]);
    hd_tensor *db =
        weight_tensor(ctx, c->r, c->out, start ? start->db : NULL, HD_LORA_TRANS_B, &held[4]);
    hd_status s =
        hd_lora_backward_ex(ctx, x, w, a, b, c->scale, lora_layout, dy, dx, da, db, accumulate);
    hd_test_expect_ran_on(ctx, s, lora_expected, "lora backward");
    lora_grads g = {want_dx ? hd_test_read(dx) : NULL,
                    weight_read(da, c->in, c->r, HD_LORA_TRANS_A),
                    weight_read(db, c->r, c->out, HD_LORA_TRANS_B)};
    hd_test_expect_unchanged("x", x, c->x);
    hd_test_expect_unchanged("w", w, held[0]);
    hd_test_expect_unchanged("a", a, held[1]);
    hd_test_expect_unchanged("b", b, held[2]);
    hd_test_expect_unchanged("dy", dy, c->dy);
    hd_tensor *all[] = {x, w, a, b, dy, dx, da, db};
    for (size_t i = 0; i < COUNT(all); i++)
        hd_tensor_destroy(all[i]);
    for (size_t i = 0; i < COUNT(held); i++)
        free(held[i]);
    return g;
}

static double lora_loss(const lora_case *c, const double *x, const double *w, const double *a,
                        const double *b, const double *dy)
{
    double loss = 0.0;
    for (size_t i = 0; i < c->t; i++) {
        for (size_t j = 0; j < c->out; j++) {
            double y = 0.0;
            for (size_t p = 0; p < c->in; p++)
                y += x[i * c->in + p] * w[p * c->out + j];
            for (size_t q = 0; q < c->r; q++) {
                double h = 0.0;
                for (size_t p = 0; p < c->in; p++)
                    h += x[i * c->in + p] * a[p * c->r + q];
                y += (double)c->scale * h * b[q * c->out + j];
            }
            loss += dy[i * c->out + j] * y;
        }
    }
    return loss;
}

static void lora_differences(const lora_case *c, double *x, double *w, double *a, double *b,
                             double *dy, double *p, size_t n, double *grad)
{
    for (size_t k = 0; k < n; k++) {
        double keep = p[k];
        p[k] = keep + FD_STEP;
        double up = lora_loss(c, x, w, a, b, dy);
        p[k] = keep - FD_STEP;
        double down = lora_loss(c, x, w, a, b, dy);
        p[k] = keep;
        grad[k] = (up - down) / (2.0 * FD_STEP);
    }
}

/* The tools' check of LoRA's backward (the tuner's, per candidate): it passes the float64
 * reference's results and fails one changed gradient element, alike with its memo (u and h
 * computed once per case, by the first check or beforehand) and without; the memo is reused
 * while the shape and inputs stay, and recomputed for other inputs. */
static void test_tools_lora_backward_check_with_and_without_memo(void **state)
{
    (void)state;
    size_t t = 37, in = 29, out = 23, r = 5;
    lora_case c = lora_case_make(t, in, out, r, 990);
    double *dx = hd_test_doubles(t * in), *da = hd_test_doubles(in * r);
    double *db = hd_test_doubles(r * out), *bx = hd_test_doubles(t * in);
    double *ba = hd_test_doubles(in * r), *bb = hd_test_doubles(r * out);
    hd_ref_lora_backward(t, in, out, r, c.x, c.w, c.a, c.b, c.scale, c.dy, dx, da, db, bx, ba, bb);
    float *got[3] = {hd_test_floats(t * in), hd_test_floats(in * r), hd_test_floats(r * out)};
    for (size_t i = 0; i < t * in; i++)
        got[0][i] = (float)dx[i];
    for (size_t i = 0; i < in * r; i++)
        got[1][i] = (float)da[i];
    for (size_t i = 0; i < r * out; i++)
        got[2][i] = (float)db[i];
    hd_shape shape = {.dim = {t, in, out, r}};
    const float *inputs[5] = {c.x, c.w, c.a, c.b, c.dy};
    const float *const *cgot = (const float *const *)got;
    double plain = hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale,
                                          0.0f, HD_PRECISION_FP32, NULL);
    assert_true(plain <= 1.0);
    hd_ref_backward_memo memo = {0}, prepared = {0};
    hd__ref_backward_prepare(HD_OP_LORA_BACKWARD, &shape, inputs, &prepared);
    assert_non_null(prepared.lowrank);
    assert_true(hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale, 0.0f,
                                       HD_PRECISION_FP32, &prepared) == plain);
    hd__ref_backward_memo_free(&prepared);
    for (int pass = 0; pass < 2; pass++) /* the first fills the memo, the second reads it */
        assert_true(hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale,
                                           0.0f, HD_PRECISION_FP32, &memo) == plain);
    assert_non_null(memo.lowrank);
    double *kept = memo.lowrank;
    got[1][in * r / 2] += 0.5f;
    assert_true(hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale, 0.0f,
                                       HD_PRECISION_FP32, &memo) > 1.0);
    assert_ptr_equal(memo.lowrank, kept);
    got[1][in * r / 2] -= 0.5f;
    /* other inputs (another x with other values): u stays, h is recomputed */
    float *x2 = hd_test_floats(t * in);
    for (size_t i = 0; i < t * in; i++)
        x2[i] = -c.x[i];
    inputs[0] = x2;
    double other = hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale,
                                          0.0f, HD_PRECISION_FP32, &memo);
    assert_true(other > 1.0); /* dA and dB of the first x do not fit the second */
    assert_ptr_equal(memo.in[0], x2);
    assert_true(hd__ref_check_backward(HD_OP_LORA_BACKWARD, &shape, inputs, cgot, 3, c.scale, 0.0f,
                                       HD_PRECISION_FP32, NULL) == other);
    hd__ref_backward_memo_free(&memo);
    assert_null(memo.lowrank);
    free(x2);
    for (int i = 0; i < 3; i++)
        free(got[i]);
    free(dx);
    free(da);
    free(db);
    free(bx);
    free(ba);
    free(bb);
    lora_case_free(&c);
}

static void check_lora_backward(hd_context *ctx, size_t t, size_t in, size_t out, size_t r,
                                bool differences, uint64_t salt)
{
    char what[160];
    snprintf(what, sizeof what, "lora_backward %zux%zux%zu r%zu", t, in, out, r);
    lora_case c = lora_case_make(t, in, out, r, salt);
    lora_grads g = run_lora_backward(ctx, &c, true, false, NULL);
    double *dx = hd_test_doubles(t * in), *da = hd_test_doubles(in * r);
    double *db = hd_test_doubles(r * out), *bx = hd_test_doubles(t * in);
    double *ba = hd_test_doubles(in * r), *bb = hd_test_doubles(r * out);
    hd_ref_lora_backward(t, in, out, r, c.x, c.w, c.a, c.b, c.scale, c.dy, dx, da, db, bx, ba, bb);
    size_t k = t + in + out + r; /* the longest chain of sums behind one element */
    hd_test_expect_gemm_close(what, g.dx, dx, bx, t * in, k, 8.0);
    hd_test_expect_gemm_close(what, g.da, da, ba, in * r, k, 8.0);
    hd_test_expect_gemm_close(what, g.db, db, bb, r * out, k, 8.0);
    if (differences) {
        double *xd = widen(c.x, t * in), *wd = widen(c.w, in * out), *ad = widen(c.a, in * r);
        double *bd = widen(c.b, r * out), *dyd = widen(c.dy, t * out);
        size_t most = t * in > in * r ? t * in : in * r;
        double *fd = hd_test_doubles(most > r * out ? most : r * out);
        lora_differences(&c, xd, wd, ad, bd, dyd, xd, t * in, fd);
        expect_differences(what, g.dx, dx, fd, t * in);
        lora_differences(&c, xd, wd, ad, bd, dyd, ad, in * r, fd);
        expect_differences(what, g.da, da, fd, in * r);
        lora_differences(&c, xd, wd, ad, bd, dyd, bd, r * out, fd);
        expect_differences(what, g.db, db, fd, r * out);
        double *all[] = {xd, wd, ad, bd, dyd, fd};
        for (size_t i = 0; i < COUNT(all); i++)
            free(all[i]);
    }
    double *all[] = {dx, da, db, bx, ba, bb};
    for (size_t i = 0; i < COUNT(all); i++)
        free(all[i]);
    lora_grads_free(&g);
    lora_case_free(&c);
}

static void test_lora_backward_matches_reference_and_differences(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, lora_expected))
        skip();
    for (size_t i = 0; i < COUNT(fd_lora_shapes); i++) {
        const hd_test_lora_shape *s = &fd_lora_shapes[i];
        check_lora_backward(ctx, s->tokens, s->in, s->out, s->rank, true, 600 + i);
    }
    for (size_t i = 0; i < hd_test_lora_shape_count; i++) {
        const hd_test_lora_shape *s = &hd_test_lora_shapes[i];
        check_lora_backward(ctx, s->tokens, s->in, s->out, s->rank, false, 650 + i);
    }
    /* deep sums over the tokens into few outputs: split-K on the tiled engine */
    check_lora_backward(ctx, 1031, 37, 29, 3, false, 690);
}

/* accumulate adds to what the outputs hold: start + the gradients, within the rounding bound
 * of the gradients' sums and the addition (the bound grows with the sums: a fixed tolerance
 * fails deep sums that are right). Without dx, dA and dB are the same bits. Many tokens and
 * few (the fused backend's two plans). */
static void check_lora_accumulates(hd_context *ctx, size_t tokens, size_t in, size_t out,
                                   size_t rank, uint64_t salt)
{
    lora_case c = lora_case_make(tokens, in, out, rank, salt);
    hd_rng rng = hd_test_rng(salt + 1);
    lora_grads start = {hd_test_random(&rng, c.t * c.in, -1, 1),
                        hd_test_random(&rng, c.in * c.r, -1, 1),
                        hd_test_random(&rng, c.r * c.out, -1, 1)};
    lora_grads fresh = run_lora_backward(ctx, &c, true, false, &start);
    lora_grads added = run_lora_backward(ctx, &c, true, true, &start);
    lora_grads no_dx = run_lora_backward(ctx, &c, false, false, NULL);
    size_t n[] = {c.t * c.in, c.in * c.r, c.r * c.out};
    double *want[3], *bound[3];
    for (int o = 0; o < 3; o++) {
        want[o] = hd_test_doubles(n[o]);
        bound[o] = hd_test_doubles(n[o]);
    }
    hd_ref_lora_backward(c.t, c.in, c.out, c.r, c.x, c.w, c.a, c.b, c.scale, c.dy, want[0], want[1],
                         want[2], bound[0], bound[1], bound[2]);
    const float *s[] = {start.dx, start.da, start.db}, *got[] = {added.dx, added.da, added.db};
    for (int o = 0; o < 3; o++) {
        for (size_t i = 0; i < n[o]; i++) {
            want[o][i] += s[o][i];
            bound[o][i] += fabs((double)s[o][i]);
        }
        hd_test_expect_gemm_close("accumulated gradient", got[o], want[o], bound[o], n[o],
                                  c.t + c.in + c.out + c.r, 8.0);
        free(want[o]);
        free(bound[o]);
    }
    hd_test_expect_same("dA without dx", no_dx.da, fresh.da, n[1]);
    hd_test_expect_same("dB without dx", no_dx.db, fresh.db, n[2]);
    lora_grads_free(&start);
    lora_grads_free(&fresh);
    lora_grads_free(&added);
    lora_grads_free(&no_dx);
    lora_case_free(&c);
}

static void test_lora_backward_accumulates_and_dx_is_optional(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, lora_expected))
        skip();
    check_lora_accumulates(ctx, 17, 31, 29, 5, 700);
    check_lora_accumulates(ctx, 5, 31, 29, 5, 710);
}

/* Shapes drawn from the whole class (testlib), fresh each run, each in a layout drawn from all
 * eight; overwrite and accumulate in turn. */
static void test_lora_backward_random_shapes_and_layouts_match_reference(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, lora_expected))
        skip();
    hd_rng rng = hd_test_rng(1100 + (uint64_t)lora_expected);
    for (int i = 0; i < 6; i++) {
        hd_test_lora_shape s = hd_test_random_lora_shape(&rng);
        lora_layout = (unsigned)hd_test_uniform(&rng, 0.0f, 7.99f);
        if (i % 2 == 0)
            check_lora_backward(ctx, s.tokens, s.in, s.out, s.rank, false, 1110 + i);
        else
            check_lora_accumulates(ctx, s.tokens, s.in, s.out, s.rank, 1110 + i);
    }
    lora_layout = HD_LORA_LAYOUT_DEFAULT;
}

/* Few tokens on the fused kernels in each of the eight layouts: one launch up to rank 16, where
 * W stored out x in takes blocks of 64 columns of dx over ranges of W's rows summed by the last
 * group of a block to arrive (a long out over a short in makes several ranges), float4 loads
 * where the rows allow them, 16 tokens in chunks; rank 17 and rank 0 take the few-row plan. */
static void test_lora_backward_few_tokens_match_reference_in_every_layout(void **state)
{
    hd_context *ctx = *state;
    if (!hd_context_has_backend(ctx, lora_expected))
        skip();
    /* in every layout: rank 17 (past the one launch's 16) and rank 0; the others in turn,
     * each in three of the eight layouts (every kernel build costs seconds on PoCL) */
    static const hd_test_lora_shape every[] = {{16, 17, 19, 17}, {7, 13, 11, 0}};
    static const hd_test_lora_shape shapes[] = {
        {5, 61, 509, 7},  {16, 64, 1024, 16}, {3, 130, 257, 16}, {1, 1031, 97, 8},
        {2, 4, 3, 1},     {4, 9, 700, 2},     {1, 256, 2048, 16}, {9, 40, 33, 5},
    };
    for (unsigned layout = 0; layout < 8; layout++) {
        lora_layout = layout;
        for (size_t i = 0; i < COUNT(every); i++)
            check_lora_backward(ctx, every[i].tokens, every[i].in, every[i].out, every[i].rank,
                                false, 880 + 16 * layout + i);
        for (size_t i = 0; i < COUNT(shapes); i++) {
            const hd_test_lora_shape *s = &shapes[i];
            if ((i + layout) % 8 < 3)
                check_lora_backward(ctx, s->tokens, s->in, s->out, s->rank, false,
                                    900 + 16 * layout + i);
        }
        /* accumulation in every layout, the two one-launch shapes in turn */
        if (layout % 2 == 0)
            check_lora_accumulates(ctx, 5, 61, 509, 7, 1000 + layout);
        else
            check_lora_accumulates(ctx, 16, 64, 1024, 16, 1010 + layout);
    }
    lora_layout = HD_LORA_LAYOUT_DEFAULT;
}

/* No tokens: every gradient is a sum over nothing, zeros when overwriting, kept when
 * accumulating; rank 0 leaves dA and dB empty and dx = dy*W^T (checked above). */
static void test_lora_backward_sums_over_nothing(void **state)
{
    hd_context *ctx = *state;
    float start_a[6] = {1, 2, 3, 4, 5, 6}, start_b[6] = {6, 5, 4, 3, 2, 1}, zeros[6] = {0};
    hd_tensor *x = hd_test_tensor(ctx, 0, 3, NULL), *w = hd_test_tensor(ctx, 3, 3, NULL);
    hd_tensor *a = hd_test_tensor(ctx, 3, 2, NULL), *b = hd_test_tensor(ctx, 2, 3, NULL);
    hd_tensor *dy = hd_test_tensor(ctx, 0, 3, NULL), *dx = hd_test_tensor(ctx, 0, 3, NULL);
    hd_tensor *da = hd_test_tensor(ctx, 3, 2, start_a), *db = hd_test_tensor(ctx, 2, 3, start_b);
    assert_int_equal(hd_lora_backward(ctx, x, w, a, b, 1.0f, dy, dx, da, db, true), HD_OK);
    hd_test_expect_unchanged("dA kept", da, start_a);
    hd_test_expect_unchanged("dB kept", db, start_b);
    assert_int_equal(hd_lora_backward(ctx, x, w, a, b, 1.0f, dy, NULL, da, db, false), HD_OK);
    hd_test_expect_unchanged("dA zeroed", da, zeros);
    hd_test_expect_unchanged("dB zeroed", db, zeros);
    hd_tensor *all[] = {x, w, a, b, dy, dx, da, db};
    for (size_t i = 0; i < COUNT(all); i++)
        hd_tensor_destroy(all[i]);
}

/* ---- errors ---- */

enum { E_ROWS = 5, E_COLS = 7, E_T = 3, E_IN = 6, E_OUT = 4, E_R = 2 };

/* Tensors of random contents, remembered so that a failed call can be checked to have left
 * them as they were. */
typedef struct kept {
    hd_tensor *t[24];
    float *data[24];
    int count;
} kept;

static hd_tensor *keep(kept *k, hd_context *ctx, size_t rows, size_t cols)
{
    hd_rng rng = hd_test_rng(800 + (uint64_t)k->count);
    float *d = hd_test_random(&rng, rows * cols, -1, 1);
    for (size_t i = 0; i < cols && rows > 0; i++)
        d[i] = fabsf(d[i]) + 0.5f; /* a row usable as a weight, or as y of a softmax */
    k->data[k->count] = d;
    return k->t[k->count++] = hd_test_tensor(ctx, rows, cols, d);
}

static void expect_failed(hd_context *ctx, const kept *k, hd_status got, hd_status want,
                          const char *what)
{
    if (got != want)
        fail_msg("%s: %s, expected %s (%s)", what, hd_status_name(got), hd_status_name(want),
                 hd_context_last_error(ctx));
    if (ctx != NULL && hd_context_last_error(ctx)[0] == '\0')
        fail_msg("%s: no message", what);
    for (int i = 0; i < k->count; i++)
        hd_test_expect_unchanged(what, k->t[i], k->data[i]);
}

static void kept_free(kept *k)
{
    for (int i = 0; i < k->count; i++) {
        hd_tensor_destroy(k->t[i]);
        free(k->data[i]);
    }
}

static void test_row_backward_rejects_bad_arguments(void **state)
{
    hd_context *ctx = *state, *other = hd_test_context(true);
    kept k = {0};
    hd_tensor *x = keep(&k, ctx, E_ROWS, E_COLS), *g = keep(&k, ctx, 1, E_COLS);
    hd_tensor *dy = keep(&k, ctx, E_ROWS, E_COLS), *dx = keep(&k, ctx, E_ROWS, E_COLS);
    hd_tensor *dg = keep(&k, ctx, 1, E_COLS), *db = keep(&k, ctx, 1, E_COLS);
    hd_tensor *wide = keep(&k, ctx, E_ROWS, E_COLS + 1), *tall = keep(&k, ctx, 2, E_COLS);
    hd_tensor *g_wide = keep(&k, ctx, 1, E_COLS + 1), *foreign = NULL;
    assert_int_equal(hd_tensor_create(other, E_ROWS, E_COLS, &foreign), HD_OK);
    const hd_status inval = HD_ERR_INVALID_ARGUMENT, shape = HD_ERR_SHAPE_MISMATCH,
                    alias = HD_ERR_ALIASING, wrong = HD_ERR_WRONG_CONTEXT;

    expect_failed(NULL, &k, hd_softmax_backward(NULL, x, dy, dx), inval, "NULL context");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, NULL, dy, dx), inval, "NULL y");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, x, NULL, dx), inval, "NULL dy");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, x, dy, NULL), inval, "NULL dx");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, x, wide, dx), shape, "softmax wide dy");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, x, dy, wide), shape, "softmax wide dx");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, x, dy, x), alias, "softmax dx == y");
    expect_failed(ctx, &k, hd_softmax_backward(ctx, foreign, dy, dx), wrong, "softmax foreign");

    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, NULL, dy, EPS, dx, dg), inval,
                  "NULL weight");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, EPS, NULL, dg), inval,
                  "rms NULL dx");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g_wide, dy, EPS, dx, dg), shape,
                  "rms wide weight");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, EPS, dx, g_wide), shape,
                  "rms wide dweight");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, tall, EPS, dx, dg), shape,
                  "rms short dy");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, EPS, x, dg), alias, "rms dx == x");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, EPS, dx, g), alias,
                  "rms dweight == weight");
    expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, EPS, dx, foreign), wrong,
                  "rms foreign dweight");
    const float bad_eps[] = {NAN, INFINITY, -INFINITY, -1e-3f};
    for (size_t i = 0; i < COUNT(bad_eps); i++) {
        expect_failed(ctx, &k, hd_rms_norm_backward(ctx, x, g, dy, bad_eps[i], dx, dg), inval,
                      "rms eps");
        expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, bad_eps[i], dx, dg, db), inval,
                      "layer norm eps");
    }

    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, dg, dg), alias,
                  "dgamma == dbeta");
    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, dg, dy), alias,
                  "dbeta == dy");
    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, dg, g_wide), shape,
                  "wide dbeta");
    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, tall, db), shape,
                  "tall dgamma");
    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, foreign, EPS, dx, dg, db), wrong,
                  "foreign dy");
    expect_failed(ctx, &k, hd_layer_norm_backward(ctx, x, g, dy, EPS, dx, dx, db), alias,
                  "dgamma == dx");
    hd_tensor_destroy(foreign);
    hd_context_destroy(other);
    kept_free(&k);
}

static void test_lora_backward_rejects_bad_arguments(void **state)
{
    hd_context *ctx = *state, *other = hd_test_context(true);
    kept k = {0};
    hd_tensor *x = keep(&k, ctx, E_T, E_IN), *w = keep(&k, ctx, E_IN, E_OUT);
    hd_tensor *a = keep(&k, ctx, E_IN, E_R), *b = keep(&k, ctx, E_R, E_OUT);
    hd_tensor *dy = keep(&k, ctx, E_T, E_OUT), *dx = keep(&k, ctx, E_T, E_IN);
    hd_tensor *da = keep(&k, ctx, E_IN, E_R), *db = keep(&k, ctx, E_R, E_OUT);
    hd_tensor *odd = keep(&k, ctx, E_T + 1, E_OUT + 1), *foreign = NULL;
    assert_int_equal(hd_tensor_create(other, E_T, E_IN, &foreign), HD_OK);
    const hd_status inval = HD_ERR_INVALID_ARGUMENT, shape = HD_ERR_SHAPE_MISMATCH,
                    alias = HD_ERR_ALIASING, wrong = HD_ERR_WRONG_CONTEXT;
    for (int acc = 0; acc < 2; acc++) {
        expect_failed(NULL, &k, hd_lora_backward(NULL, x, w, a, b, 1, dy, dx, da, db, acc), inval,
                      "NULL context");
        hd_tensor *args[8] = {x, w, a, b, dy, dx, da, db};
        for (int i = 0; i < 8; i++) { /* each tensor NULL (dx may be), the wrong shape, foreign */
            hd_tensor *t[8];
            memcpy(t, args, sizeof t);
            t[i] = NULL;
            hd_status s =
                hd_lora_backward(ctx, t[0], t[1], t[2], t[3], 1, t[4], t[5], t[6], t[7], acc);
            if (i == 5)
                assert_int_equal(s, HD_OK);
            else
                expect_failed(ctx, &k, s, inval, "NULL tensor");
            for (int j = 0; j < 8 && i == 5; j++) /* put the data back for the next checks */
                assert_int_equal(hd_tensor_write(k.t[j], k.data[j]), HD_OK);
            t[i] = odd;
            expect_failed(
                ctx, &k,
                hd_lora_backward(ctx, t[0], t[1], t[2], t[3], 1, t[4], t[5], t[6], t[7], acc),
                shape, "mismatched shape");
            t[i] = foreign;
            expect_failed(
                ctx, &k,
                hd_lora_backward(ctx, t[0], t[1], t[2], t[3], 1, t[4], t[5], t[6], t[7], acc),
                wrong, "foreign tensor");
        }
        /* the layout flags: an unknown one, and the default layout's shapes under PyTorch's
         * (W in x out where out x in is expected; dA and dB that do not follow A and B) */
        expect_failed(ctx, &k, hd_lora_backward_ex(ctx, x, w, a, b, 1, 8, dy, dx, da, db, acc),
                      inval, "unknown layout flag");
        expect_failed(
            ctx, &k,
            hd_lora_backward_ex(ctx, x, w, a, b, 1, HD_LORA_LAYOUT_PYTORCH, dy, dx, da, db, acc),
            shape, "default shapes in PyTorch's layout");
        expect_failed(ctx, &k,
                      hd_lora_backward_ex(ctx, x, w, a, b, 1, HD_LORA_TRANS_W, dy, dx, da, db, acc),
                      shape, "W not stored out x in");
        expect_failed(ctx, &k, hd_lora_backward(ctx, x, w, a, b, 1, dy, x, da, db, acc), alias,
                      "dx == x");
        expect_failed(ctx, &k, hd_lora_backward(ctx, x, w, a, b, 1, dy, dx, a, db, acc), alias,
                      "da == a");
        expect_failed(ctx, &k, hd_lora_backward(ctx, x, w, a, b, 1, dy, dx, da, b, acc), alias,
                      "db == b");
        expect_failed(ctx, &k, hd_lora_backward(ctx, x, w, a, b, 1, dy, dx, da, dy, acc), alias,
                      "db == dy");
    }
    hd_tensor_destroy(foreign);
    hd_context_destroy(other);
    kept_free(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_lora_backward_check_with_and_without_memo),
        cmocka_unit_test(test_softmax_backward_matches_reference_and_differences),
        cmocka_unit_test(test_layer_norm_backward_matches_reference_and_differences),
        cmocka_unit_test(test_rms_norm_backward_matches_reference_and_differences),
        cmocka_unit_test(test_layer_norm_backward_far_from_zero),
        cmocka_unit_test(test_norm_backward_any_magnitude),
        cmocka_unit_test(test_row_backward_in_place_and_without_weight_gradients),
        cmocka_unit_test(test_norm_backward_weight_gradients_are_deterministic),
        cmocka_unit_test(test_norm_backward_without_rows_zeroes_the_weight_gradients),
        cmocka_unit_test(test_lora_backward_matches_reference_and_differences),
        cmocka_unit_test(test_lora_backward_accumulates_and_dx_is_optional),
        cmocka_unit_test(test_lora_backward_random_shapes_and_layouts_match_reference),
        cmocka_unit_test(test_lora_backward_sums_over_nothing),
        cmocka_unit_test(test_row_backward_rejects_bad_arguments),
        cmocka_unit_test(test_lora_backward_rejects_bad_arguments),
    };
    const struct CMUnitTest fused[] = {
        cmocka_unit_test_setup_teardown(test_softmax_backward_matches_reference_and_differences,
                                        setup_fused, teardown),
        cmocka_unit_test_setup_teardown(test_layer_norm_backward_matches_reference_and_differences,
                                        setup_fused, teardown),
        cmocka_unit_test_setup_teardown(test_rms_norm_backward_matches_reference_and_differences,
                                        setup_fused, teardown),
        cmocka_unit_test_setup_teardown(test_layer_norm_backward_far_from_zero, setup_fused,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_norm_backward_any_magnitude, setup_fused, teardown),
        cmocka_unit_test_setup_teardown(test_row_backward_in_place_and_without_weight_gradients,
                                        setup_fused, teardown),
        cmocka_unit_test_setup_teardown(test_norm_backward_weight_gradients_are_deterministic,
                                        setup_fused, teardown),
    };
    const struct CMUnitTest lora_layouts[] = {
        cmocka_unit_test_setup_teardown(test_lora_backward_matches_reference_and_differences,
                                        setup_lora_cpu_pytorch, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_accumulates_and_dx_is_optional,
                                        setup_lora_cpu_a, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_matches_reference_and_differences,
                                        setup_lora_fused_pytorch, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_accumulates_and_dx_is_optional,
                                        setup_lora_fused_w_b, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_matches_reference_and_differences,
                                        setup_lora_clblast_pytorch, teardown),
    };
    const struct CMUnitTest lora_devices[] = {
        cmocka_unit_test_setup_teardown(test_lora_backward_matches_reference_and_differences,
                                        setup_lora_fused, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_accumulates_and_dx_is_optional,
                                        setup_lora_fused, teardown),
        cmocka_unit_test_setup_teardown(
            test_lora_backward_few_tokens_match_reference_in_every_layout, setup_lora_fused,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_lora_backward_random_shapes_and_layouts_match_reference, setup_lora_fused,
            teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_matches_reference_and_differences,
                                        setup_lora_clblast, teardown),
        cmocka_unit_test_setup_teardown(test_lora_backward_accumulates_and_dx_is_optional,
                                        setup_lora_clblast, teardown),
        cmocka_unit_test_setup_teardown(
            test_lora_backward_random_shapes_and_layouts_match_reference, setup_lora_clblast,
            teardown),
    };
    hd_test_filter_from_env();
    int failed = cmocka_run_group_tests_name("backward on the CPU", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("backward on the fused kernels", fused, NULL, NULL);
    failed += cmocka_run_group_tests_name("LoRA backward on the fused kernels and CLBlast",
                                          lora_devices, NULL, NULL);
    return failed + cmocka_run_group_tests_name("LoRA backward in transposed layouts", lora_layouts,
                                                NULL, NULL);
}
