/*
 * lib/nn/module.c - the module tree: parameters, buffers, children,
 * state_dict order, train/eval mode and initialisation.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

char *mfi_join_name(const char *prefix, const char *name, char *buf, size_t size)
{
    if (prefix && *prefix) snprintf(buf, size, "%s.%s", prefix, name);
    else snprintf(buf, size, "%s", name);
    return buf;
}

mf_status mfi_init_uniform(mf_tensor *t, double bound, uint64_t seed, const char *prefix, const char *name)
{
    char key[512];
    return mf_uniform_keyed_(t, -bound, bound, seed, mfi_join_name(prefix, name, key, sizeof key));
}

mf_module *mf_module_create(const mf_module_ops *ops, void *priv)
{
    if (!ops || !ops->forward) {
        mfi_error(MF_ERR_ARG, "mf_module_create: ops or ops->forward is NULL");
        return NULL;
    }
    mf_module *m = calloc(1, sizeof *m);
    if (!m) {
        mfi_error(MF_ERR_NOMEM, "mf_module_create: out of memory");
        return NULL;
    }
    m->ops = ops;
    m->priv = priv;
    m->training = true;
    return m;
}

mf_module *mfi_module_new(const mf_module_ops *ops, size_t priv_size)
{
    void *priv = priv_size ? calloc(1, priv_size) : NULL;
    if (priv_size && !priv) {
        mfi_error(MF_ERR_NOMEM, "%s: out of memory", ops->type);
        return NULL;
    }
    mf_module *m = mf_module_create(ops, priv);
    if (!m) free(priv);
    return m;
}

void *mf_module_priv(const mf_module *m) { return m->priv; }
const char *mf_module_type(const mf_module *m) { return m->ops->type ? m->ops->type : "Module"; }

static bool valid_name(const char *name)
{
    if (!name || !*name) return false;
    for (const char *p = name; *p; p++)
        if (*p == '.' || *p == '/' || *p == ' ') return false;
    return true;
}

static bool name_taken(const mf_module *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return true;
    for (int i = 0; i < m->nbuffers; i++)
        if (!strcmp(m->buffers[i].name, name)) return true;
    for (int i = 0; i < m->nchildren; i++)
        if (!strcmp(m->children[i].name, name)) return true;
    return false;
}

static mf_status add_named(mf_module *m, mfi_named **list, int *n, const char *what, const char *name, mf_tensor *t)
{
    if (!valid_name(name))
        MF_FAIL(MF_ERR_ARG, "%s: '%s' is not a valid name (no dots, slashes or spaces)", what, name ? name : "(null)");
    MF_TRY(mfi_check_input(what, name, t));
    if (name_taken(m, name)) MF_FAIL(MF_ERR_ARG, "%s: '%s' is already used in this %s", what, name, mf_module_type(m));
    mfi_named *grown = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!grown) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    *list = grown;
    char *copy = strdup(name);
    if (!copy) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    grown[*n].name = copy;
    grown[*n].t = mf_tensor_retain(t);
    (*n)++;
    return MF_OK;
}

mf_status mf_module_register_parameter(mf_module *m, const char *name, mf_tensor *t)
{
    MF_TRY(add_named(m, &m->params, &m->nparams, "mf_module_register_parameter", name, t));
    if (mf_dtype_is_float(t->dtype) && !t->grad_fn) t->requires_grad = true;
    if (!t->name) mf_tensor_set_name(t, name);
    return MF_OK;
}

mf_status mf_module_register_buffer(mf_module *m, const char *name, mf_tensor *t)
{
    return add_named(m, &m->buffers, &m->nbuffers, "mf_module_register_buffer", name, t);
}

mf_status mf_module_add_child(mf_module *m, const char *name, mf_module *child)
{
    if (!child) {
        if (mf_last_status() != MF_OK) return mfi_error_context("mf_module_add_child: child '%s' is NULL", name ? name : "");
        MF_FAIL(MF_ERR_ARG, "mf_module_add_child: child is NULL");
    }
    mf_status st = MF_OK;
    if (!valid_name(name)) st = mfi_error(MF_ERR_ARG, "mf_module_add_child: '%s' is not a valid name", name ? name : "(null)");
    else if (name_taken(m, name)) st = mfi_error(MF_ERR_ARG, "mf_module_add_child: '%s' is already used", name);
    mfi_child *grown = st == MF_OK ? realloc(m->children, (size_t)(m->nchildren + 1) * sizeof *grown) : NULL;
    char *copy = grown ? strdup(name) : NULL;
    if (st == MF_OK && (!grown || !copy)) st = mfi_error(MF_ERR_NOMEM, "mf_module_add_child: out of memory");
    if (grown) m->children = grown;
    if (st != MF_OK) {
        free(copy);
        mf_module_destroy(child);   /* ownership was handed over */
        return st;
    }
    m->children[m->nchildren].name = copy;
    m->children[m->nchildren].m = child;
    m->nchildren++;
    child->training = m->training;
    return MF_OK;
}

