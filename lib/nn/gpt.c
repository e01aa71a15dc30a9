/*
 * lib/nn/gpt.c - GPT-2 (doc/gpt.md): token and learned position
 * embeddings, pre-LayerNorm blocks of causal self-attention and a 4x MLP
 * with tanh GELU, each around a residual connection, a final LayerNorm,
 * and a head that shares the token embedding's weight.
 *
 * Parameter names and order are nanoGPT's state_dict, in Linear layout,
 * so a checkpoint loads into nanoGPT's GPT with h5py; the tied head is
 * stored once, as transformer.wte.weight. One shape differs: the fused
 * projection c_attn is [3, C, C] (bias [3, C]), nanoGPT's [3C, C] with
 * q, k and v as a leading axis, so that tensor parallelism can split
 * its output features (axis 1) into whole heads of each of q, k and v
 * (doc/gpt.md); the values are nanoGPT's in the same order.
 *
 * Initialisation is GPT-2's:
 * N(0, 0.02), the residual projections (c_proj) scaled by
 * 1/sqrt(2 n_layer), zero biases, LayerNorm weight one; keyed by name,
 * so any rank count draws the same values.
 *
 * The modules under the root hold parameters only; the root's forward
 * runs the whole network, so what runs is in one place.
 */
#include <math.h>
#include <stdio.h>
#include "lib/global/global_internal.h"
#include "lib/nn/nn_internal.h"

struct gpt_priv;
/* what a block's sublayers need, per layer: it outlives the forward, for
 * a recompute in backward */
typedef struct blk_ctx {
    const struct gpt_priv *gp;
    const mf_module *b;
    bool tr;
} blk_ctx;

typedef struct gpt_priv {
    mf_gpt_config c;
    mfi_gpt_par par;
    mf_gpt_recompute recompute;
    blk_ctx *ctx;   /* n_layer */
} gpt_priv;

mfi_gpt_par *mfi_gpt_par_of(mf_module *m)
{
    return m && !strcmp(mf_module_type(m), "GPT") ? &((gpt_priv *)m->priv)->par : NULL;
}

/* ---------------------------------------------------------- the tree */
static mf_tensor *part_forward(mf_module *m, mf_tensor *x)
{
    (void)x;
    mfi_error(MF_ERR_ARG, "%s of a GPT: run the whole GPT (mf_module_forward on it, mf_gpt_hidden, mf_gpt_loss)",
              mf_module_type(m));
    return NULL;
}

static const mf_module_ops holder_ops[] = {
    {"Embedding", part_forward, NULL, NULL, NULL},  {"LayerNorm", part_forward, NULL, NULL, NULL},
    {"Linear", part_forward, NULL, NULL, NULL},     {"CausalSelfAttention", part_forward, NULL, NULL, NULL},
    {"MLP", part_forward, NULL, NULL, NULL},        {"Block", part_forward, NULL, NULL, NULL},
    {"ModuleList", part_forward, NULL, NULL, NULL}, {"Transformer", part_forward, NULL, NULL, NULL},
};
enum { H_EMB, H_LN, H_LIN, H_ATTN, H_MLP, H_BLOCK, H_LIST, H_TRANS };

static mf_module *holder(int kind) { return mfi_module_new(&holder_ops[kind], 0); }

/* a parameter of the given shape (zeros; the root's reset fills it) */
static mf_status param(mf_module *m, const char *name, int ndim, int64_t a, int64_t b)
{
    mf_tensor *t = mf_zeros(MF_F32, ndim, (const int64_t[]){a, b});
    if (!t) return mf_last_status();
    mf_status st = mf_tensor_set_requires_grad(t, true);
    if (st == MF_OK) st = mf_module_register_parameter(m, name, t);
    mf_tensor_destroy(t);
    return st;
}

static mf_status add(mf_module *parent, const char *name, mf_module *child)
{
    if (!child) return mf_last_status();
    return mf_module_add_child(parent, name, child);
}

static mf_status add_ln(mf_module *parent, const char *name, int64_t C)
{
    mf_module *m = holder(H_LN);
    if (!m) return mf_last_status();
    mf_status st = param(m, "weight", 1, C, 0);
    if (st == MF_OK) st = param(m, "bias", 1, C, 0);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return st;
    }
    return add(parent, name, m);
}

