# collectives/: MPI communicators, agreement, collective algorithms and their selection.
noinst_LTLIBRARIES += collectives/libmf_coll.la
collectives_libmf_coll_la_CPPFLAGS = $(AM_CPPFLAGS) $(HWLOC_CFLAGS)
collectives_libmf_coll_la_SOURCES = collectives/comm.c collectives/coll.c collectives/topo.c \
	collectives/coll_util.c collectives/select.c collectives/tally.c collectives/allreduce_ring.c collectives/allreduce_rhd.c \
	collectives/hier.c collectives/allreduce_hier.c collectives/reduce_scatter_ring.c collectives/reduce_scatter_hier.c \
	collectives/request.c collectives/deterministic.c collectives/ledger.c collectives/watchdog.c collectives/gpu.c \
	collectives/tuning.c collectives/sim.c
libmpiflow_la_LIBADD += collectives/libmf_coll.la
noinst_HEADERS += collectives/comm.h collectives/coll.h collectives/coll_internal.h collectives/coll_algo.h collectives/coll_hier.h collectives/ledger.h
