/*
 * The safetensors writer: every entry checked, the header made by jansson, then the header
 * and the data streamed to a temporary file that is renamed over the target (or into one
 * buffer in memory).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "safetensors_internal.h"

/* The header as it will be written, and the order of the data. */
typedef struct layout {
    char *json; /* compact JSON */
    size_t json_len;
    uint64_t header_len; /* json_len padded with spaces to a multiple of 8 */
    uint64_t data_size;
    size_t *order; /* entry indices in the order of their data */
} layout;

/* The bytes of e's shape in dtype, in *bytes, unless they overflow (or a dimension is past
 * the JSON integers). */
static hd_status entry_bytes(const hd_st_entry *e, uint64_t *bytes, char *msg, size_t size)
{
    size_t elements = 1;
    for (int d = 0; d < e->ndim; d++) {
        if ((uint64_t)e->shape[d] > INT64_MAX ||
            (e->shape[d] > 0 && elements > SIZE_MAX / e->shape[d]))
            return hd__st_fail(msg, size, HD_ERR_SIZE_OVERFLOW,
                               "tensor '%s': the element count of its shape overflows", e->name);
        elements *= e->shape[d];
    }
    if (elements > SIZE_MAX / hd_st_dtype_size(e->dtype))
        return hd__st_fail(msg, size, HD_ERR_SIZE_OVERFLOW,
                           "tensor '%s': the byte size of its shape overflows", e->name);
    *bytes = (uint64_t)elements * hd_st_dtype_size(e->dtype);
    return HD_OK;
}

static hd_status check_entry(const hd_st_entry *e, size_t i, uint64_t *bytes, char *msg,
                             size_t size)
{
    const char *name = e->name != NULL ? e->name : "(NULL)";
    if (e->name == NULL || strcmp(e->name, "__metadata__") == 0)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "entry %zu: the name %s cannot be written", i, name);
    if ((unsigned)e->dtype >= HD_ST_DTYPE_COUNT || e->ndim < 0 || e->ndim > HD_ST_MAX_DIMS)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "tensor '%s': dtype %d or %d dimensions out of range", name,
                           (int)e->dtype, e->ndim);
    hd_status s = entry_bytes(e, bytes, msg, size);
    if (s != HD_OK)
        return s;
    if (e->data != NULL && e->raw != NULL)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "tensor '%s': both data and raw given", name);
    if (e->data == NULL && e->raw == NULL && *bytes > 0)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                           "tensor '%s': neither data nor raw given", name);
    if (e->data != NULL && e->dtype != HD_ST_F32 && e->dtype != HD_ST_BF16 && e->dtype != HD_ST_F16)
        return hd__st_fail(msg, size, HD_ERR_UNSUPPORTED,
                           "tensor '%s': floats are written as F32, BF16 or F16, not %s", name,
                           hd_st_dtype_name(e->dtype));
    return HD_OK;
}

static json_t *tensor_json(const hd_st_entry *e, uint64_t begin, uint64_t end)
{
    json_t *shape = json_array();
    for (int d = 0; shape != NULL && d < e->ndim; d++)
        if (json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) != 0) {
            json_decref(shape);
            shape = NULL;
        }
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", hd_st_dtype_name(e->dtype), "shape", shape,
                     "data_offsets", (json_int_t)begin, (json_int_t)end);
}

/* Adds value (whose reference it takes) under key, refusing a key already there or one
 * that is not UTF-8. */
static hd_status add_key(json_t *obj, const char *key, json_t *value, const char *what, char *msg,
                         size_t size)
{
    hd_status s = HD_OK;
    json_t *probe = json_string(key);
    if (value == NULL)
        s = hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    else if (probe == NULL)
        s = hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "%s name is not valid UTF-8", what);
    else if (json_object_get(obj, key) != NULL)
        s = hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "%s '%s' is given twice", what, key);
    json_decref(probe);
    if (s != HD_OK) {
        json_decref(value);
        return s;
    }
    if (json_object_set_new(obj, key, value) != 0)
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    return HD_OK;
}

static hd_status add_metadata(json_t *root, const hd_st_meta *meta, size_t n, char *msg,
                              size_t size)
{
    if (n == 0)
        return HD_OK;
    if (meta == NULL)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "metadata NULL, count %zu", n);
    json_t *obj = json_object();
    hd_status s = add_key(root, "__metadata__", obj, "metadata", msg, size);
    for (size_t i = 0; s == HD_OK && i < n; i++) {
        if (meta[i].key == NULL || meta[i].value == NULL)
            return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                               "metadata entry %zu: NULL key or value", i);
        json_t *value = json_string(meta[i].value);
        if (value == NULL)
            return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT,
                               "metadata '%s': the value is not valid UTF-8", meta[i].key);
        s = add_key(obj, meta[i].key, value, "metadata key", msg, size);
    }
    return s;
}

/* Entry indices by falling element size, in their given order within one size: every
 * tensor then starts at a multiple of its element size. */
