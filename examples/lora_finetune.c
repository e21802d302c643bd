/*
 * LoRA fine-tuning with the library's forward and backward ops: a frozen random W, LoRA
 * factors A (random) and B (zeros, so training starts from W alone), and an RMS norm, trained
 * by plain SGD to match a fixed target. Per step:
 *
 *   y = x*W + scale*(x*A)*B           hd_lora_forward
 *   z = rms_norm(y) * g               hd_rms_norm
 *   loss = sum((z - target)^2) / (2N) on the host, dz = (z - target) / N
 *   dy = d loss / dy                  hd_rms_norm_backward (in place: dy is dz's tensor)
 *   dA, dB                            hd_lora_backward (dx not wanted: the first layer)
 *   A -= lr*dA, B -= lr*dB            on the host
 *
 * The target is what the same model gives with other LoRA factors, so the loss can fall to
 * zero. Prints the loss per step; exits with 1 if it did not fall to a tenth of the first.
 * Runs on whatever backend suits this machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <hd/dispatch.h>

enum { T = 32, IN = 64, OUT = 48, R = 4, STEPS = 40 };
static const float scale = 2.0f, lr = 2.0f, eps = 1e-5f;

static float frand(unsigned *state) /* uniform in [-1, 1), reproducible */
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 8388608.0f - 1.0f;
}

static void fill(float *p, size_t n, float amplitude, unsigned *state)
{
    for (size_t i = 0; i < n; i++)
        p[i] = amplitude * frand(state);
}

typedef struct model {
    hd_context *ctx;
    hd_tensor *x, *w, *a, *b, *g, *y, *z, *dz, *da, *db;
} model;

static hd_status tensor(model *m, size_t rows, size_t cols, const float *data, hd_tensor **t)
{
    hd_status s = hd_tensor_create(m->ctx, rows, cols, t);
    if (s == HD_OK && data != NULL)
        s = hd_tensor_write(*t, data);
    return s;
}

/* z = rms_norm(x*W + scale*(x*A)*B) * g into host memory. */
static hd_status forward(model *m, float *z)
{
    hd_status s = hd_lora_forward(m->ctx, m->x, m->w, m->a, m->b, scale, m->y);
    if (s == HD_OK)
        s = hd_rms_norm(m->ctx, m->y, m->g, eps, m->z);
    if (s == HD_OK)
        s = hd_tensor_read(m->z, z);
    return s;
}

/* One SGD step on p (n floats) with gradient tensor grad. */
static hd_status sgd(hd_tensor *p, hd_tensor *grad, size_t n, float *buf, float *gbuf)
{
    hd_status s = hd_tensor_read(p, buf);
    if (s == HD_OK)
        s = hd_tensor_read(grad, gbuf);
    for (size_t i = 0; s == HD_OK && i < n; i++)
        buf[i] -= lr * gbuf[i];
    return s == HD_OK ? hd_tensor_write(p, buf) : s;
}

/* The loss of z against target, and its gradient in dz. */
static double loss_and_gradient(const float *z, const float *target, float *dz)
{
    double loss = 0.0;
    for (size_t i = 0; i < T * OUT; i++) {
        double d = (double)z[i] - target[i];
        loss += d * d / (2.0 * T * OUT);
        dz[i] = (float)(d / (T * OUT));
    }
    return loss;
}

static hd_status train(model *m, float *buf, double *first, double *last)
{
    float *target = buf, *z = buf + T * OUT, *dz = buf + 2 * T * OUT;
    float *pa = buf + 3 * T * OUT, *ga = pa + IN * R, *pb = ga + IN * R, *gb = pb + R * OUT;
    unsigned state = 12345u;
    fill(pa, IN * R, 0.3f, &state); /* other factors give the target */
    fill(pb, R * OUT, 0.3f, &state);
    hd_status s = hd_tensor_write(m->b, pb);
    if (s == HD_OK)
        s = hd_tensor_write(m->a, pa);
    if (s == HD_OK)
        s = forward(m, target);
    fill(pa, IN * R, 0.3f, &state); /* the factors to train: A random, B zero */
    for (size_t i = 0; i < R * OUT; i++)
        pb[i] = 0.0f;
    if (s == HD_OK)
        s = hd_tensor_write(m->a, pa);
    if (s == HD_OK)
        s = hd_tensor_write(m->b, pb);
    for (int step = 0; s == HD_OK && step < STEPS; step++) {
        s = forward(m, z);
        double loss = loss_and_gradient(z, target, dz);
        if (step == 0)
            *first = loss;
        *last = loss;
        printf("step %2d  loss %.6f\n", step, loss);
        if (s == HD_OK)
            s = hd_tensor_write(m->dz, dz);
        if (s == HD_OK) /* dy replaces dz in its own tensor */
            s = hd_rms_norm_backward(m->ctx, m->y, m->g, m->dz, eps, m->dz, NULL);
        if (s == HD_OK)
            s = hd_lora_backward(m->ctx, m->x, m->w, m->a, m->b, scale, m->dz, NULL, m->da, m->db,
                                 false);
        if (s == HD_OK)
            s = sgd(m->a, m->da, IN * R, pa, ga);
        if (s == HD_OK)
            s = sgd(m->b, m->db, R * OUT, pb, gb);
    }
    return s;
}

int main(void)
{
    static float host[IN * OUT + T * IN + OUT];
    static float buf[3 * T * OUT + 2 * IN * R + 2 * R * OUT];
    model m = {0};
    hd_status s = hd_context_create(&m.ctx, NULL);
    if (s != HD_OK) {
        fprintf(stderr, "hd_context_create: %s\n", hd_context_last_error(NULL));
        return 1;
    }
    unsigned state = 7u;
    float *w = host, *x = host + IN * OUT, *g = x + T * IN;
    fill(w, IN * OUT, 0.2f, &state);
    fill(x, T * IN, 1.0f, &state);
    for (size_t j = 0; j < OUT; j++)
        g[j] = 1.0f + 0.25f * frand(&state);
    hd_tensor **all[] = {&m.x, &m.w, &m.a, &m.b, &m.g, &m.y, &m.z, &m.dz, &m.da, &m.db};
    const size_t shape[][2] = {{T, IN},  {IN, OUT}, {IN, R},  {R, OUT}, {1, OUT},
                               {T, OUT}, {T, OUT},  {T, OUT}, {IN, R},  {R, OUT}};
    const float *data[] = {x, w, NULL, NULL, g, NULL, NULL, NULL, NULL, NULL};
    for (size_t i = 0; i < 10 && s == HD_OK; i++)
        s = tensor(&m, shape[i][0], shape[i][1], data[i], all[i]);
    double first = 0.0, last = 0.0;
    if (s == HD_OK)
        s = train(&m, buf, &first, &last);
    if (s != HD_OK)
        fprintf(stderr, "failed: %s (%s)\n", hd_status_str(s), hd_context_last_error(m.ctx));
    else
        printf("loss %.6f -> %.6f; ran on: %s\n", first, last,
               hd_backend_name(hd_context_last_backend(m.ctx)));
    for (size_t i = 0; i < 10; i++)
        hd_tensor_destroy(*all[i]);
    hd_context_destroy(m.ctx);
    return s == HD_OK && isfinite(last) && last < 0.1 * first ? 0 : 1;
}
