/* CLBlast GEMM parameter sets: names, legality, text form, shipped values, the search space. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/clblast/clblast.h"
#include "core/error.h"

typedef struct field {
    const char *name;
    size_t offset; /* in hd_clblast_params */
} field;

#define XG(f) offsetof(hd_clblast_params, xgemm.f)
#define XD(f) offsetof(hd_clblast_params, direct.f)

/* In CLBlast's order of each kernel's database entry (alphabetical). */
static const field xgemm_fields[] = {
    {"GEMMK", XG(gemmk)}, {"KREG", XG(kreg)},   {"KWG", XG(kwg)}, {"KWI", XG(kwi)},
    {"MDIMA", XG(mdima)}, {"MDIMC", XG(mdimc)}, {"MWG", XG(mwg)}, {"NDIMB", XG(ndimb)},
    {"NDIMC", XG(ndimc)}, {"NWG", XG(nwg)},     {"SA", XG(sa)},   {"SB", XG(sb)},
    {"STRM", XG(strm)},   {"STRN", XG(strn)},   {"VWM", XG(vwm)}, {"VWN", XG(vwn)},
};
static const field direct_fields[] = {
    {"KWID", XD(kwid)},     {"MDIMAD", XD(mdimad)}, {"MDIMCD", XD(mdimcd)}, {"NDIMBD", XD(ndimbd)},
    {"NDIMCD", XD(ndimcd)}, {"PADA", XD(pada)},     {"PADB", XD(padb)},     {"VWMD", XD(vwmd)},
    {"VWND", XD(vwnd)},     {"WGD", XD(wgd)},
};
static const field routine_fields[] = {
    {"XGEMM_MIN_INDIRECT_SIZE", offsetof(hd_clblast_params, min_indirect_size)},
};

static const struct {
    const char *name;
    const field *fields;
    size_t count;
} kernels[HD_CLBLAST_KERNEL_COUNT] = {
    [HD_CLBLAST_XGEMM] = {"Xgemm", xgemm_fields, sizeof xgemm_fields / sizeof xgemm_fields[0]},
    [HD_CLBLAST_XGEMM_DIRECT] = {"XgemmDirect", direct_fields,
                                 sizeof direct_fields / sizeof direct_fields[0]},
    [HD_CLBLAST_GEMM_ROUTINE] = {"GemmRoutine", routine_fields, 1},
};

/* Beyond 4096 the indirect path would serve only problems of more than 68 GFLOP; the limit also
 * keeps the verification of the indirect path (a GEMM of just over this size cubed) bounded. */
#define MAX_MIN_INDIRECT_SIZE 4096u

static size_t *slot(hd_clblast_params *p, const field *f)
{
    return (size_t *)((char *)p + f->offset);
}

static size_t value(const hd_clblast_params *p, const field *f)
{
    return *(const size_t *)((const char *)p + f->offset);
}

const char *hd__clblast_kernel_name(hd_clblast_kernel k)
{
    return (unsigned)k < HD_CLBLAST_KERNEL_COUNT ? kernels[k].name : "unknown";
}

/* Names and values of kernel k in CLBlast's order, for CLBlastOverrideParameters. */
size_t hd__clblast_kernel_fields(hd_clblast_kernel k, const char **names, size_t *values,
                                 const hd_clblast_params *p)
{
    for (size_t i = 0; i < kernels[k].count; i++) {
        names[i] = kernels[k].fields[i].name;
        values[i] = value(p, &kernels[k].fields[i]);
    }
    return kernels[k].count;
}

/* ---- legality ---- */

/* CLBlast compares the compiled kernel's local memory with the device's, and compilers add some
 * of their own (a set using exactly the H100's 48 KiB was refused): keep this much free. */
#define LOCAL_HEADROOM 1024

static bool pow2_upto(size_t v, size_t max)
{
    return v >= 1 && v <= max && (v & (v - 1)) == 0;
}

#define RULE(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf(why, cap, __VA_ARGS__);                                                       \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static bool multiple(size_t x, size_t of)
{
    return of != 0 && x % of == 0;
}

