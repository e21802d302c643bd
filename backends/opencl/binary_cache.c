/*
 * The on-disk program-binary cache. One file per (device, driver, platform version, source,
 * options), named by a hash of that key, under $XDG_CACHE_HOME/hd-dispatch/programs (else
 * ~/.cache/hd-dispatch/programs); $HD_PROGRAM_CACHE=0 (or off, no, false) turns it off.
 * It is off by default on PoCL, which keeps its own cache of built programs and kernels: there
 * it would save nothing, and reading a program's binary back makes PoCL compile every kernel
 * of the program first (for any work-group size), where a launch compiles only its kernel.
 * $HD_PROGRAM_CACHE=1 turns it on there.
 *
 * File layout, integers little-endian:
 *   0  magic "HDCLBIN\n"        8 bytes
 *   8  format version           u32
 *  12  key length               u32
 *  16  payload length           u64
 *  24  payload checksum         u64 (FNV-1a)
 *  32  key text, then the payload: the driver's program binary.
 * An entry is used only when every field checks out, the key equals this runtime's key in
 * full and the file has exactly the announced length; anything else is ignored and rebuilt.
 * Entries are written to a temporary file and renamed, so readers never see a partial one.
 * A payload is code the device runs (native code on PoCL): the checksum finds damage, not a
 * forged entry, so an entry is read only from a directory this user owns that no one else may
 * write to, and only when this user owns it too; nothing is stored in any other directory.
 * The cache lives under an absolute $XDG_CACHE_HOME or $HOME alone, never under the working
 * directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/opencl/internal.h"
#include "core/env.h"
#include "core/file.h"

#define CACHE_MAGIC        "HDCLBIN\n"
#define CACHE_FORMAT       1u
#define CACHE_HEADER_BYTES 32
#define CACHE_KEY_MAX      65536u
#define CACHE_PAYLOAD_MAX  ((uint64_t)1 << 30)

void hd__cl_disk_cache_init(hd_context *ctx, hd_cl_runtime *rt)
{
    rt->cache_dir[0] = '\0';
    rt->disk_cache_enabled = false;
    if (!hd__env_bool(ctx, "HD_PROGRAM_CACHE", !rt->driver_caches_kernels))
        return;
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s/hd-dispatch/programs", xdg);
    else if (home != NULL && home[0] == '/')
        n = snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s/.cache/hd-dispatch/programs", home);
    else
        return;
    if (n < 0 || (size_t)n >= sizeof rt->cache_dir - 32) {
        rt->cache_dir[0] = '\0';
        return;
    }
    rt->disk_cache_enabled = true;
}

/* The full key; NULL when out of memory. */
static char *cache_key(const hd_cl_runtime *rt, uint64_t source_hash, const char *options)
{
    const char *fmt = "hd-dispatch program\ndevice=%s\ndriver=%s\nplatform=%s\nsource=%016llx\n"
                      "options=%s\n";
    int n = snprintf(NULL, 0, fmt, rt->device_name, rt->driver_version, rt->platform_version,
                     (unsigned long long)source_hash, options);
    if (n < 0 || (unsigned)n >= CACHE_KEY_MAX)
        return NULL;
    char *key = malloc((size_t)n + 1);
    if (key != NULL)
        snprintf(key, (size_t)n + 1, fmt, rt->device_name, rt->driver_version, rt->platform_version,
                 (unsigned long long)source_hash, options);
    return key;
}

static bool entry_path(const hd_cl_runtime *rt, const char *key, char *path, size_t cap)
{
    uint64_t h = hd__cl_hash(key, strlen(key), HD_CL_HASH_SEED);
    int n = snprintf(path, cap, "%s/%016llx.clbin", rt->cache_dir, (unsigned long long)h);
    return n > 0 && (size_t)n < cap;
}

