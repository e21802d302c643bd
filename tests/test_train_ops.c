/*
 * Residual add + RMS norm (and its backward), cross-entropy, the LM head's cross-entropy and
 * AdamW on every backend of the machine (the CPU, and the fused kernels on the OpenCL device:
 * PoCL in CI) against the float64 reference (autotune/reference_step.h): odd and prime sizes,
 * one row, one column, rows short and several thousand long, in-place calls, optional inputs
 * and outputs present and absent, extreme magnitudes; the gradients also against finite
 * differences of the reference's forward; every argument error with its outputs untouched.
 *
 * Tolerances are in units of u = 2^-24 (fp32's unit roundoff) times the magnitude each
 * element's rounding error scales with (as the lab harnesses in dev/ state them):
 *   h:        |h|, 1 (x + r rounded once).
 *   y, dh:    |y|; rstd (|w dy| + |xhat| mean|w dy xhat|) + |dres|: 8 + 4 sqrt(cols) (a sum of
 *             squares of cols terms, its square root, a few products).
 *   dweight:  sum over rows of |dy xhat|: 8 + 4 (sqrt(rows) + sqrt(cols)).
 *   loss_i:   with m the row's largest logit, s = sum exp(x - m), p its softmax and
 *             A = sum p |x - m|: |m - x_t| + |log s| + A + 1; the mean inv_count sum of those,
 *             8 + 2 sqrt(V) + sqrt(rows).
 *   dlogits:  inv_count (p_j (1 + |x_j - m| + A) + [j == t]): 8 + 2 sqrt(V).
 *   LM head:  the logits' own GEMM error, 2 (D + 1) G_i with G_i the row's largest sum of
 *             |h w|, joins each row's magnitude; dh adds the product's (V + 1) u sum |dl w|.
 *   AdamW:    each update's terms' magnitudes: 16, 64 where the clip's coefficient (from a
 *             norm summed in float on the device) scales the gradients; the norm, 32.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#ifdef HD_HAVE_OPENCL
#include "backends/fused/internal.h"
#include "dispatch/context.h"
#include "dispatch/select.h"
#endif
#include "dispatch/tools.h"
#include "tests/testlib.h"

#define U 0x1p-24

static const hd_backend train_backends[] = {HD_BACKEND_CPU, HD_BACKEND_FUSED};

#define BACKEND_COUNT (sizeof train_backends / sizeof train_backends[0])

static hd_context *shared_ctx;

#ifdef HD_HAVE_OPENCL
/* The shared context's fused backend state, for tests that set its limits; the test is
 * skipped where the context has no fused backend. */
static hd_fused *fused_state_or_skip(void)
{
    if (!hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED))
        skip();
    return shared_ctx->backend_state[HD_BACKEND_FUSED];
}
#endif

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

/* NaN meets NaN, an infinity the same infinity. */
static bool special_matches(float got, double want)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return (double)got == want;
    return isfinite(got);
}

/* Fails unless |got - want| <= limit * u * mag (+ the smallest normal float) element by element. */
static void expect_within(const char *what, const float *got, const double *want, const double *mag,
                          size_t n, double limit)
{
    for (size_t i = 0; i < n; i++) {
        if (!special_matches(got[i], want[i]))
            fail_msg("%s: element %zu is %g, expected %g", what, i, (double)got[i], want[i]);
        if (!isfinite(want[i]))
            continue;
        double err = fabs((double)got[i] - want[i]), tol = limit * U * mag[i] + FLT_MIN;
        if (err > tol)
            fail_msg("%s: element %zu is %.9g, expected %.9g (error %.3g > %.3g = %g u * %.3g)",
                     what, i, (double)got[i], want[i], err, tol, limit, mag[i]);
    }
}

static void expect_zeros(const char *what, const float *got, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != 0.0f)
            fail_msg("%s: element %zu is %g, expected 0", what, i, (double)got[i]);
}

static float *scaled_random(hd_rng *rng, size_t n, double scale)
{
    float *p = hd_test_floats(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(hd_test_uniform(rng, -1.0f, 1.0f) * scale);
    return p;
}

static double *absolute(const double *v, size_t n)
{
    double *a = hd_test_doubles(n);
    for (size_t i = 0; i < n; i++)
        a[i] = fabs(v[i]);
    return a;
}

static double norm_limit(size_t cols)
{
    return 8.0 + 4.0 * sqrt((double)cols);
}

/* ---- residual add + RMS norm, forward ---- */

typedef struct norm_case {
    size_t rows, cols;
    double scale; /* x ~ scale U(-1, 1), r ~ scale/2 U(-1, 1) */
    float eps;
    int alias; /* forward: h over x (1) or r (2); backward: dh over dy (1) or dres (2) */
    bool dres, dweight;
    double dscale; /* backward: dy and dres ~ dscale U(-1, 1) */
} norm_case;

#define FORWARD(r, c, s, e, a)                                                                     \
    {                                                                                              \
        .rows = (r), .cols = (c), .scale = (s), .eps = (e), .alias = (a)                           \
    }

static void check_forward_on(hd_backend b, const norm_case *c, const float *x, const float *r,
                             const float *w, const double *h_ref, const double *y_ref)
{
    size_t n = c->rows * c->cols;
    hd_tensor *tx = hd_test_tensor(shared_ctx, c->rows, c->cols, x);
    hd_tensor *tr = hd_test_tensor(shared_ctx, c->rows, c->cols, r);
    hd_tensor *tw = hd_test_tensor(shared_ctx, 1, c->cols, w);
    hd_tensor *ty = hd_test_tensor(shared_ctx, c->rows, c->cols, NULL);
    hd_tensor *th = c->alias == 1   ? tx
                    : c->alias == 2 ? tr
                                    : hd_test_tensor(shared_ctx, c->rows, c->cols, NULL);
    char what[200];
    snprintf(what, sizeof what, "add_rms_norm on %s, %zu x %zu, scale %g, eps %g, alias %d",
             hd_backend_name(b), c->rows, c->cols, c->scale, (double)c->eps, c->alias);
    hd_test_expect_ran_on(shared_ctx, hd_add_rms_norm(shared_ctx, tx, tr, tw, c->eps, th, ty), b,
                          what);
    float *h = hd_test_read(th), *y = hd_test_read(ty);
    double *hm = absolute(h_ref, n), *ym = absolute(y_ref, n);
    expect_within(what, h, h_ref, hm, n, 1.0);
    expect_within(what, y, y_ref, ym, n, norm_limit(c->cols));
    free(h);
    free(y);
    free(hm);
    free(ym);
    if (c->alias == 0)
        hd_tensor_destroy(th);
    hd_tensor *t[] = {tx, tr, tw, ty};
    for (size_t i = 0; i < 4; i++)
        hd_tensor_destroy(t[i]);
}

static void check_forward(const norm_case *c, hd_rng *rng)
{
    size_t n = c->rows * c->cols;
    float *x = scaled_random(rng, n, c->scale), *r = scaled_random(rng, n, c->scale / 2);
    float *w = hd_test_random(rng, c->cols, 0.5f, 1.5f);
    double *h_ref = hd_test_doubles(n), *y_ref = hd_test_doubles(n);
    hd__ref_add_rms_norm(c->rows, c->cols, x, r, w, c->eps, h_ref, y_ref);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        if (!hd_test_use_backend(shared_ctx, HD_OP_ADD_RMS_NORM, train_backends[bi]))
            continue;
        check_forward_on(train_backends[bi], c, x, r, w, h_ref, y_ref);
        hd_test_release_backend(shared_ctx, HD_OP_ADD_RMS_NORM);
    }
    free(x);
    free(r);
    free(w);
    free(h_ref);
    free(y_ref);
}

/* Short rows (many per work-group), one row, one column, rows held in registers and rows of
 * several thousand (the looped kernel), odd and prime widths, in place over x and over r. */
static void test_add_rms_norm_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(1);
    const norm_case cases[] = {
        FORWARD(1, 1, 1, 1e-6f, 0),    FORWARD(1, 7, 1, 1e-6f, 1),    FORWARD(13, 1, 1, 1e-6f, 2),
        FORWARD(37, 100, 1, 1e-5f, 0), FORWARD(5, 257, 1, 1e-6f, 1),  FORWARD(3, 1024, 1, 1e-6f, 2),
        FORWARD(4, 4096, 1, 1e-6f, 0), FORWARD(2, 5003, 1, 1e-6f, 1), FORWARD(3, 8000, 1, 0.0f, 2),
        FORWARD(17, 63, 1, 0.5f, 0),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_forward(&cases[i], &rng);
    (void)state;
}

/* Rows of 1e30 and 1e-30 (eps 0): squares beyond float's range, both ways. */
static void test_add_rms_norm_at_extreme_magnitudes(void **state)
{
    hd_rng rng = hd_test_rng(2);
    const norm_case cases[] = {
        FORWARD(3, 100, 1e30, 1e-6f, 0),
        FORWARD(2, 5003, 1e30, 1e-6f, 1),
        FORWARD(3, 100, 1e-30, 0.0f, 2),
        FORWARD(2, 4096, 1e-30, 0.0f, 0),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_forward(&cases[i], &rng);
    (void)state;
}

/* ---- residual add + RMS norm, backward ---- */

typedef struct norm_backward_data {
    size_t rows, cols;
    float *h, *w, *dy, *dres;
    float eps;
    double *dh_ref, *dw_ref, *dh_mag, *dw_mag;
} norm_backward_data;

/* The reference and the magnitudes of its tolerances. */
static void norm_backward_reference(norm_backward_data *d)
{
    size_t rows = d->rows, cols = d->cols, n = rows * cols;
    d->dh_ref = hd_test_doubles(n);
    d->dh_mag = hd_test_doubles(n);
    d->dw_ref = hd_test_doubles(cols);
    d->dw_mag = hd_test_doubles(cols);
    hd__ref_add_rms_norm_backward(rows, cols, d->h, d->w, d->dy, d->dres, d->eps, d->dh_ref,
                                  d->dw_ref);
    for (size_t j = 0; j < cols; j++)
        d->dw_mag[j] = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *h = d->h + i * cols, *dy = d->dy + i * cols;
        double sq = 0.0, agx = 0.0;
        for (size_t j = 0; j < cols; j++)
            sq += (double)h[j] * h[j];
        double rstd = 1.0 / sqrt(sq / (double)cols + d->eps);
        for (size_t j = 0; j < cols; j++)
            agx += fabs((double)d->w[j] * dy[j] * h[j] * rstd);
        agx /= (double)cols;
        for (size_t j = 0; j < cols; j++) {
            double xhat = h[j] * rstd;
            d->dh_mag[i * cols + j] = rstd * (fabs((double)d->w[j] * dy[j]) + fabs(xhat) * agx) +
                                      (d->dres != NULL ? fabs(d->dres[i * cols + j]) : 0.0);
            d->dw_mag[j] += fabs(dy[j] * xhat);
        }
    }
}

static void norm_backward_free(norm_backward_data *d)
{
    free(d->h);
    free(d->w);
    free(d->dy);
    free(d->dres);
    free(d->dh_ref);
    free(d->dh_mag);
    free(d->dw_ref);
    free(d->dw_mag);
}

/* dh and dweight (tdw NULL: none) against the reference. */
static void check_backward_results(const char *what, const norm_case *c,
                                   const norm_backward_data *d, hd_tensor *tdh, hd_tensor *tdw)
{
    size_t rows = c->rows, cols = c->cols, n = rows * cols;
    float *dh = hd_test_read(tdh);
    expect_within(what, dh, d->dh_ref, d->dh_mag, n, norm_limit(cols));
    free(dh);
    if (tdw != NULL) {
        float *dw = hd_test_read(tdw);
        expect_within(what, dw, d->dw_ref, d->dw_mag, cols,
                      8.0 + 4.0 * (sqrt((double)rows) + sqrt((double)cols)));
        free(dw);
    }
}

/* On backend b, through the public call, or with variant (not NULL) as the tuner runs it;
 * false where the variant was refused as the tuner sees refusals (a group the compiled kernel
 * cannot run, a build that failed): nothing to check. */
