/*
 * apps/train_gpt.h - what mpiflow-train does differently for --model gpt
 * (doc/gpt.md): the configuration and the token datasets.
 */
#ifndef MPIFLOW_APPS_TRAIN_GPT_H
#define MPIFLOW_APPS_TRAIN_GPT_H

#include "apps/train_opts.h"
#include "mpiflow.h"

/* The model's configuration (--preset, then the size flags; the
 * vocabulary from the data unless --vocab-size) and the training and
 * validation splits of --dataset text:PATH or tokens:GLOB. A message in
 * err for input that does not fit (MF_ERR_ARG); otherwise the library's
 * error. */
/* The configuration alone, as gpt_load makes it. */
mf_status gpt_config(const train_opts *o, mf_gpt_config *c, char *err, size_t len);
mf_status gpt_load(const train_opts *o, mf_gpt_config *c, mf_dataset **train, mf_dataset **val, char *err, size_t len);

#endif