static mf_status add_linear(mf_module *parent, const char *name, int64_t in, int64_t out)
{
    mf_module *m = holder(H_LIN);
    if (!m) return mf_last_status();
    mf_status st = param(m, "weight", 2, out, in);
    if (st == MF_OK) st = param(m, "bias", 1, out, 0);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return st;
    }
    return add(parent, name, m);
}

/* c_attn: weight [3, C, C], bias [3, C] */
static mf_status add_qkv(mf_module *parent, int64_t C)
{
    mf_module *m = holder(H_LIN);
    if (!m) return mf_last_status();
    mf_tensor *w = mf_zeros(MF_F32, 3, (const int64_t[]){3, C, C}), *b = w ? mf_zeros(MF_F32, 2, (const int64_t[]){3, C}) : NULL;
    mf_status st = b ? MF_OK : mf_last_status();
    if (st == MF_OK) st = mf_tensor_set_requires_grad(w, true);
    if (st == MF_OK) st = mf_tensor_set_requires_grad(b, true);
    if (st == MF_OK) st = mf_module_register_parameter(m, "weight", w);
    if (st == MF_OK) st = mf_module_register_parameter(m, "bias", b);
    mf_tensor_destroy(w);
    mf_tensor_destroy(b);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return st;
    }
    return add(parent, "c_attn", m);
}

static mf_module *block(int64_t C)
{
    mf_module *b = holder(H_BLOCK), *attn = holder(H_ATTN), *mlp = holder(H_MLP);
    mf_status st = b && attn && mlp ? MF_OK : mf_last_status();
    if (st == MF_OK) st = add_qkv(attn, C);
    if (st == MF_OK) st = add_linear(attn, "c_proj", C, C);
    if (st == MF_OK) st = add_linear(mlp, "c_fc", C, 4 * C);
    if (st == MF_OK) st = add_linear(mlp, "c_proj", 4 * C, C);
    if (st == MF_OK) st = add_ln(b, "ln_1", C);
    if (st == MF_OK) {
        st = add(b, "attn", attn);
        attn = NULL;
    }
    if (st == MF_OK) st = add_ln(b, "ln_2", C);
    if (st == MF_OK) {
        st = add(b, "mlp", mlp);
        mlp = NULL;
    }
    mf_module_destroy(attn);
    mf_module_destroy(mlp);
    if (st != MF_OK) {
        mf_module_destroy(b);
        return NULL;
    }
    return b;
}

/* ------------------------------------------------------------ presets */
mf_status mf_gpt_preset(const char *name, mf_gpt_config *c)
{
    static const struct {
        const char *name;
        mf_gpt_config c;
    } presets[] = {
        {"char", {4, 4, 128, 128, 256, 0.0}},           /* the quick start: bytes of text */
        {"10m", {6, 6, 384, 256, 256, 0.0}},            /* about 10 M parameters over bytes */
        {"gpt2", {12, 12, 768, 1024, 50257, 0.0}},
        {"gpt2-medium", {24, 16, 1024, 1024, 50257, 0.0}},
        {"gpt2-large", {36, 20, 1280, 1024, 50257, 0.0}},
        {"gpt2-xl", {48, 25, 1600, 1024, 50257, 0.0}},
    };
    for (size_t i = 0; name && i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(name, presets[i].name)) {
            *c = presets[i].c;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "unknown GPT preset '%s' (expected char, 10m, gpt2, gpt2-medium, gpt2-large or gpt2-xl)",
            name ? name : "(null)");
}

/* ------------------------------------------------------------ forward */
/* the module at dotted path `path` under m (a holder of parameters) */
static mf_module *part(const mf_module *m, const char *path)
{
    mf_module *c = (mf_module *)m;
    for (const char *at = path; c && *at;) {
        const char *dot = strchr(at, '.');
        size_t n = dot ? (size_t)(dot - at) : strlen(at);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)n, at);
        c = mf_module_child(c, name);
        at += n + (dot != NULL);
    }
    if (!c) mfi_error(MF_ERR_INTERNAL, "GPT: no module %s", path);
    return c;
}

/* y = x W^T + b with the Linear under m named name, its parameters
 * ready for use (mf_module_use_begin: a plan may keep them split) */
