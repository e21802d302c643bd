/* The tuning cache file: parser, writer, merge under concurrent writers, and how a context
 * treats matching, foreign and damaged files. */
#define _XOPEN_SOURCE 700 /* utimensat, symlink */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <locale.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "dispatch/tune_table.h"
#include "dispatch/context.h"
#include "core/op.h"
#include "tests/testlib.h"

#ifdef HD_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#ifndef HD_TEST_DATA
#error "HD_TEST_DATA must name tests/data"
#endif

static char tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    return hd_test_tmpdir_create("tune", tmpdir, sizeof tmpdir);
}

static int remove_tmpdir(void **state)
{
    (void)state;
    return hd_test_tmpdir_remove(tmpdir);
}

static void tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static hd_tune_record record(hd_op op, size_t d0, size_t d1, size_t d2, size_t d3, hd_backend b,
                             double us)
{
    hd_tune_record r = {.op = op,
                        .shape = {.dim = {d0, d1, d2, d3}},
                        .backend = b,
                        .median_us = us,
                        .runner_up = HD_BACKEND_AUTO};
    return r;
}

/* A file whose key is this context's, so that the context uses it. */
static void file_for(hd_context *ctx, hd_tune_file *f)
{
    hd__tune_file_init(f);
    hd__tune_context_key(ctx, &f->key);
}

static void test_cache_round_trip_keeps_every_field(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    snprintf(f.key.library, sizeof f.key.library, "0.1.0");
    snprintf(f.key.platform, sizeof f.key.platform, "Plat \"quoted\" \\ back");
    snprintf(f.key.device, sizeof f.key.device, "NVIDIA H100 80GB HBM3");
    snprintf(f.key.driver, sizeof f.key.driver, "560.35.03");
    snprintf(f.key.clblast, sizeof f.key.clblast, "1.5.3");
    f.cal = (hd_tune_calibration){.launch_us = 7.25,
                                  .copy_gbps = 2650,
                                  .host_gbps = 24.5,
                                  .gemm_gflops = 51000,
                                  .cpu_gflops = 90,
                                  .cpu_gbps = 18,
                                  .fused_gflops = 50500,
                                  .clblast_gflops = 45250};
    hd_tune_param p = {.backend = HD_BACKEND_CLBLAST, .name = "Xgemm"};
    snprintf(p.value, sizeof p.value, "KWG=32 MWG=128 NWG=128");
    assert_int_equal(hd__tune_put_param(&f, &p), HD_OK);
    hd_tune_record g = record(HD_OP_GEMM, 1, 4096, 4096, 0, HD_BACKEND_FUSED, 41.25);
    g.shape.trans_b = true;
    snprintf(g.variant, sizeof g.variant, "WPT=4 \"odd\" \\");
    g.runner_up = HD_BACKEND_CLBLAST;
    g.margin_pct = 12.5;
    assert_int_equal(hd__tune_put(&f, &g), HD_OK);
    hd_tune_record l = record(HD_OP_LORA, 7, 2048, 2048, 0, HD_BACKEND_CLBLAST_FUSED, 90.5);
    assert_int_equal(hd__tune_put(&f, &l), HD_OK);
    hd_tune_record s = record(HD_OP_RMS_NORM, 64, 1024, 0, 0, HD_BACKEND_CPU, 3.0);
    assert_int_equal(hd__tune_put(&f, &s), HD_OK);
    /* the tuner preferred the device over a host candidate 2.5 % faster */
    hd_tune_record small = record(HD_OP_GEMM, 64, 64, 64, 0, HD_BACKEND_CLBLAST, 26.5);
    small.runner_up = HD_BACKEND_CPU;
    small.margin_pct = -2.5;
    assert_int_equal(hd__tune_put(&f, &small), HD_OK);

    char *text = hd__tune_format(&f);
    assert_non_null(text);
    hd_tune_file back;
    hd__tune_file_init(&back);
    char msg[160];
    assert_int_equal(hd__tune_parse(text, strlen(text), &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.bad_lines, 0);
    assert_string_equal(back.key.platform, f.key.platform);
    assert_string_equal(back.key.device, f.key.device);
    assert_string_equal(back.key.driver, f.key.driver);
    assert_string_equal(back.key.clblast, "1.5.3");
    assert_true(fabs(back.cal.launch_us - 7.25) < 1e-9);
    assert_true(fabs(back.cal.gemm_gflops - 51000) < 1e-6);
    assert_true(fabs(back.cal.fused_gflops - 50500) < 1e-6);
    assert_true(fabs(back.cal.clblast_gflops - 45250) < 1e-6);
    assert_int_equal(back.param_count, 1);
    assert_string_equal(back.params[0].value, p.value);
    assert_int_equal(back.count, 4);
    const hd_tune_record *r = hd__tune_find(&back, HD_OP_GEMM, &g.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_int_equal(r->backend, HD_BACKEND_FUSED);
    assert_string_equal(r->variant, g.variant);
    assert_int_equal(r->runner_up, HD_BACKEND_CLBLAST);
    assert_true(fabs(r->median_us - 41.25) < 1e-4 && fabs(r->margin_pct - 12.5) < 1e-3);
    hd_shape nn = g.shape;
    nn.trans_b = false;
    assert_null(hd__tune_find(&back, HD_OP_GEMM, &nn, HD_PRECISION_FP32));
    r = hd__tune_find(&back, HD_OP_LORA, &l.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_int_equal(r->backend, HD_BACKEND_CLBLAST_FUSED);
    assert_int_equal(r->variant[0], '\0');
    assert_int_equal(r->runner_up, HD_BACKEND_AUTO);
    r = hd__tune_find(&back, HD_OP_GEMM, &small.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_int_equal(r->runner_up, HD_BACKEND_CPU);
    assert_true(fabs(r->margin_pct + 2.5) < 1e-3);

    /* Formatting again gives the same text: files diff well. */
    char *again = hd__tune_format(&back);
    assert_string_equal(again, text);
    free(again);
    free(text);
    hd__tune_file_free(&back);
    hd__tune_file_free(&f);
}

typedef struct corpus_case {
    const char *file;
    hd_status status;
    size_t records, bad_lines;
} corpus_case;

static const corpus_case corpus[] = {
    {"tune_missing_header.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_bad_version.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_truncated_header.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_empty.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_header_order.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_unquoted_platform.txt", HD_ERR_CACHE_INVALID, 0, 0},
    {"tune_truncated_record.txt", HD_OK, 2, 1},
    {"tune_binary.bin", HD_OK, 1, 1},
    {"tune_huge_numbers.txt", HD_OK, 1, 5},
    {"tune_negative_nan.txt", HD_OK, 1, 5},
    {"tune_bad_names.txt", HD_OK, 1, 6},
    {"tune_overlong_line.txt", HD_OK, 1, 1},
    {"tune_duplicates.txt", HD_OK, 3, 4},
    {"tune_absurd_dims.txt", HD_OK, 1, 7},
    {"tune_bad_quotes.txt", HD_OK, 1, 5},
    {"tune_field_counts.txt", HD_OK, 1, 5},
    {"tune_crlf.txt", HD_OK, 1, 0},
    {"tune_calibration_params.txt", HD_OK, 0, 7},
    {"tune_too_many_records.txt", HD_OK, HD_TUNE_RECORD_MAX, 4200 - HD_TUNE_RECORD_MAX},
};

static void test_cache_corpus_of_broken_files_is_rejected_line_by_line(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", HD_TEST_DATA, corpus[i].file);
        hd_tune_file f;
        hd__tune_file_init(&f);
        char msg[160];
        hd_status s = hd__tune_load(path, &f, msg, sizeof msg);
        if (s != corpus[i].status || f.count != corpus[i].records ||
            f.bad_lines != corpus[i].bad_lines)
            fail_msg("%s: status %s, %zu records, %zu bad lines (first %zu: %s; msg %s); "
                     "expected %s, %zu, %zu",
                     corpus[i].file, hd_status_name(s), f.count, f.bad_lines, f.first_bad_line,
                     f.first_problem, msg, hd_status_name(corpus[i].status), corpus[i].records,
                     corpus[i].bad_lines);
        if (s != HD_OK)
            assert_true(msg[0] != '\0');
        if (corpus[i].bad_lines > 0)
            assert_true(f.first_bad_line > 0 && f.first_problem[0] != '\0');
        /* Whatever was kept is sane. */
        for (size_t r = 0; r < f.count; r++) {
            assert_true(f.records[r].median_us > 0.0 && isfinite(f.records[r].median_us));
            assert_true(f.records[r].backend > HD_BACKEND_AUTO &&
                        f.records[r].backend < HD_BACKEND_COUNT);
            assert_true(f.records[r].shape.dim[0] >= 1 &&
                        f.records[r].shape.dim[0] <= HD_TUNE_DIM_MAX);
        }
        hd__tune_file_free(&f);
    }
}

static void test_cache_calibration_line_keeps_the_valid_one(void **state)
{
    (void)state;
    char path[512], msg[160];
    snprintf(path, sizeof path, "%s/tune_calibration_params.txt", HD_TEST_DATA);
    hd_tune_file f;
    hd__tune_file_init(&f);
    assert_int_equal(hd__tune_load(path, &f, msg, sizeof msg), HD_OK);
    assert_true(fabs(f.cal.launch_us - 7.5) < 1e-12 && fabs(f.cal.host_gbps - 12) < 1e-12);
    assert_true(f.cal.copy_gbps == 0.0);
    assert_int_equal(f.param_count, 1);
    assert_string_equal(f.params[0].value, "KWG=32");
    hd__tune_file_free(&f);
}

/* Random bytes after a valid header, and random edits of a valid file: never a crash, and
 * every record kept passes the checks. */
static void test_cache_parse_random_garbage_never_trusts_it(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(31);
    const char *valid = "hd-tune 1\nlibrary 0.1.0\nplatform \"p\"\ndevice \"d\"\ndriver \"v\"\n"
                        "clblast none\ncalibration launch_us=5\n"
                        "gemm 1 4096 4096 nn fused \"WPT=4\" 41.2 clblast 12.5\n"
                        "softmax 64 1024 fused - 7.1 cpu 80\n";
    size_t vlen = strlen(valid);
    char buf[2048];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len;
        if (iter % 2 == 0) {
            memcpy(buf, valid, vlen);
            len = vlen;
            int edits = 1 + (int)hd_test_uniform(&rng, 0, 6);
            for (int e = 0; e < edits; e++)
                buf[(size_t)hd_test_uniform(&rng, 0, (float)vlen - 1)] =
                    (char)(int)hd_test_uniform(&rng, 0, 255);
            len = (size_t)hd_test_uniform(&rng, 0, (float)vlen);
        } else {
            len = (size_t)hd_test_uniform(&rng, 0, sizeof buf);
            memcpy(buf, valid, 64);
            for (size_t i = 64; i < len; i++)
                buf[i] = (char)(int)hd_test_uniform(&rng, 0, 255);
        }
        hd_tune_file f;
        hd__tune_file_init(&f);
        char msg[160];
        hd_status s = hd__tune_parse(buf, len, &f, msg, sizeof msg);
        assert_true(s == HD_OK || s == HD_ERR_CACHE_INVALID);
        if (s != HD_OK)
            assert_int_equal(f.count, 0);
        for (size_t r = 0; r < f.count; r++)
            assert_true(f.records[r].median_us > 0.0 && f.records[r].median_us <= 1e9);
        hd__tune_file_free(&f);
    }
}

static void test_cache_save_merges_with_records_on_disk(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "merge/sub/tune.txt"); /* directories are created */
    hd_tune_file a, b, back;
    hd__tune_file_init(&a);
    snprintf(a.key.library, sizeof a.key.library, "0.1.0");
    snprintf(a.key.device, sizeof a.key.device, "dev");
    b = a;
    hd_tune_record r1 = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, 1.0);
    hd_tune_record r2 = record(HD_OP_SOFTMAX, 9, 9, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&a, &r1), HD_OK);
    assert_int_equal(hd__tune_put(&a, &r2), HD_OK);
    a.cal.launch_us = 5.0;
    assert_int_equal(hd__tune_save(path, &a, msg, sizeof msg), HD_OK);

    hd_tune_record r2b = record(HD_OP_SOFTMAX, 9, 9, 0, 0, HD_BACKEND_FUSED, 1.5);
    hd_tune_record r3 = record(HD_OP_LAYER_NORM, 9, 9, 0, 0, HD_BACKEND_CPU, 2.0);
    b.records = NULL;
    b.count = b.capacity = 0;
    assert_int_equal(hd__tune_put(&b, &r2b), HD_OK);
    assert_int_equal(hd__tune_put(&b, &r3), HD_OK);
    b.cal.host_gbps = 12.0;
    assert_int_equal(hd__tune_save(path, &b, msg, sizeof msg), HD_OK);

    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.count, 3);
    assert_int_equal(hd__tune_find(&back, HD_OP_SOFTMAX, &r2.shape, HD_PRECISION_FP32)->backend,
                     HD_BACKEND_FUSED);
    assert_non_null(hd__tune_find(&back, HD_OP_SOFTMAX, &r1.shape, HD_PRECISION_FP32));
    assert_non_null(hd__tune_find(&back, HD_OP_LAYER_NORM, &r3.shape, HD_PRECISION_FP32));
    assert_true(back.cal.launch_us == 5.0 && back.cal.host_gbps == 12.0);
    hd__tune_file_free(&back);

    /* A writer for another device replaces the file: those records would be ignored. */
    hd_tune_file c = b;
    snprintf(c.key.device, sizeof c.key.device, "other");
    assert_int_equal(hd__tune_save(path, &c, msg, sizeof msg), HD_OK);
    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.count, 2);
    assert_string_equal(back.key.device, "other");
    hd__tune_file_free(&back);
    hd__tune_file_free(&a);
    hd__tune_file_free(&b);
}

