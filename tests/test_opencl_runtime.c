/*
 * The shared OpenCL runtime (backends/opencl/) on whatever device this machine has (PoCL in
 * CI): device choice by index and name, the buffer pool, host/device copies of odd sizes,
 * tensor migration through a kernel of the test's own, the program cache in memory and on
 * disk (cold, warm, damaged entries), build failures with their log, error mapping, event
 * capture and the calibration timings, and contexts without any OpenCL device.
 *
 * The no-platform case runs in a child process started with OCL_ICD_VENDORS naming an empty
 * directory: the ICD loader reads its vendor list once per process.
 */
#define _DEFAULT_SOURCE /* mkdtemp, setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testlib.h"

#include "backends/opencl/internal.h" /* the pool cap, lowered for a test */
#include "backends/opencl/runtime.h"
#include "dispatch/context.h"
#include "core/error.h"
#include "dispatch/tensor.h"

static const char double_source[] = "__kernel void hd_test_double(__global float *x, uint n)\n"
                                    "{\n"
                                    "    size_t i = get_global_id(0);\n"
                                    "    if (i < n)\n"
                                    "        x[i] *= 2.0f;\n"
                                    "}\n";

/* A context that only holds messages: the runtimes under test are made by hand. */
static hd_context *message_context(void)
{
    return hd_test_context(true);
}

static hd_cl_runtime *open_runtime(hd_context *ctx, const char *spec)
{
    hd_cl_runtime *rt = NULL;
    hd_status s = hd__cl_runtime_create(ctx, spec, &rt);
    if (s != HD_OK)
        fail_msg("hd__cl_runtime_create(%s): %s", spec ? spec : "NULL", hd_context_last_error(ctx));
    return rt;
}

static void expect_message_contains(const hd_context *ctx, const char *needle)
{
    const char *msg = hd_context_last_error(ctx);
    if (strstr(msg, needle) == NULL)
        fail_msg("message '%s' does not contain '%s'", msg, needle);
}

/* Doubles the first n floats of buf with the test's kernel; the event goes to ev when given. */
static void enqueue_double(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                           struct hd_device_buffer *buf, cl_uint n, cl_event *ev)
{
    cl_program program;
    cl_kernel kernel;
    assert_int_equal(hd__cl_program(rt, ctx, source, NULL, &program), HD_OK);
    assert_int_equal(hd__cl_kernel(rt, ctx, program, "hd_test_double", &kernel), HD_OK);
    assert_int_equal(clSetKernelArg(kernel, 0, sizeof buf->mem, &buf->mem), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(kernel, 1, sizeof n, &n), CL_SUCCESS);
    size_t global = n;
    assert_int_equal(
        clEnqueueNDRangeKernel(hd__cl_queue(rt), kernel, 1, NULL, &global, NULL, 0, NULL, ev),
        CL_SUCCESS);
}

/* Runs source's doubling kernel over fresh random data and checks the result. */
static void expect_doubling_works(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                  uint64_t salt)
{
    enum { N = 37 };
    hd_rng rng = hd_test_rng(salt);
    float in[N], out[N];
    hd_test_fill(&rng, in, N, -4.0f, 4.0f);
    struct hd_device_buffer *buf;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, sizeof in, &buf), HD_OK);
    assert_int_equal(hd__cl_upload(rt, ctx, buf, in, sizeof in), HD_OK);
    enqueue_double(rt, ctx, source, buf, N, NULL);
    assert_int_equal(hd__cl_download(rt, ctx, buf, out, sizeof out), HD_OK);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == 2.0f * in[i]);
    hd__cl_buffer_release(rt, buf);
}

/* ---- discovery ---- */

