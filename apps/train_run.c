/*
 * apps/train_run.c - one training run: data, model, plan, optimizer,
 * loader, and the one step every model and plan share
 * (apps/train_run.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/plan_flags.h"
#include "apps/train_gpt.h"
#include "apps/train_run.h"

mf_status run_load_data(run *r)
{
    const train_opts *o = &r->o;
    mf_status st = MF_OK;
    if (r->gpt) {
        st = mf_agree(gpt_load(o, &r->gc, &r->train, &r->test, r->err, sizeof r->err));
        r->mean = 0;
        r->std = 1;
        return st;
    }
    if (!strcmp(o->dataset, "synthetic")) {
        r->train = mf_dataset_synthetic(o->synthetic_train, 1, 28, 28, 10, o->seed, true);
        r->test = r->train ? mf_dataset_synthetic(o->synthetic_test, 1, 28, 28, 10, o->seed, false) : NULL;
    } else {
        r->train = mf_dataset_fashion_mnist(o->data_dir, true);
        r->test = r->train && o->eval ? mf_dataset_fashion_mnist(o->data_dir, false) : NULL;
    }
    if (!r->train || (o->eval && !r->test)) st = mf_last_status();
    if (st == MF_OK && r->test) {   /* found now, not after all the training */
        int64_t a[3], b[3];
        mf_dataset_sample_shape(r->train, a);
        mf_dataset_sample_shape(r->test, b);
        if (a[0] != b[0] || a[1] != b[1] || a[2] != b[2])
            snprintf(r->err, sizeof r->err, "the test set (%s) has images of %lldx%lldx%lld but the training set (%s) "
                     "%lldx%lldx%lld", mf_dataset_source(r->test), (long long)b[0], (long long)b[1], (long long)b[2],
                     mf_dataset_source(r->train), (long long)a[0], (long long)a[1], (long long)a[2]);
        else if (mf_dataset_classes(r->test) > mf_dataset_classes(r->train))
            snprintf(r->err, sizeof r->err, "the test set (%s) has labels up to %d but the training set only %d classes",
                     mf_dataset_source(r->test), mf_dataset_classes(r->test) - 1, mf_dataset_classes(r->train));
        if (r->err[0]) st = MF_ERR_FORMAT;   /* the same on every rank: the same files */
    }
    st = mf_agree(st);
    if (st != MF_OK) return st;
    /* Fashion-MNIST's usual constants; synthetic data gets its own. */
    if (!strcmp(o->dataset, "fashion-mnist")) {
        r->mean = 0.2860;
        r->std = 0.3530;
    } else {
        mf_dataset_stats(r->train, &r->mean, &r->std);
    }
    return MF_OK;
}

mf_status run_build_model(run *r, const int64_t *shape, int classes, const char *source)
{
    const train_opts *o = &r->o;
    mf_manual_seed(o->seed);
    r->model = r->gpt ? mf_model_gpt(&r->gc) : mf_model_create(o->model, shape[0], shape[1], shape[2], classes);
    if (!r->model && r->gpt) {
        snprintf(r->err, sizeof r->err, "--model gpt: %s", mf_last_error());
        return MF_ERR_ARG;
    }
    if (!r->model) {   /* the data does not fit the model: bad input */
        snprintf(r->err, sizeof r->err, "--model %s cannot take the images of %s (%lldx%lldx%lld): %s", o->model,
                 source, (long long)shape[0], (long long)shape[1], (long long)shape[2],
                 mf_last_error());
        return MF_ERR_ARG;
    }
    if (!(r->plan = plan_for_run(&r->o, r->model, mf_world_size(), r->err, sizeof r->err))) return MF_ERR_ARG;
    if (r->gpt && o->recompute)
        mf_gpt_set_recompute(r->model, !strcmp(o->recompute, "block") ? MF_RECOMPUTE_BLOCK
                                       : !strcmp(o->recompute, "attn") ? MF_RECOMPUTE_ATTN
                                                                        : MF_RECOMPUTE_NONE);
    mf_status pst = par_setup(&r->par, o, r->plan, r->model, r->err, sizeof r->err);
    if (pst != MF_OK) return pst;
    if (o->print_plan) return MF_OK;   /* main prints it and exits */
    r->params = mf_module_parameters(r->model);
    if (!r->params) return mf_last_status();
    if (!strcmp(o->optimizer, "sgd") || !strcmp(o->optimizer, "momentum")) {
        mf_sgd_opts s = mf_sgd_defaults();
        s.lr = o->lr;
        s.momentum = o->momentum;
        s.weight_decay = o->weight_decay;
        r->optim = mf_sgd_create(r->params, &s);
    } else if (!strcmp(o->optimizer, "rmsprop")) {
        mf_rmsprop_opts s = mf_rmsprop_defaults();
        s.lr = o->lr;
        s.momentum = o->momentum;
        s.weight_decay = o->weight_decay;
        r->optim = mf_rmsprop_create(r->params, &s);
    } else {
        mf_adam_opts s = !strcmp(o->optimizer, "adamw") ? mf_adamw_defaults() : mf_adam_defaults();
        s.lr = o->lr;
        s.weight_decay = o->weight_decay;
        s.decay_matrices_only = r->gpt;   /* GPT-2's recipe: no decay on biases and LayerNorms */
        if (r->gpt) s.beta2 = 0.95;
        r->optim = !strcmp(o->optimizer, "adamw") ? mf_adamw_create(r->params, &s) : mf_adam_create(r->params, &s);
    }
    if (!r->optim) return mf_last_status();
    mf_status bst = mf_optim_set_bucket_mb(r->optim, o->bucket_mb);
    if (bst == MF_OK) bst = mf_optim_set_zero(r->optim, o->zero >= 2 ? 0 : o->zero);   /* 2, 3: the parameters' SBP */
    if (bst != MF_OK) return bst;
    return MF_OK;
}

