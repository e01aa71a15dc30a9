/*
 * lib/pipeline/tied.c - a parameter used on two pipeline stages
 * (doc/pipeline.md, "Tied parameters").
 *
 * A GPT's token embedding is also its head: the first stage looks
 * tokens up in it and the last stage multiplies by it. Each of the two
 * stages holds the matrix, laid out the same way on a mesh of the same
 * shape, so rank i of one holds exactly the piece that rank i of the
 * other does. The first stage's copy is the parameter: the optimizer,
 * the checkpoint and the gradient clipping see it alone. The last
 * stage's is refreshed from it at the start of every step and
 * evaluation, and the gradient the head gives it is added into the
 * parameter's before the first stage's last backward. That is before the
 * data-parallel sum, which starts in that backward, so one sum covers
 * both uses, and the optimizer steps the summed gradient once, as on one
 * rank. Per step, each pair of ranks moves the piece once each way, as
 * much as Megatron-LM's allreduce of the embedding's gradient between
 * the two stages.
 *
 * Between the same two ranks the weights and the gradients flow on
 * their own tags of the pipeline communicator, once per step each, so
 * they match by order and never meet the activations.
 */
#include "lib/global/global_internal.h"
#include "lib/pipeline/tied.h"

enum { MAX_TIES = 8, TAG_WEIGHTS = 12, TAG_GRADS = 13 };

typedef struct tie {
    mf_tensor *param, *copy;
    int from, to;        /* their stages */
    int peer;            /* the paired rank in the other stage, -1 outside both */
    void *wbuf, *gbuf;   /* host staging of the weights and of the gradient */
    mfi_xreq *w, *g;     /* in flight */
    bool g_posted;       /* the param's stage awaits the gradient */
} tie;

struct mfi_ties {
    int n;
    tie t[MAX_TIES];
};

static int64_t local_numel(const mf_tensor *t) { return t->global->local ? mf_tensor_numel(t->global->local) : 0; }
static size_t local_bytes(const mf_tensor *t) { return (size_t)local_numel(t) * mf_dtype_size(mf_tensor_dtype(t)); }

mf_status mfi_ties_add(mfi_ties **ts, mf_tensor *param, int from, mf_tensor *copy, int to, mf_placement *const *pl)
{
    const char *fn = "mf_pipeline_tie";
    if (!param || !copy || !param->global || !copy->global)
        MF_FAIL(MF_ERR_ARG, "%s: the parameter and its copy must both be global tensors", fn);
    if (from >= to) MF_FAIL(MF_ERR_ARG, "%s: the copy's stage %d must come after the parameter's %d", fn, to, from);
    const mf_placement *a = pl[from], *b = pl[to];
    bool same = a->mesh_ndim == b->mesh_ndim && a->n == b->n;
    for (int d = 0; same && d < a->mesh_ndim; d++) same = a->mesh[d] == b->mesh[d];
    if (!same) MF_FAIL(MF_ERR_ARG, "%s: stages %d and %d have meshes of different shapes", fn, from, to);
    if (!mfi_nd_sbp_equal(&param->global->sbp, &copy->global->sbp) || param->ndim != copy->ndim ||
        memcmp(param->shape, copy->shape, (size_t)param->ndim * sizeof *param->shape) ||
        mf_tensor_dtype(param) != mf_tensor_dtype(copy))
        MF_FAIL(MF_ERR_ARG, "%s: the copy's shape, dtype or layout differs from the parameter's", fn);
    if (!*ts && !(*ts = calloc(1, sizeof **ts))) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", fn);
    mfi_ties *s = *ts;
    if (s->n == MAX_TIES) MF_FAIL(MF_ERR_ARG, "%s: more than %d tied parameters", fn, MAX_TIES);
    tie *t = &s->t[s->n];
    *t = (tie){mf_tensor_retain(param), mf_tensor_retain(copy), from, to, -1, NULL, NULL, NULL, NULL, false};
    if (a->index >= 0) t->peer = b->ranks[a->index];
    if (b->index >= 0) t->peer = a->ranks[b->index];
    size_t bytes = local_bytes(a->index >= 0 ? param : copy);
    if (t->peer >= 0 && (!(t->wbuf = malloc(bytes + 1)) || !(t->gbuf = malloc(bytes + 1)))) {
        free(t->wbuf);
        mf_tensor_destroy(t->param);
        mf_tensor_destroy(t->copy);
        MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", fn);
    }
    s->n++;
    return MF_OK;
}

void mfi_ties_destroy(mfi_ties *s)
{
    if (!s) return;
    mfi_ties_finish(s);
    for (int i = 0; i < s->n; i++) {
        mf_tensor_destroy(s->t[i].param);
        mf_tensor_destroy(s->t[i].copy);
        free(s->t[i].wbuf);
        free(s->t[i].gbuf);
    }
    free(s);
}

