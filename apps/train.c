/*
 * apps/train.c - mpiflow-train: trains mlp, lenet or the ViT on
 * Fashion-MNIST or synthetic data, or a GPT on text or tokens
 * (apps/train_gpt.c), under any plan (apps/plan_flags.c,
 * apps/parallel.c), shows progress (loss, lr, samples/s or tokens/s,
 * ETA), optionally writes a metrics CSV, and ends with a line
 *   final test_accuracy=... test_loss=... ...   (gpt: final val_loss=...)
 * One step function serves every model and plan; what differs between
 * a classifier and a language model is the task's (apps/train_task.c).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "apps/parallel.h"
#include "apps/plan_flags.h"
#include "apps/preempt.h"
#include "apps/train_device.h"
#include "apps/train_gpt.h"
#include "apps/train_opts.h"
#include "apps/train_task.h"
#include "apps/train_run.h"
#include "apps/plan_search.h"
#include "apps/plan_trial.h"
#include "mpiflow.h"

#define EXIT_BAD_INPUT 2

/* Prints the failure on every rank that saw it and returns the exit code. */
static int report(const char *what, int code)
{
    fprintf(stderr, "mpiflow-train: error: %s%s%s\n", what ? what : "", what ? ": " : "", mf_last_error());
    return code;
}

static int input_code(mf_status st)
{
    return st == MF_ERR_IO || st == MF_ERR_FORMAT || st == MF_ERR_ARG ? EXIT_BAD_INPUT : 1;
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, n, "--:--");
        return;
    }
    long t = lround(s);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(run *r, int64_t step, int64_t epoch, double loss, double lr, double sps, double elapsed, bool last)
{
    if (mf_rank() != 0) return;
    char eta[32];
    double per_step = step > r->start_step ? elapsed / (double)(step - r->start_step) : 0;
    fmt_time(per_step * (double)(r->total_steps - step), eta, sizeof eta);
    if (r->bar) {
        int width = 24, fill = (int)(width * ((double)step / (double)r->total_steps));
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
        bar[width] = '\0';
        printf("\r[%s] %lld/%lld ep %lld/%lld loss %.4f lr %.3g %.0f %s/s ETA %s ", bar, (long long)step,
               (long long)r->total_steps, (long long)epoch + 1, (long long)r->total_epochs, loss, lr, sps,
               r->task->units, eta);
        if (last) putchar('\n');
    } else {
        printf("step %lld/%lld  epoch %lld/%lld  loss %.4f  lr %.3g  %.0f %s/s  eta %s\n", (long long)step,
               (long long)r->total_steps, (long long)epoch + 1, (long long)r->total_epochs, loss, lr, sps,
               r->task->units, eta);
    }
    fflush(stdout);
}

/* one evaluation batch through the pipeline: v = {loss sum, correct} */
static mf_status pipe_eval(run *r, int64_t rows, mf_tensor *x, mf_tensor *y, double *v)
{
    int n = r->par.micro_batches < rows ? r->par.micro_batches : (int)rows;
    mf_tensor *mx[MF_LOADER_MAX_MICRO], *my[MF_LOADER_MAX_MICRO];
    mf_status st = par_micro_batches(&r->par, rows, n, false, x, y, mx, my);
    if (st == MF_OK)
        st = mf_pipeline_eval(r->par.pipe, n, mx, my, r->task->stage_eval, r->model, 2, v);
    run_destroy_all(n, mx);
    run_destroy_all(n, my);
    return st;
}

