/*
 * lib/plan/layout.c - the SBP of every op along a tensor-parallel
 * dimension, searched (mpiflow/layout.h, doc/planning.md, "The layout
 * search").
 *
 * The graph is reduced before the search, as OneFlow's SBP search
 * eliminates: ops with the same key (a block's op in every block) are
 * one decision with a multiplicity, and the values between two such
 * decisions one edge with the count of its copies. A GPT of any depth
 * is then some twenty decisions. Branch and bound over them, in the
 * order of the forward, finds the least total: each decision's own cost
 * (compute, a parameter's gradient sync, the head's statistics) and each
 * edge's boxing, forward and backward, once both its ends are chosen.
 *
 * The boxing of a value from p to q and back. Forward: B from a split
 * is an allgather, from partial sums an allreduce; a split from partial
 * sums is a reduce-scatter; B to a split, anything to P: nothing. In
 * backward the gradient goes the other way, from what the consumer's
 * backward gives (q, or partial sums where a column-parallel layer took
 * B) to what the producer's backward takes (p, or B for a value it made
 * as partial sums): Megatron-LM's f and g, and sequence parallelism's
 * allgather and reduce-scatter pairs, fall out of it.
 */
#include <ctype.h>
#include <math.h>
#include "lib/internal.h"
#include "mpiflow/layout.h"

typedef struct sig {
    mf_layout_sbp in[2], out, param;
    bool split;      /* the op does 1/tp of its work */
    bool grad_p;     /* its input's gradient comes back as partial sums */
    int extra;       /* 1: the vocabulary-parallel cross-entropy's statistics; 2: the logits' allreduce */
    const char *role;
} sig;

#define B_ MF_LS_B
#define P_ MF_LS_P
#define T_ MF_LS_TOKENS
#define F_ MF_LS_FEATURES
#define N_ MF_LS_NONE
/* for a parameter: F_ is a split of its first axis (a linear's outputs,
 * a table's vocabulary), T_ of its second (a linear's inputs, a table's width) */
static const sig sigs_linear[] = {{{B_}, B_, B_, false, false, 0, "replicated"},
                                  {{B_}, F_, F_, true, true, 0, "column parallel"},
                                  {{F_}, P_, T_, true, false, 0, "row parallel"}};
static const sig sigs_embedding[] = {{{B_}, B_, B_, false, false, 0, "replicated"},
                                     {{B_}, P_, F_, true, false, 0, "vocabulary parallel"},
                                     {{B_}, F_, T_, true, false, 0, "split over the width"}};
static const sig sigs_head[] = {{{B_}, B_, B_, false, false, 0, "replicated"},
                                {{B_}, B_, F_, true, true, 1, "vocabulary parallel"},
                                {{F_}, B_, T_, true, false, 2, "split over the width"}};
static const sig sigs_norm[] = {{{B_}, B_, N_, false, false, 0, "replicated"},
                                {{T_}, T_, N_, true, false, 0, "split over tokens"}};
static const sig sigs_pointwise[] = {{{B_}, B_, N_, false, false, 0, "replicated"},
                                     {{T_}, T_, N_, true, false, 0, "split over tokens"},
                                     {{F_}, F_, N_, true, false, 0, "split over features"}};
static const sig sigs_add[] = {{{B_, B_}, B_, N_, false, false, 0, "replicated"},
                               {{T_, T_}, T_, N_, true, false, 0, "split over tokens"},
                               {{F_, F_}, F_, N_, true, false, 0, "split over features"},
                               {{P_, P_}, P_, N_, false, false, 0, "partial sums"}};
static const sig sigs_attention[] = {{{B_}, B_, N_, false, false, 0, "replicated"},
                                     {{F_}, F_, N_, true, false, 0, "split over heads"}};
static const sig sigs_matmul[] = {{{B_, B_}, B_, N_, false, false, 0, "replicated"},
                                  {{F_, F_}, F_, N_, true, false, 0, "split over heads"}};
static const sig sigs_other[] = {{{B_, B_}, B_, N_, false, false, 0, "replicated"}};

static const struct {
    const sig *s;
    int n;
} sigs[MF_LAYOUT_KINDS] = {{sigs_linear, 3}, {sigs_embedding, 3}, {sigs_head, 3}, {sigs_norm, 2},
                           {sigs_pointwise, 3}, {sigs_add, 4}, {sigs_attention, 2}, {sigs_matmul, 2}, {sigs_other, 1}};

