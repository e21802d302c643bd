/* The harness's OpenCL, data and checking helpers (harness.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/elementwise/harness.h"

static cl_context context;
static cl_command_queue queue;
static cl_device_id device;

static void die(const char *what, cl_int err)
{
    fprintf(stderr, "OpenCL error %d: %s\n", err, what);
    exit(2);
}

void cl_open(void)
{
    cl_platform_id platform;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err != CL_SUCCESS)
        die("clGetPlatformIDs", err);
    if ((err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL)) != CL_SUCCESS)
        die("clGetDeviceIDs", err);
    char name[256];
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL);
    printf("device: %s\n", name);
    context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        die("clCreateContext", err);
    queue = clCreateCommandQueue(context, device, 0, &err);
    if (err != CL_SUCCESS)
        die("clCreateCommandQueue", err);
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (text == NULL || fread(text, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    fclose(f);
    text[n] = 0;
    *len = (size_t)n;
    return text;
}

#define MAX_PROGRAMS 64
static struct built {
    char file[32], options[256];
    cl_program program;
} built[MAX_PROGRAMS];
static int nbuilt;

static cl_program program_get(const char *file, const char *options)
{
    for (int i = 0; i < nbuilt; i++)
        if (strcmp(built[i].file, file) == 0 && strcmp(built[i].options, options) == 0)
            return built[i].program;
    if (nbuilt == MAX_PROGRAMS)
        exit(2);
    char path[256];
    size_t len[2];
    const char *src[2];
    src[0] = read_text("backends/fused/kernels/elem.cl", &len[0]);
    snprintf(path, sizeof path, "backends/fused/kernels/%s.cl", file);
    src[1] = read_text(path, &len[1]);
    cl_int err;
    cl_program p = clCreateProgramWithSource(context, 2, src, len, &err);
    if (err != CL_SUCCESS)
        die("clCreateProgramWithSource", err);
    err = clBuildProgram(p, 1, &device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        static char log[1 << 16];
        clGetProgramBuildInfo(p, device, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "build of %s (%s) failed:\n%s\n", file, options, log);
        exit(2);
    }
    free((void *)src[0]);
    free((void *)src[1]);
    struct built *b = &built[nbuilt++];
    snprintf(b->file, sizeof b->file, "%s", file);
    snprintf(b->options, sizeof b->options, "%s", options);
    b->program = p;
    return p;
}

#define MAX_KERNELS 256
static struct kern {
    cl_program program;
    char name[32];
    cl_kernel kernel;
} kernels[MAX_KERNELS];
static int nkernels;

cl_kernel cl_kernel_get(const char *file, const char *options, const char *name)
{
    cl_program p = program_get(file, options);
    for (int i = 0; i < nkernels; i++)
        if (kernels[i].program == p && strcmp(kernels[i].name, name) == 0)
            return kernels[i].kernel;
    if (nkernels == MAX_KERNELS)
        exit(2);
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS)
        die(name, err);
    kernels[nkernels].program = p;
    snprintf(kernels[nkernels].name, sizeof kernels[nkernels].name, "%s", name);
    kernels[nkernels++].kernel = k;
    return k;
}

void cl_close(void)
{
    for (int i = 0; i < nkernels; i++)
        clReleaseKernel(kernels[i].kernel);
    for (int i = 0; i < nbuilt; i++)
        clReleaseProgram(built[i].program);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
}

cl_mem cl_bytes(const void *host, size_t bytes)
{
    cl_int err;
    /* never empty: a zero-size buffer is an error */
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &err);
    if (err != CL_SUCCESS)
        die("clCreateBuffer", err);
    if (bytes > 0 && host != NULL &&
        (err = clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL)) !=
            CL_SUCCESS)
        die("clEnqueueWriteBuffer", err);
    return m;
}

void cl_bytes_read(cl_mem m, void *host, size_t bytes)
{
    cl_int err = clEnqueueReadBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        die("clEnqueueReadBuffer", err);
}

