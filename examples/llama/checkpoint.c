/*
 * A transformers checkpoint (checkpoint.h): config.json and the shards' index read with
 * jansson, the weights' shards opened as safetensors files. All are files a user downloads:
 * each is read only if it is a regular file of bounded size, and every value is checked before
 * the model sees it. The JSON files' parsers also take bytes in memory, as the fuzz target
 * (fuzz/fuzz_checkpoint.c) gives them.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "checkpoint.h"
#include "regular_file.h"
#include "safetensors.h"

/* A config.json or an index is a few kilobytes to a few megabytes (an index names every tensor). */
#define JSON_MAX_BYTES (64u << 20)
#define SHARDS_MAX     4096

static hd_status fail(char *why, size_t size, hd_status s, const char *fmt, const char *a,
                      const char *b)
{
    snprintf(why, size, fmt, a, b);
    return s;
}

/* The bytes of the regular file at path (*length of them), or NULL with the reason in why. */
static char *read_text(const char *path, size_t *length, char *why, size_t size)
{
    int fd;
    uint64_t bytes;
    llama_file_open opened = llama_open_regular(path, &fd, &bytes);
    if (opened == LLAMA_FILE_CANNOT_OPEN) {
        snprintf(why, size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (opened != LLAMA_FILE_OPENED || bytes > JSON_MAX_BYTES) {
        snprintf(why, size, "%s: not a regular file of at most %u MiB", path, JSON_MAX_BYTES >> 20);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t n = (size_t)bytes, got = 0;
    char *text = malloc(n + 1);
    while (text != NULL && got < n) {
        ssize_t r = read(fd, text + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (text == NULL || got != n) {
        snprintf(why, size, "%s: %s", path, text == NULL ? "out of memory" : "short read");
        free(text);
        return NULL;
    }
    *length = n;
    return text;
}

/* The JSON object that text holds, or NULL with the reason in why (label: where it is from). */
static json_t *parse_json(const char *label, const char *text, size_t length, char *why,
                          size_t size)
{
    json_error_t error;
    json_t *root = json_loadb(text, length, JSON_REJECT_DUPLICATES, &error);
    if (root == NULL)
        snprintf(why, size, "%s: line %d: %s", label, error.line, error.text);
    else if (!json_is_object(root)) {
        snprintf(why, size, "%s: not a JSON object", label);
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* ---- config.json ---- */

typedef struct reader {
    const char *label;
    char *why;
    size_t size;
    bool failed;
} reader;

static void refuse(reader *r, const char *key, const char *what)
{
    if (!r->failed)
        snprintf(r->why, r->size, "%s: \"%s\" %s", r->label, key, what);
    r->failed = true;
}

/* An integer in [1, max] at key into *out; absent: fallback, or refused where fallback is 0. */
static void read_size(reader *r, const json_t *o, const char *key, size_t fallback, size_t max,
                      size_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v)) {
        if (fallback == 0)
            refuse(r, key, "is missing");
        *out = fallback;
        return;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || (uintmax_t)json_integer_value(v) > max)
        refuse(r, key, "is not an integer in range");
    else
        *out = (size_t)json_integer_value(v);
}

/* A finite number at key into *out (absent or null: left as it is). A double past float's
 * range is refused too: converted it would be infinite, where the conversion is defined at all. */
static void read_number(reader *r, const json_t *o, const char *key, float *out)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v))
        return;
    double d = json_number_value(v);
    if (!json_is_number(v) || !isfinite(d) || fabs(d) > FLT_MAX)
        refuse(r, key, "is not a finite number in float's range");
    else
        *out = (float)d;
}

/* A boolean at key: want it (absent or null: fallback). */
static bool read_bool(reader *r, const json_t *o, const char *key, bool fallback)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v))
        return fallback;
    if (!json_is_boolean(v))
        refuse(r, key, "is not true or false");
    return json_is_true(v);
}

