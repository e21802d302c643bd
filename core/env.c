/* The library's switches in the environment, read one way (core/env.h). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/env.h"
#include "core/error.h"

#define BLANKS " \t"

const char *hd__env_trim(const char *value, size_t *len)
{
    value += strspn(value, BLANKS);
    size_t n = strlen(value);
    while (n > 0 && strchr(BLANKS, value[n - 1]) != NULL)
        n--;
    *len = n;
    return value;
}

bool hd__env_bool_parse(const char *value, bool *on)
{
    static const char *const spellings[][2] = {
        {"1", "0"}, {"on", "off"}, {"yes", "no"}, {"true", "false"}};
    if (value == NULL)
        return false;
    size_t len;
    const char *word = hd__env_trim(value, &len);
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++)
        for (int off = 0; off < 2; off++)
            if (len == strlen(spellings[i][off]) &&
                strncasecmp(word, spellings[i][off], len) == 0) {
                *on = off == 0;
                return true;
            }
    return false;
}

bool hd__env_bool(hd_context *ctx, const char *name, bool fallback)
{
    const char *value = getenv(name);
    if (value == NULL)
        return fallback;
    size_t len;
    hd__env_trim(value, &len);
    bool on = fallback;
    if (len > 0 && !hd__env_bool_parse(value, &on))
        hd__note(ctx,
                 "%s='%.40s' is ignored, the default stays: expected 1, on, yes or true, or 0, "
                 "off, no or false",
                 name, value);
    return on;
}
