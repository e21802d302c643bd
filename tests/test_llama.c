/*
 * The Llama-style LoRA trainer (examples/llama/model.h) on a tiny configuration, on whatever
 * backends this machine has: the loss falls under AdamW, every LoRA gradient of a sample agrees
 * with finite differences of the loss (also with a head dimension of its own and Llama 3.1's
 * scaled RoPE, whose frequencies are transformers'), packed sequences restart positions and
 * attention, weights files that disagree with the model are refused with the tensor's name,
 * LoRA factors saved as a file or a PEFT adapter load back, a transformers checkpoint (its
 * config.json, its weights in shards) loads, while configs this model does not run are refused,
 * and a training set's windows come one a step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data.h"
#include "model.h"
#include "safetensors.h"
#include "tests/testlib.h"

static llama_config tiny(size_t tokens)
{
    llama_config c;
    llama_config_defaults(&c);
    c.layers = 2;
    c.hidden = 32;
    c.heads = 4;
    c.kv_heads = 2;
    c.mlp = 48;
    c.vocab = 61;
    c.tokens = tokens;
    c.rank = 4;
    c.lora_alpha = 8.0f;
    c.lr = 1e-2f;
    return c;
}

/* A head dimension of its own (transformers' head_dim: q is heads x 16 = 64 wide against a
 * hidden of 32) and Llama 3.1's RoPE scaling, whose three bands of frequencies (kept, blended,
 * divided by the factor) all fall within the heads of 16. */
static llama_config tiny_llama3(size_t tokens)
{
    llama_config c = tiny(tokens);
    c.head_dim = 16;
    c.rope_theta = 500000.0f;
    c.rope_scaling = (llama_rope_scaling){8.0f, 1.0f, 4.0f, 64};
    return c;
}

static llama_model *make_model(hd_context *ctx, const llama_config *c, bool random_b)
{
    llama_model *m = NULL;
    char why[256] = "";
    if (llama_create(ctx, c, &m, why, sizeof why) != HD_OK)
        fail_msg("llama_create: %s", why);
    uint64_t seed = hd_test_seed();
    if (llama_load_weights(m, llama_seeded_source, &seed, why, sizeof why) != HD_OK)
        fail_msg("weights: %s", why);
    /* B non-zero (the seeded source's std 0.02) makes every gradient non-trivial */
    hd_status s = random_b ? llama_load_lora(m, llama_seeded_source, &seed, 0, why, sizeof why)
                           : llama_load_lora(m, NULL, NULL, seed, why, sizeof why);
    if (s != HD_OK)
        fail_msg("LoRA: %s", why);
    return m;
}

static void random_tokens(hd_rng *rng, int32_t *tokens, size_t n, size_t vocab)
{
    for (size_t i = 0; i < n; i++)
        tokens[i] = (int32_t)hd_test_uniform(rng, 0.0f, (float)vocab - 0.01f);
}

static void test_loss_falls_on_a_tiny_model(void **state)
{
    hd_context *ctx = hd_test_context(false);
    llama_config c = tiny(24);
    llama_model *m = make_model(ctx, &c, false);
    hd_rng rng = hd_test_rng(1);
    int32_t tokens[24];
    random_tokens(&rng, tokens, 24, c.vocab);
    float first = 0.0f, loss = 0.0f;
    for (long step = 1; step <= 25; step++) {
        hd_status s = llama_train_step(m, tokens, NULL, step, &loss);
        if (s != HD_OK)
            fail_msg("step %ld: %s", step, hd_context_last_error(ctx));
        if (step == 1)
            first = loss;
    }
    /* a start near log(vocab) (the seeded weights are small), and LoRA memorising 23
     * predictions brings it down */
    if (!(fabsf(first - logf((float)c.vocab)) < 0.5f))
        fail_msg("the first loss %g is not near log(%zu)", (double)first, c.vocab);
    if (!(loss < 0.93f * first))
        fail_msg("the loss fell from %g to %g only", (double)first, (double)loss);
    llama_destroy(m);
    hd_context_destroy(ctx);
    (void)state;
}

/* The loss with element e of LoRA tensor i set to value. */
static float loss_with(hd_context *ctx, llama_model *m, size_t i, size_t e, float value,
                       float *data, const int32_t *tokens, const hd_sequences *q)
{
    hd_tensor *t = llama_lora_tensor(m, i, 0, NULL, 0);
    float saved = data[e];
    data[e] = value;
    assert_int_equal(hd_tensor_write(t, data), HD_OK);
    float loss;
    hd_status s = llama_eval(m, tokens, q, &loss);
    if (s != HD_OK)
        fail_msg("eval: %s", hd_context_last_error(ctx));
    data[e] = saved;
    assert_int_equal(hd_tensor_write(t, data), HD_OK);
    return loss;
}

/* For each LoRA tensor (every factor of every projection), its largest gradient and one more
 * element against a central difference of the loss. */
static void check_gradients(hd_context *ctx, const llama_config *c, const hd_sequences *q)
{
    llama_model *m = make_model(ctx, c, true);
    hd_rng rng = hd_test_rng(2);
    int32_t *tokens = malloc(c->tokens * sizeof *tokens);
    assert_non_null(tokens);
    random_tokens(&rng, tokens, c->tokens, c->vocab);
    float loss;
    hd_status s = llama_gradients(m, tokens, q, &loss);
    if (s != HD_OK)
        fail_msg("gradients: %s", hd_context_last_error(ctx));
    for (size_t i = 0; i < llama_lora_count(m); i++) {
        char name[160];
        hd_tensor *g = llama_lora_tensor(m, i, 1, name, sizeof name);
        hd_tensor *p = llama_lora_tensor(m, i, 0, NULL, 0);
        size_t n = hd_tensor_rows(g) * hd_tensor_cols(g);
        float *grad = hd_test_read(g), *data = hd_test_read(p);
        size_t best = 0;
        for (size_t e = 1; e < n; e++)
            if (fabsf(grad[e]) > fabsf(grad[best]))
                best = e;
        size_t picks[2] = {best, (size_t)hd_test_uniform(&rng, 0, (float)n - 0.01f)};
        for (int k = 0; k < 2; k++) {
            size_t e = picks[k];
            float h = 1e-2f;
            double up = loss_with(ctx, m, i, e, data[e] + h, data, tokens, q);
            double down = loss_with(ctx, m, i, e, data[e] - h, data, tokens, q);
            double fd = (up - down) / (2.0 * h);
            /* float losses near 4 differ by 1e-7 of rounding: 2e-5 / h of noise, plus the
             * second-order term of the difference */
            double tol = 3e-4 + 0.05 * fabs((double)grad[e]);
            if (fabs(fd - (double)grad[e]) > tol)
                fail_msg("%s[%zu]: gradient %.6g, finite difference %.6g (tolerance %.2g)", name, e,
                         (double)grad[e], fd, tol);
        }
        free(grad);
        free(data);
    }
    free(tokens);
    llama_destroy(m);
}

