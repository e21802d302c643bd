/* Names of statuses, backends and operations, each generated from one table. */
#include <string.h>

#include "core/names.h"

const char *hd_version(void)
{
    return HD_VERSION_STRING;
}

const char *hd_status_str(hd_status s)
{
    switch (s) {
#define HD_STATUS_TEXT(name, code, text)                                                       \
    case HD_##name:                                                                            \
        return text;
        HD_STATUS_MAP(HD_STATUS_TEXT)
#undef HD_STATUS_TEXT
    }
    return "unknown status";
}

const char *hd_status_name(hd_status s)
{
    switch (s) {
#define HD_STATUS_NAME(name, code, text)                                                       \
    case HD_##name:                                                                            \
        return #name;
        HD_STATUS_MAP(HD_STATUS_NAME)
#undef HD_STATUS_NAME
    }
    return "UNKNOWN";
}

static const char *const backend_names[HD_BACKEND_COUNT] = {
#define HD_BACKEND_NAME(name, text) [HD_BACKEND_##name] = text,
    HD_BACKEND_MAP(HD_BACKEND_NAME)
#undef HD_BACKEND_NAME
};

static const char *const op_names[HD_OP_COUNT] = {
#define HD_OP_NAME(name, text) [HD_OP_##name] = text,
    HD_OP_MAP(HD_OP_NAME)
#undef HD_OP_NAME
};

static const char *const precision_names[HD_PRECISION_COUNT] = {
    [HD_PRECISION_FP32] = "fp32",
    [HD_PRECISION_FP32X3] = "fp32x3",
    [HD_PRECISION_TF32] = "tf32",
};

const char *hd_precision_name(hd_precision p)
{
    if ((unsigned)p >= HD_PRECISION_COUNT)
        return "unknown";
    return precision_names[p];
}

bool hd__precision_from_name(const char *name, hd_precision *p)
{
    for (int i = 0; i < HD_PRECISION_COUNT; i++)
        if (strcmp(name, precision_names[i]) == 0) {
            *p = (hd_precision)i;
            return true;
        }
    return false;
}

const char *hd_backend_name(hd_backend b)
{
    if ((unsigned)b >= HD_BACKEND_COUNT)
        return "unknown";
    return backend_names[b];
}

const char *hd_op_name(hd_op op)
{
    if ((unsigned)op >= HD_OP_COUNT)
        return "unknown";
    return op_names[op];
}

bool hd__backend_from_name(const char *name, hd_backend *b)
{
    for (int i = 0; i < HD_BACKEND_COUNT; i++) {
        if (strcmp(name, backend_names[i]) == 0) {
            *b = (hd_backend)i;
            return true;
        }
    }
    return false;
}

bool hd__op_from_name(const char *name, hd_op *op)
{
    for (int i = 0; i < HD_OP_COUNT; i++) {
        if (strcmp(name, op_names[i]) == 0) {
            *op = (hd_op)i;
            return true;
        }
    }
    return false;
}
