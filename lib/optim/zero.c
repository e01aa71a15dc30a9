/*
 * lib/optim/zero.c - ZeRO stage 1: the optimizer state of data-parallel
 * parameters is split S(0) over the data-parallel ranks.
 *
 * A parameter replicated (B) on a 1-D placement of n ranks is cut along
 * its first axis into n balanced row blocks (the S(0) split of
 * doc/design.md section 3); rank k keeps the state of block k only. Its
 * gradient bucket (the ZeRO kind of buckets.h, below) lays the gradients
 * out rank by rank and reduce-scatters them, so each rank gets the summed
 * gradient of its rows; the step updates those rows and then allgathers
 * the parameters, bucket by bucket, so every rank holds the whole updated
 * parameter again. Per rank that is the traffic of one allreduce, and the
 * state memory drops by n.
 *
 * Checkpoints see the state as a global tensor S(0) on the parameter's
 * placement, so they reshard to any rank count, with or without ZeRO.
 */
#include "lib/optim/buckets.h"

/* A ZeRO bucket's own state: the buffer holds rank 0's rows of every
 * parameter, then rank 1's, and so on. */
typedef struct zero_part {
    int n, me;          /* ranks of the communicator, and this one */
    int64_t *counts;    /* [n]: elements of each rank's part */
    int64_t *pos;       /* [np * n]: where slot s's rows for rank q start */
    void *shard;        /* counts[me] elements: this rank's summed rows */
} zero_part;

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
        if (g && g->placement->dev == MF_DEV_CUDA)   /* the placement: the same answer on every rank */
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

/* rows of parameter p for rank q of a ZeRO bucket of n ranks */
static void rows_of(const mfi_opt_param *p, int n, int q, int64_t *row0, int64_t *rows)
{
    const mf_tensor *l = p->p->global->local;
    mfi_split(l->ndim ? l->shape[0] : 1, n, q, row0, rows);
}

static void zero_release(mfi_bucket *b)
{
    zero_part *z = b->part;
    mfi_host_buffer_free(b->buf, (size_t)b->numel * mf_dtype_size(b->dt) + 1, b->pinned);
    if (!z) return;
    free(z->counts);
    free(z->pos);
    free(z->shard);
    free(z);
}

/* the rank-by-rank layout, the buffer and the shard */
static mf_status zero_setup(const mf_optim *o, mfi_bucket *b)
{
    zero_part *z = calloc(1, sizeof *z);
    b->part = z;
    if (!z) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
    z->n = mfi_comm_size_of(b->comm);
    z->me = mfi_comm_rank_in(b->comm);
    z->counts = calloc((size_t)z->n, sizeof *z->counts);
    z->pos = malloc((size_t)b->np * (size_t)z->n * sizeof *z->pos + 1);
    if (!z->counts || !z->pos) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
    for (int q = 0; q < z->n; q++)
        for (int s = 0; s < b->np; s++) {
            int64_t r0, rows;
            rows_of(&o->params[b->params[s]], z->n, q, &r0, &rows);
            z->counts[q] += rows * o->params[b->params[s]].inner;
        }
    for (int q = 0; q < z->n; q++) {
        int64_t pos = 0;
        for (int r = 0; r < q; r++) pos += z->counts[r];
        for (int s = 0; s < b->np; s++) {
            int64_t r0, rows;
            z->pos[s * z->n + q] = pos;
            rows_of(&o->params[b->params[s]], z->n, q, &r0, &rows);
            pos += rows * o->params[b->params[s]].inner;
        }
    }
    size_t es = mf_dtype_size(b->dt);
    z->shard = malloc((size_t)z->counts[z->me] * es + 1);
    b->buf = mfi_host_buffer((size_t)b->numel * es + 1, &b->pinned);
    if (!z->shard || !b->buf) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
    return MF_OK;
}

