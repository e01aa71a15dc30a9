/*
 * apps/train_gpt.c - mpiflow-train's GPT configuration and data
 * (doc/gpt.md).
 */
#include <stdio.h>
#include <string.h>
#include "apps/train_gpt.h"

mf_status gpt_config(const train_opts *o, mf_gpt_config *c, char *err, size_t len)
{
    mf_status st = mf_gpt_preset(o->preset, c);
    if (st != MF_OK) return st;
    bool text = !strncmp(o->dataset, "text:", 5);
    if (o->n_layer) c->n_layer = o->n_layer;
    if (o->n_head) c->n_head = o->n_head;
    if (o->n_embd) c->n_embd = o->n_embd;
    if (o->seq_len) c->seq_len = o->seq_len;
    if (o->dropout >= 0) c->dropout = o->dropout;
    c->vocab_size = o->vocab_size ? o->vocab_size : text ? 256 : c->vocab_size > 256 ? c->vocab_size : 50257;
    if (c->n_embd % c->n_head) {
        snprintf(err, len, "--n-embd %d is not divisible by --n-head %d", c->n_embd, c->n_head);
        return MF_ERR_ARG;
    }
    if (text && c->vocab_size < 256) {
        snprintf(err, len, "--vocab-size %d: text is read as bytes, which needs 256", c->vocab_size);
        return MF_ERR_ARG;
    }
    return MF_OK;
}

mf_status gpt_load(const train_opts *o, mf_gpt_config *c, mf_dataset **train, mf_dataset **val, char *err, size_t len)
{
    *train = *val = NULL;
    mf_status st = gpt_config(o, c, err, len);
    if (st != MF_OK) return st;
    bool text = !strncmp(o->dataset, "text:", 5);
    const char *path = o->dataset + (text ? 5 : 7);
    if (text) {
        *train = mf_dataset_text(path, 0.0, 0.9, c->seq_len);
        *val = *train && o->eval ? mf_dataset_text(path, 0.9, 1.0, c->seq_len) : NULL;
    } else {
        *train = mf_dataset_tokens(path, false, c->seq_len, c->vocab_size);
        *val = *train && o->eval ? mf_dataset_tokens(path, true, c->seq_len, c->vocab_size) : NULL;
    }
    if (!*train || (o->eval && !*val)) return mf_last_status();
    if (mf_dataset_size(*train) < o->batch_size) {
        snprintf(err, len, "--dataset %s: the training split has %lld windows of %d tokens, fewer than one batch of %lld",
                 o->dataset, (long long)mf_dataset_size(*train), c->seq_len + 1, (long long)o->batch_size);
        return MF_ERR_ARG;
    }
    return MF_OK;
}
