/* The gap table: our best forced backend and auto against a peer (PyTorch, numpy), case by
 * case, from two result files of schema hd-bench/1. */
#ifndef HD_BENCH_COMPARE_H
#define HD_BENCH_COMPARE_H

#include <stdio.h>

#include "bench/json.h"

/* Loads the result file at path for the gap table ("our", "peer": which side it is, for the
 * message) and checks that it is one of schema hd-bench/1. NULL with the reason in err. */
hd_json *hd__bench_compare_load(const char *path, const char *which, char *err, size_t err_cap);

/* Prints the table to out. mode: "device", "sync", "chain", or NULL to take, per case, the
 * first of device, chain, sync that both sides measured. Returns 0, or -1 with a message in
 * err when a document is not a result file of the expected schema. */
int hd__bench_compare(FILE *out, const hd_json *ours, const hd_json *peer, const char *mode,
                      char *err, size_t err_cap);

#endif
