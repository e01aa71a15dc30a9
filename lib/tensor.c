/*
 * lib/tensor.c - tensor and storage lifetime, metadata and data access.
 *
 * A tensor is (dtype, shape, strides, offset) on a refcounted storage;
 * views share the storage. Strides and offsets count elements.
 */
#include <math.h>
#include <stdio.h>
#include "config.h"
#include "lib/internal.h"

int64_t mfi_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void mfi_contig_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

char *mfi_shape_str(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

static mf_status check_shape(const char *fn, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > MF_MAX_DIMS)
        MF_FAIL(MF_ERR_SHAPE, "%s: %d dims (at most %d)", fn, ndim, MF_MAX_DIMS);
    if (ndim > 0 && !shape) MF_FAIL(MF_ERR_ARG, "%s: shape is NULL", fn);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            char b[128];
            MF_FAIL(MF_ERR_SHAPE, "%s: negative size in shape %s", fn, mfi_shape_str(ndim, shape, b, sizeof b));
        }
    return MF_OK;
}

static _Atomic int64_t storage_serial;   /* the step graph's value ids */

static mfi_storage *storage_new(mf_device_type dev, size_t nbytes)
{
    mfi_storage *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->use = mfi_memory_use_now();
    s->data = mfi_alloc_use(dev, nbytes ? nbytes : 1, s->use);
    if (!s->data) {
        free(s);
        return NULL;
    }
    s->nbytes = nbytes ? nbytes : 1;
    s->refcount = 1;
    s->device = dev;
    s->id = ++storage_serial;
    return s;
}

static void storage_release(mfi_storage *s)
{
    if (!s || --s->refcount > 0) return;
    mfi_free_use(s->device, s->data, s->nbytes, s->use);
    mfi_rebuild_release(s->rebuild);
    free(s);
}

mf_tensor *mfi_tensor_new(mf_dtype dt, int ndim, const int64_t *shape)
{
    return mfi_tensor_new_on(mfi_current_device(), dt, ndim, shape);
}

mf_tensor *mfi_tensor_new_on(mf_device_type dev, mf_dtype dt, int ndim, const int64_t *shape)
{
    if (dev != MF_DEV_CPU && !mfi_backend_for(dev)) return NULL;   /* says why */
    if ((unsigned)dt >= MF_DTYPE_COUNT) {
        mfi_error(MF_ERR_DTYPE, "unknown dtype %d", (int)dt);
        return NULL;
    }
    if (check_shape("mf_empty", ndim, shape) != MF_OK) return NULL;
    mf_tensor *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->refcount = 1;
    t->dtype = dt;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    mfi_contig_strides(ndim, shape, t->stride);
    t->storage = storage_new(dev, (size_t)mfi_numel(ndim, shape) * mf_dtype_size(dt));
    if (!t->storage) goto nomem;
    return t;
nomem:
    free(t);
    {
        char b[128], lim[160] = "";
        int64_t cap = mf_memory_limit_on(dev), bytes = mfi_numel(ndim, shape) * (int64_t)mf_dtype_size(dt);
        mf_memory_stats ms;
        mf_memory_get_stats_on(dev, &ms);
        if (cap && ms.in_use + bytes > cap)
            snprintf(lim, sizeof lim, ": %.1f MiB are in use and the limit is %.1f MiB (mf_memory_set_limit_on, "
                     "MF_MEMORY_LIMIT)", ms.in_use / 1048576.0, cap / 1048576.0);
        mfi_error(MF_ERR_NOMEM, "out of memory allocating a %s tensor of shape %s on %s%s", mf_dtype_name(dt),
                  mfi_shape_str(ndim, shape, b, sizeof b), mf_device_name(dev), lim);
    }
    return NULL;
}

mf_tensor *mfi_tensor_view(const mf_tensor *base, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset)
{
    mf_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        mfi_error(MF_ERR_NOMEM, "out of memory making a view");
        return NULL;
    }
    t->refcount = 1;
    t->dtype = base->dtype;
    t->ndim = ndim;
    if (ndim) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
    }
    t->offset = offset;
    t->storage = base->storage;
    if (t->storage) t->storage->refcount++;
    return t;
}

mf_tensor *mfi_tensor_alias(const mf_tensor *t)
{
    return mfi_tensor_view(t, t->ndim, t->shape, t->stride, t->offset);
}

