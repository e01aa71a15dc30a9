/*
 * lib/autograd.c - the graph of recorded ops and reverse-mode backward.
 *
 * A recorded op becomes a node that holds its call (attributes, input
 * shapes, saved tensors) and one edge per input: the input's producer
 * node, or the input itself when it is a leaf that requires grad. An
 * op's inputs always exist before it, so reverse creation order is a
 * topological order: backward sorts the reachable nodes by sequence
 * number and runs them newest first (the tape), freeing each node's
 * saved tensors once it has run.
 */
#include "base/ptrmap.h"
#include "lib/internal.h"

typedef struct mfi_edge {
    struct mfi_node *node;
    mf_tensor *leaf;
} mfi_edge;

typedef struct mfi_node {
    int refcount;
    uint64_t seq;
    mfi_call call;
    mfi_edge *edges;       /* call.n_in */
    mf_tensor *grad;       /* accumulated gradient of the output */
    bool released;         /* saved tensors freed by a backward */
    uint64_t mark;
} mfi_node;

static uint64_t node_seq;
static uint64_t backward_mark;
static mf_grad_ready_fn ready_hook;
static void *ready_user;
static mf_grad_ready_fn sync_hook;   /* the gradient buckets (lib/optim/buckets.c) */
static void *sync_user;

/* ------------------------------------------------------------ grad mode */
static _Thread_local bool grad_on = true;
static _Thread_local bool mode_stack[64];
static _Thread_local int mode_depth;

bool mf_grad_enabled(void) { return grad_on; }

bool mf_set_grad_enabled(bool on)
{
    bool prev = grad_on;
    grad_on = on;
    return prev;
}

void mf_no_grad_begin(void)
{
    if (mode_depth < (int)(sizeof mode_stack / sizeof *mode_stack)) mode_stack[mode_depth] = grad_on;
    mode_depth++;
    grad_on = false;
}

void mf_no_grad_end(void)
{
    if (mode_depth == 0) return;
    mode_depth--;
    grad_on = mode_depth < (int)(sizeof mode_stack / sizeof *mode_stack) ? mode_stack[mode_depth] : false;
}

void mf_autograd_set_grad_ready_hook(mf_grad_ready_fn fn, void *user)
{
    ready_hook = fn;
    ready_user = user;
}

void mfi_autograd_set_sync_hook(mf_grad_ready_fn fn, void *user)
{
    sync_hook = fn;
    sync_user = user;
}

/* ------------------------------------------------------------ nodes */
mf_status mfi_node_attach(mfi_call *c, const void *attrs, size_t attrs_size, mf_tensor *out)
{
    mfi_node *n = calloc(1, sizeof *n);
    void *acopy = attrs_size ? malloc(attrs_size) : NULL;
    mfi_edge *edges = calloc((size_t)(c->n_in > 0 ? c->n_in : 1), sizeof *edges);
    if (!n || (attrs_size && !acopy) || !edges) {
        free(n);
        free(acopy);
        free(edges);
        MF_FAIL(MF_ERR_NOMEM, "%s: out of memory recording the op", c->op->name);
    }
    if (attrs_size) memcpy(acopy, attrs, attrs_size);
    for (int i = 0; i < c->n_in; i++) {
        if (!c->needs_grad[i]) continue;
        mf_tensor *t = c->in[i];
        if (t->grad_fn) {
            edges[i].node = t->grad_fn;
            t->grad_fn->refcount++;
        } else {
            edges[i].leaf = mf_tensor_retain(t);
        }
    }
    n->refcount = 1;
    n->seq = ++node_seq;
    n->call = *c;
    n->call.in = NULL;
    n->call.attrs = acopy;
    n->edges = edges;
    /* The node owns the saved tensors and the meta block now. */
    c->n_saved = 0;
    out->grad_fn = n;
    out->requires_grad = true;
    return MF_OK;
}

static void node_free(mfi_node *n)
{
    mfi_call_free_saved(&n->call);
    mf_tensor_destroy(n->grad);
    free(n->call.attrs);
    free(n->call.in_meta);   /* the block that also holds needs_grad */
    free(n->edges);
    free(n);
}

