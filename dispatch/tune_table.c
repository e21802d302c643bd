/* The tuning table: a cache file's records, indexed for the scheduler's lookups (the exact
 * key, the nearest shape, the nearest record that timed a backend). A passive store: it knows
 * nothing of contexts or plans; dispatch/tuning.c opens it for a context and keeps it in step
 * with the context's plans. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "dispatch/tune_table.h"

/* One record as the selection's scans read it: what they filter on and the log2 of its
 * dimensions, packed, so that a scan of the documented maximum of records stays in the CPU's
 * caches and takes no logarithm; the record itself is read only for the few that pass. */
typedef struct lookup_entry {
    double logdim[4]; /* log2(1 + dim) */
    uint32_t record;  /* index into file.records */
    uint8_t op, precision, layout, trans, backend, runner_up;
} lookup_entry;

struct hd_tune_table {
    hd_tune_file file;
    bool has_calibration;
    lookup_entry *entries; /* one per record, in the file's order */
    uint32_t *exact;       /* open addressing by the records' keys: record index + 1, 0 empty */
    size_t exact_slots;    /* a power of two, at least twice the records */
};

static double log_dim(size_t d)
{
    return log2(1.0 + (double)d);
}

/* The hash of a record's key (hd__tune_same_key's fields: op, precision, the op's dimensions,
 * its transposes and LoRA layout where it has them). */
