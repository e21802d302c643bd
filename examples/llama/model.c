/*
 * The Llama-style LoRA model (model.h): its tensors, the forward pass layer by layer, the
 * backward pass in reverse layer order by hand (llm.c's way), and the AdamW step. One step, per
 * layer l (h: the residual stream, T x D):
 *
 *   a = rms_norm(h_l)                        fused into the previous layer's add + norm
 *   q, k, v = lora(a)                         hd_lora_forward_ex, PyTorch's layouts
 *   q, k = rope(q), rope(k)                   in place
 *   o = attention(q, k, v)                    causal, grouped-query, lse kept
 *   m_l = h_l + lora_o(o); b = rms_norm(m_l)  hd_add_rms_norm (both kept)
 *   s = swiglu(lora_gate(b), lora_up(b))
 *   h_{l+1} = m_l + lora_down(s), and the next norm    hd_add_rms_norm
 *
 * then the loss of the LM head on the last norm's output without its logits
 * (hd_linear_cross_entropy_ids), and the same in reverse for the gradients. The step's tokens
 * and targets go to int32 tensors, written once a step and read where the embedding and the
 * loss run.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model.h"
#include "safetensors.h"

/* The seven projections of a layer, with LoRA on each. */
enum { Q, K, V, O, GATE, UP, DOWN, PROJECTIONS };
static const char *const projection_names[PROJECTIONS] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

/* A projection: W (out x in), its frozen bias (1 x out, Qwen2's q, k and v; else NULL), its
 * LoRA factors A (r x in) and B (out x r), their gradients and AdamW's moments. */
typedef struct projection {
    size_t in, out;
    hd_tensor *w, *bias, *a, *b, *da, *db, *ma, *va, *mb, *vb;
    hd_tensor *batch_da, *batch_db; /* a step's later batches' gradients, added to da and db;
                                       made at the first step of several batches */
} projection;

/* A layer's weights and what its forward keeps for the backward. */
typedef struct layer {
    hd_tensor *in_norm, *post_norm; /* 1 x D */
    projection p[PROJECTIONS];
    hd_tensor *resid_in;  /* h_l (layer 0: the embeddings) */
    hd_tensor *attn_in;   /* rms_norm(h_l) */
    hd_tensor *q, *k, *v; /* after RoPE */
    hd_tensor *attn, *lse;
    hd_tensor *resid_mid; /* m_l */
    hd_tensor *mlp_in;
    hd_tensor *gate, *up, *act;
} layer;

struct llama_model {
    hd_context *ctx;
    llama_config c;
    size_t head_dim;
    float scale; /* LoRA's alpha / r */
    hd_tensor *embed, *final_norm, *lm_head;
    hd_tensor *rope_freq; /* RoPE's scaled frequencies (1 x head_dim / 2); NULL: theta's */
    hd_tensor *ones;      /* tokens x 1 ones: a bias added to every row is ones * bias */
    layer *layers;
    hd_tensor *resid_out, *normed; /* the last residual and its norm */
    hd_tensor *proj_out;           /* o's and down's outputs, in turn */
    hd_tensor *loss, *grad_norm;
    hd_tensor *loss_sum; /* a step's batches' losses added */
    bool accumulate;     /* the LoRA gradients add to those held (a step's later batches) */
    bool batch_grads;    /* every projection has its batch_da and batch_db */
    /* gradients on the way down */
    hd_tensor *d_resid, *d_norm, *d_tmp, *d_attn, *dq, *dk, *dv, *d_act, *d_normed;
    int32_t *targets;    /* tokens shifted by one, ignore_index at each sequence's end */
    hd_tensor *token_ids, *target_ids; /* the step's tokens and targets (int32, tokens x 1) */
    hd_tensor **adam[4]; /* the AdamW lists: factors, gradients, m, v */
    size_t adam_count;
    size_t bytes;
};

#define IGNORE_INDEX (-100)

void llama_config_defaults(llama_config *c)
{
    *c = (llama_config){.rope_theta = 10000.0f,
                        .norm_eps = 1e-5f,
                        .rank = 16,
                        .lora_alpha = 32.0f,
                        .lr = 1e-4f,
                        .beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .adam_eps = 1e-8f};
}

size_t llama_head_dim(const llama_config *c)
{
    return c->head_dim != 0 ? c->head_dim : c->hidden / c->heads;
}

static bool rope_scaling_valid(const llama_rope_scaling *r)
{
    if (r->factor == 0.0f)
        return true;
    return isfinite(r->factor) && r->factor >= 1.0f && isfinite(r->high_freq_factor) &&
           r->low_freq_factor > 0.0f && r->high_freq_factor > r->low_freq_factor &&
           r->original_max_positions > 0;
}

bool llama_config_check(const llama_config *c, char *why, size_t size)
{
    const char *bad = NULL;
    if (c->layers == 0 || c->hidden == 0 || c->heads == 0 || c->kv_heads == 0 || c->mlp == 0 ||
        c->vocab == 0 || c->tokens == 0 || c->rank == 0)
        bad = "every size (layers, hidden, heads, kv heads, mlp, vocab, tokens, rank) must be > 0";
    else if (c->head_dim == 0 && c->hidden % c->heads != 0)
        bad = "heads must divide hidden where the head dimension is not given";
    else if (c->heads % c->kv_heads != 0)
        bad = "kv heads must divide heads";
    else if (llama_head_dim(c) % 8 != 0 || llama_head_dim(c) > 256)
        bad = "the head dimension (head_dim, or hidden / heads) must be a multiple of 8 up to 256";
    else if (c->vocab > INT32_MAX)
        bad = "the vocabulary must fit int32 ids";
    else if (!(c->rope_theta > 1.0f) || !(c->norm_eps >= 0.0f) || !(c->lora_alpha > 0.0f))
        bad = "rope theta must be > 1, the norm's eps >= 0 and LoRA's alpha > 0";
    else if (c->schedule != LLAMA_SCHEDULE_CONSTANT && c->total_steps <= c->warmup_steps)
        bad = "a decaying learning rate needs more steps than its warmup";
    else if (!rope_scaling_valid(&c->rope_scaling))
        bad = "the llama3 RoPE scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor "
              "and original positions > 0";
    if (bad != NULL)
        snprintf(why, size, "%s", bad);
    return bad == NULL;
}