static bool check_backward_on(hd_backend b, const norm_case *c, const norm_backward_data *d,
                              const char *variant)
{
    size_t rows = c->rows, cols = c->cols;
    hd_tensor *th = hd_test_tensor(shared_ctx, rows, cols, d->h);
    hd_tensor *tw = hd_test_tensor(shared_ctx, 1, cols, d->w);
    hd_tensor *tdy = hd_test_tensor(shared_ctx, rows, cols, d->dy);
    hd_tensor *tdres = d->dres != NULL ? hd_test_tensor(shared_ctx, rows, cols, d->dres) : NULL;
    hd_tensor *tdh = c->alias == 1   ? tdy
                     : c->alias == 2 ? tdres
                                     : hd_test_tensor(shared_ctx, rows, cols, NULL);
    hd_tensor *tdw = c->dweight ? hd_test_tensor(shared_ctx, 1, cols, NULL) : NULL;
    char what[200];
    snprintf(what, sizeof what,
             "add_rms_norm_backward on %s (%s), %zu x %zu, scale %g, dres %d, dweight %d, "
             "alias %d",
             hd_backend_name(b), variant != NULL ? variant : "its choice", rows, cols, c->scale,
             d->dres != NULL, c->dweight, c->alias);
    hd_status s;
    if (variant == NULL) {
        s = hd_add_rms_norm_backward(shared_ctx, th, tw, tdy, tdres, c->eps, tdh, tdw);
    } else {
        const hd_tensor *tensors[] = {th, tw, tdy, tdres, tdh, tdw};
        hd_op_params p = {.eps = c->eps};
        hd_call call;
        assert_int_equal(
            hd__call_prepare(shared_ctx, HD_OP_ADD_RMS_NORM_BACKWARD, tensors, &p, &call), HD_OK);
        s = hd__call_run_on(shared_ctx, b, &call, variant);
    }
    bool refused = variant != NULL && (s == HD_ERR_UNSUPPORTED || s == HD_ERR_BUILD);
    if (!refused) {
        hd_test_expect_ran_on(shared_ctx, s, b, what);
        check_backward_results(what, c, d, tdh, tdw);
    }
    if (c->alias == 0)
        hd_tensor_destroy(tdh);
    hd_tensor *t[] = {th, tw, tdy, tdres, tdw};
    for (size_t i = 0; i < 5; i++)
        hd_tensor_destroy(t[i]);
    return !refused;
}

static void check_backward(const norm_case *c, hd_rng *rng)
{
    size_t n = c->rows * c->cols;
    norm_backward_data d = {.rows = c->rows,
                            .cols = c->cols,
                            .h = scaled_random(rng, n, c->scale),
                            .w = hd_test_random(rng, c->cols, 0.5f, 1.5f),
                            .dy = scaled_random(rng, n, c->dscale),
                            .dres = c->dres ? scaled_random(rng, n, c->dscale) : NULL,
                            .eps = c->eps};
    norm_backward_reference(&d);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        if (!hd_test_use_backend(shared_ctx, HD_OP_ADD_RMS_NORM_BACKWARD, train_backends[bi]))
            continue;
        check_backward_on(train_backends[bi], c, &d, NULL);
        hd_test_release_backend(shared_ctx, HD_OP_ADD_RMS_NORM_BACKWARD);
    }
    norm_backward_free(&d);
}

/* Every combination of dres and dweight, in place over dy and over dres, on rows held in
 * registers (the single pass) and rows too long for them (the rows kernel, or with dweight the
 * four launches). */
static void test_add_rms_norm_backward_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(3);
    static const size_t shapes[][2] = {{1, 1},   {13, 1},   {1, 7},    {37, 100},
                                       {5, 257}, {9, 4096}, {3, 5003}, {2, 8000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int combo = 0; combo < 4; combo++) {
            bool dres = combo & 1, dweight = combo & 2;
            int alias = dres ? (int)(s % 3) : (int)(s % 2);
            norm_case c = {shapes[s][0], shapes[s][1], 1.0, 1e-6f, alias, dres, dweight, 1.0};
            check_backward(&c, &rng);
        }
    (void)state;
}

/* Every variant the fused backend lists for the tuner, run as the tuner runs it (no
 * fallback), on rows its single pass holds (chunks of several rows with a shorter last one, a
 * single row) and on rows too long for it (5003 columns), with dres and dweight, dh apart and
 * over dy or dres. */
static void test_add_rms_norm_backward_variants_match_reference(void **state)
{
    if (!hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED))
        skip();
    hd_rng rng = hd_test_rng(6);
    static const size_t shapes[][2] = {{37, 4096}, {5, 257}, {1, 1024}, {3, 5003}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        norm_case c = {shapes[sh][0], shapes[sh][1], 1.0, 1e-6f, (int)(sh % 3), true, true, 1.0};
        size_t n = c.rows * c.cols;
        norm_backward_data d = {.rows = c.rows,
                                .cols = c.cols,
                                .h = scaled_random(&rng, n, c.scale),
                                .w = hd_test_random(&rng, c.cols, 0.5f, 1.5f),
                                .dy = scaled_random(&rng, n, c.dscale),
                                .dres = scaled_random(&rng, n, c.dscale),
                                .eps = c.eps};
        norm_backward_reference(&d);
        hd_shape shape = {.dim = {c.rows, c.cols}};
        const char *variants[32];
        size_t count = hd__backend_variants(shared_ctx, HD_BACKEND_FUSED,
                                            HD_OP_ADD_RMS_NORM_BACKWARD, &shape, variants, 32);
        assert_true(count >= 8);
        size_t ran = 0;
        for (size_t i = 0; i < count; i++)
            ran += check_backward_on(HD_BACKEND_FUSED, &c, &d, variants[i]);
        assert_true(ran * 2 > count); /* groups of 256 and fewer run everywhere */
        norm_backward_free(&d);
    }
    (void)state;
}

static void test_add_rms_norm_backward_at_extreme_magnitudes(void **state)
{
    hd_rng rng = hd_test_rng(4);
    const norm_case cases[] = {
        {3, 100, 1e30, 1e-6f, 0, true, true, 1.0},
        {2, 5003, 1e30, 1e-6f, 1, false, true, 1.0},
        {3, 100, 1e-30, 0.0f, 2, true, true, 1e-30},
        {2, 5003, 1e-30, 0.0f, 0, true, true, 1e-30},
        {4, 4096, 1e-30, 0.0f, 1, false, false, 1e-30},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_backward(&cases[i], &rng);
    (void)state;
}

/* sum_j dy_j y_j + dres_j h_j of one row of the reference forward, x's element j moved by
 * step. */
static double norm_objective(size_t cols, const float *x, const float *r, const float *w, float eps,
                             const float *dy, const float *dres, size_t j, float xj)
{
    float *xs = hd_test_floats(cols);
    double *h = hd_test_doubles(cols), *y = hd_test_doubles(cols);
    memcpy(xs, x, cols * sizeof *xs);
    xs[j] = xj;
    hd__ref_add_rms_norm(1, cols, xs, r, w, eps, h, y);
    double l = 0.0;
    for (size_t q = 0; q < cols; q++)
        l += dy[q] * y[q] + dres[q] * h[q];
    free(xs);
    free(h);
    free(y);
    return l;
}

/* Each backend's dh against central differences of the reference forward in x (dh is the
 * gradient of x and of r alike). */
static void test_add_rms_norm_backward_matches_finite_differences(void **state)
{
    hd_rng rng = hd_test_rng(5);
    size_t rows = 3, cols = 37, n = rows * cols;
    float *x = scaled_random(&rng, n, 1.0), *r = scaled_random(&rng, n, 0.5);
    float *w = hd_test_random(&rng, cols, 0.5f, 1.5f);
    float *dy = scaled_random(&rng, n, 1.0), *dres = scaled_random(&rng, n, 1.0);
    float *h = hd_test_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = x[i] + r[i];
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = train_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_ADD_RMS_NORM_BACKWARD, b))
            continue;
        hd_tensor *th = hd_test_tensor(shared_ctx, rows, cols, h);
        hd_tensor *tw = hd_test_tensor(shared_ctx, 1, cols, w);
        hd_tensor *tdy = hd_test_tensor(shared_ctx, rows, cols, dy);
        hd_tensor *tdres = hd_test_tensor(shared_ctx, rows, cols, dres);
        hd_tensor *tdh = hd_test_tensor(shared_ctx, rows, cols, NULL);
        hd_test_expect_ran_on(
            shared_ctx, hd_add_rms_norm_backward(shared_ctx, th, tw, tdy, tdres, 1e-6f, tdh, NULL),
            b, "add_rms_norm_backward for finite differences");
        float *dh = hd_test_read(tdh);
        for (size_t i = 0; i < rows; i++)
            for (size_t j = 0; j < cols; j += 5) {
                size_t at = i * cols;
                float step = 0x1p-12f;
                float up = x[at + j] + step, down = x[at + j] - step;
                double fd =
                    (norm_objective(cols, x + at, r + at, w, 1e-6f, dy + at, dres + at, j, up) -
                     norm_objective(cols, x + at, r + at, w, 1e-6f, dy + at, dres + at, j, down)) /
                    ((double)up - down);
                if (fabs(fd - dh[at + j]) > 1e-4 * (1.0 + fabs(fd)))
                    fail_msg("add_rms_norm_backward on %s: dh[%zu][%zu] = %.7g, finite "
                             "difference %.7g",
                             hd_backend_name(b), i, j, (double)dh[at + j], fd);
            }
        free(dh);
        hd_tensor *t[] = {th, tw, tdy, tdres, tdh};
        for (size_t k = 0; k < 5; k++)
            hd_tensor_destroy(t[k]);
        hd_test_release_backend(shared_ctx, HD_OP_ADD_RMS_NORM_BACKWARD);
    }
    free(x);
    free(r);
    free(w);
    free(dy);
    free(dres);
    free(h);
    (void)state;
}

/* No rows: dweight, a sum over nothing, is zeroed; dh is empty. */
static void test_add_rms_norm_backward_of_no_rows_zeroes_dweight(void **state)
{
    float sevens[5] = {7, 7, 7, 7, 7};
    hd_tensor *e = hd_test_tensor(shared_ctx, 0, 5, NULL),
              *dh = hd_test_tensor(shared_ctx, 0, 5, NULL);
    hd_tensor *w = hd_test_tensor(shared_ctx, 1, 5, sevens),
              *dw = hd_test_tensor(shared_ctx, 1, 5, sevens);
    assert_int_equal(hd_add_rms_norm_backward(shared_ctx, e, w, e, NULL, 1e-6f, dh, dw), HD_OK);
    float *got = hd_test_read(dw);
    expect_zeros("dweight of no rows", got, 5);
    free(got);
    hd_tensor_destroy(e);
    hd_tensor_destroy(dh);
    hd_tensor_destroy(w);
    hd_tensor_destroy(dw);
    (void)state;
}

/* ---- cross-entropy ---- */

#define IGNORE (-100)

typedef enum logit_dist {
    LOGITS_NORMAL, /* U(-4, 4) */
    LOGITS_WIDE,   /* U(-1e4, 1e4) */
    LOGITS_MASKED, /* U(-4, 4), a third of each row -inf */
} logit_dist;

typedef enum ignored_rows {
    IGNORE_SOME, /* every fourth row, from the second */
    IGNORE_ALL,
    IGNORE_NONE,
} ignored_rows;

typedef struct ce_case {
    size_t rows, vocab;
    logit_dist dist;
    ignored_rows ignored;
    bool masked_target; /* row 0's target is masked: its loss +inf */
    bool in_place, dlogits;
    bool id_tensor; /* the targets as an int32 tensor (hd_cross_entropy_ids) */
} ce_case;

typedef struct ce_data {
    size_t rows, vocab;
    float *logits;
    int32_t *targets;
    double loss_ref, loss_mag;
    double *dl_ref, *dl_mag; /* the tolerance folded in */
} ce_data;

static int32_t *random_targets(hd_rng *rng, size_t rows, size_t vocab, ignored_rows ignored)
{
    int32_t *t = malloc((rows > 0 ? rows : 1) * sizeof *t);
    assert_non_null(t);
    for (size_t i = 0; i < rows; i++) {
        t[i] = (int32_t)hd_test_uniform(rng, 0.0f, (float)vocab - 0.01f);
        if (ignored == IGNORE_ALL || (ignored == IGNORE_SOME && i % 4 == 1))
            t[i] = IGNORE;
    }
    return t;
}

static float *random_logits(hd_rng *rng, const ce_case *c, const int32_t *targets)
{
    size_t v = c->vocab;
    float *x = hd_test_floats(c->rows * v);
    for (size_t i = 0; i < c->rows; i++)
        for (size_t j = 0; j < v; j++) {
            float *e = &x[i * v + j];
            *e = c->dist == LOGITS_WIDE ? hd_test_uniform(rng, -1e4f, 1e4f)
                                        : hd_test_uniform(rng, -4.0f, 4.0f);
            bool target = targets[i] == (int32_t)j;
            if (c->dist == LOGITS_MASKED && j % 3 == i % 3 && !target)
                *e = -INFINITY;
        }
    if (c->masked_target && c->rows > 0 && targets[0] != IGNORE)
        x[targets[0]] = -INFINITY;
    return x;
}

/* A row's largest logit m (at least -FLT_MAX), sum s of exp(x - m) and A = sum p |x - m|. */
static void row_stats(const float *x, size_t v, double *m, double *s, double *a)
{
    *m = -FLT_MAX;
    for (size_t j = 0; j < v; j++)
        *m = x[j] > *m ? x[j] : *m;
    *s = 0.0;
    for (size_t j = 0; j < v; j++)
        *s += exp((double)x[j] - *m);
    *a = 0.0;
    for (size_t j = 0; j < v; j++) {
        double p = exp((double)x[j] - *m) / *s;
        *a += p > 0.0 ? p * fabs((double)x[j] - *m) : 0.0;
    }
}

