/* Sizes of the CPU backend's scratch (the LoRA products' temporaries), checked against
 * size_t's range: the tensors' own sizes are checked at creation, their products are not. */
#include <stdint.h>

#include "backends/cpu/cpu.h"

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
