/*
 * The arithmetic of the tensor-core GEMM (backends/fused/kernels/gemm_mma.cl), emulated in C so
 * that it is checked on every machine, also where no NVIDIA device can run the kernel: TF32
 * rounding (nearest, ties away, low 13 bits cleared), the fp32x3 split x = big + small, the
 * three products small*big + big*small + big*big per 8-deep step with one rounding to fp32
 * each, the kernel's order of depths, and fp32x3's accumulation per 16-deep group. The real kernels
 * are checked against float64 on the GPU machine by test_fused and the probe recorded in
 * BENCHMARKS.md as of commit c872d6b.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testlib.h"

enum { GROUP = 16 }; /* depths a work-item reads at once; fp32x3 accumulates per group */

/* The kernel's split: big = tf32(x), small = tf32(x - big), NaN for a non-finite x. */
static void split(float x, int prec, float *big, float *small)
{
    *big = hd_test_tf32(x);
    *small = prec == 3 ? hd_test_tf32(x - *big) : 0.0f;
}

/* One mma step: d + the 8 exact products, rounded once. */
static float mma8(float d, const float *a, const float *b, size_t n)
{
    double s = d;
    for (size_t p = 0; p < n; p++)
        s += (double)a[p] * (double)b[p];
    return (float)s;
}

/* Element of op = a (1 x k) . b (k x 1) as the kernel computes it in precision prec (1: tf32,
 * 3: fp32x3): per 16-deep group, step s (0, 1) takes depths 4t + 2s and 4t + 2s + 1 for
 * t < 4 (zero past k); tf32 adds every step into the one accumulator, fp32x3 each group's
 * steps into a fresh one, added to the total in fp32. */
static float emulated_dot(const float *a, const float *b, size_t k, int prec)
{
    float acc = 0.0f;
    for (size_t g0 = 0; g0 < k; g0 += GROUP) {
        float part = prec == 3 ? 0.0f : acc;
        for (size_t s = 0; s < 2; s++) {
            float ab[8], as[8], bb[8], bs[8];
            for (size_t slot = 0; slot < 8; slot++) {
                size_t p = g0 + 4 * (slot % 4) + 2 * s + slot / 4;
                float x = p < k ? a[p] : 0.0f, y = p < k ? b[p] : 0.0f;
                split(x, prec, &ab[slot], &as[slot]);
                split(y, prec, &bb[slot], &bs[slot]);
            }
            if (prec == 3) {
                part = mma8(part, as, bb, 8);
                part = mma8(part, ab, bs, 8);
            }
            part = mma8(part, ab, bb, 8);
        }
        acc = prec == 3 ? acc + part : part;
    }
    return acc;
}

static float fp32_dot(const float *a, const float *b, size_t k)
{
    float acc = 0.0f;
    for (size_t p = 0; p < k; p++)
        acc = fmaf(a[p], b[p], acc);
    return acc;
}

/* Largest |got - want| / bound over `count` random dot products of length k. */
typedef struct errors {
    double fp32, fp32x3, tf32;
} errors;

static errors measure(size_t k, size_t count, float lo, float hi, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    float *a = hd_test_floats(k), *b = hd_test_floats(k);
    errors e = {0, 0, 0};
    for (size_t c = 0; c < count; c++) {
        hd_test_fill(&rng, a, k, lo, hi);
        hd_test_fill(&rng, b, k, lo, hi);
        double want = 0.0, bound = 0.0;
        for (size_t p = 0; p < k; p++) {
            want += (double)a[p] * (double)b[p];
            bound += fabs((double)a[p] * (double)b[p]);
        }
        if (bound == 0.0)
            continue;
        double f = fabs(fp32_dot(a, b, k) - want) / bound;
        double x3 = fabs(emulated_dot(a, b, k, 3) - want) / bound;
        double t = fabs(emulated_dot(a, b, k, 1) - want) / bound;
        e.fp32 = f > e.fp32 ? f : e.fp32;
        e.fp32x3 = x3 > e.fp32x3 ? x3 : e.fp32x3;
        e.tf32 = t > e.tf32 ? t : e.tf32;
    }
    free(a);
    free(b);
    return e;
}