static void test_cache_save_reports_unwritable_path(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "file");
    write_text(path, "x");
    char below[600];
    snprintf(below, sizeof below, "%s/tune.txt", path); /* a directory that is a file */
    hd_tune_file f;
    hd__tune_file_init(&f);
    assert_int_equal(hd__tune_save(below, &f, msg, sizeof msg), HD_ERR_IO);
    assert_true(msg[0] != '\0');
}

/* Two processes each save many records, one at a time, into the same file: every record of
 * both survives and the file parses cleanly at the end. */
static void test_cache_concurrent_writers_keep_every_record(void **state)
{
    (void)state;
    enum { PER_WRITER = 40 };
    char path[512];
    tmp_path(path, sizeof path, "concurrent.txt");
    pid_t pids[2];
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0) {
            for (int i = 0; i < PER_WRITER; i++) {
                hd_tune_file f;
                hd__tune_file_init(&f);
                snprintf(f.key.library, sizeof f.key.library, "0.1.0");
                hd_tune_record r = record(w == 0 ? HD_OP_SOFTMAX : HD_OP_RMS_NORM, (size_t)i + 1,
                                          64, 0, 0, HD_BACKEND_CPU, 1.0 + i);
                char msg[256];
                if (hd__tune_put(&f, &r) != HD_OK || hd__tune_save(path, &f, msg, sizeof msg))
                    _exit(1);
                hd__tune_file_free(&f);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < 2; w++) {
        int status = 0;
        assert_int_equal(waitpid(pids[w], &status, 0), pids[w]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    hd_tune_file back;
    hd__tune_file_init(&back);
    char msg[256];
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.bad_lines, 0);
    assert_int_equal(back.count, 2 * PER_WRITER);
    for (size_t i = 0; i < PER_WRITER; i++) {
        hd_shape s = {.dim = {i + 1, 64}};
        assert_non_null(hd__tune_find(&back, HD_OP_SOFTMAX, &s, HD_PRECISION_FP32));
        assert_non_null(hd__tune_find(&back, HD_OP_RMS_NORM, &s, HD_PRECISION_FP32));
    }
    hd__tune_file_free(&back);
    /* No temporary file is left behind. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", tmpdir);
    assert_int_not_equal(system(cmd), 0);
}

/* A context reading path; its notes in hd_test_notes(). */
static hd_context *context_with_cache(const char *path)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = path;
    opt.log = hd_test_log;
    hd_test_notes_clear();
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    return ctx;
}

static void test_cache_context_uses_a_file_for_its_device(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "ctx-match.txt");
    hd_context *probe = context_with_cache("/nonexistent/none.txt");
    hd_tune_file f;
    file_for(probe, &f);
    hd_context_destroy(probe);
    hd_tune_record r = record(HD_OP_SOFTMAX, 5, 7, 0, 0, HD_BACKEND_CPU, 3.5);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);

    hd_context *ctx = context_with_cache(path);
    assert_string_equal(hd_context_last_error(ctx), "");
    assert_non_null(hd__tune_exact(ctx, HD_OP_SOFTMAX, &r.shape));
    char text[2048];
    const size_t dims[4] = {5, 7};
    assert_int_equal(hd_context_explain(ctx, HD_OP_SOFTMAX, dims, text, sizeof text), HD_OK);
    assert_non_null(strstr(text, "tuned record: softmax 5x7 -> cpu"));
    hd_context_destroy(ctx);
}

/* A record whose winner the tuner preferred though its runner-up measured faster (a negative
 * margin) keeps the winner where no input has to move for either. */
static void test_cache_preferred_winner_is_kept_against_a_faster_runner_up(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "ctx-preferred.txt");
    hd_context *probe = context_with_cache("/nonexistent/none.txt");
    bool fused = hd_context_has_backend(probe, HD_BACKEND_FUSED);
    hd_tune_file f;
    file_for(probe, &f);
    hd_context_destroy(probe);
    hd_tune_record r =
        record(HD_OP_SOFTMAX, 6, 10, 0, 0, fused ? HD_BACKEND_FUSED : HD_BACKEND_CPU, 100.0);
    r.runner_up = fused ? HD_BACKEND_CPU : HD_BACKEND_AUTO;
    r.margin_pct = fused ? -3.0 : 0.0;
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);
    hd_context *ctx = context_with_cache(path);
    char text[2048];
    const size_t dims[4] = {6, 10};
    assert_int_equal(hd_context_explain(ctx, HD_OP_SOFTMAX, dims, text, sizeof text), HD_OK);
    if (fused)
        assert_non_null(strstr(text, "chosen fused by rule 'tuned'"));
    else
        assert_non_null(strstr(text, "chosen cpu by rule 'tuned'"));
    hd_context_destroy(ctx);
}