typedef struct lop {
    mf_layout_kind kind;
    char *key, *name;
    int n_in, in[2];
    double in_bytes[2], out_bytes, param_bytes, time_whole, time_split, tokens;
    int param;       /* index into params, -1 */
    int group;
} lop;

typedef struct edge {   /* one edge of the reduced graph */
    int from, to, slot; /* groups (from -1: the data) */
    double bytes, mult;
} edge;

typedef struct group {
    int first;          /* its first op */
    double mult;        /* its ops */
    double owned;       /* parameters first used by its ops */
    int nsig;
} group;

struct mf_layout {
    lop *ops;
    int n, cap;
    char **params;
    int nparams;
    /* reduced, by mf_layout_search */
    group *groups;
    int ngroups;
    edge *edges;
    int nedges;
    int (*same)[2];     /* pairs of groups that share a parameter */
    int nsame;
    int *choice;        /* per group, after a search */
    double cost, compute, comm, memory;
    bool searched;
    mf_layout_env env;  /* the last search's */
};

const char *mf_layout_sbp_name(mf_layout_sbp s)
{
    static const char *const n[] = {"B", "P", "S(tokens)", "S(features)", "-"};
    return s >= MF_LS_B && s <= MF_LS_NONE ? n[s] : "?";
}

mf_layout *mf_layout_create(void)
{
    mf_layout *l = calloc(1, sizeof *l);
    if (!l) mfi_error(MF_ERR_NOMEM, "mf_layout_create: out of memory");
    return l;
}

static void reduced_free(mf_layout *l)
{
    free(l->groups);
    free(l->edges);
    free(l->same);
    free(l->choice);
    l->groups = NULL;
    l->edges = NULL;
    l->same = NULL;
    l->choice = NULL;
    l->ngroups = l->nedges = l->nsame = 0;
    l->searched = false;
}

void mf_layout_destroy(mf_layout *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free(l->ops[i].key);
        free(l->ops[i].name);
    }
    for (int i = 0; i < l->nparams; i++) free(l->params[i]);
    free(l->params);
    free(l->ops);
    reduced_free(l);
    free(l);
}

int mf_layout_num_ops(const mf_layout *l) { return l ? l->n : 0; }

int mf_layout_add_op(mf_layout *l, mf_layout_kind kind, const char *key, const char *name, int n_in, const int *in,
                     const double *in_bytes, double out_bytes, const char *param, double param_bytes,
                     double time_whole, double time_split, double tokens)
{
    if (!l || !key || kind < 0 || kind >= MF_LAYOUT_KINDS || n_in < 0 || n_in > 2 || (n_in && (!in || !in_bytes)))
        return mfi_error(MF_ERR_ARG, "mf_layout_add_op: bad arguments"), -1;
    if ((kind == MF_LAYOUT_ADD || kind == MF_LAYOUT_MATMUL) != (n_in == 2) && kind != MF_LAYOUT_OTHER)
        return mfi_error(MF_ERR_ARG, "mf_layout_add_op: %s: an add takes two inputs, the others one", key), -1;
    bool needs_param = kind == MF_LAYOUT_LINEAR || kind == MF_LAYOUT_EMBEDDING || kind == MF_LAYOUT_HEAD;
    if (needs_param != (param != NULL))
        return mfi_error(MF_ERR_ARG, "mf_layout_add_op: %s: %s", key,
                         needs_param ? "a linear, a table or a head needs its parameter" : "only a linear, a table or a head has a parameter"), -1;
    for (int i = 0; i < n_in; i++)
        if (in[i] < -1 || in[i] >= l->n)
            return mfi_error(MF_ERR_ARG, "mf_layout_add_op: %s: input %d is op %d, not one added before", key, i, in[i]), -1;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        lop *o = realloc(l->ops, (size_t)cap * sizeof *o);
        if (!o) return mfi_error(MF_ERR_NOMEM, "mf_layout_add_op: out of memory"), -1;
        l->ops = o;
        l->cap = cap;
    }
    int p = -1;
    if (param) {
        for (int i = 0; i < l->nparams && p < 0; i++)
            if (!strcmp(l->params[i], param)) p = i;
        if (p < 0) {
            char **q = realloc(l->params, (size_t)(l->nparams + 1) * sizeof *q);
            if (!q) return mfi_error(MF_ERR_NOMEM, "mf_layout_add_op: out of memory"), -1;
            l->params = q;
            if (!(q[l->nparams] = strdup(param))) return mfi_error(MF_ERR_NOMEM, "mf_layout_add_op: out of memory"), -1;
            p = l->nparams++;
        }
    }
    lop *o = &l->ops[l->n];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->key = strdup(key);
    o->name = strdup(name ? name : key);
    if (!o->key || !o->name) {
        free(o->key);
        free(o->name);
        return mfi_error(MF_ERR_NOMEM, "mf_layout_add_op: out of memory"), -1;
    }
    o->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        o->in[i] = in[i];
        o->in_bytes[i] = in_bytes[i];
    }
    o->out_bytes = out_bytes;
    o->param = p;
    o->param_bytes = param ? param_bytes : 0;
    o->time_whole = time_whole;
    o->time_split = time_split;
    o->tokens = tokens;
    reduced_free(l);
    return l->n++;
}

