/* Programs and kernels, built once per runtime: found in memory, else loaded from the on-disk
 * binary cache, else compiled from source (and then stored). */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/opencl/internal.h"
#include "core/error.h"

/* FNV-1a, 64 bits: for cache keys and checksums, not for security. In memory a program is
 * found by its source compared whole; on disk an entry is checked against its full key string
 * (device, driver, options), where the source is its hash alone: two kernel sources of one
 * hash would share an entry, a chance of about 2^-64 for any two sources the library has. */
uint64_t hd__cl_hash(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static char *copy_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c != NULL)
        memcpy(c, s, n);
    return c;
}

static hd_status remember(hd_cl_runtime *rt, hd_context *ctx, const char *source, uint64_t hash,
                          size_t len, const char *options, cl_program program)
{
    struct hd_cl_program_entry *e = calloc(1, sizeof *e);
    char *opts = copy_string(options);
    if (e == NULL || opts == NULL) {
        free(e);
        free(opts);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to keep a program");
    }
    *e = (struct hd_cl_program_entry){source, hash, len, opts, program, rt->programs};
    rt->programs = e;
    return HD_OK;
}

/* Records the failure with the compiler's log appended. */
static hd_status build_failed(hd_cl_runtime *rt, hd_context *ctx, cl_program program, cl_int err,
                              const char *options)
{
    hd_status s = hd__cl_error(ctx, err, "clBuildProgram");
    hd__error_append(ctx, " (options \"");
    hd__error_append(ctx, options);
    hd__error_append(ctx, "\"); build log:\n");
    size_t size = 0;
    if (clGetProgramBuildInfo(program, rt->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) !=
            CL_SUCCESS ||
        size == 0) {
        hd__error_append(ctx, "(none)");
        return s;
    }
    char *log = malloc(size + 1);
    if (log == NULL) {
        hd__error_append(ctx, "(no memory to fetch it)");
        return s;
    }
    if (clGetProgramBuildInfo(program, rt->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) !=
        CL_SUCCESS)
        log[0] = '\0';
    log[size] = '\0';
    hd__error_append(ctx, log);
    free(log);
    return s;
}

/* Standard error is the process's: while any build runs, it goes to one temporary file (under
 * stderr_lock: builds under way, the file, the descriptor it replaced), and each build reads
 * back what was printed between its start and its end. */
static pthread_mutex_t stderr_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned stderr_builds;
static FILE *stderr_file;
static int stderr_saved = -1;

/* Where the text printed from now on will start in the shared file; -1 where there is none
 * (the redirection failed: the build runs, its text goes where stderr went). */
static off_t capture_begin(void)
{
    pthread_mutex_lock(&stderr_lock);
    if (stderr_builds++ == 0) {
        fflush(stderr);
        stderr_file = tmpfile();
        if (stderr_file != NULL)
            (void)fcntl(fileno(stderr_file), F_SETFD, FD_CLOEXEC);
        stderr_saved = stderr_file != NULL ? fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0) : -1;
        if (stderr_saved >= 0 && dup2(fileno(stderr_file), STDERR_FILENO) < 0) {
            close(stderr_saved);
            stderr_saved = -1;
        }
    }
    off_t at = stderr_saved >= 0 ? lseek(STDERR_FILENO, 0, SEEK_CUR) : -1;
    pthread_mutex_unlock(&stderr_lock);
    return at;
}

/* Reads what was printed since `from` into captured (NUL-terminated, truncated to cap) and, for
 * the last build under way, puts standard error back. */
static void capture_end(off_t from, char *captured, size_t cap)
{
    captured[0] = '\0';
    pthread_mutex_lock(&stderr_lock);
    if (from >= 0) {
        fflush(stderr);
        off_t to = lseek(STDERR_FILENO, 0, SEEK_CUR);
        size_t want = to > from ? (size_t)(to - from) : 0;
        ssize_t n = pread(fileno(stderr_file), captured, want < cap ? want : cap - 1, from);
        size_t len = n > 0 ? (size_t)n : 0;
        while (len > 0 && (captured[len - 1] == '\n' || captured[len - 1] == ' '))
            len--; /* a note is one sentence */
        captured[len] = '\0';
    }
    if (--stderr_builds == 0) {
        if (stderr_saved >= 0) {
            fflush(stderr);
            dup2(stderr_saved, STDERR_FILENO);
            close(stderr_saved);
            stderr_saved = -1;
        }
        if (stderr_file != NULL)
            fclose(stderr_file);
        stderr_file = NULL;
    }
    pthread_mutex_unlock(&stderr_lock);
}