static void test_cache_context_ignores_another_device_with_a_note(void **state)
{
    (void)state;
    char path[512];
    tmp_path(path, sizeof path, "ctx-other.txt");
    write_text(path, "hd-tune 1\nlibrary 0.1.0\nplatform \"Elsewhere\"\ndevice \"Some GPU\"\n"
                     "driver \"1.0\"\nclblast none\nsoftmax 5 7 cpu - 3.5 - -\n");
    hd_context *ctx = context_with_cache(path);
    assert_string_equal(hd_context_last_error(ctx), ""); /* a note is not an error */
    assert_non_null(strstr(hd_test_notes(), "tuning cache"));
    assert_non_null(strstr(hd_test_notes(), "written for another"));
    assert_null(strstr(hd_test_notes(), "invalid"));
    hd_shape s = {.dim = {5, 7}};
    assert_null(hd__tune_exact(ctx, HD_OP_SOFTMAX, &s));
    hd_context_destroy(ctx);

    /* Another library version: the same. */
    write_text(path, "hd-tune 1\nlibrary 0.0.9\nplatform \"none\"\ndevice \"none\"\n"
                     "driver \"none\"\nclblast none\nsoftmax 5 7 cpu - 3.5 - -\n");
    ctx = context_with_cache(path);
    assert_non_null(strstr(hd_test_notes(), "library version"));
    assert_null(hd__tune_exact(ctx, HD_OP_SOFTMAX, &s));
    hd_context_destroy(ctx);
}

/* Every broken file of the corpus: the context is created, says what is wrong, and runs. */
static void test_cache_context_survives_every_broken_file(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", HD_TEST_DATA, corpus[i].file);
        hd_context *ctx = context_with_cache(path);
        assert_string_equal(hd_context_last_error(ctx), "");
        if (corpus[i].status != HD_OK || corpus[i].bad_lines > 0)
            assert_non_null(strstr(hd_test_notes(), "tuning cache"));
        float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
        hd_tensor *tx = hd_test_tensor(ctx, 2, 3, x);
        hd_tensor *ty = hd_test_tensor(ctx, 2, 3, NULL);
        assert_int_equal(hd_softmax(ctx, tx, ty), HD_OK);
        assert_int_equal(hd_tensor_read(ty, y), HD_OK);
        assert_true(fabs(y[0] + y[1] + y[2] - 1.0) < 1e-5);
        hd_tensor_destroy(tx);
        hd_tensor_destroy(ty);
        hd_context_destroy(ctx);
    }
}

/* ---- parser and writer agree ---- */

static bool same_file(const hd_tune_file *a, const hd_tune_file *b, char *why, size_t size)
{
    if (strcmp(a->key.library, b->key.library) || strcmp(a->key.platform, b->key.platform) ||
        strcmp(a->key.device, b->key.device) || strcmp(a->key.driver, b->key.driver) ||
        strcmp(a->key.clblast, b->key.clblast)) {
        snprintf(why, size, "key differs (library '%s' / '%s')", a->key.library, b->key.library);
        return false;
    }
    if (memcmp(&a->cal, &b->cal, sizeof a->cal) != 0) {
        snprintf(why, size, "calibration differs");
        return false;
    }
    if (a->param_count != b->param_count || a->count != b->count || b->bad_lines != 0) {
        snprintf(why, size, "%zu/%zu params, %zu/%zu records, %zu bad lines (%s)", a->param_count,
                 b->param_count, a->count, b->count, b->bad_lines, b->first_problem);
        return false;
    }
    for (size_t i = 0; i < a->param_count; i++)
        if (a->params[i].backend != b->params[i].backend ||
            strcmp(a->params[i].name, b->params[i].name) ||
            strcmp(a->params[i].value, b->params[i].value)) {
            snprintf(why, size, "param %zu differs: '%s' / '%s'", i, a->params[i].value,
                     b->params[i].value);
            return false;
        }
    for (size_t i = 0; i < a->count; i++) {
        const hd_tune_record *r = &a->records[i];
        const hd_tune_record *s = hd__tune_find(b, r->op, &r->shape, r->precision);
        if (s == NULL || s->backend != r->backend || strcmp(s->variant, r->variant) != 0 ||
            s->median_us != r->median_us || s->runner_up != r->runner_up ||
            (r->runner_up != HD_BACKEND_AUTO && s->margin_pct != r->margin_pct)) {
            snprintf(why, size, "record %zu (%s, variant '%s', %.17g us, margin %.17g) differs", i,
                     hd_op_name(r->op), r->variant, r->median_us, r->margin_pct);
            return false;
        }
    }
    return true;
}

/* Parse, write, parse: the same file; and writing that again gives the same text. */
static void expect_round_trip(const hd_tune_file *f, const char *what)
{
    char *text = hd__tune_format(f);
    assert_non_null(text);
    hd_tune_file back;
    hd__tune_file_init(&back);
    char msg[160], why[512];
    hd_status s = hd__tune_parse(text, strlen(text), &back, msg, sizeof msg);
    if (s != HD_OK)
        fail_msg("%s: the written file is rejected: %s\n%s", what, msg, text);
    if (!same_file(f, &back, why, sizeof why))
        fail_msg("%s: %s\n%s", what, why, text);
    char *again = hd__tune_format(&back);
    assert_non_null(again);
    if (strcmp(again, text) != 0)
        fail_msg("%s: written twice, the texts differ", what);
    free(again);
    free(text);
    hd__tune_file_free(&back);
}

/* The bytes of the file at path, malloc'd and NUL-terminated; *len: how many. */
static char *read_bytes(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((n += fread(buf + n, 1, cap - 1 - n, fp)) == cap - 1) {
        buf = realloc(buf, cap *= 2);
        assert_non_null(buf);
    }
    buf[n] = '\0';
    fclose(fp);
    if (len != NULL)
        *len = n;
    return buf;
}

static char *read_text(const char *path)
{
    return read_bytes(path, NULL);
}

/* Lines of text that start with prefix, each checked to be no longer than the reader takes. */
static size_t lines_starting(const char *text, const char *prefix)
{
    size_t count = 0;
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, "\n");
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            assert_true(len <= HD_TUNE_LINE_MAX);
            count++;
        }
        p += len + (p[len] == '\n');
    }
    return count;
}

/* Saves f at path (the save's message in msg) and loads the file back into *back: both succeed
 * and the file holds no bad line. */
static void save_and_load(const char *path, const hd_tune_file *f, hd_tune_file *back, char *msg,
                          size_t size)
{
    if (hd__tune_save(path, f, msg, size) != HD_OK)
        fail_msg("%s: the save failed: %s", path, msg);
    char why[256];
    hd__tune_file_init(back);
    assert_int_equal(hd__tune_load(path, back, why, sizeof why), HD_OK);
    if (back->bad_lines != 0)
        fail_msg("%s, line %zu: %s", path, back->first_bad_line, back->first_problem);
}

/* A save into a copy of the file at path, which loaded as *f, loses none of its lines: its
 * records are there, and each line it could not read is a comment, which a load skips. */
static void expect_save_keeps_every_line(const char *path, const hd_tune_file *f)
{
    char copy[512], msg[512];
    tmp_path(copy, sizeof copy, "round-trip-copy.txt");
    size_t len;
    char *bytes = read_bytes(path, &len);
    hd_test_write_file(copy, bytes, len);
    free(bytes);
    hd_tune_file empty, back;
    hd__tune_file_init(&empty);
    empty.key = f->key;
    save_and_load(copy, &empty, &back, msg, sizeof msg);
    if (f->bad_lines > 0 && strstr(msg, "kept ") == NULL)
        fail_msg("%s: the save does not say it kept %zu line(s): '%s'", path, f->bad_lines, msg);
    char *text = read_text(copy);
    if (back.count != f->count || lines_starting(text, "# not read: ") != f->bad_lines)
        fail_msg("%s: saved, %zu records (of %zu), %zu lines kept (of %zu)", path, back.count,
                 f->count, lines_starting(text, "# not read: "), f->bad_lines);
    free(text);
    hd__tune_file_free(&back);
    unlink(copy);
}

static void round_trip_dir(const char *dir, int *files)
{
    static const char *const names[] = {
        "tune_absurd_dims.txt",
        "tune_bad_names.txt",
        "tune_bad_quotes.txt",
        "tune_bad_version.txt",
        "tune_calibration_params.txt",
        "tune_crlf.txt",
        "tune_duplicates.txt",
        "tune_empty.txt",
        "tune_field_counts.txt",
        "tune_header_order.txt",
        "tune_huge_numbers.txt",
        "tune_missing_header.txt",
        "tune_negative_nan.txt",
        "tune_overlong_line.txt",
        "tune_truncated_header.txt",
        "tune_truncated_record.txt",
        "tune_unquoted_platform.txt",
        "valid_batched.txt",
        "valid_pocl.txt",
        "tune_binary.bin",
        "tune_too_many_records.txt",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512], msg[256];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (access(path, R_OK) != 0)
            continue;
        hd_tune_file f;
        hd__tune_file_init(&f);
        if (hd__tune_load(path, &f, msg, sizeof msg) == HD_OK) {
            expect_round_trip(&f, path);
            expect_save_keeps_every_line(path, &f);
            (*files)++;
        }
        hd__tune_file_free(&f);
    }
}

