/*
 * RoPE: rope.cl on the device (fp32 and bf16; HEADS_PER_ITEM 1, 3 and 4; one item per
 * work-item and grid-stride with few work-groups; forward and inverse) and rope.c on the CPU
 * (pools of 1, 2 and 3 threads, the same bits), against the float64 reference with angles,
 * cosines and sines in double; the inverse (the backward) against central differences of the
 * reference forward.
 *
 * Data x uniform in [-1, 1]; positions from packed sequences (offset 0 and near 131072) and
 * random in [0, 131072]; theta 10000 and 500000, and a float frequency table (lo = 0, the
 * reference on the same floats). Tolerance: fp32 2e-6 absolute (the spec's aim on |x| <= 1 up
 * to position 131072); bf16 half an ulp of bf16 (2^-8 |want|) more, the reference on the
 * bf16-rounded x. A sweep over every position 0 .. 131071 (one row each) reports the worst
 * error at large positions.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "dev/elementwise/harness.h"

#define ROPE_TOL     2e-6
#define MAX_POSITION 131072

static tally dev_tally[2][2] = {
    {{.name = "rope fp32 (device)"}, {.name = "rope inverse fp32 (device)"}},
    {{.name = "rope bf16 (device)"}, {.name = "rope inverse bf16 (device)"}}};
static tally cpu_tally[2] = {{.name = "rope fp32 (cpu)"}, {.name = "rope inverse fp32 (cpu)"}};
static tally fd_tally = {.name = "rope inverse vs finite differences"};
static tally cpu_same = {.name = "rope cpu: the same bits on 1, 2 and 3 threads"};
static tally positions_tally = {.name = "rope positions of packed sequences"};
static tally sweep_tally[2] = {{.name = "rope sweep p = 0..131071 (device)"},
                               {.name = "rope sweep p = 0..131071 (cpu)"}};

/* One RoPE problem: x rows x (heads * d), its positions and frequencies. */
typedef struct rope_case {
    size_t rows, heads, d;
    int *pos;
    float *freq;    /* d/2 pairs (hi, lo) */
    double *freq64; /* what the reference takes */
    const char *name;
} rope_case;

static void run_device(const rope_case *c, bool bf16, int per_item, int wg, int groups,
                       bool inverse, const float *x, float *got)
{
    size_t n = c->rows * c->heads * c->d;
    char options[128];
    snprintf(options, sizeof options, "-D ACT_BF16=%d -D HEADS_PER_ITEM=%d -D WG=%d", bf16,
             per_item, wg);
    cl_kernel k = cl_kernel_get("rope", options, "rope");
    cl_mem bx = cl_acts(x, n, bf16), bp = cl_bytes(c->pos, c->rows * sizeof(int)),
           bf = cl_bytes(c->freq, c->d * sizeof(float));
    int rows = (int)c->rows, heads = (int)c->heads, d = (int)c->d, inv = inverse;
    cl_arg(k, 0, sizeof bx, &bx);
    cl_arg(k, 1, sizeof bp, &bp);
    cl_arg(k, 2, sizeof bf, &bf);
    cl_arg(k, 3, sizeof rows, &rows);
    cl_arg(k, 4, sizeof heads, &heads);
    cl_arg(k, 5, sizeof d, &d);
    cl_arg(k, 6, sizeof inv, &inv);
    size_t items = c->rows * ((c->heads + (size_t)per_item - 1) / (size_t)per_item) * (c->d / 2);
    size_t cover = (items + (size_t)wg - 1) / (size_t)wg;
    cl_run(k, (groups > 0 ? (size_t)groups : cover) * (size_t)wg, (size_t)wg);
    cl_acts_read(bx, got, n, bf16);
    cl_free(bx);
    cl_free(bp);
    cl_free(bf);
}

static void compare(tally *t, size_t n, const double *want, const float *got, bool bf16,
                    const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double tol = ROPE_TOL;
        if (bf16)
            tol = BF16_HALF_ULP * fabs(want[i]) + (1.0 + BF16_HALF_ULP) * tol;
        stat_check(t, got[i], want[i], tol, 1.0, bf16, "%s element %zu", what, i);
    }
}

/* The inverse against central differences of the reference forward: d/dx_j of
 * sum(dy * rope(x)), x_j moved by +-2^-10 (a linear map: exact but for double's rounding). */
