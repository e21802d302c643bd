/*
 * The CUDA runtime: the PTX rewrite on samples of NVIDIA's OpenCL compiler (and what it
 * refuses), the choice of runtime and its fallbacks (no libcuda, a libcuda that lacks a
 * function or fails to start, a device that is not NVIDIA's, a probe that fails), and the
 * runtime interface on whichever runtime the device runs: a kernel with __local arguments up to
 * the largest local memory the device gives a group.
 *
 * $HD_TEST_EXPECT_RUNTIME_NOTE, where set, is a text the runtime's note must hold: the meson
 * tests that point $HD_CUDA_LIBRARY at a library that is missing or broken set it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/ptx.h"
#include "backends/fused/internal.h"
#include "backends/runtime/runtime.h"
#include "dispatch/context.h"
#include "testlib.h"

static char *read_sample(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ptx/%s", HD_TEST_DATA, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 3);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    text[n] = text[n + 1] = '\0'; /* a program binary's trailing NULs */
    *len = (size_t)n + 2;
    return text;
}

/* What every rewritten module must not hold any more, and must hold. */
static void expect_cuda_ready(const hd_ptx_module *m)
{
    assert_null(strstr(m->text, "texmode_independent"));
    assert_null(strstr(m->text, "%envreg"));
    assert_null(strstr(m->text, ".ptr"));
    assert_null(strstr(m->text, ".metadata"));
    assert_non_null(strstr(m->text, ".extern .shared .align 128 .b8 hd_dynamic_shared[];"));
    assert_int_equal(strlen(m->text), m->len);
    for (const hd_ptx_entry *e = m->entries; e != NULL; e = e->next) {
        char visible[200];
        snprintf(visible, sizeof visible, ".visible .entry %s(", e->name);
        assert_non_null(strstr(m->text, visible));
    }
    /* no entry left without .visible */
    for (const char *p = strstr(m->text, ".entry"); p != NULL; p = strstr(p + 1, ".entry"))
        assert_true(p - m->text >= 9 && strncmp(p - 9, ".visible ", 9) == 0);
}

static void test_rewrites_kernels_of_nvidias_opencl_compiler(void **state)
{
    (void)state;
    const char *samples[] = {"embedding_opencl.ptx", "adamw_opencl.ptx"};
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) {
        size_t len;
        char *ptx = read_sample(samples[i], &len);
        hd_ptx_module m;
        char why[256];
        if (!hd__ptx_for_cuda(ptx, len, &m, why, sizeof why))
            fail_msg("%s refused: %s", samples[i], why);
        expect_cuda_ready(&m);
        assert_non_null(strstr(m.text, ".target sm_90\n"));
        assert_non_null(m.entries);
        hd__ptx_module_free(&m);
        free(ptx);
    }
    /* the sample's adamw kernels (adamw.cl before 54c97c6) take two int8 vectors by value: 32
     * bytes each */
    size_t len;
    char *ptx = read_sample("adamw_opencl.ptx", &len);
    hd_ptx_module m;
    char why[256];
    assert_true(hd__ptx_for_cuda(ptx, len, &m, why, sizeof why));
    const hd_ptx_entry *e = hd__ptx_entry(&m, "adamw_update");
    assert_non_null(e);
    bool vector = false;
    for (unsigned i = 0; i < e->param_count; i++) {
        assert_false(e->params[i].local);
        vector = vector || e->params[i].bytes == 32;
    }
    assert_true(vector);
    assert_null(hd__ptx_entry(&m, "no_such_kernel"));
    hd__ptx_module_free(&m);
    free(ptx);
}

