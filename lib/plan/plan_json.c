/*
 * lib/plan/plan_json.c - a plan's text form (doc/plans.md): JSON read
 * strictly (an unknown key is an error, every message names the key and
 * its line) and written back in the same form.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include "base/json.h"
#include "lib/plan/plan_internal.h"

typedef struct ctx {
    const char *what;   /* the plan's name */
    mf_plan *plan;
} ctx;

static mf_status bad(const ctx *c, const mfi_json *v, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static mf_status bad(const ctx *c, const mfi_json *v, const char *key, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mfi_error(MF_ERR_ARG, "%s, line %d, column %d: %s: %s", c->what, v->line, v->col, key, msg);
}

/* the keys of object v must be among the NULL-terminated list */
static mf_status only_keys(const ctx *c, const mfi_json *v, const char *where, const char *const *keys)
{
    for (int i = 0; i < v->n; i++) {
        bool known = false;
        for (int k = 0; keys[k] && !known; k++) known = !strcmp(v->keys[i], keys[k]);
        for (int j = 0; j < i && known; j++)
            if (!strcmp(v->keys[i], v->keys[j])) return bad(c, v->items[i], where, "the key \"%s\" appears twice", v->keys[i]);
        if (!known) {
            char list[200] = "";
            for (int k = 0; keys[k]; k++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", keys[k]);
            return bad(c, v->items[i], where, "unknown key \"%s\" (%s has %s)", v->keys[i], where, list);
        }
    }
    return MF_OK;
}

static mf_status want(const ctx *c, const mfi_json *v, mfi_json_type t, const char *key)
{
    if (v->type != t) return bad(c, v, key, "is %s, not %s", mfi_json_type_name(v->type), mfi_json_type_name(t));
    return MF_OK;
}

static mf_status want_int(const ctx *c, const mfi_json *v, const char *key, int lo, int hi, int *out)
{
    if (v->type != MFI_JSON_NUMBER || !v->is_int || v->i < lo || v->i > hi)
        return bad(c, v, key, "must be an integer from %d to %d", lo, hi);
    *out = (int)v->i;
    return MF_OK;
}

/* an SBP: a string (by position) or an object {"dim": "S(1)"} */
static mf_status sbp_of(const ctx *c, const mfi_json *v, const char *key, char *buf, size_t size)
{
    if (v->type == MFI_JSON_STRING) {
        snprintf(buf, size, "%s", v->str);
        return MF_OK;
    }
    if (v->type != MFI_JSON_OBJECT || v->n == 0)
        return bad(c, v, key, "an SBP is a string (\"B,S(1)\") or an object by dimension ({\"tp\": \"S(1)\"})");
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < v->n; i++) {
        if (v->items[i]->type != MFI_JSON_STRING) return bad(c, v->items[i], key, "dimension \"%s\": not a string", v->keys[i]);
        k += (size_t)snprintf(buf + k, k < size ? size - k : 0, "%s%s=%s", i ? "," : "", v->keys[i], v->items[i]->str);
    }
    if (k >= size) return bad(c, v, key, "too long");
    return MF_OK;
}

static mf_status read_mesh(const ctx *c, const mfi_json *v)
{
    MF_TRY(want(c, v, MFI_JSON_OBJECT, "mesh"));
    MF_TRY(only_keys(c, v, "mesh", (const char *const[]){"names", "shape", NULL}));
    const mfi_json *names = mfi_json_get(v, "names"), *shape = mfi_json_get(v, "shape");
    if (!names || !shape) return bad(c, v, "mesh", "needs both \"names\" and \"shape\"");
    MF_TRY(want(c, names, MFI_JSON_ARRAY, "mesh.names"));
    MF_TRY(want(c, shape, MFI_JSON_ARRAY, "mesh.shape"));
    if (names->n != shape->n || names->n < 1 || names->n > MF_MAX_MESH)
        return bad(c, v, "mesh", "%d names and %d sizes (1 to %d of each, as many names as sizes)", names->n, shape->n,
                   MF_MAX_MESH);
    const char *n[MF_MAX_MESH];
    int s[MF_MAX_MESH];
    for (int d = 0; d < names->n; d++) {
        MF_TRY(want(c, names->items[d], MFI_JSON_STRING, "mesh.names"));
        n[d] = names->items[d]->str;
        MF_TRY(want_int(c, shape->items[d], "mesh.shape", -1, 1 << 20, &s[d]));
    }
    if (mf_plan_set_mesh(c->plan, names->n, n, s) != MF_OK) return bad(c, v, "mesh", "%s", mf_last_error());
    return MF_OK;
}

static mf_status read_params(const ctx *c, const mfi_json *v)
{
    MF_TRY(want(c, v, MFI_JSON_ARRAY, "params"));
    for (int i = 0; i < v->n; i++) {
        const mfi_json *r = v->items[i];
        char key[32], sbp[256];
        snprintf(key, sizeof key, "params[%d]", i);
        MF_TRY(want(c, r, MFI_JSON_OBJECT, key));
        MF_TRY(only_keys(c, r, key, (const char *const[]){"match", "sbp", NULL}));
        const mfi_json *m = mfi_json_get(r, "match"), *s = mfi_json_get(r, "sbp");
        if (!m || !s) return bad(c, r, key, "needs \"match\" (a name pattern) and \"sbp\"");
        MF_TRY(want(c, m, MFI_JSON_STRING, key));
        MF_TRY(sbp_of(c, s, key, sbp, sizeof sbp));
        if (mf_plan_add_rule(c->plan, m->str, sbp) != MF_OK) return bad(c, r, key, "%s", mf_last_error());
    }
    return MF_OK;
}

static mf_status read_zero(const ctx *c, const mfi_json *v)
{
    int stage = 0;
    const char *dim = NULL;
    if (v->type == MFI_JSON_NUMBER) {
        MF_TRY(want_int(c, v, "zero", 0, 3, &stage));
    } else {
        MF_TRY(want(c, v, MFI_JSON_OBJECT, "zero"));
        MF_TRY(only_keys(c, v, "zero", (const char *const[]){"stage", "dim", NULL}));
        const mfi_json *s = mfi_json_get(v, "stage"), *d = mfi_json_get(v, "dim");
        if (!s) return bad(c, v, "zero", "needs \"stage\" (0 to 3)");
        MF_TRY(want_int(c, s, "zero.stage", 0, 3, &stage));
        if (d) {
            MF_TRY(want(c, d, MFI_JSON_STRING, "zero.dim"));
            dim = d->str;
        }
    }
    if (mf_plan_set_zero(c->plan, stage, dim) != MF_OK) return bad(c, v, "zero", "%s", mf_last_error());
    return MF_OK;
}

static mf_status read_recompute(const ctx *c, const mfi_json *v)
{
    MF_TRY(want(c, v, MFI_JSON_ARRAY, "recompute"));
    for (int i = 0; i < v->n; i++) {
        MF_TRY(want(c, v->items[i], MFI_JSON_STRING, "recompute"));
        if (mf_plan_add_recompute(c->plan, v->items[i]->str) != MF_OK)
            return bad(c, v->items[i], "recompute", "%s", mf_last_error());
    }
    return MF_OK;
}

static mf_status read_activations(const ctx *c, const mfi_json *v)
{
    MF_TRY(want(c, v, MFI_JSON_ARRAY, "activations"));
    for (int i = 0; i < v->n; i++) {
        const mfi_json *a = v->items[i];
        char key[40], sbp[256];
        snprintf(key, sizeof key, "activations[%d]", i);
        MF_TRY(want(c, a, MFI_JSON_OBJECT, key));
        MF_TRY(only_keys(c, a, key, (const char *const[]){"module", "input", "output", NULL}));
        const mfi_json *m = mfi_json_get(a, "module"), *in = mfi_json_get(a, "input"), *out = mfi_json_get(a, "output");
        if (!m || (!in && !out)) return bad(c, a, key, "needs \"module\" (a name pattern) and \"input\" or \"output\"");
        MF_TRY(want(c, m, MFI_JSON_STRING, key));
        for (int side = 0; side < 2; side++) {
            const mfi_json *s = side ? out : in;
            if (!s) continue;
            MF_TRY(sbp_of(c, s, key, sbp, sizeof sbp));
            if (mf_plan_add_activation(c->plan, m->str, side == 1, sbp) != MF_OK) return bad(c, a, key, "%s", mf_last_error());
        }
    }
    return MF_OK;
}

static mf_status read_pipeline(const ctx *c, const mfi_json *v)
{
    MF_TRY(want(c, v, MFI_JSON_OBJECT, "pipeline"));
    MF_TRY(only_keys(c, v, "pipeline", (const char *const[]){"stages", "cuts", "micro_batches", "schedule", NULL}));
    const mfi_json *st = mfi_json_get(v, "stages"), *cuts = mfi_json_get(v, "cuts"), *mb = mfi_json_get(v, "micro_batches"),
                   *sc = mfi_json_get(v, "schedule");
    int stages = 1, micro = 0;
    char cut[512] = "";
    if (st) MF_TRY(want_int(c, st, "pipeline.stages", 1, MF_MAX_STAGES, &stages));
    if (mb) MF_TRY(want_int(c, mb, "pipeline.micro_batches", 0, 1 << 20, &micro));
    if (sc) MF_TRY(want(c, sc, MFI_JSON_STRING, "pipeline.schedule"));
    if (cuts) {
        MF_TRY(want(c, cuts, MFI_JSON_ARRAY, "pipeline.cuts"));
        size_t k = 0;
        for (int i = 0; i < cuts->n; i++) {
            const mfi_json *x = cuts->items[i];
            if (x->type == MFI_JSON_NUMBER && x->is_int && x->i > 0)
                k += (size_t)snprintf(cut + k, k < sizeof cut ? sizeof cut - k : 0, "%s%lld", i ? "," : "", (long long)x->i);
            else if (x->type == MFI_JSON_STRING && *x->str && !strchr(x->str, ','))
                k += (size_t)snprintf(cut + k, k < sizeof cut ? sizeof cut - k : 0, "%s%s", i ? "," : "", x->str);
            else
                return bad(c, x, "pipeline.cuts", "a cut is a child index (from 1) or a module name");
        }
        if (k >= sizeof cut) return bad(c, cuts, "pipeline.cuts", "too long");
        if (!st) stages = cuts->n + 1;
        else if (stages != cuts->n + 1)
            return bad(c, cuts, "pipeline.cuts", "%d cuts make %d stages, but \"stages\" is %d", cuts->n, cuts->n + 1, stages);
    }
    if (mf_plan_set_pipeline(c->plan, stages, cut, micro, sc ? sc->str : NULL) != MF_OK)
        return bad(c, v, "pipeline", "%s", mf_last_error());
    return MF_OK;
}

mf_plan *mf_plan_parse(const char *text, size_t len, const char *what)
{
    char err[400];
    what = what ? what : "the plan";
    mfi_json *root = mfi_json_parse(text, len, err, sizeof err);
    if (!root) {
        mfi_error(MF_ERR_FORMAT, "%s is not JSON: %s", what, err);
        return NULL;
    }
    ctx c = {what, mf_plan_create()};
    mf_status st = c.plan ? MF_OK : mf_last_status();
    static const char *const keys[] = {"description", "mesh", "params", "zero", "recompute", "activations", "data",
                                       "pipeline", NULL};
    if (st == MF_OK && root->type != MFI_JSON_OBJECT)
        st = mfi_error(MF_ERR_ARG, "%s: a plan is a JSON object, not %s", what, mfi_json_type_name(root->type));
    if (st == MF_OK) st = only_keys(&c, root, "a plan", keys);
    const mfi_json *v;
    if (st == MF_OK && (v = mfi_json_get(root, "description"))) st = want(&c, v, MFI_JSON_STRING, "description");
    if (st == MF_OK && (v = mfi_json_get(root, "mesh"))) st = read_mesh(&c, v);
    if (st == MF_OK && (v = mfi_json_get(root, "params"))) st = read_params(&c, v);
    if (st == MF_OK && (v = mfi_json_get(root, "zero"))) st = read_zero(&c, v);
    if (st == MF_OK && (v = mfi_json_get(root, "recompute"))) st = read_recompute(&c, v);
    if (st == MF_OK && (v = mfi_json_get(root, "activations"))) st = read_activations(&c, v);
    if (st == MF_OK && (v = mfi_json_get(root, "data"))) {
        char sbp[256];
        st = sbp_of(&c, v, "data", sbp, sizeof sbp);
        if (st == MF_OK && mf_plan_set_data(c.plan, sbp) != MF_OK) st = bad(&c, v, "data", "%s", mf_last_error());
    }
    if (st == MF_OK && (v = mfi_json_get(root, "pipeline"))) st = read_pipeline(&c, v);
    if (st == MF_OK) st = mfi_plan_check(c.plan, what);
    mfi_json_free(root);
    if (st != MF_OK) {
        mf_plan_destroy(c.plan);
        return NULL;
    }
    return c.plan;
}

mf_plan *mf_plan_load(const char *path)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        mfi_error(MF_ERR_IO, "cannot open plan %s: %s", path ? path : "(null)", path ? strerror(errno) : "no path");
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap && cap < (64u << 20)) {
            char *g = realloc(buf, cap *= 2);
            if (!g) free(buf);
            buf = g;
        } else if (n == cap) {
            break;
        }
    }
    bool err = ferror(f), big = buf && n == cap;
    fclose(f);
    mf_plan *p = NULL;
    if (!buf) mfi_error(MF_ERR_NOMEM, "plan %s: out of memory", path);
    else if (err) mfi_error(MF_ERR_IO, "cannot read plan %s", path);
    else if (big) mfi_error(MF_ERR_ARG, "plan %s is larger than 64 MiB", path);
    else p = mf_plan_parse(buf, n, path);
    free(buf);
    return p;
}