/* A string at key equal to want, or absent or null. */
static void expect_string(reader *r, const json_t *o, const char *key, const char *want,
                          const char *what)
{
    const json_t *v = json_object_get(o, key);
    if (v != NULL && !json_is_null(v) &&
        (!json_is_string(v) || strcmp(json_string_value(v), want) != 0))
        refuse(r, key, what);
}

/* The rope parameters of o (rope_scaling, or transformers 5's rope_parameters, which also
 * holds rope_theta): none, "default", or "llama3". */
static void read_rope(reader *r, const json_t *o, const char *key, llama_config *c)
{
    const json_t *p = json_object_get(o, key);
    if (p == NULL || json_is_null(p))
        return;
    if (!json_is_object(p)) {
        refuse(r, key, "is not an object");
        return;
    }
    read_number(r, p, "rope_theta", &c->rope_theta);
    const json_t *type = json_object_get(p, "rope_type");
    if (type == NULL)
        type = json_object_get(p, "type"); /* the older name */
    const char *name = json_is_string(type) ? json_string_value(type) : NULL;
    if (type == NULL || json_is_null(type) || (name != NULL && strcmp(name, "default") == 0))
        return;
    if (name == NULL || strcmp(name, "llama3") != 0) {
        refuse(r, key, "names a rope_type other than \"default\" and \"llama3\"");
        return;
    }
    llama_rope_scaling s = {0};
    size_t original = 0;
    read_number(r, p, "factor", &s.factor);
    read_number(r, p, "low_freq_factor", &s.low_freq_factor);
    read_number(r, p, "high_freq_factor", &s.high_freq_factor);
    read_size(r, p, "original_max_position_embeddings", 0, SIZE_MAX, &original);
    s.original_max_positions = original;
    if (s.factor == 0.0f)
        refuse(r, "factor", "of the llama3 rope scaling is missing or 0");
    c->rope_scaling = s;
}

