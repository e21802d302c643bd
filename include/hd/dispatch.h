/*
 * hybrid dispatch: the dense operations of LoRA fine-tuning (GEMM, the LoRA forward pass,
 * row softmax, layer norm, RMS norm) run on whichever backend is fastest for that operation
 * and shape on this machine: CLBlast's GEMM on OpenCL, the library's own fused OpenCL kernels,
 * or OpenBLAS and C kernels on the CPU.
 *
 * Conventions that hold for every function below:
 *
 * - Tensors are 2-D, row-major, float32 (int32 for token ids and targets, hd_dtype; an
 *   operation given an int32 tensor where it takes floats, or the reverse, returns
 *   HD_ERR_INVALID_ARGUMENT). A tensor lives on the host, on the context's OpenCL
 *   device, or both; the library moves it to wherever the next operation runs, and chooses
 *   where that is by counting the copy: a tensor moves once what staying has cost exceeds one
 *   copy (hd_tensor_prefetch() places it up front). Callers only ever see host memory,
 *   through hd_tensor_write() and hd_tensor_read().
 * - Functions that can fail return an hd_status: HD_OK (0) on success, a negative code on error.
 *   hd_status_str() names a code; hd_context_last_error() gives the detail of the most recent
 *   failure on a context (the OpenCL error code, the kernel build log, the file path).
 * - Bad input never crashes and never half-writes: a NULL argument, mismatched shapes, an
 *   output that aliases a tensor it may not (any input of GEMM or LoRA; each function says
 *   which in-place use it allows), a tensor of another context, or a non-finite eps returns
 *   an error status, and every output is left exactly as it was.
 * - Operations are asynchronous when they run on a device: they return once the work is queued.
 *   hd_tensor_read(), hd_sync(), and any CPU operation that needs a result wait for it. An error
 *   that the device reports late is returned by the call that waits. One exception: copying
 *   a tensor of more than 4 MiB from the host to the device (hd_tensor_prefetch(), or a device
 *   call on host data) waits until the device has taken the host's bytes, and with them for
 *   the work queued before; smaller copies are staged aside (up to 64 MiB in flight) and do not
 *   wait.
 * - A context is used by one thread at a time. Separate contexts may be used concurrently from
 *   separate threads, and any number of threads may call hd_context_create() at once: OpenCL
 *   discovery runs once per process (again only after one that ran out of host memory).
 * - When the backend chosen for a call fails (it declines, its device fails, or the tuned
 *   parameters it was given are refused), the next backend runs the call; no backend writes an
 *   output before every stage of its plan has accepted its arguments and parameters. A device
 *   that fails between the launches of a backend that has begun writing the outputs of a call
 *   that reads them (accumulating gradients, or in place) cannot be undone: the call then
 *   returns the device's error without another backend, and those outputs are undefined.
 *   Where every backend fails, the call returns the status of the first backend in its plan that
 *   failed rather than declined (HD_ERR_UNSUPPORTED only where every one declined), whichever
 *   ran last; the message names each backend's failure.
 * - Destroying NULL is a harmless no-op.
 */
#ifndef HD_DISPATCH_H
#define HD_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/export.h>
#include <hd/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One table of status codes generates the enum and the strings of hd_status_str() and
 * hd_status_name(). Codes are stable: new ones are only ever appended. */
#define HD_STATUS_MAP(X)                                                                       \
    X(OK, 0, "success")                                                                        \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                            \
    X(ERR_SHAPE_MISMATCH, -2, "tensor shapes do not match")                                    \
    X(ERR_SIZE_OVERFLOW, -3, "tensor size overflows the address space")                        \
    X(ERR_ALIASING, -4, "output tensor aliases an input tensor")                               \
    X(ERR_WRONG_CONTEXT, -5, "tensor belongs to another context")                              \
    X(ERR_OUT_OF_MEMORY, -6, "out of host memory")                                             \
    X(ERR_UNSUPPORTED, -7, "operation or shape not supported by the backend")                  \
    X(ERR_BACKEND_UNAVAILABLE, -8, "backend not available on this machine")                    \
    X(ERR_DEVICE, -9, "device error")                                                          \
    X(ERR_DEVICE_OUT_OF_MEMORY, -10, "out of device memory")                                   \
    X(ERR_BUILD, -11, "kernel build failed")                                                   \
    X(ERR_IO, -12, "file input/output failed")                                                 \
    X(ERR_CACHE_INVALID, -13, "tuning cache file is invalid")                                  \
    X(ERR_INTERNAL, -14, "internal error")

typedef enum hd_status {
#define HD_STATUS_ENUM(name, code, text) HD_##name = code,
    HD_STATUS_MAP(HD_STATUS_ENUM)
#undef HD_STATUS_ENUM
} hd_status;

/* The backends an operation can run on, and the plans that compose two of them: one table
 * generates the enum and hd_backend_name(). Values are stable: new ones are only ever
 * appended. HD_BACKEND_CLBLAST_FUSED is not a backend of its own but a plan the scheduler
 * composes from CLBlast's GEMM and the fused backend's epilogue; it is named and forced like
 * a backend. */
#define HD_BACKEND_MAP(X)                                                                      \
    X(AUTO, "auto")           /* let the dispatcher choose (tuned table, then cost model) */   \
    X(CPU, "cpu")             /* OpenBLAS and the library's C kernels */                       \
    X(CLBLAST, "clblast")     /* CLBlast on the OpenCL device */                               \
    X(FUSED, "fused")         /* the library's own OpenCL kernels, one launch per operation */ \
    X(CLBLAST_FUSED, "clblast+fused") /* plan: CLBlast GEMM, then a fused OpenCL epilogue */

typedef enum hd_backend {
#define HD_BACKEND_ENUM(name, text) HD_BACKEND_##name,
    HD_BACKEND_MAP(HD_BACKEND_ENUM)
#undef HD_BACKEND_ENUM
    HD_BACKEND_COUNT
} hd_backend;

/* The operations, one table generating the enum and hd_op_name(). Values are stable: new
 * operations are only ever appended. */
