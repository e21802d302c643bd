/*
 * libFuzzer target for a transformers checkpoint's JSON files (checkpoint.c): each input is
 * given both as a config.json (llama_config_parse) and as a model.safetensors.index.json
 * (llama_index_parse), the bytes as the file readers pass them, not NUL-terminated. Beyond "no
 * crash, no sanitizer report", it checks what the trainer relies on: a refused config leaves
 * the config as it was and says why under its label; an accepted one holds sizes in the ranges
 * checkpoint.h gives, finite numbers, and the rest of the config (tokens, LoRA, AdamW) as it
 * was; an accepted index gives the weight_map's distinct files in their first appearance's
 * order, each a plain name of the index's directory.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Dtools=false
 *   ninja -C build-fuzz examples/llama/fuzz_checkpoint
 *   ./build-fuzz/examples/llama/fuzz_checkpoint -dict=examples/llama/fuzz/checkpoint.dict \
 *       -max_total_time=60 NEW_DIR examples/llama/fuzz/checkpoint_corpus
 *
 * tests/run.sh runs it for 30 s (HD_FUZZ_SECONDS) in its "fuzz" stage where clang is installed.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "checkpoint.h"

#define CONFIG "config.json"
#define INDEX  "model.safetensors.index.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* checkpoint.c's weights source reads a tensor through model.c, which would bring all of
 * libdispatch into the target; the target opens no weights, so this is never called. */
hd_status llama_file_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                            char *why, size_t size)
{
    (void)user, (void)name, (void)rows, (void)cols, (void)dst, (void)why, (void)size;
    abort();
}

/* A config whose every field is set to something a config.json cannot give (NaN aside). */
static llama_config before_parse(void)
{
    return (llama_config){.layers = 1001,
                          .hidden = 1002,
                          .heads = 1003,
                          .kv_heads = 1004,
                          .mlp = 1005,
                          .vocab = 1006,
                          .head_dim = 1007,
                          .tokens = 1008,
                          .rope_theta = -1.0f,
                          .rope_scaling = {-2.0f, -3.0f, -4.0f, 1009},
                          .norm_eps = -5.0f,
                          .tied_embeddings = true,
                          .rank = 1010,
                          .lora_alpha = -6.0f,
                          .lr = -7.0f,
                          .beta1 = -8.0f,
                          .beta2 = -9.0f,
                          .adam_eps = -10.0f,
                          .weight_decay = -11.0f,
                          .max_grad_norm = -12.0f,
                          .schedule = LLAMA_SCHEDULE_COSINE,
                          .warmup_steps = 1011,
                          .total_steps = 1012};
}

/* A refusal names its file first, as "label: ...". */
static void check_refusal(const char *why, const char *label)
{
    size_t n = strlen(label);
    if (strncmp(why, label, n) != 0 || strncmp(why + n, ": ", 2) != 0)
        abort();
}

/* What config.json does not set is as it was. */
static void check_kept(const llama_config *c, const llama_config *b)
{
    if (c->tokens != b->tokens || c->rank != b->rank || c->lora_alpha != b->lora_alpha ||
        c->lr != b->lr || c->beta1 != b->beta1 || c->beta2 != b->beta2 ||
        c->adam_eps != b->adam_eps || c->weight_decay != b->weight_decay ||
        c->max_grad_norm != b->max_grad_norm || c->schedule != b->schedule ||
        c->warmup_steps != b->warmup_steps || c->total_steps != b->total_steps)
        abort();
}

/* An accepted config's values, as checkpoint.h says them. */
static void check_config(const llama_config *c)
{
    const llama_rope_scaling *r = &c->rope_scaling;
    if (c->hidden < 1 || c->mlp < 1 || c->layers < 1 || c->heads < 1 || c->kv_heads < 1 ||
        c->vocab < 1 || c->vocab > INT32_MAX || c->head_dim > 256 || !isfinite(c->norm_eps) ||
        !isfinite(c->rope_theta))
        abort();
    if (r->factor == 0.0f ? r->low_freq_factor != 0.0f || r->high_freq_factor != 0.0f ||
                                r->original_max_positions != 0
                          : !isfinite(r->factor) || !isfinite(r->low_freq_factor) ||
                                !isfinite(r->high_freq_factor) || r->original_max_positions < 1)
        abort();
}

static void fuzz_config(const char *text, size_t size)
{
    llama_config c = before_parse(), b;
    memcpy(&b, &c, sizeof b); /* padding too: a refusal leaves every byte as it was */
    char why[256] = "";
    if (llama_config_parse(text, size, CONFIG, &c, why, sizeof why) != HD_OK) {
        if (memcmp(&c, &b, sizeof c) != 0)
            abort();
        check_refusal(why, CONFIG);
        return;
    }
    check_kept(&c, &b);
    check_config(&c);
}

static bool plain_name(const char *name)
{
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

/* files[0..count) are the weight_map's values, each the first time it appears, in order. */
static void check_files(const char *text, size_t size, const char *const files[], size_t count)
{
    json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, NULL);
    json_t *map = json_object_get(root, "weight_map"), *v;
    const char *key;
    size_t seen = 0;
    json_object_foreach(map, key, v)
    {
        const char *file = json_string_value(v);
        size_t i = 0;
        while (i < seen && strcmp(file, files[i]) != 0)
            i++;
        if (i < seen)
            continue;
        if (seen == count || strcmp(file, files[seen]) != 0)
            abort();
        seen++;
    }
    if (seen != count)
        abort();
    json_decref(root);
}

static void fuzz_index(const char *text, size_t size)
{
    const char **files = (const char **)&files;
    size_t count = 1;
    char why[256] = "";
    if (llama_index_parse(text, size, INDEX, &files, &count, why, sizeof why) != HD_OK) {
        if (files != NULL || count != 0)
            abort();
        check_refusal(why, INDEX);
        return;
    }
    if (count < 1 || count > 4096)
        abort();
    for (size_t i = 0; i < count; i++)
        if (!plain_name(files[i]))
            abort();
    check_files(text, size, files, count);
    free(files);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_config((const char *)data, size);
    fuzz_index((const char *)data, size);
    return 0;
}
