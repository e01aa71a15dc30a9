/*
 * lib/internal.h - cross-file helpers of the core (not installed).
 *
 * Defines the tensor and storage structs, error macros, the kernel-call
 * macro with profiling, and the op/autograd framework that every file in
 * lib/op/ plugs into.
 */
#ifndef MPIFLOW_LIB_INTERNAL_H
#define MPIFLOW_LIB_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"
#include "backends/backend.h"

#include "base/error.h"

/* ---------------------------------------------------------------- memory */
#include "base/alloc.h"

/* A storage whose bytes can be made again on demand (a parameter
 * gathered for one use, lib/global/regather.c): what backward saves of
 * it keeps the view without the bytes, and rebuild() gives them back
 * when backward asks. Reference counted; release frees it at zero. */
typedef struct mfi_rebuild {
    int refcount;
    mf_status (*rebuild)(struct mfi_rebuild *r, mf_tensor *bare);   /* bare gets fresh storage */
    void (*free)(struct mfi_rebuild *r);
} mfi_rebuild;

typedef struct mfi_storage {
    void *data;
    size_t nbytes;
    int refcount;
    uint32_t version;        /* bumped by every in-place write */
    mf_device_type device;
    mfi_rebuild *rebuild;    /* bytes made again on demand, or NULL */
    int64_t id;              /* a serial number: the step graph's value id */
    int use;                 /* mf_memory_use: what the bytes are for */
} mfi_storage;

struct mfi_node;
struct mfi_global;

struct mf_tensor {
    int refcount;
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
    int64_t stride[MF_MAX_DIMS];   /* elements */
    int64_t offset;                /* elements */
    mfi_storage *storage;
    bool requires_grad;
    mf_tensor *grad;
    struct mfi_node *grad_fn;      /* producer; NULL for leaves */
    char *name;
    struct mfi_global *global;     /* placement and SBP: the global-tensor layer */
};

/* ------------------------------------------- hooks into lib/global/ */
/* What the local-tensor API does with a global tensor (t->global set). */
void mfi_global_free(struct mfi_global *g);
void mfi_global_teardown(void);   /* mf_finalize: drops the placements */
double mfi_global_item(const mf_tensor *t);
mf_status mfi_global_copy_out(const mf_tensor *t, mf_dtype dt, void *dst, int64_t count);
void mfi_global_print(const mf_tensor *t, FILE *f, int max_elems);
mf_tensor *mfi_global_grad(mf_tensor *t);
/* local's gradient changed (a backward contribution, mf_tensor_set_grad)
 * or local is freed: its gradient no longer has its global tensor's own
 * SBP (lib/global/grad_state.c). */
void mfi_global_grad_changed(const mf_tensor *local);
mf_status mfi_global_set_grad(mf_tensor *t, mf_tensor *grad);
mf_status mfi_global_backward(mf_tensor *out, mf_tensor *grad, bool retain, bool sync);
mf_tensor *mfi_global_detach(mf_tensor *t);
bool mfi_global_is_leaf(const mf_tensor *t);
/* Drops the recorded trace spans (mf_finalize). */
void mfi_trace_shutdown(void);
/* A second grad-ready hook, for the gradient buckets (autograd.c). */
void mfi_autograd_set_sync_hook(mf_grad_ready_fn fn, void *user);
/* mf_backward_ex; sync false: the sync hook is not told of the final
 * gradients (accumulation over micro-batches: DDP's no_sync). */
mf_status mfi_backward(mf_tensor *out, mf_tensor *grad, bool retain_graph, bool sync);
/* t's local piece if global (NULL outside its placement), else t. */
mf_tensor *mfi_local_piece(const mf_tensor *t);
typedef enum mfi_inplace { MFI_IP_FILL, MFI_IP_COPY, MFI_IP_ADD, MFI_IP_SCALE, MFI_IP_KEYED } mfi_inplace;
/* fill/copy/add/scale on a global destination (b: the source or NULL) */
mf_status mfi_global_inplace(mfi_inplace kind, mf_tensor *a, mf_tensor *b, double v);
mf_status mfi_global_set_requires_grad(mf_tensor *t, bool on);

