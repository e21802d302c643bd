/*
 * What the safetensors reader's files share: the open file's handle, the header parser that
 * fills it, and the message helper.
 */
#ifndef HD_EXAMPLES_SAFETENSORS_INTERNAL_H
#define HD_EXAMPLES_SAFETENSORS_INTERNAL_H

#include <stdint.h>

#include "safetensors.h"

#if defined(__GNUC__) || defined(__clang__)
#define HD_ST_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define HD_ST_PRINTF(fmt, args)
#endif

struct hd_st_file {
    int fd;                     /* -1 when the file is an image in memory */
    const unsigned char *image; /* the image (hd_st_open_memory()), else NULL */
    char *label;                /* the path, or "<memory>": how messages name the file */
    uint64_t data_start;        /* 8 + the header's length */
    uint64_t data_size;         /* bytes after the header */
    hd_st_tensor *tensors;      /* count of them, by data offset */
    size_t count;
    const hd_st_tensor **by_name; /* the same, by strcmp of their names */
    hd_st_meta *meta;
    size_t meta_count;
    char *strings; /* every name, key and value the handle gives out */
};

/* Checks the header (len bytes of JSON, not NUL-terminated) of f, whose label, data_start
 * and data_size are set, and fills its tensors, names and metadata. On error f is left with
 * none of them, and msg says what the header does wrong. */
hd_status hd__st_parse_header(hd_st_file *f, const char *json, size_t len, char *msg, size_t size);

/* Writes "fmt ..." into msg (when size > 0) and returns s. */
HD_ST_PRINTF(4, 5)
hd_status hd__st_fail(char *msg, size_t size, hd_status s, const char *fmt, ...);

/* The dtype named name[0..len), or HD_ST_DTYPE_COUNT. */
hd_st_dtype hd__st_dtype_parse(const char *name);

#endif
