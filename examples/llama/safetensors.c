/*
 * The safetensors reader: opens a file (or an image in memory), reads its 8-byte header length
 * and its header, which safetensors_header.c checks, and reads tensors on demand with pread,
 * converting them to float where asked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "regular_file.h"
#include "safetensors_internal.h"

#define MEMORY_LABEL "<memory>"

/* n bytes at offset of the file (header or data) into dst. The header checks keep every read
 * inside the size the file had when it was opened; a file cut short since is an I/O error. */
static hd_status read_at(const hd_st_file *f, uint64_t offset, void *dst, size_t n, char *msg,
                         size_t size)
{
    if (f->fd < 0) {
        if (n > 0)
            memcpy(dst, f->image + offset, n);
        return HD_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        ssize_t got = pread(f->fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return hd__st_fail(msg, size, HD_ERR_IO, "'%s': cannot read %zu bytes at %llu: %s",
                               f->label, n, (unsigned long long)offset, strerror(errno));
        if (got == 0)
            return hd__st_fail(msg, size, HD_ERR_IO,
                               "'%s': the file ends before byte %llu: cut short since it was "
                               "opened",
                               f->label, (unsigned long long)offset + 1);
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return HD_OK;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The header length, checked against the file's size and the cap before anything is
 * allocated, then the header itself. */
static hd_status read_header(hd_st_file *f, uint64_t file_size, char *msg, size_t size)
{
    if (file_size < 8)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': %llu bytes, too short for the 8-byte header length", f->label,
                           (unsigned long long)file_size);
    unsigned char head[8];
    hd_status s = read_at(f, 0, head, sizeof head, msg, size);
    if (s != HD_OK)
        return s;
    uint64_t n = le64(head);
    if (n > file_size - 8)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': header length %llu is past the end of the file (%llu bytes)",
                           f->label, (unsigned long long)n, (unsigned long long)file_size);
    if (n > HD_ST_HEADER_MAX)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "'%s': header length %llu is above the %u bytes read", f->label,
                           (unsigned long long)n, HD_ST_HEADER_MAX);
    f->data_start = 8 + n;
    f->data_size = file_size - 8 - n;
    char *json = malloc(n > 0 ? (size_t)n : 1);
    if (json == NULL)
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY,
                           "'%s': no memory for the %llu-byte header", f->label,
                           (unsigned long long)n);
    s = read_at(f, 8, json, (size_t)n, msg, size);
    if (s == HD_OK)
        s = hd__st_parse_header(f, json, (size_t)n, msg, size);
    free(json);
    return s;
}

static hd_status new_file(const char *label, hd_st_file **out, char *msg, size_t size)
{
    hd_st_file *f = calloc(1, sizeof *f);
    char *copy = f != NULL ? malloc(strlen(label) + 1) : NULL;
    if (copy == NULL) {
        free(f);
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "'%s': no memory to open it", label);
    }
    f->fd = -1;
    f->label = strcpy(copy, label);
    *out = f;
    return HD_OK;
}

static hd_status open_fd(const char *path, int *fd, uint64_t *file_size, char *msg, size_t size)
{
    switch (llama_open_regular(path, fd, file_size)) {
    case LLAMA_FILE_OPENED:
        return HD_OK;
    case LLAMA_FILE_CANNOT_OPEN:
        return hd__st_fail(msg, size, HD_ERR_IO, "'%s': cannot open: %s", path, strerror(errno));
    case LLAMA_FILE_CANNOT_STAT:
        return hd__st_fail(msg, size, HD_ERR_IO, "'%s': cannot stat: %s", path, strerror(errno));
    case LLAMA_FILE_NOT_REGULAR:
        break;
    }
    return hd__st_fail(msg, size, HD_ERR_IO, "'%s': not a regular file", path);
}

