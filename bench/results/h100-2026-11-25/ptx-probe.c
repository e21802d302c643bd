/* Probes of NVIDIA's OpenCL compiler and tensor cores: (1) whether mma.sync reads a TF32
 * operand's low 13 bits (the kernel's split relies on it ignoring them); (2) whether
 * cp.async from global to local memory builds and copies; (3) -cl-nv-maxrregcount.
 * cc ptx-probe.c -lOpenCL */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <string.h>

static const char *src_low_bits =
    "__kernel void k(__global const uint *in, __global float *out) {\n"
    "  int lane = get_local_id(0);\n"
    "  uint a0 = in[lane], a1 = in[32 + lane], a2 = in[64 + lane], a3 = in[96 + lane];\n"
    "  uint b0 = in[128 + lane], b1 = in[160 + lane];\n"
    "  uint m = 0xffffe000u;\n"
    "  float d0 = 0, d1 = 0, d2 = 0, d3 = 0, e0 = 0, e1 = 0, e2 = 0, e3 = 0;\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "      : \"+f\"(d0), \"+f\"(d1), \"+f\"(d2), \"+f\"(d3) : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"r\"(b0), \"r\"(b1));\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
    "      : \"+f\"(e0), \"+f\"(e1), \"+f\"(e2), \"+f\"(e3) : \"r\"(a0 & m), \"r\"(a1 & m), \"r\"(a2 & m), \"r\"(a3 & m), \"r\"(b0 & m), \"r\"(b1 & m));\n"
    "  out[lane * 8 + 0] = d0; out[lane * 8 + 1] = d1; out[lane * 8 + 2] = d2; out[lane * 8 + 3] = d3;\n"
    "  out[lane * 8 + 4] = e0; out[lane * 8 + 5] = e1; out[lane * 8 + 6] = e2; out[lane * 8 + 7] = e3;\n"
    "}\n";

static const char *src_cp_async =
    "__kernel __attribute__((reqd_work_group_size(64, 1, 1)))\n"
    "void k(__global const float *in, __global float *out) {\n"
    "  __local float buf[3][256] __attribute__((aligned(16)));\n"
    "  int lid = get_local_id(0);\n"
    "  for (int s = 0; s < 3; s++) {\n"
    "    uint dst = (uint)(size_t)(&buf[s][4 * (lid ^ 5)]);\n"
    "    __global const float *src = in + 256 * s + 4 * lid;\n"
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"(dst), \"l\"(src) : \"memory\");\n"
    "    asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n"
    "  }\n"
    "  asm volatile(\"cp.async.wait_group 1;\" ::: \"memory\");\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (int s = 0; s < 2; s++)\n"
    "    for (int q = 0; q < 4; q++) out[256 * s + 4 * lid + q] = buf[s][4 * (lid ^ 5) + q];\n"
    "  asm volatile(\"cp.async.wait_all;\" ::: \"memory\");\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (int q = 0; q < 4; q++) out[512 + 4 * lid + q] = buf[2][4 * (lid ^ 5) + q];\n"
    "}\n";

static cl_program build(cl_context ctx, cl_device_id dev, const char *what, const char *s,
                        const char *opts)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    char log[4096] = "";
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    printf("== %s, options '%s': clBuildProgram %d\n%.1500s\n", what, opts, err, log);
    if (err != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void run(cl_context ctx, cl_device_id dev, cl_program p, const void *in, size_t in_bytes,
                float *out, size_t out_bytes, size_t threads)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    cl_kernel k = clCreateKernel(p, "k", &err);
    cl_mem bi = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in_bytes, (void *)in, &err);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, out_bytes, NULL, &err);
    clSetKernelArg(k, 0, sizeof bi, &bi);
    clSetKernelArg(k, 1, sizeof bo, &bo);
    err = clEnqueueNDRangeKernel(q, k, 1, NULL, &threads, &threads, 0, NULL, NULL);
    printf("launch %d\n", err);
    clEnqueueReadBuffer(q, bo, CL_TRUE, 0, out_bytes, out, 0, NULL, NULL);
    clReleaseMemObject(bi);
    clReleaseMemObject(bo);
    clReleaseKernel(k);
    clReleaseCommandQueue(q);
}

int main(void)
{
    cl_platform_id plats[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    for (cl_uint i = 0; i < np; i++) {
        cl_device_id dev;
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &nd) != CL_SUCCESS || nd == 0)
            continue;
        char name[256];
        clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
        printf("device %s\n", name);
        cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, NULL);

        /* (1) operands 1 + j/8 with garbage in the low 13 bits */
        unsigned in[192];
        for (int e = 0; e < 192; e++) {
            float v = 1.0f + (float)(e % 8) / 8.0f;
            memcpy(&in[e], &v, 4);
            in[e] |= (unsigned)(e * 2654435761u) & 0x1fffu;
        }
        cl_program p = build(ctx, dev, "mma low bits", src_low_bits, "");
        if (p) {
            float out[256];
            run(ctx, dev, p, in, sizeof in, out, sizeof out, 32);
            int same = 1;
            for (int l = 0; l < 32; l++)
                for (int r = 0; r < 4; r++)
                    same &= out[l * 8 + r] == out[l * 8 + 4 + r];
            printf("mma with low bits set %s the masked operands' result (lane 0: %.9g vs %.9g)\n",
                   same ? "EQUALS" : "DIFFERS FROM", out[0], out[4]);
            clReleaseProgram(p);
        }

        /* (2) cp.async */
        float fin[768], fout[768];
        for (int e = 0; e < 768; e++)
            fin[e] = (float)e;
        p = build(ctx, dev, "cp.async", src_cp_async, "");
        if (p) {
            memset(fout, 0, sizeof fout);
            run(ctx, dev, p, fin, sizeof fin, fout, sizeof fout, 64);
            int bad = 0;
            for (int e = 0; e < 768; e++)
                bad += fout[e] != fin[e];
            printf("cp.async copy: %d of 768 wrong\n", bad);
            clReleaseProgram(p);
        }
        p = build(ctx, dev, "cp.async with maxrregcount", src_cp_async, "-cl-nv-maxrregcount=64");
        if (p)
            clReleaseProgram(p);
        clReleaseContext(ctx);
    }
    return 0;
}