float llama_learning_rate(const llama_config *c, long step)
{
    double t = (double)(step - 1), warmup = (double)c->warmup_steps;
    if (t < warmup)
        return (float)((double)c->lr * t / warmup);
    double f = 1.0;
    if (c->schedule != LLAMA_SCHEDULE_CONSTANT) {
        double progress = (t - warmup) / ((double)c->total_steps - warmup);
        f = c->schedule == LLAMA_SCHEDULE_LINEAR ? 1.0 - progress
                                                 : 0.5 * (1.0 + cos(3.141592653589793 * progress));
        f = f > 0.0 ? f : 0.0;
    }
    return (float)((double)c->lr * f);
}

void llama_rope_frequencies(const llama_config *c, float *out)
{
    const size_t d = llama_head_dim(c);
    const llama_rope_scaling *r = &c->rope_scaling;
    for (size_t i = 0; i < d / 2; i++) {
        double f = pow((double)c->rope_theta, -2.0 * (double)i / (double)d);
        if (r->factor != 0.0f) {
            double wavelength = 6.283185307179586 / f; /* 2 pi / f */
            double original = (double)r->original_max_positions;
            double low = (double)r->low_freq_factor, high = (double)r->high_freq_factor;
            if (wavelength > original / low) {
                f /= r->factor;
            } else if (wavelength >= original / high) {
                double smooth = (original / wavelength - low) / (high - low);
                f = (1.0 - smooth) * f / r->factor + smooth * f;
            }
        }
        out[i] = (float)f;
    }
}

/* ---- tensors ---- */

static hd_status tensor(llama_model *m, size_t rows, size_t cols, hd_tensor **t)
{
    m->bytes += rows * cols * sizeof(float);
    return hd_tensor_create(m->ctx, rows, cols, t);
}

static hd_status create_projection(llama_model *m, projection *p, size_t in, size_t out)
{
    size_t r = m->c.rank;
    p->in = in;
    p->out = out;
    hd_status s = tensor(m, out, in, &p->w);
    hd_tensor **rxin[] = {&p->a, &p->da, &p->ma, &p->va};
    hd_tensor **outxr[] = {&p->b, &p->db, &p->mb, &p->vb};
    for (int i = 0; i < 4 && s == HD_OK; i++)
        s = tensor(m, r, in, rxin[i]);
    for (int i = 0; i < 4 && s == HD_OK; i++)
        s = tensor(m, out, r, outxr[i]);
    return s;
}

static hd_status create_layer(llama_model *m, layer *l)
{
    const llama_config *c = &m->c;
    size_t t = c->tokens, d = c->hidden, qd = c->heads * m->head_dim;
    size_t kvd = c->kv_heads * m->head_dim;
    const size_t in[PROJECTIONS] = {d, d, d, qd, d, d, c->mlp};
    const size_t out[PROJECTIONS] = {qd, kvd, kvd, d, c->mlp, c->mlp, d};
    hd_status s = tensor(m, 1, d, &l->in_norm);
    if (s == HD_OK)
        s = tensor(m, 1, d, &l->post_norm);
    for (int i = 0; i < PROJECTIONS && s == HD_OK; i++)
        s = create_projection(m, &l->p[i], in[i], out[i]);
    for (int i = Q; i <= V && c->qkv_bias && s == HD_OK; i++)
        s = tensor(m, 1, out[i], &l->p[i].bias);
    struct {
        hd_tensor **t;
        size_t cols;
    } acts[] = {{&l->resid_in, d}, {&l->attn_in, d},   {&l->q, qd},         {&l->k, kvd},
                {&l->v, kvd},      {&l->attn, qd},     {&l->lse, c->heads}, {&l->resid_mid, d},
                {&l->mlp_in, d},   {&l->gate, c->mlp}, {&l->up, c->mlp},    {&l->act, c->mlp}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && s == HD_OK; i++)
        s = tensor(m, t, acts[i].cols, acts[i].t);
    return s;
}

/* The tokens x 1 ones that broadcast a bias over the rows. */
static hd_status ones(llama_model *m)
{
    float *v = malloc(m->c.tokens * sizeof *v);
    if (v == NULL)
        return HD_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < m->c.tokens; i++)
        v[i] = 1.0f;
    hd_status s = tensor(m, m->c.tokens, 1, &m->ones);
    if (s == HD_OK)
        s = hd_tensor_write(m->ones, v);
    free(v);
    return s;
}

/* The scaled RoPE frequencies, on the device for every step. */
static hd_status rope_frequencies(llama_model *m)
{
    float *f = malloc(m->head_dim / 2 * sizeof *f);
    if (f == NULL)
        return HD_ERR_OUT_OF_MEMORY;
    llama_rope_frequencies(&m->c, f);
    hd_status s = tensor(m, 1, m->head_dim / 2, &m->rope_freq);
    if (s == HD_OK)
        s = hd_tensor_write(m->rope_freq, f);
    free(f);
    return s;
}

