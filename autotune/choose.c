#include "autotune/choose.h"

#include <math.h>

int hd__tune_fastest(const hd_tune_candidate *cand, size_t count, hd_backend b, bool defaults_only)
{
    int best = -1;
    for (size_t i = 0; i < count; i++) {
        bool which =
            b == HD_BACKEND_AUTO ? cand[i].backend != HD_BACKEND_CPU : cand[i].backend == b;
        if (cand[i].ok && which && (!defaults_only || cand[i].variant == NULL) &&
            (best < 0 || cand[i].median_s < cand[best].median_s))
            best = (int)i;
    }
    return best;
}

int hd__tune_choose(const hd_tune_candidate *cand, size_t count, int fastest, bool device_is_gpu)
{
    int chosen = fastest;
    if (device_is_gpu && cand[chosen].backend == HD_BACKEND_CPU) {
        int device = hd__tune_fastest(cand, count, HD_BACKEND_AUTO, false);
        if (device >= 0 &&
            cand[device].median_s <= cand[chosen].median_s * (1.0 + HD_TUNE_PREFER_DEVICE))
            chosen = device;
    }
    int defaults = hd__tune_fastest(cand, count, cand[chosen].backend, true);
    double prefer = cand[chosen].backend == HD_BACKEND_CLBLAST ? HD_TUNE_PREFER_CLBLAST_DEFAULTS
                                                               : HD_TUNE_PREFER_DEFAULTS;
    if (defaults >= 0 && cand[defaults].median_s <= cand[chosen].median_s * (1.0 + prefer))
        chosen = defaults;
    return chosen;
}

void hd__tune_order(const hd_tune_candidate *cand, size_t count, const double *est_s, size_t *order)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (cand[i].variant != NULL)
            continue;
        size_t j = n++;
        for (; j > 0 && est_s[cand[order[j - 1]].backend] > est_s[cand[i].backend]; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    /* the variants by their backend's estimate, each backend's in list order */
    for (size_t i = 0; i < count; i++) {
        if (cand[i].variant == NULL)
            continue;
        size_t j = n++;
        for (; j > 0 && cand[order[j - 1]].variant != NULL &&
               est_s[cand[order[j - 1]].backend] > est_s[cand[i].backend];
             j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
}

/* device_s of finalist i as hd__tune_balanced weighs it */
static double weighed_device_s(const double *device_s, const double *queued_s,
                               const hd_backend *backend, size_t i, bool gpu)
{
    bool charged = gpu && isnan(queued_s[i]) && backend[i] == HD_BACKEND_CLBLAST;
    return charged ? device_s[i] * (1.0 + HD_TUNE_CLBLAST_QUEUED) : device_s[i];
}

size_t hd__tune_balanced(const double *device_s, const double *queued_s, const hd_backend *backend,
                         size_t n, bool gpu)
{
    double best_device = INFINITY, best_queued = INFINITY;
    for (size_t i = 0; i < n; i++) {
        best_device = fmin(best_device, weighed_device_s(device_s, queued_s, backend, i, gpu));
        if (!isnan(queued_s[i]))
            best_queued = fmin(best_queued, queued_s[i]);
    }
    size_t winner = (size_t)-1;
    double winner_ratio = INFINITY;
    for (size_t i = 0; i < n; i++) {
        double ratio = weighed_device_s(device_s, queued_s, backend, i, gpu) / best_device;
        if (!isnan(queued_s[i]))
            ratio = fmax(ratio, queued_s[i] / best_queued);
        if (winner == (size_t)-1 || ratio < winner_ratio ||
            (ratio == winner_ratio && device_s[i] < device_s[winner])) {
            winner = i;
            winner_ratio = ratio;
        }
    }
    return winner;
}

double hd__tune_case_share(double left_s, size_t cases_left, double overrun_s, double least_s)
{
    if (cases_left == 0)
        cases_left = 1;
    double share = (left_s - overrun_s * (double)cases_left) / (double)cases_left;
    double least = fmin(least_s, left_s);
    share = share > least ? share : least;
    return share > 1e-3 ? share : 1e-3;
}

hd_backend hd__tune_untimed_contender(const double *untimed_s, hd_backend winner, double winner_s,
                                      double hopeless)
{
    for (int b = 0; b < HD_BACKEND_COUNT; b++)
        if ((hd_backend)b != winner && untimed_s[b] > 0.0 && untimed_s[b] < hopeless * winner_s)
            return (hd_backend)b;
    return HD_BACKEND_AUTO;
}

hd_tune_checked hd__tune_checked_call(double first_s, double estimate_s, double best_s,
                                      double left_s, bool ran_again)
{
    bool hopeless = best_s > 0.0 && first_s > 20.0 * best_s && first_s > 0.05;
    bool over_budget = 3.0 * first_s > left_s;
    if (!hopeless && !over_budget)
        return HD_TUNE_CHECKED_TIME;
    bool stalled = estimate_s > 0.0 && first_s > 4.0 * estimate_s;
    if (stalled && !ran_again)
        return first_s < left_s ? HD_TUNE_CHECKED_RUN_AGAIN : HD_TUNE_CHECKED_STALLED;
    return hopeless ? HD_TUNE_CHECKED_HOPELESS : HD_TUNE_CHECKED_OVER_BUDGET;
}
