/*
 * llama_lora: LoRA fine-tuning of a Llama-style decoder on the library (examples/llama/model.h):
 * transformers' Llama, Mistral (its sliding window too) and Qwen2 (its q, k and v biases).
 *
 *   llama_lora [options]
 *
 * The model's shape comes from a transformers config.json (--config) and the options, which
 * change it; its frozen weights from safetensors (--weights: a file, or a checkpoint directory
 * and its shards; transformers' names, "lm_head.weight" absent where the embeddings are tied) or
 * from a seed. LoRA factors come from a file (--lora, PEFT's names, with or without the
 * "base_model.model." prefix of a PEFT adapter's adapter_model.safetensors) or are initialised
 * as PEFT does (A Kaiming-uniform, B zeros); the trained ones go to a file (--save-lora, without
 * the prefix) or a PEFT adapter directory (--save-peft), which peft.PeftModel.from_pretrained
 * puts on the base model. Tokens come from a file of little-endian int32 ids (--data: each step
 * the next window of --tokens of them, from the start again after the last whole window) or are
 * drawn from the seed, once for every batch; a step takes --accumulate batches, their gradients
 * added (transformers' gradient accumulation). Each step prints its loss, its time and tokens
 * per second; the loss is the only value read back from the device during a step. A held-out
 * set (--eval-data, the same form) is evaluated after the last step, or every --eval-every.
 * --save-state keeps the factors, AdamW's moments and the step; --resume goes on from them.
 *
 * Exit status: 0 after the last step; 1 when --expect-fall is given and the last loss is not
 * below the first; 2 for a bad option or input file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hd/dispatch.h>

#include "checkpoint.h"
#include "data.h"
#include "model.h"
#include "safetensors.h"

typedef struct options {
    llama_config c;
    long steps;
    size_t accumulate; /* batches of --tokens a step */
    unsigned long long seed;
    const char *weights, *lora, *data, *eval_data, *save_lora, *save_peft, *save_grads;
    const char *precision, *json, *resume, *save_state;
    long first;        /* the run's first step: 1, or the one after a resumed state's */
    size_t eval_every; /* steps between evaluations of --eval-data (0: after the last only) */
    size_t sequences[64];
    size_t sequence_count;
    bool expect_fall;
    bool deterministic;
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: llama_lora [options]\n"
            "  model:    --config FILE (a transformers config.json; the options below change it)\n"
            "            --layers N --hidden N --heads N --kv-heads N --mlp N --vocab N\n"
            "            --head-dim N (hidden / heads) --theta X (RoPE base, 10000)\n"
            "            --rope-llama3 FACTOR,LOW,HIGH,ORIGINAL (Llama 3.1's RoPE scaling)\n"
            "            --eps X (RMS norm, 1e-5) --tied --qkv-bias (Qwen2's biases)\n"
            "            --window N (Mistral's sliding window: the tokens each attends to at\n"
            "            most, itself included; 0: none)\n"
            "  data:     --tokens N (a batch) --data FILE (int32 ids, the next --tokens of\n"
            "            them each batch) --sequences a,b,... (each batch's packing)\n"
            "            --accumulate K (batches a step, their gradients added: 1)\n"
            "            --eval-data FILE (held-out int32 ids: the mean loss of all its windows)\n"
            "            --eval-every N (steps between evaluations; 0: after the last step)\n"
            "  LoRA:     --rank N (16) --alpha X (32)\n"
            "  AdamW:    --lr X (1e-4) --weight-decay X (0) --max-grad-norm X (0: none)\n"
            "            --schedule constant|linear|cosine (the lr's decay to 0 over --steps)\n"
            "            --warmup N (steps of a linear rise from 0, 0)\n"
            "  run:      --steps N (10) --seed N (1) --precision fp32|tf32|fp32x3\n"
            "            --deterministic (the same bits on every run: attention's dq summed in a\n"
            "            fixed order, a little slower; also $HD_DETERMINISTIC=1)\n"
            "  files:    --weights FILE|DIR (safetensors; a directory's model.safetensors or the\n"
            "            shards of its model.safetensors.index.json)\n"
            "            --lora FILE (safetensors; a PEFT adapter's too)\n"
            "            --save-peft DIR (a PEFT adapter: adapter_model.safetensors and\n"
            "            adapter_config.json)\n"
            "            --save-state FILE (the factors and AdamW's moments after the last\n"
            "            step) --resume FILE (go on from such a state, up to --steps)\n"
            "            --save-lora FILE --save-grads FILE (safetensors out; the gradients\n"
            "            of the first step, before its update) --json FILE (the run's figures)\n"
            "  check:    --expect-fall (exit 1 unless the loss falls)\n");
}