static hd_status create_tensors(llama_model *m)
{
    const llama_config *c = &m->c;
    size_t t = c->tokens, d = c->hidden, qd = c->heads * m->head_dim;
    size_t kvd = c->kv_heads * m->head_dim;
    hd_status s = tensor(m, c->vocab, d, &m->embed);
    if (s == HD_OK)
        s = tensor(m, 1, d, &m->final_norm);
    if (s == HD_OK && c->qkv_bias)
        s = ones(m);
    if (s == HD_OK && c->rope_scaling.factor != 0.0f)
        s = rope_frequencies(m);
    for (size_t i = 0; i < c->layers && s == HD_OK; i++)
        s = create_layer(m, &m->layers[i]);
    struct {
        hd_tensor **t;
        size_t rows, cols;
    } rest[] = {{&m->resid_out, t, d}, {&m->normed, t, d},     {&m->proj_out, t, d},
                {&m->loss, 1, 1},      {&m->grad_norm, 1, 1},  {&m->loss_sum, 1, 1},
                {&m->d_resid, t, d},   {&m->d_norm, t, d},     {&m->d_tmp, t, d},
                {&m->d_attn, t, qd},   {&m->dq, t, qd},        {&m->dk, t, kvd},
                {&m->dv, t, kvd},      {&m->d_act, t, c->mlp}, {&m->d_normed, t, d}};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0] && s == HD_OK; i++)
        s = tensor(m, rest[i].rows, rest[i].cols, rest[i].t);
    /* written each step, read where the embedding and the loss run */
    if (s == HD_OK)
        s = hd_tensor_create_ex(m->ctx, t, 1, HD_DTYPE_I32, &m->token_ids);
    if (s == HD_OK)
        s = hd_tensor_create_ex(m->ctx, t, 1, HD_DTYPE_I32, &m->target_ids);
    return s;
}

/* AdamW's four lists over every LoRA factor: A then B of each projection of each layer. */
static hd_status make_adam_lists(llama_model *m)
{
    m->adam_count = 2 * PROJECTIONS * m->c.layers;
    for (int k = 0; k < 4; k++)
        if ((m->adam[k] = calloc(m->adam_count, sizeof *m->adam[k])) == NULL)
            return HD_ERR_OUT_OF_MEMORY;
    size_t n = 0;
    for (size_t i = 0; i < m->c.layers; i++)
        for (int j = 0; j < PROJECTIONS; j++, n += 2) {
            projection *p = &m->layers[i].p[j];
            hd_tensor *a[4] = {p->a, p->da, p->ma, p->va}, *b[4] = {p->b, p->db, p->mb, p->vb};
            for (int k = 0; k < 4; k++) {
                m->adam[k][n] = a[k];
                m->adam[k][n + 1] = b[k];
            }
        }
    return HD_OK;
}

hd_status llama_create(hd_context *ctx, const llama_config *c, llama_model **out, char *why,
                       size_t size)
{
    *out = NULL;
    if (!llama_config_check(c, why, size))
        return HD_ERR_INVALID_ARGUMENT;
    llama_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->layers = calloc(c->layers, sizeof *m->layers)) == NULL ||
        (m->targets = malloc(c->tokens * sizeof *m->targets)) == NULL) {
        llama_destroy(m);
        snprintf(why, size, "no host memory for the model");
        return HD_ERR_OUT_OF_MEMORY;
    }
    m->ctx = ctx;
    m->c = *c;
    m->head_dim = llama_head_dim(c);
    m->scale = c->lora_alpha / (float)c->rank;
    hd_status s = create_tensors(m);
    if (s == HD_OK)
        s = make_adam_lists(m);
    if (s != HD_OK) {
        snprintf(why, size, "creating the model's tensors: %s", hd_context_last_error(ctx));
        llama_destroy(m);
        return s;
    }
    *out = m;
    return HD_OK;
}

static void destroy_projection(projection *p)
{
    hd_tensor *t[] = {p->w,  p->bias, p->a,  p->b,  p->da,       p->db,
                      p->ma, p->va,   p->mb, p->vb, p->batch_da, p->batch_db};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        hd_tensor_destroy(t[i]);
}

void llama_destroy(llama_model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; m->layers != NULL && i < m->c.layers; i++) {
        layer *l = &m->layers[i];
        for (int j = 0; j < PROJECTIONS; j++)
            destroy_projection(&l->p[j]);
        hd_tensor *t[] = {l->in_norm, l->post_norm, l->resid_in, l->attn_in, l->q,
                          l->k,       l->v,         l->attn,     l->lse,     l->resid_mid,
                          l->mlp_in,  l->gate,      l->up,       l->act};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            hd_tensor_destroy(t[k]);
    }
    hd_tensor *t[] = {m->ones,      m->embed,     m->final_norm, m->rope_freq, m->lm_head,
                      m->resid_out, m->normed,    m->proj_out,   m->loss,      m->grad_norm,
                      m->loss_sum,  m->d_resid,   m->d_norm,     m->d_tmp,     m->d_attn,
                      m->dq,        m->dk,        m->dv,         m->d_act,     m->d_normed,
                      m->token_ids, m->target_ids};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        hd_tensor_destroy(t[k]);
    for (int k = 0; k < 4; k++)
        free(m->adam[k]);
    free(m->layers);
    free(m->targets);
    free(m);
}

/* ---- loading ---- */

