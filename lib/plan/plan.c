/*
 * lib/plan/plan.c - a plan's fields: building one in code, reading them
 * back, resolving its SBP specs against its mesh, and name patterns
 * (doc/plans.md).
 */
#include <stdio.h>
#include "lib/plan/plan_internal.h"

mf_plan *mf_plan_create(void)
{
    mf_plan *p = calloc(1, sizeof *p);
    if (!p) {
        mfi_error(MF_ERR_NOMEM, "mf_plan_create: out of memory");
        return NULL;
    }
    p->ndim = 1;
    snprintf(p->names[0], PLAN_NAME, "dp");
    p->sizes[0] = -1;
    snprintf(p->zero_dim, PLAN_NAME, "dp");
    p->stages = 1;
    snprintf(p->schedule, sizeof p->schedule, "1f1b");
    return p;
}

void mf_plan_destroy(mf_plan *p)
{
    if (!p) return;
    for (int i = 0; i < p->nrules; i++) free(p->rules[i].pattern), free(p->rules[i].sbp);
    for (int i = 0; i < p->nrecompute; i++) free(p->recompute[i]);
    for (int i = 0; i < p->nacts; i++) free(p->acts[i].module), free(p->acts[i].sbp);
    free(p->rules);
    free(p->recompute);
    free(p->acts);
    free(p->data);
    free(p->cuts);
    free(p);
}

static bool valid_dim_name(const char *s)
{
    if (!s || !*s || strlen(s) >= PLAN_NAME) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

mf_status mf_plan_set_mesh(mf_plan *p, int ndim, const char *const *names, const int *sizes)
{
    if (!p || !names || !sizes) MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: NULL argument");
    if (ndim < 1 || ndim > MF_MAX_MESH)
        MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: a mesh of %d dimensions (1 to %d)", ndim, MF_MAX_MESH);
    int rest = 0;
    for (int d = 0; d < ndim; d++) {
        if (!valid_dim_name(names[d]))
            MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: '%s' is not a dimension name (letters, digits and '_', at most "
                    "%d)", names[d] ? names[d] : "(null)", PLAN_NAME - 1);
        for (int e = 0; e < d; e++)
            if (!strcmp(names[d], names[e])) MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: the dimension name '%s' is used twice", names[d]);
        if (sizes[d] == -1) rest++;
        else if (sizes[d] < 1)
            MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: dimension '%s' has size %d (at least 1, or -1 for the rest)",
                    names[d], sizes[d]);
    }
    if (rest > 1) MF_FAIL(MF_ERR_ARG, "mf_plan_set_mesh: only one dimension may have size -1 (the rest)");
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        snprintf(p->names[d], PLAN_NAME, "%s", names[d]);
        p->sizes[d] = sizes[d];
    }
    return MF_OK;
}

/* the spec in its stored form: positional as given, by name checked */
static mf_status check_spec(const char *what, const char *spec)
{
    if (!spec || !*spec) MF_FAIL(MF_ERR_ARG, "%s: an empty SBP", what);
    if (strlen(spec) > 200) MF_FAIL(MF_ERR_ARG, "%s: SBP '%.40s...' is too long", what, spec);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    bool named = strchr(spec, '=') != NULL;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (named != (eq != NULL))
            MF_FAIL(MF_ERR_ARG, "%s: SBP '%s' mixes entries by name (dim=SBP) and by position", what, spec);
        if (eq) {
            *eq = 0;
            if (!valid_dim_name(item)) MF_FAIL(MF_ERR_ARG, "%s: '%s' in SBP '%s' is not a dimension name", what, item, spec);
        }
        mf_nd_sbp one;
        if (mf_nd_sbp_parse(eq ? eq + 1 : item, &one) != MF_OK || one.ndim != 1)
            MF_FAIL(MF_ERR_ARG, "%s: '%s' in SBP '%s' is not B, P or S(axis)", what, eq ? eq + 1 : item, spec);
    }
    return MF_OK;
}

static mf_status dup(const char *what, const char *s, char **out)
{
    *out = strdup(s);
    if (!*out) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    return MF_OK;
}

static mf_status grow(void **arr, int n, size_t size, const char *what)
{
    void *g = realloc(*arr, (size_t)(n + 1) * size);
    if (!g) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", what);
    *arr = g;
    return MF_OK;
}

mf_status mf_plan_add_rule(mf_plan *p, const char *pattern, const char *sbp)
{
    const char *what = "mf_plan_add_rule";
    if (!p || !pattern || !*pattern) MF_FAIL(MF_ERR_ARG, "%s: no plan or an empty pattern", what);
    MF_TRY(check_spec(what, sbp));
    MF_TRY(grow((void **)&p->rules, p->nrules, sizeof *p->rules, what));
    plan_rule r = {NULL, NULL};
    if (dup(what, pattern, &r.pattern) != MF_OK || dup(what, sbp, &r.sbp) != MF_OK) {
        free(r.pattern);
        return mf_last_status();
    }
    p->rules[p->nrules++] = r;
    return MF_OK;
}

