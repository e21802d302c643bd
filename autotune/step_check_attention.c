/*
 * The tools' check of attention and its backward (reference.h) on sampled rows: each sampled
 * row's outputs from the op's inputs as defined, in double, every score recomputed where it is
 * needed. A whole-tensor float64 reference of attention costs T^2 H d multiply-adds (minutes at
 * T = 2048, 32 heads of 128); a row costs T H d, so a check samples what HD_REF_STEP_MACS
 * affords.
 *
 * Tolerances (in units of u = 2^-24, K = 2, linear bounds of float rounding): a score s_ij =
 * scale q_i . k_j is off by up to d S_ij (S_ij = scale sum_c |q_ic k_jc|, a d-long float
 * product), and a weight p_ij = exp(s_ij - lse_i) by E_ij = d (S_ij + 1) + |lse_i| + n_i + 8
 * relative (the score, lse's rounding, the n_i-long sum of exps behind lse where the op forms
 * it); with p and its sums:
 *   out_ic  K sum_j p_ij (E_ij |v_jc - out_ic| + (n_i + 2) |v_jc|)
 *   lse_i   K (sum_j p_ij E_ij + |lse_i| + 1)
 *   dv_jc   K sum_i p_ij (E_ij + N_j) |dout_ic|
 *   dq_ic   K scale sum_j (W_ij + n_i |ds_ij|) |k_jc|
 *   dk_jc   K scale sum_i (W_ij + N_j |ds_ij|) |q_ic|
 * where ds_ij = p_ij (dp_ij - delta_i), dp_ij = dout_i . v_j, delta_i = dout_i . out_i (the
 * backward's given out and lse: FlashAttention's definition, which the backends compute),
 * W_ij = p_ij (E_ij |dp_ij - delta_i| + d (sum_c |dout_ic v_jc| + sum_c |dout_ic out_ic|)) the
 * error of ds, and N_j the terms of key j's sums (its queries times the group's heads).
 * In tf32 (the products on tensor cores, operands of 10 mantissa bits), with t = HD_REF_TF32
 * as hd__ref_matmul_tolerance takes it: a score is off by t S_ij more, so out_ic by
 * t sum_j p_ij (S_ij |v_jc - out_ic| + |v_jc|) (the weights' error, v's and p's rounding) and
 * lse_i by t sum_j p_ij S_ij; backward, in the u counts above (so times K with them), E_ij
 * gains t S_ij / u, W_ij gains t p_ij (S_ij |dp_ij - delta_i| + sum_c |dout_ic v_jc|) / u
 * (dp's products), and each term of dq, dk and dv t / u of its size (ds, p and the other
 * operand rounded). These bounds are linear: they hold while t S_ij stays well below 1. fp32x3
 * is held to the fp32 bounds.
 */
#include <math.h>
#include <stdlib.h>

#include "autotune/step_check.h"

#define K 2.0

typedef struct attn {
    size_t tokens, heads, kv_heads, d, group;
    double scale;
    bool causal;
    const hd_sequences *seq;
    const float *q, *k, *v, *out, *lse, *dout;
    bool tf32; /* the products in tf32 */
} attn;

static attn attn_of(const hd_shape *s, const hd_op_params *p, const float *const in[],
                    bool backward)
{
    attn a = {.tokens = s->dim[0],
              .heads = s->dim[1],
              .kv_heads = s->dim[2],
              .d = s->dim[3],
              .causal = p->causal,
              .seq = &p->sequences,
              .q = in[0],
              .k = in[1],
              .v = in[2],
              .tf32 = s->precision == HD_PRECISION_TF32};
    a.group = a.heads / a.kv_heads;
    a.scale = p->attention_scale != 0.0f ? (double)p->attention_scale : 1.0 / sqrt((double)a.d);
    if (backward) {
        a.out = in[3];
        a.lse = in[4];
        a.dout = in[5];
    }
    return a;
}

/* The keys [*b, *e) that query row i attends to. */
static void keys_of(const attn *a, size_t i, size_t *b, size_t *e)
{
    size_t start, len;
    hd__ref_step_sequence(a->seq, a->tokens, i, &start, &len);
    *b = start;
    *e = a->causal ? i + 1 : start + len;
}

/* The query rows [*b, *e) that attend to key row j. */
static void queries_of(const attn *a, size_t j, size_t *b, size_t *e)
{
    size_t start, len;
    hd__ref_step_sequence(a->seq, a->tokens, j, &start, &len);
    *b = a->causal ? j : start;
    *e = start + len;
}

/* scale q_i . k_j for query head h, and *mag its terms' magnitudes (S_ij). */
static double score(const attn *a, size_t i, size_t j, size_t h, double *mag)
{
    const float *qi = a->q + (i * a->heads + h) * a->d;
    const float *kj = a->k + (j * a->kv_heads + h / a->group) * a->d;
    double dot = 0.0, m = 0.0;
    for (size_t c = 0; c < a->d; c++) {
        double t = (double)qi[c] * kj[c];
        dot += t;
        m += fabs(t);
    }
    *mag = a->scale * m;
    return a->scale * dot;
}