static bool xgemm_legal(const hd_clblast_xgemm *x, const hd_clblast_device *dev, char *why,
                        size_t cap)
{
    RULE(x->gemmk <= 1, "Xgemm: GEMMK must be 0 or 1, not %zu", x->gemmk);
    RULE(x->sa <= 1 && x->sb <= 1 && x->strm <= 1 && x->strn <= 1,
         "Xgemm: SA, SB, STRM and STRN are 0 or 1");
    RULE(pow2_upto(x->vwm, 16) && pow2_upto(x->vwn, 16),
         "Xgemm: VWM and VWN must be 1, 2, 4, 8 or 16 (got %zu, %zu)", x->vwm, x->vwn);
    RULE(x->kwg >= 1 && x->kwi >= 1 && x->mwg >= 1 && x->nwg >= 1 && x->mdimc >= 1 &&
             x->ndimc >= 1 && x->mdima >= 1 && x->ndimb >= 1 && x->kreg >= 1,
         "Xgemm: tile sizes and work-group dimensions must be >= 1");
    RULE(multiple(x->kwg, x->kwi), "Xgemm: KWG=%zu is not a multiple of KWI=%zu", x->kwg, x->kwi);
    RULE(multiple(x->mwg, x->mdimc * x->vwm), "Xgemm: MWG=%zu is not a multiple of MDIMC*VWM=%zu",
         x->mwg, x->mdimc * x->vwm);
    RULE(multiple(x->nwg, x->ndimc * x->vwn), "Xgemm: NWG=%zu is not a multiple of NDIMC*VWN=%zu",
         x->nwg, x->ndimc * x->vwn);
    RULE(multiple(x->mwg, x->mdima * x->vwm), "Xgemm: MWG=%zu is not a multiple of MDIMA*VWM=%zu",
         x->mwg, x->mdima * x->vwm);
    RULE(multiple(x->nwg, x->ndimb * x->vwn), "Xgemm: NWG=%zu is not a multiple of NDIMB*VWN=%zu",
         x->nwg, x->ndimb * x->vwn);
    size_t threads = x->mdimc * x->ndimc;
    if (x->gemmk == 0) {
        /* The work-group reloads A as a KDIMA×MDIMA grid and B as KDIMB×NDIMB. */
        RULE(multiple(threads, x->mdima) && multiple(threads, x->ndimb),
             "Xgemm: MDIMC*NDIMC=%zu is not a multiple of MDIMA=%zu and NDIMB=%zu", threads,
             x->mdima, x->ndimb);
        RULE(multiple(x->kwg, threads / x->mdima) && multiple(x->kwg, threads / x->ndimb),
             "Xgemm: KWG=%zu is not a multiple of KDIMA=%zu and KDIMB=%zu", x->kwg,
             threads / x->mdima, threads / x->ndimb);
        RULE(x->kreg == 1, "Xgemm: KREG must be 1 with GEMMK=0");
    } else {
        RULE(x->kwg == 1 && x->kwi == 1, "Xgemm: GEMMK=1 takes KWG=1 and KWI=1");
        RULE(x->mdima == x->mdimc && x->ndimb == x->ndimc,
             "Xgemm: GEMMK=1 takes MDIMA=MDIMC and NDIMB=NDIMC");
        RULE(x->sa == 0 && x->sb == 0 && x->strm == 0 && x->strn == 0,
             "Xgemm: GEMMK=1 takes SA=SB=STRM=STRN=0");
        RULE(multiple(x->kreg, x->vwn), "Xgemm: KREG=%zu is not a multiple of VWN=%zu", x->kreg,
             x->vwn);
    }
    RULE(threads <= dev->max_group_size && x->mdimc <= dev->max_item[0] &&
             x->ndimc <= dev->max_item[1],
         "Xgemm: a %zu x %zu work-group exceeds the device's limit of %zu work-items", x->mdimc,
         x->ndimc, dev->max_group_size);
    size_t local = 4 * (x->sa * x->kwg * x->mwg + x->sb * x->kwg * x->nwg);
    RULE(local + LOCAL_HEADROOM <= dev->local_mem_bytes,
         "Xgemm: %zu bytes of local memory exceed the device's %zu", local, dev->local_mem_bytes);
    return true;
}

