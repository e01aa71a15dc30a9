/*
 * lib/op/view.c - shape ops: reshape, permute/transpose, narrow/slice,
 * expand, (un)squeeze, and the copies contiguous, clone and cast.
 *
 * Views share the input's storage. Gradients: reshape and permute undo
 * themselves; a slice's gradient is zeros with gy copied into the same
 * slice; expand's gradient is summed back (mfi_sum_to).
 */
#include "lib/global/global_internal.h"

/* ------------------------------------------------------------- reshape */
typedef struct reshape_attrs {
    int ndim;
    int64_t shape[MF_MAX_DIMS];
} reshape_attrs;

/* Strides for viewing (shape, stride) as nshape without a copy, after
 * PyTorch's computeStride; false if the layout does not allow it. */
static bool view_strides(int nd, const int64_t *shape, const int64_t *stride, int nnd, const int64_t *nshape,
                         int64_t *nstride)
{
    if (mfi_numel(nd, shape) == 0 || nd == 0) {
        mfi_contig_strides(nnd, nshape, nstride);
        return true;
    }
    int vd = nnd - 1;
    int64_t base = stride[nd - 1], tn = 1, vn = 1;
    for (int td = nd - 1; td >= 0; td--) {
        tn *= shape[td];
        if (td == 0 || (shape[td - 1] != 1 && stride[td - 1] != tn * base)) {
            while (vd >= 0 && (vn < tn || nshape[vd] == 1)) {
                nstride[vd] = vn * base;
                vn *= nshape[vd];
                vd--;
            }
            if (vn != tn) return false;
            if (td > 0) {
                base = stride[td - 1];
                tn = vn = 1;
            }
        }
    }
    return vd == -1;
}

static mf_status reshape_forward(mfi_call *c, mf_tensor **out)
{
    const reshape_attrs *a = c->attrs;
    mf_tensor *x = c->in[0];
    int64_t ns[MF_MAX_DIMS];
    if (view_strides(x->ndim, x->shape, x->stride, a->ndim, a->shape, ns)) {
        *out = mfi_tensor_view(x, a->ndim, a->shape, ns, x->offset);
    } else {
        mf_tensor *xc = mfi_contiguous_raw(x);
        if (!xc) return mf_last_status();
        mfi_contig_strides(a->ndim, a->shape, ns);
        *out = mfi_tensor_view(xc, a->ndim, a->shape, ns, xc->offset);
        mf_tensor_destroy(xc);
    }
    return *out ? MF_OK : mf_last_status();
}

static mf_status reshape_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    gx[0] = mf_reshape(gy, c->in_meta[0].ndim, c->in_meta[0].shape);
    return gx[0] ? MF_OK : mf_last_status();
}

static mf_status reshape_infer(mfi_call *c, mfi_meta *out)
{
    const reshape_attrs *a = c->attrs;
    out->dtype = c->in_meta[0].dtype;
    out->ndim = a->ndim;
    memcpy(out->shape, a->shape, sizeof out->shape);
    return MF_OK;
}

/* the ranks of p's mesh, all dims together (1 on local tensors) */
/* The ranks that can split x's dimension in the result: those of the
 * mesh dimensions where x is split now (on a dimension where x is B or
 * P the signature B or P costs nothing and wins, so S is never chosen
 * there), or of the whole mesh when x's layout is unknown. */
static int64_t mesh_ranks(const mfi_call *c)
{
    const mf_tensor *x = c->in ? c->in[0] : NULL;
    int64_t n = 1;
    for (int d = 0; c->placement && d < mf_placement_mesh_ndim(c->placement); d++)
        if (!x || !x->global || x->global->sbp.d[d].kind == MF_SBP_S) n *= mf_placement_mesh_dim(c->placement, d);
    return n;
}

/* S(a) survives while the dims up to a keep their sizes (flatten of the
 * features of a batch); and where the dims after the equal ones merge
 * into one (or one splits into several) whose leading size divides by
 * the ranks, so the blocks stay balanced splits: [B, T, C] S(0) ->
 * [B T, C] S(0), and back. B and P always. */
