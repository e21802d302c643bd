/*
 * Every error path of every operation and of tensor create/read/write: the status, a message
 * on the context that names the culprit, and outputs left bit-identical. Each case runs twice:
 * on a CPU-only context and on the default context (PoCL or a GPU where OpenCL is present),
 * since argument checks must hold whichever backend would have run the call.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/tensor.h"
#include "tests/testlib.h"

typedef struct fixture {
    hd_context *ctx;   /* the context under test */
    hd_context *other; /* a second context, for tensors that belong elsewhere */
} fixture;

static int setup_with(void **state, bool cpu_only)
{
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->ctx = hd_test_context(cpu_only);
    f->other = hd_test_context(true);
    *state = f;
    return 0;
}

static int setup_cpu(void **state)
{
    return setup_with(state, true);
}

static int setup_default(void **state)
{
    return setup_with(state, false);
}

static int teardown(void **state)
{
    fixture *f = *state;
    hd_context_destroy(f->ctx);
    hd_context_destroy(f->other);
    free(f);
    return 0;
}

/* A tensor of random values in ctx, with a copy of them kept for the before/after check. */
typedef struct held {
    hd_tensor *t;
    float *data;
    size_t n;
} held;

static held hold(hd_context *ctx, size_t rows, size_t cols, uint64_t salt)
{
    held h = {.n = rows * cols};
    hd_rng rng = hd_test_rng(salt);
    h.data = hd_test_random(&rng, h.n, -1.0f, 1.0f);
    h.t = hd_test_tensor(ctx, rows, cols, h.data);
    return h;
}

static void release(held *h)
{
    hd_tensor_destroy(h->t);
    free(h->data);
    h->t = NULL;
    h->data = NULL;
}

/* The call returned want, the context's message is non-empty and names culprit, and every
 * held tensor still holds exactly what was written into it. */
static void expect_error(hd_context *ctx, const char *what, hd_status got, hd_status want,
                         const char *culprit, const held *untouched, size_t untouched_count)
{
    if (got != want)
        fail_msg("%s: returned %s, expected %s (%s)", what, hd_status_name(got),
                 hd_status_name(want), hd_context_last_error(ctx));
    const char *msg = hd_context_last_error(ctx);
    assert_non_null(msg);
    if (msg[0] == '\0')
        fail_msg("%s: no error message", what);
    if (culprit != NULL && strstr(msg, culprit) == NULL)
        fail_msg("%s: message '%s' does not name '%s'", what, msg, culprit);
    for (size_t i = 0; i < untouched_count; i++)
        hd_test_expect_unchanged(what, untouched[i].t, untouched[i].data);
}

/* ---- tensor create, write, read ---- */

static void test_tensor_create_null_context_is_invalid(void **state)
{
    (void)state;
    hd_tensor *t = (hd_tensor *)&t; /* any non-NULL value: must be reset to NULL */
    assert_int_equal(hd_tensor_create(NULL, 2, 3, &t), HD_ERR_INVALID_ARGUMENT);
    assert_null(t);
}

static void test_tensor_create_null_out_is_invalid(void **state)
{
    fixture *f = *state;
    expect_error(f->ctx, "hd_tensor_create(out NULL)", hd_tensor_create(f->ctx, 2, 3, NULL),
                 HD_ERR_INVALID_ARGUMENT, "NULL", NULL, 0);
}

static void test_tensor_create_size_overflow_is_rejected(void **state)
{
    fixture *f = *state;
    static const struct {
        size_t rows, cols;
    } sizes[] = {
        {SIZE_MAX, 2},
        {2, SIZE_MAX},
        {SIZE_MAX / 2, 3},
        {SIZE_MAX / sizeof(float) + 1, 1}, /* rows*cols fits, the byte count does not */
        {1, SIZE_MAX / sizeof(float) + 1},
        {(size_t)1 << (sizeof(size_t) * 4), (size_t)1 << (sizeof(size_t) * 4)},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        hd_tensor *t = (hd_tensor *)&t;
        char what[96];
        snprintf(what, sizeof what, "hd_tensor_create(%zu, %zu)", sizes[i].rows, sizes[i].cols);
        expect_error(f->ctx, what, hd_tensor_create(f->ctx, sizes[i].rows, sizes[i].cols, &t),
                     HD_ERR_SIZE_OVERFLOW, "hd_tensor_create", NULL, 0);
        assert_null(t);
    }
}

static void test_tensor_write_null_tensor_is_invalid(void **state)
{
    (void)state;
    float src[4] = {1, 2, 3, 4};
    assert_int_equal(hd_tensor_write(NULL, src), HD_ERR_INVALID_ARGUMENT);
}