static uint64_t key_hash(hd_op op, hd_precision precision, const hd_shape *s)
{
    const hd_op_desc *d = hd__op(op);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the fields as 64-bit words */
    uint64_t words[8] = {(uint64_t)op, (uint64_t)precision,
                         d->transposes ? (uint64_t)s->trans_a + 2u * s->trans_b : 0,
                         d->lora_layout ? (uint64_t)s->lora_layout : 0};
    for (int i = 0; i < d->dims; i++)
        words[4 + i] = (uint64_t)s->dim[i];
    for (int w = 0; w < 8; w++)
        for (int b = 0; b < 8; b++)
            h = (h ^ ((words[w] >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
    return h;
}

/* The lookup entries and the exact-key hash of t's records; false without memory. */
static bool build_index(hd_tune_table *t)
{
    const hd_tune_file *f = &t->file;
    size_t slots = 16;
    while (slots < 2 * f->count)
        slots *= 2;
    t->entries = malloc((f->count > 0 ? f->count : 1) * sizeof *t->entries);
    t->exact = calloc(slots, sizeof *t->exact);
    t->exact_slots = slots;
    if (t->entries == NULL || t->exact == NULL)
        return false;
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &f->records[i];
        lookup_entry *e = &t->entries[i];
        for (int d = 0; d < 4; d++)
            e->logdim[d] = log_dim(r->shape.dim[d]);
        e->record = (uint32_t)i;
        e->op = (uint8_t)r->op;
        e->precision = (uint8_t)r->precision;
        e->layout = (uint8_t)r->shape.lora_layout;
        e->trans = (uint8_t)(r->shape.trans_a + 2 * r->shape.trans_b);
        e->backend = (uint8_t)r->backend;
        e->runner_up = (uint8_t)r->runner_up;
        size_t at = (size_t)key_hash(r->op, r->precision, &r->shape) & (slots - 1);
        while (t->exact[at] != 0) /* the parser keeps one record per key */
            at = (at + 1) & (slots - 1);
        t->exact[at] = (uint32_t)i + 1;
    }
    return true;
}

hd_tune_table *hd__tune_table_create(hd_tune_file *file)
{
    hd_tune_table *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->file = *file;
    hd__tune_file_init(file); /* the records are the table's now */
    const hd_tune_calibration *c = &t->file.cal;
    t->has_calibration = c->launch_us > 0.0 || c->gemm_gflops > 0.0 || c->host_gbps > 0.0;
    if (!build_index(t)) {
        hd__tune_table_destroy(t);
        return NULL;
    }
    return t;
}


void hd__tune_table_destroy(hd_tune_table *t)
{
    if (t == NULL)
        return;
    hd__tune_file_free(&t->file);
    free(t->entries);
    free(t->exact);
    free(t);
}

hd_tune_record *hd__tune_table_exact(const hd_tune_table *t, hd_op op, const hd_shape *shape,
                                     hd_precision context_precision)
{
    hd_tune_record probe = {.op = op,
                            .shape = *shape,
                            .precision = hd__tune_precision_of(op, context_precision)};
    size_t at = (size_t)key_hash(op, probe.precision, shape) & (t->exact_slots - 1);
    for (; t->exact[at] != 0; at = (at + 1) & (t->exact_slots - 1)) {
        hd_tune_record *r = &t->file.records[t->exact[at] - 1];
        if (hd__tune_same_key(r, &probe))
            return r;
    }
    return NULL;
}

/* A scan's shape as the entries hold theirs: log2(1 + dim) once per scan, and the fields
 * the scans filter on. */
typedef struct lookup_query {
    double logdim[4];
    int dims;
    uint8_t precision, trans;
    bool transposes;
} lookup_query;

static lookup_query make_query(hd_op op, const hd_shape *shape, hd_precision context_precision)
{
    lookup_query q = {.dims = hd__tune_dim_count(op),
                      .precision = (uint8_t)hd__tune_precision_of(op, context_precision),
                      .trans = (uint8_t)(shape->trans_a + 2 * shape->trans_b),
                      .transposes = hd__tune_has_transposes(op)};
    for (int d = 0; d < q.dims; d++)
        q.logdim[d] = log_dim(shape->dim[d]);
    return q;
}

/* The nearest record of op in the given LoRA layout (0 for ops without one). */
static const hd_tune_record *nearest_in_layout(const hd_tune_table *t, hd_op op,
                                               const hd_shape *shape, hd_precision precision,
                                               unsigned layout, double *distance)
{
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    lookup_query q = make_query(op, shape, precision);
    for (size_t i = 0; i < t->file.count; i++) {
        const lookup_entry *e = &t->entries[i];
        if (e->op != op || e->precision != q.precision || e->layout != layout ||
            (q.transposes && e->trans != q.trans))
            continue;
        double sum = 0.0;
        bool near = true;
        for (int d = 0; d < q.dims && near; d++) {
            double g = fabs(e->logdim[d] - q.logdim[d]);
            near = g <= HD_TUNE_NEAR_DIM;
            sum += g;
        }
        if (near && sum < best_d && !t->file.records[e->record].disabled) {
            best = &t->file.records[e->record];
            best_d = sum;
        }
    }
    if (best != NULL && distance != NULL)
        *distance = best_d;
    return best;
}

const hd_tune_record *hd__tune_table_nearest_timing(const hd_tune_table *t, hd_op op,
                                                    const hd_shape *shape, hd_precision precision,
                                                    hd_backend b)
{
    const hd_tune_record *best = NULL;
    double best_d = INFINITY;
    bool best_same = false;
    lookup_query q = make_query(op, shape, precision);
    for (size_t i = 0; i < t->file.count; i++) {
        const lookup_entry *e = &t->entries[i];
        /* records that timed b (its winner or runner-up) in the context's precision */
        if (e->op != op || e->precision != q.precision || (e->backend != b && e->runner_up != b))
            continue;
        /* the shape's own transposes and layout first */
        bool same = e->layout == shape->lora_layout && (!q.transposes || e->trans == q.trans);
        double sum = 0.0;
        for (int d = 0; d < q.dims; d++)
            sum += fabs(e->logdim[d] - q.logdim[d]);
        if (((same && !best_same) || (same == best_same && sum < best_d)) &&
            !t->file.records[e->record].disabled) {
            best = &t->file.records[e->record];
            best_d = sum;
            best_same = same;
        }
    }
    return best;
}

/* Records of the shape's own LoRA layout first; a cache without any near one in that layout
 * gives the nearest of the default layout (the backends that cannot read the shape's layout
 * then fall out at the choice). */
const hd_tune_record *hd__tune_table_nearest(const hd_tune_table *t, hd_op op,
                                             const hd_shape *shape, hd_precision precision,
                                             double *distance)
{
    const hd_tune_record *r =
        nearest_in_layout(t, op, shape, precision, shape->lora_layout, distance);
    if (r == NULL && shape->lora_layout != 0)
        r = nearest_in_layout(t, op, shape, precision, 0, distance);
    return r;
}

const hd_tune_calibration *hd__tune_table_calibration(const hd_tune_table *t)
{
    return t->has_calibration ? &t->file.cal : NULL;
}

const hd_tune_file *hd__tune_table_file(const hd_tune_table *t)
{
    return &t->file;
}

const char *hd__tune_table_param(const hd_tune_table *t, hd_backend b, const char *name)
{
    const hd_tune_file *f = &t->file;
    for (size_t i = 0; i < f->param_count; i++)
        if (f->params[i].backend == b && strcmp(f->params[i].name, name) == 0)
            return f->params[i].value;
    return NULL;
}
