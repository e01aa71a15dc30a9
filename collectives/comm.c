/*
 * collectives/comm.c - MPI start-up, the world duplicate and agreement.
 *
 * Agreement (mf_agree) costs one MPI_Allreduce of an int, plus one
 * MPI_Bcast of the message when some rank failed.
 */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <mpi.h>
#include "collectives/comm.h"
#include "collectives/coll_internal.h"
#include "collectives/coll_algo.h"
#include "base/error.h"

static MPI_Comm world = MPI_COMM_NULL;
static MPI_Comm node = MPI_COMM_NULL;    /* the ranks sharing memory (MPI_Comm_split_type) */
static int world_rank, world_size = 1, node_rank, node_size = 1;
static int tnode_id, tnode_count = 1, tnode_rank, tnode_size = 1, emulated, from_slurm;

static char bind_note[128] = "not bound";
static char wait_note[96] = "waits spin";
static bool waits_yield;   /* the world's choice (choose_wait) */
static MPI_Comm pipe_mpi = MPI_COMM_NULL;   /* pipeline transfers (mfi_comm_pipe) */
static mfi_comm pipe_comm = {.comm = MPI_COMM_NULL, .size = 1};
static mfi_comm world_comm = {.comm = MPI_COMM_NULL, .size = 1};

mf_status mfi_mpi_fail(int rc, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return mfi_error(MF_ERR_MPI, "%s failed: %s", what, s);
}

mf_status mfi_mpi_init(int *argc, char ***argv, bool *started)
{
    int inited = 0, finalized = 0;
    *started = false;
    MPI_Finalized(&finalized);
    if (finalized) MF_FAIL(MF_ERR_MPI, "mf_init: MPI was already finalized");
    MPI_Initialized(&inited);
    if (inited) return MF_OK;
    int provided;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return mfi_mpi_fail(rc, "MPI_Init_thread");
    *started = true;
    return MF_OK;
}

mf_status mfi_mpi_finalize(void)
{
    MFI_MPI_TRY(MPI_Finalize());
    return MF_OK;
}

/* This process's Slurm node, when srun started it as task `world_rank`
 * (SLURM_PROCID = the MPI rank, SLURM_NODEID and SLURM_NNODES set on
 * every rank); -1 otherwise, e.g. under mpiexec inside an allocation,
 * where every rank inherits the batch shell's variables. */
static int slurm_node(int *nnodes)
{
    const char *pid = getenv("SLURM_PROCID"), *nid = getenv("SLURM_NODEID"), *nn = getenv("SLURM_NNODES");
    if (!pid || !nid || !nn || !getenv("SLURM_STEP_ID")) return -1;
    char *end;
    long p = strtol(pid, &end, 10), id = *end ? -1 : strtol(nid, &end, 10), n = *end ? -1 : strtol(nn, &end, 10);
    if (*end || p != world_rank || id < 0 || n < 1 || id >= n) return -1;
    *nnodes = (int)n;
    return (int)id;
}

/* The topology nodes: MF_RANKS_PER_NODE=k makes ranks k*i .. k*i+k-1 a
 * node; under srun, Slurm's nodes (SLURM_NODEID) when every rank has
 * one; otherwise the shared-memory nodes, numbered by their first rank's
 * order; then this rank's local rank and the node's size. */
static mf_status topology_setup(void)
{
    const char *e = getenv("MF_RANKS_PER_NODE");
    long k = e && *e ? strtol(e, NULL, 10) : 0;
    int nn = 0, sn = k > 0 ? -1 : slurm_node(&nn), all = sn;
    MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, world));   /* every rank, or none */
    if (k > 0) {
        emulated = (int)k;
        tnode_id = world_rank / (int)k;
    } else if (all >= 0) {
        from_slurm = 1;
        tnode_id = sn;
    } else {
        int first = world_rank;   /* the node's lowest world rank names it */
        MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node));
        int is_first = first == world_rank, before = 0;
        MFI_MPI_TRY(MPI_Exscan(&is_first, &before, 1, MPI_INT, MPI_SUM, world));
        if (world_rank == 0) before = 0;
        tnode_id = is_first ? before : -1;   /* node-first ranks before this one */
        MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &tnode_id, 1, MPI_INT, MPI_MAX, node));
    }
    /* the local rank and size only: each communicator a hierarchical
     * algorithm runs on makes its own node and peer splits (hier.c) */
    MPI_Comm tnode = MPI_COMM_NULL;
    MFI_MPI_TRY(MPI_Comm_split(world, tnode_id, world_rank, &tnode));
    int rc = MPI_Comm_rank(tnode, &tnode_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(tnode, &tnode_size);
    MPI_Comm_free(&tnode);
    if (rc != MPI_SUCCESS) return mfi_mpi_fail(rc, "MPI_Comm_rank");
    tnode_count = tnode_id + 1;
    MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &tnode_count, 1, MPI_INT, MPI_MAX, world));
    return MF_OK;
}

