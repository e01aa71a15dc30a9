/*
 * lib/global/sbp.c - SBP and nd-SBP: text, checks, duals and the
 * balanced split that decides which block each rank holds.
 */
#include <ctype.h>
#include <stdio.h>
#include "lib/global/global_internal.h"

void mfi_split(int64_t L, int n, int k, int64_t *start, int64_t *len)
{
    mfi_block(L, n, k, start, len);   /* the collectives' balanced blocks */
}

void mfi_region(const mfi_meta *gm, const mf_nd_sbp *s, const mf_placement *p, const int *coord, mfi_box *b)
{
    for (int i = 0; i < gm->ndim; i++) {
        b->start[i] = 0;
        b->count[i] = gm->shape[i];
    }
    for (int d = 0; d < s->ndim; d++) {
        if (s->d[d].kind != MF_SBP_S) continue;
        int a = s->d[d].axis;
        int64_t st, len;
        mfi_split(b->count[a], p->mesh[d], coord[d], &st, &len);
        b->start[a] += st;
        b->count[a] = len;
    }
}

bool mfi_nd_sbp_equal(const mf_nd_sbp *a, const mf_nd_sbp *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->d[d].kind != b->d[d].kind || (a->d[d].kind == MF_SBP_S && a->d[d].axis != b->d[d].axis))
            return false;
    return true;
}

mf_nd_sbp mfi_nd_sbp_dual(const mf_nd_sbp *s)
{
    mf_nd_sbp r = *s;
    for (int d = 0; d < s->ndim; d++)
        if (s->d[d].kind == MF_SBP_B) r.d[d].kind = MF_SBP_P;
        else if (s->d[d].kind == MF_SBP_P) r.d[d].kind = MF_SBP_B;
    return r;
}

mf_nd_sbp mfi_nd_sbp_all(int ndim, mf_sbp_kind k)
{
    mf_nd_sbp r;
    memset(&r, 0, sizeof r);
    r.ndim = ndim;
    for (int d = 0; d < ndim; d++) r.d[d].kind = k;
    return r;
}

char *mfi_sbp_str(mf_sbp s, char *buf, size_t size)
{
    if (s.kind == MF_SBP_S) snprintf(buf, size, "S(%d)", s.axis);
    else snprintf(buf, size, "%s", s.kind == MF_SBP_B ? "B" : "P");
    return buf;
}

char *mf_nd_sbp_str(const mf_nd_sbp *s, char *buf, size_t size)
{
    if (!buf || !size) return buf;
    buf[0] = 0;
    size_t len = 0;
    for (int d = 0; s && d < s->ndim && len < size; d++) {
        char one[32];
        len += (size_t)snprintf(buf + len, size - len, "%s%s", d ? "," : "", mfi_sbp_str(s->d[d], one, sizeof one));
    }
    return buf;
}

mf_status mf_nd_sbp_parse(const char *text, mf_nd_sbp *out)
{
    if (!text || !out) MF_FAIL(MF_ERR_ARG, "mf_nd_sbp_parse: text or out is NULL");
    mf_nd_sbp r;
    memset(&r, 0, sizeof r);
    const char *s = text;
    for (;;) {
        while (isspace((unsigned char)*s)) s++;
        if (r.ndim == MF_MAX_MESH) goto bad;
        mf_sbp *e = &r.d[r.ndim];
        if (*s == 'B') {
            e->kind = MF_SBP_B;
            s++;
        } else if (*s == 'P') {
            e->kind = MF_SBP_P;
            s++;
        } else if (*s == 'S' && s[1] == '(') {
            char *end;
            long a = strtol(s + 2, &end, 10);
            if (end == s + 2 || *end != ')' || a < 0 || a >= MF_MAX_DIMS) goto bad;
            e->kind = MF_SBP_S;
            e->axis = (int)a;
            s = end + 1;
        } else {
            goto bad;
        }
        r.ndim++;
        while (isspace((unsigned char)*s)) s++;
        if (!*s) break;
        if (*s++ != ',') goto bad;
    }
    *out = r;
    return MF_OK;
bad:
    MF_FAIL(MF_ERR_ARG, "cannot read SBP '%s' (expected S(axis), B or P per mesh dimension, comma-separated, "
            "e.g. \"S(0),B\")", text);
}

mf_status mf_nd_sbp_check(const mf_nd_sbp *s, const mf_placement *p, int ndim)
{
    char b1[96], b2[128];
    if (!s || !p) MF_FAIL(MF_ERR_ARG, "mf_nd_sbp_check: sbp or placement is NULL");
    if (s->ndim != p->mesh_ndim)
        MF_FAIL(MF_ERR_ARG, "SBP %s has %d entr%s but placement '%s' has a %d-D mesh: give one SBP per mesh "
                "dimension", mf_nd_sbp_str(s, b1, sizeof b1), s->ndim, s->ndim == 1 ? "y" : "ies",
                mf_placement_str(p, b2, sizeof b2), p->mesh_ndim);
    for (int d = 0; d < s->ndim; d++)
        if (s->d[d].kind == MF_SBP_S && s->d[d].axis >= ndim)
            MF_FAIL(MF_ERR_ARG, "SBP %s splits axis %d of a %d-D tensor", mf_nd_sbp_str(s, b1, sizeof b1),
                    s->d[d].axis, ndim);
    return MF_OK;
}

mf_status mfi_nd_sbp_from(const char *what, const char *text, const mf_placement *p, int ndim, mf_nd_sbp *out)
{
    if (!p) MF_FAIL(MF_ERR_ARG, "%s: placement is NULL", what);
    mf_status st = mf_nd_sbp_parse(text, out);
    if (st == MF_OK) st = mf_nd_sbp_check(out, p, ndim);
    if (st != MF_OK) mfi_error_context("%s", what);
    return st;
}
