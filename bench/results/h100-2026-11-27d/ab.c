/* A/B timing of fused variants through the public API: a tuning cache with an exact record per
 * case makes auto run the named variant. Usage: ab CACHE_HEADER ROUNDS CASE...
 *   "gemm M N K tt [VARIANT]"         (tt: nn|nt|tn|tt)
 *   "lorab T IN OUT R [VARIANT]"      LoRA backward, default layout, with dx
 *   "lorab0 T IN OUT R [VARIANT]"     the same without dx (the rank-r products alone)
 * Prints per case the median and min per call over ROUNDS rounds of chained calls. */
#include <hd/dispatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static void fill(hd_tensor *t, size_t n)
{
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    hd_tensor_write(t, h); free(h); hd_tensor_prefetch(t);
}
static hd_tensor *mk(hd_context *ctx, int r, int c) { hd_tensor *t; if (hd_tensor_create(ctx, r, c, &t) != HD_OK) { fprintf(stderr, "create %dx%d\n", r, c); exit(1); } fill(t, (size_t)r * c); return t; }
typedef struct { hd_context *ctx; int kind; int ta, tb; hd_tensor *t[9]; } job;
static hd_status run1(job *j)
{
    hd_tensor **t = j->t;
    if (j->kind == 0) return hd_gemm(j->ctx, j->ta, j->tb, 1.0f, t[0], t[1], 0.0f, t[2]);
    if (j->kind == 3) return hd_lora_forward(j->ctx, t[0], t[1], t[2], t[3], 0.5f, t[4]);
    return hd_lora_backward(j->ctx, t[0], t[1], t[2], t[3], 0.5f, t[4], j->kind == 1 ? t[5] : NULL, t[6], t[7], false);
}
int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    int rounds = atoi(argv[2]); if (rounds > 64) rounds = 64;
    char header[16384]; size_t hl;
    { FILE *hdr = fopen(argv[1], "r"); if (!hdr) return 1; hl = fread(header, 1, sizeof header - 1, hdr); header[hl] = 0; fclose(hdr); }
    for (int c = 3; c < argc; c++) {
        /* one tuning cache and one context per case: a record per key, the case's own */
        char path[64]; snprintf(path, sizeof path, "/tmp/ab-cache-%d-%d.txt", (int)getpid(), c);
        char kind[16], var[256] = "", rec[512]; int a1, a2, a3, a4 = 0; char tt[8] = "nn";
        sscanf(argv[c], "%15s", kind);
        if (!strcmp(kind, "gemm")) {
            sscanf(argv[c], "%*s %d %d %d %7s %255[^\n]", &a1, &a2, &a3, tt, var);
            const char *prec = getenv("HD_GEMM_PRECISION"); snprintf(rec, sizeof rec, "gemm%s%s %d %d %d %s", prec && strcmp(prec, "fp32") ? "." : "", prec && strcmp(prec, "fp32") ? prec : "", a1, a2, a3, tt);
        } else {
            sscanf(argv[c], "%*s %d %d %d %d %255[^\n]", &a1, &a2, &a3, &a4, var);
            snprintf(rec, sizeof rec, "%s %d %d %d %d", strcmp(kind, "lora") ? "lora_backward" : "lora", a1, a2, a3, a4);
        }
        FILE *out = fopen(path, "w");
        fputs(header, out);
        if (*var) fprintf(out, "%s fused \"%s\" 1.0 clblast 100000.0\n", rec, var);
        else fprintf(out, "%s fused - 1.0 clblast 100000.0\n", rec);
        fclose(out);
        hd_context_options o; hd_context_options_init(&o); o.tune_cache = path;
        hd_context *ctx;
        if (hd_context_create(&ctx, &o) != HD_OK) { fprintf(stderr, "create: %s\n", hd_context_last_error(NULL)); return 1; }
        job j = {.ctx = ctx};
        int nt = 0;
        if (!strcmp(kind, "gemm")) {
            int m = a1, n = a2, k = a3; j.ta = tt[0] == 't'; j.tb = tt[1] == 't';
            j.t[0] = mk(ctx, j.ta ? k : m, j.ta ? m : k); j.t[1] = mk(ctx, j.tb ? n : k, j.tb ? k : n); j.t[2] = mk(ctx, m, n); nt = 3;
        } else {
            int T = a1, in = a2, o2 = a3, r = a4; j.kind = !strcmp(kind, "lora") ? 3 : strcmp(kind, "lorab0") ? 1 : 2;
            j.t[0] = mk(ctx, T, in); j.t[1] = mk(ctx, in, o2); j.t[2] = mk(ctx, in, r); j.t[3] = mk(ctx, r, o2);
            j.t[4] = mk(ctx, T, o2); j.t[5] = mk(ctx, T, in); j.t[6] = mk(ctx, in, r); j.t[7] = mk(ctx, r, o2); nt = 8;
        }
        hd_status st = HD_OK;
        for (int w = 0; w < 3 && st == HD_OK; w++) st = run1(&j);
        if (st != HD_OK || hd_sync(ctx) != HD_OK) { printf("%s: failed: %s\n", argv[c], hd_context_last_error(ctx)); for (int i = 0; i < nt; i++) hd_tensor_destroy(j.t[i]); hd_context_destroy(ctx); remove(path); continue; }
        if (hd_context_last_backend(ctx) != HD_BACKEND_FUSED) printf("%s: ran on %s: %s\n", argv[c], hd_backend_name(hd_context_last_backend(ctx)), hd_context_last_error(ctx));
        double t1 = now(); run1(&j); hd_sync(ctx); t1 = now() - t1;
        int chain = (int)(0.02 / t1); if (chain < 2) chain = 2; if (chain > 200) chain = 200;
        double s[64];
        for (int q = 0; q < rounds; q++) {
            double t0 = now();
            for (int i = 0; i < chain; i++) run1(&j);
            hd_sync(ctx);
            s[q] = (now() - t0) / chain;
        }
        qsort(s, rounds, sizeof s[0], cmp);
        printf("%-52s %-12s median %8.1f us  min %8.1f us  (%d x %d)\n", argv[c], hd_backend_name(hd_context_last_backend(ctx)), s[rounds / 2] * 1e6, s[0] * 1e6, rounds, chain);
        fflush(stdout);
        for (int i = 0; i < nt; i++) hd_tensor_destroy(j.t[i]);
        hd_context_destroy(ctx); remove(path);
    }
    return 0;
}
