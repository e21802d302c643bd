#include <math.h>

#include "core/sequence.h"

/* count 0 is one sequence of every row. */
static size_t sequences(size_t count)
{
    return count == 0 ? 1 : count;
}

static size_t length_of(const size_t *lengths, size_t count, size_t rows, size_t q)
{
    return count == 0 ? rows : lengths[q];
}

void hd__sequence_positions(const size_t *lengths, size_t count, size_t rows, size_t offset,
                            int32_t *pos)
{
    size_t begin = 0;
    for (size_t q = 0; q < sequences(count); q++) {
        size_t len = length_of(lengths, count, rows, q);
        for (size_t k = 0; k < len; k++)
            pos[begin + k] = (int32_t)(offset + k);
        begin += len;
    }
}

void hd__sequence_attention_ranges(const size_t *lengths, size_t count, size_t rows, bool causal,
                                   size_t window, int32_t *kv_range, int32_t *q_range)
{
    size_t begin = 0;
    for (size_t q = 0; q < sequences(count); q++) {
        size_t end = begin + length_of(lengths, count, rows, q);
        /* row i's first key, and key j's last row + 1, under the window */
        for (size_t i = begin; i < end && kv_range != NULL; i++) {
            size_t first = window > 0 && i - begin >= window ? i + 1 - window : begin;
            kv_range[2 * i] = (int32_t)first;
            kv_range[2 * i + 1] = (int32_t)(causal ? i + 1 : end);
        }
        for (size_t j = begin; j < end && q_range != NULL; j++) {
            size_t last = window > 0 && end - j > window ? j + window : end;
            q_range[2 * j] = (int32_t)(causal ? j : begin);
            q_range[2 * j + 1] = (int32_t)last;
        }
        begin = end;
    }
}

void hd__rope_frequencies(double theta, size_t d, float *pairs)
{
    for (size_t i = 0; i < d / 2; i++) {
        double f = pow(theta, -2.0 * (double)i / (double)d);
        float hi = (float)f;
        pairs[2 * i] = hi;
        pairs[2 * i + 1] = (float)(f - (double)hi);
    }
}