#define HD_OP_MAP(X)                                                                           \
    X(GEMM, "gemm")                                                                            \
    X(LORA, "lora")                                                                            \
    X(SOFTMAX, "softmax")                                                                      \
    X(LAYER_NORM, "layer_norm")                                                                \
    X(RMS_NORM, "rms_norm")                                                                    \
    X(GEMM_BATCHED, "gemm_batched") /* hd_gemm_batched() */                                    \
    X(SOFTMAX_BACKWARD, "softmax_backward")                                                    \
    X(LAYER_NORM_BACKWARD, "layer_norm_backward")                                              \
    X(RMS_NORM_BACKWARD, "rms_norm_backward")                                                  \
    X(LORA_BACKWARD, "lora_backward")                                                          \
    X(SWIGLU, "swiglu")                                                                        \
    X(SWIGLU_BACKWARD, "swiglu_backward")                                                      \
    X(GELU, "gelu")                                                                            \
    X(GELU_BACKWARD, "gelu_backward")                                                          \
    X(ADD, "add")                                                                              \
    X(ADD_RMS_NORM, "add_rms_norm")                                                            \
    X(ADD_RMS_NORM_BACKWARD, "add_rms_norm_backward")                                          \
    X(ROPE, "rope")                                                                            \
    X(ATTENTION, "attention")                                                                  \
    X(ATTENTION_BACKWARD, "attention_backward")                                                \
    X(CROSS_ENTROPY, "cross_entropy")                                                          \
    X(LINEAR_CROSS_ENTROPY, "linear_cross_entropy")                                            \
    X(EMBEDDING, "embedding")

typedef enum hd_op {
#define HD_OP_ENUM(name, text) HD_OP_##name,
    HD_OP_MAP(HD_OP_ENUM)
#undef HD_OP_ENUM
    HD_OP_COUNT
} hd_op;

/* The arithmetic of GEMM, batched GEMM and the GEMM parts of LoRA (row ops are always fp32).
 * Chosen per context; a mode the device cannot run falls back to HD_PRECISION_FP32 with a
 * note (hd_context_options.log), and hd_context_gemm_precision() tells which one runs. */
typedef enum hd_precision {
    HD_PRECISION_FP32 = 0, /* fp32 FMA arithmetic on every backend (the default) */
    HD_PRECISION_FP32X3,   /* "3xTF32": each operand split into two TF32 parts, three
                              tensor-core products with fp32 accumulation; error against
                              float64 within twice that of fp32, or 2^-20 of sum |a*b| on
                              short sums; an infinite input gives NaN where it reaches
                              (NVIDIA sm_80+ devices) */
    HD_PRECISION_TF32,     /* one TF32 tensor-core product, like PyTorch's allow_tf32: operands
                              reduced to 10 mantissa bits (rounded, or truncated on Hopper's
                              warpgroup kernel), error within 2^-9 of sum |a*b| (NVIDIA sm_80+
                              devices) */
    HD_PRECISION_COUNT
} hd_precision;

typedef struct hd_context hd_context; /* devices, queues, caches, tuning table */
typedef struct hd_tensor hd_tensor;   /* 2-D row-major, fp32 or int32, on host or a device */

/* A tensor's element type. Values are stable: new ones are only ever appended. */
typedef enum hd_dtype {
    HD_DTYPE_FP32 = 0, /* float: every operation's activations, weights and gradients */
    HD_DTYPE_I32,      /* int32_t: token ids and targets (hd_embedding_ids(),
                          hd_cross_entropy_ids(), hd_linear_cross_entropy_ids()), written
                          from the host only; no operation takes or writes them elsewhere */
    HD_DTYPE_COUNT
} hd_dtype;

/* Options for hd_context_create(). Fill with hd_context_options_init() first, then change
 * what you need; strings are copied, so they only have to live through the call. Every field
 * left at its default falls back to the environment variable named beside it. */
typedef struct hd_context_options {
    const char *device;     /* OpenCL device: index or name substring; NULL: $HD_DEVICE, else
                               the first GPU, else the first device */
    const char *backends;   /* forced backends, as $HD_BACKEND: "cpu" or "gemm=clblast,..." */
    const char *tune_cache; /* tuning cache path; NULL: $HD_TUNE_CACHE, else the default path
                               under $XDG_CACHE_HOME or ~/.cache. "" is no path: no cache is
                               read, with a note (no_tune_cache says so without one) */
    bool disable_opencl;    /* true: CPU backend only (also $HD_DISABLE_OPENCL=1) */
    bool no_tune_cache;     /* true: do not read any tuning cache */
    bool warmup;            /* true: build every kernel at creation (see hd_context_warmup) */
    hd_precision gemm_precision; /* GEMM arithmetic; HD_PRECISION_FP32 (the default):
                                    $HD_GEMM_PRECISION ("fp32", "fp32x3", "tf32"), else fp32 */
    int threads;            /* threads of the CPU backend, shared by OpenBLAS and the row
                               kernels; 0: $HD_THREADS, else OpenBLAS's own count (which
                               follows $OPENBLAS_NUM_THREADS, else the cores available) as it
                               was before any context set one. OpenBLAS's count is one per
                               process: each of the context's CPU products sets it to the
                               context's count first where another context left another */
    /* Notes: what the library did that is worth knowing but is no error (a backend that is
     * not available here, a tuning cache that was ignored and why, a call that ran on its
     * second backend after the first failed). log(log_user, message) is called with one
     * sentence, valid during the call, from the thread using the context. NULL: no notes,
     * unless $HD_LOG=1, which prints them to stderr. Errors are never notes: they are
     * returned and kept for hd_context_last_error(). */
    void (*log)(void *user, const char *message);
    void *log_user;
    /* How the device's kernels run: "opencl", "cuda" (NVIDIA only: the same kernels through
     * the CUDA driver, loaded at run time, in one stream with NVIDIA's libraries and with the
     * GPU's whole shared memory), or "auto" (CUDA on an NVIDIA GPU where libcuda loads and a
     * probe kernel runs right, else OpenCL). NULL: $HD_RUNTIME, else auto. A runtime that
     * cannot run here falls back to OpenCL with a note; CLBlast is not available while the
     * device runs on CUDA. hd_context_device_runtime() says which one runs. */
    const char *runtime;
    /* true (or $HD_DETERMINISTIC=1): every sum in a fixed order, so that a call on the same
     * data gives the same bits on every run, as torch.use_deterministic_algorithms(True)
     * asks. false (the default, as PyTorch's): attention's backward on tensor cores adds dq's
     * parts with atomic adds in whatever order they land (FlashAttention-2's way: the scores
     * computed once, where a fixed order computes them twice), so that dq's last bits may
     * differ from run to run; every other op sums in a fixed order either way. */
    bool deterministic;
    void *reserved[6]; /* zero (hd_context_options_init): room for options to come */
} hd_context_options;

