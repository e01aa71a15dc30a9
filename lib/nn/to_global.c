/*
 * lib/nn/to_global.c - making a module's parameters and buffers global,
 * like OneFlow's model.to_global(placement, sbp).
 *
 * Each rank holds the whole initial value (initialisation is keyed by
 * name, so it is the same everywhere) and keeps its piece: no
 * communication. Forward then sees global parameters, and every op picks
 * its signature from their SBPs.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

/* the slot holding the parameter or buffer `dotted` */
static mfi_named *slot(mf_module *root, const char *dotted, bool *is_param)
{
    const char *leaf;
    mf_module *m = mfi_module_owner(root, dotted, &leaf);
    for (int i = 0; m && i < m->nparams; i++)
        if (!strcmp(m->params[i].name, leaf)) {
            *is_param = true;
            return &m->params[i];
        }
    for (int i = 0; m && i < m->nbuffers; i++)
        if (!strcmp(m->buffers[i].name, leaf)) {
            *is_param = false;
            return &m->buffers[i];
        }
    return NULL;
}

static mf_status convert(mfi_named *s, bool is_param, const char *dotted, const mf_placement *p, const char *sbp)
{
    mf_tensor *t = s->t;
    if (mf_tensor_is_global(t)) {
        char pl[128], sb[96];
        MF_FAIL(MF_ERR_STATE, "parameter '%s' is already global (%s on %s)", dotted,
                mf_global_sbp_str(t, sb, sizeof sb), mf_placement_str(mf_global_placement(t), pl, sizeof pl));
    }
    mf_nd_sbp s_;
    MF_TRY(mf_nd_sbp_parse(sbp, &s_));
    mf_status st = mf_nd_sbp_check(&s_, p, t->ndim);
    if (st != MF_OK) return mfi_error_context("parameter '%s'", dotted);
    /* a split must give every rank of its mesh dimension a piece */
    int64_t len[MF_MAX_DIMS];
    memcpy(len, t->shape, sizeof len);
    for (int d = 0; d < s_.ndim; d++) {
        if (s_.d[d].kind != MF_SBP_S) continue;
        int a = s_.d[d].axis, n = mf_placement_mesh_dim(p, d);
        if (len[a] < n) {
            char sh[128];
            MF_FAIL(MF_ERR_SHAPE, "parameter '%s' %s: %s splits axis %d of length %lld over %d ranks, which does "
                    "not divide it into non-empty pieces; use B for it or fewer ranks on mesh dimension %d",
                    dotted, mf_tensor_shape_str(t, sh, sizeof sh), sbp, a, (long long)len[a], n, d);
        }
        len[a] = len[a] / n;
    }
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *g = mf_global_from_full(t, p, sbp);
    mf_set_grad_enabled(prev);
    if (!g) return mfi_error_context("parameter '%s'", dotted);
    mf_tensor_set_name(g, mf_tensor_name(t));
    if (is_param && t->requires_grad) st = mf_tensor_set_requires_grad(g, true);
    mf_tensor *l = mf_to_local(g);
    if (l) {
        mf_tensor_set_name(l, mf_tensor_name(t));
        mf_tensor_destroy(l);
    }
    if (st != MF_OK) {
        mf_tensor_destroy(g);
        return st;
    }
    mf_tensor_destroy(s->t);
    s->t = g;
    return MF_OK;
}

mf_status mf_module_param_to_global(mf_module *m, const char *dotted, const mf_placement *p, const char *sbp)
{
    if (!m || !dotted || !p || !sbp) MF_FAIL(MF_ERR_ARG, "mf_module_param_to_global: an argument is NULL");
    bool is_param = false;
    mfi_named *s = slot(m, dotted, &is_param);
    if (!s) MF_FAIL(MF_ERR_ARG, "mf_module_param_to_global: the model has no parameter or buffer '%s'", dotted);
    mf_status st = convert(s, is_param, dotted, p, sbp);
    if (st != MF_OK) mfi_error_context("mf_module_param_to_global");
    return st;
}

bool mfi_module_is_param(mf_module *root, const char *dotted)
{
    bool is_param = false;
    return slot(root, dotted, &is_param) && is_param;
}

mf_status mfi_module_place(mf_module *root, const char *dotted, const mf_placement *p, const char *sbp, int stage,
                           int zd)
{
    MF_TRY(mf_module_param_to_global(root, dotted, p, sbp));
    mf_nd_sbp to;
    if (stage < 2 || zd < 0 || !mfi_module_is_param(root, dotted)) return MF_OK;
    MF_TRY(mf_nd_sbp_parse(sbp, &to));
    if (zd >= to.ndim || to.d[zd].kind != MF_SBP_S) return MF_OK;
    to.d[zd] = (mf_sbp){MF_SBP_B, 0};
    const char *leaf;
    mf_module *m = mfi_module_owner(root, dotted, &leaf);
    for (int i = 0; m && i < m->nparams; i++)
        if (!strcmp(m->params[i].name, leaf)) return mfi_module_set_use(m, i, stage, &to);
    MF_FAIL(MF_ERR_INTERNAL, "placing '%s': no such parameter", dotted);
}

static mf_status all_to_global(mf_module *m, const char *prefix, const mf_placement *p, const char *sbp)
{
    char name[512];
    for (int i = 0; i < m->nparams; i++)
        if (!mf_tensor_is_global(m->params[i].t))
            MF_TRY(convert(&m->params[i], true, mfi_join_name(prefix, m->params[i].name, name, sizeof name), p, sbp));
    for (int i = 0; i < m->nbuffers; i++)
        if (!mf_tensor_is_global(m->buffers[i].t))
            MF_TRY(convert(&m->buffers[i], false, mfi_join_name(prefix, m->buffers[i].name, name, sizeof name), p, sbp));
    for (int i = 0; i < m->nchildren; i++)
        MF_TRY(all_to_global(m->children[i].m, mfi_join_name(prefix, m->children[i].name, name, sizeof name), p, sbp));
    return MF_OK;
}

mf_status mf_module_to_global(mf_module *m, const mf_placement *p, const char *sbp)
{
    if (!m || !p || !sbp) MF_FAIL(MF_ERR_ARG, "mf_module_to_global: an argument is NULL");
    mf_status st = all_to_global(m, "", p, sbp);
    if (st != MF_OK) mfi_error_context("mf_module_to_global");
    return st;
}