/* Mean loss and accuracy on the test split, in eval mode. */
static mf_status evaluate(run *r, double *loss, double *acc)
{
    bool gpt = r->gpt;
    mf_loader_opts lo = {gpt ? r->o.batch_size : r->o.eval_batch_size, 0, false, false, r->mean, r->std, false,
                         r->par.shard_index, r->par.shard_count, r->par.micro_batches};
    mf_loader *l = mf_loader_create(r->test, &lo);
    if (!l) return mf_last_status();
    uint64_t draws = mf_rng_draws();   /* evaluation leaves training's random stream as it was */
    mf_module_train(r->model, false);
    mf_no_grad_begin();
    double sum = 0, correct = 0;
    int64_t n = 0, batches = mf_loader_batches_per_epoch(l);
    if (gpt && batches > r->o.val_batches) batches = r->o.val_batches;
    mf_status st = MF_OK;
    for (int64_t b = 0; b < batches && st == MF_OK; b++) {
        mf_tensor *x, *y;
        st = mf_loader_next(l, &x, &y);
        if (st == MF_OK && r->par.pipe) {
            double v[2];
            st = pipe_eval(r, mf_loader_batch_rows(l), x, y, v);
            sum += v[0];
            correct += v[1];
            n += mf_loader_batch_rows(l);
            mf_tensor_destroy(x);
            mf_tensor_destroy(y);
            continue;
        }
        if (st == MF_OK) st = par_batch(&r->par, mf_loader_batch_rows(l), &x, &y);
        if (st != MF_OK) break;
        double v[2];
        st = r->task->eval(r->model, x, y, v);
        sum += v[0];
        correct += v[1];
        n += mf_tensor_dim(x, 0);
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
    }
    mf_no_grad_end();
    mf_module_train(r->model, true);
    mf_rng_set_draws(draws);
    mf_loader_destroy(l);
    *loss = n ? sum / (double)n : NAN;
    *acc = n && r->task->accuracy ? correct / (double)n : NAN;
    return st;
}

/* --trace: writes the file and says how much of the gradient
 * communication backward hid (every rank's spans; the mean over ranks) */
static int trace_report(run *r)
{
    double comm = 0, hidden = mf_trace_hidden("comm", "backward", &comm);
    double v[2] = {hidden * comm, comm};
    if (mf_allreduce(v, 2, MF_F64, MF_COLL_MPI) != MF_OK) return report("--trace", 1);
    if (mf_trace_write(r->o.trace) != MF_OK) return report("--trace", 1);
    if (mf_rank() == 0) {
        if (v[1] > 0)
            printf("trace: %s; gradient communication %.3f ms per step per rank, %.0f%% of it hidden behind "
                   "backward\n",
                   r->o.trace, v[1] / mf_world_size() / (double)(r->total_steps - r->start_step) * 1e3,
                   100 * v[0] / v[1]);
        else
            printf("trace: %s; no bucketed gradient communication (one rank, or --bucket-mb 0)\n", r->o.trace);
        fflush(stdout);
    }
    return 0;
}

static void print_profile(double elapsed)
{
    double total = 0;
    printf("profile (rank 0, training loop %.2f s):\n  %-12s %10s %8s %8s\n", elapsed, "class", "seconds", "share",
           "calls");
    for (int c = 0; c < MF_PROF_COUNT; c++) {
        int64_t calls;
        double s = mf_profile_seconds((mf_prof_class)c, &calls);
        total += s;
        printf("  %-12s %10.3f %7.1f%% %8lld\n", mf_profile_class_name((mf_prof_class)c), s, 100 * s / elapsed,
               (long long)calls);
    }
    printf("  %-12s %10.3f %7.1f%%\n", "outside", elapsed - total, 100 * (elapsed - total) / elapsed);
}

/* this rank's communication per training step (doc/collectives.md) */
static void print_comm(int64_t steps)
{
    mf_comm_tally t;
    mf_comm_tally_get(&t);
    printf("communication per step (rank 0, %lld steps):", (long long)steps);
    bool any = false;
    for (int k = 0; k < MF_COMM_KINDS; k++) {
        if (!t.calls[k]) continue;
        printf("%s %s %.2f calls %.4f MiB", any ? ";" : "", mf_comm_kind_name((mf_comm_kind)k),
               (double)t.calls[k] / (double)steps, (double)t.bytes[k] / (double)steps / 1048576.0);
        any = true;
    }
    printf("%s\n", any ? "" : " none");
}