static mf_tensor *lin(const mf_module *m, const char *name, mf_tensor *x)
{
    mf_module *h = part(m, name);
    if (!h || mf_module_use_begin(h) != MF_OK) return NULL;
    mf_tensor *y = mf_linear(x, mf_module_param(h, "weight"), mf_module_param(h, "bias"));
    mf_module_use_end(h);
    return y;
}

static mf_tensor *ln(const mf_module *m, const char *name, mf_tensor *x)
{
    mf_module *h = part(m, name);
    if (!h || mf_module_use_begin(h) != MF_OK) return NULL;
    mf_tensor *y = mf_layer_norm(x, 1, mf_module_param(h, "weight"), mf_module_param(h, "bias"), 1e-5);
    mf_module_use_end(h);
    return y;
}

static mf_tensor *dropout(mf_tensor *x, double p, bool training)
{
    if (!x || p <= 0 || !training) return x;
    mf_tensor *y = mf_dropout(x, p, true);
    mf_tensor_destroy(x);
    return y;
}

/* the heads read and written in place in qkv [B, T, 3, C] and y [B, T, C]:
 * with tensor parallelism, this rank's heads of q, k and v (S(3)) */
static mf_tensor *attention(const mf_module *blk, const gpt_priv *p, mf_tensor *h)
{
    mf_module *a = part(blk, "attn");
    mf_tensor *in = a ? mf_module_input_layout(a, mf_tensor_retain(h)) : NULL;
    mf_tensor *qkv = in ? lin(a, "c_attn", in) : NULL, *y = qkv ? mf_causal_self_attention(qkv, p->c.n_head) : NULL;
    mf_tensor *o = y ? lin(a, "c_proj", y) : NULL;
    mf_tensor_destroy(in);
    mf_tensor_destroy(qkv);
    mf_tensor_destroy(y);
    return a ? mf_module_output_layout(a, o) : o;
}

static mf_tensor *mlp(const mf_module *blk, const gpt_priv *p, mf_tensor *h)
{
    (void)p;
    mf_module *m = part(blk, "mlp");
    mf_tensor *in = m ? mf_module_input_layout(m, mf_tensor_retain(h)) : NULL;
    mf_tensor *f = in ? lin(m, "c_fc", in) : NULL, *g = f ? mf_gelu_tanh(f) : NULL, *o = g ? lin(m, "c_proj", g) : NULL;
    mf_tensor_destroy(in);
    mf_tensor_destroy(f);
    mf_tensor_destroy(g);
    return m ? mf_module_output_layout(m, o) : o;
}

/* "B" or "B,B": all broadcast on p's mesh */
static const char *all_b(const mf_placement *p, char *buf, size_t size)
{
    size_t k = 0;
    for (int d = 0; d < mf_placement_mesh_ndim(p) && k + 3 < size; d++) k += (size_t)snprintf(buf + k, size - k, d ? ",B" : "B");
    return buf;
}

/* x + dropout(branch(norm(x))); x borrowed */
static mf_tensor *sublayer(const blk_ctx *cx, const char *norm,
                           mf_tensor *(*branch)(const mf_module *, const gpt_priv *, mf_tensor *), mf_tensor *x)
{
    mf_tensor *h = ln(cx->b, norm, x), *f = h ? branch(cx->b, cx->gp, h) : NULL;
    mf_tensor *d = dropout(f, cx->gp->c.dropout, cx->tr), *r = d ? mf_add(x, d) : NULL;
    mf_tensor_destroy(h);
    mf_tensor_destroy(d);
    return r;
}

/* the attention half and the MLP half of a block (mf_recompute_fns) */
static mf_tensor *attn_sub(void *u, int n, mf_tensor *const *in)
{
    (void)n;
    return sublayer(u, "ln_1", attention, in[0]);
}

static mf_tensor *mlp_sub(void *u, int n, mf_tensor *const *in)
{
    (void)n;
    return sublayer(u, "ln_2", mlp, in[0]);
}

/* the whole block */
static mf_tensor *block_fn(void *u, int n, mf_tensor *const *in)
{
    mf_tensor *a = attn_sub(u, n, in), *r = a ? mlp_sub(u, 1, &a) : NULL;
    mf_tensor_destroy(a);
    return r;
}

