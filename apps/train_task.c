/*
 * apps/train_task.c - mpiflow-train's tasks (apps/train_task.h): an
 * image classifier (cross-entropy over classes, accuracy, samples/s) and
 * a GPT language model (cross-entropy over the next token through the
 * tied head, no accuracy, tokens/s).
 */
#include <string.h>
#include "apps/train_task.h"

/* ------------------------------------------------------------ classify */
static mf_tensor *classify_loss(mf_module *m, mf_tensor *x, mf_tensor *y)
{
    mf_tensor *out = mf_module_forward(m, x), *loss = out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
    mf_tensor_destroy(out);
    return loss;
}

/* the summed loss and the right answers of an output */
static mf_status classify_metric(mf_tensor *out, mf_tensor *y, void *user, mf_tensor **vals)
{
    (void)user;
    mf_tensor *pred = mf_argmax(out, 1, false);
    mf_tensor *eq = pred ? mf_eq(pred, y) : NULL;
    vals[0] = mf_cross_entropy(out, y, MF_REDUCTION_SUM);
    vals[1] = eq ? mf_sum_all(eq) : NULL;
    mf_tensor_destroy(pred);
    mf_tensor_destroy(eq);
    return vals[0] && vals[1] ? MF_OK : mf_last_status();
}

/* vals from the metric's tensors; takes them */
static mf_status items(mf_status st, mf_tensor **t, double *vals)
{
    for (int i = 0; i < 2; i++) {
        if (st == MF_OK) vals[i] = mf_tensor_item(t[i]);
        mf_tensor_destroy(t[i]);
    }
    return st;
}

static mf_status classify_eval(mf_module *m, mf_tensor *x, mf_tensor *y, double *vals)
{
    mf_tensor *out = mf_module_forward(m, x), *t[2] = {NULL, NULL};
    mf_status st = out ? classify_metric(out, y, NULL, t) : mf_last_status();
    mf_tensor_destroy(out);
    return items(st, t, vals);
}

/* ------------------------------------------------------ language model */
/* the last stage's: the mean over the micro-batch's tokens, weighted by
 * its rows (as the evaluation sums it), and no answers to count */
static mf_status lm_metric(mf_tensor *out, mf_tensor *y, void *gpt, mf_tensor **vals)
{
    mf_tensor *mean = mf_gpt_pipeline_loss(out, y, gpt);
    vals[0] = mean ? mf_scale(mean, (double)mf_tensor_shape(y)[0]) : NULL;
    vals[1] = vals[0] ? mf_scalar(MF_F32, 0.0) : NULL;
    mf_tensor_destroy(mean);
    return vals[0] && vals[1] ? MF_OK : mf_last_status();
}

static mf_status lm_eval(mf_module *m, mf_tensor *x, mf_tensor *y, double *vals)
{
    mf_tensor *mean = mf_gpt_loss(m, x, y);
    if (!mean) return mf_last_status();
    vals[0] = mf_tensor_item(mean) * (double)mf_tensor_shape(y)[0];
    vals[1] = 0;
    mf_tensor_destroy(mean);
    return MF_OK;
}

static const train_task tasks[] = {
    {"classify", "samples", "step,epoch,loss,lr,samples_per_sec,elapsed_s\n", true, classify_loss, NULL, NULL,
     classify_eval, classify_metric},
    {"language model", "tokens", "step,epoch,loss,lr,tokens_per_sec,elapsed_s,val_loss\n", false, mf_gpt_loss,
     mf_gpt_pipeline_loss, mf_gpt_pipeline_loss_sum, lm_eval, lm_metric},
};

const train_task *train_task_of(const char *model)
{
    return &tasks[model && !strcmp(model, "gpt")];
}
