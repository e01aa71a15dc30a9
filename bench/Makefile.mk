# bench/: benchmark programs that print tables (not tests). See
# doc/performance.md for how to run them and the recorded results.
noinst_PROGRAMS += bench/bench_peak bench/bench_train bench/bench_conv bench/bench_boxing bench/bench_ckpt bench/bench_pipeline bench/bench_gpt bench/bench_memory
bench_bench_gpt_SOURCES = bench/bench_gpt.c bench/peak.c bench/classes.c
bench_bench_gpt_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_gpt_LDADD = libmpiflow.la
bench_bench_memory_SOURCES = bench/bench_memory.c
bench_bench_memory_LDADD = libmpiflow.la
bench_bench_pipeline_SOURCES = bench/bench_pipeline.c
bench_bench_pipeline_LDADD = libmpiflow.la
bench_bench_ckpt_SOURCES = bench/bench_ckpt.c
bench_bench_ckpt_LDADD = libmpiflow.la
bench_bench_boxing_SOURCES = bench/bench_boxing.c
bench_bench_boxing_LDADD = libmpiflow.la
# the FMA peak probe (bench/peak.c) sits under every GEMM-class figure
bench_bench_peak_SOURCES = bench/bench_peak.c bench/peak.c
bench_bench_peak_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_peak_LDADD = libmpiflow.la
bench_bench_train_SOURCES = bench/bench_train.c bench/peak.c bench/classes.c
bench_bench_train_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_train_LDADD = libmpiflow.la
bench_bench_conv_SOURCES = bench/bench_conv.c bench/peak.c
bench_bench_conv_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)
bench_bench_conv_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
bench_bench_conv_LDADD = libmpiflow.la $(OPENBLAS_LIBS)
noinst_HEADERS += bench/bench_mpi.h bench/peak.h bench/classes.h
EXTRA_DIST += bench/torch_train.py bench/run.sh bench/stats.awk bench/run_parallel.sh bench/run_ckpt.sh bench/run_coll.sh bench/run_pipeline.sh bench/run_watchdog.sh bench/run_deterministic.sh bench/run_coll_tune.sh bench/run_gpt.sh bench/torch_gpt.py bench/run_memory.sh bench/run_largest.sh bench/run_compare.sh bench/run_plan.sh bench/run_plan_memory.sh bench/run_wait.sh
if HAVE_CUDA
# mpiflow on the GPU against bare cuBLAS and the CPU (needs a GPU to run)
noinst_PROGRAMS += bench/bench_cuda
bench_bench_cuda_SOURCES = bench/bench_cuda.c
bench_bench_cuda_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CPPFLAGS)
bench_bench_cuda_LDADD = libmpiflow.la $(CUDA_PROG_LIBS)
endif
EXTRA_DIST += bench/bench_cuda.c bench/run_cuda.sh
