/* What dispatch-autotune records among its timed candidates (autotune/choose.c): the device over
 * a CPU that wins narrowly where the device is a GPU, a backend's defaults over a variant that
 * wins narrowly, never a candidate that failed its check, and among finalists timed two ways
 * the one closest to the best in both. */
#include <math.h>

#include "autotune/choose.h"
#include "tests/testlib.h"

#define US 1e-6

static hd_tune_candidate timed(hd_backend b, const char *variant, double us)
{
    return (hd_tune_candidate){.backend = b, .variant = variant, .median_s = us * US, .ok = true};
}

/* The index of the fastest ok candidate, as the tuner passes it. */
static int fastest(const hd_tune_candidate *c, size_t n)
{
    int best = -1;
    for (size_t i = 0; i < n; i++)
        if (c[i].ok && (best < 0 || c[i].median_s < c[best].median_s))
            best = (int)i;
    return best;
}

static int choose(const hd_tune_candidate *c, size_t n, bool gpu)
{
    return hd__tune_choose(c, n, fastest(c, n), gpu);
}

/* A GPU machine's 64³ GEMM, as measured: the CPU narrowly ahead of a CLBlast set, which is
 * within 10 % of CLBlast's defaults: CLBlast's defaults are recorded. */
static void test_gpu_machine_records_device_over_narrowly_faster_cpu(void **state)
{
    (void)state;
    hd_tune_candidate c[] = {
        timed(HD_BACKEND_CPU, NULL, 25.84),
        timed(HD_BACKEND_CLBLAST, NULL, 27.38),
        timed(HD_BACKEND_CLBLAST, "KWID=2 VWMD=2", 26.78),
        timed(HD_BACKEND_CLBLAST_FUSED, NULL, 40.0),
    };
    assert_int_equal(choose(c, 4, true), 1);
    /* without the CLBlast set the preference lands on the defaults directly */
    c[2].ok = false;
    assert_int_equal(choose(c, 4, true), 1);
}

static void test_gpu_machine_keeps_cpu_that_wins_clearly(void **state)
{
    (void)state;
    hd_tune_candidate c[] = {
        timed(HD_BACKEND_FUSED, NULL, 11.6),
        timed(HD_BACKEND_CPU, NULL, 10.0),
        timed(HD_BACKEND_CLBLAST, NULL, 30.0),
    };
    assert_int_equal(choose(c, 3, true), 1);
    c[0].median_s = 11.4 * US; /* within 15 %: the device */
    assert_int_equal(choose(c, 3, true), 0);
}

/* PoCL: the OpenCL device is the CPU itself, every candidate host-timed alike. */
static void test_cpu_device_machine_records_the_fastest_backend(void **state)
{
    (void)state;
    hd_tune_candidate c[] = {
        timed(HD_BACKEND_CPU, NULL, 10.0),
        timed(HD_BACKEND_FUSED, NULL, 10.5),
    };
    assert_int_equal(choose(c, 2, false), 0);
}

/* A device candidate that failed its check is never the preference. */
static void test_failed_candidates_are_never_chosen(void **state)
{
    (void)state;
    hd_tune_candidate c[] = {
        timed(HD_BACKEND_CPU, NULL, 10.0),
        timed(HD_BACKEND_FUSED, NULL, 10.1),
        timed(HD_BACKEND_FUSED, "WG=64", 9.0),
    };
    c[1].ok = false;
    c[2].ok = false;
    assert_int_equal(choose(c, 3, true), 0);
    hd_tune_candidate only_cpu[] = {timed(HD_BACKEND_CPU, NULL, 50.0)};
    assert_int_equal(choose(only_cpu, 1, true), 0);
}

static void test_defaults_kept_unless_a_variant_wins_by_its_margin(void **state)
{
    (void)state;
    hd_tune_candidate fused[] = {
        timed(HD_BACKEND_FUSED, NULL, 10.19),
        timed(HD_BACKEND_FUSED, "WG=64 ROWS=1 CACHE=4", 10.0),
    };
    assert_int_equal(choose(fused, 2, true), 0); /* 1.9 %: the defaults */
    fused[0].median_s = 10.25 * US;
    assert_int_equal(choose(fused, 2, true), 1); /* 2.5 %: the variant */

    hd_tune_candidate clblast[] = {
        timed(HD_BACKEND_CLBLAST, NULL, 10.9),
        timed(HD_BACKEND_CLBLAST, "KWID=2", 10.0),
    };
    assert_int_equal(choose(clblast, 2, false), 0); /* 9 %: a parameter swap costs more */
    clblast[0].median_s = 11.2 * US;
    assert_int_equal(choose(clblast, 2, false), 1);
}

