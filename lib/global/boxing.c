/*
 * lib/global/boxing.c - boxing: re-laying a global tensor's pieces as
 * another nd-SBP and/or placement (doc/design.md section 4).
 *
 * On one placement the planner works mesh dimension by mesh dimension,
 * each step one collective on that dimension's communicator:
 *   P -> B allreduce        P -> S(a) reduce-scatter   S(a) -> B allgather
 *   S(a) -> S(b) all-to-all B -> S(a) local slice      B, S(a) -> P zero-fill
 * A step on dimension d is exact only while no inner dimension e > d
 * splits an axis the step touches; when no such step is left, or the
 * placements differ, the general path sends each receiver the
 * intersection of its block with the senders' blocks (point to point).
 *
 * Boxing is an autograd op on the local pieces. Its backward boxes the
 * gradient from dual(to) back to dual(from) (global_internal.h).
 */
#include "lib/global/global_internal.h"

typedef struct box_attrs {
    const mf_placement *src, *dst;   /* registry-owned, live until mf_finalize */
    mf_nd_sbp from, to;
    mfi_meta gm;
} box_attrs;

/* ------------------------------------------------------ dense N-D copies */
static void copy_block(const char *src, const int64_t *sshape, const int64_t *soff, char *dst, const int64_t *dshape,
                       const int64_t *doff, const int64_t *count, int ndim, size_t es)
{
    if (mfi_sim_on()) return;   /* a simulated world's tensors have no bytes */
    if (ndim == 0) {
        memcpy(dst, src, es);
        return;
    }
    int64_t sstr[MF_MAX_DIMS], dstr[MF_MAX_DIMS];
    mfi_contig_strides(ndim, sshape, sstr);
    mfi_contig_strides(ndim, dshape, dstr);
    int last = ndim - 1;
    int64_t idx[MF_MAX_DIMS] = {0}, rows = 1;
    for (int i = 0; i < last; i++) rows *= count[i];
    if (rows == 0 || count[last] == 0) return;
    size_t run = (size_t)count[last] * es;
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = soff[last], dof = doff[last];
        for (int i = 0; i < last; i++) {
            so += (soff[i] + idx[i]) * sstr[i];
            dof += (doff[i] + idx[i]) * dstr[i];
        }
        memcpy(dst + (size_t)dof * es, src + (size_t)so * es, run);
        for (int i = last - 1; i >= 0; i--) {
            if (++idx[i] < count[i]) break;
            idx[i] = 0;
        }
    }
}

static int64_t prod(const int64_t *v, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= v[i];
    return p;
}

static mf_tensor *new_like(mf_dtype dt, int ndim, const int64_t *shape, bool zero)
{
    return zero ? mf_zeros(dt, ndim, shape) : mfi_tensor_new(dt, ndim, shape);
}

/* --------------------------------------------------- one mesh dimension */
static bool step_valid(const mf_nd_sbp *cur, int d, mf_sbp to)
{
    for (int e = d + 1; e < cur->ndim; e++) {
        if (cur->d[e].kind != MF_SBP_S) continue;
        if (cur->d[d].kind == MF_SBP_S && cur->d[d].axis == cur->d[e].axis) return false;
        if (to.kind == MF_SBP_S && to.axis == cur->d[e].axis) return false;
    }
    return true;
}