/* Version of the library this program runs with, as "MAJOR.MINOR.PATCH". The compile-time
 * version is HD_VERSION_STRING in <hd/version.h>. */
HD_API const char *hd_version(void);

/* Static English text for a status code, e.g. "tensor shapes do not match". Never NULL;
 * an unknown code gives "unknown status". */
HD_API const char *hd_status_str(hd_status s);
/* The code's name without prefix, e.g. "ERR_SHAPE_MISMATCH". Never NULL. */
HD_API const char *hd_status_name(hd_status s);
/* Lower-case name of a backend ("auto", "cpu", "clblast", "fused", "clblast+fused"), of an
 * operation ("gemm", "lora", "softmax", "layer_norm", "rms_norm", "gemm_batched",
 * "softmax_backward", "layer_norm_backward", "rms_norm_backward", "lora_backward", and the
 * training step's: "swiglu", "swiglu_backward", "gelu", "gelu_backward", "add",
 * "add_rms_norm", "add_rms_norm_backward", "rope", "attention", "attention_backward",
 * "cross_entropy", "linear_cross_entropy", "embedding").
 * Never NULL. */
HD_API const char *hd_backend_name(hd_backend b);
HD_API const char *hd_op_name(hd_op op);
/* "fp32", "fp32x3" or "tf32"; "unknown" otherwise. Never NULL. */
HD_API const char *hd_precision_name(hd_precision p);

/* Sets every field of *opt to its default. */
HD_API void hd_context_options_init(hd_context_options *opt);

/*
 * Creates a context: discovers the OpenCL devices (unless disabled), probes every backend and
 * loads the tuning cache for the chosen device. A machine without OpenCL, or with no usable
 * device, gives a context whose only backend is the CPU; that is not an error. A damaged tuning
 * cache is ignored with a note (hd_context_options.log); so is a cache path that names anything
 * but a regular file (a FIFO is refused at once, never waited on), an empty tune_cache and a
 * path of 1024 bytes or more, and a record whose kernel parameters its backend would refuse is
 * dropped with a note. hd_context_last_error() is ""
 * after a successful creation. Safe to call from any number of threads at once.
 *
 * opt may be NULL for the defaults. On success *ctx owns everything it created; free it with
 * hd_context_destroy(). On failure *ctx is set to NULL and hd_context_last_error(NULL) gives
 * the detail.
 *
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT (ctx NULL, a malformed backend or device
 * specification, a thread count outside 0..4096 or such a $HD_THREADS, a gemm_precision that
 * is no precision or a $HD_GEMM_PRECISION other than fp32, fp32x3 and tf32; the message says
 * which), HD_ERR_OUT_OF_MEMORY. A precision the device cannot run is no error: fp32, with a
 * note.
 */
HD_API hd_status hd_context_create(hd_context **ctx, const hd_context_options *opt);

/* Waits for all queued work, then frees the context. Tensors of the context must be destroyed
 * first. NULL is a no-op. */
HD_API void hd_context_destroy(hd_context *ctx);

/* The detail of the most recent failure on ctx, or "" if the last call succeeded (notes go to
 * the log callback of hd_context_options, never here). The string is owned by the context and
 * valid until its next call. NULL ctx gives the detail of this thread's
 * most recent failed hd_context_create() (which has no context left to keep it on), or "" if
 * the last one succeeded or none was made. */
HD_API const char *hd_context_last_error(const hd_context *ctx);

/* The number of threads the CPU backend uses (OpenBLAS and the row kernels); 0 for NULL.
 * Idle threads sleep: they do not spin on cores another pool needs. */
HD_API int hd_context_cpu_threads(const hd_context *ctx);

/* Name of the OpenCL device the context uses, or "none" without one. Owned by the context. */
HD_API const char *hd_context_device_name(const hd_context *ctx);
/* The runtime the device's kernels run on: "opencl" or "cuda" (hd_context_options.runtime),
 * or "none" without a device. Static. */
HD_API const char *hd_context_device_runtime(const hd_context *ctx);

/* Whether backend b can run on this context (probed at creation and still healthy). */
HD_API bool hd_context_has_backend(const hd_context *ctx, hd_backend b);

/*
 * Forces op to run on backend b from now on (HD_BACKEND_AUTO gives the choice back to the
 * dispatcher). If the forced backend cannot run a particular call (unsupported shape, failed
 * device), the call still runs on the next backend; hd_context_last_backend() tells.
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT (NULL ctx, unknown op or backend),
 * HD_ERR_BACKEND_UNAVAILABLE (b cannot run on this machine).
 */
HD_API hd_status hd_context_set_backend(hd_context *ctx, hd_op op, hd_backend b);

/* The GEMM arithmetic the context runs: the requested mode, or HD_PRECISION_FP32 where no
 * backend of the context can run it. HD_PRECISION_FP32 for NULL. */
HD_API hd_precision hd_context_gemm_precision(const hd_context *ctx);

/* Whether every sum of the context runs in a fixed order (hd_context_options.deterministic,
 * $HD_DETERMINISTIC). false for NULL. */
HD_API bool hd_context_deterministic(const hd_context *ctx);