static mf_tensor *find(const mfi_named *list, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].name, name)) return list[i].t;
    return NULL;
}

mf_tensor *mf_module_param(const mf_module *m, const char *name) { return find(m->params, m->nparams, name); }
mf_tensor *mf_module_buffer(const mf_module *m, const char *name) { return find(m->buffers, m->nbuffers, name); }

mf_module *mf_module_child(const mf_module *m, const char *name)
{
    for (int i = 0; i < m->nchildren; i++)
        if (!strcmp(m->children[i].name, name)) return m->children[i].m;
    return NULL;
}

int mf_module_num_children(const mf_module *m) { return m->nchildren; }
mf_module *mf_module_child_at(const mf_module *m, int i) { return i >= 0 && i < m->nchildren ? m->children[i].m : NULL; }

/* the module's own forward, with its parameters ready for use */
static mf_tensor *run_forward(mf_module *m, mf_tensor *x)
{
    if (mf_module_use_begin(m) != MF_OK) return NULL;
    mf_tensor *y = m->ops->forward(m, x);
    mf_module_use_end(m);
    return y;
}

/* mf_recompute's function: the module's own forward */
static mf_tensor *forward_fn(void *user, int n, mf_tensor *const *in)
{
    (void)n;
    return run_forward(user, in[0]);
}

mf_status mf_module_set_recompute(mf_module *m, bool on)
{
    if (!m) MF_FAIL(MF_ERR_ARG, "mf_module_set_recompute: module is NULL");
    m->recompute = on;
    return MF_OK;
}

bool mf_module_recomputes(const mf_module *m) { return m && m->recompute; }

const char *mf_module_child_name(const mf_module *m, int i)
{
    return m && i >= 0 && i < m->nchildren ? m->children[i].name : NULL;
}

mf_tensor *mf_module_forward(mf_module *m, mf_tensor *x)
{
    if (!m) {
        mfi_error(MF_ERR_ARG, "mf_module_forward: module is NULL");
        return NULL;
    }
    if (mfi_check_input(mf_module_type(m), "input", x) != MF_OK) return NULL;
    /* its own random scope: its draws do not depend on its neighbours' */
    mfi_rng_scope saved = mfi_rng_enter(mfi_rng_next_key(), 0);
    if (mfi_graph_rec) mfi_graph_module_enter(m);
    /* recompute: keep only x; backward runs the forward again from it
     * (with this scope's random state, so dropout draws the same masks).
     * Not for an input that needs no gradient (a first layer's): its
     * backward keeps only that input and its own weights anyway */
    bool again = m->recompute && m->training && mf_grad_enabled() && !mfi_recomputing() && mf_tensor_requires_grad(x);
    mf_tensor *in = mf_module_input_layout(m, mf_tensor_retain(x));
    mf_tensor *y = !in ? NULL : again ? mf_recompute(forward_fn, m, 1, &in) : run_forward(m, in);
    mf_tensor_destroy(in);
    if (mfi_graph_rec) mfi_graph_module_leave();
    mfi_rng_leave(saved);
    return mf_module_output_layout(m, y);
}