/* t (local piece under cur) -> piece under cur with dimension d := to. */
static mf_status box_step(const box_attrs *a, mf_nd_sbp *cur, int d, mf_sbp to, mf_tensor **t)
{
    const mf_placement *p = a->src;
    mfi_comm *comm = p->dim_comm[d];
    int n = p->mesh[d], k = p->coord[d], nd = a->gm.ndim;
    mf_sbp from = cur->d[d];
    mf_dtype dt = a->gm.dtype;
    size_t es = mf_dtype_size(dt);
    mf_nd_sbp par = *cur, nxt = *cur;
    par.d[d].kind = MF_SBP_B;
    nxt.d[d] = to;
    mfi_box pb, ob;
    mfi_region(&a->gm, &par, p, p->coord, &pb);   /* the parent block of this dimension */
    mfi_region(&a->gm, &nxt, p, p->coord, &ob);
    mf_tensor *in = *t, *out = NULL;
    mf_status st = MF_OK;
    int64_t *cnt = calloc(2 * (size_t)n, sizeof *cnt), *cnt2 = cnt + n;
    void *tmp = NULL;
    size_t tmp_bytes = 0;     /* from the caching allocator: no fresh pages per call */
    if (!cnt) MF_FAIL(MF_ERR_NOMEM, "boxing: out of memory");

    if (from.kind == MF_SBP_P && to.kind == MF_SBP_B) {
        out = new_like(dt, nd, pb.count, false);
        if (!out) MF_TRY_OUT(mf_last_status());
        MF_TRY_OUT(mfi_allreduce(comm, mf_tensor_data(in), mf_tensor_data(out), mf_tensor_numel(out), dt));
    } else if ((from.kind == MF_SBP_B || from.kind == MF_SBP_S) && to.kind == MF_SBP_P) {
        out = new_like(dt, nd, pb.count, true);
        if (!out) MF_TRY_OUT(mf_last_status());
        if (from.kind == MF_SBP_B && k == 0) MF_TRY_OUT(mf_copy_(out, in));
        if (from.kind == MF_SBP_S) {
            int ax = from.axis;
            int64_t s0, len;
            mfi_split(pb.count[ax], n, k, &s0, &len);
            mfi_unpack_axis(mf_tensor_data(in), es, prod(pb.count, 0, ax), pb.count[ax], prod(pb.count, ax + 1, nd),
                            s0, len, mf_tensor_data(out));
        }
    } else if (from.kind == MF_SBP_B && to.kind == MF_SBP_S) {
        int64_t s0, len;
        mfi_split(pb.count[to.axis], n, k, &s0, &len);
        mf_tensor *v = mf_narrow(in, to.axis, s0, len);
        out = v ? mfi_contiguous_raw(v) : NULL;
        mf_tensor_destroy(v);
        if (!out) MF_TRY_OUT(mf_last_status());
    } else if (from.kind == MF_SBP_S && to.kind == MF_SBP_B) {
        int ax = from.axis;
        int64_t outer = prod(pb.count, 0, ax), inner = prod(pb.count, ax + 1, nd), s0, len;
        out = new_like(dt, nd, pb.count, false);
        if (!out) MF_TRY_OUT(mf_last_status());
        for (int r = 0; r < n; r++) {
            mfi_split(pb.count[ax], n, r, &s0, &len);
            cnt[r] = outer * len * inner;
        }
        if (outer == 1) {
            MF_TRY_OUT(mfi_allgather(comm, mf_tensor_data(in), mf_tensor_data(out), cnt, dt));
        } else {
            tmp = mfi_alloc_use(MF_DEV_CPU, tmp_bytes = (size_t)mf_tensor_numel(out) * es + 1, MF_MEM_COMM);
            if (!tmp) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
            MF_TRY_OUT(mfi_allgather(comm, mf_tensor_data(in), tmp, cnt, dt));
            size_t off = 0;
            for (int r = 0; r < n; r++) {
                mfi_split(pb.count[ax], n, r, &s0, &len);
                mfi_unpack_axis((char *)tmp + off * es, es, outer, pb.count[ax], inner, s0, len, mf_tensor_data(out));
                off += (size_t)cnt[r];
            }
        }
    } else if (from.kind == MF_SBP_P && to.kind == MF_SBP_S) {
        int ax = to.axis;
        int64_t outer = prod(pb.count, 0, ax), inner = prod(pb.count, ax + 1, nd), s0, len;
        out = new_like(dt, nd, ob.count, false);
        /* pieces along the outermost axis are already back to back */
        tmp = outer == 1 ? NULL : mfi_alloc_use(MF_DEV_CPU, tmp_bytes = (size_t)mf_tensor_numel(in) * es + 1, MF_MEM_COMM);
        if (!out || (outer != 1 && !tmp)) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
        size_t off = 0;
        for (int r = 0; r < n; r++) {
            mfi_split(pb.count[ax], n, r, &s0, &len);
            cnt[r] = outer * len * inner;
            if (tmp)
                mfi_pack_axis(mf_tensor_data(in), es, outer, pb.count[ax], inner, s0, len, (char *)tmp + off * es);
            off += (size_t)cnt[r];
        }
        MF_TRY_OUT(mfi_reduce_scatter(comm, tmp ? tmp : mf_tensor_data(in), mf_tensor_data(out), cnt, dt));
    } else if (from.kind == MF_SBP_S && to.kind == MF_SBP_S) {
        /* all-to-all: send peer j my block of its b-range; receive peer
         * i's a-range of my b-range */
        int A = from.axis, B = to.axis;
        mfi_box ib;
        mfi_region(&a->gm, cur, p, p->coord, &ib);
        int64_t s0, len;
        size_t nin = (size_t)mf_tensor_numel(in), nout;
        out = new_like(dt, nd, ob.count, false);
        if (!out) MF_TRY_OUT(mf_last_status());
        nout = (size_t)mf_tensor_numel(out);
        tmp = mfi_alloc_use(MF_DEV_CPU, tmp_bytes = (nin + nout) * es + 1, MF_MEM_COMM);
        if (!tmp) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
        char *sbuf = tmp, *rbuf = (char *)tmp + nin * es;
        int64_t so = prod(ib.count, 0, B), si = prod(ib.count, B + 1, nd);
        int64_t ro = prod(ob.count, 0, A), ri = prod(ob.count, A + 1, nd);
        size_t off = 0;
        for (int r = 0; r < n; r++) {
            mfi_split(pb.count[B], n, r, &s0, &len);
            cnt[r] = so * len * si;
            mfi_pack_axis(mf_tensor_data(in), es, so, ib.count[B], si, s0, len, sbuf + off * es);
            off += (size_t)cnt[r];
            mfi_split(pb.count[A], n, r, &s0, &len);
            cnt2[r] = ro * len * ri;
        }
        MF_TRY_OUT(mfi_alltoall(comm, sbuf, cnt, rbuf, cnt2, dt));
        off = 0;
        for (int r = 0; r < n; r++) {
            mfi_split(pb.count[A], n, r, &s0, &len);
            mfi_unpack_axis(rbuf + off * es, es, ro, ob.count[A], ri, s0, len, mf_tensor_data(out));
            off += (size_t)cnt2[r];
        }
    } else {
        char x[16], y[16];
        MF_FAIL_OUT(MF_ERR_INTERNAL, "boxing: no step from %s to %s", mfi_sbp_str(from, x, sizeof x),
                    mfi_sbp_str(to, y, sizeof y));
    }
    *cur = nxt;
out:
    free(cnt);
    if (tmp) mfi_free_use(MF_DEV_CPU, tmp, tmp_bytes, MF_MEM_COMM);
    if (st != MF_OK) {
        mf_tensor_destroy(out);
        return st;
    }
    mf_tensor_destroy(in);
    *t = out;
    return MF_OK;
}

