/*
 * A transformers checkpoint of a Llama-style model: its config.json and its weights, one
 * safetensors file or the shards that model.safetensors.index.json names (checkpoint.c).
 */
#ifndef HD_EXAMPLES_LLAMA_CHECKPOINT_H
#define HD_EXAMPLES_LLAMA_CHECKPOINT_H

#include <stddef.h>

#include <hd/dispatch.h>

#include "model.h"

/* The model's shape from a config.json into c, the rest of c (tokens, LoRA, AdamW) as it was:
 * hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads (default: the heads), vocab_size, head_dim (null or absent: hidden /
 * heads), rms_norm_eps (default 1e-6), rope_theta (default 10000), tie_word_embeddings
 * (default false), rope_scaling null or of rope_type "llama3" (transformers 5's
 * rope_parameters holds rope_theta and the scaling alike), sliding_window (Mistral's; null or
 * absent: none). model_type "qwen2" gives q, k and v biases and no window (its use_sliding_window
 * true is refused). A config this model does not run is refused with the key in why: a
 * model_type other than "llama", "mistral" and "qwen2", a hidden_act other than
 * "silu", attention_bias or mlp_bias true, another rope_type, a missing or out-of-range size, a
 * number beyond float's range.
 * HD_OK, HD_ERR_INVALID_ARGUMENT (the file, its JSON or a value), HD_ERR_OUT_OF_MEMORY. */
hd_status llama_config_read(const char *path, llama_config *c, char *why, size_t size);

/* The same over a config.json's bytes in memory (text, length of them, not NUL-terminated),
 * label naming it in why where llama_config_read names the path. */
hd_status llama_config_parse(const char *text, size_t length, const char *label, llama_config *c,
                             char *why, size_t size);

/* The shards that a model.safetensors.index.json's bytes in memory (text, length of them; label
 * names it in why) map the tensors to: the distinct files of its weight_map, 1 to 4096 of them
 * in their first appearance's order, each a name in the index's directory (not empty, no '/',
 * neither "." nor ".."). *files is one block, the *count pointers then their names, that the
 * caller frees with free(); on error it is NULL and *count 0. HD_OK, HD_ERR_INVALID_ARGUMENT
 * (the JSON, no weight_map or an empty one, a value that is not such a name, more files),
 * HD_ERR_OUT_OF_MEMORY. */
hd_status llama_index_parse(const char *text, size_t length, const char *label, const char ***files,
                            size_t *count, char *why, size_t size);

typedef struct llama_weights llama_weights;

/* The weights at path: a safetensors file, or a directory holding model.safetensors.index.json
 * (its weight_map's files, each a name in that directory) or model.safetensors. */
hd_status llama_weights_open(const char *path, llama_weights **out, char *why, size_t size);
void llama_weights_close(llama_weights *w);

/* A tensor source (model.h) over the weights (user: a llama_weights *): name from the first
 * file that holds it, as llama_file_source reads it. */
hd_status llama_weights_source(void *user, const char *name, size_t rows, size_t cols, float *dst,
                               char *why, size_t size);

#endif