static void test_discovery_default_finds_a_device(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_true(strlen(hd__cl_device_name(rt)) > 0);
    assert_true(strlen(hd__cl_driver_version(rt)) > 0);
    assert_true(strlen(hd__cl_platform_name(rt)) > 0);
    assert_non_null(hd__cl_context(rt));
    assert_non_null(hd__cl_device(rt));
    assert_non_null(hd__cl_queue(rt));
    cl_command_queue_properties props = 0;
    assert_int_equal(
        clGetCommandQueueInfo(hd__cl_queue(rt), CL_QUEUE_PROPERTIES, sizeof props, &props, NULL),
        CL_SUCCESS);
    assert_true(props & CL_QUEUE_PROFILING_ENABLE);
    assert_false(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    hd__cl_runtime_destroy(rt);
    hd__cl_runtime_destroy(NULL);
    hd_context_destroy(ctx);
}

static void test_discovery_index_and_name_pick_the_device(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *first = open_runtime(ctx, "0");
    char name[256];
    snprintf(name, sizeof name, "%s", hd__cl_device_name(first));

    /* A piece from the middle of the name, case flipped: matching ignores case. */
    size_t len = strlen(name);
    size_t from = len / 3, n = len - from < 6 ? len - from : 6;
    char piece[8] = {0};
    for (size_t i = 0; i < n; i++) {
        char c = name[from + i];
        piece[i] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    hd_cl_runtime *by_name = open_runtime(ctx, piece);
    assert_string_equal(hd__cl_device_name(by_name), name);
    hd__cl_runtime_destroy(by_name);
    hd__cl_runtime_destroy(first);
    hd_context_destroy(ctx);
}

static void test_discovery_no_match_is_an_error_listing_devices(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    char name[256];
    snprintf(name, sizeof name, "%s", hd__cl_device_name(rt));
    hd__cl_runtime_destroy(rt);

    const char *specs[] = {"no-such-device-anywhere", "999", "99999999999999999999"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        rt = (hd_cl_runtime *)1;
        assert_int_equal(hd__cl_runtime_create(ctx, specs[i], &rt), HD_ERR_INVALID_ARGUMENT);
        assert_null(rt);
        expect_message_contains(ctx, specs[i]);
        expect_message_contains(ctx, "0: ");
        expect_message_contains(ctx, name);
    }
    hd_context_destroy(ctx);
}

static void test_discovery_hd_device_environment_selects(void **state)
{
    (void)state;
    hd_context *probe = message_context();
    hd_cl_runtime *rt = open_runtime(probe, "0");
    char name[256];
    snprintf(name, sizeof name, "%s", hd__cl_device_name(rt));
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(probe);

    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    hd_context *ctx = NULL;
    setenv("HD_DEVICE", "0", 1);
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_string_equal(hd_context_device_name(ctx), name);
    hd_context_destroy(ctx);

    setenv("HD_DEVICE", "no-such-device-anywhere", 1);
    ctx = (hd_context *)1;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_ERR_INVALID_ARGUMENT);
    assert_null(ctx);

    /* The option wins over the environment. */
    opt.device = "0";
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_string_equal(hd_context_device_name(ctx), name);
    hd_context_destroy(ctx);
    unsetenv("HD_DEVICE");
}

/* ---- buffers ---- */

static void test_pool_reuses_released_buffers(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    struct hd_cl_pool_counters c0, c1;

    struct hd_device_buffer *a, *b, *c;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 1000, &a), HD_OK);
    assert_true(a->capacity >= 1000 && a->capacity <= 1280);
    assert_int_equal(a->bytes, 1000);
    cl_mem mem = hd__cl_mem(a->mem);
    hd__cl_pool_counters(rt, &c0);
    assert_int_equal(c0.pooled_bytes, 0);
    hd__cl_buffer_release(rt, a);
    hd__cl_pool_counters(rt, &c1);
    assert_true(c1.pooled_bytes >= 1000);

    /* The same size class: the same memory, no new allocation. */
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 990, &b), HD_OK);
    hd__cl_pool_counters(rt, &c1);
    assert_ptr_equal(hd__cl_mem(b->mem), mem);
    assert_int_equal(b->bytes, 990);
    assert_int_equal(c1.allocations, c0.allocations);
    assert_int_equal(c1.reuses, c0.reuses + 1);
    assert_int_equal(c1.pooled_bytes, 0);

    /* Another class while b is held: a new allocation. */
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 5000, &c), HD_OK);
    hd__cl_pool_counters(rt, &c1);
    assert_ptr_not_equal(hd__cl_mem(c->mem), mem);
    assert_int_equal(c1.allocations, c0.allocations + 1);

    /* Empty requests get a real buffer too. */
    struct hd_device_buffer *empty;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 0, &empty), HD_OK);
    assert_non_null(empty->mem);
    assert_true(empty->capacity > 0);

    hd__cl_buffer_release(rt, b);
    hd__cl_buffer_release(rt, c);
    hd__cl_buffer_release(rt, empty);
    hd__cl_buffer_release(rt, NULL);
    hd__cl_buffer_release(NULL, NULL);
    hd__cl_runtime_destroy(rt); /* frees the pooled buffers */
    hd_context_destroy(ctx);
}

/* At most the cap stays idle; past it, what was released longest ago goes first, so that a
 * large buffer released once does not leave every later small buffer to be freed on release
 * and allocated again. */
static void test_pool_keeps_at_most_its_cap(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    rt->pool.cap_bytes = 5000;
    struct hd_device_buffer *a, *b;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 3000, &a), HD_OK);
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 3000, &b), HD_OK);
    size_t capacity = a->capacity;
    cl_mem kept = hd__cl_mem(b->mem);
    hd__cl_buffer_release(rt, a);
    hd__cl_buffer_release(rt, b); /* over the cap: a, idle longer, is freed */
    struct hd_cl_pool_counters c;
    hd__cl_pool_counters(rt, &c);
    assert_int_equal(c.pooled_bytes, capacity);
    assert_true(c.pooled_bytes <= rt->pool.cap_bytes);
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 3000, &a), HD_OK);
    assert_ptr_equal(hd__cl_mem(a->mem), kept);

    /* a buffer over the cap alone is never pooled; one released long ago gives way to a loop's
     * small buffer, which is then reused on every turn */
    struct hd_device_buffer *big, *small;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 6000, &big), HD_OK);
    hd__cl_buffer_release(rt, big);
    hd__cl_buffer_release(rt, a);
    hd__cl_pool_counters(rt, &c);
    assert_int_equal(c.pooled_bytes, capacity);
    struct hd_cl_pool_counters before;
    hd__cl_pool_counters(rt, &before);
    size_t small_capacity = 0;
    for (int turn = 0; turn < 3; turn++) {
        assert_int_equal(hd__cl_buffer_acquire(rt, ctx, 2500, &small), HD_OK);
        small_capacity = small->capacity;
        hd__cl_buffer_release(rt, small); /* with the 3000's, over the cap: that one goes */
    }
    hd__cl_pool_counters(rt, &c);
    assert_int_equal(c.allocations, before.allocations + 1);
    assert_int_equal(c.reuses, before.reuses + 2);
    assert_int_equal(c.pooled_bytes, small_capacity);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

/* Pinned host memory is capped per device, not per runtime: two runtimes on one device (two
 * contexts) share the cap, and what one frees the other can take. */
static void test_pinned_cap_is_the_devices_across_runtimes(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt1 = open_runtime(ctx, NULL), *rt2 = open_runtime(ctx, NULL);
    assert_ptr_equal(rt1->pinned_bytes, rt2->pinned_bytes);
    size_t before = atomic_load(rt1->pinned_bytes);
    rt1->pinned_cap = rt2->pinned_cap = before + 6000; /* about two of the blocks below */
    void *a = hd__cl_host_alloc(rt1, 2500);
    if (a == NULL) /* a device that cannot map host memory: nothing to share */
        skip();
    void *b = hd__cl_host_alloc(rt2, 2500);
    assert_non_null(b);
    assert_null(hd__cl_host_alloc(rt2, 2500)); /* past the cap the two hold together */
    assert_null(hd__cl_host_alloc(rt1, 2500));
    hd__cl_host_free(rt1, a);
    void *c = hd__cl_host_alloc(rt2, 2500); /* rt1's share, freed */
    assert_non_null(c);
    memset(c, 0x5a, 2500);
    hd__cl_host_free(rt2, b);
    hd__cl_host_free(rt2, c);
    assert_int_equal(atomic_load(rt1->pinned_bytes), before);
    hd__cl_runtime_destroy(rt1);
    hd__cl_runtime_destroy(rt2);
    hd_context_destroy(ctx);
}