/* The backend the last successful operation on ctx ran on; HD_BACKEND_AUTO before any. */
HD_API hd_backend hd_context_last_backend(const hd_context *ctx);

/*
 * Describes in buf, in English (a few lines, NUL-terminated, truncated to size), how the
 * dispatcher would choose a backend for op on a problem of the given dims: GEMM {m, n, k,
 * transposes} where transposes is trans_a + 2*trans_b; LoRA and its backward {tokens, in,
 * out, rank}; batched GEMM {m, n, k, batch} without transposes; row ops and their backward
 * {rows, cols} (the rest ignored). It names
 * the rule that decided (forced, tuned, nearest, cost model, default), the tuned record and
 * its variant when one applies, the candidates in the order they would be tried, and why
 * other backends are out. Inputs are assumed to be
 * where each backend needs them (no migration cost). Does not run anything.
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT (NULL ctx, dims or buf, size 0, unknown op, GEMM
 * transposes above 3).
 */
HD_API hd_status hd_context_explain(hd_context *ctx, hd_op op, const size_t dims[4], char *buf,
                                    size_t size);

/* Builds every OpenCL kernel the context may use (the fused kernels and CLBlast's GEMM
 * kernels), so that the first timed operation does not pay for compilation. Waits.
 * Returns HD_OK (also without a device), HD_ERR_BUILD, HD_ERR_DEVICE. */
HD_API hd_status hd_context_warmup(hd_context *ctx);

/* Waits for all queued work on the context. Returns HD_OK, or the error a queued operation
 * reported late (HD_ERR_DEVICE, HD_ERR_DEVICE_OUT_OF_MEMORY). */
HD_API hd_status hd_sync(hd_context *ctx);

/*
 * Creates a rows×cols tensor in ctx, filled with zeros. Memory is taken lazily on first use,
 * on the host or the device. On a context whose device is a GPU, the host copy of a tensor of
 * 1 MiB or more is pinned (page-locked) memory where the driver gives it, so that copies to
 * and from the device run at the link's full speed; such memory also holds device memory on
 * NVIDIA's driver, so at most an eighth of the device's memory is pinned, over every context
 * of the process on that device (beyond it, ordinary memory). $HD_PINNED=0 turns pinning off,
 * $HD_PINNED=1 on for other OpenCL devices too. rows or cols may be 0. On failure *t is set to
 * NULL.
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT (NULL), HD_ERR_SIZE_OVERFLOW (rows*cols*4 bytes does
 * not fit in size_t), HD_ERR_OUT_OF_MEMORY.
 */
HD_API hd_status hd_tensor_create(hd_context *ctx, size_t rows, size_t cols, hd_tensor **t);

/* hd_tensor_create() of a given element type (HD_DTYPE_FP32 is hd_tensor_create()). Returns
 * what hd_tensor_create() does, and HD_ERR_INVALID_ARGUMENT for a type outside hd_dtype. */
HD_API hd_status hd_tensor_create_ex(hd_context *ctx, size_t rows, size_t cols, hd_dtype dtype,
                                     hd_tensor **t);

/* Frees t and its host and device memory, after pending work on it. NULL is a no-op. */
HD_API void hd_tensor_destroy(hd_tensor *t);

HD_API size_t hd_tensor_rows(const hd_tensor *t);    /* 0 for NULL */
HD_API size_t hd_tensor_cols(const hd_tensor *t);    /* 0 for NULL */
HD_API hd_dtype hd_tensor_dtype(const hd_tensor *t); /* HD_DTYPE_FP32 for NULL */

/* Copies rows*cols floats, row-major, from src into t. src is not kept. Waits for pending work
 * that reads t. An int32 tensor takes floats that are whole numbers in int32's range, each
 * converted exactly; any other value is refused before anything is written. Returns HD_OK,
 * HD_ERR_INVALID_ARGUMENT (NULL t, or NULL src with a non-empty tensor, or a value an int32
 * tensor cannot hold), HD_ERR_OUT_OF_MEMORY, HD_ERR_DEVICE. */
HD_API hd_status hd_tensor_write(hd_tensor *t, const float *src);

/* Copies rows*cols elements of t's own type (float or int32_t, 4 bytes each), row-major, from
 * src into t, unconverted; otherwise as hd_tensor_write(). */
HD_API hd_status hd_tensor_write_raw(hd_tensor *t, const void *src);

/*
 * Places t on the context's OpenCL device now: queues the copy from the host (or zeros for a
 * tensor never written) unless t is already valid there. Use it for data written once and
 * used by many device operations (weights), so that the first of them does not weigh the
 * copy against running on the host. Without prefetch the library moves a tensor by itself
 * once what keeping it on the host has cost its calls exceeds one copy (a single call on host
 * data stays on the host; a loop moves to the device after a few calls), as the tuning cache's
 * records and calibration price it; with no tuning cache, or none for this device, the
 * backends' built-in default rates and a nominal 10 GB/s host link price it. Writing t later
 * makes the host copy the valid one again, and its next copy is paid for by staying as the
 * first was (so no sequence of writes and calls costs more than twice the better of always
 * copying and never copying); prefetch it again after writing to move the new contents at
 * once. Without a device this does nothing.
 * Does not wait for tensors of up to 4 MiB; a larger one is copied from its host memory before
 * this returns (see the asynchrony note at the top). Returns HD_OK, HD_ERR_INVALID_ARGUMENT
 * (NULL), HD_ERR_DEVICE_OUT_OF_MEMORY, HD_ERR_DEVICE.
 */
HD_API hd_status hd_tensor_prefetch(hd_tensor *t);

/* Copies t's rows*cols floats, row-major, into dst. Waits for pending work that writes t; an
 * error from that work is returned here. Returns HD_OK, HD_ERR_INVALID_ARGUMENT,
 * HD_ERR_OUT_OF_MEMORY, HD_ERR_DEVICE, HD_ERR_DEVICE_OUT_OF_MEMORY. */