mf_status mf_gpt_set_recompute(mf_module *m, mf_gpt_recompute mode)
{
    if (!mf_gpt_config_of(m)) MF_FAIL(MF_ERR_ARG, "mf_gpt_set_recompute: the module is not a GPT");
    if ((unsigned)mode > MF_RECOMPUTE_ATTN) MF_FAIL(MF_ERR_ARG, "mf_gpt_set_recompute: unknown mode %d", (int)mode);
    ((gpt_priv *)m->priv)->recompute = mode;
    return MF_OK;
}

const mf_gpt_config *mf_gpt_config_of(const mf_module *m)
{
    if (!m || strcmp(mf_module_type(m), "GPT")) return NULL;
    return &((const gpt_priv *)mf_module_priv(m))->c;
}

/* Layer 0 of the GPT's layers (doc/gpt.md, "Layers"): the token and
 * position embeddings and their dropout. */
mf_tensor *mfi_gpt_embed(mf_module *m, mf_tensor *idx, bool tr)
{
    const mf_gpt_config *c = mf_gpt_config_of(m);
    if (!c) {
        mfi_error(MF_ERR_ARG, "mf_gpt_hidden: the module is not a GPT");
        return NULL;
    }
    if (mfi_check_input("mf_gpt_hidden", "idx", idx) != MF_OK) return NULL;
    if (mf_tensor_ndim(idx) != 2 || mf_tensor_shape(idx)[1] > c->seq_len || mf_tensor_shape(idx)[1] < 1) {
        char sh[64];
        mfi_error(MF_ERR_SHAPE, "mf_gpt_hidden: tokens %s must be [B, T] with 1 <= T <= seq_len %d",
                  mf_tensor_shape_str(idx, sh, sizeof sh), c->seq_len);
        return NULL;
    }
    const int64_t T = mf_tensor_shape(idx)[1];
    const mf_module *tf = mf_module_child(m, "transformer");
    mf_module *we = part(tf, "wte"), *pe_m = we ? part(tf, "wpe") : NULL;
    if (!pe_m || mf_module_use_begin(we) != MF_OK) return NULL;
    if (mf_module_use_begin(pe_m) != MF_OK) {
        mf_module_use_end(we);
        return NULL;
    }
    mf_tensor *wte = mf_module_param(we, "weight"), *wpe = mf_module_param(pe_m, "weight");
    /* positions 0..T-1 on the placement of the embedding */
    mf_tensor *pos = mf_arange(MF_I64, T), *gpos = NULL;
    const mf_placement *pl = mf_global_placement(wpe);
    if (pos && pl) {
        char b[32];
        gpos = mf_global_from_full(pos, pl, all_b(pl, b, sizeof b));   /* the same on every rank: no message */
        mf_tensor_destroy(pos);
        pos = gpos;
    }
    /* vocabulary parallel: the lookup is P, summed into the residual stream */
    mf_tensor *tok = pos ? mf_module_output_layout(we, mf_embedding(wte, idx)) : NULL;
    mf_tensor *pe = tok ? mf_embedding(wpe, pos) : NULL;
    mf_tensor *x = pe ? mf_add(tok, pe) : NULL;
    mf_tensor_destroy(pos);
    mf_tensor_destroy(tok);
    mf_tensor_destroy(pe);
    mf_module_use_end(pe_m);
    mf_module_use_end(we);
    return dropout(x, c->dropout, tr);
}

/* Layer 1 + i: block i on the residual stream x (borrowed). */
mf_tensor *mfi_gpt_block(mf_module *m, int i, mf_tensor *x, bool tr)
{
    gpt_priv *gp = m->priv;
    const mf_module *tf = mf_module_child(m, "transformer"), *hs = mf_module_child(tf, "h");
    blk_ctx *cx = &gp->ctx[i];
    *cx = (blk_ctx){gp, mf_module_child_at(hs, i), tr};
    mf_tensor *a = NULL, *nx = NULL;
    switch (gp->recompute) {
    case MF_RECOMPUTE_BLOCK: nx = mf_recompute(block_fn, cx, 1, &x); break;
    case MF_RECOMPUTE_ATTN:
        a = mf_recompute(attn_sub, cx, 1, &x);
        nx = a ? mlp_sub(cx, 1, &a) : NULL;
        break;
    default:
        a = attn_sub(cx, 1, &x);
        nx = a ? mlp_sub(cx, 1, &a) : NULL;
    }
    mf_tensor_destroy(a);
    return nx;
}

