/*
 * One thread count for the CPU backend, shared by OpenBLAS (GEMM, the LoRA products) and the
 * row kernels' pool, so that the two never ask for more cores than the setting allows.
 *
 * Without a setting the count is OpenBLAS's own, which already follows $OPENBLAS_NUM_THREADS
 * and $OMP_NUM_THREADS and otherwise the cores this process may run on, as it was before any
 * context set one (read once: a context with a setting changes it for the whole process, and
 * a later context without one would otherwise inherit that); OpenBLAS is then left as it is.
 * An explicit setting is given to OpenBLAS, whose count is one per process: the context
 * created last with a setting decides it.
 */
#include <pthread.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"

#ifdef HD_HAVE_OPENBLAS_THREADS
#include <cblas.h>
#endif

static size_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

#ifdef HD_HAVE_OPENBLAS_THREADS
static pthread_once_t own_count_once = PTHREAD_ONCE_INIT;
static int own_count; /* OpenBLAS's count before any context set one */

static void read_own_count(void)
{
    own_count = openblas_get_num_threads();
}
#endif

size_t hd__cpu_threads_resolve(size_t requested)
{
#ifdef HD_HAVE_OPENBLAS_THREADS
    pthread_once(&own_count_once, read_own_count);
    if (requested > 0) {
        openblas_set_num_threads((int)requested);
        return requested;
    }
    return own_count > 0 ? (size_t)own_count : online_cpus();
#else
    return requested > 0 ? requested : online_cpus();
#endif
}