static void test_cache_round_trip_of_every_parsable_corpus_file(void **state)
{
    (void)state;
    int files = 0;
    round_trip_dir(HD_FUZZ_CORPUS, &files);
    round_trip_dir(HD_TEST_DATA, &files);
    print_message("# %d parsable corpus files round-tripped\n", files);
    assert_true(files >= 10);
}

/* A string of 1..max-1 characters the format takes: printable ASCII and TAB, quotes and
 * backslashes included. plain: a bare word's characters only. */
static void random_string(hd_rng *rng, char *out, size_t max, bool plain)
{
    static const char plain_chars[] = "abcXYZ019.-_+:#";
    size_t len = 1 + (size_t)hd_test_uniform(rng, 0, (float)(max - 1) - 0.01f);
    if (len > max - 1)
        len = max - 1;
    for (size_t i = 0; i < len; i++) {
        float u = hd_test_uniform(rng, 0, 1);
        char c;
        if (plain)
            c = plain_chars[(size_t)(u * (sizeof plain_chars - 1.01f))];
        else if (u < 0.05f)
            c = '\t';
        else if (u < 0.1f)
            c = '"';
        else if (u < 0.15f)
            c = '\\';
        else if (u < 0.25f)
            c = ' ';
        else
            c = (char)(0x20 + (int)((u - 0.25f) / 0.75f * 94.99f));
        out[i] = c;
    }
    out[len] = '\0';
}

static double random_in(hd_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * (double)hd_test_uniform(rng, 0, 1);
}

static void random_file(hd_rng *rng, hd_tune_file *f)
{
    hd__tune_file_init(f);
    bool quoted_words = hd_test_uniform(rng, 0, 1) < 0.5f;
    random_string(rng, f->key.library, sizeof f->key.library, !quoted_words);
    random_string(rng, f->key.platform, 80, false);
    random_string(rng, f->key.device, 80, false);
    random_string(rng, f->key.driver, 40, false);
    random_string(rng, f->key.clblast, sizeof f->key.clblast, !quoted_words);
    double *cal = &f->cal.launch_us;
    for (int i = 0; i < 6; i++)
        if (hd_test_uniform(rng, 0, 1) < 0.6f)
            cal[i] = exp(random_in(rng, log(1e-9), log(1e9)));
    cal[0] = cal[0] > 1e9 ? 1e9 : cal[0];
    int params = (int)hd_test_uniform(rng, 0, 3.99f);
    for (int i = 0; i < params; i++) {
        hd_tune_param p = {.backend = (hd_backend)(1 + i % (HD_BACKEND_COUNT - 1))};
        random_string(rng, p.name, 12, true);
        if (p.name[0] == '#')
            p.name[0] = 'X';
        random_string(rng, p.value, 120, false);
        assert_int_equal(hd__tune_put_param(f, &p), HD_OK);
    }
    int records = (int)hd_test_uniform(rng, 0, 40);
    for (int i = 0; i < records; i++) {
        hd_tune_record r = {.op = (hd_op)(int)hd_test_uniform(rng, 0, HD_OP_COUNT - 0.01f)};
        for (int d = 0; d < hd__tune_dim_count(r.op); d++)
            r.shape.dim[d] = 1 + (size_t)exp(random_in(rng, 0, log((double)HD_TUNE_DIM_MAX - 1)));
        r.shape.trans_a = hd__tune_has_transposes(r.op) && hd_test_uniform(rng, 0, 1) < 0.5f;
        r.shape.trans_b = hd__tune_has_transposes(r.op) && hd_test_uniform(rng, 0, 1) < 0.5f;
        if (hd__op(r.op)->lora_layout && hd_test_uniform(rng, 0, 1) < 0.5f)
            r.shape.lora_layout = 1 + (unsigned)hd_test_uniform(rng, 0, 6.99f);
        r.precision = hd__tune_precision_of(
            r.op, (hd_precision)(int)hd_test_uniform(rng, 0, HD_PRECISION_COUNT - 0.01f));
        r.backend = (hd_backend)(1 + (int)hd_test_uniform(rng, 0, HD_BACKEND_COUNT - 1.01f));
        if (hd_test_uniform(rng, 0, 1) < 0.7f)
            random_string(rng, r.variant, 200, false);
        r.median_us = exp(random_in(rng, log(1e-3), log(1e9)));
        r.runner_up = (hd_backend)(1 + (int)hd_test_uniform(rng, 0, HD_BACKEND_COUNT - 1.01f));
        if (r.runner_up == r.backend || hd_test_uniform(rng, 0, 1) < 0.3f)
            r.runner_up = HD_BACKEND_AUTO;
        else
            r.margin_pct = hd_test_uniform(rng, 0, 1) < 0.3f ? random_in(rng, -100, 0)
                                                             : exp(random_in(rng, -5, log(1e6)));
        assert_int_equal(hd__tune_put(f, &r), HD_OK);
    }
}

/* An empty file under a made-up key that a write and a read keep as it is. */
static void made_up_file(hd_tune_file *f)
{
    hd__tune_file_init(f);
    snprintf(f->key.library, sizeof f->key.library, "0.1.0");
    snprintf(f->key.platform, sizeof f->key.platform, "P");
    snprintf(f->key.device, sizeof f->key.device, "D");
    snprintf(f->key.driver, sizeof f->key.driver, "1");
    snprintf(f->key.clblast, sizeof f->key.clblast, "none");
}

/* A save keeps the permission bits of the file it replaces; a new file gets 0666 less the
 * umask, as any file the program creates. */
static void test_cache_save_keeps_the_files_permission_bits(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "mode.txt");
    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record r = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, 1.0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    mode_t old = umask(027);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    static const mode_t modes[] = {0600, 0664, 0444};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        assert_int_equal(chmod(path, modes[i]), 0);
        assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, modes[i]);
    }
    hd__tune_file_free(&f);
}

/* The writer never writes a line its reader skips: a time or margin past the reader's limits
 * is clamped into them, a record no clamping makes readable is refused. */
