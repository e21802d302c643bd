/* Statuses, backends, ops and precisions by name, each generated from its table in
 * <hd/dispatch.h> (the names themselves are public: hd_backend_name(), hd_op_name(), ...). */
#ifndef HD_CORE_NAMES_H
#define HD_CORE_NAMES_H

#include <stdbool.h>

#include <hd/dispatch.h>

/* Backend or plan by name ("cpu", "clblast", "fused", "clblast+fused", "auto"), op by name
 * (hd_op_name()), GEMM precision by name ("fp32", "fp32x3", "tf32"); false if unknown. */
bool hd__backend_from_name(const char *name, hd_backend *b);
bool hd__op_from_name(const char *name, hd_op *op);
bool hd__precision_from_name(const char *name, hd_precision *p);

#endif
