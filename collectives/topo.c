/*
 * collectives/topo.c - what hwloc sees of this machine.
 *
 * The cores in this process's binding and on the machine, which set the
 * default thread count, and a one-line description for mpiflow-bench
 * topo (DESIGN.md section 6).
 */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
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

static int count_of(hwloc_topology_t t, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(t, type);
    return n > 0 ? n : 0;
}

void mfi_topo_describe(char *buf, size_t size)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) {
        snprintf(buf, size, "machine: hwloc unavailable");
        return;
    }
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        snprintf(buf, size, "machine: hwloc could not load the topology");
        return;
    }
    int gpus = 0;
    for (hwloc_obj_t o = hwloc_get_next_osdev(t, NULL); o; o = hwloc_get_next_osdev(t, o))
        if (o->attr && (o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU || o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC))
            gpus++;
    char *bound = NULL;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS) == 0) hwloc_bitmap_list_asprintf(&bound, set);
    snprintf(buf, size, "machine: %d package(s), %d NUMA node(s), %d core(s), %d PU(s), %d GPU device(s); bound to PUs %s",
             count_of(t, HWLOC_OBJ_PACKAGE), count_of(t, HWLOC_OBJ_NUMANODE), count_of(t, HWLOC_OBJ_CORE),
             count_of(t, HWLOC_OBJ_PU), gpus, bound ? bound : "?");
    free(bound);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
}