bool hd__cl_program_cache_file(const hd_cl_runtime *rt, const char *source, const char *options,
                               char *path, size_t cap)
{
    if (!rt->disk_cache_enabled)
        return false;
    char *key = cache_key(rt, hd__cl_hash(source, strlen(source), HD_CL_HASH_SEED),
                          options != NULL ? options : "");
    bool ok = key != NULL && entry_path(rt, key, path, cap);
    free(key);
    return ok;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Whether st, a file or directory of the cache, is this user's and writable by no one else. */
static bool owned_and_private(const struct stat *st)
{
    return st->st_uid == geteuid() && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

/* Whether the cache directory may be trusted with entries: see the top of this file. */
static bool cache_dir_trusted(const hd_cl_runtime *rt)
{
    struct stat st;
    return lstat(rt->cache_dir, &st) == 0 && S_ISDIR(st.st_mode) && owned_and_private(&st);
}

/* Reads and checks the entry; returns its payload (free it) or NULL. */
static unsigned char *read_entry(FILE *f, const char *key, size_t *payload_len)
{
    unsigned char head[CACHE_HEADER_BYTES];
    struct stat st;
    if (fread(head, 1, sizeof head, f) != sizeof head || fstat(fileno(f), &st) != 0 ||
        !owned_and_private(&st))
        return NULL;
    size_t key_len = strlen(key);
    uint64_t len = get_u64(head + 16);
    if (memcmp(head, CACHE_MAGIC, 8) != 0 || get_u32(head + 8) != CACHE_FORMAT ||
        get_u32(head + 12) != key_len || len == 0 || len > CACHE_PAYLOAD_MAX ||
        (uint64_t)st.st_size != CACHE_HEADER_BYTES + key_len + len)
        return NULL;
    char *stored_key = malloc(key_len);
    unsigned char *payload = malloc((size_t)len);
    bool ok = stored_key != NULL && payload != NULL &&
              fread(stored_key, 1, key_len, f) == key_len &&
              memcmp(stored_key, key, key_len) == 0 && fread(payload, 1, (size_t)len, f) == len &&
              hd__cl_hash(payload, (size_t)len, HD_CL_HASH_SEED) == get_u64(head + 24);
    free(stored_key);
    if (!ok) {
        free(payload);
        return NULL;
    }
    *payload_len = (size_t)len;
    return payload;
}

static cl_program program_from_binary(hd_cl_runtime *rt, const unsigned char *payload, size_t len,
                                      const char *options)
{
    cl_int err, binary_status;
    cl_program program = clCreateProgramWithBinary(rt->context, 1, &rt->device, &len, &payload,
                                                   &binary_status, &err);
    if (program == NULL)
        return NULL;
    if (err != CL_SUCCESS || binary_status != CL_SUCCESS ||
        clBuildProgram(program, 1, &rt->device, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(program);
        return NULL;
    }
    return program;
}

cl_program hd__cl_disk_cache_load(hd_cl_runtime *rt, struct hd_cl_program_counters *count,
                                  uint64_t source_hash, const char *options)
{
    char path[1200];
    char *key = cache_key(rt, source_hash, options);
    if (key == NULL || !entry_path(rt, key, path, sizeof path)) {
        free(key);
        return NULL;
    }
    FILE *f = hd__file_open_regular(path, NULL, 0);
    if (f == NULL) {
        free(key);
        if (errno != ENOENT) /* a FIFO, a directory, no permission: rebuilt and replaced */
            count->disk_rejects++;
        return NULL; /* no entry yet */
    }
    if (!cache_dir_trusted(rt)) {
        fclose(f);
        free(key);
        count->disk_rejects++;
        return NULL;
    }
    size_t len = 0;
    unsigned char *payload = read_entry(f, key, &len);
    fclose(f);
    free(key);
    cl_program program = payload != NULL ? program_from_binary(rt, payload, len, options) : NULL;
    free(payload);
    if (program == NULL)
        count->disk_rejects++;
    else
        count->disk_loads++;
    return program;
}

static bool make_dirs(const char *dir)
{
    char buf[1024];
    size_t n = strlen(dir);
    if (n >= sizeof buf)
        return false;
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return false;
        buf[i] = c;
    }
    return true;
}

/* The driver's binary of a program built for the one device; NULL if it has none. */
static unsigned char *program_binary(cl_program program, size_t *len)
{
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
            CL_SUCCESS ||
        size == 0 || size > CACHE_PAYLOAD_MAX)
        return NULL;
    unsigned char *bin = malloc(size);
    if (bin == NULL)
        return NULL;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS) {
        free(bin);
        return NULL;
    }
    *len = size;
    return bin;
}

static bool write_entry(int fd, const char *key, const unsigned char *bin, size_t len)
{
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        close(fd);
        return false;
    }
    size_t key_len = strlen(key);
    unsigned char head[CACHE_HEADER_BYTES];
    memcpy(head, CACHE_MAGIC, 8);
    put_u32(head + 8, CACHE_FORMAT);
    put_u32(head + 12, (uint32_t)key_len);
    put_u64(head + 16, len);
    put_u64(head + 24, hd__cl_hash(bin, len, HD_CL_HASH_SEED));
    bool ok = fwrite(head, 1, sizeof head, f) == sizeof head &&
              fwrite(key, 1, key_len, f) == key_len && fwrite(bin, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* A failure here only costs the next run a rebuild, so it is not reported. */
void hd__cl_disk_cache_store(hd_cl_runtime *rt, struct hd_cl_program_counters *count,
                             uint64_t source_hash, const char *options, cl_program program)
{
    char path[1200], tmp[1300];
    size_t len = 0;
    unsigned char *bin = NULL;
    char *key = cache_key(rt, source_hash, options);
    if (key == NULL || !entry_path(rt, key, path, sizeof path) || !make_dirs(rt->cache_dir) ||
        !cache_dir_trusted(rt) || (bin = program_binary(program, &len)) == NULL) {
        free(key);
        return;
    }
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        if (write_entry(fd, key, bin, len) && rename(tmp, path) == 0)
            count->disk_stores++;
        else
            unlink(tmp);
    }
    free(bin);
    free(key);
}