/* ------------------------------------------------------------ the costs */
static double coll(const mf_layout_env *e, mf_comm_kind k, double bytes)
{
    return mf_calibration_comm_time(e->cal, k, (int64_t)bytes, e->tp, e->tp_nodes);
}

/* one value's boxing from p to q */
static double boxing(const mf_layout_env *e, mf_layout_sbp p, mf_layout_sbp q, double bytes)
{
    if (p == q || q == MF_LS_P) return 0;
    if (q == MF_LS_B) return p == MF_LS_P ? coll(e, MF_COMM_ALLREDUCE, bytes) : coll(e, MF_COMM_ALLGATHER, bytes);
    if (p == MF_LS_B) return 0;
    if (p == MF_LS_P) return coll(e, MF_COMM_REDUCE_SCATTER, bytes);
    return coll(e, MF_COMM_ALLGATHER, bytes / e->tp);   /* one split to another: an all-to-all */
}

/* forward and backward of a value made as p and taken as q by s */
static double edge_cost(const mf_layout_env *e, mf_layout_sbp p, const sig *s, int slot, double bytes)
{
    mf_layout_sbp q = s->in[slot], g = s->grad_p ? MF_LS_P : q, back = p == MF_LS_P ? MF_LS_B : p;
    return boxing(e, p, q, bytes) + boxing(e, g, back, bytes);
}

/* a group's own cost under signature s: compute and communication apart */
static void op_cost(const mf_layout *l, const mf_layout_env *e, const group *gr, const sig *s, double *compute,
                    double *comm, double *mem)
{
    const lop *o = &l->ops[gr->first];
    double frac = 1.0 / e->tp, c = s->split ? o->time_split : o->time_whole, x = 0;
    if (s->extra == 1) x = 3 * coll(e, MF_COMM_ALLREDUCE, o->tokens * 4);
    /* the logits, tokens x vocabulary f32: the vocabulary is the weight's
     * bytes over a row's (the input's bytes per token) */
    if (s->extra == 2 && o->tokens > 0 && o->in_bytes[0] > 0)
        x = coll(e, MF_COMM_ALLREDUCE, 4 * o->tokens * (o->param_bytes * o->tokens / o->in_bytes[0]));
    double pbytes = o->param_bytes * (s->param == MF_LS_B ? 1 : frac);
    double sync = e->dp > 1 && o->param >= 0 ? mf_calibration_comm_time(e->cal, MF_COMM_ALLREDUCE, (int64_t)pbytes,
                                                                         e->dp, e->dp_nodes) : 0;
    double kept = 0;
    for (int i = 0; i < o->n_in; i++)
        kept += o->in_bytes[i] * (s->in[i] == MF_LS_TOKENS || s->in[i] == MF_LS_FEATURES ? frac : 1);
    *compute = gr->mult * c;
    *comm = gr->mult * x + gr->owned * sync;
    *mem = gr->mult * kept + gr->owned * 4 * pbytes;   /* the parameter, its gradient, two moments */
}

