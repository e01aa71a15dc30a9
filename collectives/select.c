/*
 * collectives/select.c - which algorithm runs each collective: the one
 * place that decides (doc/design.md section 6), and the entry points that dispatch.
 *
 * MF_ALLREDUCE_ALGO, MF_REDUCE_SCATTER_ALGO and MF_ALLGATHER_ALGO force
 * an algorithm for every call of their collective. Without them a
 * tuning file (MF_COLL_TUNING, tuning.c), measured on the user's own
 * network by `mpiflow-bench tune`, decides for the communicators it
 * describes; the table below for the others, by collective, rank count,
 * whether the ranks span several nodes, and message size; it follows the
 * measurements in doc/performance.md (mpiflow-bench allreduce|
 * reduce_scatter|allgather).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "collectives/coll_hier.h"
#include "collectives/comm.h"
#include "base/error.h"

static const char *const names[MF_COLL_ALGO_COUNT] = {"auto", "mpi", "ring", "rhd", "hier"};
static const char *const op_names[MFI_COLL_OPS] = {"allreduce", "reduce-scatter", "allgather"};
static const char *const env_names[MFI_COLL_OPS] = {"MF_ALLREDUCE_ALGO", "MF_REDUCE_SCATTER_ALGO",
                                                    "MF_ALLGATHER_ALGO"};

const char *mf_coll_algo_name(mf_coll_algo a)
{
    return a >= 0 && a < MF_COLL_ALGO_COUNT ? names[a] : "?";
}

mf_status mf_coll_algo_parse(const char *name, mf_coll_algo *out)
{
    for (int a = 0; name && a < MF_COLL_ALGO_COUNT; a++)
        if (!strcmp(name, names[a])) {
            *out = (mf_coll_algo)a;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "collective algorithm '%s' is not one of auto, mpi, ring, rhd, hier", name ? name : "(null)");
}

static bool supports(mfi_coll_op op, mf_coll_algo a)
{
    return a != MF_COLL_RHD || op == MFI_ALLREDUCE;
}

static mf_status check_algo(mfi_coll_op op, mf_coll_algo a, const char *where)
{
    if (a < 0 || a >= MF_COLL_ALGO_COUNT) MF_FAIL(MF_ERR_ARG, "%s: unknown algorithm %d", where, (int)a);
    if (!supports(op, a))
        MF_FAIL(MF_ERR_ARG, "%s: %s has no '%s' algorithm (it has mpi, ring, hier)", where, op_names[op], names[a]);
    return MF_OK;
}

/* The op's variable, read once: MF_COLL_AUTO when unset. */
static mf_status forced(mfi_coll_op op, mf_coll_algo *out)
{
    static _Atomic int cached[MFI_COLL_OPS] = {-1, -1, -1};   /* read by the progress thread too */
    if (cached[op] < 0) {
        mf_coll_algo a = MF_COLL_AUTO;
        const char *e = getenv(env_names[op]);
        if (e && *e) {
            if (mf_coll_algo_parse(e, &a) != MF_OK)
                MF_FAIL(MF_ERR_ARG, "%s='%s' is not one of auto, mpi, ring, rhd, hier", env_names[op], e);
            MF_TRY(check_algo(op, a, env_names[op]));
        }
        cached[op] = (int)a;
    }
    *out = (mf_coll_algo)cached[op];
    return MF_OK;
}

mf_status mfi_coll_check_env(void)
{
    mf_coll_algo a;
    for (int op = 0; op < MFI_COLL_OPS; op++) MF_TRY(forced((mfi_coll_op)op, &a));
    return mfi_coll_tuning_load();
}

/* The built-in table: the first rule that matches wins. From
 * mpiflow-bench on a 2-core virtual machine (doc/performance.md):
 * - 2 ranks: halving-doubling and the ring beat MPICH's allreduce by
 *   1.2-1.3x from 4 KiB to 16 MiB, the ring from 128 KiB to 2 MiB; at
 *   64 KiB (MPICH's eager limit) and from 32 MiB the shared-memory window
 *   wins (1.5-13x: no fresh pages), and for reduce-scatters up to
 *   512 KiB; the ring reduce-scatter beats MPICH's at every size, and
 *   allgathers are even.
 * - more ranks than cores: every step costs a scheduler slice, so the
 *   fewest steps win: the window's two barriers from 64 KiB to 8 MiB
 *   (32 MiB for reduce-scatters and allgathers), halving-doubling
 *   (log2 n steps) for allreduces outside that.
 * - several nodes: the hierarchical algorithms send 1/L of the bytes
 *   between nodes. */