static size_t counted_rows(const int32_t *targets, size_t rows)
{
    size_t count = 0;
    for (size_t i = 0; i < rows; i++)
        count += targets[i] != IGNORE;
    return count;
}

/* The magnitude of dlogits[j] of a row (before the limit): inv_count (p_j (1 + |x_j - m| + A
 * + extra) + [j == t]), with a floor where exp(x - m) falls below e^-87 (0 on the CPU). */
static double dlogit_mag(double x, double m, double s, double a, double extra, bool target,
                         double inv)
{
    double p = exp(x - m) / s;
    double spread = p > 0.0 ? p * (1.0 + fabs(x - m) + a + extra) : 0.0;
    return inv * (spread + (target ? 1.0 : 0.0)) + 0x1p-125 * inv / U;
}

static void ce_reference(ce_data *d)
{
    size_t rows = d->rows, v = d->vocab, n = rows * v;
    double dl_limit = 8.0 + 2.0 * sqrt((double)v);
    d->dl_ref = hd_test_doubles(n);
    d->dl_mag = hd_test_doubles(n);
    hd__ref_cross_entropy(rows, v, d->logits, d->targets, IGNORE, NULL, NULL, d->dl_ref,
                          &d->loss_ref);
    size_t count = counted_rows(d->targets, rows);
    double inv = 1.0 / (double)count, mag = 0.0;
    for (size_t i = 0; i < rows; i++) {
        const float *x = d->logits + i * v;
        int32_t t = d->targets[i];
        double m, s, a;
        row_stats(x, v, &m, &s, &a);
        if (t != IGNORE)
            mag += fabs(m - x[t]) + fabs(log(s)) + a + 1.0;
        for (size_t j = 0; j < v; j++)
            d->dl_mag[i * v + j] =
                t == IGNORE ? 0.0 : dl_limit * dlogit_mag(x[j], m, s, a, 0.0, t == (int32_t)j, inv);
    }
    d->loss_mag = mag * inv * (dl_limit + sqrt((double)rows));
}

/* A case's random targets and logits, with the reference's values and bounds. */
static ce_data ce_make(const ce_case *c, hd_rng *rng)
{
    ce_data d = {.rows = c->rows, .vocab = c->vocab};
    d.targets = random_targets(rng, c->rows, c->vocab, c->ignored);
    d.logits = random_logits(rng, c, d.targets);
    ce_reference(&d);
    return d;
}

static void ce_free(ce_data *d)
{
    free(d->logits);
    free(d->targets);
    free(d->dl_ref);
    free(d->dl_mag);
}

/* The message of check_ce_on's last refusal. */
static char ce_refusal[512];

/* On backend b, through the public call, or with variant (not NULL) as the tuner runs it;
 * false where the variant was refused (HD_ERR_UNSUPPORTED, HD_ERR_BUILD; its message in
 * ce_refusal): nothing to check. */
static bool check_ce_on(hd_backend b, const ce_case *c, const ce_data *d, const char *variant)
{
    size_t n = c->rows * c->vocab;
    hd_tensor *tl = hd_test_tensor(shared_ctx, c->rows, c->vocab, d->logits);
    hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
    hd_tensor *tdl = !c->dlogits   ? NULL
                     : c->in_place ? tl
                                   : hd_test_tensor(shared_ctx, c->rows, c->vocab, NULL);
    char what[240];
    snprintf(what, sizeof what, "cross_entropy%s on %s (%s), %zu x %zu, logits %d, ignored %d%s%s",
             c->id_tensor ? "_ids" : "", hd_backend_name(b),
             variant != NULL ? variant : "its choice", c->rows, c->vocab, (int)c->dist,
             (int)c->ignored, c->in_place ? ", in place" : "", c->dlogits ? "" : ", no dlogits");
    hd_status s;
    if (variant == NULL && c->id_tensor) {
        hd_tensor *tt = hd_test_ids(shared_ctx, c->rows, d->targets);
        s = hd_cross_entropy_ids(shared_ctx, tl, tt, IGNORE, tloss, tdl);
        hd_tensor_destroy(tt); /* after the call is queued: the device's work keeps its buffer */
    } else if (variant == NULL) {
        s = hd_cross_entropy(shared_ctx, tl, d->targets, IGNORE, tloss, tdl);
    } else {
        const hd_tensor *tensors[] = {tl, tloss, tdl};
        hd_op_params p = {.ids = d->targets, .ignore_index = IGNORE};
        hd_call call;
        assert_int_equal(hd__call_prepare(shared_ctx, HD_OP_CROSS_ENTROPY, tensors, &p, &call),
                         HD_OK);
        s = hd__call_run_on(shared_ctx, b, &call, variant);
    }
    bool refused = variant != NULL && (s == HD_ERR_UNSUPPORTED || s == HD_ERR_BUILD);
    if (refused)
        snprintf(ce_refusal, sizeof ce_refusal, "%s: %s", hd_status_name(s),
                 hd_context_last_error(shared_ctx));
    if (!refused) {
        hd_test_expect_ran_on(shared_ctx, s, b, what);
        float *loss = hd_test_read(tloss);
        expect_within(what, loss, &d->loss_ref, &d->loss_mag, 1, 1.0);
        free(loss);
    }
    if (!refused && tdl != NULL) {
        float *dl = hd_test_read(tdl);
        expect_within(what, dl, d->dl_ref, d->dl_mag, n, 1.0);
        if (c->ignored == IGNORE_ALL)
            expect_zeros(what, dl, n);
        free(dl);
    }
    if (tdl != NULL && tdl != tl)
        hd_tensor_destroy(tdl);
    hd_tensor_destroy(tl);
    hd_tensor_destroy(tloss);
    return !refused;
}

static void check_ce(const ce_case *c, hd_rng *rng)
{
    ce_data d = ce_make(c, rng);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        if (!hd_test_use_backend(shared_ctx, HD_OP_CROSS_ENTROPY, train_backends[bi]))
            continue;
        check_ce_on(train_backends[bi], c, &d, NULL);
        hd_test_release_backend(shared_ctx, HD_OP_CROSS_ENTROPY);
    }
    ce_free(&d);
}

/* Vocabularies of 1 to several thousand (odd, prime, multiples of 4) and those of GPT-2 (odd)
 * and Gemma (256000: where clusters run, groups of 512 hold its rows), ignored rows, dlogits in
 * place, apart and absent. */
