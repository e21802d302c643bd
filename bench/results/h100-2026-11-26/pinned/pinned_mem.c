/* Probe: does pinned host memory (HD_PINNED) take device memory? Creates N tensors of 1 GiB,
 * writes them from the host (which takes their host copies), then prints nvidia-smi's used
 * memory. */
#include <stdio.h>
#include <stdlib.h>
#include <hd/dispatch.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    hd_context *ctx;
    if (hd_context_create(&ctx, NULL) != HD_OK) {
        fprintf(stderr, "context: %s\n", hd_context_last_error(NULL));
        return 1;
    }
    size_t rows = 16384, cols = 16384; /* 1 GiB */
    float *src = calloc(rows * cols, sizeof(float));
    hd_tensor *t[16];
    system("nvidia-smi --query-gpu=memory.used --format=csv,noheader");
    for (int i = 0; i < n && i < 16; i++) {
        hd_tensor_create(ctx, rows, cols, &t[i]);
        hd_status s = hd_tensor_write(t[i], src);
        if (s != HD_OK)
            fprintf(stderr, "write %d: %s\n", i, hd_context_last_error(ctx));
    }
    printf("after %d GiB of host copies: ", n);
    fflush(stdout);
    system("nvidia-smi --query-gpu=memory.used --format=csv,noheader");
    for (int i = 0; i < n && i < 16; i++)
        hd_tensor_destroy(t[i]);
    hd_context_destroy(ctx);
    free(src);
    return 0;
}
