/*
 * lib/plan/calibrate.c - measuring a calibration (mf_calibration_measure,
 * doc/planning.md): every rank runs the same kernels at once, so that
 * ranks sharing a node's cores are measured as they will train; the work
 * of each measurement is what the profiler counts (the cost functions a
 * step graph uses), so a rate here and an op there are the same measure.
 */
#include <math.h>
#include <stdio.h>
#include "lib/internal.h"
#include "collectives/coll.h"
#include "collectives/comm.h"
#include "mpiflow/predict.h"

/* seconds per call of fn, the median of 3 rounds of enough calls */
typedef mf_status (*bench_fn)(void *u);

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every rank makes the same calls (collectives are measured too): the
 * count of calls follows rank 0's times; the mean of five rounds, what a
 * step's many calls add up to where ranks wait for the scheduler. */
static mf_status time_calls(bench_fn fn, void *u, double min_s, double *per_call)
{
    double t[5];
    MF_TRY(fn(u));   /* warm: caches, primitives */
    mf_synchronize();
    int reps = 1;
    for (;;) {   /* enough calls for min_s */
        mfi_comm_barrier();
        double t0 = mf_time();
        for (int i = 0; i < reps; i++) MF_TRY(fn(u));
        mf_synchronize();
        double d = mf_time() - t0;
        MF_TRY(mfi_bcast(mfi_comm_world(), &d, 1, MF_F64, 0));
        if (d >= min_s || reps >= 1 << 20) break;
        reps *= d > 0 ? (int)fmin(16, fmax(2, min_s / d * 1.2)) : 16;
    }
    for (int r = 0; r < 5; r++) {
        mfi_comm_barrier();   /* every rank measures at once */
        double t0 = mf_time();
        for (int i = 0; i < reps; i++) MF_TRY(fn(u));
        mf_synchronize();
        t[r] = (mf_time() - t0) / reps;
    }
    *per_call = (t[0] + t[1] + t[2] + t[3] + t[4]) / 5;
    return MF_OK;
}

/* A kernel's time as the ranks of a node see it while all of them
 * compute: each rank calls it for the same wall-clock window, so where
 * ranks share cores their calls share them too (a count of calls would
 * let one rank finish before another starts). The median of three
 * windows. */
static mf_status time_kernel(bench_fn fn, void *u, double min_s, double *per_call)
{
    double t[3];
    MF_TRY(fn(u));
    mf_synchronize();
    for (int r = 0; r < 3; r++) {
        mfi_comm_barrier();
        double t0 = mf_time(), d = 0;
        long calls = 0;
        do {
            MF_TRY(fn(u));
            mf_synchronize();
            calls++;
            d = mf_time() - t0;
        } while (d < min_s);
        t[r] = d / calls;
    }
    mfi_comm_barrier();
    qsort(t, 3, sizeof *t, cmp_double);
    *per_call = t[1];
    return MF_OK;
}

/* the work one call does, as the profiler counts it */
static mf_status work_of(bench_fn fn, void *u, mf_prof_class cls, bool bytes, double *work)
{
    bool was = mf_profile_enabled();
    mf_profile_reset();
    mf_profile_enable(true);
    mf_status st = fn(u);
    mf_profile_enable(was);
    *work = bytes ? mf_profile_bytes(cls) : mf_profile_flops(cls);
    mf_profile_reset();
    return st;
}

typedef struct op_args {
    mf_tensor *a, *b, *c;
    int heads;
} op_args;

static mf_status run_matmul(void *u)
{
    op_args *a = u;
    mf_tensor *y = mf_matmul(a->a, a->b);
    mf_tensor_destroy(y);
    return y ? MF_OK : mf_last_status();
}

static mf_status run_conv(void *u)
{
    op_args *a = u;
    mf_conv2d_params p = {.stride = {1, 1}, .padding = {2, 2}, .dilation = {1, 1}, .groups = 1};
    mf_tensor *y = mf_conv2d(a->a, a->b, NULL, &p);
    mf_tensor_destroy(y);
    return y ? MF_OK : mf_last_status();
}

static mf_status run_attention(void *u)
{
    op_args *a = u;
    mf_tensor *y = mf_causal_self_attention(a->a, a->heads);
    mf_tensor_destroy(y);
    return y ? MF_OK : mf_last_status();
}

static mf_status run_add(void *u)
{
    op_args *a = u;
    mf_tensor *y = mf_add(a->a, a->b);
    mf_tensor_destroy(y);
    return y ? MF_OK : mf_last_status();
}

