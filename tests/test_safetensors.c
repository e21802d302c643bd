/* The safetensors reader and writer of the Llama trainer (examples/llama/): round trips of
 * every float type and odd shape, the element conversions, the atomic writer, and hostile
 * files (cut short, lying lengths, shapes that disagree with the data, unknown types,
 * duplicate names, a 100 MB header, a FIFO), each refused with its message and no crash. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "examples/llama/safetensors.h"
#include "tests/testlib.h"

static char tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    return hd_test_tmpdir_create("st", tmpdir, sizeof tmpdir);
}

static int remove_tmpdir(void **state)
{
    (void)state;
    return hd_test_tmpdir_remove(tmpdir);
}

static const char *tmp_path(const char *name)
{
    static char buf[4][400];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, name);
    return p;
}

static void *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_true(size >= 0);
    rewind(f);
    void *p = malloc((size_t)size + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *n = (size_t)size;
    return p;
}

static void expect_message(const char *msg, const char *part)
{
    if (strstr(msg, part) == NULL) {
        print_error("message \"%s\" does not say \"%s\"\n", msg, part);
        fail();
    }
}

/* The files in tmpdir whose name holds ".tmp.": a writer's leftovers. */
static int temp_files(void)
{
    DIR *d = opendir(tmpdir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static hd_st_entry entry(const char *name, hd_st_dtype dtype, int ndim, const size_t *shape,
                         const float *data)
{
    hd_st_entry e = {.name = name, .dtype = dtype, .ndim = ndim, .data = data};
    for (int d = 0; d < ndim; d++)
        e.shape[d] = shape[d];
    return e;
}

static size_t elements_of(const hd_st_entry *e)
{
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    return n;
}

static hd_st_file *open_ok(const char *path)
{
    char msg[512];
    hd_st_file *f = NULL;
    hd_status s = hd_st_open(path, &f, msg, sizeof msg);
    if (s != HD_OK) {
        print_error("hd_st_open(%s): %s: %s\n", path, hd_status_name(s), msg);
        fail();
    }
    assert_string_equal(msg, "");
    return f;
}

/* Each entry reads back as want(entry's floats): same name, dtype and shape. */
static void expect_entries(const hd_st_file *f, const hd_st_entry *entries, size_t count,
                           float (*want)(hd_st_dtype, float))
{
    char msg[512];
    assert_int_equal(hd_st_count(f), count);
    for (size_t i = 0; i < count; i++) {
        const hd_st_entry *e = &entries[i];
        const hd_st_tensor *t;
        hd_status s = hd_st_expect(f, e->name, e->ndim, e->shape, &t, msg, sizeof msg);
        if (s != HD_OK) {
            print_error("%s: %s\n", e->name, msg);
            fail();
        }
        assert_int_equal(t->dtype, e->dtype);
        size_t n = elements_of(e);
        assert_int_equal(t->elements, n);
        float *got = hd_test_floats(n);
        assert_int_equal(hd_st_read_float(f, t, got, n, msg, sizeof msg), HD_OK);
        for (size_t k = 0; k < n; k++) {
            float w = want(e->dtype, e->data[k]);
            if (memcmp(&w, &got[k], sizeof w) != 0) {
                print_error("%s[%zu]: read %a, want %a (written %a)\n", e->name, k, (double)got[k],
                            (double)w, (double)e->data[k]);
                fail();
            }
        }
        free(got);
    }
}

static float as_stored(hd_st_dtype dtype, float v)
{
    if (dtype == HD_ST_BF16)
        return hd_st_bf16_to_float(hd_st_float_to_bf16(v));
    if (dtype == HD_ST_F16)
        return hd_st_f16_to_float(hd_st_float_to_f16(v));
    return v;
}

/* Odd, one-element, scalar, empty and eight-dimensional shapes in one file of each type. */
static void round_trip(hd_st_dtype dtype, const char *file)
{
    static const size_t shapes[][HD_ST_MAX_DIMS] = {
        {3, 5, 7}, {1}, {0}, {2, 0, 3}, {0}, {13, 1}, {1, 1, 1, 1, 1, 1, 1, 1}, {1, 257}};
    static const int ndims[] = {3, 1, 1, 3, 0, 2, 8, 2};
    static const char *names[] = {"odd",    "one",       "empty",      "empty.middle",
                                  "scalar", "column.13", "eight.dims", "row.257"};
    enum { N = sizeof ndims / sizeof ndims[0] };
    hd_rng rng = hd_test_rng(0x5afe + (uint64_t)dtype);
    hd_st_entry entries[N];
    float *data[N];
    for (int i = 0; i < N; i++) {
        entries[i] = entry(names[i], dtype, ndims[i], shapes[i], NULL);
        data[i] = hd_test_random(&rng, elements_of(&entries[i]) + 1, -3.0f, 3.0f);
        entries[i].data = data[i];
    }
    data[0][0] = -0.0f;
    data[0][1] = INFINITY;
    data[0][2] = 1e-40f; /* subnormal */
    char msg[512];
    const char *path = tmp_path(file);
    hd_st_meta meta[] = {{"format", "pt"}, {"written.by", "test_safetensors"}};
    assert_int_equal(hd_st_write(path, entries, N, meta, 2, msg, sizeof msg), HD_OK);
    assert_string_equal(msg, "");
    assert_int_equal(temp_files(), 0);

    hd_st_file *f = open_ok(path);
    expect_entries(f, entries, N, as_stored);
    assert_string_equal(hd_st_metadata(f, "format"), "pt");
    hd_st_close(f);

    /* hd_st_serialize() makes the same bytes in memory, and they read the same */
    void *image;
    size_t size, file_size;
    assert_int_equal(hd_st_serialize(entries, N, meta, 2, &image, &size, msg, sizeof msg), HD_OK);
    void *on_disk = read_bytes(path, &file_size);
    assert_int_equal(size, file_size);
    assert_memory_equal(image, on_disk, size);
    assert_int_equal(hd_st_open_memory(image, size, &f, msg, sizeof msg), HD_OK);
    expect_entries(f, entries, N, as_stored);
    hd_st_close(f);
    free(image);
    free(on_disk);
    for (int i = 0; i < N; i++)
        free(data[i]);
}

static void test_round_trip_keeps_f32_of_odd_and_empty_shapes(void **state)
{
    (void)state;
    round_trip(HD_ST_F32, "f32.safetensors");
}

static void test_round_trip_keeps_bf16_rounded_to_nearest_even(void **state)
{
    (void)state;
    round_trip(HD_ST_BF16, "bf16.safetensors");
}

static void test_round_trip_keeps_f16_rounded_to_nearest_even(void **state)
{
    (void)state;
    round_trip(HD_ST_F16, "f16.safetensors");
}

static void test_bf16_conversion_rounds_ties_to_even(void **state)
{
    (void)state;
    assert_int_equal(hd_st_float_to_bf16(1.0f), 0x3f80);
    assert_int_equal(hd_st_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie: down, even */
    assert_int_equal(hd_st_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: up, even */
    assert_int_equal(hd_st_float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(hd_st_float_to_bf16(-0.0f), 0x8000);
    assert_int_equal(hd_st_float_to_bf16(3.4028235e38f), 0x7f80); /* FLT_MAX rounds up */
    assert_true(isnan(hd_st_bf16_to_float(hd_st_float_to_bf16(NAN))));
    /* a NaN whose payload sits in the low half only must not become infinity */
    float low_nan;
    uint32_t bits = 0x7f800001u;
    memcpy(&low_nan, &bits, sizeof low_nan);
    assert_true(isnan(hd_st_bf16_to_float(hd_st_float_to_bf16(low_nan))));
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float v = hd_st_bf16_to_float((uint16_t)h);
        if (!isnan(v))
            assert_int_equal(hd_st_float_to_bf16(v), h);
    }
}

static void test_f16_conversion_is_exact_and_rounds_ties_to_even(void **state)
{
    (void)state;
    static const struct {
        uint16_t bits;
        float value;
    } known[] = {
        {0x3c00, 1.0f},        {0xc000, -2.0f},           {0x7bff, 65504.0f},
        {0x0001, 0x1p-24f},    {0x03ff, 1023 * 0x1p-24f}, {0x0400, 0x1p-14f},
        {0x7c00, INFINITY},    {0xfc00, -INFINITY},       {0x8000, -0.0f},
        {0x3555, 0x1.554p-2f},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        float v = hd_st_f16_to_float(known[i].bits);
        assert_memory_equal(&v, &known[i].value, sizeof v);
        assert_int_equal(hd_st_float_to_f16(known[i].value), known[i].bits);
    }
    assert_true(isnan(hd_st_f16_to_float(0x7e00)));
    assert_int_equal(hd_st_float_to_f16(NAN) & 0x7e00, 0x7e00);
    assert_int_equal(hd_st_float_to_f16(65519.0f), 0x7bff);
    assert_int_equal(hd_st_float_to_f16(65520.0f), 0x7c00);
    assert_int_equal(hd_st_float_to_f16(1e30f), 0x7c00);
    assert_int_equal(hd_st_float_to_f16(0x1p-25f), 0x0000);            /* tie: down, even */
    assert_int_equal(hd_st_float_to_f16(3 * 0x1p-25f), 0x0002);        /* tie: up, even */
    assert_int_equal(hd_st_float_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie: down, even */
    assert_int_equal(hd_st_float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie: up, even */
    assert_int_equal(hd_st_float_to_f16(1023.5f * 0x1p-24f), 0x0400);  /* up to the normals */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float v = hd_st_f16_to_float((uint16_t)h);
        if (!isnan(v))
            assert_int_equal(hd_st_float_to_f16(v), h);
    }
}

/* A file with an I32, an F64 and an F16 tensor written raw, and an F32 one from floats. */
static const char *mixed_file(void)
{
    static const int32_t ints[] = {1, -2, 3};
    static const double doubles[] = {0.1, -1e300, 2.5};
    static const uint16_t halves[] = {0x3c00, 0xc000};
    static const float floats[] = {1.5f, 2.5f};
    hd_st_entry e[] = {
        entry("ints", HD_ST_I32, 1, (size_t[]){3}, NULL),
        entry("doubles", HD_ST_F64, 1, (size_t[]){3}, NULL),
        entry("halves", HD_ST_F16, 2, (size_t[]){1, 2}, NULL),
        entry("floats", HD_ST_F32, 2, (size_t[]){2, 1}, floats),
    };
    e[0].raw = ints;
    e[1].raw = doubles;
    e[2].raw = halves;
    char msg[512];
    const char *path = tmp_path("mixed.safetensors");
    assert_int_equal(hd_st_write(path, e, 4, NULL, 0, msg, sizeof msg), HD_OK);
    return path;
}

static void test_read_converts_f16_and_f64_and_raw_returns_stored_bytes(void **state)
{
    (void)state;
    hd_st_file *f = open_ok(mixed_file());
    char msg[512];
    float got[3];
    assert_int_equal(hd_st_load(f, "halves", 2, (size_t[]){1, 2}, got, msg, sizeof msg), HD_OK);
    assert_true(got[0] == 1.0f && got[1] == -2.0f);
    assert_int_equal(hd_st_load(f, "doubles", 1, (size_t[]){3}, got, msg, sizeof msg), HD_OK);
    assert_true(got[0] == 0.1f && got[1] == -INFINITY && got[2] == 2.5f);
    const hd_st_tensor *t;
    assert_int_equal(hd_st_find(f, "ints", &t, msg, sizeof msg), HD_OK);
    int32_t ints[3];
    assert_int_equal(hd_st_read_raw(f, t, ints, sizeof ints, msg, sizeof msg), HD_OK);
    assert_true(ints[0] == 1 && ints[1] == -2 && ints[2] == 3);
    assert_int_equal(hd_st_read_raw(f, t, ints, 8, msg, sizeof msg), HD_ERR_SHAPE_MISMATCH);
    expect_message(msg, "tensor 'ints' has 12 bytes, 8 asked for");
    hd_st_close(f);
}

static void test_writer_aligns_the_data_and_pads_the_header(void **state)
{
    (void)state;
    const char *path = mixed_file();
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | bytes[i];
    assert_int_equal(n % 8, 0);
    assert_int_equal(bytes[8], '{');
    assert_int_equal(bytes[8 + n - 1] == '}' || bytes[8 + n - 1] == ' ', 1);
    free(bytes);
    hd_st_file *f = open_ok(path);
    for (size_t i = 0; i < hd_st_count(f); i++) {
        const hd_st_tensor *t = hd_st_tensor_at(f, i);
        assert_int_equal(t->begin % hd_st_dtype_size(t->dtype), 0);
        if (i > 0) /* listed in the order of their data */
            assert_true(hd_st_tensor_at(f, i - 1)->end == t->begin);
    }
    assert_null(hd_st_tensor_at(f, hd_st_count(f)));
    hd_st_close(f);
}

static void test_lookup_of_a_missing_name_or_wrong_shape_is_an_error(void **state)
{
    (void)state;
    hd_st_file *f = open_ok(mixed_file());
    char msg[512];
    const hd_st_tensor *t = (const hd_st_tensor *)&t;
    assert_int_equal(hd_st_find(f, "model.embed_tokens.weight", &t, msg, sizeof msg),
                     HD_ERR_INVALID_ARGUMENT);
    assert_null(t);
    expect_message(msg, "no tensor named 'model.embed_tokens.weight'");
    assert_int_equal(hd_st_expect(f, "halves", 2, (size_t[]){2, 1}, &t, msg, sizeof msg),
                     HD_ERR_SHAPE_MISMATCH);
    assert_null(t);
    expect_message(msg, "tensor 'halves' has shape [1, 2], expected [2, 1]");
    assert_int_equal(hd_st_expect(f, "halves", 1, (size_t[]){2}, &t, msg, sizeof msg),
                     HD_ERR_SHAPE_MISMATCH);
    float out[4] = {7, 7, 7, 7};
    assert_int_equal(hd_st_load(f, "floats", 1, (size_t[]){2}, out, msg, sizeof msg),
                     HD_ERR_SHAPE_MISMATCH);
    assert_int_equal(hd_st_find(f, "floats", &t, msg, sizeof msg), HD_OK);
    assert_int_equal(hd_st_read_float(f, t, out, 3, msg, sizeof msg), HD_ERR_SHAPE_MISMATCH);
    expect_message(msg, "tensor 'floats' has 2 elements, 3 asked for");
    assert_true(out[0] == 7 && out[1] == 7);
    assert_int_equal(hd_st_find(f, "ints", &t, msg, sizeof msg), HD_OK);
    assert_int_equal(hd_st_read_float(f, t, out, 3, msg, sizeof msg), HD_ERR_UNSUPPORTED);
    expect_message(msg, "tensor 'ints' is I32");
    hd_st_tensor forged = *t;
    assert_int_equal(hd_st_read_raw(f, &forged, out, 12, msg, sizeof msg), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_st_read_float(NULL, t, out, 3, msg, sizeof msg), HD_ERR_INVALID_ARGUMENT);
    assert_null(hd_st_metadata(f, "format"));
    assert_int_equal(hd_st_metadata_count(f), 0);
    hd_st_close(f);
    hd_st_close(NULL);
}

static void test_metadata_round_trips_in_order(void **state)
{
    (void)state;
    hd_st_meta meta[] = {{"format", "pt"},
                         {"note", "gr\xc3\xbc\xc3\x9f"
                                  "e"},
                         {"empty", ""}};
    char msg[512];
    const char *path = tmp_path("meta.safetensors");
    assert_int_equal(hd_st_write(path, NULL, 0, meta, 3, msg, sizeof msg), HD_OK);
    hd_st_file *f = open_ok(path);
    assert_int_equal(hd_st_count(f), 0);
    assert_int_equal(hd_st_metadata_count(f), 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(hd_st_metadata_at(f, i)->key, meta[i].key);
        assert_string_equal(hd_st_metadata(f, meta[i].key), meta[i].value);
    }
    assert_null(hd_st_metadata_at(f, 3));
    assert_null(hd_st_metadata(f, "missing"));
    hd_st_close(f);
}

/* The writer refuses e (with the status and message) and leaves the file at path as it was. */
static void expect_write_refused(hd_st_entry e, const hd_st_meta *meta, size_t meta_count,
                                 hd_status want, const char *part)
{
    const char *path = tmp_path("kept.safetensors");
    float one = 1.0f;
    hd_st_entry old = entry("old", HD_ST_F32, 1, (size_t[]){1}, &one);
    char msg[512];
    assert_int_equal(hd_st_write(path, &old, 1, NULL, 0, msg, sizeof msg), HD_OK);
    size_t before_size, after_size;
    void *before = read_bytes(path, &before_size);
    hd_st_entry two[2] = {e, e};
    two[1].name = "other";
    hd_status s = hd_st_write(path, two, 2, meta, meta_count, msg, sizeof msg);
    if (s != want) {
        print_error("status %s, want %s: %s\n", hd_status_name(s), hd_status_name(want), msg);
        fail();
    }
    expect_message(msg, part);
    void *after = read_bytes(path, &after_size);
    assert_int_equal(before_size, after_size);
    assert_memory_equal(before, after, before_size);
    assert_int_equal(temp_files(), 0);
    void *image = (void *)&image;
    size_t size = 1;
    assert_int_equal(hd_st_serialize(two, 2, meta, meta_count, &image, &size, msg, sizeof msg),
                     want);
    assert_null(image);
    assert_int_equal(size, 0);
    free(before);
    free(after);
}

static void test_writer_refuses_bad_entries_and_keeps_the_old_file(void **state)
{
    (void)state;
    float v[4] = {0};
    size_t two[] = {2};
    expect_write_refused(entry("other", HD_ST_F32, 1, two, v), NULL, 0, HD_ERR_INVALID_ARGUMENT,
                         "tensor 'other' is given twice");
    expect_write_refused(entry("__metadata__", HD_ST_F32, 1, two, v), NULL, 0,
                         HD_ERR_INVALID_ARGUMENT, "the name __metadata__ cannot be written");
    expect_write_refused(entry(NULL, HD_ST_F32, 1, two, v), NULL, 0, HD_ERR_INVALID_ARGUMENT,
                         "the name (NULL) cannot be written");
    expect_write_refused(entry("bad\xff", HD_ST_F32, 1, two, v), NULL, 0, HD_ERR_INVALID_ARGUMENT,
                         "not valid UTF-8");
    expect_write_refused(entry("ints", HD_ST_I32, 1, two, v), NULL, 0, HD_ERR_UNSUPPORTED,
                         "floats are written as F32, BF16 or F16, not I32");
    expect_write_refused(entry("none", HD_ST_F32, 1, two, NULL), NULL, 0, HD_ERR_INVALID_ARGUMENT,
                         "neither data nor raw given");
    hd_st_entry both = entry("both", HD_ST_F32, 1, two, v);
    both.raw = v;
    expect_write_refused(both, NULL, 0, HD_ERR_INVALID_ARGUMENT, "both data and raw given");
    expect_write_refused(entry("huge", HD_ST_F32, 3, (size_t[]){1u << 31, 1u << 31, 1u << 31}, v),
                         NULL, 0, HD_ERR_SIZE_OVERFLOW, "overflows");
    hd_st_entry nine = entry("nine", HD_ST_F32, 1, two, v);
    nine.ndim = 9;
    expect_write_refused(nine, NULL, 0, HD_ERR_INVALID_ARGUMENT, "9 dimensions out of range");
    hd_st_meta twice[] = {{"k", "a"}, {"k", "b"}};
    expect_write_refused(entry("ok", HD_ST_F32, 1, two, v), twice, 2, HD_ERR_INVALID_ARGUMENT,
                         "metadata key 'k' is given twice");
    hd_st_meta null_value[] = {{"k", NULL}};
    expect_write_refused(entry("ok", HD_ST_F32, 1, two, v), null_value, 1, HD_ERR_INVALID_ARGUMENT,
                         "NULL key or value");
}

static void test_writer_replaces_atomically(void **state)
{
    (void)state;
    const char *path = tmp_path("atomic.safetensors");
    float a[2] = {1, 2}, b[3] = {3, 4, 5};
    hd_st_entry ea = entry("w", HD_ST_F32, 1, (size_t[]){2}, a);
    hd_st_entry eb = entry("w", HD_ST_F32, 1, (size_t[]){3}, b);
    char msg[512];
    assert_int_equal(hd_st_write(path, &ea, 1, NULL, 0, msg, sizeof msg), HD_OK);
    assert_int_equal(chmod(path, 0640), 0);
    hd_st_file *old = open_ok(path);
    assert_int_equal(hd_st_write(path, &eb, 1, NULL, 0, msg, sizeof msg), HD_OK);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    /* the handle open before still reads the old file whole; a new one the new file */
    float got[3];
    assert_int_equal(hd_st_load(old, "w", 1, (size_t[]){2}, got, msg, sizeof msg), HD_OK);
    assert_true(got[0] == 1 && got[1] == 2);
    hd_st_file *now = open_ok(path);
    assert_int_equal(hd_st_load(now, "w", 1, (size_t[]){3}, got, msg, sizeof msg), HD_OK);
    assert_true(got[0] == 3 && got[2] == 5);
    hd_st_close(old);
    hd_st_close(now);
    assert_int_equal(temp_files(), 0);

    assert_int_equal(
        hd_st_write(tmp_path("no/such/dir/x.safetensors"), &ea, 1, NULL, 0, msg, sizeof msg),
        HD_ERR_IO);
    expect_message(msg, "cannot create a temporary file");
    const char *fifo = tmp_path("fifo-target");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(hd_st_write(fifo, &ea, 1, NULL, 0, msg, sizeof msg), HD_ERR_IO);
    expect_message(msg, "is not a regular file: refusing to replace it");
    assert_int_equal(unlink(fifo), 0);
}

/* ---- hostile files ---- */

/* The 8-byte length of json, json, then data bytes (a counting pattern): a new buffer. */
static unsigned char *image_of(const char *json, size_t json_len, size_t data, size_t *size)
{
    *size = 8 + json_len + data;
    unsigned char *p = malloc(*size);
    assert_non_null(p);
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)json_len >> (8 * i));
    memcpy(p + 8, json, json_len);
    for (size_t i = 0; i < data; i++)
        p[8 + json_len + i] = (unsigned char)i;
    return p;
}

/* The image, as a file and in memory, refused with status want and a message holding part. */
static void expect_refused_image(const char *what, const void *image, size_t size, hd_status want,
                                 const char *part)
{
    const char *path = tmp_path("hostile.safetensors");
    hd_test_write_file(path, image, size);
    for (int memory = 0; memory < 2; memory++) {
        char msg[512] = "untouched";
        hd_st_file *f = (hd_st_file *)&f;
        hd_status s = memory ? hd_st_open_memory(image, size, &f, msg, sizeof msg)
                             : hd_st_open(path, &f, msg, sizeof msg);
        if (s != want || strstr(msg, part) == NULL) {
            print_error("%s (%s): status %s, message \"%s\"; want %s, \"%s\"\n", what,
                        memory ? "memory" : "file", hd_status_name(s), msg, hd_status_name(want),
                        part);
            fail();
        }
        assert_null(f);
        expect_message(msg, memory ? "'<memory>'" : path);
    }
}

static void expect_refused(const char *json, size_t data, hd_status want, const char *part)
{
    size_t size;
    unsigned char *image = image_of(json, strlen(json), data, &size);
    expect_refused_image(json, image, size, want, part);
    free(image);
}

static void test_short_files_and_lying_lengths_are_refused(void **state)
{
    (void)state;
    static const unsigned char seven[7] = {2, 0, 0, 0, 0, 0, 0};
    expect_refused_image("empty", seven, 0, HD_ERR_INVALID_ARGUMENT,
                         "0 bytes, too short for the 8-byte header length");
    expect_refused_image("seven bytes", seven, 7, HD_ERR_INVALID_ARGUMENT, "7 bytes, too short");
    size_t size;
    unsigned char *image = image_of("{}", 2, 0, &size);
    image[0] = 3; /* one byte more than the file has */
    expect_refused_image("length past the end", image, size, HD_ERR_INVALID_ARGUMENT,
                         "header length 3 is past the end of the file (10 bytes)");
    /* an allocation of the claimed length would fail: the check must come first */
    memset(image, 0xff, 8);
    expect_refused_image("length 2^64-1", image, size, HD_ERR_INVALID_ARGUMENT,
                         "header length 18446744073709551615 is past the end of the file");
    image[7] = 0x40;
    expect_refused_image("length above 2^62", image, size, HD_ERR_INVALID_ARGUMENT, "past the end");
    free(image);
    /* data cut short: the header promises 400 bytes, the file has 100 */
    expect_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", 100,
                   HD_ERR_INVALID_ARGUMENT,
                   "tensor 'w': data_offsets [0, 400] end past the data (100 bytes)");
}

/* A sparse file whose header length says claim bytes, which the file has: refused by the
 * cap before anything is allocated for it. */
static void expect_big_header_refused(uint64_t claim)
{
    const char *path = tmp_path("big-header.safetensors");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    unsigned char head[8];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(claim >> (8 * i));
    assert_int_equal(write(fd, head, 8), 8);
    if (ftruncate(fd, (off_t)(8 + claim)) != 0) {
        print_message("no sparse file of %llu bytes here (%s): skipped\n",
                      (unsigned long long)claim, strerror(errno));
        close(fd);
        unlink(path);
        return;
    }
    close(fd);
    char msg[512];
    hd_st_file *f;
    assert_int_equal(hd_st_open(path, &f, msg, sizeof msg), HD_ERR_INVALID_ARGUMENT);
    assert_null(f);
    expect_message(msg, "is above the 100000000 bytes read");
    unlink(path);
}

static void test_header_above_100_mb_is_refused_before_it_is_read(void **state)
{
    (void)state;
    expect_big_header_refused(HD_ST_HEADER_MAX + 1ull);
    expect_big_header_refused(3ull << 40); /* allocating this much would fail */
}

static void test_headers_that_are_not_json_objects_are_refused(void **state)
{
    (void)state;
    hd_status bad = HD_ERR_INVALID_ARGUMENT;
    expect_refused("", 0, bad, "not valid JSON");
    expect_refused("{\"a\":", 0, bad, "not valid JSON");
    expect_refused("{} x", 0, bad, "not valid JSON");
    expect_refused("[1, 2]", 0, bad, "the header is not a JSON object");
    expect_refused("\"text\"", 0, bad, "not valid JSON");
    expect_refused("{\"\xff\xfe\":{}}", 0, bad, "the header is not valid UTF-8");
    expect_refused("{\"a\xc3\":{}}", 0, bad, "not valid UTF-8");        /* cut inside a character */
    expect_refused("{\"\xc0\xaf\":{}}", 0, bad, "not valid UTF-8");     /* overlong '/' */
    expect_refused("{\"\xed\xa0\x80\":{}}", 0, bad, "not valid UTF-8"); /* a surrogate */
    expect_refused("{\"a\\u0000b\":{}}", 0, bad, "not valid JSON");
    size_t size;
    unsigned char *image = image_of("{\"a\0\":{}}", 9, 0, &size);
    expect_refused_image("NUL in the header", image, size, bad, "not valid JSON");
    free(image);
    /* nested far deeper than jansson's parser goes: an error, not a stack overflow */
    enum { DEPTH = 100000 };
    char *deep = malloc(2 * DEPTH + 16);
    assert_non_null(deep);
    size_t n = 0;
    for (const char *p = "{\"a\":"; *p != '\0'; p++)
        deep[n++] = *p;
    for (int i = 0; i < DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < DEPTH; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    expect_refused(deep, 0, bad, "not valid JSON");
    free(deep);
}

#define T(body) "{\"w\":{" body "}}"

static void test_duplicate_names_and_unknown_dtypes_are_refused(void **state)
{
    (void)state;
    hd_status bad = HD_ERR_INVALID_ARGUMENT;
    expect_refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, bad, "the header repeats a key: duplicate object key near '\"w\"'");
    expect_refused(T("\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, bad,
                   "tensor 'w': unknown dtype \"F33\"");
    expect_refused(T("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, bad,
                   "unknown dtype \"f32\"");
    expect_refused(T("\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]"), 1, bad,
                   "unknown dtype \"F4\"");
    expect_refused(T("\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]"), 4, bad,
                   "\"dtype\" is not a string");
    expect_refused(T("\"shape\":[1],\"data_offsets\":[0,4]"), 4, bad, "tensor 'w': no \"dtype\"");
    expect_refused(T("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4, bad, "no \"shape\"");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1]"), 4, bad, "no \"data_offsets\"");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1"), 4, bad,
                   "tensor 'w': unknown key \"x\"");
    expect_refused("{\"w\":[1]}", 0, bad, "tensor 'w': not a JSON object");
    expect_refused("{\"__metadata__\":[]}", 0, bad, "\"__metadata__\" is not a JSON object");
    expect_refused("{\"__metadata__\":{\"k\":1}}", 0, bad,
                   "\"__metadata__\" entry 'k' is not a string");
}

static void test_shapes_that_disagree_with_the_data_are_refused(void **state)
{
    (void)state;
    hd_status bad = HD_ERR_INVALID_ARGUMENT;
    const char *not_count = "\"shape\" entry 0 is not a non-negative integer";
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]"), 0, bad, not_count);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]"), 4, bad,
                   not_count);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]"), 4, bad,
                   not_count);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[2,null],\"data_offsets\":[0,4]"), 4, bad,
                   "\"shape\" entry 1 is not");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]"), 16, bad,
                   "\"shape\" is not an array");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]"),
                   4, bad, "not valid JSON"); /* past jansson's integers */
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                     "\"data_offsets\":[0,4]"),
                   4, HD_ERR_SIZE_OVERFLOW, "the element count of its shape overflows");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]"), 4,
                   HD_ERR_SIZE_OVERFLOW, "the byte size of its shape overflows");
    expect_refused(T("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 1,
                   HD_ERR_UNSUPPORTED, "9 dimensions, more than the 8 read here");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 4, bad,
                   "its shape of 2 F32 elements needs 8 bytes, data_offsets [0, 4] hold 4");
    expect_refused(T("\"dtype\":\"BF16\",\"shape\":[3,3],\"data_offsets\":[0,32]"), 32, bad,
                   "needs 18 bytes");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]"), 0, bad,
                   "needs 4 bytes");
    const char *not_pair = "\"data_offsets\" is not an array of two non-negative integers";
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]"), 4, bad, not_pair);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]"), 8, bad, not_pair);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]"), 4, bad,
                   not_pair);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4, bad, not_pair);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":{\"0\":4}"), 4, bad,
                   not_pair);
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]"), 8, bad,
                   "data_offsets [8, 4] begin after they end");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,"
                     "18446744073709551616]"),
                   4, bad, "not valid JSON");
}