static bool direct_legal(const hd_clblast_xgemm_direct *d, const hd_clblast_device *dev, char *why,
                         size_t cap)
{
    RULE(d->pada <= 1 && d->padb <= 1, "XgemmDirect: PADA and PADB are 0 or 1");
    RULE(pow2_upto(d->vwmd, 16) && pow2_upto(d->vwnd, 16),
         "XgemmDirect: VWMD and VWND must be 1, 2, 4, 8 or 16 (got %zu, %zu)", d->vwmd, d->vwnd);
    RULE(d->wgd >= 1 && d->kwid >= 1 && d->mdimcd >= 1 && d->ndimcd >= 1 && d->mdimad >= 1 &&
             d->ndimbd >= 1,
         "XgemmDirect: tile sizes and work-group dimensions must be >= 1");
    RULE(multiple(d->wgd, d->kwid), "XgemmDirect: WGD=%zu is not a multiple of KWID=%zu", d->wgd,
         d->kwid);
    RULE(multiple(d->wgd, d->mdimcd * d->vwmd) && multiple(d->wgd, d->mdimad * d->vwmd),
         "XgemmDirect: WGD=%zu is not a multiple of MDIMCD*VWMD and MDIMAD*VWMD", d->wgd);
    RULE(multiple(d->wgd, d->ndimcd * d->vwnd) && multiple(d->wgd, d->ndimbd * d->vwnd),
         "XgemmDirect: WGD=%zu is not a multiple of NDIMCD*VWND and NDIMBD*VWND", d->wgd);
    size_t threads = d->mdimcd * d->ndimcd;
    RULE(multiple(threads, d->mdimad) && multiple(threads, d->ndimbd),
         "XgemmDirect: MDIMCD*NDIMCD=%zu is not a multiple of MDIMAD and NDIMBD", threads);
    RULE(multiple(d->wgd, threads / d->mdimad) && multiple(d->wgd, threads / d->ndimbd),
         "XgemmDirect: WGD=%zu is not a multiple of KDIMAD and KDIMBD", d->wgd);
    RULE(threads <= dev->max_group_size && d->mdimcd <= dev->max_item[0] &&
             d->ndimcd <= dev->max_item[1],
         "XgemmDirect: a %zu x %zu work-group exceeds the device's limit of %zu work-items",
         d->mdimcd, d->ndimcd, dev->max_group_size);
    size_t local = 4 * (d->wgd * (d->wgd + d->pada) + d->wgd * (d->wgd + d->padb));
    RULE(local + LOCAL_HEADROOM <= dev->local_mem_bytes,
         "XgemmDirect: %zu bytes of local memory exceed the device's %zu", local,
         dev->local_mem_bytes);
    return true;
}

bool hd__clblast_params_legal(const hd_clblast_params *p, const hd_clblast_device *dev, char *why,
                              size_t cap)
{
    if (p->has[HD_CLBLAST_XGEMM] && !xgemm_legal(&p->xgemm, dev, why, cap))
        return false;
    if (p->has[HD_CLBLAST_XGEMM_DIRECT] && !direct_legal(&p->direct, dev, why, cap))
        return false;
    RULE(!p->has[HD_CLBLAST_GEMM_ROUTINE] || p->min_indirect_size <= MAX_MIN_INDIRECT_SIZE,
         "GemmRoutine: XGEMM_MIN_INDIRECT_SIZE=%zu is above %u", p->min_indirect_size,
         MAX_MIN_INDIRECT_SIZE);
    return true;
}

/* ---- text form ---- */

int hd__clblast_params_format(const hd_clblast_params *p, char *buf, size_t cap)
{
    size_t used = 0;
    int total = 0;
    if (cap > 0)
        buf[0] = '\0';
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        if (!p->has[k])
            continue;
        for (size_t i = 0; i < kernels[k].count; i++) {
            const field *f = &kernels[k].fields[i];
            int n = snprintf(used < cap ? buf + used : NULL, used < cap ? cap - used : 0,
                             "%s%s=%zu", total > 0 ? " " : "", f->name, value(p, f));
            total += n;
            used += (size_t)n;
        }
    }
    return total;
}

static const field *find_field(const char *name, size_t len, hd_clblast_kernel *kernel)
{
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++)
        for (size_t i = 0; i < kernels[k].count; i++)
            if (strlen(kernels[k].fields[i].name) == len &&
                strncmp(kernels[k].fields[i].name, name, len) == 0) {
                *kernel = (hd_clblast_kernel)k;
                return &kernels[k].fields[i];
            }
    return NULL;
}

