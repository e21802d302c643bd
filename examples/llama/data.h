/*
 * A training set of token ids for the Llama trainer (data.c): a file of little-endian int32 ids,
 * read a batch's window at a time.
 */
#ifndef HD_EXAMPLES_LLAMA_DATA_H
#define HD_EXAMPLES_LLAMA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include <hd/dispatch.h>

typedef struct llama_data llama_data;

/* Opens the regular file at path as windows of `tokens` ids: ids [0, tokens), [tokens, 2
 * tokens), ... up to the last whole window, then from the start again (an epoch; ids past the
 * last whole window are not used). Every id is checked against the vocabulary first. Refused
 * (HD_ERR_INVALID_ARGUMENT, the reason in why): a file that is not regular, whose size is not a
 * whole number of ids, that holds fewer than `tokens` ids, or holds an id outside [0, vocab)
 * (its place said). */
hd_status llama_data_open(const char *path, size_t tokens, size_t vocab, llama_data **out,
                          char *why, size_t size);
void llama_data_close(llama_data *d);

/* The windows of the file (each epoch's batches). */
size_t llama_data_windows(const llama_data *d);

/* The next window is `window` (taken modulo the windows): where a resumed run goes on. */
void llama_data_seek(llama_data *d, size_t window);

/* The next window's ids into out (`tokens` of them). HD_ERR_INVALID_ARGUMENT if the file can
 * no longer be read as it was (why says so). */
hd_status llama_data_next(llama_data *d, int32_t *out, char *why, size_t size);

#endif