mf_tensor *mf_tensor_retain(mf_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void mf_tensor_destroy(mf_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    mfi_global_grad_changed(t);
    mfi_global_free(t->global);
    storage_release(t->storage);
    mf_tensor_destroy(t->grad);
    if (t->grad_fn) mfi_node_release(t->grad_fn);
    free(t->name);
    free(t);
}

mfi_view mfi_view_of(const mf_tensor *t)
{
    mfi_view v;
    memset(&v, 0, sizeof v);
    v.dtype = t->dtype;
    v.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) {
        v.shape[i] = t->shape[i];
        v.stride[i] = t->stride[i];
    }
    v.data = t->storage ? (char *)t->storage->data + t->offset * (int64_t)mf_dtype_size(t->dtype) : NULL;
    return v;
}

mfi_view mfi_view_as(const mf_tensor *t, int ndim, const int64_t *shape)
{
    mfi_view v = mfi_view_of(t);
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i];
    mfi_contig_strides(ndim, shape, v.stride);
    return v;
}

const mfi_backend *mfi_backend_of(const mf_tensor *t)
{
    if (t && t->global && mfi_local_piece(t)) t = mfi_local_piece(t);   /* a global tensor: its piece's device */
#ifdef MF_HAVE_CUDA
    /* the storage exists, so the CUDA backend has started */
    if (t->storage && t->storage->device == MF_DEV_CUDA) return &mfi_cuda_backend;
#endif
    if (t->storage && t->storage->device == MF_DEV_META) return mfi_meta_backend();
    return &mfi_cpu_backend;
}



mf_status mfi_norm_axis(const char *op, int *axis, int ndim)
{
    int a = *axis;
    int n = ndim > 0 ? ndim : 1;
    if (a < -n || a >= n)
        MF_FAIL(MF_ERR_ARG, "%s: axis %d is out of range for a %d-dim tensor", op, a, ndim);
    *axis = a < 0 ? a + n : a;
    return MF_OK;
}

/* ------------------------------------------------------------- creation */
mf_tensor *mf_empty(mf_dtype dt, int ndim, const int64_t *shape) { return mfi_tensor_new(dt, ndim, shape); }