static void test_cross_entropy_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(11);
    const ce_case cases[] = {
        {1, 1, LOGITS_NORMAL, IGNORE_NONE, false, false, true, false},
        {9, 1, LOGITS_NORMAL, IGNORE_SOME, false, true, true, true},
        {3, 5, LOGITS_NORMAL, IGNORE_SOME, false, true, true, false},
        {7, 37, LOGITS_NORMAL, IGNORE_SOME, false, false, true, true},
        {5, 1000, LOGITS_NORMAL, IGNORE_SOME, false, false, false, false},
        {33, 512, LOGITS_NORMAL, IGNORE_NONE, false, true, true, true},
        {3, 3001, LOGITS_NORMAL, IGNORE_SOME, false, false, true, false},
        {2, 8192, LOGITS_NORMAL, IGNORE_NONE, false, true, true, false},
        {2, 50257, LOGITS_NORMAL, IGNORE_NONE, false, true, true, true},
        {3, 256000, LOGITS_WIDE, IGNORE_SOME, false, false, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_ce(&cases[i], &rng);
    (void)state;
}

/* Logits of +-1e4, -inf masks (a masked target: an infinite loss, finite gradients), and every
 * target ignored: a NaN loss and zero gradients, as PyTorch's. */
static void test_cross_entropy_at_extreme_logits(void **state)
{
    hd_rng rng = hd_test_rng(12);
    const ce_case cases[] = {
        {4, 4099, LOGITS_WIDE, IGNORE_SOME, false, true, true, false},
        {3, 64, LOGITS_WIDE, IGNORE_NONE, false, false, true, false},
        {17, 3001, LOGITS_MASKED, IGNORE_SOME, false, false, true, true},
        {3, 4096, LOGITS_MASKED, IGNORE_NONE, true, true, true, false},
        {5, 37, LOGITS_MASKED, IGNORE_SOME, true, false, true, false},
        {6, 2048, LOGITS_NORMAL, IGNORE_ALL, false, true, true, false},
        {3, 7, LOGITS_NORMAL, IGNORE_ALL, false, false, true, true},
        {2, 11, LOGITS_NORMAL, IGNORE_ALL, false, false, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_ce(&cases[i], &rng);
    (void)state;
}

#ifdef HD_HAVE_OPENCL
/* The cluster kernel (a row held in the registers of CLUSTER work-groups, with LOCAL in their
 * local memory too): every variant the tuner lists and others, on vocabularies of 1 to several
 * thousand that leave ranks empty or short, in place and apart, with ignored rows, +-1e4 logits and
 * -inf masks. Where the device has no thread-block clusters, one work-group plays each
 * (CLUSTER_EMULATE) and CLUSTER=1 runs as it is. */
static void test_cross_entropy_cluster_variants_match_reference(void **state)
{
    hd_fused *f = fused_state_or_skip();
    bool emulating = f->clusters < HD_RT_CLUSTER_MAX;
    f->clusters_emulated = emulating;
    hd_rng rng = hd_test_rng(14);
    const ce_case cases[] = {
        {1, 1, LOGITS_NORMAL, IGNORE_NONE, false, false, true, false},
        {3, 5, LOGITS_NORMAL, IGNORE_SOME, false, true, true, false},
        {7, 37, LOGITS_NORMAL, IGNORE_SOME, false, false, true, false},
        {5, 1000, LOGITS_NORMAL, IGNORE_SOME, false, false, false, false},
        {9, 3001, LOGITS_WIDE, IGNORE_SOME, false, true, true, false},
        {4, 8192, LOGITS_MASKED, IGNORE_NONE, true, true, true, false},
        {3, 7, LOGITS_NORMAL, IGNORE_ALL, false, true, true, false},
    };
    static const char *const extra[] = {"CLUSTER=1 WG=64",
                                        "CLUSTER=2 WG=32",
                                        "CLUSTER=4 WG=128 CACHE=16",
                                        "CLUSTER=8 WG=32 VEC=1",
                                        "CLUSTER=8 WG=64 CACHE=4",
                                        "CLUSTER=4 WG=64 LOCAL=1",
                                        "CLUSTER=1 WG=64 CACHE=2 LOCAL=1",
                                        "CLUSTER=8 WG=32 CACHE=1 LOCAL=1 VEC=1"};
    size_t ran = 0, tried = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ce_case *c = &cases[i];
        ce_data d = ce_make(c, &rng);
        hd_shape shape = {.dim = {c->rows, c->vocab}};
        const char *variants[40];
        size_t count = hd__backend_variants(shared_ctx, HD_BACKEND_FUSED, HD_OP_CROSS_ENTROPY,
                                            &shape, variants, 32);
        for (size_t e = 0; e < sizeof extra / sizeof extra[0]; e++)
            variants[count++] = extra[e];
        for (size_t v = 0; v < count; v++) {
            if (strstr(variants[v], "CLUSTER=") == NULL)
                continue;
            tried++;
            if (check_ce_on(HD_BACKEND_FUSED, c, &d, variants[v])) {
                ran++;
                continue;
            }
            /* refused only where a row passes the registers, or the device's work-groups (the
             * runtime's, or the kernel's on its registers) */
            if (strstr(ce_refusal, "ERR_UNSUPPORTED") == NULL ||
                (strstr(ce_refusal, "logits is more than") == NULL &&
                 strstr(ce_refusal, "work-group") == NULL &&
                 strstr(ce_refusal, "work-items per group") == NULL))
                fail_msg("cross_entropy %zu x %zu, %s: refused otherwise: %s", c->rows, c->vocab,
                         variants[v], ce_refusal);
        }
        ce_free(&d);
    }
    assert_true(ran * 2 > tried);
    (void)state;
}

/* What a test emulates or caps on the fused state ends with it, failed or not. */
/* The clusters the fused state had before a test claimed some (where clusters_claimed). */
static bool clusters_claimed;
static size_t clusters_before;

/* The registers the rule leaves each work-item of clusters of 8 groups of 256 at a
 * vocabulary of `need` vectors a work-item past 8: the fewest, in steps of 4, that leave the
 * rest (16 bytes a vector) in local memory two work-groups share, each beside its own 2 KiB;
 * 0 where none do. */
static size_t rule_registers(const hd_fused *f, size_t need)
{
    size_t half = (f->stage_mem > 0 ? f->stage_mem : f->local_mem) / 2;
    for (size_t cache = 4; cache <= 16; cache += 4)
        if (cache >= need || (need - cache) * 256 * 16 + 256 * 8 <= half)
            return cache;
    return 0;
}

/* The rule where no variant is named. A vocabulary of Llama 3's 128256 words is 16 vectors a
 * work-item in clusters of 8 work-groups of 256, Gemma's 256000 are 32: past 8, the cluster
 * kernel keeps 4 of them in registers, or 8, 12 or 16 where two work-groups' local memory
 * would not hold the rest (NVIDIA's OpenCL gives 48 KiB, the CUDA runtime 227), and the rest
 * in local memory. Run here as a cluster of 8 played by one work-group, against the float64
 * reference, in place and apart. */
static void test_cross_entropy_rule_holds_long_rows_in_local_memory(void **state)
{
    hd_fused *f = fused_state_or_skip();
    clusters_before = f->clusters;
    clusters_claimed = true;
    if (f->clusters < HD_RT_CLUSTER_MAX) {
        f->clusters = HD_RT_CLUSTER_MAX;
        f->clusters_emulated = true;
    }
    const size_t vocabs[] = {128256, 256000}, needs[] = {16, 32};
    hd_fused_params p;
    size_t held;
    for (size_t i = 0; i < 2; i++) {
        size_t cache = rule_registers(f, needs[i]);
        assert_int_equal(hd__fused_cross_entropy_params(f, shared_ctx, NULL, vocabs[i], &p, &held),
                         HD_OK);
        assert_int_equal(p.cluster, HD_RT_CLUSTER_MAX);
        if (cache > 0) {
            assert_int_equal(p.wg, 256);
            assert_int_equal(p.cache, cache);
            assert_int_equal(held, needs[i] - cache);
        } else { /* registers alone, in groups of 256 or 512 */
            assert_int_equal(held, 0);
            assert_int_equal((size_t)p.cache * (size_t)p.wg, needs[i] * 256);
        }
    }
    /* GPT-2's 50257 words take vectors of 1, which cp.async does not copy: registers alone, in
     * groups of 512 (13 vectors a work-item) */
    assert_int_equal(hd__fused_cross_entropy_params(f, shared_ctx, NULL, 50257, &p, &held), HD_OK);
    assert_int_equal(p.cluster, HD_RT_CLUSTER_MAX);
    assert_int_equal(p.vec, 1);
    assert_int_equal(p.wg, 512);
    assert_int_equal(p.cache, 13);
    assert_int_equal(held, 0);
    /* a row of 32000 words stays in registers: 4 vectors a work-item */
    assert_int_equal(hd__fused_cross_entropy_params(f, shared_ctx, "", 32000, &p, &held), HD_OK);
    assert_int_equal(p.wg, 256);
    assert_int_equal(p.cache, 4);
    assert_int_equal(held, 0);
    hd_rng rng = hd_test_rng(16);
    const ce_case cases[] = {
        {3, 128256, LOGITS_NORMAL, IGNORE_SOME, false, false, true, false},
        {2, 128256, LOGITS_WIDE, IGNORE_NONE, false, true, true, false},
        {2, 256000, LOGITS_MASKED, IGNORE_NONE, false, true, true, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ce_case *c = &cases[i];
        ce_data d = ce_make(c, &rng);
        /* registers alone in groups of 512 may pass what the device runs of the kernel (as
         * under NVIDIA's OpenCL at 256000 words, where no cluster would run it) */
        if (!check_ce_on(HD_BACKEND_FUSED, c, &d, "") &&
            (rule_registers(f, ((c->vocab / 4 + 7) / 8 + 255) / 256) != 0 ||
             strstr(ce_refusal, "ERR_UNSUPPORTED") == NULL ||
             strstr(ce_refusal, "work-items per group") == NULL))
            fail_msg("cross_entropy %zu x %zu by the rule: %s", c->rows, c->vocab, ce_refusal);
        ce_free(&d);
    }
    (void)state;
}

static int end_emulation(void **state)
{
    if (hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED)) {
        hd_fused *f = shared_ctx->backend_state[HD_BACKEND_FUSED];
        if (clusters_claimed)
            f->clusters = clusters_before;
        clusters_claimed = false;
        f->clusters_emulated = false;
        f->resident_emulated = false;
        f->resident_cap = 0;
    }
    (void)state;
    return 0;
}

/* CLUSTER's refusals: more work-groups than the runtime's clusters (only where it has none),
 * a row longer than the registers hold, or than registers and local memory hold with LOCAL,
 * ROWS beside it, and LOCAL without it. */
static void test_cross_entropy_cluster_refusals(void **state)
{
    hd_fused *f = fused_state_or_skip();
    hd_rng rng = hd_test_rng(15);
    ce_case c = {2, 4096, LOGITS_NORMAL, IGNORE_NONE, false, false, true, false};
    ce_data d = {.rows = c.rows, .vocab = c.vocab};
    d.targets = random_targets(&rng, c.rows, c.vocab, c.ignored);
    d.logits = random_logits(&rng, &c, d.targets);
    hd_tensor *tl = hd_test_tensor(shared_ctx, c.rows, c.vocab, d.logits);
    hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
    const hd_tensor *tensors[] = {tl, tloss, NULL};
    hd_op_params p = {.ids = d.targets, .ignore_index = IGNORE};
    hd_call call;
    assert_int_equal(hd__call_prepare(shared_ctx, HD_OP_CROSS_ENTROPY, tensors, &p, &call), HD_OK);
    if (f->clusters < 2) {
        assert_int_equal(hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "CLUSTER=2 WG=64"),
                         HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(shared_ctx), "thread-block clusters"));
    }
    /* 1024 vectors of 4: more than 2 work-groups of 32 hold in 8 vectors each */
    assert_int_equal(
        hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "CLUSTER=1 WG=32 CACHE=8"),
        HD_ERR_UNSUPPORTED);
    assert_non_null(strstr(hd_context_last_error(shared_ctx), "more than CLUSTER=1"));
    assert_int_equal(hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "CLUSTER=1 WG=256 ROWS=4"),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(shared_ctx), "ROWS=4"));
    assert_int_equal(hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "CLUSTER=3"),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "WG=256 LOCAL=1"),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(shared_ctx), "name CLUSTER too"));
    /* 1024 vectors, 1 a work-item in registers, 31 in local memory: 15872 bytes for 32 */
    size_t local_mem = f->local_mem, stage_mem = f->stage_mem;
    f->local_mem = 15871 + 32 * 2 * sizeof(float);
    f->stage_mem = 0;
    hd_status s =
        hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "CLUSTER=1 WG=32 CACHE=1 LOCAL=1");
    f->local_mem = local_mem;
    f->stage_mem = stage_mem;
    assert_int_equal(s, HD_ERR_UNSUPPORTED);
    assert_non_null(strstr(hd_context_last_error(shared_ctx), "31 in local memory (15872 bytes"));
    hd_tensor_destroy(tl);
    hd_tensor_destroy(tloss);
    free(d.logits);
    free(d.targets);
    (void)state;
}

#endif

/* The reference's mean loss with logit (i, j) set to xj. */
static double ce_objective(const ce_data *d, size_t at, float xj)
{
    float keep = d->logits[at];
    d->logits[at] = xj;
    double loss;
    hd__ref_cross_entropy(d->rows, d->vocab, d->logits, d->targets, IGNORE, NULL, NULL, NULL,
                          &loss);
    d->logits[at] = keep;
    return loss;
}

/* Each backend's dlogits against central differences of the reference's mean loss. */
static void test_cross_entropy_gradient_matches_finite_differences(void **state)
{
    hd_rng rng = hd_test_rng(13);
    const ce_case c = {5, 23, LOGITS_NORMAL, IGNORE_SOME, false, false, true, false};
    ce_data d = {.rows = c.rows, .vocab = c.vocab};
    d.targets = random_targets(&rng, c.rows, c.vocab, c.ignored);
    d.logits = random_logits(&rng, &c, d.targets);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = train_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_CROSS_ENTROPY, b))
            continue;
        hd_tensor *tl = hd_test_tensor(shared_ctx, c.rows, c.vocab, d.logits);
        hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
        hd_test_expect_ran_on(shared_ctx,
                              hd_cross_entropy(shared_ctx, tl, d.targets, IGNORE, tloss, tl), b,
                              "cross_entropy for finite differences");
        float *dl = hd_test_read(tl);
        for (size_t at = 0; at < c.rows * c.vocab; at += 3) {
            float step = 0x1p-10f, up = d.logits[at] + step, down = d.logits[at] - step;
            double fd =
                (ce_objective(&d, at, up) - ce_objective(&d, at, down)) / ((double)up - down);
            if (fabs(fd - dl[at]) > 1e-5 * (1.0 + fabs(fd)))
                fail_msg("cross_entropy on %s: dlogits[%zu] = %.7g, finite difference %.7g",
                         hd_backend_name(b), at, (double)dl[at], fd);
        }
        free(dl);
        hd_tensor_destroy(tl);
        hd_tensor_destroy(tloss);
        hd_test_release_backend(shared_ctx, HD_OP_CROSS_ENTROPY);
    }
    free(d.logits);
    free(d.targets);
    (void)state;
}

/* ---- cross-entropy of the LM head ---- */

typedef struct lm_case {
    size_t rows, dim, vocab;
    ignored_rows ignored;
    bool dh;
    bool id_tensor; /* the targets as an int32 tensor (hd_linear_cross_entropy_ids) */
} lm_case;

typedef struct lm_data {
    size_t rows, dim, vocab;
    float *h, *w;
    int32_t *targets;
    double loss_ref, loss_mag;
    double *dh_ref, *dh_mag; /* the tolerance folded in */
} lm_data;

/* Row h's logits h * w^T in double and rounded to float; returns the largest sum of |h w|. */
static double lm_row_logits(const lm_data *d, const float *h, double *zd, float *zf)
{
    double most = 0.0;
    for (size_t j = 0; j < d->vocab; j++) {
        const float *w = d->w + j * d->dim;
        double s = 0.0, a = 0.0;
        for (size_t k = 0; k < d->dim; k++) {
            s += (double)h[k] * w[k];
            a += fabs((double)h[k] * w[k]);
        }
        zd[j] = s;
        zf[j] = (float)s;
        most = a > most ? a : most;
    }
    return most;
}

typedef struct lm_row {
    float *zf;
    double *zd, *dl;
} lm_row;

/* Row i's loss into *loss_sum and its terms of dh and of the magnitudes; inv: 1 / counted. */
static void lm_reference_row(lm_data *d, size_t i, double inv, lm_row *r, double *loss_sum,
                             double *loss_mag)
{
    size_t v = d->vocab, dim = d->dim;
    int32_t t = d->targets[i];
    if (t == IGNORE)
        return;
    double g = lm_row_logits(d, d->h + i * dim, r->zd, r->zf), loss_i;
    hd__ref_cross_entropy(1, v, r->zf, &t, IGNORE, &loss_i, NULL, r->dl, NULL);
    double m, s, a, extra = 2.0 * (double)(dim + 1) * g;
    row_stats(r->zf, v, &m, &s, &a);
    *loss_sum += loss_i;
    *loss_mag += fabs(m - r->zf[t]) + fabs(log(s)) + a + 1.0 + extra;
    double ce_limit = 8.0 + 2.0 * sqrt((double)v), gemm_limit = (double)(v + 1);
    for (size_t j = 0; j < v; j++) {
        double dlj = r->dl[j] * inv;
        double mag = ce_limit * dlogit_mag(r->zf[j], m, s, a, extra, t == (int32_t)j, inv) +
                     gemm_limit * fabs(dlj);
        const float *w = d->w + j * dim;
        for (size_t k = 0; k < dim; k++) {
            d->dh_ref[i * dim + k] += dlj * w[k];
            d->dh_mag[i * dim + k] += fabs((double)w[k]) * mag;
        }
    }
}

/* The reference row by row (never the T x V logits whole): each row's cross-entropy of its
 * logits rounded to float, dh = dlogits * w in double. */
static void lm_reference(lm_data *d)
{
    size_t rows = d->rows, n = rows * d->dim;
    d->dh_ref = hd_test_doubles(n);
    d->dh_mag = hd_test_doubles(n);
    for (size_t i = 0; i < n; i++)
        d->dh_ref[i] = d->dh_mag[i] = 0.0;
    lm_row r = {hd_test_floats(d->vocab), hd_test_doubles(d->vocab), hd_test_doubles(d->vocab)};
    double inv = 1.0 / (double)counted_rows(d->targets, rows), sum = 0.0, mag = 0.0;
    for (size_t i = 0; i < rows; i++)
        lm_reference_row(d, i, inv, &r, &sum, &mag);
    d->loss_ref = sum * inv;
    d->loss_mag = mag * inv * (8.0 + 2.0 * sqrt((double)d->vocab) + sqrt((double)rows));
    free(r.zf);
    free(r.zd);
    free(r.dl);
}

static void lm_free(lm_data *d)
{
    free(d->h);
    free(d->w);
    free(d->targets);
    free(d->dh_ref);
    free(d->dh_mag);
}

