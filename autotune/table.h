/* The tuning table of a context: the cache file's records for this device, opened at context
 * creation; the lookups the scheduler uses are declared in dispatch/tuning.h. */
#ifndef HD_AUTOTUNE_TABLE_H
#define HD_AUTOTUNE_TABLE_H

#include "autotune/cache.h"
#include "dispatch/tuning.h"

/* Beyond this distance in any one dimension (|log2(1+a) - log2(1+b)|, i.e. about a factor of
 * two) a tuned shape says nothing about another. */
#define HD_TUNE_NEAR_DIM 1.0

/* hd__tune_exact, hd__tune_nearest and hd__tune_calibration, what the scheduler reads, are
 * declared in dispatch/tuning.h. */

/* This context's device key: what a cache file must carry to be used here, normalised
 * (hd__tune_key_normalize) as a file written with it reads back. */
void hd__tune_context_key(const hd_context *ctx, hd_tune_key *key);
/* The first field in which a file's key differs from the context's ("device", "driver
 * version", ...), NULL when the file is for this context. */
const char *hd__tune_key_mismatch(const hd_tune_key *file, const hd_tune_key *here);

typedef enum hd_tune_path {
    HD_TUNE_PATH_FOUND,
    HD_TUNE_PATH_NONE,     /* no option, $HD_TUNE_CACHE, $XDG_CACHE_HOME or $HOME */
    HD_TUNE_PATH_EMPTY,    /* the tune_cache option is "" */
    HD_TUNE_PATH_TOO_LONG, /* the path does not fit the buffer */
} hd_tune_path;

/* The cache path the context would use (options, $HD_TUNE_CACHE, default) into buf; buf is ""
 * unless HD_TUNE_PATH_FOUND. */
hd_tune_path hd__tune_resolve_path(const hd_context_options *opt, char *buf, size_t size);

#endif
