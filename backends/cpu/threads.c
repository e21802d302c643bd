/*
 * One thread count for the CPU backend, shared by OpenBLAS (GEMM, the LoRA products) and the
 * row kernels' pool, so that the two never ask for more cores than the setting allows.
 *
 * Without a setting the count is OpenBLAS's own, which already follows $OPENBLAS_NUM_THREADS
 * and $OMP_NUM_THREADS and otherwise the cores this process may run on, as it was before any
 * context set one (read once: a context with a setting changes OpenBLAS for the whole process).
 *
 * OpenBLAS keeps one count per process, and its setter is not safe against itself or against a
 * product running on another thread (two threads setting counts while a third ran SGEMM crashed
 * in OpenBLAS's workers). So each context's products run with that context's count: before
 * them, the count is set where another context left a different one, under a writer's lock
 * that waits for the products running on other threads; the products themselves hold the lock
 * as readers, so products of several contexts still run at once. A context's creation sets
 * nothing: one that fails leaves the process as it was.
 */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np: a setter must not starve */
#include <pthread.h>
#include <stdatomic.h>
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
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int own_count;            /* OpenBLAS's count before any context set one */
static atomic_int applied_count; /* the count OpenBLAS has now */
static pthread_rwlock_t blas_lock;

static void blas_init(void)
{
    own_count = openblas_get_num_threads();
    atomic_store(&applied_count, own_count);
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__ /* elsewhere the C library's own preference */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(&blas_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
}
#endif

size_t hd__cpu_threads_resolve(size_t requested)
{
#ifdef HD_HAVE_OPENBLAS_THREADS
    pthread_once(&blas_once, blas_init);
    if (requested > 0)
        return requested;
    return own_count > 0 ? (size_t)own_count : online_cpus();
#else
    return requested > 0 ? requested : online_cpus();
#endif
}

void hd__cpu_blas_begin(size_t threads)
{
#ifdef HD_HAVE_OPENBLAS_THREADS
    /* blas_init ran at the backend's probe, before any of its slots */
    int want = (int)threads;
    if (atomic_load(&applied_count) != want) {
        pthread_rwlock_wrlock(&blas_lock);
        if (atomic_load(&applied_count) != want) {
            openblas_set_num_threads(want);
            atomic_store(&applied_count, want);
        }
        pthread_rwlock_unlock(&blas_lock);
    }
    /* another context may set its own count between the two locks: this call then runs with
     * that count, which changes its speed, never its result */
    pthread_rwlock_rdlock(&blas_lock);
#else
    (void)threads;
#endif
}

void hd__cpu_blas_end(void)
{
#ifdef HD_HAVE_OPENBLAS_THREADS
    pthread_rwlock_unlock(&blas_lock);
#endif
}