static void test_pool_too_large_is_device_out_of_memory(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    cl_ulong max_alloc = 0;
    assert_int_equal(clGetDeviceInfo(hd__cl_device(rt), CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                                     sizeof max_alloc, &max_alloc, NULL),
                     CL_SUCCESS);
    struct hd_device_buffer *buf = (struct hd_device_buffer *)1;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, (size_t)max_alloc + 1, &buf),
                     HD_ERR_DEVICE_OUT_OF_MEMORY);
    assert_null(buf);
    expect_message_contains(ctx, "largest allocation");
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, (size_t)-1, &buf), HD_ERR_DEVICE_OUT_OF_MEMORY);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

static void test_upload_download_round_trips_odd_sizes(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    hd_rng rng = hd_test_rng(11);
    /* Up to past the staged-upload limit (4 MiB), so the blocking path runs too. */
    const size_t sizes[] = {1, 3, 4, 255, 257, 4099, 65537, 1000003, ((size_t)4 << 20) + 7};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *src = malloc(n), *keep = malloc(n), *dst = malloc(n);
        assert_non_null(src);
        assert_non_null(keep);
        assert_non_null(dst);
        for (size_t j = 0; j < n; j++)
            src[j] = (unsigned char)(hd_test_uniform(&rng, 0.0f, 256.0f));
        memcpy(keep, src, n);
        struct hd_device_buffer *buf;
        assert_int_equal(hd__cl_buffer_acquire(rt, ctx, n, &buf), HD_OK);
        assert_int_equal(hd__cl_upload(rt, ctx, buf, src, n), HD_OK);
        memset(src, 0xA5, n); /* the caller may reuse its memory at once */
        free(src);
        memset(dst, 0, n);
        assert_int_equal(hd__cl_download(rt, ctx, buf, dst, n), HD_OK);
        if (memcmp(dst, keep, n) != 0)
            fail_msg("round trip of %zu bytes differs", n);

        /* Zeroing a prefix of odd length leaves the rest. */
        size_t z = n / 2 + 1;
        assert_int_equal(hd__cl_zero(rt, ctx, hd__cl_mem(buf->mem), z), HD_OK);
        assert_int_equal(hd__cl_download(rt, ctx, buf, dst, n), HD_OK);
        for (size_t j = 0; j < z; j++)
            assert_int_equal(dst[j], 0);
        assert_memory_equal(dst + z, keep + z, n - z);

        assert_int_equal(hd__cl_upload(rt, ctx, buf, keep, 0), HD_OK);
        assert_int_equal(hd__cl_download(rt, ctx, buf, dst, 0), HD_OK);
        assert_int_equal(hd__cl_upload(rt, ctx, buf, keep, buf->capacity + 1), HD_ERR_INTERNAL);
        hd__cl_buffer_release(rt, buf);
        free(keep);
        free(dst);
    }
    assert_int_equal(hd__cl_finish(rt, ctx), HD_OK);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

static void test_uploads_queue_many_then_read_in_order(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    enum { COUNT = 50, N = 301 };
    struct hd_device_buffer *buf;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, N * sizeof(float), &buf), HD_OK);
    float src[N], dst[N];
    /* The same host array, rewritten before each upload: the last one must win. */
    for (int i = 0; i < COUNT; i++) {
        for (int j = 0; j < N; j++)
            src[j] = (float)(i * N + j);
        assert_int_equal(hd__cl_upload(rt, ctx, buf, src, sizeof src), HD_OK);
    }
    assert_int_equal(hd__cl_download(rt, ctx, buf, dst, sizeof dst), HD_OK);
    for (int j = 0; j < N; j++)
        assert_true(dst[j] == (float)((COUNT - 1) * N + j));
    hd__cl_buffer_release(rt, buf);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

/* ---- tensors ---- */

static void test_tensor_migrates_host_device_cpu_and_back(void **state)
{
    (void)state;
    hd_context_options opt; /* this test reads the OpenCL runtime's pool */
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.runtime = "opencl";
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_non_null(hd__rt_opencl(ctx->rt));
    hd_cl_runtime *rt = hd__rt_opencl(ctx->rt);
    enum { ROWS = 7, COLS = 13, N = ROWS * COLS };
    hd_rng rng = hd_test_rng(23);
    float x[N], got[N];
    hd_test_fill(&rng, x, N, -2.0f, 2.0f);
    hd_tensor *t = hd_test_tensor(ctx, ROWS, COLS, x);

    /* Host to device; a kernel of our own writes it there. */
    assert_int_equal(hd__tensor_migration_bytes(t, HD_PLACE_DEVICE), N * sizeof(float));
    assert_int_equal(hd__tensor_to_device(t), HD_OK);
    assert_true(t->state->device_valid && t->state->host_valid);
    assert_int_equal(hd__tensor_migration_bytes(t, HD_PLACE_DEVICE), 0);
    enqueue_double(rt, ctx, double_source, t->state->device, N, NULL);
    hd__tensor_written(t, HD_PLACE_DEVICE);
    assert_false(t->state->host_valid);
    assert_int_equal(hd__tensor_migration_bytes(t, HD_PLACE_HOST), N * sizeof(float));

    /* A CPU op reads it: the tensor comes back to the host. */
    hd_tensor *y = hd_test_tensor(ctx, ROWS, COLS, NULL);
    assert_int_equal(hd_context_set_backend(ctx, HD_OP_SOFTMAX, HD_BACKEND_CPU), HD_OK);
    assert_int_equal(hd_softmax(ctx, t, y), HD_OK);
    assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_CPU);
    float doubled[N];
    double want[N];
    for (int i = 0; i < N; i++)
        doubled[i] = 2.0f * x[i];
    hd_ref_softmax(ROWS, COLS, doubled, want);
    assert_int_equal(hd_tensor_read(y, got), HD_OK);
    hd_test_expect_close("softmax after device doubling", got, want, N, 1e-9, 1e-5);
    assert_int_equal(hd_tensor_read(t, got), HD_OK);
    hd_test_expect_same("doubled tensor", got, doubled, N);

    /* A tensor never written goes to the device as zeros. */
    hd_tensor *z = hd_test_tensor(ctx, 3, 5, NULL);
    assert_int_equal(hd__tensor_to_device(z), HD_OK);
    enqueue_double(rt, ctx, double_source, z->state->device, 15, NULL);
    hd__tensor_written(z, HD_PLACE_DEVICE);
    assert_int_equal(hd_tensor_read(z, got), HD_OK);
    for (int i = 0; i < 15; i++)
        assert_true(got[i] == 0.0f);

    /* An empty tensor has device storage too. */
    hd_tensor *e = hd_test_tensor(ctx, 0, 9, NULL);
    assert_int_equal(hd__tensor_to_device(e), HD_OK);
    assert_int_equal(hd_tensor_read(e, NULL), HD_OK);

    hd_tensor_destroy(e);
    hd_tensor_destroy(z);
    hd_tensor_destroy(y);
    hd_tensor_destroy(t);
    assert_int_equal(hd_sync(ctx), HD_OK);
    hd_context_destroy(ctx);
}