/* Loss and throughput since the last log line. */
#define STEP_TIMES 1024

typedef struct meter {
    double t0, t_log, window, sum, last_loss;
    int64_t in_window, step_log;
    double step_s[STEP_TIMES];   /* the last steps' wall times */
    int nsteps;
    int64_t peak;                /* the most bytes in use during a step, above those before the model */
    mf_memory_breakdown at_peak; /* what they were for at that moment */
} meter;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median step time (the first step, which makes the optimizer's
 * state and warms the caches, left out when there are more) and the
 * peak memory per rank, the largest of any rank: what mpiflow-plan
 * predicts */
/* the peak's parts (MiB) on the rank whose peak is the largest: ZeRO
 * gathers, communication buffers, the head's logits, size-class slack
 * and the gradients alive then */
#define PARTS 5
static void step_stats(const run *r, const meter *m, double *median_s, double *peak_mib, double parts[PARTS])
{
    double t[STEP_TIMES];
    int n = m->nsteps < STEP_TIMES ? m->nsteps : STEP_TIMES, from = n > 1 && m->nsteps <= STEP_TIMES;
    memcpy(t, m->step_s + from, (size_t)(n - from) * sizeof *t);
    qsort(t, (size_t)(n - from), sizeof *t, cmp_double);
    *median_s = n - from > 0 ? t[(n - from) / 2] : NAN;
    int nr = mf_world_size();
    double *v = calloc((size_t)nr * (PARTS + 1), sizeof *v), *mine = v ? v + (size_t)mf_rank() * (PARTS + 1) : NULL;
    *peak_mib = NAN;
    for (int k = 0; k < PARTS; k++) parts[k] = NAN;
    if (!v) return;
    const mf_memory_breakdown *a = &m->at_peak, *b = &r->mem_base_parts;
    const int use[PARTS] = {MF_MEM_ZERO_GATHER, MF_MEM_COMM, MF_MEM_LOGITS, -1, MF_MEM_GRADS};   /* -1: slack */
    mine[0] = (double)m->peak / 1048576.0;
    for (int k = 0; k < PARTS; k++)
        mine[1 + k] = (double)(use[k] < 0 ? a->slack - b->slack : a->bytes[use[k]] - b->bytes[use[k]]) / 1048576.0;
    if (mf_allreduce(v, nr * (PARTS + 1), MF_F64, MF_COLL_MPI) == MF_OK) {
        int most = 0;
        for (int i = 1; i < nr; i++)
            if (v[i * (PARTS + 1)] > v[most * (PARTS + 1)]) most = i;
        *peak_mib = v[most * (PARTS + 1)];
        for (int k = 0; k < PARTS; k++) parts[k] = v[most * (PARTS + 1) + 1 + k];
    }
    free(v);
}

static void meter_step(run *r, meter *m, int64_t done, int64_t epoch, double lr, double loss)
{
    const train_opts *o = &r->o;
    m->window += loss;
    m->sum += loss;
    m->in_window++;
    m->last_loss = loss;
    bool last = done == r->total_steps;
    double now = mf_time();
    bool log_now = done % o->log_every == 0 || last;
    if (!log_now && !(r->bar && (now - m->t_log > 0.1 || last))) return;
    double sps = (double)(done - m->step_log) * (double)o->batch_size * (double)r->sample_tokens / fmax(now - m->t_log, 1e-9);
    double avg = m->window / (double)m->in_window;
    if (log_now && r->metrics) {
        fprintf(r->metrics, "%lld,%lld,%.9g,%.9g,%.1f,%.3f%s\n", (long long)done, (long long)epoch + 1, avg, lr, sps,
                now - m->t0, r->gpt ? "," : "");
        fflush(r->metrics);
    }
    progress(r, done, epoch, avg, lr, sps, now - m->t0, last);
    if (log_now) {
        m->window = 0;
        m->in_window = 0;
        m->t_log = now;
        m->step_log = done;
    }
}