HD_API hd_status hd_tensor_read(const hd_tensor *t, float *dst);

/* Copies t's rows*cols elements of its own type, row-major, into dst, unconverted; otherwise
 * as hd_tensor_read(). hd_tensor_read() of an int32 tensor gives each value as the nearest
 * float (exact up to 2^24 in magnitude). */
HD_API hd_status hd_tensor_read_raw(const hd_tensor *t, void *dst);

/*
 * C = alpha*op(A)*op(B) + beta*C, where op(X) is X or its transpose. op(A) is m×k, op(B) k×n,
 * C m×n. With k = 0, C = beta*C; with m or n = 0 nothing happens. As in BLAS, beta = 0 ignores
 * the contents of C (NaN included) and alpha = 0 ignores A and B.
 * c must not be a or b. Returns HD_OK, HD_ERR_INVALID_ARGUMENT, HD_ERR_SHAPE_MISMATCH,
 * HD_ERR_ALIASING, HD_ERR_WRONG_CONTEXT, HD_ERR_OUT_OF_MEMORY (host memory for a tensor's
 * copy), HD_ERR_UNSUPPORTED (no backend of the context takes the call), or a device error
 * (HD_ERR_DEVICE, HD_ERR_DEVICE_OUT_OF_MEMORY, HD_ERR_BUILD) where every backend failed.
 * Does not wait.
 */
HD_API hd_status hd_gemm(hd_context *ctx, bool trans_a, bool trans_b, float alpha,
                         const hd_tensor *a, const hd_tensor *b, float beta, hd_tensor *c);

/*
 * A batch of equal GEMMs: C_i = alpha*op(A_i)*op(B_i) + beta*C_i for i < batch, where each
 * tensor stacks its batch matrices by rows: a is batch*ra × ca with A_i its rows i*ra ..
 * (i+1)*ra - 1, and likewise b and c. op(A_i) is m×k, op(B_i) k×n, C_i m×n, with the same
 * transposes for every i. batch = 0 does nothing (after the NULL, context and aliasing checks);
 * a batch that does not divide every tensor's rows is HD_ERR_SHAPE_MISMATCH. Per matrix, the
 * rules of hd_gemm() hold (k = 0 gives C = beta*C, beta = 0 ignores C, alpha = 0 ignores A and
 * B). The library keeps no pointer to the tensors after the call. c must not be a or b.
 * Returns HD_OK, HD_ERR_INVALID_ARGUMENT, HD_ERR_SHAPE_MISMATCH, HD_ERR_ALIASING,
 * HD_ERR_WRONG_CONTEXT, or a device error. Does not wait.
 */
HD_API hd_status hd_gemm_batched(hd_context *ctx, size_t batch, bool trans_a, bool trans_b,
                                 float alpha, const hd_tensor *a, const hd_tensor *b, float beta,
                                 hd_tensor *c);

/*
 * The LoRA forward pass: y = x*W + scale*(x*A)*B, with x T×in, W in×out, A in×r, B r×out and
 * y T×out. The low-rank product is never formed as an in×out matrix. r = 0 gives y = x*W.
 * scale is a factor like any other, not BLAS's alpha: NaN or inf in A or B reach y even with
 * scale = 0 (as in PyTorch), on every backend alike; the backward's gradients likewise.
 * y must not be any input. Returns as hd_gemm(), and HD_ERR_SIZE_OVERFLOW where the T×r
 * temporaries (x*A; backward, dy*B^T beside it) would not fit in the address space, before
 * anything is allocated. Does not wait.
 */
HD_API hd_status hd_lora_forward(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                                 const hd_tensor *a, const hd_tensor *b, float scale,
                                 hd_tensor *y);

/* How hd_lora_forward_ex() reads the weights, as flags to OR together: each flag says that a
 * tensor is stored transposed, as GEMM's trans_a and trans_b do. */
typedef enum hd_lora_layout {
    HD_LORA_LAYOUT_DEFAULT = 0, /* W in×out, A in×r, B r×out: y = x*W + scale*(x*A)*B */
    HD_LORA_TRANS_W = 1,        /* W stored out×in */
    HD_LORA_TRANS_A = 2,        /* A stored r×in */
    HD_LORA_TRANS_B = 4,        /* B stored out×r */
    /* torch.nn.Linear's weight and PEFT's lora_A and lora_B: W out×in, A r×in, B out×r */
    HD_LORA_LAYOUT_PYTORCH = HD_LORA_TRANS_W | HD_LORA_TRANS_A | HD_LORA_TRANS_B
} hd_lora_layout;

/*
 * The LoRA forward pass with the weights in the layout the flags give (hd_lora_layout, OR-ed):
 * y = x*op(W) + scale*(x*op(A))*op(B), where op(X) is X, or its transpose when X's flag is set;
 * x is T×in and y T×out as in hd_lora_forward(). Transposed weights are read where they are:
 * no backend copies or transposes them. With HD_LORA_LAYOUT_PYTORCH, the tensors of a PyTorch
 * model (W = linear.weight, A = lora_A.weight, B = lora_B.weight) go in as they are stored.
 * A backend that cannot read a layout in place (the fused kernels take W and B transposed
 * only together) leaves the call to one that can. Returns as hd_lora_forward(), and HD_ERR_INVALID_ARGUMENT
 * for an unknown flag. Does not wait.
 */
HD_API hd_status hd_lora_forward_ex(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                                    const hd_tensor *a, const hd_tensor *b, float scale,
                                    unsigned layout, hd_tensor *y);

/* y[i][j] = exp(x[i][j] - max_j x[i]) / sum_j exp(x[i][j] - max_j x[i]), per row.
 * -inf entries (a mask) get 0; a row of -inf alone, or one holding +inf or NaN, gives NaN
 * throughout, as in PyTorch, on every backend. y may be x (in place). Returns as hd_gemm().
 * Does not wait. */
HD_API hd_status hd_softmax(hd_context *ctx, const hd_tensor *x, hd_tensor *y);

