/* --show: the cache as a table a person reads: op, shape, winner, time, margin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tool/tool.h"
#include "dispatch/tools.h"

static int by_key(const void *pa, const void *pb)
{
    const hd_tune_record *a = pa, *b = pb;
    if (a->op != b->op)
        return (int)a->op - (int)b->op;
    for (int i = 0; i < 4; i++)
        if (a->shape.dim[i] != b->shape.dim[i])
            return a->shape.dim[i] < b->shape.dim[i] ? -1 : 1;
    return (a->shape.trans_a * 2 + a->shape.trans_b) - (b->shape.trans_a * 2 + b->shape.trans_b);
}

void hd__tool_show(FILE *out, const hd_tune_file *f)
{
    fprintf(out, "device   %s (%s, driver %s)\nlibrary  %s, CLBlast %s\n", f->key.device,
            f->key.platform, f->key.driver, f->key.library, f->key.clblast);
    const hd_tune_calibration *c = &f->cal;
    fprintf(out,
            "calibration: launch %.1f \u00b5s, copy %.1f GB/s, host link %.1f GB/s, GEMM %.0f "
            "GFLOP/s (fused %.0f, CLBlast %.0f), CPU %.0f GFLOP/s %.1f GB/s\n",
            c->launch_us, c->copy_gbps, c->host_gbps, c->gemm_gflops, c->fused_gflops,
            c->clblast_gflops, c->cpu_gflops, c->cpu_gbps);
    for (size_t i = 0; i < f->param_count; i++)
        fprintf(out, "param %s %s: %s\n", hd_backend_name(f->params[i].backend), f->params[i].name,
                f->params[i].value);
    hd_tune_record *r = malloc((f->count ? f->count : 1) * sizeof *r);
    if (r == NULL)
        return;
    memcpy(r, f->records, f->count * sizeof *r);
    qsort(r, f->count, sizeof *r, by_key);
    fprintf(out, "\n%-28s %-14s %12s  %-24s %s\n", "op and shape", "winner", "median",
            "margin over runner-up", "variant");
    for (size_t i = 0; i < f->count; i++) {
        char key[96], margin[64] = "-";
        hd__shape_text(r[i].op, &r[i].shape, key, sizeof key);
        if (r[i].runner_up != HD_BACKEND_AUTO)
            snprintf(margin, sizeof margin, "%+.1f%% %s", r[i].margin_pct,
                     hd_backend_name(r[i].runner_up));
        char time[32];
        hd__tool_time_text(r[i].median_us, time, sizeof time);
        /* "µ" is two bytes that print as one column */
        int width = strstr(time, "\u00b5") != NULL ? 13 : 12;
        fprintf(out, "%-28s %-14s %*s  %-24s %s\n", key, hd_backend_name(r[i].backend), width, time,
                margin, r[i].variant[0] ? r[i].variant : "-");
    }
    fprintf(out, "%zu record(s)\n", f->count);
    fputs("median: the winner's median time per call (device events on a GPU, host wall time on "
          "the CPU\nbackend and on an OpenCL device that is the CPU); margin: how much slower the "
          "best candidate\nof another backend was (negative: a slower winner was preferred, see "
          "docs/tuner.md);\nvariant: the winner's kernel parameters, - for its defaults\n",
          out);
    free(r);
}
