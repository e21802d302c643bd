/*
 * safetensors files: a checked reader and an atomic writer, for the Llama LoRA trainer
 * (examples/llama_lora.c) and its tests. Part of the trainer, not of libdispatch.
 *
 * The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length N, N bytes of UTF-8 JSON, then the data buffer:
 *
 *   {"<name>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"<key>": "<value>", ...}}
 *
 * Offsets count from the start of the data buffer; the tensors, row-major and little-endian,
 * cover the buffer exactly, without overlap or gap (zero-byte tensors take no room).
 *
 * Conventions that hold for every function below:
 *
 * - Functions that can fail return an hd_status (<hd/dispatch.h>) and write a one-line message
 *   naming the file, the tensor and what is wrong into the caller's msg buffer of msg_size
 *   bytes (truncated to fit; msg may be NULL when msg_size is 0). On success msg holds "".
 * - Statuses: HD_ERR_IO when the file cannot be opened, read or written or is not a regular
 *   file; HD_ERR_INVALID_ARGUMENT for a NULL argument, a file that breaks the format, or a
 *   name the file does not hold; HD_ERR_SIZE_OVERFLOW for a shape whose size overflows;
 *   HD_ERR_SHAPE_MISMATCH for a tensor whose shape or size is not the one asked for;
 *   HD_ERR_UNSUPPORTED for what the format allows and this code does not (more than
 *   HD_ST_MAX_DIMS dimensions, a float read of an integer tensor); HD_ERR_OUT_OF_MEMORY.
 * - Nothing the file claims is trusted before it is checked against the file's size: a
 *   hostile file gets an error, never a crash or an allocation larger than the file itself
 *   (the JSON tree of the header aside, which grows with the header's bytes, at most
 *   HD_ST_HEADER_MAX of them).
 * - Closing NULL is a harmless no-op.
 */
#ifndef HD_EXAMPLES_SAFETENSORS_H
#define HD_EXAMPLES_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

/* The largest header read, as in the reference implementation: a longer one is refused
 * before anything is allocated for it. */
#define HD_ST_HEADER_MAX 100000000u
/* The most dimensions a tensor may have here (the format sets no limit). */
#define HD_ST_MAX_DIMS 8

/* The element types of the format: name in the header, bytes per element. One table
 * generates the enum, hd_st_dtype_name() and hd_st_dtype_size(). The format's sub-byte types
 * (F4, F6_E2M3, ...) are not read: a file holding one is refused as unsupported. */
#define HD_ST_DTYPE_MAP(X)                                                                         \
    X(BOOL, "BOOL", 1)                                                                             \
    X(U8, "U8", 1)                                                                                 \
    X(I8, "I8", 1)                                                                                 \
    X(F8_E5M2, "F8_E5M2", 1)                                                                       \
    X(F8_E4M3, "F8_E4M3", 1)                                                                       \
    X(F8_E8M0, "F8_E8M0", 1)                                                                       \
    X(I16, "I16", 2)                                                                               \
    X(U16, "U16", 2)                                                                               \
    X(F16, "F16", 2)                                                                               \
    X(BF16, "BF16", 2)                                                                             \
    X(I32, "I32", 4)                                                                               \
    X(U32, "U32", 4)                                                                               \
    X(F32, "F32", 4)                                                                               \
    X(I64, "I64", 8)                                                                               \
    X(U64, "U64", 8)                                                                               \
    X(F64, "F64", 8)

typedef enum hd_st_dtype {
#define HD_ST_DTYPE_ENUM(id, name, size) HD_ST_##id,
    HD_ST_DTYPE_MAP(HD_ST_DTYPE_ENUM)
#undef HD_ST_DTYPE_ENUM
    HD_ST_DTYPE_COUNT
} hd_st_dtype;

/* "F32", "BF16", ...; "?" outside the table. */
const char *hd_st_dtype_name(hd_st_dtype t);
/* Bytes per element; 0 outside the table. */
size_t hd_st_dtype_size(hd_st_dtype t);
/* Whether hd_st_read_float() converts the type: F32, BF16, F16 and F64. */
int hd_st_dtype_is_float(hd_st_dtype t);

/* One tensor of an open file, as its header describes it after every check. */
typedef struct hd_st_tensor {
    const char *name; /* owned by the file: valid until hd_st_close() */
    hd_st_dtype dtype;
    int ndim;                     /* 0 (a scalar) to HD_ST_MAX_DIMS */
    size_t shape[HD_ST_MAX_DIMS]; /* shape[0..ndim-1]; the rest 0 */
    size_t elements;              /* product of the shape: 1 for a scalar, 0 if a dim is 0 */
    uint64_t begin, end;          /* data_offsets: bytes [begin, end) of the data buffer */
} hd_st_tensor;

/* One "__metadata__" entry, read or to be written. */
typedef struct hd_st_meta {
    const char *key, *value;
} hd_st_meta;

typedef struct hd_st_file hd_st_file;

/* ---- reading ---- */

/* Opens the safetensors file at path and reads and checks its header only; tensors are read
 * later, on demand, by hd_st_read_float() and hd_st_read_raw(). *out is the new handle, or
 * NULL after an error. The file is opened non-blocking and must be a regular file: a FIFO, a
 * device or a directory is refused without waiting. The handle keeps the file open until
 * hd_st_close(). Reads of one handle may run in several threads at once. */
