/* wgmma issue-rate probe: loops of wgmma from local memory, no global loads; options give
 * WN, warpgroups per group (WGS), products per commit (KS), a barrier per loop (SYNC),
 * swizzle (SWZ). Prints TFLOP/s over GROUPS work-groups. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t n = 0, fl = strlen(from), tl = strlen(to);
    for (const char *p = s; (p = strstr(p, from)); p += fl) n++;
    char *out = malloc(strlen(s) + n * (tl + 1) + 1), *w = out;
    for (const char *p = s;;) { const char *q = strstr(p, from);
        if (!q) { strcpy(w, p); break; }
        memcpy(w, p, q - p); w += q - p; memcpy(w, to, tl); w += tl; p = q + fl; }
    return out;
}
int main(int argc, char **argv) {
    /* argv: file WN WGS KS SYNC SWZ NBUF GROUPS */
    if (argc < 9) return 2;
    FILE *f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long len = ftell(f); rewind(f);
    char *src = calloc(len + 1, 1); fread(src, 1, len, f); fclose(f);
    int wn = atoi(argv[2]), wgs = atoi(argv[3]), ks = atoi(argv[4]), groups = atoi(argv[8]);
    char opts[256];
    snprintf(opts, sizeof opts, "-DWN=%s -DWGS=%s -DKS=%s -DSYNC=%s -DSWZ=%s -DNBUF=%s", argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
    cl_platform_id plat; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &plat, NULL); clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const char *sp = src;
    cl_program p = clCreateProgramWithSource(ctx, 1, &sp, NULL, &err);
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    static char log[100000]; clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    if (err) { printf("%s: source build %d\n%s\n", opts, err, log); return 1; }
    size_t blen; clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof blen, &blen, NULL);
    char *ptx = calloc(blen + 1, 1); unsigned char *bins[1] = {(unsigned char *)ptx};
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
    char *a2 = replace_all(replace_all(ptx, "// @wg@ ", ""), ".target sm_90,", ".target sm_90a,");
    size_t plen = strlen(a2) + 1; const unsigned char *bp = (const unsigned char *)a2; cl_int bst;
    cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &plen, &bp, &bst, &err);
    err = clBuildProgram(p2, 1, &dev, "", NULL, NULL);
    clGetProgramBuildInfo(p2, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    if (err) { printf("%s: patched build %d\n%s\n", opts, err, log); return 1; }
    cl_kernel k = clCreateKernel(p2, "k", &err);
    size_t lsz = 128 * wgs, gsz = lsz * groups;
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, gsz * 4, NULL, &err);
    int iters = 20000;
    clSetKernelArg(k, 0, sizeof out, &out); clSetKernelArg(k, 1, sizeof iters, &iters);
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        cl_event ev;
        err = clEnqueueNDRangeKernel(q, k, 1, NULL, &gsz, &lsz, 0, NULL, &ev);
        if (err || clFinish(q)) { printf("%s: launch %d\n", opts, err); return 1; }
        cl_ulong t0, t1;
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        if (t1 - t0 < best) best = (double)(t1 - t0);
    }
    double flops = 2.0 * 64 * wn * 8 * ks * (double)iters * wgs * groups;
    printf("%-60s groups %d: %.3f ms, %.1f TFLOP/s\n", opts, groups, best * 1e-6, flops / best * 1e-3);
    return 0;
}