static void test_gradients_match_finite_differences(void **state)
{
    hd_context *ctx = hd_test_context(false);
    llama_config c = tiny(16);
    check_gradients(ctx, &c, NULL);
    hd_context_destroy(ctx);
    (void)state;
}

/* Every op of the step forced onto the device's fused kernels (where there is a device), also
 * with a head dimension of its own and Llama 3.1's RoPE scaling, with a sliding window
 * shorter than the sequences, and with Qwen2's biases. */
static void test_gradients_on_the_fused_backend_match_finite_differences(void **state)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.backends = "fused";
    opt.log = hd_test_log;
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, &opt) != HD_OK)
        fail_msg("context: %s", hd_context_last_error(NULL));
    if (!hd_context_has_backend(ctx, HD_BACKEND_FUSED)) {
        hd_context_destroy(ctx);
        skip();
    }
    size_t lengths[] = {9, 7};
    hd_sequences q = {lengths, 2};
    llama_config configs[] = {tiny(16), tiny_llama3(16), tiny(16), tiny(16)};
    configs[2].sliding_window = 4;
    configs[3].qkv_bias = true;
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        check_gradients(ctx, &configs[i], &q);
        assert_int_equal(hd_context_last_backend(ctx), HD_BACKEND_FUSED);
    }
    hd_context_destroy(ctx);
    (void)state;
}

static void test_gradients_of_packed_sequences_match_finite_differences(void **state)
{
    hd_context *ctx = hd_test_context(false);
    llama_config c = tiny(17);
    size_t lengths[] = {1, 9, 7};
    hd_sequences q = {lengths, 3};
    check_gradients(ctx, &c, &q);
    hd_context_destroy(ctx);
    (void)state;
}

/* Packing: the loss of two sequences packed is the loss over both sequences' predictions, each
 * as if it ran alone. */
static void test_packed_loss_is_that_of_the_sequences_alone(void **state)
{
    hd_context *ctx = hd_test_context(false);
    hd_rng rng = hd_test_rng(3);
    int32_t tokens[20];
    llama_config c = tiny(20);
    random_tokens(&rng, tokens, 20, c.vocab);
    size_t lengths[] = {12, 8};
    hd_sequences q = {lengths, 2};
    llama_model *both = make_model(ctx, &c, true);
    float packed;
    assert_int_equal(llama_eval(both, tokens, &q, &packed), HD_OK);
    llama_destroy(both);
    double sum = 0.0;
    size_t at = 0;
    for (int k = 0; k < 2; k++) {
        llama_config one = tiny(lengths[k]);
        llama_model *m = make_model(ctx, &one, true);
        float loss;
        assert_int_equal(llama_eval(m, tokens + at, NULL, &loss), HD_OK);
        sum += (double)loss * (double)(lengths[k] - 1);
        at += lengths[k];
        llama_destroy(m);
    }
    double want = sum / (double)(20 - 2);
    if (fabs((double)packed - want) > 2e-5 * fabs(want))
        fail_msg("packed loss %.7g, the sequences alone %.7g", (double)packed, want);
    hd_context_destroy(ctx);
    (void)state;
}

/* Every LoRA factor of a and b, bit for bit. */
static void expect_same_lora(const llama_model *a, const llama_model *b, const char *what)
{
    for (size_t i = 0; i < llama_lora_count(a); i++) {
        char name[160];
        hd_tensor *ta = llama_lora_tensor(a, i, 0, name, sizeof name);
        hd_tensor *tb = llama_lora_tensor(b, i, 0, NULL, 0);
        size_t n = hd_tensor_rows(ta) * hd_tensor_cols(ta);
        float *x = hd_test_read(ta), *y = hd_test_read(tb);
        if (memcmp(x, y, n * sizeof *x) != 0)
            fail_msg("%s: %s differs", what, name);
        free(x);
        free(y);
    }
}

/* The losses of a and b on tokens (one sequence), which `what`, their difference, must set
 * apart. */
static void expect_losses_differ(llama_model *a, llama_model *b, const int32_t *tokens,
                                 const char *what)
{
    float la, lb;
    assert_int_equal(llama_eval(a, tokens, NULL, &la), HD_OK);
    assert_int_equal(llama_eval(b, tokens, NULL, &lb), HD_OK);
    if (!(fabsf(la - lb) > 1e-6f * fabsf(la)))
        fail_msg("%s left the loss at %.7g", what, (double)la);
}

/* One step of a and b on tokens packed as q: the same loss and LoRA factors, bit for bit. */
static void expect_same_step(llama_model *a, llama_model *b, const int32_t *tokens,
                             const hd_sequences *q, const char *what)
{
    float la, lb;
    assert_int_equal(llama_train_step(a, tokens, q, 1, &la), HD_OK);
    assert_int_equal(llama_train_step(b, tokens, q, 1, &lb), HD_OK);
    if (memcmp(&la, &lb, sizeof la) != 0)
        fail_msg("%s: losses %.9g and %.9g", what, (double)la, (double)lb);
    expect_same_lora(a, b, what);
}

