/*
 * lib/graph/sim.c - a simulated world (mpiflow/graph.h, doc/planning.md,
 * "A simulated world"): one rank of many, in one process, on the meta
 * device. The collectives layer plays the world and counts its calls
 * (collectives/sim.c); this file starts and ends it and hands its calls
 * to the step graph being recorded.
 */
#include "lib/graph/graph_internal.h"
#include "lib/global/global_internal.h"
#include "collectives/coll.h"

static void observe(const mfi_sim_event *e)
{
    if (mfi_graph_rec) mfi_graph_comm(e->kind, e->bytes, e->ranks, e->nodes, e->local, e->algo, e->async, e->pipe);
}

mf_status mf_simulate_begin(int world_size, int rank, int ranks_per_node)
{
    if (!mf_initialized()) MF_FAIL(MF_ERR_STATE, "mf_simulate_begin: call mf_init first");
    MF_TRY(mfi_sim_begin(world_size, rank, ranks_per_node));
    if (!mfi_meta_backend()) {
        mfi_sim_end();
        return mf_last_status();
    }
    mfi_sim_set_observer(observe);
    return MF_OK;
}

void mf_simulate_end(void)
{
    if (!mfi_sim_on()) return;
    mfi_placement_drop_sim();
    mfi_sim_set_observer(NULL);
    mfi_sim_end();
}

bool mf_simulating(void) { return mfi_sim_on(); }
