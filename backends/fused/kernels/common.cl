/*
 * Shared prelude of every fused kernel (the host puts it in front of each kernel file).
 *
 * What: the vector type selected by VEC, its horizontal sum and maximum, and, over one "row
 * slot", the load of a row into registers and work-group reductions: a work-group of WG
 * work-items is split into ROWS slots of T = WG / ROWS consecutive work-items, each slot
 * serving one row (or one column strip).
 * Reductions go through local memory, one tree per slot that adds up to 8 values per step
 * (log8(T) barriers: the barriers, not the adds, are what a reduction costs next to the row's
 * memory traffic); every work-item of the group must call them, also those whose row lies
 * beyond the matrix. A step writes only slots below its width nw, each read there by its writer
 * alone, so a step needs no barrier inside it.
 *
 * Tuning parameters (set by the host with -D; defaults here):
 *   WG    work-items per work-group (a power of two)
 *   ROWS  rows (slots) per work-group (a power of two dividing WG)
 *   VEC   elements per load: 4 (float4) when the row length allows it, else 1
 */
#ifndef WG
#define WG 256
#endif
#ifndef ROWS
#define ROWS 1
#endif
#ifndef VEC
#define VEC 4
#endif

#define T (WG / ROWS)

#if VEC == 4
typedef float4 floatv;
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#define HMAX(v) fmax(fmax((v).x, (v).y), fmax((v).z, (v).w))
#elif VEC == 1
typedef float floatv;
#define HSUM(v) (v)
#define HMAX(v) (v)
#else
#error "VEC must be 1 or 4"
#endif

/* Loads the count vectors t, t + T, t + 2T, ... of a row into v, fill where the row has none
 * (past its n vectors, or every one when the row is beyond the matrix: !live). The row kernels
 * hold a row, and its weights, in registers this way; called with a constant count, the loop
 * unrolls and every load is issued before the first one is used. */
inline void slot_load(floatv *v, int count, const __global floatv *row, bool live, int n, int t,
                      floatv fill)
{
#pragma unroll
    for (int i = 0; i < count; i++) {
        const int j = t + i * T;
        v[i] = live && j < n ? row[j] : fill;
    }
}

/* Sum of v over the T work-items of slot `slot`; t is the work-item's index in its slot.
 * red holds WG floats. */
inline float slot_sum(float v, __local float *red, int slot, int t)
{
    __local float *r = red + slot * T;
    r[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = T; w > 1;) {
        const int nw = w >= 8 ? w / 8 : 1, fan = w / nw;
        if (t < nw) {
            float acc = r[t];
            for (int f = 1; f < fan; f++)
                acc += r[t + f * nw];
            r[t] = acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        w = nw;
    }
    float out = r[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return out;
}

/* Maximum as slot_sum; fmax ignores NaN, so a NaN row is caught by the later sums instead. */
inline float slot_max(float v, __local float *red, int slot, int t)
{
    __local float *r = red + slot * T;
    r[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = T; w > 1;) {
        const int nw = w >= 8 ? w / 8 : 1, fan = w / nw;
        if (t < nw) {
            float acc = r[t];
            for (int f = 1; f < fan; f++)
                acc = fmax(acc, r[t + f * nw]);
            r[t] = acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        w = nw;
    }
    float out = r[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return out;
}
