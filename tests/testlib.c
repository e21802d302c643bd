#define _DEFAULT_SOURCE /* mkdtemp */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autotune/reference.h"
#include "backends/reference.h"
#include "tests/testlib.h"

uint64_t hd_test_seed(void)
{
    static bool chosen = false;
    static uint64_t seed;
    if (!chosen) {
        const char *env = getenv("HD_TEST_SEED");
        if (env != NULL && env[0] != '\0') {
            seed = strtoull(env, NULL, 0);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
        }
        chosen = true;
        fprintf(stderr, "# seed %" PRIu64 " (replay with HD_TEST_SEED=%" PRIu64 ")\n", seed, seed);
    }
    return seed;
}

void hd_test_filter_from_env(void)
{
    const char *filter = getenv("HD_TEST_FILTER");
    if (filter != NULL)
        cmocka_set_test_filter(filter);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

hd_rng hd_test_rng(uint64_t salt)
{
    hd_rng rng = {hd_test_seed() ^ (salt * 0xd1342543de82ef95u)};
    splitmix(&rng.state);
    return rng;
}

float hd_test_uniform(hd_rng *rng, float lo, float hi)
{
    double u = (double)(splitmix(&rng->state) >> 11) * 0x1.0p-53;
    return (float)(lo + (hi - lo) * u);
}

void hd_test_fill(hd_rng *rng, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = hd_test_uniform(rng, lo, hi);
}

float *hd_test_floats(size_t n)
{
    float *p = malloc((n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

float *hd_test_transposed(const float *x, size_t rows, size_t cols)
{
    float *t = hd_test_floats(rows * cols);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            t[j * rows + i] = x[i * cols + j];
    return t;
}

double *hd_test_doubles(size_t n)
{
    double *p = malloc((n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

float hd_test_tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u += 0x1000u; /* ties away from zero: the magnitude's bits round up */
    u &= 0xffffe000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

double hd_test_max_abs(const double *p, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fabs(p[i]) > m ? fabs(p[i]) : m;
    return m;
}

float *hd_test_random(hd_rng *rng, size_t n, float lo, float hi)
{
    float *p = hd_test_floats(n);
    hd_test_fill(rng, p, n, lo, hi);
    return p;
}

hd_tensor *hd_test_tensor(hd_context *ctx, size_t rows, size_t cols, const float *data)
{
    hd_tensor *t = NULL;
    hd_status s = hd_tensor_create(ctx, rows, cols, &t);
    if (s != HD_OK)
        fail_msg("hd_tensor_create(%zu, %zu): %s", rows, cols, hd_context_last_error(ctx));
    if (data != NULL && (s = hd_tensor_write(t, data)) != HD_OK)
        fail_msg("hd_tensor_write: %s", hd_context_last_error(ctx));
    return t;
}

hd_tensor *hd_test_ids(hd_context *ctx, size_t rows, const int32_t *ids)
{
    return hd_test_ids_as(ctx, rows, ids, false);
}

hd_tensor *hd_test_ids_as(hd_context *ctx, size_t rows, const int32_t *ids, bool row)
{
    hd_tensor *t = NULL;
    hd_status s = hd_tensor_create_ex(ctx, row ? 1 : rows, row ? rows : 1, HD_DTYPE_I32, &t);
    if (s != HD_OK)
        fail_msg("hd_tensor_create_ex(%zu ids, int32): %s", rows, hd_context_last_error(ctx));
    if ((s = hd_tensor_write_raw(t, ids)) != HD_OK)
        fail_msg("hd_tensor_write_raw: %s", hd_context_last_error(ctx));
    return t;
}

float *hd_test_read(const hd_tensor *t)
{
    float *p = hd_test_floats(hd_tensor_rows(t) * hd_tensor_cols(t));
    hd_status s = hd_tensor_read(t, p);
    if (s != HD_OK)
        fail_msg("hd_tensor_read: %s (%s)", hd_status_str(s), hd_status_name(s));
    return p;
}

void hd_test_expect_unchanged(const char *what, const hd_tensor *t, const float *want)
{
    float *got = hd_test_read(t);
    hd_test_expect_same(what, got, want, hd_tensor_rows(t) * hd_tensor_cols(t));
    free(got);
}

static char notes[1 << 16];

void hd_test_log(void *user, const char *message)
{
    (void)user;
    size_t used = strlen(notes);
    snprintf(notes + used, sizeof notes - used, "%s\n", message);
}

const char *hd_test_notes(void)
{
    return notes;
}

void hd_test_notes_clear(void)
{
    notes[0] = '\0';
}

static hd_context *test_context(bool cpu_only, const char *runtime)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.log = hd_test_log;
    opt.disable_opencl = cpu_only;
    opt.no_tune_cache = true;
    opt.runtime = runtime;
    hd_context *ctx = NULL;
    hd_status s = hd_context_create(&ctx, &opt);
    if (s != HD_OK)
        fail_msg("hd_context_create: %s", hd_status_str(s));
    return ctx;
}

hd_context *hd_test_context(bool cpu_only)
{
    return test_context(cpu_only, NULL);
}

hd_context *hd_test_context_on(const char *runtime)
{
    return test_context(false, runtime);
}

bool hd_test_use_backend(hd_context *ctx, hd_op op, hd_backend b)
{
    if (!hd_context_has_backend(ctx, b))
        return false;
    assert_int_equal(hd_context_set_backend(ctx, op, b), HD_OK);
    return true;
}

void hd_test_release_backend(hd_context *ctx, hd_op op)
{
    assert_int_equal(hd_context_set_backend(ctx, op, HD_BACKEND_AUTO), HD_OK);
}

/* The float64 reference is the tools' (autotune/reference.c, on backends/reference.h): the
 * functions below only lay it out as whole outputs. */

void hd_ref_gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                 const float *a, const float *b, float beta, const float *c, double *out,
                 double *bound)
{
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            hd_f64_elem e = hd__f64_gemm_elem(trans_a, trans_b, k, alpha, a, trans_a ? m : k, b,
                                              trans_b ? k : n, i, j);
            double cv = beta == 0.0f ? 0.0 : (double)beta * c[i * n + j];
            out[i * n + j] = e.want + cv;
            if (bound != NULL)
                bound[i * n + j] = e.bound + fabs(cv);
        }
    }
}

void hd_ref_lora(size_t tokens, size_t in, size_t out, size_t rank, const float *x, const float *w,
                 const float *a, const float *b, float scale, double *y, double *bound)
{
    hd_shape shape = {.dim = {tokens, in, out, rank}};
    hd_ref_inputs ref = {.in = {x, w, a, b}, .scale = scale};
    for (size_t t = 0; t < tokens; t++) {
        for (size_t j = 0; j < out; j++) {
            hd_ref_elem e = hd__ref_matmul_elem(HD_OP_LORA, &shape, &ref, 0, t, j);
            y[t * out + j] = e.want;
            if (bound != NULL)
                bound[t * out + j] = e.bound;
        }
    }
}

static void ref_rows(hd_op op, size_t rows, size_t cols, const float *x, const float *gamma,
                     const float *beta, float eps, double *y)
{
    hd_shape shape = {.dim = {rows, cols}};
    hd_ref_inputs ref = {.in = {x, gamma, beta}, .eps = eps};
    for (size_t i = 0; i < rows; i++)
        hd__ref_row(op, &shape, &ref, i, y + i * cols);
}

void hd_ref_softmax(size_t rows, size_t cols, const float *x, double *y)
{
    ref_rows(HD_OP_SOFTMAX, rows, cols, x, NULL, NULL, 0.0f, y);
}

void hd_ref_layer_norm(size_t rows, size_t cols, const float *x, const float *gamma,
                       const float *beta, float eps, double *y)
{
    ref_rows(HD_OP_LAYER_NORM, rows, cols, x, gamma, beta, eps, y);
}

void hd_ref_rms_norm(size_t rows, size_t cols, const float *x, const float *weight, float eps,
                     double *y)
{
    ref_rows(HD_OP_RMS_NORM, rows, cols, x, weight, NULL, eps, y);
}

void hd_ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy, double *dx)
{
    hd__ref_softmax_backward(rows, cols, y, dy, dx);
}

void hd_ref_layer_norm_backward(size_t rows, size_t cols, const float *x, const float *gamma,
                                const float *dy, float eps, double *dx, double *dgamma,
                                double *dbeta)
{
    hd__ref_norm_backward(true, rows, cols, x, gamma, dy, eps, dx, dgamma, dbeta);
}

void hd_ref_rms_norm_backward(size_t rows, size_t cols, const float *x, const float *weight,
                              const float *dy, float eps, double *dx, double *dweight)
{
    hd__ref_norm_backward(false, rows, cols, x, weight, dy, eps, dx, dweight, NULL);
}

void hd_ref_lora_backward(size_t tokens, size_t in, size_t out, size_t rank, const float *x,
                          const float *w, const float *a, const float *b, float scale,
                          const float *dy, double *dx, double *da, double *db, double *bound_dx,
                          double *bound_da, double *bound_db)
{
    if (!hd__ref_lora_backward(tokens, in, out, rank, x, w, a, b, scale, dy, dx, da, db, bound_dx,
                               bound_da, bound_db))
        fail_msg("hd_ref_lora_backward: out of memory");
}

const char *hd_test_row_op_name(hd_test_row_op op)
{
    static const char *const names[HD_TEST_ROW_OP_COUNT] = {"softmax", "layer_norm", "rms_norm"};
    return (unsigned)op < HD_TEST_ROW_OP_COUNT ? names[op] : "unknown";
}

hd_status hd_test_row_call(hd_context *ctx, hd_test_row_op op, const hd_tensor *x,
                           const hd_tensor *gamma, const hd_tensor *beta, float eps, hd_tensor *y)
{
    switch (op) {
    case HD_TEST_SOFTMAX:
        return hd_softmax(ctx, x, y);
    case HD_TEST_LAYER_NORM:
        return hd_layer_norm(ctx, x, gamma, beta, eps, y);
    case HD_TEST_RMS_NORM:
        return hd_rms_norm(ctx, x, gamma, eps, y);
    }
    fail_msg("hd_test_row_call: unknown row op %d", (int)op);
    return HD_ERR_INTERNAL;
}

void hd_ref_row(hd_test_row_op op, size_t rows, size_t cols, const float *x, const float *gamma,
                const float *beta, float eps, double *y)
{
    static const hd_op ops[HD_TEST_ROW_OP_COUNT] = {HD_OP_SOFTMAX, HD_OP_LAYER_NORM,
                                                    HD_OP_RMS_NORM};
    if ((unsigned)op >= HD_TEST_ROW_OP_COUNT)
        fail_msg("hd_ref_row: unknown row op %d", (int)op);
    /* The reference reads each op's own parameters: none, gamma and beta, or the weight. */
    ref_rows(ops[op], rows, cols, x, op == HD_TEST_SOFTMAX ? NULL : gamma,
             op == HD_TEST_LAYER_NORM ? beta : NULL, eps, y);
}

static bool special_matches(float got, double want)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return isinf(got) && (got > 0) == (want > 0);
    return !isnan(got) && !isinf(got);
}

void hd_test_expect_close(const char *what, const float *got, const double *want, size_t n,
                          double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        if (!special_matches(got[i], want[i]))
            fail_msg("%s: element %zu is %g, expected %g", what, i, (double)got[i], want[i]);
        if (isnan(want[i]) || isinf(want[i]))
            continue;
        double err = fabs((double)got[i] - want[i]);
        if (err > atol + rtol * fabs(want[i]))
            fail_msg("%s: element %zu is %.9g, expected %.9g (error %.3g > %.3g + %.3g*|ref|)",
                     what, i, (double)got[i], want[i], err, atol, rtol);
    }
}

