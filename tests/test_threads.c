/*
 * Separate contexts on separate threads, each forced to the fused backend, running a decoder
 * block's training step at once (the threading contract of <hd/dispatch.h>): embedding, residual
 * add + RMS norm, the q, k and v LoRA projections, RoPE, grouped-query attention over packed
 * sequences, SwiGLU, cross-entropy and the LM head's (its targets an int32 tensor), every
 * backward, and AdamW, for a few
 * steps. Each thread has its own data and cycles through its own packings of the tokens, so
 * that the tables a context keeps on its device (RoPE's positions, attention's ranges) change
 * under the others' feet; its every tensor after every step must be bit for bit what the same
 * steps gave on one thread alone beforehand, as the fused kernels are in a deterministic
 * context (hd_context_options.deterministic: attention's dq summed in a fixed order). The shapes
 * are one for every thread, so that the threads ask for the same programs at once: from the
 * program cache, and from a fresh cache directory they all build into and then load from.
 *
 * Without an OpenCL device the suite is skipped, and says so; a device without the fused
 * backend is a failure.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testlib.h"

enum {
    TOKENS = 24,
    HEADS = 4,
    KV_HEADS = 2,
    HEAD_DIM = 16,
    HIDDEN = HEADS * HEAD_DIM, /* SwiGLU gates the attention's output with the normed input */
    KV_COLS = KV_HEADS * HEAD_DIM,
    RANK = 4,
    VOCAB = HIDDEN, /* SwiGLU's output doubles as the logits of the plain cross-entropy */
    STEPS = 3,
    JOBS = 4,
    PARAMS = 7, /* the norm's weight and the three projections' A and B */
    PACKINGS = 4,
};

#define EPS          1e-5f
#define SCALE        2.0f
#define IGNORE_INDEX (-100)

/* Ways to pack the tokens into sequences, an empty one among them. */
static const size_t packing_lengths[PACKINGS][4] = {{24}, {10, 14}, {5, 0, 11, 8}, {7, 7, 7, 3}};
static const size_t packing_counts[PACKINGS] = {1, 2, 4, 4};

/* The step's tensors: the frozen inputs, the trained ones, their gradients and AdamW's
 * moments in the same order, then the activations and their gradients. */
typedef enum tensor_name {
    TABLE,
    RESID,
    WQ,
    WK,
    WV,
    HEAD,
    NORM_W,
    AQ,
    BQ,
    AK,
    BK,
    AV,
    BV,
    GRAD_FIRST,
    MOMENT1_FIRST = GRAD_FIRST + PARAMS,
    MOMENT2_FIRST = MOMENT1_FIRST + PARAMS,
    E = MOMENT2_FIRST + PARAMS,
    H,
    Y,
    Q,
    K,
    V,
    O,
    LSE,
    ACT,
    LOSS_CE,
    LOSS_LM,
    GRAD_NORM,
    D_ACT,
    D_LM,
    D_O,
    D_U,
    DQ,
    DK,
    DV,
    D_Y,
    D_TMP,
    D_H,
    TENSOR_COUNT
} tensor_name;

#define PARAM_FIRST NORM_W

static const struct {
    const char *name;
    size_t rows, cols;
} tensors[TENSOR_COUNT] = {
    [TABLE] = {"table", VOCAB, HIDDEN}, [RESID] = {"resid", TOKENS, HIDDEN},
    [WQ] = {"wq", HIDDEN, HIDDEN},      [WK] = {"wk", HIDDEN, KV_COLS},
    [WV] = {"wv", HIDDEN, KV_COLS},     [HEAD] = {"head", VOCAB, HIDDEN},
    [NORM_W] = {"norm_w", 1, HIDDEN},   [AQ] = {"aq", HIDDEN, RANK},
    [BQ] = {"bq", RANK, HIDDEN},        [AK] = {"ak", HIDDEN, RANK},
    [BK] = {"bk", RANK, KV_COLS},       [AV] = {"av", HIDDEN, RANK},
    [BV] = {"bv", RANK, KV_COLS},       [E] = {"e", TOKENS, HIDDEN},
    [H] = {"h", TOKENS, HIDDEN},        [Y] = {"y", TOKENS, HIDDEN},
    [Q] = {"q", TOKENS, HIDDEN},        [K] = {"k", TOKENS, KV_COLS},
    [V] = {"v", TOKENS, KV_COLS},       [O] = {"o", TOKENS, HIDDEN},
    [LSE] = {"lse", TOKENS, HEADS},     [ACT] = {"act", TOKENS, HIDDEN},
    [LOSS_CE] = {"loss_ce", 1, 1},      [LOSS_LM] = {"loss_lm", 1, 1},
    [GRAD_NORM] = {"grad_norm", 1, 1},  [D_ACT] = {"d_act", TOKENS, VOCAB},
    [D_LM] = {"d_lm", TOKENS, HIDDEN},  [D_O] = {"d_o", TOKENS, HIDDEN},
    [D_U] = {"d_u", TOKENS, HIDDEN},    [DQ] = {"dq", TOKENS, HIDDEN},
    [DK] = {"dk", TOKENS, KV_COLS},     [DV] = {"dv", TOKENS, KV_COLS},
    [D_Y] = {"d_y", TOKENS, HIDDEN},    [D_TMP] = {"d_tmp", TOKENS, HIDDEN},
    [D_H] = {"d_h", TOKENS, HIDDEN},
};

