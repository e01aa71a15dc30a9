/*
 * lib/graph/graph.c - recording the step graph (mpiflow/graph.h,
 * doc/planning.md).
 *
 * The recorder hangs off the few places every computation passes: an
 * op's application (lib/op.c), an autograd node's backward
 * (lib/autograd.c), a module's forward (lib/nn/module.c) and a kernel's
 * cost (lib/graph/cost.c). Nothing in an op knows it is recorded.
 */
#include <stdio.h>
#include "base/ptrmap.h"
#include "lib/graph/graph_internal.h"

#define MAX_DEPTH 64

struct mf_graph {
    mf_graph_op *ops;
    mfi_graph_call *calls;
    int n, cap;
    char **names;   /* module and parameter names, owned */
    int nnames;
    double flops[MF_PROF_COUNT], bytes[MF_PROF_COUNT];
    double comm_bytes[MF_COMM_KINDS];
    int64_t kcalls[MFI_K_COUNT];
    mf_device_type dev;
    int64_t start, peak;
    /* recording state */
    int open[MAX_DEPTH], nopen;          /* ops whose forward is running */
    int backward_of;                     /* -1, or the op whose backward runs */
    bool in_update;                      /* clipping or the optimizer's step is running */
    const char *modules[MAX_DEPTH];      /* names of the modules running */
    int nmodules;
    mfi_ptr_map module_names;            /* module -> index in names + 1 */
    mfi_ptr_map param_names;             /* storage -> index in names + 1 */
};

_Thread_local mf_graph *mfi_graph_rec;
/* the signature of the global op whose local op comes next */
static _Thread_local const struct mfi_op *pending_op;
static _Thread_local char pending_sbp[96];

void mfi_graph_signature(const struct mfi_op *op, int n_in, const mf_nd_sbp *in, const mf_nd_sbp *out)
{
    size_t len = 0;
    char b[48];
    for (int i = 0; i < n_in && len < sizeof pending_sbp; i++)
        len += (size_t)snprintf(pending_sbp + len, sizeof pending_sbp - len, "%s%s", i ? " " : "",
                                in[i].ndim ? mf_nd_sbp_str(&in[i], b, sizeof b) : "-");
    if (len < sizeof pending_sbp) snprintf(pending_sbp + len, sizeof pending_sbp - len, " -> %s", mf_nd_sbp_str(out, b, sizeof b));
    pending_op = op;
}

static char *add_name(mf_graph *g, const char *s)
{
    char **n = realloc(g->names, (size_t)(g->nnames + 1) * sizeof *n);
    if (!n) return NULL;
    g->names = n;
    char *c = strdup(s);
    if (c) g->names[g->nnames++] = c;
    return c;
}

/* the modules under m, named by their dotted paths; their parameters' storages */
static mf_status name_tree(mf_graph *g, const mf_module *m, const char *prefix)
{
    if (!add_name(g, prefix)) MF_FAIL(MF_ERR_NOMEM, "mf_graph_begin: out of memory");
    int *slot = mfi_ptr_map_at(&g->module_names, m, true);
    if (!slot) return mf_last_status();
    *slot = g->nnames;
    for (int i = 0; i < mf_module_num_children(m); i++) {
        char path[512];
        const char *cn = mf_module_child_name(m, i);
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", cn ? cn : "?");
        MF_TRY(name_tree(g, mf_module_child_at(m, i), path));
    }
    return MF_OK;
}

static mf_status name_params(mf_graph *g, const mf_module *model)
{
    mf_tensor_list *l = mf_module_state_dict(model);
    if (!l) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        mf_tensor *t = l->items[i].tensor;
        const mf_tensor *loc = t ? mfi_local_piece(t) : NULL;
        if (!loc || !loc->storage) continue;
        if (!add_name(g, l->items[i].name)) {
            st = mfi_error(MF_ERR_NOMEM, "mf_graph_begin: out of memory");
            break;
        }
        int *slot = mfi_ptr_map_at(&g->param_names, loc->storage, true);
        if (!slot) st = mf_last_status();
        else *slot = g->nnames;
    }
    mf_tensor_list_destroy(l);
    return st;
}

