/*
 * SwiGLU, GELU (forward and backward) and add: elementwise.cl on the device (fp32 and bf16,
 * VEC 1 and 4, one vector per work-item and grid-stride with few work-groups, every in-place
 * form) and elementwise.c on the CPU (pools of 1, 2 and 3 threads, which must agree bit for
 * bit), against the float64 reference; the backward passes, and the reference's, against
 * central differences of the reference forward.
 *
 * Tolerances, relative to a magnitude per element (reported as err/magnitude): fp32 within
 * 16 ulps (16 * FLT_EPSILON, 1.9e-6) of
 *   swiglu          |y|
 *   swiglu dg       |dy * u| * s * (1 + |g| (1 - s)), s = sigmoid(g) (the sum's terms)
 *   swiglu du       |du|
 *   gelu            |y| + |x| * (s (1 - s) |2z| + 1e-10), s = sigmoid(2z) (z's rounding
 *                   through s; 1e-10 |x|: the reference's own rounding of 1 + tanh(z), 1e-16
 *                   absolute, 16 ulps of it)
 *   gelu dx         |dy| * (s + s (1 - s) (|2z| + |P| (1 + |2z|)) + 1e-10 (1 + |P|)),
 *                   P = 2k x (1 + 3c x^2)
 *   add             |y| + |alpha x|
 * plus, where a sigmoid underflows (float: below 2^-126; the CPU's exp flushes below e^-87),
 * 2^-125 times the factor it multiplies (|g u|, |dy u| (1 + |g|), |dy g|, |x|, |dy| (1 + |P|)).
 * bf16: half an ulp of bf16 (2^-8 |want|) more, the reference taken on the bf16-rounded
 * inputs. Finite differences: within 2e-5 of the same magnitude, plus the reference forward's
 * own rounding over the step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "dev/elementwise/harness.h"

#define GELU_K 0.79788456080286535588
#define GELU_C 0.044715
#define FD_TOL 2e-5
#define ULPS   16.0

enum { SWIGLU, SWIGLU_BACKWARD, GELU, GELU_BACKWARD, ADD, NOPS };

/* One op: its kernel's buffers are its inputs, then its outputs (add: x, then y in and out).
 * alias[m][o]: in in-place form m, the input that output o is written over (-1: its own). */
static const struct op {
    const char *name;
    int inputs, outputs, modes;
    int alias[4][2];
} ops[NOPS] = {
    [SWIGLU] = {"swiglu", 2, 1, 3, {{-1}, {0}, {1}}},
    [SWIGLU_BACKWARD] = {"swiglu_backward", 3, 2, 4, {{-1, -1}, {0, 1}, {2, 1}, {0, 2}}},
    [GELU] = {"gelu", 1, 1, 2, {{-1}, {0}}},
    [GELU_BACKWARD] = {"gelu_backward", 2, 1, 3, {{-1}, {1}, {0}}},
    [ADD] = {"add", 2, 1, 1, {{1}}},
};

static tally tallies[NOPS][2][2]; /* op, output, bf16 */
static tally cpu_tallies[NOPS][2], fd_tallies[NOPS][2], cpu_same;

static double sigmoid(double t)
{
    return 1.0 / (1.0 + exp(-t));
}

/* |t| * s * (1 - s), s = sigmoid(t): how far a rounding of t moves s, relative to |t|'s. */
static double spread(double t)
{
    if (!(fabs(t) < 700.0))
        return 0.0;
    double s = sigmoid(t);
    return fabs(t) * s * (1.0 - s);
}

/* The magnitude of output o of element i (see the banner). */
static double magnitude(int op, int o, float *const in[3], size_t i, double want, float alpha)
{
    double a = in[0][i], b = ops[op].inputs > 1 ? in[1][i] : 0.0;
    switch (op) {
    case SWIGLU_BACKWARD:
        if (o == 0) {
            double s = sigmoid(a), dy = in[2][i];
            return fabs(dy * b) * s * (1.0 + fabs(a) * (1.0 - s));
        }
        return fabs(want);
    case GELU: {
        double t = 2.0 * GELU_K * (a + GELU_C * a * a * a);
        return fabs(want) + fabs(a) * (spread(t) + 1e-10);
    }
    case GELU_BACKWARD: {
        double t = 2.0 * GELU_K * (a + GELU_C * a * a * a);
        double p = fabs(2.0 * GELU_K * a * (1.0 + 3.0 * GELU_C * a * a));
        if (!(fabs(t) < 700.0))
            return fabs(b) * (1.0 + 1e-10 * (1.0 + p));
        double s = sigmoid(t);
        return fabs(b) * (s + s * (1.0 - s) * (fabs(t) + p * (1.0 + fabs(t))) + 1e-10 * (1.0 + p));
    }
    case ADD:
        return fabs(b) + fabs((double)alpha * a);
    default:
        return fabs(want);
    }
}