/* A gradient or a moment has its parameter's shape. */
static int shape_source(int t)
{
    if (t >= GRAD_FIRST && t < E)
        return PARAM_FIRST + (t - GRAD_FIRST) % PARAMS;
    return t;
}

static size_t tensor_floats(int t)
{
    return tensors[shape_source(t)].rows * tensors[shape_source(t)].cols;
}

/* Its name, "grad norm_w" and "m1 aq" for the gradients and moments. */
static void tensor_label(int t, char *out, size_t size)
{
    static const char *const kind[] = {"grad", "m1", "m2"};
    if (t >= GRAD_FIRST && t < E)
        snprintf(out, size, "%s %s", kind[(t - GRAD_FIRST) / PARAMS],
                 tensors[shape_source(t)].name);
    else
        snprintf(out, size, "%s", tensors[t].name);
}

static size_t trace_floats(void)
{
    size_t n = 0;
    for (int t = 0; t < TENSOR_COUNT; t++)
        n += tensor_floats(t);
    return n;
}

/* One thread's data: the first contents of the inputs and parameters (NULL: zeros), its token
 * ids and targets (one ignored), and the packing its first step takes. */
typedef struct job {
    float *init[TENSOR_COUNT];
    int32_t ids[TOKENS], targets[TOKENS];
    size_t first_packing;
} job;

/* A run of a job's steps: every tensor after each step, or why it stopped. */
typedef struct run {
    const job *job;
    pthread_barrier_t *start; /* NULL: alone; else every thread's context is made first */
    float *trace;             /* STEPS x trace_floats() */
    char failure[768];        /* "" while every call ran on the fused backend */
} run;

typedef struct step {
    hd_context *ctx;
    hd_tensor *t[TENSOR_COUNT];
    hd_sequences seq;
    run *run;
} step;

/* Whether the call succeeded; the first failure is kept. Runs on the job's thread, where
 * cmocka's checks may not. */
static bool succeeded(step *s, hd_status status, const char *what)
{
    run *r = s->run;
    if (r->failure[0] == '\0' && status != HD_OK)
        snprintf(r->failure, sizeof r->failure, "%s: %s (%s)", what, hd_status_name(status),
                 hd_context_last_error(s->ctx));
    return r->failure[0] == '\0';
}

/* Whether the op succeeded on the fused backend, where it was forced (a fallback would hide
 * what the fused backend did). */
static bool ran(step *s, hd_status status, const char *what)
{
    if (succeeded(s, status, what) && hd_context_last_backend(s->ctx) != HD_BACKEND_FUSED)
        snprintf(s->run->failure, sizeof s->run->failure, "%s ran on %s, not on the fused backend",
                 what, hd_backend_name(hd_context_last_backend(s->ctx)));
    return s->run->failure[0] == '\0';
}

static hd_rope_options rope_options(const step *s, bool inverse)
{
    return (hd_rope_options){
        .head_dim = HEAD_DIM, .theta = 10000.0f, .sequences = s->seq, .inverse = inverse};
}

static hd_attention_options attention_options(const step *s)
{
    return (hd_attention_options){
        .heads = HEADS, .kv_heads = KV_HEADS, .causal = true, .sequences = s->seq};
}

static bool lora(step *s, tensor_name w, tensor_name a, tensor_name b, tensor_name y)
{
    hd_tensor **t = s->t;
    return ran(s, hd_lora_forward(s->ctx, t[Y], t[w], t[a], t[b], SCALE, t[y]), tensors[y].name);
}

/* The LM head's loss with its targets as an int32 tensor of the step's own (the plain
 * cross-entropy takes the host array). */