/* ---- programs ---- */

static char cache_root[256];

/* Points the disk cache at a directory of this run's own, so the first build is cold, and
 * turns the cache on (PoCL's default is off). */
static void use_fresh_cache_dir(void)
{
    if (cache_root[0] == '\0') {
        snprintf(cache_root, sizeof cache_root, "/tmp/hd-test-clcache-XXXXXX");
        assert_non_null(mkdtemp(cache_root));
    }
    setenv("XDG_CACHE_HOME", cache_root, 1);
    setenv("HD_PROGRAM_CACHE", "1", 1);
}

/* The doubling kernel with a comment unique to this run: a source no cache has seen. */
static const char *unique_source(char *buf, size_t cap, uint64_t salt)
{
    hd_rng rng = hd_test_rng(salt);
    snprintf(buf, cap, "/* %08x%08x */\n%s", (unsigned)(hd_test_uniform(&rng, 0, 1) * 4e9f),
             (unsigned)getpid(), double_source);
    return buf;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static struct hd_cl_program_counters build_in_fresh_runtime(hd_context *ctx, const char *source,
                                                            uint64_t salt)
{
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    expect_doubling_works(rt, ctx, source, salt);
    struct hd_cl_program_counters c;
    hd__cl_program_counters(rt, &c);
    hd__cl_runtime_destroy(rt);
    return c;
}

static void test_program_cache_cold_warm_and_damaged(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    static char source[1024];
    unique_source(source, sizeof source, 31);

    char path[1400];
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_true(hd__cl_program_cache_file(rt, source, NULL, path, sizeof path));
    assert_non_null(strstr(path, cache_root));
    assert_non_null(strstr(path, "/hd-dispatch/programs/"));
    hd__cl_runtime_destroy(rt);
    assert_int_equal(file_size(path), -1);

    /* Cold: compiled, then stored. */
    struct hd_cl_program_counters c = build_in_fresh_runtime(ctx, source, 1);
    assert_int_equal(c.source_builds, 1);
    assert_int_equal(c.disk_stores, 1);
    assert_int_equal(c.disk_loads, 0);
    long full = file_size(path);
    assert_true(full > 32);

    /* Warm: loaded, not compiled. */
    c = build_in_fresh_runtime(ctx, source, 2);
    assert_int_equal(c.disk_loads, 1);
    assert_int_equal(c.source_builds, 0);
    assert_int_equal(c.disk_rejects, 0);

    /* Truncated: ignored, rebuilt, stored again whole. */
    assert_int_equal(truncate(path, full / 2), 0);
    c = build_in_fresh_runtime(ctx, source, 3);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);
    assert_int_equal(c.disk_stores, 1);
    assert_true(file_size(path) > full / 2); /* whole again (binaries vary in size per build) */

    /* Same length, flipped payload bytes: the checksum catches it. */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, full - 17, SEEK_SET), 0);
    fputs("garbage!garbage!", f);
    assert_int_equal(fclose(f), 0);
    c = build_in_fresh_runtime(ctx, source, 4);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);

    /* Whole file garbage, and an empty file. */
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 100; i++)
        fputs("not a program binary ", f);
    assert_int_equal(fclose(f), 0);
    c = build_in_fresh_runtime(ctx, source, 5);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    c = build_in_fresh_runtime(ctx, source, 6);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);

    /* After all that, a warm load again. */
    c = build_in_fresh_runtime(ctx, source, 7);
    assert_int_equal(c.disk_loads, 1);
    assert_int_equal(c.source_builds, 0);
    hd_context_destroy(ctx);
}

/* An entry is code the device runs: one that others may write to is not loaded but compiled
 * and replaced by a private one; in a directory that others may write to nothing is read or
 * stored. */
static void test_program_cache_trusts_only_private_entries(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    static char source[1024];
    unique_source(source, sizeof source, 37);
    char path[1400], dir[1400];
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_true(hd__cl_program_cache_file(rt, source, NULL, path, sizeof path));
    hd__cl_runtime_destroy(rt);
    struct hd_cl_program_counters c = build_in_fresh_runtime(ctx, source, 1);
    assert_int_equal(c.disk_stores, 1);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';

    /* the entry writable by others, then the directory: compiled instead */
    const char *const open_up[] = {path, dir};
    const mode_t shared[] = {0666, 0777}, private[] = {0600, 0700};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chmod(open_up[i], shared[i]), 0);
        c = build_in_fresh_runtime(ctx, source, 2 + 2 * (uint64_t)i);
        assert_int_equal(c.disk_loads, 0);
        assert_int_equal(c.disk_rejects, 1);
        assert_int_equal(c.source_builds, 1);
        assert_int_equal(c.disk_stores, i == 0 ? 1 : 0); /* a private entry replaces it */
        assert_int_equal(chmod(open_up[i], private[i]), 0);
        c = build_in_fresh_runtime(ctx, source, 3 + 2 * (uint64_t)i);
        assert_int_equal(c.disk_loads, 1);
    }
    hd_context_destroy(ctx);
}