void mf_module_destroy(mf_module *m)
{
    if (!m) return;
    mfi_module_use_free(m);
    mfi_module_layout_free(m);
    if (m->ops->destroy) m->ops->destroy(m);
    else free(m->priv);
    for (int i = 0; i < m->nparams; i++) {
        free(m->params[i].name);
        mf_tensor_destroy(m->params[i].t);
    }
    for (int i = 0; i < m->nbuffers; i++) {
        free(m->buffers[i].name);
        mf_tensor_destroy(m->buffers[i].t);
    }
    for (int i = 0; i < m->nchildren; i++) {
        free(m->children[i].name);
        mf_module_destroy(m->children[i].m);
    }
    free(m->params);
    free(m->buffers);
    free(m->children);
    free(m);
}

void mf_module_train(mf_module *m, bool training)
{
    m->training = training;
    for (int i = 0; i < m->nchildren; i++) mf_module_train(m->children[i].m, training);
}

bool mf_module_is_training(const mf_module *m) { return m->training; }

static mf_status reset_rec(mf_module *m, const char *prefix, uint64_t seed)
{
    if (m->ops->reset) MF_TRY(m->ops->reset(m, prefix, seed));
    for (int i = 0; i < m->nchildren; i++) {
        char sub[512];
        MF_TRY(reset_rec(m->children[i].m, mfi_join_name(prefix, m->children[i].name, sub, sizeof sub), seed));
    }
    return MF_OK;
}

mf_status mfi_module_init_fresh(mf_module *m)
{
    static uint64_t created;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "#%llu", (unsigned long long)++created);
    bool prev = mf_set_grad_enabled(false);
    mf_status st = m->ops->reset ? m->ops->reset(m, prefix, mf_seed()) : MF_OK;
    mf_set_grad_enabled(prev);
    return st;
}

mf_status mf_module_reset_parameters(mf_module *m, uint64_t seed)
{
    bool prev = mf_set_grad_enabled(false);
    mf_status st = reset_rec(m, "", seed);
    mf_set_grad_enabled(prev);
    return st;
}

mf_module *mfi_module_owner(const mf_module *m, const char *dotted, const char **leaf)
{
    const char *dot;
    while ((dot = strchr(dotted, '.'))) {
        char head[256];
        size_t n = (size_t)(dot - dotted);
        if (n >= sizeof head) return NULL;
        memcpy(head, dotted, n);
        head[n] = '\0';
        m = mf_module_child(m, head);
        if (!m) return NULL;
        dotted = dot + 1;
    }
    *leaf = dotted;
    return (mf_module *)m;
}

mf_tensor *mf_module_get(const mf_module *m, const char *dotted)
{
    const char *leaf;
    mf_module *o = mfi_module_owner(m, dotted, &leaf);
    if (!o) return NULL;
    mf_tensor *t = mf_module_param(o, leaf);
    return t ? t : mf_module_buffer(o, leaf);
}

int64_t mf_module_num_parameters(const mf_module *m)
{
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += mf_tensor_numel(m->params[i].t);
    for (int i = 0; i < m->nchildren; i++) n += mf_module_num_parameters(m->children[i].m);
    return n;
}