hd_status hd__clblast_params_parse(hd_context *ctx, const char *variant, hd_clblast_params *out)
{
    hd_clblast_params p;
    memset(&p, 0, sizeof p);
    bool seen[HD_CLBLAST_KERNEL_COUNT][16] = {{false}};
    const char *s = variant != NULL ? variant : "";
    while (*s != '\0') {
        if (*s == ' ') {
            s++;
            continue;
        }
        const char *eq = strchr(s, '=');
        const char *end = strchr(s, ' ');
        if (end == NULL)
            end = s + strlen(s);
        if (eq == NULL || eq > end)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "CLBlast variant '%.200s': '%.*s' is not NAME=value", variant,
                             (int)(end - s), s);
        hd_clblast_kernel k;
        const field *f = find_field(s, (size_t)(eq - s), &k);
        if (f == NULL)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "CLBlast variant '%.200s': unknown parameter '%.*s'", variant,
                             (int)(eq - s), s);
        size_t idx = (size_t)(f - kernels[k].fields);
        if (seen[k][idx])
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "CLBlast variant '%.200s': parameter %s given twice", variant,
                             f->name);
        char *stop;
        errno = 0;
        unsigned long long v = strtoull(eq + 1, &stop, 10);
        if (stop == eq + 1 || stop != end || errno != 0 || eq[1] == '-' ||
            v > MAX_MIN_INDIRECT_SIZE)
            return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                             "CLBlast variant '%.200s': %s has a bad value '%.*s'", variant,
                             f->name, (int)(end - eq - 1), eq + 1);
        *slot(&p, f) = (size_t)v;
        seen[k][idx] = true;
        p.has[k] = true;
        s = end;
    }
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        if (!p.has[k])
            continue;
        for (size_t i = 0; i < kernels[k].count; i++)
            if (!seen[k][i])
                return hd__error(ctx, HD_ERR_INVALID_ARGUMENT,
                                 "CLBlast variant '%.200s': %s needs %s too", variant,
                                 kernels[k].name, kernels[k].fields[i].name);
    }
    *out = p;
    return HD_OK;
}

void hd__clblast_params_merge(hd_clblast_params *base, const hd_clblast_params *over)
{
    if (over->has[HD_CLBLAST_XGEMM])
        base->xgemm = over->xgemm;
    if (over->has[HD_CLBLAST_XGEMM_DIRECT])
        base->direct = over->direct;
    if (over->has[HD_CLBLAST_GEMM_ROUTINE])
        base->min_indirect_size = over->min_indirect_size;
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++)
        base->has[k] = base->has[k] || over->has[k];
}

bool hd__clblast_params_equal(const hd_clblast_params *a, const hd_clblast_params *b)
{
    for (int k = 0; k < HD_CLBLAST_KERNEL_COUNT; k++) {
        if (a->has[k] != b->has[k])
            return false;
        if (!a->has[k])
            continue;
        for (size_t i = 0; i < kernels[k].count; i++)
            if (value(a, &kernels[k].fields[i]) != value(b, &kernels[k].fields[i]))
                return false;
    }
    return true;
}

/* ---- shipped and known-good values ---- */

