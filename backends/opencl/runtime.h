/*
 * The OpenCL runtime shared by the CLBlast and fused backends: one device, one in-order queue
 * with profiling enabled, a pool of device buffers, and programs built once per context and
 * kept on disk as binaries. Every OpenCL failure becomes an hd_status with the raw code and
 * the call's name in the context's message.
 */
#ifndef HD_BACKENDS_OPENCL_RUNTIME_H
#define HD_BACKENDS_OPENCL_RUNTIME_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#include "backends/runtime/runtime.h"

/* A device buffer's memory (struct hd_device_buffer, backends/runtime/runtime.h) as OpenCL's. */
static inline cl_mem hd__cl_mem(hd_devmem mem)
{
    return (cl_mem)(void *)mem;
}

typedef struct hd_cl_runtime hd_cl_runtime;

/* Finds the device over all platforms (spec: NULL for the first GPU, else the first device; an
 * index into the list of every platform's devices; or a case-insensitive substring of the
 * device or platform name), creates the context and the in-order profiling queue. Returns
 * HD_ERR_BACKEND_UNAVAILABLE with a message when spec is NULL and there is no OpenCL device,
 * HD_ERR_INVALID_ARGUMENT with the list of devices when spec matches none. */
hd_status hd__cl_runtime_create(hd_context *ctx, const char *device_spec, hd_cl_runtime **out);
void hd__cl_runtime_destroy(hd_cl_runtime *rt); /* waits for the queue; NULL is a no-op */

cl_context hd__cl_context(const hd_cl_runtime *rt);
cl_device_id hd__cl_device(const hd_cl_runtime *rt);
cl_command_queue hd__cl_queue(const hd_cl_runtime *rt);
const char *hd__cl_device_name(const hd_cl_runtime *rt);
const char *hd__cl_driver_version(const hd_cl_runtime *rt);
const char *hd__cl_platform_name(const hd_cl_runtime *rt);
bool hd__cl_device_is_gpu(const hd_cl_runtime *rt);
/* The limits the backends plan launches by (backends/runtime/runtime.h). */
hd_status hd__cl_runtime_info(hd_cl_runtime *rt, hd_context *ctx, hd_runtime_info *out);

/* Maps err (not CL_SUCCESS) to a status, recording "<what> failed: CL_... (code)". */
hd_status hd__cl_error(hd_context *ctx, cl_int err, const char *what);
const char *hd__cl_error_name(cl_int err);

/* Waits for the queue; a late failure is reported here. */
hd_status hd__cl_finish(hd_cl_runtime *rt, hd_context *ctx);

/* A scratch buffer of bytes that a backend keeps outside the pool across calls: created and
 * touched as the pool's are (so that a full device says so here, not at a later launch), the
 * pool's idle buffers trimmed and the creation tried again where the device is full. *out NULL
 * and the error said, naming what, on failure. */
hd_status hd__cl_scratch_create(hd_cl_runtime *rt, hd_context *ctx, size_t bytes, const char *what,
                                cl_mem *out);
/* Frees scratch memory; the driver keeps it until the queued commands that use it ran. NULL:
 * no-op. */
void hd__cl_scratch_free(hd_cl_runtime *rt, cl_mem mem);

/* Device memory from the pool, released back to it. Contents are undefined. */
hd_status hd__cl_buffer_acquire(hd_cl_runtime *rt, hd_context *ctx, size_t bytes,
                                struct hd_device_buffer **out);
void hd__cl_buffer_release(hd_cl_runtime *rt, struct hd_device_buffer *buf);

/* Copies between host and a device buffer. Upload returns once src may be reused; download
 * waits for the data (and so for all earlier work on the queue). */
hd_status hd__cl_upload(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                        const void *src, size_t bytes);
hd_status hd__cl_download(hd_cl_runtime *rt, hd_context *ctx, struct hd_device_buffer *buf,
                          void *dst, size_t bytes);
/* Queued: bytes of mem zeroed; bytes copied between two buffers. */
hd_status hd__cl_zero(hd_cl_runtime *rt, hd_context *ctx, cl_mem mem, size_t bytes);
hd_status hd__cl_copy(hd_cl_runtime *rt, hd_context *ctx, cl_mem dst, size_t dst_offset, cl_mem src,
                      size_t src_offset, size_t bytes);

/* Pinned (page-locked) host memory of at least bytes, contents undefined, or NULL where the
 * runtime cannot give it (the caller then takes ordinary memory); freed by hd__cl_host_free
 * before the runtime is destroyed. Neither waits for the runtime's queue. */
void *hd__cl_host_alloc(hd_cl_runtime *rt, size_t bytes);
void hd__cl_host_free(hd_cl_runtime *rt, void *p);

