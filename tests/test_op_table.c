/* The op table: every op has every field, its texts and figures follow from its row, and what
 * the tools and the scheduler compute from it holds for every op (batched GEMM included). */
#include <string.h>

#include "core/op.h"
#include "dispatch/check.h"
#include "tests/testlib.h"

/* A shape with every dim of the op set (1 + its index, times 8), no transposes. */
static hd_shape some_shape(hd_op op)
{
    hd_shape s = {.dim = {0}};
    for (int i = 0; i < hd__op(op)->dims; i++)
        s.dim[i] = 8 * (size_t)(i + 1);
    return s;
}

static void test_op_table_every_op_has_every_field(void **state)
{
    (void)state;
    for (int o = 0; o < HD_OP_COUNT; o++) {
        hd_op op = (hd_op)o;
        const hd_op_desc *d = hd__op(op);
        const char *name = hd_op_name(op);
        assert_non_null(name);
        assert_true(strcmp(name, "unknown") != 0);
        assert_non_null(d->fn);
        assert_true(strncmp(d->fn, "hd_", 3) == 0);
        assert_true(d->dims >= 1 && d->dims <= HD_OP_DIM_MAX);
        for (int i = 0; i < d->dims; i++)
            if (d->dim_names[i] == NULL || d->dim_names[i][0] == '\0')
                fail_msg("%s: dim %d has no name", name, i);
        for (int i = d->first_suffix_dim; d->first_suffix_dim > 0 && i < d->dims; i++)
            if (d->suffix_prefix[i] == '\0')
                fail_msg("%s: suffix dim %d has no prefix", name, i);
        assert_non_null(d->flops);
        assert_non_null(hd__op_prepare[op]);
        assert_true(d->tensor_count >= 2 && d->tensor_count <= HD_OP_TENSOR_MAX);
        int inputs = 0, outputs = 0;
        for (int i = 0; i < d->tensor_count; i++) {
            const hd_op_tensor *t = &d->tensors[i];
            if (t->name == NULL || t->name[0] == '\0')
                fail_msg("%s: tensor %d has no name", name, i);
            if (t->role != HD_ROLE_INPUT && t->role != HD_ROLE_OUTPUT)
                fail_msg("%s: tensor '%s' has no role", name, t->name);
            if (t->rows >= d->dims || t->cols >= d->dims || t->batch >= d->dims ||
                t->rows < HD_DIM_ONE || t->cols < HD_DIM_ONE || t->batch < HD_DIM_ONE)
                fail_msg("%s: tensor '%s' names a dim the op does not have", name, t->name);
            if (t->transpose != 0 && !d->transposes)
                fail_msg("%s: tensor '%s' transposes in an op without transposes", name, t->name);
            if (t->role == HD_ROLE_INPUT && !(t->lo < t->hi))
                fail_msg("%s: input '%s' has no value range", name, t->name);
            inputs += t->role == HD_ROLE_INPUT;
            outputs += t->role == HD_ROLE_OUTPUT;
        }
        assert_true(inputs >= 1);
        assert_true(outputs >= 1);
        hd_shape s = some_shape(op);
        assert_true(hd__op_flops(op, &s) > 0.0);
        assert_true(hd__op_bytes(op, &s) > 0.0);
        assert_true(hd__op_work(op, &s) > 0.0);
        char text[128];
        hd__op_text(op, &s, HD_TEXT_CASE, text, sizeof text);
        assert_true(strncmp(text, name, strlen(name)) == 0);
    }
}

/* The defect this table fixed: both tools named "gemm_batched 64 64 64 8" "gemm_batched 64x64"
 * with 0 flops and 0 bytes. */