/*
 * clBuildProgram with whatever the compiler prints on the process's standard error caught in
 * captured (NUL-terminated, truncated to cap). The compilers print there besides the build log
 * (PoCL's clang, NVIDIA's front end: "1 warning generated."), which garbled the tools' progress
 * lines and the user's own output; the text becomes a note of the context instead (its log
 * callback, or stderr with $HD_LOG=1). The redirection is of the whole process while any build runs
 * (builds ahead on other threads included: build_ahead.c), so it also catches what other threads
 * write meanwhile (docs/environment.md#threads-and-standard-error), and two builds at once each
 * read what both printed; the descriptors it opens are closed on exec.
 */
static cl_int build_capturing_stderr(hd_cl_runtime *rt, cl_program program, const char *options,
                                     char *captured, size_t cap)
{
    off_t from = capture_begin();
    cl_int err = clBuildProgram(program, 1, &rt->device, options, NULL, NULL);
    capture_end(from, captured, cap);
    return err;
}

char *hd__cl_program_text(cl_program program, bool *failed)
{
    size_t size = 0;
    *failed =
        clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS;
    if (*failed || size == 0)
        return NULL;
    char *text = malloc(size + 1);
    *failed = text == NULL;
    if (text == NULL)
        return NULL;
    unsigned char *bins[1] = {(unsigned char *)text};
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
        free(text);
        *failed = true;
        return NULL;
    }
    text[size] = '\0';
    return text;
}

/*
 * Architecture-specific PTX. NVIDIA's OpenCL compiler targets the plain architecture (PTX
 * ".target sm_90"), where instructions of the architecture-specific target (sm_90a: wgmma)
 * are refused. A kernel writes such instructions behind HD_CL_PTX_SM90A, a PTX comment, so
 * that the build from source succeeds; this turns the built PTX into the sm_90a program: the
 * marked lines uncommented, the target renamed, the text built again as a binary. Only PTX of
 * target sm_90 carrying the marker is touched; any other program is left as built.
 */
#define HD_CL_PTX_SM90A "// @sm_90a@ "