/* y = (x - mean(row)) / sqrt(var(row) + eps) * gamma + beta, per row; gamma and beta are
 * 1×cols; var is the biased (population) variance. y may be x. eps must be finite and >= 0.
 * Returns as hd_gemm(). Does not wait. */
HD_API hd_status hd_layer_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *gamma,
                               const hd_tensor *beta, float eps, hd_tensor *y);

/* y = x / sqrt(mean(row of x^2) + eps) * weight, per row; weight is 1×cols. y may be x.
 * eps must be finite and >= 0. Returns as hd_gemm(). Does not wait. */
HD_API hd_status hd_rms_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *weight,
                             float eps, hd_tensor *y);

/*
 * Backward passes (LoRA fine-tuning). Each takes the forward's inputs (or, for softmax, its
 * output) and dy, the gradient of the loss with respect to the forward's output, and writes
 * the gradients with respect to the forward's inputs. Shapes are the forward's: dy and dx have
 * the shape of x (of y for softmax), a weight gradient the shape of its weight. The checks and
 * the rules of the forward ops hold: a NULL required tensor, mismatched shapes, a tensor of
 * another context, an output that aliases a tensor it may not, or a non-finite or negative eps
 * returns an error status with every output left exactly as it was. The library keeps no
 * pointer to the tensors after the call. Returns HD_OK, HD_ERR_INVALID_ARGUMENT,
 * HD_ERR_SHAPE_MISMATCH, HD_ERR_ALIASING, HD_ERR_WRONG_CONTEXT, HD_ERR_OUT_OF_MEMORY, or a
 * device error. Does not wait.
 *
 * The row ops' gradients overwrite their outputs. Weight gradients are reduced over the rows
 * in a fixed order (the same bits on every run), in double on the CPU. With zero rows a
 * weight gradient is set to zeros.
 */

/* Softmax backward: dx[i][j] = y[i][j] * (dy[i][j] - sum_k y[i][k]*dy[i][k]), where y is the
 * output of hd_softmax(). dx may be dy (in place); dx must not be y. */
HD_API hd_status hd_softmax_backward(hd_context *ctx, const hd_tensor *y, const hd_tensor *dy,
                                     hd_tensor *dx);

/* RMS norm backward, for y = x * r * weight with r = 1/sqrt(mean(row of x^2) + eps):
 * dx = r * (weight*dy - x * r^2 * mean(row of weight*dy*x)), and
 * dweight[j] = sum over rows of dy[i][j] * x[i][j] * r_i. dweight may be NULL (not wanted).
 * dx may be dy (in place); dx and dweight must not be any other tensor of the call. */
HD_API hd_status hd_rms_norm_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *weight,
                                      const hd_tensor *dy, float eps, hd_tensor *dx,
                                      hd_tensor *dweight);

/* Layer norm backward, for y = xhat * gamma + beta with xhat = (x - mean) * r and
 * r = 1/sqrt(var + eps) per row (biased variance): with g = gamma*dy,
 * dx = r * (g - mean(row of g) - xhat * mean(row of g*xhat)),
 * dgamma[j] = sum over rows of dy[i][j] * xhat[i][j], dbeta[j] = sum over rows of dy[i][j].
 * dgamma and dbeta may each be NULL. dx may be dy (in place); no other output may alias. */
HD_API hd_status hd_layer_norm_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *gamma,
                                        const hd_tensor *dy, float eps, hd_tensor *dx,
                                        hd_tensor *dgamma, hd_tensor *dbeta);

/*
 * LoRA backward with W frozen, for y = x*W + scale*(x*A)*B (hd_lora_forward(), same shapes;
 * dy is T×out): with
 * u = dy*B^T (T×r, the only temporary besides x*A),
 *   dx = dy*W^T + scale * u*A^T      (T×in; NULL: not wanted, e.g. the first layer)
 *   dA = scale * x^T * u             (in×r)
 *   dB = scale * (x*A)^T * dy        (r×out)
 * accumulate false overwrites dx, da and db; true adds the gradients to what they hold
 * (micro-batch accumulation). A gradient that is a sum over nothing (T, in or out 0) is zero:
 * overwritten with zeros, or left as it is when accumulating. r = 0 gives dx = dy*W^T. No
 * output may alias any tensor of the call. The products follow the context's GEMM precision
 * (hd_context_options.gemm_precision), as hd_gemm() does. Returns as hd_lora_forward().
 */
HD_API hd_status hd_lora_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                                  const hd_tensor *a, const hd_tensor *b, float scale,
                                  const hd_tensor *dy, hd_tensor *dx, hd_tensor *da, hd_tensor *db,
                                  bool accumulate);

/* LoRA backward with the weights in the layout the flags give (hd_lora_layout, OR-ed), as
 * hd_lora_forward_ex() reads them: W out×in, A r×in, B out×r where flagged. dA and dB take the
 * layout of A and B (PyTorch's: dA r×in, dB out×r, as autograd gives them). Every backend
 * reads every layout in place. hd_lora_backward() is this with HD_LORA_LAYOUT_DEFAULT; the
 * same checks, statuses and rules, and an unknown flag is HD_ERR_INVALID_ARGUMENT. */
HD_API hd_status hd_lora_backward_ex(hd_context *ctx, const hd_tensor *x, const hd_tensor *w,
                                     const hd_tensor *a, const hd_tensor *b, float scale,
                                     unsigned layout, const hd_tensor *dy, hd_tensor *dx,
                                     hd_tensor *da, hd_tensor *db, bool accumulate);

/*
 * The rest of a decoder's training step. Activations are T x n tensors (T tokens, one per
 * row). Rows may hold several sequences packed one after another ("packed sequences"): an
 * hd_sequences names their lengths, and positions (RoPE) and attention restart at each. The
 * same checks, dispatch, tuning and fallback as every operation above hold. Token ids and
 * targets are int32: host arrays, read during the call only (copied where the operation runs,
 * each call), or, through the _ids forms, int32 tensors (HD_DTYPE_I32, T x 1 or 1 x T), which stay
 * on the device once there until the host writes them again, as PyTorch's id tensors do. One out of
 * range is HD_ERR_INVALID_ARGUMENT before anything is written. None waits.
 */

