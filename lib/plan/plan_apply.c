/*
 * lib/plan/plan_apply.c - a plan applied to a model (doc/plans.md): the
 * stage's placement, each parameter's SBP by the first rule that matches
 * its name (then ZeRO-2/3's split along the ZeRO dimension), and the
 * printed form that says which rule gave what.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"   /* mfi_join_name */
#include "lib/plan/plan_internal.h"

static void mesh_str(const mf_plan *p, int nranks, char *buf, size_t size)
{
    size_t k = 0;
    for (int d = 0; d < p->ndim && k < size; d++) {
        int s = mf_plan_mesh_size(p, d, nranks);
        k += (size_t)snprintf(buf + k, size - k, "%s%s=", d ? " x " : "", p->names[d]);
        if (k >= size) break;
        k += (size_t)(s > 0 ? snprintf(buf + k, size - k, "%d", s)
                            : p->sizes[d] > 0 ? snprintf(buf + k, size - k, "%d", p->sizes[d])
                                              : snprintf(buf + k, size - k, "?"));
    }
}

mf_placement *mf_plan_placement(const mf_plan *p, int first, int nranks, mf_device_type dev)
{
    if (!p || nranks < 1 || first < 0) {
        mfi_error(MF_ERR_ARG, "mf_plan_placement: no plan, or ranks %d .. %d", first, first + nranks - 1);
        return NULL;
    }
    int mesh[MF_MAX_MESH];
    for (int d = 0; d < p->ndim; d++) {
        mesh[d] = mf_plan_mesh_size(p, d, nranks);
        if (mesh[d] < 1) {
            char m[200];
            mesh_str(p, nranks, m, sizeof m);
            mfi_error(MF_ERR_ARG, "the plan's mesh %s does not fit %d ranks%s", m, nranks,
                      p->stages > 1 ? " (the ranks of one pipeline stage)" : "");
            return NULL;
        }
    }
    int *ranks = malloc((size_t)nranks * sizeof *ranks);
    if (!ranks) {
        mfi_error(MF_ERR_NOMEM, "mf_plan_placement: out of memory");
        return NULL;
    }
    for (int i = 0; i < nranks; i++) ranks[i] = first + i;
    mf_placement *pl = mf_placement_create(nranks, ranks, p->ndim, mesh, dev);
    free(ranks);
    return pl;
}

/* the first rule that matches name, or -1 */
static int rule_of(const mf_plan *p, const char *name)
{
    for (int i = 0; i < p->nrules; i++)
        if (mf_plan_match(p->rules[i].pattern, name)) return i;
    return -1;
}

/* mf_plan_param_sbp, with ZeRO's split only when zero (not for buffers) */
static mf_status param_sbp(const mf_plan *p, const mf_placement *pl, const char *name, int ndim, const int64_t *shape,
                           bool zero, char *sbp, size_t size, int *rule)
{
    if (!p || !pl || !name || !sbp || (ndim > 0 && !shape)) MF_FAIL(MF_ERR_ARG, "mf_plan_param_sbp: NULL argument");
    if (mf_placement_mesh_ndim(pl) != p->ndim)
        MF_FAIL(MF_ERR_ARG, "mf_plan_param_sbp: the placement has %d mesh dimensions, the plan %d",
                mf_placement_mesh_ndim(pl), p->ndim);
    int r = rule_of(p, name);
    if (rule) *rule = r;
    mf_nd_sbp s;
    if (r >= 0) {
        if (mfi_plan_resolve(p, p->rules[r].sbp, &s) != MF_OK)
            return mfi_error_context("plan rule %d (\"%s\")", r, p->rules[r].pattern);
    } else {
        memset(&s, 0, sizeof s);
        s.ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) s.d[d].kind = MF_SBP_B;
    }
    /* a rule's splits may be uneven (balanced pieces, doc/global-tensors.md)
     * but must leave every rank a piece */
    int64_t parts[MF_MAX_DIMS];
    for (int a = 0; a < MF_MAX_DIMS; a++) parts[a] = 1;
    for (int d = 0; d < p->ndim; d++) {
        if (s.d[d].kind == MF_SBP_P)
            MF_FAIL(MF_ERR_ARG, "plan rule %d (\"%s\") makes parameter %s P (a partial sum) along '%s': parameters are "
                    "B or S", r, p->rules[r].pattern, name, p->names[d]);
        if (s.d[d].kind != MF_SBP_S) continue;
        int a = s.d[d].axis;
        if (a >= ndim)
            MF_FAIL(MF_ERR_ARG, "plan rule %d (\"%s\") splits axis %d of parameter %s, which has %d", r,
                    p->rules[r].pattern, a, name, ndim);
        parts[a] *= mf_placement_mesh_dim(pl, d);
        if (shape[a] < parts[a])
            MF_FAIL(MF_ERR_ARG, "plan rule %d (\"%s\") splits axis %d of parameter %s (size %lld) %lld ways along "
                    "'%s': some ranks would hold none of it", r, p->rules[r].pattern, a, name, (long long)shape[a],
                    (long long)parts[a], p->names[d]);
    }
    /* ZeRO-2/3: B along the ZeRO dimension becomes a split of the largest
     * axis nothing else splits, if every rank gets some of it */
    int zd = mf_plan_zero_dim(p);
    if (zero && p->zero >= 2 && zd >= 0 && s.d[zd].kind == MF_SBP_B) {
        int best = -1;
        for (int a = 0; a < ndim; a++)
            if (parts[a] == 1 && (best < 0 || shape[a] > shape[best])) best = a;
        if (best >= 0 && shape[best] >= mf_placement_mesh_dim(pl, zd)) {
            s.d[zd].kind = MF_SBP_S;
            s.d[zd].axis = best;
        }
    }
    mf_nd_sbp_str(&s, sbp, size);
    return MF_OK;
}