typedef struct rule {
    mfi_coll_op op;
    int min_ranks, max_ranks;
    int nodes;           /* 0: any, 1: one node, 2: several nodes with several ranks each */
    int64_t min_bytes, max_bytes;
    mf_coll_algo algo;
} rule;

#define KiB ((int64_t)1 << 10)
#define MiB ((int64_t)1 << 20)
#define ANY ((int64_t)1 << 62)
#define MANY (1 << 30)

static const rule table[] = {
    {MFI_ALLREDUCE, 2, 2, 1, 64 * KiB, 128 * KiB, MF_COLL_HIER},
    {MFI_ALLREDUCE, 2, 2, 1, 32 * MiB, ANY, MF_COLL_HIER},
    {MFI_ALLREDUCE, 2, 2, 0, 128 * KiB, 2 * MiB, MF_COLL_RING},
    {MFI_ALLREDUCE, 3, MANY, 0, 64 * KiB, 8 * MiB, MF_COLL_HIER},
    {MFI_ALLREDUCE, 2, MANY, 0, 0, ANY, MF_COLL_RHD},
    {MFI_REDUCE_SCATTER, 2, 2, 1, 64 * KiB, 512 * KiB, MF_COLL_HIER},
    {MFI_REDUCE_SCATTER, 2, 2, 0, 0, ANY, MF_COLL_RING},
    {MFI_REDUCE_SCATTER, 3, MANY, 0, 64 * KiB, 32 * MiB, MF_COLL_HIER},
    {MFI_REDUCE_SCATTER, 3, MANY, 0, 32 * MiB, ANY, MF_COLL_RING},
    {MFI_ALLGATHER, 2, 2, 1, 64 * KiB, 128 * KiB, MF_COLL_HIER},
    {MFI_ALLGATHER, 2, 2, 0, 0, ANY, MF_COLL_RING},
    {MFI_ALLGATHER, 3, MANY, 0, 64 * KiB, 32 * MiB, MF_COLL_HIER},
};

/* 1: c lies on one node; 2: several nodes, each with several of c's
 * ranks (the hierarchical algorithms' case); 3: several nodes, one rank
 * each, or uneven */
mf_status mfi_coll_node_class(mfi_comm *c, int *cls)
{
    *cls = 1;
    if (mfi_comm_node_count() == 1) return MF_OK;
    if (c->sim) {   /* the layout it stands for */
        *cls = c->sim_nodes == 1 ? 1 : c->sim_local > 1 && c->size % c->sim_local == 0 ? 2 : 3;
        return MF_OK;
    }
    mfi_hier *h;
    MF_TRY(mfi_hier_get(c, &h));   /* collective over c; once */
    *cls = h->nnodes == 1 ? 1 : h->usable && h->local_size > 1 ? 2 : 3;
    return MF_OK;
}

static mf_coll_algo lookup(mfi_coll_op op, int ranks, int cls, int64_t bytes, bool flat)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        const rule *r = &table[i];
        if (r->op != op || ranks < r->min_ranks || ranks > r->max_ranks) continue;
        if (bytes < r->min_bytes || bytes >= r->max_bytes) continue;
        if (r->nodes && r->nodes != cls) continue;
        if (flat && r->algo == MF_COLL_HIER) continue;
        return r->algo;
    }
    /* ranks that share CPUs keep to point-to-point messages, whose waits
     * yield (doc/collectives.md, "Waiting"); MPI's collectives spin.
     * Reduce-scatters sum as data parallel's allreduce (reduce_scatter_rhd). */
    if (mfi_comm_waits_yield()) return op == MFI_ALLGATHER ? MF_COLL_RING : MF_COLL_RHD;
    return MF_COLL_MPI;
}

mf_status mfi_coll_choose(mfi_coll_op op, mfi_comm *c, int64_t bytes, mf_coll_algo *out)
{
    MF_TRY(forced(op, out));
    if (*out != MF_COLL_AUTO) return MF_OK;
    int cls;
    MF_TRY(mfi_coll_node_class(c, &cls));
    if (!mfi_coll_tuning_lookup(op, c->size, cls, bytes, out)) *out = lookup(op, c->size, cls, bytes, false);
    return MF_OK;
}

