/*
 * libFuzzer target for the tuning cache parser. Beyond "no crash, no sanitizer report", it
 * checks what the rest of the library relies on: every record the parser keeps is in the
 * parser's own ranges, and what the writer makes of a parsed file parses back to the same
 * key, calibration, params and records, field for field, with no bad line.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Dtools=false
 *   ninja -C build-fuzz autotune/fuzz/fuzz_cache_parser
 *   ./build-fuzz/autotune/fuzz/fuzz_cache_parser -max_total_time=60 NEW_DIR autotune/fuzz/corpus
 *
 * tests/run.sh runs it for 30 s (HD_FUZZ_SECONDS) in its "fuzz" stage where clang is installed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/tune_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_records(const hd_tune_file *f)
{
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        /* The parser's ranges: a margin down to -100 % is a preference of the tuner. */
        if (!(r->median_us > 0.0 && r->median_us <= 1e9) || !isfinite(r->margin_pct) ||
            r->margin_pct < -100.0 || r->margin_pct > 1e6 || r->backend <= HD_BACKEND_AUTO ||
            r->backend >= HD_BACKEND_COUNT || (unsigned)r->op >= HD_OP_COUNT)
            abort();
        for (int d = 0; d < hd__tune_dim_count(r->op); d++)
            if (r->shape.dim[d] > HD_TUNE_DIM_MAX)
                abort();
    }
    if (f->count > HD_TUNE_RECORD_MAX || f->param_count > HD_TUNE_PARAM_MAX)
        abort();
}

static bool same_record(const hd_tune_record *a, const hd_tune_record *b)
{
    return b != NULL && a->backend == b->backend && strcmp(a->variant, b->variant) == 0 &&
           a->median_us == b->median_us && a->runner_up == b->runner_up &&
           (a->runner_up == HD_BACKEND_AUTO || a->margin_pct == b->margin_pct);
}

/* What parse, write, parse must keep: everything. */
static bool same_file(const hd_tune_file *a, const hd_tune_file *b)
{
    if (memcmp(&a->key, &b->key, sizeof a->key) != 0 || memcmp(&a->cal, &b->cal, sizeof a->cal) ||
        a->count != b->count || a->param_count != b->param_count || b->bad_lines != 0)
        return false;
    for (size_t i = 0; i < a->param_count; i++)
        if (a->params[i].backend != b->params[i].backend ||
            strcmp(a->params[i].name, b->params[i].name) != 0 ||
            strcmp(a->params[i].value, b->params[i].value) != 0)
            return false;
    for (size_t i = 0; i < a->count; i++)
        if (!same_record(&a->records[i], hd__tune_find(b, a->records[i].op, &a->records[i].shape,
                                                       a->records[i].precision)))
            return false;
    return true;
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
            !same_file(&f, &again))
            abort();
        hd__tune_file_free(&again);
        free(text);
    }
    hd__tune_file_free(&f);
    return 0;
}
