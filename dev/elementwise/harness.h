/*
 * The lab harness of the step's elementwise ops, RoPE and embedding (dev/, not the product):
 * the OpenCL kernels of backends/fused/kernels/ built on the first device (PoCL here) and the
 * CPU functions of backends/cpu/, run on fresh random data and checked against the float64
 * reference (autotune/reference_elementwise.c) and against finite differences of it.
 */
#ifndef DEV_ELEMENTWISE_HARNESS_H
#define DEV_ELEMENTWISE_HARNESS_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/step.h"

#define EPS32         1.1920928955078125e-07 /* FLT_EPSILON */
#define BF16_HALF_ULP (1.0 / 256.0)          /* bf16 rounding, relative to the value */
#define TINY          1e-37                  /* absolute floor of every tolerance */

/* ---- OpenCL ---- */
void cl_open(void);
void cl_close(void);
/* The program elem.cl + FILE.cl under options (cached), and its kernel NAME. */
cl_kernel cl_kernel_get(const char *file, const char *options, const char *name);
/* A buffer of n activations from host floats (rounded to bf16 where bf16), and back. */
cl_mem cl_acts(const float *host, size_t n, bool bf16);
void cl_acts_read(cl_mem m, float *host, size_t n, bool bf16);
cl_mem cl_bytes(const void *host, size_t bytes);
void cl_bytes_read(cl_mem m, void *host, size_t bytes);
void cl_arg(cl_kernel k, cl_uint i, size_t size, const void *value);
void cl_run(cl_kernel k, size_t global, size_t local);
void cl_free(cl_mem m);

/* ---- data ---- */
uint16_t bf16_bits(float v); /* act_store's rounding: to nearest even, NaN kept */
float bf16_round(float v);
void bf16_round_all(float *p, size_t n);
uint64_t rng_next(void);
double rng_uniform(double lo, double hi);
int rng_int(int lo, int hi); /* [lo, hi] */
/* n values: mostly uniform in [-scale, scale], some log-uniform magnitudes from 1e-3 to
 * 30 * scale, a few zeros. */
void fill_act(float *p, size_t n, double scale);
float *alloc_f(size_t n);
double *alloc_d(size_t n);

/* ---- checks ---- */
/* The worst error of one named check over its tolerance, and the worst error relative to the
 * data's magnitude. */
typedef struct tally {
    const char *name;
    double worst_ratio, worst_rel;
    long values, failures;
    char where[256];
} tally;
/* got against want: passes when |got - want| <= tol, or where want rounds to a non-finite
 * float (or bf16) and got is that value (NaN: any NaN). mag: the data's magnitude, what the
 * error is reported relative to (where it is at least 1e-30: not the subnormal results). */
void stat_check(tally *s, double got, double want, double tol, double mag, bool bf16,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Prints the line of s and returns whether it passed. */
bool stat_report(const tally *s);

/* ---- the CPU pools the CPU functions are run with: NULL, 2 and 3 threads ---- */
extern hd_cpu_pool *pools[3];

/* ---- the suites; each returns its number of failed checks ---- */
int check_elementwise(void);
int check_rope(void);
int check_embedding(void);

#endif
