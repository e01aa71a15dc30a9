/*
 * mpiflow/ckpt.h - checkpoints in one parallel-HDF5 file (DESIGN.md
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
/* The same, keeping the last keep_last checkpoints: once the new file
 * is complete, PATH becomes PATH.1, PATH.1 becomes PATH.2, ... up to
 * PATH.<keep_last-1>, and the new file takes PATH. keep_last 1 is
 * mf_ckpt_save. */
MF_API mf_status mf_ckpt_save_ex(const char *path, mf_module *model, mf_optim *optim, const mf_train_state *state,
                                 int keep_last);
/* Reads them back into the model's tensors (and the optimizer's state),
 * whatever their placement and SBP now; optim and state may be NULL.
 * Collective; the model is left unchanged when any check fails. */
MF_API mf_status mf_ckpt_load(const char *path, mf_module *model, mf_optim *optim, mf_train_state *state);

#ifdef __cplusplus
}
#endif
#endif