/* How this thread waits for MPI (doc/collectives.md, "Waiting"): ranks
 * that share CPUs yield them while they wait, so the rank they wait for
 * can run; otherwise MPI spins. MF_WAIT=spin or yield decides instead.
 * One node with more ranks than CPUs makes every rank wait politely. */
static mf_status choose_wait(void)
{
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_ZERO(&mine);
    /* the CPUs the node's ranks may run on, all of them together */
    MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &mine, (int)sizeof mine, MPI_BYTE, MPI_BOR, node));
    int cpus = CPU_COUNT(&mine);
    const char *e = getenv("MF_WAIT");
    int v[2] = {e && !strcmp(e, "spin") ? 0 : e && !strcmp(e, "yield") ? 1 : cpus > 0 && node_size > cpus,
                e && *e && strcmp(e, "auto") && strcmp(e, "spin") && strcmp(e, "yield")};
    /* one choice for the world: the algorithms the collectives run
     * follow it, and every rank must run the same */
    MFI_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MAX, world));
    if (v[1]) MF_FAIL(MF_ERR_ARG, "MF_WAIT=%s: expected spin, yield or auto", e ? e : "(set on another rank)");
    mfi_coll_polite = waits_yield = v[0];
    snprintf(wait_note, sizeof wait_note, "waits %s: %d rank(s) share %d CPU(s)%s", mfi_coll_polite ? "yield" : "spin",
             node_size, cpus, e && *e && strcmp(e, "auto") ? " (MF_WAIT)" : "");
    return MF_OK;
}

mf_status mfi_comm_world_setup(void)
{
    if (world != MPI_COMM_NULL) return MF_OK;
    MFI_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &world));
    MFI_MPI_TRY(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
    MFI_MPI_TRY(MPI_Comm_rank(world, &world_rank));
    MFI_MPI_TRY(MPI_Comm_size(world, &world_size));
    MFI_MPI_TRY(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
    MFI_MPI_TRY(MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN));
    MFI_MPI_TRY(MPI_Comm_rank(node, &node_rank));
    MFI_MPI_TRY(MPI_Comm_size(node, &node_size));
    world_comm = (mfi_comm){.comm = world, .rank = world_rank, .size = world_size};
    MFI_MPI_TRY(MPI_Comm_dup(world, &pipe_mpi));
    MFI_MPI_TRY(MPI_Comm_set_errhandler(pipe_mpi, MPI_ERRORS_RETURN));
    pipe_comm = (mfi_comm){.comm = pipe_mpi, .rank = world_rank, .size = world_size};
    mfi_topo_bind(node_rank, node_size, bind_note, sizeof bind_note);
    MF_TRY(choose_wait());
    return topology_setup();
}

const char *mfi_comm_wait_note(void) { return wait_note; }
bool mfi_comm_waits_yield(void) { return waits_yield; }

const char *mfi_comm_bind_note(void) { return bind_note; }

/* ---- a simulated world (doc/planning.md): the real world's state is
 * kept aside and the statics describe the simulated one */
static struct saved_world {
    bool on;
    mfi_comm world_comm, pipe_comm;
    int world_rank, world_size, node_rank, node_size, tnode_id, tnode_count, tnode_rank, tnode_size, emulated;
    int rpn;
} saved;

mf_status mfi_sim_begin(int size, int rank, int ranks_per_node)
{
    if (saved.on) MF_FAIL(MF_ERR_STATE, "a simulated world is on already (end it first)");
    if (size < 1 || rank < 0 || rank >= size || ranks_per_node < 1)
        MF_FAIL(MF_ERR_ARG, "a simulated world of %d ranks, as rank %d, in nodes of %d: expected size >= 1, "
                "0 <= rank < size and ranks per node >= 1", size, rank, ranks_per_node);
    saved = (struct saved_world){true, world_comm, pipe_comm, world_rank, world_size, node_rank, node_size,
                                 tnode_id, tnode_count, tnode_rank, tnode_size, emulated, ranks_per_node};
    world_rank = rank;
    world_size = size;
    tnode_id = rank / ranks_per_node;
    tnode_rank = rank % ranks_per_node;
    tnode_count = (size + ranks_per_node - 1) / ranks_per_node;
    tnode_size = tnode_id < tnode_count - 1 || size % ranks_per_node == 0 ? ranks_per_node : size % ranks_per_node;
    node_rank = tnode_rank;
    node_size = tnode_size;
    emulated = ranks_per_node;
    world_comm = (mfi_comm){.comm = MPI_COMM_NULL, .rank = rank, .size = size, .sim = true, .sim_nodes = tnode_count,
                            .sim_local = size < ranks_per_node ? size : ranks_per_node};
    pipe_comm = world_comm;
    return MF_OK;
}