static void test_rewrites_local_arguments_launch_registers_and_inline_asm(void **state)
{
    (void)state;
    size_t len;
    char *ptx = read_sample("features_sm90a.ptx", &len);
    hd_ptx_module m;
    char why[256];
    if (!hd__ptx_for_cuda(ptx, len, &m, why, sizeof why))
        fail_msg("refused: %s", why);
    expect_cuda_ready(&m);
    assert_non_null(strstr(m.text, ".target sm_90a\n"));
    const hd_ptx_entry *e = hd__ptx_entry(&m, "features");
    assert_non_null(e);
    assert_int_equal(e->param_count, 5);
    const bool local[5] = {false, true, true, false, false};
    const unsigned bytes[5] = {8, 8, 4, 32, 4};
    for (unsigned i = 0; i < 5; i++) {
        assert_int_equal(e->params[i].local, local[i]);
        assert_int_equal(e->params[i].bytes, bytes[i]);
    }
    /* each __local pointer gets the dynamic shared memory's address, in its own width */
    assert_non_null(strstr(m.text, "mov.u64 %hd_base, hd_dynamic_shared; add.u64 %rd2, %rd2, "
                                   "%hd_base;"));
    assert_non_null(strstr(m.text, "mov.u32 %hd_base, hd_dynamic_shared; add.u32 %r1, %r1, "
                                   "%hd_base;"));
    /* the group offsets and global offsets read 0; the launch's groups, %nctaid */
    const char *zero[] = {"%r6, 0;", "%r7, 0;", "%r8, 0;", "%r9, 0;", "%r10, 0;", "%r11, 0;"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++)
        assert_non_null(strstr(m.text, zero[i]));
    assert_non_null(strstr(m.text, "%r12, %nctaid.x;"));
    assert_non_null(strstr(m.text, "%r13, %nctaid.y;"));
    assert_non_null(strstr(m.text, "%r14, %nctaid.z;"));
    /* the inline asm and the static __local array pass as they are */
    assert_non_null(strstr(m.text, "cp.async.cg.shared.global [%rd2], [%rd1], 16;"));
    assert_non_null(strstr(m.text, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert_non_null(strstr(m.text, "wgmma.fence.sync.aligned;"));
    assert_non_null(strstr(m.text, ".shared .align 4 .b8 features_$_red[1024];"));
    hd__ptx_module_free(&m);
    free(ptx);
}

/* The entries whose own body waits for the launch before them (griddepcontrol.wait) are noted,
 * and only those: not one whose wait sits in a comment, nor one after a function that waits. */
static void test_notes_the_entries_that_wait_for_the_launch_before(void **state)
{
    (void)state;
    const char ptx[] =
        ".version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
        ".entry waits(\n\t.param .u64 .ptr .global .align 4 waits_param_0\n)\n{\n"
        "\t// begin inline asm\n\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n"
        "\t// end inline asm\n\tret;\n}\n"
        ".entry commented(\n\t.param .u64 .ptr .global .align 4 commented_param_0\n)\n{\n"
        "\t// griddepcontrol.wait;\n\tret;\n}\n"
        ".func helper()\n{\n\tgriddepcontrol.wait;\n\tret;\n}\n"
        ".entry after_helper(\n\t.param .u64 .ptr .global .align 4 after_helper_param_0\n)\n"
        "{\n\tcall.uni helper, ();\n\tret;\n}\n";
    hd_ptx_module m;
    char why[256];
    if (!hd__ptx_for_cuda(ptx, strlen(ptx), &m, why, sizeof why))
        fail_msg("refused: %s", why);
    expect_cuda_ready(&m);
    assert_true(hd__ptx_entry(&m, "waits")->waits_on_previous);
    assert_false(hd__ptx_entry(&m, "commented")->waits_on_previous);
    assert_false(hd__ptx_entry(&m, "after_helper")->waits_on_previous);
    assert_non_null(strstr(m.text, "\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;"));
    hd__ptx_module_free(&m);
    /* a sample of the compiler's, built before launch.cl: nothing waits */
    size_t len;
    char *sample = read_sample("embedding_opencl.ptx", &len);
    assert_true(hd__ptx_for_cuda(sample, len, &m, why, sizeof why));
    for (const hd_ptx_entry *e = m.entries; e != NULL; e = e->next)
        assert_false(e->waits_on_previous);
    hd__ptx_module_free(&m);
    free(sample);
}

/* Each refusal names the construct and its line, and leaves nothing to free. */
static void expect_refused(const char *ptx, const char *reason)
{
    hd_ptx_module m;
    char why[256];
    assert_false(hd__ptx_for_cuda(ptx, strlen(ptx), &m, why, sizeof why));
    assert_null(m.text);
    assert_null(m.entries);
    if (strstr(why, reason) == NULL || strstr(why, "PTX line ") == NULL)
        fail_msg("refusal '%s' does not say '%s'", why, reason);
}

static void test_refuses_what_it_does_not_know(void **state)
{
    (void)state;
    const char head[] = ".version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
                        ".entry k(\n\t.param .u64 .ptr .global .align 4 k_param_0,\n"
                        "\t.param .u64 .ptr .shared .align 4 k_param_1\n)\n{\n";
    char ptx[1024];
    snprintf(ptx, sizeof ptx, "%s\tmov.b32 \t%%r1, %%envreg9;\n\tret;\n}\n", head);
    expect_refused(ptx, "%envreg9");
    snprintf(ptx, sizeof ptx, "%s\tadd.s32 \t%%r1, %%envreg0, %%r2;\n}\n", head);
    expect_refused(ptx, "otherwise than by a 32-bit mov");
    snprintf(ptx, sizeof ptx, "%s\tmov.u64 \t%%rd1, k_param_1;\n}\n", head);
    expect_refused(ptx, "__local pointer parameter used otherwise");
    snprintf(ptx, sizeof ptx,
             "%s\ttex.2d.v4.f32.f32 {%%f1, %%f2, %%f3, %%f4}, [t, {%%f5, %%f6}];\n}\n", head);
    expect_refused(ptx, "tex.");
    expect_refused(".version 9.0\n.target sm_90\n.address_size 64\n.entry k(\n"
                   "\t.param .u64 .ptr .const .align 4 k_param_0\n)\n{\n}\n",
                   "state space");
    expect_refused(".version 9.0\n.address_size 64\n", "not PTX");
    const char nul[] = ".version 9.0\n\0.target sm_90\n";
    hd_ptx_module m;
    char why[128];
    assert_false(hd__ptx_for_cuda(nul, sizeof nul - 1, &m, why, sizeof why));
    assert_non_null(strstr(why, "NUL"));
}

/* A kernel of `count` int parameters, each read once. */
static char *kernel_of_params(unsigned count)
{
    size_t cap = 256 + (size_t)count * 96, len = 0;
    char *ptx = malloc(cap);
    assert_non_null(ptx);
    len += (size_t)snprintf(ptx + len, cap - len,
                            ".version 9.0\n.target sm_90, texmode_independent\n"
                            ".address_size 64\n.entry k(\n");
    for (unsigned i = 0; i < count; i++)
        len += (size_t)snprintf(ptx + len, cap - len, "\t.param .u32 k_param_%u%s\n", i,
                                i + 1 < count ? "," : "");
    len += (size_t)snprintf(ptx + len, cap - len,
                            ")\n{\n\tld.param.u32 \t%%r1, [k_param_0];\n\tret;\n}\n");
    assert_true(len < cap);
    return ptx;
}

/* Kernels of many parameters (AdamW's 32 tensors a launch) up to HD_PTX_MAX_PARAMS; one more is
 * refused with the limit named. */
static void test_takes_parameters_up_to_its_limit(void **state)
{
    (void)state;
    char *ptx = kernel_of_params(HD_PTX_MAX_PARAMS);
    hd_ptx_module m;
    char why[256];
    if (!hd__ptx_for_cuda(ptx, strlen(ptx), &m, why, sizeof why))
        fail_msg("refused: %s", why);
    const hd_ptx_entry *e = hd__ptx_entry(&m, "k");
    assert_non_null(e);
    assert_int_equal(e->param_count, HD_PTX_MAX_PARAMS);
    assert_int_equal(e->params[HD_PTX_MAX_PARAMS - 1].bytes, 4);
    hd__ptx_module_free(&m);
    free(ptx);
    ptx = kernel_of_params(HD_PTX_MAX_PARAMS + 1);
    char limit[64];
    snprintf(limit, sizeof limit, "more than %d parameters", HD_PTX_MAX_PARAMS);
    expect_refused(ptx, limit);
    free(ptx);
}

/* The runtime a context chose, and the note it gave. */
static void test_runtime_choice_and_its_fallbacks(void **state)
{
    (void)state;
    const char *expect_note = getenv("HD_TEST_EXPECT_RUNTIME_NOTE");
    hd_test_notes_clear();
    hd_context_options asked;
    hd_context_options_init(&asked);
    asked.log = hd_test_log;
    asked.no_tune_cache = true;
    asked.runtime = "cuda";
    hd_context *ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &asked), HD_OK);
    const char *runtime = hd_context_device_runtime(ctx);
    if (strcmp(hd_context_device_name(ctx), "none") == 0) {
        assert_string_equal(runtime, "none");
    } else if (strcmp(runtime, "opencl") == 0) {
        /* asked for CUDA and not given it: the note says why */
        const char *notes = hd_test_notes();
        assert_non_null(strstr(notes, "device runtime: OpenCL, as the CUDA runtime cannot run "
                                      "here"));
        if (expect_note != NULL && strstr(notes, expect_note) == NULL)
            fail_msg("the note '%s' does not say '%s'", notes, expect_note);
        assert_false(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST) &&
                     !hd_context_has_backend(ctx, HD_BACKEND_FUSED));
    } else {
        assert_string_equal(runtime, "cuda");
        assert_null(expect_note); /* a broken libcuda must not have given CUDA */
        /* CLBlast is OpenCL host code: not offered on the CUDA runtime */
        assert_false(hd_context_has_backend(ctx, HD_BACKEND_CLBLAST));
        assert_true(hd_context_has_backend(ctx, HD_BACKEND_FUSED));
        hd_context_destroy(ctx);
        /* a probe that fails falls back to OpenCL, with a note */
        hd_test_notes_clear();
        setenv("HD_FAULT", "*:cuda-probe", 1);
        ctx = hd_test_context_on("cuda");
        unsetenv("HD_FAULT");
        assert_string_equal(hd_context_device_runtime(ctx), "opencl");
        assert_non_null(strstr(hd_test_notes(), "probe kernel"));
    }
    hd_context_destroy(ctx);

    /* opencl is always taken; a runtime no one knows is an error */
    hd_context_options opt;
    hd_context_options_init(&opt);
    opt.no_tune_cache = true;
    opt.runtime = "opencl";
    ctx = NULL;
    assert_int_equal(hd_context_create(&ctx, &opt), HD_OK);
    assert_true(strcmp(hd_context_device_runtime(ctx), "opencl") == 0 ||
                strcmp(hd_context_device_runtime(ctx), "none") == 0);
    hd_context_destroy(ctx);
    opt.runtime = "vulkan";
    ctx = NULL;
    hd_status s = hd_context_create(&ctx, &opt);
    if (s == HD_OK) { /* no device here: no runtime is opened */
        assert_string_equal(hd_context_device_runtime(ctx), "none");
        hd_context_destroy(ctx);
    } else {
        assert_int_equal(s, HD_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(hd_context_last_error(NULL), "expected auto, opencl or cuda"));
    }
}