/* each rank q's rows of g (zeros without g) into rank q's part */
static mf_status zero_pack(mfi_bucket *b, int slot, const mfi_opt_param *p, mf_tensor *g)
{
    zero_part *z = b->part;
    size_t es = mf_dtype_size(b->dt);
    mf_status st = MF_OK;
    for (int q = 0; st == MF_OK && q < z->n; q++) {
        int64_t r0, rows;
        rows_of(p, z->n, q, &r0, &rows);
        char *dst = (char *)b->buf + (size_t)z->pos[slot * z->n + q] * es;
        size_t bytes = (size_t)(rows * p->inner) * es;
        if (!g) memset(dst, 0, bytes);
        else st = mfi_stage_out(mf_tensor_device(g), dst, (const char *)mf_tensor_data(g) + (size_t)(r0 * p->inner) * es, bytes);
    }
    return st;
}

static mf_status zero_start(mfi_bucket *b)
{
    zero_part *z = b->part;
    return mfi_ireduce_scatter(b->comm, b->buf, z->shard, z->counts, b->dt, &b->req);
}

static mf_status zero_sum(mfi_bucket *b)
{
    zero_part *z = b->part;
    return mfi_reduce_scatter(b->comm, b->buf, z->shard, z->counts, b->dt);
}

/* the summed rows stay in the shard, where the step reads them; the P
 * gradient stays as it is */
static mf_status zero_unpack(mfi_bucket *b, int slot, mfi_opt_param *p)
{
    zero_part *z = b->part;
    p->zgrad = (char *)z->shard + (size_t)(z->pos[slot * z->n + z->me] - z->pos[z->me]) * mf_dtype_size(b->dt);
    return MF_OK;
}

static void zero_scale(mfi_bucket *b, double coef)
{
    zero_part *z = b->part;
    int64_t n = z->counts[z->me];
    if (b->dt == MF_F32)
        for (int64_t i = 0; i < n; i++) ((float *)z->shard)[i] *= (float)coef;
    else if (b->dt == MF_F64)
        for (int64_t i = 0; i < n; i++) ((double *)z->shard)[i] *= coef;
}

const mfi_bucket_kind mfi_bucket_zero = {
    .what = "ZeRO gradient", .trace = "reduce-scatter",
    .setup = zero_setup, .release = zero_release, .pack = zero_pack,
    .start = zero_start, .sum = zero_sum, .unpack = zero_unpack, .scale = zero_scale,
};

mf_status mfi_zero_gather(mf_optim *o)
{
    mfi_grad_buckets *gb = o->buckets;
    mf_status st = MF_OK;
    for (int k = 0; gb && k < gb->nb && st == MF_OK; k++) {
        mfi_bucket *b = &gb->b[k];
        zero_part *z = b->part;
        bool any = false;   /* the same on every rank */
        for (int s = 0; s < b->np; s++) any |= o->params[b->params[s]].zgrad != NULL;
        if (b->kind != &mfi_bucket_zero || !any) continue;
        size_t es = mf_dtype_size(b->dt);
        for (int s = 0; s < b->np && !mfi_sim_on(); s++) {   /* this rank's updated rows into its part (a
                                                                * simulated rank's have no bytes) */
            const mfi_opt_param *p = &o->params[b->params[s]];
            memcpy((char *)z->shard + (size_t)(z->pos[s * z->n + z->me] - z->pos[z->me]) * es,
                   (const char *)mf_tensor_data(p->p->global->local) + (size_t)(p->row0 * p->inner) * es,
                   (size_t)(p->rows * p->inner) * es);
        }
        mfi_bucket_name(gb, k, "ZeRO parameter");
        st = mfi_allgather(b->comm, z->shard, b->buf, z->counts, b->dt);
        mfi_bucket_name(gb, k, NULL);
        for (int s = 0; s < b->np && st == MF_OK; s++) {   /* every rank's rows back into the parameters */
            mfi_opt_param *p = &o->params[b->params[s]];
            mf_tensor *l = p->p->global->local;
            for (int q = 0; q < z->n && !mfi_sim_on(); q++) {
                int64_t r0, rows;
                rows_of(p, z->n, q, &r0, &rows);
                memcpy((char *)mf_tensor_data(l) + (size_t)(r0 * p->inner) * es,
                       (const char *)b->buf + (size_t)z->pos[s * z->n + q] * es, (size_t)(rows * p->inner) * es);
            }
            mfi_bump_version(l);
        }
    }
    for (int i = 0; i < o->n; i++) o->params[i].zgrad = NULL;
    return st;
}