mf_status mf_plan_param_sbp(const mf_plan *p, const mf_placement *pl, const char *name, int ndim, const int64_t *shape,
                            char *sbp, size_t size, int *rule)
{
    return param_sbp(p, pl, name, ndim, shape, true, sbp, size, rule);
}

mf_status mfi_plan_place(const mf_plan *p, mf_module *model, const mf_placement *pl, const char *name)
{
    mf_tensor *t = mf_module_get(model, name);
    if (!t) MF_FAIL(MF_ERR_ARG, "the model has no parameter or buffer '%s'", name);
    const bool param = mfi_module_is_param(model, name);
    char sbp[128];
    MF_TRY(param_sbp(p, pl, name, mf_tensor_ndim(t), mf_tensor_shape(t), param, sbp, sizeof sbp, NULL));
    return mfi_module_place(model, name, pl, sbp, param ? p->zero : 0, mf_plan_zero_dim(p));
}

/* the top-level child a dotted name is under (-1: the root's own) */
static int child_of(const mf_module *model, const char *name)
{
    const char *dot = strchr(name, '.');
    if (!dot || (size_t)(dot - name) >= 256) return -1;
    char head[256];
    memcpy(head, name, (size_t)(dot - name));
    head[dot - name] = 0;
    mf_module *c = mf_module_child(model, head);
    for (int i = 0; c && i < mf_module_num_children(model); i++)
        if (mf_module_child_at(model, i) == c) return i;
    return -1;
}

mf_status mf_plan_check_rules(const mf_plan *p, const mf_module *model)
{
    if (!p || !model) MF_FAIL(MF_ERR_ARG, "mf_plan_check_rules: NULL argument");
    MF_TRY(mfi_plan_check(p, "the plan"));
    mf_tensor_list *l = mf_module_state_dict(model);
    if (!l) return mf_last_status();
    int *used = calloc((size_t)p->nrules + 1, sizeof *used);   /* first matches */
    mf_status st = used ? MF_OK : mfi_error(MF_ERR_NOMEM, "mf_plan_check_rules: out of memory");
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        int r = rule_of(p, l->items[i].name);
        if (r >= 0) used[r]++;
    }
    for (int r = 0; r < p->nrules && st == MF_OK; r++) {
        if (used[r]) continue;
        int shadow = -1;   /* a parameter it matches, that an earlier rule took */
        for (int i = 0; i < l->n && shadow < 0; i++)
            if (mf_plan_match(p->rules[r].pattern, l->items[i].name)) shadow = i;
        if (shadow >= 0)
            st = mfi_error(MF_ERR_ARG, "plan rule %d (\"%s\" -> %s) never applies: rule %d takes %s first (the first "
                           "rule that matches wins)", r, p->rules[r].pattern, p->rules[r].sbp,
                           rule_of(p, l->items[shadow].name), l->items[shadow].name);
        else
            st = mfi_error(MF_ERR_ARG, "plan rule %d (\"%s\" -> %s) matches no parameter of the model (a pattern "
                           "matches the whole dotted name, such as \"%s\"; '*' is any run of characters)", r,
                           p->rules[r].pattern, p->rules[r].sbp, l->n ? l->items[0].name : "weight");
    }
    free(used);
    mf_tensor_list_destroy(l);
    return st;
}

/* every parameter and buffer under children c0 .. c1-1 (and the root's
 * own with all_root) global on pl by the rules */
static mf_status apply_range(const mf_plan *p, mf_module *model, int c0, int c1, bool root, const mf_placement *pl)
{
    mf_tensor_list *l = mf_module_state_dict(model);
    if (!l) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        mf_tensor *t = l->items[i].tensor;
        int c = child_of(model, l->items[i].name);
        if (mf_tensor_is_global(t) || (c < 0 ? !root : c < c0 || c >= c1)) continue;
        st = mfi_plan_place(p, model, pl, l->items[i].name);
    }
    mf_tensor_list_destroy(l);
    return st;
}