static int epoch_report(run *r, int64_t epoch)
{
    double tl, ta;
    if (evaluate(r, &tl, &ta) != MF_OK) return report("evaluation", 1);
    if (mf_rank() == 0) {
        printf("%sepoch %lld done: test_accuracy=%.4f test_loss=%.4f\n", r->bar ? "\n" : "", (long long)epoch + 1, ta,
               tl);
        fflush(stdout);
    }
    return 0;
}

/* --val-every: the validation loss, printed and added to the metrics */
static int val_report(run *r, int64_t done)
{
    double vl, unused;
    if (evaluate(r, &vl, &unused) != MF_OK) return report("validation", 1);
    if (mf_rank() == 0) {
        printf("%sstep %lld val_loss=%.4f\n", r->bar ? "\n" : "", (long long)done, vl);
        fflush(stdout);
        if (r->metrics) {
            fprintf(r->metrics, "%lld,,,,,,%.9g\n", (long long)done, vl);
            fflush(r->metrics);
        }
    }
    return 0;
}

static int final_report(run *r, const meter *m)
{
    double elapsed = mf_time() - m->t0;
    kernel_tally(r->par.dev);
    if (r->o.profile && mf_rank() == 0) {
        print_profile(elapsed);
        if (r->total_steps > r->start_step) print_comm(r->total_steps - r->start_step);
    }
    double test_loss = NAN, test_acc = NAN, step_med, peak_mib, parts[PARTS];
    step_stats(r, m, &step_med, &peak_mib, parts);
    if (r->autoplan && mf_rank() == 0) {
        const double M = 1048576.0;
        const candidate *p = &r->predicted;
        printf("mpiflow-train: --plan auto: ran %s; predicted %.2f ms a step and %.2f MiB per rank; measured %.2f ms "
               "(median) and %.2f MiB (the most of any rank)\n", p->flags, p->time.step * 1e3, (double)p->peak / M,
               step_med * 1e3, peak_mib);
        printf("mpiflow-train: --plan auto: of the peak, predicted / measured MiB: gradients %.2f / %.2f, "
               "ZeRO gathers %.2f / %.2f, communication buffers %.2f / %.2f, logits %.2f / %.2f, "
               "size-class slack %.2f / %.2f\n", (double)p->grads_peak / M, parts[4], (double)p->gather / M, parts[0],
               (double)p->comm / M, parts[1], (double)p->logits / M, parts[2], (double)p->slack / M, parts[3]);
        fflush(stdout);
    }
    if (r->o.eval && evaluate(r, &test_loss, &test_acc) != MF_OK) return report("evaluation", 1);
    if (r->gpt && mf_rank() == 0) {
        if (r->metrics && r->o.eval) fprintf(r->metrics, "%lld,,,,,,%.9g\n", (long long)r->total_steps, test_loss);
        printf("final val_loss=%.4f train_loss=%.4f last_loss=%.4f steps=%lld epochs=%.2f time_s=%.1f "
               "tokens_per_sec=%.0f step_ms=%.3f peak_mib=%.3f peak_parts_mib=%.3f,%.3f,%.3f,%.3f,%.3f\n",
               test_loss, m->sum / (double)(r->total_steps - r->start_step), m->last_loss, (long long)r->total_steps,
               (double)r->total_steps / (double)r->steps_per_epoch, elapsed,
               (double)(r->total_steps - r->start_step) * (double)r->o.batch_size * (double)r->sample_tokens / elapsed,
               step_med * 1e3, peak_mib, parts[0], parts[1], parts[2], parts[3], parts[4]);
        fflush(stdout);
        return 0;
    }
    if (mf_rank() == 0) {
        printf("final test_accuracy=%.4f test_loss=%.4f train_loss=%.4f last_loss=%.4f steps=%lld epochs=%.2f "
               "time_s=%.1f samples_per_sec=%.0f step_ms=%.3f peak_mib=%.3f peak_parts_mib=%.3f,%.3f,%.3f,%.3f,%.3f\n",
               test_acc, test_loss, m->sum / (double)(r->total_steps - r->start_step), m->last_loss,
               (long long)r->total_steps,
               (double)r->total_steps / (double)r->steps_per_epoch, elapsed,
               (double)(r->total_steps - r->start_step) * (double)r->o.batch_size / elapsed, step_med * 1e3, peak_mib,
               parts[0], parts[1], parts[2], parts[3], parts[4]);
        fflush(stdout);
    }
    return 0;
}