hd_status hd_st_open(const char *path, hd_st_file **out, char *msg, size_t msg_size)
{
    if (out != NULL)
        *out = NULL;
    if (path == NULL || out == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_open: path and out must not be NULL");
    hd_st_file *f = NULL; /* new_file sets it, or fails */
    hd_status s = new_file(path, &f, msg, msg_size);
    if (s != HD_OK)
        return s;
    uint64_t file_size = 0;
    s = open_fd(path, &f->fd, &file_size, msg, msg_size);
    if (s == HD_OK)
        s = read_header(f, file_size, msg, msg_size);
    if (s != HD_OK) {
        hd_st_close(f);
        return s;
    }
    *out = f;
    return hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

hd_status hd_st_open_memory(const void *image, size_t size, hd_st_file **out, char *msg,
                            size_t msg_size)
{
    if (out != NULL)
        *out = NULL;
    if ((image == NULL && size > 0) || out == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_open_memory: image and out must not be NULL");
    hd_st_file *f = NULL; /* new_file sets it, or fails */
    hd_status s = new_file(MEMORY_LABEL, &f, msg, msg_size);
    if (s != HD_OK)
        return s;
    f->image = image;
    s = read_header(f, size, msg, msg_size);
    if (s != HD_OK) {
        hd_st_close(f);
        return s;
    }
    *out = f;
    return hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

void hd_st_close(hd_st_file *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f->label);
    free(f);
}

size_t hd_st_count(const hd_st_file *f)
{
    return f != NULL ? f->count : 0;
}

const hd_st_tensor *hd_st_tensor_at(const hd_st_file *f, size_t i)
{
    return f != NULL && i < f->count ? &f->tensors[i] : NULL;
}

static const hd_st_tensor *lookup(const hd_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->by_name[mid]->name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

hd_status hd_st_find(const hd_st_file *f, const char *name, const hd_st_tensor **t, char *msg,
                     size_t msg_size)
{
    if (t != NULL)
        *t = NULL;
    if (f == NULL || name == NULL || t == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_find: f, name and t must not be NULL");
    *t = lookup(f, name);
    if (*t == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT, "'%s': no tensor named '%s'",
                           f->label, name);
    return hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

/* "[2, 3]" into buf (cut short to fit). */
static const char *shape_text(int ndim, const size_t *shape, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < ndim && at < size; d++) {
        int n = snprintf(buf + at, size - at, "%s%zu", d > 0 ? ", " : "", shape[d]);
        if (n < 0)
            break;
        at += (size_t)n;
    }
    return buf;
}

hd_status hd_st_expect(const hd_st_file *f, const char *name, int ndim, const size_t *shape,
                       const hd_st_tensor **t, char *msg, size_t msg_size)
{
    hd_status s = hd_st_find(f, name, t, msg, msg_size);
    if (s != HD_OK)
        return s;
    if (ndim < 0 || ndim > HD_ST_MAX_DIMS || (shape == NULL && ndim > 0)) {
        *t = NULL;
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_expect: %d dimensions asked for tensor '%s'", ndim, name);
    }
    bool same = (*t)->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = (*t)->shape[d] == shape[d];
    if (same)
        return HD_OK;
    char have[160], want[160];
    shape_text((*t)->ndim, (*t)->shape, have, sizeof have);
    shape_text(ndim, shape, want, sizeof want);
    *t = NULL;
    return hd__st_fail(msg, msg_size, HD_ERR_SHAPE_MISMATCH,
                       "'%s': tensor '%s' has shape [%s], expected [%s]", f->label, name, have,
                       want);
}

static bool owns(const hd_st_file *f, const hd_st_tensor *t)
{
    uintptr_t p = (uintptr_t)t, first = (uintptr_t)f->tensors;
    return t != NULL && p >= first && p < first + f->count * sizeof *t &&
           (p - first) % sizeof *t == 0;
}

static float decode(hd_st_dtype dtype, const unsigned char *p)
{
    switch (dtype) {
    case HD_ST_BF16:
        return hd_st_bf16_to_float((uint16_t)(p[0] | p[1] << 8));
    case HD_ST_F16:
        return hd_st_f16_to_float((uint16_t)(p[0] | p[1] << 8));
    case HD_ST_F64: {
        uint64_t u = le64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        return (float)d;
    }
    default: { /* F32 */
        uint32_t u =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float v;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    }
}

/* Any float type, through a buffer of at most CHUNK bytes: never an allocation as large as the
 * tensor, and few enough reads that a model of many GB converts at the speed of the disk. */
enum { CHUNK = 1 << 20 };

static hd_status read_converted(const hd_st_file *f, const hd_st_tensor *t, float *dst, char *msg,
                                size_t size)
{
    size_t esize = hd_st_dtype_size(t->dtype), bytes = (size_t)(t->end - t->begin);
    size_t per = CHUNK / esize;
    if (bytes == 0)
        return HD_OK;
    unsigned char *buf = malloc(bytes < CHUNK ? bytes : CHUNK);
    if (buf == NULL)
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "'%s': no memory to read '%s'",
                           f->label, t->name);
    hd_status s = HD_OK;
    for (size_t done = 0; s == HD_OK && done < t->elements;) {
        size_t n = t->elements - done < per ? t->elements - done : per;
        s = read_at(f, f->data_start + t->begin + done * esize, buf, n * esize, msg, size);
        for (size_t i = 0; s == HD_OK && i < n; i++)
            dst[done + i] = decode(t->dtype, buf + i * esize);
        done += n;
    }
    free(buf);
    return s;
}

static hd_status check_tensor(const hd_st_file *f, const hd_st_tensor *t, const void *dst,
                              const char *fn, char *msg, size_t size)
{
    if (f == NULL || t == NULL || (dst == NULL && t->end > t->begin))
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    if (!owns(f, t))
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "%s: the tensor is not one of '%s'",
                           fn, f->label);
    return HD_OK;
}

hd_status hd_st_read_float(const hd_st_file *f, const hd_st_tensor *t, float *dst, size_t count,
                           char *msg, size_t msg_size)
{
    hd_status s = check_tensor(f, t, dst, "hd_st_read_float", msg, msg_size);
    if (s != HD_OK)
        return s;
    if (count != t->elements)
        return hd__st_fail(msg, msg_size, HD_ERR_SHAPE_MISMATCH,
                           "'%s': tensor '%s' has %zu elements, %zu asked for", f->label, t->name,
                           t->elements, count);
    if (!hd_st_dtype_is_float(t->dtype))
        return hd__st_fail(msg, msg_size, HD_ERR_UNSUPPORTED,
                           "'%s': tensor '%s' is %s, not a float type read as float", f->label,
                           t->name, hd_st_dtype_name(t->dtype));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (t->dtype == HD_ST_F32) /* stored as the host keeps it: straight into dst */
        s = read_at(f, f->data_start + t->begin, dst, (size_t)(t->end - t->begin), msg, msg_size);
    else
#endif
        s = read_converted(f, t, dst, msg, msg_size);
    return s != HD_OK ? s : hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

hd_status hd_st_read_raw(const hd_st_file *f, const hd_st_tensor *t, void *dst, size_t size,
                         char *msg, size_t msg_size)
{
    hd_status s = check_tensor(f, t, dst, "hd_st_read_raw", msg, msg_size);
    if (s != HD_OK)
        return s;
    if (size != t->end - t->begin)
        return hd__st_fail(msg, msg_size, HD_ERR_SHAPE_MISMATCH,
                           "'%s': tensor '%s' has %llu bytes, %zu asked for", f->label, t->name,
                           (unsigned long long)(t->end - t->begin), size);
    s = read_at(f, f->data_start + t->begin, dst, size, msg, msg_size);
    return s != HD_OK ? s : hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

hd_status hd_st_load(const hd_st_file *f, const char *name, int ndim, const size_t *shape,
                     float *dst, char *msg, size_t msg_size)
{
    const hd_st_tensor *t;
    hd_status s = hd_st_expect(f, name, ndim, shape, &t, msg, msg_size);
    return s != HD_OK ? s : hd_st_read_float(f, t, dst, t->elements, msg, msg_size);
}

size_t hd_st_metadata_count(const hd_st_file *f)
{
    return f != NULL ? f->meta_count : 0;
}

const hd_st_meta *hd_st_metadata_at(const hd_st_file *f, size_t i)
{
    return f != NULL && i < f->meta_count ? &f->meta[i] : NULL;
}

const char *hd_st_metadata(const hd_st_file *f, const char *key)
{
    for (size_t i = 0; f != NULL && key != NULL && i < f->meta_count; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}