/* 2^-125 times the factor an underflowing sigmoid multiplies in output o of element i. */
static double underflow(int op, int o, float *const in[3], size_t i, float alpha)
{
    double a = in[0][i], b = ops[op].inputs > 1 ? in[1][i] : 0.0;
    double factor = 0.0;
    switch (op) {
    case SWIGLU:
        factor = fabs(a * b);
        break;
    case SWIGLU_BACKWARD:
        factor = o == 0 ? fabs((double)in[2][i] * b) * (1.0 + fabs(a)) : fabs((double)in[2][i] * a);
        break;
    case GELU:
        factor = fabs(a);
        break;
    case GELU_BACKWARD:
        factor = fabs(b) * (1.0 + fabs(2.0 * GELU_K * a * (1.0 + 3.0 * GELU_C * a * a)));
        break;
    }
    (void)alpha;
    return 0x1p-125 * factor;
}

static void reference(int op, size_t n, float *const in[3], float alpha, double *want[2])
{
    switch (op) {
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
        hd__ref_add(n, alpha, in[0], in[1], want[0]);
        break;
    }
}

/* The device's outputs of op in in-place form mode, into got. */
static void run_device(int op, int mode, bool bf16, int vec, int wg, int groups, size_t rows,
                       size_t cols, float *const in[3], float alpha, float *got[2])
{
    const struct op *o = &ops[op];
    size_t n = rows * cols;
    char options[128];
    snprintf(options, sizeof options, "-D ACT_BF16=%d -D VEC=%d -D WG=%d", bf16, vec, wg);
    cl_kernel k = cl_kernel_get("elementwise", options, o->name);
    cl_mem buf[5];
    int nbuf = 0;
    for (int i = 0; i < o->inputs; i++)
        buf[nbuf++] = cl_acts(in[i], n, bf16);
    cl_mem out[2];
    for (int j = 0; j < o->outputs; j++) {
        int a = o->alias[mode][j];
        out[j] = a >= 0 ? buf[a] : cl_acts(NULL, n, bf16);
        if (op != ADD)
            buf[nbuf++] = out[j];
    }
    for (int i = 0; i < nbuf; i++)
        cl_arg(k, (cl_uint)i, sizeof(cl_mem), &buf[i]);
    int r = (int)rows, c = (int)cols;
    cl_arg(k, (cl_uint)nbuf, sizeof r, &r);
    cl_arg(k, (cl_uint)nbuf + 1, sizeof c, &c);
    if (op == ADD)
        cl_arg(k, (cl_uint)nbuf + 2, sizeof alpha, &alpha);
    size_t vectors = (n + (size_t)vec - 1) / (size_t)vec;
    size_t cover = (vectors + (size_t)wg - 1) / (size_t)wg;
    size_t g = groups > 0 ? (size_t)groups : cover > 0 ? cover : 1;
    cl_run(k, g * (size_t)wg, (size_t)wg);
    for (int j = 0; j < o->outputs; j++)
        cl_acts_read(out[j], got[j], n, bf16);
    for (int i = 0; i < o->inputs; i++)
        cl_free(buf[i]);
    for (int j = 0; j < o->outputs; j++)
        if (o->alias[mode][j] < 0)
            cl_free(out[j]);
}

/* The CPU's outputs of op in in-place form mode on pool, into got. */
static void run_cpu(int op, int mode, hd_cpu_pool *pool, size_t n, float *const in[3], float alpha,
                    float *got[2])
{
    const struct op *o = &ops[op];
    float *copy[3] = {NULL, NULL, NULL}, *out[2] = {NULL, NULL};
    for (int i = 0; i < o->inputs; i++) {
        copy[i] = alloc_f(n);
        memcpy(copy[i], in[i], n * sizeof(float));
    }
    for (int j = 0; j < o->outputs; j++) {
        int a = o->alias[mode][j];
        out[j] = a >= 0 ? copy[a] : alloc_f(n);
    }
    switch (op) {
    case SWIGLU:
        hd__cpu_swiglu(pool, n, copy[0], copy[1], out[0]);
        break;
    case SWIGLU_BACKWARD:
        hd__cpu_swiglu_backward(pool, n, copy[0], copy[1], copy[2], out[0], out[1]);
        break;
    case GELU:
        hd__cpu_gelu(pool, n, copy[0], out[0]);
        break;
    case GELU_BACKWARD:
        hd__cpu_gelu_backward(pool, n, copy[0], copy[1], out[0]);
        break;
    case ADD:
        hd__cpu_add(pool, n, alpha, copy[0], out[0]);
        break;
    }
    for (int j = 0; j < o->outputs; j++)
        memcpy(got[j], out[j], n * sizeof(float));
    for (int j = 0; j < o->outputs; j++)
        if (o->alias[mode][j] < 0)
            free(out[j]);
    for (int i = 0; i < o->inputs; i++)
        free(copy[i]);
}

