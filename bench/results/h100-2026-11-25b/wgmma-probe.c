/* Probe: can wgmma run through NVIDIA's OpenCL? Build from source with the sm_90a-only
 * instructions behind a PTX comment marker, take the PTX, uncomment them, retarget to sm_90a,
 * load it back with clCreateProgramWithBinary. Then one m64n16k8 tf32 product with A and B
 * K-major in shared memory, no swizzle, core matrices of 8 rows x 16 bytes; both LBO/SBO
 * conventions tried. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
"#define WG(x) \"// @wg@ \" x \"\\n\"\n"
"inline ulong desc(uint addr, uint lbo, uint sbo) {\n"
"  return (ulong)((addr & 0x3FFFF) >> 4) | ((ulong)((lbo & 0x3FFFF) >> 4) << 16) | ((ulong)((sbo & 0x3FFFF) >> 4) << 32);\n"
"}\n"
"__kernel __attribute__((reqd_work_group_size(128,1,1)))\n"
"void k(__global const float *a, __global const float *b, __global float *d, uint lbo, uint sbo) {\n"
"  __local float as[64 * 8] __attribute__((aligned(128)));\n"
"  __local float bs[16 * 8] __attribute__((aligned(128)));\n"
"  int lid = get_local_id(0);\n"
"  /* A 64x8 row-major: element (i,p) -> core (i/8, p/4), row i%8, col p%4 */\n"
"  for (int e = lid; e < 64 * 8; e += 128) { int i = e / 8, p = e % 8;\n"
"    as[((i / 8) * 2 + p / 4) * 32 + (i % 8) * 4 + p % 4] = a[e]; }\n"
"  for (int e = lid; e < 16 * 8; e += 128) { int j = e / 8, p = e % 8; /* b stored n x k */\n"
"    bs[((j / 8) * 2 + p / 4) * 32 + (j % 8) * 4 + p % 4] = b[e]; }\n"
"  barrier(CLK_LOCAL_MEM_FENCE);\n"
"  asm volatile(WG(\"fence.proxy.async.shared::cta;\") ::: \"memory\");\n"
"  ulong da = desc((uint)(size_t)as, lbo, sbo), db = desc((uint)(size_t)bs, lbo, sbo);\n"
"  float c[8] = {0,0,0,0,0,0,0,0};\n"
"  asm volatile(WG(\"wgmma.fence.sync.aligned;\") ::: \"memory\");\n"
"  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %10, 0;\\n\"\n"
"     WG(\"wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\") \"}\\n\"\n"
"     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]), \"+f\"(c[4]), \"+f\"(c[5]), \"+f\"(c[6]), \"+f\"(c[7])\n"
"     : \"l\"(da), \"l\"(db), \"r\"(0));\n"
"  asm volatile(WG(\"wgmma.commit_group.sync.aligned;\") ::: \"memory\");\n"
"  asm volatile(WG(\"wgmma.wait_group.sync.aligned 0;\") : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]), \"+f\"(c[4]), \"+f\"(c[5]), \"+f\"(c[6]), \"+f\"(c[7]) :: \"memory\");\n"
"  int w = lid / 32, lane = lid % 32, g = lane / 4, t = lane % 4;\n"
"  for (int j = 0; j < 2; j++) {\n"
"    int r0 = 16 * w + g, c0 = 8 * j + 2 * t;\n"
"    d[r0 * 16 + c0] = c[4*j]; d[r0 * 16 + c0 + 1] = c[4*j+1];\n"
"    d[(r0 + 8) * 16 + c0] = c[4*j+2]; d[(r0 + 8) * 16 + c0 + 1] = c[4*j+3];\n"
"  }\n"
"}\n";

static void check(cl_int err, const char *what) { if (err != CL_SUCCESS) { printf("%s: %d\n", what, err); exit(1); } }

static char *replace_all(const char *s, const char *from, const char *to)
{
    size_t n = 0, fl = strlen(from), tl = strlen(to);
    for (const char *p = s; (p = strstr(p, from)); p += fl) n++;
    char *out = malloc(strlen(s) + n * (tl + 1) + 1), *w = out;
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) { strcpy(w, p); break; }
        memcpy(w, p, q - p); w += q - p; memcpy(w, to, tl); w += tl; p = q + fl;
    }
    return out;
}

int main(void)
{
    cl_platform_id plat; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &plat, NULL);
    clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    err = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    char log[20000]; clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    printf("source build %d\n%s\n", err, log);
    if (err) return 1;
    size_t blen; clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof blen, &blen, NULL);
    char *ptx = calloc(blen + 1, 1); unsigned char *bins[1] = {(unsigned char *)ptx};
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
    char *a1 = replace_all(ptx, "// @wg@ ", "");
    char *a2 = replace_all(a1, ".target sm_90,", ".target sm_90a,");
    FILE *f = fopen(getenv("PTX_OUT") ? getenv("PTX_OUT") : "/tmp/wg.ptx", "w"); fputs(a2, f); fclose(f);
    size_t len = strlen(a2) + 1; const unsigned char *bp = (const unsigned char *)a2; cl_int bst;
    cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &len, &bp, &bst, &err);
    printf("create from patched PTX: %d (binary status %d)\n", err, bst);
    err = clBuildProgram(p2, 1, &dev, "", NULL, NULL);
    clGetProgramBuildInfo(p2, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    printf("patched build %d\n%s\n", err, log);
    if (err) return 1;
    cl_kernel k = clCreateKernel(p2, "k", &err); check(err, "kernel");
    float A[64 * 8], B[16 * 8], D[64 * 16], R[64 * 16];
    for (int i = 0; i < 64 * 8; i++) A[i] = (float)((i * 7) % 13 - 6);
    for (int i = 0; i < 16 * 8; i++) B[i] = (float)((i * 5) % 11 - 5);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 16; j++) {
            float s = 0; for (int pp = 0; pp < 8; pp++) s += A[i * 8 + pp] * B[j * 8 + pp];
            R[i * 16 + j] = s;
        }
    cl_mem ma = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof A, A, &err);
    cl_mem mb = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof B, B, &err);
    cl_mem md = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof D, NULL, &err);
    unsigned conv[2][2] = {{128, 256}, {256, 128}};
    for (int c = 0; c < 2; c++) {
        memset(D, 0, sizeof D);
        clEnqueueWriteBuffer(q, md, 1, 0, sizeof D, D, 0, NULL, NULL);
        clSetKernelArg(k, 0, sizeof ma, &ma); clSetKernelArg(k, 1, sizeof mb, &mb);
        clSetKernelArg(k, 2, sizeof md, &md); clSetKernelArg(k, 3, 4, &conv[c][0]); clSetKernelArg(k, 4, 4, &conv[c][1]);
        size_t g = 128, l = 128;
        err = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
        cl_int e2 = clFinish(q);
        clEnqueueReadBuffer(q, md, 1, 0, sizeof D, D, 0, NULL, NULL);
        int bad = 0; for (int i = 0; i < 64 * 16; i++) bad += D[i] != R[i];
        printf("LBO=%u SBO=%u: launch %d finish %d, %d of 1024 wrong (D[0]=%g R[0]=%g D[17]=%g R[17]=%g)\n",
               conv[c][0], conv[c][1], err, e2, bad, D[0], R[0], D[17], R[17]);
    }
    return 0;
}
