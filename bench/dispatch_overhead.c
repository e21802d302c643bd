/*
 * dispatch-overhead: what the library adds to a tiny op. A 1×8 softmax on the CPU backend,
 * timed through hd_softmax() and through the CPU backend's slot alone, with a tuning cache of
 * the documented maximum of records (tests/data/tune_too_many_records.txt, rewritten for this
 * context's device key so that its records are used). The difference per call is the
 * dispatch overhead: checks, the memoized plan, residency and the call of the slot. A shape
 * without a record of its own (3×9) shows the same once its plan is memoized; three passes
 * over 200 shapes never seen (the memo holds 256 plans) show what making their plans costs.
 *
 * Usage: dispatch-overhead RECORDS_FILE [CALLS]. Prints one line per case; exits 0 unless the
 * library fails.
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "dispatch/tuning.h"
#include "autotune/measure.h"
#include "dispatch/tools.h"

static int fail(const char *what, hd_context *ctx)
{
    fprintf(stderr, "dispatch-overhead: %s: %s\n", what, ctx ? hd_context_last_error(ctx) : "");
    return 1;
}

/* The records of path, under this machine's device key, at out. */
static bool rewrite_cache(const char *path, const char *out, size_t *records)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.disable_opencl = true;
    opt.no_tune_cache = true;
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, &opt) != HD_OK)
        return false;
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[256];
    bool ok = hd__tune_load(path, &f, msg, sizeof msg) == HD_OK;
    if (ok) {
        hd__tune_context_key(ctx, &f.key);
        *records = f.count;
        ok = hd__tune_save(out, &f, msg, sizeof msg) == HD_OK;
    }
    if (!ok)
        fprintf(stderr, "dispatch-overhead: %s\n", msg);
    hd__tune_file_free(&f);
    hd_context_destroy(ctx);
    return ok;
}

/* Per call, in microseconds: the best of five rounds of calls calls. */
static double time_calls(hd_context *ctx, hd_tensor *x, hd_tensor *y, size_t calls, bool slot_only,
                         hd_status *status)
{
    hd_call call;
    const hd_tensor *t[] = {x, y};
    hd_op_params p = {0};
    *status = hd__call_prepare(ctx, HD_OP_SOFTMAX, t, &p, &call);
    double best = 1e30;
    for (int round = 0; round < 5 && *status == HD_OK; round++) {
        double t0 = hd__measure_now();
        for (size_t i = 0; i < calls && *status == HD_OK; i++)
            *status =
                slot_only ? hd__call_run_slot(ctx, HD_BACKEND_CPU, &call) : hd_softmax(ctx, x, y);
        double us = (hd__measure_now() - t0) * 1e6 / (double)calls;
        best = us < best ? us : best;
    }
    return best;
}

static int run_case(hd_context *ctx, size_t rows, size_t cols, size_t calls, const char *cache)
{
    hd_tensor *x = NULL, *y = NULL;
    float data[64];
    for (size_t i = 0; i < rows * cols; i++)
        data[i] = (float)i * 0.25f - 1.0f;
    if (hd_tensor_create(ctx, rows, cols, &x) != HD_OK ||
        hd_tensor_create(ctx, rows, cols, &y) != HD_OK || hd_tensor_write(x, data) != HD_OK)
        return fail("tensors", ctx);
    hd_status s1, s2;
    double full = time_calls(ctx, x, y, calls, false, &s2); /* first: places x and y */
    double kernel = time_calls(ctx, x, y, calls, true, &s1);
    if (s1 != HD_OK || s2 != HD_OK)
        return fail("softmax", ctx);
    unsigned long hits, misses;
    hd__plans_stats(ctx, &hits, &misses);
    printf("softmax %zux%zu on %s, cache %s: hd_softmax %.3f us, CPU slot %.3f us, "
           "dispatch overhead %.3f us per call (plans made %lu, memo hits %lu)\n",
           rows, cols, hd_backend_name(hd_context_last_backend(ctx)), cache, full, kernel,
           full - kernel, misses, hits);
    hd_tensor_destroy(x);
    hd_tensor_destroy(y);
    return 0;
}

