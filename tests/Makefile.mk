# tests/: one Check suite per module, each run under mpiexec by
# tests/mpirun.sh; shell tests run the apps end to end.
TEST_PROGS = tests/test_tensor
check_PROGRAMS += $(TEST_PROGS)
check_LTLIBRARIES = tests/libmftest.la
tests_libmftest_la_SOURCES = tests/test_util.c tests/test_util.h
tests_libmftest_la_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LDADD = tests/libmftest.la libmpiflow.la $(CHECK_LIBS) -lm
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_tensor_SOURCES = tests/test_tensor.c
tests_test_tensor_CFLAGS = $(TEST_CFLAGS)
tests_test_tensor_LDADD = $(TEST_LDADD)

TESTS += $(TEST_PROGS)
LOG_COMPILER = $(top_srcdir)/tests/mpirun.sh
AM_TESTS_ENVIRONMENT = MPIEXEC='$(MPIEXEC)'; export MPIEXEC; \
	top_srcdir='$(top_srcdir)'; export top_srcdir; top_builddir='$(top_builddir)'; export top_builddir;
EXTRA_DIST += tests/mpirun.sh