void mfi_node_release(mfi_node *root)
{
    /* Iterative, so that a long chain of nodes does not recurse deeply. */
    size_t cap = 16, top = 0;
    mfi_node **stack = malloc(cap * sizeof *stack);
    if (!stack) return;   /* leaks on OOM rather than crash */
    stack[top++] = root;
    while (top) {
        mfi_node *n = stack[--top];
        if (--n->refcount > 0) continue;
        for (int i = 0; i < n->call.n_in; i++) {
            if (n->edges[i].leaf) mf_tensor_destroy(n->edges[i].leaf);
            if (!n->edges[i].node) continue;
            if (top == cap) {
                mfi_node **bigger = realloc(stack, 2 * cap * sizeof *stack);
                if (!bigger) continue;
                stack = bigger;
                cap *= 2;
            }
            stack[top++] = n->edges[i].node;
        }
        node_free(n);
    }
    free(stack);
}

/* ------------------------------------------------------------ backward */
static bool exclusive(const mf_tensor *t)
{
    return t->refcount == 1 && t->storage && t->storage->refcount == 1 && mf_tensor_is_contiguous(t);
}

/* *acc += g; takes over g (one reference). */
static mf_status accumulate(mf_tensor **acc, mf_tensor *g, bool must_own)
{
    if (!*acc) {
        if (must_own && !exclusive(g)) {
            mf_tensor *c = mf_clone(g);
            mf_tensor_destroy(g);
            if (!c) return mf_last_status();
            g = c;
        }
        *acc = g;
        return MF_OK;
    }
    mf_status st = MF_OK;
    if (exclusive(*acc) || must_own) {
        st = mf_add_(*acc, g, 1.0);
    } else {
        mf_tensor *sum = mf_add(*acc, g);
        if (!sum) st = mf_last_status();
        else {
            mf_tensor_destroy(*acc);
            *acc = sum;
        }
    }
    mf_tensor_destroy(g);
    return st;
}

