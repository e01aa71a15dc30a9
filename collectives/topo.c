/*
 * collectives/topo.c - what hwloc sees of this machine.
 *
 * For now: the cores in this process's binding and on the machine, which
 * set the default thread count (DESIGN.md section 6 grows this file).
 */
#include <hwloc.h>
#include <unistd.h>
#include "collectives/comm.h"

int mfi_topo_cores(int *total)
{
    hwloc_topology_t topo;
    int n = 0;
    *total = 0;
    if (hwloc_topology_init(&topo) != 0) goto fallback;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        goto fallback;
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
        int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        *total = ncores;
        for (int i = 0; i < ncores; i++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, i);
            if (core && hwloc_bitmap_intersects(core->cpuset, set)) n++;
        }
    }
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    if (n > 0) return n;
fallback:;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    *total = c > 0 ? (int)c : 1;
    return *total;
}