static void check_lm_on(hd_backend b, const lm_case *c, const lm_data *d)
{
    hd_tensor *th = hd_test_tensor(shared_ctx, c->rows, c->dim, d->h);
    hd_tensor *tw = hd_test_tensor(shared_ctx, c->vocab, c->dim, d->w);
    hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
    hd_tensor *tdh = c->dh ? hd_test_tensor(shared_ctx, c->rows, c->dim, NULL) : NULL;
    char what[200];
    snprintf(what, sizeof what, "linear_cross_entropy%s on %s, %zu x %zu, vocab %zu, ignored %d%s",
             c->id_tensor ? "_ids" : "", hd_backend_name(b), c->rows, c->dim, c->vocab,
             (int)c->ignored, c->dh ? "" : ", no dh");
    hd_tensor *tt = c->id_tensor ? hd_test_ids(shared_ctx, c->rows, d->targets) : NULL;
    hd_test_expect_ran_on(
        shared_ctx,
        c->id_tensor ? hd_linear_cross_entropy_ids(shared_ctx, th, tw, tt, IGNORE, tloss, tdh)
                     : hd_linear_cross_entropy(shared_ctx, th, tw, d->targets, IGNORE, tloss, tdh),
        b, what);
    hd_tensor_destroy(tt);
    float *loss = hd_test_read(tloss);
    expect_within(what, loss, &d->loss_ref, &d->loss_mag, 1, 1.0);
    free(loss);
    if (tdh != NULL) {
        float *dh = hd_test_read(tdh);
        expect_within(what, dh, d->dh_ref, d->dh_mag, c->rows * c->dim, 1.0);
        free(dh);
    }
    hd_tensor *t[] = {th, tw, tloss, tdh};
    for (size_t i = 0; i < 4; i++)
        hd_tensor_destroy(t[i]);
}

static void lm_inputs(const lm_case *c, hd_rng *rng, lm_data *d)
{
    *d = (lm_data){.rows = c->rows, .dim = c->dim, .vocab = c->vocab};
    d->h = scaled_random(rng, c->rows * c->dim, 1.0);
    d->w = scaled_random(rng, c->vocab * c->dim, 2.0 / sqrt((double)c->dim));
    d->targets = random_targets(rng, c->rows, c->vocab, c->ignored);
}

static void check_lm(const lm_case *c, hd_rng *rng)
{
    lm_data d;
    lm_inputs(c, rng, &d);
    lm_reference(&d);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        if (!hd_test_use_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY, train_backends[bi]))
            continue;
        check_lm_on(train_backends[bi], c, &d);
        hd_test_release_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY);
    }
    lm_free(&d);
}

/* Against the reference's cross-entropy of h * w^T: a vocabulary of one, odd and prime sizes,
 * dh present and absent, every target ignored. */
static void test_linear_cross_entropy_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(21);
    const lm_case cases[] = {
        {1, 1, 1, IGNORE_NONE, true, false},      {3, 5, 1, IGNORE_SOME, true, true},
        {5, 16, 300, IGNORE_SOME, true, false},   {7, 33, 1001, IGNORE_SOME, false, false},
        {19, 64, 4099, IGNORE_NONE, true, false}, {1, 128, 3001, IGNORE_NONE, true, false},
        {6, 8, 50, IGNORE_ALL, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_lm(&cases[i], &rng);
    (void)state;
}

/* Llama 3's vocabulary and enough tokens that they go in two chunks of logits (the backends
 * hold at most 64 MiB of them at once), the last one shorter. */
static void test_linear_cross_entropy_in_several_chunks(void **state)
{
    hd_rng rng = hd_test_rng(22);
    const lm_case c = {150, 3, 128256, IGNORE_SOME, true, true};
    check_lm(&c, &rng);
    (void)state;
}

#ifdef HD_HAVE_OPENCL
/* The fused backend's LM head in several chunks of logits, its budget lowered to a few rows'
 * worth: chunks of whole 128-row tiles and a shorter last one (300 rows, 130 a chunk at most:
 * 128, 128, 44), equal chunks where whole tiles do not fit (250 rows, 100 at most: 84, 84,
 * 82), a row at a time (a budget below one row), dh absent, every target ignored. */
static void test_linear_cross_entropy_fused_chunks(void **state)
{
    hd_fused *f = fused_state_or_skip();
    size_t saved = f->logits_bytes;
    hd_rng rng = hd_test_rng(24);
    const struct {
        lm_case c;
        size_t chunk_rows, want; /* the budget in rows of logits; the chunk it gives */
    } cases[] = {
        {{300, 16, 1001, IGNORE_SOME, true, false}, 130, 128},
        {{250, 9, 1001, IGNORE_SOME, true, false}, 100, 84},
        {{250, 9, 1001, IGNORE_NONE, false, false}, 100, 84},
        {{5, 7, 300, IGNORE_SOME, true, false}, 0, 1},
        {{40, 5, 77, IGNORE_ALL, true, false}, 16, 14},
    };
    assert_true(hd_test_use_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY, HD_BACKEND_FUSED));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const lm_case *c = &cases[i].c;
        f->logits_bytes = cases[i].chunk_rows * c->vocab * sizeof(float);
        assert_int_equal(hd__fused_lm_head_chunk_rows(c->rows, c->vocab, f->logits_bytes),
                         cases[i].want);
        lm_data d;
        lm_inputs(c, &rng, &d);
        lm_reference(&d);
        check_lm_on(HD_BACKEND_FUSED, c, &d);
        lm_free(&d);
    }
    hd_test_release_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY);
    f->logits_bytes = saved;
    (void)state;
}

/* The LM head's products on the device runtime's vendor GEMM (cuBLASLt on the CUDA runtime),
 * where it has one: its variant VENDOR, listed for the tuner only there, in one chunk and in
 * several, against the reference, and the rule's call likewise (the rule takes it there);
 * where it has none (OpenCL), VENDOR is refused with the reason, dh left as it was. */
static void test_linear_cross_entropy_on_the_vendor_gemm(void **state)
{
    hd_fused *f = fused_state_or_skip();
    size_t saved = f->logits_bytes;
    bool ready = hd__rt_vendor_gemm_ready(f->rt, shared_ctx);
    hd_rng rng = hd_test_rng(26);
    const lm_case c = {37, 24, 1031, IGNORE_SOME, true, false};
    lm_data d;
    lm_inputs(&c, &rng, &d);
    lm_reference(&d);
    float *before = hd_test_random(&rng, c.rows * c.dim, -1.0f, 1.0f);
    hd_tensor *th = hd_test_tensor(shared_ctx, c.rows, c.dim, d.h);
    hd_tensor *tw = hd_test_tensor(shared_ctx, c.vocab, c.dim, d.w);
    hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
    hd_tensor *tdh = hd_test_tensor(shared_ctx, c.rows, c.dim, before);
    const hd_tensor *tensors[] = {th, tw, tloss, tdh};
    hd_op_params p = {.ids = d.targets, .ignore_index = IGNORE};
    hd_call call;
    assert_int_equal(hd__call_prepare(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY, tensors, &p, &call),
                     HD_OK);
    const char *variants[64];
    size_t count = hd__backend_variants(shared_ctx, HD_BACKEND_FUSED, HD_OP_LINEAR_CROSS_ENTROPY,
                                        &call.shape, variants, 64);
    bool listed = false;
    for (size_t i = 0; i < count; i++)
        listed = listed || strcmp(variants[i], "VENDOR") == 0;
    assert_int_equal(listed, ready);
    /* what a tuning cache's record naming it meets when the cache is read */
    assert_int_equal(hd__backend_check_variant(shared_ctx, HD_BACKEND_FUSED,
                                               HD_OP_LINEAR_CROSS_ENTROPY, &call.shape, "VENDOR"),
                     ready ? HD_OK : HD_ERR_UNSUPPORTED);
    if (!ready) {
        assert_int_equal(hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, "VENDOR"),
                         HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(shared_ctx), "the device runtime has none"));
        hd_test_expect_unchanged("dh after VENDOR's refusal", tdh, before);
    }
    /* one chunk, then chunks of 10 rows (10, 10, 10, 7) */
    for (size_t chunk_rows = 0; ready && chunk_rows <= 10; chunk_rows += 10) {
        f->logits_bytes = chunk_rows > 0 ? chunk_rows * c.vocab * sizeof(float) : saved;
        for (int rule = 0; rule < 2; rule++) {
            char what[120];
            snprintf(what, sizeof what, "LM head on the vendor GEMM (%s), chunks of %zu rows",
                     rule ? "the rule" : "VENDOR", chunk_rows > 0 ? chunk_rows : c.rows);
            hd_test_expect_ran_on(
                shared_ctx,
                hd__call_run_on(shared_ctx, HD_BACKEND_FUSED, &call, rule ? NULL : "VENDOR"),
                HD_BACKEND_FUSED, what);
            float *loss = hd_test_read(tloss), *dh = hd_test_read(tdh);
            expect_within(what, loss, &d.loss_ref, &d.loss_mag, 1, 1.0);
            expect_within(what, dh, d.dh_ref, d.dh_mag, c.rows * c.dim, 1.0);
            free(loss);
            free(dh);
        }
    }
    f->logits_bytes = saved;
    hd_tensor *t[] = {th, tw, tloss, tdh};
    for (size_t i = 0; i < 4; i++)
        hd_tensor_destroy(t[i]);
    free(before);
    lm_free(&d);
    (void)state;
}
#endif

/* Row i's loss in double (logits in double) with h's element k set to hk. */
static double lm_row_loss(const lm_data *d, size_t i, size_t k, float hk)
{
    float *h = hd_test_floats(d->dim);
    memcpy(h, d->h + i * d->dim, d->dim * sizeof *h);
    h[k] = hk;
    double *zd = hd_test_doubles(d->vocab), m = -INFINITY, s = 0.0;
    float *zf = hd_test_floats(d->vocab);
    lm_row_logits(d, h, zd, zf);
    for (size_t j = 0; j < d->vocab; j++)
        m = zd[j] > m ? zd[j] : m;
    for (size_t j = 0; j < d->vocab; j++)
        s += exp(zd[j] - m);
    double loss = m + log(s) - zd[d->targets[i]];
    free(h);
    free(zd);
    free(zf);
    return loss;
}

/* Each backend's dh against central differences of the reference forward's mean loss. */
static void test_linear_cross_entropy_gradient_matches_finite_differences(void **state)
{
    hd_rng rng = hd_test_rng(23);
    const lm_case c = {6, 9, 41, IGNORE_SOME, true, false};
    lm_data d;
    lm_inputs(&c, &rng, &d);
    double inv = 1.0 / (double)counted_rows(d.targets, c.rows);
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        hd_backend b = train_backends[bi];
        if (!hd_test_use_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY, b))
            continue;
        hd_tensor *th = hd_test_tensor(shared_ctx, c.rows, c.dim, d.h);
        hd_tensor *tw = hd_test_tensor(shared_ctx, c.vocab, c.dim, d.w);
        hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
        hd_tensor *tdh = hd_test_tensor(shared_ctx, c.rows, c.dim, NULL);
        hd_test_expect_ran_on(
            shared_ctx, hd_linear_cross_entropy(shared_ctx, th, tw, d.targets, IGNORE, tloss, tdh),
            b, "linear_cross_entropy for finite differences");
        float *dh = hd_test_read(tdh);
        for (size_t i = 0; i < c.rows; i++)
            for (size_t k = 0; k < c.dim; k++) {
                size_t at = i * c.dim + k;
                double fd = 0.0;
                if (d.targets[i] != IGNORE) {
                    float step = 0x1p-10f, up = d.h[at] + step, down = d.h[at] - step;
                    fd = inv * (lm_row_loss(&d, i, k, up) - lm_row_loss(&d, i, k, down)) /
                         ((double)up - down);
                }
                if (fabs(fd - dh[at]) > 1e-5 * (1.0 + fabs(fd)))
                    fail_msg("linear_cross_entropy on %s: dh[%zu][%zu] = %.7g, finite "
                             "difference %.7g",
                             hd_backend_name(b), i, k, (double)dh[at], fd);
            }
        free(dh);
        hd_tensor *t[] = {th, tw, tloss, tdh};
        for (size_t q = 0; q < 4; q++)
            hd_tensor_destroy(t[q]);
        hd_test_release_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY);
    }
    lm_free(&d);
    (void)state;
}

/* ---- AdamW ---- */

/* More tensors than the fused kernels take in one launch (8, 16 or 32 by the device's
 * parameter space), of 1 to 5000 elements. */
