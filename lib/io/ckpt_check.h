/*
 * lib/io/ckpt_check.h - the checks a checkpoint passes before anything
 * is read from it, shared by mf_ckpt_load (ckpt_load.c) and the
 * one-process reader behind mpiflow-ckpt verify (ckpt_file.c), so that
 * what verify rejects never loads (doc/checkpoints.md).
 *
 * Every attribute of the format is required, of its type and in range;
 * each failure is MF_ERR_FORMAT with a message naming the file and the
 * field.
 */
#ifndef MF_IO_CKPT_CHECK_H
#define MF_IO_CKPT_CHECK_H

#include "lib/io/h5util.h"
#include "mpiflow/status.h"

#define MFI_CKPT_FORMAT "mpiflow-checkpoint"
#define MFI_CKPT_VERSION 1

enum { MFI_CKPT_HYPER = 5 };

/* Everything a checkpoint says besides its tensors. */
typedef struct mfi_ckpt_header {
    int64_t step, epoch, world_size, seed, rng_draws;   /* the root's */
    char created[32];
    bool checksums;     /* every tensor has one (checksums="mix64", or absent: older files) */
    int64_t data_epoch, cursor;                         /* /data's */
    bool has_optim;     /* /optim: */
    char optim_type[32];
    int64_t optim_step;
    int nhyper;
    double hyper[MFI_CKPT_HYPER];   /* in mfi_ckpt_hyper_names' order */
    bool has_digest;    /* the root's header_digest (files before it have none) */
    uint64_t digest;
} mfi_ckpt_header;

/* The hyper-parameters /optim holds for an optimizer type, NULL-ended;
 * NULL for a type mpiflow does not write. */
const char *const *mfi_ckpt_hyper_names(const char *type);
/* The digest of every field above but has_digest and digest (FNV-1a over
 * their text): stored as the root's header_digest, so that a damaged
 * step or cursor is found like a damaged tensor. */
uint64_t mfi_ckpt_header_digest(const mfi_ckpt_header *h);
/* Reads and checks the root, /data and (when present) /optim: every
 * attribute present, of its type and in range (optimizer type one
 * mpiflow writes, hyper-parameters finite), and the digest. */
mf_status mfi_ckpt_check_header(hid_t file, const char *path, mfi_ckpt_header *h);
/* Dataset name (ndim dimensions) of the file: sbp and placement parse,
 * fit each other, the tensor and the world of h; a checksum attribute
 * unless h says the file has none (*has_sum, *sum). */
mf_status mfi_ckpt_check_dataset(hid_t ds, const char *path, const char *name, int ndim, const mfi_ckpt_header *h,
                                 bool *has_sum, uint64_t *sum);

#endif
