/*
 * lib/global/signature.c - helpers the ops' SBP functions share.
 */
#include "lib/global/global_internal.h"

int mfi_sig_add(mfi_sig *sigs, int n, int cap, int n_in, const mf_sbp *in, mf_sbp out)
{
    if (n >= cap) return n;
    memset(&sigs[n], 0, sizeof sigs[n]);
    for (int i = 0; i < n_in && i < MFI_SIG_MAX_IN; i++) sigs[n].in[i] = in[i];
    sigs[n].out = out;
    return n + 1;
}

int mfi_sig_elementwise(const mfi_call *c, mfi_sig *sigs, int cap, int partial)
{
    const mfi_meta *o = &c->out_meta;
    int n = 0;
    mf_sbp in[MFI_SIG_MAX_IN];
    for (int k = 0; k < o->ndim; k++) {
        bool any = false;
        for (int i = 0; i < c->n_in; i++) {
            const mfi_meta *m = &c->in_meta[i];
            int j = k - (o->ndim - m->ndim);
            bool split = j >= 0 && m->shape[j] == o->shape[k];
            in[i] = split ? mfi_S(j) : mfi_B();
            any |= split;
        }
        if (any) n = mfi_sig_add(sigs, n, cap, c->n_in, in, mfi_S(k));
    }
    if (partial == 1) {
        for (int i = 0; i < c->n_in; i++) in[i] = mfi_P();
        n = mfi_sig_add(sigs, n, cap, c->n_in, in, mfi_P());
    } else if (partial == 2) {
        for (int p = 0; p < c->n_in; p++) {
            for (int i = 0; i < c->n_in; i++) in[i] = i == p ? mfi_P() : mfi_B();
            n = mfi_sig_add(sigs, n, cap, c->n_in, in, mfi_P());
        }
    }
    return n;
}

int64_t mfi_box_first_index(const mfi_meta *gm, const mfi_box *b)
{
    int64_t str[MF_MAX_DIMS], idx = 0;
    mfi_contig_strides(gm->ndim, gm->shape, str);
    for (int i = 0; i < gm->ndim; i++) idx += b->start[i] * str[i];
    return idx;
}