static bool contains(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* CLBlast's values for devices it has no entry for, in the text form of variants; the first
 * entry whose device type and vendor match applies; the last, without a vendor, matches any. */
typedef struct shipped_set {
    bool gpu;
    const char *vendor; /* a substring of the vendor name */
    const char *variant;
} shipped_set;

static const shipped_set shipped_sets[] = {
    /* CLBlast's entry for NVIDIA GPUs of an architecture it does not list (SM9.0). */
    {true, "NVIDIA",
     "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=16 MDIMC=16 MWG=64 NDIMB=16 NDIMC=16 NWG=64 SA=1 SB=1 "
     "STRM=0 STRN=0 VWM=4 VWN=4 "
     "KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=16 NDIMCD=16 PADA=1 PADB=1 VWMD=4 VWND=2 WGD=32 "
     "XGEMM_MIN_INDIRECT_SIZE=1472"},
    /* "GenuineIntel" contains "Intel". */
    {false, "Intel",
     "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=16 MDIMC=16 MWG=64 NDIMB=8 NDIMC=8 NWG=64 SA=0 SB=0 "
     "STRM=0 STRN=0 VWM=4 VWN=4 "
     "KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=8 NDIMCD=8 PADA=1 PADB=1 VWMD=4 VWND=4 WGD=32 "
     "XGEMM_MIN_INDIRECT_SIZE=576"},
    {false, NULL,
     "GEMMK=0 KREG=1 KWG=32 KWI=2 MDIMA=8 MDIMC=8 MWG=32 NDIMB=16 NDIMC=16 NWG=32 SA=1 SB=1 "
     "STRM=0 STRN=0 VWM=4 VWN=2 "
     "KWID=2 MDIMAD=8 MDIMCD=8 NDIMBD=8 NDIMCD=8 PADA=1 PADB=1 VWMD=1 VWND=1 WGD=16 "
     "XGEMM_MIN_INDIRECT_SIZE=896"},
};

void hd__clblast_params_shipped(const hd_clblast_device *dev, hd_clblast_params *out)
{
    const shipped_set *set = shipped_sets;
    while (set->vendor != NULL && (set->gpu != dev->is_gpu || !contains(dev->vendor, set->vendor)))
        set++;
    /* The table's strings parse (the clblast suite checks each entry): no status to pass on. */
    memset(out, 0, sizeof *out);
    hd__clblast_params_parse(NULL, set->variant, out);
}

/* Sets measured on a device, keyed by a substring of its name, best first. The H100 sets were
 * timed on "NVIDIA H100 80GB HBM3", driver 580.159.04, SGEMM 4096^3 and 8192^3 row-major NN,
 * device time between marker events: the first set here clearly ahead of CLBlast's shipped
 * set at both sizes (2026-11-22). */
typedef struct known_set {
    const char *device;
    hd_clblast_kernel kernel;
    const char *variant;
} known_set;

static const known_set known_sets[] = {
    {"H100", HD_CLBLAST_XGEMM,
     "GEMMK=0 KREG=1 KWG=32 KWI=8 MDIMA=32 MDIMC=16 MWG=128 NDIMB=16 NDIMC=8 NWG=128 SA=1 SB=1 "
     "STRM=0 STRN=0 VWM=4 VWN=4"},
    {"H100", HD_CLBLAST_XGEMM,
     "GEMMK=0 KREG=1 KWG=32 KWI=8 MDIMA=32 MDIMC=32 MWG=128 NDIMB=16 NDIMC=8 NWG=128 SA=1 SB=1 "
     "STRM=1 STRN=0 VWM=4 VWN=4"},
    {"H100", HD_CLBLAST_XGEMM,
     "GEMMK=0 KREG=1 KWG=32 KWI=16 MDIMA=32 MDIMC=32 MWG=128 NDIMB=16 NDIMC=8 NWG=128 SA=1 SB=1 "
     "STRM=1 STRN=1 VWM=4 VWN=4"},
    {"H100", HD_CLBLAST_XGEMM,
     "GEMMK=0 KREG=1 KWG=32 KWI=8 MDIMA=16 MDIMC=16 MWG=128 NDIMB=16 NDIMC=16 NWG=128 SA=1 SB=1 "
     "STRM=1 STRN=0 VWM=4 VWN=8"},
};

size_t hd__clblast_params_known(const hd_clblast_device *dev, hd_clblast_kernel kernel,
                                hd_clblast_params *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof known_sets / sizeof known_sets[0] && n < max; i++) {
        const known_set *ks = &known_sets[i];
        if (ks->kernel != kernel || !contains(dev->name, ks->device))
            continue;
        hd_clblast_params p;
        char why[160];
        if (hd__clblast_params_parse(NULL, ks->variant, &p) == HD_OK &&
            hd__clblast_params_legal(&p, dev, why, sizeof why))
            out[n++] = p;
    }
    return n;
}

/* ---- the search space ---- */

static double log2_ratio(double v, double target)
{
    double r = v > target ? v / target : target / v;
    double l = 0.0;
    while (r >= 2.0 - 1e-9) {
        r /= 2.0;
        l += 1.0;
    }
    return l;
}