mf_status mf_graph_begin(const mf_module *model)
{
    if (mfi_graph_rec) MF_FAIL(MF_ERR_STATE, "mf_graph_begin: a recording is open already (mf_graph_end it first)");
    mf_graph *g = calloc(1, sizeof *g);
    if (!g) MF_FAIL(MF_ERR_NOMEM, "mf_graph_begin: out of memory");
    g->backward_of = -1;
    g->dev = mf_default_device();
    mf_status st = model ? name_tree(g, model, "") : MF_OK;
    if (st == MF_OK && model) st = name_params(g, model);
    if (st != MF_OK) {
        mf_graph_destroy(g);
        return st;
    }
    mf_memory_stats ms;
    mf_memory_get_stats_on(g->dev, &ms);
    g->start = g->peak = ms.in_use;
    mfi_graph_rec = g;
    return MF_OK;
}

bool mf_graph_recording(void) { return mfi_graph_rec != NULL; }

static void note_memory(mf_graph *g, int64_t *in_use)
{
    mf_memory_stats ms;
    mf_memory_get_stats_on(g->dev, &ms);
    if (ms.in_use > g->peak) g->peak = ms.in_use;
    if (in_use) *in_use = ms.in_use;
}

mf_graph *mf_graph_end(void)
{
    mf_graph *g = mfi_graph_rec;
    if (!g) {
        mfi_error(MF_ERR_STATE, "mf_graph_end: no recording is open (mf_graph_begin starts one)");
        return NULL;
    }
    mfi_graph_rec = NULL;
    /* the allocator's own peak covers what happened between ops */
    mf_memory_stats ms;
    mf_memory_get_stats_on(g->dev, &ms);
    if (ms.peak > g->peak) g->peak = ms.peak;
    mfi_ptr_map_free(&g->module_names);
    mfi_ptr_map_free(&g->param_names);
    return g;
}

void mf_graph_destroy(mf_graph *g)
{
    if (!g) return;
    if (mfi_graph_rec == g) mfi_graph_rec = NULL;
    for (int i = 0; i < g->n; i++) free(g->calls[i].attrs);
    for (int i = 0; i < g->nnames; i++) free(g->names[i]);
    free(g->names);
    free(g->ops);
    free(g->calls);
    mfi_ptr_map_free(&g->module_names);
    mfi_ptr_map_free(&g->param_names);
    free(g);
}

/* ------------------------------------------------------------- the hooks */
static void value_of(const mf_tensor *t, mf_graph_value *v)
{
    memset(v, 0, sizeof *v);
    if (!t) return;
    const mf_tensor *loc = mfi_local_piece(t);
    v->id = loc && loc->storage ? loc->storage->id : 0;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof v->shape);
}

static mf_graph_op *new_op(mf_graph *g, const char *name, mf_graph_phase phase)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 256;
        mf_graph_op *o = realloc(g->ops, (size_t)cap * sizeof *o);
        if (o) g->ops = o;
        mfi_graph_call *c = o ? realloc(g->calls, (size_t)cap * sizeof *c) : NULL;
        if (c) g->calls = c;
        if (!o || !c) return NULL;
        g->cap = cap;
    }
    mf_graph_op *o = &g->ops[g->n];
    memset(o, 0, sizeof *o);
    memset(&g->calls[g->n], 0, sizeof g->calls[g->n]);
    o->name = name;
    o->phase = phase;
    o->forward_of = phase == MF_GRAPH_BACKWARD ? g->backward_of : -1;
    o->parent = g->nopen ? g->open[g->nopen - 1] : -1;
    o->module = g->nmodules ? g->modules[g->nmodules - 1] : "";
    o->cls = MF_PROF_OTHER;
    o->comm_kind = -1;
    g->n++;
    return o;
}

int mfi_graph_op_begin(const struct mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs, size_t attrs_size)
{
    mf_graph *g = mfi_graph_rec;
    if (!g || g->nopen == MAX_DEPTH) return 0;
    mf_graph_op *o = new_op(g, op->name, g->backward_of >= 0 ? MF_GRAPH_BACKWARD
                                       : g->in_update ? MF_GRAPH_UPDATE : MF_GRAPH_FORWARD);
    if (!o) return 0;
    int idx = g->n - 1;
    o->n_in = n_in < MF_GRAPH_MAX_IN ? n_in : MF_GRAPH_MAX_IN;
    for (int i = 0; i < o->n_in; i++) {
        value_of(in[i], &o->in[i]);
        const mf_tensor *loc = in[i] ? mfi_local_piece(in[i]) : NULL;
        int *p = loc && loc->storage ? mfi_ptr_map_at(&g->param_names, loc->storage, false) : NULL;
        o->param[i] = p ? g->names[*p - 1] : NULL;
    }
    if (pending_op == op) {   /* the local op of a global one */
        snprintf(o->sbp, sizeof o->sbp, "%s", pending_sbp);
        pending_op = NULL;
    }
    mfi_graph_call *c = &g->calls[idx];
    c->op = op;
    if (attrs_size && (c->attrs = malloc(attrs_size))) {
        memcpy(c->attrs, attrs, attrs_size);
        c->attrs_size = attrs_size;
    }
    g->open[g->nopen++] = idx;
    return idx + 1;
}