/* A kernel with two __local arrays, the second as large as the device lets one group hold,
 * through the interface the backends use, on whichever runtime runs the device. */
static const char local_source[] =
    "kernel void fill(global int *out, local int *small, local int *large, int large_ints)\n"
    "{\n"
    "    const int l = (int)get_local_id(0), n = (int)get_local_size(0);\n"
    "    small[l] = l;\n"
    "    for (int i = l; i < large_ints; i += n)\n"
    "        large[i] = i + 7;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    int sum = small[n - 1 - l];\n"
    "    for (int i = l; i < large_ints; i += n)\n"
    "        sum += large[large_ints - 1 - i];\n"
    "    out[get_global_id(0)] = sum + 1000 * (int)get_group_id(0) * (int)get_num_groups(0);\n"
    "}\n";

/* A context on the machine's device, or NULL where it has none: the runtime interface then has
 * nothing to run on. */
static hd_context *context_on_a_device(void)
{
    hd_context *ctx = hd_test_context(false);
    if (ctx->rt != NULL)
        return ctx;
    hd_context_destroy(ctx);
    return NULL;
}

static void test_kernel_takes_the_largest_local_memory_the_device_gives(void **state)
{
    (void)state;
    hd_context *ctx = context_on_a_device();
    if (ctx == NULL)
        return;
    hd_runtime *rt = ctx->rt;
    const hd_runtime_info *info = hd__rt_info(rt);
    enum { GROUP = 64, GROUPS = 3 };
    hd_kernel *k = NULL;
    assert_int_equal(hd__rt_kernel(rt, ctx, local_source, "", "fill", &k), HD_OK);
    hd_kernel *again = NULL;
    assert_int_equal(hd__rt_kernel(rt, ctx, local_source, "", "fill", &again), HD_OK);
    assert_ptr_equal(k, again);
    assert_true(hd__rt_kernel_max_group(k) >= GROUP);
    /* all the local memory a group may have but the small array, a margin for the driver */
    size_t small_bytes = GROUP * sizeof(int), margin = 1024;
    assert_true(info->local_mem > small_bytes + margin);
    int large_ints = (int)((info->local_mem - small_bytes - margin) / sizeof(int));
    struct hd_device_buffer *buf = NULL;
    int out[GROUP * GROUPS];
    assert_int_equal(hd__rt_buffer_acquire(rt, ctx, sizeof out, &buf), HD_OK);
    assert_int_equal(hd__rt_set_arg(ctx, k, 0, sizeof buf->mem, &buf->mem), HD_OK);
    assert_int_equal(hd__rt_set_arg(ctx, k, 1, small_bytes, NULL), HD_OK);
    assert_int_equal(hd__rt_set_arg(ctx, k, 2, (size_t)large_ints * sizeof(int), NULL), HD_OK);
    assert_int_equal(hd__rt_set_arg(ctx, k, 3, sizeof large_ints, &large_ints), HD_OK);
    assert_int_equal(hd__rt_launch(rt, ctx, k, (const size_t[2]){GROUPS, 1}, GROUP), HD_OK);
    assert_int_equal(hd__rt_download(rt, ctx, buf, out, sizeof out), HD_OK);
    for (int g = 0; g < GROUPS; g++) {
        for (int l = 0; l < GROUP; l++) {
            long want = GROUP - 1 - l + 1000L * g * GROUPS;
            for (int i = l; i < large_ints; i += GROUP)
                want += large_ints - 1 - i + 7;
            if (out[g * GROUP + l] != want)
                fail_msg("%s, %d bytes of local memory: item %d of group %d gave %d, not %ld",
                         hd__rt_kind_name(rt), large_ints * 4, l, g, out[g * GROUP + l], want);
        }
    }
    print_message("%s: a group held %zu bytes of local memory\n", hd__rt_kind_name(rt),
                  small_bytes + (size_t)large_ints * sizeof(int));
    hd__rt_buffer_release(rt, buf);
    hd_context_destroy(ctx);
}

