/*
 * lib/optim/zero.c - ZeRO stage 1: the optimizer state of data-parallel
 * parameters is split S(0) over the data-parallel ranks.
 *
 * A parameter replicated (B) on a 1-D placement of n ranks is cut along
 * its first axis into n balanced row blocks (the S(0) split of
 * doc/design.md section 3); rank k keeps the state of block k only. The gradient buckets
 * (grad_sync.c) reduce-scatter instead of allreduce, so each rank gets
 * the summed gradient of its rows; this file updates those rows and
 * then allgathers the parameters, bucket by bucket, so every rank holds
 * the whole updated parameter again. Per rank that is the traffic of
 * one allreduce, and the state memory drops by n.
 *
 * Checkpoints see the state as a global tensor S(0) on the parameter's
 * placement, so they reshard to any rank count, with or without ZeRO.
 */
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"

mfi_comm *mfi_zero_comm(const mf_optim *o, int i)
{
    const mf_tensor *t = o->params[i].p;
    const mfi_global *g = t->global;
    if (!o->zero || !g || !g->local || g->placement->mesh_ndim != 1 || g->sbp.d[0].kind != MF_SBP_B) return NULL;
    if (!mf_dtype_is_float(t->dtype) || mfi_comm_size_of(g->placement->comm) < 2) return NULL;
    return g->placement->comm;
}

mf_status mf_optim_set_zero(mf_optim *o, int stage)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_set_zero: optimizer is NULL");
    if (stage != 0 && stage != 1) MF_FAIL(MF_ERR_ARG, "mf_optim_set_zero: stage %d is not 0 or 1", stage);
    if (o->steps > 0 && stage != o->zero)
        MF_FAIL(MF_ERR_STATE, "mf_optim_set_zero: the optimizer has stepped; set ZeRO before the first step");
    for (int i = 0; stage && i < o->n; i++) {
        const mfi_global *g = o->params[i].p->global;
        if (g && g->placement->dev != MF_DEV_CPU)   /* the placement: the same answer on every rank */
            MF_FAIL(MF_ERR_ARG, "mf_optim_set_zero: ZeRO-1 runs on CPU parameters only in this release; '%s' is on %s",
                    o->params[i].name, mf_device_name(g->placement->dev));
    }
    MF_TRY(mf_optim_set_bucket_mb(o, o->bucket_mb));   /* rebuilt for the new stage */
    o->zero = stage;
    for (int i = 0; i < o->n; i++) {
        mfi_opt_param *p = &o->params[i];
        mfi_comm *c = mfi_zero_comm(o, i);
        p->zero = c != NULL;
        p->zgrad = NULL;
        if (!c) continue;
        const mf_tensor *l = p->p->global->local;
        int64_t L = l->ndim ? l->shape[0] : 1;
        p->inner = L ? mf_tensor_numel(l) / L : 0;
        mfi_split(L, mfi_comm_size_of(c), mfi_comm_rank_in(c), &p->row0, &p->rows);
    }
    return MF_OK;
}

mf_tensor *mfi_optim_state_new(mf_optim *o, int i)
{
    mfi_opt_param *p = &o->params[i];
    mf_tensor *piece = mfi_local_piece(p->p);
    if (!piece) return NULL;
    if (!p->zero) return mf_zeros_like(piece);   /* on the parameter's device */
    int64_t shape[MF_MAX_DIMS];
    int nd = piece->ndim ? piece->ndim : 1;
    for (int d = 0; d < nd; d++) shape[d] = piece->ndim ? piece->shape[d] : 1;
    shape[0] = p->rows;
    return mf_zeros(piece->dtype, nd, shape);
}

mf_nd_sbp mfi_optim_state_sbp(const mf_optim *o, int i)
{
    const mfi_opt_param *p = &o->params[i];
    if (!p->zero) return p->p->global->sbp;
    mf_nd_sbp s = p->p->global->sbp;
    s.d[0] = (mf_sbp){MF_SBP_S, 0};
    return s;
}

/* rows [row0, row0+rows) of t (inner elements each) as a view */
static mfi_view rows_view(const mf_tensor *t, int64_t row0, int64_t rows, int64_t inner)
{
    mfi_view v = mfi_view_as(t, 2, (const int64_t[]){t->ndim ? t->shape[0] : 1, inner});
    v.data = (char *)v.data + (size_t)(row0 * inner) * mf_dtype_size(t->dtype);
    v.shape[0] = rows;
    return v;
}

mf_status mfi_zero_step(mf_optim *o)
{
    for (int i = 0; i < o->n; i++) {
        mfi_opt_param *p = &o->params[i];
        if (!p->zero || !p->zgrad) continue;
        mf_tensor *pt = p->p->global->local;
        mfi_view vs[MFI_OPT_MAX_STATE];
        for (int k = 0; k < o->nstate; k++) {
            if (!o->uses[k]) continue;
            if (!p->state[k]) {
                p->state[k] = mfi_optim_state_new(o, i);
                if (!p->state[k]) return mfi_error_context("%s: state of '%s'", o->type, p->name);
                char nm[512];
                snprintf(nm, sizeof nm, "%s/%s", p->name, o->state_names[k]);
                mf_tensor_set_name(p->state[k], nm);
            }
            vs[k] = rows_view(p->state[k], 0, p->rows, p->inner);
        }
        p->step++;
        if (p->rows == 0) continue;   /* fewer rows than ranks: nothing here */
        mfi_view vp = rows_view(pt, p->row0, p->rows, p->inner), vg = vp;
        vg.data = p->zgrad;
        for (int d = 0; d < vg.ndim; d++) vg.stride[d] = d == vg.ndim - 1 ? 1 : p->inner;
        mf_status st = o->update(o, p, &vp, &vg, vs);
        if (st != MF_OK) return mfi_error_context("%s: parameter '%s'", o->type, p->name);
    }
    return mfi_zero_gather(o);
}
