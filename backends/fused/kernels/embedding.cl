/*
 * Embedding lookup: out[r][:] = table[ids[r]][:], a gather of rows. The program is elem.cl +
 * this file.
 *
 * Layout: table V x cols and out rows x cols activations of the same type (act_t, elem.cl: the
 * bits are copied, no conversion), row-major; ids: rows ints, each in [0, V) (the host checks
 * them before the launch). With VEC > 1, cols % VEC == 0 and both buffers start aligned to VEC
 * activations.
 *
 * Work decomposition: work-group g copies rows g, g + G, g + 2G, ... (G: the number of
 * work-groups, any; one row per group when G >= rows); its WG work-items copy a row's vectors
 * t, t + WG, ... Per element: one read of the table and one write (8 bytes fp32, 4 bf16); ids
 * read once per row. No local memory.
 *
 * Tuning parameters:
 *   WG   work-items per work-group
 *   VEC  activations per vector access: 1, 2, 4 or 8 (8 bf16 are 16 bytes)
 */
#ifndef WG
#define WG 256 /* work-items per work-group */
#endif
#ifndef VEC
#define VEC 4 /* activations per vector access: 1, 2, 4 or 8 */
#endif

/* actn: VEC activations as stored, moved as they are. */
#if ACT_BF16
#if VEC == 1
typedef ushort actn;
#elif VEC == 2
typedef ushort2 actn;
#elif VEC == 4
typedef ushort4 actn;
#elif VEC == 8
typedef ushort8 actn;
#endif
#else
#if VEC == 1
typedef float actn;
#elif VEC == 2
typedef float2 actn;
#elif VEC == 4
typedef float4 actn;
#elif VEC == 8
typedef float8 actn;
#endif
#endif
#if VEC != 1 && VEC != 2 && VEC != 4 && VEC != 8
#error "VEC must be 1, 2, 4 or 8"
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
embedding(const __global act_t *table, const __global int *ids, __global act_t *out, int rows,
          int cols)
{
    AFTER_PREVIOUS_LAUNCH();
    const int n = cols / VEC, t = (int)get_local_id(0);
    for (int r = (int)get_group_id(0); r < rows; r += (int)get_num_groups(0)) {
        const __global actn *src = (const __global actn *)(table + (size_t)ids[r] * (size_t)cols);
        __global actn *dst = (__global actn *)(out + (size_t)r * (size_t)cols);
        for (int j = t; j < n; j += WG)
            dst[j] = src[j];
    }
}