#define ADAMW_TENSORS 37
static const size_t adamw_shapes[ADAMW_TENSORS][2] = {
    {1, 1},    {50, 100}, {1, 4099}, {7, 13},  {64, 16},  {3, 1},   {1, 5000}, {2, 2},
    {17, 29},  {1, 1024}, {4, 1250}, {1, 2},   {9, 9},    {33, 31}, {1, 257},  {2, 1023},
    {5, 5},    {1, 3},    {16, 64},  {1, 1},   {13, 17},  {8, 128}, {1, 4096}, {3, 331},
    {2, 7},    {1, 11},   {40, 25},  {1, 999}, {6, 6},    {1, 1},   {19, 23},  {2, 512},
    {1, 4},    {7, 7},    {1, 65},   {3, 3},   {11, 101},
};

typedef enum clip_mode {
    CLIP_NONE,   /* max_grad_norm 0 */
    CLIP_SCALES, /* half the gradients' norm: they are scaled by about 0.5 */
    CLIP_IDLE,   /* ten times their norm: the clip leaves them as they are */
} clip_mode;

typedef struct adamw_run {
    int64_t step;
    clip_mode clip;
    bool want_norm;
    size_t tensors; /* the first this many of the tensors stepped; 0: all */
} adamw_run;

typedef struct adamw_host {
    float *p[ADAMW_TENSORS], *g[ADAMW_TENSORS], *m[ADAMW_TENSORS], *v[ADAMW_TENSORS];
    size_t n[ADAMW_TENSORS];
} adamw_host;

/* Parameters U(-1, 1), gradients U(-0.1, 0.1); moments zero at the first step, else as a run
 * leaves them. */
static void adamw_host_init(adamw_host *st, hd_rng *rng, bool first_step)
{
    for (size_t k = 0; k < ADAMW_TENSORS; k++) {
        size_t n = adamw_shapes[k][0] * adamw_shapes[k][1];
        st->n[k] = n;
        st->p[k] = hd_test_random(rng, n, -1.0f, 1.0f);
        st->g[k] = hd_test_random(rng, n, -0.1f, 0.1f);
        st->m[k] = hd_test_random(rng, n, -0.01f, 0.01f);
        st->v[k] = hd_test_random(rng, n, 0.0f, 1e-3f);
        for (size_t i = 0; first_step && i < n; i++)
            st->m[k][i] = st->v[k][i] = 0.0f;
    }
}

static void adamw_host_free(adamw_host *st)
{
    for (size_t k = 0; k < ADAMW_TENSORS; k++) {
        free(st->p[k]);
        free(st->g[k]);
        free(st->m[k]);
        free(st->v[k]);
    }
}

/* The tensors of a call, holding st's arrays (host copies only). */
typedef struct adamw_tensors {
    hd_tensor *p[ADAMW_TENSORS], *g[ADAMW_TENSORS], *m[ADAMW_TENSORS], *v[ADAMW_TENSORS];
    const hd_tensor *grads[ADAMW_TENSORS];
} adamw_tensors;

static void adamw_tensors_create(hd_context *ctx, const adamw_host *st, adamw_tensors *t)
{
    for (size_t k = 0; k < ADAMW_TENSORS; k++) {
        size_t rows = adamw_shapes[k][0], cols = adamw_shapes[k][1];
        t->p[k] = hd_test_tensor(ctx, rows, cols, st->p[k]);
        t->g[k] = hd_test_tensor(ctx, rows, cols, st->g[k]);
        t->m[k] = hd_test_tensor(ctx, rows, cols, st->m[k]);
        t->v[k] = hd_test_tensor(ctx, rows, cols, st->v[k]);
        t->grads[k] = t->g[k];
    }
}

static void adamw_tensors_destroy(adamw_tensors *t)
{
    for (size_t k = 0; k < ADAMW_TENSORS; k++) {
        hd_tensor_destroy(t->p[k]);
        hd_tensor_destroy(t->g[k]);
        hd_tensor_destroy(t->m[k]);
        hd_tensor_destroy(t->v[k]);
    }
}

static hd_adamw_options adamw_options(int64_t step, float max_grad_norm, hd_tensor *grad_norm)
{
    return (hd_adamw_options){.lr = 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = 0.999f,
                              .eps = 1e-8f,
                              .weight_decay = 0.01f,
                              .step = (long)step,
                              .max_grad_norm = max_grad_norm,
                              .grad_norm = grad_norm};
}

/* Tensor k after the step against the reference from st with the clip's coefficient coef. */
static void adamw_expect_tensor(const char *what, const adamw_host *st, size_t k,
                                const hd_adamw_options *o, double coef, const adamw_tensors *t,
                                double limit)
{
    size_t n = st->n[k];
    const hd_ref_adamw_params hp = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->step};
    double *p = hd_test_doubles(n), *m = hd_test_doubles(n), *v = hd_test_doubles(n);
    double *pm = hd_test_doubles(n), *mm = hd_test_doubles(n), *vm = hd_test_doubles(n);
    hd__ref_adamw(n, st->p[k], st->g[k], st->m[k], st->v[k], &hp, coef, p, m, v);
    double step = (double)o->step;
    double bc1 = 1.0 - pow(o->beta1, step), bc2 = 1.0 - pow(o->beta2, step);
    for (size_t i = 0; i < n; i++) {
        double g = st->g[k][i] * coef;
        mm[i] = fabs(o->beta1 * st->m[k][i]) + fabs((1.0 - o->beta1) * g);
        vm[i] = fabs(o->beta2 * st->v[k][i]) + fabs((1.0 - o->beta2) * g * g);
        /* the update's magnitude from m's terms, not m: where they cancel, the rounding of
         * each still reaches the update */
        pm[i] = fabs(st->p[k][i] * (1.0 - (double)o->lr * o->weight_decay)) +
                fabs(o->lr / bc1) * mm[i] / (sqrt(v[i] / bc2) + o->eps);
    }
    float *gp = hd_test_read(t->p[k]), *gm = hd_test_read(t->m[k]), *gv = hd_test_read(t->v[k]);
    char name[240];
    snprintf(name, sizeof name, "%s: params[%zu]", what, k);
    expect_within(name, gp, p, pm, n, limit);
    snprintf(name, sizeof name, "%s: m[%zu]", what, k);
    expect_within(name, gm, m, mm, n, limit);
    snprintf(name, sizeof name, "%s: v[%zu]", what, k);
    expect_within(name, gv, v, vm, n, limit);
    hd_test_expect_unchanged(what, t->g[k], st->g[k]);
    double *all[] = {p, m, v, pm, mm, vm};
    for (size_t i = 0; i < 6; i++)
        free(all[i]);
    free(gp);
    free(gm);
    free(gv);
}

/* One step of r on backend b (placed there: the first parameter valid on the device for a
 * device backend, every tensor on the host for the CPU), checked against the reference. */
static void check_adamw(hd_context *ctx, hd_backend b, const adamw_run *r, hd_rng *rng)
{
    size_t count = r->tensors > 0 ? r->tensors : ADAMW_TENSORS;
    adamw_host st;
    adamw_host_init(&st, rng, r->step == 1);
    double total = hd__ref_grad_norm(count, (const float *const *)st.g, st.n);
    float max_norm = r->clip == CLIP_NONE     ? 0.0f
                     : r->clip == CLIP_SCALES ? (float)(0.5 * total)
                                              : (float)(10.0 * total);
    double coef = r->clip == CLIP_NONE ? 1.0 : hd__ref_clip_coef(total, max_norm);
    adamw_tensors t;
    adamw_tensors_create(ctx, &st, &t);
    hd_tensor *norm = r->want_norm ? hd_test_tensor(ctx, 1, 1, NULL) : NULL;
    if (b != HD_BACKEND_CPU)
        assert_int_equal(hd_tensor_prefetch(t.p[0]), HD_OK);
    hd_adamw_options o = adamw_options(r->step, max_norm, norm);
    char what[160];
    snprintf(what, sizeof what, "adamw on %s, step %ld, clip %d%s, %zu tensors", hd_backend_name(b),
             (long)r->step, (int)r->clip, r->want_norm ? ", grad_norm" : "", count);
    hd_test_expect_ran_on(ctx, hd_adamw(ctx, &o, count, t.p, t.grads, t.m, t.v), b, what);
    for (size_t k = 0; k < count; k++)
        adamw_expect_tensor(what, &st, k, &o, coef, &t, r->clip == CLIP_SCALES ? 128.0 : 16.0);
    for (size_t k = count; k < ADAMW_TENSORS; k++) /* past the call's tensors: untouched */
        hd_test_expect_unchanged(what, t.p[k], st.p[k]);
    if (norm != NULL) {
        float *got = hd_test_read(norm);
        expect_within(what, got, &total, &total, 1, 32.0);
        free(got);
    }
    hd_tensor_destroy(norm);
    adamw_tensors_destroy(&t);
    adamw_host_free(&st);
}

/* Steps 1, 2 and 1000 (bias corrections from large to none), without clipping, with a clip
 * that scales and one that does not, grad_norm wanted or not. */
static void test_adamw_matches_reference(void **state)
{
    hd_rng rng = hd_test_rng(31);
    const adamw_run runs[] = {
        {1, CLIP_NONE, false, 0},  {2, CLIP_NONE, true, 0},    {1000, CLIP_NONE, false, 0},
        {1, CLIP_SCALES, true, 0}, {2, CLIP_SCALES, false, 0}, {1000, CLIP_SCALES, true, 0},
        {1, CLIP_IDLE, true, 0},   {2, CLIP_IDLE, false, 0},   {1000, CLIP_IDLE, true, 0},
    };
    for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
        if (!hd_context_has_backend(shared_ctx, train_backends[bi]))
            continue;
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
            check_adamw(shared_ctx, train_backends[bi], &runs[i], &rng);
    }
    (void)state;
}

#ifdef HD_HAVE_OPENCL
/* The fused kernels in launches of 8 tensors (a device whose kernel parameters hold less than
 * 16 tensors' worth: OpenCL's least is 1 KiB) and of 16, each over several launches, with and
 * without the norm, against the reference. */
static void test_adamw_in_launches_of_8_and_16(void **state)
{
    hd_fused *f = fused_state_or_skip();
    size_t saved = f->param_bytes;
    hd_rng rng = hd_test_rng(33);
    const adamw_run runs[] = {{2, CLIP_SCALES, true, 0}, {1, CLIP_NONE, false, 0}};
    static const size_t bytes[] = {512, 1024}; /* 8 and 16 tensors a launch */
    for (size_t b = 0; b < 2; b++) {
        f->param_bytes = bytes[b];
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
            check_adamw(shared_ctx, HD_BACKEND_FUSED, &runs[i], &rng);
    }
    f->param_bytes = saved;
    (void)state;
}

/* The norm and the update in one launch of resident groups (adamw_resident), where the tensors
 * fit one launch: as the runtime runs them (a cooperative launch on the CUDA runtime; the two
 * launches elsewhere, and where launches depend programmatically, for tensors past what its
 * groups hold), capped at 3 groups (each reading again the spans past those it holds, where
 * the one launch is taken), and emulated as one work-group on any runtime without dependent
 * launches; the clip applied, idle and off with the norm still wanted, one tensor and eight,
 * against the reference. */
static void test_adamw_in_one_launch(void **state)
{
    hd_fused *f = fused_state_or_skip();
    hd_rng rng = hd_test_rng(34);
    const adamw_run runs[] = {
        {2, CLIP_SCALES, true, 8},     {1, CLIP_NONE, true, 8},   {3, CLIP_IDLE, false, 8},
        {1000, CLIP_SCALES, false, 1}, {1, CLIP_SCALES, true, 3},
    };
    for (int form = 0; form < 3; form++) {
        f->resident_cap = form == 1 ? 3 : 0;
        f->resident_emulated = form == 2;
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
            check_adamw(shared_ctx, HD_BACKEND_FUSED, &runs[i], &rng);
    }
    (void)state;
}
#endif

/* A device that fails before it wrote anything hands the step to the CPU, with a note. */
static void test_adamw_falls_back_to_the_host_after_a_device_failure(void **state)
{
    hd_rng rng = hd_test_rng(32);
    if (!hd_context_has_backend(shared_ctx, HD_BACKEND_FUSED))
        skip();
    setenv("HD_FAULT", "fused:launch", 1);
    hd_context *ctx = hd_test_context(false);
    unsetenv("HD_FAULT");
    hd_test_notes_clear();
    const adamw_run r = {2, CLIP_SCALES, true, 0};
    check_adamw(ctx, HD_BACKEND_CPU, &r, &rng); /* on the host from the start */
    adamw_host st;
    adamw_host_init(&st, &rng, false);
    adamw_tensors t;
    adamw_tensors_create(ctx, &st, &t);
    assert_int_equal(hd_tensor_prefetch(t.p[0]), HD_OK);
    hd_adamw_options o = adamw_options(3, 0.0f, NULL);
    hd_test_expect_ran_on(ctx, hd_adamw(ctx, &o, ADAMW_TENSORS, t.p, t.grads, t.m, t.v),
                          HD_BACKEND_CPU, "adamw after a device failure");
    if (strstr(hd_test_notes(), "adamw ran on cpu after") == NULL ||
        strstr(hd_test_notes(), "injected fault") == NULL)
        fail_msg("no note of the fallback: '%s'", hd_test_notes());
    for (size_t k = 0; k < ADAMW_TENSORS; k++)
        adamw_expect_tensor("adamw after a device failure", &st, k, &o, 1.0, &t, 16.0);
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_FUSED));
    adamw_tensors_destroy(&t);
    adamw_host_free(&st);
    hd_context_destroy(ctx);
    (void)state;
}