/* sum_c x_c y_c and sum_c |x_c y_c| over d. */
static double dot_mag(const float *x, const float *y, size_t d, double *mag)
{
    double dot = 0.0, m = 0.0;
    for (size_t c = 0; c < d; c++) {
        double t = (double)x[c] * y[c];
        dot += t;
        m += fabs(t);
    }
    *mag = m;
    return dot;
}

/* The keys a row attends to on the mean (one sequence): what a sampled row costs. */
static double mean_keys(const attn *a)
{
    return a->causal ? (double)(a->tokens + 1) / 2 : (double)a->tokens;
}

/* ---- forward ---- */

/* Row i, head h: out and lse with their tolerances. sc, mag: room for the row's scores; acc:
 * 3 d doubles. */
static void forward_row_head(const attn *a, size_t i, size_t h, double *sc, double *mag,
                             double *acc, hd_ref_expect *e)
{
    size_t b, end, d = a->d;
    keys_of(a, i, &b, &end);
    double n = (double)(end - b), max = -INFINITY, sum = 0.0, spread = 0.0;
    for (size_t j = b; j < end; j++) {
        sc[j - b] = score(a, i, j, h, &mag[j - b]);
        max = sc[j - b] > max ? sc[j - b] : max;
    }
    for (size_t j = b; j < end; j++)
        sum += exp(sc[j - b] - max);
    double lse = max + log(sum), *out = acc, *tol = acc + d, *tol_tf32 = acc + 2 * d;
    double spread_tf32 = 0.0, t = a->tf32 ? HD_REF_TF32 : 0.0;
    for (size_t c = 0; c < 3 * d; c++)
        acc[c] = 0.0;
    for (size_t j = b; j < end; j++) {
        const float *vj = a->v + (j * a->kv_heads + h / a->group) * d;
        double p = exp(sc[j - b] - lse);
        for (size_t c = 0; c < d; c++)
            out[c] += p * vj[c];
    }
    for (size_t j = b; j < end; j++) {
        const float *vj = a->v + (j * a->kv_heads + h / a->group) * d;
        double p = exp(sc[j - b] - lse), E = (double)d * (mag[j - b] + 1) + fabs(lse) + n + 8;
        spread += p * E;
        spread_tf32 += p * mag[j - b];
        for (size_t c = 0; c < d; c++)
            tol[c] += p * (E * fabs(vj[c] - out[c]) + (n + 2) * fabs((double)vj[c]));
        for (size_t c = 0; t > 0.0 && c < d; c++)
            tol_tf32[c] += p * (mag[j - b] * fabs(vj[c] - out[c]) + fabs((double)vj[c]));
    }
    for (size_t c = 0; c < d; c++)
        hd__ref_expect_add(e, 0, (i * a->heads + h) * d + c, out[c],
                           K * HD_REF_U * tol[c] + t * tol_tf32[c] + HD_REF_EXACT);
    if (e->outputs > 1)
        hd__ref_expect_add(e, 1, i * a->heads + h, lse,
                           K * HD_REF_U * (spread + fabs(lse) + 1) + t * spread_tf32 +
                               HD_REF_EXACT);
}

bool hd__ref_expect_attention(const hd_shape *s, const hd_op_params *p, const float *const in[],
                              hd_ref_expect *e)
{
    attn a = attn_of(s, p, in, false);
    size_t max = hd__ref_step_rows_by_cost(a.tokens, 3.0 * a.heads * mean_keys(&a) * a.d);
    double *m = malloc((2 * a.tokens + 3 * a.d + 1) * sizeof *m);
    if (m == NULL)
        return false;
    for (size_t si = 0; si < hd__ref_sample_count(a.tokens, max); si++) {
        size_t i = hd__ref_sample(a.tokens, max, si);
        for (size_t h = 0; h < a.heads; h++)
            forward_row_head(&a, i, h, m, m + a.tokens, m + 2 * a.tokens, e);
    }
    free(m);
    return !e->no_memory;
}

/* ---- backward ---- */

/* What one (query row i, head h, key j) pair gives the gradients: the weight p, ds, and their
 * errors' shares (p E and W, in u). */
typedef struct pair_terms {
    double p, ds, p_err, ds_err;
} pair_terms;

/* delta_i for head h and its terms' magnitude, d-long products of the given dout and out. */
static double delta_of(const attn *a, size_t i, size_t h, double *mag)
{
    size_t at = (i * a->heads + h) * a->d;
    return dot_mag(a->dout + at, a->out + at, a->d, mag);
}

/* tf32's rounding of a product's operands, in units of u (0 in fp32 and fp32x3). */
static double tf32_units(const attn *a)
{
    return a->tf32 ? HD_REF_TF32 / HD_REF_U : 0.0;
}

