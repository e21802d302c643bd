/* Probe: does NVIDIA's OpenCL accept more than 48 KiB of local memory through a __local
 * kernel argument (dynamic shared memory)? */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
static const char *src =
"__kernel void k(__global float *out, __local float *buf, int n) {\n"
"  int lid = get_local_id(0);\n"
"  for (int i = lid; i < n; i += get_local_size(0)) buf[i] = (float)i;\n"
"  barrier(CLK_LOCAL_MEM_FENCE);\n"
"  float s = 0; for (int i = lid; i < n; i += get_local_size(0)) s += buf[n - 1 - i];\n"
"  out[lid] = s;\n"
"}\n";
int main(void)
{
    cl_platform_id plat; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, NULL);
    cl_ulong lm = 0; clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
    printf("CL_DEVICE_LOCAL_MEM_SIZE %llu\n", (unsigned long long)lm);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    err = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    cl_kernel k = clCreateKernel(p, "k", &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
    size_t sizes[] = {32768, 49152, 65536, 98304, 200704};
    for (int i = 0; i < 5; i++) {
        int n = (int)(sizes[i] / 4);
        cl_int e1 = clSetKernelArg(k, 0, sizeof out, &out);
        cl_int e2 = clSetKernelArg(k, 1, sizes[i], NULL);
        cl_int e3 = clSetKernelArg(k, 2, sizeof n, &n);
        size_t g = 256, l = 256;
        cl_int e4 = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
        cl_int e5 = clFinish(q);
        float r[2]; clEnqueueReadBuffer(q, out, 1, 0, sizeof r, r, 0, NULL, NULL);
        printf("%zu bytes: setarg %d %d %d launch %d finish %d out0 %g\n", sizes[i], e1, e2, e3, e4, e5, r[0]);
    }
    return 0;
}
