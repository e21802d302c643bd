/*
 * The step's elementwise ops: SwiGLU and GELU (tanh form), forward and backward, and the
 * accumulation y += alpha * x. The program is elem.cl + this file.
 *
 * swiglu:          y = silu(g) * u, silu(g) = g * sigmoid(g)
 * swiglu_backward: du = dy * silu(g), dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)))
 * gelu:            y = 0.5 * x * (1 + tanh(k * (x + 0.044715 * x^3))), k = sqrt(2 / pi)
 *                  (PyTorch's approximate='tanh'), computed as x * sigmoid(2z), z the tanh's
 *                  argument: 1 + tanh(z) = 2 * sigmoid(2z) without the cancellation of
 *                  1 + tanh(z) for z far below zero
 * gelu_backward:   dx = dy * gelu'(x), s = sigmoid(2z),
 *                  gelu'(x) = s + 2 * s * (1 - s) * k * x * (1 + 3 * 0.044715 * x^2)
 * add:             y = y + alpha * x
 *
 * Layout: every buffer holds rows x cols activations (act_t, elem.cl) of one contiguous
 * row-major matrix; the ops see rows * cols elements in a row, so any shape works. In place:
 * swiglu's y may be g or u; swiglu_backward's dg may be g or dy and du may be u or dy; gelu's y
 * may be x; gelu_backward's dx may be dy (or x). Each work-item reads all the inputs of its
 * elements before it writes their outputs, and no element is read by another work-item.
 * With VEC = 4 the buffers start 16-byte aligned (8-byte for bf16); any rows * cols works, the
 * last (rows * cols) % 4 elements are taken one at a time by work-items 0..2.
 *
 * Work decomposition: one-dimensional, grid-stride: work-item i takes vectors i, i + G, i + 2G,
 * ... (G: the global size, any multiple of WG; one vector per work-item when G * VEC covers
 * the matrix, fewer work-items loop). Memory traffic per element (fp32; half for bf16): swiglu
 * reads 8 bytes and writes 4, swiglu_backward reads 12 and writes 8, gelu reads 4 and writes 4,
 * gelu_backward reads 8 and writes 4, add reads 8 and writes 4. No local memory.
 *
 * Stable for any magnitude: every sigmoid is built from e = exp(-|t|) <= 1 (sigmoid(t) = 1 / (1
 * + e) for t >= 0, e / (1 + e) below), and 1 - sigmoid(t) from the same e, never as a
 * difference. Non-finite inputs give what PyTorch's formulas give: NaN in, NaN out; silu(-inf)
 * and gelu(-inf) are NaN (-inf * 0), silu(+inf) and gelu(+inf) are +inf, and both backward
 * passes give NaN at an infinite input (inf * 0 in PyTorch's derivative). At large finite
 * inputs the backward passes give the derivative's limits (1 or 0), where PyTorch's float x^2
 * overflows into NaN beyond |x| ~ 1.8e19.
 *
 * Accuracy (float arithmetic): swiglu within a few ulps of each output, relative to the
 * magnitude of its terms (swiglu_backward: dy * u * sigmoid(g) * (1 + |g| * (1 - sigmoid(g))),
 * where the sum cancels near g = -1.28); gelu within a few ulps of |y| plus the rounding of z
 * propagated through the sigmoid (|x| * s * (1 - s) * |2z| ulps). Not for -cl-fast-relaxed-math:
 * exp stays the full-precision built-in.
 *
 * Tuning parameters:
 *   WG   work-items per work-group
 *   VEC  elements per work-item and step: 4 (vector loads and stores) or 1
 */
#ifndef WG
#define WG 256 /* work-items per work-group */
#endif
#ifndef VEC
#define VEC 4 /* elements per vector access: 4, or 1 */
#endif

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* floatn: VEC floats; actn: VEC activations as stored; FIRST(v): lane 0 of a floatn. */
#if VEC == 4
typedef float4 floatn;
#define FIRST(v) ((v).x)
#if ACT_BF16
typedef ushort4 actn;
inline floatn actn_load(const __global act_t *p, size_t i)
{
    return as_float4(convert_uint4(((const __global actn *)p)[i]) << 16);
}
/* act_store's rounding, four lanes at once: to nearest, ties to even; a NaN stays a NaN. */
inline void actn_store(__global act_t *p, size_t i, floatn v)
{
    const uint4 u = as_uint4(v);
    const uint4 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint4 quiet = (u >> 16) | 0x40u;
    ((__global actn *)p)[i] = convert_ushort4(select(rounded, quiet, isnan(v)));
}
#else
typedef float4 actn;
inline floatn actn_load(const __global act_t *p, size_t i)
{
    return ((const __global actn *)p)[i];
}
inline void actn_store(__global act_t *p, size_t i, floatn v)
{
    ((__global actn *)p)[i] = v;
}
#endif
#elif VEC == 1
typedef float floatn;
#define FIRST(v) (v)
inline floatn actn_load(const __global act_t *p, size_t i)
{
    return act_load(p, i);
}
inline void actn_store(__global act_t *p, size_t i, floatn v)
{
    act_store(p, i, v);
}
#else
#error "VEC must be 1 or 4"
#endif

