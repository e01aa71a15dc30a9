# base/: status and errors, dtypes; under collectives/, backends/ and lib/
# (doc/design.md, "Layers").
noinst_LTLIBRARIES += base/libmf_base.la
base_libmf_base_la_SOURCES = base/status.c base/dtype.c base/alloc.c base/ptrmap.c base/json.c
libmpiflow_la_LIBADD += base/libmf_base.la
noinst_HEADERS += base/error.h base/alloc.h base/philox.h base/ptrmap.h base/clones.h base/json.h
mpiflowinc_HEADERS += include/mpiflow/dtype.h
