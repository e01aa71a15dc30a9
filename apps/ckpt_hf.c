/*
 * apps/ckpt_hf.c - mpiflow-ckpt export and import: a GPT checkpoint's
 * weights to and from safetensors files (doc/gpt.md).
 *
 * Layouts:
 *   mpiflow  the checkpoint's own names (nanoGPT's: transformer.h.0.attn.c_attn.weight)
 *            and PyTorch Linear weights [out, in];
 *   hf-gpt2  Hugging Face's GPT2Model names (h.0.attn.c_attn.weight, wte.weight)
 *            and its Conv1D weights stored [in, out]: the four projections
 *            (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are transposed.
 * Import accepts HF's GPT2LMHeadModel names too (a "transformer." prefix)
 * and drops what GPT-2 files carry besides the weights: lm_head.weight
 * (the tied embedding) and the attention mask buffers (attn.bias,
 * attn.masked_bias).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/ckpt_hf.h"

static const char *const conv1d[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"};

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static bool is_conv1d(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (ends_with(name, conv1d[i])) return true;
    return false;
}

static int say(const char *what)
{
    fprintf(stderr, "mpiflow-ckpt: error: %s%s%s\n", what ? what : "", what ? ": " : "", mf_last_error());
    return 2;
}

/* the model tensor of checkpoint entry i, as a local tensor */
static mf_tensor *read_entry(const mf_ckpt_file *f, int i)
{
    const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
    mf_tensor *d = mf_empty(MF_F64, e->ndim, e->shape);
    if (!d) return NULL;
    int64_t rows = e->ndim ? e->shape[0] : 1;
    if (mf_tensor_numel(d) && mf_ckpt_read_f64(f, i, 0, rows, mf_tensor_data(d)) != MF_OK) {
        mf_tensor_destroy(d);
        return NULL;
    }
    mf_tensor *t = mf_cast(d, e->dtype);
    mf_tensor_destroy(d);
    return t;
}

static mf_tensor *transposed(mf_tensor *t)
{
    mf_tensor *v = mf_transpose(t, 0, 1), *c = v ? mf_clone(v) : NULL;
    mf_tensor_destroy(v);
    return c;
}

/* c_attn's [3, C, C] and [3, C] as nanoGPT's [3C, C] and [3C] (a view);
 * anything else as it is. Consumes t. */
static mf_tensor *flat_qkv(mf_tensor *t)
{
    if (!t || mf_tensor_ndim(t) < 2 || mf_tensor_ndim(t) > 3 || mf_tensor_shape(t)[0] != 3) return t;
    const int64_t *s = mf_tensor_shape(t);
    bool w = mf_tensor_ndim(t) == 3 && s[1] == s[2];
    mf_tensor *v = mf_reshape(t, w ? 2 : 1, (const int64_t[]){3 * s[1], s[mf_tensor_ndim(t) - 1]});
    mf_tensor_destroy(t);
    return v;
}

int ckpt_export(const char *in, const char *out, const char *layout)
{
    bool hf = !strcmp(layout, "hf-gpt2");
    mf_ckpt_file *f = mf_ckpt_open(in);
    if (!f) return say(NULL);
    int n = mf_ckpt_count(f), k = 0, rc = 0;
    char **names = calloc((size_t)n + 1, sizeof *names);
    mf_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    for (int i = 0; names && ts && i < n && !rc; i++) {
        const char *name = mf_ckpt_entry_at(f, i)->name;
        if (strncmp(name, "model/", 6)) continue;   /* the weights, not the optimizer's state */
        name += 6;
        if (hf && !strncmp(name, "transformer.", 12)) name += 12;
        mf_tensor *t = flat_qkv(read_entry(f, i));
        if (t && hf && is_conv1d(name) && mf_tensor_ndim(t) == 2) {
            mf_tensor *tt = transposed(t);
            mf_tensor_destroy(t);
            t = tt;
        }
        names[k] = strdup(name);
        ts[k] = t;
        if (!t || !names[k]) rc = say(in);
        k++;
    }
    if (!names || !ts) rc = say("out of memory");
    if (!rc && k == 0) {
        fprintf(stderr, "mpiflow-ckpt: error: %s holds no model tensors\n", in);
        rc = 2;
    }
    if (!rc && mf_safetensors_write(out, k, (const char *const *)names, ts) != MF_OK) rc = say(out);
    if (!rc) printf("%s: %d tensors (%s layout)\n", out, k, layout);
    for (int i = 0; i < k; i++) {
        free(names[i]);
        mf_tensor_destroy(ts[i]);
    }
    free(names);
    free(ts);
    mf_ckpt_close(f);
    return rc;
}

/* the file's name for model parameter p: the same (mpiflow) or HF's */
static const char *file_name(const mf_safetensors *s, const char *p, bool hf, char *buf, size_t size)
{
    if (!hf) return p;
    const char *bare = strncmp(p, "transformer.", 12) ? p : p + 12;
    snprintf(buf, size, "%s", bare);
    if (mf_safetensors_find(s, buf) >= 0) return buf;
    snprintf(buf, size, "transformer.%s", bare);   /* GPT2LMHeadModel's names */
    return buf;
}