static void test_cache_put_keeps_records_within_the_readers_limits(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "limits.txt");
    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record slow = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, 2e9);
    hd_tune_record fast = record(HD_OP_SOFTMAX, 9, 9, 0, 0, HD_BACKEND_FUSED, 1e-6);
    fast.runner_up = HD_BACKEND_CPU;
    fast.margin_pct = 5e7;
    hd_tune_record big = record(HD_OP_GEMM, 1, HD_TUNE_DIM_MAX, 1, 0, HD_BACKEND_CPU, 1.0);
    /* a call that queued nothing is timed at 0: clamped up, not refused */
    hd_tune_record none = record(HD_OP_SOFTMAX, 10, 10, 0, 0, HD_BACKEND_FUSED, 0.0);
    assert_int_equal(hd__tune_put(&f, &none), HD_OK);
    assert_int_equal(hd__tune_put(&f, &slow), HD_OK);
    assert_int_equal(hd__tune_put(&f, &fast), HD_OK);
    assert_int_equal(hd__tune_put(&f, &big), HD_OK);
    f.cal.launch_us = 1e12;
    f.cal.host_gbps = 1e-12;
    hd_tune_file back;
    save_and_load(path, &f, &back, msg, sizeof msg);
    assert_int_equal(back.count, 4);
    const hd_tune_record *r = hd__tune_find(&back, HD_OP_SOFTMAX, &slow.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_true(r->median_us == HD_TUNE_TIME_MAX_US);
    r = hd__tune_find(&back, HD_OP_SOFTMAX, &fast.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_true(r->median_us == HD_TUNE_TIME_MIN_US && r->margin_pct == HD_TUNE_MARGIN_MAX_PCT);
    assert_true(back.cal.launch_us == HD_TUNE_CAL_MAX && back.cal.host_gbps == HD_TUNE_CAL_MIN);
    hd__tune_file_free(&back);

    hd_tune_record bad[6];
    for (int i = 0; i < 6; i++)
        bad[i] = record(HD_OP_GEMM, 4, 4, 4, 0, HD_BACKEND_CPU, 1.0);
    bad[0].shape.dim[1] = HD_TUNE_DIM_MAX + 1;
    bad[1].shape.dim[0] = 0;
    bad[2].median_us = NAN;
    bad[3].runner_up = HD_BACKEND_CPU;                 /* the winner's */
    bad[4].shape.lora_layout = HD_LORA_LAYOUT_PYTORCH; /* GEMM has no layout */
    bad[5].op = HD_OP_SOFTMAX;
    bad[5].precision = HD_PRECISION_TF32; /* row ops are keyed by no precision */
    for (int i = 0; i < 6; i++)
        if (hd__tune_put(&f, &bad[i]) != HD_ERR_INVALID_ARGUMENT)
            fail_msg("record %d was taken", i);
    hd_tune_param p = {.backend = HD_BACKEND_CLBLAST, .name = "two words", .value = "x"};
    assert_int_equal(hd__tune_put_param(&f, &p), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(f.count, 4);
    hd__tune_file_free(&f);
}

/* Parses the written text with the lines of bad appended into *back: the file is accepted. */
static void parse_with_lines(const char *text, const char *bad, hd_tune_file *back)
{
    size_t len = strlen(text), extra = strlen(bad);
    char *all = malloc(len + extra + 1);
    assert_non_null(all);
    memcpy(all, text, len);
    memcpy(all + len, bad, extra + 1);
    hd__tune_file_init(back);
    char msg[160];
    assert_int_equal(hd__tune_parse(all, len + extra, back, msg, sizeof msg), HD_OK);
    free(all);
}

/* A comment is free text: many words, a backslash, an odd quote and UTF-8 ("µs"), in the
 * header and between records, indented or not, and on the last line. */
static const char commented[] =
    "# tuned on the lab machine, by hand, after the driver update of the week before, as the\n"
    "hd-tune 1\n"
    "# 7.1 µs per launch, \"measured\\ by hand\n"
    "library 0.1.0\nplatform \"P\"\ndevice \"D\"\ndriver \"1\"\n"
    "   # the CLBlast of C:\\Program Files\\ \"\n"
    "clblast none\n"
    "softmax 8 8 cpu - 7.25 - -\n"
    "\t# — a note between records é\n"
    "rms_norm 4 4 cpu - 2.5 - -\n"
    "# the end\n";

static void test_cache_comments_may_hold_any_text(void **state)
{
    (void)state;
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[160];
    assert_int_equal(hd__tune_parse(commented, strlen(commented), &f, msg, sizeof msg), HD_OK);
    assert_int_equal(f.bad_lines, 0);
    assert_int_equal(f.count, 2);
    assert_string_equal(f.key.device, "D");
    hd__tune_file_free(&f);
}

static const char header_pd1[] = "hd-tune 1\nlibrary 0.1.0\nplatform \"P\"\ndevice \"D\"\n"
                                 "driver \"1\"\nclblast none\n";

/* A comment or blank last line without its newline is no cut-off record, and a comment longer
 * than a record line may be is still a comment. */
static void test_cache_last_comment_without_newline_and_long_comments_are_not_bad(void **state)
{
    (void)state;
    static const char *const tails[] = {"# the end, without a newline", "   ", "\t# end\r"};
    char text[4096];
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        snprintf(text, sizeof text, "%ssoftmax 8 8 cpu - 7.25 - -\n%s", header_pd1, tails[i]);
        hd_tune_file f;
        hd__tune_file_init(&f);
        char msg[160];
        assert_int_equal(hd__tune_parse(text, strlen(text), &f, msg, sizeof msg), HD_OK);
        if (f.bad_lines != 0)
            fail_msg("tail '%s': %s", tails[i], f.first_problem);
        assert_int_equal(f.count, 1);
        hd__tune_file_free(&f);
    }
    size_t used = (size_t)snprintf(text, sizeof text, "%s# ", header_pd1);
    memset(text + used, 'x', 2000);
    used += 2000;
    snprintf(text + used, sizeof text - used, "\nsoftmax 8 8 cpu - 7.25 - -\n");
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[160];
    assert_int_equal(hd__tune_parse(text, strlen(text), &f, msg, sizeof msg), HD_OK);
    assert_int_equal(f.bad_lines, 0);
    assert_int_equal(f.count, 1);
    hd__tune_file_free(&f);
}

/* The message of a bad line names what is wrong in it, not only the kind of problem. */
static void test_cache_bad_line_message_names_the_offending_token(void **state)
{
    (void)state;
    static const struct {
        const char *line, *needle;
    } cases[] = {
        {"softmax 8 8 cpx - 7.25 - -", "unknown backend 'cpx'"},
        {"sofmax 8 8 cpu - 7.25 - -", "unknown keyword 'sofmax'"},
        {"softmax 8 8 cpu - 7.25 cpux 3", "unknown runner-up backend 'cpux'"},
        {"softmax 8 8 cpu - 7.25 cpu 3", "runner-up 'cpu' is the winner's backend"},
        {"softmax 8 8 cpu - 7.25 fused -", "'-' together or not at all"},
        {"softmax 8 8 cpu - 7.25 fused 1e7", "margin '1e7'"},
        {"softmax 8 -8 cpu - 7.25 - -", "dimension 2 (cols) '-8'"},
        {"gemm 8 8 8 nx cpu - 7.25 - -", "transposes 'nx'"},
        {"softmax 8 8 cpu - 2e9 - -", "median time '2e9'"},
        {"gemm.fp64 8 8 8 nn cpu - 7.25 - -", "unknown precision in 'gemm.fp64'"},
        {"calibration launch_us=5 copy=3", "calibration item 'copy=3'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512], msg[160];
        snprintf(text, sizeof text, "%s%s\n", header_pd1, cases[i].line);
        hd_tune_file f;
        hd__tune_file_init(&f);
        assert_int_equal(hd__tune_parse(text, strlen(text), &f, msg, sizeof msg), HD_OK);
        assert_int_equal(f.bad_lines, 1);
        assert_int_equal(f.first_bad_line, 7);
        if (strstr(f.first_problem, cases[i].needle) == NULL)
            fail_msg("'%s': the problem '%s' lacks '%s'", cases[i].line, f.first_problem,
                     cases[i].needle);
        hd__tune_file_free(&f);
    }
}

/* A save keeps each line of the file on disk that its reader could not read, as a comment that
 * is itself a line the reader takes (a NUL, a CR, a byte outside ASCII written as \xHH, an
 * overlong line cut with a marker), says how many and which was the first, and keeps those
 * comments at later saves. */
static void test_cache_save_keeps_lines_it_cannot_read_as_comments(void **state)
{
    (void)state;
    char path[512], msg[512];
    tmp_path(path, sizeof path, "unreadable-lines.txt");
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text,
                                  "%ssoftmax 8 8 cpu - 7.25 - -\n"
                                  "sofmax 9 9 cpu - 7.25 - -\n"
                                  "softmax 10 10 c\xffu - 7.25 - -\n",
                                  header_pd1);
    static const char nul_line[] = "rms_norm 4 4 cpu - 1\0.5 - -\n";
    memcpy(text + len, nul_line, sizeof nul_line - 1);
    len += sizeof nul_line - 1;
    len += (size_t)snprintf(text + len, sizeof text - len, "gemm 2 2 2 nn cpu \"");
    memset(text + len, 'A', 1500);
    len += 1500;
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "\" 3 - -\nlayer_norm 64 1\r0 cpu - 7.1 - -\n"
                            "layer_norm 3 3 cpu - 7.1 - -");
    hd_test_write_file(path, text, len);

    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record r = record(HD_OP_RMS_NORM, 4, 8, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    hd_tune_file back;
    save_and_load(path, &f, &back, msg, sizeof msg);
    assert_int_equal(back.count, 2);
    hd__tune_file_free(&back);
    if (strstr(msg, "kept 6 line(s)") == NULL ||
        strstr(msg, "line 8: unknown keyword 'sofmax'") == NULL ||
        strstr(msg, "unreadable-lines.txt") == NULL)
        fail_msg("message: %s", msg);
    char *now = read_text(path);
    assert_int_equal(lines_starting(now, "# not read: "), 6);
    static const char *const kept[] = {
        "\n# not read: sofmax 9 9 cpu - 7.25 - -\n",
        "\n# not read: softmax 10 10 c\\xffu - 7.25 - -\n",
        "\n# not read: rms_norm 4 4 cpu - 1\\x00.5 - -\n",
        "\n# not read: gemm 2 2 2 nn cpu \"AAAA",
        " [cut: the line held 1526 bytes]\n",
        "\n# not read: layer_norm 64 1\\x0d0 cpu - 7.1 - -\n",
        "\n# not read: layer_norm 3 3 cpu - 7.1 - -\n",
    };
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (strstr(now, kept[i]) == NULL)
            fail_msg("no '%s' in:\n%s", kept[i], now);
    free(now);

    /* A later save keeps the comments as they are, and has nothing new to say. */
    hd_tune_record r2 = record(HD_OP_RMS_NORM, 5, 8, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&f, &r2), HD_OK);
    char *before = read_text(path);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    assert_string_equal(msg, "");
    now = read_text(path);
    assert_int_equal(lines_starting(now, "# not read: "), 6);
    assert_non_null(strstr(now, strstr(before, "# not read: ")));
    free(before);
    free(now);
    hd__tune_file_free(&f);
}

/* A save into a file the reader cannot take leaves it as it is, its records with it; a file
 * with comments of any text is merged with, not replaced. */