void mfi_sim_end(void)
{
    if (!saved.on) return;
    mfi_comm_extras_free(&world_comm);
    world_comm = saved.world_comm;
    pipe_comm = saved.pipe_comm;
    world_rank = saved.world_rank;
    world_size = saved.world_size;
    node_rank = saved.node_rank;
    node_size = saved.node_size;
    tnode_id = saved.tnode_id;
    tnode_count = saved.tnode_count;
    tnode_rank = saved.tnode_rank;
    tnode_size = saved.tnode_size;
    emulated = saved.emulated;
    saved.on = false;
}

bool mfi_sim_on(void) { return saved.on; }
int mfi_sim_ranks_per_node(void) { return saved.on ? saved.rpn : 0; }

mfi_comm *mfi_comm_world(void) { return &world_comm; }
mfi_comm *mfi_comm_pipe(void) { return &pipe_comm; }

mf_status mfi_comm_world_handle(void *out, size_t size)
{
    if (size != sizeof(MPI_Comm)) MF_FAIL(MF_ERR_INTERNAL, "mfi_comm_world_handle: wrong handle size %zu", size);
    if (world == MPI_COMM_NULL) MF_FAIL(MF_ERR_STATE, "MPI is not started (call mf_init)");
    memcpy(out, &world, sizeof world);
    return MF_OK;
}

void mfi_comm_barrier(void)
{
    if (world == MPI_COMM_NULL || world_comm.sim) return;
    int tok = mfi_ledger_enter(&world_comm, "barrier");
    MPI_Barrier(world);
    mfi_ledger_leave(tok);
}

void mfi_comm_world_teardown(void)
{
    mfi_sim_end();
    mfi_request_shutdown();
    mfi_watchdog_stop();
    mfi_comm_extras_free(&world_comm);
    mfi_comm_extras_free(&pipe_comm);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    if (pipe_mpi != MPI_COMM_NULL) MPI_Comm_free(&pipe_mpi);
    pipe_comm = (mfi_comm){.comm = MPI_COMM_NULL, .size = 1};
    if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
    world_comm = (mfi_comm){.comm = MPI_COMM_NULL, .size = 1};
    world_rank = node_rank = tnode_id = tnode_rank = emulated = from_slurm = 0;
    world_size = node_size = tnode_count = tnode_size = 1;
}

int mfi_comm_rank(void) { return world_rank; }
int mfi_comm_size(void) { return world_size; }
int mfi_comm_node_rank(void) { return tnode_rank; }
int mfi_comm_node_size(void) { return tnode_size; }
int mfi_comm_node_id(void) { return tnode_id; }
int mfi_comm_node_count(void) { return tnode_count; }
int mfi_comm_node_emulated(void) { return emulated; }
int mfi_comm_node_from_slurm(void) { return from_slurm; }
int mfi_comm_shared_size(void) { return node_size; }

/* *lowest: the lowest failing rank (INT_MAX: none), whose status and
 * message m gets; returns MPI's code */
typedef struct verdict { int status; char text[1536]; } verdict;

static int agree_on(mf_status local, const char *msg, int *lowest, verdict *m)
{
    int mine = local != MF_OK ? world_rank : INT_MAX;
    int rc = MPI_Allreduce(&mine, lowest, 1, MPI_INT, MPI_MIN, world);
    if (rc != MPI_SUCCESS || *lowest == INT_MAX) return rc;
    memset(m, 0, sizeof *m);
    if (world_rank == *lowest) {
        m->status = (int)local;
        snprintf(m->text, sizeof m->text, "%s", msg ? msg : "");
    }
    return MPI_Bcast(m, (int)sizeof *m, MPI_BYTE, *lowest, world);
}

mf_status mfi_comm_agree(mf_status local, const char *msg)
{
    if (world == MPI_COMM_NULL || world_comm.sim) return local;   /* a simulated rank agrees with itself */
    verdict m;
    int lowest = INT_MAX;
    int tok = mfi_ledger_enter(&world_comm, "agreement");
    int32_t failed = local != MF_OK;
    mf_status counted = MF_OK;
    /* ranks that share CPUs first count the failures over point-to-point
     * messages, which wait politely: most agreements find none */
    if (waits_yield) counted = mfi_allreduce_rhd(&world_comm, &failed, 1, MF_I32);
    int rc = counted == MF_OK && (!waits_yield || failed) ? agree_on(local, msg, &lowest, &m) : MPI_SUCCESS;
    mfi_ledger_leave(tok);
    MF_TRY(counted);
    MFI_MPI_TRY(rc);
    if (lowest == INT_MAX) return MF_OK;
    if (local != MF_OK) {
        /* Keep this rank's own message: it is the most specific. */
        return mfi_error(local, "%s", msg ? msg : "");
    }
    /* the failing rank's status, so every rank reports the same kind */
    mf_status st = m.status > 0 && m.status <= (int)MF_ERR_INTERNAL ? (mf_status)m.status : MF_ERR_REMOTE;
    return mfi_error(st, "rank %d: %s", lowest, m.text);
}