/* No tensors: nothing to step; the norm of no gradients is 0. */
static void test_adamw_of_no_tensors_measures_zero(void **state)
{
    float seven = 7.0f;
    hd_tensor *norm = hd_test_tensor(shared_ctx, 1, 1, &seven);
    hd_adamw_options o = adamw_options(1, 1.0f, norm);
    assert_int_equal(hd_adamw(shared_ctx, &o, 0, NULL, NULL, NULL, NULL), HD_OK);
    float *got = hd_test_read(norm);
    expect_zeros("grad_norm of no tensors", got, 1);
    free(got);
    hd_tensor_destroy(norm);
    (void)state;
}

/* ---- argument errors: a clear status, every output untouched ---- */

/* Fills every element of t's copy on the host with 7s, for hd_test_expect_unchanged. */
static hd_tensor *sevens(hd_context *ctx, size_t rows, size_t cols)
{
    float *p = hd_test_floats(rows * cols);
    for (size_t i = 0; i < rows * cols; i++)
        p[i] = 7.0f;
    hd_tensor *t = hd_test_tensor(ctx, rows, cols, p);
    free(p);
    return t;
}

/* Fails unless t (at most 64 elements) still holds the 7s sevens() wrote. */
static void expect_sevens(const char *what, const hd_tensor *t)
{
    static const float seven[64] = {
        7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
        7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
        7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    };
    assert_true(hd_tensor_rows(t) * hd_tensor_cols(t) <= 64);
    hd_test_expect_unchanged(what, t, seven);
}

static void test_add_rms_norm_refuses_bad_arguments(void **state)
{
    hd_context *ctx = shared_ctx, *other = hd_test_context(true);
    hd_tensor *x = sevens(ctx, 3, 4), *r = sevens(ctx, 3, 4), *w = sevens(ctx, 1, 4);
    hd_tensor *h = sevens(ctx, 3, 4), *y = sevens(ctx, 3, 4), *wrong = sevens(ctx, 4, 3);
    hd_tensor *wide = sevens(ctx, 1, 5), *foreign = sevens(other, 3, 4);
    assert_int_equal(hd_add_rms_norm(ctx, x, wrong, w, 1e-6f, h, y), HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, wide, 1e-6f, h, y), HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, w, -1.0f, h, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, w, NAN, h, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, w, INFINITY, h, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, w, 1e-6f, h, x), HD_ERR_ALIASING);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, w, 1e-6f, y, y), HD_ERR_ALIASING);
    assert_int_equal(hd_add_rms_norm(ctx, x, r, NULL, 1e-6f, h, y), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm(ctx, x, foreign, w, 1e-6f, h, y), HD_ERR_WRONG_CONTEXT);
    expect_sevens("h", h);
    expect_sevens("y", y);

    hd_tensor *dy = sevens(ctx, 3, 4), *dres = sevens(ctx, 3, 4), *dh = sevens(ctx, 3, 4);
    hd_tensor *dw = sevens(ctx, 1, 4);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, dy, dres, 1e-6f, h, dw), HD_ERR_ALIASING);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, dy, dres, 1e-6f, dh, wide),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, dy, wrong, 1e-6f, dh, dw),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, dy, dres, NAN, dh, dw),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, NULL, dres, 1e-6f, dh, dw),
                     HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_add_rms_norm_backward(ctx, h, w, dy, dres, 1e-6f, dh, dh), HD_ERR_ALIASING);
    expect_sevens("dh", dh);
    expect_sevens("dweight", dw);
    expect_sevens("dy", dy);
    expect_sevens("dres", dres);

    hd_tensor *t[] = {x, r, w, h, y, wrong, wide, dy, dres, dh, dw, foreign};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        hd_tensor_destroy(t[i]);
    hd_context_destroy(other);
    (void)state;
}

static void test_cross_entropy_refuses_bad_arguments(void **state)
{
    hd_context *ctx = shared_ctx;
    hd_tensor *logits = sevens(ctx, 3, 4), *loss = sevens(ctx, 1, 1), *dl = sevens(ctx, 3, 4);
    hd_tensor *wrong = sevens(ctx, 4, 3), *long_loss = sevens(ctx, 2, 1);
    int32_t targets[3] = {0, 4, 1}; /* 4 is past the vocabulary of 4 */
    assert_int_equal(hd_cross_entropy(ctx, logits, targets, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "targets[1] = 4"));
    targets[1] = -1;
    assert_int_equal(hd_cross_entropy(ctx, logits, targets, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    targets[1] = 2;
    assert_int_equal(hd_cross_entropy(ctx, logits, NULL, -100, loss, dl), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_cross_entropy(ctx, logits, targets, -100, long_loss, dl),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_cross_entropy(ctx, logits, targets, -100, loss, wrong),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_cross_entropy(ctx, NULL, targets, -100, loss, dl), HD_ERR_INVALID_ARGUMENT);
    expect_sevens("loss", loss);
    expect_sevens("dlogits", dl);
    expect_sevens("logits", logits);

    hd_tensor *h = sevens(ctx, 3, 4), *w = sevens(ctx, 5, 4), *dh = sevens(ctx, 3, 4);
    hd_tensor *narrow = sevens(ctx, 5, 3);
    int32_t lm_targets[3] = {0, 5, 1}; /* 5 is past the head's 5 rows */
    assert_int_equal(hd_linear_cross_entropy(ctx, h, w, lm_targets, -100, loss, dh),
                     HD_ERR_INVALID_ARGUMENT);
    lm_targets[1] = 4;
    assert_int_equal(hd_linear_cross_entropy(ctx, h, narrow, lm_targets, -100, loss, dh),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_linear_cross_entropy(ctx, h, w, lm_targets, -100, loss, h),
                     HD_ERR_ALIASING);
    assert_int_equal(hd_linear_cross_entropy(ctx, h, w, lm_targets, -100, long_loss, dh),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_linear_cross_entropy(ctx, h, w, lm_targets, -100, loss, wrong),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_linear_cross_entropy(ctx, h, w, NULL, -100, loss, dh),
                     HD_ERR_INVALID_ARGUMENT);
    expect_sevens("loss", loss);
    expect_sevens("dh", dh);
    expect_sevens("h", h);

    /* the targets as an int32 tensor: one out of range, floats, another shape, NULL */
    hd_tensor *tt = hd_test_ids(ctx, 3, (const int32_t[]){0, 5, -100});
    assert_int_equal(hd_linear_cross_entropy_ids(ctx, h, w, tt, -100, loss, dh),
                     HD_ERR_INVALID_ARGUMENT);
    /* each message names the _ids form called */
    assert_non_null(
        strstr(hd_context_last_error(ctx), "hd_linear_cross_entropy_ids: targets[1] = 5"));
    assert_int_equal(hd_cross_entropy_ids(ctx, logits, tt, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx), "hd_cross_entropy_ids: targets[1] = 5"));
    assert_int_equal(hd_cross_entropy_ids(ctx, logits, logits, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx),
                           "hd_cross_entropy_ids: tensor 'targets' holds floats, not int32"));
    assert_int_equal(hd_cross_entropy_ids(ctx, logits, NULL, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(
        strstr(hd_context_last_error(ctx), "hd_cross_entropy_ids: tensor 'targets' is NULL"));
    assert_int_equal(hd_linear_cross_entropy_ids(ctx, h, w, NULL, -100, loss, dh),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(ctx),
                           "hd_linear_cross_entropy_ids: tensor 'targets' is NULL"));
    /* ids of another context */
    hd_context *other = NULL;
    assert_int_equal(hd_context_create(&other, NULL), HD_OK);
    hd_tensor *other_ids = hd_test_ids(other, 3, (const int32_t[]){0, 1, 2});
    assert_int_equal(hd_cross_entropy_ids(ctx, logits, other_ids, -100, loss, dl),
                     HD_ERR_WRONG_CONTEXT);
    assert_non_null(
        strstr(hd_context_last_error(ctx),
               "hd_cross_entropy_ids: tensor 'targets' was created in another context"));
    assert_int_equal(hd_linear_cross_entropy_ids(ctx, h, w, other_ids, -100, loss, dh),
                     HD_ERR_WRONG_CONTEXT);
    hd_tensor_destroy(other_ids);
    hd_context_destroy(other);
    hd_tensor *short_ids = hd_test_ids(ctx, 2, (const int32_t[]){0, 1});
    assert_int_equal(hd_cross_entropy_ids(ctx, logits, short_ids, -100, loss, dl),
                     HD_ERR_SHAPE_MISMATCH);
    /* an int32 tensor as the logits */
    hd_tensor *int_logits = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 3, 4, HD_DTYPE_I32, &int_logits), HD_OK);
    assert_int_equal(hd_cross_entropy(ctx, int_logits, targets, -100, loss, dl),
                     HD_ERR_INVALID_ARGUMENT);
    expect_sevens("loss", loss);
    expect_sevens("dlogits", dl);
    expect_sevens("dh", dh);
    hd_tensor_destroy(tt);
    hd_tensor_destroy(short_ids);
    hd_tensor_destroy(int_logits);

    hd_tensor *t[] = {logits, loss, dl, wrong, long_loss, h, w, dh, narrow};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        hd_tensor_destroy(t[i]);
    (void)state;
}

/* Targets as an int32 tensor at the edges, on every backend, in both layouts (T x 1, 1 x T):
 * an ignore index inside the vocabulary (0, V - 1) and INT32_MIN; cross-entropy against the
 * float64 reference, the LM head against the reference on logits h w^T. Then no row (a NaN
 * loss) and the LM head over an empty vocabulary (every target ignored: a NaN loss and dh of
 * zeros, whatever dh held). */