static void test_cache_save_keeps_a_file_it_cannot_read(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "unreadable-header.txt");
    static const char broken[] = "hd-tune 1\nlibrary 0.1.0\nplatform P\ndevice \"D\"\n"
                                 "driver \"1\"\nclblast none\nsoftmax 8 8 cpu - 3 - -\n";
    write_text(path, broken);
    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record r = record(HD_OP_RMS_NORM, 4, 8, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_ERR_CACHE_INVALID);
    assert_non_null(strstr(msg, "not replaced"));
    assert_non_null(strstr(msg, "unreadable-header.txt"));
    char *now = read_text(path);
    assert_string_equal(now, broken);
    free(now);

    /* Comments of any text: the file loads, and a save keeps both of its records. */
    tmp_path(path, sizeof path, "commented.txt");
    write_text(path, commented);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd_tune_file back;
    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.count, 3);
    hd__tune_file_free(&back);

    /* A file there that cannot be opened is kept as well (root opens anything). */
    if (geteuid() != 0) {
        tmp_path(path, sizeof path, "no-read-permission.txt");
        write_text(path, broken);
        assert_int_equal(chmod(path, 0200), 0);
        assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_ERR_IO);
        assert_non_null(strstr(msg, "not replaced"));
        assert_int_equal(chmod(path, 0644), 0);
        now = read_text(path);
        assert_string_equal(now, broken);
        free(now);
    }
    hd__tune_file_free(&f);
}

static const char *mali_name(const struct hd_runtime *rt)
{
    (void)rt;
    return "Mali\xc2\xae G78";
}

static const char *mali_text(const struct hd_runtime *rt)
{
    (void)rt;
    return "ARM\xc2\xae 1.0";
}

/* A device name with bytes outside printable ASCII is written with '?' for them; the key a
 * context compares and the key a save merges under are spelled the same way, so the file
 * stays this device's: a second save keeps the first one's record and a context reads both. */
static void test_cache_key_with_a_non_ascii_byte_matches_its_own_file(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "non-ascii-key.txt");
    hd_tune_file f;
    made_up_file(&f);
    snprintf(f.key.device, sizeof f.key.device, "%s", mali_name(NULL));
    hd_tune_record first = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, 1.0);
    assert_int_equal(hd__tune_put(&f, &first), HD_OK);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    f.count = 0;
    hd_tune_record second = record(HD_OP_RMS_NORM, 8, 8, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&f, &second), HD_OK);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);
    hd_tune_file back;
    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_string_equal(back.key.device, "Mali?? G78");
    assert_int_equal(back.count, 2);
    hd__tune_file_free(&back);

    /* A context on such a device (its names made up through the device hooks) takes the
     * file that the tuner writes under its key. */
    hd_context *ctx = context_with_cache("/nonexistent/none.txt");
    const hd_device_ops *real = ctx->dev;
    hd_device_ops made_up = {.name = mali_name, .platform = mali_text, .driver = mali_text};
    ctx->dev = &made_up;
    hd_tune_file keyed;
    file_for(ctx, &keyed);
    assert_int_equal(hd__tune_put(&keyed, &first), HD_OK);
    tmp_path(path, sizeof path, "non-ascii-context.txt");
    assert_int_equal(hd__tune_save(path, &keyed, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&keyed);
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.tune_cache = path;
    hd_test_notes_clear();
    hd__tune_close(ctx);
    assert_int_equal(hd__tune_open(ctx, &opt), HD_OK);
    ctx->dev = real;
    assert_null(strstr(hd_test_notes(), "written for another"));
    assert_non_null(hd__tune_exact(ctx, HD_OP_SOFTMAX, &first.shape));
    hd_context_destroy(ctx);
}

