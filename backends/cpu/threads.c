/*
 * The CPU backend's one tunable, THREADS=1: an op's BLAS calls on the calling thread alone.
 *
 * OpenBLAS spreads a GEMM over its thread pool once m*n*k reaches 64³. On a host of many cores
 * waking the pool then costs more than a small product, and the cost varies from call to call
 * with what the cores did before: on the H100 machine's host a 64³ SGEMM averaged 21 to 70 µs
 * per call over blocks of calls in one process (BENCHMARKS.md). Where one thread is faster is a property of the machine, so
 * the CPU backend lists THREADS=1 as a variant of small products and the autotuner times it
 * against OpenBLAS's own choice.
 *
 * OpenBLAS's thread count is a process-wide setting. An op with THREADS=1 lowers it to one
 * around its BLAS calls and puts back the count it found, unless that was one already. So when
 * contexts on several threads do this at once, whatever the interleaving, the last to put back
 * puts back the original count; meanwhile one of them may find the count another lowered (and
 * leave it) or run while another puts it back: a BLAS call then runs on more or fewer threads
 * than asked, slower, never wrong. No lock: a lock would serialise the small products of every
 * thread of the process.
 */
#include <string.h>

#include "backends/cpu/cpu.h"
#include "dispatch/error.h"

#ifdef HD_HAVE_OPENBLAS_THREADS
#include <cblas.h>
#endif

/* Products of at most this many multiply-adds are offered one thread: beyond, a single core
 * takes over a millisecond and the pool pays for itself on any machine. */
#define ONE_THREAD_MAX_MACS 16777216.0 /* 256³ */

static const char one_thread_variant[] = "THREADS=1";

hd_status hd__cpu_params_parse(hd_context *ctx, const char *variant, hd_cpu_params *p)
{
    p->one_thread = false;
    if (variant == NULL || variant[0] == '\0')
        return HD_OK;
    if (strcmp(variant, one_thread_variant) != 0)
        return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                         "cpu: unknown variant '%.64s' (the CPU backend takes %s)", variant,
                         one_thread_variant);
    p->one_thread = true;
    return HD_OK;
}

size_t hd__cpu_variants(void *state, hd_op op, const hd_shape *s, const char **out, size_t max)
{
    (void)state;
    if (max == 0)
        return 0;
#ifdef HD_HAVE_OPENBLAS_THREADS
    /* GEMM: m×k times k×n; LoRA: x*W dominates, tokens×in times in×out. In double: the
     * product of three dimensions may not fit a size_t. */
    if (op != HD_OP_GEMM && op != HD_OP_LORA)
        return 0; /* the row ops run the library's own loops, not BLAS */
    double macs = (double)s->dim[0] * (double)s->dim[1] * (double)s->dim[2];
    if (macs > ONE_THREAD_MAX_MACS || openblas_get_num_threads() <= 1)
        return 0;
    out[0] = one_thread_variant;
    return 1;
#else
    (void)op;
    (void)s;
    (void)out;
    return 0; /* without OpenBLAS's thread control there is nothing to choose */
#endif
}

void hd__cpu_threads_begin(const hd_cpu_params *p, hd_cpu_threads *t)
{
    t->saved = 0;
    t->lowered = false;
#ifdef HD_HAVE_OPENBLAS_THREADS
    if (!p->one_thread)
        return;
    t->saved = openblas_get_num_threads();
    t->lowered = t->saved > 1;
    if (t->lowered)
        openblas_set_num_threads(1);
#else
    (void)p;
#endif
}

void hd__cpu_threads_end(hd_cpu_threads *t)
{
#ifdef HD_HAVE_OPENBLAS_THREADS
    if (t->lowered)
        openblas_set_num_threads(t->saved);
    t->lowered = false;
#else
    (void)t;
#endif
}
