/* The fused backend's router: which family of kernels runs a call, from the op, the shape and
 * the variant. supports(), variants(), check_variant(), the cost estimate and the slots (gemm.c,
 * lora.c, lora_backward.c) all ask it, so that a limit or a rule changes in one place. */
#include "backends/fused/internal.h"
#include "core/op.h"

/* GEMM: few rows of A not transposed on the few-row kernels, where reading B once at full
 * bandwidth is the whole cost: the strip kernel where B is stored k x n, the dot form where it
 * is stored n x k (fewer rows: HD_FUSED_DOT_FORM_MAX_ROWS); the tiled engine elsewhere. */
static hd_fused_route gemm_route(const hd_shape *s)
{
    size_t rows = s->dim[0];
    if (s->trans_a)
        return HD_FUSED_ROUTE_TILE;
    if (s->trans_b)
        return rows <= HD_FUSED_DOT_FORM_MAX_ROWS ? HD_FUSED_ROUTE_DOT : HD_FUSED_ROUTE_TILE;
    return rows <= HD_FUSED_MAX_ROWS ? HD_FUSED_ROUTE_STRIP : HD_FUSED_ROUTE_TILE;
}

/* LoRA forward: W stored transposed (PyTorch's layout) and few tokens, the dot form (two
 * launches, W read once); any other transposed layout the tiled engine, which reads them in
 * place; the default layout the strip kernels of lora.cl (one launch) up to their tokens and
 * rank, the tiled engine past them. */
static hd_fused_route lora_route(const hd_shape *s)
{
    size_t tokens = s->dim[0], rank = s->dim[3];
    if ((s->lora_layout & HD_LORA_TRANS_W) && tokens <= HD_FUSED_DOT_FORM_MAX_ROWS)
        return HD_FUSED_ROUTE_DOT;
    if (s->lora_layout != 0)
        return HD_FUSED_ROUTE_TILE;
    return tokens <= HD_FUSED_MAX_ROWS && rank <= HD_FUSED_MAX_RANK ? HD_FUSED_ROUTE_STRIP
                                                                    : HD_FUSED_ROUTE_TILE;
}

hd_fused_route hd__fused_route(const hd_fused *f, hd_op op, const hd_shape *s, hd_part part,
                               const char *variant)
{
    (void)f; /* no rule depends on the device yet */
    if (part == HD_PART_EPILOGUE)
        return op == HD_OP_LORA ? HD_FUSED_ROUTE_EPILOGUE : HD_FUSED_ROUTE_NONE;
    bool tile_variant = hd__fused_is_tile_variant(variant);
    switch (op) {
    case HD_OP_GEMM:
        if (variant != NULL)
            return tile_variant ? HD_FUSED_ROUTE_TILE : HD_FUSED_ROUTE_STRIP;
        return gemm_route(s);
    case HD_OP_GEMM_BATCHED:
        return HD_FUSED_ROUTE_TILE;
    case HD_OP_LORA:
        if (variant != NULL)
            return tile_variant ? HD_FUSED_ROUTE_TILE : HD_FUSED_ROUTE_STRIP;
        return lora_route(s);
    case HD_OP_LORA_BACKWARD: /* its variants are the tiled engine's (dx's product) */
        return variant == NULL && s->dim[0] <= HD_FUSED_MAX_ROWS ? HD_FUSED_ROUTE_FEW_TOKENS
                                                                 : HD_FUSED_ROUTE_TILE;
    case HD_OP_SOFTMAX:
    case HD_OP_LAYER_NORM:
    case HD_OP_RMS_NORM:
        return HD_FUSED_ROUTE_ROWS;
    case HD_OP_SOFTMAX_BACKWARD:
    case HD_OP_LAYER_NORM_BACKWARD:
    case HD_OP_RMS_NORM_BACKWARD:
        return HD_FUSED_ROUTE_ROWS_BACKWARD;
    default:
        if (hd__op(op)->args == HD_ARGS_STEP)
            return HD_FUSED_ROUTE_STEP;
        break; /* an op newer than this backend: not offered here */
    }
    return HD_FUSED_ROUTE_NONE;
}
