/*
 * lib/optim/schedule.c - learning rate as a function of the step:
 * piecewise constant (OneFlow's PiecewiseConstantScheduler), step decay
 * (StepLR) and cosine with linear warmup.
 */
#include <math.h>
#include "lib/internal.h"

typedef enum { SCHED_PIECEWISE, SCHED_STEP, SCHED_COSINE } sched_kind;

struct mf_lr_schedule {
    sched_kind kind;
    int n;
    int64_t *boundaries;
    double *values;
    double base, gamma, lr_min;
    int64_t step_size, warmup, total;
};

static mf_lr_schedule *alloc_sched(sched_kind k)
{
    mf_lr_schedule *s = calloc(1, sizeof *s);
    if (!s) mfi_error(MF_ERR_NOMEM, "lr schedule: out of memory");
    else s->kind = k;
    return s;
}

mf_lr_schedule *mf_lr_piecewise_create(int n, const int64_t *boundaries, const double *values)
{
    if (n < 0 || !values || (n > 0 && !boundaries)) {
        mfi_error(MF_ERR_ARG, "mf_lr_piecewise_create: need n >= 0 boundaries and n+1 values");
        return NULL;
    }
    for (int i = 1; i < n; i++)
        if (boundaries[i] <= boundaries[i - 1]) {
            mfi_error(MF_ERR_ARG, "mf_lr_piecewise_create: boundaries must increase (%lld after %lld)",
                      (long long)boundaries[i], (long long)boundaries[i - 1]);
            return NULL;
        }
    mf_lr_schedule *s = alloc_sched(SCHED_PIECEWISE);
    if (!s) return NULL;
    s->n = n;
    s->boundaries = malloc((size_t)(n ? n : 1) * sizeof *s->boundaries);
    s->values = malloc((size_t)(n + 1) * sizeof *s->values);
    if (!s->boundaries || !s->values) {
        mf_lr_schedule_destroy(s);
        mfi_error(MF_ERR_NOMEM, "lr schedule: out of memory");
        return NULL;
    }
    if (n) memcpy(s->boundaries, boundaries, (size_t)n * sizeof *boundaries);
    memcpy(s->values, values, (size_t)(n + 1) * sizeof *values);
    return s;
}

mf_lr_schedule *mf_lr_step_create(double base, int64_t step_size, double gamma)
{
    if (step_size < 1) {
        mfi_error(MF_ERR_ARG, "mf_lr_step_create: step_size %lld must be >= 1", (long long)step_size);
        return NULL;
    }
    mf_lr_schedule *s = alloc_sched(SCHED_STEP);
    if (!s) return NULL;
    s->base = base;
    s->step_size = step_size;
    s->gamma = gamma;
    return s;
}

mf_lr_schedule *mf_lr_cosine_create(double base, int64_t warmup, int64_t total, double lr_min)
{
    if (warmup < 0 || total < 1 || warmup > total) {
        mfi_error(MF_ERR_ARG, "mf_lr_cosine_create: need 0 <= warmup (%lld) <= total (%lld) and total >= 1",
                  (long long)warmup, (long long)total);
        return NULL;
    }
    mf_lr_schedule *s = alloc_sched(SCHED_COSINE);
    if (!s) return NULL;
    s->base = base;
    s->warmup = warmup;
    s->total = total;
    s->lr_min = lr_min;
    return s;
}

double mf_lr_schedule_at(const mf_lr_schedule *s, int64_t step)
{
    switch (s->kind) {
    case SCHED_PIECEWISE: {
        int i = 0;
        while (i < s->n && step >= s->boundaries[i]) i++;
        return s->values[i];
    }
    case SCHED_STEP:
        return s->base * pow(s->gamma, (double)(step / s->step_size));
    case SCHED_COSINE:
        if (step < s->warmup) return s->base * (double)(step + 1) / (double)s->warmup;
        if (step >= s->total) return s->lr_min;
        {
            double t = (double)(step - s->warmup) / (double)(s->total - s->warmup);
            return s->lr_min + 0.5 * (s->base - s->lr_min) * (1.0 + cos(M_PI * t));
        }
    }
    return 0.0;
}

void mf_lr_schedule_destroy(mf_lr_schedule *s)
{
    if (!s) return;
    free(s->boundaries);
    free(s->values);
    free(s);
}