/* Each group of a cluster of two writes its number (the odd ones after a wait, so that without
 * the barrier their partners would read the -1 the host left), waits at the cluster's barrier,
 * and reads its partner's; out[GROUPS + g] is the cluster's size as the group sees it
 * (NVIDIA's inline PTX: built only where the runtime runs clusters). */
static const char cluster_source[] =
    "__kernel void swap(__global int *seen, __global int *out, int groups)\n"
    "{\n"
    "    const int g = (int)get_group_id(0), l = (int)get_local_id(0);\n"
    "    if ((g & 1) && l == 0)\n"
    "        for (volatile int spin = 0; spin < 200000; spin++)\n"
    "            ;\n"
    "    if (l == 0)\n"
    "        seen[g] = 100 + g;\n"
    "    asm volatile(\"barrier.cluster.arrive.release.aligned;\\n\\t\"\n"
    "                 \"barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"
    "    uint size;\n"
    "    asm volatile(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(size));\n"
    "    if (l == 0) {\n"
    "        out[g] = ((volatile __global int *)seen)[g ^ 1];\n"
    "        out[groups + g] = (int)size;\n"
    "    }\n"
    "}\n";

/* Thread-block clusters (hd__rt_launch_cluster): where the runtime runs them (the CUDA runtime
 * on Hopper), groups of a cluster see each other's writes across its barrier, and a cluster
 * past the device's or not dividing the groups is refused; elsewhere any cluster of more than
 * one group is refused, saying so; a cluster of one is an ordinary launch everywhere. */