/* Packed sequences: lengths[0 .. count-1] rows each, summing to the tensor's rows. count = 0
 * (or a NULL hd_sequences pointer) is one sequence of every row. A length may be 0. */
typedef struct hd_sequences {
    const size_t *lengths;
    size_t count;
} hd_sequences;

/* SwiGLU: y = silu(g) * u elementwise, silu(g) = g * sigmoid(g); g, u and y have one shape.
 * y may be g or u (in place). */
HD_API hd_status hd_swiglu(hd_context *ctx, const hd_tensor *g, const hd_tensor *u, hd_tensor *y);

/* SwiGLU backward, one pass: du = dy * silu(g), dg = dy * u * sigmoid(g) * (1 + g * (1 -
 * sigmoid(g))). dg may be g or dy, du may be u or dy (in place); dg and du must differ. */
HD_API hd_status hd_swiglu_backward(hd_context *ctx, const hd_tensor *g, const hd_tensor *u,
                                    const hd_tensor *dy, hd_tensor *dg, hd_tensor *du);

/* GELU, tanh form (PyTorch's approximate='tanh'): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))). y may be x. */
HD_API hd_status hd_gelu(hd_context *ctx, const hd_tensor *x, hd_tensor *y);

/* GELU backward: dx = dy * gelu'(x), the tanh form's derivative. dx may be dy. */
HD_API hd_status hd_gelu_backward(hd_context *ctx, const hd_tensor *x, const hd_tensor *dy,
                                  hd_tensor *dx);

/* y = y + alpha * x elementwise (a residual stream's gradient accumulated); x and y have one
 * shape and are different tensors. */
HD_API hd_status hd_add(hd_context *ctx, float alpha, const hd_tensor *x, hd_tensor *y);

/* Residual add and RMS norm in one pass: h = x + r, y = h / sqrt(mean(row of h^2) + eps) *
 * weight (weight 1 x cols). Both are written: h is the next block's residual input. h may be x
 * or r (in place); y may be none of the others. eps finite and >= 0. */
HD_API hd_status hd_add_rms_norm(hd_context *ctx, const hd_tensor *x, const hd_tensor *r,
                                 const hd_tensor *weight, float eps, hd_tensor *h, hd_tensor *y);

/* Its backward, for h = x + r and y = rms_norm(h) * weight: dh = the RMS norm's dx (as
 * hd_rms_norm_backward() computes it from h, weight and dy) + dres, where dres (may be NULL:
 * zero) is the gradient reaching h along the residual path; dh is then the gradient of x and
 * of r alike. dweight (may be NULL) as hd_rms_norm_backward's. dh may be dy or dres (in
 * place). */
HD_API hd_status hd_add_rms_norm_backward(hd_context *ctx, const hd_tensor *h,
                                          const hd_tensor *weight, const hd_tensor *dy,
                                          const hd_tensor *dres, float eps, hd_tensor *dh,
                                          hd_tensor *dweight);

/* Rotary position embedding, the rotate-half convention of Llama and transformers'
 * apply_rotary_pos_emb: x is T x (heads * head_dim); in each head, for i < head_dim / 2, with
 * the row's position p and a = p * inv_freq[i],
 *   y[i] = x[i] cos a - x[i + head_dim/2] sin a,  y[i + head_dim/2] = x[i + head_dim/2] cos a +
 *   x[i] sin a.
 * p is position_offset plus the row's index within its packed sequence. inv_freq is theta^(-2i
 * / head_dim) (computed in double), or the given 1 x head_dim/2 tensor (a model's scaled
 * frequencies, e.g. Llama 3's). inverse rotates by -a: the backward, applied to the gradient.
 * Angles are formed to within a few float ulps of the exact product at any position. */
typedef struct hd_rope_options {
    size_t head_dim;        /* even, > 0, dividing the columns */
    float theta;            /* the base, finite and > 1 (ignored with inv_freq) */
    size_t position_offset; /* the first row's position in each sequence */
    hd_sequences sequences; /* packed sequences; zeros: one */
    const hd_tensor *inv_freq; /* NULL, or 1 x head_dim/2 frequencies */
    bool inverse;           /* rotate by -a (the backward) */
} hd_rope_options;

/* y = rope(x); y may be x (in place, the usual use). Returns as hd_gemm(), and
 * HD_ERR_INVALID_ARGUMENT for options it cannot take (odd or non-dividing head_dim, theta,
 * sequence lengths not summing to the rows, positions past 2^24). */
HD_API hd_status hd_rope(hd_context *ctx, const hd_rope_options *opt, const hd_tensor *x,
                         hd_tensor *y);

/* Scaled dot-product attention, flash-style (one pass over key/value tiles with an online
 * softmax: no T x T matrix is ever stored). q is T x (heads * head_dim), k and v T x (kv_heads
 * * head_dim); kv_heads divides heads, and query head h reads key/value head h / (heads /
 * kv_heads) (grouped-query attention, as transformers' repeat_kv groups them). head_dim is a
 * multiple of 8 up to 256. Row i attends to the rows j of its own sequence, j <= i when causal,
 * and i - window < j as well with a sliding window (transformers' sliding_window, Mistral's).
 * out is T x (heads * head_dim); lse (may be NULL; the backward needs it) is T x heads, the
 * natural log of each row's and head's sum of exp(scale * q.k). The products, forward and
 * backward, follow the context's GEMM precision: fp32 FMAs, or fp32x3 and tf32 on tensor cores
 * with the softmax in fp32 (PyTorch's scaled_dot_product_attention runs fp32 inputs on sm_80+
 * as fp32x3); fp32 FMAs where the fused backend's tiles do not fit (docs/kernels.md) and on the
 * CPU backend, both at least as accurate. */
