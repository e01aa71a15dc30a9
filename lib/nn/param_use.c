/*
 * lib/nn/param_use.c - parameters made whole for their module's forward
 * (doc/plans.md, "ZeRO").
 *
 * Under a plan's ZeRO-2 or -3 a parameter lives split over the
 * data-parallel ranks. mf_module_use_begin(m) swaps each such parameter
 * of m for a gathered copy (a differentiable boxing, whose backward
 * reduce-scatters the gradient back into the split), so the module's
 * forward reads whole parameters and knows nothing of the split;
 * mf_module_use_end(m) puts the split ones back. Under ZeRO-3 the copy
 * is transient: what backward keeps of it has no bytes, and backward
 * gathers it again (lib/global/regather.c). In a recompute's second
 * forward, whose backward follows at once, the copy is kept.
 *
 * Prefetch: the modules' order of use in a forward is recorded as a
 * chain (each module's successor); entering a module starts the
 * gathers of the next PREFETCH modules in that chain, so they run while
 * this one computes. A backward cuts the chain and drops the gathers
 * still unused, so the end of one forward does not fetch the start of
 * the next (whose parameters the optimizer is about to change); a gather
 * of bytes changed since it started is dropped too.
 *
 * Deterministic mode sets a sink (lib/pipeline/shards.c): then the
 * gathered copy has no graph to the split parameter, and each use's
 * whole gradient goes to the sink, which sums the shards in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include "lib/nn/nn_internal.h"
#include "lib/global/global_internal.h"

/* modules gathered ahead of the one in use */
enum { PREFETCH = 2 };

typedef struct use_param {
    bool split;          /* gathered for use */
    mf_nd_sbp to;        /* what it is gathered to */
    mf_tensor *home;     /* the split parameter while the gathered copy is in its slot */
    mfi_prefetch *pf;    /* a gather started early */
    uint32_t version;    /* of the split parameter's bytes when it started */
} use_param;

struct mfi_use_state {
    int stage;           /* 2 or 3 */
    int depth;           /* nested mf_module_use_begin */
    int n;               /* params */
    use_param *p;
    mf_module *next;     /* used after this one in the last forward */
    mf_module *prev_in_list, *next_in_list;
};

static mf_module *chain_last;   /* the last module entered since the chain was cut */
static mf_module *all;          /* every module with a use state (to unlink on destroy) */
static double gather_s, wait_s;

static bool enabled(const mf_module *m) { return m && m->use; }

mf_status mfi_module_set_use(mf_module *m, int index, int stage, const mf_nd_sbp *to)
{
    if (!m || index < 0 || index >= m->nparams || stage < 2 || stage > 3 || !to)
        MF_FAIL(MF_ERR_INTERNAL, "mfi_module_set_use: bad argument");
    struct mfi_use_state *u = m->use;
    if (u && u->depth) MF_FAIL(MF_ERR_STATE, "placing a parameter of a module whose forward is running");
    if (!u) {
        if (!(u = calloc(1, sizeof *u)) || !(u->p = calloc((size_t)m->nparams, sizeof *u->p))) {
            free(u);
            MF_FAIL(MF_ERR_NOMEM, "ZeRO-%d: out of memory", stage);
        }
        u->n = m->nparams;
        u->next_in_list = all;
        if (all) all->use->prev_in_list = m;
        all = m;
        m->use = u;
    }
    if (index >= u->n) MF_FAIL(MF_ERR_STATE, "a parameter registered after the plan was applied");
    u->stage = stage;
    u->p[index].split = true;
    u->p[index].to = *to;
    return MF_OK;
}

static void drop_prefetch(use_param *q)
{
    mfi_prefetch_free(q->pf);
    q->pf = NULL;
}

void mfi_module_use_free(mf_module *m)
{
    struct mfi_use_state *u = m ? m->use : NULL;
    if (!u) return;
    for (int i = 0; i < u->n; i++) drop_prefetch(&u->p[i]);
    for (mf_module *o = all; o; o = o->use->next_in_list)
        if (o->use->next == m) o->use->next = NULL;
    if (chain_last == m) chain_last = NULL;
    if (u->prev_in_list) u->prev_in_list->use->next_in_list = u->next_in_list;
    else all = u->next_in_list;
    if (u->next_in_list) u->next_in_list->use->prev_in_list = u->prev_in_list;
    free(u->p);
    free(u);
    m->use = NULL;
}