static void test_op_table_batched_gemm_has_its_name_flops_and_bytes(void **state)
{
    (void)state;
    hd_shape s = {.dim = {64, 64, 64, 8}};
    char text[128];
    hd__op_text(HD_OP_GEMM_BATCHED, &s, HD_TEXT_CASE, text, sizeof text);
    assert_string_equal(text, "gemm_batched 64x64x64 x8");
    hd__op_text(HD_OP_GEMM_BATCHED, &s, HD_TEXT_KEY, text, sizeof text);
    assert_string_equal(text, "gemm_batched 64x64x64 nn x8");
    assert_true(hd__op_flops(HD_OP_GEMM_BATCHED, &s) == 2.0 * 64 * 64 * 64 * 8);
    assert_true(hd__op_bytes(HD_OP_GEMM_BATCHED, &s) == 4.0 * 8 * 3 * 64 * 64);
}

/* hd_add reads y before it writes it: x read, y read and written; an elementwise op with an
 * output of its own (SwiGLU: g, u read, y written) counts each tensor once. */
static void test_op_table_bytes_count_an_updated_output_twice(void **state)
{
    (void)state;
    hd_shape s = {.dim = {7, 129}};
    assert_true(hd__op_bytes(HD_OP_ADD, &s) == 4.0 * 3 * 7 * 129);
    assert_true(hd__op_elements(HD_OP_ADD, &s) == 2.0 * 7 * 129);
    assert_true(hd__op_bytes(HD_OP_SWIGLU, &s) == 4.0 * 3 * 7 * 129);
}

static void test_op_table_texts_keep_their_established_form(void **state)
{
    (void)state;
    char text[128];
    hd_shape g = {.dim = {1, 4096, 4096}};
    hd__op_text(HD_OP_GEMM, &g, HD_TEXT_CASE, text, sizeof text);
    assert_string_equal(text, "gemm 1x4096x4096");
    hd__op_text(HD_OP_GEMM, &g, HD_TEXT_KEY, text, sizeof text);
    assert_string_equal(text, "gemm 1x4096x4096 nn");
    hd_shape t = {.dim = {31, 7, 64}, .trans_a = true};
    hd__op_text(HD_OP_GEMM, &t, HD_TEXT_CASE, text, sizeof text);
    assert_string_equal(text, "gemm 31x7x64 TN");
    hd_shape l = {.dim = {1, 1024, 1024, 8}};
    hd__op_text(HD_OP_LORA, &l, HD_TEXT_CASE, text, sizeof text);
    assert_string_equal(text, "lora 1x1024x1024 r8");
    hd_shape r = {.dim = {64, 1024}};
    hd__op_text(HD_OP_LAYER_NORM, &r, HD_TEXT_KEY, text, sizeof text);
    assert_string_equal(text, "layer_norm 64x1024");
}

/* Tensor shapes follow the transposes and the batch. */
static void test_op_table_tensor_shapes_follow_transposes_and_batch(void **state)
{
    (void)state;
    size_t r, c;
    hd_shape s = {.dim = {3, 5, 7, 2}, .trans_a = true};
    hd__op_tensor_shape(HD_OP_GEMM_BATCHED, 0, &s, &r, &c); /* A^T: k x m per matrix */
    assert_int_equal(r, 2 * 7);
    assert_int_equal(c, 3);
    hd__op_tensor_shape(HD_OP_GEMM_BATCHED, 1, &s, &r, &c); /* B: k x n */
    assert_int_equal(r, 2 * 7);
    assert_int_equal(c, 5);
    hd__op_tensor_shape(HD_OP_GEMM_BATCHED, 2, &s, &r, &c); /* C: m x n */
    assert_int_equal(r, 2 * 3);
    assert_int_equal(c, 5);
    hd_shape n = {.dim = {4, 9}};
    hd__op_tensor_shape(HD_OP_LAYER_NORM, 1, &n, &r, &c); /* gamma: 1 x cols */
    assert_int_equal(r, 1);
    assert_int_equal(c, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table_every_op_has_every_field),
        cmocka_unit_test(test_op_table_batched_gemm_has_its_name_flops_and_bytes),
        cmocka_unit_test(test_op_table_bytes_count_an_updated_output_twice),
        cmocka_unit_test(test_op_table_texts_keep_their_established_form),
        cmocka_unit_test(test_op_table_tensor_shapes_follow_transposes_and_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