/* ---------------------------------------------------------- general path */
static bool intersect(const mfi_box *x, const mfi_box *y, int nd, mfi_box *r)
{
    for (int i = 0; i < nd; i++) {
        int64_t lo = x->start[i] > y->start[i] ? x->start[i] : y->start[i];
        int64_t hx = x->start[i] + x->count[i], hy = y->start[i] + y->count[i];
        int64_t hi = hx < hy ? hx : hy;
        if (hi <= lo) return false;
        r->start[i] = lo;
        r->count[i] = hi - lo;
    }
    return true;
}

/* The source member that serves receiver member r for source coordinates
 * whose split dimensions are fixed by `coord`: B and P dimensions follow
 * the receiver (same placement) or its index (another placement). */
static void source_coords(const box_attrs *a, const mf_nd_sbp *cur, int r, const int *scoord_split, int *sc)
{
    int rc[MF_MAX_MESH];
    mfi_placement_coords(a->dst, r, rc);
    bool same = mf_placement_equal(a->src, a->dst);
    for (int e = 0; e < a->src->mesh_ndim; e++)
        sc[e] = cur->d[e].kind == MF_SBP_S ? scoord_split[e] : same ? rc[e] : r % a->src->mesh[e];
}

/* t: local piece under cur on src (NULL outside src) -> piece under tgt
 * on dst (NULL outside dst). */