static void test_tensor_write_null_source_is_invalid(void **state)
{
    fixture *f = *state;
    held h = hold(f->ctx, 3, 5, 1);
    expect_error(f->ctx, "hd_tensor_write(src NULL)", hd_tensor_write(h.t, NULL),
                 HD_ERR_INVALID_ARGUMENT, "source", &h, 1);
    release(&h);
}

static void test_tensor_read_null_tensor_is_invalid(void **state)
{
    (void)state;
    float dst[4] = {1, 2, 3, 4};
    assert_int_equal(hd_tensor_read(NULL, dst), HD_ERR_INVALID_ARGUMENT);
    assert_true(dst[0] == 1 && dst[1] == 2 && dst[2] == 3 && dst[3] == 4);
}

static void test_tensor_read_null_destination_is_invalid(void **state)
{
    fixture *f = *state;
    held h = hold(f->ctx, 3, 5, 2);
    expect_error(f->ctx, "hd_tensor_read(dst NULL)", hd_tensor_read(h.t, NULL),
                 HD_ERR_INVALID_ARGUMENT, "destination", &h, 1);
    release(&h);
}

static void test_tensor_empty_read_and_write_accept_null_buffers(void **state)
{
    fixture *f = *state;
    hd_tensor *t = hd_test_tensor(f->ctx, 0, 9, NULL);
    assert_int_equal(hd_tensor_write(t, NULL), HD_OK);
    assert_int_equal(hd_tensor_read(t, NULL), HD_OK);
    hd_tensor_destroy(t);
}

/* ---- GEMM ---- */

/* Shapes for GEMM cases: op(A) M×K, op(B) K×N, C M×N, all different so that any swap of
 * dimensions is a mismatch. */
enum { M = 5, N = 7, K = 3 };

static void test_gemm_null_context_is_invalid(void **state)
{
    fixture *f = *state;
    held a = hold(f->ctx, M, K, 10), b = hold(f->ctx, K, N, 11), c = hold(f->ctx, M, N, 12);
    assert_int_equal(hd_gemm(NULL, false, false, 1.0f, a.t, b.t, 0.0f, c.t),
                     HD_ERR_INVALID_ARGUMENT);
    hd_test_expect_unchanged("gemm ctx NULL", c.t, c.data);
    release(&a);
    release(&b);
    release(&c);
}

static void test_gemm_null_tensor_is_invalid(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held a = hold(ctx, M, K, 20), b = hold(ctx, K, N, 21), c = hold(ctx, M, N, 22);
    expect_error(ctx, "gemm a NULL", hd_gemm(ctx, false, false, 1.0f, NULL, b.t, 0.5f, c.t),
                 HD_ERR_INVALID_ARGUMENT, "'a'", &c, 1);
    expect_error(ctx, "gemm b NULL", hd_gemm(ctx, false, false, 1.0f, a.t, NULL, 0.5f, c.t),
                 HD_ERR_INVALID_ARGUMENT, "'b'", &c, 1);
    expect_error(ctx, "gemm c NULL", hd_gemm(ctx, false, false, 1.0f, a.t, b.t, 0.5f, NULL),
                 HD_ERR_INVALID_ARGUMENT, "'c'", (held[]){a, b}, 2);
    release(&a);
    release(&b);
    release(&c);
}

/* For each transpose combination: A with the wrong inner dimension, B with the wrong inner
 * dimension, C with wrong rows, C with wrong columns. Each alone is the only mistake. */