/* --checkpoint's directory exists and is writable here, and neither
 * PATH nor PATH.tmp is a directory: checked before training, not found
 * out at the first save hours later */
static bool ckpt_dir_ok(const char *path, char *err, size_t len)
{
    char dir[4096], tmp[4200];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct stat sb;
    const char *why = stat(dir, &sb) != 0 ? strerror(errno)
                      : !S_ISDIR(sb.st_mode)  ? "not a directory"
                      : access(dir, W_OK | X_OK) != 0 ? strerror(errno)
                                                      : NULL;
    if (why) {
        snprintf(err, len, "--checkpoint: cannot write checkpoints into %.300s: %s", dir, why);
        return false;
    }
    const char *names[] = {path, tmp};
    for (int i = 0; i < 2; i++)
        if (stat(names[i], &sb) == 0 && !S_ISREG(sb.st_mode)) {
            snprintf(err, len, "--checkpoint: %.300s exists and is not a file (%s); name a file to write", names[i],
                     S_ISDIR(sb.st_mode) ? "a directory" : "a special file");
            return false;
        }
    return true;
}

/* --checkpoint: model, optimizer, data position and step */
static int save(run *r, int64_t done)
{
    mf_train_state ts = {done, mf_loader_epoch(r->loader), mf_loader_cursor(r->loader), r->o.seed};
    mf_ckpt_opts co = {.keep_last = (int)r->o.keep_last, .fletcher32 = r->o.fletcher32};
    if (mf_ckpt_save_ex(r->o.checkpoint, r->model, r->optim, &ts, &co) != MF_OK)
        return report("saving the checkpoint", 1);
    if (mf_rank() == 0) {
        printf("%scheckpoint %s: step %lld\n", r->bar ? "\n" : "", r->o.checkpoint, (long long)done);
        fflush(stdout);
    }
    return 0;
}

/* After a stop request (SIGUSR1, SIGTERM or SIGINT, agreed by every
 * rank): the checkpoint of this step, and exit 0, so that a requeued job
 * resumes from it. A stop before the first step saves the state it
 * would train from (the initial or the resumed one), unless --checkpoint
 * is the file it resumed from. Without --checkpoint nothing is saved and
 * the exit status is 128 + the signal's number: 0 means a checkpoint. */
static int stop_early(run *r, int64_t done, int sig, bool saved)
{
    bool first = done == r->start_step;
    bool same = r->o.resume && r->o.checkpoint && !strcmp(r->o.resume, r->o.checkpoint);
    if (first) saved = same;
    if (r->o.checkpoint && !saved && save(r, done)) return 1;
    preempt_finished();
    if (mf_rank() == 0) {
        const char *name = preempt_name(sig);
        if (first)
            printf("%smpiflow-train: %s: stopped before the first step (at step %lld of %lld)", r->bar ? "\n" : "",
                   name, (long long)done, (long long)r->total_steps);
        else
            printf("%smpiflow-train: %s: stopped after step %lld of %lld", r->bar ? "\n" : "", name, (long long)done,
                   (long long)r->total_steps);
        if (r->o.checkpoint) printf("; resume with --resume %s\n", r->o.checkpoint);
        else printf("; nothing saved (no --checkpoint)\n");
        fflush(stdout);
    }
    return r->o.checkpoint ? 0 : 128 + sig;
}

