/*
 * GEMM for few rows with B stored transposed, the dot form:
 *   C = alpha * (A * B^T + A2 * B2^T) + beta * C
 * A m x k, A2 m x k2 (m <= MR <= 16), B n x k, B2 n x k2, C m x n, all row-major and dense
 * (row strides k, k2, k, k2, n). Every element of C is a dot product of a row of B with a row
 * of A, so B is read along its rows: LoRA's backward dx = dy * W^T + u * A^T with W (in x out)
 * and A (in x r) stored as the library stores them, and u = dy * B^T with B (r x out). The
 * second product is LoRA's rank-r term, summed before C is written once; k2 = 0 leaves it out.
 * With VEC = 4, k % 4 == 0 and the buffers start 16-byte aligned.
 *
 * Work decomposition: a work-group of WARPS * 32 work-items serves WARPS / KW slots of RPW rows
 * of B (columns of C), KW warps to a slot: where n is small, more warps share a slot so that
 * the device still gets work-groups enough. The 32 * KW work-items of a slot stride over the
 * depths VEC at a time: each loads the m rows of A at its depths once (the same addresses for
 * every slot: from cache) and reads its part of each of the slot's RPW rows of B once
 * (consecutive work-items, consecutive vectors), keeping RPW * m sums; A2 * B2^T likewise, one
 * depth at a time. RPW rows to a slot cut the loads of A from cache by RPW: with several rows
 * of A, those loads (n * m * k floats at RPW = 1) outweighed B's own. The sums of a slot's
 * work-items are then added in a tree through local memory, a row of B at a time, and
 * work-item i < m of the slot writes C[i][j].
 * Reads: B and B2 once (the whole cost when m is small), A and A2 once per slot from cache;
 * C once where beta != 0 (beta = 0 never reads C, so NaN there is ignored as BLAS does).
 *
 * Tuning parameters (-D from the host): WARPS, KW (a power of two dividing WARPS), MR, VEC, RPW.
 */
#ifndef WARPS
#define WARPS 8
#endif
#ifndef KW
#define KW 1
#endif
#ifndef MR
#define MR 1
#endif
#ifndef RPW
#define RPW 1
#endif
#define NT_GROUP (WARPS * 32)
#define NT_LANES (KW * 32)
#if WARPS % KW != 0 || MR > 16
#error "KW must divide WARPS, and MR be at most 16"
#endif

__kernel __attribute__((reqd_work_group_size(NT_GROUP, 1, 1))) void
gemm_rows_nt(const int m, const int n, const int k, const float alpha,
             const __global float *restrict a, const __global float *restrict b, const int k2,
             const __global float *restrict a2, const __global float *restrict b2,
             const float beta, __global float *restrict c)
{
    AFTER_PREVIOUS_LAUNCH();
    __local float red[MR * NT_GROUP];
    const int lid = (int)get_local_id(0);
    const int slot = lid / NT_LANES, lane = lid % NT_LANES;
    const int j0 = ((int)get_group_id(0) * (WARPS / KW) + slot) * RPW;
    float acc[RPW][MR];
#pragma unroll
    for (int r = 0; r < RPW; r++)
#pragma unroll
        for (int i = 0; i < MR; i++)
            acc[r][i] = 0.0f;
    if (j0 < n) {
        const int kv = k / VEC;
#pragma unroll 4
        for (int p = lane; p < kv; p += NT_LANES) {
            floatv av[MR];
#pragma unroll
            for (int i = 0; i < MR; i++)
                av[i] = i < m ? ((const __global floatv *)(a + (size_t)i * (size_t)k))[p]
                              : (floatv)(0.0f);
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                if (j0 + r < n) {
                    const floatv bv =
                        ((const __global floatv *)(b + (size_t)(j0 + r) * (size_t)k))[p];
#pragma unroll
                    for (int i = 0; i < MR; i++)
                        if (i < m)
                            acc[r][i] += HSUM(av[i] * bv);
                }
            }
        }
        for (int p = lane; p < k2; p += NT_LANES) {
            float av[MR];
#pragma unroll
            for (int i = 0; i < MR; i++)
                av[i] = i < m ? a2[(size_t)i * (size_t)k2 + p] : 0.0f;
#pragma unroll
            for (int r = 0; r < RPW; r++) {
                if (j0 + r < n) {
                    const float bv = b2[(size_t)(j0 + r) * (size_t)k2 + p];
#pragma unroll
                    for (int i = 0; i < MR; i++)
                        if (i < m)
                            acc[r][i] = fma(av[i], bv, acc[r][i]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPW; r++) {
#pragma unroll
        for (int i = 0; i < MR; i++)
            red[i * NT_GROUP + lid] = acc[r][i];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int width = NT_LANES / 2; width > 0; width /= 2) {
            if (lane < width) {
#pragma unroll
                for (int i = 0; i < MR; i++)
                    red[i * NT_GROUP + lid] += red[i * NT_GROUP + lid + width];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const int j = j0 + r;
        if (j < n && lane < m) {
            const float v = alpha * red[lane * NT_GROUP + slot * NT_LANES];
            __global float *at = c + (size_t)lane * (size_t)n + j;
            *at = beta != 0.0f ? fma(beta, *at, v) : v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