mf_tensor *mf_full(mf_dtype dt, int ndim, const int64_t *shape, double value)
{
    mf_tensor *t = mfi_tensor_new(dt, ndim, shape);
    if (t && mf_fill_(t, value) != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    return t;
}

mf_tensor *mf_zeros(mf_dtype dt, int ndim, const int64_t *shape) { return mf_full(dt, ndim, shape, 0.0); }
mf_tensor *mf_ones(mf_dtype dt, int ndim, const int64_t *shape) { return mf_full(dt, ndim, shape, 1.0); }
mf_tensor *mf_scalar(mf_dtype dt, double value) { return mf_full(dt, 0, NULL, value); }
/* *_like: on t's device */
mf_tensor *mf_empty_like(const mf_tensor *t)
{
    return mfi_tensor_new_on(mf_tensor_device(t), t->dtype, t->ndim, t->shape);
}

mf_tensor *mf_zeros_like(const mf_tensor *t)
{
    int prev = mfi_device_push(mf_tensor_device(t));
    mf_tensor *z = mf_zeros(t->dtype, t->ndim, t->shape);
    mfi_device_pop(prev);
    return z;
}

mf_tensor *mf_from_data(mf_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    mf_tensor *t = mfi_tensor_new(dt, ndim, shape);
    if (!t) return NULL;
    if (!data && mfi_numel(ndim, shape) > 0) {
        mf_tensor_destroy(t);
        mfi_error(MF_ERR_ARG, "mf_from_data: data is NULL");
        return NULL;
    }
    if (mfi_device_upload(t->storage->device, t->storage->data, data,
                          (size_t)mfi_numel(ndim, shape) * mf_dtype_size(dt)) != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    return t;
}

mf_tensor *mf_arange(mf_dtype dt, int64_t n)
{
    mf_tensor *h = mfi_tensor_new_on(MF_DEV_CPU, dt, 1, &n);
    if (!h) return NULL;
    for (int64_t i = 0; i < n; i++) mf_tensor_set(h, &i, (double)i);
    if (mfi_current_device() == MF_DEV_CPU) return h;
    mf_tensor *t = mfi_tensor_new(dt, 1, &n);
    if (t && mfi_copy_across(t, h) != MF_OK) {
        mf_tensor_destroy(t);
        t = NULL;
    }
    mf_tensor_destroy(h);
    return t;
}

static mf_tensor *random_tensor(mf_dtype dt, int ndim, const int64_t *shape, mfi_dist d)
{
    if (!mf_dtype_is_float(dt)) {
        mfi_error(MF_ERR_DTYPE, "mf_rand/mf_randn: dtype %s is not a float dtype", mf_dtype_name(dt));
        return NULL;
    }
    mf_tensor *t = mfi_tensor_new(dt, ndim, shape);
    if (!t) return NULL;
    mfi_view v = mfi_view_of(t);
    mf_status st;
    const mfi_backend *be = mfi_backend_of(t);
    /* U[0, 1) or N(0, 1) */
    MFI_KERNEL(st, MF_PROF_OTHER, be, philox_fill, &v, d, 0.0, 1.0, mf_seed(), mfi_rng_next_key(), 0);
    if (st != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    return t;
}

mf_tensor *mf_rand(mf_dtype dt, int ndim, const int64_t *shape) { return random_tensor(dt, ndim, shape, MFI_DIST_UNIFORM); }
mf_tensor *mf_randn(mf_dtype dt, int ndim, const int64_t *shape) { return random_tensor(dt, ndim, shape, MFI_DIST_NORMAL); }

/* ------------------------------------------------------------- metadata */
mf_dtype mf_tensor_dtype(const mf_tensor *t) { return t->dtype; }
int mf_tensor_ndim(const mf_tensor *t) { return t->ndim; }
const int64_t *mf_tensor_shape(const mf_tensor *t) { return t->shape; }
const int64_t *mf_tensor_strides(const mf_tensor *t) { return t->stride; }
int64_t mf_tensor_numel(const mf_tensor *t) { return mfi_numel(t->ndim, t->shape); }
size_t mf_tensor_nbytes(const mf_tensor *t) { return (size_t)mf_tensor_numel(t) * mf_dtype_size(t->dtype); }
mf_device_type mf_tensor_device(const mf_tensor *t) { return t->storage ? t->storage->device : MF_DEV_CPU; }

int64_t mf_tensor_dim(const mf_tensor *t, int d)
{
    if (d < 0) d += t->ndim;
    return d >= 0 && d < t->ndim ? t->shape[d] : 1;
}

bool mf_tensor_is_contiguous(const mf_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

bool mf_tensor_shares_storage(const mf_tensor *a, const mf_tensor *b)
{
    return a && b && a->storage && a->storage == b->storage;
}

char *mf_tensor_shape_str(const mf_tensor *t, char *buf, size_t size)
{
    return mfi_shape_str(t->ndim, t->shape, buf, size);
}

mf_status mf_tensor_set_name(mf_tensor *t, const char *name)
{
    char *copy = name ? strdup(name) : NULL;
    if (name && !copy) MF_FAIL(MF_ERR_NOMEM, "out of memory naming a tensor");
    free(t->name);
    t->name = copy;
    return MF_OK;
}

const char *mf_tensor_name(const mf_tensor *t) { return t->name ? t->name : ""; }

/* ----------------------------------------------------------------- data */
void *mf_tensor_data(mf_tensor *t)
{
    if (!t->storage) return NULL;
    return (char *)t->storage->data + t->offset * (int64_t)mf_dtype_size(t->dtype);
}

mf_status mf_tensor_copy_out(const mf_tensor *t, mf_dtype dt, void *dst, int64_t count)
{
    if (t->global) return mfi_global_copy_out(t, dt, dst, count);
    if (count != mf_tensor_numel(t))
        MF_FAIL(MF_ERR_ARG, "mf_tensor_copy_out: count %lld but the tensor has %lld elements",
                (long long)count, (long long)mf_tensor_numel(t));
    if ((unsigned)dt >= MF_DTYPE_COUNT) MF_FAIL(MF_ERR_DTYPE, "mf_tensor_copy_out: unknown dtype %d", (int)dt);
    mf_status st;
    if (mf_tensor_device(t) != MF_DEV_CPU) {
        /* a contiguous copy of dtype dt on the device, then one download */
        mf_tensor *c = mfi_tensor_new_on(mf_tensor_device(t), dt, t->ndim, t->shape);
        if (!c) return mf_last_status();
        st = mfi_copy_across(c, t);
        if (st == MF_OK) st = mfi_device_download(mf_tensor_device(t), dst, mf_tensor_data(c), mf_tensor_nbytes(c));
        mf_tensor_destroy(c);
        return st;
    }
    mfi_view in = mfi_view_of(t), out = in;
    out.data = dst;
    out.dtype = dt;
    mfi_contig_strides(out.ndim, out.shape, out.stride);
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(t), copy, &out, &in);
    return st;
}

mf_status mf_tensor_copy_in(mf_tensor *t, mf_dtype dt, const void *src, int64_t count)
{
    if (count != mf_tensor_numel(t))
        MF_FAIL(MF_ERR_ARG, "mf_tensor_copy_in: count %lld but the tensor has %lld elements",
                (long long)count, (long long)mf_tensor_numel(t));
    if ((unsigned)dt >= MF_DTYPE_COUNT) MF_FAIL(MF_ERR_DTYPE, "mf_tensor_copy_in: unknown dtype %d", (int)dt);
    mf_status st;
    if (mf_tensor_device(t) != MF_DEV_CPU) {
        mf_tensor *c = mfi_tensor_new_on(mf_tensor_device(t), dt, t->ndim, t->shape);
        if (!c) return mf_last_status();
        st = mfi_device_upload(mf_tensor_device(t), mf_tensor_data(c), src, mf_tensor_nbytes(c));
        if (st == MF_OK) st = mfi_copy_across(t, c);
        mf_tensor_destroy(c);
        if (st == MF_OK) mfi_bump_version(t);
        return st;
    }
    mfi_view out = mfi_view_of(t), in = out;
    in.data = (void *)src;
    in.dtype = dt;
    mfi_contig_strides(in.ndim, in.shape, in.stride);
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(t), copy, &out, &in);
    if (st == MF_OK) mfi_bump_version(t);
    return st;
}

static double load(const mf_tensor *t, int64_t off)
{
    const char *base = (const char *)t->storage->data;
    char one[8];
    if (t->storage->device != MF_DEV_CPU) {   /* one element, downloaded */
        size_t es = mf_dtype_size(t->dtype);
        if (mfi_device_download(t->storage->device, one, base + off * (int64_t)es, es) != MF_OK) return NAN;
        base = one;
        off = 0;
    }
    switch (t->dtype) {
    case MF_F32: return ((const float *)base)[off];
    case MF_F64: return ((const double *)base)[off];
    case MF_I32: return ((const int32_t *)base)[off];
    case MF_I64: return (double)((const int64_t *)base)[off];
    default: return NAN;
    }
}

static mf_status index_offset(const char *fn, const mf_tensor *t, const int64_t *index, int64_t *off)
{
    int64_t o = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i]) {
            char b[128];
            MF_FAIL(MF_ERR_ARG, "%s: index %lld out of range for dim %d of %s", fn, (long long)index[i], i,
                    mf_tensor_shape_str(t, b, sizeof b));
        }
        o += index[i] * t->stride[i];
    }
    *off = o;
    return MF_OK;
}

