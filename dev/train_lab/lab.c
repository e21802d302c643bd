/* The lab's shared harness (lab.h). */
#include "lab.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cl_context lab_ctx;
cl_command_queue lab_queue;
cl_device_id lab_dev;
char lab_case[256];

static int checks, failures;

static void die_cl(cl_int err, const char *what)
{
    fprintf(stderr, "OpenCL error %d: %s\n", (int)err, what);
    exit(2);
}
#define CL_OK(call, what)                                                                          \
    do {                                                                                           \
        cl_int e_ = (call);                                                                        \
        if (e_ != CL_SUCCESS)                                                                      \
            die_cl(e_, what);                                                                      \
    } while (0)

void lab_init(void)
{
    cl_platform_id plats[8];
    cl_uint np = 0;
    CL_OK(clGetPlatformIDs(8, plats, &np), "platforms");
    const char *ps = getenv("LAB_PLATFORM"), *ds = getenv("LAB_DEVICE");
    cl_uint pi = ps != NULL ? (cl_uint)atoi(ps) : 0;
    if (pi >= np)
        die_cl(-1, "no such platform");
    cl_device_id devs[8];
    cl_uint nd = 0;
    CL_OK(clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 8, devs, &nd), "devices");
    cl_uint di = ds != NULL ? (cl_uint)atoi(ds) : 0;
    if (di >= nd)
        die_cl(-1, "no such device");
    lab_dev = devs[di];
    char name[256] = "";
    clGetDeviceInfo(lab_dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    printf("device: %s\n", name);
    cl_int err;
    lab_ctx = clCreateContext(NULL, 1, &lab_dev, NULL, NULL, &err);
    CL_OK(err, "context");
    lab_queue = clCreateCommandQueue(lab_ctx, lab_dev, 0, &err);
    CL_OK(err, "queue");
}

void lab_finish(void)
{
    clReleaseCommandQueue(lab_queue);
    clReleaseContext(lab_ctx);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 2);
    if (s == NULL || fread(s, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    fclose(f);
    s[n] = '\n';
    s[n + 1] = 0;
    *len = (size_t)n + 1;
    return s;
}

cl_program lab_build(const char *file, const char *options)
{
    const char *dir =
        getenv("LAB_KERNELS") != NULL ? getenv("LAB_KERNELS") : "backends/fused/kernels";
    char path[3][512];
    snprintf(path[0], sizeof path[0], "%s/common.cl", dir);
    snprintf(path[1], sizeof path[1], "%s/elem.cl", dir);
    snprintf(path[2], sizeof path[2], "%s/%s.cl", dir, file);
    const char *src[3];
    size_t len[3];
    for (int i = 0; i < 3; i++)
        src[i] = read_file(path[i], &len[i]);
    cl_int err;
    cl_program p = clCreateProgramWithSource(lab_ctx, 3, src, len, &err);
    CL_OK(err, "program");
    err = clBuildProgram(p, 1, &lab_dev, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        size_t n = 0;
        clGetProgramBuildInfo(p, lab_dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
        char *log = malloc(n + 1);
        clGetProgramBuildInfo(p, lab_dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        log[n] = 0;
        fprintf(stderr, "build of %s (%s) failed:\n%s\n", file, options, log);
        exit(2);
    }
    for (int i = 0; i < 3; i++)
        free((void *)src[i]);
    return p;
}

cl_kernel lab_kernel(cl_program p, const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "kernel %s: %d\n", name, (int)err);
        exit(2);
    }
    return k;
}

cl_mem lab_buffer(size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(lab_ctx, CL_MEM_READ_WRITE, bytes > 0 ? bytes : 4, NULL, &err);
    CL_OK(err, "buffer");
    if (host != NULL && bytes > 0)
        lab_write(m, bytes, host);
    return m;
}

void lab_write(cl_mem m, size_t bytes, const void *host)
{
    CL_OK(clEnqueueWriteBuffer(lab_queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL), "write");
}

void lab_read(cl_mem m, size_t bytes, void *host)
{
    CL_OK(clEnqueueReadBuffer(lab_queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL), "read");
}

void lab_arg(cl_kernel k, int i, size_t size, const void *value)
{
    CL_OK(clSetKernelArg(k, (cl_uint)i, size, value), "argument");
}

void lab_arg_null(cl_kernel k, int i)
{
    CL_OK(clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), NULL), "NULL argument");
}