mf_status run_build(run *r)
{
    const train_opts *o = &r->o;
    int64_t shape[3];
    mf_dataset_sample_shape(r->train, shape);
    mf_status st = run_build_model(r, shape, mf_dataset_classes(r->train), mf_dataset_source(r->train));
    if (st != MF_OK || o->print_plan) return st;
    bool prefetch = o->prefetch < 0 ? mf_threads() < mf_cores() : o->prefetch > 0;
    mf_loader_opts lo = {o->batch_size, o->seed, o->shuffle, true, r->mean, r->std, prefetch, r->par.shard_index,
                         r->par.shard_count, r->par.loader_micro};
    r->loader = mf_loader_create(r->train, &lo);
    if (!r->loader) return mf_last_status();
    r->steps_per_epoch = mf_loader_batches_per_epoch(r->loader);
    r->total_steps = o->steps ? o->steps : o->epochs * r->steps_per_epoch;
    r->total_epochs = (r->total_steps + r->steps_per_epoch - 1) / r->steps_per_epoch;
    if (!strcmp(o->schedule, "step")) r->sched = mf_lr_step_create(o->lr, o->step_size, o->gamma);
    else if (!strcmp(o->schedule, "cosine"))
        r->sched = mf_lr_cosine_create(o->lr, o->warmup < 0 ? r->total_steps / 20 : o->warmup, r->total_steps, o->lr_min);
    else if (!strcmp(o->schedule, "piecewise")) r->sched = mf_lr_piecewise_create(o->npieces, o->boundaries, o->values);
    if (strcmp(o->schedule, "constant") && !r->sched) return mf_last_status();
    if (o->metrics && mf_rank() == 0) {
        r->metrics = fopen(o->metrics, "w");
        if (!r->metrics) {
            fprintf(stderr, "mpiflow-train: error: --metrics: cannot write %s\n", o->metrics);
            return MF_ERR_IO;
        }
        fputs(r->task->csv_header,
              r->metrics);
    }
    return MF_OK;
}


void run_destroy_all(int n, mf_tensor **t)
{
    for (int i = 0; i < n; i++) mf_tensor_destroy(t[i]);
}

mf_status run_step(run *r, mf_tensor *x, mf_tensor *y, int64_t rows, double *loss_out)
{
    mf_pipeline *pipe = r->par.pipe;
    const int n = pipe ? r->par.micro_batches : 0;
    mf_tensor *mx[MF_LOADER_MAX_MICRO], *my[MF_LOADER_MAX_MICRO], *loss = NULL;
    mf_status st;
    st = pipe ? par_micro_batches(&r->par, rows, n, r->par.shards > 0, x, y, mx, my) : par_batch(&r->par, rows, &x, &y);
    if (st != MF_OK) {
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
        return st;
    }
    double t0 = mf_time();
    st = mf_optim_zero_grad(r->optim);
    if (st == MF_OK && pipe) {
        st = mf_pipeline_train_step(pipe, mx, my, r->par.shards ? r->task->stage_loss_sum : r->task->stage_loss,
                                    r->model, loss_out);
    } else if (st == MF_OK) {
        loss = r->task->loss(r->model, x, y);
        if (!loss) st = mf_last_status();
    }
    double t1 = mf_time();
    if (st == MF_OK && loss) st = mf_backward(loss);
    double t2 = mf_time();
    if (st == MF_OK && r->o.clip_grad > 0) st = mf_clip_grad_norm(r->params, r->o.clip_grad, NULL);
    if (st == MF_OK) st = mf_optim_step(r->optim);
    if (st == MF_OK && loss) *loss_out = mf_tensor_item(loss);
    double t3 = mf_time();
    if (!pipe) {   /* the pipeline records its own micro-batches' spans */
        mf_trace_span("forward", "compute", 0, t0, t1);
        mf_trace_span("backward", "compute", 0, t1, t2);
    }
    mf_trace_span("optimizer step", "compute", 0, t2, t3);
    run_destroy_all(n, mx);
    run_destroy_all(n, my);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(loss);
    return st;
}

mf_status run_train_step(run *r, double *loss_out)
{
    mf_tensor *x, *y;
    mf_status st = mf_loader_next(r->loader, &x, &y);
    if (st != MF_OK) return st;
    return run_step(r, x, y, mf_loader_batch_rows(r->loader), loss_out);
}

void run_cleanup(run *r)
{
    if (r->metrics) fclose(r->metrics);
    mf_lr_schedule_destroy(r->sched);
    mf_optim_destroy(r->optim);
    mf_tensor_list_destroy(r->params);
    mf_module_destroy(r->model);
    mf_loader_destroy(r->loader);
    par_destroy(&r->par);
    mf_plan_destroy(r->plan);
    mf_dataset_destroy(r->train);
    mf_dataset_destroy(r->test);
}

