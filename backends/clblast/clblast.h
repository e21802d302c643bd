/*
 * The CLBlast backend: SGEMM, strided-batched SGEMM and LoRA's forward and backward as CLBlast
 * GEMMs on the OpenCL runtime's queue, and the per-device GEMM parameters CLBlast 1.5.3 lacks.
 *
 * Parameters. CLBlast picks the parameters of its GEMM kernels from a database compiled into it;
 * devices it does not know (the H100, PoCL on this CPU) get a vendor or generic default.
 * CLBlastOverrideParameters() replaces them per (device, kernel) for the whole process, and the
 * next call compiles a program for the new values (programs are cached per value string). This
 * file's "parameter set" covers three CLBlast kernels, each either present with all of its
 * parameters or absent:
 *   Xgemm        the tiled kernel of the indirect path (large problems, inputs padded first)
 *   XgemmDirect  the one-kernel path for small problems
 *   GemmRoutine  XGEMM_MIN_INDIRECT_SIZE: the indirect path runs when m*n*k >= size^3
 * A call runs with the device's base set (a verified known-good set for the device, else
 * CLBlast's shipped values) with the call's variant, if any, laid over it. A set is used only
 * after it passed the legality rules below, CLBlast accepted and compiled it, and a random GEMM
 * through each of its paths matched a float64 host reference; otherwise the previous set stays.
 *
 * Thread safety. CLBlast 1.5.3 keeps process-wide caches (parameter database, binaries) whose
 * fill is check-then-store: two threads that miss the same entry at once both build it and the
 * second store throws. That happens on every first use of a key, not only a device's first call
 * (a new parameter set, the batched routine, a second context on the same device), and the
 * overrides themselves are process-wide per device. So every CLBlast call, and every
 * apply-then-run sequence, holds one process-wide mutex. A call holds it only while CLBlast
 * enqueues (microseconds), or while it compiles on a first use, which another thread would have
 * to wait for anyway.
 */
#ifndef HD_BACKENDS_CLBLAST_CLBLAST_H
#define HD_BACKENDS_CLBLAST_CLBLAST_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "backends/opencl/runtime.h"

#include <clblast_c.h>

typedef enum hd_clblast_kernel {
    HD_CLBLAST_XGEMM = 0,
    HD_CLBLAST_XGEMM_DIRECT,
    HD_CLBLAST_GEMM_ROUTINE,
    HD_CLBLAST_KERNEL_COUNT
} hd_clblast_kernel;

/* The Xgemm kernel's parameters, named as in CLBlast. Tiles: MWG×NWG outputs per work-group,
 * KWG deep; MDIMC×NDIMC work-items; MDIMA/NDIMB reshape the work-group to load A/B tiles;
 * KWI unrolls the k loop; VWM/VWN vector widths; SA/SB cache A/B in local memory; STRM/STRN
 * strided per-thread access; GEMMK 0 (the regular kernel) or 1 (2-D register tiling, KREG). */
typedef struct hd_clblast_xgemm {
    size_t gemmk, kreg, kwg, kwi, mdima, mdimc, mwg, ndimb, ndimc, nwg, sa, sb, strm, strn, vwm,
        vwn;
} hd_clblast_xgemm;

/* The XgemmDirect kernel's parameters: WGD×WGD tiles, the same roles with a D suffix, PADA/PADB
 * pad the local-memory tiles against bank conflicts. */
typedef struct hd_clblast_xgemm_direct {
    size_t kwid, mdimad, mdimcd, ndimbd, ndimcd, pada, padb, vwmd, vwnd, wgd;
} hd_clblast_xgemm_direct;

typedef struct hd_clblast_params {
    bool has[HD_CLBLAST_KERNEL_COUNT];
    hd_clblast_xgemm xgemm;
    hd_clblast_xgemm_direct direct;
    size_t min_indirect_size; /* GemmRoutine's XGEMM_MIN_INDIRECT_SIZE */
} hd_clblast_params;