/* A new contiguous tensor with uninitialised values. */
mf_tensor *mfi_tensor_new(mf_dtype dt, int ndim, const int64_t *shape);
/* A view on base's storage. */
mf_tensor *mfi_tensor_view(const mf_tensor *base, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset);
/* Same view, cut from the graph (no grad_fn, no requires_grad). */
mf_tensor *mfi_tensor_alias(const mf_tensor *t);
/* g has become a parameter's gradient: its bytes count as gradients in
 * the allocator's breakdown (when g owns them whole). */
void mfi_mark_grad(mf_tensor *g);
void mfi_contig_strides(int ndim, const int64_t *shape, int64_t *stride);
int64_t mfi_numel(int ndim, const int64_t *shape);
char *mfi_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
mfi_view mfi_view_of(const mf_tensor *t);
/* A view descriptor with t's data but another shape/stride (for kernels
 * that see a tensor as [rows, cols] etc.). */
mfi_view mfi_view_as(const mf_tensor *t, int ndim, const int64_t *shape);
static inline void mfi_bump_version(mf_tensor *t) { if (t->storage) t->storage->version++; }
/* Normalises a possibly negative axis; fails naming op. */
mf_status mfi_norm_axis(const char *op, int *axis, int ndim);
const mfi_backend *mfi_backend_of(const mf_tensor *t);

/* ---------------------------------------------------------------- devices */
/* The device new tensors go to: inside an op, its inputs' device. */
mf_device_type mfi_current_device(void);
/* Makes dev current; returns what mfi_device_pop restores. */
int mfi_device_push(mf_device_type dev);
void mfi_device_pop(int prev);
/* A new contiguous tensor on dev. */
mf_tensor *mfi_tensor_new_on(mf_device_type dev, mf_dtype dt, int ndim, const int64_t *shape);
/* Blocking copies of raw memory between a device and the host. */
mf_status mfi_device_download(mf_device_type dev, void *host, const void *src, size_t nbytes);
mf_status mfi_device_upload(mf_device_type dev, void *dst, const void *host, size_t nbytes);
/* dst <- src (same shape), casting, across devices. */
mf_status mfi_copy_across(mf_tensor *dst, const mf_tensor *src);
/* t's values on dev, outside the graph: t itself (new reference) when
 * already there, else a copy. */
mf_tensor *mfi_on_device(mf_tensor *t, mf_device_type dev);
/* Copies for MPI (doc/design.md section 6): device memory to and from host memory on
 * the communication stream, overlapping the compute stream's queued
 * work; plain memcpy on the CPU. */
mf_status mfi_stage_out(mf_device_type dev, void *host, const void *src, size_t nbytes);
mf_status mfi_stage_in(mf_device_type dev, void *dst, const void *host, size_t nbytes);
/* count elements of dt from src to dst, both in dev's memory (queued on
 * a device). */
mf_status mfi_device_memcpy(mf_device_type dev, mf_dtype dt, void *dst, const void *src, int64_t count);
/* A host buffer for staging: pinned once CUDA runs, else from the host
 * allocator as communication memory (MF_MEM_COMM); freed with its size. */
void *mfi_host_buffer(size_t nbytes, bool *pinned);
void mfi_host_buffer_free(void *p, size_t nbytes, bool pinned);
/* mf_finalize: releases the device and its cached memory. */
void mfi_device_shutdown(void);

/* --------------------------------------------------------------- autocast */
/* Whether an op on dt operands runs its GEMMs in bf16 now. */
bool mfi_autocast_bf16(mf_dtype dt);
/* Sets autocast for a backward to its forward's; mfi_autocast_pop restores. */
int mfi_autocast_push(bool bf16);
void mfi_autocast_pop(int prev);
/* x rounded to bfloat16 values (contiguous, x's dtype and device); never recorded. */
mf_tensor *mfi_bf16_copy(mf_tensor *x);
/* An operand of a GEMM or convolution under autocast: x itself (made
 * contiguous if asked) where the backend rounds operands in its kernels
 * (mfi_backend.bf16_in_kernel), its rounded copy elsewhere. */
mf_tensor *mfi_bf16_operand(mf_tensor *x, bool contiguous);
/* Under autocast on a backend that multiplies bfloat16 images
 * (mfi_backend.bf16_images): contiguous t converted to bfloat16, held as
 * the bytes of a new tensor (for mfi_gemm.a16 and the like); NULL when
 * there is none to make, and the kernels convert t themselves. The
 * conversion is timed as class cls. */