/* Three calls of each of `count` shapes the context has not seen (rows 1..count, 8 columns),
 * shape after shape, per call and pass with the plans each pass made: the first pass makes a
 * plan for every shape (rules, nearest-record searches, estimates), the later ones find them
 * in the memo (or make those of a residency that changed). Both tensors of each shape are
 * written beforehand, so that no pass pays for first touches. */
static int run_new_shapes(hd_context *ctx, size_t count, const char *cache)
{
    hd_tensor **x = calloc(count, sizeof *x), **y = calloc(count, sizeof *y);
    float *data = calloc(count * 8, sizeof *data);
    int rc = x != NULL && y != NULL && data != NULL ? 0 : fail("memory", ctx);
    for (size_t i = 0; i < count && rc == 0; i++)
        if (hd_tensor_create(ctx, i + 1, 8, &x[i]) != HD_OK ||
            hd_tensor_create(ctx, i + 1, 8, &y[i]) != HD_OK ||
            hd_tensor_write(x[i], data) != HD_OK || hd_tensor_write(y[i], data) != HD_OK)
            rc = fail("tensors", ctx);
    double us[3] = {0.0, 0.0, 0.0};
    unsigned long made[3] = {0, 0, 0};
    for (int pass = 0; pass < 3 && rc == 0; pass++) {
        unsigned long hits0, misses0, hits, misses;
        hd__plans_stats(ctx, &hits0, &misses0);
        double t0 = hd__measure_now();
        for (size_t i = 0; i < count && rc == 0; i++)
            if (hd_softmax(ctx, x[i], y[i]) != HD_OK)
                rc = fail("softmax", ctx);
        us[pass] = (hd__measure_now() - t0) * 1e6 / (double)count;
        hd__plans_stats(ctx, &hits, &misses);
        made[pass] = misses - misses0;
    }
    if (rc == 0)
        printf("softmax of %zu new shapes (1..%zux8), cache %s: per call %.3f, %.3f, %.3f us in "
               "three passes (plans made %lu, %lu, %lu)\n",
               count, count, cache, us[0], us[1], us[2], made[0], made[1], made[2]);
    for (size_t i = 0; i < count; i++) {
        hd_tensor_destroy(x[i]);
        hd_tensor_destroy(y[i]);
    }
    free(x);
    free(y);
    free(data);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dispatch-overhead RECORDS_FILE [CALLS]\n");
        return 2;
    }
    size_t calls = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 200000;
    char dir[] = "/tmp/hd-overhead-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/tune.txt", dir);
    size_t records = 0;
    int rc = rewrite_cache(argv[1], path, &records) ? 0 : 1;

    const char *caches[2] = {NULL, path};
    for (int c = 0; c < 2 && rc == 0; c++) {
        hd_context_options opt;
        hd_context_options_init(&opt);
        opt.disable_opencl = true; /* the CPU backend alone, chosen by the rules, not forced */
        opt.tune_cache = caches[c];
        opt.no_tune_cache = caches[c] == NULL;
        hd_context *ctx = NULL;
        if (hd_context_create(&ctx, &opt) != HD_OK)
            return fail("context", NULL);
        char label[64];
        snprintf(label, sizeof label, c ? "%zu records" : "empty", records);
        rc = run_case(ctx, 1, 8, calls, label);
        if (rc == 0)
            rc = run_case(ctx, 3, 9, calls, label);
        if (rc == 0)
            rc = run_new_shapes(ctx, 200, label); /* within the memo's 256 plans */
        hd_context_destroy(ctx);
    }
    unlink(path);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", path);
    unlink(lock);
    rmdir(dir);
    return rc;
}