/* ------------------------------------------------------------ dispatch */
static mf_status run_allreduce(mfi_comm *c, void *buf, int64_t count, mf_dtype dt, mf_coll_algo a)
{
    switch (a) {
    case MF_COLL_RING: return mfi_allreduce_ring(c, buf, count, dt);
    case MF_COLL_RHD: return mfi_allreduce_rhd(c, buf, count, dt);
    case MF_COLL_HIER: return mfi_allreduce_hier(c, buf, count, dt);
    default: return mfi_allreduce_mpi(c, buf, count, dt);
    }
}

typedef mf_status (*piece_fn)(mfi_comm *, const void *, void *, const int64_t *, mf_dtype);

/* A small reduce-scatter as a halving-doubling allreduce that keeps this
 * rank's piece: where ranks wait politely it stands in for MPI's call
 * (lookup), and it sums in the order data parallel's allreduce does, so
 * ZeRO's steps stay bit for bit those of plain data parallel. */
static mf_status reduce_scatter_rhd(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    int64_t total = 0, off = 0;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) off = total;
        total += counts[r];
    }
    size_t es = mf_dtype_size(dt);
    char *all = mfi_comm_scratch_at(c, 1, (size_t)total * es);
    if (!all) MF_FAIL(MF_ERR_NOMEM, "reduce-scatter: no memory for %lld bytes", (long long)total * (long long)es);
    memcpy(all, send, (size_t)total * es);
    MF_TRY(mfi_allreduce_rhd(c, all, total, dt));
    memcpy(recv, all + (size_t)off * es, (size_t)counts[c->rank] * es);
    return MF_OK;
}

static piece_fn piece_algo(mfi_coll_op op, mf_coll_algo a)
{
    bool rs = op == MFI_REDUCE_SCATTER;
    switch (a) {
    case MF_COLL_RING: return rs ? mfi_reduce_scatter_ring : mfi_allgather_ring;
    case MF_COLL_HIER: return rs ? mfi_reduce_scatter_hier : mfi_allgather_hier;
    case MF_COLL_RHD: return rs ? reduce_scatter_rhd : mfi_allgather_ring;   /* chosen, never forced (supports) */
    default: return rs ? mfi_reduce_scatter_mpi : mfi_allgather_mpi;
    }
}

mf_status mfi_allreduce_flat(mfi_comm *c, void *buf, int64_t count, mf_dtype dt)
{
    if (c->size == 1 || count == 0) return MF_OK;
    int64_t bytes = count * (int64_t)mf_dtype_size(dt);
    return run_allreduce(c, buf, count, dt, lookup(MFI_ALLREDUCE, c->size, 1, bytes, true));
}

static int64_t total_bytes(const mfi_comm *c, const int64_t *counts, mf_dtype dt)
{
    int64_t all = 0;
    for (int r = 0; r < c->size; r++) all += counts[r];
    return all * (int64_t)mf_dtype_size(dt);
}

mf_status mfi_reduce_scatter_flat(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    mf_coll_algo a = lookup(MFI_REDUCE_SCATTER, c->size, 1, total_bytes(c, counts, dt), true);
    return piece_algo(MFI_REDUCE_SCATTER, a)(c, send, recv, counts, dt);
}

mf_status mfi_allgather_flat(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    mf_coll_algo a = lookup(MFI_ALLGATHER, c->size, 1, total_bytes(c, counts, dt), true);
    return piece_algo(MFI_ALLGATHER, a)(c, send, recv, counts, dt);
}

static mf_status check_call(const char *what, const mfi_comm *c, mf_dtype dt)
{
    if (!c || (c->comm == MPI_COMM_NULL && !c->sim)) MF_FAIL(MF_ERR_STATE, "%s: no communicator (is mf_init done?)", what);
    if (mfi_mpi_type(dt) == MPI_DATATYPE_NULL) MF_FAIL(MF_ERR_DTYPE, "%s: unsupported dtype %d", what, (int)dt);
    return MF_OK;
}

static mf_status allreduce_algo(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo a)
{
    MF_TRY(check_call("allreduce", c, dt));
    if (count < 0) MF_FAIL(MF_ERR_ARG, "allreduce: negative count %lld", (long long)count);
    if (count == 0) return MF_OK;
    if (c->sim) return mfi_sim_call(MF_COMM_ALLREDUCE, c, count * (int64_t)mf_dtype_size(dt), a);
    if (send != recv) memcpy(recv, send, (size_t)count * mf_dtype_size(dt));
    if (c->size == 1) return MF_OK;
    mfi_tally(MF_COMM_ALLREDUCE, count * (int64_t)mf_dtype_size(dt));
    if (a == MF_COLL_AUTO) MF_TRY(mfi_coll_choose(MFI_ALLREDUCE, c, count * (int64_t)mf_dtype_size(dt), &a));
    if (mfi_coll_deterministic()) return mfi_allreduce_pieces(c, recv, c->size, recv, count, dt, a);
    return run_allreduce(c, recv, count, dt, a);
}