static void test_clusters_where_the_runtime_runs_them(void **state)
{
    (void)state;
    hd_context *ctx = context_on_a_device();
    if (ctx == NULL)
        return;
    hd_runtime *rt = ctx->rt;
    const hd_runtime_info *info = hd__rt_info(rt);
    enum { GROUP = 32, GROUPS = 8 };
    struct hd_device_buffer *seen = NULL, *out = NULL;
    int unset[GROUPS], got[2 * GROUPS], groups = GROUPS;
    for (int g = 0; g < GROUPS; g++)
        unset[g] = -1;
    assert_int_equal(hd__rt_buffer_acquire(rt, ctx, sizeof unset, &seen), HD_OK);
    assert_int_equal(hd__rt_buffer_acquire(rt, ctx, sizeof got, &out), HD_OK);
    assert_int_equal(hd__rt_upload(rt, ctx, seen, unset, sizeof unset), HD_OK);
    hd_kernel *k = NULL;
    if (info->clusters >= 2) {
        assert_int_equal(hd__rt_kernel(rt, ctx, cluster_source, "", "swap", &k), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 0, sizeof seen->mem, &seen->mem), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 1, sizeof out->mem, &out->mem), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 2, sizeof groups, &groups), HD_OK);
        assert_int_equal(
            hd__rt_launch_cluster(rt, ctx, k, (const size_t[2]){GROUPS, 1}, GROUP, 2), HD_OK);
        assert_int_equal(hd__rt_download(rt, ctx, out, got, sizeof got), HD_OK);
        for (int g = 0; g < GROUPS; g++) {
            if (got[g] != 100 + (g ^ 1))
                fail_msg("group %d of a cluster read %d, not its partner's %d", g, got[g],
                         100 + (g ^ 1));
            if (got[GROUPS + g] != 2)
                fail_msg("group %d saw a cluster of %d groups, not 2", g, got[GROUPS + g]);
        }
        assert_int_equal(
            hd__rt_launch_cluster(rt, ctx, k, (const size_t[2]){GROUPS, 1}, GROUP, 3),
            HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(ctx), "divide the groups"));
        assert_int_equal(hd__rt_launch_cluster(rt, ctx, k, (const size_t[2]){GROUPS * 4, 1},
                                               GROUP, info->clusters * 2),
                         HD_ERR_UNSUPPORTED);
    } else {
        assert_int_equal(hd__rt_kernel(rt, ctx, local_source, "", "fill", &k), HD_OK);
        assert_int_equal(
            hd__rt_launch_cluster(rt, ctx, k, (const size_t[2]){GROUPS, 1}, GROUP, 2),
            HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(ctx), "clusters"));
    }
    print_message("%s: clusters of up to %zu\n", hd__rt_kind_name(rt), info->clusters);
    hd__rt_buffer_release(rt, seen);
    hd__rt_buffer_release(rt, out);
    hd_context_destroy(ctx);
}

