/* One LoRA forward pass, y = x*W + scale*(x*A)*B, on whichever backend suits this machine. */
#include <stdio.h>

#include <hd/dispatch.h>

enum { T = 2, IN = 4, OUT = 3, R = 2 }; /* tokens, input width, output width, LoRA rank */
static const float x[T * IN] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
static const float w[IN * OUT] = {0.1f, 0.2f, 0.3f, -0.1f, 0, 0.1f, 0.2f, -0.2f, 0.4f, 0, 0.3f, 0};
static const float a[IN * R] = {0.5f, -0.5f, 0.25f, 0, 0, 0.25f, -0.25f, 0.5f};
static const float b[R * OUT] = {0.1f, 0, -0.1f, 0.2f, 0.2f, 0};
static const float scale = 2.0f;

/* A tensor holding data, or NULL on failure: the operation then reports the NULL tensor. */
static hd_tensor *tensor(hd_context *ctx, size_t rows, size_t cols, const float *data)
{
    hd_tensor *t = NULL;
    if (hd_tensor_create(ctx, rows, cols, &t) == HD_OK && data != NULL &&
        hd_tensor_write(t, data) != HD_OK) {
        hd_tensor_destroy(t);
        t = NULL;
    }
    return t;
}

int main(void)
{
    float y[T * OUT];
    hd_context *ctx = NULL;
    hd_status s = hd_context_create(&ctx, NULL); /* NULL: default options */
    if (s != HD_OK) {
        fprintf(stderr, "hd_context_create: %s\n", hd_context_last_error(NULL));
        return 1;
    }
    hd_tensor *tx = tensor(ctx, T, IN, x), *tw = tensor(ctx, IN, OUT, w);
    hd_tensor *ta = tensor(ctx, IN, R, a), *tb = tensor(ctx, R, OUT, b);
    hd_tensor *ty = tensor(ctx, T, OUT, NULL);
    s = hd_lora_forward(ctx, tx, tw, ta, tb, scale, ty);
    if (s == HD_OK)
        s = hd_tensor_read(ty, y); /* waits for the result */
    if (s != HD_OK)
        fprintf(stderr, "LoRA forward failed: %s\n", hd_context_last_error(ctx));
    for (int i = 0; s == HD_OK && i < T * OUT; i++)
        printf("y[%d][%d] = %.6f\n", i / OUT, i % OUT, (double)y[i]);
    printf("ran on: %s\n", hd_backend_name(hd_context_last_backend(ctx)));

    hd_tensor_destroy(tx);
    hd_tensor_destroy(tw);
    hd_tensor_destroy(ta);
    hd_tensor_destroy(tb);
    hd_tensor_destroy(ty);
    hd_context_destroy(ctx);
    return s == HD_OK ? 0 : 1;
}
