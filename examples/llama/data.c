/*
 * Token windows from a file of int32 ids (data.h). The file is read twice over: once whole, in
 * chunks, to check every id before training starts, then a window per batch.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "regular_file.h"

#define CHECK_CHUNK (1u << 20) /* ids read at once while checking */

struct llama_data {
    FILE *f;
    char *path;
    size_t tokens, vocab, windows, next;
};

static hd_status refuse(char *why, size_t size, const char *path, const char *what)
{
    snprintf(why, size, "%s: %s", path, what);
    return HD_ERR_INVALID_ARGUMENT;
}

/* The little-endian int32 at p. */
static int32_t id_at(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)u;
}

/* Every one of the n ids of f in [0, vocab), read a chunk at a time into a buffer no larger
 * than the file. */
static hd_status check_ids(llama_data *d, size_t n, size_t vocab, char *why, size_t size)
{
    size_t chunk = n < CHECK_CHUNK ? n : CHECK_CHUNK;
    unsigned char *buf = malloc(chunk * 4u);
    if (buf == NULL)
        return refuse(why, size, d->path, "out of memory");
    hd_status s = HD_OK;
    for (size_t at = 0; at < n && s == HD_OK; at += chunk) {
        size_t want = n - at < chunk ? n - at : chunk;
        if (fread(buf, 4, want, d->f) != want) {
            s = refuse(why, size, d->path, "short read");
            break;
        }
        for (size_t i = 0; i < want; i++) {
            int32_t id = id_at(buf + 4 * i);
            if (id < 0 || (size_t)id >= vocab) {
                snprintf(why, size, "%s: id %ld at %zu is outside the vocabulary of %zu", d->path,
                         (long)id, at + i, vocab);
                s = HD_ERR_INVALID_ARGUMENT;
                break;
            }
        }
    }
    free(buf);
    return s;
}

hd_status llama_data_open(const char *path, size_t tokens, size_t vocab, llama_data **out,
                          char *why, size_t size)
{
    *out = NULL;
    int fd;
    uint64_t file_bytes;
    llama_file_open opened = llama_open_regular(path, &fd, &file_bytes);
    if (opened == LLAMA_FILE_CANNOT_OPEN)
        return refuse(why, size, path, strerror(errno));
    if (opened != LLAMA_FILE_OPENED)
        return refuse(why, size, path, "not a regular file");
    llama_data *d = calloc(1, sizeof *d);
    if (d == NULL || (d->path = strdup(path)) == NULL || (d->f = fdopen(fd, "rb")) == NULL) {
        if (d == NULL || d->f == NULL)
            close(fd);
        llama_data_close(d);
        return refuse(why, size, path, "out of memory");
    }
    size_t bytes = (size_t)file_bytes, n = bytes / 4;
    hd_status s = HD_OK;
    if (bytes % 4 != 0)
        s = refuse(why, size, path, "its size is not a whole number of int32 ids");
    else if (tokens == 0 || n < tokens) {
        snprintf(why, size, "%s holds %zu ids, %zu wanted", path, n, tokens);
        s = HD_ERR_INVALID_ARGUMENT;
    }
    if (s == HD_OK)
        s = check_ids(d, n, vocab, why, size);
    if (s != HD_OK) {
        llama_data_close(d);
        return s;
    }
    d->tokens = tokens;
    d->vocab = vocab;
    d->windows = n / tokens;
    *out = d;
    return HD_OK;
}

void llama_data_close(llama_data *d)
{
    if (d == NULL)
        return;
    if (d->f != NULL)
        fclose(d->f);
    free(d->path);
    free(d);
}

size_t llama_data_windows(const llama_data *d)
{
    return d->windows;
}

void llama_data_seek(llama_data *d, size_t window)
{
    d->next = window % d->windows;
}

hd_status llama_data_next(llama_data *d, int32_t *out, char *why, size_t size)
{
    unsigned char *buf = malloc(d->tokens * 4);
    if (buf == NULL)
        return refuse(why, size, d->path, "out of memory");
    hd_status s = HD_OK;
    if (fseeko(d->f, (off_t)(d->next * d->tokens * 4), SEEK_SET) != 0 ||
        fread(buf, 4, d->tokens, d->f) != d->tokens)
        s = refuse(why, size, d->path, "could not be read again");
    for (size_t i = 0; s == HD_OK && i < d->tokens; i++) {
        out[i] = id_at(buf + 4 * i);
        if (out[i] < 0 || (size_t)out[i] >= d->vocab) /* the file changed since it was checked */
            s = refuse(why, size, d->path, "changed since it was opened: an id is out of range");
    }
    free(buf);
    d->next = (d->next + 1) % d->windows;
    return s;
}
