/*
 * In front of every fused program: how a kernel orders itself after the launch before it.
 *
 * Every kernel's first statement is AFTER_PREVIOUS_LAUNCH(). Where the runtime builds with
 * HD_DEPENDENT_LAUNCH = 1 (the CUDA runtime on sm_90 and later, which then launches each such
 * kernel as a programmatic dependent launch: backends/cuda/runtime.c), a launch may begin, its
 * groups placed on the multiprocessors, while the launch before it in the queue is still
 * running; it waits here until that launch has finished and its writes are visible
 * (griddepcontrol.wait), then lets the launch after it begin likewise
 * (griddepcontrol.launch_dependents). Nothing before it reads or writes global memory, so a
 * kernel sees what every launch before it wrote, as in order; what it saves is the gap
 * between one launch's last group and the next one's first. Elsewhere (OpenCL, PoCL, older
 * GPUs) launches run one after the other and it is nothing.
 */
#ifndef HD_DEPENDENT_LAUNCH
#define HD_DEPENDENT_LAUNCH 0
#endif
#if HD_DEPENDENT_LAUNCH
#define AFTER_PREVIOUS_LAUNCH() \
    asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define AFTER_PREVIOUS_LAUNCH()
#endif