hd_status llama_config_parse(const char *text, size_t length, const char *label, llama_config *c,
                             char *why, size_t size)
{
    json_t *root = parse_json(label, text, length, why, size);
    if (root == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    reader r = {label, why, size, false};
    llama_config out = *c;
    /* Mistral's layers are Llama's with a sliding window; Qwen2's have biases on q, k and v */
    const json_t *type = json_object_get(root, "model_type");
    const char *model = json_is_string(type) ? json_string_value(type) : "llama";
    bool qwen2 = strcmp(model, "qwen2") == 0;
    if ((type != NULL && !json_is_null(type) && !json_is_string(type)) ||
        (strcmp(model, "llama") != 0 && strcmp(model, "mistral") != 0 && !qwen2))
        refuse(&r, "model_type", "is not \"llama\", \"mistral\" or \"qwen2\"");
    if (qwen2 && read_bool(&r, root, "use_sliding_window", false))
        refuse(&r, "use_sliding_window",
               "is true: Qwen2's windows of some layers only are not run here");
    expect_string(&r, root, "hidden_act", "silu", "is not \"silu\" (SwiGLU)");
    if (read_bool(&r, root, "attention_bias", false))
        refuse(&r, "attention_bias", "is true: the projections take no bias here");
    if (read_bool(&r, root, "mlp_bias", false))
        refuse(&r, "mlp_bias", "is true: the projections take no bias here");
    read_size(&r, root, "hidden_size", 0, SIZE_MAX, &out.hidden);
    read_size(&r, root, "intermediate_size", 0, SIZE_MAX, &out.mlp);
    read_size(&r, root, "num_hidden_layers", 0, SIZE_MAX, &out.layers);
    read_size(&r, root, "num_attention_heads", 0, SIZE_MAX, &out.heads);
    read_size(&r, root, "num_key_value_heads", out.heads, SIZE_MAX, &out.kv_heads);
    read_size(&r, root, "vocab_size", 0, INT32_MAX, &out.vocab);
    out.head_dim = 0;
    read_size(&r, root, "head_dim", SIZE_MAX, 256, &out.head_dim);
    if (out.head_dim == SIZE_MAX)
        out.head_dim = 0; /* absent or null: hidden / heads */
    out.norm_eps = 1e-6f; /* LlamaConfig's default */
    read_number(&r, root, "rms_norm_eps", &out.norm_eps);
    out.rope_theta = 10000.0f;
    read_number(&r, root, "rope_theta", &out.rope_theta);
    out.rope_scaling = (llama_rope_scaling){0};
    read_rope(&r, root, "rope_scaling", &out);
    read_rope(&r, root, "rope_parameters", &out);
    out.tied_embeddings = read_bool(&r, root, "tie_word_embeddings", false);
    out.sliding_window = SIZE_MAX;
    if (!qwen2) /* Qwen2's applies only under use_sliding_window, refused above */
        read_size(&r, root, "sliding_window", SIZE_MAX, SIZE_MAX - 1, &out.sliding_window);
    if (out.sliding_window == SIZE_MAX)
        out.sliding_window = 0; /* absent or null: none */
    out.qkv_bias = qwen2;
    json_decref(root);
    if (r.failed)
        return HD_ERR_INVALID_ARGUMENT;
    *c = out;
    return HD_OK;
}

hd_status llama_config_read(const char *path, llama_config *c, char *why, size_t size)
{
    size_t length = 0;
    char *text = read_text(path, &length, why, size);
    if (text == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    hd_status s = llama_config_parse(text, length, path, c, why, size);
    free(text);
    return s;
}

/* ---- weights ---- */

struct llama_weights {
    char *path; /* as given, for messages */
    size_t count;
    hd_st_file *files[];
};

/* A shard's name: a file of the index's directory, nothing else. */
static bool plain_file_name(const char *name)
{
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* The distinct files of an index's weight_map, in their first appearance's order, into
 * names (count of them, strings of root); HD_OK or a refusal in why. The files met are kept in
 * a JSON object, whose lookups take no longer with more of them: an index of millions of
 * entries is read in one pass. */
static hd_status index_files(const char *label, const json_t *root, const char *names[],
                             size_t *count, char *why, size_t size)
{
    const json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0)
        return fail(why, size, HD_ERR_INVALID_ARGUMENT, "%s: %s", label,
                    "no weight_map of tensor names to files");
    json_t *seen = json_object();
    if (seen == NULL)
        return fail(why, size, HD_ERR_OUT_OF_MEMORY, "%s: %s", label, "out of memory");
    const char *key;
    const json_t *v;
    hd_status s = HD_OK;
    *count = 0;
    json_object_foreach((json_t *)map, key, v)
    {
        const char *file = json_is_string(v) ? json_string_value(v) : NULL;
        if (file == NULL || !plain_file_name(file)) {
            s = fail(why, size, HD_ERR_INVALID_ARGUMENT,
                     "%s: the file of \"%s\" is not a file name of its directory", label, key);
            break;
        }
        if (json_object_get(seen, file) != NULL)
            continue;
        if (*count == SHARDS_MAX) {
            s = fail(why, size, HD_ERR_INVALID_ARGUMENT, "%s: %s", label, "more than 4096 files");
            break;
        }
        if (json_object_set_new(seen, file, json_true()) != 0) {
            s = fail(why, size, HD_ERR_OUT_OF_MEMORY, "%s: %s", label, "out of memory");
            break;
        }
        names[(*count)++] = file;
    }
    json_decref(seen);
    return s;
}

/* names[0..count) copied into one block, the pointers then the strings, or NULL. */
static const char **copy_names(const char *const names[], size_t count)
{
    size_t bytes = count * sizeof(char *);
    for (size_t i = 0; i < count; i++)
        bytes += strlen(names[i]) + 1;
    char **copy = malloc(bytes);
    if (copy == NULL)
        return NULL;
    char *at = (char *)(copy + count);
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(names[i]) + 1;
        copy[i] = memcpy(at, names[i], n);
        at += n;
    }
    return (const char **)copy;
}

hd_status llama_index_parse(const char *text, size_t length, const char *label, const char ***files,
                            size_t *count, char *why, size_t size)
{
    *files = NULL;
    *count = 0;
    json_t *root = parse_json(label, text, length, why, size);
    if (root == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    const char **names = malloc(SHARDS_MAX * sizeof *names);
    size_t n = 0;
    hd_status s =
        names == NULL ? HD_ERR_OUT_OF_MEMORY : index_files(label, root, names, &n, why, size);
    if (s == HD_OK && (*files = copy_names(names, n)) == NULL)
        s = HD_ERR_OUT_OF_MEMORY;
    if (s == HD_OK)
        *count = n;
    else if (s == HD_ERR_OUT_OF_MEMORY)
        snprintf(why, size, "%s: out of memory", label);
    json_decref(root);
    free(names);
    return s;
}

static hd_status open_files(const char *dir, const char *const names[], size_t count,
                            const char *given, llama_weights **out, char *why, size_t size)
{
    llama_weights *w = calloc(1, sizeof *w + count * sizeof w->files[0]);
    if (w == NULL || (w->path = strdup(given)) == NULL) {
        free(w);
        snprintf(why, size, "out of memory");
        return HD_ERR_OUT_OF_MEMORY;
    }
    hd_status s = HD_OK;
    for (size_t i = 0; i < count && s == HD_OK; i++) {
        char path[4096];
        if (dir == NULL)
            snprintf(path, sizeof path, "%s", names[i]);
        else if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= sizeof path) {
            snprintf(why, size, "%s: path too long", dir);
            s = HD_ERR_INVALID_ARGUMENT;
            break;
        }
        if ((s = hd_st_open(path, &w->files[i], why, size)) == HD_OK)
            w->count++;
    }
    if (s != HD_OK) {
        llama_weights_close(w);
        return s;
    }
    *out = w;
    return HD_OK;
}

hd_status llama_weights_open(const char *path, llama_weights **out, char *why, size_t size)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(why, size, HD_ERR_INVALID_ARGUMENT, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        const char *one[] = {path};
        return open_files(NULL, one, 1, path, out, why, size);
    }
    char index[4096];
    if ((size_t)snprintf(index, sizeof index, "%s/model.safetensors.index.json", path) >=
        sizeof index)
        return fail(why, size, HD_ERR_INVALID_ARGUMENT, "%s: %s", path, "path too long");
    if (stat(index, &st) != 0) {
        const char *one[] = {"model.safetensors"};
        return open_files(path, one, 1, path, out, why, size);
    }
    size_t length = 0, count = 0;
    char *text = read_text(index, &length, why, size);
    if (text == NULL)
        return HD_ERR_INVALID_ARGUMENT;
    const char **names = NULL;
    hd_status s = llama_index_parse(text, length, index, &names, &count, why, size);
    free(text);
    if (s == HD_OK)
        s = open_files(path, names, count, path, out, why, size);
    free(names);
    return s;
}

void llama_weights_close(llama_weights *w)
{
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->count; i++)
        hd_st_close(w->files[i]);
    free(w->path);
    free(w);
}

hd_status llama_weights_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                               char *why, size_t size)
{
    llama_weights *w = user;
    for (size_t i = 0; i < w->count; i++) {
        const hd_st_tensor *t = NULL;
        char unused[8];
        if (hd_st_find(w->files[i], name, &t, unused, sizeof unused) == HD_OK)
            return llama_file_source(w->files[i], name, rows, cols, dst, why, size);
    }
    return fail(why, size, HD_ERR_INVALID_ARGUMENT, "%s holds no tensor \"%s\"", w->path, name);
}