static int train(run *r)
{
    const train_opts *o = &r->o;
    mf_profile_reset();   /* count the training loop only */
    mf_comm_tally_reset();
    meter m = {0};
    m.t0 = m.t_log = mf_time();
    m.last_loss = NAN;
    m.step_log = r->start_step;
    /* a signal since start-up (loading the data, resuming) is honoured too */
    int early = r->start_step < r->total_steps ? preempt_agreed() : 0;
    if (early) return stop_early(r, r->start_step, early, false);
    if (r->start_step == r->total_steps && mf_rank() == 0) {
        printf("mpiflow-train: the checkpoint is at step %lld of %lld: nothing left to train\n",
               (long long)r->start_step, (long long)r->total_steps);
        fflush(stdout);
    }
    for (int64_t step = r->start_step; step < r->total_steps; step++) {
        double lr = r->sched ? mf_lr_schedule_at(r->sched, step) : o->lr;
        mf_optim_set_lr(r->optim, lr);
        double loss = NAN, ts = mf_time();
        mf_memory_reset_peak();
        if (run_train_step(r, &loss) != MF_OK) return report("training step", 1);
        m.step_s[m.nsteps++ % STEP_TIMES] = mf_time() - ts;
        mf_memory_stats ms;
        mf_memory_get_total_stats(&ms);
        if (ms.peak - r->mem_base > m.peak) {
            m.peak = ms.peak - r->mem_base;
            mf_memory_get_breakdown(NULL, &m.at_peak);
        }
        if (!isfinite(loss)) {
            fprintf(stderr, "mpiflow-train: error: the loss is %g at step %lld; lower --lr or add --clip-grad\n", loss,
                    (long long)step + 1);
            return 1;
        }
        int64_t epoch = mf_loader_epoch(r->loader);
        bool epoch_end = mf_loader_cursor(r->loader) + o->batch_size > mf_dataset_size(r->train);
        meter_step(r, &m, step + 1, epoch, lr, loss);
        bool saved = o->save_every && (step + 1) % o->save_every == 0;
        if (saved && save(r, step + 1)) return 1;
        int sig = step + 1 < r->total_steps ? preempt_agreed() : 0;
        if (sig) return stop_early(r, step + 1, sig, saved);
        if (!r->gpt && epoch_end && step + 1 < r->total_steps && o->eval && r->total_epochs > 1 && epoch_report(r, epoch))
            return 1;
        if (r->gpt && o->val_every && (step + 1) % o->val_every == 0 && step + 1 < r->total_steps && o->eval &&
            val_report(r, step + 1))
            return 1;
    }
    if (o->checkpoint && !(o->save_every && r->total_steps % o->save_every == 0) && save(r, r->total_steps)) return 1;
    return final_report(r, &m);
}