/* The defaults by their estimated call, fastest first, ties in list order; then the variants,
 * the backend estimated (or, as the tuner orders them again, measured) fastest first, each
 * backend's as listed. */
static void test_defaults_then_variants_fastest_backend_first(void **state)
{
    (void)state;
    const hd_tune_candidate cand[] = {
        {HD_BACKEND_CPU, NULL, 0, false},         {HD_BACKEND_CLBLAST, NULL, 0, false},
        {HD_BACKEND_FUSED, NULL, 0, false},       {HD_BACKEND_CLBLAST_FUSED, NULL, 0, false},
        {HD_BACKEND_CLBLAST, "KWID=2", 0, false}, {HD_BACKEND_FUSED, "WG=256 ROWS=4", 0, false},
        {HD_BACKEND_CLBLAST, "KWID=8", 0, false}, {HD_BACKEND_FUSED, "WG=64 ROWS=1", 0, false},
    };
    double est_s[HD_BACKEND_COUNT] = {0};
    est_s[HD_BACKEND_CPU] = 32e-3;
    est_s[HD_BACKEND_CLBLAST] = 1e-3;
    est_s[HD_BACKEND_FUSED] = 0.17e-3;
    est_s[HD_BACKEND_CLBLAST_FUSED] = 1e-3;
    size_t order[8];
    hd__tune_order(cand, 8, est_s, order);
    /* the defaults by estimate, then fused's variants, then CLBlast's, each as listed */
    const size_t want[] = {2, 1, 3, 0, 5, 7, 4, 6};
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(order[i], want[i]);
    /* measured the other way round (CLBlast's defaults faster): its variants first */
    est_s[HD_BACKEND_CLBLAST] = 0.1e-3;
    hd__tune_order(cand, 8, est_s, order);
    const size_t measured[] = {1, 2, 3, 0, 4, 6, 5, 7};
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(order[i], measured[i]);
    /* variants of one backend alone, and nothing */
    hd__tune_order(cand + 5, 1, est_s, order);
    assert_int_equal(order[0], 0);
    const hd_tune_candidate fused_only[] = {{HD_BACKEND_FUSED, "A=1", 0, false},
                                            {HD_BACKEND_FUSED, "A=2", 0, false}};
    hd__tune_order(fused_only, 2, est_s, order);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[1], 1);
    hd__tune_order(cand, 0, est_s, order);
}

/* After the device preference, the variant it chose still gives way to its defaults only
 * within the margin: a fused variant 10 % faster than its defaults stays. */
static void test_device_preference_then_defaults_rule(void **state)
{
    (void)state;
    hd_tune_candidate c[] = {
        timed(HD_BACKEND_CPU, NULL, 9.5),
        timed(HD_BACKEND_FUSED, NULL, 11.0),
        timed(HD_BACKEND_FUSED, "TN=8 KS=32", 10.0),
    };
    assert_int_equal(choose(c, 3, true), 2);
    assert_int_equal(choose(c, 3, false), 0);
}

/* Finalists timed by device events and queued: the one within a few percent of the best in
 * both modes wins over one that is best in one mode and far behind in the other (as measured
 * at gemm 4096x4096x4096: CLBlast the faster by device time and behind queued, the fused engine
 * the reverse); ties go to the lower device time; a finalist without a queued time is judged by its
 * device time alone; where no finalist has one, the device time decides. */
static void test_balanced_finalist_is_within_both_modes(void **state)
{
    (void)state;
    const hd_backend fused3[] = {HD_BACKEND_FUSED, HD_BACKEND_FUSED, HD_BACKEND_FUSED};
    const double device[] = {3.15, 3.26, 3.40};
    const double queued[] = {3.46, 3.26, 3.30};
    assert_int_equal(hd__tune_balanced(device, queued, fused3, 3, true), 1);
    const double close_device[] = {3.15, 3.16};
    const double close_queued[] = {3.20, 3.20};
    assert_int_equal(hd__tune_balanced(close_device, close_queued, fused3, 2, true), 0);
    const double tie_device[] = {2.0, 1.0, 1.0};
    const double tie_queued[] = {1.0, 1.0, 1.0};
    assert_int_equal(hd__tune_balanced(tie_device, tie_queued, fused3, 3, true), 1);
    const double untimed[] = {NAN, 3.5, NAN};
    const double device2[] = {3.2, 3.1, 3.0};
    assert_int_equal(hd__tune_balanced(device2, untimed, fused3, 3, true), 2);
    const double none[] = {NAN, NAN};
    const double device3[] = {2.0, 1.5};
    assert_int_equal(hd__tune_balanced(device3, none, fused3, 2, true), 1);
    assert_int_equal(hd__tune_balanced(device3, none, fused3, 0, true), (size_t)-1);
}

