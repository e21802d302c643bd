/*
 * What every test suite shares: a seeded random source (a fresh seed each run, printed, and
 * replayable with HD_TEST_SEED), the float64 reference of every operation, tolerance-aware
 * comparison, and the list of shapes the suites run over.
 */
#ifndef HD_TESTS_TESTLIB_H
#define HD_TESTS_TESTLIB_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <hd/dispatch.h>

/* ---- random inputs ---- */

/* The run's seed: $HD_TEST_SEED if set, else from the clock. Printed once per process, so a
 * failing run can be replayed. */
uint64_t hd_test_seed(void);
/* HD_TEST_FILTER: the suite runs the tests whose names match its pattern (cmocka's: * and ?)
 * alone. Call before running the tests. */
void hd_test_filter_from_env(void);
typedef struct hd_rng {
    uint64_t state;
} hd_rng;
/* A generator for one test case: the run's seed mixed with salt, so cases differ. */
hd_rng hd_test_rng(uint64_t salt);
float hd_test_uniform(hd_rng *rng, float lo, float hi);
void hd_test_fill(hd_rng *rng, float *p, size_t n, float lo, float hi);
/* malloc that fails the test instead of returning NULL; n may be 0. */
float *hd_test_floats(size_t n);
/* The rows x cols matrix x, transposed into a new cols x rows buffer (free() it). */
float *hd_test_transposed(const float *x, size_t rows, size_t cols);
double *hd_test_doubles(size_t n);
/* n floats uniform in [lo, hi], in a new buffer (free it). */
float *hd_test_random(hd_rng *rng, size_t n, float lo, float hi);
/* x rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as the tensor cores
 * read an operand; infinities and NaNs as they are. */
float hd_test_tf32(float x);
/* The largest |p[i]| of n doubles; 0 where n is 0. */
double hd_test_max_abs(const double *p, size_t n);

/* A tensor of ctx holding data (rows*cols floats; NULL leaves zeros). Fails the test on error. */
hd_tensor *hd_test_tensor(hd_context *ctx, size_t rows, size_t cols, const float *data);
/* An int32 tensor of rows x 1 holding ids (rows of them); fails the test on error. */
hd_tensor *hd_test_ids(hd_context *ctx, size_t rows, const int32_t *ids);
/* The same ids as a column (rows x 1) or, with row true, a row (1 x rows). */
hd_tensor *hd_test_ids_as(hd_context *ctx, size_t rows, const int32_t *ids, bool row);
/* The tensor's contents, read into a new buffer (free it). */
float *hd_test_read(const hd_tensor *t);
/* Fails unless t holds exactly the floats of want (inputs untouched, outputs after an error). */
void hd_test_expect_unchanged(const char *what, const hd_tensor *t, const float *want);
/* Fails unless s is HD_OK and the call ran on backend b, naming what and the context's
 * message otherwise. */
void hd_test_expect_ran_on(hd_context *ctx, hd_status s, hd_backend b, const char *what);

/* A context for tests: CPU only when cpu_only, else whatever this machine has (PoCL in CI).
 * Its notes are collected (hd_test_notes). */
hd_context *hd_test_context(bool cpu_only);
/* A context as hd_test_context(false) gives, on the device runtime named ("opencl", "cuda"),
 * whatever $HD_RUNTIME says: for the suites whose subject lives on one runtime. */
hd_context *hd_test_context_on(const char *runtime);

/* Forces op onto backend b in ctx; false (nothing changed) where ctx lacks b. */
bool hd_test_use_backend(hd_context *ctx, hd_op op, hd_backend b);
/* Gives op back to the dispatcher's choice. */
void hd_test_release_backend(hd_context *ctx, hd_op op);

/* The notes contexts made with hd_test_log as their log callback have given since the last
 * hd_test_notes_clear(), one per line. */
void hd_test_log(void *user, const char *message);
const char *hd_test_notes(void);
void hd_test_notes_clear(void);

/* ---- float64 reference ---- */

/* C = alpha*op(A)*op(B) + beta*C in double; bound[i] = sum_p |alpha*a_ip*b_pj| + |beta*c_ij|,
 * the magnitude the rounding error of element i scales with. beta = 0 ignores C (NaN too). */
void hd_ref_gemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                 const float *a, const float *b, float beta, const float *c, double *out,
                 double *bound);
/* y = x*W + scale*(x*A)*B; bound as for GEMM over both terms. */
void hd_ref_lora(size_t tokens, size_t in, size_t out, size_t rank, const float *x, const float *w,
                 const float *a, const float *b, float scale, double *y, double *bound);
void hd_ref_softmax(size_t rows, size_t cols, const float *x, double *y);
void hd_ref_layer_norm(size_t rows, size_t cols, const float *x, const float *gamma,
                       const float *beta, float eps, double *y);
void hd_ref_rms_norm(size_t rows, size_t cols, const float *x, const float *weight, float eps,
                     double *y);

/* The backward passes in double, from the float inputs the op reads (hd_softmax_backward()
 * etc.). A NULL weight-gradient output is skipped. The LoRA bounds (may be NULL) are the sums
 * of the magnitudes of each element's terms, as for GEMM. */
void hd_ref_softmax_backward(size_t rows, size_t cols, const float *y, const float *dy, double *dx);
void hd_ref_layer_norm_backward(size_t rows, size_t cols, const float *x, const float *gamma,
                                const float *dy, float eps, double *dx, double *dgamma,
                                double *dbeta);
