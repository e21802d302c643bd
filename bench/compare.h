/* The gap table: our best forced backend and auto against a peer (PyTorch, numpy), case by
 * case, from two result files of schema hd-bench/1 (read with bench/results_file.h). */
#ifndef HD_BENCH_COMPARE_H
#define HD_BENCH_COMPARE_H

#include <jansson.h>
#include <stdio.h>

/* Prints the table to out. mode: "device", "sync", "chain", or NULL to take, per case, the
 * first of device, chain, sync that both sides measured. Returns 0, or -1 with a message in
 * err when a document is not a result file of the expected schema. */
int hd__bench_compare(FILE *out, const json_t *ours, const json_t *peer, const char *mode,
                      char *err, size_t err_cap);

#endif