mf_status mf_plan_apply(const mf_plan *p, mf_module *model, const mf_placement *pl)
{
    if (!p || !model || !pl) MF_FAIL(MF_ERR_ARG, "mf_plan_apply: NULL argument");
    MF_TRY(mf_plan_check_rules(p, model));
    MF_TRY(apply_range(p, model, 0, mf_module_num_children(model), true, pl));
    return mf_plan_apply_activations(p, model);
}

mf_status mf_plan_apply_pipeline(const mf_plan *p, mf_module *seq, int nstages, const int *first,
                                 mf_placement *const *stages)
{
    if (!p || !seq || !first || !stages || nstages < 1) MF_FAIL(MF_ERR_ARG, "mf_plan_apply_pipeline: NULL argument");
    MF_TRY(mf_plan_check_rules(p, seq));
    for (int s = 0; s < nstages; s++)
        if (apply_range(p, seq, first[s], first[s + 1], s == 0, stages[s]) != MF_OK)
            return mfi_error_context("pipeline stage %d", s);
    return mf_plan_apply_activations(p, seq);
}

/* marks the modules under m (dotted name prefix) that match a recompute
 * pattern; counts each pattern's matches */
static mf_status mark_recompute(const mf_plan *p, mf_module *m, const char *prefix, bool under, int *hits)
{
    for (int i = 0; i < mf_module_num_children(m); i++) {
        char name[512];
        mfi_join_name(prefix, mf_module_child_name(m, i), name, sizeof name);
        mf_module *c = mf_module_child_at(m, i);
        bool on = false;
        for (int k = 0; k < p->nrecompute; k++)
            if (mf_plan_match(p->recompute[k], name)) on = true, hits[k]++;
        /* a module inside a recomputed one is run again with it already */
        if (on && !under) MF_TRY(mf_module_set_recompute(c, true));
        MF_TRY(mark_recompute(p, c, name, under || on, hits));
    }
    return MF_OK;
}

mf_status mf_plan_apply_recompute(const mf_plan *p, mf_module *model)
{
    if (!p || !model) MF_FAIL(MF_ERR_ARG, "mf_plan_apply_recompute: NULL argument");
    if (!p->nrecompute) return MF_OK;
    int *hits = calloc((size_t)p->nrecompute, sizeof *hits);
    if (!hits) MF_FAIL(MF_ERR_NOMEM, "mf_plan_apply_recompute: out of memory");
    mf_status st = mark_recompute(p, model, "", false, hits);
    for (int k = 0; k < p->nrecompute && st == MF_OK; k++)
        if (!hits[k]) {
            char names[300] = "";
            for (int i = 0; i < mf_module_num_children(model); i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                         mf_module_child_name(model, i));
            st = mfi_error(MF_ERR_ARG, "recompute pattern \"%s\" matches no module of the model (its modules are "
                           "dotted names: %s, ...)", p->recompute[k], names);
        }
    free(hits);
    return st;
}

/* sets the layouts of the modules under m (dotted name prefix) that
 * match an activation pattern; counts each pattern's matches */
static mf_status mark_layouts(const mf_plan *p, mf_module *m, const char *prefix, int *hits)
{
    for (int i = 0; i < mf_module_num_children(m); i++) {
        char name[512];
        mfi_join_name(prefix, mf_module_child_name(m, i), name, sizeof name);
        mf_module *c = mf_module_child_at(m, i);
        for (int k = 0; k < p->nacts; k++) {
            if (!mf_plan_match(p->acts[k].module, name)) continue;
            mf_nd_sbp s;
            bool given[MF_MAX_MESH];
            if (mfi_plan_resolve_given(p, p->acts[k].sbp, &s, given) != MF_OK)
                return mfi_error_context("activations[%d] (\"%s\")", k, p->acts[k].module);
            MF_TRY(mfi_module_set_layout(c, p->acts[k].output, &s, given));
            hits[k]++;
        }
        MF_TRY(mark_layouts(p, c, name, hits));
    }
    return MF_OK;
}

mf_status mf_plan_apply_activations(const mf_plan *p, mf_module *model)
{
    if (!p || !model) MF_FAIL(MF_ERR_ARG, "mf_plan_apply_activations: NULL argument");
    if (!p->nacts) return MF_OK;
    int *hits = calloc((size_t)p->nacts, sizeof *hits);
    if (!hits) MF_FAIL(MF_ERR_NOMEM, "mf_plan_apply_activations: out of memory");
    mf_status st = mark_layouts(p, model, "", hits);
    for (int k = 0; k < p->nacts && st == MF_OK; k++)
        if (!hits[k])
            st = mfi_error(MF_ERR_ARG, "activation layout %d (module \"%s\") matches no module of the model", k,
                           p->acts[k].module);
    free(hits);
    return st;
}