static bool parse_size(const char *text, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-')
        return false;
    *out = (size_t)v;
    return true;
}

static bool parse_float(const char *text, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
        return false;
    *out = (float)v;
    return true;
}

static bool parse_sequences(const char *text, options *o)
{
    o->sequence_count = 0;
    while (*text != '\0') {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno != 0 || end == text || o->sequence_count == 64 || text[0] == '-')
            return false;
        o->sequences[o->sequence_count++] = (size_t)v;
        text = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return false;
    }
    return o->sequence_count > 0;
}

/* FACTOR,LOW,HIGH,ORIGINAL: transformers' rope_scaling {"rope_type": "llama3", "factor",
 * "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}. */
static bool parse_rope_llama3(const char *text, llama_rope_scaling *out)
{
    char parts[4][64];
    const char *at = text;
    for (size_t n = 0; n < 4; n++) {
        const char *comma = strchr(at, ',');
        size_t len = comma != NULL ? (size_t)(comma - at) : strlen(at);
        if (len >= sizeof parts[n] || (comma == NULL) != (n == 3))
            return false; /* four values, three commas */
        memcpy(parts[n], at, len);
        parts[n][len] = '\0';
        at += len + 1;
    }
    return parse_float(parts[0], &out->factor) && parse_float(parts[1], &out->low_freq_factor) &&
           parse_float(parts[2], &out->high_freq_factor) &&
           parse_size(parts[3], &out->original_max_positions);
}

/* One option and its value; false for an unknown option or a bad value. */
static bool parse_option(options *o, const char *name, const char *value)
{
    struct {
        const char *name;
        size_t *target;
    } sizes[] = {{"--layers", &o->c.layers},
                 {"--hidden", &o->c.hidden},
                 {"--heads", &o->c.heads},
                 {"--kv-heads", &o->c.kv_heads},
                 {"--mlp", &o->c.mlp},
                 {"--vocab", &o->c.vocab},
                 {"--tokens", &o->c.tokens},
                 {"--rank", &o->c.rank},
                 {"--head-dim", &o->c.head_dim},
                 {"--window", &o->c.sliding_window},
                 {"--accumulate", &o->accumulate},
                 {"--eval-every", &o->eval_every}};
    struct {
        const char *name;
        float *target;
    } floats[] = {{"--theta", &o->c.rope_theta},          {"--eps", &o->c.norm_eps},
                  {"--alpha", &o->c.lora_alpha},          {"--lr", &o->c.lr},
                  {"--weight-decay", &o->c.weight_decay}, {"--max-grad-norm", &o->c.max_grad_norm}};
    struct {
        const char *name;
        const char **target;
    } files[] = {{"--weights", &o->weights},
                 {"--lora", &o->lora},
                 {"--data", &o->data},
                 {"--eval-data", &o->eval_data},
                 {"--save-lora", &o->save_lora},
                 {"--save-peft", &o->save_peft},
                 {"--save-grads", &o->save_grads},
                 {"--precision", &o->precision},
                 {"--json", &o->json},
                 {"--resume", &o->resume},
                 {"--save-state", &o->save_state}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(name, sizes[i].name) == 0)
            return parse_size(value, sizes[i].target);
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (strcmp(name, floats[i].name) == 0)
            return parse_float(value, floats[i].target);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strcmp(name, files[i].name) == 0) {
            *files[i].target = value;
            return true;
        }
    size_t n;
    if (strcmp(name, "--steps") == 0 && parse_size(value, &n) && n > 0) {
        o->steps = (long)n;
        return true;
    }
    if (strcmp(name, "--seed") == 0 && parse_size(value, &n)) {
        o->seed = n;
        return true;
    }
    if (strcmp(name, "--sequences") == 0)
        return parse_sequences(value, o);
    if (strcmp(name, "--rope-llama3") == 0)
        return parse_rope_llama3(value, &o->c.rope_scaling);
    if (strcmp(name, "--warmup") == 0)
        return parse_size(value, &o->c.warmup_steps);
    if (strcmp(name, "--schedule") == 0) {
        static const char *const names[] = {"constant", "linear", "cosine"};
        for (int i = 0; i < 3; i++)
            if (strcmp(value, names[i]) == 0) {
                o->c.schedule = (llama_schedule)i;
                return true;
            }
    }
    return false;
}