void hd_test_expect_gemm_close(const char *what, const float *got, const double *want,
                               const double *bound, size_t n, size_t k, double factor)
{
    for (size_t i = 0; i < n; i++) {
        if (!special_matches(got[i], want[i]))
            fail_msg("%s: element %zu is %g, expected %g", what, i, (double)got[i], want[i]);
        if (isnan(want[i]) || isinf(want[i]))
            continue;
        double tol = factor * (double)(k + 1) * FLT_EPSILON * bound[i] + FLT_MIN;
        double err = fabs((double)got[i] - want[i]);
        if (err > tol)
            fail_msg("%s: element %zu is %.9g, expected %.9g (error %.3g > bound %.3g, k = %zu)",
                     what, i, (double)got[i], want[i], err, tol, k);
    }
}

void hd_test_expect_same(const char *what, const float *got, const float *want, size_t n)
{
    if (n > 0 && memcmp(got, want, n * sizeof *got) != 0)
        fail_msg("%s: the output changed although the call failed", what);
}

const hd_test_matrix_shape hd_test_row_shapes[] = {
    {1, 1}, {1, 7}, {7, 1}, {3, 5}, {13, 127}, {5, 1031}, {127, 13}, {2, 4099}, {64, 256},
};
const size_t hd_test_row_shape_count = sizeof hd_test_row_shapes / sizeof hd_test_row_shapes[0];