/* Lower is more promising. */
static double xgemm_score(const hd_clblast_xgemm *x, bool gpu)
{
    double threads = (double)(x->mdimc * x->ndimc);
    double per_item = (double)(x->mwg / x->mdimc) * (double)(x->nwg / x->ndimc);
    double s = 0.0;
    s += 2.0 * log2_ratio(threads, gpu ? 256.0 : 64.0);
    s += 2.0 * log2_ratio(per_item, gpu ? 64.0 : 16.0);
    s += log2_ratio((double)x->vwm, gpu ? 4.0 : 8.0) + log2_ratio((double)x->vwn, gpu ? 4.0 : 8.0);
    s += 1.5 * (double)(gpu ? (size_t)(x->sa == 0) + (size_t)(x->sb == 0) : x->sa + x->sb);
    s += 0.5 * log2_ratio((double)x->kwg, 32.0) + 0.25 * (x->kwi != 2);
    s += 0.5 * (x->strm + x->strn);
    s += 0.25 * ((x->mdima != x->mdimc) + (x->ndimb != x->ndimc));
    s += 0.5 * log2_ratio((double)x->mwg, (double)x->nwg);
    return s;
}

static double direct_score(const hd_clblast_xgemm_direct *d, bool gpu)
{
    double threads = (double)(d->mdimcd * d->ndimcd);
    double s = 2.0 * log2_ratio(threads, gpu ? 128.0 : 64.0);
    s += log2_ratio((double)d->wgd, 32.0);
    s +=
        log2_ratio((double)d->vwmd, gpu ? 2.0 : 4.0) + log2_ratio((double)d->vwnd, gpu ? 2.0 : 4.0);
    s += 0.25 * ((d->pada == 0) + (d->padb == 0)) + 0.25 * (d->kwid != 2);
    s += 0.25 * ((d->mdimad != d->mdimcd) + (d->ndimbd != d->ndimcd));
    return s;
}

/* A bounded list of the best candidates seen, kept sorted by score; ties keep the order of
 * generation, so the result is deterministic. */
typedef struct ranking {
    hd_clblast_params *items;
    double *scores;
    size_t count, max;
    const hd_clblast_params *listed; /* already in the output ahead of the ranking */
    size_t listed_count;
} ranking;

static bool ranking_has(const ranking *r, const hd_clblast_params *p)
{
    for (size_t i = 0; i < r->count; i++)
        if (hd__clblast_params_equal(&r->items[i], p))
            return true;
    for (size_t i = 0; i < r->listed_count; i++)
        if (hd__clblast_params_equal(&r->listed[i], p))
            return true;
    return false;
}

static void ranking_offer(ranking *r, const hd_clblast_params *p, double score)
{
    if (r->count == r->max && score >= r->scores[r->count - 1])
        return;
    if (ranking_has(r, p))
        return;
    size_t i = r->count < r->max ? r->count++ : r->count - 1;
    while (i > 0 && r->scores[i - 1] > score) {
        r->items[i] = r->items[i - 1];
        r->scores[i] = r->scores[i - 1];
        i--;
    }
    r->items[i] = *p;
    r->scores[i] = score;
}

/* Advances a mixed-radix counter; false once it wrapped around. */
static bool odometer_next(size_t *digit, const size_t *radix, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        if (++digit[i] < radix[i])
            return true;
        digit[i] = 0;
    }
    return false;
}

static void offer_if_legal(ranking *r, const hd_clblast_params *p, const hd_clblast_device *dev,
                           double score)
{
    char why[160];
    if (r->count == r->max && score >= r->scores[r->count - 1])
        return; /* cheaper than the legality check */
    if (hd__clblast_params_legal(p, dev, why, sizeof why))
        ranking_offer(r, p, score);
}