static void test_cross_entropy_ids_at_the_edges(void **state)
{
    enum { T = 6, V = 7, D = 5 };
    hd_rng rng = hd_test_rng(19);
    float *h = hd_test_random(&rng, T * D, -1.0f, 1.0f);
    float *w = hd_test_random(&rng, V * D, -1.0f, 1.0f);
    float logits[T * V]; /* h w^T, rounded once: the reference of both ops */
    for (size_t i = 0; i < T; i++)
        for (size_t j = 0; j < V; j++) {
            double acc = 0.0;
            for (size_t k = 0; k < D; k++)
                acc += (double)h[i * D + k] * w[j * D + k];
            logits[i * V + j] = (float)acc;
        }
    static const struct {
        int32_t ignore, targets[T];
    } sets[] = {
        {0, {0, 3, 6, 0, 1, 5}},
        {V - 1, {6, 2, 6, 4, 0, 6}},
        {INT32_MIN, {INT32_MIN, 2, 5, INT32_MIN, 0, 3}},
    };
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        double loss_ref, dl_ref[T * V], dh_ref[T * D];
        hd__ref_cross_entropy(T, V, logits, sets[si].targets, sets[si].ignore, NULL, NULL, dl_ref,
                              &loss_ref);
        for (size_t i = 0; i < T; i++)
            for (size_t k = 0; k < D; k++) {
                double acc = 0.0;
                for (size_t j = 0; j < V; j++)
                    acc += dl_ref[i * V + j] * w[j * D + k];
                dh_ref[i * D + k] = acc;
            }
        for (size_t bi = 0; bi < BACKEND_COUNT; bi++) {
            if (!hd_test_use_backend(shared_ctx, HD_OP_CROSS_ENTROPY, train_backends[bi]))
                continue;
            hd_test_use_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY, train_backends[bi]);
            for (int row = 0; row < 2; row++) {
                char what[160];
                snprintf(what, sizeof what, "ignore_index %d on %s, ids as a %s",
                         (int)sets[si].ignore, hd_backend_name(train_backends[bi]),
                         row ? "row" : "column");
                hd_tensor *tt = hd_test_ids_as(shared_ctx, T, sets[si].targets, row);
                hd_tensor *tl = hd_test_tensor(shared_ctx, T, V, logits);
                hd_tensor *th = hd_test_tensor(shared_ctx, T, D, h);
                hd_tensor *tw = hd_test_tensor(shared_ctx, V, D, w);
                hd_tensor *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
                hd_tensor *tdl = hd_test_tensor(shared_ctx, T, V, NULL);
                hd_tensor *tdh = hd_test_tensor(shared_ctx, T, D, NULL);
                hd_status s = hd_cross_entropy_ids(shared_ctx, tl, tt, sets[si].ignore, tloss, tdl);
                hd_test_expect_ran_on(shared_ctx, s, train_backends[bi], what);
                float *got = hd_test_read(tloss);
                hd_test_expect_close(what, got, &loss_ref, 1, 1e-5, 1e-5);
                free(got);
                got = hd_test_read(tdl);
                hd_test_expect_close(what, got, dl_ref, T * V, 1e-5, 1e-5);
                free(got);
                s = hd_linear_cross_entropy_ids(shared_ctx, th, tw, tt, sets[si].ignore, tloss,
                                                tdh);
                hd_test_expect_ran_on(shared_ctx, s, train_backends[bi], what);
                got = hd_test_read(tloss);
                hd_test_expect_close(what, got, &loss_ref, 1, 1e-5, 1e-5);
                free(got);
                got = hd_test_read(tdh);
                hd_test_expect_close(what, got, dh_ref, T * D, 1e-5, 1e-5);
                free(got);
                hd_tensor *all[] = {tt, tl, th, tw, tloss, tdl, tdh};
                for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                    hd_tensor_destroy(all[i]);
            }
            hd_test_release_backend(shared_ctx, HD_OP_LINEAR_CROSS_ENTROPY);
            hd_test_release_backend(shared_ctx, HD_OP_CROSS_ENTROPY);
        }
    }
    /* INT32_MIN as a target where it is not the ignore index: out of range */
    hd_tensor *tt = hd_test_ids_as(shared_ctx, T, sets[2].targets, false);
    hd_tensor *tl = hd_test_tensor(shared_ctx, T, V, logits),
              *tloss = hd_test_tensor(shared_ctx, 1, 1, NULL);
    assert_int_equal(hd_cross_entropy_ids(shared_ctx, tl, tt, -100, tloss, NULL),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hd_context_last_error(shared_ctx), "hd_cross_entropy_ids: targets[0]"));
    hd_tensor_destroy(tt);
    hd_tensor_destroy(tl);

    /* no row: a NaN loss */
    hd_tensor *none = hd_test_tensor(shared_ctx, 0, V, NULL);
    hd_tensor *no_ids = hd_test_ids_as(shared_ctx, 0, sets[0].targets, false);
    assert_int_equal(hd_cross_entropy_ids(shared_ctx, none, no_ids, -100, tloss, none), HD_OK);
    float loss;
    assert_int_equal(hd_tensor_read(tloss, &loss), HD_OK);
    assert_true(isnan(loss));
    hd_tensor_destroy(none);
    hd_tensor_destroy(no_ids);

    /* the LM head over an empty vocabulary: dh of zeros over whatever it held */
    const int32_t ignored[] = {-100, -100};
    for (int row = 0; row < 2; row++) {
        hd_tensor *th = hd_test_tensor(shared_ctx, 2, 3, h);
        hd_tensor *tw = hd_test_tensor(shared_ctx, 0, 3, NULL);
        hd_tensor *tdh =
            hd_test_tensor(shared_ctx, 2, 3, (const float[]){5, NAN, -1, INFINITY, 2, 3});
        hd_tensor *tids = hd_test_ids_as(shared_ctx, 2, ignored, row);
        assert_int_equal(hd_linear_cross_entropy_ids(shared_ctx, th, tw, tids, -100, tloss, tdh),
                         HD_OK);
        assert_int_equal(hd_tensor_read(tloss, &loss), HD_OK);
        assert_true(isnan(loss));
        float *dh = hd_test_read(tdh);
        expect_zeros("dh over an empty vocabulary", dh, 6);
        free(dh);
        assert_int_equal(hd_tensor_write(tdh, (const float[]){5, NAN, -1, INFINITY, 2, 3}), HD_OK);
        assert_int_equal(hd_linear_cross_entropy(shared_ctx, th, tw, ignored, -100, tloss, tdh),
                         HD_OK);
        dh = hd_test_read(tdh);
        expect_zeros("dh over an empty vocabulary (host targets)", dh, 6);
        free(dh);
        hd_tensor *all[] = {th, tw, tdh, tids};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            hd_tensor_destroy(all[i]);
    }
    hd_tensor_destroy(tloss);
    free(h);
    free(w);
    (void)state;
}

/* The tensors of a refused AdamW call: tensor 0 is 1 x 1 (so that it may be named as
 * grad_norm), tensor 1 3 x 4. */
typedef struct adamw_refused {
    hd_tensor *p[2], *g[2], *m[2], *v[2], *norm;
    const hd_tensor *grads[2];
} adamw_refused;

static void expect_adamw_untouched(const adamw_refused *a, const char *what)
{
    for (int k = 0; k < 2; k++) {
        expect_sevens(what, a->p[k]);
        expect_sevens(what, a->g[k]);
        expect_sevens(what, a->m[k]);
        expect_sevens(what, a->v[k]);
    }
    expect_sevens(what, a->norm);
}

/* Calls hd_adamw with o and expects status, a message that says said (NULL: any) and every
 * tensor untouched. */
static void expect_adamw_refused(hd_context *ctx, const adamw_refused *a, const hd_adamw_options *o,
                                 hd_status status, const char *said, const char *what)
{
    hd_status s = hd_adamw(ctx, o, 2, a->p, a->grads, a->m, a->v);
    if (s != status)
        fail_msg("adamw, %s: %s, expected %s (%s)", what, hd_status_name(s), hd_status_name(status),
                 hd_context_last_error(ctx));
    if (said != NULL && strstr(hd_context_last_error(ctx), said) == NULL)
        fail_msg("adamw, %s: the message '%s' does not say '%s'", what, hd_context_last_error(ctx),
                 said);
    expect_adamw_untouched(a, what);
}

static void test_adamw_refuses_bad_arguments(void **state)
{
    hd_context *ctx = shared_ctx, *other = hd_test_context(true);
    adamw_refused a;
    for (int k = 0; k < 2; k++) {
        size_t rows = k == 0 ? 1 : 3, cols = k == 0 ? 1 : 4;
        a.p[k] = sevens(ctx, rows, cols);
        a.g[k] = sevens(ctx, rows, cols);
        a.m[k] = sevens(ctx, rows, cols);
        a.v[k] = sevens(ctx, rows, cols);
        a.grads[k] = a.g[k];
    }
    a.norm = sevens(ctx, 1, 1);
    hd_tensor *wrong = sevens(ctx, 4, 3), *foreign = sevens(other, 3, 4), *tall = sevens(ctx, 2, 1);
    const hd_adamw_options good = adamw_options(1, 1.0f, a.norm);
    hd_adamw_options o = good;

    assert_int_equal(hd_adamw(NULL, &o, 2, a.p, a.grads, a.m, a.v), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_adamw(ctx, NULL, 2, a.p, a.grads, a.m, a.v), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_adamw(ctx, &o, 2, NULL, a.grads, a.m, a.v), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_adamw(ctx, &o, 2, a.p, a.grads, a.m, NULL), HD_ERR_INVALID_ARGUMENT);
    expect_adamw_untouched(&a, "NULL arrays");

    const struct {
        float *field;
        float value;
        const char *what;
    } ranges[] = {
        {&o.lr, -1e-3f, "lr < 0"},
        {&o.lr, NAN, "lr NaN"},
        {&o.lr, INFINITY, "lr infinite"},
        {&o.beta1, 1.0f, "beta1 = 1"},
        {&o.beta1, -0.5f, "beta1 < 0"},
        {&o.beta2, 1.5f, "beta2 > 1"},
        {&o.beta2, NAN, "beta2 NaN"},
        {&o.eps, 0.0f, "eps = 0"},
        {&o.eps, INFINITY, "eps infinite"},
        {&o.weight_decay, -0.01f, "weight_decay < 0"},
        {&o.max_grad_norm, -1.0f, "max_grad_norm < 0"},
        {&o.max_grad_norm, INFINITY, "max_grad_norm infinite"},
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        o = good;
        *ranges[i].field = ranges[i].value;
        expect_adamw_refused(ctx, &a, &o, HD_ERR_INVALID_ARGUMENT, NULL, ranges[i].what);
    }
    o = good;
    o.step = 0;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_INVALID_ARGUMENT, "step must be >= 1", "step 0");

    o = good;
    hd_tensor *keep = a.g[1];
    a.grads[1] = NULL;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_INVALID_ARGUMENT, "grads[1] is NULL", "grads[1] NULL");
    a.grads[1] = wrong;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_SHAPE_MISMATCH, "grads[1] is 4 x 3",
                         "grads[1] of another shape");
    a.grads[1] = foreign;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_WRONG_CONTEXT, NULL, "grads[1] of another context");
    a.grads[1] = a.p[1];
    expect_adamw_refused(ctx, &a, &o, HD_ERR_ALIASING, "grads[1] is also params[1]",
                         "grads[1] is params[1]");
    hd_tensor *ints = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 3, 4, HD_DTYPE_I32, &ints), HD_OK);
    a.grads[1] = ints;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_INVALID_ARGUMENT, "grads[1] holds int32",
                         "grads[1] of int32");
    a.grads[1] = keep;

    hd_tensor *m1 = a.m[1];
    a.m[1] = a.v[1];
    expect_adamw_refused(ctx, &a, &o, HD_ERR_ALIASING, "v[1] is also m[1]", "m[1] is v[1]");
    a.m[1] = m1;
    o.grad_norm = a.v[0];
    expect_adamw_refused(ctx, &a, &o, HD_ERR_ALIASING, "grad_norm is also v[0]",
                         "grad_norm is v[0]");
    o.grad_norm = tall;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_SHAPE_MISMATCH, "not 1 x 1", "grad_norm 2 x 1");
    o.grad_norm = foreign;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_WRONG_CONTEXT, NULL, "grad_norm of another context");
    hd_tensor *int_norm = NULL;
    assert_int_equal(hd_tensor_create_ex(ctx, 1, 1, HD_DTYPE_I32, &int_norm), HD_OK);
    o.grad_norm = int_norm;
    expect_adamw_refused(ctx, &a, &o, HD_ERR_INVALID_ARGUMENT, "grad_norm holds int32",
                         "grad_norm of int32");
    hd_tensor_destroy(int_norm);
    hd_tensor_destroy(ints);

    for (int k = 0; k < 2; k++) {
        hd_tensor_destroy(a.p[k]);
        hd_tensor_destroy(a.g[k]);
        hd_tensor_destroy(a.m[k]);
        hd_tensor_destroy(a.v[k]);
    }
    hd_tensor_destroy(a.norm);
    hd_tensor_destroy(wrong);
    hd_tensor_destroy(tall);
    hd_tensor_destroy(foreign);
    hd_context_destroy(other);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_rms_norm_matches_reference),
        cmocka_unit_test(test_add_rms_norm_at_extreme_magnitudes),
        cmocka_unit_test(test_add_rms_norm_backward_matches_reference),
        cmocka_unit_test(test_add_rms_norm_backward_variants_match_reference),
        cmocka_unit_test(test_add_rms_norm_backward_at_extreme_magnitudes),
        cmocka_unit_test(test_add_rms_norm_backward_matches_finite_differences),
        cmocka_unit_test(test_add_rms_norm_backward_of_no_rows_zeroes_dweight),
        cmocka_unit_test(test_cross_entropy_matches_reference),
        cmocka_unit_test(test_cross_entropy_at_extreme_logits),
#ifdef HD_HAVE_OPENCL
        cmocka_unit_test_teardown(test_cross_entropy_cluster_variants_match_reference,
                                  end_emulation),
        cmocka_unit_test_teardown(test_cross_entropy_rule_holds_long_rows_in_local_memory,
                                  end_emulation),
        cmocka_unit_test(test_cross_entropy_cluster_refusals),
#endif
        cmocka_unit_test(test_cross_entropy_gradient_matches_finite_differences),
        cmocka_unit_test(test_linear_cross_entropy_matches_reference),
        cmocka_unit_test(test_linear_cross_entropy_in_several_chunks),
#ifdef HD_HAVE_OPENCL
        cmocka_unit_test(test_linear_cross_entropy_fused_chunks),
        cmocka_unit_test(test_linear_cross_entropy_on_the_vendor_gemm),
#endif
        cmocka_unit_test(test_linear_cross_entropy_gradient_matches_finite_differences),
        cmocka_unit_test(test_cross_entropy_ids_at_the_edges),
        cmocka_unit_test(test_adamw_matches_reference),
#ifdef HD_HAVE_OPENCL
        cmocka_unit_test(test_adamw_in_launches_of_8_and_16),
        cmocka_unit_test_teardown(test_adamw_in_one_launch, end_emulation),
#endif
        cmocka_unit_test(test_adamw_falls_back_to_the_host_after_a_device_failure),
        cmocka_unit_test(test_adamw_of_no_tensors_measures_zero),
        cmocka_unit_test(test_add_rms_norm_refuses_bad_arguments),
        cmocka_unit_test(test_cross_entropy_refuses_bad_arguments),
        cmocka_unit_test(test_adamw_refuses_bad_arguments),
    };
    hd_test_filter_from_env();
    return cmocka_run_group_tests(tests, setup, teardown);
}