/* Tensor maps (the copy engine's descriptors, hd__rt_tensor_map): where the runtime gives them
 * (the CUDA runtime on Hopper), one per distinct tensor, the same address for the same one
 * asked again, a refusal for a stride the engine cannot take; elsewhere (OpenCL, an older GPU
 * or driver) a refusal that says why. */
static void test_tensor_maps_where_the_runtime_gives_them(void **state)
{
    (void)state;
    hd_context *ctx = context_on_a_device();
    if (ctx == NULL)
        return;
    hd_runtime *rt = ctx->rt;
    struct hd_device_buffer *buf = NULL;
    assert_int_equal(hd__rt_buffer_acquire(rt, ctx, 64 * 1024, &buf), HD_OK);
    hd_rt_tensor_map_desc d = {.mem = buf->mem,
                               .rank = 3,
                               .dim = {36, 100, 2},
                               .stride = {40 * sizeof(float), 4000 * sizeof(float)},
                               .box = {32, 64, 1}};
    hd_devmem map = NULL, again = NULL, other = NULL;
    hd_status s = hd__rt_tensor_map(rt, ctx, &d, &map);
    if (!hd__rt_info(rt)->tensor_maps) {
        assert_int_equal(s, HD_ERR_UNSUPPORTED);
        assert_null(map);
        assert_non_null(strstr(hd_context_last_error(ctx), "tensor maps"));
    } else {
        assert_int_equal(s, HD_OK);
        assert_non_null(map);
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &d, &again), HD_OK);
        assert_ptr_equal(map, again);
        d.dim[1] = 99;
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &d, &other), HD_OK);
        assert_ptr_not_equal(map, other);
        d.stride[0] = 37 * sizeof(float); /* rows not 16-byte aligned */
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &d, &other), HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(ctx), "cuTensorMapEncodeTiled"));
        d.stride[0] = 40 * sizeof(float); /* the refusal left the first map in place */
        d.dim[1] = 100;
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &d, &again), HD_OK);
        assert_ptr_equal(map, again);
        /* a rank-2 tensor: what its description holds past its rank does not name another */
        hd_rt_tensor_map_desc two = d, two_noise = d;
        two.rank = two_noise.rank = 2;
        two.dim[2] = 0, two.stride[1] = 0, two.box[2] = 0;
        hd_devmem map2 = NULL, map2_noise = NULL;
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &two, &map2), HD_OK);
        assert_int_equal(hd__rt_tensor_map(rt, ctx, &two_noise, &map2_noise), HD_OK);
        assert_ptr_equal(map2, map2_noise);
        assert_ptr_not_equal(map2, map);
    }
    hd__rt_buffer_release(rt, buf);
    hd_context_destroy(ctx);
}