static bool parse_args(int argc, char **argv, options *o)
{
    llama_config_defaults(&o->c);
    o->c.layers = 2;
    o->c.hidden = 64;
    o->c.heads = 4;
    o->c.kv_heads = 2;
    o->c.mlp = 128;
    o->c.vocab = 256;
    o->c.tokens = 64;
    o->steps = 10;
    o->first = 1;
    o->accumulate = 1;
    o->seed = 1;
    /* the shape of a config.json first, wherever --config stands: the other options change it */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0) {
            char why[512];
            if (llama_config_read(argv[i + 1], &o->c, why, sizeof why) != HD_OK) {
                fprintf(stderr, "llama_lora: --config %s\n", why);
                return false;
            }
        }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            i++;
        } else if (strcmp(argv[i], "--tied") == 0) {
            o->c.tied_embeddings = true;
        } else if (strcmp(argv[i], "--qkv-bias") == 0) {
            o->c.qkv_bias = true;
        } else if (strcmp(argv[i], "--expect-fall") == 0) {
            o->expect_fall = true;
        } else if (strcmp(argv[i], "--deterministic") == 0) {
            o->deterministic = true;
        } else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (i + 1 >= argc || !parse_option(o, argv[i], argv[i + 1])) {
            fprintf(stderr, "llama_lora: bad option or value: %s%s%s\n", argv[i],
                    i + 1 < argc ? " " : "", i + 1 < argc ? argv[i + 1] : "");
            return false;
        } else {
            i++;
        }
    }
    o->c.total_steps = (size_t)o->steps; /* where a decaying learning rate reaches 0 */
    if (o->accumulate == 0 || o->accumulate > 4096) {
        fprintf(stderr, "llama_lora: --accumulate takes 1 to 4096 batches a step\n");
        return false;
    }
    /* a token's target is the next one of its sequence: a sequence of one token has none, and a
     * step with no target at all has no loss (the mean of none, NaN) and no gradient */
    size_t sum = 0;
    bool any_target = o->sequence_count == 0 && o->c.tokens >= 2;
    for (size_t i = 0; i < o->sequence_count; i++) {
        sum += o->sequences[i];
        any_target = any_target || o->sequences[i] >= 2;
    }
    if (o->sequence_count > 0 && sum != o->c.tokens) {
        fprintf(stderr, "llama_lora: --sequences add up to %zu, not --tokens %zu\n", sum,
                o->c.tokens);
        return false;
    }
    if (!any_target) {
        if (o->sequence_count == 0)
            fprintf(stderr, "llama_lora: --tokens %zu: a step needs two tokens at least (a "
                            "token's target is the next one)\n",
                    o->c.tokens);
        else
            fprintf(stderr, "llama_lora: every one of --sequences is a single token: none has a "
                            "next one to predict\n");
        return false;
    }
    return true;
}

/* ---- inputs ---- */

/* The steps' tokens: the data file's windows, one a step (data.h), or without --data one draw
 * from the seed for every step. */
typedef struct batches {
    llama_data *data; /* NULL: drawn from the seed */
    size_t count;     /* a step's batches (--accumulate) */
    int32_t *tokens;  /* the current step's, count windows of --tokens */
    const int32_t **each; /* each batch's */
    llama_data *held_out; /* --eval-data, or NULL */
    int32_t *eval_tokens; /* a window of it */
} batches;