/* the dotted names of the modules under m that match pattern (with
 * outermost, not those inside one that does), joined into buf
 * (truncated with "..."), and their count */
static void modules_matching(const mf_module *m, const char *prefix, const char *pattern, bool outermost, char *buf,
                             size_t size, int *hits)
{
    for (int i = 0; i < mf_module_num_children(m); i++) {
        char name[512];
        mfi_join_name(prefix, mf_module_child_name(m, i), name, sizeof name);
        if (mf_plan_match(pattern, name)) {
            size_t k = strlen(buf);
            if (k + strlen(name) + 8 < size) snprintf(buf + k, size - k, "%s%s", k ? " " : "", name);
            else if (k + 4 < size && !strstr(buf, "...")) snprintf(buf + k, size - k, " ...");
            (*hits)++;
            if (outermost) continue;
        }
        modules_matching(mf_module_child_at(m, i), name, pattern, outermost, buf, size, hits);
    }
}

mf_status mf_plan_print(const mf_plan *p, const mf_module *model, const mf_placement *pl, FILE *f)
{
    if (!p || !model || !pl || !f) MF_FAIL(MF_ERR_ARG, "mf_plan_print: NULL argument");
    char m[200], data[64];
    mesh_str(p, mf_placement_size(pl), m, sizeof m);
    MF_TRY(mf_plan_data_sbp(p, data, sizeof data));
    fprintf(f, "plan: mesh %s (%d ranks", m, mf_placement_size(pl));
    if (p->stages > 1) fprintf(f, " per stage, %d stages", p->stages);
    fprintf(f, "), data %s", data);
    if (p->zero) fprintf(f, ", ZeRO-%d over %s", p->zero, p->zero_dim);
    fputc('\n', f);
    mf_tensor_list *l = mf_module_state_dict(model);
    if (!l) return mf_last_status();
    size_t w = 9;
    for (int i = 0; i < l->n; i++)
        if (strlen(l->items[i].name) > w) w = strlen(l->items[i].name);
    fprintf(f, "  %-*s  %-16s  %-14s  %s\n", (int)w, "parameter", "shape", "sbp", "from");
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        mf_tensor *t = l->items[i].tensor;
        char shape[64] = "[", sbp[128];
        for (int a = 0; a < mf_tensor_ndim(t); a++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", a ? ", " : "", (long long)mf_tensor_shape(t)[a]);
        strcat(shape, "]");
        int r;
        st = mf_plan_param_sbp(p, pl, l->items[i].name, mf_tensor_ndim(t), mf_tensor_shape(t), sbp, sizeof sbp, &r);
        if (st != MF_OK) break;
        char from[300];
        if (r >= 0) snprintf(from, sizeof from, "rule %d \"%s\"", r, p->rules[r].pattern);
        else snprintf(from, sizeof from, "no rule (B)");
        int zd = mf_plan_zero_dim(p);
        mf_nd_sbp got;
        if (p->zero >= 2 && zd >= 0 && mf_nd_sbp_parse(sbp, &got) == MF_OK && got.d[zd].kind == MF_SBP_S) {
            mf_nd_sbp ruled;
            bool split_by_rule = r >= 0 && mfi_plan_resolve(p, p->rules[r].sbp, &ruled) == MF_OK &&
                                 ruled.d[zd].kind == MF_SBP_S;
            if (!split_by_rule)
                snprintf(from + strlen(from), sizeof from - strlen(from), ", ZeRO-%d on %s", p->zero, p->zero_dim);
        }
        fprintf(f, "  %-*s  %-16s  %-14s  %s%s\n", (int)w, l->items[i].name, shape, sbp, from,
                l->items[i].kind == MF_ENTRY_BUFFER ? " (buffer)" : "");
    }
    mf_tensor_list_destroy(l);
    for (int k = 0; k < p->nacts && st == MF_OK; k++) {
        char names[160] = "";
        int hits = 0;
        modules_matching(model, "", p->acts[k].module, false, names, sizeof names, &hits);
        fprintf(f, "  activation %s %s %s: %d module(s)%s%s\n", p->acts[k].module, p->acts[k].output ? "output" : "input",
                p->acts[k].sbp, hits, hits ? ", " : "", names);
    }
    for (int k = 0; k < p->nrecompute && st == MF_OK; k++) {
        char names[160] = "";
        int hits = 0;
        modules_matching(model, "", p->recompute[k], true, names, sizeof names, &hits);
        fprintf(f, "  recompute %s: %d module(s)%s%s\n", p->recompute[k], hits, hits ? ", " : "", names);
    }
    return st;
}
