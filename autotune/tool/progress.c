/* Progress of dispatch-autotune on stderr: a bar with the ETA on a terminal, else one plain
 * line per case (logs and CI). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "autotune/measure.h"
#include "autotune/tool/tool.h"

static struct {
    bool tty;
    size_t total;
    double start;
} pr;

static void eta_text(size_t done, char *buf, size_t size)
{
    double spent = hd__measure_now() - pr.start;
    if (done == 0) {
        snprintf(buf, size, "ETA --");
        return;
    }
    double left = spent / (double)done * (double)(pr.total - done);
    snprintf(buf, size, "ETA %dm%02ds", (int)(left / 60), (int)left % 60);
}

void hd__tool_progress_start(size_t total)
{
    pr.tty = isatty(STDERR_FILENO) != 0;
    pr.total = total;
    pr.start = hd__measure_now();
}

void hd__tool_progress_case(size_t index, const char *name)
{
    if (!pr.tty)
        return;
    enum { WIDTH = 30 };
    size_t filled = pr.total ? index * WIDTH / pr.total : WIDTH;
    char bar[WIDTH + 1];
    memset(bar, '#', filled);
    memset(bar + filled, '.', WIDTH - filled);
    bar[WIDTH] = '\0';
    char eta[32];
    eta_text(index, eta, sizeof eta);
    fprintf(stderr, "\r\033[K[%s] %zu/%zu %s  %s", bar, index, pr.total, eta, name);
    fflush(stderr);
}

void hd__tool_progress_done(size_t index, const char *line)
{
    if (pr.tty)
        fprintf(stderr, "\r\033[K");
    fprintf(stderr, "[%zu/%zu] %s\n", index + 1, pr.total, line);
}

void hd__tool_progress_finish(void)
{
    fprintf(stderr, "%sdone in %.1f s\n", pr.tty ? "\r\033[K" : "", hd__measure_now() - pr.start);
}
