/*
 * Opening a file a user names, for the trainer's readers (safetensors.c, checkpoint.c, data.c):
 * one rule for all of them, each saying a failure in its own words.
 */
#ifndef HD_EXAMPLES_LLAMA_REGULAR_FILE_H
#define HD_EXAMPLES_LLAMA_REGULAR_FILE_H

#include <stdint.h>

typedef enum llama_file_open {
    LLAMA_FILE_OPENED,
    LLAMA_FILE_CANNOT_OPEN, /* errno says why */
    LLAMA_FILE_CANNOT_STAT, /* errno says why */
    LLAMA_FILE_NOT_REGULAR, /* a directory, a FIFO, a device... */
} llama_file_open;

/* Opens path for reading, non-blocking so that a FIFO does not wait for a writer, and keeps it
 * only if it is a regular file: *fd (close-on-exec) and its size in *bytes. Anything else
 * leaves nothing open, errno set by the call that failed where the result says so. */
llama_file_open llama_open_regular(const char *path, int *fd, uint64_t *bytes);

#endif
