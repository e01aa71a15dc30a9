/*
 * lib/pipeline/schedule.c - the order in which one stage runs the
 * forward (F) and backward (B) passes of a step's micro-batches.
 *
 *   GPipe (Huang et al. 2019): every forward, then every backward.
 *     Stage s holds the activations of all M micro-batches at once.
 *   1F1B (PipeDream-flush, Narayanan et al. 2021; Megatron-LM's default):
 *     stage s runs min(P - s - 1, M) warm-up forwards, then alternates
 *     one forward and one backward, then drains the backwards. Stage s
 *     holds at most P - s micro-batches' activations, independent of M.
 *
 * Both run the backwards in micro-batch order, so every stage adds its
 * parameters' gradients up in the same order as one rank running all
 * stages: the schedules give bit-identical gradients. Both have the same
 * bubble, (P - 1) / (M + P - 1) of a step when stages take equal time.
 */
#include <stdio.h>
#include "lib/internal.h"

static const char *const names[] = {"gpipe", "1f1b"};

mf_status mf_pipeline_schedule_parse(const char *text, mf_pipeline_schedule *out)
{
    for (int i = 0; i < 2; i++)
        if (text && !strcmp(text, names[i])) {
            *out = (mf_pipeline_schedule)i;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "unknown pipeline schedule '%s' (expected gpipe or 1f1b)", text ? text : "(null)");
}

const char *mf_pipeline_schedule_name(mf_pipeline_schedule s)
{
    return s == MF_PIPELINE_GPIPE ? names[0] : s == MF_PIPELINE_1F1B ? names[1] : "unknown";
}

mf_status mf_pipeline_order(mf_pipeline_schedule sched, int nstages, int stage, int micro_batches, int *ops)
{
    const char *fn = "mf_pipeline_order";
    if (sched != MF_PIPELINE_GPIPE && sched != MF_PIPELINE_1F1B) MF_FAIL(MF_ERR_ARG, "%s: unknown schedule %d", fn, sched);
    if (nstages < 1 || nstages > MF_MAX_STAGES || stage < 0 || stage >= nstages)
        MF_FAIL(MF_ERR_ARG, "%s: stage %d of %d stages (1 .. %d)", fn, stage, nstages, MF_MAX_STAGES);
    if (micro_batches < 1) MF_FAIL(MF_ERR_ARG, "%s: %d micro-batches (at least 1)", fn, micro_batches);
    if (!ops) MF_FAIL(MF_ERR_ARG, "%s: ops is NULL", fn);
    int M = micro_batches, k = 0, f = 0, b = 0;
    int warm = sched == MF_PIPELINE_GPIPE ? M : nstages - stage - 1;
    if (warm > M) warm = M;
    while (f < warm) ops[k++] = f++;
    while (f < M) {   /* steady state: one forward, one backward */
        ops[k++] = f++;
        ops[k++] = ~b++;
    }
    while (b < M) ops[k++] = ~b++;
    return MF_OK;
}