/* On a GPU, a CLBlast finalist not timed queued is weighed at its device time and 5 % (rule 3):
 * a lead of 0.6 % in device time alone does not win it the record, one of 8 % does; timed
 * queued, or off a GPU, it is weighed as timed. */
static void test_balanced_charges_clblast_untimed_queued(void **state)
{
    (void)state;
    const hd_backend backend[] = {HD_BACKEND_CLBLAST, HD_BACKEND_FUSED};
    const double none[] = {NAN, NAN};
    const double close[] = {4.25e-3, 4.28e-3};
    assert_int_equal(hd__tune_balanced(close, none, backend, 2, true), 1);
    assert_int_equal(hd__tune_balanced(close, none, backend, 2, false), 0);
    const double far[] = {3.90e-3, 4.28e-3};
    assert_int_equal(hd__tune_balanced(far, none, backend, 2, true), 0);
    const double queued[] = {4.30e-3, 4.32e-3}; /* timed queued: as fast there too */
    assert_int_equal(hd__tune_balanced(close, queued, backend, 2, true), 0);
    const double slow_queued[] = {4.55e-3, 4.29e-3};
    assert_int_equal(hd__tune_balanced(close, slow_queued, backend, 2, true), 1);
}

static void assert_seconds(double got, double want)
{
    if (fabs(got - want) > 1e-12)
        fail_msg("%.17g s, want %.17g s", got, want);
}

/* A run limited in time: each case's share of what is left, less what each case left is
 * expected to take beyond its budget, so that a steady overrun (uncharged builds and checks)
 * still leaves the last cases time; at least the defaults' timing while time is left; never
 * below 1 ms, nor negative. */
static void test_case_share_leaves_room_for_the_overrun(void **state)
{
    (void)state;
    assert_seconds(hd__tune_case_share(240.0, 86, 0.0, 0.1), 240.0 / 86);
    /* a second a case beyond the budget: 86 s of the 240 set aside */
    assert_seconds(hd__tune_case_share(240.0, 86, 1.0, 0.1), 154.0 / 86);
    /* the cases so far done in time: the share grows again */
    double before = hd__tune_case_share(100.0, 40, 1.0, 0.1);
    assert_true(hd__tune_case_share(100.0, 40, 0.5, 0.1) > before);
    /* the overrun outgrows the time left: the defaults' timing, then what is left */
    assert_seconds(hd__tune_case_share(10.0, 20, 1.0, 0.25), 0.25);
    assert_seconds(hd__tune_case_share(0.2, 20, 1.0, 0.25), 0.2);
    /* the time is out: 1 ms, which skips what cannot fit */
    assert_seconds(hd__tune_case_share(-3.0, 5, 1.0, 0.25), 1e-3);
    assert_seconds(hd__tune_case_share(0.0, 0, 0.0, 0.0), 1e-3);
    /* summed over a run whose cases each overrun by the expected amount, the shares and the
     * overruns fit the time */
    double left = 240.0, overrun = 1.0;
    for (size_t cases = 86; cases > 0; cases--)
        left -= hd__tune_case_share(left, cases, overrun, 0.05) + overrun;
    assert_true(left > -1e-9);
}

/* A record needs every backend within reach of the winner timed: a backend whose defaults the
 * budget left untimed, estimated under hopeless times the winner's time, makes the comparison
 * incomplete; one estimated far slower, or the winner's own, does not. */