static void finite_differences(const rope_case *c, const float *x, const float *dy,
                               const float *got_inverse, const char *what)
{
    size_t n = c->rows * c->heads * c->d;
    double *want = alloc_d(n), *y = alloc_d(n);
    float *xp = alloc_f(n);
    memcpy(xp, x, n * sizeof(float));
    hd__ref_rope(c->rows, c->heads, c->d, c->pos, c->freq64, true, dy, want);
    for (size_t j = 0; j < n; j++) {
        double sum[2];
        float step[2] = {(float)(x[j] + 0x1p-10), (float)(x[j] - 0x1p-10)};
        for (int s = 0; s < 2; s++) {
            xp[j] = step[s];
            hd__ref_rope(c->rows, c->heads, c->d, c->pos, c->freq64, false, xp, y);
            sum[s] = 0.0;
            for (size_t i = 0; i < n; i++)
                sum[s] += (double)dy[i] * y[i];
        }
        xp[j] = x[j];
        double fd = (sum[0] - sum[1]) / ((double)step[0] - (double)step[1]);
        stat_check(&fd_tally, want[j], fd, 1e-9, 1.0, false, "reference, %s element %zu", what, j);
        stat_check(&fd_tally, got_inverse[j], fd, ROPE_TOL, 1.0, false, "%s element %zu", what, j);
    }
    free(want);
    free(y);
    free(xp);
}

static void run_case(const rope_case *c)
{
    size_t n = c->rows * c->heads * c->d;
    float *x32 = alloc_f(n), *x = alloc_f(n), *got = alloc_f(n), *base = alloc_f(n);
    double *want = alloc_d(n);
    for (size_t i = 0; i < n; i++)
        x32[i] = (float)rng_uniform(-1.0, 1.0);
    char what[200];
    static const int forms[][3] = {{4, 64, 0}, {1, 64, 0}, {3, 64, 2}, {4, 256, 0}, {4, 64, 1}};
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        memcpy(x, x32, n * sizeof(float));
        if (bf16)
            bf16_round_all(x, n);
        for (int inverse = 0; inverse <= 1; inverse++) {
            hd__ref_rope(c->rows, c->heads, c->d, c->pos, c->freq64, inverse, x, want);
            for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
                run_device(c, bf16, forms[f][0], forms[f][1], forms[f][2], inverse, x, got);
                snprintf(what, sizeof what, "%s %zux%zux%zu %s HEADS_PER_ITEM=%d WG=%d groups=%d",
                         c->name, c->rows, c->heads, c->d, bf16 ? "bf16" : "fp32", forms[f][0],
                         forms[f][1], forms[f][2]);
                compare(&dev_tally[bf16][inverse], n, want, got, bf16, what);
                if (!bf16 && inverse && f == 0 && n <= 1024)
                    finite_differences(c, x32, x32, got, what); /* x doubles as dy */
            }
            if (bf16)
                continue;
            for (int p = 0; p < 3; p++) {
                memcpy(got, x, n * sizeof(float));
                hd__cpu_rope(pools[p], c->rows, c->heads, c->d, c->pos, c->freq, inverse, got);
                snprintf(what, sizeof what, "%s %zux%zux%zu cpu pool %d", c->name, c->rows,
                         c->heads, c->d, p);
                compare(&cpu_tally[inverse], n, want, got, false, what);
                if (p == 0)
                    memcpy(base, got, n * sizeof(float));
                cpu_same.values++;
                if (memcmp(base, got, n * sizeof(float)) != 0) {
                    cpu_same.failures++;
                    snprintf(cpu_same.where, sizeof cpu_same.where, "%s", what);
                }
            }
        }
    }
    free(x32);
    free(x);
    free(got);
    free(base);
    free(want);
}

/* Frequencies of theta (table: false), or a float table of them (lo = 0, the reference on the
 * same floats, as a user-given table is used). */
static void frequencies(rope_case *c, double theta, bool table)
{
    hd__cpu_rope_inv_freq(theta, c->d, c->freq);
    hd__ref_rope_inv_freq(theta, c->d, c->freq64);
    if (table)
        for (size_t i = 0; i < c->d / 2; i++) {
            c->freq[2 * i + 1] = 0.0f;
            c->freq64[i] = c->freq[2 * i];
        }
}