/* ------------------------------------------------------------ reduction */
static mf_status reduce(mf_layout *l)
{
    reduced_free(l);
    if (l->n == 0) MF_FAIL(MF_ERR_ARG, "mf_layout_search: the layout graph has no op");
    l->groups = calloc((size_t)l->n, sizeof *l->groups);
    l->edges = calloc((size_t)2 * l->n, sizeof *l->edges);
    l->same = calloc((size_t)l->n + 1, sizeof *l->same);
    l->choice = calloc((size_t)l->n, sizeof *l->choice);
    char *first_use = calloc((size_t)l->nparams + 1, 1);
    int *pgroup = malloc(((size_t)l->nparams + 1) * sizeof *pgroup);
    if (!l->groups || !l->edges || !l->same || !l->choice || !first_use || !pgroup) {
        free(first_use);
        free(pgroup);
        reduced_free(l);
        MF_FAIL(MF_ERR_NOMEM, "mf_layout_search: out of memory");
    }
    for (int i = 0; i < l->nparams; i++) pgroup[i] = -1;
    for (int i = 0; i < l->n; i++) {
        lop *o = &l->ops[i];
        int g = -1;
        for (int k = 0; k < l->ngroups && g < 0; k++)
            if (!strcmp(l->ops[l->groups[k].first].key, o->key)) g = k;
        if (g < 0) {
            g = l->ngroups++;
            l->groups[g] = (group){.first = i, .nsig = sigs[o->kind].n};
        } else if (l->ops[l->groups[g].first].kind != o->kind) {
            free(first_use);
            free(pgroup);
            reduced_free(l);
            MF_FAIL(MF_ERR_ARG, "mf_layout_search: ops %s and %s share the key %s but not their kind",
                    l->ops[l->groups[g].first].name, o->name, o->key);
        }
        o->group = g;
        l->groups[g].mult += 1;
        if (o->param >= 0) {
            if (!first_use[o->param]) {
                first_use[o->param] = 1;
                l->groups[g].owned += 1;
                pgroup[o->param] = g;
            } else if (pgroup[o->param] != g) {   /* shared with another decision: the same split */
                bool known = false;
                for (int k = 0; k < l->nsame; k++)
                    known |= l->same[k][0] == pgroup[o->param] && l->same[k][1] == g;
                if (!known && l->nsame < l->n) {
                    l->same[l->nsame][0] = pgroup[o->param];
                    l->same[l->nsame++][1] = g;
                }
            }
        }
        for (int s = 0; s < o->n_in; s++) {
            int from = o->in[s] < 0 ? -1 : l->ops[o->in[s]].group;
            int e = -1;
            for (int k = 0; k < l->nedges && e < 0; k++)
                if (l->edges[k].from == from && l->edges[k].to == g && l->edges[k].slot == s) e = k;
            if (e < 0) {
                if (l->nedges == 2 * l->n) continue;
                e = l->nedges++;
                l->edges[e] = (edge){.from = from, .to = g, .slot = s, .bytes = o->in_bytes[s]};
            }
            l->edges[e].mult += 1;
        }
    }
    free(first_use);
    free(pgroup);
    return MF_OK;
}

/* ---------------------------------------------------------------- search */
typedef struct bb {
    const mf_layout *l;
    const mf_layout_env *e;
    int *cur, *best;
    double best_cost, *rest;   /* rest[k]: the least the groups from k on can cost */
    double *rest_mem;
    long nodes;
} bb;

static double mem_of_sig(const mf_layout *l, const mf_layout_env *e, int g, int s)
{
    double c, m, mem;
    op_cost(l, e, &l->groups[g], &sigs[l->ops[l->groups[g].first].kind].s[s], &c, &m, &mem);
    return mem;
}

/* the cost group k adds once groups 0..k are chosen; false if the choice breaks a shared parameter */
static bool added(const mf_layout *l, const mf_layout_env *e, const int *cur, int k, double *cost, double *mem)
{
    const sig *s = &sigs[l->ops[l->groups[k].first].kind].s[cur[k]];
    for (int i = 0; i < l->nsame; i++)
        if (l->same[i][1] == k && sigs[l->ops[l->groups[l->same[i][0]].first].kind].s[cur[l->same[i][0]]].param != s->param)
            return false;
    double c, m;
    op_cost(l, e, &l->groups[k], s, &c, &m, mem);
    *cost = c + m;
    for (int i = 0; i < l->nedges; i++) {
        const edge *d = &l->edges[i];
        int later = d->from > d->to ? d->from : d->to;
        if (later != k) continue;
        mf_layout_sbp p = d->from < 0 ? MF_LS_B : sigs[l->ops[l->groups[d->from].first].kind].s[cur[d->from]].out;
        const sig *t = &sigs[l->ops[l->groups[d->to].first].kind].s[cur[d->to]];
        *cost += d->mult * edge_cost(e, p, t, d->slot, d->bytes);
    }
    return true;
}

