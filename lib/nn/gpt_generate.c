/*
 * lib/nn/gpt_generate.c - text generation with a GPT (doc/gpt.md): one
 * new token per step, from the model's logits with a temperature and an
 * optional top-k cut, drawn from Philox keyed by (seed, position) so the
 * same seed gives the same text.
 *
 * With the KV cache each step runs the network on the new token only:
 * every layer keeps the keys and values of the positions so far, and the
 * new query attends to them. Without it each step runs the whole context
 * (what the cache must equal). A context longer than seq_len keeps its
 * last seq_len tokens, as nanoGPT's generate; with the cache that means
 * filling it again from the cropped window.
 *
 * Generation runs on local (one-process) parameters, in grad-off mode.
 */
#include <math.h>
#include <stdio.h>
#include "base/philox.h"
#include "lib/nn/nn_internal.h"

typedef struct kv_cache {
    int n_layer, len;
    mf_tensor **k, **v;   /* per layer [H, seq_len, D] */
} kv_cache;

static void cache_free(kv_cache *c)
{
    for (int l = 0; c->k && l < c->n_layer; l++) {
        mf_tensor_destroy(c->k[l]);
        mf_tensor_destroy(c->v[l]);
    }
    free(c->k);
    free(c->v);
    *c = (kv_cache){0};
}

static mf_status cache_init(kv_cache *c, const mf_gpt_config *g)
{
    *c = (kv_cache){.n_layer = g->n_layer};
    c->k = calloc((size_t)g->n_layer, sizeof *c->k);
    c->v = calloc((size_t)g->n_layer, sizeof *c->v);
    if (!c->k || !c->v) MF_FAIL(MF_ERR_NOMEM, "mf_gpt_generate: out of memory");
    int64_t D = g->n_embd / g->n_head;
    for (int l = 0; l < g->n_layer; l++) {
        c->k[l] = mf_zeros(MF_F32, MF_DIMS(g->n_head, g->seq_len, D));
        c->v[l] = mf_zeros(MF_F32, MF_DIMS(g->n_head, g->seq_len, D));
        if (!c->k[l] || !c->v[l]) return mf_last_status();
    }
    return MF_OK;
}

/* the tensors of one step, freed together */
typedef struct pool {
    mf_tensor *t[64];
    int n;
} pool;

static mf_tensor *keep(pool *p, mf_tensor *t)
{
    if (t && p->n < 64) p->t[p->n++] = t;
    else if (t) {
        mf_tensor_destroy(t);
        mfi_error(MF_ERR_INTERNAL, "mf_gpt_generate: step pool full");
        return NULL;
    }
    return t;
}

static void drain(pool *p)
{
    for (int i = 0; i < p->n; i++) mf_tensor_destroy(p->t[i]);
    p->n = 0;
}

static mf_tensor *param(const mf_module *m, const char *a, const char *b)
{
    char name[96];
    snprintf(name, sizeof name, "%s.%s", a, b);
    mf_tensor *t = mf_module_get(m, name);
    if (!t) mfi_error(MF_ERR_INTERNAL, "mf_gpt_generate: no parameter %s", name);
    return t;
}

#define P(m, a, b) param(m, a, b)
#define TRY_T(expr)                      \
    do {                                 \
        if (!(expr)) goto fail;          \
    } while (0)