static void free_args(op_args *a)
{
    mf_tensor_destroy(a->a);
    mf_tensor_destroy(a->b);
    mf_tensor_destroy(a->c);
    memset(a, 0, sizeof *a);
}

static mf_status measure_op(mf_calibration *c, bench_fn fn, op_args *a, mf_prof_class cls, bool bytes,
                            double min_s, void (*add)(mf_calibration *, mf_prof_class, double, double))
{
    double work, s;
    mf_status st = work_of(fn, a, cls, bytes, &work);
    if (st == MF_OK) st = time_kernel(fn, a, min_s, &s);
    if (st == MF_OK && s > 0 && work > 0) add(c, cls, work, work / s);
    free_args(a);
    return st;
}

/* calibration.c's setters */
void mfi_calibration_add_rate(mf_calibration *c, mf_prof_class cls, double work, double rate);
void mfi_calibration_add_comm(mf_calibration *c, mf_comm_kind kind, int ranks, int nodes, double bytes, double s);
void mfi_calibration_set(mf_calibration *c, const char *source, double overhead);
void mfi_calibration_set_overlap(mf_calibration *c, double overlap);
mf_calibration *mfi_calibration_empty(void);

static mf_status measure_compute(mf_calibration *c, bool quick)
{
    double min_s = quick ? 0.005 : 0.05;
    op_args a;
    mf_manual_seed(1);
    static const int sq[] = {16, 32, 64, 128, 256, 512, 1024};
    for (size_t i = 0; i < sizeof sq / sizeof *sq - (quick ? 2 : 0); i++) {
        a = (op_args){.a = mf_randn(MF_F32, 2, (int64_t[]){sq[i], sq[i]}), .b = mf_randn(MF_F32, 2, (int64_t[]){sq[i], sq[i]})};
        MF_TRY(measure_op(c, run_matmul, &a, MF_PROF_GEMM, false, min_s, mfi_calibration_add_rate));
    }
    static const int rows[] = {256, 2048};   /* a transformer's: many rows, narrower matrices */
    for (size_t i = 0; i < 2; i++)
        for (int k = 64; k <= (quick ? 128 : 512); k *= 2) {
            a = (op_args){.a = mf_randn(MF_F32, 2, (int64_t[]){rows[i], k}), .b = mf_randn(MF_F32, 2, (int64_t[]){k, 4 * k})};
            MF_TRY(measure_op(c, run_matmul, &a, MF_PROF_GEMM, false, min_s, mfi_calibration_add_rate));
        }
    static const int conv[][4] = {{8, 1, 6, 28}, {32, 1, 6, 28}, {32, 6, 16, 14}, {64, 16, 32, 14}};
    for (size_t i = 0; i < (quick ? 2 : 4); i++) {
        a = (op_args){.a = mf_randn(MF_F32, 4, (int64_t[]){conv[i][0], conv[i][1], conv[i][3], conv[i][3]}),
                      .b = mf_randn(MF_F32, 4, (int64_t[]){conv[i][2], conv[i][1], 5, 5})};
        MF_TRY(measure_op(c, run_conv, &a, MF_PROF_CONV, false, min_s, mfi_calibration_add_rate));
    }
    static const int att[][3] = {{4, 64, 64}, {4, 128, 128}, {4, 256, 256}, {8, 512, 384}};   /* B, T, C */
    for (size_t i = 0; i < (quick ? 2 : 4); i++) {
        a = (op_args){.a = mf_randn(MF_F32, 4, (int64_t[]){att[i][0], att[i][1], 3, att[i][2]})};
        a.heads = att[i][2] / 64;
        MF_TRY(measure_op(c, run_attention, &a, MF_PROF_ATTENTION, false, min_s, mfi_calibration_add_rate));
    }
    for (int64_t n = 1024; n <= (quick ? 1 << 18 : 1 << 22); n *= 16) {
        a = (op_args){.a = mf_randn(MF_F32, 1, &n), .b = mf_randn(MF_F32, 1, &n)};
        MF_TRY(measure_op(c, run_add, &a, MF_PROF_ELEMENTWISE, true, min_s, mfi_calibration_add_rate));
    }
    /* the fixed cost of a call: a one-element add */
    int64_t one = 1;
    a = (op_args){.a = mf_randn(MF_F32, 1, &one), .b = mf_randn(MF_F32, 1, &one)};
    double s = 0;
    mf_status st = time_kernel(run_add, &a, min_s, &s);
    free_args(&a);
    mfi_calibration_set(c, NULL, s);
    return st;
}