static int reshape_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const mfi_meta *x = &c->in_meta[0], *o = &c->out_meta;
    int n = 0, a = 0;
    for (; a < x->ndim && a < o->ndim && x->shape[a] == o->shape[a]; a++) {
        mf_sbp in = mfi_S(a);
        n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(a));
    }
    if (a < x->ndim && a < o->ndim) {
        const mfi_meta *many = x->shape[a] < o->shape[a] ? x : o, *one = many == x ? o : x;
        int64_t prod = 1;
        for (int j = a; j < many->ndim && prod < one->shape[a]; j++) prod *= many->shape[j];
        if (prod == one->shape[a] && many->shape[a] % mesh_ranks(c) == 0) {
            mf_sbp in = mfi_S(a);
            n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(a));
        }
    }
    mf_sbp p = mfi_P();
    return mfi_sig_add(sigs, n, cap, 1, &p, mfi_P());
}

/* reshape and expand: the target is this rank's block */
static void shape_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    reshape_attrs *a = attrs;
    for (int i = 0; i < c->out_meta.ndim; i++) a->shape[i] = ob->count[i];
}

static const mfi_op reshape_op = {"mf_reshape", MFI_OP_OWN_OUTPUT, reshape_infer, reshape_forward, reshape_backward,
                                  reshape_sbp, shape_localize};

mf_tensor *mf_reshape(mf_tensor *x, int ndim, const int64_t *shape)
{
    if (mfi_check_input("mf_reshape", "x", x) != MF_OK) return NULL;
    if (ndim < 0 || ndim > MF_MAX_DIMS || (ndim && !shape)) {
        mfi_error(MF_ERR_ARG, "mf_reshape: bad target rank %d", ndim);
        return NULL;
    }
    reshape_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = ndim;
    int infer = -1;
    int64_t known = 1, n = mf_tensor_numel(x);
    char s1[128], s2[128];
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) {
                mfi_error(MF_ERR_ARG, "mf_reshape: only one dim may be -1 in %s", mfi_shape_str(ndim, shape, s1, sizeof s1));
                return NULL;
            }
            infer = i;
            continue;
        }
        if (shape[i] < 0) {
            mfi_error(MF_ERR_SHAPE, "mf_reshape: negative size in %s", mfi_shape_str(ndim, shape, s1, sizeof s1));
            return NULL;
        }
        a.shape[i] = shape[i];
        known *= shape[i];
    }
    if (infer >= 0) {
        if (known == 0 || n % known) {
            mfi_error(MF_ERR_SHAPE, "mf_reshape: cannot reshape %s (%lld elements) to %s",
                      mf_tensor_shape_str(x, s1, sizeof s1), (long long)n, mfi_shape_str(ndim, shape, s2, sizeof s2));
            return NULL;
        }
        a.shape[infer] = n / known;
        known = n;
    }
    if (known != n) {
        mfi_error(MF_ERR_SHAPE, "mf_reshape: cannot reshape %s (%lld elements) to %s (%lld elements)",
                  mf_tensor_shape_str(x, s1, sizeof s1), (long long)n, mfi_shape_str(ndim, a.shape, s2, sizeof s2),
                  (long long)known);
        return NULL;
    }
    return mfi_apply(&reshape_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_flatten(mf_tensor *x, int start_dim, int end_dim)
{
    if (mfi_check_input("mf_flatten", "x", x) != MF_OK) return NULL;
    if (x->ndim == 0) {
        int64_t one = 1;
        return mf_reshape(x, 1, &one);
    }
    if (mfi_norm_axis("mf_flatten", &start_dim, x->ndim) != MF_OK ||
        mfi_norm_axis("mf_flatten", &end_dim, x->ndim) != MF_OK)
        return NULL;
    if (start_dim > end_dim) {
        mfi_error(MF_ERR_ARG, "mf_flatten: start_dim %d is after end_dim %d", start_dim, end_dim);
        return NULL;
    }
    int64_t s[MF_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < start_dim; i++) s[nd++] = x->shape[i];
    s[nd] = 1;
    for (int i = start_dim; i <= end_dim; i++) s[nd] *= x->shape[i];
    nd++;
    for (int i = end_dim + 1; i < x->ndim; i++) s[nd++] = x->shape[i];
    return mf_reshape(x, nd, s);
}

mf_tensor *mf_unsqueeze(mf_tensor *x, int dim)
{
    if (mfi_check_input("mf_unsqueeze", "x", x) != MF_OK) return NULL;
    if (dim < 0) dim += x->ndim + 1;
    if (dim < 0 || dim > x->ndim || x->ndim == MF_MAX_DIMS) {
        mfi_error(MF_ERR_ARG, "mf_unsqueeze: dim %d is out of range for a %d-dim tensor", dim, x->ndim);
        return NULL;
    }
    int64_t s[MF_MAX_DIMS];
    for (int i = 0, j = 0; i <= x->ndim; i++) s[i] = i == dim ? 1 : x->shape[j++];
    return mf_reshape(x, x->ndim + 1, s);
}

mf_tensor *mf_squeeze(mf_tensor *x, int dim)
{
    if (mfi_check_input("mf_squeeze", "x", x) != MF_OK) return NULL;
    if (mfi_norm_axis("mf_squeeze", &dim, x->ndim) != MF_OK) return NULL;
    if (x->ndim == 0 || x->shape[dim] != 1) return mf_reshape(x, x->ndim, x->shape);
    int64_t s[MF_MAX_DIMS];
    for (int i = 0, j = 0; i < x->ndim; i++)
        if (i != dim) s[j++] = x->shape[i];
    return mf_reshape(x, x->ndim - 1, s);
}

/* ------------------------------------------------------------- permute */
typedef struct perm_attrs { int perm[MF_MAX_DIMS]; } perm_attrs;

static mf_status perm_forward(mfi_call *c, mf_tensor **out)
{
    const perm_attrs *a = c->attrs;
    mf_tensor *x = c->in[0];
    int64_t s[MF_MAX_DIMS], st[MF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        s[i] = x->shape[a->perm[i]];
        st[i] = x->stride[a->perm[i]];
    }
    *out = mfi_tensor_view(x, x->ndim, s, st, x->offset);
    return *out ? MF_OK : mf_last_status();
}

static mf_status perm_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const perm_attrs *a = c->attrs;
    int inv[MF_MAX_DIMS];
    for (int i = 0; i < c->in_meta[0].ndim; i++) inv[a->perm[i]] = i;
    gx[0] = mf_permute(gy, inv);
    return gx[0] ? MF_OK : mf_last_status();
}

