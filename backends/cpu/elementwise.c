/*
 * The step's elementwise ops on the CPU: SwiGLU and GELU (tanh form), forward and backward, and
 * y += alpha * x. Each is one loop over contiguous floats, split across the backend's pool in
 * contiguous parts when the arrays are large enough to pay for waking it; every element is
 * computed the same way whichever thread takes it.
 *
 * The loops are `omp simd`: an element's inputs are all read before its outputs are written and
 * no element reads another's, so the outputs may be the inputs themselves (y = g, dg = dy, ...)
 * and the loops still run as vector code, which the compiler's own overlap check would refuse.
 * exp is computed in the loop (exp_nonpositive) rather than by libm, one call per element that
 * keeps the loop scalar. Every sigmoid is built from e = exp(-|t|) <= 1, so no input overflows
 * it, and 1 - sigmoid(t) comes from the same e, never as a difference.
 *
 * Non-finite inputs as in PyTorch's formulas: NaN in, NaN out; silu(-inf) and gelu(-inf) are
 * NaN, silu(+inf) and gelu(+inf) are +inf; the backward passes give NaN at an infinite input.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* sigmoid(t) and 1 - sigmoid(t), from e = exp(-|t|) and r = 1 / (1 + e): r and e * r, one
 * for each sign of t. */
typedef struct sigmoid {
    float sig, rest;
} sigmoid;

static inline sigmoid sigmoid_of(float t)
{
    float e = hd__cpu_exp_nonpositive(-fabsf(t)), r = 1.0f / (1.0f + e), er = e * r;
    bool up = t >= 0.0f;
    return (sigmoid){up ? r : er, up ? er : r};
}

HD_CPU_VECTOR_CLONES static void swiglu_range(const float *g, const float *u, float *y, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        y[i] = gi * sigmoid_of(gi).sig * u[i];
    }
}

HD_CPU_VECTOR_CLONES static void swiglu_backward_range(const float *g, const float *u,
                                                       const float *dy, float *dg, float *du,
                                                       size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], dyi = dy[i];
        sigmoid s = sigmoid_of(gi);
        du[i] = dyi * (gi * s.sig);
        dg[i] = dyi * ui * s.sig * (1.0f + gi * s.rest);
    }
}

/* 2z, z = k * (x + c * x^3) the tanh's argument: gelu(x) = x * sigmoid(2z), since
 * 1 + tanh(z) = 2 * sigmoid(2z); +-inf once x^3 overflows. */
static inline float gelu_2z(float x)
{
    return 2.0f * GELU_K * (x + GELU_C * x * x * x);
}

HD_CPU_VECTOR_CLONES static void gelu_range(const float *x, float *y, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        y[i] = xi * sigmoid_of(gelu_2z(xi)).sig;
    }
}

/* gelu'(x) = s + (s * (1 - s)) * 2k * x * (1 + 3c * x^2), s = sigmoid(2z). Where |x| > 1e4,
 * s * (1 - s) is 0 (|2z| > 7e10), so x is clamped there in the polynomial, which would overflow
 * to inf * 0 = NaN beyond |x| ~ 1.8e19; x - x (NaN at +-inf, else 0) keeps PyTorch's NaN at
 * infinite x. */
HD_CPU_VECTOR_CLONES static void gelu_backward_range(const float *x, const float *dy, float *dx,
                                                     size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        sigmoid s = sigmoid_of(gelu_2z(xi));
        float xc = xi > 1e4f ? 1e4f : xi < -1e4f ? -1e4f : xi;
        float poly = 2.0f * GELU_K * xc * (1.0f + 3.0f * GELU_C * xc * xc);
        dx[i] = dy[i] * (s.sig + (s.sig * s.rest) * poly + (xi - xi));
    }
}

HD_CPU_VECTOR_CLONES static void add_range(float alpha, const float *x, float *y, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] + alpha * x[i];
}

/* One call's arrays, as the pool's parts see them: in[] the inputs, out[] the outputs. */
typedef struct elem_job {
    const float *in[3];
    float *out[2];
    float alpha;
} elem_job;

static void swiglu_part(void *arg, size_t begin, size_t end)
{
    const elem_job *j = arg;
    swiglu_range(j->in[0] + begin, j->in[1] + begin, j->out[0] + begin, end - begin);
}

static void swiglu_backward_part(void *arg, size_t begin, size_t end)
{
    const elem_job *j = arg;
    swiglu_backward_range(j->in[0] + begin, j->in[1] + begin, j->in[2] + begin, j->out[0] + begin,
                          j->out[1] + begin, end - begin);
}

static void gelu_part(void *arg, size_t begin, size_t end)
{
    const elem_job *j = arg;
    gelu_range(j->in[0] + begin, j->out[0] + begin, end - begin);
}

static void gelu_backward_part(void *arg, size_t begin, size_t end)
{
    const elem_job *j = arg;
    gelu_backward_range(j->in[0] + begin, j->in[1] + begin, j->out[0] + begin, end - begin);
}

static void add_part(void *arg, size_t begin, size_t end)
{
    const elem_job *j = arg;
    add_range(j->alpha, j->in[0] + begin, j->out[0] + begin, end - begin);
}

/* fn over [0, n), on the pool when n is large enough to pay for waking it. */
static void run(hd_cpu_pool *pool, size_t n, hd_cpu_pool_fn fn, elem_job *job)
{
    hd__cpu_pool_run(n >= HD_CPU_PARALLEL_ELEMENTS ? pool : NULL, n, fn, job);
}

void hd__cpu_swiglu(hd_cpu_pool *pool, size_t n, const float *g, const float *u, float *y)
{
    elem_job job = {.in = {g, u}, .out = {y}};
    run(pool, n, swiglu_part, &job);
}

void hd__cpu_swiglu_backward(hd_cpu_pool *pool, size_t n, const float *g, const float *u,
                             const float *dy, float *dg, float *du)
{
    elem_job job = {.in = {g, u, dy}, .out = {dg, du}};
    run(pool, n, swiglu_backward_part, &job);
}

void hd__cpu_gelu(hd_cpu_pool *pool, size_t n, const float *x, float *y)
{
    elem_job job = {.in = {x}, .out = {y}};
    run(pool, n, gelu_part, &job);
}

void hd__cpu_gelu_backward(hd_cpu_pool *pool, size_t n, const float *x, const float *dy, float *dx)
{
    elem_job job = {.in = {x, dy}, .out = {dx}};
    run(pool, n, gelu_backward_part, &job);
}

void hd__cpu_add(hd_cpu_pool *pool, size_t n, float alpha, const float *x, float *y)
{
    elem_job job = {.in = {x}, .out = {y}, .alpha = alpha};
    run(pool, n, add_part, &job);
}