const hd_test_gemm_shape hd_test_gemm_shapes[] = {
    {1, 1, 1},    {1, 13, 7},   {13, 1, 7},   {7, 13, 1},      {1, 127, 131},
    {16, 67, 61}, {17, 31, 29}, {64, 64, 64}, {127, 13, 1031}, {33, 127, 257},
};
const size_t hd_test_gemm_shape_count = sizeof hd_test_gemm_shapes / sizeof hd_test_gemm_shapes[0];

const hd_test_lora_shape hd_test_lora_shapes[] = {
    {1, 1, 1, 1},     {1, 13, 7, 3},   {1, 127, 131, 8},   {3, 61, 67, 1},
    {16, 64, 64, 16}, {17, 31, 29, 5}, {33, 257, 127, 64}, {7, 13, 11, 0},
};
const size_t hd_test_lora_shape_count = sizeof hd_test_lora_shapes / sizeof hd_test_lora_shapes[0];

/* An integer in [lo, hi]. */
static size_t uniform_size(hd_rng *rng, size_t lo, size_t hi)
{
    return lo + (size_t)(splitmix(&rng->state) % (hi - lo + 1));
}

/* One side: 1, a few (2-16), about a tile (17-70) or a few hundred, in equal parts. */
static size_t random_side(hd_rng *rng)
{
    static const size_t lo[] = {1, 2, 17, 71}, hi[] = {1, 16, 70, 300};
    size_t band = uniform_size(rng, 0, 3);
    return uniform_size(rng, lo[band], hi[band]);
}

