/*
 * mpiflow/tensor.h - local tensors: dtype, shape, strides, views and
 * refcounted storage (doc/design.md section 2).
 *
 * A tensor is a view (shape, strides, offset) on a refcounted storage.
 * Views made by mf_reshape, mf_narrow, mf_transpose, mf_permute and
 * mf_expand share their base's storage. Tensors are refcounted too:
 * every function that returns an mf_tensor * hands the caller one
 * reference, which the caller gives back with mf_tensor_destroy. The
 * memory goes when the last holder (a view, the autograd graph, a
 * module, an optimizer) lets go.
 */
#ifndef MPIFLOW_TENSOR_H
#define MPIFLOW_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include "mpiflow/status.h"
#include "mpiflow/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_MAX_DIMS 8

/* MF_DEV_META: tensors with shapes and no bytes, whose kernels only
 * count their cost (mpiflow/graph.h) */
typedef enum mf_device_type { MF_DEV_CPU = 0, MF_DEV_CUDA, MF_DEV_META } mf_device_type;

typedef struct mf_tensor mf_tensor;

/* Shape literal: mf_zeros(MF_F32, MF_DIMS(2, 3)) passes ndim and shape. */
#define MF_DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* ---- creation: each returns a new reference, or NULL (mf_last_error) */
MF_API mf_tensor *mf_empty(mf_dtype dt, int ndim, const int64_t *shape);
MF_API mf_tensor *mf_zeros(mf_dtype dt, int ndim, const int64_t *shape);
MF_API mf_tensor *mf_ones(mf_dtype dt, int ndim, const int64_t *shape);
MF_API mf_tensor *mf_full(mf_dtype dt, int ndim, const int64_t *shape, double value);
/* Copies count = numel(shape) elements of type dt from data. */
MF_API mf_tensor *mf_from_data(mf_dtype dt, int ndim, const int64_t *shape, const void *data);
MF_API mf_tensor *mf_scalar(mf_dtype dt, double value);      /* 0-dim */
MF_API mf_tensor *mf_arange(mf_dtype dt, int64_t n);          /* 0..n-1 */
MF_API mf_tensor *mf_empty_like(const mf_tensor *t);
MF_API mf_tensor *mf_zeros_like(const mf_tensor *t);
/* Random tensors from the global Philox generator (mf_manual_seed).
 * Element i depends only on (seed, draw number, i). */
MF_API mf_tensor *mf_rand(mf_dtype dt, int ndim, const int64_t *shape);   /* U[0,1) */
MF_API mf_tensor *mf_randn(mf_dtype dt, int ndim, const int64_t *shape);  /* N(0,1) */

/* ---- references */
MF_API mf_tensor *mf_tensor_retain(mf_tensor *t);   /* returns t */
/* Drops the caller's reference; NULL is a no-op. */
MF_API void mf_tensor_destroy(mf_tensor *t);

/* ---- metadata */
MF_API mf_dtype mf_tensor_dtype(const mf_tensor *t);
MF_API int mf_tensor_ndim(const mf_tensor *t);
MF_API const int64_t *mf_tensor_shape(const mf_tensor *t);
MF_API const int64_t *mf_tensor_strides(const mf_tensor *t);   /* in elements */
/* Size of dimension d; negative d counts from the end. */
MF_API int64_t mf_tensor_dim(const mf_tensor *t, int d);
MF_API int64_t mf_tensor_numel(const mf_tensor *t);
MF_API size_t mf_tensor_nbytes(const mf_tensor *t);
MF_API bool mf_tensor_is_contiguous(const mf_tensor *t);
MF_API bool mf_tensor_shares_storage(const mf_tensor *a, const mf_tensor *b);
MF_API mf_device_type mf_tensor_device(const mf_tensor *t);
/* Writes "[32,784]" into buf (always terminated); returns buf. */
MF_API char *mf_tensor_shape_str(const mf_tensor *t, char *buf, size_t size);
MF_API mf_status mf_tensor_set_name(mf_tensor *t, const char *name);
MF_API const char *mf_tensor_name(const mf_tensor *t);   /* "" if unnamed */

/* ---- devices. A tensor lives on one device; new tensors go to the
 * default device (the CPU unless changed), and an op's result to the
 * device of its inputs, which must all be on one device. CUDA needs a
 * build with the CUDA backend and a GPU; each rank takes the GPU of its
 * local rank among the visible ones (CUDA_VISIBLE_DEVICES, Slurm's
 * --gpus-per-task binding). */
MF_API const char *mf_device_name(mf_device_type d);   /* "cpu", "cuda" */
MF_API mf_status mf_device_parse(const char *s, mf_device_type *d);
/* GPUs visible to this process (0 without the backend or a GPU). */
MF_API int mf_cuda_device_count(void);
/* Starts CUDA on this rank's GPU if not yet done; false if unavailable
 * (mf_device_describe says why). */
MF_API bool mf_cuda_available(void);
/* "cuda: NVIDIA H200 #0 of 8, 139.8 GiB, CUDA-aware MPI: no" */
MF_API const char *mf_device_describe(mf_device_type d, char *buf, size_t size);
/* Fails, changing nothing, if the device is unavailable. */
MF_API mf_status mf_set_default_device(mf_device_type d);
MF_API mf_device_type mf_default_device(void);
/* Waits until every kernel queued on this rank's device has finished
 * (for timing; copies to the host wait by themselves). */
MF_API mf_status mf_synchronize(void);
/* t on device d: t itself (a new reference) if already there, else a
 * copy. Differentiable: the gradient goes back to t's device. */
MF_API mf_tensor *mf_to_device(mf_tensor *t, mf_device_type d);

/* ---- data */
/* Pointer to the first element (offset applied); follow the strides.
 * For a CUDA tensor this is device memory: read it with copy_out. */
MF_API void *mf_tensor_data(mf_tensor *t);
/* Copies the elements in row-major order into host memory dst as dtype
 * dt; count must equal numel. Works on every device. */
MF_API mf_status mf_tensor_copy_out(const mf_tensor *t, mf_dtype dt, void *dst, int64_t count);
/* Overwrites the elements (row-major) from src of dtype dt. */
MF_API mf_status mf_tensor_copy_in(mf_tensor *t, mf_dtype dt, const void *src, int64_t count);
/* The value of a one-element tensor; NAN and an error otherwise. */
MF_API double mf_tensor_item(const mf_tensor *t);
/* Element access by index (ndim entries); for tests and debugging. */
MF_API double mf_tensor_get(const mf_tensor *t, const int64_t *index);
MF_API mf_status mf_tensor_set(mf_tensor *t, const int64_t *index, double v);
/* Prints shape, dtype and (up to max_elems) values. */
MF_API void mf_tensor_print(const mf_tensor *t, FILE *f, int max_elems);

/* ---- autograd attributes */
/* Only leaves (tensors not produced by a recorded op) of a float dtype
 * may change requires_grad. */
MF_API mf_status mf_tensor_set_requires_grad(mf_tensor *t, bool on);
MF_API bool mf_tensor_requires_grad(const mf_tensor *t);
MF_API bool mf_tensor_is_leaf(const mf_tensor *t);
/* The accumulated gradient (borrowed; NULL if none yet). */
MF_API mf_tensor *mf_tensor_grad(const mf_tensor *t);
/* Replaces the gradient (takes a new reference; NULL clears it). */
MF_API mf_status mf_tensor_set_grad(mf_tensor *t, mf_tensor *grad);
/* A new tensor sharing storage, cut from the graph. */
MF_API mf_tensor *mf_tensor_detach(mf_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