mf_status mf_plan_set_zero(mf_plan *p, int stage, const char *dim)
{
    if (!p) MF_FAIL(MF_ERR_ARG, "mf_plan_set_zero: no plan");
    if (stage < 0 || stage > 3) MF_FAIL(MF_ERR_ARG, "mf_plan_set_zero: ZeRO stage %d (0 to 3)", stage);
    if (dim && !valid_dim_name(dim)) MF_FAIL(MF_ERR_ARG, "mf_plan_set_zero: '%s' is not a dimension name", dim);
    p->zero = stage;
    snprintf(p->zero_dim, PLAN_NAME, "%s", dim ? dim : "dp");
    return MF_OK;
}

mf_status mf_plan_add_recompute(mf_plan *p, const char *pattern)
{
    const char *what = "mf_plan_add_recompute";
    if (!p || !pattern || !*pattern) MF_FAIL(MF_ERR_ARG, "%s: no plan or an empty pattern", what);
    MF_TRY(grow((void **)&p->recompute, p->nrecompute, sizeof *p->recompute, what));
    MF_TRY(dup(what, pattern, &p->recompute[p->nrecompute]));
    p->nrecompute++;
    return MF_OK;
}

mf_status mf_plan_add_activation(mf_plan *p, const char *module, bool output, const char *sbp)
{
    const char *what = "mf_plan_add_activation";
    if (!p || !module || !*module) MF_FAIL(MF_ERR_ARG, "%s: no plan or an empty module pattern", what);
    MF_TRY(check_spec(what, sbp));
    MF_TRY(grow((void **)&p->acts, p->nacts, sizeof *p->acts, what));
    plan_act a = {NULL, NULL, output};
    if (dup(what, module, &a.module) != MF_OK || dup(what, sbp, &a.sbp) != MF_OK) {
        free(a.module);
        return mf_last_status();
    }
    p->acts[p->nacts++] = a;
    return MF_OK;
}

mf_status mf_plan_set_data(mf_plan *p, const char *sbp)
{
    if (!p) MF_FAIL(MF_ERR_ARG, "mf_plan_set_data: no plan");
    char *copy = NULL;
    if (sbp) {
        MF_TRY(check_spec("mf_plan_set_data", sbp));
        MF_TRY(dup("mf_plan_set_data", sbp, &copy));
    }
    free(p->data);
    p->data = copy;
    return MF_OK;
}

mf_status mf_plan_set_pipeline(mf_plan *p, int stages, const char *cuts, int micro_batches, const char *schedule)
{
    const char *what = "mf_plan_set_pipeline";
    if (!p) MF_FAIL(MF_ERR_ARG, "%s: no plan", what);
    if (stages < 1 || stages > MF_MAX_STAGES) MF_FAIL(MF_ERR_ARG, "%s: %d stages (1 to %d)", what, stages, MF_MAX_STAGES);
    if (micro_batches < 0) MF_FAIL(MF_ERR_ARG, "%s: %d micro-batches", what, micro_batches);
    mf_pipeline_schedule s;
    if (schedule) MF_TRY(mf_pipeline_schedule_parse(schedule, &s));
    char *copy = NULL;
    if (cuts && *cuts) MF_TRY(dup(what, cuts, &copy));
    free(p->cuts);
    p->cuts = copy;
    p->stages = stages;
    p->micro_batches = micro_batches;
    snprintf(p->schedule, sizeof p->schedule, "%s", schedule ? schedule : "1f1b");
    return MF_OK;
}

/* ------------------------------------------------------------ reading */
int mf_plan_mesh_ndim(const mf_plan *p) { return p ? p->ndim : 0; }
const char *mf_plan_mesh_name(const mf_plan *p, int d) { return p && d >= 0 && d < p->ndim ? p->names[d] : NULL; }
int mf_plan_zero_stage(const mf_plan *p) { return p ? p->zero : 0; }
int mf_plan_zero_dim(const mf_plan *p) { return p ? mf_plan_mesh_find(p, p->zero_dim) : -1; }
int mf_plan_num_rules(const mf_plan *p) { return p ? p->nrules : 0; }
int mf_plan_pipeline_stages(const mf_plan *p) { return p ? p->stages : 1; }
int mf_plan_micro_batches(const mf_plan *p) { return p ? p->micro_batches : 0; }
const char *mf_plan_pipeline_cuts(const mf_plan *p) { return p ? p->cuts : NULL; }
const char *mf_plan_schedule(const mf_plan *p) { return p ? p->schedule : "1f1b"; }
int mf_plan_num_recompute(const mf_plan *p) { return p ? p->nrecompute : 0; }
const char *mf_plan_recompute(const mf_plan *p, int i) { return p && i >= 0 && i < p->nrecompute ? p->recompute[i] : NULL; }