mf_tensor *mfi_bf16_image(mf_tensor *t, mf_prof_class cls);
/* The same for operand `which` (MFI_CONV_*) of convolution g: in the
 * backend's own layout where it has one (*own set: mfi_backend.conv_image),
 * else plain. Timed as MF_PROF_CONV. */
mf_tensor *mfi_conv_image(mf_tensor *t, const mfi_conv2d *g, int which, bool *own);

/* ------------------------------------------------------------- profiling */
extern bool mfi_prof_on;
void mfi_prof_add(mf_prof_class c, double seconds);

/* What each kernel call costs (lib/graph/cost.c): one function per
 * kernel of the set, with its arguments, that reports the call's
 * floating-point operations and bytes to mfi_cost_note under the class
 * in mfi_cost_cls. The meta device's kernels are these; MFI_KERNEL calls
 * them after a real kernel when profiling or recording a graph. */
typedef struct mfi_cost_fns {
#define MFI_COST_FN(name, args) mf_status(*name) args;
    MFI_KERNELS(MFI_COST_FN)
#undef MFI_COST_FN
} mfi_cost_fns;
extern const mfi_cost_fns mfi_cost_table;
extern _Thread_local mf_prof_class mfi_cost_cls;
/* Adds one call's cost to the profiler and to the open graph. */
void mfi_cost_note(int kernel, mf_prof_class cls, double flops, double bytes);
/* Output positions times kernel taps along one dimension that land on
 * the input (a tap on the zero padding multiplies nothing). */
double mfi_cost_conv_taps(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dil);
/* The meta device's backend (lib/graph/meta.c), made on first use. */
const mfi_backend *mfi_meta_backend(void);
/* The step graph open on this thread (lib/graph/graph.c), or NULL. */
extern _Thread_local struct mf_graph *mfi_graph_rec;
void mfi_graph_kernel(int kernel, mf_prof_class cls, double flops, double bytes);

/* The kernels of the table, numbered in MFI_KERNELS order, and the calls
 * of each per device type (mf_kernel_calls): the parity tests read them
 * to prove that a case ran the kernel it checks, on the device it names. */
#define MFI_KERNEL_ENUM(name, args) MFI_K_##name,
enum { MFI_KERNELS(MFI_KERNEL_ENUM) MFI_K_COUNT };
#undef MFI_KERNEL_ENUM
#define MFI_DEV_COUNT 3   /* cpu, cuda, meta */
extern _Atomic int64_t mfi_kernel_calls[MFI_DEV_COUNT][MFI_K_COUNT];

/* Calls a backend hook (a kernel, or one of the table's other calls):
 * fails if the backend lacks it, times it if profiling. */
#define MFI_HOOK(st, cls, be, kern, ...)                                                 \
    do {                                                                                 \
        if (!(be)->kern) {                                                               \
            (st) = mfi_error(MF_ERR_BACKEND, "backend '%s' has no kernel " #kern,         \
                             (be)->name);                                                \
            break;                                                                       \
        }                                                                                \
        double mfi_t0_ = mfi_prof_on ? mf_time() : 0.0;                                  \
        (st) = (be)->kern(__VA_ARGS__);                                                  \
        if (mfi_prof_on) mfi_prof_add((cls), mf_time() - mfi_t0_);                       \
    } while (0)

