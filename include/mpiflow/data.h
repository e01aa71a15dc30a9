/*
 * mpiflow/data.h - datasets and the batch loader.
 *
 * The loader reads samples through a global permutation fixed by
 * (seed, epoch) (doc/design.md section 5), so every rank count sees the same
 * global batches in the same order.
 */
#ifndef MPIFLOW_DATA_H
#define MPIFLOW_DATA_H

#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An in-memory classification dataset: n samples of shape [C, H, W] as
 * bytes (0..255) or floats, and an integer label per sample. */
typedef struct mf_dataset mf_dataset;

/* Reads an IDX pair (gzip or plain), e.g. train-images-idx3-ubyte.gz and
 * train-labels-idx1-ubyte.gz. */
MF_API mf_dataset *mf_dataset_idx_load(const char *images_path, const char *labels_path);
/* Fashion-MNIST from dir (default /usr/share/datasets/fashion-mnist when
 * dir is NULL); train or test split. */
MF_API mf_dataset *mf_dataset_fashion_mnist(const char *dir, bool train);
/* n samples of [c, h, w] in `classes` classes: a random template per
 * class plus noise, all from Philox. The templates depend on seed only,
 * so the train and test splits of one seed share them; the samples
 * depend on (seed, train). Learnable. */
MF_API mf_dataset *mf_dataset_synthetic(int64_t n, int c, int h, int w, int classes, uint64_t seed, bool train);
/* Language-model datasets: one token stream cut into windows of
 * seq_len + 1 tokens (window k starts at token k * seq_len; the loader's
 * x is its first seq_len tokens, y its last seq_len, both [B, seq_len]
 * i64). mf_dataset_classes gives the vocabulary size. */
/* Any text as bytes (vocabulary 256): a file, or a directory's regular
 * files in name order (the fortunes package's /usr/share/games/fortunes);
 * the bytes in [begin, end) of the whole, as fractions (0, 0.9: training;
 * 0.9, 1: validation). */
MF_API mf_dataset *mf_dataset_text(const char *path, double begin, double end, int seq_len);
/* Token files matching a glob pattern, in name order: llm.c's shards
 * (header of 256 int32: magic 20240520, version 1, token count; then
 * uint16 tokens) or nanoGPT's raw uint16 .bin. Files with "val" in their
 * name are the validation split (val true), the others training; when
 * all or none have it, the last tenth of the tokens is the validation
 * split. MF_ERR_FORMAT for a bad header, a truncated file or a token
 * >= vocab_size. */
MF_API mf_dataset *mf_dataset_tokens(const char *pattern, bool val, int seq_len, int vocab_size);
MF_API bool mf_dataset_is_tokens(const mf_dataset *ds);
MF_API int mf_dataset_seq_len(const mf_dataset *ds);         /* 0 for images */
MF_API int64_t mf_dataset_num_tokens(const mf_dataset *ds);  /* 0 for images */
MF_API void mf_dataset_destroy(mf_dataset *ds);
MF_API int64_t mf_dataset_size(const mf_dataset *ds);
/* The class count: the largest label + 1 for an IDX pair, 10 for
 * Fashion-MNIST, as given for synthetic data. */
MF_API int mf_dataset_classes(const mf_dataset *ds);
/* Fixes the class count; MF_ERR_FORMAT naming the labels file and the
 * sample when a label is outside [0, classes). mf_dataset_fashion_mnist
 * does it with 10. */
MF_API mf_status mf_dataset_set_classes(mf_dataset *ds, int classes);
/* The images file the dataset came from ("synthetic data" otherwise). */
MF_API const char *mf_dataset_source(const mf_dataset *ds);
/* Sample shape [C, H, W]. */
MF_API void mf_dataset_sample_shape(const mf_dataset *ds, int64_t shape[3]);
/* Mean and std of the pixel values scaled to [0,1], over all samples. */
MF_API void mf_dataset_stats(const mf_dataset *ds, double *mean, double *std);

/* Low-level IDX reader: returns the dims and a malloc'd byte buffer. */
typedef struct mf_idx {
    int type;             /* 0x08 unsigned byte, 0x09 signed byte, ... */
    int ndim;
    int64_t dims[MF_MAX_DIMS];
    void *data;           /* free() it */
    size_t nbytes;
} mf_idx;
MF_API mf_status mf_idx_read(const char *path, mf_idx *out);

typedef struct mf_loader_opts {
    int64_t batch_size;
    uint64_t seed;
    bool shuffle;        /* true: permutation by (seed, epoch) */
    bool drop_last;      /* true: skip the last partial batch */
    double mean, std;    /* x = (pixel/255 - mean) / std */
    bool prefetch;       /* assemble the next batch in a helper thread */
    /* shard_count > 1: make only piece shard_index of each batch (the
     * balanced split of its samples, doc/design.md section 3), for
     * data-parallel ranks that
     * hold their S(0) piece; the cursor still moves by whole batches */
    int shard_index, shard_count;
    /* micro_batches > 1: the batch is cut into that many balanced
     * micro-batches (pipeline parallelism) and the rank makes its shard
     * of each, one after the other: rows of micro-batch 0's piece, then
     * micro-batch 1's, ... (0 or 1: one micro-batch) */
    int micro_batches;
} mf_loader_opts;
#define MF_LOADER_MAX_MICRO 1024

typedef struct mf_loader mf_loader;
MF_API mf_loader *mf_loader_create(const mf_dataset *ds, const mf_loader_opts *o);
MF_API void mf_loader_destroy(mf_loader *l);
/* The next batch: x [B, C, H, W] f32 and y [B] i64, or for a token
 * dataset x and y [B, T] i64 (new references).
 * Batches run over epochs without end; mf_loader_epoch tells which. */
MF_API mf_status mf_loader_next(mf_loader *l, mf_tensor **x, mf_tensor **y);
MF_API int64_t mf_loader_batches_per_epoch(const mf_loader *l);
MF_API int64_t mf_loader_epoch(const mf_loader *l);    /* of the next batch */
/* Samples in the whole batch mf_loader_next last returned (with a shard,
 * more than this rank's piece holds). */
MF_API int64_t mf_loader_batch_rows(const mf_loader *l);
MF_API int64_t mf_loader_cursor(const mf_loader *l);   /* samples consumed in that epoch */
/* Continue from (epoch, cursor), e.g. when resuming from a checkpoint. */
MF_API mf_status mf_loader_seek(mf_loader *l, int64_t epoch, int64_t cursor);
/* The sample index at position pos of epoch's permutation. */
MF_API int64_t mf_loader_sample_index(const mf_loader *l, int64_t epoch, int64_t pos);

#ifdef __cplusplus
}
#endif
#endif