double mf_tensor_get(const mf_tensor *t, const int64_t *index)
{
    int64_t off = 0;
    if (t->global) {
        mfi_error(MF_ERR_ARG, "mf_tensor_get: the tensor is global; read its piece with mf_to_local or the "
                  "whole value with mf_global_gather");
        return NAN;
    }
    if (index_offset("mf_tensor_get", t, index, &off) != MF_OK) return NAN;
    return load(t, off);
}

mf_status mf_tensor_set(mf_tensor *t, const int64_t *index, double v)
{
    int64_t off = 0;
    if (t->global)
        MF_FAIL(MF_ERR_ARG, "mf_tensor_set: the tensor is global; write its piece through mf_to_local");
    MF_TRY(index_offset("mf_tensor_set", t, index, &off));
    bool dev = t->storage->device != MF_DEV_CPU;
    char one[8];
    char *base = dev ? one : (char *)t->storage->data;
    int64_t at = dev ? 0 : off;
    switch (t->dtype) {
    case MF_F32: ((float *)base)[at] = (float)v; break;
    case MF_F64: ((double *)base)[at] = v; break;
    case MF_I32: ((int32_t *)base)[at] = (int32_t)v; break;
    case MF_I64: ((int64_t *)base)[at] = (int64_t)v; break;
    default: MF_FAIL(MF_ERR_DTYPE, "mf_tensor_set: unknown dtype");
    }
    if (dev) {   /* after the kernels queued before it */
        size_t es = mf_dtype_size(t->dtype);
        MF_TRY(mfi_device_upload(t->storage->device, (char *)t->storage->data + off * (int64_t)es, one, es));
    }
    mfi_bump_version(t);
    return MF_OK;
}

double mf_tensor_item(const mf_tensor *t)
{
    if (!t) {
        mfi_error(MF_ERR_ARG, "mf_tensor_item: tensor is NULL");
        return NAN;
    }
    if (mf_tensor_numel(t) != 1) {
        char b[128];
        mfi_error(MF_ERR_SHAPE, "mf_tensor_item: tensor of shape %s has %lld elements, not 1",
                  mf_tensor_shape_str(t, b, sizeof b), (long long)mf_tensor_numel(t));
        return NAN;
    }
    if (t->global) return mfi_global_item(t);
    return load(t, t->offset);
}