/* A sliding window (Mistral's) as long as the longest sequence changes nothing: the loss and
 * the step are the window-less model's, bit for bit. A shorter one masks the earlier keys: the
 * loss differs, and the gradients match finite differences, on one sequence and packed. */
static void test_sliding_window_masks_earlier_keys(void **state)
{
    hd_context *ctx = hd_test_context(false);
    hd_rng rng = hd_test_rng(5);
    int32_t tokens[20];
    llama_config plain = tiny(20), windowed = plain;
    windowed.sliding_window = 12;
    random_tokens(&rng, tokens, 20, plain.vocab);
    size_t lengths[] = {12, 8};
    hd_sequences fits = {lengths, 2};
    llama_model *a = make_model(ctx, &plain, true), *b = make_model(ctx, &windowed, true);
    expect_losses_differ(a, b, tokens, "a window of 12 over 20 tokens");
    expect_same_step(a, b, tokens, &fits, "a step within the window");
    llama_destroy(a);
    llama_destroy(b);
    llama_config one = tiny(17), packed = tiny(17);
    one.sliding_window = 5;
    packed.sliding_window = 4;
    size_t three[] = {1, 9, 7};
    hd_sequences q = {three, 3};
    check_gradients(ctx, &one, NULL);
    check_gradients(ctx, &packed, &q);
    hd_context_destroy(ctx);
    (void)state;
}

/* The seeded weights with every bias 0. */
static hd_status zero_bias_source(void *user, const char *name, size_t rows, size_t cols,
                                  float *dst, char *why, size_t size)
{
    hd_status s = llama_seeded_source(user, name, rows, cols, dst, why, size);
    size_t n = strlen(name);
    if (s == HD_OK && n > 5 && strcmp(name + n - 5, ".bias") == 0)
        memset(dst, 0, rows * cols * sizeof *dst);
    return s;
}

/* Qwen2's biases on q, k and v: zero biases leave the loss and the step the bias-less model's,
 * bit for bit; the seeded ones change the loss, and the gradients match finite differences,
 * on one sequence and packed (on the fused kernels: the test above). */