int main(int argc, char **argv)
{
    run r;
    memset(&r, 0, sizeof r);
    candidate *lead = NULL;   /* --plan auto: the plans to try */
    int nlead = 0;
    char err[512];
    preempt_install();   /* from start-up on: a stop requested while loading is honoured before the first step */
    int pr = train_opts_parse(argc, argv, &r.o, err, sizeof err);
    if (pr == 1) return 0;
    mf_status ist = mf_init(&argc, &argv);
    if (ist == MF_ERR_ARG) {   /* a bad MF_* environment variable */
        fprintf(stderr, "mpiflow-train: error: %s\n", mf_last_error());
        return EXIT_BAD_INPUT;
    }
    if (ist != MF_OK) {
        fprintf(stderr, "mpiflow-train: error: cannot start MPI: %s\n", mf_last_error());
        return 1;
    }
    int code = 0;
    if (pr == 2) {
        /* every rank parsed the same flags and reports the same message */
        fprintf(stderr, "mpiflow-train: error: %s\n", err);
        code = EXIT_BAD_INPUT;
        goto out;
    }
    if (r.o.checkpoint) {
        bool ok = ckpt_dir_ok(r.o.checkpoint, err, sizeof err);
        if (mf_agree(ok ? MF_OK : MF_ERR_IO) != MF_OK) {
            fprintf(stderr, "mpiflow-train: error: %s\n", ok ? "--checkpoint: the directory is not writable on another rank" : err);
            code = EXIT_BAD_INPUT;
            goto out;
        }
    }
    if (r.o.threads) mf_set_threads(r.o.threads);
    if (r.o.profile) mf_profile_enable(true);
    if (!strcmp(r.o.precision, "bf16") && !strcmp(r.o.device, "cpu") && !mf_cpu_bf16_native()) {
        /* emulated bf16 is slower than fp32 and no more accurate: refuse it rather than train slowly */
        const char *why = !mf_cpu_engine_available(MF_CPU_ONEDNN) ? "oneDNN is not in this build"
                          : mf_cpu_engine_get() != MF_CPU_ONEDNN ? "MF_CPU_ENGINE=openblas chose OpenBLAS, which has no bf16 kernels"
                                                                 : "this CPU has neither AVX512_BF16 nor AMX";
        fprintf(stderr, "mpiflow-train: error: --precision bf16 on --device cpu needs the oneDNN engine and a CPU "
                        "with AVX512_BF16 or AMX: %s. Train in fp32, or see doc/cpu.md\n", why);
        code = EXIT_BAD_INPUT;
        goto out;
    }
    if (!strcmp(r.o.precision, "bf16")) mf_autocast_set(MF_PRECISION_BF16);
    if (!strcmp(r.o.precision, "bf16") && !strcmp(r.o.device, "cpu")) bf16_advice();
    if (!strcmp(r.o.device, "cuda")) {   /* before the model: its parameters are made there */
        mf_status dst = mf_agree(mf_set_default_device(MF_DEV_CUDA));
        if (dst != MF_OK) {
            fprintf(stderr, "mpiflow-train: error: --device cuda: %s\n", mf_last_error());
            code = EXIT_BAD_INPUT;
            goto out;
        }
    }
    if (r.o.plan && !strcmp(r.o.plan, "auto")) {   /* every rank predicts every plan, and chooses the same */
        r.autoplan = true;
        code = plan_auto(&r.o, &r.predicted, &lead, &nlead);
        if (code) goto out;
    }
    r.bar = r.o.progress == 1 || (r.o.progress == -1 && isatty(STDOUT_FILENO));
    r.gpt = !strcmp(r.o.model, "gpt");
    r.task = train_task_of(r.o.model);
    r.sample_tokens = 1;
    mf_status st = run_load_data(&r);
    if (r.gpt) r.sample_tokens = r.gc.seq_len;
    if (st != MF_OK && r.err[0]) {
        fprintf(stderr, "mpiflow-train: error: %s\n", r.err);
        code = EXIT_BAD_INPUT;
        goto out;
    }
    if (st != MF_OK) {
        code = report("loading data", input_code(st));
        goto out;
    }
    if (nlead > 1) {   /* --plan auto: the leading plans tried for real */
        st = plan_trial(&r, lead, nlead, &r.predicted);
        if (st != MF_OK) {
            code = report("--plan auto", 1);
            goto out;
        }
        plan_apply_candidate(&r.o, &r.predicted);
    }
    mf_memory_stats base;
    mf_memory_get_total_stats(&base);
    r.mem_base = base.in_use;   /* what the data took: not the plan's */
    mf_memory_get_breakdown(&r.mem_base_parts, NULL);
    st = mf_agree(run_build(&r));
    if (st != MF_OK) {
        if (r.err[0]) {
            fprintf(stderr, "mpiflow-train: error: %s\n", r.err);
            code = EXIT_BAD_INPUT;
        } else {
            code = report("setting up", input_code(st));
        }
        goto out;
    }
    if (r.o.print_plan) {   /* the plan as --plan reads it (stdout), each parameter's SBP and rule (stderr) */
        const mf_placement *p = r.par.nstages ? r.par.stage[0] : r.par.p;
        code = plan_print_all(r.plan, r.model, p) == MF_OK ? 0 : report("--print-plan", 1);
        goto out;
    }
    if (mf_rank() == 0) {
        printf("mpiflow-train: model %s (%lld parameters), %s: %lld train / %lld test samples\n", r.o.model,
               (long long)mf_module_num_parameters(r.model), r.o.dataset, (long long)mf_dataset_size(r.train),
               r.test ? (long long)mf_dataset_size(r.test) : 0LL);
        char pd[256];
        par_describe(&r.par, pd, sizeof pd);
        printf("mpiflow-train: batch %lld, %s lr %g, %lld steps (%lld per epoch), %d rank(s) x %d thread(s), "
               "parallel %s%s%s\n",
               (long long)r.o.batch_size, r.o.optimizer, r.o.lr, (long long)r.total_steps,
               (long long)r.steps_per_epoch, mf_world_size(), mf_threads(), pd,
               r.o.recompute ? ", recompute " : "", r.o.recompute ? r.o.recompute : "");
        char dd[512];
        if (strcmp(r.o.device, "cpu") || strcmp(r.o.precision, "fp32"))
            printf("mpiflow-train: device %s, precision %s\n", mf_device_describe(mf_default_device(), dd, sizeof dd),
                   r.o.precision);
        if (!strcmp(r.o.device, "cpu"))
            printf("mpiflow-train: cpu engine: %s\n", mf_cpu_engine_describe(dd, sizeof dd));
        fflush(stdout);
    }
    device_lines(r.par.dev);
    if (r.o.resume) {
        mf_train_state ts;
        st = mf_ckpt_load(r.o.resume, r.model, r.optim, &ts);
        if (st == MF_OK) st = mf_loader_seek(r.loader, ts.epoch, ts.cursor);
        if (st != MF_OK) {
            /* a checkpoint that is missing, damaged or does not fit is bad input */
            bool ours = st == MF_ERR_MPI || st == MF_ERR_NOMEM || st == MF_ERR_INTERNAL;
            code = report("--resume", ours ? 1 : EXIT_BAD_INPUT);
            goto out;
        }
        if (ts.seed != r.o.seed) {   /* the data order and dropout masks depend on it */
            fprintf(stderr, "mpiflow-train: error: --resume: %s was written with --seed %llu but this run has "
                    "--seed %llu; resume with --seed %llu (the data order and dropout depend on it)\n", r.o.resume,
                    (unsigned long long)ts.seed, (unsigned long long)r.o.seed, (unsigned long long)ts.seed);
            code = EXIT_BAD_INPUT;
            goto out;
        }
        if (ts.step > r.total_steps) {   /* the same on every rank: the agreed checkpoint */
            fprintf(stderr, "mpiflow-train: error: --resume: %s is at step %lld, beyond the %lld steps of this run; "
                    "resume with --steps %lld or more\n", r.o.resume, (long long)ts.step, (long long)r.total_steps,
                    (long long)ts.step);
            code = EXIT_BAD_INPUT;
            goto out;
        }
        r.start_step = ts.step;
        if (mf_rank() == 0) {
            printf("mpiflow-train: resumed from %s at step %lld (epoch %lld, sample %lld)\n", r.o.resume,
                   (long long)ts.step, (long long)ts.epoch + 1, (long long)ts.cursor);
            fflush(stdout);
        }
    }
    if (r.o.trace) mf_trace_enable(true);
    code = train(&r);
    if (code == 0 && r.o.trace) code = trace_report(&r);
    if (code == 0 && r.o.dump_params && par_dump_params(r.model, r.o.dump_params) != MF_OK)
        code = report("--dump-params", 1);
out:
    free(lead);
    run_cleanup(&r);
    mf_finalize();
    return code;
}
