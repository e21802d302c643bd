/* The scalars of a tools' case (case_params.h). */
#include <stdlib.h>
#include <string.h>

#include "autotune/case_params.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

size_t hd__case_ignored_targets(size_t rows)
{
    if (rows < 2)
        return 0;
    return rows / 64 > 1 ? rows / 64 : 1;
}

/* The vocabulary the case's ids index, and whether they are targets (some ignored); 0 where
 * the op takes no ids. */
static size_t id_vocab(const hd_bench_case *c, bool *targets)
{
    *targets = c->op == HD_OP_CROSS_ENTROPY || c->op == HD_OP_LINEAR_CROSS_ENTROPY;
    switch (c->op) {
    case HD_OP_CROSS_ENTROPY:
        return c->shape.dim[1];
    case HD_OP_LINEAR_CROSS_ENTROPY:
    case HD_OP_EMBEDDING:
        return c->shape.dim[2];
    default:
        return 0;
    }
}

/* rows ids in [0, vocab) from seed, and for targets the ignored ones. */
static bool make_ids(size_t rows, size_t vocab, bool targets, uint64_t seed, hd_case_params *out)
{
    out->ids = malloc((rows > 0 ? rows : 1) * sizeof *out->ids);
    if (out->ids == NULL)
        return false;
    out->id_count = rows;
    uint64_t state = seed;
    for (size_t i = 0; i < rows; i++)
        out->ids[i] = (int32_t)(splitmix(&state) % vocab);
    size_t ignored = targets ? hd__case_ignored_targets(rows) : 0;
    for (size_t k = 0; k < ignored; k++)
        out->ids[k * rows / ignored] = HD_CASE_IGNORE_INDEX;
    return true;
}

bool hd__case_params_make(const hd_bench_case *c, uint64_t seed, hd_case_params *out)
{
    memset(out, 0, sizeof *out);
    const hd_shape *s = &c->shape;
    out->p = (hd_op_params){.trans_a = s->trans_a,
                            .trans_b = s->trans_b,
                            .alpha = HD_CASE_ALPHA,
                            .beta = 0.0f,
                            .scale = HD_CASE_SCALE,
                            .lora_layout = s->lora_layout,
                            .eps = HD_CASE_EPS,
                            .batch = c->op == HD_OP_GEMM_BATCHED ? s->dim[3] : 0,
                            .theta = HD_CASE_THETA,
                            .ignore_index = HD_CASE_IGNORE_INDEX};
    if (c->op == HD_OP_ROPE)
        out->p.head_dim = 2 * s->dim[2];
    if (c->op == HD_OP_ATTENTION || c->op == HD_OP_ATTENTION_BACKWARD) {
        out->p.heads = s->dim[1];
        out->p.kv_heads = s->dim[2];
        out->p.causal = true;
    }
    bool targets;
    size_t vocab = id_vocab(c, &targets);
    if (vocab == 0)
        return true;
    if (!make_ids(s->dim[0], vocab, targets, seed, out))
        return false;
    out->p.ids = out->ids;
    return true;
}

hd_status hd__case_params_id_tensor(hd_context *ctx, hd_case_params *cp)
{
    if (cp->ids == NULL)
        return HD_OK;
    hd_status s = hd_tensor_create_ex(ctx, cp->id_count, 1, HD_DTYPE_I32, &cp->id_tensor);
    cp->p.id_tensor = cp->id_tensor;
    return s == HD_OK ? hd__case_params_write_ids(cp) : s;
}

hd_status hd__case_params_write_ids(hd_case_params *cp)
{
    return cp->id_tensor != NULL ? hd_tensor_write_raw(cp->id_tensor, cp->ids) : HD_OK;
}

void hd__case_params_free(hd_case_params *cp)
{
    hd_tensor_destroy(cp->id_tensor);
    free(cp->ids);
    memset(cp, 0, sizeof *cp);
}

bool hd__case_tensor_left_out(hd_op op, int i)
{
    return (op == HD_OP_ROPE && i == 1) || (op == HD_OP_ADD_RMS_NORM_BACKWARD && i == 5);
}

bool hd__case_reads_output(hd_op op)
{
    return op == HD_OP_ADD;
}

unsigned hd__case_scalars(hd_op op)
{
    switch (op) {
    case HD_OP_ADD:
        return HD_CASE_HAS_ALPHA;
    case HD_OP_ADD_RMS_NORM:
    case HD_OP_ADD_RMS_NORM_BACKWARD:
        return HD_CASE_HAS_EPS;
    case HD_OP_ROPE:
        return HD_CASE_HAS_ROPE;
    case HD_OP_ATTENTION:
    case HD_OP_ATTENTION_BACKWARD:
        return HD_CASE_HAS_CAUSAL;
    case HD_OP_CROSS_ENTROPY:
    case HD_OP_LINEAR_CROSS_ENTROPY:
        return HD_CASE_HAS_TARGETS;
    default:
        return 0;
    }
}

hd_adamw_options hd__case_adamw_options(long step)
{
    return (hd_adamw_options){.lr = HD_CASE_ADAMW_LR,
                              .beta1 = HD_CASE_ADAMW_BETA1,
                              .beta2 = HD_CASE_ADAMW_BETA2,
                              .eps = HD_CASE_ADAMW_EPS,
                              .weight_decay = HD_CASE_ADAMW_WEIGHT_DECAY,
                              .step = step,
                              .max_grad_norm = HD_CASE_ADAMW_MAX_GRAD_NORM};
}