/* The logits [V] after token tok at position pos, from the cache. */
static mf_tensor *cached_step(mf_module *m, const mf_gpt_config *g, kv_cache *c, int64_t tok, int64_t pos)
{
    pool p = {.n = 0};
    const mf_module *tf = mf_module_child(m, "transformer"), *hs = mf_module_child(tf, "h");
    const int64_t C = g->n_embd, H = g->n_head, D = C / H;
    mf_tensor *x, *r = NULL, *idx = keep(&p, mf_full(MF_I64, MF_DIMS(1), (double)tok));
    mf_tensor *pi = keep(&p, mf_full(MF_I64, MF_DIMS(1), (double)pos));
    TRY_T(idx && pi);
    mf_tensor *te = keep(&p, mf_embedding(P(tf, "wte", "weight"), idx)), *pe = keep(&p, mf_embedding(P(tf, "wpe", "weight"), pi));
    TRY_T(te && pe);
    x = mf_add(te, pe);   /* [1, C]; owned here, replaced layer by layer */
    for (int l = 0; x && l < g->n_layer; l++) {
        const mf_module *b = mf_module_child_at(hs, l);
        mf_tensor *h = keep(&p, mf_layer_norm(x, 1, P(b, "ln_1", "weight"), P(b, "ln_1", "bias"), 1e-5));
        mf_tensor *qkv = h ? keep(&p, mf_linear(h, P(b, "attn.c_attn", "weight"), P(b, "attn.c_attn", "bias"))) : NULL;
        mf_tensor *r3 = qkv ? keep(&p, mf_reshape(qkv, MF_DIMS(3, H, 1, D))) : NULL;
        mf_tensor *q = r3 ? keep(&p, mf_narrow(r3, 0, 0, 1)) : NULL, *k = r3 ? keep(&p, mf_narrow(r3, 0, 1, 1)) : NULL;
        mf_tensor *v = r3 ? keep(&p, mf_narrow(r3, 0, 2, 1)) : NULL;
        mf_tensor *kslot = v ? keep(&p, mf_narrow(c->k[l], 1, pos, 1)) : NULL;
        mf_tensor *vslot = kslot ? keep(&p, mf_narrow(c->v[l], 1, pos, 1)) : NULL;
        mf_tensor *k3 = vslot ? keep(&p, mf_squeeze(k, 0)) : NULL, *v3 = k3 ? keep(&p, mf_squeeze(v, 0)) : NULL;
        if (!v3 || mf_copy_(kslot, k3) != MF_OK || mf_copy_(vslot, v3) != MF_OK) goto fail_x;
        mf_tensor *kk = keep(&p, mf_narrow(c->k[l], 1, 0, pos + 1)), *vv = keep(&p, mf_narrow(c->v[l], 1, 0, pos + 1));
        mf_tensor *q3 = kk && vv ? keep(&p, mf_squeeze(q, 0)) : NULL;                 /* [H, 1, D] */
        mf_tensor *s = q3 ? keep(&p, mf_matmul_t(q3, kk, false, true)) : NULL;         /* [H, 1, pos+1] */
        mf_tensor *ss = s ? keep(&p, mf_scale(s, 1.0 / sqrt((double)D))) : NULL;
        mf_tensor *w = ss ? keep(&p, mf_softmax(ss, -1)) : NULL;
        mf_tensor *y = w ? keep(&p, mf_matmul(w, vv)) : NULL;                           /* [H, 1, D] */
        mf_tensor *yc = y ? keep(&p, mf_reshape(y, MF_DIMS(1, C))) : NULL;
        mf_tensor *o = yc ? keep(&p, mf_linear(yc, P(b, "attn.c_proj", "weight"), P(b, "attn.c_proj", "bias"))) : NULL;
        mf_tensor *x1 = o ? mf_add(x, o) : NULL;
        mf_tensor_destroy(x);
        x = x1;
        if (!x) goto fail;
        mf_tensor *h2 = keep(&p, mf_layer_norm(x, 1, P(b, "ln_2", "weight"), P(b, "ln_2", "bias"), 1e-5));
        mf_tensor *f = h2 ? keep(&p, mf_linear(h2, P(b, "mlp.c_fc", "weight"), P(b, "mlp.c_fc", "bias"))) : NULL;
        mf_tensor *gl = f ? keep(&p, mf_gelu_tanh(f)) : NULL;
        mf_tensor *f2 = gl ? keep(&p, mf_linear(gl, P(b, "mlp.c_proj", "weight"), P(b, "mlp.c_proj", "bias"))) : NULL;
        mf_tensor *x2 = f2 ? mf_add(x, f2) : NULL;
        mf_tensor_destroy(x);
        x = x2;
        drain(&p);
    }
    if (x) {
        mf_tensor *h = keep(&p, mf_layer_norm(x, 1, P(tf, "ln_f", "weight"), P(tf, "ln_f", "bias"), 1e-5));
        mf_tensor *lg = h ? keep(&p, mf_linear(h, P(tf, "wte", "weight"), NULL)) : NULL;
        r = lg ? mf_reshape(lg, MF_DIMS(g->vocab_size)) : NULL;
    }
    mf_tensor_destroy(x);
    drain(&p);
    return r;
fail_x:
    mf_tensor_destroy(x);
fail:
    drain(&p);
    return NULL;
}

