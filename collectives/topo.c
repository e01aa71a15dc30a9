/*
 * collectives/topo.c - what hwloc sees of this machine.
 *
 * The cores in this process's binding and on the machine, which set the
 * default thread count, and a one-line description for mpiflow-bench
 * topo (doc/design.md section 6).
 */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Binds this process to its share of the cores: the local ranks of a
 * machine get consecutive blocks of cores in hwloc's order, so a block
 * stays inside one package or NUMA node when it can. A binding the
 * launcher already made (Slurm's task/affinity, mpiexec -bind-to) is
 * kept, and more ranks than cores are left unbound. MF_BIND=none turns
 * it off. note says what happened, for mf_topology_str. */
void mfi_topo_bind(int local, int nlocal, char *note, size_t size)
{
    const char *e = getenv("MF_BIND");
    if (e && (!strcmp(e, "none") || !strcmp(e, "0"))) {
        snprintf(note, size, "not bound: MF_BIND=%s", e);
        return;
    }
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0) {
        snprintf(note, size, "not bound: hwloc could not load the topology");
        return;
    }
    hwloc_bitmap_t cur = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
    int ncores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(t);
    if (!cur || !set || hwloc_get_cpubind(t, cur, HWLOC_CPUBIND_PROCESS) != 0) {
        snprintf(note, size, "not bound: hwloc cannot read the binding");
    } else if (!hwloc_bitmap_isequal(cur, all)) {
        snprintf(note, size, "bound by the launcher");
    } else if (ncores <= 0 || nlocal > ncores) {
        snprintf(note, size, "not bound: %d ranks share %d cores", nlocal, ncores);
    } else if (nlocal == 1) {
        snprintf(note, size, "not bound: one rank has the whole machine");
    } else {
        int k = ncores / nlocal, first = local * k;
        for (int i = first; i < first + k; i++) {
            hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i);
            if (core) hwloc_bitmap_or(set, set, core->cpuset);
        }
        if (hwloc_set_cpubind(t, set, HWLOC_CPUBIND_PROCESS) == 0)
            snprintf(note, size, k == 1 ? "bound by mpiflow to core %d" : "bound by mpiflow to cores %d-%d", first,
                     first + k - 1);
        else
            snprintf(note, size, "not bound: hwloc_set_cpubind failed");
    }
    hwloc_bitmap_free(cur);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
}
