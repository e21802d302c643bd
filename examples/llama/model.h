/*
 * A Llama-style decoder trained with LoRA on the library's operations: RMS norm, RoPE,
 * grouped-query causal attention (with Mistral's sliding window), a SwiGLU MLP and an LM head,
 * the base weights frozen (with Qwen2's biases on q, k and v) and LoRA factors on the seven
 * projections (q, k, v, o, gate, up, down), trained by AdamW. Everything
 * between reading a batch's tokens and the optimizer step stays on the context's device: the
 * loss is the only value that comes back.
 *
 * Names and layouts are transformers' and PEFT's: "model.embed_tokens.weight" (V x D),
 * "model.layers.N.self_attn.q_proj.weight" (out x in, as torch.nn.Linear stores it), ...,
 * "model.norm.weight", "lm_head.weight"; LoRA factors "model.layers.N.self_attn.q_proj.lora_A.
 * weight" (r x in) and "...lora_B.weight" (out x r), scaled by alpha / r. A step's loss is
 * transformers' causal-LM loss with labels = the input ids: token i predicts token i + 1, the
 * mean over the T - 1 predictions of each sequence.
 */
#ifndef HD_EXAMPLES_LLAMA_MODEL_H
#define HD_EXAMPLES_LLAMA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

/* transformers' rope_scaling of rope_type "llama3" (Llama 3.1 and 3.2): frequencies whose
 * wavelength passes original_max_positions / low_freq_factor divided by factor, those under
 * original_max_positions / high_freq_factor kept, the ones between blended. factor 0: none. */
typedef struct llama_rope_scaling {
    float factor, low_freq_factor, high_freq_factor;
    size_t original_max_positions;
} llama_rope_scaling;

/* The learning rate over a run, as transformers' schedulers form it: constant, or after a
 * linear warmup a linear or a cosine decay to 0 at the run's last step. */
typedef enum llama_schedule {
    LLAMA_SCHEDULE_CONSTANT,
    LLAMA_SCHEDULE_LINEAR, /* get_linear_schedule_with_warmup */
    LLAMA_SCHEDULE_COSINE, /* get_cosine_schedule_with_warmup (half a cycle) */
} llama_schedule;

typedef struct llama_config {
    size_t layers, hidden, heads, kv_heads, mlp, vocab;
    size_t head_dim;      /* transformers' head_dim; 0: hidden / heads (its default) */
    size_t tokens;        /* rows of one step: the packed sequences' lengths together */
    float rope_theta;     /* transformers' rope_theta */
    llama_rope_scaling rope_scaling;
    float norm_eps;       /* rms_norm_eps */
    bool tied_embeddings; /* the LM head is the embedding (no "lm_head.weight") */
    size_t sliding_window; /* Mistral's sliding_window: keys a token attends to at most,
                              itself included (hd_attention_options.window); 0: none */
    bool qkv_bias;         /* Qwen2's: q, k and v projections with a bias (frozen) */
    size_t rank;          /* LoRA r */
    float lora_alpha;     /* scale = alpha / r */
    float lr, beta1, beta2, adam_eps, weight_decay, max_grad_norm; /* AdamW (0: no clipping) */
    llama_schedule schedule;                                       /* lr over the run */
    size_t warmup_steps; /* lr rising linearly from 0 over these first steps */
    size_t total_steps;  /* the run's steps, where the decay ends (linear, cosine) */
} llama_config;

/* transformers' defaults for a Llama layer where the config does not say (theta 10000, eps
 * 1e-5), PEFT's r 16 and alpha 32, AdamW's lr 1e-4, betas 0.9 and 0.999, eps 1e-8, no decay. */
void llama_config_defaults(llama_config *c);

/* The config's sizes checked: every size > 0, heads divisible into kv_heads, head_dim (given,
 * or hidden / heads, which heads must then divide) a multiple of 8 up to 256, the RoPE
 * scaling's factor 0 or at least 1 with 0 < low_freq_factor < high_freq_factor and
 * original_max_positions > 0, a decaying schedule's total_steps above its warmup_steps. false
 * with the reason in why. */
bool llama_config_check(const llama_config *c, char *why, size_t size);

/* The learning rate of step `step` (1 for the first) under c's schedule: transformers' factor
 * of its step index t = step - 1, t / warmup during the warmup, then 1 (constant), (total - t) /
 * (total - warmup) (linear) or (1 + cos(pi (t - warmup) / (total - warmup))) / 2 (cosine), none
 * below 0, times c->lr. */
float llama_learning_rate(const llama_config *c, long step);

/* The head dimension of a config: head_dim, or hidden / heads where it is 0. */
size_t llama_head_dim(const llama_config *c);

/* RoPE's head_dim / 2 frequencies of a checked config, as transformers' rotary embedding forms
 * them: theta^(-2i / head_dim), then the "llama3" scaling where its factor is not 0 (in
 * double, rounded once to float). */
void llama_rope_frequencies(const llama_config *c, float *out);

