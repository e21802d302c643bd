/* Progress of dispatch-autotune on stderr: a bar with the ETA on a terminal, else one plain
 * line per case with the elapsed time (logs and CI). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "autotune/measure.h"
#include "autotune/tool/tool.h"

static struct {
    bool tty, quiet;
    size_t total;
    double start;
    const double *estimates;
} pr;

static void duration_text(double s, char *buf, size_t size)
{
    if (s < 60)
        snprintf(buf, size, "%.1f s", s);
    else
        snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

/* The estimates of the cases left, scaled by how the finished cases compared with theirs
 * (within a factor of 4 either way: the model knows nothing of kernel builds). Without
 * estimates, the average of the finished cases. */
static void eta_text(size_t done, char *buf, size_t size)
{
    double spent = hd__measure_now() - pr.start, left = 0.0;
    if (pr.estimates != NULL) {
        double done_est = 0.0;
        for (size_t i = 0; i < pr.total; i++)
            *(i < done ? &done_est : &left) += pr.estimates[i];
        double scale = done_est > 0 ? spent / done_est : 1.0;
        left *= scale < 0.25 ? 0.25 : scale > 4.0 ? 4.0 : scale;
    } else if (done > 0) {
        left = spent / (double)done * (double)(pr.total - done);
    } else {
        snprintf(buf, size, "ETA --");
        return;
    }
    char d[32];
    duration_text(left, d, sizeof d);
    snprintf(buf, size, "ETA %s", d);
}

void hd__tool_progress_start(size_t total, const double *estimates, bool quiet)
{
    pr.tty = isatty(STDERR_FILENO) != 0;
    pr.quiet = quiet;
    pr.total = total;
    pr.estimates = estimates;
    pr.start = hd__measure_now();
}

void hd__tool_progress_case(size_t index, const char *name)
{
    if (!pr.tty || pr.quiet)
        return;
    enum { WIDTH = 30 };
    size_t filled = pr.total ? index * WIDTH / pr.total : WIDTH;
    char bar[WIDTH + 1];
    memset(bar, '#', filled);
    memset(bar + filled, '.', WIDTH - filled);
    bar[WIDTH] = '\0';
    char eta[48];
    eta_text(index, eta, sizeof eta);
    fprintf(hd__measure_stderr(), "\r\033[K[%s] %zu/%zu %s  %s", bar, index, pr.total, eta, name);
    fflush(hd__measure_stderr());
}

void hd__tool_progress_done(size_t index, const char *line)
{
    if (pr.tty && !pr.quiet)
        fprintf(hd__measure_stderr(), "\r\033[K");
    char elapsed[32];
    duration_text(hd__measure_now() - pr.start, elapsed, sizeof elapsed);
    if (pr.tty || pr.quiet)
        fprintf(hd__measure_stderr(), "[%zu/%zu] %s\n", index + 1, pr.total, line);
    else
        fprintf(hd__measure_stderr(), "[%zu/%zu] %s (elapsed %s)\n", index + 1, pr.total, line, elapsed);
}

void hd__tool_progress_finish(void)
{
    fprintf(hd__measure_stderr(), "%sdone in %.1f s\n", pr.tty && !pr.quiet ? "\r\033[K" : "",
            hd__measure_now() - pr.start);
}

void hd__tool_time_text(double us, char *buf, size_t size)
{
    if (us < 1e3)
        snprintf(buf, size, "%.2f \u00b5s", us);
    else if (us < 1e6)
        snprintf(buf, size, "%.2f ms", us * 1e-3);
    else
        snprintf(buf, size, "%.2f s", us * 1e-6);
}
