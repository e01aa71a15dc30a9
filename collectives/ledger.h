/*
 * collectives/ledger.h - the watchdog's ledger (MF_TIMEOUT), shared by
 * ledger.c, which records, and watchdog.c, which reports.
 *
 * Every wait on other ranks that mpiflow starts, on any thread, is
 * recorded while it lasts: blocking collectives on the main thread,
 * non-blocking ones run by the progress thread (gradient buckets, ZeRO's
 * reduce-scatter and allgather), point-to-point transfers (pipeline
 * stages, boxing between placements) and the collective HDF5 calls of a
 * checkpoint. Each thread that waits owns one slot; a wait nested in
 * another (an allreduce inside a checkpoint write) is the outer one's.
 *
 * Collectives are numbered per communicator (#1, #2, ...), the
 * communicator named by its world ranks ("ranks 0-3"), with a separate
 * count for the progress thread's duplicates ("ranks 0-3, non-blocking"),
 * whose order is the queue's. Every rank enters the same collectives in
 * the same order, so comparing numbers tells who has not arrived.
 */
#ifndef MPIFLOW_COLLECTIVES_LEDGER_H
#define MPIFLOW_COLLECTIVES_LEDGER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

enum {
    MFI_LEDGER_COMMS = 256,      /* communicators numbered */
    MFI_LEDGER_SLOTS = 8,        /* threads that wait at once */
    MFI_LEDGER_MEMBERS = 1024,   /* ranks listed in a report */
    MFI_LEDGER_NAME = 112,
    MFI_LEDGER_WHAT = 192,
};

typedef struct mfi_ledger_comm {
    char name[MFI_LEDGER_NAME];   /* "ranks 0-3" */
    long seq;                     /* collectives entered there so far */
} mfi_ledger_comm;

/* A thread's wait as it is recorded: cheap to fill, so pointers into
 * what stays valid while the wait lasts (the communicator, the waiting
 * thread's context, the exchange's peer list). Read only with mu held
 * and `in` set. */
typedef struct mfi_ledger_slot {
    bool used;                    /* a thread owns it */
    bool in;                      /* ... and waits on other ranks now */
    bool reported;
    int comm;                     /* index into comms; -1: point-to-point or unnumbered */
    long seq;
    const char *op;               /* "allreduce", "point-to-point", "checkpoint I/O" */
    const char *what;             /* "gradient bucket 2 of 3, 1.50 MiB" */
    const char *where;            /* the communicator's name */
    const int *world;             /* its members' world ranks */
    const int *peers;             /* point-to-point: the ranks of it waited on; NULL: all */
    int n;                        /* how many of them */
    int size;                     /* the communicator's */
    double since;
} mfi_ledger_slot;

/* A copy of a slot for a report, with the members in world ranks. */
typedef struct mfi_ledger_wait {
    int comm;
    long seq;
    char op[32], what[MFI_LEDGER_WHAT], where[MFI_LEDGER_NAME];
    int members[MFI_LEDGER_MEMBERS], nmembers;
    double since;
} mfi_ledger_wait;

typedef struct mfi_ledger {
    pthread_mutex_t mu;
    bool on;
    mfi_ledger_comm comms[MFI_LEDGER_COMMS];
    int ncomms;
    mfi_ledger_slot slots[MFI_LEDGER_SLOTS];
} mfi_ledger;

extern mfi_ledger mfi_ledger_state;

/* seconds on CLOCK_MONOTONIC */
double mfi_ledger_now(void);
/* Clears every count and slot and turns recording on or off (the
 * watchdog's start and stop). */
void mfi_ledger_reset(bool on);
/* With mu held: this rank's count on the communicator named name (0
 * when it never entered one there), and what each of its threads waits
 * on now, for an answer to another rank's watchdog. */
long mfi_ledger_seq_locked(const char *name);
void mfi_ledger_describe_locked(char *buf, size_t size);
/* With mu held: the copy of slot s (in) for a report. */
void mfi_ledger_copy_locked(const mfi_ledger_slot *s, mfi_ledger_wait *w);

#endif