mf_status mfi_allreduce_algo(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo a)
{
    int tok = mfi_ledger_enter(c, "allreduce");
    mf_status st = allreduce_algo(c, send, recv, count, dt, a);
    mfi_ledger_leave(tok);
    return st;
}

static mf_status pieces_algo(mfi_coll_op op, mfi_comm *c, const void *send, void *recv, const int64_t *counts,
                             mf_dtype dt, mf_coll_algo a)
{
    MF_TRY(check_call(op_names[op], c, dt));
    for (int r = 0; r < c->size; r++)
        if (counts[r] < 0) MF_FAIL(MF_ERR_ARG, "%s: negative count for rank %d", op_names[op], r);
    if (c->sim)
        return mfi_sim_call(op == MFI_REDUCE_SCATTER ? MF_COMM_REDUCE_SCATTER : MF_COMM_ALLGATHER, c,
                            total_bytes(c, counts, dt), a);
    if (c->size == 1) {
        if (send != recv) memcpy(recv, send, (size_t)counts[0] * mf_dtype_size(dt));
        return MF_OK;
    }
    int64_t bytes = total_bytes(c, counts, dt);
    if (bytes == 0) return MF_OK;
    mfi_tally(op == MFI_REDUCE_SCATTER ? MF_COMM_REDUCE_SCATTER : MF_COMM_ALLGATHER, bytes);
    if (op == MFI_REDUCE_SCATTER && mfi_coll_deterministic())
        return mfi_reduce_scatter_pieces(c, send, c->size, counts, recv, dt);
    if (a == MF_COLL_AUTO) MF_TRY(mfi_coll_choose(op, c, bytes, &a));
    return piece_algo(op, a)(c, send, recv, counts, dt);
}

mf_status mfi_pieces_algo(mfi_coll_op op, mfi_comm *c, const void *send, void *recv, const int64_t *counts,
                          mf_dtype dt, mf_coll_algo a)
{
    int tok = mfi_ledger_enter(c, op_names[op]);
    mf_status st = pieces_algo(op, c, send, recv, counts, dt, a);
    mfi_ledger_leave(tok);
    return st;
}

mf_status mfi_allreduce(mfi_comm *c, const void *send, void *recv, int64_t count, mf_dtype dt)
{
    return mfi_allreduce_algo(c, send, recv, count, dt, MF_COLL_AUTO);
}

mf_status mfi_reduce_scatter(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    return mfi_pieces_algo(MFI_REDUCE_SCATTER, c, send, recv, counts, dt, MF_COLL_AUTO);
}

mf_status mfi_allgather(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt)
{
    return mfi_pieces_algo(MFI_ALLGATHER, c, send, recv, counts, dt, MF_COLL_AUTO);
}

/* ------------------------------------------------------------ public */
mf_status mf_allreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo)
{
    if (!buf && count > 0) MF_FAIL(MF_ERR_ARG, "mf_allreduce: buf is NULL");
    MF_TRY(check_algo(MFI_ALLREDUCE, algo, "mf_allreduce"));
    return mfi_allreduce_algo(mfi_comm_world(), buf, buf, count, dt, algo);
}

mf_status mf_iallreduce(void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo, mf_request **req)
{
    if (!req) MF_FAIL(MF_ERR_ARG, "mf_iallreduce: req is NULL");
    *req = NULL;
    if (!buf && count > 0) MF_FAIL(MF_ERR_ARG, "mf_iallreduce: buf is NULL");
    if (count < 0) MF_FAIL(MF_ERR_ARG, "mf_iallreduce: negative count %lld", (long long)count);
    MF_TRY(check_algo(MFI_ALLREDUCE, algo, "mf_iallreduce"));
    MF_TRY(check_call("mf_iallreduce", mfi_comm_world(), dt));
    return mfi_iallreduce(mfi_comm_world(), buf, count, dt, algo, req);
}

bool mf_test(mf_request *req) { return mfi_test(req); }

