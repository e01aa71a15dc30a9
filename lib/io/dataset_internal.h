/*
 * lib/io/dataset_internal.h - the dataset struct shared by lib/io/
 * (not installed): images with labels (dataset.c) or a token stream cut
 * into windows (tokens.c).
 */
#ifndef MPIFLOW_LIB_IO_DATASET_INTERNAL_H
#define MPIFLOW_LIB_IO_DATASET_INTERNAL_H

#include "lib/internal.h"

struct mf_dataset {
    int64_t n;           /* samples: images, or windows of seq_len + 1 tokens */
    int c, h, w, classes;
    uint8_t *pixels;     /* [n, c, h, w] */
    int64_t *labels;     /* [n] */
    char source[512];    /* the images file or token source, for messages ("" for synthetic data) */
    char labels_file[512];
    /* token datasets: window k is tokens [k * seq_len, (k + 1) * seq_len] */
    uint16_t *tokens;
    int64_t ntokens;
    int seq_len;         /* classes holds the vocabulary size */
};

#endif
