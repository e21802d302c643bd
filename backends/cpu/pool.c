/*
 * The CPU backend's own fork-join pool for the row kernels. Idle workers sleep on a condition
 * variable instead of spinning: OpenMP's default is to spin at the end of every parallel
 * region, and on a machine with few cores those spinning threads took the cores that
 * OpenBLAS's pool needed and the other way round (row ops after one GEMM ran several times
 * slower per call on 2 cores). OpenMP's wait policy can only be chosen through the
 * environment before the program starts, so a library cannot fix it there.
 *
 * Workers are started on the first parallel call, so a context that never runs a large row op
 * on the CPU starts no thread. A child process forked after that has none of them (fork copies
 * only the calling thread): there the pool runs everything on the caller.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"

struct hd_cpu_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a new job, or stop */
    pthread_cond_t done; /* the last worker finished the job */
    size_t threads;      /* the caller and its workers */
    size_t started;      /* workers running */
    pid_t owner;         /* the process the workers run in */
    bool stop;
    unsigned long generation; /* counts jobs, so that a worker runs each one once */
    size_t pending;           /* workers that have not finished the current job */
    hd_cpu_pool_fn fn;
    void *arg;
    size_t n;
    struct worker {
        struct hd_cpu_pool *pool;
        size_t index; /* 1 .. threads-1; the caller is 0 */
        pthread_t thread;
    } worker[];
};

/* Part `index` of `parts` contiguous parts of [0, n). */
static void run_part(struct hd_cpu_pool *p, size_t index, size_t parts)
{
    size_t begin = p->n * index / parts, end = p->n * (index + 1) / parts;
    if (begin < end)
        p->fn(p->arg, begin, end);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct hd_cpu_pool *p = w->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        size_t parts = p->started + 1;
        pthread_mutex_unlock(&p->lock);
        run_part(p, w->index, parts);
        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

hd_status hd__cpu_pool_create(size_t threads, hd_cpu_pool **out)
{
    *out = NULL;
    if (threads == 0)
        threads = 1;
    hd_cpu_pool *p = calloc(1, sizeof *p + (threads - 1) * sizeof p->worker[0]);
    if (p == NULL)
        return HD_ERR_OUT_OF_MEMORY;
    p->threads = threads;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return HD_ERR_OUT_OF_MEMORY;
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        free(p);
        return HD_ERR_OUT_OF_MEMORY;
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return HD_ERR_OUT_OF_MEMORY;
    }
    *out = p;
    return HD_OK;
}

void hd__cpu_pool_destroy(hd_cpu_pool *p)
{
    if (p == NULL)
        return;
    if (p->started > 0 && p->owner != getpid()) { /* a forked child: no worker to stop */
        free(p);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < p->started; i++)
        pthread_join(p->worker[i].thread, NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

size_t hd__cpu_pool_threads(const hd_cpu_pool *p)
{
    return p == NULL ? 1 : p->threads;
}

/* Starts the workers not yet running. A thread the system refuses is not an error: the
 * parts are split among the threads that did start. Called with the lock held, before any
 * job is posted, so workers see a consistent count. */
static void start_workers(hd_cpu_pool *p)
{
    p->owner = getpid();
    while (p->started + 1 < p->threads) {
        struct worker *w = &p->worker[p->started];
        w->pool = p;
        w->index = p->started + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            break;
        p->started++;
    }
    p->threads = p->started + 1;
}

void hd__cpu_pool_run(hd_cpu_pool *p, size_t n, hd_cpu_pool_fn fn, void *arg)
{
    if (p == NULL || p->threads <= 1 || n <= 1 || (p->started > 0 && p->owner != getpid())) {
        if (n > 0)
            fn(arg, 0, n);
        return;
    }
    pthread_mutex_lock(&p->lock);
    if (p->started + 1 < p->threads)
        start_workers(p);
    if (p->started == 0) {
        pthread_mutex_unlock(&p->lock);
        fn(arg, 0, n);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->pending = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    run_part(p, 0, p->started + 1);

    pthread_mutex_lock(&p->lock);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