void hd_ref_rms_norm_backward(size_t rows, size_t cols, const float *x, const float *weight,
                              const float *dy, float eps, double *dx, double *dweight);
void hd_ref_lora_backward(size_t tokens, size_t in, size_t out, size_t rank, const float *x,
                          const float *w, const float *a, const float *b, float scale,
                          const float *dy, double *dx, double *da, double *db, double *bound_dx,
                          double *bound_da, double *bound_db);

/* ---- the row operations as one ---- */

typedef enum hd_test_row_op {
    HD_TEST_SOFTMAX,
    HD_TEST_LAYER_NORM,
    HD_TEST_RMS_NORM
} hd_test_row_op;
enum { HD_TEST_ROW_OP_COUNT = HD_TEST_RMS_NORM + 1 };
/* "softmax", "layer_norm", "rms_norm". */
const char *hd_test_row_op_name(hd_test_row_op op);
/* Calls op; gamma doubles as RMS norm's weight, softmax ignores gamma, beta and eps. */
hd_status hd_test_row_call(hd_context *ctx, hd_test_row_op op, const hd_tensor *x,
                           const hd_tensor *gamma, const hd_tensor *beta, float eps, hd_tensor *y);
/* The float64 reference of op, with the same conventions. */
void hd_ref_row(hd_test_row_op op, size_t rows, size_t cols, const float *x, const float *gamma,
                const float *beta, float eps, double *y);

/* ---- comparison ---- */

/* Fails the test unless |got[i] - want[i]| <= atol + rtol*|want[i]| for every i, where a NaN
 * must meet a NaN and an infinity the same infinity. what names the case in the message. */
void hd_test_expect_close(const char *what, const float *got, const double *want, size_t n,
                          double atol, double rtol);
/* The GEMM bound: |got - want| <= factor * k * FLT_EPSILON * bound[i] (+ a denormal floor). */
void hd_test_expect_gemm_close(const char *what, const float *got, const double *want,
                               const double *bound, size_t n, size_t k, double factor);
/* Fails unless the two buffers are bit-identical (outputs untouched after an error). */
void hd_test_expect_same(const char *what, const float *got, const float *want, size_t n);

/* ---- shapes ---- */

typedef struct hd_test_matrix_shape {
    size_t rows, cols;
} hd_test_matrix_shape;
typedef struct hd_test_gemm_shape {
    size_t m, n, k;
} hd_test_gemm_shape;
typedef struct hd_test_lora_shape {
    size_t tokens, in, out, rank;
} hd_test_lora_shape;

/* Small enough for PoCL on two cores, odd and prime, 1-row and 1-column, and rows longer than
 * a work-group. Empty shapes are tested separately. */
extern const hd_test_matrix_shape hd_test_row_shapes[];
extern const size_t hd_test_row_shape_count;
extern const hd_test_gemm_shape hd_test_gemm_shapes[];
extern const size_t hd_test_gemm_shape_count;
extern const hd_test_lora_shape hd_test_lora_shapes[];
extern const size_t hd_test_lora_shape_count;

/* Shapes drawn from the class the library serves rather than from a list, a fresh draw each
 * run (the run's seed; HD_TEST_SEED replays it): each side 1, a few (2-16), about a tile
 * (17-70) or a few hundred, in equal parts, so odd and prime sizes, single rows and columns
 * and few-row products all come up; a GEMM's depth is deep (500-2500, its sides at most 70)
 * one time in four, as in LoRA's rank-r products. LoRA's rank is one of 0 to 64. */
hd_test_gemm_shape hd_test_random_gemm_shape(hd_rng *rng);
hd_test_lora_shape hd_test_random_lora_shape(hd_rng *rng);
/* A row op's rows as a side above; its columns 1-16, 17-300, 301-1500 or 1501-6000 in equal
 * parts (short rows, one work-group's worth, several, and rows past a work-group's registers). */
hd_test_matrix_shape hd_test_random_row_shape(hd_rng *rng);

/* A fresh temporary directory /tmp/hd-NAME-test-XXXXXX, its path into dir (size bytes).
 * Returns 0, or -1 when it cannot be made (a cmocka setup's failure). */
int hd_test_tmpdir_create(const char *name, char *dir, size_t size);
/* Removes dir and everything in it; 0 or -1. */
int hd_test_tmpdir_remove(const char *dir);
/* Writes the n bytes at p to the file at path, failing the test where it cannot. */
void hd_test_write_file(const char *path, const void *p, size_t n);

/* The process's standard error, captured into a temporary file from hd_test_stderr_capture()
 * to hd_test_stderr_release(), which puts it back and gives what was written meanwhile (at
 * most size - 1 bytes, NUL-ended) and its length; the file is removed. Each fails the test
 * where it cannot. */
typedef struct hd_test_stderr {
    int fd, saved;
    char path[32];
} hd_test_stderr;
void hd_test_stderr_capture(hd_test_stderr *c);
size_t hd_test_stderr_release(hd_test_stderr *c, char *out, size_t size);

/* A fresh temporary directory for a suite's tuning cache: path becomes DIR/tune.txt. Returns
 * 0, or -1 when the directory cannot be made (a cmocka setup's failure). */
int hd_test_cache_dir_create(const char *suite, char *path, size_t size);
/* Removes the directory of a path made by hd_test_cache_dir_create(); 0 or -1. */
int hd_test_cache_dir_remove(const char *path);

#endif