/* ------------------------------------------------------------ writing */
static void write_sbp(FILE *f, const char *spec)
{
    if (!strchr(spec, '=')) {
        mfi_json_write_string(f, spec);
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    fputc('{', f);
    int i = 0;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        *eq = 0;
        fprintf(f, "%s", i++ ? ", " : "");
        mfi_json_write_string(f, item);
        fputs(": ", f);
        mfi_json_write_string(f, eq + 1);
    }
    fputc('}', f);
}

mf_status mf_plan_write(const mf_plan *p, FILE *f)
{
    if (!p || !f) MF_FAIL(MF_ERR_ARG, "mf_plan_write: NULL argument");
    fputs("{\n  \"mesh\": {\"names\": [", f);
    for (int d = 0; d < p->ndim; d++) {
        fputs(d ? ", " : "", f);
        mfi_json_write_string(f, p->names[d]);
    }
    fputs("], \"shape\": [", f);
    for (int d = 0; d < p->ndim; d++) fprintf(f, "%s%d", d ? ", " : "", p->sizes[d]);
    fputs("]},\n  \"params\": [", f);
    for (int i = 0; i < p->nrules; i++) {
        fputs(i ? ",\n    {\"match\": " : "\n    {\"match\": ", f);
        mfi_json_write_string(f, p->rules[i].pattern);
        fputs(", \"sbp\": ", f);
        write_sbp(f, p->rules[i].sbp);
        fputc('}', f);
    }
    fprintf(f, "%s],\n  \"zero\": {\"stage\": %d, \"dim\": ", p->nrules ? "\n  " : "", p->zero);
    mfi_json_write_string(f, p->zero_dim);
    fputs("},\n  \"recompute\": [", f);
    for (int i = 0; i < p->nrecompute; i++) {
        fputs(i ? ", " : "", f);
        mfi_json_write_string(f, p->recompute[i]);
    }
    fputs("],\n  \"activations\": [", f);
    for (int i = 0; i < p->nacts; i++) {
        fputs(i ? ",\n    {\"module\": " : "\n    {\"module\": ", f);
        mfi_json_write_string(f, p->acts[i].module);
        fprintf(f, ", \"%s\": ", p->acts[i].output ? "output" : "input");
        write_sbp(f, p->acts[i].sbp);
        fputc('}', f);
    }
    fputs(p->nacts ? "\n  ],\n" : "],\n", f);
    if (p->data) {
        fputs("  \"data\": ", f);
        write_sbp(f, p->data);
        fputs(",\n", f);
    }
    fprintf(f, "  \"pipeline\": {\"stages\": %d, ", p->stages);
    if (p->cuts) {
        fputs("\"cuts\": [", f);
        char buf[512];
        snprintf(buf, sizeof buf, "%s", p->cuts);
        int i = 0;
        for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char *end;
            long v = strtol(item, &end, 10);
            fputs(i++ ? ", " : "", f);
            if (!*end && v > 0) fprintf(f, "%ld", v);
            else mfi_json_write_string(f, item);
        }
        fputs("], ", f);
    }
    fprintf(f, "\"micro_batches\": %d, \"schedule\": ", p->micro_batches);
    mfi_json_write_string(f, p->schedule);
    fputs("}\n}\n", f);
    return ferror(f) ? mfi_error(MF_ERR_IO, "mf_plan_write: the write failed") : MF_OK;
}