hd_test_gemm_shape hd_test_random_gemm_shape(hd_rng *rng)
{
    hd_test_gemm_shape s = {random_side(rng), random_side(rng), random_side(rng)};
    if (uniform_size(rng, 0, 3) == 0) { /* deep: the depth split, LoRA's thin products */
        s.k = uniform_size(rng, 500, 2500);
        s.m = s.m > 70 ? s.m % 70 + 1 : s.m;
        s.n = s.n > 70 ? s.n % 70 + 1 : s.n;
    }
    return s;
}

hd_test_matrix_shape hd_test_random_row_shape(hd_rng *rng)
{
    static const size_t lo[] = {1, 17, 301, 1501}, hi[] = {16, 300, 1500, 6000};
    size_t band = uniform_size(rng, 0, 3);
    hd_test_matrix_shape s = {random_side(rng), uniform_size(rng, lo[band], hi[band])};
    return s;
}

hd_test_lora_shape hd_test_random_lora_shape(hd_rng *rng)
{
    static const size_t ranks[] = {0, 1, 2, 3, 4, 7, 8, 13, 16, 17, 32, 64};
    hd_test_lora_shape s = {random_side(rng), random_side(rng), random_side(rng),
                            ranks[uniform_size(rng, 0, sizeof ranks / sizeof ranks[0] - 1)]};
    return s;
}

void hd_test_expect_ran_on(hd_context *ctx, hd_status s, hd_backend b, const char *what)
{
    if (s != HD_OK)
        fail_msg("%s: %s (%s)", what, hd_status_name(s), hd_context_last_error(ctx));
    if (hd_context_last_backend(ctx) != b) /* a fallback's cause is a note, not an error */
        fail_msg("%s ran on %s, expected %s: %s", what,
                 hd_backend_name(hd_context_last_backend(ctx)), hd_backend_name(b),
                 hd_context_last_error(ctx)[0] != '\0' ? hd_context_last_error(ctx)
                                                     : "the call fell back (HD_LOG=1 prints why)");
}

int hd_test_tmpdir_create(const char *name, char *dir, size_t size)
{
    int len = snprintf(dir, size, "/tmp/hd-%s-test-XXXXXX", name);
    return len < 0 || (size_t)len >= size || mkdtemp(dir) == NULL ? -1 : 0;
}

int hd_test_tmpdir_remove(const char *dir)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

void hd_test_write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        fail_msg("cannot create %s", path);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

int hd_test_cache_dir_create(const char *suite, char *path, size_t size)
{
    char dir[128];
    if (hd_test_tmpdir_create(suite, dir, sizeof dir) != 0)
        return -1;
    snprintf(path, size, "%s/tune.txt", dir);
    return 0;
}

int hd_test_cache_dir_remove(const char *path)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf \"$(dirname '%s')\"", path);
    return system(cmd) == 0 ? 0 : -1;
}

void hd_test_stderr_capture(hd_test_stderr *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/hd-test-stderr-XXXXXX");
    c->fd = mkstemp(c->path);
    assert_true(c->fd >= 0);
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(c->fd, STDERR_FILENO) >= 0);
}

size_t hd_test_stderr_release(hd_test_stderr *c, char *out, size_t size)
{
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    ssize_t n = size > 0 ? pread(c->fd, out, size - 1, 0) : 0;
    close(c->fd);
    unlink(c->path);
    assert_true(n >= 0);
    if (size > 0)
        out[n] = '\0';
    return (size_t)n;
}
