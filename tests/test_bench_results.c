/* dispatch-bench's reader of result files (bench/results_file.c, bench/schema.c): what is not a
 * regular file is refused at once, a FIFO included; jansson's strict JSON without repeated
 * member names; every field of schema hd-bench/1 (bench/SCHEMA.md) checked, the first failure
 * named with its record. tests/bench_readers.py feeds the same hostile files to the tool and to
 * bench/check_results.py and checks that both say the same. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/compare.h"
#include "bench/results.h"
#include "bench/results_file.h"
#include "tests/testlib.h"

#ifndef HD_BENCH_TEST_DATA
#define HD_BENCH_TEST_DATA "tests/data/bench"
#endif

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    return hd_test_tmpdir_create("bench-results", dir, sizeof dir);
}

static int remove_dir(void **state)
{
    (void)state;
    return hd_test_tmpdir_remove(dir);
}

static void expect_load_fails(const char *path, const char *needle)
{
    char err[1200] = "";
    json_t *doc = hd__bench_results_load(path, err, sizeof err);
    if (doc != NULL || strstr(err, needle) == NULL)
        fail_msg("%s: expected a failure saying '%s', got %s '%s'", path, needle,
                 doc ? "a document" : "", err);
}

/* The message of parsing text (its first failure), or "" where it is a result file. */
static const char *parse_message(const char *text)
{
    static char err[1200];
    err[0] = '\0';
    json_t *doc = hd__bench_results_parse(text, strlen(text), "f.json", err, sizeof err);
    json_decref(doc);
    return err;
}

static void expect_parse_fails(const char *text, const char *want)
{
    const char *got = parse_message(text);
    if (strstr(got, want) == NULL)
        fail_msg("expected '%s' in the message, got '%s' for %.200s", want, got, text);
}

/* ours.json with the member at pointer (a JSON pointer, "/results/0/dims") set to value (JSON
 * text), or removed where value is NULL; as text (free it). */
static char *mutated(const char *pointer, const char *value)
{
    json_error_t e;
    json_t *doc = json_load_file(HD_BENCH_TEST_DATA "/ours.json", 0, &e);
    assert_non_null(doc);
    json_t *parent = doc;
    char path[256];
    snprintf(path, sizeof path, "%s", pointer + 1);
    char *key = path, *slash;
    while ((slash = strchr(key, '/')) != NULL) {
        *slash = '\0';
        parent = json_is_array(parent) ? json_array_get(parent, strtoul(key, NULL, 10))
                                       : json_object_get(parent, key);
        assert_non_null(parent);
        key = slash + 1;
    }
    if (value == NULL)
        assert_int_equal(json_object_del(parent, key), 0);
    else if (json_is_array(parent))
        assert_int_equal(json_array_set_new(parent, strtoul(key, NULL, 10),
                                            json_loads(value, JSON_DECODE_ANY, &e)),
                         0);
    else
        assert_int_equal(json_object_set_new(parent, key, json_loads(value, JSON_DECODE_ANY, &e)),
                         0);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    assert_non_null(text);
    return text;
}

static void expect_mutation_fails(const char *pointer, const char *value, const char *want)
{
    char *text = mutated(pointer, value);
    const char *got = parse_message(text);
    char full[600];
    snprintf(full, sizeof full, "f.json: %s", want);
    if (strcmp(got, full) != 0)
        fail_msg("%s = %s: expected '%s', got '%s'", pointer, value ? value : "(removed)", full,
                 got);
    free(text);
}

static void test_results_load_reads_the_known_pair(void **state)
{
    (void)state;
    char err[1200] = "";
    const char *files[] = {HD_BENCH_TEST_DATA "/ours.json", HD_BENCH_TEST_DATA "/peer.json"};
    for (size_t i = 0; i < 2; i++) {
        json_t *doc = hd__bench_results_load(files[i], err, sizeof err);
        if (doc == NULL)
            fail_msg("%s: %s", files[i], err);
        json_decref(doc);
    }
    char *text = mutated("/results/0/note", "\"\"");
    assert_string_equal(parse_message(text), "");
    free(text);
}

/* A FIFO with no writer would block open() for ever; a device or a directory is no file
 * either. The alarm turns a hang into a failure. */
static void test_results_load_refuses_what_is_not_a_regular_file(void **state)
{
    (void)state;
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/fifo.json", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10);
    expect_load_fails(fifo, "is not a regular file");
    alarm(0);
    expect_load_fails("/dev/zero", "/dev/zero is not a regular file");
    expect_load_fails(dir, "is not a regular file");
    expect_load_fails("/nonexistent/file.json",
                      "cannot open /nonexistent/file.json: No such file or directory");
}

static void test_results_load_refuses_files_over_16_mib(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/huge.json", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)HD_BENCH_RESULTS_MAX_BYTES + 1), 0);
    close(fd);
    expect_load_fails(path, "huge.json is larger than 16 MiB: not a result file");
    /* exactly at the limit: read, and refused as JSON (zeros) */
    assert_int_equal(truncate(path, (off_t)HD_BENCH_RESULTS_MAX_BYTES), 0);
    expect_load_fails(path, "huge.json: not valid JSON");
}