static void test_qkv_biases_add_to_every_row(void **state)
{
    hd_context *ctx = hd_test_context(false);
    hd_rng rng = hd_test_rng(6);
    int32_t tokens[16];
    llama_config plain = tiny(16), biased = plain;
    biased.qkv_bias = true;
    random_tokens(&rng, tokens, 16, plain.vocab);
    llama_model *a = make_model(ctx, &plain, true), *b = make_model(ctx, &biased, true);
    expect_losses_differ(a, b, tokens, "biases of std 0.02");
    uint64_t seed = hd_test_seed();
    char why[256] = "";
    if (llama_load_weights(b, zero_bias_source, &seed, why, sizeof why) != HD_OK)
        fail_msg("weights: %s", why);
    expect_same_step(a, b, tokens, NULL, "a step with zero biases");
    llama_destroy(a);
    llama_destroy(b);
    size_t lengths[] = {9, 7};
    hd_sequences q = {lengths, 2};
    check_gradients(ctx, &biased, NULL);
    check_gradients(ctx, &biased, &q);
    hd_context_destroy(ctx);
    (void)state;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* The LoRA factors saved and loaded again: as a plain file (PEFT's names without the prefix)
 * and as a PEFT adapter directory (adapter_model.safetensors under "base_model.model.", with
 * adapter_config.json naming r and lora_alpha), each read back by the PEFT source, at rank 1,
 * whose A factors are one row (a 2-D tensor in the file, not a norm's 1-D one). A directory
 * that is a file is refused. */
static void test_lora_saved_as_files_and_peft_adapters_loads_back(void **state)
{
    hd_context *ctx = hd_test_context(true);
    llama_config c = tiny(8);
    c.rank = 1;
    llama_model *saved = make_model(ctx, &c, true);
    char dir[128];
    assert_int_equal(hd_test_tmpdir_create("llama-peft", dir, sizeof dir), 0);
    char plain[256], adapter[256], config[256], why[256] = "";
    snprintf(plain, sizeof plain, "%s/lora.safetensors", dir);
    snprintf(adapter, sizeof adapter, "%s/adapter_model.safetensors", dir);
    snprintf(config, sizeof config, "%s/adapter_config.json", dir);
    if (llama_save_lora(saved, 0, plain, "", why, sizeof why) != HD_OK ||
        llama_save_peft(saved, dir, why, sizeof why) != HD_OK)
        fail_msg("saving: %s", why);
    const char *const files[] = {plain, adapter};
    for (int k = 0; k < 2; k++) {
        hd_st_file *f = NULL;
        assert_int_equal(hd_st_open(files[k], &f, why, sizeof why), HD_OK);
        const hd_st_tensor *t = NULL;
        const char *first = k == 0
                                ? "model.layers.0.self_attn.q_proj.lora_A.weight"
                                : "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
        assert_int_equal(hd_st_find(f, first, &t, why, sizeof why), HD_OK);
        assert_int_equal(t->ndim, 2);
        llama_model *loaded = make_model(ctx, &c, false);
        if (llama_load_lora(loaded, llama_peft_file_source, f, 0, why, sizeof why) != HD_OK)
            fail_msg("loading %s: %s", files[k], why);
        expect_same_lora(saved, loaded, files[k]);
        llama_destroy(loaded);
        hd_st_close(f);
    }
    const char *text = read_text(config);
    assert_non_null(strstr(text, "\"peft_type\": \"LORA\""));
    assert_non_null(strstr(text, "\"r\": 1,"));
    assert_non_null(strstr(text, "\"lora_alpha\": 8,"));
    assert_non_null(strstr(text, "\"down_proj\""));
    assert_int_equal(llama_save_peft(saved, plain, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "not a directory"));
    assert_int_equal(hd_test_tmpdir_remove(dir), 0);
    llama_destroy(saved);
    hd_context_destroy(ctx);
    (void)state;
}

/* Gradient accumulation: two steps over a batch taken twice move every factor exactly as two
 * steps over it once (the summed gradients are twice the mean, and AdamW's eps scales with
 * them), and report its loss; so does a step with the clip norm between the gradient's norm and
 * twice it (scaled with the batches, it clips neither). A step over two batches reports their
 * mean loss, and gradients after it are not added to it. */
static void test_accumulated_batches_step_as_their_mean(void **state)
{
    hd_context *ctx = hd_test_context(true);
    hd_rng rng = hd_test_rng(11);
    int32_t w1[16], w2[16];
    random_tokens(&rng, w1, 16, 61);
    random_tokens(&rng, w2, 16, 61);
    for (int clip = 0; clip < 2; clip++) {
        llama_config c = tiny(16);
        c.weight_decay = 0.01f;
        if (clip) {
            /* a norm between the batch's gradient's and twice it: the step of the batch taken
             * twice clips as its mean's does (not at all) only where the clip norm is doubled */
            llama_model *probe = make_model(ctx, &c, true);
            double sq = 0.0;
            float loss;
            assert_int_equal(llama_gradients(probe, w1, NULL, &loss), HD_OK);
            for (size_t i = 0; i < llama_lora_count(probe); i++) {
                hd_tensor *g = llama_lora_tensor(probe, i, 1, NULL, 0);
                float *x = hd_test_read(g);
                for (size_t e = 0; e < hd_tensor_rows(g) * hd_tensor_cols(g); e++)
                    sq += (double)x[e] * (double)x[e];
                free(x);
            }
            c.max_grad_norm = (float)(1.5 * sqrt(sq));
            llama_destroy(probe);
        }
        llama_model *once = make_model(ctx, &c, true), *twice = make_model(ctx, &c, true);
        const int32_t *same[] = {w1, w1};
        for (long step = 1; step <= (clip ? 1 : 2); step++) {
            float a, b;
            assert_int_equal(llama_train_step(once, w1, NULL, step, &a), HD_OK);
            assert_int_equal(llama_train_step_batches(twice, same, 2, NULL, step, &b), HD_OK);
            if (a != b)
                fail_msg("step %ld: loss %.9g once, %.9g over the batch twice", step, (double)a,
                         (double)b);
        }
        expect_same_lora(once, twice, clip ? "a batch twice, the clip on" : "a batch twice");
        /* two batches: their mean loss; then a step of one batch, as a fresh model's */
        const int32_t *pair[] = {w1, w2};
        float l1, l2, both;
        assert_int_equal(llama_eval(twice, w1, NULL, &l1), HD_OK);
        assert_int_equal(llama_eval(twice, w2, NULL, &l2), HD_OK);
        assert_int_equal(llama_train_step_batches(twice, pair, 2, NULL, 3, &both), HD_OK);
        if (fabs((double)both - 0.5 * ((double)l1 + (double)l2)) > 1e-6 * fabs((double)both))
            fail_msg("two batches: loss %.9g, their mean %.9g", (double)both,
                     0.5 * ((double)l1 + (double)l2));
        /* gradients after it are overwritten, not added to: the same twice */
        float loss;
        hd_tensor *g = llama_lora_tensor(twice, 1, 1, NULL, 0);
        assert_int_equal(llama_gradients(twice, w2, NULL, &loss), HD_OK);
        float *g0 = hd_test_read(g);
        assert_int_equal(llama_gradients(twice, w2, NULL, &loss), HD_OK);
        float *g1 = hd_test_read(g);
        assert_memory_equal(g0, g1, hd_tensor_rows(g) * hd_tensor_cols(g) * sizeof *g0);
        free(g0);
        free(g1);
        llama_destroy(once);
        llama_destroy(twice);
    }
    hd_context_destroy(ctx);
    (void)state;
}

/* A run stopped after step 2 and resumed from its state (the factors and AdamW's moments, the
 * step) takes steps 3 and 4 as the run that did not stop, bit for bit; a state that lacks a
 * tensor or its step is refused. */
static void test_resumed_state_goes_on_as_if_not_stopped(void **state)
{
    hd_context *ctx = hd_test_context(true);
    llama_config c = tiny(16);
    c.weight_decay = 0.01f;
    c.schedule = LLAMA_SCHEDULE_COSINE;
    c.warmup_steps = 1;
    c.total_steps = 4;
    hd_rng rng = hd_test_rng(13);
    int32_t w[4][16];
    for (int i = 0; i < 4; i++)
        random_tokens(&rng, w[i], 16, c.vocab);
    llama_model *straight = make_model(ctx, &c, true), *stopped = make_model(ctx, &c, true);
    float loss;
    for (long step = 1; step <= 4; step++)
        assert_int_equal(llama_train_step(straight, w[step - 1], NULL, step, &loss), HD_OK);
    for (long step = 1; step <= 2; step++)
        assert_int_equal(llama_train_step(stopped, w[step - 1], NULL, step, &loss), HD_OK);
    char path[] = "/tmp/hd-llama-state-XXXXXX", why[512] = "";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    if (llama_save_state(stopped, path, 2, why, sizeof why) != HD_OK)
        fail_msg("saving the state: %s", why);
    llama_model *resumed = make_model(ctx, &c, false); /* other factors: the state's replace them */
    long done = 0;
    if (llama_load_state(resumed, path, &done, why, sizeof why) != HD_OK)
        fail_msg("loading the state: %s", why);
    assert_int_equal(done, 2);
    for (long step = 3; step <= 4; step++)
        assert_int_equal(llama_train_step(resumed, w[step - 1], NULL, step, &loss), HD_OK);
    expect_same_lora(straight, resumed, "resumed");
    /* a file of the factors alone (no moments, no step) */
    assert_int_equal(llama_save_lora(stopped, 0, path, "", why, sizeof why), HD_OK);
    assert_int_equal(llama_load_state(resumed, path, &done, why, sizeof why),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "step"));
    unlink(path);
    llama_destroy(straight);
    llama_destroy(stopped);
    llama_destroy(resumed);
    hd_context_destroy(ctx);
    (void)state;
}

/* ---- transformers checkpoints ---- */

/* Every tensor a model loads, as the seeded source makes it: a source that records. */
typedef struct recorded {
    size_t count;
    char names[64][96];
    size_t rows[64], cols[64];
    float *data[64];
} recorded;

static hd_status recording_source(void *user, const char *name, size_t rows, size_t cols,
                                  float *dst, char *why, size_t size)
{
    recorded *r = user;
    uint64_t seed = 7;
    hd_status s = llama_seeded_source(&seed, name, rows, cols, dst, why, size);
    assert_true(r->count < 64);
    snprintf(r->names[r->count], sizeof r->names[0], "%s", name);
    r->rows[r->count] = rows;
    r->cols[r->count] = cols;
    r->data[r->count] = malloc(rows * cols * sizeof(float));
    assert_non_null(r->data[r->count]);
    memcpy(r->data[r->count++], dst, rows * cols * sizeof(float));
    return s;
}

/* Tensors [from, to) of r as a safetensors file (norms 1-D, as transformers saves them). */
static void write_shard(const recorded *r, size_t from, size_t to, const char *path)
{
    hd_st_entry e[64];
    for (size_t i = from; i < to; i++) {
        bool vector = r->rows[i] == 1;
        e[i - from] = (hd_st_entry){.name = r->names[i],
                                    .dtype = HD_ST_F32,
                                    .ndim = vector ? 1 : 2,
                                    .shape = {vector ? r->cols[i] : r->rows[i], r->cols[i]},
                                    .data = r->data[i]};
    }
    char msg[256];
    assert_int_equal(hd_st_write(path, e, to - from, NULL, 0, msg, sizeof msg), HD_OK);
}

/* text (NUL-ended) as the file at path. */
static void write_text(const char *path, const char *text)
{
    hd_test_write_file(path, text, strlen(text));
}

/* The tiny model's config.json, as transformers writes a Llama's (with keys this model does not
 * read). */
static const char tiny_config_json[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_act\": "
    "\"silu\", \"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, "
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, \"vocab_size\": "
    "61, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": "
    "\"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
    "\"original_max_position_embeddings\": 64}, \"tie_word_embeddings\": false, "
    "\"attention_bias\": false, \"mlp_bias\": false, \"torch_dtype\": \"bfloat16\", "
    "\"max_position_embeddings\": 131072}";

/* A checkpoint directory as transformers saves a large model: config.json, two shards and
 * model.safetensors.index.json. The config read from it is tiny_llama3's shape; the weights
 * from the shards give the loss of the same weights from the seed, bit for bit. */
static void test_checkpoint_directory_of_shards_loads(void **state)
{
    char dir[128];
    assert_int_equal(hd_test_tmpdir_create("llama-ckpt", dir, sizeof dir), 0);
    char config[256], index[256], shard[2][256], why[512] = "";
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    write_text(config, tiny_config_json);
    llama_config c = tiny(16), want = tiny_llama3(16);
    c.hidden = 8; /* the config sets every size */
    if (llama_config_read(config, &c, why, sizeof why) != HD_OK)
        fail_msg("config: %s", why);
    assert_int_equal(c.hidden, want.hidden);
    assert_int_equal(c.heads, want.heads);
    assert_int_equal(c.kv_heads, want.kv_heads);
    assert_int_equal(c.head_dim, want.head_dim);
    assert_int_equal(c.mlp, want.mlp);
    assert_int_equal(c.vocab, want.vocab);
    assert_int_equal(c.layers, want.layers);
    assert_true(c.rope_theta == want.rope_theta && c.norm_eps == 1e-5f);
    assert_true(memcmp(&c.rope_scaling, &want.rope_scaling, sizeof c.rope_scaling) == 0);
    assert_int_equal(c.tokens, 16); /* not the config's */

    hd_context *ctx = hd_test_context(true);
    llama_model *seeded = NULL, *sharded = NULL;
    recorded *r = calloc(1, sizeof *r);
    assert_non_null(r);
    assert_int_equal(llama_create(ctx, &c, &seeded, why, sizeof why), HD_OK);
    assert_int_equal(llama_load_weights(seeded, recording_source, r, why, sizeof why), HD_OK);
    size_t half = r->count / 2;
    char map[8192] = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
    for (size_t i = 0; i < r->count; i++) {
        char entry[192];
        snprintf(entry, sizeof entry, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                 i ? ", " : "", r->names[i], i < half ? 1 : 2);
        strcat(map, entry);
    }
    strcat(map, "}}");
    write_text(index, map);
    for (int k = 0; k < 2; k++) {
        snprintf(shard[k], sizeof shard[k], "%s/model-0000%d-of-00002.safetensors", dir, k + 1);
        write_shard(r, k == 0 ? 0 : half, k == 0 ? half : r->count, shard[k]);
    }
    llama_weights *w = NULL;
    if (llama_weights_open(dir, &w, why, sizeof why) != HD_OK)
        fail_msg("weights: %s", why);
    assert_int_equal(llama_create(ctx, &c, &sharded, why, sizeof why), HD_OK);
    if (llama_load_weights(sharded, llama_weights_source, w, why, sizeof why) != HD_OK)
        fail_msg("loading the shards: %s", why);
    uint64_t seed = 3;
    assert_int_equal(llama_load_lora(seeded, llama_seeded_source, &seed, 0, why, sizeof why),
                     HD_OK);
    assert_int_equal(llama_load_lora(sharded, llama_seeded_source, &seed, 0, why, sizeof why),
                     HD_OK);
    int32_t tokens[16];
    hd_rng rng = hd_test_rng(9);
    random_tokens(&rng, tokens, 16, c.vocab);
    float a, b;
    assert_int_equal(llama_eval(seeded, tokens, NULL, &a), HD_OK);
    assert_int_equal(llama_eval(sharded, tokens, NULL, &b), HD_OK);
    assert_true(memcmp(&a, &b, sizeof a) == 0);
    /* one tensor the shards lack: refused by name */
    llama_weights_close(w);
    write_shard(r, 0, half - 1, shard[0]);
    assert_int_equal(llama_weights_open(dir, &w, why, sizeof why), HD_OK);
    assert_int_equal(llama_load_weights(sharded, llama_weights_source, w, why, sizeof why),
                     HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, r->names[half - 1]));
    llama_weights_close(w);
    /* an index naming a file outside its directory, or no weight_map */
    const char *const bad_index[] = {
        "{\"weight_map\": {\"model.embed_tokens.weight\": \"../model.safetensors\"}}",
        "{\"weight_map\": {\"model.embed_tokens.weight\": 3}}",
        "{\"metadata\": {}}",
        "[1]",
        "{\"weight_map\": {",
        "{\"weight_map\": {\"a\": \".\"}}"};
    for (size_t i = 0; i < sizeof bad_index / sizeof bad_index[0]; i++) {
        write_text(index, bad_index[i]);
        assert_int_equal(llama_weights_open(dir, &w, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
        assert_null(w);
    }
    for (size_t i = 0; i < r->count; i++)
        free(r->data[i]);
    free(r);
    assert_int_equal(hd_test_tmpdir_remove(dir), 0);
    llama_destroy(seeded);
    llama_destroy(sharded);
    hd_context_destroy(ctx);
    (void)state;
}

/* config.json values this model does not run, each refused with its key, the config as it
 * was left unchanged; what a config leaves out takes transformers' defaults, and transformers
 * 5's rope_parameters stand for rope_theta and rope_scaling. */
static void test_config_json_that_cannot_run_is_refused(void **state)
{
    char path[] = "/tmp/hd-llama-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
#define SIZES                                                                                      \
    "\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, "                   \
    "\"num_attention_heads\": 4, \"vocab_size\": 61, "
    static const struct {
        const char *json, *key;
    } bad[] = {
        {"{\"model_type\": \"gemma\", \"hidden_size\": 32}", "model_type"},
        {"{\"model_type\": \"qwen2\", \"use_sliding_window\": true}", "use_sliding_window"},
        {"{\"model_type\": 7, \"hidden_size\": 32}", "model_type"},
        {"{\"hidden_act\": \"gelu\"}", "hidden_act"},
        {"{\"attention_bias\": true}", "attention_bias"},
        {"{\"mlp_bias\": true}", "mlp_bias"},
        {"{\"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
         "\"vocab_size\": 61}",
         "hidden_size"},
        {"{\"hidden_size\": -32}", "hidden_size"},
        {"{\"hidden_size\": \"32\"}", "hidden_size"},
        {"{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"vocab_size\": 4294967296}",
         "vocab_size"},
        {"{" SIZES "\"head_dim\": 512}", "head_dim"},
        {"{" SIZES "\"rms_norm_eps\": \"small\"}", "rms_norm_eps"},
        {"{" SIZES "\"rope_theta\": 1e39}", "rope_theta"},
        {"{" SIZES "\"rms_norm_eps\": -3.5e38}", "rms_norm_eps"},
        {"{" SIZES "\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8e39, "
         "\"original_max_position_embeddings\": 6}}",
         "factor"},
        {"{" SIZES "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", "rope_scaling"},
        {"{" SIZES "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}}", "rope_scaling"},
        {"{" SIZES "\"rope_scaling\": {\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}}",
         "factor"},
        {"{" SIZES "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
         "\"low_freq_factor\": "
         "1.0, \"high_freq_factor\": 4.0}}",
         "original_max_position_embeddings"},
        {"{" SIZES "\"rope_scaling\": 3}", "rope_scaling"},
        {"{" SIZES "\"tie_word_embeddings\": 1}", "tie_word_embeddings"},
        {"{" SIZES "\"sliding_window\": 0}", "sliding_window"},
        {"{" SIZES "\"sliding_window\": \"4096\"}", "sliding_window"},
        {"{\"hidden_size\": 32, \"hidden_size\": 64}", "duplicate"},
        {"[]", "not a JSON object"},
        {"{\"hidden_size\": 32", "line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].json);
        llama_config c = tiny(8), before = c;
        char why[512] = "";
        assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
        if (strstr(why, bad[i].key) == NULL)
            fail_msg("%s: refused without naming %s: %s", bad[i].json, bad[i].key, why);
        assert_true(memcmp(&c, &before, sizeof c) == 0);
    }
    /* the defaults of what a config leaves out, and transformers 5's rope_parameters */
    write_text(path, "{" SIZES "\"model_type\": \"llama\"}");
    llama_config c = tiny(8);
    c.head_dim = 16;
    c.rope_scaling.factor = 8.0f;
    c.sliding_window = 7;
    char why[512];
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(c.kv_heads == 4 && c.head_dim == 0 && c.norm_eps == 1e-6f &&
                c.rope_theta == 10000.0f && c.rope_scaling.factor == 0.0f && !c.tied_embeddings &&
                c.sliding_window == 0);
    /* Mistral's layers are Llama's; its window is kept, null standing for none */
    write_text(path, "{" SIZES "\"model_type\": \"mistral\", \"sliding_window\": 4096}");
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(c.sliding_window == 4096);
    write_text(path, "{" SIZES "\"model_type\": \"mistral\", \"sliding_window\": null}");
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(c.sliding_window == 0 && !c.qkv_bias);
    /* Qwen2's: biases on q, k and v; its sliding_window unused without use_sliding_window */
    write_text(path, "{" SIZES "\"model_type\": \"qwen2\", \"sliding_window\": 4, "
                     "\"use_sliding_window\": false}");
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(c.qkv_bias && c.sliding_window == 0);
    write_text(path, "{" SIZES "\"model_type\": \"llama\"}");
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(!c.qkv_bias);
    write_text(path, "{" SIZES "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": "
                     "500000.0, \"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": "
                     "4.0, \"original_max_position_embeddings\": 8192}, \"tie_word_embeddings\": "
                     "true}");
    assert_int_equal(llama_config_read(path, &c, why, sizeof why), HD_OK);
    assert_true(c.rope_theta == 500000.0f && c.rope_scaling.factor == 32.0f &&
                c.rope_scaling.original_max_positions == 8192 && c.tied_embeddings);
#undef SIZES
    unlink(path);
    /* not a regular file, or none */
    assert_int_equal(llama_config_read("/tmp", &c, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(llama_config_read("/nonexistent/config.json", &c, why, sizeof why),
                     HD_ERR_INVALID_ARGUMENT);
    (void)state;
}

/* The little-endian int32 ids as a file at path. */
static void write_ids(const char *path, const int32_t *ids, size_t n)
{
    unsigned char bytes[4 * 32];
    assert_true(n <= 32);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            bytes[4 * i + (size_t)k] = (unsigned char)((uint32_t)ids[i] >> (8 * k));
    hd_test_write_file(path, bytes, 4 * n);
}

/* A training set of 3 whole windows of 5 ids and 3 ids more: windows 0, 1, 2, then 0 again
 * (the 3 never read); refusals of files that cannot serve, with their reasons. */
static void test_data_windows_cycle_and_bad_files_are_refused(void **state)
{
    char path[] = "/tmp/hd-llama-data-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int32_t ids[18];
    for (int i = 0; i < 18; i++)
        ids[i] = (i * 7) % 61;
    write_ids(path, ids, 18);
    llama_data *d = NULL;
    char why[512] = "";
    if (llama_data_open(path, 5, 61, &d, why, sizeof why) != HD_OK)
        fail_msg("open: %s", why);
    assert_int_equal(llama_data_windows(d), 3);
    for (int step = 0; step < 7; step++) {
        int32_t got[5];
        assert_int_equal(llama_data_next(d, got, why, sizeof why), HD_OK);
        assert_memory_equal(got, ids + 5 * (step % 3), sizeof got);
    }
    /* where a resumed run goes on: window 7 of 3 is window 1 */
    llama_data_seek(d, 7);
    int32_t got[5];
    assert_int_equal(llama_data_next(d, got, why, sizeof why), HD_OK);
    assert_memory_equal(got, ids + 5, sizeof got);
    llama_data_close(d);
    /* fewer ids than a window; an id outside the vocabulary (its place said); a size that is
     * not whole ids; a directory; no file */
    assert_int_equal(llama_data_open(path, 19, 61, &d, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "holds 18 ids, 19 wanted"));
    ids[13] = 61;
    write_ids(path, ids, 18);
    assert_int_equal(llama_data_open(path, 5, 61, &d, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "id 61 at 13"));
    ids[13] = -1;
    write_ids(path, ids, 18);
    assert_int_equal(llama_data_open(path, 5, 61, &d, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "id -1 at 13"));
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
    assert_int_equal(llama_data_open(path, 5, 61, &d, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "whole number"));
    assert_int_equal(llama_data_open("/tmp", 5, 61, &d, why, sizeof why), HD_ERR_INVALID_ARGUMENT);
    assert_int_equal(llama_data_open("/nonexistent/ids.bin", 5, 61, &d, why, sizeof why),
                     HD_ERR_INVALID_ARGUMENT);
    assert_null(d);
    unlink(path);
    (void)state;
}

/* A weights file whose tensor has the wrong shape, or lacks one, is refused by name. */
static void test_weights_file_that_disagrees_is_refused(void **state)
{
    char path[] = "/tmp/hd-llama-weights-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    float data[32 * 61];
    memset(data, 0, sizeof data);
    hd_st_entry e = {.name = "model.embed_tokens.weight",
                     .dtype = HD_ST_F32,
                     .ndim = 2,
                     .shape = {32, 61},
                     .data = data}; /* transposed: 61 x 32 wanted */
    char msg[256];
    assert_int_equal(hd_st_write(path, &e, 1, NULL, 0, msg, sizeof msg), HD_OK);
    hd_st_file *f = NULL;
    assert_int_equal(hd_st_open(path, &f, msg, sizeof msg), HD_OK);
    hd_context *ctx = hd_test_context(true);
    llama_config c = tiny(8);
    llama_model *m = NULL;
    assert_int_equal(llama_create(ctx, &c, &m, msg, sizeof msg), HD_OK);
    char why[256] = "";
    hd_status s = llama_load_weights(m, llama_file_source, f, why, sizeof why);
    assert_int_equal(s, HD_ERR_SHAPE_MISMATCH);
    assert_non_null(strstr(why, "model.embed_tokens.weight"));
    assert_non_null(strstr(why, "[61, 32]"));
    s = llama_file_source(f, "model.norm.weight", 1, 32, data, why, sizeof why);
    assert_int_equal(s, HD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(why, "model.norm.weight"));
    llama_destroy(m);
    hd_context_destroy(ctx);
    hd_st_close(f);
    unlink(path);
    (void)state;
}

static void test_head_dim_and_rope_scaling_gradients_match_finite_differences(void **state)
{
    hd_context *ctx = hd_test_context(false);
    llama_config c = tiny_llama3(16);
    size_t lengths[] = {10, 6};
    hd_sequences q = {lengths, 2};
    check_gradients(ctx, &c, &q);
    hd_context_destroy(ctx);
    (void)state;
}

/* The scaled frequencies against transformers' _compute_llama3_parameters, run line by line in
 * Python on the same config (theta 500000, heads of 16, factor 8, low 1, high 4, 64 original
 * positions): frequency 0 kept, 1 blended, the rest divided by 8; and theta's alone without the
 * scaling. */
static void test_rope_frequencies_are_transformers(void **state)
{
    static const double scaled[8] = {
        1.0,           0.0794030092,   0.00470075387, 0.000911583092, 0.000176776695,
        3.4281022e-05, 6.64786987e-06, 1.28917317e-06};
    static const double plain[8] = {1.0,           0.193922745,    0.0376060309,  0.00729266474,
                                    0.00141421356, 0.000274248176, 5.3182959e-05, 1.03133854e-05};
    llama_config c = tiny_llama3(8);
    float f[8];
    for (int pass = 0; pass < 2; pass++) {
        llama_rope_frequencies(&c, f);
        const double *want = pass == 0 ? scaled : plain;
        for (int i = 0; i < 8; i++)
            if (fabs(f[i] - want[i]) > 1e-6 * want[i])
                fail_msg("%s frequency %d: %.9g, transformers %.9g", pass == 0 ? "scaled" : "plain",
                         i, (double)f[i], want[i]);
        c.rope_scaling.factor = 0.0f; /* none */
    }
    (void)state;
}

/* The learning rate per step against transformers' get_linear_schedule_with_warmup and
 * get_cosine_schedule_with_warmup (and the constant one with warmup), lr 1e-3, 2 warmup steps
 * of 10; a decay that ends within its warmup is refused. */
static void test_learning_rate_schedules_are_transformers(void **state)
{
    static const struct {
        llama_schedule schedule;
        long step;
        double want;
    } cases[] = {
        {LLAMA_SCHEDULE_LINEAR, 1, 0.0},           {LLAMA_SCHEDULE_LINEAR, 2, 5e-4},
        {LLAMA_SCHEDULE_LINEAR, 3, 1e-3},          {LLAMA_SCHEDULE_LINEAR, 5, 7.5e-4},
        {LLAMA_SCHEDULE_LINEAR, 7, 5e-4},          {LLAMA_SCHEDULE_LINEAR, 10, 1.25e-4},
        {LLAMA_SCHEDULE_LINEAR, 11, 0.0},          {LLAMA_SCHEDULE_COSINE, 1, 0.0},
        {LLAMA_SCHEDULE_COSINE, 2, 5e-4},          {LLAMA_SCHEDULE_COSINE, 3, 1e-3},
        {LLAMA_SCHEDULE_COSINE, 5, 8.5355339e-4},  {LLAMA_SCHEDULE_COSINE, 7, 5e-4},
        {LLAMA_SCHEDULE_COSINE, 10, 3.8060234e-5}, {LLAMA_SCHEDULE_COSINE, 11, 0.0},
        {LLAMA_SCHEDULE_CONSTANT, 1, 0.0},         {LLAMA_SCHEDULE_CONSTANT, 2, 5e-4},
        {LLAMA_SCHEDULE_CONSTANT, 10, 1e-3},
    };
    llama_config c = tiny(8);
    c.lr = 1e-3f;
    c.warmup_steps = 2;
    c.total_steps = 10;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.schedule = cases[i].schedule;
        double got = llama_learning_rate(&c, cases[i].step);
        if (fabs(got - cases[i].want) > 1e-7 * 1e-3)
            fail_msg("schedule %d, step %ld: lr %.9g, transformers %.9g", (int)c.schedule,
                     cases[i].step, got, cases[i].want);
    }
    char why[128];
    c.schedule = LLAMA_SCHEDULE_COSINE;
    c.total_steps = 2;
    assert_false(llama_config_check(&c, why, sizeof why));
    assert_non_null(strstr(why, "warmup"));
    c.schedule = LLAMA_SCHEDULE_CONSTANT; /* no decay: any warmup */
    assert_true(llama_config_check(&c, why, sizeof why));
    (void)state;
}

static void test_config_that_cannot_run_is_refused(void **state)
{
    llama_config c = tiny(8);
    char why[128];
    c.kv_heads = 3; /* does not divide 4 heads */
    assert_false(llama_config_check(&c, why, sizeof why));
    c = tiny(8);
    c.hidden = 36; /* head_dim 9 */
    assert_false(llama_config_check(&c, why, sizeof why));
    c.head_dim = 16; /* given: heads need not divide hidden */
    assert_true(llama_config_check(&c, why, sizeof why));
    c.head_dim = 12;
    assert_false(llama_config_check(&c, why, sizeof why));
    c.head_dim = 264;
    assert_false(llama_config_check(&c, why, sizeof why));
    const llama_rope_scaling bad[] = {
        {0.5f, 1.0f, 4.0f, 64}, {8.0f, 4.0f, 1.0f, 64},     {8.0f, 0.0f, 4.0f, 64},
        {8.0f, 1.0f, 4.0f, 0},  {INFINITY, 1.0f, 4.0f, 64}, {NAN, 1.0f, 4.0f, 64},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = tiny_llama3(8);
        c.rope_scaling = bad[i];
        assert_false(llama_config_check(&c, why, sizeof why));
        assert_non_null(strstr(why, "llama3"));
    }
    c = tiny(0);
    assert_false(llama_config_check(&c, why, sizeof why));
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_falls_on_a_tiny_model),
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_gradients_of_packed_sequences_match_finite_differences),
        cmocka_unit_test(test_gradients_on_the_fused_backend_match_finite_differences),
        cmocka_unit_test(test_packed_loss_is_that_of_the_sequences_alone),
        cmocka_unit_test(test_sliding_window_masks_earlier_keys),
        cmocka_unit_test(test_qkv_biases_add_to_every_row),
        cmocka_unit_test(test_weights_file_that_disagrees_is_refused),
        cmocka_unit_test(test_lora_saved_as_files_and_peft_adapters_loads_back),
        cmocka_unit_test(test_checkpoint_directory_of_shards_loads),
        cmocka_unit_test(test_config_json_that_cannot_run_is_refused),
        cmocka_unit_test(test_data_windows_cycle_and_bad_files_are_refused),
        cmocka_unit_test(test_head_dim_and_rope_scaling_gradients_match_finite_differences),
        cmocka_unit_test(test_rope_frequencies_are_transformers),
        cmocka_unit_test(test_accumulated_batches_step_as_their_mean),
        cmocka_unit_test(test_resumed_state_goes_on_as_if_not_stopped),
        cmocka_unit_test(test_learning_rate_schedules_are_transformers),
        cmocka_unit_test(test_config_that_cannot_run_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
