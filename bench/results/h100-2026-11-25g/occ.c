/* argv: occ.cl SMEM_BYTES THREADS GROUPS DUR_NS: prints the launch's time; co-resident groups
 * per SM = GROUPS / 132 / (time / DUR) roughly. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    if (argc < 6) return 2;
    FILE *f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long len = ftell(f); rewind(f);
    char *src = calloc(len + 1, 1); fread(src, 1, len, f); fclose(f);
    size_t lsz = atoi(argv[3]), groups = atoi(argv[4]), gsz = lsz * groups; cl_ulong dur = atol(argv[5]);
    char opts[64]; snprintf(opts, sizeof opts, "-DSMEM=%s", argv[2]);
    cl_platform_id plat; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &plat, NULL); clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const char *sp = src;
    cl_program p = clCreateProgramWithSource(ctx, 1, &sp, NULL, &err);
    if (clBuildProgram(p, 1, &dev, opts, NULL, NULL)) { printf("build failed %s\n", opts); return 1; }
    cl_kernel k = clCreateKernel(p, "k", &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, groups * 4, NULL, &err);
    clSetKernelArg(k, 0, sizeof out, &out); clSetKernelArg(k, 1, sizeof dur, &dur);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        cl_event ev;
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &gsz, &lsz, 0, NULL, &ev) || clFinish(q)) { printf("launch failed\n"); return 1; }
        cl_ulong t0, t1;
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        if (t1 - t0 < best) best = (double)(t1 - t0);
    }
    double waves = best / dur;
    printf("smem %6s B, %4zu threads, %4zu groups: %.1f us = %.2f x the spin -> about %.2f groups per SM\n",
           argv[2], lsz, groups, best * 1e-3, waves, groups / 132.0 / (waves < 1 ? 1 : (int)(waves + 0.5)));
    return 0;
}
