/* The runtime's state, shared by the files of backends/opencl/ and by nothing else. */
#ifndef HD_BACKENDS_OPENCL_INTERNAL_H
#define HD_BACKENDS_OPENCL_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "backends/opencl/runtime.h"
#include "backends/runtime/pool.h" /* the pool's size classes */

struct hd_cl_program_entry {
    const char *source; /* the caller's pointer: the fast path compares it first */
    uint64_t source_hash;
    size_t source_len;
    char *options;
    cl_program program;
    struct hd_cl_program_entry *next;
};

struct hd_cl_kernel_entry {
    cl_program program;
    char *name;
    cl_kernel kernel;
    struct hd_cl_kernel_entry *next;
};

struct hd_cl_staging; /* host copies behind non-blocking uploads */

#define HD_CL_EVENT_CHUNK 64
struct hd_cl_event_chunk {
    cl_event events[HD_CL_EVENT_CHUNK];
    size_t used;
    struct hd_cl_event_chunk *next;
};

struct hd_cl_runtime {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_command_queue map_queue; /* pinned host memory's maps (host_memory.c); NULL until used */
    /* pinned host memory handed out by every context on this device in the process (the
     * device's count, kept by discovery), and its cap */
    atomic_size_t *pinned_bytes;
    size_t pinned_cap;
    bool is_gpu;
    /* What the driver's program binaries are (describe(), device.c): PTX (NVIDIA's), which the
     * sm_90a rebuild reads back; and PoCL's, which keeps a kernel cache of its own and, asked
     * for a program's binary, first compiles every kernel of the program for any work-group
     * size (the launches compile only the kernels they run, for their own size). */
    bool binaries_are_ptx;
    bool driver_caches_kernels;
    cl_ulong max_alloc;
    char device_name[256];
    char driver_version[128];
    char platform_name[256];
    char platform_version[256];

    /* Buffer pool. */
    hd_pool pool;
    cl_int pool_error; /* the last failed clCreateBuffer's code, for its message */
    size_t live_buffers;

    struct hd_cl_staging *staging, *staging_tail; /* oldest first */
    size_t staged_bytes;

    /* Programs and kernels, built once. */
    struct hd_cl_program_entry *programs;
    struct hd_cl_kernel_entry *kernels;
    bool disk_cache_enabled;
    char cache_dir[1024]; /* "" when no directory could be named */
    struct hd_cl_program_counters program_counters;
    struct hd_cl_build_ahead *ahead; /* build-ahead workers and their queue; NULL: none */

    /* Event capture. */
    bool capturing;
    struct hd_cl_event_chunk *capture_head, *capture_tail;
};

uint64_t hd__cl_hash(const void *data, size_t len, uint64_t seed);
#define HD_CL_HASH_SEED 0xcbf29ce484222325ull

/* The pool of rt's buffers, over a device of global_mem bytes whose largest allocation is
 * max_alloc (0: no limit). */
void hd__cl_pool_init(hd_cl_runtime *rt, cl_ulong global_mem, cl_ulong max_alloc);
/* Drops every pooled (idle) buffer: on destroy, and before retrying an allocation that failed. */
void hd__cl_pool_trim(hd_cl_runtime *rt);
/* Frees the host copies of uploads that have completed; all of them when wait is true. */
void hd__cl_staging_reclaim(hd_cl_runtime *rt, bool wait);
void hd__cl_programs_destroy(hd_cl_runtime *rt);
void hd__cl_capture_discard(hd_cl_runtime *rt);

/* The on-disk binary cache (binary_cache.c). load returns a built program or NULL. Both count
 * into *count (the runtime's, or a build-ahead worker's own) and may run on any thread: an
 * entry is written to a temporary file and renamed into place. */
cl_program hd__cl_disk_cache_load(hd_cl_runtime *rt, struct hd_cl_program_counters *count,
                                  uint64_t source_hash, const char *options);
void hd__cl_disk_cache_store(hd_cl_runtime *rt, struct hd_cl_program_counters *count,
                             uint64_t source_hash, const char *options, cl_program program);
/* A program the runtime does not hold yet: loaded from the disk cache, else built from source
 * (and stored there). ctx (NULL: none) takes a failure's message; printed gets what the
 * compiler printed on a build from source (NUL-terminated, truncated to cap). Any thread may
 * call it with ctx NULL and counters of its own (build_ahead.c). */
hd_status hd__cl_program_load_or_build(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                       size_t len, uint64_t hash, const char *options,
                                       struct hd_cl_program_counters *count, char *printed,
                                       size_t cap, cl_program *out);
/* Build ahead (build_ahead.c): the program of (source, options) if a worker built it, else
 * NULL, which leaves the build to the caller: none was asked for, it was still queued (taken
 * off the queue), or it failed (the caller's own build then says why). Waits for one under
 * way. Notes on ctx what its compiler printed. */
cl_program hd__cl_build_ahead_take(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                   const char *options);
/* Stops the workers (joined) and frees what they built and nobody took: on destroy. */
void hd__cl_build_ahead_destroy(hd_cl_runtime *rt);
/* Reads $HD_PROGRAM_CACHE (default: on, but for a driver that caches its kernels itself); a
 * value it does not understand is a note on ctx. */
void hd__cl_disk_cache_init(hd_context *ctx, hd_cl_runtime *rt);

#endif