static void branch(bb *b, int k, double cost, double mem)
{
    b->nodes++;
    const mf_layout *l = b->l;
    if (k == l->ngroups) {
        if (cost < b->best_cost) {
            b->best_cost = cost;
            memcpy(b->best, b->cur, (size_t)l->ngroups * sizeof *b->cur);
        }
        return;
    }
    for (int s = 0; s < l->groups[k].nsig; s++) {
        b->cur[k] = s;
        double c, m;
        if (!added(l, b->e, b->cur, k, &c, &m)) continue;
        if (b->e->memory > 0 && mem + m + b->rest_mem[k + 1] > b->e->memory) continue;
        if (cost + c + b->rest[k + 1] >= b->best_cost) continue;
        branch(b, k + 1, cost + c, mem + m);
    }
}

/* the totals of the choice in l->choice */
static void totals(mf_layout *l, const mf_layout_env *e)
{
    l->compute = l->comm = l->memory = 0;
    for (int k = 0; k < l->ngroups; k++) {
        double c, m, mem;
        op_cost(l, e, &l->groups[k], &sigs[l->ops[l->groups[k].first].kind].s[l->choice[k]], &c, &m, &mem);
        double all, mem2;
        added(l, e, l->choice, k, &all, &mem2);
        l->compute += c;
        l->comm += all - c;
        l->memory += mem;
    }
    l->cost = l->compute + l->comm;
    l->searched = true;
    l->env = *e;
}

static mf_status check_env(const mf_layout_env *e)
{
    if (!e || !e->cal || e->tp < 1 || e->dp < 1 || e->tp_nodes < 1 || e->dp_nodes < 1)
        MF_FAIL(MF_ERR_ARG, "mf_layout_search: the environment needs a calibration and rank counts of 1 or more");
    return MF_OK;
}

mf_status mf_layout_search(mf_layout *l, const mf_layout_env *env)
{
    if (!l) MF_FAIL(MF_ERR_ARG, "mf_layout_search: NULL layout");
    MF_TRY(check_env(env));
    MF_TRY(reduce(l));
    int n = l->ngroups;
    bb b = {.l = l, .e = env, .best_cost = INFINITY};
    b.cur = calloc((size_t)n, sizeof *b.cur);
    b.best = calloc((size_t)n, sizeof *b.best);
    b.rest = calloc((size_t)n + 1, sizeof *b.rest);
    b.rest_mem = calloc((size_t)n + 1, sizeof *b.rest_mem);
    if (!b.cur || !b.best || !b.rest || !b.rest_mem) {
        free(b.cur);
        free(b.best);
        free(b.rest);
        free(b.rest_mem);
        MF_FAIL(MF_ERR_NOMEM, "mf_layout_search: out of memory");
    }
    /* bounds: each later group's cheapest own cost (edges cost 0 or more) */
    for (int k = n - 1; k >= 0; k--) {
        double lo = INFINITY, lo_mem = INFINITY;
        for (int s = 0; s < l->groups[k].nsig; s++) {
            double c, m, mem;
            op_cost(l, env, &l->groups[k], &sigs[l->ops[l->groups[k].first].kind].s[s], &c, &m, &mem);
            lo = fmin(lo, c + m);
            lo_mem = fmin(lo_mem, mem_of_sig(l, env, k, s));
        }
        b.rest[k] = b.rest[k + 1] + lo;
        b.rest_mem[k] = b.rest_mem[k + 1] + lo_mem;
    }
    branch(&b, 0, 0, 0);
    mf_status st = MF_OK;
    if (isinf(b.best_cost)) st = mfi_error(MF_ERR_STATE, "mf_layout_search: no layout fits %.0f bytes", env->memory);
    else memcpy(l->choice, b.best, (size_t)n * sizeof *b.best);
    free(b.cur);
    free(b.best);
    free(b.rest);
    free(b.rest_mem);
    if (st == MF_OK) totals(l, env);
    return st;
}