/* One general redistribution in flight: the output piece, the packed
 * sends and the receive buffers with where they go. */
typedef struct pending {
    mf_tensor *o;
    int nd;
    size_t es;
    mfi_box mine;
    mfi_p2p *sends, *recvs;
    mfi_box *rboxes;
    int nsend, nrecv;
    bool nodata;     /* meta tensors in a simulated world: the calls, not the bytes */
    mfi_xreq *x;
} pending;

static void pending_free(pending *pd)
{
    for (int i = 0; pd->sends && i < pd->nsend; i++) free(pd->sends[i].buf);
    for (int i = 0; pd->recvs && i < pd->nrecv; i++) free(pd->recvs[i].buf);
    free(pd->sends);
    free(pd->recvs);
    free(pd->rboxes);
    mf_tensor_destroy(pd->o);
    memset(pd, 0, sizeof *pd);
}

/* Packs and posts every transfer of t (cur on src) to tgt on dst over c
 * with tag: each destination piece gets the intersection of every source
 * piece with it, copied locally when source and destination are this
 * rank. */
static mf_status general_post(const box_attrs *a, const mf_nd_sbp *cur, const mf_nd_sbp *tgt, mf_tensor *t, mfi_comm *c,
                              int tag, pending *pd)
{
    const mf_placement *S = a->src, *D = a->dst;
    int nd = a->gm.ndim;
    size_t es = mf_dtype_size(a->gm.dtype);
    memset(pd, 0, sizeof *pd);
    pd->nd = nd;
    pd->es = es;
    /* on the meta device nothing reads the bytes: the messages are posted
     * (the simulated world counts them) without packing or placing data */
    pd->nodata = S->dev == MF_DEV_META;
    bool in_src = S->index >= 0 && (t || pd->nodata), in_dst = D->index >= 0;
    mfi_box sb;
    if (in_src) mfi_region(&a->gm, cur, S, S->coord, &sb);
    if (in_dst) mfi_region(&a->gm, tgt, D, D->coord, &pd->mine);
    pd->o = in_dst ? mfi_tensor_new(a->gm.dtype, nd, pd->mine.count) : NULL;
    if (in_dst && !pd->o) return mf_last_status();
    int cap = 16;
    pd->sends = malloc((size_t)cap * sizeof *pd->sends);
    pd->recvs = malloc((size_t)cap * sizeof *pd->recvs);
    pd->rboxes = malloc((size_t)cap * sizeof *pd->rboxes);
    mf_status st = MF_OK;
    if (!pd->sends || !pd->recvs || !pd->rboxes) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
    int nsplit = 1, split_dims[MF_MAX_MESH], ns = 0;
    for (int e = 0; e < S->mesh_ndim; e++)
        if (cur->d[e].kind == MF_SBP_S) {
            split_dims[ns++] = e;
            nsplit *= S->mesh[e];
        }
    /* this rank's own split coordinates: the only source pieces it sends
     * from are those with them, so a receiver that is not this rank is
     * served (by this rank) for one q at most; on many ranks that keeps
     * the loop linear in their count */
    int q_mine = 0;
    for (int i = 0; in_src && i < ns; i++) q_mine = q_mine * S->mesh[split_dims[i]] + S->coord[split_dims[i]];
    for (int r = 0; r < D->n; r++) {
        const bool recv_r = in_dst && r == D->index;
        if (!recv_r && !in_src) continue;
        mfi_box rb;
        bool rb_done = false;
        for (int q = recv_r ? 0 : q_mine; q < (recv_r ? nsplit : q_mine + 1); q++) {
            int split[MF_MAX_MESH] = {0}, sc[MF_MAX_MESH], rem = q;
            for (int i = ns - 1; i >= 0; i--) {
                split[split_dims[i]] = rem % S->mesh[split_dims[i]];
                rem /= S->mesh[split_dims[i]];
            }
            source_coords(a, cur, r, split, sc);
            int s = mfi_placement_index_of(S, sc);
            bool i_send = in_src && s == S->index, i_recv = recv_r;
            if (!i_send && !i_recv) continue;
            if (!rb_done) {
                int rc[MF_MAX_MESH];
                mfi_placement_coords(D, r, rc);
                mfi_region(&a->gm, tgt, D, rc, &rb);
                rb_done = true;
            }
            mfi_box xb, ib;
            mfi_region(&a->gm, cur, S, sc, &xb);
            if (!intersect(&xb, &rb, nd, &ib)) continue;
            int64_t n = prod(ib.count, 0, nd), so[MF_MAX_DIMS], doff[MF_MAX_DIMS], zero[MF_MAX_DIMS] = {0};
            for (int i = 0; i < nd; i++) {
                so[i] = ib.start[i] - sb.start[i];
                doff[i] = ib.start[i] - pd->mine.start[i];
            }
            if (i_send && i_recv) {    /* to myself */
                if (!pd->nodata)
                    copy_block(mf_tensor_data(t), sb.count, so, mf_tensor_data(pd->o), pd->mine.count, doff, ib.count, nd,
                           es);
                continue;
            }
            if (pd->nsend == cap || pd->nrecv == cap) {
                cap *= 2;
                mfi_p2p *s2 = realloc(pd->sends, (size_t)cap * sizeof *s2);
                if (s2) pd->sends = s2;
                mfi_p2p *r2 = realloc(pd->recvs, (size_t)cap * sizeof *r2);
                if (r2) pd->recvs = r2;
                mfi_box *b2 = realloc(pd->rboxes, (size_t)cap * sizeof *b2);
                if (b2) pd->rboxes = b2;
                if (!s2 || !r2 || !b2) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
            }
            void *buf = malloc((size_t)n * es + 1);
            if (!buf) MF_FAIL_OUT(MF_ERR_NOMEM, "boxing: out of memory");
            if (i_send) {
                if (!pd->nodata) copy_block(mf_tensor_data(t), sb.count, so, buf, ib.count, zero, ib.count, nd, es);
                pd->sends[pd->nsend++] = (mfi_p2p){D->ranks[r], buf, n};
            } else {
                pd->rboxes[pd->nrecv] = ib;
                pd->recvs[pd->nrecv++] = (mfi_p2p){S->ranks[s], buf, n};
            }
        }
    }
    MF_TRY_OUT(mfi_exchange_start(c, pd->sends, pd->nsend, pd->recvs, pd->nrecv, a->gm.dtype, tag, &pd->x));
    return MF_OK;
out:
    pending_free(pd);
    return st;
}

