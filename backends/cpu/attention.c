/*
 * Flash-style attention on the CPU (step.h): the algorithm of the OpenCL kernels
 * (attention.cl), in float. Scores are taken in base 2: q is multiplied once by
 * scale * log2(e) as it is read, so that a score is q' . k and its softmax weight exp2(score
 * - max); lse is converted back to the natural log at the end.
 *
 * Forward, per work item (a head and a tile of QTILE query rows): the tile's rows are scaled
 * into scratch, then the tiles of KTILE keys that any of its rows attends to are visited in
 * order; each key tile is transposed into scratch (d x KTILE), so that the scores of a row are
 * a loop over the depth with a vector loop over the keys inside it (each score summed in
 * depth order, no reordering of a floating-point sum), and the row's running maximum m, sum l
 * and output are rescaled by exp2(m_old - m_new) before the tile's weights are added.
 * Backward: delta_i = dout_i . out_i (in double); dq per (head, query tile), the forward's
 * loop with p = exp2(score - lse), dp = dout_i . v_j and ds = p (dp - delta) added to dq
 * through k; dk and dv per (kv head, key tile), over the query heads of the kv head and each
 * query row that attends to a key of the tile, in row order. Products over keys (or rows) add
 * up to four terms per pass over the output row, one after another: the order of single
 * updates, with a quarter of the loads and stores of the row. Every output's sums run in a
 * fixed order, so the results do not depend on the number of threads. A row visits only the
 * keys of its range, so a NaN in another sequence never reaches it.
 *
 * Threads: the work items are dealt round-robin to the pool's threads (under causal masks the
 * later query tiles cost more, the earlier key tiles too), each thread with its own scratch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

/* Query rows per work item of the forward and of dq. */
#define QTILE 32
/* Keys per tile (a multiple of 16: the vector loops over a tile's keys run over all of it). */
#define KTILE 64
/* Query rows per block of the dk, dv items. */
#define QBLOCK 4
/* Multiply-adds below which one thread is faster than waking the pool. */
#define PARALLEL_MACS (1u << 21)

#define LOG2E 1.44269504088896340736
#define LN2   0.69314718055994530942

/* 2^x to about 1 ulp, written so that the loops around it vectorize: x = n + r, |r| <= 1/2,
 * 2^r = e^(r ln 2) (hd__cpu_exp_reduced). Below -126 it gives 0 (2^x under FLT_MIN, flushed),
 * above 127 infinity, NaN for NaN. */
static inline float exp2_fast(float x)
{
    float xc = x < -126.0f ? -126.0f : x > 127.0f ? 127.0f : x;
    float t = xc + HD_CPU_ROUND_MAGIC;
    float n = t - HD_CPU_ROUND_MAGIC;
    float r = hd__cpu_exp_reduced((xc - n) * (float)LN2, t);
    r = x < -126.0f ? 0.0f : r;
    r = x > 127.0f ? INFINITY : r;
    return x != x ? x : r;
}

/* What a call's work items share; each thread's scratch is `scratch + index * stride`. */
typedef struct attention_job {
    const hd_cpu_attention_shape *s;
    const float *q, *k, *v, *out, *lse, *dout;
    const int32_t *kv_range, *q_range;
    float *dst, *dst_lse, *dk, *dv;
    float *delta; /* tokens x heads (the backward's scratch) */
    float qscale; /* scale * log2(e) */
    size_t items, qtiles, ktiles, threads, stride;
    float *scratch;
    void (*item)(const struct attention_job *job, size_t item, float *scratch);
} attention_job;

/* Threads begin..end - 1 of the call: thread t takes items t, t + threads, ... */
static void run_part(void *arg, size_t begin, size_t end)
{
    const attention_job *job = arg;
    for (size_t t = begin; t < end; t++)
        for (size_t it = t; it < job->items; it += job->threads)
            job->item(job, it, job->scratch + t * job->stride);
}

/* The threads of a call of `macs` multiply-adds: the pool's when that pays for waking it.
 * Scratch: `stride` floats per thread, each thread's on cache lines of its own, and `extra`
 * floats after them; false without memory. */
static bool prepare(hd_cpu_pool *pool, attention_job *job, double macs, size_t extra)
{
    job->threads = macs >= PARALLEL_MACS ? hd__cpu_pool_threads(pool) : 1;
    job->stride = (job->stride + 15) & ~(size_t)15;
    size_t bytes = (job->threads * job->stride + extra) * sizeof(float);
    job->scratch = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    return job->scratch != NULL;
}