mf_status mf_layout_search_exhaustive(mf_layout *l, const mf_layout_env *env)
{
    if (!l) MF_FAIL(MF_ERR_ARG, "mf_layout_search_exhaustive: NULL layout");
    MF_TRY(check_env(env));
    MF_TRY(reduce(l));
    int n = l->ngroups, *cur = calloc((size_t)n, sizeof *cur);
    if (!cur) MF_FAIL(MF_ERR_NOMEM, "mf_layout_search_exhaustive: out of memory");
    double best = INFINITY;
    for (;;) {
        double cost = 0, mem = 0;
        bool ok = true;
        for (int k = 0; k < n && ok; k++) {
            double c, m;
            ok = added(l, env, cur, k, &c, &m);
            cost += c;
            mem += m;
        }
        if (ok && (env->memory <= 0 || mem <= env->memory) && cost < best) {
            best = cost;
            memcpy(l->choice, cur, (size_t)n * sizeof *cur);
        }
        int k = n - 1;   /* the next combination, the last decision fastest */
        while (k >= 0 && ++cur[k] == l->groups[k].nsig) cur[k--] = 0;
        if (k < 0) break;
    }
    free(cur);
    if (isinf(best)) MF_FAIL(MF_ERR_STATE, "mf_layout_search_exhaustive: no layout fits %.0f bytes", env->memory);
    totals(l, env);
    return MF_OK;
}

/* ----------------------------------------------------------- the answer */
static const mf_layout_env *env_of(const mf_layout *l) { return &l->env; }

static const sig *chosen(const mf_layout *l, int i)
{
    if (!l || !l->searched || i < 0 || i >= l->n) return NULL;
    int g = l->ops[i].group;
    return &sigs[l->ops[i].kind].s[l->choice[g]];
}

double mf_layout_cost(const mf_layout *l, double *compute, double *comm, double *memory)
{
    if (compute) *compute = l && l->searched ? l->compute : 0;
    if (comm) *comm = l && l->searched ? l->comm : 0;
    if (memory) *memory = l && l->searched ? l->memory : 0;
    return l && l->searched ? l->cost : 0;
}

mf_layout_sbp mf_layout_out(const mf_layout *l, int i)
{
    const sig *s = chosen(l, i);
    return s ? s->out : MF_LS_NONE;
}

mf_layout_sbp mf_layout_param(const mf_layout *l, int i)
{
    const sig *s = chosen(l, i);
    return s ? s->param : MF_LS_NONE;
}

mf_layout_sbp mf_layout_in(const mf_layout *l, int i, int input)
{
    const sig *s = chosen(l, i);
    return s && input >= 0 && input < l->ops[i].n_in ? s->in[input] : MF_LS_NONE;
}

const char *mf_layout_role(const mf_layout *l, int i)
{
    const sig *s = chosen(l, i);
    return s ? s->role : "?";
}

const char *mf_layout_op_name(const mf_layout *l, int i)
{
    return l && i >= 0 && i < l->n ? l->ops[i].name : "";
}

int mf_layout_find(const mf_layout *l, const char *suffix)
{
    size_t k = suffix ? strlen(suffix) : 0;
    for (int i = 0; l && i < l->n; i++) {
        size_t m = strlen(l->ops[i].name);
        if (m >= k && !strcmp(l->ops[i].name + m - k, suffix)) return i;
    }
    return -1;
}

