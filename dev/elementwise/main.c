/* The harness's entry: every suite, then PASS or FAIL. Run from the worktree's root. */
#include <stdio.h>

#include "dev/elementwise/harness.h"

hd_cpu_pool *pools[3];

int main(void)
{
    cl_open();
    pools[0] = NULL;
    if (hd__cpu_pool_create(2, &pools[1]) != HD_OK || hd__cpu_pool_create(3, &pools[2]) != HD_OK)
        return 2;
    int failed = check_elementwise();
    failed += check_rope();
    failed += check_embedding();
    hd__cpu_pool_destroy(pools[1]);
    hd__cpu_pool_destroy(pools[2]);
    cl_close();
    printf("%s: %d checks failed\n", failed ? "FAIL" : "PASS", failed);
    return failed ? 1 : 0;
}
