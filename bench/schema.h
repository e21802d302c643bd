/* The rules of schema hd-bench/1 (bench/SCHEMA.md) over a parsed document, as
 * bench/check_results.py applies them: the same order, the same messages. */
#ifndef HD_BENCH_SCHEMA_H
#define HD_BENCH_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The deepest nesting a result file may have (the document is depth 1). */
#define HD_BENCH_MAX_DEPTH 16

/* Whether doc is nested at most HD_BENCH_MAX_DEPTH deep. */
bool hd__bench_depth_ok(const json_t *doc);

/* Checks doc against the schema. True if it follows it; else false with "PATH: PROBLEM" for
 * the first field that does not, in err. */
bool hd__bench_schema_check(const json_t *doc, char *err, size_t err_cap);

#endif
