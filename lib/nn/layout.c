/*
 * lib/nn/layout.c - activation layouts at module boundaries
 * (doc/plans.md, "Activations"), like PyTorch's PrepareModuleInput.
 *
 * A plan may name the SBP a module's input or output must have along
 * some mesh dimensions: the residual stream split over the sequence
 * between tensor-parallel regions (sequence parallelism), a row-parallel
 * output's partial sum reduced before it joins the residual stream.
 * mf_module_forward applies them; a model whose forward runs its
 * children itself calls mf_module_input_layout / mf_module_output_layout
 * at their boundaries. The boxing is differentiable, so backward gets
 * the dual collectives. Dimensions the layout does not name keep their
 * SBP; a local tensor, or one already so laid out, passes unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include "lib/nn/nn_internal.h"

struct mfi_layout {
    bool given[MF_MAX_MESH];
    mf_sbp sbp[MF_MAX_MESH];
};

mf_status mfi_module_set_layout(mf_module *m, bool output, const mf_nd_sbp *s, const bool *given)
{
    if (!m || !s || !given) MF_FAIL(MF_ERR_INTERNAL, "mfi_module_set_layout: NULL argument");
    struct mfi_layout **at = &m->layout[output];
    if (!*at && !(*at = calloc(1, sizeof **at))) MF_FAIL(MF_ERR_NOMEM, "activation layout: out of memory");
    for (int d = 0; d < s->ndim && d < MF_MAX_MESH; d++)
        if (given[d]) {
            (*at)->given[d] = true;
            (*at)->sbp[d] = s->d[d];
        }
    return MF_OK;
}

void mfi_module_layout_free(mf_module *m)
{
    free(m->layout[0]);
    free(m->layout[1]);
    m->layout[0] = m->layout[1] = NULL;
}

static bool same(mf_sbp a, mf_sbp b) { return a.kind == b.kind && (a.kind != MF_SBP_S || a.axis == b.axis); }

/* t (consumed) boxed to layout l along the dimensions it names */
static mf_tensor *lay(const struct mfi_layout *l, mf_tensor *t)
{
    if (!t || !l || !mf_tensor_is_global(t)) return t;
    mf_nd_sbp s;
    if (mf_global_nd_sbp(t, &s) != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    bool change = false;
    for (int d = 0; d < s.ndim; d++)
        if (l->given[d] && !same(s.d[d], l->sbp[d])) {
            s.d[d] = l->sbp[d];
            change = true;
        }
    if (!change) return t;
    char txt[96];
    mf_tensor *r = mf_redistribute(t, mf_global_placement(t), mf_nd_sbp_str(&s, txt, sizeof txt));
    mf_tensor_destroy(t);
    return r;
}

mf_tensor *mf_module_input_layout(mf_module *m, mf_tensor *x) { return m ? lay(m->layout[0], x) : x; }

mf_tensor *mf_module_output_layout(mf_module *m, mf_tensor *y) { return m ? lay(m->layout[1], y) : y; }