static void test_gemm_shape_mismatch_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        size_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        held a = hold(ctx, ar, ac, 30), b = hold(ctx, br, bc, 31), c = hold(ctx, M, N, 32);
        held a_bad = hold(ctx, ta ? K + 1 : M, ta ? M : K + 1, 33);
        held b_bad = hold(ctx, tb ? N : K + 1, tb ? K + 1 : N, 34);
        held c_rows = hold(ctx, M + 1, N, 35), c_cols = hold(ctx, M, N - 1, 36);
        char what[64];

        snprintf(what, sizeof what, "gemm %d: inner dimension of a", t);
        expect_error(ctx, what, hd_gemm(ctx, ta, tb, 1.0f, a_bad.t, b.t, 1.0f, c.t),
                     HD_ERR_SHAPE_MISMATCH, "op(a)", &c, 1);
        snprintf(what, sizeof what, "gemm %d: inner dimension of b", t);
        expect_error(ctx, what, hd_gemm(ctx, ta, tb, 1.0f, a.t, b_bad.t, 1.0f, c.t),
                     HD_ERR_SHAPE_MISMATCH, "op(b)", &c, 1);
        snprintf(what, sizeof what, "gemm %d: rows of c", t);
        expect_error(ctx, what, hd_gemm(ctx, ta, tb, 1.0f, a.t, b.t, 1.0f, c_rows.t),
                     HD_ERR_SHAPE_MISMATCH, "'c'", &c_rows, 1);
        snprintf(what, sizeof what, "gemm %d: columns of c", t);
        expect_error(ctx, what, hd_gemm(ctx, ta, tb, 1.0f, a.t, b.t, 0.0f, c_cols.t),
                     HD_ERR_SHAPE_MISMATCH, "'c'", &c_cols, 1);
        /* The transpose flags matter: the untransposed reading of a transposed shape fails. */
        if (ta && ar != ac) {
            snprintf(what, sizeof what, "gemm %d: a read without its transpose", t);
            expect_error(ctx, what, hd_gemm(ctx, false, tb, 1.0f, a.t, b.t, 1.0f, c.t),
                         HD_ERR_SHAPE_MISMATCH, "op(", &c, 1);
        }
        release(&a);
        release(&b);
        release(&c);
        release(&a_bad);
        release(&b_bad);
        release(&c_rows);
        release(&c_cols);
    }
}

static void test_gemm_output_aliasing_an_input_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    /* Square operands: aliasing is the only mistake. */
    held a = hold(ctx, 6, 6, 40), b = hold(ctx, 6, 6, 41);
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        expect_error(ctx, "gemm c == a", hd_gemm(ctx, ta, tb, 1.0f, a.t, b.t, 1.0f, a.t),
                     HD_ERR_ALIASING, "'a'", (held[]){a, b}, 2);
        expect_error(ctx, "gemm c == b", hd_gemm(ctx, ta, tb, 1.0f, a.t, b.t, 0.0f, b.t),
                     HD_ERR_ALIASING, "'b'", (held[]){a, b}, 2);
    }
    /* c == a == b */
    expect_error(ctx, "gemm c == a == b", hd_gemm(ctx, false, false, 1.0f, a.t, a.t, 0.0f, a.t),
                 HD_ERR_ALIASING, "'c'", &a, 1);
    release(&a);
    release(&b);
}

static void test_gemm_tensor_of_another_context_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held a = hold(ctx, M, K, 50), b = hold(ctx, K, N, 51), c = hold(ctx, M, N, 52);
    held a2 = hold(f->other, M, K, 53), b2 = hold(f->other, K, N, 54);
    held c2 = hold(f->other, M, N, 55);
    expect_error(ctx, "gemm a elsewhere", hd_gemm(ctx, false, false, 1.0f, a2.t, b.t, 1.0f, c.t),
                 HD_ERR_WRONG_CONTEXT, "'a'", &c, 1);
    expect_error(ctx, "gemm b elsewhere", hd_gemm(ctx, false, false, 1.0f, a.t, b2.t, 1.0f, c.t),
                 HD_ERR_WRONG_CONTEXT, "'b'", &c, 1);
    expect_error(ctx, "gemm c elsewhere", hd_gemm(ctx, false, false, 1.0f, a.t, b.t, 1.0f, c2.t),
                 HD_ERR_WRONG_CONTEXT, "'c'", &c2, 1);
    /* Every tensor from the other context, run in this one: still rejected. */
    expect_error(ctx, "gemm all elsewhere",
                 hd_gemm(ctx, false, false, 1.0f, a2.t, b2.t, 1.0f, c2.t), HD_ERR_WRONG_CONTEXT,
                 "another context", &c2, 1);
    release(&a);
    release(&b);
    release(&c);
    release(&a2);
    release(&b2);
    release(&c2);
}

/* ---- batched GEMM: a batch of 3 of the M×K by K×N products above ---- */

enum { BATCH = 3 };