static bool linear_cross_entropy(step *s)
{
    hd_context *ctx = s->ctx;
    hd_tensor **t = s->t, *targets = NULL;
    bool ok = succeeded(s, hd_tensor_create_ex(ctx, TOKENS, 1, HD_DTYPE_I32, &targets),
                        "int32 targets") &&
              succeeded(s, hd_tensor_write_raw(targets, s->run->job->targets), "their write") &&
              ran(s,
                  hd_linear_cross_entropy_ids(ctx, t[ACT], t[HEAD], targets, IGNORE_INDEX,
                                              t[LOSS_LM], t[D_LM]),
                  "linear_cross_entropy_ids");
    hd_tensor_destroy(targets);
    return ok;
}

static bool forward(step *s)
{
    hd_context *ctx = s->ctx;
    hd_tensor **t = s->t;
    const job *j = s->run->job;
    hd_rope_options rope = rope_options(s, false);
    hd_attention_options att = attention_options(s);
    return ran(s, hd_embedding(ctx, t[TABLE], j->ids, t[E]), "embedding") &&
           ran(s, hd_add_rms_norm(ctx, t[E], t[RESID], t[NORM_W], EPS, t[H], t[Y]),
               "add_rms_norm") &&
           lora(s, WQ, AQ, BQ, Q) && lora(s, WK, AK, BK, K) && lora(s, WV, AV, BV, V) &&
           ran(s, hd_rope(ctx, &rope, t[Q], t[Q]), "rope q") &&
           ran(s, hd_rope(ctx, &rope, t[K], t[K]), "rope k") &&
           ran(s, hd_attention(ctx, &att, t[Q], t[K], t[V], t[O], t[LSE]), "attention") &&
           ran(s, hd_swiglu(ctx, t[O], t[Y], t[ACT]), "swiglu") &&
           ran(s, hd_cross_entropy(ctx, t[ACT], j->targets, IGNORE_INDEX, t[LOSS_CE], t[D_ACT]),
               "cross_entropy") &&
           linear_cross_entropy(s);
}

/* A projection's LoRA gradients, and its input's gradient into dx. */
static bool lora_grad(step *s, tensor_name w, tensor_name a, tensor_name b, tensor_name dy,
                      tensor_name dx)
{
    hd_tensor **t = s->t;
    return ran(s,
               hd_lora_backward(s->ctx, t[Y], t[w], t[a], t[b], SCALE, t[dy], t[dx],
                                t[GRAD_FIRST + a - PARAM_FIRST], t[GRAD_FIRST + b - PARAM_FIRST],
                                false),
               "lora_backward");
}

/* The losses' gradients summed, back through SwiGLU, attention and RoPE to q, k and v, the
 * three projections' input gradients summed with SwiGLU's, and back through the norm. */
static bool backward(step *s)
{
    hd_context *ctx = s->ctx;
    hd_tensor **t = s->t;
    hd_rope_options inverse = rope_options(s, true);
    hd_attention_options att = attention_options(s);
    return ran(s, hd_add(ctx, 1.0f, t[D_LM], t[D_ACT]), "add") &&
           ran(s, hd_swiglu_backward(ctx, t[O], t[Y], t[D_ACT], t[D_O], t[D_U]),
               "swiglu_backward") &&
           ran(s,
               hd_attention_backward(ctx, &att, t[Q], t[K], t[V], t[O], t[LSE], t[D_O], t[DQ],
                                     t[DK], t[DV]),
               "attention_backward") &&
           ran(s, hd_rope(ctx, &inverse, t[DQ], t[DQ]), "rope backward q") &&
           ran(s, hd_rope(ctx, &inverse, t[DK], t[DK]), "rope backward k") &&
           lora_grad(s, WQ, AQ, BQ, DQ, D_Y) && ran(s, hd_add(ctx, 1.0f, t[D_U], t[D_Y]), "add") &&
           lora_grad(s, WK, AK, BK, DK, D_TMP) &&
           ran(s, hd_add(ctx, 1.0f, t[D_TMP], t[D_Y]), "add") &&
           lora_grad(s, WV, AV, BV, DV, D_TMP) &&
           ran(s, hd_add(ctx, 1.0f, t[D_TMP], t[D_Y]), "add") &&
           ran(s,
               hd_add_rms_norm_backward(ctx, t[H], t[NORM_W], t[D_Y], NULL, EPS, t[D_H],
                                        t[GRAD_FIRST]),
               "add_rms_norm_backward");
}