/* rows x cols floats of name from source into t, placed on the device. */
static hd_status load_tensor(llama_model *m, llama_tensor_source *source, void *user,
                             const char *name, hd_tensor *t, char *why, size_t size)
{
    size_t rows = hd_tensor_rows(t), cols = hd_tensor_cols(t);
    float *data = malloc((rows * cols > 0 ? rows * cols : 1) * sizeof *data);
    if (data == NULL) {
        snprintf(why, size, "no host memory to read '%s'", name);
        return HD_ERR_OUT_OF_MEMORY;
    }
    hd_status s = source(user, name, rows, cols, data, why, size);
    if (s == HD_OK && (s = hd_tensor_write(t, data)) == HD_OK)
        s = hd_tensor_prefetch(t);
    if (s != HD_OK && why[0] == '\0')
        snprintf(why, size, "'%s': %s", name, hd_context_last_error(m->ctx));
    free(data);
    return s;
}

static void layer_name(char *buf, size_t size, size_t i, const char *what)
{
    snprintf(buf, size, "model.layers.%zu.%s", i, what);
}

hd_status llama_load_weights(llama_model *m, llama_tensor_source *source, void *user, char *why,
                             size_t size)
{
    why[0] = '\0';
    hd_status s = load_tensor(m, source, user, "model.embed_tokens.weight", m->embed, why, size);
    if (s == HD_OK)
        s = load_tensor(m, source, user, "model.norm.weight", m->final_norm, why, size);
    char name[160];
    for (size_t i = 0; i < m->c.layers && s == HD_OK; i++) {
        layer *l = &m->layers[i];
        layer_name(name, sizeof name, i, "input_layernorm.weight");
        s = load_tensor(m, source, user, name, l->in_norm, why, size);
        layer_name(name, sizeof name, i, "post_attention_layernorm.weight");
        if (s == HD_OK)
            s = load_tensor(m, source, user, name, l->post_norm, why, size);
        for (int j = 0; j < PROJECTIONS && s == HD_OK; j++) {
            char what[96];
            snprintf(what, sizeof what, "%s.weight", projection_names[j]);
            layer_name(name, sizeof name, i, what);
            s = load_tensor(m, source, user, name, l->p[j].w, why, size);
            if (s != HD_OK || l->p[j].bias == NULL)
                continue;
            snprintf(what, sizeof what, "%s.bias", projection_names[j]);
            layer_name(name, sizeof name, i, what);
            s = load_tensor(m, source, user, name, l->p[j].bias, why, size);
        }
    }
    if (s != HD_OK)
        return s;
    /* An untied head has weights of its own (made at the first load, kept by a later one); a
     * tied one is the embedding. */
    if (m->c.tied_embeddings)
        return s;
    if (m->lm_head == NULL && (s = tensor(m, m->c.vocab, m->c.hidden, &m->lm_head)) != HD_OK) {
        snprintf(why, size, "creating lm_head.weight: %s", hd_context_last_error(m->ctx));
        return s;
    }
    return load_tensor(m, source, user, "lm_head.weight", m->lm_head, why, size);
}

hd_status llama_file_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                            char *why, size_t size)
{
    size_t shape[2] = {rows, cols};
    /* a row of one: a norm's weight, 1-D in the file, or a LoRA factor of rank 1, 2-D */
    const hd_st_tensor *t = NULL;
    char unused[8];
    bool vector =
        rows == 1 && hd_st_find(user, name, &t, unused, sizeof unused) == HD_OK && t->ndim == 1;
    return hd_st_load(user, name, vector ? 1 : 2, vector ? &shape[1] : shape, dst, why, size);
}

#define PEFT_PREFIX "base_model.model."

hd_status llama_peft_file_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                                 char *why, size_t size)
{
    const hd_st_tensor *t = NULL;
    char unused[8], prefixed[256];
    if (hd_st_find(user, name, &t, unused, sizeof unused) == HD_OK ||
        (size_t)snprintf(prefixed, sizeof prefixed, PEFT_PREFIX "%s", name) >= sizeof prefixed ||
        hd_st_find(user, prefixed, &t, unused, sizeof unused) != HD_OK)
        return llama_file_source(user, name, rows, cols, dst, why, size);
    return llama_file_source(user, prefixed, rows, cols, dst, why, size);
}

static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((double)(next_random(s) >> 11) + 0.5) * 0x1.0p-53;
}

/* The name's own stream of the seed, so that a tensor's values do not depend on the order in
 * which tensors are made. */
static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325u ^ seed;
    for (const char *p = name; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3u;
    return h;
}