static void test_gemm_batched_bad_arguments_are_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held a = hold(ctx, BATCH * M, K, 60), b = hold(ctx, BATCH * K, N, 61);
    held c = hold(ctx, BATCH * M, N, 62);
    assert_int_equal(hd_gemm_batched(NULL, BATCH, false, false, 1.0f, a.t, b.t, 0.0f, c.t),
                     HD_ERR_INVALID_ARGUMENT);
    expect_error(ctx, "gemm_batched a NULL",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, NULL, b.t, 0.0f, c.t),
                 HD_ERR_INVALID_ARGUMENT, "'a'", &c, 1);
    expect_error(ctx, "gemm_batched b NULL",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, NULL, 0.0f, c.t),
                 HD_ERR_INVALID_ARGUMENT, "'b'", &c, 1);
    expect_error(ctx, "gemm_batched c NULL",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b.t, 0.0f, NULL),
                 HD_ERR_INVALID_ARGUMENT, "'c'", (held[]){a, b}, 2);

    /* A batch that does not divide a tensor's rows, for each tensor in turn. */
    expect_error(ctx, "gemm_batched batch 2",
                 hd_gemm_batched(ctx, 2, false, false, 1.0f, a.t, b.t, 0.0f, c.t),
                 HD_ERR_SHAPE_MISMATCH, "'a'", &c, 1);
    held b_odd = hold(ctx, BATCH * K + 1, N, 63), c_odd = hold(ctx, BATCH * M + 1, N, 64);
    expect_error(ctx, "gemm_batched b rows",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b_odd.t, 0.0f, c.t),
                 HD_ERR_SHAPE_MISMATCH, "'b'", &c, 1);
    expect_error(ctx, "gemm_batched c rows",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b.t, 0.0f, c_odd.t),
                 HD_ERR_SHAPE_MISMATCH, "'c'", &c_odd, 1);
    /* Divisible, but the per-matrix shapes do not fit. */
    held b_k = hold(ctx, BATCH * (K + 1), N, 65), c_n = hold(ctx, BATCH * M, N + 1, 66);
    expect_error(ctx, "gemm_batched inner dimension",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b_k.t, 0.0f, c.t),
                 HD_ERR_SHAPE_MISMATCH, "op(b)", &c, 1);
    expect_error(ctx, "gemm_batched c columns",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b.t, 0.0f, c_n.t),
                 HD_ERR_SHAPE_MISMATCH, "'c'", &c_n, 1);
    expect_error(ctx, "gemm_batched a transposed",
                 hd_gemm_batched(ctx, BATCH, true, false, 1.0f, a.t, b.t, 0.0f, c.t),
                 HD_ERR_SHAPE_MISMATCH, "op(", &c, 1);

    /* Aliasing (square matrices, so nothing else is wrong) and other contexts. */
    held sq = hold(ctx, BATCH * 4, 4, 67), sq2 = hold(ctx, BATCH * 4, 4, 68);
    expect_error(ctx, "gemm_batched c == a",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, sq.t, sq2.t, 1.0f, sq.t),
                 HD_ERR_ALIASING, "'a'", (held[]){sq, sq2}, 2);
    expect_error(ctx, "gemm_batched c == b",
                 hd_gemm_batched(ctx, BATCH, false, true, 1.0f, sq.t, sq2.t, 1.0f, sq2.t),
                 HD_ERR_ALIASING, "'b'", (held[]){sq, sq2}, 2);
    held a2 = hold(f->other, BATCH * M, K, 69), c2 = hold(f->other, BATCH * M, N, 70);
    expect_error(ctx, "gemm_batched a elsewhere",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a2.t, b.t, 1.0f, c.t),
                 HD_ERR_WRONG_CONTEXT, "'a'", &c, 1);
    expect_error(ctx, "gemm_batched c elsewhere",
                 hd_gemm_batched(ctx, BATCH, false, false, 1.0f, a.t, b.t, 1.0f, c2.t),
                 HD_ERR_WRONG_CONTEXT, "'c'", &c2, 1);
    held *all[] = {&a, &b, &c, &b_odd, &c_odd, &b_k, &c_n, &sq, &sq2, &a2, &c2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        release(all[i]);
}

/* ---- LoRA ---- */

enum { T = 3, IN = 5, OUT = 4, R = 2 };

typedef struct lora_set {
    held x, w, a, b, y;
} lora_set;

static lora_set lora_hold(hd_context *ctx, uint64_t salt)
{
    return (lora_set){hold(ctx, T, IN, salt), hold(ctx, IN, OUT, salt + 1),
                      hold(ctx, IN, R, salt + 2), hold(ctx, R, OUT, salt + 3),
                      hold(ctx, T, OUT, salt + 4)};
}

static void lora_release(lora_set *s)
{
    release(&s->x);
    release(&s->w);
    release(&s->a);
    release(&s->b);
    release(&s->y);
}

