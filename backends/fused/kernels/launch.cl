/*
 * In front of every fused program: how a kernel orders itself after the launch before it.
 * Every kernel's first statement is one of the three macros below (tests/check_kernels.sh
 * checks it).
 */
#ifndef HD_DEPENDENT_LAUNCH
#define HD_DEPENDENT_LAUNCH 0 /* 1: the runtime's launches may depend programmatically */
#endif

/*
 * AFTER_PREVIOUS_LAUNCH(): where the runtime builds with HD_DEPENDENT_LAUNCH = 1 (the CUDA
 * runtime on sm_90 and later, which then launches each such kernel as a programmatic
 * dependent launch: backends/cuda/runtime.c), a launch may begin, its groups placed on the
 * multiprocessors, while the launch before it in the queue is still running; it waits here
 * until that launch has finished and its writes are visible (griddepcontrol.wait), then lets
 * the launch after it begin likewise (griddepcontrol.launch_dependents). Nothing before it
 * reads or writes global memory, so a kernel sees what every launch before it wrote, as in
 * order; what it saves is the gap between one launch's last group and the next one's first.
 * Elsewhere (OpenCL, PoCL, older GPUs) launches run one after the other and it is nothing.
 */
#if HD_DEPENDENT_LAUNCH
#define AFTER_PREVIOUS_LAUNCH() \
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define AFTER_PREVIOUS_LAUNCH()
#endif

/*
 * AFTER_PREVIOUS_LAUNCH_ENDS(): nothing, so that the runtime launches the kernel as any launch,
 * once the one before it has finished. The GEMM engine's tile kernels (gemm_tile, gemm_mma,
 * gemm_wgmma, gemm_wgmma_tma) take it: long launches of one or a few waves of large tiles,
 * which gain nothing from beginning early and, as dependent launches, ran the LoRA backward's
 * products slower (BENCHMARKS.md, "Dependent launches").
 */
#define AFTER_PREVIOUS_LAUNCH_ENDS()

/*
 * READS_AHEAD_OF_PREVIOUS_LAUNCH(): nothing; it opens a kernel that reads global memory before
 * its AFTER_PREVIOUS_LAUNCH(), which must follow, so that as a dependent launch its loads are in
 * flight while the launch before it ends. Only memory that the launch before it does not write
 * may be read ahead, and the host, which queues the two, must know that one (adamw.cl's update
 * after the gradient norm's launch). Every launch before that one has finished by then: a
 * dependent launch begins only once every group of the launch before it has passed its own
 * AFTER_PREVIOUS_LAUNCH(), whose wait returns once the launch before that has finished.
 */
#define READS_AHEAD_OF_PREVIOUS_LAUNCH()