static bool ignored(const char *name)
{
    return !strcmp(name, "lm_head.weight") || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

int ckpt_import(const char *in, const char *out, const char *layout, int n_head)
{
    bool hf = !strcmp(layout, "hf-gpt2");
    mf_safetensors *s = mf_safetensors_open(in);
    if (!s) return say(NULL);
    int rc = 0;
    char buf[300];
    const mf_st_tensor *wte = mf_safetensors_at(s, mf_safetensors_find(s, file_name(s, "transformer.wte.weight", hf, buf, sizeof buf)));
    const mf_st_tensor *wpe = mf_safetensors_at(s, mf_safetensors_find(s, file_name(s, "transformer.wpe.weight", hf, buf, sizeof buf)));
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
        fprintf(stderr, "mpiflow-ckpt: error: %s: no GPT embeddings %s (wte.weight [V, C] and wpe.weight [T, C]); is the "
                "layout %s?\n", in, hf ? "wte.weight, wpe.weight" : "transformer.wte.weight, transformer.wpe.weight", hf ? "mpiflow" : "hf-gpt2");
        mf_safetensors_close(s);
        return 2;
    }
    int L = 0;
    for (;; L++) {
        char p[64];
        snprintf(p, sizeof p, "transformer.h.%d.ln_1.weight", L);
        if (mf_safetensors_find(s, file_name(s, p, hf, buf, sizeof buf)) < 0) break;
    }
    const int C = (int)wte->shape[1];
    mf_gpt_config c = {L, n_head ? n_head : (C % 64 ? 1 : C / 64), C, (int)wpe->shape[0], (int)wte->shape[0], 0.0};
    mf_module *m = L > 0 ? mf_model_gpt(&c) : NULL;
    if (!m) {
        if (L == 0) fprintf(stderr, "mpiflow-ckpt: error: %s: no transformer blocks (h.0.ln_1.weight)\n", in);
        else say("--n-head");
        mf_safetensors_close(s);
        return 2;
    }
    mf_tensor_list *l = mf_module_parameters(m);
    int used = 0;
    for (int i = 0; l && i < l->n && !rc; i++) {
        const char *fname = file_name(s, l->items[i].name, hf, buf, sizeof buf);
        const mf_st_tensor *t = mf_safetensors_at(s, mf_safetensors_find(s, fname));
        mf_tensor *p = t && t->ndim < mf_tensor_ndim(l->items[i].tensor) ? flat_qkv(mf_tensor_retain(l->items[i].tensor))
                                                                    : mf_tensor_retain(l->items[i].tensor);
        if (!p) {
            rc = say(fname);
            break;
        }
        bool tr = hf && is_conv1d(fname) && mf_tensor_ndim(p) == 2;
        bool fits = t && t->ndim == mf_tensor_ndim(p);
        for (int d = 0; fits && d < t->ndim; d++) fits = t->shape[tr ? 1 - d : d] == mf_tensor_shape(p)[d];
        if (!fits) {
            fprintf(stderr, "mpiflow-ckpt: error: %s: %s %s (the model needs it %s, from n_layer %d, n_embd %d)\n", in,
                    fname, t ? "has another shape" : "is missing", tr ? "transposed: Conv1D [in, out]" : "as the model's",
                    L, C);
            mf_tensor_destroy(p);
            rc = 2;
            break;
        }
        used++;
        mf_tensor *src = mf_from_data(t->dtype, t->ndim, t->shape, t->data);
        mf_tensor *v = src && tr ? mf_transpose(src, 0, 1) : src ? mf_tensor_retain(src) : NULL;
        if (!v || mf_copy_(p, v) != MF_OK) rc = say(fname);
        mf_tensor_destroy(src);
        mf_tensor_destroy(v);
        mf_tensor_destroy(p);
    }
    int extra = -used;
    for (int i = 0; i < mf_safetensors_count(s); i++) extra += !ignored(mf_safetensors_at(s, i)->name);
    if (!rc && extra > 0)
        fprintf(stderr, "mpiflow-ckpt: warning: %s holds %d tensors that are not GPT weights; they were left out\n", in, extra);
    if (!rc && mf_ckpt_save(out, m, NULL, NULL) != MF_OK) rc = say(out);
    if (!rc)
        printf("%s: GPT n_layer=%d n_head=%d n_embd=%d seq_len=%d vocab_size=%d (%lld parameters)\n", out, c.n_layer,
               c.n_head, c.n_embd, c.seq_len, c.vocab_size, (long long)mf_module_num_parameters(m));
    mf_tensor_list_destroy(l);
    mf_module_destroy(m);
    mf_safetensors_close(s);
    return rc;
}