static void test_lora_null_context_or_tensor_is_invalid(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    lora_set s = lora_hold(ctx, 100);
    hd_tensor *x = s.x.t, *w = s.w.t, *a = s.a.t, *b = s.b.t, *y = s.y.t;
    assert_int_equal(hd_lora_forward(NULL, x, w, a, b, 1.0f, y), HD_ERR_INVALID_ARGUMENT);
    expect_error(ctx, "lora x NULL", hd_lora_forward(ctx, NULL, w, a, b, 1.0f, y),
                 HD_ERR_INVALID_ARGUMENT, "'x'", &s.y, 1);
    expect_error(ctx, "lora w NULL", hd_lora_forward(ctx, x, NULL, a, b, 1.0f, y),
                 HD_ERR_INVALID_ARGUMENT, "'w'", &s.y, 1);
    expect_error(ctx, "lora a NULL", hd_lora_forward(ctx, x, w, NULL, b, 1.0f, y),
                 HD_ERR_INVALID_ARGUMENT, "'a'", &s.y, 1);
    expect_error(ctx, "lora b NULL", hd_lora_forward(ctx, x, w, a, NULL, 1.0f, y),
                 HD_ERR_INVALID_ARGUMENT, "'b'", &s.y, 1);
    expect_error(ctx, "lora y NULL", hd_lora_forward(ctx, x, w, a, b, 1.0f, NULL),
                 HD_ERR_INVALID_ARGUMENT, "'y'", &s.x, 1);
    lora_release(&s);
}

static void test_lora_shape_mismatch_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    lora_set s = lora_hold(ctx, 110);
    hd_tensor *x = s.x.t, *w = s.w.t, *a = s.a.t, *b = s.b.t, *y = s.y.t;
    struct {
        const char *what, *culprit;
        size_t rows, cols;
        int slot; /* 0 x, 1 w, 2 a, 3 b, 4 y */
    } cases[] = {
        {"lora w rows", "'w'", IN + 1, OUT, 1},   {"lora a rows", "'a'", IN - 1, R, 2},
        {"lora b rows", "'b'", R + 1, OUT, 3},    {"lora b cols", "'b'", R, OUT + 1, 3},
        {"lora y rows", "'y'", T + 1, OUT, 4},    {"lora y cols", "'y'", T, OUT - 1, 4},
        {"lora x cols", "columns", T, IN + 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        held bad = hold(ctx, cases[i].rows, cases[i].cols, 120 + i);
        hd_tensor *args[5] = {x, w, a, b, y};
        args[cases[i].slot] = bad.t;
        held out = cases[i].slot == 4 ? bad : s.y;
        expect_error(ctx, cases[i].what,
                     hd_lora_forward(ctx, args[0], args[1], args[2], args[3], 1.0f, args[4]),
                     HD_ERR_SHAPE_MISMATCH, cases[i].culprit, &out, 1);
        release(&bad);
    }
    lora_release(&s);
}

static void test_lora_output_aliasing_an_input_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    /* Everything 4×4 (tokens = in = out = rank): aliasing is the only mistake. */
    held x = hold(ctx, 4, 4, 130), w = hold(ctx, 4, 4, 131), a = hold(ctx, 4, 4, 132);
    held b = hold(ctx, 4, 4, 133);
    held all[] = {x, w, a, b};
    expect_error(ctx, "lora y == x", hd_lora_forward(ctx, x.t, w.t, a.t, b.t, 1.0f, x.t),
                 HD_ERR_ALIASING, "'x'", all, 4);
    expect_error(ctx, "lora y == w", hd_lora_forward(ctx, x.t, w.t, a.t, b.t, 1.0f, w.t),
                 HD_ERR_ALIASING, "'w'", all, 4);
    expect_error(ctx, "lora y == a", hd_lora_forward(ctx, x.t, w.t, a.t, b.t, 1.0f, a.t),
                 HD_ERR_ALIASING, "'a'", all, 4);
    expect_error(ctx, "lora y == b", hd_lora_forward(ctx, x.t, w.t, a.t, b.t, 1.0f, b.t),
                 HD_ERR_ALIASING, "'b'", all, 4);
    release(&x);
    release(&w);
    release(&a);
    release(&b);
}

static void test_lora_tensor_of_another_context_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    lora_set s = lora_hold(ctx, 140), o = lora_hold(f->other, 150);
    static const char *const names[] = {"'x'", "'w'", "'a'", "'b'", "'y'"};
    for (int slot = 0; slot < 5; slot++) {
        hd_tensor *args[5] = {s.x.t, s.w.t, s.a.t, s.b.t, s.y.t};
        hd_tensor *others[5] = {o.x.t, o.w.t, o.a.t, o.b.t, o.y.t};
        args[slot] = others[slot];
        char what[48];
        snprintf(what, sizeof what, "lora %s elsewhere", names[slot]);
        expect_error(ctx, what,
                     hd_lora_forward(ctx, args[0], args[1], args[2], args[3], 0.5f, args[4]),
                     HD_ERR_WRONG_CONTEXT, names[slot], slot == 4 ? &o.y : &s.y, 1);
    }
    lora_release(&s);
    lora_release(&o);
}