mf_status mf_layout_print(const mf_layout *l, FILE *f)
{
    if (!l || !l->searched || !f) MF_FAIL(MF_ERR_ARG, "mf_layout_print: no searched layout");
    fprintf(f, "layout: %d ops in %d decisions; per step %.3g s compute, %.3g s communication, %.3g bytes kept\n",
            l->n, l->ngroups, l->compute, l->comm, l->memory);
    for (int g = 0; g < l->ngroups; g++) {
        const lop *o = &l->ops[l->groups[g].first];
        const sig *s = &sigs[o->kind].s[l->choice[g]];
        char in[64];
        snprintf(in, sizeof in, "%s%s%s", mf_layout_sbp_name(s->in[0]), o->n_in > 1 ? "," : "",
                 o->n_in > 1 ? mf_layout_sbp_name(s->in[1]) : "");
        fprintf(f, "  %-44s x%-4.0f %-22s %s -> %s", o->name, l->groups[g].mult, s->role, in, mf_layout_sbp_name(s->out));
        if (s->param != MF_LS_NONE)
            fprintf(f, ", weight %s", s->param == MF_LS_B ? "B" : s->param == MF_LS_FEATURES ? "S(0)" : "S(1)");
        if (s->grad_p) fprintf(f, "; its input's gradient comes back as partial sums");
        fprintf(f, "\n");
        for (int i = 0; i < l->nedges; i++) {   /* the boxing into it, forward and backward */
            const edge *d = &l->edges[i];
            if (d->to != g) continue;
            mf_layout_sbp p = d->from < 0 ? MF_LS_B : sigs[l->ops[l->groups[d->from].first].kind].s[l->choice[d->from]].out;
            mf_layout_sbp q = s->in[d->slot], gr = s->grad_p ? MF_LS_P : q, back = p == MF_LS_P ? MF_LS_B : p;
            double t = d->mult * edge_cost(env_of(l), p, s, d->slot, d->bytes);
            if (t <= 0) continue;
            fprintf(f, "      input %d from %s x%.0f, %.3g B: forward %s -> %s, backward %s -> %s: %.3g s\n", d->slot,
                    d->from < 0 ? "the data" : l->ops[l->groups[d->from].first].name, d->mult, d->bytes,
                    mf_layout_sbp_name(p), mf_layout_sbp_name(q), mf_layout_sbp_name(gr), mf_layout_sbp_name(back), t);
        }
    }
    return MF_OK;
}

/* --------------------------------------------------- from a step graph */
static mf_layout_kind kind_of(const char *name, int n_act, bool param)
{
    if (!strcmp(name, "mf_linear") && param && n_act == 1) return MF_LAYOUT_LINEAR;
    if (!strcmp(name, "mf_embedding") && param) return MF_LAYOUT_EMBEDDING;
    if (!strcmp(name, "mf_linear_cross_entropy") && param) return MF_LAYOUT_HEAD;
    /* a norm's scale and shift are small: they stay B */
    if ((strstr(name, "_norm") && strcmp(name, "mf_batch_norm")) && n_act == 1) return MF_LAYOUT_NORM;
    if (param) return MF_LAYOUT_OTHER;
    if (!strcmp(name, "mf_add") && n_act == 2) return MF_LAYOUT_ADD;
    if (strstr(name, "attention") && n_act == 1) return MF_LAYOUT_ATTENTION;
    if (!strcmp(name, "mf_matmul") && n_act == 2) return MF_LAYOUT_MATMUL;
    static const char *const pw[] = {"mf_gelu", "mf_gelu_tanh", "mf_relu", "mf_silu", "mf_tanh", "mf_sigmoid", "mf_dropout",
                                     "mf_scale", "mf_softmax", "mf_reshape", "mf_transpose", "mf_permute", "mf_contiguous"};
    for (size_t i = 0; i < sizeof pw / sizeof *pw; i++)
        if (!strcmp(name, pw[i]) && n_act == 1) return MF_LAYOUT_POINTWISE;
    return MF_LAYOUT_OTHER;
}

static double value_bytes(const mf_graph_value *v)
{
    double n = (double)mf_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim; d++) n *= (double)v->shape[d];
    return n;
}

/* forward and backward seconds of op o at a fraction of its work */
static double op_seconds(const mf_graph_op *o, const mf_calibration *cal, double frac)
{
    mf_graph_op x = *o;
    x.mm_flops *= frac;
    x.mem_bytes *= frac;
    return mf_predict_entry(&x, cal) * (o->mm_calls ? 3 : 2);
}