static void order_by_element_size(const hd_st_entry *entries, size_t count, size_t *order)
{
    size_t n = 0;
    for (size_t esize = 8; esize >= 1; esize /= 2)
        for (size_t i = 0; i < count; i++)
            if (hd_st_dtype_size(entries[i].dtype) == esize)
                order[n++] = i;
}

static hd_status add_tensors(json_t *root, const hd_st_entry *entries, size_t count, layout *l,
                             char *msg, size_t size)
{
    uint64_t *bytes = malloc((count > 0 ? count : 1) * sizeof *bytes);
    if (bytes == NULL)
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    hd_status s = HD_OK;
    for (size_t i = 0; s == HD_OK && i < count; i++)
        s = check_entry(&entries[i], i, &bytes[i], msg, size);
    uint64_t *begin = s == HD_OK ? malloc((count > 0 ? count : 1) * sizeof *begin) : NULL;
    if (s == HD_OK && begin == NULL)
        s = hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    if (s == HD_OK) {
        order_by_element_size(entries, count, l->order);
        for (size_t k = 0; k < count; k++) {
            size_t i = l->order[k];
            begin[i] = l->data_size;
            if (bytes[i] > (uint64_t)INT64_MAX - l->data_size)
                s = hd__st_fail(msg, size, HD_ERR_SIZE_OVERFLOW, "the data's size overflows");
            else
                l->data_size += bytes[i];
        }
    }
    for (size_t i = 0; s == HD_OK && i < count; i++)
        s = add_key(root, entries[i].name, tensor_json(&entries[i], begin[i], begin[i] + bytes[i]),
                    "tensor", msg, size);
    free(bytes);
    free(begin);
    return s;
}

static hd_status make_layout(const hd_st_entry *entries, size_t count, const hd_st_meta *meta,
                             size_t meta_count, layout *l, char *msg, size_t size)
{
    memset(l, 0, sizeof *l);
    if (entries == NULL && count > 0)
        return hd__st_fail(msg, size, HD_ERR_INVALID_ARGUMENT, "entries NULL, count %zu", count);
    json_t *root = json_object();
    l->order = malloc((count > 0 ? count : 1) * sizeof *l->order);
    if (root == NULL || l->order == NULL) {
        json_decref(root);
        return hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    }
    hd_status s = add_metadata(root, meta, meta_count, msg, size);
    if (s == HD_OK)
        s = add_tensors(root, entries, count, l, msg, size);
    if (s == HD_OK) {
        l->json = json_dumps(root, JSON_COMPACT);
        if (l->json == NULL)
            s = hd__st_fail(msg, size, HD_ERR_OUT_OF_MEMORY, "no memory for the header");
    }
    json_decref(root);
    if (s == HD_OK) {
        l->json_len = strlen(l->json);
        l->header_len = (l->json_len + 7) / 8 * 8;
        if (l->header_len > HD_ST_HEADER_MAX)
            s = hd__st_fail(msg, size, HD_ERR_UNSUPPORTED,
                            "the header would take %llu bytes, more than readers read (%u)",
                            (unsigned long long)l->header_len, HD_ST_HEADER_MAX);
    }
    return s;
}

static void free_layout(layout *l)
{
    free(l->json);
    free(l->order);
}

/* Where the bytes go: a file descriptor, or a buffer as large as the whole file. */
typedef struct sink {
    int fd;
    unsigned char *mem;
    size_t at;
    int err; /* errno of the first failed write */
} sink;

static void put(sink *k, const void *p, size_t n)
{
    if (k->err != 0 || n == 0)
        return;
    if (k->mem != NULL) {
        memcpy(k->mem + k->at, p, n);
        k->at += n;
        return;
    }
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = write(k->fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            k->err = w < 0 ? errno : EIO;
            return;
        }
        b += w;
        n -= (size_t)w;
    }
}

static void put_floats(sink *k, const hd_st_entry *e, size_t elements)
{
    unsigned char buf[16384];
    size_t esize = hd_st_dtype_size(e->dtype), per = sizeof buf / esize;
    for (size_t done = 0; done < elements;) {
        size_t n = elements - done < per ? elements - done : per;
        for (size_t i = 0; i < n; i++) {
            float v = e->data[done + i];
            uint32_t u;
            if (e->dtype == HD_ST_F32)
                memcpy(&u, &v, sizeof u);
            else
                u = e->dtype == HD_ST_BF16 ? hd_st_float_to_bf16(v) : hd_st_float_to_f16(v);
            for (size_t b = 0; b < esize; b++)
                buf[i * esize + b] = (unsigned char)(u >> (8 * b));
        }
        put(k, buf, n * esize);
        done += n;
    }
}