/* Waits for pd's transfers and places what arrived; *out gets the piece
 * (NULL outside dst). pd is freed either way. */
static mf_status general_finish(pending *pd, mf_tensor **out)
{
    *out = NULL;
    mf_status st = mfi_exchange_wait(pd->x);
    pd->x = NULL;
    for (int i = 0; st == MF_OK && !pd->nodata && i < pd->nrecv; i++) {
        int64_t doff[MF_MAX_DIMS], zero[MF_MAX_DIMS] = {0};
        for (int k = 0; k < pd->nd; k++) doff[k] = pd->rboxes[i].start[k] - pd->mine.start[k];
        copy_block(pd->recvs[i].buf, pd->rboxes[i].count, zero, mf_tensor_data(pd->o), pd->mine.count, doff,
                   pd->rboxes[i].count, pd->nd, pd->es);
    }
    if (st == MF_OK) {
        *out = pd->o;
        pd->o = NULL;
    }
    pending_free(pd);
    return st;
}

static mf_status general(const box_attrs *a, const mf_nd_sbp *cur, const mf_nd_sbp *tgt, mf_tensor *t, mf_tensor **out)
{
    pending pd;
    *out = NULL;
    MF_TRY(general_post(a, cur, tgt, t, mfi_comm_world(), 7, &pd));
    return general_finish(&pd, out);
}