mf_layout *mf_layout_from_graph(const mf_graph *g, const mf_calibration *cal, int tp)
{
    if (!g || !cal || tp < 1) return mfi_error(MF_ERR_ARG, "mf_layout_from_graph: graph, calibration or tp missing"), NULL;
    mf_layout *l = mf_layout_create();
    int nops = mf_graph_num_ops(g);
    /* value id -> the layout op that made it */
    int64_t *ids = malloc((size_t)(nops + 1) * sizeof *ids);
    int *made = malloc((size_t)(nops + 1) * sizeof *made), nmade = 0;
    if (!l || !ids || !made) {
        free(ids);
        free(made);
        mf_layout_destroy(l);
        return mfi_error(MF_ERR_NOMEM, "mf_layout_from_graph: out of memory"), NULL;
    }
    char context[160] = "", key[400], last[160] = "";
    int ordinal = 0;
    for (int i = 0; i < nops; i++) {
        const mf_graph_op *o = mf_graph_get_op(g, i);
        if (o->phase != MF_GRAPH_FORWARD || o->parent >= 0 || o->comm_kind >= 0 || !o->out.id) continue;
        int act[MF_GRAPH_MAX_IN], n_act = 0;
        const char *param = NULL;
        double param_bytes = 0;
        bool view = false;
        for (int k = 0; k < o->n_in; k++) {
            if (!o->in[k].id) continue;
            view |= o->in[k].id == o->out.id;
            if (o->param[k]) {
                if (!param) {
                    param = o->param[k];
                    param_bytes = value_bytes(&o->in[k]);
                }
            } else {
                act[n_act++] = k;
            }
        }
        if (view) continue;   /* a reshape: its output is its input */
        /* the key: the module (or the last one seen) with its layer numbers
         * left out, the op, its count there, its shapes */
        /* the module: a parameter's owner (a table's lookup may run inside
         * another module), the op's, or the last one seen */
        char owner[160] = "";
        if (param) {
            snprintf(owner, sizeof owner, "%s", param);
            char *dot = strrchr(owner, '.');
            if (dot) *dot = 0;
        }
        const char *m = *owner ? owner : *o->module ? o->module : last;
        size_t c = 0;
        for (const char *s = m; *s && c + 2 < sizeof context;) {   /* a layer number: a whole component of digits */
            size_t d = strspn(s, "0123456789");
            /* a component that is a number (h.3), or a numbered one with more
             * below it (block3.attn); a leaf's own number stays (ln_1, conv2) */
            if (d && (((s == m || s[-1] == '.') && (s[d] == '.' || !s[d])) || (s != m && s[-1] != '.' && s[d] == '.'))) {
                context[c++] = '#';
                s += d;
            } else {
                context[c++] = *s++;
            }
        }
        context[c] = 0;
        if (*o->module && strcmp(o->module, last)) {
            snprintf(last, sizeof last, "%s", o->module);
            ordinal = 0;
        }
        int len = snprintf(key, sizeof key, "%s/%s/%d", context, o->name, ordinal++);
        for (int k = 0; k < o->n_in && len > 0 && (size_t)len < sizeof key; k++)
            for (int d = 0; d < o->in[k].ndim && (size_t)len < sizeof key; d++)
                len += snprintf(key + len, sizeof key - (size_t)len, "%c%lld", d ? 'x' : ' ', (long long)o->in[k].shape[d]);
        mf_layout_kind kind = kind_of(o->name, n_act, param != NULL);
        int in[2] = {-1, -1};
        double in_bytes[2] = {0, 0};
        int n_in = kind == MF_LAYOUT_ADD || kind == MF_LAYOUT_MATMUL ? 2 : n_act > 0 ? 1 : 0;
        if (kind == MF_LAYOUT_OTHER && n_act >= 2) n_in = 2;
        for (int k = 0; k < n_in; k++) {
            const mf_graph_value *v = &o->in[act[k]];
            for (int j = nmade - 1; j >= 0 && in[k] < 0; j--)
                if (ids[j] == v->id) in[k] = made[j];
            in_bytes[k] = value_bytes(v);
        }
        double tokens = 1;
        if (n_act) for (int d = 0; d + 1 < o->in[act[0]].ndim; d++) tokens *= (double)o->in[act[0]].shape[d];
        char name[256];
        snprintf(name, sizeof name, "%s %s", m, o->name);
        bool has_param = kind == MF_LAYOUT_LINEAR || kind == MF_LAYOUT_EMBEDDING || kind == MF_LAYOUT_HEAD;
        int id = mf_layout_add_op(l, kind, key, name, n_in, in, in_bytes, value_bytes(&o->out), has_param ? param : NULL,
                                  param_bytes, op_seconds(o, cal, 1), op_seconds(o, cal, 1.0 / tp), tokens);
        if (id < 0) {
            free(ids);
            free(made);
            mf_layout_destroy(l);
            return NULL;
        }
        ids[nmade] = o->out.id;
        made[nmade++] = id;
    }
    free(ids);
    free(made);
    return l;
}