/* Layer n_layer + 1: the final LayerNorm of x (borrowed), laid out for
 * the head. */
mf_tensor *mfi_gpt_final(mf_module *m, mf_tensor *x)
{
    mf_module *f = part(m, "transformer.ln_f");
    return f ? mf_module_output_layout(f, ln(m, "transformer.ln_f", x)) : NULL;
}

/* The layers in turn, each in its own random scope as child k of a
 * Sequential would be, so that a pipeline of the same layers
 * (gpt_pipeline.c) draws the same dropout masks. In the caller's scope. */
static mf_tensor *hidden(mf_module *m, mf_tensor *idx)
{
    const mf_gpt_config *c = mf_gpt_config_of(m);
    const bool tr = mf_module_is_training(m);
    mf_tensor *x = NULL;
    for (int k = 0; k < c->n_layer + 2; k++) {
        mfi_rng_scope saved = mfi_rng_enter(mfi_rng_next_key(), 0);
        mf_tensor *y = k == 0 ? mfi_gpt_embed(m, idx, tr) : k <= c->n_layer ? mfi_gpt_block(m, k - 1, x, tr)
                                                                           : mfi_gpt_final(m, x);
        mfi_rng_leave(saved);
        mf_tensor_destroy(x);
        x = y;
        if (!x) break;
    }
    return x;
}

/* A call from outside a module's forward: its own random scope, as
 * mf_module_forward gives one. */
mf_tensor *mf_gpt_hidden(mf_module *m, mf_tensor *idx)
{
    if (!mf_gpt_config_of(m)) {
        mfi_error(MF_ERR_ARG, "mf_gpt_hidden: the module is not a GPT");
        return NULL;
    }
    mfi_rng_scope saved = mfi_rng_enter(mfi_rng_next_key(), 0);
    mf_tensor *y = hidden(m, idx);
    mfi_rng_leave(saved);
    return y;
}

/* logits [B, T, V]: the head is the token embedding */
static mf_tensor *gpt_forward(mf_module *m, mf_tensor *idx)
{
    mf_tensor *h = hidden(m, idx);
    mf_module *we = h ? part(m, "transformer.wte") : NULL;
    mf_tensor *y = we && mf_module_use_begin(we) == MF_OK ? mf_linear(h, mf_module_param(we, "weight"), NULL) : NULL;
    if (we) mf_module_use_end(we);
    mf_tensor_destroy(h);
    return y;
}

/* The mean next-token cross-entropy of hidden states h [B, T, C]
 * against targets [B, T], through the head weight w (the logits never
 * exist). */
mf_tensor *mfi_gpt_head_loss(mf_tensor *h, mf_tensor *w, mf_tensor *targets, mf_reduction r)
{
    if (mfi_check_input("mf_gpt_loss", "targets", targets) != MF_OK) return NULL;
    const int64_t *s = mf_tensor_shape(h);
    mf_tensor *h2 = mf_reshape(h, 2, (const int64_t[]){s[0] * s[1], s[2]});
    mf_tensor *t1 = h2 ? mf_reshape(targets, 1, (const int64_t[]){s[0] * s[1]}) : NULL;
    mf_tensor *loss = t1 ? mf_linear_cross_entropy(h2, w, t1, r) : NULL;
    mf_tensor_destroy(h2);
    mf_tensor_destroy(t1);
    return loss;
}

mf_tensor *mf_gpt_loss(mf_module *m, mf_tensor *idx, mf_tensor *targets)
{
    mf_tensor *h = mf_gpt_hidden(m, idx);
    mf_module *we = h ? part(m, "transformer.wte") : NULL;
    mf_tensor *loss = we && mf_module_use_begin(we) == MF_OK
                          ? mfi_gpt_head_loss(h, mf_module_param(we, "weight"), targets, MF_REDUCTION_MEAN) : NULL;
    if (we) mf_module_use_end(we);
    mf_tensor_destroy(h);
    return loss;
}