int mf_plan_mesh_find(const mf_plan *p, const char *name)
{
    for (int d = 0; p && name && d < p->ndim; d++)
        if (!strcmp(p->names[d], name)) return d;
    return -1;
}

int mf_plan_mesh_size(const mf_plan *p, int d, int nranks)
{
    if (!p || d < 0 || d >= p->ndim || nranks < 1) return -1;
    int64_t known = 1;
    int rest = -1;
    for (int e = 0; e < p->ndim; e++) {
        if (p->sizes[e] < 0) rest = e;
        else known *= p->sizes[e];
    }
    if (rest < 0) return known == nranks ? p->sizes[d] : -1;
    if (nranks % known) return -1;
    return d == rest ? (int)(nranks / known) : p->sizes[d];
}

bool mf_plan_match(const char *pat, const char *s)
{
    if (!pat || !s) return false;
    const char *star = NULL, *resume = NULL;   /* the last '*' and where its run ends so far */
    while (*s) {
        if (*pat == '*') {
            star = pat++;
            resume = s;
        } else if (*pat == '?' || *pat == *s) {
            pat++;
            s++;
        } else if (star) {
            pat = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*pat == '*') pat++;
    return !*pat;
}

bool mf_plan_recomputes(const mf_plan *p, const char *module)
{
    for (int i = 0; p && i < p->nrecompute; i++)
        if (mf_plan_match(p->recompute[i], module)) return true;
    return false;
}

mf_status mfi_plan_resolve(const mf_plan *p, const char *spec, mf_nd_sbp *out)
{
    return mfi_plan_resolve_given(p, spec, out, NULL);
}

mf_status mfi_plan_resolve_given(const mf_plan *p, const char *spec, mf_nd_sbp *out, bool *given)
{
    if (given)
        for (int d = 0; d < MF_MAX_MESH; d++) given[d] = !strchr(spec, '=') && d < p->ndim;
    memset(out, 0, sizeof *out);
    out->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) out->d[d].kind = MF_SBP_B;
    if (!strchr(spec, '=')) {
        MF_TRY(mf_nd_sbp_parse(spec, out));
        if (out->ndim != p->ndim)
            MF_FAIL(MF_ERR_ARG, "SBP '%s' has %d entries but the mesh has %d dimensions; name them (%s=...) or give "
                    "one per dimension", spec, out->ndim, p->ndim, p->names[p->ndim - 1]);
        return MF_OK;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    bool seen[MF_MAX_MESH] = {false};
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        *eq = 0;
        int d = mf_plan_mesh_find(p, item);
        if (d < 0) {
            char dims[160] = "";
            for (int e = 0; e < p->ndim; e++)
                snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%s", e ? ", " : "", p->names[e]);
            MF_FAIL(MF_ERR_ARG, "SBP '%s' names dimension '%s', but the mesh has %s", spec, item, dims);
        }
        if (seen[d]) MF_FAIL(MF_ERR_ARG, "SBP '%s' names dimension '%s' twice", spec, item);
        seen[d] = true;
        if (given) given[d] = true;
        mf_nd_sbp one;
        MF_TRY(mf_nd_sbp_parse(eq + 1, &one));
        out->d[d] = one.d[0];
    }
    return MF_OK;
}

mf_status mfi_plan_check(const mf_plan *p, const char *what)
{
    mf_nd_sbp s;
    for (int i = 0; i < p->nrules; i++)
        if (mfi_plan_resolve(p, p->rules[i].sbp, &s) != MF_OK)
            return mfi_error_context("%s: params[%d] (\"%s\")", what, i, p->rules[i].pattern);
    for (int i = 0; i < p->nacts; i++)
        if (mfi_plan_resolve(p, p->acts[i].sbp, &s) != MF_OK)
            return mfi_error_context("%s: activations[%d] (\"%s\")", what, i, p->acts[i].module);
    if (p->data && mfi_plan_resolve(p, p->data, &s) != MF_OK) return mfi_error_context("%s: data", what);
    if (p->zero >= 1 && mf_plan_zero_dim(p) < 0)
        MF_FAIL(MF_ERR_ARG, "%s: ZeRO-%d is over dimension '%s', which the mesh does not have", what, p->zero, p->zero_dim);
    return MF_OK;
}

mf_status mf_plan_data_sbp(const mf_plan *p, char *buf, size_t size)
{
    if (!p || !buf) MF_FAIL(MF_ERR_ARG, "mf_plan_data_sbp: NULL argument");
    mf_nd_sbp s;
    if (p->data) {
        MF_TRY(mfi_plan_resolve(p, p->data, &s));
    } else {
        memset(&s, 0, sizeof s);
        s.ndim = p->ndim;
        int zd = mf_plan_zero_dim(p);
        for (int d = 0; d < p->ndim; d++) s.d[d].kind = d == zd ? MF_SBP_S : MF_SBP_B;
    }
    mf_nd_sbp_str(&s, buf, size);
    return MF_OK;
}