static mf_status perm_infer(mfi_call *c, mfi_meta *out)
{
    const perm_attrs *a = c->attrs;
    *out = c->in_meta[0];
    for (int i = 0; i < out->ndim; i++) out->shape[i] = c->in_meta[0].shape[a->perm[i]];
    return MF_OK;
}

static int perm_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const perm_attrs *a = c->attrs;
    int n = 0;
    for (int i = 0; i < c->out_meta.ndim; i++) {
        mf_sbp in = mfi_S(a->perm[i]);
        n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(i));
    }
    mf_sbp p = mfi_P();
    return mfi_sig_add(sigs, n, cap, 1, &p, mfi_P());
}

static const mfi_op perm_op = {"mf_permute", MFI_OP_OWN_OUTPUT, perm_infer, perm_forward, perm_backward, perm_sbp,
                               NULL};

mf_tensor *mf_permute(mf_tensor *x, const int *perm)
{
    if (mfi_check_input("mf_permute", "x", x) != MF_OK) return NULL;
    perm_attrs a;
    bool seen[MF_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        int p = perm[i];
        if (mfi_norm_axis("mf_permute", &p, x->ndim) != MF_OK) return NULL;
        if (seen[p]) {
            mfi_error(MF_ERR_ARG, "mf_permute: dim %d appears twice in the permutation", p);
            return NULL;
        }
        seen[p] = true;
        a.perm[i] = p;
    }
    return mfi_apply(&perm_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_transpose(mf_tensor *x, int dim0, int dim1)
{
    if (mfi_check_input("mf_transpose", "x", x) != MF_OK) return NULL;
    if (mfi_norm_axis("mf_transpose", &dim0, x->ndim) != MF_OK ||
        mfi_norm_axis("mf_transpose", &dim1, x->ndim) != MF_OK)
        return NULL;
    int perm[MF_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    if (x->ndim) {
        perm[dim0] = dim1;
        perm[dim1] = dim0;
    }
    return mf_permute(x, perm);
}

/* --------------------------------------------------------------- slice */
typedef struct slice_attrs {
    int dim;
    int64_t start, len, step;
} slice_attrs;

static mf_tensor *slice_view(mf_tensor *x, const slice_attrs *a)
{
    int64_t s[MF_MAX_DIMS], st[MF_MAX_DIMS];
    memcpy(s, x->shape, sizeof s);
    memcpy(st, x->stride, sizeof st);
    s[a->dim] = a->len;
    st[a->dim] = x->stride[a->dim] * a->step;
    return mfi_tensor_view(x, x->ndim, s, st, x->offset + a->start * x->stride[a->dim]);
}

static mf_status slice_forward(mfi_call *c, mf_tensor **out)
{
    *out = slice_view(c->in[0], c->attrs);
    return *out ? MF_OK : mf_last_status();
}

static mf_status slice_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const mfi_meta *m = &c->in_meta[0];
    mf_tensor *z = mf_zeros(m->dtype, m->ndim, m->shape);
    if (!z) return mf_last_status();
    mf_tensor *v = slice_view(z, c->attrs);
    mf_status st = v ? mf_copy_(v, gy) : mf_last_status();
    mf_tensor_destroy(v);
    if (st != MF_OK) {
        mf_tensor_destroy(z);
        return st;
    }
    gx[0] = z;
    return MF_OK;
}

static mf_status slice_infer(mfi_call *c, mfi_meta *out)
{
    const slice_attrs *a = c->attrs;
    *out = c->in_meta[0];
    out->shape[a->dim] = a->len;
    return MF_OK;
}

/* split on any axis but the sliced one */
static int slice_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    const slice_attrs *a = c->attrs;
    int n = 0;
    for (int i = 0; i < c->out_meta.ndim; i++) {
        if (i == a->dim) continue;
        mf_sbp in = mfi_S(i);
        n = mfi_sig_add(sigs, n, cap, 1, &in, mfi_S(i));
    }
    mf_sbp p = mfi_P();
    return mfi_sig_add(sigs, n, cap, 1, &p, mfi_P());
}

static const mfi_op slice_op = {"mf_slice", MFI_OP_OWN_OUTPUT, slice_infer, slice_forward, slice_backward, slice_sbp,
                                NULL};

mf_tensor *mf_slice(mf_tensor *x, int dim, int64_t start, int64_t end, int64_t step)
{
    if (mfi_check_input("mf_slice", "x", x) != MF_OK) return NULL;
    if (x->ndim == 0) {
        mfi_error(MF_ERR_ARG, "mf_slice: cannot slice a 0-dim tensor");
        return NULL;
    }
    if (mfi_norm_axis("mf_slice", &dim, x->ndim) != MF_OK) return NULL;
    int64_t n = x->shape[dim];
    if (step < 1) {
        mfi_error(MF_ERR_ARG, "mf_slice: step %lld must be at least 1", (long long)step);
        return NULL;
    }
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (end > n) end = n;
    if (start < 0 || start > n) {
        mfi_error(MF_ERR_ARG, "mf_slice: start %lld is out of range for dim %d of size %lld", (long long)start, dim,
                  (long long)n);
        return NULL;
    }
    slice_attrs a = {dim, start, end > start ? (end - start + step - 1) / step : 0, step};
    return mfi_apply(&slice_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_narrow(mf_tensor *x, int dim, int64_t start, int64_t length)
{
    if (mfi_check_input("mf_narrow", "x", x) != MF_OK) return NULL;
    if (mfi_norm_axis("mf_narrow", &dim, x->ndim) != MF_OK) return NULL;
    if (x->ndim == 0 || start < 0 || length < 0 || start + length > x->shape[dim]) {
        mfi_error(MF_ERR_ARG, "mf_narrow: [%lld, %lld) is out of range for dim %d of size %lld", (long long)start,
                  (long long)(start + length), dim, (long long)(x->ndim ? x->shape[dim] : 0));
        return NULL;
    }
    return mf_slice(x, dim, start, start + length, 1);
}

/* -------------------------------------------------------------- expand */
static mf_status expand_forward(mfi_call *c, mf_tensor **out)
{
    const reshape_attrs *a = c->attrs;
    mfi_meta m = {c->in[0]->dtype, a->ndim, {0}};
    memcpy(m.shape, a->shape, sizeof m.shape);
    mfi_view v = mfi_view_broadcast(c->in[0], &m);
    *out = mfi_tensor_view(c->in[0], a->ndim, a->shape, v.stride, c->in[0]->offset);
    return *out ? MF_OK : mf_last_status();
}

static mf_status expand_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    gx[0] = mfi_sum_to(gy, &c->in_meta[0]);
    return gx[0] ? MF_OK : mf_last_status();
}

static int expand_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    int n = mfi_sig_elementwise(c, sigs, cap, 1);
    return n;
}

static const mfi_op expand_op = {"mf_expand", MFI_OP_OWN_OUTPUT, reshape_infer, expand_forward, expand_backward,
                                 expand_sbp, shape_localize};

mf_tensor *mf_expand(mf_tensor *x, int ndim, const int64_t *shape)
{
    if (mfi_check_input("mf_expand", "x", x) != MF_OK) return NULL;
    char s1[128], s2[128];
    if (ndim < x->ndim || ndim > MF_MAX_DIMS) {
        mfi_error(MF_ERR_SHAPE, "mf_expand: cannot expand %s to %s", mf_tensor_shape_str(x, s1, sizeof s1),
                  mfi_shape_str(ndim, shape, s2, sizeof s2));
        return NULL;
    }
    reshape_attrs a;
    memset(&a, 0, sizeof a);
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - (ndim - x->ndim);
        int64_t want = shape[i] == -1 && j >= 0 ? x->shape[j] : shape[i];
        if (j >= 0 && x->shape[j] != 1 && x->shape[j] != want) {
            mfi_error(MF_ERR_SHAPE, "mf_expand: cannot expand %s to %s (dim %d)", mf_tensor_shape_str(x, s1, sizeof s1),
                      mfi_shape_str(ndim, shape, s2, sizeof s2), i);
            return NULL;
        }
        a.shape[i] = want;
    }
    return mfi_apply(&expand_op, 1, &x, &a, sizeof a);
}