/* a local piece's values into buf (host memory) */
static mf_status stage_out(mf_tensor *local, void *buf)
{
    if (mf_tensor_device(local) == MF_DEV_META) return MF_OK;   /* a simulated step: no bytes to send */
    mf_tensor *h = mfi_on_device(local, MF_DEV_CPU), *c = h ? mfi_contiguous_raw(h) : NULL;
    mf_tensor_destroy(h);
    if (!c) return mf_last_status();
    memcpy(buf, mf_tensor_data(c), mf_tensor_nbytes(c));
    mf_tensor_destroy(c);
    return MF_OK;
}

static mf_status post(tie *t, void *buf, int64_t count, bool send, int tag, mfi_xreq **x)
{
    mfi_p2p p = {t->peer, buf, count};
    mf_dtype dt = mf_tensor_dtype(t->param);
    return send ? mfi_exchange_start(mfi_comm_pipe(), &p, 1, NULL, 0, dt, tag, x)
                : mfi_exchange_start(mfi_comm_pipe(), NULL, 0, &p, 1, dt, tag, x);
}

mf_status mfi_ties_start(mfi_ties *s, int me, bool train)
{
    for (int i = 0; s && i < s->n; i++) {
        tie *t = &s->t[i];
        if (t->peer < 0) continue;
        if (me == t->from) {
            mf_tensor *l = t->param->global->local;
            MF_TRY(mfi_exchange_wait(t->w));   /* the last step's send: its buffer is free again */
            t->w = NULL;
            MF_TRY(stage_out(l, t->wbuf));
            MF_TRY(post(t, t->wbuf, mf_tensor_numel(l), true, TAG_WEIGHTS, &t->w));
            if (train && !t->g_posted) {
                MF_TRY(post(t, t->gbuf, mf_tensor_numel(l), false, TAG_GRADS, &t->g));
                t->g_posted = true;
            }
        } else if (me == t->to) {
            mf_tensor *l = t->copy->global->local;
            mfi_xreq *x = NULL;
            MF_TRY(post(t, t->wbuf, mf_tensor_numel(l), false, TAG_WEIGHTS, &x));
            MF_TRY(mfi_exchange_wait(x));
            MF_TRY(mf_tensor_copy_in(l, mf_tensor_dtype(l), t->wbuf, mf_tensor_numel(l)));
            mf_tensor_destroy(l->grad);   /* a new step: its gradient starts again */
            l->grad = NULL;
            mfi_global_grad_changed(l);
        }
    }
    return MF_OK;
}

mf_status mfi_ties_send_grads(mfi_ties *s, int me)
{
    for (int i = 0; s && i < s->n; i++) {
        tie *t = &s->t[i];
        if (t->peer < 0 || me != t->to) continue;
        mf_tensor *l = t->copy->global->local;
        MF_TRY(mfi_exchange_wait(t->g));
        t->g = NULL;
        if (l->grad) MF_TRY(stage_out(l->grad, t->gbuf));
        else memset(t->gbuf, 0, local_bytes(t->copy));   /* the head gave it nothing */
        MF_TRY(post(t, t->gbuf, mf_tensor_numel(l), true, TAG_GRADS, &t->g));
        mf_tensor_destroy(l->grad);
        l->grad = NULL;
        mfi_global_grad_changed(l);
    }
    return MF_OK;
}

mf_status mfi_ties_add_grads(mfi_ties *s, int me)
{
    for (int i = 0; s && i < s->n; i++) {
        tie *t = &s->t[i];
        if (t->peer < 0 || me != t->from || !t->g_posted) continue;
        mf_status st = mfi_exchange_wait(t->g);
        t->g = NULL;
        t->g_posted = false;
        MF_TRY(st);
        mf_tensor *l = t->param->global->local;
        mf_tensor *h = mf_empty(mf_tensor_dtype(l), l->ndim, l->shape);
        if (!h) return mf_last_status();
        st = mf_tensor_copy_in(h, mf_tensor_dtype(l), t->gbuf, mf_tensor_numel(l));
        mf_tensor *g = st == MF_OK ? mfi_on_device(h, mf_tensor_device(l)) : NULL;
        mf_tensor_destroy(h);
        if (!g) return mf_last_status();
        bool prev = mf_set_grad_enabled(false);
        mf_tensor *sum = l->grad ? mf_add(l->grad, g) : mf_tensor_retain(g);
        mf_set_grad_enabled(prev);
        mf_tensor_destroy(g);
        if (!sum) return mf_last_status();
        mf_tensor_destroy(l->grad);
        l->grad = sum;
        mfi_global_grad_changed(l);
    }
    return MF_OK;
}

mf_status mfi_ties_finish(mfi_ties *s)
{
    mf_status st = MF_OK;
    for (int i = 0; s && i < s->n; i++) {
        tie *t = &s->t[i];
        mf_status a = mfi_exchange_wait(t->w), b = t->g_posted ? MF_OK : mfi_exchange_wait(t->g);
        t->w = NULL;
        if (!t->g_posted) t->g = NULL;
        if (st == MF_OK) st = a != MF_OK ? a : b;
    }
    return st;
}