/* A FIFO where an entry belongs blocked the build that needed it, forever: it is refused at
 * once, the program is compiled and a regular entry replaces the FIFO. */
static void test_program_cache_fifo_entry_is_rebuilt_without_blocking(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    static char source[1024];
    unique_source(source, sizeof source, 41);
    char path[1400];
    build_in_fresh_runtime(ctx, source, 1); /* creates the directories */
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_true(hd__cl_program_cache_file(rt, source, NULL, path, sizeof path));
    hd__cl_runtime_destroy(rt);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0644), 0);
    alarm(60); /* a hang fails the run */
    struct hd_cl_program_counters c = build_in_fresh_runtime(ctx, source, 2);
    alarm(0);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);
    struct stat st;
    assert_true(stat(path, &st) == 0 && S_ISREG(st.st_mode));
    hd_context_destroy(ctx);
}

static void test_program_cache_key_includes_options(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    char a[1400], b[1400];
    assert_true(hd__cl_program_cache_file(rt, double_source, NULL, a, sizeof a));
    assert_true(hd__cl_program_cache_file(rt, double_source, "-DX=1", b, sizeof b));
    assert_string_not_equal(a, b);
    /* The header holds the whole key: an entry of other options under this name is refused.
     * Copy one entry over the other's name and load. */
    static char source[1024];
    unique_source(source, sizeof source, 41);
    cl_program p1, p2;
    assert_int_equal(hd__cl_program(rt, ctx, source, "-DX=1", &p1), HD_OK);
    assert_int_equal(hd__cl_program(rt, ctx, source, "-DX=2", &p2), HD_OK);
    assert_ptr_not_equal(p1, p2);
    assert_true(hd__cl_program_cache_file(rt, source, "-DX=1", a, sizeof a));
    assert_true(hd__cl_program_cache_file(rt, source, "-DX=2", b, sizeof b));
    hd__cl_runtime_destroy(rt);
    assert_int_equal(rename(a, b), 0);
    rt = open_runtime(ctx, NULL);
    assert_int_equal(hd__cl_program(rt, ctx, source, "-DX=2", &p2), HD_OK);
    struct hd_cl_program_counters c;
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.disk_rejects, 1);
    assert_int_equal(c.source_builds, 1);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

static void test_program_cache_off_writes_nothing(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    setenv("HD_PROGRAM_CACHE", "0", 1);
    hd_context *ctx = message_context();
    static char source[1024];
    unique_source(source, sizeof source, 51);
    char path[1400];
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_false(hd__cl_program_cache_file(rt, source, NULL, path, sizeof path));
    hd__cl_runtime_destroy(rt);
    struct hd_cl_program_counters c = build_in_fresh_runtime(ctx, source, 8);
    assert_int_equal(c.source_builds, 1);
    assert_int_equal(c.disk_stores, 0);
    c = build_in_fresh_runtime(ctx, source, 9);
    assert_int_equal(c.source_builds, 1);
    assert_int_equal(c.disk_loads, 0);
    unsetenv("HD_PROGRAM_CACHE");
    hd_context_destroy(ctx);
}

/* Unset, the cache is on, except on PoCL, which caches its builds itself and would compile
 * every kernel of a program to hand out its binary: there each run builds from source. */
static void test_program_cache_default_follows_the_driver(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    unsetenv("HD_PROGRAM_CACHE");
    hd_context *ctx = message_context();
    static char source[1024];
    unique_source(source, sizeof source, 57);
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    bool pocl = strstr(hd__cl_platform_name(rt), "Portable Computing Language") != NULL;
    char path[1400];
    assert_int_equal(hd__cl_program_cache_file(rt, source, NULL, path, sizeof path), !pocl);
    print_message("platform %s: program cache %s by default\n", hd__cl_platform_name(rt),
                  pocl ? "off" : "on");
    hd__cl_runtime_destroy(rt);
    for (uint64_t run = 0; run < 2; run++) {
        struct hd_cl_program_counters c = build_in_fresh_runtime(ctx, source, 58 + run);
        assert_int_equal(c.source_builds, pocl || run == 0 ? 1 : 0);
        assert_int_equal(c.disk_stores, !pocl && run == 0 ? 1 : 0);
        assert_int_equal(c.disk_loads, !pocl && run == 1 ? 1 : 0);
    }
    hd_context_destroy(ctx);
}

/* Waits (up to a minute) until the build-ahead workers have nothing queued or under way. */
static void wait_for_builds_ahead(hd_cl_runtime *rt)
{
    for (int i = 0; i < 6000 && hd__cl_build_ahead_waiting(rt) > 0; i++)
        usleep(10000);
    assert_int_equal(hd__cl_build_ahead_waiting(rt), 0);
}

/* Build ahead: programs queued are built on the workers and taken by hd__cl_program (each
 * built once, counted once, and working); a source that does not build is built again by the
 * caller, whose error then carries the log; a queue cancelled, or left at destroy, loses
 * nothing that is asked for later. */
