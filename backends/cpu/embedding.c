/*
 * Embedding lookup on the CPU: a gather of table rows, one memcpy per row, rows across the
 * backend's pool when the output is large enough to pay for waking it.
 */
#include <string.h>

#include "backends/cpu/step.h"
#include "backends/cpu/vector.h"

typedef struct embedding_job {
    size_t cols;
    const int32_t *ids;
    const float *table;
    float *out;
} embedding_job;

static void embedding_part(void *arg, size_t begin, size_t end)
{
    const embedding_job *j = arg;
    for (size_t r = begin; r < end; r++)
        memcpy(j->out + r * j->cols, j->table + (size_t)j->ids[r] * j->cols,
               j->cols * sizeof *j->out);
}

void hd__cpu_embedding(hd_cpu_pool *pool, size_t rows, size_t cols, const int32_t *ids,
                       const float *table, float *out)
{
    embedding_job job = {cols, ids, table, out};
    bool parallel = rows > 1 && rows * cols >= HD_CPU_PARALLEL_ELEMENTS;
    hd__cpu_pool_run(parallel ? pool : NULL, rows, embedding_part, &job);
}