hd_status llama_seeded_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                              char *why, size_t size)
{
    (void)why;
    (void)size;
    uint64_t s = name_seed(*(const uint64_t *)user, name);
    bool norm = strstr(name, "norm") != NULL;
    for (size_t i = 0; i < rows * cols; i++) {
        double u1 = uniform01(&s), u2 = uniform01(&s); /* Box-Muller: normal, std 0.02 */
        dst[i] = norm ? 1.0f : (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return HD_OK;
}

/* PEFT's initialisation: A by kaiming_uniform_(a = sqrt(5)), uniform in +-1/sqrt(in); B zeros. */
static hd_status peft_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                             char *why, size_t size)
{
    (void)why;
    (void)size;
    uint64_t s = name_seed(*(const uint64_t *)user, name);
    bool is_a = strstr(name, "lora_A") != NULL;
    double bound = 1.0 / sqrt((double)cols);
    for (size_t i = 0; i < rows * cols; i++)
        dst[i] = is_a ? (float)((2.0 * uniform01(&s) - 1.0) * bound) : 0.0f;
    return HD_OK;
}

static void lora_name(char *buf, size_t size, size_t layer_index, int proj, bool is_b)
{
    snprintf(buf, size, "model.layers.%zu.%s.lora_%c.weight", layer_index, projection_names[proj],
             is_b ? 'B' : 'A');
}

hd_status llama_load_lora(llama_model *m, llama_tensor_source *source, void *user, uint64_t seed,
                          char *why, size_t size)
{
    why[0] = '\0';
    if (source == NULL) {
        source = peft_source;
        user = &seed;
    }
    hd_status s = HD_OK;
    char name[160];
    for (size_t i = 0; i < m->c.layers && s == HD_OK; i++)
        for (int j = 0; j < PROJECTIONS && s == HD_OK; j++) {
            projection *p = &m->layers[i].p[j];
            lora_name(name, sizeof name, i, j, false);
            s = load_tensor(m, source, user, name, p->a, why, size);
            lora_name(name, sizeof name, i, j, true);
            if (s == HD_OK)
                s = load_tensor(m, source, user, name, p->b, why, size);
        }
    /* AdamW's moments start at zero on the device */
    for (size_t n = 0; n < m->adam_count && s == HD_OK; n++)
        for (int k = 2; k < 4 && s == HD_OK; k++)
            s = hd_tensor_prefetch(m->adam[k][n]);
    return s;
}

/* ---- one step ---- */

/* Token i predicts token i + 1 of its sequence; a sequence's last token predicts nothing. */
static void make_targets(llama_model *m, const int32_t *tokens, const hd_sequences *q)
{
    size_t t = m->c.tokens, begin = 0;
    size_t count = q != NULL && q->count > 0 ? q->count : 1;
    for (size_t s = 0; s < count; s++) {
        size_t len = q != NULL && q->count > 0 ? q->lengths[s] : t;
        for (size_t i = 0; i < len; i++)
            m->targets[begin + i] = i + 1 < len ? tokens[begin + i + 1] : IGNORE_INDEX;
        begin += len;
    }
}

/* y = x W^T + scale x A^T B^T, and the bias where the projection has one (added to every row
 * as the product of a column of ones and the bias row; frozen, it changes no gradient). */
static hd_status lora(llama_model *m, const projection *p, const hd_tensor *x, hd_tensor *y)
{
    hd_status s =
        hd_lora_forward_ex(m->ctx, x, p->w, p->a, p->b, m->scale, HD_LORA_LAYOUT_PYTORCH, y);
    if (s == HD_OK && p->bias != NULL)
        s = hd_gemm(m->ctx, false, false, 1.0f, m->ones, p->bias, 1.0f, y);
    return s;
}

/* dx, and the LoRA gradients: into da and db, or (m->accumulate) added to them through
 * batch_da and batch_db (hd_lora_backward's own accumulation would add dx to what it holds
 * too). */
static hd_status lora_grad(llama_model *m, const projection *p, const hd_tensor *x,
                           const hd_tensor *dy, hd_tensor *dx)
{
    hd_tensor *da = m->accumulate ? p->batch_da : p->da, *db = m->accumulate ? p->batch_db : p->db;
    hd_status s = hd_lora_backward_ex(m->ctx, x, p->w, p->a, p->b, m->scale, HD_LORA_LAYOUT_PYTORCH,
                                      dy, dx, da, db, false);
    if (s == HD_OK && m->accumulate)
        s = hd_add(m->ctx, 1.0f, p->batch_da, p->da);
    if (s == HD_OK && m->accumulate)
        s = hd_add(m->ctx, 1.0f, p->batch_db, p->db);
    return s;
}

/* Every projection's batch_da and batch_db, once. */
static hd_status make_batch_grads(llama_model *m)
{
    hd_status s = HD_OK;
    for (size_t i = 0; i < m->c.layers && s == HD_OK && !m->batch_grads; i++)
        for (int j = 0; j < PROJECTIONS && s == HD_OK; j++) {
            projection *p = &m->layers[i].p[j];
            if (p->batch_da == NULL)
                s = tensor(m, m->c.rank, p->in, &p->batch_da);
            if (s == HD_OK && p->batch_db == NULL)
                s = tensor(m, p->out, m->c.rank, &p->batch_db);
        }
    if (s == HD_OK)
        m->batch_grads = true;
    return s;
}

static hd_attention_options attention_options(const llama_model *m, const hd_sequences *q)
{
    return (hd_attention_options){.heads = m->c.heads,
                                  .kv_heads = m->c.kv_heads,
                                  .causal = true,
                                  .sequences = q != NULL ? *q : (hd_sequences){NULL, 0},
                                  .window = m->c.sliding_window};
}

static hd_rope_options rope_options(const llama_model *m, const hd_sequences *q, bool inverse)
{
    return (hd_rope_options){.head_dim = m->head_dim,
                             .theta = m->c.rope_theta,
                             .sequences = q != NULL ? *q : (hd_sequences){NULL, 0},
                             .inv_freq = m->rope_freq,
                             .inverse = inverse};
}

/* The next norm's weight after layer i: the next layer's input norm, or the final norm. */
static const hd_tensor *next_norm(const llama_model *m, size_t i)
{
    return i + 1 < m->c.layers ? m->layers[i + 1].in_norm : m->final_norm;
}

static hd_status layer_forward(llama_model *m, size_t i, const hd_sequences *q)
{
    hd_context *ctx = m->ctx;
    layer *l = &m->layers[i];
    float eps = m->c.norm_eps;
    hd_status s = lora(m, &l->p[Q], l->attn_in, l->q);
    if (s == HD_OK)
        s = lora(m, &l->p[K], l->attn_in, l->k);
    if (s == HD_OK)
        s = lora(m, &l->p[V], l->attn_in, l->v);
    hd_rope_options rope = rope_options(m, q, false);
    if (s == HD_OK)
        s = hd_rope(ctx, &rope, l->q, l->q);
    if (s == HD_OK)
        s = hd_rope(ctx, &rope, l->k, l->k);
    hd_attention_options att = attention_options(m, q);
    if (s == HD_OK)
        s = hd_attention(ctx, &att, l->q, l->k, l->v, l->attn, l->lse);
    if (s == HD_OK)
        s = lora(m, &l->p[O], l->attn, m->proj_out);
    if (s == HD_OK)
        s = hd_add_rms_norm(ctx, l->resid_in, m->proj_out, l->post_norm, eps, l->resid_mid,
                            l->mlp_in);
    if (s == HD_OK)
        s = lora(m, &l->p[GATE], l->mlp_in, l->gate);
    if (s == HD_OK)
        s = lora(m, &l->p[UP], l->mlp_in, l->up);
    if (s == HD_OK)
        s = hd_swiglu(ctx, l->gate, l->up, l->act);
    if (s == HD_OK)
        s = lora(m, &l->p[DOWN], l->act, m->proj_out);
    /* the residual after the MLP is the next layer's input (or the last), normed at once */
    hd_tensor *resid = i + 1 < m->c.layers ? m->layers[i + 1].resid_in : m->resid_out;
    hd_tensor *normed = i + 1 < m->c.layers ? m->layers[i + 1].attn_in : m->normed;
    if (s == HD_OK)
        s = hd_add_rms_norm(ctx, l->resid_mid, m->proj_out, next_norm(m, i), eps, resid, normed);
    return s;
}

/* The forward up to the loss; dh (NULL: not wanted) the loss's gradient of the last norm's
 * output. */
static hd_status forward(llama_model *m, const int32_t *tokens, const hd_sequences *q,
                         hd_tensor *dh)
{
    hd_context *ctx = m->ctx;
    make_targets(m, tokens, q);
    layer *first = &m->layers[0];
    hd_status s = hd_tensor_write_raw(m->token_ids, tokens);
    if (s == HD_OK)
        s = hd_tensor_write_raw(m->target_ids, m->targets);
    if (s == HD_OK)
        s = hd_embedding_ids(ctx, m->embed, m->token_ids, first->resid_in);
    if (s == HD_OK)
        s = hd_rms_norm(ctx, first->resid_in, first->in_norm, m->c.norm_eps, first->attn_in);
    for (size_t i = 0; i < m->c.layers && s == HD_OK; i++)
        s = layer_forward(m, i, q);
    const hd_tensor *head = m->lm_head != NULL ? m->lm_head : m->embed;
    if (s == HD_OK)
        s = hd_linear_cross_entropy_ids(ctx, m->normed, head, m->target_ids, IGNORE_INDEX, m->loss,
                                        dh);
    return s;
}

/* The gradient of layer i's q, k and v projections' input: the three products' dx added. The
 * first layer's input is the frozen embedding: its LoRA gradients alone are wanted. */
static hd_status qkv_backward(llama_model *m, size_t i)
{
    layer *l = &m->layers[i];
    bool want_dx = i > 0;
    hd_status s = lora_grad(m, &l->p[Q], l->attn_in, m->dq, want_dx ? m->d_norm : NULL);
    if (s == HD_OK)
        s = lora_grad(m, &l->p[K], l->attn_in, m->dk, want_dx ? m->d_tmp : NULL);
    if (s == HD_OK && want_dx)
        s = hd_add(m->ctx, 1.0f, m->d_tmp, m->d_norm);
    if (s == HD_OK)
        s = lora_grad(m, &l->p[V], l->attn_in, m->dv, want_dx ? m->d_tmp : NULL);
    if (s == HD_OK && want_dx)
        s = hd_add(m->ctx, 1.0f, m->d_tmp, m->d_norm);
    return s;
}

/* Layer i backward; d_resid holds the gradient of its output residual, and leaves holding that
 * of its input residual (i > 0). */
static hd_status layer_backward(llama_model *m, size_t i, const hd_sequences *q)
{
    hd_context *ctx = m->ctx;
    layer *l = &m->layers[i];
    float eps = m->c.norm_eps;
    /* the MLP: down, SwiGLU (its gradients over gate and up, no longer needed), gate and up */
    hd_status s = lora_grad(m, &l->p[DOWN], l->act, m->d_resid, m->d_act);
    if (s == HD_OK)
        s = hd_swiglu_backward(ctx, l->gate, l->up, m->d_act, l->gate, l->up);
    if (s == HD_OK)
        s = lora_grad(m, &l->p[GATE], l->mlp_in, l->gate, m->d_norm);
    if (s == HD_OK)
        s = lora_grad(m, &l->p[UP], l->mlp_in, l->up, m->d_tmp);
    if (s == HD_OK)
        s = hd_add(ctx, 1.0f, m->d_tmp, m->d_norm);
    if (s == HD_OK) /* through the post-attention norm, plus the residual path */
        s = hd_add_rms_norm_backward(ctx, l->resid_mid, l->post_norm, m->d_norm, m->d_resid, eps,
                                     m->d_resid, NULL);
    /* attention: o, the scores, RoPE undone on the gradients, q, k and v */
    if (s == HD_OK)
        s = lora_grad(m, &l->p[O], l->attn, m->d_resid, m->d_attn);
    hd_attention_options att = attention_options(m, q);
    if (s == HD_OK)
        s = hd_attention_backward(ctx, &att, l->q, l->k, l->v, l->attn, l->lse, m->d_attn, m->dq,
                                  m->dk, m->dv);
    hd_rope_options inverse = rope_options(m, q, true);
    if (s == HD_OK)
        s = hd_rope(ctx, &inverse, m->dq, m->dq);
    if (s == HD_OK)
        s = hd_rope(ctx, &inverse, m->dk, m->dk);
    if (s == HD_OK)
        s = qkv_backward(m, i);
    if (s == HD_OK && i > 0)
        s = hd_add_rms_norm_backward(ctx, l->resid_in, l->in_norm, m->d_norm, m->d_resid, eps,
                                     m->d_resid, NULL);
    return s;
}

static hd_status backward(llama_model *m, const hd_sequences *q)
{
    hd_status s = hd_add_rms_norm_backward(m->ctx, m->resid_out, m->final_norm, m->d_normed, NULL,
                                           m->c.norm_eps, m->d_resid, NULL);
    for (size_t i = m->c.layers; i-- > 0 && s == HD_OK;)
        s = layer_backward(m, i, q);
    return s;
}

static hd_status check_tokens(const llama_model *m, const int32_t *tokens)
{
    for (size_t i = 0; i < m->c.tokens; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= m->c.vocab)
            return HD_ERR_INVALID_ARGUMENT;
    return HD_OK;
}

hd_status llama_gradients(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                          float *loss)
{
    hd_status s = check_tokens(m, tokens);
    if (s == HD_OK)
        s = forward(m, tokens, sequences, m->d_normed);
    if (s == HD_OK)
        s = backward(m, sequences);
    if (s == HD_OK)
        s = hd_tensor_read(m->loss, loss);
    return s;
}

hd_status llama_train_step_batches(llama_model *m, const int32_t *const tokens[], size_t batches,
                                   const hd_sequences *sequences, long step, float *loss)
{
    if (batches == 0)
        return HD_ERR_INVALID_ARGUMENT;
    hd_status s = HD_OK;
    for (size_t i = 0; i < batches && s == HD_OK; i++)
        s = check_tokens(m, tokens[i]);
    const float zero = 0.0f;
    if (s == HD_OK && batches > 1)
        s = make_batch_grads(m);
    if (s == HD_OK && batches > 1)
        s = hd_tensor_write(m->loss_sum, &zero);
    for (size_t i = 0; i < batches && s == HD_OK; i++) {
        m->accumulate = i > 0;
        s = forward(m, tokens[i], sequences, m->d_normed);
        if (s == HD_OK)
            s = backward(m, sequences);
        if (s == HD_OK && batches > 1)
            s = hd_add(m->ctx, 1.0f, m->loss, m->loss_sum);
    }
    m->accumulate = false;
    /* the gradients are `batches` times their mean: AdamW's update of the mean with its eps
     * and clip norm scaled alike (m and v scale by k and k^2, and (k m) / (sqrt(k^2 v) + k eps)
     * = m / (sqrt(v) + eps); the clip's 1e-6 is not scaled) */
    const llama_config *c = &m->c;
    const float k = (float)batches;
    hd_adamw_options opt = {.lr = llama_learning_rate(c, step),
                            .beta1 = c->beta1,
                            .beta2 = c->beta2,
                            .eps = c->adam_eps * k,
                            .weight_decay = c->weight_decay,
                            .step = step,
                            .max_grad_norm = c->max_grad_norm * k,
                            .grad_norm = c->max_grad_norm > 0.0f ? m->grad_norm : NULL};
    if (s == HD_OK)
        s = hd_adamw(m->ctx, &opt, m->adam_count, m->adam[0], (const hd_tensor *const *)m->adam[1],
                     m->adam[2], m->adam[3]);
    if (s == HD_OK) /* the one value that comes back, after the whole step */
        s = hd_tensor_read(batches > 1 ? m->loss_sum : m->loss, loss);
    if (s == HD_OK)
        *loss /= k;
    return s;
}

hd_status llama_train_step(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                           long step, float *loss)
{
    return llama_train_step_batches(m, &tokens, 1, sequences, step, loss);
}

hd_status llama_eval(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                     float *loss)
{
    hd_status s = check_tokens(m, tokens);
    if (s == HD_OK)
        s = forward(m, tokens, sequences, NULL);
    if (s == HD_OK)
        s = hd_tensor_read(m->loss, loss);
    return s;
}

size_t llama_lora_count(const llama_model *m)
{
    return m->adam_count;
}

hd_tensor *llama_lora_tensor(const llama_model *m, size_t i, int kind, char *name, size_t size)
{
    if (i >= m->adam_count || kind < 0 || kind > 1)
        return NULL;
    if (name != NULL)
        lora_name(name, size, i / (2 * PROJECTIONS), (int)(i / 2 % PROJECTIONS), i % 2 == 1);
    return m->adam[kind][i];
}

/* The LoRA tensors of `kinds` lists of AdamW's (0 the factors, 1 their gradients, 2 and 3 the
 * moments), each named prefix + its PEFT name + the kind's suffix, with meta, as a
 * safetensors file at path (F32). */
static hd_status save_tensors(llama_model *m, const char *path, const char *prefix,
                              const int kinds[], const char *const suffixes[], size_t nk,
                              const hd_st_meta *meta, size_t meta_count, char *why, size_t size)
{
    size_t n = llama_lora_count(m) * nk;
    hd_st_entry *e = calloc(n, sizeof *e);
    char(*names)[224] = calloc(n, sizeof *names);
    float **data = calloc(n, sizeof *data);
    hd_status s = e != NULL && names != NULL && data != NULL ? HD_OK : HD_ERR_OUT_OF_MEMORY;
    snprintf(why, size, "no host memory for the LoRA tensors");
    for (size_t i = 0; s == HD_OK && i < n; i++) {
        char name[160];
        size_t k = i / llama_lora_count(m), j = i % llama_lora_count(m);
        llama_lora_tensor(m, j, 0, name, sizeof name);
        hd_tensor *t = m->adam[kinds[k]][j];
        size_t rows = hd_tensor_rows(t), cols = hd_tensor_cols(t);
        snprintf(names[i], sizeof names[i], "%s%s%s", prefix, name, suffixes[k]);
        if ((data[i] = malloc(rows * cols * sizeof(float))) == NULL)
            s = HD_ERR_OUT_OF_MEMORY;
        else if ((s = hd_tensor_read(t, data[i])) != HD_OK)
            snprintf(why, size, "reading %s: %s", names[i], hd_context_last_error(m->ctx));
        e[i] = (hd_st_entry){.name = names[i],
                             .dtype = HD_ST_F32,
                             .ndim = 2,
                             .shape = {rows, cols},
                             .data = data[i]};
    }
    if (s == HD_OK)
        s = hd_st_write(path, e, n, meta, meta_count, why, size);
    for (size_t i = 0; data != NULL && i < n; i++)
        free(data[i]);
    free(data);
    free(names);
    free(e);
    return s;
}

hd_status llama_save_lora(llama_model *m, int kind, const char *path, const char *prefix, char *why,
                          size_t size)
{
    const int kinds[] = {kind};
    const char *const suffixes[] = {""};
    const hd_st_meta meta = {"format", "pt"}; /* as safetensors.torch writes it */
    return save_tensors(m, path, prefix, kinds, suffixes, 1, &meta, 1, why, size);
}

/* The optimizer state's tensors: the factors, and AdamW's moments under PyTorch's names. */
static const int state_kinds[] = {0, 2, 3};
static const char *const state_suffixes[] = {"", ".exp_avg", ".exp_avg_sq"};

hd_status llama_save_state(llama_model *m, const char *path, long step, char *why, size_t size)
{
    char text[32];
    snprintf(text, sizeof text, "%ld", step);
    const hd_st_meta meta[] = {{"format", "pt"}, {"step", text}};
    return save_tensors(m, path, "", state_kinds, state_suffixes, 3, meta, 2, why, size);
}

hd_status llama_load_state(llama_model *m, const char *path, long *step, char *why, size_t size)
{
    hd_st_file *f = NULL;
    why[0] = '\0';
    hd_status s = hd_st_open(path, &f, why, size);
    if (s != HD_OK)
        return s;
    const char *text = hd_st_metadata(f, "step");
    char *end = NULL;
    long saved = text != NULL ? strtol(text, &end, 10) : 0;
    if (text == NULL || end == text || *end != '\0' || saved < 1) {
        snprintf(why, size, "%s: no step of 1 or more in its metadata", path);
        s = HD_ERR_INVALID_ARGUMENT;
    }
    for (size_t k = 0; k < 3 && s == HD_OK; k++)
        for (size_t j = 0; j < llama_lora_count(m) && s == HD_OK; j++) {
            char name[160], full[224];
            llama_lora_tensor(m, j, 0, name, sizeof name);
            snprintf(full, sizeof full, "%s%s", name, state_suffixes[k]);
            s = load_tensor(m, llama_file_source, f, full, m->adam[state_kinds[k]][j], why, size);
        }
    hd_st_close(f);
    if (s == HD_OK)
        *step = saved;
    return s;
}

hd_status llama_save_peft(llama_model *m, const char *dir, char *why, size_t size)
{
    if (mkdir(dir, 0777) != 0) {
        int e = errno;
        struct stat st;
        if (e != EEXIST || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(why, size, "%s: %s", dir, e == EEXIST ? "not a directory" : strerror(e));
            return HD_ERR_INVALID_ARGUMENT;
        }
    }
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir) >= sizeof path) {
        snprintf(why, size, "%s: path too long", dir);
        return HD_ERR_INVALID_ARGUMENT;
    }
    hd_status s = llama_save_lora(m, 0, path, PEFT_PREFIX, why, size);
    if (s != HD_OK)
        return s;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        snprintf(why, size, "%s: %s", path, strerror(errno));
        return HD_ERR_INVALID_ARGUMENT;
    }
    fprintf(f, "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n");
    fprintf(f, "  \"r\": %zu,\n  \"lora_alpha\": %.9g,\n", m->c.rank, (double)m->c.lora_alpha);
    fprintf(f, "  \"lora_dropout\": 0.0,\n  \"bias\": \"none\",\n  \"fan_in_fan_out\": false,\n");
    fprintf(f, "  \"target_modules\": [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", "
               "\"gate_proj\", \"up_proj\", \"down_proj\"],\n");
    fprintf(f, "  \"inference_mode\": true,\n  \"base_model_name_or_path\": null\n}\n");
    if (fclose(f) != 0) {
        snprintf(why, size, "%s: %s", path, strerror(errno));
        return HD_ERR_INVALID_ARGUMENT;
    }
    return HD_OK;
}

size_t llama_bytes(const llama_model *m)
{
    return m->bytes;
}