/* Returns the program for (source, options), building it on first use: from the on-disk
 * binary cache when an entry for this device, driver, source and options is there and loads,
 * else from source (then stored). The program stays owned by the runtime. A build failure
 * returns HD_ERR_BUILD with the build log in the context's message.
 * source is recognised by its address first, so the text at an address must not change while
 * the runtime lives (the embedded kernel arrays never do); the same text at another address
 * finds the same program through its hash. options may be NULL. The disk cache lives under
 * $XDG_CACHE_HOME/hd-dispatch/programs (else ~/.cache/...); $HD_PROGRAM_CACHE=0 turns it off
 * (it is off by default on PoCL, which caches its own builds; =1 turns it on there).
 * Instructions of NVIDIA's sm_90a target (wgmma) are written in inline PTX behind the comment
 * "// @sm_90a@ ": where the built PTX carries them, the program is rebuilt from that PTX with
 * the marks removed and the target set to sm_90a (HD_ERR_BUILD where that fails). */
hd_status hd__cl_program(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                         const char *options, cl_program *out);

/* The program's binary as text, NUL-terminated (the caller frees it): on NVIDIA's driver, the
 * PTX. NULL with *failed false where the program has no binary, true where it could not be
 * read (no memory, the driver refused). */
char *hd__cl_program_text(cl_program program, bool *failed);

/* The PCI address of an NVIDIA device (cl_nv_device_attribute_query); false elsewhere. */
bool hd__cl_nv_pci_address(const hd_cl_runtime *rt, int *domain, int *bus, int *slot);

/* Kernel from a program built by hd__cl_program(), created once and kept by the runtime. */
hd_status hd__cl_kernel(hd_cl_runtime *rt, hd_context *ctx, cl_program program, const char *name,
                        cl_kernel *out);

/* The kernel's largest work-group on this device. */
hd_status hd__cl_kernel_max_group(hd_cl_runtime *rt, hd_context *ctx, cl_kernel k, size_t *out);
/* Sets an argument (value NULL: __local memory of size bytes); queues k over groups[0] x
 * groups[1] groups of group x 1 work-items, its event in the capture's slot. */
hd_status hd__cl_set_arg(hd_context *ctx, cl_kernel k, unsigned index, size_t size,
                         const void *value);
hd_status hd__cl_launch(hd_cl_runtime *rt, hd_context *ctx, cl_kernel k, const size_t groups[2],
                        size_t group);

/*
 * Event capture, for timing with device events. Between capture_begin and capture_end every
 * command the backends enqueue passes hd__cl_event_slot(rt) as its event; capture_end waits
 * and returns the device time from the first command's start to the last one's end.
 * Outside a capture hd__cl_event_slot() returns NULL.
 */
void hd__cl_capture_begin(hd_cl_runtime *rt);
cl_event *hd__cl_event_slot(hd_cl_runtime *rt);
/* During a capture, enqueues a marker whose event opens the timed span: for a library call
 * (CLBlast) that enqueues several commands but reports the event of its last one only. The
 * span then also holds the host time the library spends between its commands. Outside a
 * capture it does nothing. */
hd_status hd__cl_capture_mark(hd_cl_runtime *rt, hd_context *ctx);
hd_status hd__cl_capture_end(hd_cl_runtime *rt, hd_context *ctx, double *seconds);

/* Counters, for tests and diagnostics. */
struct hd_cl_pool_counters {
    size_t allocations; /* clCreateBuffer calls */
    size_t reuses;      /* acquisitions served from the pool */
    size_t pooled_bytes;
};
struct hd_cl_program_counters {
    size_t memory_hits;   /* found already built in this runtime */
    size_t disk_loads;    /* loaded from a binary cache entry */
    size_t disk_rejects;  /* entries found but ignored: damaged, mismatched, or failed to load */
    size_t source_builds; /* compiled from source */
    size_t disk_stores;   /* entries written */
    size_t ahead_takes;   /* built by the build-ahead workers, then asked for (the loads,
                             builds and stores of these counted above; of those never asked
                             for, none) */
};
void hd__cl_pool_counters(const hd_cl_runtime *rt, struct hd_cl_pool_counters *out);
void hd__cl_program_counters(const hd_cl_runtime *rt, struct hd_cl_program_counters *out);

/* Build ahead (build_ahead.c): up to 4 worker threads (more are capped) that build programs
 * queued by hd__cl_build_ahead before hd__cl_program is asked for them, which then takes them
 * built (or waits for one under way). start is idempotent (0 workers: none); queueing a
 * program already built or queued does nothing; cancel drops what is queued and not yet
 * started, the failed builds and all but the newest 64 built and not asked for, and with wait
 * returns once the builds under way have ended (the caller's timings on the host then have
 * the cores). The workers stop with the runtime. */
hd_status hd__cl_build_ahead_start(hd_cl_runtime *rt, hd_context *ctx, unsigned workers);
void hd__cl_build_ahead(hd_cl_runtime *rt, const char *source, const char *options);
void hd__cl_build_ahead_cancel(hd_cl_runtime *rt, bool wait);
/* Programs queued or being built (tests wait for 0). */
size_t hd__cl_build_ahead_waiting(hd_cl_runtime *rt);
/* The cache file that holds (source, options) on this device; false when the disk cache is
 * off or the path does not fit. */
bool hd__cl_program_cache_file(const hd_cl_runtime *rt, const char *source, const char *options,
                               char *path, size_t cap);

#endif
