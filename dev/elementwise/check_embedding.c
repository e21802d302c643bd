/*
 * Embedding: embedding.cl on the device (fp32 and bf16, VEC 1, 2, 4 and 8 where cols allows,
 * one row per work-group and few work-groups looping) and embedding.c on the CPU (pools of 1,
 * 2 and 3 threads): a copy, so every output must be the table's bits exactly (the reference's
 * value; bf16: the table as stored).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/reference_step.h"
#include "dev/elementwise/harness.h"

static tally dev_tally[2] = {{.name = "embedding fp32 (device), exact"},
                             {.name = "embedding bf16 (device), exact"}};
static tally cpu_tally = {.name = "embedding fp32 (cpu), exact"};

static void run_device(size_t vocab, size_t rows, size_t cols, const float *table, const int *ids,
                       bool bf16, int vec, int wg, int groups, float *got)
{
    char options[96];
    snprintf(options, sizeof options, "-D ACT_BF16=%d -D VEC=%d -D WG=%d", bf16, vec, wg);
    cl_kernel k = cl_kernel_get("embedding", options, "embedding");
    cl_mem bt = cl_acts(table, vocab * cols, bf16), bi = cl_bytes(ids, rows * sizeof(int)),
           bo = cl_acts(NULL, rows * cols, bf16);
    int r = (int)rows, c = (int)cols;
    cl_arg(k, 0, sizeof bt, &bt);
    cl_arg(k, 1, sizeof bi, &bi);
    cl_arg(k, 2, sizeof bo, &bo);
    cl_arg(k, 3, sizeof r, &r);
    cl_arg(k, 4, sizeof c, &c);
    cl_run(k, (groups > 0 ? (size_t)groups : rows) * (size_t)wg, (size_t)wg);
    cl_acts_read(bo, got, rows * cols, bf16);
    cl_free(bt);
    cl_free(bi);
    cl_free(bo);
}

/* Exact: the same bits (NaN payloads included) as want, the table's values. */
static void compare(tally *t, size_t n, const double *want, const float *got, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        float w = (float)want[i];
        t->values++;
        if (memcmp(&w, &got[i], sizeof w) != 0) {
            t->failures++;
            t->worst_ratio = INFINITY;
            snprintf(t->where, sizeof t->where, "%s element %zu: got %.9g want %.9g", what, i,
                     got[i], w);
        }
    }
}

int check_embedding(void)
{
    static const size_t shapes[][3] = {{1, 1, 1},   {5, 7, 3},     {5, 7, 4},    {1000, 300, 8},
                                       {17, 3, 13}, {64, 33, 64},  {3, 2, 4099}, {50, 9, 4096},
                                       {2, 1, 2},   {70, 40, 2048}};
    static const int forms[][3] = {{1, 64, 0}, {2, 64, 0},  {4, 64, 0},
                                   {8, 64, 0}, {4, 256, 3}, {1, 32, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t vocab = shapes[s][0], rows = shapes[s][1], cols = shapes[s][2];
        float *table = alloc_f(vocab * cols), *got = alloc_f(rows * cols);
        int *ids = malloc(rows * sizeof *ids);
        double *want = alloc_d(rows * cols);
        fill_act(table, vocab * cols, 1.0);
        table[0] = NAN;
        if (vocab * cols > 1)
            table[vocab * cols - 1] = -INFINITY;
        for (size_t r = 0; r < rows; r++)
            ids[r] = r == 0 ? 0 : r == 1 ? (int)vocab - 1 : rng_int(0, (int)vocab - 1);
        char what[128];
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            if (bf16)
                bf16_round_all(table, vocab * cols);
            hd__ref_embedding(rows, cols, ids, table, want);
            for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
                if (cols % (size_t)forms[f][0] != 0)
                    continue;
                run_device(vocab, rows, cols, table, ids, bf16, forms[f][0], forms[f][1],
                           forms[f][2], got);
                snprintf(what, sizeof what, "V=%zu %zux%zu %s VEC=%d WG=%d groups=%d", vocab, rows,
                         cols, bf16 ? "bf16" : "fp32", forms[f][0], forms[f][1], forms[f][2]);
                compare(&dev_tally[bf16], rows * cols, want, got, what);
            }
            if (bf16)
                continue;
            for (int p = 0; p < 3; p++) {
                memset(got, 0, rows * cols * sizeof(float));
                hd__cpu_embedding(pools[p], rows, cols, ids, table, got);
                snprintf(what, sizeof what, "V=%zu %zux%zu cpu pool %d", vocab, rows, cols, p);
                compare(&cpu_tally, rows * cols, want, got, what);
            }
        }
        free(table);
        free(got);
        free(ids);
        free(want);
    }
    int failed = 0;
    failed += !stat_report(&dev_tally[0]);
    failed += !stat_report(&dev_tally[1]);
    failed += !stat_report(&cpu_tally);
    return failed;
}