void mfi_module_use_cut(void)
{
    chain_last = NULL;
    for (mf_module *m = all; m; m = m->use->next_in_list)
        for (int i = 0; i < m->use->n; i++) drop_prefetch(&m->use->p[i]);
}

/* the version of a global parameter's local bytes */
static uint32_t version_of(const mf_tensor *w)
{
    const mf_tensor *l = w->global ? w->global->local : NULL;
    return l && l->storage ? l->storage->version : 0;
}

/* starts the gathers of m's split parameters not started yet */
static void start(mf_module *m)
{
    struct mfi_use_state *u = m->use;
    if (u->stage < 3 || u->depth) return;
    for (int i = 0; i < u->n; i++)
        if (u->p[i].split && !u->p[i].pf) {
            mf_memory_use was = mf_memory_use_begin(MF_MEM_ZERO_GATHER);
            u->p[i].pf = mfi_gather_start(m->params[i].t, &u->p[i].to);
            mf_memory_use_begin(was);
            u->p[i].version = version_of(m->params[i].t);
        }
}

/* parameter i of m gathered for use (a new reference) */
static mf_tensor *gathered_(mf_module *m, int i, bool again)
{
    use_param *q = &m->use->p[i];
    mf_tensor *w = m->params[i].t;
    const bool transient = m->use->stage >= 3 && !again;
    if (q->pf && q->version != version_of(w)) drop_prefetch(q);   /* stale */
    if (q->pf) {
        mfi_prefetch *pf = q->pf;
        q->pf = NULL;
        return mfi_gather_finish(pf, transient, &wait_s, &gather_s);
    }
    double t0 = mf_time();   /* not started early: all of it is waited for */
    mf_tensor *g = transient ? mfi_gather_transient(w, &q->to) : mfi_redistribute(w, w->global->placement, &q->to);
    gather_s += mf_time() - t0;
    wait_s += mf_time() - t0;
    return g;
}

/* with deterministic mode's sink, the gather has no graph and the use's
 * gradient goes to the sink (mfi_use_sunk) */
static mf_tensor *gathered(mf_module *m, int i, bool again)
{
    mf_memory_use was = mf_memory_use_begin(MF_MEM_ZERO_GATHER);
    mf_tensor *g;
    if (!mfi_use_sink_on()) {
        g = gathered_(m, i, again);
    } else {
        bool prev = mf_set_grad_enabled(false);
        g = gathered_(m, i, again);
        mf_set_grad_enabled(prev);
        if (g && prev) g = mfi_use_sunk(m->params[i].t, g);
    }
    mf_memory_use_begin(was);
    return g;
}

static void put_back(mf_module *m)
{
    struct mfi_use_state *u = m->use;
    for (int i = 0; i < u->n; i++) {
        if (!u->p[i].home) continue;
        mf_tensor_destroy(m->params[i].t);
        m->params[i].t = u->p[i].home;
        u->p[i].home = NULL;
    }
}

mf_status mf_module_use_begin(mf_module *m)
{
    if (mfi_graph_rec) mfi_graph_module_enter(m);   /* the step graph names the ops inside after m */
    if (!enabled(m) || m->use->depth++) return MF_OK;
    struct mfi_use_state *u = m->use;
    const bool again = mfi_recomputing();
    if (!again) {   /* the order of use, and what comes next */
        if (chain_last && chain_last != m) chain_last->use->next = m;
        chain_last = m;
        mf_module *n = u->next;
        for (int k = 0; k < PREFETCH && n && n != m; k++, n = n->use->next) start(n);
    }
    for (int i = 0; i < u->n; i++) {
        if (!u->p[i].split) continue;
        mf_tensor *g = gathered(m, i, again);
        if (!g) {
            put_back(m);
            u->depth--;
            if (mfi_graph_rec) mfi_graph_module_leave();
            return mfi_error_context("making parameter %s of a %s whole for its forward", m->params[i].name,
                                     mf_module_type(m));
        }
        u->p[i].home = m->params[i].t;
        m->params[i].t = g;
    }
    return MF_OK;
}

void mf_module_use_end(mf_module *m)
{
    if (mfi_graph_rec) mfi_graph_module_leave();
    if (!enabled(m) || m->use->depth == 0 || --m->use->depth) return;
    put_back(m);
}

void mf_module_use_stats(double *gather_seconds, double *wait_seconds, bool reset)
{
    if (gather_seconds) *gather_seconds = gather_s;
    if (wait_seconds) *wait_seconds = wait_s;
    if (reset) gather_s = wait_s = 0;
}
