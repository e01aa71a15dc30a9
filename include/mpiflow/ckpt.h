/*
 * mpiflow/ckpt.h - checkpoints in one parallel-HDF5 file (doc/design.md
 * section 7), readable by h5dump and h5py.
 *
 *   /                       attrs format="mpiflow-checkpoint", version=1, step, epoch,
 *                           world_size, seed, created
 *   /model/<state_dict key> the global tensor; attrs sbp, placement, checksum
 *   /optim/<param>/<state>  e.g. /optim/hidden.weight/exp_avg, laid out as the parameter
 *   /optim                  attrs type, lr, step, and the optimizer's hyper-parameters
 *   /data                   attrs epoch, cursor
 *
 * Saving is collective: every rank writes only the blocks it owns (one
 * writer per unique piece; P tensors are summed first) into PATH.tmp,
 * which is renamed to PATH once every rank has closed it, so a failed
 * save never damages an existing checkpoint. Loading is collective too:
 * each rank reads the block that its *current* placement and SBP need,
 * so a checkpoint written on 4 ranks loads on 1 or 3, and across
 * parallel modes. Every failure (a missing file, a tensor that does not
 * fit, a checksum mismatch) is agreed on: every rank returns the same
 * error naming the file and the tensor.
 */
#ifndef MPIFLOW_CKPT_H
#define MPIFLOW_CKPT_H

#include "mpiflow/nn.h"
#include "mpiflow/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_train_state {
    int64_t step;       /* optimizer steps done */
    int64_t epoch;      /* the data loader's epoch */
    int64_t cursor;     /* samples consumed in that epoch */
    uint64_t seed;
} mf_train_state;

/* Writes the model's state_dict (parameters and buffers), the
 * optimizer's state and hyper-parameters, and the training state; optim
 * and state may be NULL. Collective. */
MF_API mf_status mf_ckpt_save(const char *path, mf_module *model, mf_optim *optim, const mf_train_state *state);
typedef struct mf_ckpt_opts {
    int keep_last;      /* 0 or 1: only PATH. K > 1: once the new file is
                         * complete, PATH becomes PATH.1, PATH.1 PATH.2,
                         * ... up to PATH.<K-1>, and the new file PATH */
    bool fletcher32;    /* chunks of one piece each under HDF5's Fletcher32
                         * filter, which every HDF5 reader checks; slower
                         * to write (doc/performance.md). The checksum
                         * attributes are written either way. */
    bool no_checksums;  /* no checksum attribute per tensor (the root says
                         * checksums="none"; loading and verify then check
                         * structure only). Saves one pass over the data. */
} mf_ckpt_opts;
/* mf_ckpt_save with options; opts may be NULL. */
MF_API mf_status mf_ckpt_save_ex(const char *path, mf_module *model, mf_optim *optim, const mf_train_state *state,
                                 const mf_ckpt_opts *opts);
/* Reads them back into the model's tensors (and the optimizer's state),
 * whatever their placement and SBP now; optim and state may be NULL.
 * Collective; the model is left unchanged when any check fails. */
MF_API mf_status mf_ckpt_load(const char *path, mf_module *model, mf_optim *optim, mf_train_state *state);

/* ---- Reading a checkpoint on one process, without MPI: what
 * mpiflow-ckpt (list, verify, diff, stats) is built on. */
typedef struct mf_ckpt_file mf_ckpt_file;
typedef struct mf_ckpt_entry {
    char name[256];         /* the dataset's path without the leading '/':
                             * "model/hidden.weight", "optim/hidden.weight/momentum" */
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];   /* the global shape */
    char sbp[96];           /* as saved ("S(0)", "B,S(1)"); "" when absent */
    char placement[256];    /* as saved ("0-3 mesh 2x2"); "" when absent */
    bool has_checksum;
    uint64_t checksum;      /* the stored checksum attribute */
    bool valid;             /* its attributes pass mf_ckpt_load's checks (sbp and
                             * placement readable and fitting, checksum present) */
    char problem[512];      /* why not, when !valid */
} mf_ckpt_entry;

/* Opens PATH read-only. NULL with an error naming the file when it is
 * missing, not HDF5, or not an mpiflow checkpoint of a version we read. */
MF_API mf_ckpt_file *mf_ckpt_open(const char *path);
MF_API void mf_ckpt_close(mf_ckpt_file *f);
/* The header's checks, the ones mf_ckpt_load makes: every root, /data
 * and /optim attribute present, of its type and in range. MF_OK, or
 * MF_ERR_FORMAT with a message naming the field. */
MF_API mf_status mf_ckpt_check(const mf_ckpt_file *f);
/* the datasets, in the order they were written (the state_dict's) */
MF_API int mf_ckpt_count(const mf_ckpt_file *f);
MF_API const mf_ckpt_entry *mf_ckpt_entry_at(const mf_ckpt_file *f, int i);
MF_API int mf_ckpt_find(const mf_ckpt_file *f, const char *name);   /* index, or -1 */
/* An object's attributes as "name=value name=value ..." ("/", "/optim",
 * "/data", "/model/hidden.weight"); "" when the object does not exist. */
MF_API mf_status mf_ckpt_attrs(const mf_ckpt_file *f, const char *object, char *buf, size_t size);
MF_API bool mf_ckpt_attr_i64(const mf_ckpt_file *f, const char *object, const char *name, int64_t *v);
/* Rows [row0, row0 + nrows) of entry i along axis 0 (all of a scalar),
 * converted to double into out. */
MF_API mf_status mf_ckpt_read_f64(const mf_ckpt_file *f, int i, int64_t row0, int64_t nrows, double *out);
/* Reads entry i in full and recomputes its checksum into *computed;
 * MF_ERR_FORMAT (with a message) when it differs from the stored one,
 * the data cannot be read or the entry is not valid. */
MF_API mf_status mf_ckpt_verify_entry(const mf_ckpt_file *f, int i, uint64_t *computed);

/* ---- Hugging Face's safetensors files (doc/gpt.md): an 8-byte header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the data. mf_safetensors_open reads a whole file and checks the
 * header against it (F32, F64, I32 and I64 tensors; little-endian hosts);
 * NULL with MF_ERR_FORMAT naming the file and the fault otherwise. */
typedef struct mf_safetensors mf_safetensors;
typedef struct mf_st_tensor {
    char name[256];
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
    const void *data;       /* inside the file's buffer, valid until close */
} mf_st_tensor;
MF_API mf_safetensors *mf_safetensors_open(const char *path);
MF_API void mf_safetensors_close(mf_safetensors *s);
MF_API int mf_safetensors_count(const mf_safetensors *s);
MF_API const mf_st_tensor *mf_safetensors_at(const mf_safetensors *s, int i);   /* in header order */
MF_API int mf_safetensors_find(const mf_safetensors *s, const char *name);     /* index, or -1 */
/* Writes n local tensors under their names (data 8-byte aligned). */
MF_API mf_status mf_safetensors_write(const char *path, int n, const char *const *names, mf_tensor *const *tensors);

#ifdef __cplusplus
}
#endif
#endif