/* T x r temporaries beyond the address space: refused before any tensor is placed (none of
 * these tensors could be: each is 2^31 floats or more, far over the test's memory). */
static void test_lora_temporaries_over_the_address_space_are_refused(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    const size_t huge = (size_t)1 << 31;
    hd_tensor *x = NULL, *w = NULL, *a = NULL, *b = NULL, *y = NULL, *dy = NULL, *dx = NULL;
    hd_tensor *da = NULL, *db = NULL;
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &x), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, 1, 1, &w), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, 1, huge, &a), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &b), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &y), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &dy), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &dx), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, 1, huge, &da), HD_OK);
    assert_int_equal(hd_tensor_create(ctx, huge, 1, &db), HD_OK);
    expect_error(ctx, "lora T x r", hd_lora_forward(ctx, x, w, a, b, 1.0f, y),
                 HD_ERR_SIZE_OVERFLOW, "low-rank", NULL, 0);
    expect_error(ctx, "lora backward T x r",
                 hd_lora_backward(ctx, x, w, a, b, 1.0f, dy, dx, da, db, false),
                 HD_ERR_SIZE_OVERFLOW, "low-rank", NULL, 0);
    hd_tensor *all[] = {x, w, a, b, y, dy, dx, da, db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i]->state->host != NULL || all[i]->state->device != NULL)
            fail_msg("tensor %zu was given memory before the refusal", i);
        hd_tensor_destroy(all[i]);
    }
}

/* ---- row operations ---- */

enum { ROWS = 4, COLS = 9 };

static void test_row_ops_null_context_or_tensor_is_invalid(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held x = hold(ctx, ROWS, COLS, 200), y = hold(ctx, ROWS, COLS, 201);
    held g = hold(ctx, 1, COLS, 202), b = hold(ctx, 1, COLS, 203);
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        char what[64];
        assert_int_equal(hd_test_row_call(NULL, op, x.t, g.t, b.t, 1e-5f, y.t),
                         HD_ERR_INVALID_ARGUMENT);
        snprintf(what, sizeof what, "%s x NULL", hd_test_row_op_name(op));
        expect_error(ctx, what, hd_test_row_call(ctx, op, NULL, g.t, b.t, 1e-5f, y.t),
                     HD_ERR_INVALID_ARGUMENT, "'x'", &y, 1);
        snprintf(what, sizeof what, "%s y NULL", hd_test_row_op_name(op));
        expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, g.t, b.t, 1e-5f, NULL),
                     HD_ERR_INVALID_ARGUMENT, "'y'", &x, 1);
    }
    expect_error(ctx, "layer_norm gamma NULL", hd_layer_norm(ctx, x.t, NULL, b.t, 1e-5f, y.t),
                 HD_ERR_INVALID_ARGUMENT, "'gamma'", &y, 1);
    expect_error(ctx, "layer_norm beta NULL", hd_layer_norm(ctx, x.t, g.t, NULL, 1e-5f, y.t),
                 HD_ERR_INVALID_ARGUMENT, "'beta'", &y, 1);
    expect_error(ctx, "rms_norm weight NULL", hd_rms_norm(ctx, x.t, NULL, 1e-5f, y.t),
                 HD_ERR_INVALID_ARGUMENT, "'weight'", &y, 1);
    release(&x);
    release(&y);
    release(&g);
    release(&b);
}

static void test_row_ops_shape_mismatch_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held x = hold(ctx, ROWS, COLS, 210), g = hold(ctx, 1, COLS, 211), b = hold(ctx, 1, COLS, 212);
    held y_rows = hold(ctx, ROWS + 1, COLS, 213), y_cols = hold(ctx, ROWS, COLS - 1, 214);
    held y_flat = hold(ctx, COLS, ROWS, 215); /* same element count, other shape */
    held y = hold(ctx, ROWS, COLS, 216);
    held p_cols = hold(ctx, 1, COLS + 1, 217), p_rows = hold(ctx, 2, COLS, 218);
    held p_col = hold(ctx, COLS, 1, 219);
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        char what[64];
        held bad_ys[] = {y_rows, y_cols, y_flat};
        for (int i = 0; i < 3; i++) {
            snprintf(what, sizeof what, "%s y shape %d", hd_test_row_op_name(op), i);
            expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, g.t, b.t, 1e-5f, bad_ys[i].t),
                         HD_ERR_SHAPE_MISMATCH, "'y'", &bad_ys[i], 1);
        }
        if (op == HD_TEST_SOFTMAX)
            continue;
        const char *pname = op == HD_TEST_LAYER_NORM ? "'gamma'" : "'weight'";
        held bad_ps[] = {p_cols, p_rows, p_col};
        for (int i = 0; i < 3; i++) {
            snprintf(what, sizeof what, "%s %s shape %d", hd_test_row_op_name(op), pname, i);
            expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, bad_ps[i].t, b.t, 1e-5f, y.t),
                         HD_ERR_SHAPE_MISMATCH, pname, &y, 1);
            if (op == HD_TEST_LAYER_NORM) {
                snprintf(what, sizeof what, "layer_norm 'beta' shape %d", i);
                expect_error(ctx, what, hd_layer_norm(ctx, x.t, g.t, bad_ps[i].t, 1e-5f, y.t),
                             HD_ERR_SHAPE_MISMATCH, "'beta'", &y, 1);
            }
        }
    }
    release(&x);
    release(&g);
    release(&b);
    release(&y_rows);
    release(&y_cols);
    release(&y_flat);
    release(&y);
    release(&p_cols);
    release(&p_rows);
    release(&p_col);
}

