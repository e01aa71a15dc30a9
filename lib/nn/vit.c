/*
 * lib/nn/vit.c - a small vision transformer (doc/models.md, "ViT"),
 * written with the public API only: patches of the image embedded by a
 * Conv2d whose kernel is the patch, a learned position embedding,
 * pre-LayerNorm blocks of multi-head self-attention and a GELU MLP, then
 * a LayerNorm, the mean over the patches and a Linear head.
 *
 * Every part is a module run by mf_module_forward, so a plan reaches all
 * of them by name (patch, block0.attn.q, head.fc, ...): ZeRO-2/3
 * gathers each Linear's parameters for its own forward, recompute takes
 * any block, and the model is a Sequential of patch, block0.. and head
 * that a pipeline cuts between blocks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"
#include "base/error.h"   /* mfi_error, for a bad configuration */

typedef struct attn_priv { int heads; } attn_priv;

/* ------------------------------------------------------------ patches */
static mf_tensor *patch_forward(mf_module *m, mf_tensor *x)
{
    mf_tensor *y = mf_module_forward(mf_module_child(m, "proj"), x);   /* [B, D, h, w] */
    mf_tensor *f = y ? mf_flatten(y, 2, 3) : NULL;                      /* [B, D, N] */
    mf_tensor *t = f ? mf_transpose(f, 1, 2) : NULL;                    /* [B, N, D] */
    mf_tensor *z = t ? mf_add(t, mf_module_param(m, "pos")) : NULL;
    mf_tensor_destroy(y);
    mf_tensor_destroy(f);
    mf_tensor_destroy(t);
    return z;
}

static mf_status patch_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    char key[256];
    snprintf(key, sizeof key, "%s%spos", prefix, *prefix ? "." : "");
    return mf_normal_keyed_(mf_module_param(m, "pos"), 0.0, 0.02, seed, key);
}

static const mf_module_ops patch_ops = {"PatchEmbedding", patch_forward, patch_reset, NULL, NULL};

/* ---------------------------------------------------------- attention */
/* the heads of x [B, N, D] as [B, H, N, d]: with the projection split
 * over its output features (tensor parallel), whole heads on each rank */
static mf_tensor *heads_of(mf_tensor *x, int64_t H)
{
    const int64_t *s = mf_tensor_shape(x);
    mf_tensor *r = mf_reshape(x, 4, (const int64_t[]){s[0], s[1], H, s[2] / H});
    mf_tensor *p = r ? mf_permute(r, (const int[]){0, 2, 1, 3}) : NULL;
    mf_tensor_destroy(r);
    return p;
}

static mf_tensor *project_heads(mf_module *m, const char *name, mf_tensor *x, int64_t H)
{
    mf_tensor *y = mf_module_forward(mf_module_child(m, name), x), *h = y ? heads_of(y, H) : NULL;
    mf_tensor_destroy(y);
    return h;
}

static mf_tensor *attn_forward(mf_module *m, mf_tensor *x)
{
    const int H = ((const attn_priv *)mf_module_priv(m))->heads;
    const int64_t *xs = mf_tensor_shape(x), B = xs[0], N = xs[1], D = xs[2], d = D / H;
    mf_tensor *q = project_heads(m, "q", x, H), *k = q ? project_heads(m, "k", x, H) : NULL;
    mf_tensor *v = k ? project_heads(m, "v", x, H) : NULL;
    mf_tensor *s = v ? mf_matmul_t(q, k, false, true) : NULL;           /* [B, H, N, N] */
    mf_tensor *ss = s ? mf_scale(s, 1.0 / sqrt((double)d)) : NULL;
    mf_tensor *a = ss ? mf_softmax(ss, 3) : NULL;
    mf_tensor *o = a ? mf_matmul(a, v) : NULL;                          /* [B, H, N, d] */
    mf_tensor *t = o ? mf_permute(o, (const int[]){0, 2, 1, 3}) : NULL;
    mf_tensor *c = t ? mf_reshape(t, 3, (const int64_t[]){B, N, D}) : NULL;
    mf_tensor *y = c ? mf_module_forward(mf_module_child(m, "proj"), c) : NULL;
    mf_tensor *tmp[] = {q, k, v, s, ss, a, o, t, c};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) mf_tensor_destroy(tmp[i]);
    return y;
}