static void search_xgemm(const hd_clblast_device *dev, ranking *r)
{
    static const size_t wg[] = {32, 64, 128}, kwg[] = {16, 32}, dim[] = {8, 16, 32}, kwi[] = {2, 8},
                        vw[] = {1, 2, 4, 8};
    /* MWG NWG KWG MDIMC NDIMC MDIMA NDIMB KWI VWM VWN SA SB STRM STRN */
    static const size_t radix[] = {3, 3, 2, 3, 3, 3, 3, 2, 4, 4, 2, 2, 2, 2};
    size_t d[14] = {0};
    hd_clblast_params p;
    memset(&p, 0, sizeof p);
    p.has[HD_CLBLAST_XGEMM] = true;
    hd_clblast_xgemm *x = &p.xgemm;
    do {
        *x = (hd_clblast_xgemm){.gemmk = 0,
                                .kreg = 1,
                                .mwg = wg[d[0]],
                                .nwg = wg[d[1]],
                                .kwg = kwg[d[2]],
                                .mdimc = dim[d[3]],
                                .ndimc = dim[d[4]],
                                .mdima = dim[d[5]],
                                .ndimb = dim[d[6]],
                                .kwi = kwi[d[7]],
                                .vwm = vw[d[8]],
                                .vwn = vw[d[9]],
                                .sa = d[10],
                                .sb = d[11],
                                .strm = d[12],
                                .strn = d[13]};
        offer_if_legal(r, &p, dev, xgemm_score(x, dev->is_gpu));
    } while (odometer_next(d, radix, 14));
}

static void search_direct(const hd_clblast_device *dev, ranking *r)
{
    static const size_t wgd[] = {8, 16, 32, 64}, dim[] = {8, 16, 32}, kwid[] = {2, 8, 16},
                        vw[] = {1, 2, 4, 8};
    /* WGD MDIMCD NDIMCD MDIMAD NDIMBD KWID VWMD VWND PADA PADB */
    static const size_t radix[] = {4, 3, 3, 3, 3, 3, 4, 4, 2, 2};
    size_t d[10] = {0};
    hd_clblast_params p;
    memset(&p, 0, sizeof p);
    p.has[HD_CLBLAST_XGEMM_DIRECT] = true;
    do {
        p.direct = (hd_clblast_xgemm_direct){.wgd = wgd[d[0]],
                                             .mdimcd = dim[d[1]],
                                             .ndimcd = dim[d[2]],
                                             .mdimad = dim[d[3]],
                                             .ndimbd = dim[d[4]],
                                             .kwid = kwid[d[5]],
                                             .vwmd = vw[d[6]],
                                             .vwnd = vw[d[7]],
                                             .pada = d[8],
                                             .padb = d[9]};
        offer_if_legal(r, &p, dev, direct_score(&p.direct, dev->is_gpu));
    } while (odometer_next(d, radix, 10));
}

static void search_threshold(const hd_clblast_device *dev, size_t shipped, ranking *r)
{
    static const size_t sizes[] = {64, 128, 192, 256, 384, 512, 576, 768, 896, 1024, 1472, 2048};
    hd_clblast_params p;
    memset(&p, 0, sizeof p);
    p.has[HD_CLBLAST_GEMM_ROUTINE] = true;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (!dev->is_gpu && sizes[i] > 1024)
            break; /* verifying the indirect path above it takes seconds on a CPU device */
        p.min_indirect_size = sizes[i];
        ranking_offer(r, &p, log2_ratio((double)sizes[i], (double)shipped));
    }
}

size_t hd__clblast_params_enumerate(const hd_clblast_device *dev, hd_clblast_kernel kernel,
                                    hd_clblast_params *out, size_t max)
{
    if ((unsigned)kernel >= HD_CLBLAST_KERNEL_COUNT || max == 0)
        return 0;
    size_t n = hd__clblast_params_known(dev, kernel, out, max);

    hd_clblast_params shipped, only;
    hd__clblast_params_shipped(dev, &shipped);
    memset(&only, 0, sizeof only);
    only.has[kernel] = true;
    only.xgemm = shipped.xgemm;
    only.direct = shipped.direct;
    only.min_indirect_size = shipped.min_indirect_size;

    char why[160];
    ranking r = {.items = out + n, .max = max - n, .listed = out, .listed_count = n};
    if (r.max == 0)
        return n;
    r.scores = malloc(r.max * sizeof *r.scores);
    if (r.scores == NULL)
        return n;
    /* A score below any heuristic score keeps the shipped set right after the known ones. */
    if (hd__clblast_params_legal(&only, dev, why, sizeof why))
        ranking_offer(&r, &only, -1.0);
    if (kernel == HD_CLBLAST_XGEMM)
        search_xgemm(dev, &r);
    else if (kernel == HD_CLBLAST_XGEMM_DIRECT)
        search_direct(dev, &r);
    else
        search_threshold(dev, shipped.min_indirect_size, &r);
    free(r.scores);
    return n + r.count;
}