/* The whole forward: t (borrowed; NULL outside src) -> *out. */
static mf_status box_run(const box_attrs *a, mf_tensor *x, mf_tensor **out)
{
    const mf_placement *S = a->src, *D = a->dst;
    bool same = mf_placement_equal(S, D);
    mf_nd_sbp cur = a->from;
    mf_tensor *t = NULL;
    mf_status st = MF_OK;
    *out = NULL;
    if (S->index >= 0) {
        if (!x) MF_FAIL(MF_ERR_INTERNAL, "boxing: no local piece on a rank of the placement");
        t = mfi_contiguous_raw(x);
        if (!t) return mf_last_status();
    }
    if (same && S->index < 0) return MF_OK;
    if (same) {
        bool progress = true;
        while (progress && !mfi_nd_sbp_equal(&cur, &a->to)) {
            progress = false;
            for (int d = 0; d < cur.ndim; d++) {
                mf_sbp to = a->to.d[d];
                bool same_d = cur.d[d].kind == to.kind && (to.kind != MF_SBP_S || cur.d[d].axis == to.axis);
                if (same_d || !step_valid(&cur, d, to)) continue;
                MF_TRY_OUT(box_step(a, &cur, d, to, &t));
                progress = true;
            }
        }
        if (mfi_nd_sbp_equal(&cur, &a->to)) {
            *out = t;
            return MF_OK;
        }
    }
    /* general path: sum the partial dimensions that the target does not
     * keep partial (all of them across placements) */
    for (int d = 0; d < cur.ndim && S->index >= 0; d++)
        if (cur.d[d].kind == MF_SBP_P && (!same || a->to.d[d].kind != MF_SBP_P))
            MF_TRY_OUT(box_step(a, &cur, d, (mf_sbp){MF_SBP_B, 0}, &t));
    for (int d = 0; d < cur.ndim && S->index < 0; d++)
        if (cur.d[d].kind == MF_SBP_P) cur.d[d].kind = MF_SBP_B;
    mf_nd_sbp tgt = a->to;
    bool zero_dims[MF_MAX_MESH] = {false};
    for (int d = 0; d < tgt.ndim; d++)
        if (tgt.d[d].kind == MF_SBP_P && (!same || cur.d[d].kind != MF_SBP_P)) {
            tgt.d[d].kind = MF_SBP_B;
            zero_dims[d] = true;
        }
    mf_tensor *o = NULL;
    MF_TRY_OUT(general(a, &cur, &tgt, t, &o));
    for (int d = 0; o && d < tgt.ndim; d++)
        if (zero_dims[d] && D->coord[d] != 0) {
            st = mf_fill_(o, 0.0);
            break;
        }
    if (st != MF_OK) {
        mf_tensor_destroy(o);
        goto out;
    }
    *out = o;
out:
    mf_tensor_destroy(t);
    return st;
}

/* Boxing on a device runs on host copies (doc/design.md section 6, staging through
 * host memory): the piece is downloaded, boxed by the host algorithms
 * above, and the result goes to the destination placement's device. */