/* Calls kernel kern of MFI_KERNELS as MFI_HOOK does, and counts the call. */
#define MFI_KERNEL(st, cls, be, kern, ...)                                               \
    do {                                                                                 \
        atomic_fetch_add_explicit(&mfi_kernel_calls[(be)->device][MFI_K_##kern], 1,      \
                                  memory_order_relaxed);                                 \
        mfi_cost_cls = (cls);                                                            \
        MFI_HOOK(st, cls, be, kern, __VA_ARGS__);                                        \
        if ((mfi_prof_on || mfi_graph_rec) && (be)->device != MF_DEV_META && (st) == MF_OK) \
            (void)mfi_cost_table.kern(__VA_ARGS__);                                      \
    } while (0)

/* --------------------------------------------------------------- random */
/* 64-bit key of a string (FNV-1a), for Philox keys from names. */
uint64_t mfi_hash_str(const char *s);
/* The key of the next draw (rand/randn/dropout) in the current scope
 * (lib/rng.c). */
uint64_t mfi_rng_next_key(void);
/* The key of draw n (1, 2, ...) in scope `scope` (0: the top level). */
uint64_t mfi_rng_key(uint64_t scope, uint64_t n);
typedef struct mfi_rng_scope {
    uint64_t key, n;    /* the scope's key and the draws taken in it */
    int depth;          /* 0: the top level, counted by mf_rng_draws */
} mfi_rng_scope;
/* Makes `key` the current scope with n draws taken; returns what to
 * give mfi_rng_leave. mf_module_forward runs each forward in its own
 * scope: mfi_rng_enter(mfi_rng_next_key(), 0). */
mfi_rng_scope mfi_rng_enter(uint64_t key, uint64_t n);
void mfi_rng_leave(mfi_rng_scope saved);
/* Which samples of the step's batch the tensors now computed hold:
 * global row g of a batch of nrows rows is sample
 *   base + (g / chunk) * stride + g % chunk   (chunk > 0), or base + g.
 * nrows 0 (the default): the rows are the batch itself. */
typedef struct mfi_rng_rows { int64_t nrows, base, chunk, stride; } mfi_rng_rows;
void mfi_rng_set_rows(const mfi_rng_rows *r);   /* NULL: the default */
mfi_rng_rows mfi_rng_get_rows(void);
/* Everything the next draws depend on, to draw them again (recompute). */
typedef struct mfi_rng_state {
    mfi_rng_scope cur;
    uint64_t top;
    mfi_rng_rows rows;
} mfi_rng_state;
mfi_rng_state mfi_rng_save(void);
void mfi_rng_restore(const mfi_rng_state *s);
/* The element index that picks the random value of global element e of
 * a tensor of numel elements whose first dimension runs over the rows:
 * sample * (numel / nrows) + e's place within its sample. */
int64_t mfi_rng_sample_index(const mfi_rng_rows *r, int64_t numel, int64_t e);

/* ------------------------------------------------------------ datasets */
/* ---- a plain or gzip file read to its exact end (io/zfile.c) */
typedef struct mfi_zfile mfi_zfile;
/* NULL with an error naming the file when it cannot be opened */
mfi_zfile *mfi_zopen(const char *path);
/* Up to n bytes of (uncompressed) data: fewer only at the end; -1 with
 * an error naming the file when it is damaged or cannot be read. */
int64_t mfi_zread(mfi_zfile *f, void *buf, size_t n);
/* MF_OK when the data ends here and, for gzip, the stream ended with a
 * matching CRC-32 and length; MF_ERR_FORMAT naming the file otherwise. */
mf_status mfi_zend(mfi_zfile *f);
void mfi_zclose(mfi_zfile *f);

const uint8_t *mfi_dataset_pixels(const mf_dataset *ds);   /* [n, c, h, w] */
const int64_t *mfi_dataset_labels(const mf_dataset *ds);   /* [n] */
const uint16_t *mfi_dataset_tokens(const mf_dataset *ds);  /* token datasets: the stream, else NULL */

/* ------------------------------------------------------- op framework */
typedef struct mfi_meta {
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
} mfi_meta;

#define MFI_MAX_SAVED 6

typedef struct mf_custom_ctx mfi_call;
struct mfi_op;

/* One application of an op: its inputs, attributes and saved tensors.
 * It becomes the autograd node's payload when the op is recorded. */
struct mf_custom_ctx {
    const struct mfi_op *op;
    int n_in;
    mf_tensor **in;           /* forward only (borrowed) */
    mfi_meta *in_meta;        /* n_in */
    bool *needs_grad;         /* n_in */
    bool recording;           /* forward: will backward run? */
    void *attrs;              /* op-specific struct, copied */
    mf_tensor *saved[MFI_MAX_SAVED];
    uint32_t saved_version[MFI_MAX_SAVED];
    mfi_rebuild *saved_rebuild[MFI_MAX_SAVED];   /* saved without storage: rebuilt on use */
    int n_saved;
    mfi_meta out_meta;
    /* global tensors, for the sbp and localize functions: the placement
     * and the nd-SBP chosen for each input (NULL on local tensors) */
    const struct mf_placement *placement;
    const mf_nd_sbp *in_sbp;
    int graph_op;             /* its entry in the step graph being recorded, or 0 */
};

enum {
    MFI_OP_OWN_OUTPUT = 1,    /* forward creates *out (views, custom ops) */
    MFI_OP_NO_GRAD = 2        /* never recorded (comparisons, argmax) */
};
/* Input i is written in place (batch norm's running statistics): on
 * global tensors it is never boxed, so the write lands in the tensor. */
#define MFI_OP_WRITES(i) (1 << (8 + (i)))

/* A block of a global tensor: [start, start+count) per axis. */
typedef struct mfi_box {
    int64_t start[MF_MAX_DIMS];
    int64_t count[MF_MAX_DIMS];
} mfi_box;

/* One SBP signature of an op along one mesh dimension (doc/design.md section 4). */
#define MFI_SIG_MAX_IN 6
typedef struct mfi_sig {
    mf_sbp in[MFI_SIG_MAX_IN];
    mf_sbp out;
} mfi_sig;

typedef struct mfi_op {
    const char *name;
    int flags;
    /* Output dtype/shape from c->in_meta and attrs; validates. */
    mf_status (*infer)(mfi_call *c, mfi_meta *out);
    /* Computes the output: *out is preallocated unless MFI_OP_OWN_OUTPUT. */
    mf_status (*forward)(mfi_call *c, mf_tensor **out);
    /* gx[i] (new references) for inputs with needs_grad[i]; runs with
     * grad mode off and may use any mf_ op. */
    mf_status (*backward)(mfi_call *c, mf_tensor *gy, mf_tensor **gx);
    /* Global tensors: the signatures the op accepts for c's global metas
     * and attrs, best first, at most cap; all-B is added by the caller.
     * NULL: all-B only (every rank computes the whole op). */
    int (*sbp)(const mfi_call *c, mfi_sig *sigs, int cap);
    /* Global tensors: rewrites attrs that depend on the global shape for
     * this rank's piece; ob is the output block this rank computes. */
    void (*localize)(const mfi_call *c, void *attrs, const mfi_box *ob);
} mfi_op;

/* ---- signature helpers for the ops' sbp functions (lib/global/signature.c) */
static inline mf_sbp mfi_S(int a) { return (mf_sbp){MF_SBP_S, a}; }
static inline mf_sbp mfi_B(void) { return (mf_sbp){MF_SBP_B, 0}; }
static inline mf_sbp mfi_P(void) { return (mf_sbp){MF_SBP_P, 0}; }
/* Appends a signature of n inputs if there is room; returns the count. */
int mfi_sig_add(mfi_sig *sigs, int n, int cap, int n_in, const mf_sbp *in, mf_sbp out);
/* Elementwise with broadcasting: each output axis split, the inputs
 * split on the matching axis or B where they broadcast. partial: 1 all
 * inputs P -> P (add, sub); 2 one input P and the others B -> P (mul, and
 * the first input of div); 0 none. */
int mfi_sig_elementwise(const mfi_call *c, mfi_sig *sigs, int cap, int partial);
/* Output block -> the global index of its first element, for ops whose
 * random streams follow the global element index (valid for row blocks). */
int64_t mfi_box_first_index(const mfi_meta *gm, const mfi_box *b);

/* The step graph's hooks (lib/graph/graph.c), no-ops unless a graph is
 * being recorded on this thread: an op's application (its entry id, 0
 * for none; then its output and saved tensors), an autograd node's
 * backward (returns what to give _leave), a module's forward. */
int mfi_graph_op_begin(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs, size_t attrs_size);
void mfi_graph_op_end(int id, const mf_tensor *out, const mfi_call *c);
/* An op on global tensors is about to run its local op under this
 * signature (lib/global/apply.c): the next entry of op gets it. */
void mfi_graph_signature(const mfi_op *op, int n_in, const mf_nd_sbp *in, const mf_nd_sbp *out);
int mfi_graph_backward_enter(int id);
void mfi_graph_backward_leave(int prev);
void mfi_graph_module_enter(const mf_module *m);
/* Clipping or an optimizer's step begins: what follows is the update. */
void mfi_graph_update_begin(void);
void mfi_graph_module_leave(void);

/* Runs op on inputs (borrowed) and records it if needed. attrs (of
 * attrs_size bytes) is copied. Returns a new reference or NULL. */
mf_tensor *mfi_apply(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs,
                     size_t attrs_size);
/* The same for ops with a global input (lib/global/apply.c). */
mf_tensor *mfi_global_apply(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs,
                            size_t attrs_size);
/* A one-element tensor of dtype dt on t's device. */
mf_tensor *mfi_scalar_on(const mf_tensor *t, mf_dtype dt, double v);
/* Rows split over ranks (embedding.c): the indices ix moved to this
 * rank's rows, ix - first where that falls in [0, rows) and 0 elsewhere
 * (*safe), and *mask, 1 there and 0 elsewhere, in dtype dt with a
 * trailing axis of 1 to scale rows by. */
mf_status mfi_local_rows(mf_tensor *ix, int64_t first, int64_t rows, mf_dtype dt, mf_tensor **safe, mf_tensor **mask);
/* Whether a recompute's backward is running its function again now
 * (recompute.c): what that forward gathers lives only until the
 * backward right after it, so ZeRO-3 need not free and gather it again. */
bool mfi_recomputing(void);
/* A backward ends the order of use of the forward before it
 * (lib/nn/param_use.c): the next forward does not continue it. */
void mfi_module_use_cut(void);
/* A reference on r, and its release (freed at zero). */
void mfi_rebuild_retain(mfi_rebuild *r);
void mfi_rebuild_release(mfi_rebuild *r);
/* Whether t's bytes are made again on demand (its storage has a
 * rebuild): an op keeps no extra copy of such an input for backward. */
static inline bool mfi_rebuilds(const mf_tensor *t) { return t && t->storage && t->storage->rebuild; }
/* In forward: keeps t (as a detached alias) for backward. A view of a
 * storage that can be rebuilt is kept without its bytes, and rebuilt
 * when backward asks for it. */
mf_status mfi_save(mfi_call *c, mf_tensor *t);
/* In backward: saved tensor i (borrowed), or NULL with an error if it
 * was modified in place since. */
mf_tensor *mfi_saved(mfi_call *c, int i);
/* Sums g down to the shape of m (undoes broadcasting). New reference. */
mf_tensor *mfi_sum_to(mf_tensor *g, const mfi_meta *m);
void mfi_meta_of(const mf_tensor *t, mfi_meta *m);
bool mfi_meta_same_shape(const mfi_meta *a, const mfi_meta *b);

/* Fails with "<op>: <what> is NULL" keeping an earlier error as cause. */
mf_status mfi_check_input(const char *op, const char *what, const mf_tensor *t);

/* autograd internals */
/* Makes a node from the call (taking its arrays and saved tensors, and
 * copying attrs) and makes it out's grad_fn. */
mf_status mfi_node_attach(mfi_call *c, const void *attrs, size_t attrs_size, mf_tensor *out);
void mfi_node_release(struct mfi_node *n);
void mfi_call_free_saved(mfi_call *c);

/* t itself (new reference) if contiguous, else a contiguous copy; never
 * recorded. */
mf_tensor *mfi_contiguous_raw(mf_tensor *t);
/* View of t broadcast to out's shape (stride 0 on broadcast dims). */
mfi_view mfi_view_broadcast(const mf_tensor *t, const mfi_meta *out);
/* Shape of broadcasting a and b; fails naming op and both shapes. */
mf_status mfi_broadcast_shapes(const char *op, const mfi_meta *a, const mfi_meta *b, mfi_meta *out);
/* "[2,3]" of a meta. */
char *mfi_meta_str(const mfi_meta *m, char *buf, size_t size);

/* internal differentiable helpers used by several ops */
mf_tensor *mfi_unary(mfi_unop op, mf_tensor *x, double alpha);
mf_tensor *mfi_unary_grad(mfi_unop op, mf_tensor *gy, mf_tensor *x, mf_tensor *y, double alpha);
mf_tensor *mfi_binary(mfi_binop op, mf_tensor *a, mf_tensor *b);
/* naxes 0 reduces over every axis. */
mf_tensor *mfi_reduce(mfi_redop op, mf_tensor *x, int naxes, const int *axes, bool keepdim);

#endif