static void attn_describe(const mf_module *m, char *buf, size_t size)
{
    snprintf(buf, size, "heads=%d", ((const attn_priv *)mf_module_priv(m))->heads);
}

static void free_priv(mf_module *m) { free(mf_module_priv(m)); }

static const mf_module_ops attn_ops = {"SelfAttention", attn_forward, NULL, free_priv, attn_describe};

/* -------------------------------------------------------------- block */
/* x + f(norm(x)) */
static mf_tensor *residual(mf_module *norm, mf_module *f, mf_tensor *x)
{
    mf_tensor *h = mf_module_forward(norm, x), *y = h ? mf_module_forward(f, h) : NULL, *r = y ? mf_add(x, y) : NULL;
    mf_tensor_destroy(h);
    mf_tensor_destroy(y);
    return r;
}

static mf_tensor *block_forward(mf_module *m, mf_tensor *x)
{
    mf_tensor *a = residual(mf_module_child(m, "ln_1"), mf_module_child(m, "attn"), x);
    mf_tensor *y = a ? residual(mf_module_child(m, "ln_2"), mf_module_child(m, "mlp"), a) : NULL;
    mf_tensor_destroy(a);
    return y;
}

static const mf_module_ops block_ops = {"ViTBlock", block_forward, NULL, NULL, NULL};

/* --------------------------------------------------------------- head */
static mf_tensor *head_forward(mf_module *m, mf_tensor *x)
{
    mf_tensor *h = mf_module_forward(mf_module_child(m, "ln"), x);
    mf_tensor *p = h ? mf_mean(h, 1, (const int[]){1}, false) : NULL;   /* [B, D]: the mean over patches */
    mf_tensor *y = p ? mf_module_forward(mf_module_child(m, "fc"), p) : NULL;
    mf_tensor_destroy(h);
    mf_tensor_destroy(p);
    return y;
}

static const mf_module_ops head_ops = {"ViTHead", head_forward, NULL, NULL, NULL};

/* ------------------------------------------------------------ builder */
/* adds child to m under name; takes child, even on a failure */
static mf_status add(mf_module *m, const char *name, mf_module *child) { return mf_module_add_child(m, name, child); }

static mf_module *ln(int64_t D) { return mf_layer_norm_create(1, (const int64_t[]){D}); }

static mf_module *block(const mf_vit_config *c)
{
    attn_priv *ap = malloc(sizeof *ap);
    mf_module *b = mf_module_create(&block_ops, NULL), *a = ap ? mf_module_create(&attn_ops, ap) : NULL;
    mf_module *mlp = mf_sequential_create();
    if (!a) free(ap);
    else ap->heads = c->heads;
    mf_status st = b && a && mlp ? MF_OK : MF_ERR_NOMEM;
    for (int i = 0; i < 3 && st == MF_OK; i++) st = add(a, (const char *[]){"q", "k", "v"}[i], mf_linear_create(c->dim, c->dim, true));
    if (st == MF_OK) st = add(a, "proj", mf_linear_create(c->dim, c->dim, true));
    if (st == MF_OK) st = mf_sequential_add(mlp, "fc", mf_linear_create(c->dim, c->mlp_dim, true));
    if (st == MF_OK) st = mf_sequential_add(mlp, "gelu", mf_gelu_create());
    if (st == MF_OK) st = mf_sequential_add(mlp, "proj", mf_linear_create(c->mlp_dim, c->dim, true));
    if (st == MF_OK) st = add(b, "ln_1", ln(c->dim));
    if (st == MF_OK) {
        st = add(b, "attn", a);
        a = NULL;
    }
    if (st == MF_OK) st = add(b, "ln_2", ln(c->dim));
    if (st == MF_OK) {
        st = add(b, "mlp", mlp);
        mlp = NULL;
    }
    mf_module_destroy(a);
    mf_module_destroy(mlp);
    if (st != MF_OK) {
        mf_module_destroy(b);
        return NULL;
    }
    return b;
}

