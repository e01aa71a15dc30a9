/*
 * lib/nn/embedding.c - Embedding: weight [num, dim] drawn from N(0, 1),
 * PyTorch's default.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct emb_priv { int64_t num, dim; } emb_priv;

static mf_tensor *emb_forward(mf_module *m, mf_tensor *x) { return mf_embedding(mf_module_param(m, "weight"), x); }

static mf_status emb_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    char key[512];
    return mf_normal_keyed_(mf_module_param(m, "weight"), 0.0, 1.0, seed, mfi_join_name(prefix, "weight", key, sizeof key));
}

static void emb_describe(const mf_module *m, char *buf, size_t size)
{
    const emb_priv *p = m->priv;
    snprintf(buf, size, "%lld, %lld", (long long)p->num, (long long)p->dim);
}

static const mf_module_ops emb_ops = {"Embedding", emb_forward, emb_reset, NULL, emb_describe};

mf_module *mf_embedding_create(int64_t num_embeddings, int64_t dim)
{
    if (num_embeddings < 1 || dim < 1) {
        mfi_error(MF_ERR_ARG, "mf_embedding_create: sizes %lld x %lld must be positive", (long long)num_embeddings,
                  (long long)dim);
        return NULL;
    }
    mf_module *m = mfi_module_new(&emb_ops, sizeof(emb_priv));
    if (!m) return NULL;
    ((emb_priv *)m->priv)->num = num_embeddings;
    ((emb_priv *)m->priv)->dim = dim;
    mf_tensor *w = mf_empty(MF_F32, MF_DIMS(num_embeddings, dim));
    mf_status st = w ? mf_module_register_parameter(m, "weight", w) : mf_last_status();
    mf_tensor_destroy(w);
    if (st == MF_OK) st = mfi_module_init_fresh(m);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return NULL;
    }
    return m;
}