typedef struct hd_attention_options {
    size_t heads, kv_heads;
    bool causal;
    float scale;            /* 0: 1/sqrt(head_dim); else finite and > 0 */
    hd_sequences sequences; /* packed sequences; zeros: one */
    size_t window;          /* causal only: the keys a row attends to at most, itself included
                               (rows i - window + 1 .. i); 0: every earlier row */
} hd_attention_options;

HD_API hd_status hd_attention(hd_context *ctx, const hd_attention_options *opt,
                              const hd_tensor *q, const hd_tensor *k, const hd_tensor *v,
                              hd_tensor *out, hd_tensor *lse);

/* Attention backward from the forward's q, k, v, out and lse and dout (the gradient of out):
 * dq, dk and dv, overwritten (dk and dv sum over the query heads of their group). The scores
 * are recomputed tile by tile from lse. No output may alias any tensor of the call. On NVIDIA's
 * tensor cores dq's parts are added in any order unless the context is deterministic
 * (hd_context_options.deterministic): its last bits may then differ from run to run. */
HD_API hd_status hd_attention_backward(hd_context *ctx, const hd_attention_options *opt,
                                       const hd_tensor *q, const hd_tensor *k, const hd_tensor *v,
                                       const hd_tensor *out, const hd_tensor *lse,
                                       const hd_tensor *dout, hd_tensor *dq, hd_tensor *dk,
                                       hd_tensor *dv);

/* Cross-entropy over a vocabulary: logits T x V, targets[T] (each in [0, V) or
 * ignore_index). loss (1 x 1) = the mean over the rows whose target is not ignore_index of
 * logsumexp(logits[i]) - logits[i][targets[i]] (PyTorch's F.cross_entropy with its default
 * mean); with every target ignored it is NaN, as PyTorch gives. dlogits (may be NULL; may be
 * logits, in place) is the gradient of that mean: (softmax(logits[i]) - onehot(targets[i])) /
 * counted rows, zero on ignored rows (and everywhere when every target is ignored). -inf logits
 * are masks. */
HD_API hd_status hd_cross_entropy(hd_context *ctx, const hd_tensor *logits,
                                  const int32_t *targets, int32_t ignore_index, hd_tensor *loss,
                                  hd_tensor *dlogits);

/* Cross-entropy of a frozen LM head without its logits: loss (1 x 1) = cross-entropy(h *
 * w^T, targets) as hd_cross_entropy() defines it, h T x D, w V x D (torch.nn.Linear's weight,
 * as stored), the T x V logits computed chunk by chunk and never stored whole. dh (may be
 * NULL) is the gradient of the loss with respect to h (T x D). The products follow the
 * context's GEMM precision; on the CUDA runtime they run on cuBLASLt where it loads (fp32 and
 * tf32; docs/kernels.md). */
HD_API hd_status hd_linear_cross_entropy(hd_context *ctx, const hd_tensor *h, const hd_tensor *w,
                                         const int32_t *targets, int32_t ignore_index,
                                         hd_tensor *loss, hd_tensor *dh);

/* Embedding lookup from a frozen table: out[i] = table[ids[i]], table V x D, out T x D,
 * ids[T] each in [0, V). */
HD_API hd_status hd_embedding(hd_context *ctx, const hd_tensor *table, const int32_t *ids,
                              hd_tensor *out);

/* hd_cross_entropy(), hd_linear_cross_entropy() and hd_embedding() with their targets or ids in
 * an int32 tensor (HD_DTYPE_I32) of T x 1 or 1 x T, one per row. The checks read the tensor's
 * host copy, which an int32 tensor keeps once written (only the host writes it); the device
 * reads its own copy, made once after each write. A tensor never written holds zeros; one
 * prefetched (hd_tensor_prefetch) before its first write is read back once, the one wait. A
 * float tensor there, or an int32 tensor anywhere else, is HD_ERR_INVALID_ARGUMENT; a tensor of
 * another shape, HD_ERR_SHAPE_MISMATCH. Their errors name the _ids form. */
HD_API hd_status hd_cross_entropy_ids(hd_context *ctx, const hd_tensor *logits,
                                      const hd_tensor *targets, int32_t ignore_index,
                                      hd_tensor *loss, hd_tensor *dlogits);
HD_API hd_status hd_linear_cross_entropy_ids(hd_context *ctx, const hd_tensor *h,
                                             const hd_tensor *w, const hd_tensor *targets,
                                             int32_t ignore_index, hd_tensor *loss, hd_tensor *dh);
HD_API hd_status hd_embedding_ids(hd_context *ctx, const hd_tensor *table, const hd_tensor *ids,
                                  hd_tensor *out);

/* AdamW (PyTorch's torch.optim.AdamW, its bias corrections and decoupled weight decay) over
 * count tensors at once: for each i, params[i], grads[i], m[i] and v[i] have one shape; with
 * g = grads[i] * clip,
 *   p -= lr * weight_decay * p;  m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 *   p -= lr / (1 - beta1^step) * m / (sqrt(v / (1 - beta2^step)) + eps).
 * clip is 1, or with max_grad_norm > 0 (PyTorch's clip_grad_norm_ before the step), min(1,
 * max_grad_norm / (total + 1e-6)) where total is the 2-norm of every gradient together,
 * computed where the step runs; grad_norm (may be NULL, 1 x 1) receives total. The gradients
 * are not changed. Runs where the tensors are (the device where the context has one and the
 * first parameter is valid there, else the CPU), in few launches on a device. No tensor may
 * appear twice among the four lists. */
typedef struct hd_adamw_options {
    float lr, beta1, beta2, eps, weight_decay;
    long step;            /* 1 for the first step */
    float max_grad_norm;  /* 0: no clipping */
    hd_tensor *grad_norm; /* NULL, or 1 x 1: the gradients' total norm */
} hd_adamw_options;

HD_API hd_status hd_adamw(hd_context *ctx, const hd_adamw_options *opt, size_t count,
                          hd_tensor *const params[], const hd_tensor *const grads[],
                          hd_tensor *const m[], hd_tensor *const v[]);

#ifdef __cplusplus
}
#endif

#endif /* HD_DISPATCH_H */