static int by_seq_desc(const void *a, const void *b)
{
    const mfi_node *x = *(mfi_node *const *)a, *y = *(mfi_node *const *)b;
    return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

/* One backward's leaves and the gradient contributions each still
 * awaits, keyed by the leaf's address: the counts belong to the
 * backward, not to the tensors. */
typedef mfi_ptr_map leaf_table;

/* All nodes reachable from root, unsorted; counts leaf contributions. */
static mf_status collect(mfi_node *root, mfi_node ***out, size_t *count, leaf_table *leaves)
{
    uint64_t mark = ++backward_mark;
    size_t cap = 64, n = 0, head = 0;
    mfi_node **list = malloc(cap * sizeof *list);
    if (!list) MF_FAIL(MF_ERR_NOMEM, "mf_backward: out of memory");
    root->mark = mark;
    list[n++] = root;
    while (head < n) {
        mfi_node *nd = list[head++];
        for (int i = 0; i < nd->call.n_in; i++) {
            if (nd->edges[i].leaf) {
                int *c = mfi_ptr_map_at(leaves, nd->edges[i].leaf, true);
                if (!c) {
                    free(list);
                    return mf_last_status();
                }
                (*c)++;
            }
            mfi_node *m = nd->edges[i].node;
            if (!m || m->mark == mark) continue;
            m->mark = mark;
            if (n == cap) {
                mfi_node **bigger = realloc(list, 2 * cap * sizeof *list);
                if (!bigger) {
                    free(list);
                    MF_FAIL(MF_ERR_NOMEM, "mf_backward: out of memory");
                }
                list = bigger;
                cap *= 2;
            }
            list[n++] = m;
        }
    }
    *out = list;
    *count = n;
    return MF_OK;
}

/* One contribution g to leaf's gradient; *pending counts those still to
 * come in this backward: at 0 the gradient is final. */
static mf_status leaf_done(mf_tensor *leaf, mf_tensor *g, int *pending, bool sync)
{
    mf_status st = MF_OK;
    if (g) st = accumulate(&leaf->grad, g, true);
    if (g && st == MF_OK) mfi_mark_grad(leaf->grad);
    mfi_global_grad_changed(leaf);
    if (--*pending == 0 && st == MF_OK && leaf->grad) {
        if (sync && sync_hook) sync_hook(leaf, sync_user);
        if (ready_hook) ready_hook(leaf, ready_user);
    }
    return st;
}

static mf_status run_node(mfi_node *nd, bool retain, bool sync, leaf_table *leaves)
{
    mfi_call *c = &nd->call;
    mf_tensor **gx = calloc((size_t)(c->n_in > 0 ? c->n_in : 1), sizeof *gx);
    if (!gx) MF_FAIL(MF_ERR_NOMEM, "mf_backward: out of memory");
    mf_status st = MF_OK;
    /* the step graph counts the backward and the sums of its gradients
     * as the differentiated op's */
    int prev_graph = c->graph_op ? mfi_graph_backward_enter(c->graph_op) : 0;
    if (nd->grad) {
        /* the gradients and their temporaries go to the device of gy */
        int prev_dev = mfi_device_push(mf_tensor_device(nd->grad));
        st = c->op->backward(c, nd->grad, gx);
        mfi_device_pop(prev_dev);
        if (st != MF_OK) mfi_error_context("mf_backward: in the backward of %s", c->op->name);
    }
    for (int i = 0; i < c->n_in; i++) {
        mf_tensor *g = gx[i];
        if (g && st == MF_OK) {
            mfi_meta gm;
            mfi_meta_of(g, &gm);
            if (!mfi_meta_same_shape(&gm, &c->in_meta[i]) || gm.dtype != c->in_meta[i].dtype)
                st = mfi_error(MF_ERR_INTERNAL, "mf_backward: %s gave a gradient of the wrong shape or "
                               "dtype for input %d", c->op->name, i);
        }
        int *pending = nd->edges[i].leaf ? mfi_ptr_map_at(leaves, nd->edges[i].leaf, false) : NULL;
        if (st == MF_OK && nd->edges[i].leaf && !pending)
            st = mfi_error(MF_ERR_INTERNAL, "mf_backward: a leaf of %s was not counted", c->op->name);
        if (st != MF_OK) {
            mf_tensor_destroy(g);
            continue;
        }
        if (nd->edges[i].leaf) {
            st = leaf_done(nd->edges[i].leaf, g, pending, sync);
        } else if (nd->edges[i].node && g) {
            st = accumulate(&nd->edges[i].node->grad, g, false);
        } else {
            mf_tensor_destroy(g);
        }
    }
    free(gx);
    if (c->graph_op) mfi_graph_backward_leave(prev_graph);
    mf_tensor_destroy(nd->grad);
    nd->grad = NULL;
    if (!retain) {
        mfi_call_free_saved(c);
        nd->released = true;
    }
    return st;
}

mf_status mfi_backward(mf_tensor *out, mf_tensor *grad, bool retain_graph, bool sync)
{
    mfi_module_use_cut();
    MF_TRY(mfi_check_input("mf_backward", "the output", out));
    if (out->global) return mfi_global_backward(out, grad, retain_graph, sync);
    if (!out->requires_grad)
        MF_FAIL(MF_ERR_STATE, "mf_backward: the tensor does not require grad (no input of its graph "
                "requires grad, or it was computed in no-grad mode)");
    mf_tensor *gy;
    if (grad) {
        mfi_meta a, b;
        mfi_meta_of(out, &a);
        mfi_meta_of(grad, &b);
        if (!mfi_meta_same_shape(&a, &b) || grad->dtype != out->dtype) {
            char x[128], y[128];
            MF_FAIL(MF_ERR_SHAPE, "mf_backward: gradient %s %s does not match output %s %s",
                    mf_dtype_name(grad->dtype), mf_tensor_shape_str(grad, x, sizeof x),
                    mf_dtype_name(out->dtype), mf_tensor_shape_str(out, y, sizeof y));
        }
        gy = mf_tensor_retain(grad);
    } else {
        if (mf_tensor_numel(out) != 1) {
            char x[128];
            MF_FAIL(MF_ERR_SHAPE, "mf_backward: output of shape %s is not a scalar; pass its gradient to "
                    "mf_backward_ex", mf_tensor_shape_str(out, x, sizeof x));
        }
        int prev_dev = mfi_device_push(mf_tensor_device(out));
        gy = mf_ones(out->dtype, out->ndim, out->shape);
        mfi_device_pop(prev_dev);
        if (!gy) return mf_last_status();
    }
    bool prev = mf_set_grad_enabled(false);
    mf_status st = MF_OK;
    if (!out->grad_fn) {            /* a leaf: its gradient is gy */
        int pending = 1;
        st = leaf_done(out, gy, &pending, sync);
        mf_set_grad_enabled(prev);
        return st;
    }
    mfi_node **nodes = NULL;
    size_t n = 0;
    leaf_table leaves = {0};
    st = collect(out->grad_fn, &nodes, &n, &leaves);
    if (st != MF_OK) {
        mfi_ptr_map_free(&leaves);
        mf_tensor_destroy(gy);
        mf_set_grad_enabled(prev);
        return st;
    }
    for (size_t i = 0; i < n; i++)
        if (nodes[i]->released) {
            st = mfi_error(MF_ERR_STATE, "mf_backward: the graph through %s was already freed by an "
                           "earlier backward; pass retain_graph=true to run backward twice",
                           nodes[i]->call.op->name);
            break;
        }
    if (st == MF_OK) {
        qsort(nodes, n, sizeof *nodes, by_seq_desc);
        out->grad_fn->grad = gy;
        gy = NULL;
        for (size_t i = 0; i < n; i++) {
            mf_status s = run_node(nodes[i], retain_graph, sync, &leaves);
            if (s != MF_OK && st == MF_OK) st = s;
        }
    }
    if (st != MF_OK) {
        /* leave no partial gradients in the graph */
        for (size_t i = 0; i < n; i++) {
            mf_tensor_destroy(nodes[i]->grad);
            nodes[i]->grad = NULL;
        }
    }
    mfi_ptr_map_free(&leaves);
    mf_tensor_destroy(gy);
    free(nodes);
    mf_set_grad_enabled(prev);
    return st;
}

mf_status mf_backward_ex(mf_tensor *out, mf_tensor *grad, bool retain_graph)
{
    return mfi_backward(out, grad, retain_graph, true);
}

mf_status mf_backward(mf_tensor *out) { return mf_backward_ex(out, NULL, false); }

/* ------------------------------------------------------- saved memory */
int64_t mf_autograd_saved_bytes(const mf_tensor *out)
{
    const mf_tensor *l = out && out->global ? mfi_local_piece(out) : out;
    if (!l || !l->grad_fn) return 0;
    mfi_node **nodes = NULL;
    size_t n = 0;
    leaf_table leaves = {0};
    if (collect(l->grad_fn, &nodes, &n, &leaves) != MF_OK) {
        mfi_ptr_map_free(&leaves);
        return -1;
    }
    mfi_ptr_map seen = {0};
    int64_t bytes = 0;
    for (size_t i = 0; i < n; i++)   /* the leaves' (parameters') storages are not what backward keeps */
        for (int k = 0; k < nodes[i]->call.n_in; k++) {
            const mf_tensor *lf = nodes[i]->edges[k].leaf;
            int *mark = lf && lf->storage ? mfi_ptr_map_at(&seen, lf->storage, true) : NULL;
            if (mark) *mark = 1;
        }
    for (size_t i = 0; i < n; i++) {
        const mfi_call *c = &nodes[i]->call;
        for (int k = 0; k < c->n_saved; k++) {
            const mfi_storage *s = c->saved[k] ? c->saved[k]->storage : NULL;
            int *mark = s ? mfi_ptr_map_at(&seen, s, true) : NULL;
            if (mark && !*mark) {   /* each storage once: views of one tensor share it */
                *mark = 1;
                bytes += (int64_t)s->nbytes;
            }
        }
    }
    mfi_ptr_map_free(&seen);
    mfi_ptr_map_free(&leaves);
    free(nodes);
    return bytes;
}