/* Positions of packed sequences of random lengths, from hd__cpu_rope_positions, checked
 * against the definition. */
static void packed_positions(rope_case *c, int offset)
{
    int *lens = calloc(c->rows, sizeof *lens);
    size_t nseq = 0, left = c->rows;
    while (left > 0) {
        int len = rng_int(1, (int)(left < 70 ? left : 70));
        lens[nseq++] = len;
        left -= (size_t)len;
    }
    hd__cpu_rope_positions(lens, nseq, offset, c->pos);
    size_t row = 0;
    for (size_t q = 0; q < nseq; q++)
        for (int k = 0; k < lens[q]; k++, row++)
            stat_check(&positions_tally, c->pos[row], offset + k, 0.5, 1.0, false, "row %zu", row);
    free(lens);
}

/* Every position 0 .. 131071, one row each: the worst error over all angles. */
static void sweep(double theta)
{
    rope_case c = {MAX_POSITION, 1, 128, NULL, NULL, NULL, "sweep"};
    size_t n = c.rows * c.d;
    c.pos = malloc(c.rows * sizeof(int));
    c.freq = alloc_f(c.d);
    c.freq64 = alloc_d(c.d / 2);
    frequencies(&c, theta, false);
    for (size_t r = 0; r < c.rows; r++)
        c.pos[r] = (int)r;
    float *x = alloc_f(n), *got = alloc_f(n);
    double *want = alloc_d(n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rng_uniform(-1.0, 1.0);
    hd__ref_rope(c.rows, c.heads, c.d, c.pos, c.freq64, false, x, want);
    char what[64];
    snprintf(what, sizeof what, "sweep theta %g", theta);
    run_device(&c, false, 4, 256, 0, false, x, got);
    compare(&sweep_tally[0], n, want, got, false, what);
    memcpy(got, x, n * sizeof(float));
    hd__cpu_rope(pools[2], c.rows, c.heads, c.d, c.pos, c.freq, false, got);
    compare(&sweep_tally[1], n, want, got, false, what);
    free(x);
    free(got);
    free(want);
    free(c.pos);
    free(c.freq);
    free(c.freq64);
}

int check_rope(void)
{
    static const size_t shapes[][3] = {{1, 1, 2},    {1, 1, 8},    {3, 2, 6},    {7, 3, 64},
                                       {13, 5, 128}, {64, 8, 128}, {5, 32, 128}, {2, 1, 256},
                                       {17, 4, 72},  {100, 2, 16}, {300, 3, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int variant = 0; variant < 4; variant++) {
            rope_case c = {shapes[s][0], shapes[s][1], shapes[s][2], NULL, NULL, NULL, NULL};
            c.pos = malloc(c.rows * sizeof(int));
            c.freq = alloc_f(c.d);
            c.freq64 = alloc_d(c.d / 2);
            switch (variant) {
            case 0:
                c.name = "packed, offset 0, theta 1e4";
                frequencies(&c, 10000.0, false);
                packed_positions(&c, 0);
                break;
            case 1:
                c.name = "packed, offset near 131072, theta 5e5";
                frequencies(&c, 500000.0, false);
                packed_positions(&c, MAX_POSITION - 70);
                break;
            case 2:
                c.name = "random positions, theta 1e4";
                frequencies(&c, 10000.0, false);
                for (size_t r = 0; r < c.rows; r++)
                    c.pos[r] = rng_int(0, MAX_POSITION);
                break;
            default:
                c.name = "random positions, float table";
                frequencies(&c, 500000.0, true);
                for (size_t r = 0; r < c.rows; r++)
                    c.pos[r] = rng_int(0, MAX_POSITION);
                break;
            }
            run_case(&c);
            free(c.pos);
            free(c.freq);
            free(c.freq64);
        }
    sweep(10000.0);
    sweep(500000.0);
    int failed = 0;
    for (int b = 0; b < 2; b++)
        for (int inv = 0; inv < 2; inv++)
            failed += !stat_report(&dev_tally[b][inv]);
    failed += !stat_report(&cpu_tally[0]);
    failed += !stat_report(&cpu_tally[1]);
    failed += !stat_report(&fd_tally);
    failed += !stat_report(&cpu_same);
    failed += !stat_report(&positions_tally);
    failed += !stat_report(&sweep_tally[0]);
    failed += !stat_report(&sweep_tally[1]);
    return failed;
}