static pair_terms pair_of(const attn *a, size_t i, size_t h, size_t j, double n)
{
    double smag, vmag, dmag;
    double s = score(a, i, j, h, &smag), lse = a->lse[i * a->heads + h];
    double delta = delta_of(a, i, h, &dmag);
    double dp = dot_mag(a->dout + (i * a->heads + h) * a->d,
                        a->v + (j * a->kv_heads + h / a->group) * a->d, a->d, &vmag);
    double d = (double)a->d, p = exp(s - lse);
    double x = tf32_units(a), E = d * (smag + 1) + fabs(lse) + n + 8 + x * smag;
    return (pair_terms){.p = p,
                        .ds = p * (dp - delta),
                        .p_err = p * E,
                        .ds_err = p * (E * fabs(dp - delta) + d * (vmag + dmag) + x * vmag)};
}

/* Query row i: dq of every head. acc: 2 d doubles. */
static void dq_row(const attn *a, size_t i, double *acc, hd_ref_expect *e)
{
    size_t b, end, d = a->d;
    keys_of(a, i, &b, &end);
    double n = (double)(end - b);
    for (size_t h = 0; h < a->heads; h++) {
        double *dq = acc, *tol = acc + d;
        for (size_t c = 0; c < 2 * d; c++)
            acc[c] = 0.0;
        for (size_t j = b; j < end; j++) {
            pair_terms t = pair_of(a, i, h, j, n);
            const float *kj = a->k + (j * a->kv_heads + h / a->group) * d;
            for (size_t c = 0; c < d; c++) {
                dq[c] += a->scale * t.ds * kj[c];
                tol[c] +=
                    a->scale * (t.ds_err + (n + tf32_units(a)) * fabs(t.ds)) * fabs((double)kj[c]);
            }
        }
        for (size_t c = 0; c < d; c++)
            hd__ref_expect_add(e, 0, (i * a->heads + h) * d + c, dq[c],
                               K * HD_REF_U * tol[c] + HD_REF_EXACT);
    }
}

/* Key row j, kv head hk: dk and dv, summed over the group's query heads and the rows that
 * attend to j. acc: 4 d doubles. */
static void dkdv_row_head(const attn *a, size_t j, size_t hk, double *acc, hd_ref_expect *e)
{
    size_t b, end, d = a->d;
    queries_of(a, j, &b, &end);
    double *dk = acc, *dv = acc + d, *tk = acc + 2 * d, *tv = acc + 3 * d;
    for (size_t c = 0; c < 4 * d; c++)
        acc[c] = 0.0;
    double terms = (double)((end - b) * a->group) + tf32_units(a);
    for (size_t h = hk * a->group; h < (hk + 1) * a->group; h++)
        for (size_t i = b; i < end; i++) {
            size_t kb, ke;
            keys_of(a, i, &kb, &ke);
            pair_terms t = pair_of(a, i, h, j, (double)(ke - kb));
            const float *qi = a->q + (i * a->heads + h) * d;
            const float *gi = a->dout + (i * a->heads + h) * d;
            for (size_t c = 0; c < d; c++) {
                dk[c] += a->scale * t.ds * qi[c];
                dv[c] += t.p * gi[c];
                tk[c] += a->scale * (t.ds_err + terms * fabs(t.ds)) * fabs((double)qi[c]);
                tv[c] += (t.p_err + terms * t.p) * fabs((double)gi[c]);
            }
        }
    for (size_t c = 0; c < d; c++) {
        size_t at = (j * a->kv_heads + hk) * d + c;
        hd__ref_expect_add(e, 1, at, dk[c], K * HD_REF_U * tk[c] + HD_REF_EXACT);
        hd__ref_expect_add(e, 2, at, dv[c], K * HD_REF_U * tv[c] + HD_REF_EXACT);
    }
}

/* dq on sampled query rows, dk and dv on sampled key rows (the same indices), as many as the
 * budget affords at every pair of a row (about 12 d multiply-adds for the two). */
bool hd__ref_expect_attention_backward(const hd_shape *s, const hd_op_params *p,
                                       const float *const in[], hd_ref_expect *e)
{
    attn a = attn_of(s, p, in, true);
    size_t max = hd__ref_step_rows_by_cost(a.tokens, 12.0 * a.heads * mean_keys(&a) * a.d);
    double *acc = malloc((4 * a.d + 1) * sizeof *acc);
    if (acc == NULL)
        return false;
    for (size_t si = 0; si < hd__ref_sample_count(a.tokens, max); si++) {
        size_t r = hd__ref_sample(a.tokens, max, si);
        dq_row(&a, r, acc, e);
        for (size_t hk = 0; hk < a.kv_heads; hk++)
            dkdv_row_head(&a, r, hk, acc, e);
    }
    free(acc);
    return !e->no_memory;
}