static void test_overlapping_and_gap_leaving_tensors_are_refused(void **state)
{
    (void)state;
    hd_status bad = HD_ERR_INVALID_ARGUMENT;
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12, bad, "tensors 'a' and 'b' overlap (bytes 4 to 8)");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                   8, bad, "overlap");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                   8, bad, "tensors 'a' and 'z' overlap");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                   12, bad, "bytes 4 to 8 of the data belong to no tensor (a gap before 'b')");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]"), 8, bad,
                   "bytes 0 to 4 of the data belong to no tensor");
    expect_refused(T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"), 8, bad,
                   "the data's last 4 bytes (from 4) belong to no tensor");
    expect_refused("{}", 1, bad, "the data's last 1 bytes (from 0) belong to no tensor");
}

static void test_well_formed_edge_files_are_read(void **state)
{
    (void)state;
    const char *ok[] = {
        "{}",
        "  {\"__metadata__\":{}}  ",
        /* empty tensors at the ends and between, written in any order */
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]},"
        "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[6,6]},"
        "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"z\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[0,0]}}",
    };
    const size_t data[] = {0, 0, 6};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t size;
        unsigned char *image = image_of(ok[i], strlen(ok[i]), data[i], &size);
        char msg[512];
        hd_st_file *f;
        hd_status s = hd_st_open_memory(image, size, &f, msg, sizeof msg);
        if (s != HD_OK) {
            print_error("%s: %s\n", ok[i], msg);
            fail();
        }
        if (i == 2) {
            assert_int_equal(hd_st_count(f), 4);
            assert_string_equal(hd_st_tensor_at(f, 0)->name, "z");
            assert_string_equal(hd_st_tensor_at(f, 1)->name, "a");
            assert_string_equal(hd_st_tensor_at(f, 3)->name, "e");
            float x;
            assert_int_equal(hd_st_load(f, "b", 1, (size_t[]){1}, &x, msg, sizeof msg), HD_OK);
            uint32_t want = 0x05040302u; /* bytes 2..5 of the counting pattern */
            assert_memory_equal(&x, &want, sizeof x);
            assert_int_equal(hd_st_load(f, "e", 2, (size_t[]){0, 5}, NULL, msg, sizeof msg), HD_OK);
        }
        hd_st_close(f);
        free(image);
    }
}

