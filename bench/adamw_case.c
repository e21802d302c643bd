/* AdamW cases made real: the lists of a model's LoRA factors, their placement, the step and
 * its check (adamw_case.h). */
#include <stdlib.h>
#include <string.h>

#include "autotune/case_params.h"
#include "autotune/reference.h"
#include "bench/adamw_case.h"
#include "core/error.h"
#include "dispatch/tools.h"

/* The value range of each list, in hd_adamw()'s order. */
static const float list_lo[HD_BENCH_ADAMW_LISTS] = {-1.0f, -0.1f, -0.01f, 0.0f};
static const float list_hi[HD_BENCH_ADAMW_LISTS] = {1.0f, 0.1f, 0.01f, 1e-3f};

static size_t elements(const hd_bench_adamw *a, size_t k)
{
    return a->rows[k] * a->cols[k];
}

static size_t largest(const hd_bench_adamw *a)
{
    size_t most = 1;
    for (size_t k = 0; k < a->count; k++)
        most = elements(a, k) > most ? elements(a, k) : most;
    return most;
}

void hd__bench_adamw_destroy(hd_bench_adamw *a)
{
    for (size_t s = 0; s < HD_BENCH_MAX_SETS; s++)
        for (int l = 0; l < HD_BENCH_ADAMW_LISTS; l++) {
            for (size_t k = 0; a->lists[s][l] != NULL && k < a->count; k++)
                hd_tensor_destroy(a->lists[s][l][k]);
            free(a->lists[s][l]);
        }
    free(a->rows);
    free(a->cols);
    memset(a, 0, sizeof *a);
}

/* Every tensor of every set written from the seed: the same contents each time, valid on the
 * host alone. */
static hd_status write_all(hd_bench_adamw *a)
{
    float *data = malloc(largest(a) * sizeof *data);
    if (data == NULL)
        return hd__error(a->ctx, HD_ERR_OUT_OF_MEMORY, "AdamW's contents");
    uint64_t state = a->seed;
    hd_status st = HD_OK;
    for (size_t s = 0; s < a->sets && st == HD_OK; s++)
        for (size_t k = 0; k < a->count && st == HD_OK; k++)
            for (int l = 0; l < HD_BENCH_ADAMW_LISTS && st == HD_OK; l++) {
                hd__bench_fill(&state, data, elements(a, k), list_lo[l], list_hi[l]);
                st = hd_tensor_write(a->lists[s][l][k], data);
            }
    free(data);
    return st;
}

/* The tensors of every list of every set, zeros. */
static hd_status create_lists(hd_bench_adamw *a)
{
    for (size_t s = 0; s < a->sets; s++)
        for (int l = 0; l < HD_BENCH_ADAMW_LISTS; l++) {
            a->lists[s][l] = calloc(a->count, sizeof *a->lists[s][l]);
            if (a->lists[s][l] == NULL)
                return hd__error(a->ctx, HD_ERR_OUT_OF_MEMORY, "AdamW's lists of %zu tensors",
                                 a->count);
            for (size_t k = 0; k < a->count; k++) {
                hd_status st = hd_tensor_create(a->ctx, a->rows[k], a->cols[k], &a->lists[s][l][k]);
                if (st != HD_OK)
                    return st;
            }
        }
    return HD_OK;
}

hd_status hd__bench_adamw_create(hd_context *ctx, const hd_bench_case *c, uint64_t seed,
                                 size_t sets, hd_bench_adamw *a)
{
    memset(a, 0, sizeof *a);
    a->ctx = ctx;
    a->c = *c;
    a->seed = seed;
    a->sets = sets < 1 ? 1 : sets > HD_BENCH_MAX_SETS ? HD_BENCH_MAX_SETS : sets;
    a->count = hd__bench_adamw_tensors(c, NULL, NULL, 0);
    if (a->count == 0 || c->rank == 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT, "an AdamW case without layers or rank");
    a->rows = malloc(a->count * sizeof *a->rows);
    a->cols = malloc(a->count * sizeof *a->cols);
    if (a->rows == NULL || a->cols == NULL) {
        hd__bench_adamw_destroy(a);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "AdamW's list of %zu tensors", a->count);
    }
    hd__bench_adamw_tensors(c, a->rows, a->cols, a->count);
    hd_status st = create_lists(a);
    if (st == HD_OK)
        st = write_all(a);
    if (st != HD_OK)
        hd__bench_adamw_destroy(a);
    return st;
}

/* Whether a device backend of ctx runs AdamW: where a training step leaves the tensors. */
static bool device_runs_adamw(const hd_context *ctx)
{
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        if (hd__backend_runs_adamw(ctx, (hd_backend)b) &&
            hd__backend_place(ctx, (hd_backend)b) == HD_PLACE_DEVICE)
            return true;
    return false;
}

/* Whether backend b runs AdamW on the device (auto: where the tensors of a training step are). */
static bool on_device(const hd_context *ctx, hd_backend b)
{
    if (b == HD_BACKEND_AUTO)
        return device_runs_adamw(ctx);
    return hd__backend_usable(ctx, b) && hd__backend_place(ctx, b) == HD_PLACE_DEVICE;
}