/* The logits [V] of the last position, from the whole context. */
static mf_tensor *full_step(mf_module *m, const mf_gpt_config *g, const int64_t *ctx, int n)
{
    mf_tensor *idx = mf_empty(MF_I64, MF_DIMS(1, n));
    if (!idx) return NULL;
    memcpy(mf_tensor_data(idx), ctx, (size_t)n * sizeof *ctx);
    mf_tensor *lg = mf_module_forward(m, idx);
    mf_tensor *last = lg ? mf_narrow(lg, 1, n - 1, 1) : NULL;
    mf_tensor *r = last ? mf_reshape(last, MF_DIMS(g->vocab_size)) : NULL;
    mf_tensor_destroy(idx);
    mf_tensor_destroy(lg);
    mf_tensor_destroy(last);
    return r;
}

/* A token from logits: the argmax at temperature 0, else a draw from
 * softmax(logits / temperature) over the top_k largest (all when 0). */
static int64_t pick(const float *lg, int V, double temperature, int top_k, uint64_t seed, int64_t pos, double *prob)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (lg[i] > lg[best]) best = i;
    if (temperature <= 0) return best;
    double cut = -INFINITY;
    if (top_k > 0 && top_k < V) {   /* the k-th largest value */
        float *s = malloc((size_t)V * sizeof *s);
        if (s) {
            memcpy(s, lg, (size_t)V * sizeof *s);
            for (int i = 0; i < top_k; i++) {   /* partial selection: fine for the vocabularies here */
                int b = i;
                for (int j = i + 1; j < V; j++)
                    if (s[j] > s[b]) b = j;
                float t = s[i];
                s[i] = s[b];
                s[b] = t;
            }
            cut = s[top_k - 1];
            free(s);
        }
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        prob[i] = lg[i] >= cut ? exp(((double)lg[i] - lg[best]) / temperature) : 0.0;
        sum += prob[i];
    }
    double u = mfi_u01(mfi_philox_u32(seed, mfi_hash_str("gpt/generate"), (uint64_t)pos)) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += prob[i];
        if (prob[i] > 0 && u < acc) return i;
    }
    return best;
}

mf_status mf_gpt_generate(mf_module *m, const int64_t *prompt, int n_prompt, int max_new, const mf_gpt_gen_opts *o,
                          int64_t *out)
{
    const mf_gpt_config *g = mf_gpt_config_of(m);
    if (!g) MF_FAIL(MF_ERR_ARG, "mf_gpt_generate: the module is not a GPT");
    if (!prompt || n_prompt < 1 || max_new < 0 || !out || !o)
        MF_FAIL(MF_ERR_ARG, "mf_gpt_generate: need a prompt of at least one token, max_new >= 0 and an output buffer");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= g->vocab_size)
            MF_FAIL(MF_ERR_ARG, "mf_gpt_generate: prompt token %lld at %d is outside the vocabulary of %d",
                    (long long)prompt[i], i, g->vocab_size);
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    bool was_training = mf_module_is_training(m), prev = mf_set_grad_enabled(false);
    mf_module_train(m, false);
    kv_cache c = {0};
    double *prob = malloc((size_t)g->vocab_size * sizeof *prob);
    mf_status st = prob ? MF_OK : mfi_error(MF_ERR_NOMEM, "mf_gpt_generate: out of memory");
    if (st == MF_OK && o->use_cache) st = cache_init(&c, g);
    int n = n_prompt;
    for (int step = 0; st == MF_OK && step < max_new; step++) {
        int start = n > g->seq_len ? n - g->seq_len : 0, w = n - start;   /* the window the model sees */
        mf_tensor *lg = NULL;
        if (!o->use_cache) {
            lg = full_step(m, g, out + start, w);
        } else {
            if (w == g->seq_len && c.len == g->seq_len) c.len = 0;   /* full: fill it again from the window */
            int first = c.len == 0 ? start : n - 1;
            for (int i = first; i < n && st == MF_OK; i++) {
                mf_tensor_destroy(lg);
                lg = cached_step(m, g, &c, out[i], i - start);
                if (!lg) st = mf_last_status();
                c.len = i - start + 1;
            }
        }
        if (!lg) {
            if (st == MF_OK) st = mf_last_status();
            break;
        }
        mf_tensor *f = mf_cast(lg, MF_F32);
        mf_tensor_destroy(lg);
        if (!f) {
            st = mf_last_status();
            break;
        }
        out[n] = pick(mf_tensor_data(f), g->vocab_size, o->temperature, o->top_k, o->seed, n, prob);
        mf_tensor_destroy(f);
        n++;
    }
    free(prob);
    cache_free(&c);
    mf_module_train(m, was_training);
    mf_set_grad_enabled(prev);
    if (st != MF_OK) mfi_error_context("mf_gpt_generate");
    return st;
}