/* What legality depends on, read from the device once. */
typedef struct hd_clblast_device {
    cl_device_id id;
    bool is_gpu;
    size_t local_mem_bytes;
    size_t max_group_size;
    size_t max_item[2];
    char name[256];
    char vendor[128];
} hd_clblast_device;

/* Longest variant string of a complete set, NUL included. */
#define HD_CLBLAST_VARIANT_MAX 512

/* ---- parameter sets (params.c): pure functions, no OpenCL calls ---- */

const char *hd__clblast_kernel_name(hd_clblast_kernel k); /* "Xgemm", "XgemmDirect", ... */
/* Kernel k's parameter names and p's values, in CLBlast's order; returns how many (<= 16). */
size_t hd__clblast_kernel_fields(hd_clblast_kernel k, const char **names, size_t *values,
                                 const hd_clblast_params *p);

/* Whether p can run on dev: every present kernel's divisibility rules (KWG % KWI, MWG %
 * (MDIMC*VWM), MWG % (MDIMA*VWM), KWG % (MDIMC*NDIMC/MDIMA), ... as the kernels compute their
 * per-thread work from integer quotients), vector widths of 1..16, flags of 0/1, work-group size
 * and local memory within the device's limits. On false, why gets the first broken rule. */
bool hd__clblast_params_legal(const hd_clblast_params *p, const hd_clblast_device *dev, char *why,
                              size_t cap);

/* "KWG=32 KWI=2 ..." with every parameter of every present kernel, in CLBlast's name order per
 * kernel. Returns the length snprintf would; cap >= HD_CLBLAST_VARIANT_MAX always fits. */
int hd__clblast_params_format(const hd_clblast_params *p, char *buf, size_t cap);

/* Parses a variant string: NAME=value pairs separated by spaces, names as in CLBlast. A kernel
 * is present when any of its names is; then all of its names must be. Unknown names, repeats,
 * malformed numbers: HD_ERR_INVALID_ARGUMENT with the reason in ctx's message (ctx may be NULL).
 * NULL or "" gives the empty set. */
hd_status hd__clblast_params_parse(hd_context *ctx, const char *variant, hd_clblast_params *out);

/* Lays every kernel present in over onto base. */
void hd__clblast_params_merge(hd_clblast_params *base, const hd_clblast_params *over);
bool hd__clblast_params_equal(const hd_clblast_params *a, const hd_clblast_params *b);

/* The values CLBlast 1.5.3 ships for a device it has no entry for, by vendor and type (NVIDIA
 * GPU, Intel CPU as PoCL reports, anything else); all three kernels present. */
void hd__clblast_params_shipped(const hd_clblast_device *dev, hd_clblast_params *out);

/* Known-good sets measured on a device, best first; 0 when the device has none. Only kernel's
 * part is present in each. */
size_t hd__clblast_params_known(const hd_clblast_device *dev, hd_clblast_kernel kernel,
                                hd_clblast_params *out, size_t max);

/*
 * Up to max legal sets for one kernel, for the autotuner, deterministic: the known-good sets for
 * this device first, then CLBlast's shipped set, then a search space (tile sizes 16..128,
 * work-groups 8..32 per side, vector widths 1..8, local-memory caching on or off, ...) ordered
 * by a heuristic that favours what fast GEMMs on the device class use (GPU: 256 work-items with
 * 8×8 outputs each and both tiles in local memory; CPU: fewer work-items, wide vectors). No
 * duplicates. Returns how many were written.
 */
size_t hd__clblast_params_enumerate(const hd_clblast_device *dev, hd_clblast_kernel kernel,
                                    hd_clblast_params *out, size_t max);

/* ---- the backend (backend.c, device.c, verify.c, gemm.c, lora.c) ---- */

typedef struct hd_clblast_state {
    hd_clblast_device dev;
    hd_cl_runtime *rt;      /* the context's device runtime */
    hd_clblast_params base; /* complete: what a call without a variant runs with */
    char variant_text[64][HD_CLBLAST_VARIANT_MAX]; /* the strings variants() hands out */
} hd_clblast_state;

hd_status hd__clblast_device_query(hd_context *ctx, hd_cl_runtime *rt, hd_clblast_device *out);

