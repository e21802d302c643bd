/*
 * The format's element types, their conversions from and to float, and the message helper
 * that the reader and the writer share.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "safetensors_internal.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[HD_ST_DTYPE_COUNT] = {
#define HD_ST_DTYPE_ROW(id, text, bytes) [HD_ST_##id] = {text, bytes},
    HD_ST_DTYPE_MAP(HD_ST_DTYPE_ROW)
#undef HD_ST_DTYPE_ROW
};

const char *hd_st_dtype_name(hd_st_dtype t)
{
    return (unsigned)t < HD_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t hd_st_dtype_size(hd_st_dtype t)
{
    return (unsigned)t < HD_ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

int hd_st_dtype_is_float(hd_st_dtype t)
{
    return t == HD_ST_F32 || t == HD_ST_BF16 || t == HD_ST_F16 || t == HD_ST_F64;
}

hd_st_dtype hd__st_dtype_parse(const char *name)
{
    for (int t = 0; t < HD_ST_DTYPE_COUNT; t++)
        if (strcmp(name, dtypes[t].name) == 0)
            return (hd_st_dtype)t;
    return HD_ST_DTYPE_COUNT;
}

hd_status hd__st_fail(char *msg, size_t size, hd_status s, const char *fmt, ...)
{
    if (msg != NULL && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, size, fmt, ap);
        va_end(ap);
    }
    return s;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float hd_st_bf16_to_float(uint16_t h)
{
    return bits_float((uint32_t)h << 16);
}

uint16_t hd_st_float_to_bf16(float f)
{
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* truncating could turn a NaN into infinity */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float hd_st_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) /* zero or subnormal: mant * 2^-24, exact in float */
        return bits_float(sign | float_bits((float)mant * 0x1p-24f));
    if (exp == 31)
        return bits_float(sign | 0x7f800000u | (mant << 13));
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t hd_st_float_to_f16(float f)
{
    uint32_t u = float_bits(f), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return sign | 0x7e00u;
    if (a >= 0x477ff000u) /* 65520 and above round past the largest half, 65504 */
        return sign | 0x7c00u;
    if (a < 0x38800000u) {
        /* below the smallest normal half, 2^-14: scaled by 2^24 the value is below 2^10, and
         * adding 2^23 rounds it to an integer, to nearest even, in the float's low bits */
        float r = bits_float(a) * 0x1p24f + 0x1p23f;
        return sign | (uint16_t)(float_bits(r) - float_bits(0x1p23f));
    }
    uint32_t b = a - 0x38000000u; /* exponent rebased from 127 to 15 */
    return sign | (uint16_t)((b + 0xfffu + ((b >> 13) & 1u)) >> 13);
}
