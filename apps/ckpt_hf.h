/*
 * apps/ckpt_hf.h - mpiflow-ckpt export and import (apps/ckpt_hf.c).
 */
#ifndef MPIFLOW_APPS_CKPT_HF_H
#define MPIFLOW_APPS_CKPT_HF_H

#include "mpiflow.h"

/* A checkpoint's model tensors into a safetensors file, in layout
 * "mpiflow" or "hf-gpt2"; exit status 0 or 2. Needs mf_init. */
int ckpt_export(const char *in, const char *out, const char *layout);
/* A GPT's weights from a safetensors file into a new checkpoint (n_head
 * 0: n_embd / 64, GPT-2's head size); exit status 0 or 2. Needs mf_init. */
int ckpt_import(const char *in, const char *out, const char *layout, int n_head);

#endif