static void alarm_fired(int sig)
{
    (void)sig;
    static const char text[] = "hd_st_open blocked on a FIFO\n";
    (void)!write(2, text, sizeof text - 1);
    _exit(1);
}

static void test_paths_that_are_not_regular_files_are_refused_without_blocking(void **state)
{
    (void)state;
    const char *fifo = tmp_path("fifo.safetensors");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    signal(SIGALRM, alarm_fired);
    alarm(10);
    char msg[512];
    hd_st_file *f;
    assert_int_equal(hd_st_open(fifo, &f, msg, sizeof msg), HD_ERR_IO);
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    expect_message(msg, "fifo.safetensors': not a regular file");
    assert_null(f);
    unlink(fifo);
    assert_int_equal(hd_st_open(tmpdir, &f, msg, sizeof msg), HD_ERR_IO);
    expect_message(msg, "not a regular file");
    assert_int_equal(hd_st_open(tmp_path("missing.safetensors"), &f, msg, sizeof msg), HD_ERR_IO);
    expect_message(msg, "cannot open: No such file or directory");
    assert_int_equal(hd_st_open(NULL, &f, msg, sizeof msg), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(hd_st_open(tmpdir, &f, NULL, 0), HD_ERR_IO);
}

static void test_a_file_cut_short_after_opening_is_an_io_error(void **state)
{
    (void)state;
    const char *path = tmp_path("shrinking.safetensors");
    float v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)i;
    hd_st_entry e[] = {entry("f32", HD_ST_F32, 1, (size_t[]){1000}, v),
                       entry("bf16", HD_ST_BF16, 1, (size_t[]){1000}, v)};
    char msg[512];
    assert_int_equal(hd_st_write(path, e, 2, NULL, 0, msg, sizeof msg), HD_OK);
    hd_st_file *f = open_ok(path);
    assert_int_equal(truncate(path, 200), 0);
    float got[1000];
    assert_int_equal(hd_st_load(f, "f32", 1, (size_t[]){1000}, got, msg, sizeof msg), HD_ERR_IO);
    expect_message(msg, "cut short since it was opened");
    assert_int_equal(hd_st_load(f, "bf16", 1, (size_t[]){1000}, got, msg, sizeof msg), HD_ERR_IO);
    hd_st_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_keeps_f32_of_odd_and_empty_shapes),
        cmocka_unit_test(test_round_trip_keeps_bf16_rounded_to_nearest_even),
        cmocka_unit_test(test_round_trip_keeps_f16_rounded_to_nearest_even),
        cmocka_unit_test(test_bf16_conversion_rounds_ties_to_even),
        cmocka_unit_test(test_f16_conversion_is_exact_and_rounds_ties_to_even),
        cmocka_unit_test(test_read_converts_f16_and_f64_and_raw_returns_stored_bytes),
        cmocka_unit_test(test_writer_aligns_the_data_and_pads_the_header),
        cmocka_unit_test(test_lookup_of_a_missing_name_or_wrong_shape_is_an_error),
        cmocka_unit_test(test_metadata_round_trips_in_order),
        cmocka_unit_test(test_writer_refuses_bad_entries_and_keeps_the_old_file),
        cmocka_unit_test(test_writer_replaces_atomically),
        cmocka_unit_test(test_short_files_and_lying_lengths_are_refused),
        cmocka_unit_test(test_header_above_100_mb_is_refused_before_it_is_read),
        cmocka_unit_test(test_headers_that_are_not_json_objects_are_refused),
        cmocka_unit_test(test_duplicate_names_and_unknown_dtypes_are_refused),
        cmocka_unit_test(test_shapes_that_disagree_with_the_data_are_refused),
        cmocka_unit_test(test_overlapping_and_gap_leaving_tensors_are_refused),
        cmocka_unit_test(test_well_formed_edge_files_are_read),
        cmocka_unit_test(test_paths_that_are_not_regular_files_are_refused_without_blocking),
        cmocka_unit_test(test_a_file_cut_short_after_opening_is_an_io_error),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
