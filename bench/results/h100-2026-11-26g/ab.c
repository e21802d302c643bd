/* A/B timing of tiled GEMM variants through the public API: a tuning cache with an exact
 * record per case makes auto run the named variant. Usage: ab CACHE_HEADER ROUNDS CASE...
 * CASE = "M N K tt VARIANT" (tt: nn|nt|tn|tt). Prints per case the median and min per call. */
#include <hd/dispatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void *a, const void *b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    int rounds = atoi(argv[2]);
    char path[64]; snprintf(path, sizeof path, "/tmp/ab-cache-%d.txt", (int)getpid());
    FILE *out = fopen(path, "w"), *hdr = fopen(argv[1], "r");
    char line[4096];
    while (fgets(line, sizeof line, hdr)) if (strncmp(line, "gemm", 4) && strncmp(line, "lora", 4) && strncmp(line, "soft", 4) && strncmp(line, "layer", 5) && strncmp(line, "rms", 3)) fputs(line, out);
    fclose(hdr);
    for (int c = 3; c < argc; c++) {
        int m, n, k; char tt[8], var[256] = "";
        if (!strncmp(argv[c], "lora ", 5)) {
            int t, in, o, r; sscanf(argv[c] + 5, "%d %d %d %d %255[^\n]", &t, &in, &o, &r, var);
            if (*var) fprintf(out, "lora %d %d %d %d fused \"%s\" 1.0 clblast 100000.0\n", t, in, o, r, var); else fprintf(out, "lora %d %d %d %d fused - 1.0 clblast 100000.0\n", t, in, o, r);
            continue;
        }
        sscanf(argv[c], "%d %d %d %7s %255[^\n]", &m, &n, &k, tt, var);
        const char *prec = getenv("HD_GEMM_PRECISION");
        if (*var) fprintf(out, "gemm%s%s %d %d %d %s fused \"%s\" 1.0 clblast 100000.0\n", prec ? "." : "", prec ? prec : "", m, n, k, tt, var); else fprintf(out, "gemm%s%s %d %d %d %s fused - 1.0 clblast 100000.0\n", prec ? "." : "", prec ? prec : "", m, n, k, tt);
    }
    fclose(out);
    hd_context_options o; hd_context_options_init(&o); o.tune_cache = path;
    hd_context *ctx; if (hd_context_create(&ctx, &o) != HD_OK) { fprintf(stderr, "create: %s\n", hd_context_last_error(NULL)); return 1; }
    for (int c = 3; c < argc; c++) {
        int m, n, k; char tt[8], var[256] = "";
        if (!strncmp(argv[c], "lora ", 5)) {
            int t, in, o, r; sscanf(argv[c] + 5, "%d %d %d %d %255[^\n]", &t, &in, &o, &r, var);
            hd_tensor *x, *w, *a, *b, *y;
            hd_tensor_create(ctx, t, in, &x); hd_tensor_create(ctx, in, o, &w); hd_tensor_create(ctx, in, r, &a); hd_tensor_create(ctx, r, o, &b); hd_tensor_create(ctx, t, o, &y);
            size_t big = (size_t)in * o + (size_t)t * in + (size_t)r * (in + o) + 64;
            float *h = malloc(big * 4); for (size_t i = 0; i < big; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            hd_tensor_write(x, h); hd_tensor_write(w, h); hd_tensor_write(a, h); hd_tensor_write(b, h); free(h);
            hd_tensor_prefetch(x); hd_tensor_prefetch(w); hd_tensor_prefetch(a); hd_tensor_prefetch(b); hd_tensor_prefetch(y);
            for (int i = 0; i < 3; i++) hd_lora_forward(ctx, x, w, a, b, 0.5f, y);
            if (hd_sync(ctx) != HD_OK) { fprintf(stderr, "%s\n", hd_context_last_error(ctx)); return 1; }
            double s[64]; int rr = rounds > 64 ? 64 : rounds, chain = 200;
            for (int q = 0; q < rr; q++) {
                double t0 = now();
                for (int i = 0; i < chain; i++) hd_lora_forward(ctx, x, w, a, b, 0.5f, y);
                hd_sync(ctx);
                s[q] = (now() - t0) / chain;
            }
            qsort(s, rr, sizeof s[0], cmp);
            printf("%-28s %-40s %-14s median %8.1f us  min %8.1f us  (%d x %d)\n", argv[c], var, hd_backend_name(hd_context_last_backend(ctx)), s[rr / 2] * 1e6, s[0] * 1e6, rr, chain);
            hd_tensor_destroy(x); hd_tensor_destroy(w); hd_tensor_destroy(a); hd_tensor_destroy(b); hd_tensor_destroy(y);
            continue;
        }
        sscanf(argv[c], "%d %d %d %7s %255[^\n]", &m, &n, &k, tt, var);
        bool ta = tt[0] == 't', tb = tt[1] == 't';
        hd_tensor *a, *b, *cc;
        hd_tensor_create(ctx, ta ? k : m, ta ? m : k, &a); hd_tensor_create(ctx, tb ? n : k, tb ? k : n, &b); hd_tensor_create(ctx, m, n, &cc);
        size_t big = (size_t)(m > n ? m : n) * (k > n ? k : n);
        float *h = malloc(big * 4 + (size_t)m * k * 4 + 64); for (size_t i = 0; i < big + (size_t)m * k; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        hd_tensor_write(a, h); hd_tensor_write(b, h); free(h);
        hd_tensor_prefetch(a); hd_tensor_prefetch(b); hd_tensor_prefetch(cc);
        for (int w = 0; w < 3; w++) hd_gemm(ctx, ta, tb, 1.0f, a, b, 0.0f, cc);
        if (hd_sync(ctx) != HD_OK) { fprintf(stderr, "%s\n", hd_context_last_error(ctx)); return 1; }
        double t1 = now(); hd_gemm(ctx, ta, tb, 1.0f, a, b, 0.0f, cc); hd_sync(ctx); t1 = now() - t1;
        int chain = (int)(0.02 / t1); if (chain < 2) chain = 2; if (chain > 200) chain = 200;
        double s[64]; if (rounds > 64) rounds = 64;
        for (int r = 0; r < rounds; r++) {
            double t0 = now();
            for (int i = 0; i < chain; i++) hd_gemm(ctx, ta, tb, 1.0f, a, b, 0.0f, cc);
            hd_sync(ctx);
            s[r] = (now() - t0) / chain;
        }
        qsort(s, rounds, sizeof s[0], cmp);
        printf("%-28s %-40s %-14s median %8.1f us  min %8.1f us  (%d x %d)\n", argv[c], var, hd_backend_name(hd_context_last_backend(ctx)), s[rounds / 2] * 1e6, s[0] * 1e6, rounds, chain);
        hd_tensor_destroy(a); hd_tensor_destroy(b); hd_tensor_destroy(cc);
    }
    hd_context_destroy(ctx); remove(path);
    return 0;
}