/* Readers that keep the first of two values and readers that keep the last would read two
 * different files: both orders are refused, at any depth. */
static void test_results_parse_refuses_repeated_member_names(void **state)
{
    (void)state;
    char *text = mutated("/schema", "\"hd-bench/1\""); /* compact: {"schema":"hd-bench/1",... */
    const char *member = "\"schema\":\"hd-bench/1\",", *evil = "\"schema\":\"evil\",";
    char *at = strstr(text, member);
    assert_non_null(at);
    for (int evil_last = 0; evil_last < 2; evil_last++) {
        size_t split = (size_t)(at - text) + (evil_last ? strlen(member) : 0);
        size_t len = strlen(text) + strlen(evil) + 1;
        char *twice = malloc(len);
        assert_non_null(twice);
        snprintf(twice, len, "%.*s%s%s", (int)split, text, evil, text + split);
        expect_parse_fails(twice, "not valid JSON: duplicate object key");
        free(twice);
    }
    free(text);
    expect_parse_fails("{\"results\": [{\"modes\": {\"sync\": {\"runs\": 1, \"runs\": 2}}}]}",
                       "not valid JSON: duplicate object key");
}

/* Each field is checked for its type, its range and its presence, and the message names it
 * from the document down, its record among them. */
static void test_results_parse_names_the_field_and_the_record(void **state)
{
    (void)state;
    static const struct {
        const char *pointer, *value, *want;
    } cases[] = {
        {"/results/1/modes/sync/median_s", "\"fast\"",
         "results[1].modes.sync.median_s: expected a number, got a string"},
        {"/results/1/modes/sync/median_s", "0",
         "results[1].modes.sync.median_s: out of range (1e-12 to 1e6)"},
        {"/results/1/modes/sync/median_s", "1e-999999999999",
         "results[1].modes.sync.median_s: out of range (1e-12 to 1e6)"},
        {"/results/1/modes/sync/min_s", "-1e-6",
         "results[1].modes.sync.min_s: out of range (1e-12 to 1e6)"},
        {"/results/1/modes/sync/max_s", "4.5e-6",
         "results[1].modes.sync: not min_s <= median_s <= max_s"},
        {"/results/1/modes/sync/runs", "0",
         "results[1].modes.sync.runs: out of range (1 to 4294967295)"},
        {"/results/1/modes/sync/host_timed", "1",
         "results[1].modes.sync.host_timed: expected a boolean, got an integer"},
        {"/results/1/modes/sync/speed", "1", "results[1].modes.sync.speed: unknown field"},
        {"/results/1/modes/warp", "{}", "results[1].modes.warp: unknown mode"},
        {"/results/1/modes/sync/median_s", NULL, "results[1].modes.sync.median_s: missing"},
        {"/results/0/dims/0", "-1", "results[0].dims[0]: out of range (0 to 16777216)"},
        {"/results/0/dims/1", "64.5", "results[0].dims[1]: expected an integer, got a real number"},
        {"/results/0/dims/2", "1e300",
         "results[0].dims[2]: expected an integer, got a real number"},
        {"/results/0/dims/3", "16777217", "results[0].dims[3]: out of range (0 to 16777216)"},
        {"/results/0/dims", "[1, 2, 3]", "results[0].dims: expected 4 values, got 3"},
        {"/results/0/dims/0", "true", "results[0].dims[0]: expected an integer, got a boolean"},
        {"/results/0/dims", "[[[[1]]]]", "results[0].dims: expected 4 values, got 1"},
        {"/results/0/case", "\"\"", "results[0].case: must not be empty"},
        {"/results/0/case", "\"gemm\\u001b[2J\"", "results[0].case: holds a control character"},
        {"/results/0/case", "\"gemm\\u009b\"", "results[0].case: holds a control character"},
        {"/results/0/case", "null", "results[0].case: expected a string, got null"},
        {"/results/0/status", "\"fine\"",
         "results[0].status: expected one of ok, n/a, skipped, wrong, error"},
        {"/results/0/ran_on", "\"fused\"", "results[0].ran_on: not the forced backend"},
        {"/results/0/modes", "{}", "results[0].modes: status ok without timings"},
        {"/results/4/modes", "{\"sync\": {}}", "results[4].modes.sync.median_s: missing"},
        {"/results/4/note", "\"\"", "results[4].note: status n/a without a note saying why"},
        {"/results/0/flops", "\"many\"", "results[0].flops: expected a number, got a string"},
        {"/results/0/check", "-0.5", "results[0].check: out of range (at least 0)"},
        {"/results/0/lora_layout", "8", "results[0].lora_layout: out of range (0 to 7)"},
        {"/results/0/params", "{\"causal\": 1}",
         "results[0].params.causal: expected a boolean, got an integer"},
        {"/results/0/params", "{\"heads\": 32}", "results[0].params.heads: unknown field"},
        {"/results/0/params", "{\"ignored\": -1}",
         "results[0].params.ignored: out of range (0 to 16777216)"},
        {"/results/0/params", "[]", "results[0].params: expected an object, got an array"},
        {"/results/0/\x1b[2J", "1", "results[0].?[2J: unknown field"},
        {"/results/0", "[]", "results[0]: expected an object, got an array"},
        {"/results", "{}", "results: expected an array, got an object"},
        {"/results", NULL, "results: missing"},
        {"/schema", "\"hd-bench-cases/1\"", "schema: expected hd-bench/1"},
        {"/date", "\"yesterday\"", "date: not a date of the form YYYY-MM-DDTHH:MM:SSZ"},
        {"/machine/cores", "0", "machine.cores: out of range (1 to 16777216)"},
        {"/device/kind", "\"tpu\"", "device.kind: expected one of gpu, cpu, none"},
        {"/roofline/peak_gflops", "0", "roofline.peak_gflops: out of range (greater than 0)"},
        {"/roofline", "[]", "roofline: expected an object or null, got an array"},
        {"/settings/modes", "[]", "settings.modes: must not be empty"},
        {"/settings/modes", "[\"sync\", \"sync\"]", "settings.modes[1]: repeated"},
        {"/settings/seed", "-1", "settings.seed: out of range (0 to 9223372036854775807)"},
        {"/settings/budget_ms", "\"300\"", "settings.budget_ms: expected a number, got a string"},
        {"/extra", "0", "extra: unknown field"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_mutation_fails(cases[i].pointer, cases[i].value, cases[i].want);
    assert_string_equal(parse_message("[]"),
                        "f.json: (document): expected an object, got an array");
}

/* Numbers JSON cannot hold in a double or in 64 bits are refused by the parser, wherever they
 * are; NaN and the like are no JSON at all. */
static void test_results_parse_refuses_numbers_out_of_the_parser_range(void **state)
{
    (void)state;
    static const struct {
        const char *value, *want;
    } cases[] = {
        {"1e400", "not valid JSON: real number overflow"},
        {"-1e400", "not valid JSON: real number overflow"},
        {"9223372036854775808", "not valid JSON: too big integer"},
        {"-9223372036854775809", "not valid JSON: too big negative integer"},
        {"NaN", "not valid JSON"},
        {"Infinity", "not valid JSON"},
        {"0x10", "not valid JSON"},
        {"01", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[200];
        snprintf(text, sizeof text, "{\"schema\": \"hd-bench/1\", \"x\": %s}", cases[i].value);
        expect_parse_fails(text, cases[i].want);
    }
}

/* Deep nesting is refused, whether jansson's own limit stops it or the schema's; what the
 * parser quotes of a hostile file is shown without its control bytes. */
static void test_results_parse_refuses_nesting_and_shows_no_control_bytes(void **state)
{
    (void)state;
    for (size_t depth = 17; depth <= 100000; depth *= 40) {
        char *text = malloc(2 * depth + 1);
        assert_non_null(text);
        memset(text, '[', depth);
        memset(text + depth, ']', depth);
        text[2 * depth] = '\0';
        expect_parse_fails(text, "f.json: nested more than 16 deep");
        free(text);
    }
    char *text = mutated("/results/0/note", "[[[[[[[[[[[[[[[[[[[[\"x\"]]]]]]]]]]]]]]]]]]]]");
    expect_parse_fails(text, "f.json: nested more than 16 deep");
    free(text);
    const char *said = parse_message("{\"a\": \x1b[2J}");
    assert_non_null(strstr(said, "not valid JSON"));
    assert_null(strchr(said, '\x1b'));
    expect_parse_fails("{\"a\": \"\\ud800\"}", "not valid JSON: invalid Unicode");
    expect_parse_fails("{\"a\": \"\\u0000\"}", "not valid JSON: \\u0000 is not allowed");
    expect_parse_fails("{\"a\": \"\xff\"}", "not valid JSON");
    expect_parse_fails("\xef\xbb\xbf{}", "not valid JSON");
    expect_parse_fails("", "not valid JSON");
}

/* What the tool writes, its own strings among it, is what it reads: control characters become
 * spaces and invalid UTF-8 '?', so that a note or a device name cannot make the file unreadable. */
static void test_results_json_strings_are_read_back(void **state)
{
    (void)state;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    hd__bench_json_string(f, "a\nb\x1b\xc2\x9b \xff\xc3\xa9 \xe2\x82\"\\");
    fclose(f);
    assert_string_equal(out, "\"a b   ?\xc3\xa9 ??\\\"\\\\\"");
    json_error_t e;
    json_t *v = json_loads(out, JSON_DECODE_ANY, &e);
    assert_non_null(v);
    json_decref(v);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_results_load_reads_the_known_pair),
        cmocka_unit_test(test_results_load_refuses_what_is_not_a_regular_file),
        cmocka_unit_test(test_results_load_refuses_files_over_16_mib),
        cmocka_unit_test(test_results_parse_refuses_repeated_member_names),
        cmocka_unit_test(test_results_parse_names_the_field_and_the_record),
        cmocka_unit_test(test_results_parse_refuses_numbers_out_of_the_parser_range),
        cmocka_unit_test(test_results_parse_refuses_nesting_and_shows_no_control_bytes),
        cmocka_unit_test(test_results_json_strings_are_read_back),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
