/* Packed sequences as the backends read them: the tables that RoPE and attention kernels take
 * per row, made on the host from the lengths (hd_sequences) of a checked call. */
#ifndef HD_CORE_SEQUENCE_H
#define HD_CORE_SEQUENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each row's position: offset plus its index within its sequence. lengths (count of them,
 * summing to rows; count 0: one sequence of every row). Positions fit int32 (checked). */
void hd__sequence_positions(const size_t *lengths, size_t count, size_t rows, size_t offset,
                            int32_t *pos);

/* Attention's range tables: kv_range[2i], kv_range[2i + 1] = [begin, end) of the keys query
 * row i attends to (its sequence's rows, those up to i when causal, of them the last `window`
 * at most where window > 0, which goes with causal); q_range[2j], q_range[2j + 1] = [begin,
 * end) of the query rows that attend to key j. Each holds 2 * rows ints (either may be NULL:
 * not written); both ends are non-decreasing in the row, and no range is empty. */
void hd__sequence_attention_ranges(const size_t *lengths, size_t count, size_t rows, bool causal,
                                   size_t window, int32_t *kv_range, int32_t *q_range);

/* RoPE's frequencies theta^(-2i/d), i < d/2, in double, each as a pair of floats (hi, lo):
 * hi the nearest float, lo the nearest float to the rest. pairs holds d floats. */
void hd__rope_frequencies(double theta, size_t d, float *pairs);

#endif