/* host NULL: an output, filled with NaN so that an element the kernel misses is caught */
cl_mem cl_acts(const float *host, size_t n, bool bf16)
{
    if (!bf16 && host != NULL)
        return cl_bytes(host, n * sizeof(float));
    if (!bf16) {
        float *f = alloc_f(n);
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
        cl_mem m = cl_bytes(f, n * sizeof *f);
        free(f);
        return m;
    }
    uint16_t *b = malloc(n * sizeof *b + 2);
    for (size_t i = 0; i < n; i++)
        b[i] = bf16_bits(host != NULL ? host[i] : NAN);
    cl_mem m = cl_bytes(b, n * sizeof *b);
    free(b);
    return m;
}

void cl_acts_read(cl_mem m, float *host, size_t n, bool bf16)
{
    if (!bf16) {
        cl_bytes_read(m, host, n * sizeof(float));
        return;
    }
    uint16_t *b = malloc(n * sizeof *b + 2);
    cl_bytes_read(m, b, n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[i] << 16;
        memcpy(&host[i], &u, sizeof u);
    }
    free(b);
}

void cl_arg(cl_kernel k, cl_uint i, size_t size, const void *value)
{
    cl_int err = clSetKernelArg(k, i, size, value);
    if (err != CL_SUCCESS)
        die("clSetKernelArg", err);
}

void cl_run(cl_kernel k, size_t global, size_t local)
{
    cl_int err = clEnqueueNDRangeKernel(queue, k, 1, NULL, &global, &local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        die("clEnqueueNDRangeKernel", err);
    if ((err = clFinish(queue)) != CL_SUCCESS)
        die("clFinish", err);
}

void cl_free(cl_mem m)
{
    clReleaseMemObject(m);
}

uint16_t bf16_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if (isnan(v))
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_round(float v)
{
    uint32_t u = (uint32_t)bf16_bits(v) << 16;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

void bf16_round_all(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = bf16_round(p[i]);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

uint64_t rng_next(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53;
}

int rng_int(int lo, int hi)
{
    return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

void fill_act(float *p, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        double kind = rng_uniform(0.0, 1.0);
        if (kind < 0.75)
            p[i] = (float)rng_uniform(-scale, scale);
        else if (kind < 0.98)
            p[i] = (float)((rng_next() & 1 ? 1.0 : -1.0) *
                           pow(10.0, rng_uniform(-3.0, log10(30.0 * scale))));
        else
            p[i] = 0.0f;
    }
}

float *alloc_f(size_t n)
{
    float *p = calloc(n + 1, sizeof *p);
    if (p == NULL)
        exit(2);
    return p;
}

double *alloc_d(size_t n)
{
    double *p = calloc(n + 1, sizeof *p);
    if (p == NULL)
        exit(2);
    return p;
}

void stat_check(tally *s, double got, double want, double tol, double mag, bool bf16,
                const char *fmt, ...)
{
    s->values++;
    float wf = (float)want;
    bool nonfinite = !isfinite(wf) || (bf16 && !isfinite(bf16_round(wf)));
    double ratio, rel;
    if (nonfinite) {
        float expect = bf16 ? bf16_round(wf) : wf;
        bool ok = isnan(expect) ? isnan(got) : got == (double)expect;
        ratio = ok ? 0.0 : INFINITY;
        rel = ratio;
    } else {
        double err = fabs(got - want);
        ratio = isfinite(got) ? err / tol : INFINITY;
        rel = !isfinite(got) ? INFINITY : mag >= 1e-30 ? err / mag : 0.0;
    }
    if (rel > s->worst_rel)
        s->worst_rel = rel;
    if (!(ratio <= 1.0))
        s->failures++;
    if (ratio > s->worst_ratio || (isnan(ratio) && !isnan(s->worst_ratio))) {
        s->worst_ratio = ratio;
        va_list ap;
        va_start(ap, fmt);
        int at = vsnprintf(s->where, sizeof s->where, fmt, ap);
        va_end(ap);
        if (at >= 0 && (size_t)at < sizeof s->where)
            snprintf(s->where + at, sizeof s->where - (size_t)at, ": got %.9g want %.9g tol %.3g",
                     got, want, tol);
    }
}

bool stat_report(const tally *s)
{
    bool pass = s->failures == 0;
    printf("%-4s %-44s %9ld values  worst err/tol %.3f  worst err/magnitude %.3g\n",
           pass ? "PASS" : "FAIL", s->name, s->values, s->worst_ratio, s->worst_rel);
    if (!pass || s->worst_ratio > 0.5)
        printf("       worst: %s\n", s->where);
    return pass;
}