static void put_file(sink *k, const layout *l, const hd_st_entry *entries, size_t count)
{
    unsigned char head[8];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(l->header_len >> (8 * i));
    put(k, head, sizeof head);
    put(k, l->json, l->json_len);
    static const char spaces[8] = "        ";
    put(k, spaces, (size_t)(l->header_len - l->json_len));
    for (size_t j = 0; j < count; j++) {
        const hd_st_entry *e = &entries[l->order[j]];
        size_t elements = 1;
        for (int d = 0; d < e->ndim; d++)
            elements *= e->shape[d];
        if (e->raw != NULL)
            put(k, e->raw, elements * hd_st_dtype_size(e->dtype));
        else if (e->data != NULL)
            put_floats(k, e, elements);
    }
}

hd_status hd_st_serialize(const hd_st_entry *entries, size_t count, const hd_st_meta *meta,
                          size_t meta_count, void **image, size_t *size, char *msg, size_t msg_size)
{
    if (image == NULL || size == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_serialize: image and size must not be NULL");
    *image = NULL;
    *size = 0;
    layout l;
    hd_status s = make_layout(entries, count, meta, meta_count, &l, msg, msg_size);
    uint64_t total = 8 + l.header_len + l.data_size;
    if (s == HD_OK && total > SIZE_MAX)
        s = hd__st_fail(msg, msg_size, HD_ERR_SIZE_OVERFLOW, "%llu bytes do not fit in memory",
                        (unsigned long long)total);
    sink k = {.fd = -1, .mem = s == HD_OK ? malloc((size_t)total) : NULL};
    if (s == HD_OK && k.mem == NULL)
        s = hd__st_fail(msg, msg_size, HD_ERR_OUT_OF_MEMORY, "no memory for %llu bytes",
                        (unsigned long long)total);
    if (s == HD_OK) {
        put_file(&k, &l, entries, count);
        *image = k.mem;
        *size = k.at;
    }
    free_layout(&l);
    return s != HD_OK ? s : hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}

/* "<target>.tmp.XXXXXX", created with mode 0666 less the umask as any new file is (mkstemp
 * would make it 0600). Returns the descriptor, or -1 with errno set. */
static int create_temp(char *tmp, size_t size, const char *target)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30) ^
                           ((unsigned long long)getpid() << 12) ^
                           (unsigned long long)(uintptr_t)tmp;
    for (int attempt = 0; attempt < 100; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's MMIX LCG */
        char suffix[7];
        for (int i = 0; i < 6; i++)
            suffix[i] = letters[(x >> (16 + 6 * i)) % (sizeof letters - 1)];
        suffix[6] = '\0';
        int len = snprintf(tmp, size, "%s.tmp.%s", target, suffix);
        if (len < 0 || (size_t)len >= size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1; /* errno: EEXIST */
}

/* The directory entry of the rename, synced: best effort, as some file systems refuse. */
static void sync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash == NULL ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir)
        return;
    memcpy(dir, n > 0 ? path : ".", n > 0 ? n : 1);
    dir[n > 0 ? n : 1] = '\0';
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static hd_status write_temp_and_rename(const char *path, const layout *l,
                                       const hd_st_entry *entries, size_t count, char *msg,
                                       size_t size)
{
    struct stat st;
    bool replaces = lstat(path, &st) == 0;
    if (replaces && !S_ISREG(st.st_mode))
        return hd__st_fail(msg, size, HD_ERR_IO,
                           "'%s' is not a regular file: refusing to replace it", path);
    char tmp[PATH_MAX];
    sink k = {.fd = create_temp(tmp, sizeof tmp, path)};
    if (k.fd < 0)
        return hd__st_fail(msg, size, HD_ERR_IO, "'%s': cannot create a temporary file: %s", path,
                           strerror(errno));
    if (replaces) /* keep the replaced file's permissions, where the file system has them */
        (void)fchmod(k.fd, st.st_mode & 0777);
    put_file(&k, l, entries, count);
    if (k.err == 0 && fsync(k.fd) != 0)
        k.err = errno;
    if (close(k.fd) != 0 && k.err == 0)
        k.err = errno;
    if (k.err == 0 && rename(tmp, path) != 0)
        k.err = errno;
    if (k.err != 0) {
        unlink(tmp);
        return hd__st_fail(msg, size, HD_ERR_IO, "'%s': cannot write: %s", path, strerror(k.err));
    }
    sync_parent(path);
    return HD_OK;
}

hd_status hd_st_write(const char *path, const hd_st_entry *entries, size_t count,
                      const hd_st_meta *meta, size_t meta_count, char *msg, size_t msg_size)
{
    if (path == NULL)
        return hd__st_fail(msg, msg_size, HD_ERR_INVALID_ARGUMENT,
                           "hd_st_write: path must not be NULL");
    layout l;
    hd_status s = make_layout(entries, count, meta, meta_count, &l, msg, msg_size);
    if (s == HD_OK)
        s = write_temp_and_rename(path, &l, entries, count, msg, msg_size);
    free_layout(&l);
    return s != HD_OK ? s : hd__st_fail(msg, msg_size, HD_OK, "%s", "");
}