static mf_status box_staged(const box_attrs *a, mf_tensor *x, mf_tensor **out)
{
    if (a->src->dev == MF_DEV_CPU && a->dst->dev == MF_DEV_CPU && (!x || mf_tensor_device(x) == MF_DEV_CPU))
        return box_run(a, x, out);
    /* a simulated world's meta tensors: boxed where they are, as the CPU's
     * (its calls move nothing) */
    if (a->src->dev == MF_DEV_META && a->dst->dev == MF_DEV_META) return box_run(a, x, out);
    mf_tensor *h = x ? mfi_on_device(x, MF_DEV_CPU) : NULL;
    if (x && !h) return mf_last_status();
    int prev = mfi_device_push(MF_DEV_CPU);
    mf_tensor *o = NULL;
    mf_status st = box_run(a, h, &o);
    mfi_device_pop(prev);
    mf_tensor_destroy(h);
    *out = NULL;
    if (st != MF_OK || !o) return st;
    *out = mfi_on_device(o, a->dst->dev);
    mf_tensor_destroy(o);
    return *out ? MF_OK : mf_last_status();
}

/* ------------------------------------------------------------ the op */
static mf_status box_forward(mfi_call *c, mf_tensor **out)
{
    return box_staged(c->attrs, c->in[0], out);
}

static mf_status box_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const box_attrs *a = c->attrs;
    box_attrs b = *a;
    b.src = a->dst;
    b.dst = a->src;
    b.from = mfi_nd_sbp_dual(&a->to);
    b.to = mfi_nd_sbp_dual(&a->from);
    return box_staged(&b, gy, &gx[0]);
}

static const mfi_op box_op = {"boxing", MFI_OP_OWN_OUTPUT, NULL, box_forward, box_backward, NULL, NULL};

void mfi_box_context(const char *what, const mf_tensor *t, const mf_nd_sbp *from, const mf_nd_sbp *to)
{
    if (!mfi_ledger_on()) return;
    char a[96], b[96], sh[128], text[320];
    snprintf(text, sizeof text, "%s '%s' %s %s %s -> %s", what, t ? mf_tensor_name(t) : "", t ? mf_dtype_name(t->dtype) : "",
             t ? mf_tensor_shape_str(t, sh, sizeof sh) : "", mf_nd_sbp_str(from, a, sizeof a), mf_nd_sbp_str(to, b, sizeof b));
    mfi_ledger_context(text);
}

mf_status mfi_boxing(mf_tensor *x, const mfi_meta *gm, const mf_placement *src, const mf_nd_sbp *from,
                  const mf_placement *dst, const mf_nd_sbp *to, mf_tensor **out)
{
    *out = NULL;
    if (mf_placement_equal(src, dst) && mfi_nd_sbp_equal(from, to)) {
        if (x) *out = mf_tensor_retain(x);
        return MF_OK;
    }
    box_attrs a = {src, dst, *from, *to, *gm};
    if (src->index >= 0 && dst->index >= 0) {
        *out = mfi_apply(&box_op, 1, &x, &a, sizeof a);
        return *out ? MF_OK : mf_last_status();
    }
    return box_staged(&a, x, out);
}

double mfi_box_cost(mf_sbp from, mf_sbp to, int n, double bytes)
{
    bool same = from.kind == to.kind && (from.kind != MF_SBP_S || from.axis == to.axis);
    if (same) return 0;
    if (n <= 1) return 0.001 * bytes;             /* a copy */
    double f = (double)(n - 1) / n;
    if (from.kind == MF_SBP_B && to.kind == MF_SBP_S) return 0.1 * bytes / n;   /* a local slice */
    /* zero-fill: a full-size tensor, and full-size compute after it */
    if (to.kind == MF_SBP_P) return bytes;
    if (from.kind == MF_SBP_P && to.kind == MF_SBP_B) return 2 * f * bytes;
    if (from.kind == MF_SBP_S && to.kind == MF_SBP_S) return f * bytes / n;
    return f * bytes;   /* allgather, reduce-scatter */
}

/* ------------------------------------------------------------ transfers */
/* A redistribution in flight between placements, without autograd: how
 * pipeline stages pass activations and gradients. On the pipeline
 * communicator, so its messages never match the boxing path's. */