static bool update(step *s, long number)
{
    hd_tensor *params[PARAMS], *m[PARAMS], *v[PARAMS];
    const hd_tensor *grads[PARAMS];
    for (int i = 0; i < PARAMS; i++) {
        params[i] = s->t[PARAM_FIRST + i];
        grads[i] = s->t[GRAD_FIRST + i];
        m[i] = s->t[MOMENT1_FIRST + i];
        v[i] = s->t[MOMENT2_FIRST + i];
    }
    hd_adamw_options opt = {.lr = 1e-2f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.01f,
                            .step = number,
                            .max_grad_norm = 1.0f,
                            .grad_norm = s->t[GRAD_NORM]};
    return ran(s, hd_adamw(s->ctx, &opt, PARAMS, params, grads, m, v), "adamw");
}

/* Every tensor, read into the trace at out. */
static bool trace(step *s, float *out)
{
    bool ok = true;
    for (int t = 0; t < TENSOR_COUNT && ok; t++) {
        ok = succeeded(s, hd_tensor_read(s->t[t], out), "reading a tensor");
        out += tensor_floats(t);
    }
    return ok;
}

static bool make_tensors(step *s)
{
    for (int t = 0; t < TENSOR_COUNT; t++) {
        const float *init = s->run->job->init[t];
        hd_status status = hd_tensor_create(s->ctx, tensors[shape_source(t)].rows,
                                            tensors[shape_source(t)].cols, &s->t[t]);
        if (status == HD_OK && init != NULL)
            status = hd_tensor_write(s->t[t], init);
        if (!succeeded(s, status, "making a tensor"))
            return false;
    }
    return true;
}

static hd_context *fused_context(run *r)
{
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.backends = "fused";
    opt.no_tune_cache = true;
    opt.deterministic = true;
    hd_context *ctx = NULL;
    if (hd_context_create(&ctx, &opt) != HD_OK)
        snprintf(r->failure, sizeof r->failure, "hd_context_create: %s",
                 hd_context_last_error(NULL));
    return ctx;
}

/* The job's steps on a context of its own; with a start barrier, once every thread has made
 * its context, however that went (a thread that stops early must not leave the others
 * waiting). */
static void run_steps(run *r)
{
    step s = {.run = r};
    r->failure[0] = '\0';
    r->trace = malloc(STEPS * trace_floats() * sizeof *r->trace);
    if (r->trace == NULL)
        snprintf(r->failure, sizeof r->failure, "no memory for the trace");
    else
        s.ctx = fused_context(r);
    bool ready = s.ctx != NULL && make_tensors(&s);
    if (r->start != NULL)
        pthread_barrier_wait(r->start);
    for (int n = 0; n < STEPS && ready; n++) {
        size_t packing = (r->job->first_packing + (size_t)n) % PACKINGS;
        s.seq = (hd_sequences){packing_lengths[packing], packing_counts[packing]};
        ready = forward(&s) && backward(&s) && update(&s, n + 1) &&
                trace(&s, r->trace + (size_t)n * trace_floats());
    }
    for (int t = 0; t < TENSOR_COUNT; t++)
        hd_tensor_destroy(s.t[t]);
    hd_context_destroy(s.ctx);
}

static void *run_thread(void *arg)
{
    run_steps(arg);
    return NULL;
}

/* ---- the jobs, and their runs alone ---- */

static job jobs[JOBS];
static run alone[JOBS];
static bool alone_done;

static void make_job(job *j, int index)
{
    hd_rng rng = hd_test_rng(900 + (uint64_t)index);
    for (int t = 0; t < GRAD_FIRST; t++) {
        float lo = t == NORM_W ? 0.8f : t == TABLE || t == RESID ? -1.0f : -0.25f;
        float hi = t == NORM_W ? 1.2f : -lo;
        j->init[t] = hd_test_random(&rng, tensor_floats(t), lo, hi);
    }
    for (int i = 0; i < TOKENS; i++) {
        j->ids[i] = (int32_t)(hd_test_uniform(&rng, 0.0f, 1.0f) * (VOCAB - 1));
        j->targets[i] = (int32_t)(hd_test_uniform(&rng, 0.0f, 1.0f) * (VOCAB - 1));
    }
    j->targets[index % TOKENS] = IGNORE_INDEX;
    j->first_packing = (size_t)index % PACKINGS;
}

/* Skips the test where there is no OpenCL device; the first call makes the jobs and runs each
 * alone, one after the other on this thread. */
static void jobs_run_alone_or_skip(void)
{
    if (alone_done)
        return;
    hd_context *probe = hd_test_context(false);
    bool device = strcmp(hd_context_device_name(probe), "none") != 0;
    bool fused = hd_context_has_backend(probe, HD_BACKEND_FUSED);
    hd_context_destroy(probe);
    if (!device) {
        fprintf(stderr, "# no OpenCL device: the fused backend's threads are not tested\n");
        skip();
    }
    if (!fused)
        fail_msg("the OpenCL device has no fused backend");
    for (int i = 0; i < JOBS; i++) {
        make_job(&jobs[i], i);
        alone[i] = (run){.job = &jobs[i]};
        run_steps(&alone[i]);
        if (alone[i].failure[0] != '\0')
            fail_msg("job %d alone: %s", i, alone[i].failure);
    }
    alone_done = true;
}