void mfi_graph_op_end(int id, const mf_tensor *out, const mfi_call *c)
{
    mf_graph *g = mfi_graph_rec;
    if (!g || id <= 0 || id > g->n) return;
    mf_graph_op *o = &g->ops[id - 1];
    value_of(out, &o->out);
    for (int i = 0; c && i < c->n_saved; i++)
        if (c->saved[i]) o->saved_bytes += mf_tensor_nbytes(c->saved[i]);
    note_memory(g, &o->in_use);
    if (g->nopen && g->open[g->nopen - 1] == id - 1) g->nopen--;
}

int mfi_graph_backward_enter(int id)
{
    mf_graph *g = mfi_graph_rec;
    if (!g) return -1;
    int prev = g->backward_of;
    g->backward_of = id - 1;
    g->in_update = false;
    return prev;
}

void mfi_graph_backward_leave(int prev)
{
    if (mfi_graph_rec) mfi_graph_rec->backward_of = prev;
}

void mfi_graph_update_begin(void)
{
    if (mfi_graph_rec) mfi_graph_rec->in_update = true;
}

void mfi_graph_module_enter(const mf_module *m)
{
    mf_graph *g = mfi_graph_rec;
    if (!g) return;
    g->in_update = false;   /* a forward begins */
    if (g->nmodules == MAX_DEPTH) return;
    int *p = mfi_ptr_map_at(&g->module_names, m, false);
    const char *parent = g->nmodules ? g->modules[g->nmodules - 1] : "";
    g->modules[g->nmodules++] = p ? g->names[*p - 1] : parent;
}

void mfi_graph_module_leave(void)
{
    if (mfi_graph_rec && mfi_graph_rec->nmodules) mfi_graph_rec->nmodules--;
}

void mfi_graph_kernel(int kernel, mf_prof_class cls, double flops, double bytes)
{
    mf_graph *g = mfi_graph_rec;
    if (!g) return;
    g->flops[cls] += flops;
    g->bytes[cls] += bytes;
    if (kernel >= 0 && kernel < MFI_K_COUNT) g->kcalls[kernel]++;
    mf_graph_op *o = NULL;
    if (g->nopen) {
        o = &g->ops[g->open[g->nopen - 1]];
    } else {
        /* a kernel outside any op: a backward function's own kernels (one
         * entry per op differentiated), the optimizer's update, a fill */
        mf_graph_phase ph = g->backward_of >= 0 ? MF_GRAPH_BACKWARD : g->in_update ? MF_GRAPH_UPDATE
                                                                                        : MF_GRAPH_FORWARD;
        const mf_graph_op *last = g->n ? &g->ops[g->n - 1] : NULL;
        if (last && !g->calls[g->n - 1].op && last->comm_kind < 0 && last->phase == ph &&
            last->forward_of == g->backward_of) {
            o = &g->ops[g->n - 1];
        } else {
            const char *name = ph == MF_GRAPH_UPDATE ? "update" : ph == MF_GRAPH_FORWARD ? "kernels" : "grad kernels";
            if (!(o = new_op(g, name, ph))) return;
        }
        note_memory(g, &o->in_use);
    }
    o->flops += flops;
    o->bytes += bytes;
    o->kernels++;
    if (cls == MF_PROF_GEMM || cls == MF_PROF_CONV || cls == MF_PROF_ATTENTION) {
        o->mm_flops += flops;
        o->mm_calls++;
    } else {
        o->mem_bytes += bytes;
        o->mem_calls++;
    }
    /* the op's class: that of its costliest kernel call */
    mfi_graph_call *c = &g->calls[o - g->ops];
    if (o->kernels == 1 || flops + bytes > c->best) {
        c->best = flops + bytes;
        o->cls = cls;
    }
}