/* ------------------------------------------------------------ collectives */
typedef struct coll_args {
    mfi_comm *comm;
    mf_comm_kind kind;
    float *send, *recv;
    int64_t count;   /* elements of the message */
    int64_t *counts;
    mfi_comm *across;   /* a second grouping of the ranks, called after comm (NULL: none) */
} coll_args;

static mf_status run_one(coll_args *a);

/* a call on the group, then (a mesh's other dimension) one on the
 * grouping across it: what a collective costs where every rank of a
 * node is coupled to the others through one mesh dimension or another */
static mf_status run_coll(void *u)
{
    coll_args *a = u;
    MF_TRY(run_one(a));
    if (!a->across) return MF_OK;
    coll_args b = *a;
    b.comm = a->across;
    return run_one(&b);
}

static mf_status run_one(coll_args *a)
{
    int n = mfi_comm_size_of(a->comm), me = mfi_comm_rank_in(a->comm);
    switch (a->kind) {
    case MF_COMM_ALLREDUCE: return mfi_allreduce(a->comm, a->send, a->recv, a->count, MF_F32);
    case MF_COMM_REDUCE_SCATTER: return mfi_reduce_scatter(a->comm, a->send, a->recv, a->counts, MF_F32);
    case MF_COMM_ALLGATHER: return mfi_allgather(a->comm, a->send, a->recv, a->counts, MF_F32);
    default: {   /* point-to-point: a ring, each rank sends to the next */
        mfi_p2p s = {(me + 1) % n, a->send, a->count}, r = {(me + n - 1) % n, a->recv, a->count};
        mfi_xreq *x;
        MF_TRY(mfi_exchange_start(a->comm, &s, 1, &r, 1, MF_F32, 5, &x));
        return mfi_exchange_wait(x);
    }
    }
}

static mf_status measure_comms(mf_calibration *c, bool quick)
{
    mfi_comm *world = mfi_comm_world();
    int size = mfi_comm_size_of(world), rank = mfi_comm_rank_in(world);
    double min_s = quick ? 0.005 : 0.03;
    int64_t top = quick ? (int64_t)1 << 20 : (int64_t)1 << 26;
    float *buf = malloc((size_t)top * 2 + 64);
    int64_t *counts = malloc((size_t)size * sizeof *counts);
    if (!buf || !counts) {
        free(buf);
        free(counts);
        MF_FAIL(MF_ERR_NOMEM, "calibration: out of memory");
    }
    memset(buf, 0, (size_t)top * 2 + 64);
    mf_status st = MF_OK;
    for (int k = 2; k <= size && st == MF_OK; k = k * 2 <= size || k == size ? k * 2 : size) {
        mfi_comm *g = NULL, *across = NULL;
        st = mfi_comm_split(world, rank / k, rank, &g);
        if (st != MF_OK) break;
        /* timed alternating with the grouping across it (rank % (size / k)):
         * in a 2-D mesh every rank is coupled to the others through one
         * dimension or the other, and where ranks share cores that costs
         * each call a wait for its peers to be scheduled */
        if (k < size && st == MF_OK) st = mfi_comm_split(world, rank % (size / k), rank, &across);
        int n = mfi_comm_size_of(g);
        /* the nodes the group spans */
        int node = mf_node_id(), *nodes = calloc((size_t)n, sizeof *nodes), nn = 0;
        int64_t *ones = calloc((size_t)n, sizeof *ones);
        for (int i = 0; ones && i < n; i++) ones[i] = 1;
        if (nodes && ones) st = mfi_allgather(g, &node, nodes, ones, MF_I32);
        for (int i = 0; nodes && i < n; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= nodes[j] == nodes[i];
            nn += !seen;
        }
        free(nodes);
        free(ones);
        for (int kind = 0; kind <= MF_COMM_P2P && st == MF_OK; kind++) {
            if (kind == MF_COMM_ALLTOALL || kind == MF_COMM_BCAST) continue;
            for (int64_t bytes = 4096; bytes <= top && st == MF_OK; bytes *= quick ? 16 : 4) {
                coll_args a = {.comm = g, .kind = (mf_comm_kind)kind, .send = buf, .recv = buf + top / 4, .count = bytes / 4, .counts = counts, .across = across};
                for (int i = 0; i < n; i++) counts[i] = bytes / 4 / n;
                int64_t msg = kind == MF_COMM_REDUCE_SCATTER || kind == MF_COMM_ALLGATHER ? counts[0] * n * 4 : bytes;
                double s;
                st = time_calls(run_coll, &a, min_s, &s);
                if (across) s /= 2;
                if (st == MF_OK) mfi_calibration_add_comm(c, (mf_comm_kind)kind, n, nn, (double)msg, s);
            }
        }
        mfi_comm_free(g);
        if (across) mfi_comm_free(across);
        if (k == size) break;
    }
    free(buf);
    free(counts);
    return st;
}