static void test_row_ops_output_aliasing_a_parameter_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    /* One-row x: y == gamma has the right shape, so aliasing is the only mistake. */
    held x = hold(ctx, 1, COLS, 220), g = hold(ctx, 1, COLS, 221), b = hold(ctx, 1, COLS, 222);
    held all[] = {x, g, b};
    expect_error(ctx, "layer_norm y == gamma", hd_layer_norm(ctx, x.t, g.t, b.t, 1e-5f, g.t),
                 HD_ERR_ALIASING, "'gamma'", all, 3);
    expect_error(ctx, "layer_norm y == beta", hd_layer_norm(ctx, x.t, g.t, b.t, 1e-5f, b.t),
                 HD_ERR_ALIASING, "'beta'", all, 3);
    expect_error(ctx, "rms_norm y == weight", hd_rms_norm(ctx, x.t, g.t, 1e-5f, g.t),
                 HD_ERR_ALIASING, "'weight'", all, 3);
    release(&x);
    release(&g);
    release(&b);
}

static void test_row_ops_bad_eps_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held x = hold(ctx, ROWS, COLS, 230), g = hold(ctx, 1, COLS, 231), b = hold(ctx, 1, COLS, 232);
    held y = hold(ctx, ROWS, COLS, 233);
    static const float bad[] = {NAN, INFINITY, -INFINITY, -1e-5f, -0x1p-149f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (hd_test_row_op op = HD_TEST_LAYER_NORM; op <= HD_TEST_RMS_NORM; op++) {
            char what[64];
            snprintf(what, sizeof what, "%s eps=%g", hd_test_row_op_name(op), (double)bad[i]);
            expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, g.t, b.t, bad[i], y.t),
                         HD_ERR_INVALID_ARGUMENT, "eps", &y, 1);
            snprintf(what, sizeof what, "%s eps=%g in place", hd_test_row_op_name(op),
                     (double)bad[i]);
            expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, g.t, b.t, bad[i], x.t),
                         HD_ERR_INVALID_ARGUMENT, "eps", &x, 1);
        }
    }
    release(&x);
    release(&g);
    release(&b);
    release(&y);
}

static void test_row_ops_tensor_of_another_context_is_rejected(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held x = hold(ctx, ROWS, COLS, 240), g = hold(ctx, 1, COLS, 241), b = hold(ctx, 1, COLS, 242);
    held y = hold(ctx, ROWS, COLS, 243);
    held x2 = hold(f->other, ROWS, COLS, 244), g2 = hold(f->other, 1, COLS, 245);
    held b2 = hold(f->other, 1, COLS, 246), y2 = hold(f->other, ROWS, COLS, 247);
    for (hd_test_row_op op = HD_TEST_SOFTMAX; op <= HD_TEST_RMS_NORM; op++) {
        char what[64];
        snprintf(what, sizeof what, "%s x elsewhere", hd_test_row_op_name(op));
        expect_error(ctx, what, hd_test_row_call(ctx, op, x2.t, g.t, b.t, 1e-5f, y.t),
                     HD_ERR_WRONG_CONTEXT, "'x'", &y, 1);
        snprintf(what, sizeof what, "%s y elsewhere", hd_test_row_op_name(op));
        expect_error(ctx, what, hd_test_row_call(ctx, op, x.t, g.t, b.t, 1e-5f, y2.t),
                     HD_ERR_WRONG_CONTEXT, "'y'", &y2, 1);
        snprintf(what, sizeof what, "%s in place elsewhere", hd_test_row_op_name(op));
        expect_error(ctx, what, hd_test_row_call(ctx, op, x2.t, g.t, b.t, 1e-5f, x2.t),
                     HD_ERR_WRONG_CONTEXT, "'x'", &x2, 1);
    }
    expect_error(ctx, "layer_norm gamma elsewhere", hd_layer_norm(ctx, x.t, g2.t, b.t, 1e-5f, y.t),
                 HD_ERR_WRONG_CONTEXT, "'gamma'", &y, 1);
    expect_error(ctx, "layer_norm beta elsewhere", hd_layer_norm(ctx, x.t, g.t, b2.t, 1e-5f, y.t),
                 HD_ERR_WRONG_CONTEXT, "'beta'", &y, 1);
    expect_error(ctx, "rms_norm weight elsewhere", hd_rms_norm(ctx, x.t, g2.t, 1e-5f, y.t),
                 HD_ERR_WRONG_CONTEXT, "'weight'", &y, 1);
    release(&x);
    release(&g);
    release(&b);
    release(&y);
    release(&x2);
    release(&g2);
    release(&b2);
    release(&y2);
}

