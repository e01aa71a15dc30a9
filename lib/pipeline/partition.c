/*
 * lib/pipeline/partition.c - where a Sequential model is cut into
 * pipeline stages: balanced by parameter count, or at given children.
 *
 * Balancing is the linear partition problem: cut n weights into P
 * contiguous non-empty runs so that the heaviest run is as light as
 * possible. A dynamic programme over (children placed, stages used)
 * solves it exactly in O(n^2 P); n is the number of layers, so this is
 * nothing next to one training step. Parameter-free layers weigh 0; the
 * tie-break (fewest children in the largest stage) spreads them.
 */
#include <limits.h>
#include <stdio.h>
#include "lib/internal.h"

typedef struct cost {
    int64_t params;      /* the heaviest stage so far */
    int layers;          /* the most children in one stage so far */
} cost;

static bool better(cost a, cost b)
{
    return a.params < b.params || (a.params == b.params && a.layers < b.layers);
}

static cost worse_of(cost a, int64_t params, int layers)
{
    cost c = {a.params > params ? a.params : params, a.layers > layers ? a.layers : layers};
    return c;
}

static mf_status children(const mf_module *seq, const char *fn, int *n)
{
    *n = 0;
    if (!seq) MF_FAIL(MF_ERR_ARG, "%s: the model is NULL", fn);
    *n = mf_module_num_children(seq);
    if (*n < 1) MF_FAIL(MF_ERR_ARG, "%s: the model (%s) has no layers to cut into stages", fn, mf_module_type(seq));
    return MF_OK;
}

mf_status mf_pipeline_balance(const mf_module *seq, int nstages, int *first)
{
    int n = 0;
    MF_TRY(children(seq, "mf_pipeline_balance", &n));
    if (!first) MF_FAIL(MF_ERR_ARG, "mf_pipeline_balance: first is NULL");
    if (nstages < 1 || nstages > n || nstages > MF_MAX_STAGES)
        MF_FAIL(MF_ERR_ARG, "mf_pipeline_balance: %d stages for a model of %d layers (it takes 1 to %d stages)",
                nstages, n, n < MF_MAX_STAGES ? n : MF_MAX_STAGES);
    int64_t *pre = malloc(((size_t)n + 1) * sizeof *pre);
    cost *best = malloc(((size_t)n + 1) * ((size_t)nstages + 1) * sizeof *best);
    int *from = malloc(((size_t)n + 1) * ((size_t)nstages + 1) * sizeof *from);
    if (!pre || !best || !from) {
        free(pre);
        free(best);
        free(from);
        MF_FAIL(MF_ERR_NOMEM, "mf_pipeline_balance: out of memory");
    }
    pre[0] = 0;
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + mf_module_num_parameters(mf_module_child_at(seq, i));
    /* best[s][i]: the first i children in s stages; from[s][i]: where the last stage starts */
#define AT(a, s, i) a[(size_t)(s) * ((size_t)n + 1) + (size_t)(i)]
    for (int s = 0; s <= nstages; s++)
        for (int i = 0; i <= n; i++) AT(best, s, i) = (cost){INT64_MAX, INT_MAX};
    AT(best, 0, 0) = (cost){0, 0};
    for (int s = 1; s <= nstages; s++)
        for (int i = s; i <= n; i++)
            for (int j = s - 1; j < i; j++) {   /* the last stage runs children j .. i-1 */
                if (AT(best, s - 1, j).params == INT64_MAX) continue;
                cost c = worse_of(AT(best, s - 1, j), pre[i] - pre[j], i - j);
                if (better(c, AT(best, s, i))) {
                    AT(best, s, i) = c;
                    AT(from, s, i) = j;
                }
            }
    first[nstages] = n;
    for (int s = nstages, i = n; s > 0; s--) {
        i = AT(from, s, i);
        first[s - 1] = i;
    }
#undef AT
    free(pre);
    free(best);
    free(from);
    return MF_OK;
}

mf_status mf_pipeline_parse_cuts(const mf_module *seq, const char *cuts, int *nstages, int *first)
{
    int n = 0;
    MF_TRY(children(seq, "mf_pipeline_parse_cuts", &n));
    if (!cuts || !nstages || !first) MF_FAIL(MF_ERR_ARG, "mf_pipeline_parse_cuts: a NULL argument");
    int s = 1;
    first[0] = 0;
    for (const char *p = cuts; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            MF_FAIL(MF_ERR_ARG, "pipeline cuts '%s': '%s' is not a layer index", cuts, p);
        if (s >= MF_MAX_STAGES) MF_FAIL(MF_ERR_ARG, "pipeline cuts '%s': more than %d stages", cuts, MF_MAX_STAGES);
        if (v <= first[s - 1] || v >= n)
            MF_FAIL(MF_ERR_ARG, "pipeline cuts '%s': cut %ld must be greater than %d and less than %d (the model "
                    "has %d layers, and every stage needs at least one)", cuts, v, first[s - 1], n, n);
        first[s++] = (int)v;
        p = *end ? end + 1 : end;
    }
    first[s] = n;
    *nstages = s;
    return MF_OK;
}