/* How much of a non-blocking allreduce compute hides: the allreduce
 * alone (t_m), matrix products alone for about as long (t_c), and both,
 * the products run while the allreduce is in flight (t_b). Hidden:
 * (t_c + t_m - t_b) / min(t_c, t_m), rank 0's, the mean of five rounds
 * each; below 0 where running both at once costs more than one after the
 * other (ranks that share cores with their progress threads). */
typedef struct overlap_args {
    float *buf;
    int64_t count;
    int reps;
    op_args mm;
    bool comm, compute;
} overlap_args;

static mf_status run_overlap(void *u)
{
    overlap_args *a = u;
    mfi_request *r = NULL;
    if (a->comm) MF_TRY(mfi_iallreduce(mfi_comm_world(), a->buf, a->count, MF_F32, MF_COLL_AUTO, &r));
    mf_status st = MF_OK;
    for (int i = 0; a->compute && i < a->reps && st == MF_OK; i++) st = run_matmul(&a->mm);
    mf_synchronize();
    mf_status w = r ? mfi_wait(r) : MF_OK;
    return st != MF_OK ? st : w;
}

static mf_status measure_overlap(mf_calibration *c, bool quick)
{
    const double min_s = quick ? 0.01 : 0.05;
    overlap_args a = {.count = (quick ? 1 << 18 : 1 << 20), .reps = 1};
    a.buf = calloc((size_t)a.count, sizeof *a.buf);
    a.mm = (op_args){.a = mf_randn(MF_F32, 2, (int64_t[]){256, 256}), .b = mf_randn(MF_F32, 2, (int64_t[]){256, 256})};
    mf_status st = a.buf && a.mm.a && a.mm.b ? MF_OK : mfi_error(MF_ERR_NOMEM, "calibration: out of memory");
    double t_m = 0, t_c = 0, t_b = 0, one = 0;
    a.comm = true;
    if (st == MF_OK) st = time_calls(run_overlap, &a, min_s, &t_m);
    a.comm = false;
    a.compute = true;
    if (st == MF_OK) st = time_calls(run_overlap, &a, min_s, &one);
    if (st == MF_OK) {   /* as many products as the allreduce takes, rank 0's count */
        double reps = one > 0 ? t_m / one : 1;
        a.reps = reps < 1 ? 1 : reps > 1e5 ? 100000 : (int)reps;
        st = mfi_bcast(mfi_comm_world(), &a.reps, 1, MF_I32, 0);
    }
    if (st == MF_OK) st = time_calls(run_overlap, &a, min_s, &t_c);
    a.comm = true;
    if (st == MF_OK) st = time_calls(run_overlap, &a, min_s, &t_b);
    if (st == MF_OK) {
        double lo = t_c < t_m ? t_c : t_m, ov = lo > 0 ? (t_c + t_m - t_b) / lo : 1;
        MF_TRY_OUT(mfi_bcast(mfi_comm_world(), &ov, 1, MF_F64, 0));
        mfi_calibration_set_overlap(c, ov);
    }
out:
    free(a.buf);
    free_args(&a.mm);
    return st;
}

mf_calibration *mf_calibration_measure(bool quick)
{
    mf_calibration *c = mfi_calibration_empty();   /* only what is measured */
    if (!c) return NULL;
    char desc[256], src[512];
    mf_device_describe(mf_default_device(), desc, sizeof desc);
    snprintf(src, sizeof src, "measured: %s, %d rank(s) on %d node(s)", desc, mf_world_size(), mf_node_count());
    mfi_calibration_set(c, src, -1);
    mf_status st = measure_compute(c, quick);
    if (st == MF_OK && mf_world_size() > 1) st = measure_comms(c, quick);
    if (st == MF_OK && mf_world_size() > 1) st = measure_overlap(c, quick);
    if (mf_agree(st) != MF_OK) {
        mf_calibration_destroy(c);
        return NULL;
    }
    return c;
}