hd_status hd_st_open(const char *path, hd_st_file **out, char *msg, size_t msg_size);

/* The same over a whole file's bytes in memory (image, size bytes), checked as a file is.
 * The handle reads from image, which is not copied: it must outlive the handle. */
hd_status hd_st_open_memory(const void *image, size_t size, hd_st_file **out, char *msg,
                            size_t msg_size);

/* Closes the file and frees the handle and every name, tensor and metadata entry it gave. */
void hd_st_close(hd_st_file *f);

/* The number of tensors, and tensor i of them (0 <= i < count; NULL past the end), in the
 * order of their data in the file. */
size_t hd_st_count(const hd_st_file *f);
const hd_st_tensor *hd_st_tensor_at(const hd_st_file *f, size_t i);

/* The tensor named name in *t. A name the file does not hold is HD_ERR_INVALID_ARGUMENT,
 * with *t NULL. */
hd_status hd_st_find(const hd_st_file *f, const char *name, const hd_st_tensor **t, char *msg,
                     size_t msg_size);

/* The tensor named name in *t, which must have exactly ndim dimensions of shape[0..ndim-1]:
 * HD_ERR_SHAPE_MISMATCH otherwise, with the two shapes in msg and *t NULL. The dtype is
 * not checked (hd_st_read_float() converts). */
hd_status hd_st_expect(const hd_st_file *f, const char *name, int ndim, const size_t *shape,
                       const hd_st_tensor **t, char *msg, size_t msg_size);

/* Reads tensor t of f into dst as float, converting BF16, F16 and F64 (F64 rounded to
 * nearest); count must be t->elements (HD_ERR_SHAPE_MISMATCH otherwise), and t's dtype a
 * float type (HD_ERR_UNSUPPORTED otherwise). dst is unchanged after an argument error;
 * after an I/O error (a file cut short since it was opened) its contents are undefined. */
hd_status hd_st_read_float(const hd_st_file *f, const hd_st_tensor *t, float *dst, size_t count,
                           char *msg, size_t msg_size);

/* Reads tensor t's bytes as stored (little-endian) into dst; size must be t->end - t->begin. */
hd_status hd_st_read_raw(const hd_st_file *f, const hd_st_tensor *t, void *dst, size_t size,
                         char *msg, size_t msg_size);

/* hd_st_expect() then hd_st_read_float(): the tensor named name, of exactly that shape, into
 * dst (as many floats as the shape has elements). */
hd_status hd_st_load(const hd_st_file *f, const char *name, int ndim, const size_t *shape,
                     float *dst, char *msg, size_t msg_size);

/* The "__metadata__" entries: how many, entry i (NULL past the end), and the value of key
 * (NULL when the file has none). Owned by the file. */
size_t hd_st_metadata_count(const hd_st_file *f);
const hd_st_meta *hd_st_metadata_at(const hd_st_file *f, size_t i);
const char *hd_st_metadata(const hd_st_file *f, const char *key);

/* ---- writing ---- */

/* One tensor to write. Exactly one of data and raw is given (both may be NULL when the
 * shape has no elements):
 *   data: elements floats, stored as dtype, which is F32, BF16 or F16 (rounded to nearest
 *         even; NaN stays NaN);
 *   raw:  the stored bytes of any dtype, elements * hd_st_dtype_size(dtype) of them,
 *         little-endian. */
typedef struct hd_st_entry {
    const char *name;
    hd_st_dtype dtype;
    int ndim;
    size_t shape[HD_ST_MAX_DIMS];
    const float *data;
    const void *raw;
} hd_st_entry;

/* Writes count tensors and meta_count metadata entries (meta may be NULL when meta_count is
 * 0) as a safetensors file at path, atomically: into a temporary file beside it
 * ("<path>.tmp.XXXXXX"), synced, then renamed over path, so that a reader sees the old file or
 * the whole new one. Names must be distinct, non-NULL, valid UTF-8 and not "__metadata__";
 * so must metadata keys. Nothing is written when an entry is refused; a failed write removes
 * its temporary file and leaves path as it was. An existing path that is not a regular file
 * is not replaced. The header is padded with spaces so that the data starts at a multiple of
 * 8 bytes, and the data is laid out by falling element size, so that every tensor is aligned
 * to its element in the file. */
hd_status hd_st_write(const char *path, const hd_st_entry *entries, size_t count,
                      const hd_st_meta *meta, size_t meta_count, char *msg, size_t msg_size);

/* The same file, made in memory: *image (free() it) of *size bytes. */
hd_status hd_st_serialize(const hd_st_entry *entries, size_t count, const hd_st_meta *meta,
                          size_t meta_count, void **image, size_t *size, char *msg,
                          size_t msg_size);

/* ---- element conversions (exact where the target holds the value) ---- */

float hd_st_bf16_to_float(uint16_t h);
uint16_t hd_st_float_to_bf16(float f); /* round to nearest even; NaN stays a (quiet) NaN */
float hd_st_f16_to_float(uint16_t h);
uint16_t hd_st_float_to_f16(float f); /* round to nearest even; overflow to infinity */

#endif