/* Sets LC_NUMERIC to an installed locale whose decimal point is a comma; false where none is. */
static bool set_comma_decimal_locale(void)
{
    static const char *const names[] = {"de_DE.UTF-8", "de_DE.utf8", "de_DE",       "fr_FR.UTF-8",
                                        "fr_FR.utf8",  "fr_FR",      "nl_NL.UTF-8", "ru_RU.UTF-8"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (setlocale(LC_NUMERIC, names[i]) != NULL &&
            strcmp(localeconv()->decimal_point, ",") == 0)
            return true;
    setlocale(LC_NUMERIC, "C");
    return false;
}

/* A program may set a comma-decimal LC_NUMERIC (setlocale is process-wide): the cache's
 * numbers still read "7.25" as seven and a quarter and are written with a point, and a save
 * and a load keep them. */
static void test_cache_numbers_ignore_the_program_locale(void **state)
{
    (void)state;
    if (!set_comma_decimal_locale()) {
        print_message("# no comma-decimal locale installed (de_DE, fr_FR, nl_NL or ru_RU; see "
                      "locale -a): the locale test is skipped\n");
        skip();
    }
    static const char text[] = "hd-tune 1\nlibrary 0.1.0\nplatform \"P\"\ndevice \"D\"\n"
                               "driver \"1\"\nclblast none\ncalibration launch_us=7.5\n"
                               "softmax 8 8 cpu - 7.25 fused 12.5\n";
    hd_tune_file f;
    hd__tune_file_init(&f);
    char msg[256], path[512];
    assert_int_equal(hd__tune_parse(text, strlen(text), &f, msg, sizeof msg), HD_OK);
    assert_int_equal(f.bad_lines, 0);
    assert_int_equal(f.count, 1);
    assert_true(f.records[0].median_us == 7.25 && f.records[0].margin_pct == 12.5);
    assert_true(f.cal.launch_us == 7.5);

    hd_tune_record r = record(HD_OP_RMS_NORM, 4, 4, 0, 0, HD_BACKEND_CPU, 41.25);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    char *written = hd__tune_format(&f);
    assert_non_null(written);
    assert_non_null(strstr(written, " 41.25 - -\n"));
    assert_null(strstr(written, "41,25"));
    free(written);
    tmp_path(path, sizeof path, "comma-locale.txt");
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    hd_tune_file back;
    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(path, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.bad_lines, 0);
    assert_int_equal(back.count, 2);
    assert_true(hd__tune_find(&back, HD_OP_RMS_NORM, &r.shape, HD_PRECISION_FP32)->median_us ==
                41.25);
    assert_true(back.cal.launch_us == 7.5);
    setlocale(LC_NUMERIC, "C");
    hd__tune_file_free(&back);
    hd__tune_file_free(&f);
}

/* Records are keyed by the GEMM arithmetic they were tuned in: "gemm.fp32x3" beside "gemm" for
 * the same shape, both kept through a write and a read; a context finds only its own mode's,
 * and row ops carry none ("softmax.tf32" is a bad line). */
static void test_cache_records_are_keyed_by_precision(void **state)
{
    (void)state;
    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record fp32 = record(HD_OP_GEMM, 64, 64, 64, 0, HD_BACKEND_FUSED, 10.0);
    snprintf(fp32.variant, sizeof fp32.variant, "BM=64 BN=64 RM=4 RN=4");
    hd_tune_record x3 = fp32;
    x3.precision = HD_PRECISION_FP32X3;
    snprintf(x3.variant, sizeof x3.variant, "BM=64 BN=64 BK=16 WM=32 WN=32");
    hd_tune_record tf32 = record(HD_OP_LORA, 8, 64, 64, 4, HD_BACKEND_FUSED, 5.0);
    tf32.precision = HD_PRECISION_TF32;
    assert_int_equal(hd__tune_put(&f, &fp32), HD_OK);
    assert_int_equal(hd__tune_put(&f, &x3), HD_OK);
    assert_int_equal(hd__tune_put(&f, &tf32), HD_OK);
    assert_int_equal(f.count, 3);
    char *text = hd__tune_format(&f);
    assert_non_null(text);
    assert_non_null(strstr(text, "\ngemm.fp32x3 64 64 64 nn fused"));
    assert_non_null(strstr(text, "\nlora.tf32 8 64 64 4 fused"));
    /* row ops carry no precision, and an unknown one is a bad line */
    hd_tune_file back;
    parse_with_lines(text, "softmax.tf32 4 64 fused - 3 - -\ngemm.fp64 64 64 64 nn cpu - 3 - -\n",
                     &back);
    assert_int_equal(back.count, 3);
    assert_int_equal(back.bad_lines, 2);
    const hd_tune_record *r = hd__tune_find(&back, HD_OP_GEMM, &fp32.shape, HD_PRECISION_FP32);
    assert_non_null(r);
    assert_string_equal(r->variant, fp32.variant);
    r = hd__tune_find(&back, HD_OP_GEMM, &fp32.shape, HD_PRECISION_FP32X3);
    assert_non_null(r);
    assert_string_equal(r->variant, x3.variant);
    assert_null(hd__tune_find(&back, HD_OP_GEMM, &fp32.shape, HD_PRECISION_TF32));
    assert_null(hd__tune_find(&back, HD_OP_LORA, &tf32.shape, HD_PRECISION_FP32));
    assert_non_null(hd__tune_find(&back, HD_OP_LORA, &tf32.shape, HD_PRECISION_TF32));
    free(text);
    hd__tune_file_free(&f);
    hd__tune_file_free(&back);
}

/* LoRA's records are keyed by the layout: the default layout's and PyTorch's (and any other
 * flags) for the same dimensions are two records, written "pt" and "layoutN" and read back;
 * the nearest record of a layout is of that layout, else of the default one. */
static void test_cache_records_are_keyed_by_lora_layout(void **state)
{
    (void)state;
    hd_tune_file f;
    made_up_file(&f);
    hd_tune_record plain = record(HD_OP_LORA, 4096, 4096, 4096, 16, HD_BACKEND_CLBLAST_FUSED, 3307);
    hd_tune_record pt = record(HD_OP_LORA, 4096, 4096, 4096, 16, HD_BACKEND_FUSED, 3306);
    pt.shape.lora_layout = HD_LORA_LAYOUT_PYTORCH;
    hd_tune_record w_only = record(HD_OP_LORA_BACKWARD, 8, 64, 32, 4, HD_BACKEND_CPU, 12);
    w_only.shape.lora_layout = HD_LORA_TRANS_W;
    assert_int_equal(hd__tune_put(&f, &plain), HD_OK);
    assert_int_equal(hd__tune_put(&f, &pt), HD_OK);
    assert_int_equal(hd__tune_put(&f, &w_only), HD_OK);
    assert_int_equal(f.count, 3);
    char *text = hd__tune_format(&f);
    assert_non_null(text);
    assert_non_null(strstr(text, "\nlora 4096 4096 4096 16 clblast+fused"));
    assert_non_null(strstr(text, "\nlora 4096 4096 4096 16 pt fused"));
    assert_non_null(strstr(text, "\nlora_backward 8 64 32 4 layout1 cpu"));
    expect_round_trip(&f, "records of three layouts");
    /* a layout token where the op has none, or an unknown one, is a bad line */
    static const char bad[] = "gemm 8 8 8 nn pt cpu - 3 - -\nlora 8 8 8 2 layout9 cpu - 3 - -\n"
                              "lora 8 8 8 2 tp cpu - 3 - -\nsoftmax 8 8 pt cpu - 3 - -\n";
    hd_tune_file back;
    parse_with_lines(text, bad, &back);
    assert_int_equal(back.count, 3);
    assert_int_equal(back.bad_lines, 4);
    hd__tune_file_free(&back);
    /* the context's lookups: its own layout first, the default layout's as the fallback */
    char path[512], msg[256];
    tmp_path(path, sizeof path, "ctx-layout.txt");
    hd_context *probe = context_with_cache("/nonexistent/none.txt");
    hd_tune_file keyed;
    file_for(probe, &keyed);
    hd_context_destroy(probe);
    assert_int_equal(hd__tune_put(&keyed, &plain), HD_OK);
    assert_int_equal(hd__tune_save(path, &keyed, msg, sizeof msg), HD_OK);
    hd_context *ctx = context_with_cache(path);
    hd_shape near_pt = pt.shape;
    near_pt.dim[0] = 4000;
    double distance = -1.0;
    const hd_tune_record *r = hd__tune_nearest(ctx, HD_OP_LORA, &near_pt, &distance);
    assert_non_null(r); /* only the default layout's: taken */
    assert_int_equal(r->shape.lora_layout, 0);
    assert_null(hd__tune_exact(ctx, HD_OP_LORA, &pt.shape));
    hd_context_destroy(ctx);
    assert_int_equal(hd__tune_put(&keyed, &pt), HD_OK);
    assert_int_equal(hd__tune_save(path, &keyed, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&keyed);
    ctx = context_with_cache(path);
    r = hd__tune_nearest(ctx, HD_OP_LORA, &near_pt, &distance);
    assert_non_null(r);
    assert_int_equal(r->shape.lora_layout, HD_LORA_LAYOUT_PYTORCH);
    r = hd__tune_exact(ctx, HD_OP_LORA, &pt.shape);
    assert_non_null(r);
    assert_int_equal(r->backend, HD_BACKEND_FUSED);
    r = hd__tune_exact(ctx, HD_OP_LORA, &plain.shape);
    assert_non_null(r);
    assert_int_equal(r->backend, HD_BACKEND_CLBLAST_FUSED);
    hd_context_destroy(ctx);
    free(text);
    hd__tune_file_free(&f);
}

static void test_cache_round_trip_of_random_files_keeps_every_field(void **state)
{
    (void)state;
    hd_rng rng = hd_test_rng(77);
    for (int i = 0; i < 300; i++) {
        hd_tune_file f;
        random_file(&rng, &f);
        char what[64];
        snprintf(what, sizeof what, "random file %d", i);
        expect_round_trip(&f, what);
        hd__tune_file_free(&f);
    }
}

/* A tiny valid file to save: one record under a made-up key. */
static void small_file(hd_tune_file *f, double us)
{
    hd__tune_file_init(f);
    snprintf(f->key.library, sizeof f->key.library, "0.1.0");
    hd_tune_record r = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, us);
    assert_int_equal(hd__tune_put(f, &r), HD_OK);
}

/* A FIFO with no writer blocked fopen() forever; the reader must refuse it at once. The alarm
 * turns a hang into a failed run. */
static void test_cache_load_refuses_a_fifo_without_blocking(void **state)
{
    (void)state;
    char path[512], msg[256];
    tmp_path(path, sizeof path, "fifo.txt");
    assert_int_equal(mkfifo(path, 0644), 0);
    alarm(20);
    hd_tune_file f;
    hd__tune_file_init(&f);
    assert_int_equal(hd__tune_load(path, &f, msg, sizeof msg), HD_ERR_IO);
    assert_non_null(strstr(msg, "not a regular file"));
    hd_context *ctx = context_with_cache(path);
    assert_non_null(strstr(hd_test_notes(), "not a regular file"));
    hd_context_destroy(ctx);
    /* A directory is refused the same way. */
    assert_int_equal(hd__tune_load(tmpdir, &f, msg, sizeof msg), HD_ERR_IO);
    alarm(0);
}

/* Renaming over a FIFO (or, as root, a device such as /dev/zero) would replace it. */
static void test_cache_save_refuses_a_target_that_is_not_a_regular_file(void **state)
{
    (void)state;
    char path[512], link[512], msg[256];
    tmp_path(path, sizeof path, "fifo-target.txt");
    assert_int_equal(mkfifo(path, 0644), 0);
    alarm(20);
    hd_tune_file f;
    small_file(&f, 1.0);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_ERR_IO);
    assert_non_null(strstr(msg, "not a regular file"));
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* Through a symbolic link to it: refused as well. */
    tmp_path(link, sizeof link, "link-to-fifo.txt");
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(hd__tune_save(link, &f, msg, sizeof msg), HD_ERR_IO);
    assert_true(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode));
    /* A character device, where one can be named: /dev/null. */
    assert_int_equal(hd__tune_save("/dev/null", &f, msg, sizeof msg), HD_ERR_IO);
    assert_true(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    alarm(0);
    hd__tune_file_free(&f);
}