/* Fails unless got's trace is bit for bit want's, naming the first tensor that differs. */
static void expect_same_trace(int index, const run *got, const run *want)
{
    if (got->failure[0] != '\0')
        fail_msg("job %d on its thread: %s", index, got->failure);
    const float *g = got->trace, *w = want->trace;
    for (int n = 0; n < STEPS; n++)
        for (int t = 0; t < TENSOR_COUNT; t++) {
            for (size_t i = 0; i < tensor_floats(t); i++)
                if (memcmp(&g[i], &w[i], sizeof *g) != 0) {
                    char label[64];
                    tensor_label(t, label, sizeof label);
                    fail_msg("job %d, step %d: %s[%zu] is %a on its thread, %a alone", index, n + 1,
                             label, i, (double)g[i], (double)w[i]);
                }
            g += tensor_floats(t);
            w += tensor_floats(t);
        }
}

/* Every job on a thread of its own, all at once, each checked against its run alone. */
static void run_jobs_at_once(void)
{
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, JOBS), 0);
    run runs[JOBS];
    pthread_t threads[JOBS];
    for (int i = 0; i < JOBS; i++) {
        runs[i] = (run){.job = &jobs[i], .start = &start};
        assert_int_equal(pthread_create(&threads[i], NULL, run_thread, &runs[i]), 0);
    }
    for (int i = 0; i < JOBS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < JOBS; i++) {
        expect_same_trace(i, &runs[i], &alone[i]);
        free(runs[i].trace);
    }
}

/* ---- the tests ---- */

static void test_contexts_on_threads_run_the_step_as_alone(void **state)
{
    (void)state;
    jobs_run_alone_or_skip();
    run_jobs_at_once();
}

/* The program cache's entries in dir: at least one, and nothing else (no temporary file left
 * by a store that lost a race). */
static void expect_only_cache_entries(const char *dir)
{
    char programs[256];
    snprintf(programs, sizeof programs, "%s/hd-dispatch/programs", dir);
    DIR *d = opendir(programs);
    if (d == NULL)
        fail_msg("no program cache at %s", programs);
    size_t entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (len < 6 || strcmp(e->d_name + len - 6, ".clbin") != 0) {
            closedir(d);
            fail_msg("%s/%s is no cache entry", programs, e->d_name);
        }
        entries++;
    }
    closedir(d);
    assert_true(entries > 0);
}

/* The fresh cache directory of the shared-cache test, and the variables it changes. */
static struct {
    char dir[128];
    char *xdg_cache_home, *program_cache;
} fresh;

static char *saved_env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *saved)
{
    if (saved != NULL)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

static int make_fresh_cache(void **state)
{
    (void)state;
    fresh.xdg_cache_home = saved_env("XDG_CACHE_HOME");
    fresh.program_cache = saved_env("HD_PROGRAM_CACHE");
    return hd_test_tmpdir_create("threads", fresh.dir, sizeof fresh.dir);
}

static int remove_fresh_cache(void **state)
{
    (void)state;
    restore_env("XDG_CACHE_HOME", fresh.xdg_cache_home);
    restore_env("HD_PROGRAM_CACHE", fresh.program_cache);
    return hd_test_tmpdir_remove(fresh.dir);
}

/* Every thread builds the same programs into one empty cache directory at once (each store
 * a temporary file renamed over the others'), then every thread loads them from it at once.
 * The runs alone come first, from the usual cache: they must not fill the fresh one. */
static void test_contexts_on_threads_share_a_fresh_program_cache(void **state)
{
    (void)state;
    jobs_run_alone_or_skip();
    setenv("XDG_CACHE_HOME", fresh.dir, 1);
    setenv("HD_PROGRAM_CACHE", "1", 1); /* on, as on PoCL it is off by default */
    run_jobs_at_once();
    expect_only_cache_entries(fresh.dir);
    run_jobs_at_once();
    expect_only_cache_entries(fresh.dir);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < JOBS; i++) {
        for (int t = 0; t < TENSOR_COUNT; t++)
            free(jobs[i].init[t]);
        free(alone[i].trace);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contexts_on_threads_run_the_step_as_alone),
        cmocka_unit_test_setup_teardown(test_contexts_on_threads_share_a_fresh_program_cache,
                                        make_fresh_cache, remove_fresh_cache),
    };
    hd_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, teardown);
}