/* The argument of the element's sigmoid (g, or 2z for GELU), as the check sees it. */
static double sigmoid_arg(int op, float *const in[3], size_t i)
{
    double a = in[0][i];
    return op == GELU || op == GELU_BACKWARD ? 2.0 * GELU_K * (a + GELU_C * a * a * a) : a;
}

/* Where a sigmoid underflows in float (its argument below -87.3: 0 in float, nonzero in
 * double) and meets an infinite input, float's product is 0 * inf = NaN (as PyTorch's float
 * formulas give) and the double reference's is +-inf: NaN is what float can give there. */
static bool float_nan_expected(int op, float *const in[3], size_t i, double want, double got)
{
    double t = sigmoid_arg(op, in, i);
    bool inf_input = false;
    for (int k = 0; k < ops[op].inputs; k++)
        inf_input |= isinf(in[k][i]) != 0;
    return isinf(want) && isnan(got) && inf_input && t < -87.3 && t > -746.0;
}

static void compare(tally *t, int op, int o, size_t n, float *const in[3], float alpha,
                    const double *want, const float *got, bool bf16, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (float_nan_expected(op, in, i, want[i], got[i])) {
            t->values++;
            continue;
        }
        double mag = magnitude(op, o, in, i, want[i], alpha) +
                     underflow(op, o, in, i, alpha) / (ULPS * EPS32);
        double tol = ULPS * EPS32 * mag + TINY;
        if (bf16)
            tol = BF16_HALF_ULP * fabs(want[i]) + (1.0 + BF16_HALF_ULP) * tol;
        stat_check(t, got[i], want[i], tol, mag, bf16, "%s element %zu of %zu, in %.9g %.9g %.9g",
                   what, i, n, in[0][i], ops[op].inputs > 1 ? in[1][i] : 0.0,
                   ops[op].inputs > 2 ? in[2][i] : 0.0);
    }
}

/* The step of input w's central difference at element i: about 1e-3 of the scale on which
 * the function bends (1 for u and g, 1 / |d(2z)/dx| for GELU's x), rounded down to a power of
 * two that is at least 4 ulps of the input, so that x +- h are floats at the same distance; 0
 * (no check) where there is none. */
static double step(int op, int w, float *const in[3], size_t i)
{
    double x = in[w][i], h = 1e-3;
    if (op == GELU_BACKWARD)
        h /= 1.0 + fabs(2.0 * GELU_K * (1.0 + 3.0 * GELU_C * x * x));
    h = exp2(floor(log2(h)));
    int e;
    frexp(x, &e);
    return x != 0.0 && h < 4.0 * ldexp(1.0, e - 24) ? 0.0 : h;
}

/* The backward outputs (the reference's, and got where not NULL) against central differences
 * of the reference forward, every element perturbed at once (the ops are elementwise). */