static void run_items(hd_cpu_pool *pool, attention_job *job)
{
    hd__cpu_pool_run(job->threads > 1 ? pool : NULL, job->threads, run_part, job);
}

/* The key tile at j0 (nk keys, kv head hk) of k transposed into kt (d x KTILE, zeros past nk),
 * so that a loop over its keys reads one row of kt. */
static void transpose_tile(const float *k, size_t kcols, size_t hk, size_t d, size_t j0, size_t nk,
                           float *kt)
{
    for (size_t c = 0; c < d; c++)
        for (size_t jj = nk; jj < KTILE; jj++)
            kt[c * KTILE + jj] = 0.0f;
    for (size_t jj = 0; jj < nk; jj++) {
        const float *row = k + (j0 + jj) * kcols + hk * d;
        for (size_t c = 0; c < d; c++)
            kt[c * KTILE + jj] = row[c];
    }
}

/* acc[jj] = x . kt[.][jj] over a tile's keys, in depth order; four depths per pass over acc
 * (added one after another, so the order is that of a loop over single depths). */
HD_CPU_VECTOR_CLONES static void tile_scores(const float *x, const float *kt, size_t d, float *acc)
{
    for (size_t jj = 0; jj < KTILE; jj++)
        acc[jj] = 0.0f;
    size_t c = 0;
    for (; c + 4 <= d; c += 4) {
        const float x0 = x[c], x1 = x[c + 1], x2 = x[c + 2], x3 = x[c + 3];
        const float *r0 = kt + c * KTILE, *r1 = r0 + KTILE, *r2 = r1 + KTILE, *r3 = r2 + KTILE;
#pragma omp simd
        for (size_t jj = 0; jj < KTILE; jj++)
            acc[jj] = (((acc[jj] + x0 * r0[jj]) + x1 * r1[jj]) + x2 * r2[jj]) + x3 * r3[jj];
    }
    for (; c < d; c++) {
        const float xc = x[c], *row = kt + c * KTILE;
#pragma omp simd
        for (size_t jj = 0; jj < KTILE; jj++)
            acc[jj] += xc * row[jj];
    }
}

/* y += a[0] x[0] + ... + a[n - 1] x[n - 1] over len floats, the terms added one after another
 * (the order of n separate updates), four per pass over y. */
HD_CPU_VECTOR_CLONES static void axpy_n(float *y, size_t n, const float *a, const float *const *x,
                                        size_t len)
{
    size_t t = 0;
    for (; t + 4 <= n; t += 4) {
        const float a0 = a[t], a1 = a[t + 1], a2 = a[t + 2], a3 = a[t + 3];
        const float *x0 = x[t], *x1 = x[t + 1], *x2 = x[t + 2], *x3 = x[t + 3];
#pragma omp simd
        for (size_t c = 0; c < len; c++)
            y[c] = (((y[c] + a0 * x0[c]) + a1 * x1[c]) + a2 * x2[c]) + a3 * x3[c];
    }
    for (; t < n; t++) {
        const float a0 = a[t], *x0 = x[t];
#pragma omp simd
        for (size_t c = 0; c < len; c++)
            y[c] += a0 * x0[c];
    }
}

/* The keys [a, b) of the tile at j0 (nk keys) that row i attends to, as offsets in the tile;
 * false if none. */
static bool row_keys(const int32_t *kv_range, size_t i, size_t j0, size_t nk, size_t *a, size_t *b)
{
    size_t begin = (size_t)kv_range[2 * i], end = (size_t)kv_range[2 * i + 1];
    *a = begin > j0 ? begin - j0 : 0;
    *b = end < j0 + nk ? (end > j0 ? end - j0 : 0) : nk;
    return *a < *b;
}

/* The keys [*lo, *hi) that rows [r0, r1) attend to, from their ranges. */
static void tile_range(const int *range, size_t r0, size_t r1, size_t *lo, size_t *hi)
{
    *lo = SIZE_MAX;
    *hi = 0;
    for (size_t i = r0; i < r1; i++) {
        size_t b = (size_t)range[2 * i], e = (size_t)range[2 * i + 1];
        *lo = b < *lo ? b : *lo;
        *hi = e > *hi ? e : *hi;
    }
}

/* Forward work item: head it % heads, query tile it / heads. Scratch: qs and o (QTILE x d),
 * kt (d x KTILE), sc (KTILE), m and l (QTILE). */
