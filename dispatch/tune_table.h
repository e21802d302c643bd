/* The tuning table: a cache file's records indexed for the scheduler's lookups. A passive
 * store (dispatch/tune_table.c): made from a parsed file, asked, destroyed; the context opens
 * it, drops what its backends reject and invalidates its plans (dispatch/tuning.c). */
#ifndef HD_DISPATCH_TUNE_TABLE_H
#define HD_DISPATCH_TUNE_TABLE_H

#include "dispatch/tune_file.h"
#include "dispatch/tuning.h"

/* Beyond this distance in any one dimension (|log2(1+a) - log2(1+b)|, i.e. about a factor of
 * two) a tuned shape says nothing about another. */
#define HD_TUNE_NEAR_DIM 1.0

typedef struct hd_tune_table hd_tune_table;

/* Takes file's records and params (file is left empty) and indexes them; NULL without memory
 * (file is then left as it was). */
hd_tune_table *hd__tune_table_create(hd_tune_file *file);
void hd__tune_table_destroy(hd_tune_table *t); /* NULL: no-op */

/* What the lookups of dispatch/tuning.h do for a context, on a table: precision is the
 * context's GEMM precision, which keys the records of compute-bound ops. exact gives the
 * record whether or not it is disabled (for disabling it); the others skip disabled ones. */
hd_tune_record *hd__tune_table_exact(const hd_tune_table *t, hd_op op, const hd_shape *shape,
                                     hd_precision precision);
const hd_tune_record *hd__tune_table_nearest(const hd_tune_table *t, hd_op op,
                                             const hd_shape *shape, hd_precision precision,
                                             double *distance);
const hd_tune_record *hd__tune_table_nearest_timing(const hd_tune_table *t, hd_op op,
                                                    const hd_shape *shape, hd_precision precision,
                                                    hd_backend b);
const hd_tune_calibration *hd__tune_table_calibration(const hd_tune_table *t);
const char *hd__tune_table_param(const hd_tune_table *t, hd_backend b, const char *name);
/* The records and params the table holds, as parsed. */
const hd_tune_file *hd__tune_table_file(const hd_tune_table *t);

#endif
