/*
 * apps/plan_trial.c - --plan auto's trial (apps/plan_trial.h,
 * doc/planning.md, "Trying the leading plans").
 *
 * The prediction ranks plans well where they differ by more than its
 * error; among the few it cannot tell apart, a few real steps can. Each
 * leading plan is built on the run's data as mpiflow-train would build
 * it, stepped past its first step (allocations, primitives), then until
 * it has TRIAL_MIN_STEPS steps and TRIAL_MIN_S seconds; the median step
 * is its time. Two rounds, the plans in turn, so that a slow spell of a
 * shared machine does not fall on one plan alone; each plan keeps the
 * lower of its two medians. The trial's model, optimizer and loader are
 * freed before the chosen plan is built again from the seed, so the run
 * that follows is the same as one started with the chosen plan's flags.
 */
#include <math.h>
#include <stdlib.h>
#include "apps/plan_trial.h"

enum { TRIAL_MIN_STEPS = 3, TRIAL_MAX_STEPS = 64, TRIAL_ROUNDS = 2 };
#define TRIAL_MIN_S 0.25

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* candidate c built on r's data and stepped; *median its median step */
static mf_status try_plan(const run *r, const candidate *c, double *median)
{
    run t = *r;   /* the data, shared; the rest built here */
    t.o.metrics = NULL;
    t.o.print_plan = false;
    plan_apply_candidate(&t.o, c);
    t.o.plan = NULL;
    t.err[0] = 0;
    double s[TRIAL_MAX_STEPS], loss;
    int n = 0;
    mf_status st = mf_agree(run_build(&t));
    if (st == MF_OK) st = mf_agree(run_train_step(&t, &loss));   /* the first sets up what later steps reuse */
    for (double total = 0; st == MF_OK;) {
        double t0 = mf_time();
        st = run_train_step(&t, &loss);
        s[n] = mf_time() - t0;
        total += s[n++];
        /* every rank stops after as many steps, or at a failure of any: the ranks' mean time decides */
        double mean = total;
        st = mf_agree(st);
        if (st == MF_OK) st = mf_allreduce(&mean, 1, MF_F64, MF_COLL_MPI);
        if (n >= TRIAL_MAX_STEPS || (n >= TRIAL_MIN_STEPS && mean / mf_world_size() >= TRIAL_MIN_S)) break;
    }
    if (st != MF_OK && mf_rank() == 0)
        fprintf(stderr, "mpiflow-train: error: --plan auto: trying %s: %s\n", c->flags,
                t.err[0] ? t.err : mf_last_error());
    t.train = t.test = NULL;   /* r's */
    run_cleanup(&t);
    if (st != MF_OK) return st;
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    *median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    /* the sum of the ranks' medians: every rank chooses the same */
    return mf_allreduce(median, 1, MF_F64, MF_COLL_MPI) == MF_OK ? MF_OK : MF_ERR_MPI;
}

mf_status plan_trial(run *r, const candidate *lead, int n, candidate *chosen)
{
    double *best = malloc((size_t)n * sizeof *best);
    if (!best) return MF_ERR_NOMEM;
    for (int i = 0; i < n; i++) best[i] = INFINITY;
    double t0 = mf_time();
    mf_status st = MF_OK;
    for (int round = 0; round < TRIAL_ROUNDS && st == MF_OK; round++)
        for (int i = 0; i < n && st == MF_OK; i++) {
            double m = 0;
            st = try_plan(r, &lead[i], &m);
            m /= mf_world_size();   /* the ranks' mean median */
            if (st == MF_OK && m < best[i]) best[i] = m;
        }
    if (st == MF_OK) {
        int k = 0;
        for (int i = 1; i < n; i++)
            if (best[i] < best[k]) k = i;
        *chosen = lead[k];
        if (mf_rank() == 0) {
            printf("mpiflow-train: --plan auto: tried the %d leading plans (%d rounds, %.1f s); median step, measured "
                   "(predicted):\n", n, TRIAL_ROUNDS, mf_time() - t0);
            for (int i = 0; i < n; i++)
                printf("  %s %-56s %9.2f ms (%.2f ms)\n", i == k ? "*" : " ",
                       lead[i].flags, best[i] * 1e3, lead[i].time.step * 1e3);
            fflush(stdout);
        }
    }
    free(best);
    return st;
}
