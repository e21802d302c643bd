/*
 * Element types of the activations (the step's ops): every kernel that reads or writes an
 * activation does so through act_load and act_store, and computes and accumulates in float,
 * so that one source serves fp32 and bf16 tensors.
 *
 * Storage: ACT_BF16 = 0 (default): float. ACT_BF16 = 1: bfloat16 held as ushort, the high half
 * of a float's bits; loads widen exactly, stores round to nearest, ties to even, a NaN staying
 * a (quiet) NaN.
 */
#ifndef ACT_BF16
#define ACT_BF16 0 /* 1: activations stored as bfloat16 */
#endif

#if ACT_BF16
typedef ushort act_t;
inline float act_load(const __global act_t *p, size_t i)
{
    return as_float((uint)p[i] << 16);
}
inline void act_store(__global act_t *p, size_t i, float v)
{
    const uint u = as_uint(v);
    p[i] = isnan(v) ? (ushort)((u >> 16) | 0x40u) : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#else
typedef float act_t;
inline float act_load(const __global act_t *p, size_t i)
{
    return p[i];
}
inline void act_store(__global act_t *p, size_t i, float v)
{
    p[i] = v;
}
#endif

#ifdef VEC
/* For the row kernels (VEC from common.cl, which comes first): vector j (elements j * VEC ..)
 * of an activation row, widened to float; the store rounds as act_store does. */
#if VEC == 4 && !ACT_BF16
inline float4 act_loadv(const __global act_t *p, int j)
{
    return ((const __global float4 *)p)[j];
}
inline void act_storev(__global act_t *p, int j, float4 v)
{
    ((__global float4 *)p)[j] = v;
}
#elif VEC == 4
inline float4 act_loadv(const __global act_t *p, int j)
{
    return as_float4(convert_uint4(((const __global ushort4 *)p)[j]) << 16);
}
inline void act_storev(__global act_t *p, int j, float4 v)
{
    const size_t i = (size_t)j * 4;
    act_store(p, i, v.x);
    act_store(p, i + 1, v.y);
    act_store(p, i + 2, v.z);
    act_store(p, i + 3, v.w);
}
#else
inline float act_loadv(const __global act_t *p, int j)
{
    return act_load(p, (size_t)j);
}
inline void act_storev(__global act_t *p, int j, float v)
{
    act_store(p, (size_t)j, v);
}
#endif
#endif