void mf_tensor_print(const mf_tensor *t, FILE *f, int max_elems)
{
    char b[160];
    if (t->global) {
        mfi_global_print(t, f, max_elems);
        return;
    }
    if (mf_tensor_device(t) != MF_DEV_CPU) {
        mf_tensor *h = mfi_on_device((mf_tensor *)t, MF_DEV_CPU);
        if (!h) {
            fprintf(f, "tensor%s%s: cannot be printed: %s\n", t->name ? " " : "", t->name ? t->name : "",
                    mf_last_error());
            return;
        }
        if (t->name) mf_tensor_set_name(h, t->name);
        fprintf(f, "(cuda) ");
        mf_tensor_print(h, f, max_elems);
        mf_tensor_destroy(h);
        return;
    }
    int64_t n = mf_tensor_numel(t);
    fprintf(f, "tensor%s%s %s %s", t->name ? " " : "", t->name ? t->name : "",
            mf_dtype_name(t->dtype), mf_tensor_shape_str(t, b, sizeof b));
    int64_t idx[MF_MAX_DIMS] = {0};
    fputs(" [", f);
    for (int64_t i = 0; i < n && i < max_elems; i++) {
        int64_t off = t->offset, r = i;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = r % t->shape[d];
            r /= t->shape[d];
            off += idx[d] * t->stride[d];
        }
        fprintf(f, i ? ", %.6g" : "%.6g", load(t, off));
    }
    fprintf(f, "%s]\n", n > max_elems ? ", ..." : "");
}

/* ------------------------------------------------------------- autograd */
mf_status mf_tensor_set_requires_grad(mf_tensor *t, bool on)
{
    if (t->grad_fn)
        MF_FAIL(MF_ERR_STATE, "mf_tensor_set_requires_grad: '%s' is not a leaf (it was computed by an op); "
                "detach it first", mf_tensor_name(t));
    if (on && !mf_dtype_is_float(t->dtype))
        MF_FAIL(MF_ERR_DTYPE, "mf_tensor_set_requires_grad: only float tensors can require grad, not %s",
                mf_dtype_name(t->dtype));
    if (t->global) MF_TRY(mfi_global_set_requires_grad(t, on));
    t->requires_grad = on;
    return MF_OK;
}

bool mf_tensor_requires_grad(const mf_tensor *t) { return t->requires_grad; }
bool mf_tensor_is_leaf(const mf_tensor *t)
{
    if (t->global) return mfi_global_is_leaf(t);
    return t->grad_fn == NULL;
}
mf_tensor *mf_tensor_grad(const mf_tensor *t) { return t->global ? mfi_global_grad((mf_tensor *)t) : t->grad; }

void mfi_mark_grad(mf_tensor *g)
{
    mfi_storage *s = g ? g->storage : NULL;
    if (!s || !s->data || s->refcount != 1 || s->use != MF_MEM_TENSORS ||
        (size_t)mf_tensor_numel(g) * mf_dtype_size(g->dtype) != s->nbytes)
        return;   /* shared with, or a view of, other bytes: left as they are */
    mfi_alloc_retag(s->nbytes, s->use, MF_MEM_GRADS);
    s->use = MF_MEM_GRADS;
}

mf_status mf_tensor_set_grad(mf_tensor *t, mf_tensor *grad)
{
    if (t->global) return mfi_global_set_grad(t, grad);
    mfi_global_grad_changed(t);
    if (grad && (grad->dtype != t->dtype || grad->ndim != t->ndim ||
                 memcmp(grad->shape, t->shape, (size_t)t->ndim * sizeof *t->shape))) {
        char a[128], b[128];
        MF_FAIL(MF_ERR_SHAPE, "mf_tensor_set_grad: gradient %s %s does not match tensor %s %s",
                mf_dtype_name(grad->dtype), mf_tensor_shape_str(grad, a, sizeof a),
                mf_dtype_name(t->dtype), mf_tensor_shape_str(t, b, sizeof b));
    }
    mf_tensor_retain(grad);
    mf_tensor_destroy(t->grad);
    t->grad = grad;
    mfi_mark_grad(grad);
    return MF_OK;
}

mf_tensor *mf_tensor_detach(mf_tensor *t) { return t->global ? mfi_global_detach(t) : mfi_tensor_alias(t); }