/* Maps a CLBlast status (not success) to an hd_status, with "<what>: CLBlast <name> (<code>)"
 * in ctx's message: resource and allocation failures are device memory, kInvalid* arguments
 * are internal errors (the backend checks its arguments first), build failures are HD_ERR_BUILD,
 * other OpenCL errors HD_ERR_DEVICE, kNotImplemented unsupported. */
hd_status hd__clblast_error(hd_context *ctx, CLBlastStatusCode code, const char *what);
const char *hd__clblast_status_name(CLBlastStatusCode code);

/* The process-wide CLBlast lock (see the top of this file). */
void hd__clblast_lock(void);
void hd__clblast_unlock(void);

/* The tuning cache's CLBlast base set (backends/backend.h's cached_params), laid over st->base
 * for the calls to come and verified when a call first needs it; one that cannot be read is a
 * note. */
void hd__clblast_take_cached_base(hd_clblast_state *st, hd_context *ctx, const char *value);

/* With the lock held (hd__clblast_lock): makes CLBlast run with st->base laid under
 * variant (NULL: base alone),
 * verifying that combination first if this process has not yet, and overriding CLBlast's
 * parameters only when they differ from what the device runs with now. A set that is illegal,
 * rejected or wrong returns its error; the device keeps its previous parameters. */
hd_status hd__clblast_prepare(hd_clblast_state *st, hd_context *ctx, const char *variant);

/* For the autotuner. Checks p (laid over the base) on the device: legality, CLBlast's override,
 * compilation and a random GEMM through each path against the float64 reference; the device's
 * parameters are restored afterwards either way. HD_OK when the set may be used. */
hd_status hd__clblast_params_verify(hd_clblast_state *st, hd_context *ctx,
                                    const hd_clblast_params *p);

/* Makes p (laid over the current base) the base set of st, after hd__clblast_params_verify;
 * on any failure the previous base stays. */
hd_status hd__clblast_params_apply(hd_clblast_state *st, hd_context *ctx,
                                   const hd_clblast_params *p);

/* The set a complete set is verified as: the same kernels with XGEMM_MIN_INDIRECT_SIZE lowered
 * to a few tiles (64 at most), so that verification costs GEMMs of a few tiles whatever the
 * set's threshold (verify.c). */
void hd__clblast_verify_params(const hd_clblast_params *effective, hd_clblast_params *probe);

/* The m, n, k of the GEMMs verification runs under probe: two through the indirect path (two
 * tiles of Xgemm and a remainder, at least the threshold on each side), and two through the
 * direct path below it when the threshold leaves room. Returns how many (2 or 4). */
size_t hd__clblast_verify_problems(const hd_clblast_params *probe, size_t dims[4][3]);

/* With the lock held, CLBlast running probe (hd__clblast_verify_params): runs the problems of
 * hd__clblast_verify_problems on random data and compares a sample of outputs with float64
 * dot products (verify.c). */
hd_status hd__clblast_check_results(hd_clblast_state *st, hd_context *ctx,
                                    const hd_clblast_params *probe);

/* Row-major SGEMM on device buffers with leading dimensions and offsets (in floats), so that
 * sub-matrix views can use it: C = alpha*op(A)*op(B) + beta*C, m, n, k >= 1. Takes the lock
 * unless the caller holds it (locked = true). */
hd_status hd__clblast_sgemm(hd_clblast_state *st, hd_context *ctx, bool locked, bool trans_a, bool trans_b, size_t m,
                            size_t n, size_t k, float alpha, cl_mem a, size_t a_off, size_t lda,
                            cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off,
                            size_t ldc);

hd_status hd__clblast_gemm(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__clblast_gemm_batched(void *state, hd_context *ctx, const hd_gemm_args *args);
hd_status hd__clblast_lora(void *state, hd_context *ctx, const hd_lora_args *args);
hd_status hd__clblast_lora_backward(void *state, hd_context *ctx,
                                    const hd_lora_backward_args *args);
hd_status hd__clblast_scale(void *state, hd_context *ctx, const hd_tensor *t, float beta);

#endif