static void test_build_ahead_builds_for_later_use(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    setenv("HD_PROGRAM_CACHE", "0", 1); /* every program built from source: exact counts */
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    assert_int_equal(hd__cl_build_ahead_start(rt, ctx, 2), HD_OK);
    assert_int_equal(hd__cl_build_ahead_start(rt, ctx, 3), HD_OK); /* started once */
    enum { N = 3 };
    static char sources[2 * N][1024];
    for (int i = 0; i < 2 * N; i++)
        unique_source(sources[i], sizeof sources[i], 70 + (uint64_t)i);
    for (int i = 0; i < N; i++) {
        hd__cl_build_ahead(rt, sources[i], NULL);
        hd__cl_build_ahead(rt, sources[i], ""); /* the same program: queued once */
    }
    static const char broken[] = "__kernel void hd_test_broken(__global float *x) { x[0] = ; }\n";
    hd__cl_build_ahead(rt, broken, NULL);
    assert_true(hd__cl_build_ahead_waiting(rt) <= N + 1);
    wait_for_builds_ahead(rt);
    struct hd_cl_program_counters c;
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.ahead_takes, 0);
    for (int i = 0; i < N; i++)
        expect_doubling_works(rt, ctx, sources[i], 80 + (uint64_t)i);
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.ahead_takes, N);
    assert_int_equal(c.source_builds, N); /* the workers' builds, counted as they are taken */
    assert_int_equal(c.memory_hits, 0);
    /* the failed build: the caller's own, with the compiler's log */
    cl_program p;
    assert_int_equal(hd__cl_program(rt, ctx, broken, NULL, &p), HD_ERR_BUILD);
    assert_non_null(strstr(hd_context_last_error(ctx), "build log"));
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.ahead_takes, N);
    /* cancelled while queued or under way: only the two workers' builds under way are left,
     * and each program is built exactly once, by whichever */
    for (int i = N; i < 2 * N; i++)
        hd__cl_build_ahead(rt, sources[i], NULL);
    hd__cl_build_ahead_cancel(rt, false);
    assert_true(hd__cl_build_ahead_waiting(rt) <= 2);
    for (int i = N; i < 2 * N; i++)
        expect_doubling_works(rt, ctx, sources[i], 90 + (uint64_t)i);
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.source_builds, 2 * N);
    /* asked for again: from memory, nothing queued for what is built */
    hd__cl_build_ahead(rt, sources[0], NULL);
    assert_int_equal(hd__cl_build_ahead_waiting(rt), 0);
    expect_doubling_works(rt, ctx, sources[0], 99);
    /* a cancel that waits returns with nothing under way */
    static char waited[1024];
    unique_source(waited, sizeof waited, 100);
    hd__cl_build_ahead(rt, waited, NULL);
    hd__cl_build_ahead_cancel(rt, true);
    assert_int_equal(hd__cl_build_ahead_waiting(rt), 0);
    /* queued and never asked for: the runtime stops its workers and frees them */
    static char late[4][1024];
    for (int i = 0; i < 4; i++) {
        unique_source(late[i], sizeof late[i], 110 + (uint64_t)i);
        hd__cl_build_ahead(rt, late[i], "-DLATE=1");
    }
    hd__cl_runtime_destroy(rt);
    unsetenv("HD_PROGRAM_CACHE");
    hd_context_destroy(ctx);
}

static void test_program_memory_cache_by_address_and_text(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    cl_program p1, p2, p3, p4;
    assert_int_equal(hd__cl_program(rt, ctx, double_source, NULL, &p1), HD_OK);
    assert_int_equal(hd__cl_program(rt, ctx, double_source, "", &p2), HD_OK);
    assert_ptr_equal(p1, p2);
    char *copy = malloc(sizeof double_source);
    assert_non_null(copy);
    memcpy(copy, double_source, sizeof double_source);
    assert_int_equal(hd__cl_program(rt, ctx, copy, NULL, &p3), HD_OK);
    assert_ptr_equal(p1, p3);
    assert_int_equal(hd__cl_program(rt, ctx, double_source, "-cl-fast-relaxed-math", &p4), HD_OK);
    assert_ptr_not_equal(p1, p4);
    struct hd_cl_program_counters c;
    hd__cl_program_counters(rt, &c);
    assert_int_equal(c.memory_hits, 2);
    assert_int_equal(c.source_builds + c.disk_loads, 2);

    cl_kernel k1, k2;
    assert_int_equal(hd__cl_kernel(rt, ctx, p1, "hd_test_double", &k1), HD_OK);
    assert_int_equal(hd__cl_kernel(rt, ctx, p3, "hd_test_double", &k2), HD_OK);
    assert_ptr_equal(k1, k2);
    assert_int_equal(hd__cl_kernel(rt, ctx, p4, "hd_test_double", &k2), HD_OK);
    assert_ptr_not_equal(k1, k2);
    assert_int_equal(hd__cl_kernel(rt, ctx, p1, "no_such_kernel", &k2), HD_ERR_DEVICE);
    assert_null(k2);
    expect_message_contains(ctx,
                            "clCreateKernel(\"no_such_kernel\") failed: CL_INVALID_KERNEL_NAME");
    hd__cl_runtime_destroy(rt);
    free(copy);
    hd_context_destroy(ctx);
}

