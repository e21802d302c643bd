/*
 * libFuzzer target for the tuning cache parser. Beyond "no crash, no sanitizer report", it
 * checks what the rest of the library relies on: every record the parser keeps is in range,
 * and what the writer makes of a parsed file parses back to the same records with no bad line.
 *
 *   meson setup build-fuzz -Dfuzz=true -Dtests=false -Dtools=false (CC=clang)
 *   ./build-fuzz/autotune/fuzz/fuzz_cache_parser -max_total_time=60 autotune/fuzz/corpus
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_records(const hd_tune_file *f)
{
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        if (!(r->median_us > 0.0 && r->median_us <= 1e9) || !isfinite(r->margin_pct) ||
            r->margin_pct < 0.0 || r->backend <= HD_BACKEND_AUTO ||
            r->backend >= HD_BACKEND_COUNT || (unsigned)r->op >= HD_OP_COUNT)
            abort();
        for (int d = 0; d < hd__tune_dim_count(r->op); d++)
            if (r->shape.dim[d] > HD_TUNE_DIM_MAX)
                abort();
    }
    if (f->count > HD_TUNE_RECORD_MAX || f->param_count > HD_TUNE_PARAM_MAX)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[160];
    if (hd__tune_parse((const char *)data, size, &f, msg, sizeof msg) != HD_OK) {
        if (f.count != 0)
            abort();
        return 0;
    }
    check_records(&f);

    char *text = hd__tune_format(&f);
    if (text != NULL) {
        hd_tune_file again;
        hd__tune_file_init(&again);
        if (hd__tune_parse(text, strlen(text), &again, msg, sizeof msg) != HD_OK ||
            again.bad_lines != 0 || again.count != f.count ||
            again.param_count != f.param_count)
            abort();
        for (size_t i = 0; i < f.count; i++) {
            const hd_tune_record *r = hd__tune_find(&again, f.records[i].op, &f.records[i].shape);
            if (r == NULL || r->backend != f.records[i].backend ||
                strcmp(r->variant, f.records[i].variant) != 0)
                abort();
        }
        hd__tune_file_free(&again);
        free(text);
    }
    hd__tune_file_free(&f);
    return 0;
}