mf_module *mf_model_vit(const mf_vit_config *c)
{
    if (!c || c->patch < 1 || c->image % c->patch || c->channels < 1 || c->dim < 1 || c->heads < 1 ||
        c->dim % c->heads || c->depth < 1 || c->mlp_dim < 1 || c->classes < 1) {
        mfi_error(MF_ERR_ARG, "mf_model_vit: image %d, patch %d, channels %d, dim %d, heads %d, depth %d, mlp_dim %d, "
                     "classes %d: the patch must divide the image and the heads the width", c ? c->image : 0,
                     c ? c->patch : 0, c ? c->channels : 0, c ? c->dim : 0, c ? c->heads : 0, c ? c->depth : 0,
                     c ? c->mlp_dim : 0, c ? c->classes : 0);
        return NULL;
    }
    const int64_t n = (int64_t)(c->image / c->patch) * (c->image / c->patch);
    mf_module *seq = mf_sequential_create(), *patch = mf_module_create(&patch_ops, NULL);
    mf_module *head = mf_module_create(&head_ops, NULL);
    mf_tensor *pos = mf_zeros(MF_F32, 2, (const int64_t[]){n, c->dim});
    mf_status st = seq && patch && head && pos ? MF_OK : MF_ERR_NOMEM;
    if (st == MF_OK) st = mf_tensor_set_requires_grad(pos, true);
    if (st == MF_OK) st = mf_module_register_parameter(patch, "pos", pos);
    if (st == MF_OK) st = add(patch, "proj", mf_conv2d_create(c->channels, c->dim, c->patch, c->patch, 0));
    if (st == MF_OK) {
        st = mf_sequential_add(seq, "patch", patch);
        patch = NULL;
    }
    for (int i = 0; st == MF_OK && i < c->depth; i++) {
        char name[32];
        snprintf(name, sizeof name, "block%d", i);
        st = mf_sequential_add(seq, name, block(c));
    }
    if (st == MF_OK) st = add(head, "ln", ln(c->dim));
    if (st == MF_OK) st = add(head, "fc", mf_linear_create(c->dim, c->classes, true));
    if (st == MF_OK) {
        st = mf_sequential_add(seq, "head", head);
        head = NULL;
    }
    if (st == MF_OK) st = mf_module_reset_parameters(seq, mf_seed());
    mf_tensor_destroy(pos);
    mf_module_destroy(patch);
    mf_module_destroy(head);
    if (st != MF_OK) {
        mf_module_destroy(seq);
        return NULL;
    }
    return seq;
}

mf_status mf_vit_add_megatron_rules(mf_plan *plan, const char *tp, bool sequence_parallel)
{
    static const char *const rules[][2] = {{"*.attn.q.*", "S(0)"},     {"*.attn.k.*", "S(0)"},
                                           {"*.attn.v.*", "S(0)"},     {"*.attn.proj.weight", "S(1)"},
                                           {"*.mlp.fc.*", "S(0)"},     {"*.mlp.proj.weight", "S(1)"}};
    char sbp[64], b[64], res[64];
    mf_status st = MF_OK;
    for (size_t i = 0; i < sizeof rules / sizeof *rules && st == MF_OK; i++) {
        snprintf(sbp, sizeof sbp, "%s=%s", tp ? tp : "tp", rules[i][1]);
        st = mf_plan_add_rule(plan, rules[i][0], sbp);
    }
    snprintf(b, sizeof b, "%s=B", tp ? tp : "tp");
    snprintf(res, sizeof res, "%s=%s", tp ? tp : "tp", sequence_parallel ? "S(1)" : "B");
    if (st == MF_OK) st = mf_plan_add_activation(plan, "patch", true, res);
    if (st == MF_OK) st = mf_plan_add_activation(plan, "block*.attn", false, b);
    if (st == MF_OK) st = mf_plan_add_activation(plan, "block*.attn", true, res);
    if (st == MF_OK) st = mf_plan_add_activation(plan, "block*.mlp", false, b);
    if (st == MF_OK) st = mf_plan_add_activation(plan, "block*.mlp", true, res);
    if (st == MF_OK) st = mf_plan_add_activation(plan, "head", false, b);
    return st;
}

static int heads_under(const mf_module *m)
{
    if (!strcmp(mf_module_type(m), "SelfAttention")) return ((const attn_priv *)mf_module_priv(m))->heads;
    for (int i = 0; i < mf_module_num_children(m); i++) {
        int h = heads_under(mf_module_child_at(m, i));
        if (h > 0) return h;
    }
    return -1;
}

int mf_vit_heads(const mf_module *vit) { return vit ? heads_under(vit) : -1; }