static void finite_differences(int op, size_t n, float *const in[3], const double *want[2],
                               float *const got[2], const char *what)
{
    int fwd = op == SWIGLU_BACKWARD ? SWIGLU : GELU;
    int wrt_count = op == SWIGLU_BACKWARD ? 2 : 1;
    const float *dy = op == SWIGLU_BACKWARD ? in[2] : in[1];
    float *plus = alloc_f(n), *minus = alloc_f(n);
    double *yp = alloc_d(n), *ym = alloc_d(n);
    for (int w = 0; w < wrt_count; w++) {
        float *fin[3] = {in[0], op == SWIGLU_BACKWARD ? in[1] : NULL, NULL};
        for (size_t i = 0; i < n; i++) {
            double v = in[w][i], h = step(op, w, in, i);
            plus[i] = (float)(v + h);
            minus[i] = (float)(v - h);
        }
        fin[w] = plus;
        double *outp[2] = {yp, NULL}, *outm[2] = {ym, NULL};
        reference(fwd, n, fin, 0.0f, outp);
        fin[w] = minus;
        reference(fwd, n, fin, 0.0f, outm);
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(in[w][i]) || step(op, w, in, i) == 0.0)
                continue;
            double width = (double)plus[i] - (double)minus[i];
            double fd = (double)dy[i] * (yp[i] - ym[i]) / width;
            double mag = magnitude(op, w, in, i, fd, 0.0f) + 1e-30;
            /* the reference forward's own rounding (GELU's 1 + tanh(z): 2^-53 |x|), over the
             * step */
            double noise = fabs((double)dy[i]) * 0x1p-52 *
                           (fabs(yp[i]) + fabs(ym[i]) + fabs((double)in[0][i])) / width;
            mag += noise / FD_TOL;
            double tol = FD_TOL * mag;
            stat_check(&fd_tallies[op][w], want[w][i], fd, tol, mag, false,
                       "reference, %s element %zu, in %.9g step %g", what, i, in[w][i],
                       step(op, w, in, i));
            if (got != NULL)
                stat_check(&fd_tallies[op][w], got[w][i], fd, tol, mag, false,
                           "%s element %zu, in %.9g step %g", what, i, in[w][i],
                           step(op, w, in, i));
        }
    }
    free(plus);
    free(minus);
    free(yp);
    free(ym);
}

/* One case: op on rows x cols of the inputs in, every device form and the CPU. */
static void run_case(int op, size_t rows, size_t cols, float *const in32[3], float alpha, bool fd)
{
    const struct op *o = &ops[op];
    size_t n = rows * cols;
    float *got[2] = {alloc_f(n), alloc_f(n)}, *base[2] = {alloc_f(n), alloc_f(n)};
    double *want[2] = {alloc_d(n), alloc_d(n)};
    char what[160];
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        float *in[3] = {NULL, NULL, NULL};
        for (int i = 0; i < o->inputs; i++) {
            in[i] = alloc_f(n);
            memcpy(in[i], in32[i], n * sizeof(float));
            if (bf16)
                bf16_round_all(in[i], n);
        }
        reference(op, n, in, alpha, want);
        static const int forms[][3] = {{4, 64, 0}, {1, 64, 0}, {4, 64, 1}, {1, 64, 3}, {4, 256, 0}};
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
            for (int mode = 0; mode < o->modes; mode++) {
                if (mode > 0 && f > 0 && f != 2) /* in-place forms: two of the variants */
                    continue;
                run_device(op, mode, bf16, forms[f][0], forms[f][1], forms[f][2], rows, cols, in,
                           alpha, got);
                snprintf(what, sizeof what, "%zux%zu %s VEC=%d WG=%d groups=%d in-place %d", rows,
                         cols, bf16 ? "bf16" : "fp32", forms[f][0], forms[f][1], forms[f][2], mode);
                for (int j = 0; j < o->outputs; j++)
                    compare(&tallies[op][j][bf16], op, j, n, in, alpha, want[j], got[j], bf16,
                            what);
                if (fd && !bf16 && f == 0 && mode == 0 &&
                    (op == SWIGLU_BACKWARD || op == GELU_BACKWARD)) {
                    const double *w2[2] = {want[0], want[1]};
                    finite_differences(op, n, in, w2, got, what);
                }
            }
        if (bf16) {
            for (int i = 0; i < o->inputs; i++)
                free(in[i]);
            continue;
        }
        /* the CPU: every pool and in-place form, the same bits each time */
        for (int mode = 0; mode < o->modes; mode++)
            for (int p = 0; p < 3; p++) {
                run_cpu(op, mode, pools[p], n, in, alpha, got);
                snprintf(what, sizeof what, "cpu %zux%zu pool %d in-place %d", rows, cols, p, mode);
                for (int j = 0; j < o->outputs; j++) {
                    compare(&cpu_tallies[op][j], op, j, n, in, alpha, want[j], got[j], false, what);
                    if (mode == 0 && p == 0)
                        memcpy(base[j], got[j], n * sizeof(float));
                    cpu_same.values++;
                    if (memcmp(base[j], got[j], n * sizeof(float)) != 0) {
                        cpu_same.failures++;
                        snprintf(cpu_same.where, sizeof cpu_same.where, "%s %s output %d", o->name,
                                 what, j);
                    }
                }
                if (fd && mode == 0 && p == 1 && (op == SWIGLU_BACKWARD || op == GELU_BACKWARD)) {
                    const double *w2[2] = {want[0], want[1]};
                    finite_differences(op, n, in, w2, got, what);
                }
            }
        for (int i = 0; i < o->inputs; i++)
            free(in[i]);
    }
    for (int j = 0; j < 2; j++) {
        free(got[j]);
        free(base[j]);
        free(want[j]);
    }
}