/* Each group counts itself in, waits until every group has, and writes the count it saw:
 * groups that did not all run at once would never finish. */
static const char resident_source[] =
    "__kernel void wait_all(volatile __global int *count, __global int *out, int groups)\n"
    "{\n"
    "    if (get_local_id(0) != 0)\n"
    "        return;\n"
    "    atomic_inc(count);\n"
    "    while (*count < groups)\n"
    "        ;\n"
    "    out[get_group_id(0)] = *count;\n"
    "}\n";

/* Launches whose groups all run at once (hd__rt_launch_resident): where the runtime has them, as
 * many groups as it says run at once (up to 264) wait for each other, and one group more is
 * refused; elsewhere none run at once and the launch is refused. */
static void test_resident_groups_where_the_runtime_runs_them(void **state)
{
    (void)state;
    hd_context *ctx = context_on_a_device();
    if (ctx == NULL)
        return;
    hd_runtime *rt = ctx->rt;
    enum { GROUP = 64, MOST = 264 };
    hd_kernel *k = NULL;
    assert_int_equal(hd__rt_kernel(rt, ctx, resident_source, "", "wait_all", &k), HD_OK);
    size_t capacity = 0;
    assert_int_equal(hd__rt_resident_groups(rt, ctx, k, GROUP, &capacity), HD_OK);
    if (hd__rt_info(rt)->resident) {
        assert_true(capacity >= hd__rt_info(rt)->compute_units);
        int groups = (int)(capacity < MOST ? capacity : MOST), zero = 0, got[MOST];
        struct hd_device_buffer *count = NULL, *out = NULL;
        assert_int_equal(hd__rt_buffer_acquire(rt, ctx, sizeof zero, &count), HD_OK);
        assert_int_equal(hd__rt_buffer_acquire(rt, ctx, sizeof got, &out), HD_OK);
        assert_int_equal(hd__rt_upload(rt, ctx, count, &zero, sizeof zero), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 0, sizeof count->mem, &count->mem), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 1, sizeof out->mem, &out->mem), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 2, sizeof groups, &groups), HD_OK);
        assert_int_equal(
            hd__rt_launch_resident(rt, ctx, k, (const size_t[2]){(size_t)groups, 1}, GROUP), HD_OK);
        assert_int_equal(hd__rt_download(rt, ctx, out, got, (size_t)groups * sizeof *got), HD_OK);
        for (int g = 0; g < groups; g++)
            if (got[g] != groups)
                fail_msg("group %d of %d saw %d arrived", g, groups, got[g]);
        assert_int_not_equal(
            hd__rt_launch_resident(rt, ctx, k, (const size_t[2]){capacity + 1, 1}, GROUP), HD_OK);
        hd__rt_buffer_release(rt, count);
        hd__rt_buffer_release(rt, out);
    } else {
        assert_int_equal(capacity, 0);
        assert_int_equal(hd__rt_launch_resident(rt, ctx, k, (const size_t[2]){1, 1}, GROUP),
                         HD_ERR_UNSUPPORTED);
        assert_non_null(strstr(hd_context_last_error(ctx), "at once"));
    }
    print_message("%s: %zu groups of %d at once\n", hd__rt_kind_name(rt), capacity, (int)GROUP);
    hd_context_destroy(ctx);
}

/* Each launch reads what the one before wrote in other work-groups' places (launch.cl's
 * AFTER_PREVIOUS_LAUNCH() first, as every fused kernel has it). */