/* The element's index k of the tail past the last whole vector, or n (none) for a work-item
 * that has no tail element. */
inline size_t tail_index(size_t n)
{
    const size_t k = n / VEC * VEC + get_global_id(0);
    return k < n ? k : n;
}

/* sigmoid(t) and 1 - sigmoid(t), both from e = exp(-|t|) and r = 1 / (1 + e): r and e * r,
 * one for each sign of t. */
typedef struct sigmoid {
    floatn sig, rest;
} sigmoid;

inline sigmoid sigmoid_of(floatn t)
{
    const floatn e = exp(-fabs(t));
    const floatn r = 1.0f / (1.0f + e);
    const floatn er = e * r;
    sigmoid s;
    s.sig = select(er, r, t >= 0.0f);
    s.rest = select(r, er, t >= 0.0f);
    return s;
}

inline floatn swiglu_value(floatn g, floatn u)
{
    return g * sigmoid_of(g).sig * u;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
swiglu(const __global act_t *g, const __global act_t *u, __global act_t *y, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const size_t n = (size_t)rows * (size_t)cols, nv = n / VEC;
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0))
        actn_store(y, i, swiglu_value(actn_load(g, i), actn_load(u, i)));
    const size_t k = tail_index(n);
    if (k < n)
        act_store(y, k, FIRST(swiglu_value((floatn)(act_load(g, k)), (floatn)(act_load(u, k)))));
}

/* du and dg of one vector of elements. */
typedef struct swiglu_grads {
    floatn dg, du;
} swiglu_grads;

inline swiglu_grads swiglu_grads_of(floatn g, floatn u, floatn dy)
{
    const sigmoid s = sigmoid_of(g);
    swiglu_grads d;
    d.du = dy * (g * s.sig);
    d.dg = dy * u * s.sig * (1.0f + g * s.rest);
    return d;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
swiglu_backward(const __global act_t *g, const __global act_t *u, const __global act_t *dy,
                __global act_t *dg, __global act_t *du, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const size_t n = (size_t)rows * (size_t)cols, nv = n / VEC;
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0)) {
        const swiglu_grads d = swiglu_grads_of(actn_load(g, i), actn_load(u, i), actn_load(dy, i));
        actn_store(dg, i, d.dg);
        actn_store(du, i, d.du);
    }
    const size_t k = tail_index(n);
    if (k < n) {
        const swiglu_grads d = swiglu_grads_of((floatn)(act_load(g, k)), (floatn)(act_load(u, k)),
                                               (floatn)(act_load(dy, k)));
        act_store(dg, k, FIRST(d.dg));
        act_store(du, k, FIRST(d.du));
    }
}

/* 2z, z = k * (x + c * x^3) the tanh's argument; +-inf once x^3 overflows. */
inline floatn gelu_2z(floatn x)
{
    return 2.0f * GELU_K * (x + GELU_C * x * x * x);
}

inline floatn gelu_value(floatn x)
{
    return x * sigmoid_of(gelu_2z(x)).sig;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
gelu(const __global act_t *x, __global act_t *y, int rows, int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const size_t n = (size_t)rows * (size_t)cols, nv = n / VEC;
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0))
        actn_store(y, i, gelu_value(actn_load(x, i)));
    const size_t k = tail_index(n);
    if (k < n)
        act_store(y, k, FIRST(gelu_value((floatn)(act_load(x, k)))));
}

/* gelu'(x) = s + (s * (1 - s)) * 2k * x * (1 + 3c * x^2). Where |x| > 1e4, s * (1 - s) is 0
 * (|2z| > 7e10), so x is clamped there in the polynomial, which would overflow to inf * 0 =
 * NaN beyond |x| ~ 1.8e19; x - x (NaN at +-inf, else 0) keeps PyTorch's NaN at infinite x. */
inline floatn gelu_slope(floatn x)
{
    const sigmoid s = sigmoid_of(gelu_2z(x));
    const floatn xc = clamp(x, -1e4f, 1e4f);
    const floatn poly = 2.0f * GELU_K * xc * (1.0f + 3.0f * GELU_C * xc * xc);
    return s.sig + (s.sig * s.rest) * poly + (x - x);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
gelu_backward(const __global act_t *x, const __global act_t *dy, __global act_t *dx, int rows,
              int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const size_t n = (size_t)rows * (size_t)cols, nv = n / VEC;
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0))
        actn_store(dx, i, actn_load(dy, i) * gelu_slope(actn_load(x, i)));
    const size_t k = tail_index(n);
    if (k < n)
        act_store(dx, k, act_load(dy, k) * FIRST(gelu_slope((floatn)(act_load(x, k)))));
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
add(const __global act_t *x, __global act_t *y, int rows, int cols, float alpha)
{
    AFTER_PREVIOUS_LAUNCH();
    const size_t n = (size_t)rows * (size_t)cols, nv = n / VEC;
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0))
        actn_store(y, i, actn_load(y, i) + alpha * actn_load(x, i));
    const size_t k = tail_index(n);
    if (k < n)
        act_store(y, k, act_load(y, k) + alpha * act_load(x, k));
}