static hd_status retarget_sm90a(hd_cl_runtime *rt, hd_context *ctx, const char *options,
                                cl_program *program)
{
    if (!rt->binaries_are_ptx)
        return HD_OK; /* another device, or an emulation: nothing marked was compiled, and
                         reading the binary back would cost PoCL a build of every kernel */
    bool failed;
    char *ptx = hd__cl_program_text(*program, &failed);
    if (failed) /* built, but not retargeted: its marked instructions would be comments */
        return hd__error(ctx, HD_ERR_BUILD,
                         "cannot read the built PTX back to retarget it to sm_90a (options "
                         "\"%.200s\")",
                         options);
    if (ptx == NULL || strstr(ptx, HD_CL_PTX_SM90A) == NULL) {
        free(ptx);
        return HD_OK; /* nothing marked was compiled (another device, or an emulation) */
    }
    static const char target[] = ".target sm_90";
    char *at = strstr(ptx, target);
    char after = at != NULL ? at[sizeof target - 1] : '\0';
    if (at == NULL || (after != ',' && after != '\n' && after != ' ')) {
        free(ptx);
        return hd__error(ctx, HD_ERR_BUILD,
                         "the kernel's sm_90a instructions need PTX of target sm_90 (options "
                         "\"%.200s\")",
                         options);
    }
    /* the patched text is shorter (markers out) but for the one "a" of the target */
    size_t len = strlen(ptx);
    char *out = malloc(len + 2), *w = out;
    if (out == NULL) {
        free(ptx);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to retarget a program");
    }
    size_t marker = strlen(HD_CL_PTX_SM90A);
    for (const char *r = ptx; *r != '\0';) {
        if (r == at) {
            memcpy(w, target, sizeof target - 1);
            w += sizeof target - 1;
            *w++ = 'a';
            r += sizeof target - 1;
        } else if (strncmp(r, HD_CL_PTX_SM90A, marker) == 0) {
            r += marker;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    free(ptx);
    size_t out_len = strlen(out) + 1;
    const unsigned char *bin = (const unsigned char *)out;
    cl_int status = CL_SUCCESS, err;
    cl_program patched =
        clCreateProgramWithBinary(rt->context, 1, &rt->device, &out_len, &bin, &status, &err);
    free(out);
    if (patched == NULL || err != CL_SUCCESS || status != CL_SUCCESS) {
        if (patched != NULL)
            clReleaseProgram(patched);
        return hd__cl_error(ctx, err != CL_SUCCESS ? err : status,
                            "clCreateProgramWithBinary (sm_90a PTX)");
    }
    char printed[1024];
    err = build_capturing_stderr(rt, patched, options, printed, sizeof printed);
    if (err != CL_SUCCESS) {
        hd_status s = build_failed(rt, ctx, patched, err, options);
        clReleaseProgram(patched);
        return s;
    }
    clReleaseProgram(*program);
    *program = patched;
    return HD_OK;
}

static hd_status build_from_source(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                   size_t len, const char *options, char *printed, size_t cap,
                                   cl_program *out)
{
    cl_int err;
    cl_program program = clCreateProgramWithSource(rt->context, 1, &source, &len, &err);
    if (program == NULL)
        return hd__cl_error(ctx, err, "clCreateProgramWithSource");
    err = build_capturing_stderr(rt, program, options, printed, cap);
    if (err != CL_SUCCESS) {
        hd_status s = build_failed(rt, ctx, program, err, options);
        if (printed[0] != '\0') {
            hd__error_append(ctx, "\ncompiler output:\n");
            hd__error_append(ctx, printed);
        }
        clReleaseProgram(program);
        return s;
    }
    if (strstr(source, HD_CL_PTX_SM90A) != NULL) {
        hd_status s = retarget_sm90a(rt, ctx, options, &program);
        if (s != HD_OK) {
            clReleaseProgram(program);
            return s;
        }
    }
    *out = program;
    return HD_OK;
}

hd_status hd__cl_program_load_or_build(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                       size_t len, uint64_t hash, const char *options,
                                       struct hd_cl_program_counters *count, char *printed,
                                       size_t cap, cl_program *out)
{
    printed[0] = '\0';
    cl_program program =
        rt->disk_cache_enabled ? hd__cl_disk_cache_load(rt, count, hash, options) : NULL;
    if (program == NULL) {
        hd_status s = build_from_source(rt, ctx, source, len, options, printed, cap, &program);
        if (s != HD_OK)
            return s;
        count->source_builds++;
        if (rt->disk_cache_enabled)
            hd__cl_disk_cache_store(rt, count, hash, options, program);
    }
    *out = program;
    return HD_OK;
}

hd_status hd__cl_program(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                         const char *options, cl_program *out)
{
    *out = NULL;
    if (source == NULL)
        return hd__error(ctx, HD_ERR_INTERNAL, "hd__cl_program: source is NULL");
    if (options == NULL)
        options = "";
    for (struct hd_cl_program_entry *e = rt->programs; e != NULL; e = e->next) {
        if (e->source == source && strcmp(e->options, options) == 0) {
            rt->program_counters.memory_hits++;
            *out = e->program;
            return HD_OK;
        }
    }
    size_t len = strlen(source);
    uint64_t hash = hd__cl_hash(source, len, HD_CL_HASH_SEED);
    cl_program program = NULL;
    for (struct hd_cl_program_entry *e = rt->programs; e != NULL; e = e->next) {
        if (e->source_hash == hash && e->source_len == len && strcmp(e->options, options) == 0 &&
            memcmp(e->source, source, len) == 0) {
            rt->program_counters.memory_hits++;
            program = e->program;
            clRetainProgram(program); /* the entry for this address holds its own reference */
            break;
        }
    }
    if (program == NULL)
        program = hd__cl_build_ahead_take(rt, ctx, source, options);
    if (program == NULL) {
        char printed[1024];
        hd_status s = hd__cl_program_load_or_build(rt, ctx, source, len, hash, options,
                                                   &rt->program_counters, printed,
                                                   sizeof printed, &program);
        if (s != HD_OK)
            return s;
        if (printed[0] != '\0') /* a note, not an error: the call goes on */
            hd__note(ctx, "kernel build (options \"%.200s\") printed: %.600s", options,
                     printed);
    }
    hd_status s = remember(rt, ctx, source, hash, len, options, program);
    if (s != HD_OK) {
        clReleaseProgram(program);
        return s;
    }
    *out = program;
    return HD_OK;
}

hd_status hd__cl_kernel(hd_cl_runtime *rt, hd_context *ctx, cl_program program, const char *name,
                        cl_kernel *out)
{
    *out = NULL;
    for (struct hd_cl_kernel_entry *e = rt->kernels; e != NULL; e = e->next) {
        if (e->program == program && strcmp(e->name, name) == 0) {
            *out = e->kernel;
            return HD_OK;
        }
    }
    cl_int err;
    cl_kernel kernel = clCreateKernel(program, name, &err);
    if (kernel == NULL) {
        char what[200];
        snprintf(what, sizeof what, "clCreateKernel(\"%.150s\")", name);
        return hd__cl_error(ctx, err, what);
    }
    struct hd_cl_kernel_entry *e = calloc(1, sizeof *e);
    char *copy = copy_string(name);
    if (e == NULL || copy == NULL) {
        free(e);
        free(copy);
        clReleaseKernel(kernel);
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory to keep a kernel");
    }
    *e = (struct hd_cl_kernel_entry){program, copy, kernel, rt->kernels};
    rt->kernels = e;
    *out = kernel;
    return HD_OK;
}

void hd__cl_programs_destroy(hd_cl_runtime *rt)
{
    while (rt->kernels != NULL) {
        struct hd_cl_kernel_entry *e = rt->kernels;
        rt->kernels = e->next;
        clReleaseKernel(e->kernel);
        free(e->name);
        free(e);
    }
    while (rt->programs != NULL) {
        struct hd_cl_program_entry *e = rt->programs;
        rt->programs = e->next;
        clReleaseProgram(e->program);
        free(e->options);
        free(e);
    }
}

void hd__cl_program_counters(const hd_cl_runtime *rt, struct hd_cl_program_counters *out)
{
    *out = rt->program_counters;
}

hd_status hd__cl_kernel_max_group(hd_cl_runtime *rt, hd_context *ctx, cl_kernel k, size_t *out)
{
    cl_int err =
        clGetKernelWorkGroupInfo(k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof *out, out, NULL);
    return err == CL_SUCCESS ? HD_OK : hd__cl_error(ctx, err, "clGetKernelWorkGroupInfo");
}

hd_status hd__cl_set_arg(hd_context *ctx, cl_kernel k, unsigned index, size_t size,
                         const void *value)
{
    cl_int err = clSetKernelArg(k, index, size, value);
    return err == CL_SUCCESS ? HD_OK : hd__cl_error(ctx, err, "clSetKernelArg");
}

hd_status hd__cl_launch(hd_cl_runtime *rt, hd_context *ctx, cl_kernel k, const size_t groups[2],
                        size_t group)
{
    size_t global[2] = {groups[0] * group, groups[1]}, local[2] = {group, 1};
    cl_int err = clEnqueueNDRangeKernel(rt->queue, k, 2, NULL, global, local, 0, NULL,
                                        hd__cl_event_slot(rt));
    return err == CL_SUCCESS ? HD_OK : hd__cl_error(ctx, err, "clEnqueueNDRangeKernel");
}
