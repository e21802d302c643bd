/* The library's switches in the environment ($HD_DISABLE_OPENCL, $HD_PINNED, $HD_LOG,
 * $HD_PROGRAM_CACHE, $HD_CUDA_DEPENDENT_LAUNCH), read one way: the same spellings for each,
 * blanks around them ignored. */
#ifndef HD_CORE_ENV_H
#define HD_CORE_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

/* The value without the blanks around it: returns its first character and sets *len. */
const char *hd__env_trim(const char *value, size_t *len);

/* A switch's value, in any case, blanks around it ignored: 1, on, yes or true turn it on; 0,
 * off, no or false turn it off. Returns false, leaving *on alone, for anything else (empty
 * included: the caller treats that as unset). */
bool hd__env_bool_parse(const char *value, bool *on);

/* $name as a switch: fallback where it is unset or empty, and where it is none of the
 * spellings above, which a note on ctx (may be NULL) then names: a typo keeps the default
 * rather than failing the context, and the log says so. */
bool hd__env_bool(hd_context *ctx, const char *name, bool fallback);

#endif
