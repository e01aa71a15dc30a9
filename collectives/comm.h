/*
 * collectives/comm.h - MPI start-up and the world communicator
 * (not installed yet; the global-tensor layer extends it).
 *
 * mpiflow works on a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN, so an MPI failure becomes an mf_status instead of
 * killing the job, and a node-local communicator from
 * MPI_Comm_split_type(SHARED) for the ranks-per-node figures.
 */
#ifndef MPIFLOW_COLLECTIVES_COMM_H
#define MPIFLOW_COLLECTIVES_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include "mpiflow/status.h"

/* Initialises MPI if needed; *started tells whether this call did. */
mf_status mfi_mpi_init(int *argc, char ***argv, bool *started);
mf_status mfi_mpi_finalize(void);

/* Creates the world duplicate and the node communicator. */
mf_status mfi_comm_world_setup(void);
void mfi_comm_world_teardown(void);

int mfi_comm_rank(void);        /* 0 before setup */
int mfi_comm_size(void);        /* 1 before setup */
/* The topology node of this rank: a shared-memory node, or an emulated
 * one of MF_RANKS_PER_NODE ranks. */
int mfi_comm_node_rank(void);
int mfi_comm_node_size(void);
int mfi_comm_node_id(void);
int mfi_comm_node_count(void);
int mfi_comm_node_emulated(void);   /* MF_RANKS_PER_NODE, or 0 */
/* 1 when the nodes are Slurm's (srun set SLURM_NODEID on every rank). */
int mfi_comm_node_from_slurm(void);
/* Ranks that really share this machine's memory (for thread counts). */
int mfi_comm_shared_size(void);

/* Collective agreement on a failure (see mf_agree). msg is this rank's
 * message; on return the agreed message is recorded for mf_last_error. */
mf_status mfi_comm_agree(mf_status local, const char *msg);

/* Copies the MPI_Comm handle of the world duplicate into out (size
 * bytes, sizeof(MPI_Comm)): for parallel HDF5 in lib/io, which gets the
 * MPI types through hdf5.h and may not include mpi.h itself. */
mf_status mfi_comm_world_handle(void *out, size_t size);
void mfi_comm_barrier(void);

/* Cores this process may run on (its binding), from hwloc; *total gets
 * the cores of the machine. */
int mfi_topo_cores(int *total);
/* Binds this process to its share of the machine's cores unless the
 * launcher bound it (topo.c); note gets what was done. */
void mfi_topo_bind(int local, int nlocal, char *note, size_t size);
/* That note, from mfi_comm_world_setup. */
const char *mfi_comm_bind_note(void);
/* "waits yield: 4 rank(s) share 2 CPU(s)": how MPI waits here */
const char *mfi_comm_wait_note(void);
/* whether the ranks wait politely (they outnumber a node's CPUs, or MF_WAIT=yield) */
bool mfi_comm_waits_yield(void);
/* "machine: 1 package, 1 NUMA node, 2 cores, 2 PUs, 0 GPUs; bound to PUs 0-1" */
void mfi_topo_describe(char *buf, size_t size);

#endif
