#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
static const char *src =
    "__kernel void k(__global float *x) {\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\");\n"
    "  x[get_global_id(0)] = 1.0f;\n"
    "}\n";
static const char *src_mma =
    "__kernel void k(__global float *x) {\n"
    "  float d0=0,d1=0,d2=0,d3=0; uint a=0x3f800000u;\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};\" : \"+f\"(d0),\"+f\"(d1),\"+f\"(d2),\"+f\"(d3) : \"r\"(a));\n"
    "  x[get_global_id(0)] = d0;\n"
    "}\n";
static void try(cl_context ctx, cl_device_id dev, const char *what, const char *s, const char *opts)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    char log[4096] = "";
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    printf("== %s, options '%s': clBuildProgram %d\n%.1500s\n", what, opts, err, log);
    clReleaseProgram(p);
}
int main(void)
{
    cl_platform_id plats[8]; cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    for (cl_uint i = 0; i < np; i++) {
        cl_device_id dev; cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &nd) != CL_SUCCESS || nd == 0) continue;
        char name[256]; clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
        cl_ulong local = 0; clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
        printf("device %s, local memory %lu bytes\n", name, (unsigned long)local);
        cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, NULL);
        try(ctx, dev, "mma.sync tf32", src_mma, "");
        try(ctx, dev, "wgmma.fence", src, "");
        try(ctx, dev, "wgmma.fence", src, "-cl-nv-arch sm_90a");
        try(ctx, dev, "mma.sync tf32", src_mma, "-cl-nv-arch sm_90a");
        clReleaseContext(ctx);
    }
    return 0;
}
