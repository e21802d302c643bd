/*
 * Build ahead: worker threads that build programs before the runtime's user asks for them.
 * The tuner queues the programs of the candidates it is about to time; while it times one,
 * the workers compile the next ones (NVIDIA's compiler is slow per program and runs two
 * builds at once faster than one after the other: BENCHMARKS.md at commit 284f2c3).
 * hd__cl_program then takes a built program instead of building it, waits for one under way,
 * and builds itself one still queued or one whose build failed (so that the failure's message
 * is its own).
 *
 * The workers touch no context and nothing of the runtime but the device, the OpenCL context
 * (OpenCL's calls are thread-safe but for a kernel's arguments, which they never set) and the
 * disk cache (its entries written to a temporary file and renamed into place); they build with
 * every signal blocked, which the caller's thread takes, and catch what the compiler prints as
 * the caller's builds do (program.c: standard error goes to a file while any build runs). What
 * they count, and print, goes into their entries: counted in the runtime's counters, and
 * noted on the caller's context, when a program is taken. The queue is under the one lock;
 * the runtime's own list of programs is the caller's thread's alone, as it always was.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/internal.h"
#include "core/error.h"

enum {
    AHEAD_MAX_WORKERS = 4,
    AHEAD_MAX_UNTAKEN = 64, /* programs built and not asked for that a cancel keeps */
};

typedef enum ahead_state {
    AHEAD_QUEUED,
    AHEAD_BUILDING,
    AHEAD_BUILT,
    AHEAD_FAILED,
} ahead_state;

typedef struct ahead_entry {
    const char *source; /* the caller's source, the key with the options and the text */
    char *text;         /* a copy of it: the caller's may be gone before the build ends */
    size_t len;
    char *options;
    ahead_state state;
    cl_program program;
    struct hd_cl_program_counters count;
    char printed[512];
    struct ahead_entry *next;
} ahead_entry;

struct hd_cl_build_ahead {
    hd_cl_runtime *rt;
    pthread_mutex_t lock;
    pthread_cond_t queued;   /* an entry was queued, or stop */
    pthread_cond_t finished; /* a build ended */
    ahead_entry *entries;    /* in the order queued */
    bool stop;
    unsigned workers;
    pthread_t thread[AHEAD_MAX_WORKERS];
};

static void entry_free(ahead_entry *e)
{
    if (e->program != NULL)
        clReleaseProgram(e->program);
    free(e->text);
    free(e->options);
    free(e);
}

/* Unlinks e from the list (under the lock). */
static void unlink_entry(struct hd_cl_build_ahead *a, ahead_entry *e)
{
    for (ahead_entry **at = &a->entries; *at != NULL; at = &(*at)->next)
        if (*at == e) {
            *at = e->next;
            return;
        }
}

static ahead_entry *find(struct hd_cl_build_ahead *a, const char *source, const char *options)
{
    for (ahead_entry *e = a->entries; e != NULL; e = e->next)
        if (e->source == source && strcmp(e->options, options) == 0 &&
            strncmp(e->text, source, e->len + 1) == 0)
            return e;
    return NULL;
}