/* An output that an earlier operation left on the device (where the context has one) is
 * still intact after a rejected call: the check runs before any migration or launch. */
static void test_rejected_call_leaves_device_resident_output_intact(void **state)
{
    fixture *f = *state;
    hd_context *ctx = f->ctx;
    held x = hold(ctx, 64, 256, 250);
    hd_tensor *y = hd_test_tensor(ctx, 64, 256, NULL);
    if (hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_FUSED), HD_OK);
    assert_int_equal(hd_softmax(ctx, x.t, y), HD_OK);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_AUTO), HD_OK);
    held out = {.t = y, .n = 64 * 256};
    out.data = hd_test_read(y);
    held a = hold(ctx, 64, 3, 251), b = hold(ctx, 4, 256, 252);
    expect_error(ctx, "gemm into a device-resident output",
                 hd_gemm(ctx, false, false, 1.0f, a.t, b.t, 1.0f, y), HD_ERR_SHAPE_MISMATCH,
                 "op(b)", &out, 1);
    expect_error(ctx, "softmax into a device-resident output", hd_softmax(ctx, a.t, y),
                 HD_ERR_SHAPE_MISMATCH, "'y'", &out, 1);
    release(&x);
    release(&out);
    release(&a);
    release(&b);
}

static const struct CMUnitTest error_tests[] = {
    cmocka_unit_test(test_tensor_create_null_context_is_invalid),
    cmocka_unit_test(test_tensor_create_null_out_is_invalid),
    cmocka_unit_test(test_tensor_create_size_overflow_is_rejected),
    cmocka_unit_test(test_tensor_write_null_tensor_is_invalid),
    cmocka_unit_test(test_tensor_write_null_source_is_invalid),
    cmocka_unit_test(test_tensor_read_null_tensor_is_invalid),
    cmocka_unit_test(test_tensor_read_null_destination_is_invalid),
    cmocka_unit_test(test_tensor_empty_read_and_write_accept_null_buffers),
    cmocka_unit_test(test_gemm_null_context_is_invalid),
    cmocka_unit_test(test_gemm_null_tensor_is_invalid),
    cmocka_unit_test(test_gemm_shape_mismatch_is_rejected),
    cmocka_unit_test(test_gemm_output_aliasing_an_input_is_rejected),
    cmocka_unit_test(test_gemm_tensor_of_another_context_is_rejected),
    cmocka_unit_test(test_gemm_batched_bad_arguments_are_rejected),
    cmocka_unit_test(test_lora_null_context_or_tensor_is_invalid),
    cmocka_unit_test(test_lora_shape_mismatch_is_rejected),
    cmocka_unit_test(test_lora_output_aliasing_an_input_is_rejected),
    cmocka_unit_test(test_lora_tensor_of_another_context_is_rejected),
    cmocka_unit_test(test_lora_temporaries_over_the_address_space_are_refused),
    cmocka_unit_test(test_row_ops_null_context_or_tensor_is_invalid),
    cmocka_unit_test(test_row_ops_shape_mismatch_is_rejected),
    cmocka_unit_test(test_row_ops_output_aliasing_a_parameter_is_rejected),
    cmocka_unit_test(test_row_ops_bad_eps_is_rejected),
    cmocka_unit_test(test_row_ops_tensor_of_another_context_is_rejected),
    cmocka_unit_test(test_rejected_call_leaves_device_resident_output_intact),
};

int main(void)
{
    hd_test_seed();
    int failed =
        cmocka_run_group_tests_name("dispatch_errors_cpu", error_tests, setup_cpu, teardown);
    failed += cmocka_run_group_tests_name("dispatch_errors_default", error_tests, setup_default,
                                          teardown);
    return failed;
}