static void test_tf32_rounding_clears_low_bits_and_rounds_to_nearest(void **state)
{
    (void)state;
    assert_true(hd_test_tf32(1.0f) == 1.0f);
    /* 1 + 2^-11 is halfway between TF32 neighbours 1 and 1 + 2^-10: ties go away from zero */
    assert_true(hd_test_tf32(1.0f + 0x1p-11f) == 1.0f + 0x1p-10f);
    assert_true(hd_test_tf32(-(1.0f + 0x1p-11f)) == -(1.0f + 0x1p-10f));
    assert_true(hd_test_tf32(1.0f + 0x1p-12f) == 1.0f);
    assert_true(isinf(hd_test_tf32(INFINITY)) && isnan(hd_test_tf32(NAN)));
    hd_rng rng = hd_test_rng(7100);
    float x[4096];
    hd_test_fill(&rng, x, 4096, -1e6f, 1e6f);
    for (size_t i = 0; i < 4096; i++) {
        float big, small;
        split(x[i], 3, &big, &small);
        uint32_t ub, us;
        memcpy(&ub, &big, 4);
        memcpy(&us, &small, 4);
        assert_int_equal(ub & 0x1fffu, 0);
        assert_int_equal(us & 0x1fffu, 0);
        assert_true(fabs((double)x[i] - big) <= ldexp(fabs((double)x[i]), -11));
        /* big + small carries x to about 22 bits */
        assert_true(fabs((double)x[i] - big - small) <= ldexp(fabs((double)x[i]), -21));
    }
}

/* fp32x3's error against float64 no worse than twice fp32's, or than 2^-20 of the terms'
 * magnitudes where that is larger (big + small carries each operand to about 22 bits, so a
 * short sum is a little coarser than fp32's single rounding), over k from a single product to
 * deeper than the largest suites use, on values of one sign (large sums) and of both. tf32
 * stays within its documented 2^-9 of the terms' magnitudes. */
static void test_fp32x3_error_within_twice_fp32(void **state)
{
    (void)state;
    static const size_t ks[] = {1, 7, 8, 9, 33, 100, 1031, 4099};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        for (int sign = 0; sign < 2; sign++) {
            errors e = measure(ks[i], 64, sign ? -1.0f : 0.0f, 1.0f, 7200 + i * 2 + sign);
            double floor = ldexp(1.0, -20);
            if (e.fp32x3 > 2.0 * e.fp32 && e.fp32x3 > floor)
                fail_msg("k %zu: fp32x3 error %.3g above twice fp32's %.3g", ks[i], e.fp32x3,
                         e.fp32);
            if (e.tf32 > 1.0 / 512.0)
                fail_msg("k %zu: tf32 error %.3g above 2^-9", ks[i], e.tf32);
        }
}

/* One TF32 product really is less exact than fp32x3 (the modes differ); NaN propagates, and
 * in fp32x3 an infinite input gives NaN (its residual is inf - inf), as the header documents. */
static void test_tf32_is_coarser_and_specials_propagate(void **state)
{
    (void)state;
    errors e = measure(256, 32, -1.0f, 1.0f, 7300);
    assert_true(e.tf32 > 8.0 * e.fp32x3);
    float a[3] = {1.0f, INFINITY, 2.0f}, b[3] = {1.0f, 1.0f, 1.0f};
    assert_true(isinf(emulated_dot(a, b, 3, 1)) && emulated_dot(a, b, 3, 1) > 0);
    assert_true(isnan(emulated_dot(a, b, 3, 3)));
    a[1] = NAN;
    assert_true(isnan(emulated_dot(a, b, 3, 3)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tf32_rounding_clears_low_bits_and_rounds_to_nearest),
        cmocka_unit_test(test_fp32x3_error_within_twice_fp32),
        cmocka_unit_test(test_tf32_is_coarser_and_specials_propagate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