static void *worker(void *arg)
{
    struct hd_cl_build_ahead *a = arg;
    pthread_mutex_lock(&a->lock);
    while (!a->stop) {
        ahead_entry *e = a->entries;
        while (e != NULL && e->state != AHEAD_QUEUED)
            e = e->next;
        if (e == NULL) {
            pthread_cond_wait(&a->queued, &a->lock);
            continue;
        }
        e->state = AHEAD_BUILDING;
        pthread_mutex_unlock(&a->lock);
        /* the entry stays in the list while BUILDING: nobody frees it then */
        uint64_t hash = hd__cl_hash(e->text, e->len, HD_CL_HASH_SEED);
        cl_program program = NULL;
        hd_status s = hd__cl_program_load_or_build(a->rt, NULL, e->text, e->len, hash, e->options,
                                                   &e->count, e->printed, sizeof e->printed,
                                                   &program);
        pthread_mutex_lock(&a->lock);
        e->program = program;
        e->state = s == HD_OK ? AHEAD_BUILT : AHEAD_FAILED;
        pthread_cond_broadcast(&a->finished);
    }
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

hd_status hd__cl_build_ahead_start(hd_cl_runtime *rt, hd_context *ctx, unsigned workers)
{
    if (workers > AHEAD_MAX_WORKERS)
        workers = AHEAD_MAX_WORKERS;
    if (rt->ahead != NULL || workers == 0)
        return HD_OK;
    struct hd_cl_build_ahead *a = calloc(1, sizeof *a);
    if (a == NULL)
        return hd__error(ctx, HD_ERR_OUT_OF_MEMORY, "no memory for the build-ahead workers");
    a->rt = rt;
    if (pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        return hd__error(ctx, HD_ERR_INTERNAL, "cannot make the build-ahead lock");
    }
    if (pthread_cond_init(&a->queued, NULL) != 0) {
        pthread_mutex_destroy(&a->lock);
        free(a);
        return hd__error(ctx, HD_ERR_INTERNAL, "cannot make the build-ahead conditions");
    }
    if (pthread_cond_init(&a->finished, NULL) != 0) {
        pthread_cond_destroy(&a->queued);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return hd__error(ctx, HD_ERR_INTERNAL, "cannot make the build-ahead conditions");
    }
    rt->ahead = a;
    /* the workers inherit a mask that blocks every signal: an interrupt is the caller's */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    for (unsigned i = 0; i < workers; i++) {
        if (pthread_create(&a->thread[i], NULL, worker, a) != 0)
            break;
        a->workers++;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (a->workers == 0) {
        hd__cl_build_ahead_destroy(rt);
        return hd__error(ctx, HD_ERR_INTERNAL, "cannot start a build-ahead thread");
    }
    return HD_OK;
}

void hd__cl_build_ahead(hd_cl_runtime *rt, const char *source, const char *options)
{
    struct hd_cl_build_ahead *a = rt->ahead;
    if (a == NULL || source == NULL)
        return;
    if (options == NULL)
        options = "";
    /* already built: nothing to do (the list is the caller's thread's own) */
    for (struct hd_cl_program_entry *p = rt->programs; p != NULL; p = p->next)
        if (p->source == source && strcmp(p->options, options) == 0)
            return;
    pthread_mutex_lock(&a->lock);
    if (find(a, source, options) == NULL) {
        ahead_entry *e = calloc(1, sizeof *e);
        size_t len = strlen(source) + 1, olen = strlen(options) + 1;
        char *text = malloc(len), *opts = malloc(olen);
        if (e != NULL && text != NULL && opts != NULL) {
            memcpy(text, source, len);
            memcpy(opts, options, olen);
            *e = (ahead_entry){.source = source, .text = text, .len = len - 1, .options = opts};
            ahead_entry **tail = &a->entries;
            while (*tail != NULL)
                tail = &(*tail)->next;
            *tail = e;
            pthread_cond_signal(&a->queued);
        } else { /* no memory: the program is built when asked for, as without workers */
            free(e);
            free(text);
            free(opts);
        }
    }
    pthread_mutex_unlock(&a->lock);
}

void hd__cl_build_ahead_cancel(hd_cl_runtime *rt, bool wait)
{
    struct hd_cl_build_ahead *a = rt->ahead;
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    /* queued and failed ones go (a failure is found again by the caller's own build); of the
     * built ones not asked for, the newest AHEAD_MAX_UNTAKEN stay for later calls */
    size_t built = 0;
    for (ahead_entry *e = a->entries; e != NULL; e = e->next)
        built += e->state == AHEAD_BUILT;
    for (ahead_entry **at = &a->entries; *at != NULL;) {
        ahead_entry *e = *at;
        bool drop = e->state == AHEAD_QUEUED || e->state == AHEAD_FAILED ||
                    (e->state == AHEAD_BUILT && built > AHEAD_MAX_UNTAKEN);
        if (e->state == AHEAD_BUILT && drop)
            built--;
        if (drop) {
            *at = e->next;
            entry_free(e);
        } else {
            at = &e->next;
        }
    }
    for (bool busy = wait; busy;) {
        busy = false;
        for (ahead_entry *e = a->entries; e != NULL; e = e->next)
            busy |= e->state == AHEAD_BUILDING;
        if (busy)
            pthread_cond_wait(&a->finished, &a->lock);
    }
    pthread_mutex_unlock(&a->lock);
}

size_t hd__cl_build_ahead_waiting(hd_cl_runtime *rt)
{
    struct hd_cl_build_ahead *a = rt->ahead;
    if (a == NULL)
        return 0;
    size_t n = 0;
    pthread_mutex_lock(&a->lock);
    for (ahead_entry *e = a->entries; e != NULL; e = e->next)
        n += e->state == AHEAD_QUEUED || e->state == AHEAD_BUILDING;
    pthread_mutex_unlock(&a->lock);
    return n;
}

static void add_counts(struct hd_cl_program_counters *to, const struct hd_cl_program_counters *c)
{
    to->disk_loads += c->disk_loads;
    to->disk_rejects += c->disk_rejects;
    to->source_builds += c->source_builds;
    to->disk_stores += c->disk_stores;
}

cl_program hd__cl_build_ahead_take(hd_cl_runtime *rt, hd_context *ctx, const char *source,
                                   const char *options)
{
    struct hd_cl_build_ahead *a = rt->ahead;
    if (a == NULL)
        return NULL;
    pthread_mutex_lock(&a->lock);
    ahead_entry *e = find(a, source, options);
    while (e != NULL && e->state == AHEAD_BUILDING)
        pthread_cond_wait(&a->finished, &a->lock);
    cl_program program = NULL;
    if (e != NULL) {
        unlink_entry(a, e);
        if (e->state == AHEAD_BUILT) {
            program = e->program;
            e->program = NULL;
            add_counts(&rt->program_counters, &e->count);
            rt->program_counters.ahead_takes++;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (program != NULL && e->printed[0] != '\0')
        hd__note(ctx, "kernel build (options \"%.200s\") printed: %.400s", options, e->printed);
    if (e != NULL)
        entry_free(e);
    return program;
}

void hd__cl_build_ahead_destroy(hd_cl_runtime *rt)
{
    struct hd_cl_build_ahead *a = rt->ahead;
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_cond_broadcast(&a->queued);
    pthread_mutex_unlock(&a->lock);
    for (unsigned i = 0; i < a->workers; i++)
        pthread_join(a->thread[i], NULL);
    while (a->entries != NULL) {
        ahead_entry *e = a->entries;
        a->entries = e->next;
        entry_free(e);
    }
    pthread_cond_destroy(&a->queued);
    pthread_cond_destroy(&a->finished);
    pthread_mutex_destroy(&a->lock);
    free(a);
    rt->ahead = NULL;
}
