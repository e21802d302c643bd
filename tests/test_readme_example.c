/*
 * The README's C example: its code block is exactly tests/readme_example.c, and the program,
 * built as a user builds it (public headers, the shared library), prints the float64
 * reference's result. The build passes three paths in the environment: HD_README,
 * HD_README_EXAMPLE_SOURCE and HD_README_EXAMPLE_BIN; tests/run.sh points the last at a copy
 * compiled through pkg-config against an installed prefix.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/testlib.h"

/* The example's inputs (x, w, a, b, scale and the sizes) come from the example itself, so
 * that the two cannot disagree; its main() is renamed out of the way and not called. */
int hd_readme_example_main(void);
#define main hd_readme_example_main
#include "tests/readme_example.c"
#undef main

#define PRINTED_ATOL 2e-6 /* printed with %.6f: half a unit in the sixth place, plus rounding */

static const char *path_from_env(const char *name)
{
    const char *p = getenv(name);
    if (p == NULL || p[0] == '\0')
        fail_msg("%s is not set: run this suite through meson test or tests/run.sh", name);
    return p;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static void test_readme_block_is_the_example_file(void **state)
{
    (void)state;
    char *readme = slurp(path_from_env("HD_README"));
    char *source = slurp(path_from_env("HD_README_EXAMPLE_SOURCE"));
    const char *block_start = strstr(readme, "\n```c\n");
    if (block_start == NULL)
        fail_msg("README.md has no ```c block");
    block_start += strlen("\n```c\n");
    const char *block_end = strstr(block_start, "\n```\n");
    if (block_end == NULL)
        fail_msg("README.md: the ```c block is not closed");
    size_t block_len = (size_t)(block_end - block_start) + 1; /* with the last line's newline */
    if (block_len != strlen(source) || memcmp(block_start, source, block_len) != 0) {
        size_t i = 0;
        while (i < block_len && block_start[i] == source[i])
            i++;
        size_t line = 1;
        for (size_t j = 0; j < i; j++)
            line += source[j] == '\n';
        fail_msg("README.md's C example differs from tests/readme_example.c at line %zu of "
                 "the example: copy the file into the README block",
                 line);
    }
    free(readme);
    free(source);
}

static void test_readme_example_prints_the_reference_result(void **state)
{
    (void)state;
    const char *bin = path_from_env("HD_README_EXAMPLE_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s'", bin);
    FILE *p = popen(cmd, "r");
    if (p == NULL)
        fail_msg("cannot run %s", bin);

    double want[T * OUT];
    hd_ref_lora(T, IN, OUT, R, x, w, a, b, scale, want, NULL);
    float got[T * OUT];
    bool seen[T * OUT] = {false};
    bool ran_on = false;
    char line[256];
    while (fgets(line, sizeof line, p) != NULL) {
        int i, j;
        float v;
        char backend[64];
        if (sscanf(line, "y[%d][%d] = %f", &i, &j, &v) == 3) {
            if (i < 0 || i >= T || j < 0 || j >= OUT || seen[i * OUT + j])
                fail_msg("unexpected line from the example: %s", line);
            got[i * OUT + j] = v;
            seen[i * OUT + j] = true;
        } else if (sscanf(line, "ran on: %63s", backend) == 1) {
            ran_on = strcmp(backend, "auto") != 0 && strcmp(backend, "unknown") != 0;
        } else {
            fail_msg("unexpected line from the example: %s", line);
        }
    }
    int status = pclose(p);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s failed (status %d)", bin, status);
    for (int i = 0; i < T * OUT; i++)
        if (!seen[i])
            fail_msg("the example did not print y[%d][%d]", i / OUT, i % OUT);
    assert_true(ran_on);
    hd_test_expect_close("README example", got, want, T * OUT, PRINTED_ATOL, 0.0);
}

int main(void)
{
    hd_test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readme_block_is_the_example_file),
        cmocka_unit_test(test_readme_example_prints_the_reference_result),
    };
    return cmocka_run_group_tests_name("readme_example", tests, NULL, NULL);
}