static void test_program_build_failure_reports_the_log(void **state)
{
    (void)state;
    use_fresh_cache_dir();
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    static const char bad[] = "__kernel void broken(__global float *x)\n"
                              "{\n"
                              "    x[0] = hd_undeclared_identifier;\n"
                              "}\n";
    cl_program p = (cl_program)1;
    assert_int_equal(hd__cl_program(rt, ctx, bad, "-DSOMETHING=1", &p), HD_ERR_BUILD);
    assert_null(p);
    expect_message_contains(ctx, "clBuildProgram failed: CL_BUILD_PROGRAM_FAILURE (-11)");
    expect_message_contains(ctx, "-DSOMETHING=1");
    expect_message_contains(ctx, "hd_undeclared_identifier");
    /* Not kept: the next call tries again and fails the same way. */
    assert_int_equal(hd__cl_program(rt, ctx, bad, "-DSOMETHING=1", &p), HD_ERR_BUILD);
    /* Options the compiler refuses are a build failure too. */
    assert_int_equal(hd__cl_program(rt, ctx, double_source, "-no-such-option", &p), HD_ERR_BUILD);
    assert_int_equal(hd__cl_program(rt, ctx, NULL, NULL, &p), HD_ERR_INTERNAL);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

/* ---- errors ---- */

static void test_error_codes_map_to_status_with_name_and_code(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    assert_int_equal(hd__cl_error(ctx, CL_MEM_OBJECT_ALLOCATION_FAILURE, "clCreateBuffer"),
                     HD_ERR_DEVICE_OUT_OF_MEMORY);
    expect_message_contains(ctx, "clCreateBuffer failed: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)");
    assert_int_equal(hd__cl_error(ctx, CL_OUT_OF_RESOURCES, "x"), HD_ERR_DEVICE_OUT_OF_MEMORY);
    expect_message_contains(ctx, "x failed: CL_OUT_OF_RESOURCES (-5)");
    assert_int_equal(hd__cl_error(ctx, CL_INVALID_VALUE, "y"), HD_ERR_DEVICE);
    expect_message_contains(ctx, "y failed: CL_INVALID_VALUE (-30)");
    /* as CLBlast's status says it: a device that cannot take the work now, not a lost one */
    assert_int_equal(hd__cl_error(ctx, CL_OUT_OF_HOST_MEMORY, "y"), HD_ERR_DEVICE_OUT_OF_MEMORY);
    assert_int_equal(hd__cl_error(ctx, CL_BUILD_PROGRAM_FAILURE, "z"), HD_ERR_BUILD);
    assert_int_equal(hd__cl_error(ctx, -9999, "w"), HD_ERR_DEVICE);
    expect_message_contains(ctx, "w failed: CL_UNKNOWN_ERROR (-9999)");
    assert_string_equal(hd__cl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    assert_string_equal(hd__cl_error_name(CL_INVALID_KERNEL_ARGS), "CL_INVALID_KERNEL_ARGS");
    assert_int_equal(hd__cl_error(NULL, CL_INVALID_VALUE, "no context"), HD_ERR_DEVICE);
    hd_context_destroy(ctx);
}

/* ---- timing ---- */

static void test_capture_times_enqueued_commands(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    enum { N = 4096 };
    struct hd_device_buffer *buf;
    assert_int_equal(hd__cl_buffer_acquire(rt, ctx, N * sizeof(float), &buf), HD_OK);
    assert_int_equal(hd__cl_zero(rt, ctx, hd__cl_mem(buf->mem), N * sizeof(float)), HD_OK);
    enqueue_double(rt, ctx, double_source, buf, N, NULL); /* built before timing */

    assert_null(hd__cl_event_slot(rt));
    hd__cl_capture_begin(rt);
    /* More commands than one chunk of slots, so slots of several chunks are combined. */
    for (int i = 0; i < 70; i++)
        enqueue_double(rt, ctx, double_source, buf, N, hd__cl_event_slot(rt));
    double seconds = -1.0;
    assert_int_equal(hd__cl_capture_end(rt, ctx, &seconds), HD_OK);
    assert_true(seconds > 0.0 && seconds < 10.0);
    assert_null(hd__cl_event_slot(rt));

    /* Nothing captured: zero. A capture left open is dropped by the next begin and destroy. */
    hd__cl_capture_begin(rt);
    assert_int_equal(hd__cl_capture_end(rt, ctx, &seconds), HD_OK);
    assert_true(seconds == 0.0);
    hd__cl_capture_begin(rt);
    enqueue_double(rt, ctx, double_source, buf, N, hd__cl_event_slot(rt));
    hd__cl_capture_begin(rt);
    enqueue_double(rt, ctx, double_source, buf, N, hd__cl_event_slot(rt));
    hd__cl_buffer_release(rt, buf);
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

/* The calibration measurements, on whichever runtime the device runs. */
static void test_calibration_timings_are_positive(void **state)
{
    (void)state;
    hd_context *ctx = hd_test_context(false);
    const hd_device_measure_ops *m = hd__registry_device_measure();
    assert_non_null(m);
    double bw = 0.0, dev = 0.0, host = 0.0;
    assert_int_equal(m->copy_bandwidth(ctx->rt, ctx, (size_t)1 << 20, &bw), HD_OK);
    assert_true(bw > 1e6);
    double none = 1.0;
    assert_int_equal(m->copy_bandwidth(ctx->rt, ctx, 0, &none), HD_ERR_INVALID_ARGUMENT);
    assert_true(none == 0.0);
    assert_int_equal(m->launch_latency(ctx->rt, ctx, &dev, &host), HD_OK);
    assert_true(dev >= 0.0 && dev < 1.0);
    assert_true(host > 0.0 && host < 1.0);
    print_message("%s: copy %.3f GB/s, empty launch %.1f us device, %.1f us host\n",
                  hd_context_device_runtime(ctx), bw * 1e-9, dev * 1e6, host * 1e6);
    hd_context_destroy(ctx);
}

/* ---- without a device ---- */

static void test_disable_opencl_environment_gives_cpu_only(void **state)
{
    (void)state;
    setenv("HD_DISABLE_OPENCL", "1", 1);
    setenv("HD_DEVICE", "no-such-device-anywhere", 1); /* not even looked at */
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, NULL), HD_OK);
    unsetenv("HD_DISABLE_OPENCL");
    unsetenv("HD_DEVICE");
    assert_null(ctx->rt);
    assert_string_equal(hd_context_device_name(ctx), "none");
    assert_true(hd_context_has_backend(ctx, HD_BACKEND_CPU));
    assert_false(hd_context_has_backend(ctx, HD_BACKEND_FUSED));
    assert_int_equal(hd_sync(ctx), HD_OK);
    hd_context_destroy(ctx);
}

/* Runs in the child with no OpenCL vendor: returns the number of the failed check, or 0. */
static int no_platform_child(void)
{
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, NULL) != HD_OK)
        return 1;
    if (ctx->rt != NULL || strcmp(hd_context_device_name(ctx), "none") != 0)
        return 2;
    if (!hd_context_has_backend(ctx, HD_BACKEND_CPU) ||
        hd_context_has_backend(ctx, HD_BACKEND_FUSED))
        return 3;
    float one[1] = {3.0f}, got[1] = {0.0f};
    hd_tensor *t = NULL;
    if (hd_tensor_create(ctx, 1, 1, &t) != HD_OK || hd_tensor_write(t, one) != HD_OK ||
        hd_softmax(ctx, t, t) != HD_OK || hd_tensor_read(t, got) != HD_OK || got[0] != 1.0f)
        return 4;
    hd_tensor_destroy(t);
    hd_cl_runtime *rt = NULL;
    if (hd__cl_runtime_create(ctx, NULL, &rt) != HD_ERR_BACKEND_UNAVAILABLE || rt != NULL)
        return 5;
    if (hd__cl_runtime_create(ctx, "0", &rt) != HD_ERR_INVALID_ARGUMENT ||
        strstr(hd_context_last_error(ctx), "none") == NULL)
        return 6;
    hd_context_destroy(ctx);
    setenv("HD_DEVICE", "0", 1); /* asked for a device that is not there: an error */
    if (hd_context_create(&ctx, NULL) != HD_ERR_INVALID_ARGUMENT || ctx != NULL)
        return 7;
    return 0;
}