hd_status hd__bench_adamw_place(hd_bench_adamw *a, hd_backend b)
{
    bool device = on_device(a->ctx, b);
    if (device == a->on_device)
        return HD_OK;
    hd_status st = HD_OK;
    if (!device)
        st = write_all(a);
    for (size_t s = 0; device && s < a->sets && st == HD_OK; s++)
        for (int l = 0; l < HD_BENCH_ADAMW_LISTS && st == HD_OK; l++)
            for (size_t k = 0; k < a->count && st == HD_OK; k++)
                st = hd_tensor_prefetch(a->lists[s][l][k]);
    if (st == HD_OK)
        a->on_device = device;
    return st;
}

hd_status hd__bench_adamw_run(hd_context *ctx, hd_bench_adamw *a, size_t set)
{
    hd_tensor **const *l = a->lists[set < a->sets ? set : 0];
    hd_adamw_options o = hd__case_adamw_options(++a->step);
    return hd_adamw(ctx, &o, a->count, l[0], (const hd_tensor *const *)l[1], l[2], l[3]);
}

/* Host copies of set 0's lists (those of `wanted`, the others NULL): per list one block of every
 * tensor, and its tensors' starts in at[l]. */
typedef struct adamw_copy {
    float *block[HD_BENCH_ADAMW_LISTS];
    const float **at[HD_BENCH_ADAMW_LISTS];
} adamw_copy;

static void copy_free(adamw_copy *c)
{
    for (int l = 0; l < HD_BENCH_ADAMW_LISTS; l++) {
        free(c->block[l]);
        free((void *)c->at[l]);
    }
}

static hd_status copy_read(const hd_bench_adamw *a, const bool wanted[], adamw_copy *c)
{
    memset(c, 0, sizeof *c);
    size_t total = 0;
    for (size_t k = 0; k < a->count; k++)
        total += elements(a, k);
    hd_status st = HD_OK;
    for (int l = 0; l < HD_BENCH_ADAMW_LISTS && st == HD_OK; l++) {
        if (!wanted[l])
            continue;
        c->block[l] = malloc((total > 0 ? total : 1) * sizeof *c->block[l]);
        c->at[l] = malloc(a->count * sizeof *c->at[l]);
        if (c->block[l] == NULL || c->at[l] == NULL)
            return hd__error(a->ctx, HD_ERR_OUT_OF_MEMORY, "AdamW's check of %zu floats", total);
        for (size_t k = 0, off = 0; k < a->count && st == HD_OK; off += elements(a, k), k++) {
            c->at[l][k] = c->block[l] + off;
            st = hd_tensor_read(a->lists[0][l][k], c->block[l] + off);
        }
    }
    return st;
}

static hd_ref_adamw_lists lists_of(const hd_bench_adamw *a, const adamw_copy *c, const size_t *n)
{
    return (hd_ref_adamw_lists){
        .count = a->count, .n = n, .p = c->at[0], .g = c->at[1], .m = c->at[2], .v = c->at[3]};
}

hd_status hd__bench_adamw_check(hd_bench_adamw *a, double *worst)
{
    static const bool all[HD_BENCH_ADAMW_LISTS] = {true, true, true, true};
    static const bool written[HD_BENCH_ADAMW_LISTS] = {true, false, true, true};
    adamw_copy before, after = {0};
    size_t *n = malloc(a->count * sizeof *n);
    hd_status st = n != NULL ? copy_read(a, all, &before)
                             : hd__error(a->ctx, HD_ERR_OUT_OF_MEMORY, "AdamW's check");
    if (st == HD_OK)
        st = hd__bench_adamw_run(a->ctx, a, 0);
    if (st == HD_OK)
        st = hd_sync(a->ctx);
    if (st == HD_OK)
        st = copy_read(a, written, &after);
    if (st == HD_OK) {
        for (size_t k = 0; k < a->count; k++)
            n[k] = elements(a, k);
        hd_adamw_options o = hd__case_adamw_options(a->step);
        hd_ref_adamw_params hp = {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.step};
        hd_ref_adamw_lists b = lists_of(a, &before, n), got = lists_of(a, &after, n);
        char why[200];
        *worst = hd__ref_check_adamw(&b, &hp, o.max_grad_norm, &got, why, sizeof why);
    }
    if (n != NULL)
        copy_free(&before);
    copy_free(&after);
    free(n);
    return st;
}

double hd__bench_adamw_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                  hd_backend b, const hd_bench_case *c)
{
    bool device = on_device(ctx, b);
    double gbps = device ? cal->copy_gbps : cal->cpu_gbps;
    double us = hd__bench_case_bytes(c) / (gbps > 0 ? gbps : 1.0) * 1e-3;
    if (device)
        us += cal->launch_us;
    return HD_ESTIMATE_MARGIN * us * 1e-6;
}
