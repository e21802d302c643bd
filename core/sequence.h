/* Packed sequences as the backends read them: the tables that RoPE and attention kernels take
 * per row, made on the host from the lengths (hd_sequences) of a checked call. */
#ifndef HD_CORE_SEQUENCE_H
#define HD_CORE_SEQUENCE_H

#include <stddef.h>
#include <stdint.h>

/* Each row's position: offset plus its index within its sequence. lengths (count of them,
 * summing to rows; count 0: one sequence of every row). Positions fit int32 (checked). */
void hd__sequence_positions(const size_t *lengths, size_t count, size_t rows, size_t offset,
                            int32_t *pos);

/* Each row's sequence as the rows [start[i], end[i]) (the same for every row of a sequence). */
void hd__sequence_bounds(const size_t *lengths, size_t count, size_t rows, int32_t *start,
                         int32_t *end);

/* RoPE's frequencies theta^(-2i/d), i < d/2, in double, each as a pair of floats (hi, lo):
 * hi the nearest float, lo the nearest float to the rest. pairs holds d floats. */
void hd__rope_frequencies(double theta, size_t d, float *pairs);

#endif