/* ------------------------------------------------------ initialisation */
static mf_status init_rec(mf_module *m, const char *prefix, uint64_t seed, double proj_std)
{
    for (int i = 0; i < m->nparams; i++) {
        char name[256];
        mfi_join_name(prefix, m->params[i].name, name, sizeof name);
        mf_tensor *t = m->params[i].t;
        bool is_ln = !strcmp(mf_module_type(m), "LayerNorm"), bias = !strcmp(m->params[i].name, "bias");
        size_t n = strlen(name);
        bool proj = n > 13 && !strcmp(name + n - 13, "c_proj.weight");
        if (bias) MF_TRY(mf_fill_(t, 0.0));
        else if (is_ln) MF_TRY(mf_fill_(t, 1.0));
        else MF_TRY(mf_normal_keyed_(t, 0.0, proj ? proj_std : 0.02, seed, name));
    }
    for (int i = 0; i < m->nchildren; i++) {
        char sub[256];
        MF_TRY(init_rec(m->children[i].m, mfi_join_name(prefix, m->children[i].name, sub, sizeof sub), seed, proj_std));
    }
    return MF_OK;
}

static mf_status gpt_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    const gpt_priv *p = m->priv;
    return init_rec(m, prefix, seed, 0.02 / sqrt(2.0 * p->c.n_layer));
}

static void gpt_describe(const mf_module *m, char *buf, size_t size)
{
    const gpt_priv *p = m->priv;
    snprintf(buf, size, "n_layer=%d, n_head=%d, n_embd=%d, seq_len=%d, vocab_size=%d, dropout=%g", p->c.n_layer,
             p->c.n_head, p->c.n_embd, p->c.seq_len, p->c.vocab_size, p->c.dropout);
}

static void gpt_destroy(mf_module *m)
{
    gpt_priv *p = m->priv;
    mf_module_destroy(p->par.layers);
    mf_tensor_destroy(p->par.head);
    free(p->ctx);
}

static const mf_module_ops gpt_ops = {"GPT", gpt_forward, gpt_reset, gpt_destroy, gpt_describe};

mf_module *mf_model_gpt(const mf_gpt_config *c)
{
    if (!c || c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 || c->n_embd % c->n_head || c->seq_len < 1 ||
        c->vocab_size < 2 || !(c->dropout >= 0 && c->dropout < 1)) {
        if (!c) mfi_error(MF_ERR_ARG, "mf_model_gpt: no configuration");
        else
            mfi_error(MF_ERR_ARG, "mf_model_gpt: n_layer %d, n_head %d, n_embd %d, seq_len %d, vocab_size %d, dropout %g: "
                      "need positive sizes, n_embd divisible by n_head, vocab_size >= 2 and dropout in [0, 1)",
                      c->n_layer, c->n_head, c->n_embd, c->seq_len, c->vocab_size, c->dropout);
        return NULL;
    }
    mf_module *root = mfi_module_new(&gpt_ops, sizeof(gpt_priv));
    if (!root) return NULL;
    ((gpt_priv *)root->priv)->c = *c;
    ((gpt_priv *)root->priv)->par.tp_dim = -1;
    if (!(((gpt_priv *)root->priv)->ctx = calloc((size_t)c->n_layer, sizeof(blk_ctx)))) {
        mf_module_destroy(root);
        mfi_error(MF_ERR_NOMEM, "mf_model_gpt: out of memory");
        return NULL;
    }
    const int64_t C = c->n_embd;
    mf_module *tf = holder(H_TRANS), *wte = holder(H_EMB), *wpe = holder(H_EMB), *hs = holder(H_LIST);
    mf_status st = tf && wte && wpe && hs ? MF_OK : mf_last_status();
    if (st == MF_OK) st = param(wte, "weight", 2, c->vocab_size, C);
    if (st == MF_OK) st = param(wpe, "weight", 2, c->seq_len, C);
    for (int i = 0; st == MF_OK && i < c->n_layer; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "%d", i);
        st = add(hs, nm, block(C));
    }
    mf_module *parts[] = {wte, wpe, hs};
    const char *names[] = {"wte", "wpe", "h"};
    for (int i = 0; i < 3; i++) {
        if (st == MF_OK) st = add(tf, names[i], parts[i]);
        else mf_module_destroy(parts[i]);
    }
    if (st == MF_OK) st = add_ln(tf, "ln_f", C);
    if (st == MF_OK) st = add(root, "transformer", tf);
    else mf_module_destroy(tf);
    if (st == MF_OK) st = mf_module_reset_parameters(root, mf_seed());
    if (st != MF_OK) {
        mf_module_destroy(root);
        return NULL;
    }
    return root;
}
