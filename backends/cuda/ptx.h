/*
 * The PTX of NVIDIA's OpenCL compiler, rewritten for the CUDA driver (ptx.c). NVIDIA's OpenCL
 * program binary is PTX; it differs from what cuModuleLoadData takes in a few OpenCL-only
 * parts, which hd__ptx_for_cuda rewrites and nothing else:
 *
 *   - ".target sm_XX, texmode_independent": the texture mode flag is dropped;
 *   - ".entry NAME(": made ".visible .entry", so that cuModuleGetFunction finds it;
 *   - a parameter's ".ptr .global" / ".ptr .shared" qualifiers: dropped (CUDA's entries take
 *     plain integers) with the pointee's ".align";
 *   - "mov.b32 %r, %envregN;": the launch's group offsets (N = 0..2) and global offsets
 *     (N = 3..5), which OpenCL's driver sets where it splits a large NDRange and which a CUDA
 *     launch never has, become 0; the groups of the whole launch (N = 6..8) become
 *     %nctaid.x/y/z;
 *   - a __local pointer parameter (".ptr .shared"): OpenCL's driver passes an address in the
 *     group's shared memory, CUDA passes what the host gives. The host gives an offset into
 *     the launch's dynamic shared memory, and each "ld.param" of such a parameter is followed
 *     by the addition of the dynamic shared memory's address (a ".extern .shared" array the
 *     rewrite declares, aligned to 128 bytes), so the kernel finds its __local arrays wherever
 *     the driver put the dynamic part;
 *   - the ".metadata_section { ... }" block (OpenCL's kernel attributes) and the trailing NUL
 *     bytes of the binary: dropped.
 *
 * It also notes, without changing them, the entries whose own body (not a .func it calls)
 * holds griddepcontrol.wait.
 *
 * Anything else OpenCL-specific that CUDA would run differently is refused, never guessed: an
 * %envreg beyond 8 or read otherwise than by that mov, a ".ptr" of another state space
 * (__constant or __private pointers), a __local pointer parameter read otherwise than by
 * ld.param, texture and sampler references. The caller then runs that program on OpenCL.
 */
#ifndef HD_BACKENDS_CUDA_PTX_H
#define HD_BACKENDS_CUDA_PTX_H

#include <stdbool.h>
#include <stddef.h>

/* Parameters of one kernel at most: adamw.cl's 32 tensors a launch take 202. */
#define HD_PTX_MAX_PARAMS 256

/* One kernel parameter as the rewritten entry takes it. */
typedef struct hd_ptx_param {
    bool local;     /* a __local pointer: the host passes an offset into dynamic shared memory */
    unsigned bytes; /* its size: 4 or 8 for a __local pointer's offset */
} hd_ptx_param;

/* One entry of the rewritten module. */
typedef struct hd_ptx_entry {
    char name[128];
    bool waits_on_previous; /* its body holds griddepcontrol.wait (launch.cl's
                               AFTER_PREVIOUS_LAUNCH): the runtime may launch it as a
                               programmatic dependent launch */
    unsigned param_count;
    hd_ptx_param params[HD_PTX_MAX_PARAMS];
    struct hd_ptx_entry *next;
} hd_ptx_entry;

/* The rewrite of a module: its text (NUL-terminated) and its entries. */
typedef struct hd_ptx_module {
    char *text;
    size_t len;
    hd_ptx_entry *entries;
} hd_ptx_module;

/* Rewrites the len bytes of ptx (trailing NULs allowed) as the header says. true with *out
 * filled (free it with hd__ptx_module_free); false with the reason in why (a line naming the
 * construct and its line number) when the PTX holds something the rewrite does not know or
 * memory ran out. */
bool hd__ptx_for_cuda(const char *ptx, size_t len, hd_ptx_module *out, char *why, size_t why_cap);
void hd__ptx_module_free(hd_ptx_module *m);
/* The entry named name, or NULL. */
const hd_ptx_entry *hd__ptx_entry(const hd_ptx_module *m, const char *name);

#endif
