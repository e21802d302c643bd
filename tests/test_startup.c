/*
 * Concurrent start-up: many threads calling hd_context_create at the same moment in a process
 * that has never touched OpenCL. Each round forks a fresh child (this process never creates a
 * context itself, so the child starts with nothing initialised), releases the threads with a
 * barrier, and checks that every context was created and found the same device as a context
 * created alone. The rounds are bounded: the race, when present, showed in every round.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testlib.h"

enum { ROUNDS = 6, MAX_THREADS = 8, CHILD_SECONDS = 120 };

typedef struct start_shared {
    pthread_barrier_t barrier;
    const char *want_device;
} start_shared;

typedef struct start_slot {
    start_shared *shared;
    hd_status status;
    char device[256];
} start_slot;

static void *create_after_barrier(void *arg)
{
    start_slot *slot = arg;
    pthread_barrier_wait(&slot->shared->barrier);
    hd_context *ctx = NULL;
    slot->status = hd_context_create(&ctx, NULL);
    snprintf(slot->device, sizeof slot->device, "%s", hd_context_device_name(ctx));
    hd_context_destroy(ctx);
    return NULL;
}

/* The child of one round: 0 when every thread got a context on want_device. */
static int child_round(int threads, const char *want_device)
{
    alarm(CHILD_SECONDS); /* a hang is a failure, not a stuck suite */
    start_shared shared = {.want_device = want_device};
    start_slot slots[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    pthread_barrier_init(&shared.barrier, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        slots[i] = (start_slot){.shared = &shared};
        if (pthread_create(&ids[i], NULL, create_after_barrier, &slots[i]) != 0)
            return 3;
    }
    int bad = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        if (slots[i].status != HD_OK || strcmp(slots[i].device, want_device) != 0) {
            fprintf(stderr, "thread %d: %s, device '%s' (want '%s')\n", i,
                    hd_status_name(slots[i].status), slots[i].device, want_device);
            bad = 1;
        }
    }
    return bad;
}

/* The device a context created alone in a fresh process finds, through a pipe. */
static void device_alone(char *buf, size_t size)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        hd_context *ctx = NULL;
        hd_status s = hd_context_create(&ctx, NULL);
        const char *name = s == HD_OK ? hd_context_device_name(ctx) : "";
        ssize_t n = write(fds[1], name, strlen(name));
        _exit(s == HD_OK && n == (ssize_t)strlen(name) ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], buf, size - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    buf[n > 0 ? n : 0] = '\0';
}

static void run_rounds(int threads)
{
    char want[256];
    device_alone(want, sizeof want);
    print_message("device of a lone context: '%s'; %d rounds of %d threads\n", want, ROUNDS,
                  threads);
    int bad = 0;
    for (int round = 0; round < ROUNDS; round++) {
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(child_round(threads, want));
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) {
            print_error("round %d: killed by signal %d\n", round, WTERMSIG(status));
            bad++;
        } else if (WEXITSTATUS(status) != 0) {
            print_error("round %d: exit status %d\n", round, WEXITSTATUS(status));
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static void test_context_create_two_threads_at_once_all_get_the_device(void **state)
{
    (void)state;
    run_rounds(2);
}

static void test_context_create_eight_threads_at_once_all_get_the_device(void **state)
{
    (void)state;
    run_rounds(MAX_THREADS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_create_two_threads_at_once_all_get_the_device),
        cmocka_unit_test(test_context_create_eight_threads_at_once_all_get_the_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