/* A cache kept elsewhere behind a link is updated where it lives; the link stays a link. */
static void test_cache_save_through_a_symlink_updates_its_target(void **state)
{
    (void)state;
    char real[512], link[512], dangling[512], msg[256];
    tmp_path(real, sizeof real, "real-tune.txt");
    tmp_path(link, sizeof link, "linked-tune.txt");
    hd_tune_file f, back;
    small_file(&f, 1.0);
    assert_int_equal(hd__tune_save(real, &f, msg, sizeof msg), HD_OK);
    assert_int_equal(symlink("real-tune.txt", link), 0); /* relative, as users write them */
    hd_tune_record r = record(HD_OP_RMS_NORM, 4, 4, 0, 0, HD_BACKEND_CPU, 2.0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    assert_int_equal(hd__tune_save(link, &f, msg, sizeof msg), HD_OK);
    struct stat st;
    assert_true(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    hd__tune_file_init(&back);
    assert_int_equal(hd__tune_load(real, &back, msg, sizeof msg), HD_OK);
    assert_int_equal(back.count, 2);
    hd__tune_file_free(&back);
    /* A dangling link is refused and left as it is. */
    tmp_path(dangling, sizeof dangling, "dangling-tune.txt");
    assert_int_equal(symlink("no-such-dir/tune.txt", dangling), 0);
    assert_int_equal(hd__tune_save(dangling, &f, msg, sizeof msg), HD_ERR_IO);
    assert_true(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
    hd__tune_file_free(&f);
}

/* Killed writers leave "<path>.tmp.XXXXXX" behind; the next save removes those older than a
 * day and keeps younger ones, which may belong to a writer still running. */
static void test_cache_save_removes_stale_temporary_files(void **state)
{
    (void)state;
    char path[512], old_tmp[600], young_tmp[600], other[600], msg[256];
    tmp_path(path, sizeof path, "stale/tune.txt");
    hd_tune_file f;
    small_file(&f, 1.0);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp.abc123", path);
    snprintf(young_tmp, sizeof young_tmp, "%s.tmp.def456", path);
    snprintf(other, sizeof other, "%s/stale/other.txt.tmp.abc123", tmpdir);
    write_text(old_tmp, "partial");
    write_text(young_tmp, "partial");
    write_text(other, "not ours");
    struct timespec two_days[2] = {{.tv_sec = time(NULL) - 2 * 86400},
                                   {.tv_sec = time(NULL) - 2 * 86400}};
    assert_int_equal(utimensat(AT_FDCWD, old_tmp, two_days, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, other, two_days, 0), 0);
    assert_int_equal(hd__tune_save(path, &f, msg, sizeof msg), HD_OK);
    assert_int_equal(access(old_tmp, F_OK), -1);
    assert_int_equal(access(young_tmp, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    hd__tune_file_free(&f);
}

/* Notes are not errors: a damaged cache is a note for the log callback, and with $HD_LOG=1 a
 * line on stderr; hd_context_last_error() stays "". Without either, nothing is printed. */
static void test_cache_notes_go_to_the_log_and_to_stderr_with_hd_log(void **state)
{
    (void)state;
    const char *path = HD_TEST_DATA "/tune_bad_version.txt";
    hd_context *ctx = context_with_cache(path);
    assert_string_equal(hd_context_last_error(ctx), "");
    assert_non_null(strstr(hd_test_notes(), "tune_bad_version.txt"));
    hd_context_destroy(ctx);

    char out[512];
    tmp_path(out, sizeof out, "stderr.txt");
    for (int with_env = 0; with_env < 2; with_env++) {
        fflush(stderr);
        int saved = dup(2);
        FILE *f = fopen(out, "w");
        assert_non_null(f);
        dup2(fileno(f), 2);
        if (with_env)
            setenv("HD_LOG", "1", 1);
        hd_context_options opt;
        hd_context_options_init(&opt);
        opt.tune_cache = path;
        ctx = NULL;
        hd_status s = hd_context_create(&ctx, &opt);
        unsetenv("HD_LOG");
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        fclose(f);
        assert_int_equal(s, HD_OK);
        assert_string_equal(hd_context_last_error(ctx), "");
        hd_context_destroy(ctx);
        char text[4096] = "";
        f = fopen(out, "r");
        assert_non_null(f);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        if (with_env)
            assert_non_null(strstr(text, "hd-dispatch: note: tuning cache"));
        else
            assert_null(strstr(text, "note:"));
    }
}

static void test_cache_path_follows_option_env_and_default(void **state)
{
    (void)state;
    char buf[1024];
    hd_context_options opt;
    hd_context_options_init(&opt);
    setenv("HD_TUNE_CACHE", "/from/env.txt", 1);
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_FOUND);
    assert_string_equal(buf, "/from/env.txt");
    opt.tune_cache = "/from/option.txt";
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_FOUND);
    assert_string_equal(buf, "/from/option.txt");
    opt.tune_cache = NULL;
    unsetenv("HD_TUNE_CACHE");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_FOUND);
    assert_string_equal(buf, "/xdg/hd-dispatch/tune.txt");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/someone", 1);
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_FOUND);
    assert_string_equal(buf, "/home/someone/.cache/hd-dispatch/tune.txt");

    /* no_tune_cache: not even the path is looked at. */
    opt.no_tune_cache = true;
    opt.tune_cache = HD_TEST_DATA "/tune_empty.txt";
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_null(ctx->tune);
    assert_null(strstr(hd_context_last_error(ctx), "tuning cache"));
    hd_context_destroy(ctx);
}

/* An empty tune_cache is no path, never a fallback to $HD_TUNE_CACHE or the default (whose
 * file the tuner would then rewrite); a path that does not fit is said to be too long. A
 * context reads no cache in either case and says why in a note. */
static void test_cache_path_empty_or_too_long_is_refused_with_a_note(void **state)
{
    (void)state;
    char buf[1024], env_file[512];
    char saved_env[1024] = "", saved_home[1024] = "";
    if (getenv("HD_TUNE_CACHE") != NULL)
        snprintf(saved_env, sizeof saved_env, "%s", getenv("HD_TUNE_CACHE"));
    if (getenv("HOME") != NULL)
        snprintf(saved_home, sizeof saved_home, "%s", getenv("HOME"));
    char *long_path = malloc(1501);
    assert_non_null(long_path);
    memset(long_path, 'x', 1500);
    long_path[0] = '/';
    long_path[1500] = '\0';

    hd_context_options opt;
    hd_context_options_init(&opt);
    tmp_path(env_file, sizeof env_file, "from-env.txt");
    setenv("HD_TUNE_CACHE", env_file, 1);
    opt.tune_cache = "";
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_EMPTY);
    assert_string_equal(buf, "");
    opt.tune_cache = long_path;
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_TOO_LONG);
    assert_string_equal(buf, "");
    opt.tune_cache = NULL;
    setenv("HD_TUNE_CACHE", long_path, 1);
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_TOO_LONG);
    setenv("HD_TUNE_CACHE", "", 1); /* an empty variable is unset */
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", long_path, 1);
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_TOO_LONG);
    unsetenv("HOME");
    assert_int_equal(hd__tune_resolve_path(&opt, buf, sizeof buf), HD_TUNE_PATH_NONE);

    /* The context: a valid cache at $HD_TUNE_CACHE is not read for tune_cache "". */
    setenv("HD_TUNE_CACHE", env_file, 1);
    hd_context *ctx = context_with_cache("/nonexistent/none.txt");
    hd_tune_file f;
    file_for(ctx, &f);
    hd_context_destroy(ctx);
    hd_tune_record r = record(HD_OP_SOFTMAX, 8, 8, 0, 0, HD_BACKEND_CPU, 1.0);
    assert_int_equal(hd__tune_put(&f, &r), HD_OK);
    char msg[256];
    assert_int_equal(hd__tune_save(env_file, &f, msg, sizeof msg), HD_OK);
    hd__tune_file_free(&f);
    ctx = context_with_cache("");
    assert_string_equal(hd_context_last_error(ctx), "");
    assert_null(ctx->tune);
    assert_string_equal(ctx->tune_cache_path, "");
    assert_non_null(strstr(hd_test_notes(), "tune_cache option is \"\""));
    hd_context_destroy(ctx);
    ctx = context_with_cache(long_path);
    assert_null(ctx->tune);
    assert_non_null(strstr(hd_test_notes(), "tuning cache not used: its path is longer than"));
    hd_context_destroy(ctx);

    free(long_path);
    if (saved_env[0] != '\0')
        setenv("HD_TUNE_CACHE", saved_env, 1);
    else
        unsetenv("HD_TUNE_CACHE");
    if (saved_home[0] != '\0')
        setenv("HOME", saved_home, 1);
}

/* The key names the CLBlast this build runs, so that a cache tuned with one CLBlast is not
 * taken for another's; "none" only in a build without CLBlast. */
static void test_cache_key_names_the_clblast_built_in(void **state)
{
    (void)state;
    hd_context *ctx = context_with_cache("/nonexistent/none.txt");
    hd_tune_key key;
    hd__tune_context_key(ctx, &key);
    hd_context_destroy(ctx);
#ifdef HD_HAVE_CLBLAST
    char version[32];
    snprintf(version, sizeof version, "%d.%d.%d", CLBLAST_VERSION_MAJOR, CLBLAST_VERSION_MINOR,
             CLBLAST_VERSION_PATCH);
    assert_string_equal(key.clblast, version);
#else
    assert_string_equal(key.clblast, "none");
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_round_trip_keeps_every_field),
        cmocka_unit_test(test_cache_corpus_of_broken_files_is_rejected_line_by_line),
        cmocka_unit_test(test_cache_calibration_line_keeps_the_valid_one),
        cmocka_unit_test(test_cache_parse_random_garbage_never_trusts_it),
        cmocka_unit_test(test_cache_save_merges_with_records_on_disk),
        cmocka_unit_test(test_cache_save_reports_unwritable_path),
        cmocka_unit_test(test_cache_put_keeps_records_within_the_readers_limits),
        cmocka_unit_test(test_cache_save_keeps_the_files_permission_bits),
        cmocka_unit_test(test_cache_concurrent_writers_keep_every_record),
        cmocka_unit_test(test_cache_comments_may_hold_any_text),
        cmocka_unit_test(test_cache_last_comment_without_newline_and_long_comments_are_not_bad),
        cmocka_unit_test(test_cache_bad_line_message_names_the_offending_token),
        cmocka_unit_test(test_cache_save_keeps_a_file_it_cannot_read),
        cmocka_unit_test(test_cache_save_keeps_lines_it_cannot_read_as_comments),
        cmocka_unit_test(test_cache_key_with_a_non_ascii_byte_matches_its_own_file),
        cmocka_unit_test(test_cache_numbers_ignore_the_program_locale),
        cmocka_unit_test(test_cache_context_uses_a_file_for_its_device),
        cmocka_unit_test(test_cache_preferred_winner_is_kept_against_a_faster_runner_up),
        cmocka_unit_test(test_cache_context_ignores_another_device_with_a_note),
        cmocka_unit_test(test_cache_context_survives_every_broken_file),
        cmocka_unit_test(test_cache_round_trip_of_every_parsable_corpus_file),
        cmocka_unit_test(test_cache_records_are_keyed_by_lora_layout),
        cmocka_unit_test(test_cache_round_trip_of_random_files_keeps_every_field),
        cmocka_unit_test(test_cache_records_are_keyed_by_precision),
        cmocka_unit_test(test_cache_load_refuses_a_fifo_without_blocking),
        cmocka_unit_test(test_cache_save_refuses_a_target_that_is_not_a_regular_file),
        cmocka_unit_test(test_cache_save_through_a_symlink_updates_its_target),
        cmocka_unit_test(test_cache_save_removes_stale_temporary_files),
        cmocka_unit_test(test_cache_path_follows_option_env_and_default),
        cmocka_unit_test(test_cache_path_empty_or_too_long_is_refused_with_a_note),
        cmocka_unit_test(test_cache_key_names_the_clblast_built_in),
        cmocka_unit_test(test_cache_notes_go_to_the_log_and_to_stderr_with_hd_log),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