void mfi_graph_comm(int kind, int64_t bytes, int ranks, int nodes, int local, mf_coll_algo algo, bool async,
                    bool pipe)
{
    mf_graph *g = mfi_graph_rec;
    if (!g) return;
    mf_graph_phase ph = g->backward_of >= 0 ? MF_GRAPH_BACKWARD : g->in_update ? MF_GRAPH_UPDATE : MF_GRAPH_FORWARD;
    mf_graph_op *o = new_op(g, mf_comm_kind_name((mf_comm_kind)kind), ph);
    if (!o) return;
    o->comm_kind = kind;
    o->comm_bytes = bytes;
    o->comm_ranks = ranks;
    o->comm_nodes = nodes;
    o->comm_local = local;
    o->comm_algo = algo;
    o->comm_async = async;
    o->comm_pipe = pipe;
    g->comm_bytes[kind] += (double)bytes;
    note_memory(g, &o->in_use);
}

/* ---------------------------------------------------------------- reading */
int mf_graph_num_ops(const mf_graph *g) { return g ? g->n : 0; }

const mf_graph_op *mf_graph_get_op(const mf_graph *g, int i) { return g && i >= 0 && i < g->n ? &g->ops[i] : NULL; }

const mfi_graph_call *mfi_graph_call_at(const mf_graph *g, int i) { return g && i >= 0 && i < g->n ? &g->calls[i] : NULL; }

double mf_graph_flops(const mf_graph *g, mf_prof_class c) { return g && (unsigned)c < MF_PROF_COUNT ? g->flops[c] : 0; }

double mf_graph_bytes(const mf_graph *g, mf_prof_class c) { return g && (unsigned)c < MF_PROF_COUNT ? g->bytes[c] : 0; }

int64_t mf_graph_kernel_calls(const mf_graph *g, const char *kernel)
{
    for (int i = 0; g && kernel && i < MFI_K_COUNT; i++)
        if (!strcmp(kernel, mf_kernel_name(i))) return g->kcalls[i];
    return -1;
}

int64_t mf_graph_peak(const mf_graph *g) { return g ? g->peak : 0; }

double mf_graph_comm_bytes(const mf_graph *g, mf_comm_kind k)
{
    return g && (unsigned)k < MF_COMM_KINDS ? g->comm_bytes[k] : 0;
}
int64_t mf_graph_start_in_use(const mf_graph *g) { return g ? g->start : 0; }

static void shape_str(const mf_graph_value *v, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < v->ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? "," : "", (long long)v->shape[i]);
    if (len < size) snprintf(buf + len, size - len, "]");
}

mf_status mf_graph_print(const mf_graph *g, FILE *f)
{
    if (!g || !f) MF_FAIL(MF_ERR_ARG, "mf_graph_print: graph or file is NULL");
    static const char *const phase[] = {"fwd", "bwd", "upd"};
    for (int i = 0; i < g->n; i++) {
        const mf_graph_op *o = &g->ops[i];
        if (o->comm_kind >= 0) {
            fprintf(f, "%5d %s %-28s %-16s %.4g B over %d ranks on %d node(s), %s\n", i, phase[o->phase],
                    *o->module ? o->module : "-", o->name, (double)o->comm_bytes, o->comm_ranks, o->comm_nodes,
                    mf_coll_algo_name(o->comm_algo));
            continue;
        }
        char ins[512] = "", out[96];
        size_t len = 0;
        for (int k = 0; k < o->n_in && len < sizeof ins; k++) {
            char s[96];
            if (!o->in[k].id && !o->in[k].ndim) continue;
            shape_str(&o->in[k], s, sizeof s);
            len += (size_t)snprintf(ins + len, sizeof ins - len, "%s%s%s%s", len ? " " : "", s,
                                    o->param[k] ? "=" : "", o->param[k] ? o->param[k] : "");
        }
        shape_str(&o->out, out, sizeof out);
        fprintf(f, "%5d %s %-28s %-16s %s -> %s  %.4g flop %.4g B%s%s", i, phase[o->phase],
                *o->module ? o->module : "-", o->name, ins, !g->calls[i].op ? "-" : out, o->flops,
                o->bytes, o->sbp[0] ? "  sbp " : "", o->sbp);
        if (o->forward_of >= 0) fprintf(f, "  (grad of %d)", o->forward_of);
        fputc('\n', f);
    }
    double fl = 0, by = 0;
    for (int c = 0; c < MF_PROF_COUNT; c++) fl += g->flops[c], by += g->bytes[c];
    fprintf(f, "total: %d ops, %.4g flop, %.4g bytes moved, peak %.1f MiB in use (%.1f MiB at the start)\n", g->n,
            fl, by, g->peak / 1048576.0, g->start / 1048576.0);
    return ferror(f) ? mfi_error(MF_ERR_IO, "mf_graph_print: write failed") : MF_OK;
}