void lab_launch(cl_kernel k, size_t groups, size_t wg)
{
    size_t global = groups * wg;
    if (groups == 0)
        return;
    CL_OK(clEnqueueNDRangeKernel(lab_queue, k, 1, NULL, &global, &wg, 0, NULL, NULL), "launch");
    CL_OK(clFinish(lab_queue), "finish");
}

static uint64_t state = 0x9E3779B97F4A7C15ull;

void lab_seed(uint64_t seed)
{
    state = seed * 0x9E3779B97F4A7C15ull + 1;
}

double lab_uniform(void)
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (double)((state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-53;
}

double lab_normal(void)
{
    double u1 = lab_uniform(), u2 = lab_uniform();
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

uint16_t lab_to_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if (isnan(v))
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float lab_from_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

float lab_round_bf16(float v)
{
    return lab_from_bf16(lab_to_bf16(v));
}

void lab_err_start(lab_err *e, const char *name)
{
    memset(e, 0, sizeof *e);
    e->name = name;
}

void lab_check(lab_err *e, double got, double want, double mag, double limit, bool bf16,
               const char *fmt, ...)
{
    double ratio, frac, err = fabs(got - want);
    bool special = true;
    if (isnan(want))
        ratio = isnan(got) ? 0.0 : INFINITY;
    else if (isinf(want))
        ratio = got == want ? 0.0 : INFINITY;
    else if (isnan(got) || isinf(got))
        ratio = INFINITY;
    else
        special = false;
    if (special) {
        frac = ratio;
    } else if (!bf16) {
        /* in units of u * mag, at least 2^-150 (float's rounding among its subnormals) */
        ratio = err == 0.0 ? 0.0 : err / fmax(LAB_U * mag, 0x1p-150);
        frac = ratio / limit;
    } else {
        /* units of one rounding to bf16 (2^-8 |want|; 2^-133, an ulp, among bf16's subnormals) plus
         * u * mag */
        double ulp = fmax(0x1p-8 * fabs(want), 0x1p-133), unit = ulp + LAB_U * mag;
        ratio = err == 0.0 ? 0.0 : err / unit;
        frac = err == 0.0 ? 0.0 : err / (ulp + LAB_U * mag * limit);
    }
    if (isnan(frac))
        frac = INFINITY;
    e->count++;
    e->bf16 |= bf16;
    if (!(frac <= 1.0))
        e->failed++;
    if (ratio > e->worst)
        e->worst = ratio;
    if (e->count == 1 || frac > e->frac) {
        e->frac = frac;
        e->limit = limit;
        e->abs = err;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(e->where, sizeof e->where, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof e->where)
            snprintf(e->where + n, sizeof e->where - (size_t)n, " got %.9g want %.9g; case: %s",
                     got, want, lab_case);
    }
}

bool lab_err_report(const lab_err *e)
{
    bool pass = e->failed == 0;
    checks++;
    failures += !pass;
    printf("  %s %-30s max %8.3g %s; worst %5.3f of its limit (%.3g, abs err %.3g) over %ld\n",
           pass ? "PASS" : "FAIL", e->name, e->worst, e->bf16 ? "bf16ulp+u*mag" : "u*mag", e->frac,
           e->limit, e->abs, e->count);
    if (!pass)
        printf("       %ld failed; worst at %s\n", e->failed, e->where);
    return pass;
}

int lab_summary(void)
{
    printf("%d checks, %d failed: %s\n", checks, failures, failures == 0 ? "PASS" : "FAIL");
    return failures == 0 ? 0 : 1;
}