/* The next step's batches into b->tokens. */
static bool next_batch(batches *b)
{
    char why[512];
    for (size_t i = 0; b->data != NULL && i < b->count; i++)
        if (llama_data_next(b->data, (int32_t *)b->each[i], why, sizeof why) != HD_OK) {
            fprintf(stderr, "llama_lora: %s\n", why);
            return false;
        }
    return true;
}

/* The first step's batches in b->tokens (the data file's first windows, or the seed's draw in
 * each), and the held-out set (--eval-data) opened. */
static bool open_batches(const options *o, batches *b)
{
    size_t t = o->c.tokens;
    *b = (batches){.count = o->accumulate,
                   .tokens = malloc(o->accumulate * t * sizeof *b->tokens),
                   .each = malloc(o->accumulate * sizeof *b->each)};
    if (b->tokens == NULL || b->each == NULL) {
        fprintf(stderr, "llama_lora: no host memory for %zu batches of %zu tokens\n", b->count, t);
        return false;
    }
    for (size_t i = 0; i < b->count; i++)
        b->each[i] = b->tokens + i * t;
    if (o->data == NULL) {
        unsigned long long s = o->seed * 0x9e3779b97f4a7c15ull + 17;
        for (size_t i = 0; i < t; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b->tokens[i] = (int32_t)((s >> 33) % o->c.vocab);
        }
        for (size_t i = 1; i < b->count; i++)
            memcpy(b->tokens + i * t, b->tokens, t * sizeof *b->tokens);
    }
    char why[512];
    if (o->eval_data != NULL &&
        ((b->eval_tokens = malloc(t * sizeof *b->eval_tokens)) == NULL ||
         llama_data_open(o->eval_data, t, o->c.vocab, &b->held_out, why, sizeof why) != HD_OK)) {
        fprintf(stderr, "llama_lora: --eval-data %s\n", b->eval_tokens ? why : "out of memory");
        return false;
    }
    if (o->data == NULL)
        return true;
    if (llama_data_open(o->data, t, o->c.vocab, &b->data, why, sizeof why) != HD_OK) {
        fprintf(stderr, "llama_lora: --data %s\n", why);
        return false;
    }
    /* a resumed run goes on where the steps before it stopped */
    llama_data_seek(b->data, (size_t)(o->first - 1) * o->accumulate);
    return next_batch(b);
}

static void close_batches(batches *b)
{
    llama_data_close(b->data);
    llama_data_close(b->held_out);
    free(b->tokens);
    free(b->each);
    free(b->eval_tokens);
}

/* ---- outputs ---- */

/* The LoRA factors (kind 0) or gradients (kind 1) as a safetensors file, PEFT's names without
 * its "base_model.model." prefix. */
static bool save_lora(llama_model *m, int kind, const char *path)
{
    char why[512];
    if (llama_save_lora(m, kind, path, "", why, sizeof why) == HD_OK)
        return true;
    fprintf(stderr, "llama_lora: writing %s: %s\n", path, why);
    return false;
}

