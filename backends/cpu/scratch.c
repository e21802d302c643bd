/* The CPU backend's scratch (the LoRA products' temporaries): their sizes, checked against
 * size_t's range (the tensors' own sizes are checked at creation, their products are not), and
 * their scaling. */
#include <stdint.h>

#include "backends/cpu/cpu.h"

void hd__cpu_scale_low_rank(float *p, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] *= scale;
}

bool hd__cpu_scratch_bytes(size_t blocks, size_t rows, size_t cols, size_t *bytes)
{
    size_t floats_max = SIZE_MAX / sizeof(float);
    if (rows != 0 && cols > floats_max / rows)
        return false;
    size_t floats = rows * cols;
    if (blocks != 0 && floats > floats_max / blocks)
        return false;
    *bytes = blocks * floats * sizeof(float);
    return true;
}