static void test_no_platform_gives_cpu_only_without_error(void **state)
{
    (void)state;
    char dir[] = "/tmp/hd-test-no-vendors-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("OCL_ICD_VENDORS", dir, 1);
        setenv("OPENCL_VENDOR_PATH", dir, 1);
        unsetenv("HD_DEVICE");
        execl(self, self, "--no-platform-child", (char *)NULL);
        _exit(100);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    rmdir(dir);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("no-platform child failed check %d", WEXITSTATUS(status));
}

/* Removes this run's cache directory: <root>/hd-dispatch/programs/<entries>. */
static int remove_cache_root(void **state)
{
    (void)state;
    if (cache_root[0] == '\0')
        return 0;
    char dir[512], path[1024];
    snprintf(dir, sizeof dir, "%s/hd-dispatch/programs", cache_root);
    DIR *d = opendir(dir);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/hd-dispatch", cache_root);
    rmdir(dir);
    rmdir(cache_root);
    return 0;
}

/* A kernel the compiler warns about builds, and whatever the compiler prints while building
 * stays off the process's standard error: it becomes a note of the context (its log callback),
 * never an error. The source is new on every run, so that no program cache (ours or the
 * driver's) skips the compiler. */
static void test_build_output_goes_to_a_note_not_stderr(void **state)
{
    (void)state;
    hd_context *ctx = message_context();
    hd_cl_runtime *rt = open_runtime(ctx, NULL);
    char source[256];
    snprintf(source, sizeof source,
             "/* %llu */\n#warning hd test warning\n"
             "__kernel void hd_test_warns(__global int *x) { x[0] = 1; }\n",
             (unsigned long long)hd_test_seed() ^ (unsigned long long)getpid());
    hd_test_stderr capture;
    hd_test_stderr_capture(&capture);
    cl_program program;
    hd__error_clear(ctx);
    hd_test_notes_clear();
    hd_status s = hd__cl_program(rt, ctx, source, NULL, &program);
    char seen[512];
    size_t n = hd_test_stderr_release(&capture, seen, sizeof seen);
    assert_int_equal(s, HD_OK);
    if (n > 0)
        fail_msg("the build printed on stderr: %s", seen);
    print_message("notes after the build: '%s'\n", hd_test_notes());
    if (hd_test_notes()[0] != '\0' && strstr(hd_test_notes(), "kernel build") == NULL)
        fail_msg("the compiler's output is not in a kernel-build note: %s", hd_test_notes());
    assert_string_equal(hd_context_last_error(ctx), ""); /* a note is no error */
    hd__cl_runtime_destroy(rt);
    hd_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-platform-child") == 0)
        return no_platform_child();
    hd_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery_default_finds_a_device),
        cmocka_unit_test(test_build_output_goes_to_a_note_not_stderr),
        cmocka_unit_test(test_discovery_index_and_name_pick_the_device),
        cmocka_unit_test(test_discovery_no_match_is_an_error_listing_devices),
        cmocka_unit_test(test_discovery_hd_device_environment_selects),
        cmocka_unit_test(test_pool_reuses_released_buffers),
        cmocka_unit_test(test_pool_keeps_at_most_its_cap),
        cmocka_unit_test(test_pinned_cap_is_the_devices_across_runtimes),
        cmocka_unit_test(test_pool_too_large_is_device_out_of_memory),
        cmocka_unit_test(test_upload_download_round_trips_odd_sizes),
        cmocka_unit_test(test_uploads_queue_many_then_read_in_order),
        cmocka_unit_test(test_tensor_migrates_host_device_cpu_and_back),
        cmocka_unit_test(test_program_cache_cold_warm_and_damaged),
        cmocka_unit_test(test_program_cache_trusts_only_private_entries),
        cmocka_unit_test(test_program_cache_fifo_entry_is_rebuilt_without_blocking),
        cmocka_unit_test(test_program_cache_key_includes_options),
        cmocka_unit_test(test_program_cache_off_writes_nothing),
        cmocka_unit_test(test_program_cache_default_follows_the_driver),
        cmocka_unit_test(test_program_memory_cache_by_address_and_text),
        cmocka_unit_test(test_program_build_failure_reports_the_log),
        cmocka_unit_test(test_build_ahead_builds_for_later_use),
        cmocka_unit_test(test_error_codes_map_to_status_with_name_and_code),
        cmocka_unit_test(test_capture_times_enqueued_commands),
        cmocka_unit_test(test_calibration_timings_are_positive),
        cmocka_unit_test(test_disable_opencl_environment_gives_cpu_only),
        cmocka_unit_test(test_no_platform_gives_cpu_only_without_error),
    };
    return cmocka_run_group_tests(tests, NULL, remove_cache_root);
}