/* Where a named tensor's values come from (a safetensors file, or a seed): fills dst with the
 * rows x cols floats of name, HD_OK, or an error with the reason in why. */
typedef hd_status llama_tensor_source(void *user, const char *name, size_t rows, size_t cols,
                                      float *dst, char *why, size_t size);

typedef struct llama_model llama_model;

/* Creates the model's tensors in ctx (weights, LoRA factors, their gradients and AdamW's
 * moments, the activations one step keeps). On failure *out is NULL and why says it. */
hd_status llama_create(hd_context *ctx, const llama_config *c, llama_model **out, char *why,
                       size_t size);
void llama_destroy(llama_model *m);

/* The frozen weights from source: every one, "lm_head.weight" unless the embeddings are tied,
 * the q, k and v projections' ".bias" (1 x out) where the config has them. Loading again
 * replaces them. */
hd_status llama_load_weights(llama_model *m, llama_tensor_source *source, void *user, char *why,
                             size_t size);
/* The LoRA factors from source, or (source NULL) as PEFT initialises them: A Kaiming-uniform
 * (uniform in +-1/sqrt(in)) from seed, B zeros. */
hd_status llama_load_lora(llama_model *m, llama_tensor_source *source, void *user, uint64_t seed,
                          char *why, size_t size);

/* A safetensors file's tensors (user: an hd_st_file *, examples/llama/safetensors.h): name of
 * exactly rows x cols (a 1 x cols norm weight as the 1-D tensor the file holds), converted to
 * float from F32, BF16, F16 or F64; a missing name or another shape refused with both in why. */
hd_status llama_file_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                            char *why, size_t size);

/* A PEFT adapter file's tensors (its adapter_model.safetensors): as llama_file_source, each
 * name also found under the "base_model.model." prefix that PEFT saves them with. */
hd_status llama_peft_file_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                                 char *why, size_t size);

/* Weights made from a seed as transformers initialises a Llama (normal, std 0.02; norms 1): a
 * tensor source. user points to a uint64_t seed. */
hd_status llama_seeded_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                              char *why, size_t size);

/* One training step on tokens (config.tokens ids, each < vocab) packed as the sequences of
 * lengths (count 0: one sequence): forward, backward, AdamW step number `step` (1 for the
 * first). *loss: the step's loss, read after the step (the one value that comes back). */
hd_status llama_train_step(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                           long step, float *loss);
/* One step over `batches` batches of config.tokens ids (tokens[i], each packed as sequences
 * says): their gradients added, then AdamW step `step` as it would take their mean (its eps
 * and clip norm scaled by the batches, which gives the mean's update exactly without the
 * clip; the clip's 1e-6 is added to the summed norm as to the mean's): transformers' gradient
 * accumulation over batches with as many targets each. *loss: the batches' mean loss. One
 * batch is llama_train_step. */
hd_status llama_train_step_batches(llama_model *m, const int32_t *const tokens[], size_t batches,
                                   const hd_sequences *sequences, long step, float *loss);
/* The loss of the current weights on tokens, without gradients or an update. */
hd_status llama_eval(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                     float *loss);
/* The forward and backward of a step without the update: the LoRA gradients are left in the
 * model (llama_lora_tensor) and *loss set. */
hd_status llama_gradients(llama_model *m, const int32_t *tokens, const hd_sequences *sequences,
                          float *loss);

/* The LoRA tensors, for saving and checking: index i < llama_lora_count(m); kind 0 the factor,
 * 1 its gradient; its PEFT-style name. */
size_t llama_lora_count(const llama_model *m);
hd_tensor *llama_lora_tensor(const llama_model *m, size_t i, int kind, char *name, size_t size);

/* The LoRA factors (kind 0) or their gradients (kind 1) as a safetensors file at path, F32,
 * PEFT's names after prefix ("" for none). */
hd_status llama_save_lora(llama_model *m, int kind, const char *path, const char *prefix, char *why,
                          size_t size);

/* The LoRA factors as a PEFT adapter in directory dir (made where missing):
 * adapter_model.safetensors, PEFT's names under "base_model.model.", and adapter_config.json
 * (LoRA of r and lora_alpha on the seven projections, no dropout, no bias), which
 * peft.PeftModel.from_pretrained puts on the base model. */
hd_status llama_save_peft(llama_model *m, const char *dir, char *why, size_t size);

/* The training state after step `step` as a safetensors file at path: every LoRA factor and
 * its AdamW moments (PEFT's names; "<name>.exp_avg" and "<name>.exp_avg_sq", as PyTorch's
 * AdamW names them), the step in the metadata ("step"). llama_load_state puts them back and
 * gives the step, from which training goes on as if it had not stopped: a file that lacks a
 * tensor, holds another shape or no step is refused (why says which). */
hd_status llama_save_state(llama_model *m, const char *path, long step, char *why, size_t size);
hd_status llama_load_state(llama_model *m, const char *path, long *step, char *why, size_t size);

/* Bytes of the model's tensors (weights, LoRA state, activations). */
size_t llama_bytes(const llama_model *m);

#endif