struct mf_transfer {
    pending pd;
    mf_placement *dst;
    mf_nd_sbp to;
    mfi_meta gm;
};

static bool has_partial(const mf_nd_sbp *s)
{
    for (int d = 0; d < s->ndim; d++)
        if (s->d[d].kind == MF_SBP_P) return true;
    return false;
}

mf_status mf_redistribute_start(mf_tensor *t, const mf_placement *p, const char *sbp, mf_transfer **out)
{
    const char *fn = "mf_redistribute_start";
    if (!out) MF_FAIL(MF_ERR_ARG, "%s: out is NULL", fn);
    *out = NULL;
    MF_TRY(mfi_check_input(fn, "the tensor", t));
    if (!t->global) MF_FAIL(MF_ERR_ARG, "%s: the tensor is local; make it global with mf_to_global", fn);
    if (!p) MF_FAIL(MF_ERR_ARG, "%s: the placement is NULL", fn);
    mf_nd_sbp to;
    MF_TRY(mfi_nd_sbp_from(fn, sbp, p, t->ndim, &to));
    return mfi_transfer_start(t, p, &to, out);
}

mf_status mfi_transfer_start(mf_tensor *t, const mf_placement *p, const mf_nd_sbp *sbp, mf_transfer **out)
{
    const char *fn = "mf_redistribute_start";
    const mfi_global *g = t->global;
    mf_nd_sbp to = *sbp;
    char a1[128], a2[128];
    if (g->placement->dev != p->dev)
        MF_FAIL(MF_ERR_ARG, "%s: no path from placement '%s' to '%s' (device types differ)", fn,
                mf_placement_str(g->placement, a1, sizeof a1), mf_placement_str(p, a2, sizeof a2));
    if (has_partial(&g->sbp) || has_partial(&to))
        MF_FAIL(MF_ERR_ARG, "%s: %s -> %s: transfers move split or broadcast data; sum a partial tensor first "
                "(mf_redistribute to B)", fn, mf_nd_sbp_str(&g->sbp, a1, sizeof a1), mf_nd_sbp_str(&to, a2, sizeof a2));
    mf_transfer *x = calloc(1, sizeof *x);
    if (!x) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", fn);
    mfi_meta_of(t, &x->gm);
    x->to = to;
    x->dst = mf_placement_retain((mf_placement *)p);
    box_attrs a = {g->placement, p, g->sbp, to, x->gm};
    mf_status st = MF_OK;
    if (g->placement->index >= 0 || p->index >= 0) {
        /* packed from host memory; mf_transfer_finish's wrap moves the
         * result to the destination's device */
        const bool meta = g->placement->dev == MF_DEV_META;   /* no bytes to pack (general_post) */
        mf_tensor *h = g->local && !meta ? mfi_on_device(g->local, MF_DEV_CPU) : NULL;
        if (g->local && !meta && !h) st = mf_last_status();
        int prev = mfi_device_push(MF_DEV_CPU);
        if (st == MF_OK) st = general_post(&a, &g->sbp, &to, h, mfi_comm_pipe(), 11, &x->pd);
        mfi_device_pop(prev);
        mf_tensor_destroy(h);
    }
    if (st != MF_OK) {
        mf_placement_destroy(x->dst);
        free(x);
        return st;
    }
    *out = x;
    return MF_OK;
}

bool mfi_transfer_test(mf_transfer *x) { return !x || mfi_exchange_test(x->pd.x); }

mf_tensor *mf_transfer_finish(mf_transfer *x)
{
    if (!x) {
        mfi_error(MF_ERR_ARG, "mf_transfer_finish: the transfer is NULL");
        return NULL;
    }
    mf_tensor *local = NULL;
    mf_status st = general_finish(&x->pd, &local);
    mf_tensor *out = st == MF_OK ? mfi_global_wrap(local, x->dst, &x->to, &x->gm, false) : NULL;
    mf_placement_destroy(x->dst);
    free(x);
    return out;
}
