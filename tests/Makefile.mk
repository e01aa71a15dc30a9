# tests/: one Check suite per module (tests/test_<module>.c, built from
# that one file plus tests/test_util.c), each run under mpiexec by
# tests/mpirun.sh; shell tests (*.sh) run the apps end to end.
TEST_SUITES = \
	tests/test_tensor tests/test_elementwise tests/test_matmul tests/test_reduce \
	tests/test_shape tests/test_softmax tests/test_conv \
	tests/test_norm tests/test_loss tests/test_autograd tests/test_optim \
	tests/test_nn tests/test_data tests/test_runtime tests/test_global tests/test_global_ops tests/test_coll \
	tests/test_grad_sync tests/test_pipeline tests/test_pipe_exec tests/test_cuda tests/test_autocast tests/test_base tests/test_attention tests/test_tokens tests/test_gpt tests/test_safetensors tests/test_cpu_engine tests/test_plan tests/test_graph tests/test_layout
check_PROGRAMS += $(TEST_SUITES)
check_LTLIBRARIES = tests/libmftest.la
tests_libmftest_la_SOURCES = tests/test_util.c tests/test_util.h
tests_libmftest_la_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
# the default for every program that does not set its own _LDADD
LDADD = tests/libmftest.la libmpiflow.la $(CHECK_LIBS) $(ZLIB_LIBS) -lm
AM_CFLAGS += $(CHECK_CFLAGS)

SHELL_TESTS = tests/layering.sh tests/app_errors.sh tests/determinism.sh tests/train_mlp.sh \
	tests/train_lenet.sh tests/install.sh tests/global.sh tests/parallel_parity.sh tests/ckpt.sh tests/ckpt_app.sh tests/coll.sh \
	tests/dp_sync.sh tests/pipeline.sh tests/slurm.sh tests/watchdog.sh tests/hang.sh tests/cuda_train.sh \
	tests/full_disk.sh tests/ckpt_faults.sh tests/data_faults.sh tests/signals.sh tests/cuda_kernels.sh tests/fuzz.sh tests/bitwise.sh tests/gpu_bundle.sh tests/train_gpt.sh tests/gpt_reference.sh tests/gpt_hf.sh tests/gpt_parallel.sh tests/gpt_pipeline.sh tests/cpu_engine.sh tests/plans.sh tests/planning.sh
TESTS += $(TEST_SUITES) $(SHELL_TESTS)
TEST_EXTENSIONS = .sh
LOG_COMPILER = $(SHELL) $(top_srcdir)/tests/timed.sh $(top_srcdir)/tests/mpirun.sh
SH_LOG_COMPILER = $(SHELL) $(top_srcdir)/tests/timed.sh $(SHELL)
# One compute thread per rank unless a test asks for more: make -j2 check
# runs two tests at once on two cores (tests/lib.sh)
AM_TESTS_ENVIRONMENT = MF_THREADS=$${MF_THREADS:-1}; export MF_THREADS; MPIEXEC='$(MPIEXEC)'; export MPIEXEC; H5DUMP='$(H5DUMP)'; export H5DUMP; \
	MF_BUILD_CFLAGS='$(CFLAGS)'; export MF_BUILD_CFLAGS; MF_BUILD_LDFLAGS='$(LDFLAGS)'; export MF_BUILD_LDFLAGS; \
	top_srcdir='$(top_srcdir)'; export top_srcdir; top_builddir='$(top_builddir)'; export top_builddir;
EXTRA_DIST += tests/mpirun.sh tests/timed.sh tests/lib.sh tests/slurm_lib.sh $(SHELL_TESTS)
# the base layer alone, without the library above it
tests_test_base_LDADD = base/libmf_base.la $(CHECK_LIBS)
# the CUDA parity suite: its cases, and the harness that compares them
tests_test_cuda_SOURCES = tests/test_cuda.c tests/cuda_parity.c tests/cuda_parity.h
# run by tests/gpt_reference.sh: a tiny GPT's loss and gradients for PyTorch
check_PROGRAMS += tests/gpt_grads
tests_gpt_grads_LDADD = libmpiflow.la
# run by tests/gpt_parallel.sh: tensor and sequence parallel gradients and their communication
check_PROGRAMS += tests/gpt_parallel
tests_gpt_parallel_LDADD = libmpiflow.la
EXTRA_DIST += tests/gpt_reference.py
# run by tests/ckpt.sh on 1 to 4 ranks, in its own directory
check_PROGRAMS += tests/test_ckpt
tests_test_ckpt_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
tests_test_ckpt_LDADD = $(LDADD) $(HDF5_LIBS)
# run by tests/watchdog.sh and tests/slurm.sh: a rank skips a collective
check_PROGRAMS += tests/watchdog_skip
tests_watchdog_skip_LDADD = libmpiflow.la
# tools of the fault tests: a checkpoint attribute editor (tests/ckpt_faults.sh)
# and a seeded file mutator (tests/fuzz.sh)
check_PROGRAMS += tests/ckpt_edit tests/fuzz_mutate
tests_ckpt_edit_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
tests_ckpt_edit_LDADD = $(HDF5_LIBS)
tests_fuzz_mutate_LDADD =
# The suite again with the OpenBLAS engine forced (doc/cpu.md), after
# `make check` ran it on the default (oneDNN where built): every test whose
# numbers pass through a matrix product or a convolution. These run no
# engine code and are left out: MPI start-up and collectives, faults,
# signals, Slurm, packaging, the layering check, and the engine tests,
# which choose their engines themselves.
ENGINE_FREE_TESTS = tests/test_coll tests/coll.sh tests/slurm.sh tests/layering.sh tests/install.sh \
	tests/watchdog.sh tests/hang.sh tests/signals.sh tests/fuzz.sh tests/full_disk.sh tests/ckpt_faults.sh \
	tests/data_faults.sh tests/app_errors.sh tests/gpu_bundle.sh tests/test_cuda tests/cuda_train.sh tests/cuda_kernels.sh \
	tests/test_cpu_engine tests/cpu_engine.sh tests/test_base tests/test_tokens tests/test_data
# Nor the tests of parallel layouts (checkpoint resharding, plans,
# pipelines, tensor parallel, the global-tensor suites run on several
# ranks, N ranks against 1): their engine is the same on both sides of
# every comparison, so they test the layout, not the engine, and the
# per-op suites, the training runs and the bit-for-bit test cover the
# engine's products under them.
LAYOUT_TESTS = tests/ckpt.sh tests/ckpt_app.sh tests/gpt_parallel.sh tests/gpt_pipeline.sh tests/pipeline.sh \
	tests/plans.sh tests/global.sh tests/parallel_parity.sh tests/dp_sync.sh
check-openblas:
	MF_CPU_ENGINE=openblas $(MAKE) $(AM_MAKEFLAGS) check TESTS='$(filter-out $(ENGINE_FREE_TESTS) $(LAYOUT_TESTS),$(TESTS))'
.PHONY: check-openblas
