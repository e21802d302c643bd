/*
 * libFuzzer target for the safetensors reader (the input is a whole file's bytes) and, through
 * it, the writer. Beyond "no crash, no sanitizer report", it checks what the trainer relies on:
 * a file the reader accepts has tensors that cover its data exactly, each as large as its
 * shape and type say, found by its name, and read back as the bytes the input holds; and what
 * the writer makes of an accepted file is accepted again with the same names, types, shapes,
 * bytes and metadata.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Dtools=false
 *   ninja -C build-fuzz examples/llama/fuzz_safetensors
 *   ./build-fuzz/examples/llama/fuzz_safetensors -dict=examples/llama/fuzz/safetensors.dict \
 *       -max_total_time=60 NEW_DIR examples/llama/fuzz/corpus
 *
 * tests/run.sh runs it for 30 s (HD_FUZZ_SECONDS) in its "fuzz" stage where clang is installed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t data_start(const uint8_t *data)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | data[i];
    return 8 + n;
}

/* Tensor i as the header says, its bytes as the input holds them. */
static void check_tensor(const hd_st_file *f, size_t i, const uint8_t *data, size_t size)
{
    const hd_st_tensor *t = hd_st_tensor_at(f, i), *found;
    size_t elements = 1;
    for (int d = 0; d < t->ndim; d++)
        elements *= t->shape[d];
    if (t->ndim < 0 || t->ndim > HD_ST_MAX_DIMS || elements != t->elements ||
        t->end - t->begin != (uint64_t)elements * hd_st_dtype_size(t->dtype) ||
        hd_st_find(f, t->name, &found, NULL, 0) != HD_OK || found != t)
        abort();
    size_t bytes = (size_t)(t->end - t->begin);
    unsigned char *raw = malloc(bytes > 0 ? bytes : 1);
    if (raw == NULL || hd_st_read_raw(f, t, raw, bytes, NULL, 0) != HD_OK ||
        memcmp(raw, data + data_start(data) + t->begin, bytes) != 0)
        abort();
    free(raw);
    if (hd_st_dtype_is_float(t->dtype)) {
        float *v = malloc(elements > 0 ? elements * sizeof *v : 1);
        if (v == NULL || hd_st_read_float(f, t, v, elements, NULL, 0) != HD_OK)
            abort();
        free(v);
    }
    (void)size;
}

/* The tensors, by offset, cover the data after the header exactly. */
static void check_cover(const hd_st_file *f, const uint8_t *data, size_t size)
{
    uint64_t at = 0;
    for (size_t i = 0; i < hd_st_count(f); i++) {
        const hd_st_tensor *t = hd_st_tensor_at(f, i);
        if (t->begin != at)
            abort();
        at = t->end;
        check_tensor(f, i, data, size);
    }
    if (data_start(data) + at != size || hd_st_tensor_at(f, hd_st_count(f)) != NULL)
        abort();
}

static void check_same(const hd_st_file *a, const hd_st_file *b, const uint8_t *data)
{
    if (hd_st_count(a) != hd_st_count(b) || hd_st_metadata_count(a) != hd_st_metadata_count(b))
        abort();
    for (size_t i = 0; i < hd_st_count(a); i++) {
        const hd_st_tensor *t = hd_st_tensor_at(a, i), *u;
        if (hd_st_find(b, t->name, &u, NULL, 0) != HD_OK || u->dtype != t->dtype ||
            u->ndim != t->ndim || memcmp(u->shape, t->shape, sizeof t->shape) != 0 ||
            u->end - u->begin != t->end - t->begin)
            abort();
        size_t bytes = (size_t)(u->end - u->begin);
        unsigned char *raw = malloc(bytes > 0 ? bytes : 1);
        if (raw == NULL || hd_st_read_raw(b, u, raw, bytes, NULL, 0) != HD_OK ||
            memcmp(raw, data + data_start(data) + t->begin, bytes) != 0)
            abort();
        free(raw);
    }
    for (size_t i = 0; i < hd_st_metadata_count(a); i++) {
        const hd_st_meta *m = hd_st_metadata_at(a, i);
        const char *v = hd_st_metadata(b, m->key);
        if (v == NULL || strcmp(v, m->value) != 0)
            abort();
    }
}

/* What the writer makes of f reads back the same. */
static void check_rewrite(const hd_st_file *f, const uint8_t *data)
{
    size_t n = hd_st_count(f), m = hd_st_metadata_count(f);
    hd_st_entry *e = calloc(n > 0 ? n : 1, sizeof *e);
    hd_st_meta *meta = calloc(m > 0 ? m : 1, sizeof *meta);
    if (e == NULL || meta == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        const hd_st_tensor *t = hd_st_tensor_at(f, i);
        e[i] = (hd_st_entry){.name = t->name,
                             .dtype = t->dtype,
                             .ndim = t->ndim,
                             .raw = data + data_start(data) + t->begin};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
    }
    for (size_t i = 0; i < m; i++)
        meta[i] = *hd_st_metadata_at(f, i);
    void *image;
    size_t size;
    hd_st_file *again;
    if (hd_st_serialize(e, n, meta, m, &image, &size, NULL, 0) != HD_OK ||
        hd_st_open_memory(image, size, &again, NULL, 0) != HD_OK)
        abort();
    check_same(f, again, data);
    hd_st_close(again);
    free(image);
    free(e);
    free(meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hd_st_file *f = (hd_st_file *)&f;
    char msg[256];
    if (hd_st_open_memory(data, size, &f, msg, sizeof msg) != HD_OK) {
        if (f != NULL || msg[0] == '\0')
            abort();
        return 0;
    }
    check_cover(f, data, size);
    check_rewrite(f, data);
    hd_st_close(f);
    return 0;
}
