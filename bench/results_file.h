/* Reading the result files that --compare and --ours name (schema hd-bench/1, bench/SCHEMA.md)
 * with jansson: only a regular file, opened without blocking, at most
 * HD_BENCH_RESULTS_MAX_BYTES, strict JSON without a repeated member name, nested at most
 * HD_BENCH_MAX_DEPTH deep, and every field as the schema says. bench/check_results.py reads
 * them by the same rules and says the same of each file. */
#ifndef HD_BENCH_RESULTS_FILE_H
#define HD_BENCH_RESULTS_FILE_H

#include <jansson.h>
#include <stddef.h>

/* The largest result file read: far above what every suite on every backend writes. */
#define HD_BENCH_RESULTS_MAX_BYTES ((size_t)16 << 20)

/* Reads, parses and checks the file at path. Returns the document (json_decref() it), or NULL
 * with a message that begins with the path, or says "cannot open PATH", in err. */
json_t *hd__bench_results_load(const char *path, char *err, size_t err_cap);

/* Parses and checks len bytes of text; name stands for the file in the message. */
json_t *hd__bench_results_parse(const char *text, size_t len, const char *name, char *err,
                                size_t err_cap);

#endif