static void test_untimed_contender_blocks_the_record(void **state)
{
    (void)state;
    double untimed[HD_BACKEND_COUNT] = {0.0};
    assert_int_equal(hd__tune_untimed_contender(untimed, HD_BACKEND_CLBLAST, 4.78e-3, 3.0),
                     HD_BACKEND_AUTO);
    untimed[HD_BACKEND_FUSED] = 3.2e-3; /* LoRA backward, 4096 tokens: fused untimed */
    assert_int_equal(hd__tune_untimed_contender(untimed, HD_BACKEND_CLBLAST, 4.78e-3, 3.0),
                     HD_BACKEND_FUSED);
    assert_int_equal(hd__tune_untimed_contender(untimed, HD_BACKEND_FUSED, 3.1e-3, 3.0),
                     HD_BACKEND_AUTO);
    untimed[HD_BACKEND_FUSED] = 0.0;
    untimed[HD_BACKEND_CPU] = 0.5; /* the CPU, estimated 100 times the winner */
    assert_int_equal(hd__tune_untimed_contender(untimed, HD_BACKEND_FUSED, 5e-3, 3.0),
                     HD_BACKEND_AUTO);
    untimed[HD_BACKEND_CPU] = 1.4e-2; /* within three times */
    assert_int_equal(hd__tune_untimed_contender(untimed, HD_BACKEND_FUSED, 5e-3, 3.0),
                     HD_BACKEND_CPU);
}

/* A checked call: timed where it fits and is not hopeless; where it decides otherwise and
 * took over four times its estimate, run again where the budget holds it, else untimed at
 * its estimate; after the second call, or within four times the estimate, hopeless or over
 * the budget as it stands. */
static void test_checked_call_stalled_is_run_again_or_untimed(void **state)
{
    (void)state;
    /* fused's defaults for GEMM 4096 x 4096 x 512 TN and CLBlast's call, as choose.h tells */
    double est = 4e-4, best = 5.5e-4;
    assert_int_equal(hd__tune_checked_call(3.8e-4, est, best, 0.5, false), HD_TUNE_CHECKED_TIME);
    assert_int_equal(hd__tune_checked_call(3.8e-4, est, 0.0, 0.5, false), HD_TUNE_CHECKED_TIME);
    assert_int_equal(hd__tune_checked_call(0.37, est, best, 1.2, false), HD_TUNE_CHECKED_RUN_AGAIN);
    assert_int_equal(hd__tune_checked_call(0.62, est, best, 0.53, false), HD_TUNE_CHECKED_STALLED);
    assert_int_equal(hd__tune_checked_call(0.62, est, 0.0, 0.53, false),
                     HD_TUNE_CHECKED_STALLED); /* over the budget, nothing timed before it */
    assert_int_equal(hd__tune_checked_call(3.9e-4, est, best, 0.8, true), HD_TUNE_CHECKED_TIME);
    /* slow on both calls: what it is */
    assert_int_equal(hd__tune_checked_call(0.37, est, best, 1.2, true), HD_TUNE_CHECKED_HOPELESS);
    assert_int_equal(hd__tune_checked_call(0.37, est, 0.0, 0.9, true), HD_TUNE_CHECKED_OVER_BUDGET);
    /* within four times its estimate: the estimate was wrong, not the call */
    assert_int_equal(hd__tune_checked_call(0.06, 0.02, 1e-3, 1.0, false), HD_TUNE_CHECKED_HOPELESS);
    assert_int_equal(hd__tune_checked_call(0.06, 0.02, 0.05, 0.1, false),
                     HD_TUNE_CHECKED_OVER_BUDGET);
    /* hopeless needs 50 ms: short calls are compared by their timings */
    assert_int_equal(hd__tune_checked_call(0.04, 0.01, 1e-3, 1.0, false), HD_TUNE_CHECKED_TIME);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_machine_records_device_over_narrowly_faster_cpu),
        cmocka_unit_test(test_defaults_then_variants_fastest_backend_first),
        cmocka_unit_test(test_gpu_machine_keeps_cpu_that_wins_clearly),
        cmocka_unit_test(test_cpu_device_machine_records_the_fastest_backend),
        cmocka_unit_test(test_failed_candidates_are_never_chosen),
        cmocka_unit_test(test_defaults_kept_unless_a_variant_wins_by_its_margin),
        cmocka_unit_test(test_device_preference_then_defaults_rule),
        cmocka_unit_test(test_balanced_finalist_is_within_both_modes),
        cmocka_unit_test(test_balanced_charges_clblast_untimed_queued),
        cmocka_unit_test(test_case_share_leaves_room_for_the_overrun),
        cmocka_unit_test(test_untimed_contender_blocks_the_record),
        cmocka_unit_test(test_checked_call_stalled_is_run_again_or_untimed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
