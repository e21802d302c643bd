/*
 * The lab's shared harness for the norm helper's ops (add_rms_norm, cross_entropy, adamw):
 * OpenCL through <CL/cl.h> directly (the first platform's first device, or LAB_PLATFORM /
 * LAB_DEVICE), programs built from the kernel files of the tree, random data, bf16 rounding as
 * elem.cl's act_store, and error bookkeeping against the float64 reference.
 *
 * Errors are kept as ratios: err / (u * mag), u = 2^-24 (fp32 unit roundoff), mag the
 * magnitude the element's rounding error scales with (each harness says which); an element
 * passes when the ratio is at most its limit. u * mag is at least 2^-150, float's rounding
 * among its subnormals. bf16 outputs add their own rounding, at most 2^-8 |want| (an ulp, 2^-133,
 * among bf16's subnormals), on top of the fp32 tolerance, and their errors are reported in units of
 * that rounding + u * mag.
 */
#ifndef LAB_H
#define LAB_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LAB_U 0x1p-24 /* fp32 unit roundoff */

extern cl_context lab_ctx;
extern cl_command_queue lab_queue;
extern cl_device_id lab_dev;

void lab_init(void);
void lab_finish(void);
/* Builds kernels/common.cl + kernels/elem.cl + kernels/<file>.cl with options; exits on error. */
cl_program lab_build(const char *file, const char *options);
cl_kernel lab_kernel(cl_program p, const char *name);
cl_mem lab_buffer(size_t bytes, const void *host); /* host NULL: uninitialised */
void lab_write(cl_mem m, size_t bytes, const void *host);
void lab_read(cl_mem m, size_t bytes, void *host);
/* Arguments: values by pointer and size; lab_arg_null for a NULL buffer. */
void lab_arg(cl_kernel k, int i, size_t size, const void *value);
void lab_arg_null(cl_kernel k, int i);
#define LAB_ARG(k, i, v) lab_arg((k), (i), sizeof(v), &(v))
/* groups work-groups of wg work-items; waits. */
void lab_launch(cl_kernel k, size_t groups, size_t wg);

/* Random numbers (xorshift64*), reproducible from the seed. */
void lab_seed(uint64_t seed);
double lab_uniform(void); /* [0, 1) */
double lab_normal(void);

/* bf16 as elem.cl stores it: round to nearest even, NaN kept quiet. */
uint16_t lab_to_bf16(float v);
float lab_from_bf16(uint16_t b);
float lab_round_bf16(float v);

/* The worst error seen by one check. */
typedef struct lab_err {
    const char *name;
    double worst;    /* max err / (u * mag) */
    double frac;     /* max err / (u * mag * limit): above 1 fails */
    double limit;    /* the limit at the worst fraction */
    double abs;      /* the absolute error at the worst fraction */
    char where[480]; /* where the worst fraction was */
    long count, failed;
    bool bf16; /* bf16 outputs: worst in units of 2^-8 |want| + u * mag */
} lab_err;

void lab_err_start(lab_err *e, const char *name);
/* One element: got against want, mag as above, limit the largest err / (u * mag) allowed, bf16
 * whether the output is stored as bf16. NaN wants NaN; an infinite want the same infinity. */
void lab_check(lab_err *e, double got, double want, double mag, double limit, bool bf16,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Prints the check's line and adds it to the overall tally; returns whether it passed. */
bool lab_err_report(const lab_err *e);
/* The tally of lab_err_report's lines; returns the process's exit status. */
int lab_summary(void);

/* A one-line note of the case in progress (printed by failures). */
extern char lab_case[256];

#endif
