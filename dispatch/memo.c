/* The plan memo (dispatch/memo.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/context.h"
#include "dispatch/memo.h"
#include "dispatch/tools.h"

#define MEMO_SLOTS 256 /* a power of two; a training step has a few dozen distinct calls */
#define MEMO_PROBE 8   /* slots tried from the home slot before the home slot is replaced */

/* Everything a plan depends on besides the context's generation. Built with memset so that
 * padding compares equal. */
typedef struct memo_key {
    uint64_t residency; /* 3 bits per input, then per output the op reads (residency_bits) */
    uint64_t dim[4];
    uint32_t op;
    uint32_t trans;     /* trans_a + 2 * trans_b */
    uint32_t forced;    /* the op's forced backend */
    uint32_t precision; /* the context's GEMM precision mode */
} memo_key;

typedef struct memo_entry {
    uint64_t generation; /* 0: empty */
    memo_key key;
    hd_plan plan;
} memo_entry;

struct hd_plan_memo {
    memo_entry slot[MEMO_SLOTS];
    unsigned long hits, misses;
};

/* Per tensor: valid on the host, valid on the device, its move paid for by staying. */
static uint64_t tensor_bits(const hd_context *ctx, const hd_tensor *t)
{
    return (uint64_t)t->state->host_valid | (uint64_t)t->state->device_valid << 1 |
           (uint64_t)hd__tensor_move_paid(ctx, t) << 2;
}

static uint64_t residency_bits(const hd_context *ctx, const hd_call_tensors *io)
{
    uint64_t bits = 0;
    int shift = 0;
    for (int i = 0; i < io->input_count && shift < 30; i++, shift += 3)
        bits |= tensor_bits(ctx, io->inputs[i]) << shift;
    shift = 32;
    for (int i = 0; io->output_read && i < io->output_count && shift < 62; i++, shift += 3)
        bits |= tensor_bits(ctx, io->outputs[i]) << shift;
    return bits;
}

static uint64_t hash_key(const memo_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void hd__select_memo(hd_context *ctx, hd_op op, const hd_shape *shape, const hd_call_tensors *io,
                     hd_plan *plan)
{
    if (ctx->plans == NULL && (ctx->plans = calloc(1, sizeof *ctx->plans)) == NULL) {
        hd__select(ctx, op, shape, io, plan); /* no memory for the memo: plan every time */
        return;
    }
    if (ctx->plan_generation == 0) /* 0 marks an empty slot */
        ctx->plan_generation = 1;
    memo_key key;
    memset(&key, 0, sizeof key);
    key.op = (uint32_t)op;
    key.residency = residency_bits(ctx, io);
    for (int i = 0; i < 4; i++)
        key.dim[i] = shape->dim[i];
    key.trans = (uint32_t)shape->trans_a + 2u * (uint32_t)shape->trans_b +
                4u * shape->lora_layout; /* LoRA's layout flags */
    key.forced = (uint32_t)ctx->forced[op];
    key.precision = (uint32_t)ctx->gemm_precision;

    struct hd_plan_memo *m = ctx->plans;
    size_t home = (size_t)hash_key(&key) & (MEMO_SLOTS - 1), free_slot = home;
    bool found_free = false;
    for (size_t i = 0; i < MEMO_PROBE; i++) {
        memo_entry *e = &m->slot[(home + i) & (MEMO_SLOTS - 1)];
        bool live = e->generation == ctx->plan_generation;
        if (live && memcmp(&e->key, &key, sizeof key) == 0) {
            m->hits++;
            *plan = e->plan;
            return;
        }
        if (!live && !found_free) {
            free_slot = (home + i) & (MEMO_SLOTS - 1);
            found_free = true;
        }
    }
    m->misses++;
    hd__select(ctx, op, shape, io, plan);
    memo_entry *e = &m->slot[free_slot];
    e->generation = ctx->plan_generation;
    e->key = key;
    e->plan = *plan;
}

void hd__plans_invalidate(hd_context *ctx)
{
    ctx->plan_generation++;
}

void hd__plans_free(hd_context *ctx)
{
    free(ctx->plans);
    ctx->plans = NULL;
}

void hd__plans_stats(const hd_context *ctx, unsigned long *hits, unsigned long *misses)
{
    *hits = ctx->plans != NULL ? ctx->plans->hits : 0;
    *misses = ctx->plans != NULL ? ctx->plans->misses : 0;
}