static bool save_peft(llama_model *m, const char *dir)
{
    char why[512];
    if (llama_save_peft(m, dir, why, sizeof why) == HD_OK)
        return true;
    fprintf(stderr, "llama_lora: writing the PEFT adapter %s: %s\n", dir, why);
    return false;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void write_json(const options *o, hd_context *ctx, const float *losses,
                       const double *seconds, long count, size_t bytes)
{
    FILE *f = fopen(o->json, "w");
    if (f == NULL) {
        fprintf(stderr, "llama_lora: %s: %s\n", o->json, strerror(errno));
        return;
    }
    fprintf(f, "{\"schema\": \"hd-llama/1\", \"device\": \"%s\", \"precision\": \"%s\",\n",
            hd_context_device_name(ctx), hd_precision_name(hd_context_gemm_precision(ctx)));
    fprintf(f, " \"tokens\": %zu, \"model_bytes\": %zu, \"first_step\": %ld,\n \"losses\": [",
            o->c.tokens * o->accumulate, bytes, o->first);
    for (long i = 0; i < count; i++)
        fprintf(f, "%s%.9g", i ? ", " : "", (double)losses[i]);
    fprintf(f, "],\n \"step_seconds\": [");
    for (long i = 0; i < count; i++)
        fprintf(f, "%s%.9g", i ? ", " : "", seconds[i]);
    fprintf(f, "]}\n");
    fclose(f);
}

/* ---- the run ---- */

/* The mean loss of the current weights over every window of the held-out set (each window a
 * batch, packed as the training batches are), printed after step `step`. */
static bool evaluate(const options *o, hd_context *ctx, llama_model *m, llama_data *held_out,
                     int32_t *tokens, long step)
{
    hd_sequences seq = {o->sequences, o->sequence_count};
    size_t windows = llama_data_windows(held_out);
    double sum = 0.0;
    char why[512];
    for (size_t i = 0; i < windows; i++) {
        float loss;
        if (llama_data_next(held_out, tokens, why, sizeof why) != HD_OK) {
            fprintf(stderr, "llama_lora: --eval-data %s\n", why);
            return false;
        }
        if (llama_eval(m, tokens, &seq, &loss) != HD_OK) {
            fprintf(stderr, "llama_lora: evaluation: %s\n", hd_context_last_error(ctx));
            return false;
        }
        sum += loss;
    }
    printf("eval after step %ld: loss %.6f over %zu windows of %s\n", step, sum / (double)windows,
           windows, o->eval_data);
    fflush(stdout);
    return true;
}

static int train(const options *o, hd_context *ctx, llama_model *m, batches *b)
{
    hd_sequences seq = {o->sequences, o->sequence_count};
    if (o->save_grads != NULL) {
        float loss;
        hd_status s = llama_gradients(m, b->tokens, &seq, &loss);
        if (s != HD_OK || !save_lora(m, 1, o->save_grads)) {
            fprintf(stderr, "llama_lora: gradients: %s\n", hd_context_last_error(ctx));
            return 2;
        }
    }
    const long run = o->steps - o->first + 1; /* steps this run takes */
    float *losses = calloc((size_t)run, sizeof *losses);
    double *seconds = calloc((size_t)run, sizeof *seconds);
    if (losses == NULL || seconds == NULL) {
        free(losses);
        free(seconds);
        return 2;
    }
    int status = 0;
    for (long step = o->first; step <= o->steps && status == 0; step++) {
        const long i = step - o->first;
        if (i > 0 && !next_batch(b)) {
            status = 2;
            break;
        }
        double start = now_seconds();
        hd_status s = llama_train_step_batches(m, b->each, b->count, &seq, step, &losses[i]);
        seconds[i] = now_seconds() - start;
        if (s != HD_OK) {
            fprintf(stderr, "llama_lora: step %ld: %s\n", step, hd_context_last_error(ctx));
            status = 2;
            break;
        }
        printf("step %3ld  loss %.6f  %8.2f ms  %9.0f tokens/s\n", step, (double)losses[i],
               1e3 * seconds[i], (double)(o->c.tokens * o->accumulate) / seconds[i]);
        fflush(stdout);
        bool eval_now = (o->eval_every > 0 && step % (long)o->eval_every == 0) || step == o->steps;
        if (b->held_out != NULL && eval_now &&
            !evaluate(o, ctx, m, b->held_out, b->eval_tokens, step))
            status = 2;
    }
    if (status == 0) {
        double sorted[4096];
        size_t n = (size_t)run < 4096 ? (size_t)run : 4096;
        memcpy(sorted, seconds, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, compare_doubles);
        double median = sorted[n / 2];
        printf("median step %.2f ms, %.0f tokens/s; model tensors %.1f MiB\n", 1e3 * median,
               (double)(o->c.tokens * o->accumulate) / median,
               (double)llama_bytes(m) / (1024.0 * 1024.0));
        if (o->json != NULL)
            write_json(o, ctx, losses, seconds, run, llama_bytes(m));
        if (o->save_lora != NULL && !save_lora(m, 0, o->save_lora))
            status = 2;
        if (o->save_peft != NULL && !save_peft(m, o->save_peft))
            status = 2;
        char why[512];
        if (o->save_state != NULL &&
            llama_save_state(m, o->save_state, o->steps, why, sizeof why) != HD_OK) {
            fprintf(stderr, "llama_lora: writing %s: %s\n", o->save_state, why);
            status = 2;
        }
        if (o->expect_fall && !(losses[run - 1] < losses[0])) {
            fprintf(stderr, "llama_lora: the loss did not fall (%g to %g)\n", (double)losses[0],
                    (double)losses[run - 1]);
            status = 1;
        }
    }
    free(losses);
    free(seconds);
    return status;
}

static hd_status load(const options *o, llama_model *m, char *why, size_t size)
{
    llama_weights *weights = NULL;
    hd_st_file *lora = NULL;
    hd_status s = HD_OK;
    uint64_t seed = o->seed;
    if (o->weights != NULL && (s = llama_weights_open(o->weights, &weights, why, size)) != HD_OK)
        return s;
    s = weights != NULL ? llama_load_weights(m, llama_weights_source, weights, why, size)
                        : llama_load_weights(m, llama_seeded_source, &seed, why, size);
    if (s == HD_OK && o->lora != NULL)
        s = hd_st_open(o->lora, &lora, why, size);
    if (s == HD_OK)
        s = lora != NULL ? llama_load_lora(m, llama_peft_file_source, lora, 0, why, size)
                         : llama_load_lora(m, NULL, NULL, o->seed, why, size);
    llama_weights_close(weights);
    hd_st_close(lora);
    return s;
}

/* The state of --resume put back, the run's first step the one after it. */
static bool resume(options *o, llama_model *m, char *why, size_t size)
{
    long done = 0;
    if (o->resume == NULL)
        return true;
    if (llama_load_state(m, o->resume, &done, why, size) != HD_OK)
        return false;
    if (done >= o->steps) {
        snprintf(why, size, "%s is at step %ld: nothing left of --steps %ld", o->resume, done,
                 o->steps);
        return false;
    }
    o->first = done + 1;
    printf("llama_lora: %s: going on from step %ld\n", o->resume, done);
    return true;
}

int main(int argc, char **argv)
{
    options o = {0};
    if (!parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    hd_context_options copt;
    hd_context_options_init(&copt);
    copt.deterministic = o.deterministic;
    if (o.precision != NULL) {
        const char *names[] = {"fp32", "fp32x3", "tf32"};
        const hd_precision modes[] = {HD_PRECISION_FP32, HD_PRECISION_FP32X3, HD_PRECISION_TF32};
        size_t i = 0;
        while (i < 3 && strcmp(o.precision, names[i]) != 0)
            i++;
        if (i == 3) {
            fprintf(stderr, "llama_lora: --precision is fp32, tf32 or fp32x3\n");
            return 2;
        }
        copt.gemm_precision = modes[i];
    }
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, &copt) != HD_OK) {
        fprintf(stderr, "llama_lora: %s\n", hd_context_last_error(NULL));
        return 2;
    }
    char why[512] = "";
    llama_model *m = NULL;
    batches b = {0};
    int status = 2;
    if (llama_create(ctx, &o.c, &m, why, sizeof why) == HD_OK &&
        load(&o, m, why, sizeof why) == HD_OK && resume(&o, m, why, sizeof why) &&
        open_batches(&o, &b)) {
        printf("llama_lora: %zu layers, hidden %zu, %zu heads (%zu kv), mlp %zu, vocab %zu, "
               "%zu tokens, LoRA r %zu alpha %g, on %s (%s)\n",
               o.c.layers, o.c.hidden, o.c.heads, o.c.kv_heads, o.c.mlp, o.c.vocab, o.c.tokens,
               o.c.rank, (double)o.c.lora_alpha, hd_context_device_name(ctx),
               hd_precision_name(hd_context_gemm_precision(ctx)));
        if (b.data != NULL)
            printf("llama_lora: %s: %zu windows of %zu tokens an epoch\n", o.data,
                   llama_data_windows(b.data), o.c.tokens);
        status = train(&o, ctx, m, &b);
    } else if (why[0] != '\0') {
        fprintf(stderr, "llama_lora: %s\n", why);
    }
    llama_destroy(m);
    close_batches(&b);
    hd_context_destroy(ctx);
    return status;
}