void mf_pieces_range(int npieces, int *first, int *count)
{
    int64_t f = 0, k = 0;
    mfi_comm *c = mfi_comm_world();
    if (npieces > 0) mfi_block(npieces, c->size > 0 ? c->size : 1, c->rank, &f, &k);
    *first = (int)f;
    *count = (int)k;
}

mf_status mf_allreduce_pieces(const void *local, void *out, int64_t count, mf_dtype dt, int npieces,
                              mf_coll_algo algo)
{
    if (npieces < 1) MF_FAIL(MF_ERR_ARG, "mf_allreduce_pieces: npieces %d < 1", npieces);
    if (count < 0) MF_FAIL(MF_ERR_ARG, "mf_allreduce_pieces: negative count %lld", (long long)count);
    if (!out && count > 0) MF_FAIL(MF_ERR_ARG, "mf_allreduce_pieces: out is NULL");
    MF_TRY(check_algo(MFI_ALLREDUCE, algo, "mf_allreduce_pieces"));
    mfi_comm *c = mfi_comm_world();
    MF_TRY(check_call("mf_allreduce_pieces", c, dt));
    if (count == 0) return MF_OK;
    return mfi_allreduce_pieces(c, local, npieces, out, count, dt, algo);
}
mf_status mf_wait(mf_request *req) { return mfi_wait(req); }

mf_status mf_coll_choice(const char *op, int64_t bytes, mf_coll_algo *out)
{
    mfi_coll_op o;
    if (!out) MF_FAIL(MF_ERR_ARG, "mf_coll_choice: out is NULL");
    if (mfi_coll_op_parse(op, &o) != MF_OK) MF_FAIL(MF_ERR_ARG, "mf_coll_choice: %s", mf_last_error());
    mfi_comm *c = mfi_comm_world();
    MF_TRY(check_call("mf_coll_choice", c, MF_F32));
    if (c->size == 1) {
        *out = MF_COLL_MPI;
        return MF_OK;
    }
    return mfi_coll_choose(o, c, bytes, out);
}

mf_status mf_coll_node_class(int *cls)
{
    if (!cls) MF_FAIL(MF_ERR_ARG, "mf_coll_node_class: cls is NULL");
    mfi_comm *c = mfi_comm_world();
    MF_TRY(check_call("mf_coll_node_class", c, MF_F32));
    return mfi_coll_node_class(c, cls);
}

/* equal pieces of count elements over the world; req NULL: blocking */

static mf_status world_pieces(mfi_coll_op op, const char *fn, const void *send, void *recv, int64_t count,
                              mf_dtype dt, mf_coll_algo algo, mf_request **req)
{
    if (req) *req = NULL;
    if ((!send || !recv) && count > 0) MF_FAIL(MF_ERR_ARG, "%s: a buffer is NULL", fn);
    if (count < 0) MF_FAIL(MF_ERR_ARG, "%s: negative count %lld", fn, (long long)count);
    MF_TRY(check_algo(op, algo, fn));
    mfi_comm *c = mfi_comm_world();
    if (req) MF_TRY(check_call(fn, c, dt));
    int n = c->size > 0 ? c->size : 1;
    int64_t *counts = malloc((size_t)n * sizeof *counts);
    if (!counts) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory", fn);
    for (int r = 0; r < n; r++) counts[r] = count;
    mf_status st = req ? mfi_ipieces(op, c, send, recv, counts, dt, algo, req)
                       : mfi_pieces_algo(op, c, send, recv, counts, dt, algo);
    free(counts);
    return st;
}

mf_status mf_reduce_scatter(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo)
{
    return world_pieces(MFI_REDUCE_SCATTER, "mf_reduce_scatter", send, recv, count, dt, algo, NULL);
}

mf_status mf_ireduce_scatter(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo,
                             mf_request **req)
{
    if (!req) MF_FAIL(MF_ERR_ARG, "mf_ireduce_scatter: req is NULL");
    return world_pieces(MFI_REDUCE_SCATTER, "mf_ireduce_scatter", send, recv, count, dt, algo, req);
}

mf_status mf_allgather(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo)
{
    return world_pieces(MFI_ALLGATHER, "mf_allgather", send, recv, count, dt, algo, NULL);
}

mf_status mf_iallgather(const void *send, void *recv, int64_t count, mf_dtype dt, mf_coll_algo algo,
                        mf_request **req)
{
    if (!req) MF_FAIL(MF_ERR_ARG, "mf_iallgather: req is NULL");
    return world_pieces(MFI_ALLGATHER, "mf_iallgather", send, recv, count, dt, algo, req);
}