/* The inputs of op, random: g and x spread to where the sigmoids saturate. */
static void random_inputs(int op, size_t n, float *in[3], float *alpha)
{
    double scale[3] = {1.0, 1.0, 1.0};
    if (op == SWIGLU || op == SWIGLU_BACKWARD)
        scale[0] = 8.0, scale[1] = 2.0, scale[2] = 0.5;
    if (op == GELU || op == GELU_BACKWARD)
        scale[0] = 4.0, scale[1] = 0.5;
    if (op == ADD)
        scale[0] = 1.0, scale[1] = 3.0;
    for (int i = 0; i < 3; i++)
        fill_act(in[i], n, scale[i]);
    *alpha = (float)rng_uniform(-2.0, 2.0);
}

/* Inputs where the formulas break if written naively: large, tiny, subnormal, infinite, NaN,
 * every pair of them (g or x with u or dy). */
static void special_case(int op)
{
    static const float first[] = {0.0f,   -0.0f,    1e-40f,    -1e-40f, 1e-30f, -1.2785f, 1.0f,
                                  -1.0f,  15.0f,    -15.0f,    20.0f,   -20.0f, 88.0f,    -88.0f,
                                  104.f,  -104.f,   1e4f,      -1e4f,   1e20f,  -1e20f,   3e38f,
                                  -3e38f, INFINITY, -INFINITY, NAN};
    static const float second[] = {1.0f, -2.0f, 0.0f, 1e-30f, 1e18f, INFINITY, NAN};
    size_t na = sizeof first / sizeof first[0], nb = sizeof second / sizeof second[0];
    size_t n = na * nb * nb;
    float *in[3] = {alloc_f(n), alloc_f(n), alloc_f(n)};
    for (size_t i = 0; i < n; i++) {
        in[0][i] = first[i % na];
        in[1][i] = second[i / na % nb];
        in[2][i] = second[i / na / nb];
    }
    if (op == ADD) /* y large, x special */
        for (size_t i = 0; i < n; i++) {
            float t = in[0][i];
            in[0][i] = in[1][i];
            in[1][i] = t;
        }
    run_case(op, 1, n, in, 0.75f, false);
    for (int i = 0; i < 3; i++)
        free(in[i]);
}

int check_elementwise(void)
{
    static const size_t shapes[][2] = {{1, 1},    {1, 2},     {1, 3},    {1, 4},    {1, 5},
                                       {1, 7},    {2, 1},     {3, 1},    {1, 1021}, {5, 13},
                                       {7, 64},   {17, 33},   {13, 128}, {31, 127}, {64, 256},
                                       {3, 4099}, {256, 1031}};
    for (int op = 0; op < NOPS; op++) {
        for (int o = 0; o < ops[op].outputs; o++) {
            static char names[NOPS][2][4][64];
            snprintf(names[op][o][0], 64, "%s out %d fp32 (device)", ops[op].name, o);
            snprintf(names[op][o][1], 64, "%s out %d bf16 (device)", ops[op].name, o);
            snprintf(names[op][o][2], 64, "%s out %d fp32 (cpu)", ops[op].name, o);
            snprintf(names[op][o][3], 64, "%s d(in %d) vs finite differences", ops[op].name, o);
            tallies[op][o][0].name = names[op][o][0];
            tallies[op][o][1].name = names[op][o][1];
            cpu_tallies[op][o].name = names[op][o][2];
            fd_tallies[op][o].name = names[op][o][3];
        }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            size_t n = shapes[s][0] * shapes[s][1];
            float *in[3] = {alloc_f(n), alloc_f(n), alloc_f(n)}, alpha;
            random_inputs(op, n, in, &alpha);
            run_case(op, shapes[s][0], shapes[s][1], in, alpha, true);
            for (int i = 0; i < 3; i++)
                free(in[i]);
        }
        special_case(op);
    }
    int failed = 0;
    for (int op = 0; op < NOPS; op++)
        for (int o = 0; o < ops[op].outputs; o++) {
            failed += !stat_report(&tallies[op][o][0]);
            failed += !stat_report(&tallies[op][o][1]);
            failed += !stat_report(&cpu_tallies[op][o]);
            if (op == SWIGLU_BACKWARD || op == GELU_BACKWARD)
                failed += !stat_report(&fd_tallies[op][o]);
        }
    cpu_same.name = "cpu: the same bits on 1, 2 and 3 threads";
    failed += !stat_report(&cpu_same);
    return failed;
}