/* ---------------------------------------------------- copies and casts */
typedef struct cast_attrs { mf_dtype dtype; } cast_attrs;

static mf_status copy_infer(mfi_call *c, mfi_meta *out)
{
    const cast_attrs *a = c->attrs;
    *out = c->in_meta[0];
    out->dtype = a->dtype;
    return MF_OK;
}

static mf_status copy_forward(mfi_call *c, mf_tensor **out)
{
    mfi_view o = mfi_view_of(*out), i = mfi_view_of(c->in[0]);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(*out), copy, &o, &i);
    return st;
}

static mf_status copy_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    gx[0] = gy->dtype == c->in_meta[0].dtype ? mf_tensor_retain(gy) : mf_cast(gy, c->in_meta[0].dtype);
    return gx[0] ? MF_OK : mf_last_status();
}

static int copy_sbp(const mfi_call *c, mfi_sig *sigs, int cap) { return mfi_sig_elementwise(c, sigs, cap, 1); }

static const mfi_op copy_op = {"mf_copy", 0, copy_infer, copy_forward, copy_backward, copy_sbp, NULL};

mf_tensor *mf_cast(mf_tensor *x, mf_dtype dt)
{
    if (mfi_check_input("mf_cast", "x", x) != MF_OK) return NULL;
    if ((unsigned)dt >= MF_DTYPE_COUNT) {
        mfi_error(MF_ERR_DTYPE, "mf_cast: unknown dtype %d", (int)dt);
        return NULL;
    }
    cast_attrs a = {dt};
    return mfi_apply(&copy_op, 1, &x, &a, sizeof a);
}

mf_tensor *mf_clone(mf_tensor *x)
{
    if (mfi_check_input("mf_clone", "x", x) != MF_OK) return NULL;
    return mf_cast(x, x->dtype);
}

mf_tensor *mf_contiguous(mf_tensor *x)
{
    if (mfi_check_input("mf_contiguous", "x", x) != MF_OK) return NULL;
    return mf_tensor_is_contiguous(x) ? mf_tensor_retain(x) : mf_clone(x);
}