static const char shift_kernel[] =
    "__kernel void shift(const __global int *src, __global int *dst, int n)\n"
    "{\n"
    "    AFTER_PREVIOUS_LAUNCH();\n"
    "    const int i = (int)get_global_id(0);\n"
    "    if (i < n)\n"
    "        dst[i] = src[(i + 4099) % n] + 1;\n"
    "}\n";

/* A chain of launches each of which reads, across the whole buffer, what the one before it
 * wrote: where the runtime launches them as dependent launches (the CUDA runtime on Hopper),
 * each begins while the one before ends and must still see all of its writes; elsewhere, and
 * with $HD_CUDA_DEPENDENT_LAUNCH off, they run one after the other. Either way every value is
 * the chain's. */
static void run_dependent_chain(bool allowed)
{
    setenv("HD_CUDA_DEPENDENT_LAUNCH", allowed ? "1" : "0", 1);
    hd_context *ctx = context_on_a_device();
    unsetenv("HD_CUDA_DEPENDENT_LAUNCH");
    if (ctx == NULL)
        return;
    hd_runtime *rt = ctx->rt;
    if (!allowed)
        assert_false(hd__rt_info(rt)->dependent_launch);
    static char source[4096];
    snprintf(source, sizeof source, "%s\n%s", hd__fused_cl_launch, shift_kernel);
    enum { N = 1 << 20, GROUP = 256, LAUNCHES = 101 };
    int *host = malloc(N * sizeof *host);
    assert_non_null(host);
    for (int i = 0; i < N; i++)
        host[i] = i;
    struct hd_device_buffer *buf[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++)
        assert_int_equal(hd__rt_buffer_acquire(rt, ctx, N * sizeof *host, &buf[b]), HD_OK);
    assert_int_equal(hd__rt_upload(rt, ctx, buf[0], host, N * sizeof *host), HD_OK);
    hd_kernel *k = NULL;
    assert_int_equal(hd__rt_kernel(rt, ctx, source, "", "shift", &k), HD_OK);
    int n = N;
    for (int l = 0; l < LAUNCHES; l++) {
        assert_int_equal(hd__rt_set_arg(ctx, k, 0, sizeof buf[0]->mem, &buf[l % 2]->mem), HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 1, sizeof buf[0]->mem, &buf[(l + 1) % 2]->mem),
                         HD_OK);
        assert_int_equal(hd__rt_set_arg(ctx, k, 2, sizeof n, &n), HD_OK);
        assert_int_equal(hd__rt_launch(rt, ctx, k, (const size_t[2]){N / GROUP, 1}, GROUP), HD_OK);
    }
    assert_int_equal(hd__rt_download(rt, ctx, buf[LAUNCHES % 2], host, N * sizeof *host), HD_OK);
    for (int i = 0; i < N; i++) {
        const int want = (int)(((long)i + 4099L * LAUNCHES) % N) + LAUNCHES;
        if (host[i] != want)
            fail_msg("element %d after %d launches: %d, not %d", i, LAUNCHES, host[i], want);
    }
    print_message("%s: launches %s\n", hd__rt_kind_name(rt),
                  hd__rt_info(rt)->dependent_launch ? "dependent (griddepcontrol)"
                                                    : "one after the other");
    for (int b = 0; b < 2; b++)
        hd__rt_buffer_release(rt, buf[b]);
    free(host);
    hd_context_destroy(ctx);
}

static void test_dependent_launches_see_the_launch_before(void **state)
{
    (void)state;
    run_dependent_chain(true);
    run_dependent_chain(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rewrites_kernels_of_nvidias_opencl_compiler),
        cmocka_unit_test(test_rewrites_local_arguments_launch_registers_and_inline_asm),
        cmocka_unit_test(test_notes_the_entries_that_wait_for_the_launch_before),
        cmocka_unit_test(test_refuses_what_it_does_not_know),
        cmocka_unit_test(test_takes_parameters_up_to_its_limit),
        cmocka_unit_test(test_runtime_choice_and_its_fallbacks),
        cmocka_unit_test(test_kernel_takes_the_largest_local_memory_the_device_gives),
        cmocka_unit_test(test_clusters_where_the_runtime_runs_them),
        cmocka_unit_test(test_resident_groups_where_the_runtime_runs_them),
        cmocka_unit_test(test_dependent_launches_see_the_launch_before),
        cmocka_unit_test(test_tensor_maps_where_the_runtime_gives_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