/* ---------------------------------------------------------- state_dict */
static mf_status list_add(mf_tensor_list *l, int *cap, const char *name, mf_tensor *t, mf_entry_kind kind)
{
    if (l->n == *cap) {
        int nc = *cap ? 2 * *cap : 16;
        mf_named_tensor *g = realloc(l->items, (size_t)nc * sizeof *g);
        if (!g) MF_FAIL(MF_ERR_NOMEM, "state_dict: out of memory");
        l->items = g;
        *cap = nc;
    }
    char *copy = strdup(name);
    if (!copy) MF_FAIL(MF_ERR_NOMEM, "state_dict: out of memory");
    l->items[l->n].name = copy;
    l->items[l->n].tensor = mf_tensor_retain(t);
    l->items[l->n].kind = kind;
    l->n++;
    return MF_OK;
}

static mf_status collect(const mf_module *m, const char *prefix, bool buffers, mf_tensor_list *l, int *cap)
{
    char name[512];
    for (int i = 0; i < m->nparams; i++)
        MF_TRY(list_add(l, cap, mfi_join_name(prefix, m->params[i].name, name, sizeof name), m->params[i].t,
                        MF_ENTRY_PARAM));
    for (int i = 0; buffers && i < m->nbuffers; i++)
        MF_TRY(list_add(l, cap, mfi_join_name(prefix, m->buffers[i].name, name, sizeof name), m->buffers[i].t,
                        MF_ENTRY_BUFFER));
    for (int i = 0; i < m->nchildren; i++)
        MF_TRY(collect(m->children[i].m, mfi_join_name(prefix, m->children[i].name, name, sizeof name), buffers, l, cap));
    return MF_OK;
}

static mf_tensor_list *make_list(const mf_module *m, bool buffers)
{
    mf_tensor_list *l = calloc(1, sizeof *l);
    if (!l) {
        mfi_error(MF_ERR_NOMEM, "state_dict: out of memory");
        return NULL;
    }
    int cap = 0;
    if (collect(m, "", buffers, l, &cap) != MF_OK) {
        mf_tensor_list_destroy(l);
        return NULL;
    }
    return l;
}

mf_tensor_list *mf_module_parameters(const mf_module *m) { return make_list(m, false); }
mf_tensor_list *mf_module_state_dict(const mf_module *m) { return make_list(m, true); }

void mf_tensor_list_destroy(mf_tensor_list *l)
{
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free(l->items[i].name);
        mf_tensor_destroy(l->items[i].tensor);
    }
    free(l->items);
    free(l);
}

/* --------------------------------------------------------------- print */
static void print_rec(const mf_module *m, const char *name, int depth, FILE *f)
{
    char desc[256] = "";
    if (m->ops->describe) m->ops->describe(m, desc, sizeof desc);
    int64_t own = 0;
    for (int i = 0; i < m->nparams; i++) own += mf_tensor_numel(m->params[i].t);
    fprintf(f, "%*s%s%s%s(%s)", 2 * depth, "", name, *name ? ": " : "", mf_module_type(m), desc);
    if (own) fprintf(f, "  params=%lld", (long long)own);
    /* global parameters: their SBP, e.g. "weight=S(0) bias=S(0)" */
    for (int i = 0; i < m->nparams; i++)
        if (mf_tensor_is_global(m->params[i].t)) {
            char sbp[64];
            fprintf(f, " %s=%s", m->params[i].name, mf_global_sbp_str(m->params[i].t, sbp, sizeof sbp));
        }
    fputc('\n', f);
    for (int i = 0; i < m->nchildren; i++) print_rec(m->children[i].m, m->children[i].name, depth + 1, f);
}

void mf_module_print(const mf_module *m, FILE *f)
{
    print_rec(m, "", 0, f);
    fprintf(f, "total parameters: %lld\n", (long long)mf_module_num_parameters(m));
    /* the placement of the first global parameter */
    mf_tensor_list *l = mf_module_parameters(m);
    for (int i = 0; l && i < l->n; i++)
        if (mf_tensor_is_global(l->items[i].tensor)) {
            char pl[128];
            fprintf(f, "placement: %s\n", mf_placement_str(mf_global_placement(l->items[i].tensor), pl, sizeof pl));
            break;
        }
    mf_tensor_list_destroy(l);
}
