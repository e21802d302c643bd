/*
 * libFuzzer target for the training set's reader (data.c). The reader streams a file that may
 * be larger than memory, so the target gives it one: an unlinked temporary file, which the
 * reader opens by its /proc/self/fd path, holding the input's bytes after an 8-byte head. The
 * head says how the file is made and read:
 *
 *   [0]     tokens per window, modulo 17 (0 must be refused)
 *   [1..2]  the vocabulary, little-endian; [3] bit 7 adds 2^31 (every id >= 0 in range)
 *   [3]     bits 4-6: k, the file is the bytes 2^k times over (past stdio's buffer, whose
 *           stale copy would otherwise hide any change to a small file)
 *   [3]     bits 0-1: how the file changes once the windows are read: not at all, cut before
 *           id [5] (modulo the tokens) of the next window and bits 2-3 bytes, that id
 *           overwritten with the int16 of [6..7], or that int16 appended
 *   [4]     the window to seek to
 *
 * Beyond "no crash, no sanitizer report", it checks the contract of data.h: the file is refused
 * exactly when its size is not whole ids, it holds fewer than a window or an id outside the
 * vocabulary, and then with its path in why; an accepted file has n / tokens windows, read in
 * turn and after a seek as the file holds them; after the file changes, the next window is
 * either refused for a reason the new file gives, or holds ids in range, each the old or the
 * new one at its place (the stream's buffer may still hold the old).
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Dtools=false
 *   ninja -C build-fuzz examples/llama/fuzz_data
 *   ./build-fuzz/examples/llama/fuzz_data -max_total_time=60 NEW_DIR \
 *       examples/llama/fuzz/data_corpus
 *
 * tests/run.sh runs it for 30 s (HD_FUZZ_SECONDS) in its "fuzz" stage where clang is installed.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

#define HEAD 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum change { CHANGE_NONE, CHANGE_TRUNCATE, CHANGE_OVERWRITE, CHANGE_APPEND };

/* The token file, and what the fuzzer asked of it. */
typedef struct input {
    size_t tokens, vocab, seek;
    enum change change;
    size_t at;            /* the id of the changed window that the change is at */
    int32_t id;           /* overwritten or appended */
    size_t extra;         /* bytes of the cut id kept */
    unsigned char *bytes; /* the file as written */
    size_t size;          /* its bytes */
    unsigned char *now;   /* the file after the change (size + 4 bytes of room) */
    size_t now_size;
} input;

/* The temporary file, unlinked at once so that no run leaves one behind: the reader opens it
 * again by its /proc/self/fd path, the target rewrites it through fd. */
static int fd = -1;
static char path[64];

static void make_file(void)
{
    char name[] = "/tmp/hd-fuzz-data-XXXXXX";
    if ((fd = mkstemp(name)) < 0 || unlink(name) != 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
}

static void write_file(const void *bytes, size_t size)
{
    if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, bytes, size, 0) != (ssize_t)size))
        abort();
}

static int32_t id_at(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

static bool in_vocab(int32_t id, size_t vocab)
{
    return id >= 0 && (size_t)id < vocab;
}

static bool acceptable(const input *in)
{
    size_t n = in->size / 4;
    if (in->size % 4 != 0 || in->tokens == 0 || n < in->tokens)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!in_vocab(id_at(in->bytes + 4 * i), in->vocab))
            return false;
    return true;
}

static void check_refusal(hd_status s, const char *why)
{
    if (s != HD_ERR_INVALID_ARGUMENT || strncmp(why, path, strlen(path)) != 0)
        abort();
}

/* The next window is w, and it reads as the file holds it. */
static void check_window(llama_data *d, const input *in, size_t w, int32_t *out)
{
    char why[256] = "";
    if (llama_data_next(d, out, why, sizeof why) != HD_OK)
        abort();
    for (size_t i = 0; i < in->tokens; i++)
        if (out[i] != id_at(in->bytes + 4 * (w * in->tokens + i)))
            abort();
}

static void put_id(unsigned char *p, int32_t id)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)((uint32_t)id >> (8 * k));
}

/* The file as the change to window w leaves it, in in->now, and on disk. */
static void change_file(input *in, size_t w)
{
    size_t at = 4 * (w * in->tokens + in->at % in->tokens);
    memcpy(in->now, in->bytes, in->size);
    in->now_size = in->size;
    if (in->change == CHANGE_TRUNCATE)
        in->now_size = at + in->extra;
    else if (in->change == CHANGE_OVERWRITE)
        put_id(in->now + at, in->id);
    else if (in->change == CHANGE_APPEND) {
        put_id(in->now + in->size, in->id);
        in->now_size += 4;
    }
    write_file(in->now, in->now_size);
}

/* Window w after the change: refused for what the new file does wrong, or ids in range, each
 * the old or the new one. */
static void check_changed(llama_data *d, const input *in, size_t w, int32_t *out)
{
    char why[256] = "";
    size_t first = w * in->tokens, end = 4 * (first + in->tokens);
    hd_status s = llama_data_next(d, out, why, sizeof why);
    bool short_file = end > in->now_size, bad_id = false;
    for (size_t i = first; !short_file && i < first + in->tokens; i++)
        bad_id |= !in_vocab(id_at(in->now + 4 * i), in->vocab);
    if (s != HD_OK) {
        if (!short_file && !bad_id)
            abort();
        check_refusal(s, why);
        return;
    }
    for (size_t i = 0; i < in->tokens; i++) {
        size_t at = 4 * (first + i);
        bool old = out[i] == id_at(in->bytes + at);
        bool now = at + 4 <= in->now_size && out[i] == id_at(in->now + at);
        if (!in_vocab(out[i], in->vocab) || !(old || now))
            abort();
    }
}

static void fuzz_open(input *in)
{
    llama_data *d = (llama_data *)&d;
    char why[256] = "";
    write_file(in->bytes, in->size);
    hd_status s = llama_data_open(path, in->tokens, in->vocab, &d, why, sizeof why);
    bool ok = acceptable(in);
    if (s != HD_OK || !ok) {
        if (s == HD_OK || d != NULL || ok)
            abort();
        check_refusal(s, why);
        return;
    }
    size_t windows = llama_data_windows(d);
    int32_t *out = malloc(in->tokens * sizeof *out);
    if (windows != in->size / 4 / in->tokens || out == NULL)
        abort();
    for (size_t w = 0; w <= windows && w < 4; w++)
        check_window(d, in, w % windows, out);
    llama_data_seek(d, in->seek);
    check_window(d, in, in->seek % windows, out);
    change_file(in, (in->seek + 1) % windows);
    check_changed(d, in, (in->seek + 1) % windows, out);
    free(out);
    llama_data_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEAD)
        return 0;
    if (fd < 0)
        make_file();
    size_t body = size - HEAD, times = (size_t)1 << (data[3] >> 4 & 7);
    input in = {
        .tokens = data[0] % 17,
        .vocab = (size_t)data[1] | (size_t)data[2] << 8 | (data[3] & 0x80 ? (size_t)1 << 31 : 0),
        .change = (enum change)(data[3] & 3),
        .extra = data[3] >> 2 & 3,
        .seek = data[4],
        .at = data[5],
        .id = (int16_t)(data[6] | data[7] << 8),
        .bytes = malloc(body * times + 1),
        .size = body * times,
        .now = malloc(body * times + 4),
    };
    if (in.bytes == NULL || in.now == NULL)
        abort();
    for (size_t i = 0; i < times; i++)
        memcpy(in.bytes + i * body, data + HEAD, body);
    fuzz_open(&in);
    free(in.bytes);
    free(in.now);
    return 0;
}