HD_CPU_VECTOR_CLONES static void forward_item(const attention_job *job, size_t it, float *scratch)
{
    const hd_cpu_attention_shape *s = job->s;
    const size_t d = s->head_dim, qcols = s->heads * d, kcols = s->kv_heads * d;
    const size_t h = it % s->heads, hk = h / (s->heads / s->kv_heads);
    const size_t r0 = it / s->heads * QTILE;
    const size_t nr = s->tokens - r0 < QTILE ? s->tokens - r0 : QTILE;
    float *qs = scratch, *o = qs + QTILE * d, *kt = o + QTILE * d, *sc = kt + d * KTILE;
    float *m = sc + KTILE, *l = m + QTILE;

    for (size_t r = 0; r < nr; r++) {
        const float *src = job->q + (r0 + r) * qcols + h * d;
        for (size_t c = 0; c < d; c++) {
            qs[r * d + c] = src[c] * job->qscale;
            o[r * d + c] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    size_t lo, hi;
    tile_range(job->kv_range, r0, r0 + nr, &lo, &hi);
    for (size_t j0 = lo; j0 < hi; j0 += KTILE) {
        const size_t nk = hi - j0 < KTILE ? hi - j0 : KTILE;
        transpose_tile(job->k, kcols, hk, d, j0, nk, kt);
        for (size_t r = 0; r < nr; r++) {
            size_t a, b;
            if (!row_keys(job->kv_range, r0 + r, j0, nk, &a, &b))
                continue;
            tile_scores(qs + r * d, kt, d, sc);
            /* the new maximum; a NaN score is passed over here and poisons l and o below */
            float mt = m[r];
            for (size_t jj = a; jj < b; jj++)
                mt = sc[jj] > mt ? sc[jj] : mt;
            /* a row whose scores are all -inf so far keeps weights exp2(-inf - 0) = 0 */
            const float mu = mt == -INFINITY ? 0.0f : mt, alpha = exp2_fast(m[r] - mu);
            float *orow = o + r * d, sum = 0.0f;
            for (size_t jj = a; jj < b; jj++)
                sc[jj] = exp2_fast(sc[jj] - mu);
            for (size_t jj = a; jj < b; jj++)
                sum += sc[jj];
            l[r] = l[r] * alpha + sum;
            for (size_t c = 0; c < d; c++)
                orow[c] *= alpha;
            const float *rows[KTILE];
            for (size_t jj = a; jj < b; jj++)
                rows[jj] = job->v + (j0 + jj) * kcols + hk * d;
            axpy_n(orow, b - a, sc + a, rows + a, d);
            m[r] = mt;
        }
    }
    for (size_t r = 0; r < nr; r++) {
        float *dst = job->dst + (r0 + r) * qcols + h * d;
        const float inv = 1.0f / l[r];
        for (size_t c = 0; c < d; c++)
            dst[c] = o[r * d + c] * inv;
        job->dst_lse[(r0 + r) * s->heads + h] = (float)(((double)m[r] + log2((double)l[r])) * LN2);
    }
}

hd_status hd__cpu_attention(hd_cpu_pool *pool, const hd_cpu_attention_shape *s, const float *q,
                            const float *k, const float *v, const int32_t *kv_range, float *out,
                            float *lse)
{
    attention_job job = {.s = s,
                         .q = q,
                         .k = k,
                         .v = v,
                         .kv_range = kv_range,
                         .dst = out,
                         .dst_lse = lse,
                         .qscale = (float)(s->scale * LOG2E)};
    job.qtiles = (s->tokens + QTILE - 1) / QTILE;
    job.items = job.qtiles * s->heads;
    job.stride = 2 * QTILE * s->head_dim + s->head_dim * KTILE + KTILE + 2 * QTILE;
    job.item = forward_item;
    double macs =
        2.0 * (double)s->tokens * (double)s->tokens * (double)s->heads * (double)s->head_dim;
    if (!prepare(pool, &job, macs, 0))
        return HD_ERR_OUT_OF_MEMORY;
    run_items(pool, &job);
    free(job.scratch);
    return HD_OK;
}

/* delta_i = dout_i . out_i per (row, head), in double; work item: a row. */
static void delta_item(const attention_job *job, size_t i, float *scratch)
{
    (void)scratch;
    const hd_cpu_attention_shape *s = job->s;
    const size_t d = s->head_dim, qcols = s->heads * d;
    float *delta = job->delta;
    for (size_t h = 0; h < s->heads; h++) {
        const float *a = job->dout + i * qcols + h * d, *b = job->out + i * qcols + h * d;
        double sum = 0.0;
        for (size_t c = 0; c < d; c++)
            sum += (double)a[c] * b[c];
        delta[i * s->heads + h] = (float)sum;
    }
}

/* dq work item: head it % heads, query tile it / heads. Scratch: qs, dos and dqa (QTILE x
 * d), kt and vt (d x KTILE), sc and dp (KTILE). */
HD_CPU_VECTOR_CLONES static void dq_item(const attention_job *job, size_t it, float *scratch)
{
    const hd_cpu_attention_shape *s = job->s;
    const size_t d = s->head_dim, qcols = s->heads * d, kcols = s->kv_heads * d;
    const size_t h = it % s->heads, hk = h / (s->heads / s->kv_heads);
    const size_t r0 = it / s->heads * QTILE;
    const size_t nr = s->tokens - r0 < QTILE ? s->tokens - r0 : QTILE;
    float *qs = scratch, *dos = qs + QTILE * d, *dqa = dos + QTILE * d;
    float *kt = dqa + QTILE * d, *vt = kt + d * KTILE, *sc = vt + d * KTILE, *dp = sc + KTILE;

    for (size_t r = 0; r < nr; r++) {
        const float *src = job->q + (r0 + r) * qcols + h * d;
        const float *g = job->dout + (r0 + r) * qcols + h * d;
        for (size_t c = 0; c < d; c++) {
            qs[r * d + c] = src[c] * job->qscale;
            dos[r * d + c] = g[c];
            dqa[r * d + c] = 0.0f;
        }
    }
    size_t lo, hi;
    tile_range(job->kv_range, r0, r0 + nr, &lo, &hi);
    for (size_t j0 = lo; j0 < hi; j0 += KTILE) {
        const size_t nk = hi - j0 < KTILE ? hi - j0 : KTILE;
        transpose_tile(job->k, kcols, hk, d, j0, nk, kt);
        transpose_tile(job->v, kcols, hk, d, j0, nk, vt);
        for (size_t r = 0; r < nr; r++) {
            size_t a, b;
            if (!row_keys(job->kv_range, r0 + r, j0, nk, &a, &b))
                continue;
            const size_t i = r0 + r;
            const float lse2 = job->lse[i * s->heads + h] * (float)LOG2E;
            const float delta = job->delta[i * s->heads + h];
            tile_scores(qs + r * d, kt, d, sc);
            tile_scores(dos + r * d, vt, d, dp);
            const float *rows[KTILE];
            for (size_t jj = a; jj < b; jj++) {
                sc[jj] = exp2_fast(sc[jj] - lse2) * (dp[jj] - delta);
                rows[jj] = job->k + (j0 + jj) * kcols + hk * d;
            }
            axpy_n(dqa + r * d, b - a, sc + a, rows + a, d);
        }
    }
    for (size_t r = 0; r < nr; r++) {
        float *dst = job->dst + (r0 + r) * qcols + h * d;
        for (size_t c = 0; c < d; c++)
            dst[c] = dqa[r * d + c] * job->s->scale;
    }
}

/* dk, dv work item: kv head it % kv_heads, key tile it / kv_heads. The query rows are taken
 * QBLOCK at a time, so that each pass over a key's dk and dv rows adds up to QBLOCK rows'
 * terms (in row order). Scratch: kt and vt (d x KTILE), dka and dva (KTILE x d), qs (QBLOCK x
 * d), p and ds (QBLOCK x KTILE). */
HD_CPU_VECTOR_CLONES static void dkdv_item(const attention_job *job, size_t it, float *scratch)
{
    const hd_cpu_attention_shape *s = job->s;
    const size_t d = s->head_dim, qcols = s->heads * d, kcols = s->kv_heads * d;
    const size_t g = s->heads / s->kv_heads, hk = it % s->kv_heads;
    const size_t j0 = it / s->kv_heads * KTILE;
    const size_t nk = s->tokens - j0 < KTILE ? s->tokens - j0 : KTILE;
    float *kt = scratch, *vt = kt + d * KTILE, *dka = vt + d * KTILE, *dva = dka + KTILE * d;
    float *qs = dva + KTILE * d, *p = qs + QBLOCK * d, *ds = p + QBLOCK * KTILE;

    transpose_tile(job->k, kcols, hk, d, j0, nk, kt);
    transpose_tile(job->v, kcols, hk, d, j0, nk, vt);
    for (size_t c = 0; c < nk * d; c++)
        dka[c] = dva[c] = 0.0f;
    size_t lo, hi;
    tile_range(job->q_range, j0, j0 + nk, &lo, &hi);
    for (size_t h = hk * g; h < hk * g + g; h++)
        for (size_t i0 = lo; i0 < hi; i0 += QBLOCK) {
            const size_t nb = hi - i0 < QBLOCK ? hi - i0 : QBLOCK;
            size_t a[QBLOCK], b[QBLOCK];
            for (size_t r = 0; r < nb; r++) {
                const size_t i = i0 + r;
                if (!row_keys(job->kv_range, i, j0, nk, &a[r], &b[r]))
                    continue;
                const float *qi = job->q + i * qcols + h * d, *gi = job->dout + i * qcols + h * d;
                const float lse2 = job->lse[i * s->heads + h] * (float)LOG2E;
                const float delta = job->delta[i * s->heads + h];
                float *pr = p + r * KTILE, *dsr = ds + r * KTILE;
                for (size_t c = 0; c < d; c++)
                    qs[r * d + c] = qi[c] * job->qscale;
                tile_scores(qs + r * d, kt, d, pr);
                tile_scores(gi, vt, d, dsr);
                for (size_t jj = a[r]; jj < b[r]; jj++) {
                    pr[jj] = exp2_fast(pr[jj] - lse2);
                    dsr[jj] = pr[jj] * (dsr[jj] - delta);
                }
            }
            /* each key's terms from the rows of the block that attend to it, in row order */
            for (size_t jj = 0; jj < nk; jj++) {
                float wp[QBLOCK], wd[QBLOCK];
                const float *xg[QBLOCK], *xq[QBLOCK];
                size_t n = 0;
                for (size_t r = 0; r < nb; r++)
                    if (a[r] <= jj && jj < b[r]) {
                        const size_t i = i0 + r;
                        wp[n] = p[r * KTILE + jj];
                        wd[n] = ds[r * KTILE + jj];
                        xg[n] = job->dout + i * qcols + h * d;
                        xq[n] = job->q + i * qcols + h * d;
                        n++;
                    }
                axpy_n(dva + jj * d, n, wp, xg, d);
                axpy_n(dka + jj * d, n, wd, xq, d);
            }
        }
    for (size_t jj = 0; jj < nk; jj++) {
        float *dkr = job->dk + (j0 + jj) * kcols + hk * d;
        float *dvr = job->dv + (j0 + jj) * kcols + hk * d;
        for (size_t c = 0; c < d; c++) {
            dkr[c] = dka[jj * d + c] * s->scale;
            dvr[c] = dva[jj * d + c];
        }
    }
}

hd_status hd__cpu_attention_backward(hd_cpu_pool *pool, const hd_cpu_attention_shape *s,
                                     const float *q, const float *k, const float *v,
                                     const float *out, const float *lse, const float *dout,
                                     const int32_t *kv_range, const int32_t *q_range, float *dq,
                                     float *dk, float *dv)
{
    const size_t d = s->head_dim;
    attention_job job = {.s = s,
                         .q = q,
                         .k = k,
                         .v = v,
                         .out = out,
                         .lse = lse,
                         .dout = dout,
                         .kv_range = kv_range,
                         .q_range = q_range,
                         .dst = dq,
                         .dk = dk,
                         .dv = dv,
                         .qscale = (float)(s->scale * LOG2E)};
    const size_t dq_stride = 3 * QTILE * d + 2 * d * KTILE + 2 * KTILE;
    const size_t dkdv_stride = 4 * d * KTILE + QBLOCK * d + 2 * QBLOCK * KTILE;
    /* every scratch before the first output is written: a failure leaves them untouched */
    job.stride = dq_stride > dkdv_stride ? dq_stride : dkdv_stride;
    double macs = 2.0 * (double)s->tokens * (double)s->tokens * (double)s->heads * (double)d;
    if (!prepare(pool, &job, macs, s->tokens * s->heads))
        return HD_ERR_OUT_OF_MEMORY;
    job.delta = job.scratch + job.threads * job.stride;

    job.items = s->tokens;
    job.item = delta_item;
    run_items(pool, &job);

    job.qtiles = (s->tokens + QTILE - 1) / QTILE;
    job.items = job.qtiles * s->heads;
    job.item = dq_item;
    run_items(pool, &job);

    job.ktiles = (s->tokens + KTILE - 1) / KTILE;
    job.items = job.ktiles * s->kv_heads;
    job.item = dkdv_item;
    run_items(pool, &job);
    free(job.scratch);
    return HD_OK;
}
