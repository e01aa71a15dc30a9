# apps/: the programs users run.
bin_PROGRAMS += mpiflow-train
mpiflow_train_SOURCES = apps/train.c apps/train_run.c apps/plan_search.c apps/plan_trial.c apps/train_opts.c apps/train_gpt.c apps/parallel.c apps/plan_flags.c apps/preempt.c apps/train_device.c apps/train_task.c
mpiflow_train_LDADD = libmpiflow.la -lm
noinst_HEADERS += apps/train_opts.h apps/train_gpt.h apps/parallel.h apps/plan_flags.h apps/preempt.h  apps/train_device.h apps/train_task.h apps/train_run.h apps/plan_trial.h apps/ckpt_hf.h
bin_PROGRAMS += mpiflow-plan
mpiflow_plan_SOURCES = apps/plan.c apps/plan_search.c apps/train_run.c apps/train_opts.c apps/train_gpt.c apps/parallel.c \
	apps/plan_flags.c apps/train_task.c
mpiflow_plan_LDADD = libmpiflow.la -lm
noinst_HEADERS += apps/plan_search.h
bin_PROGRAMS += mpiflow-ckpt
mpiflow_ckpt_SOURCES = apps/ckpt_tool.c apps/ckpt_hf.c
mpiflow_ckpt_LDADD = libmpiflow.la -lm
bin_PROGRAMS += mpiflow-generate
mpiflow_generate_SOURCES = apps/generate.c
mpiflow_generate_LDADD = libmpiflow.la
bin_PROGRAMS += mpiflow-bench
mpiflow_bench_SOURCES = apps/bench_tool.c
mpiflow_bench_LDADD = libmpiflow.la
# mpiflow-plot: a shell script around gnuplot, with the version filled in
bin_SCRIPTS += mpiflow-plot
mpiflow-plot: $(top_srcdir)/apps/mpiflow-plot.in Makefile
	$(AM_V_GEN)sed 's|@PACKAGE_VERSION@|$(PACKAGE_VERSION)|' $(top_srcdir)/apps/mpiflow-plot.in >$@ && chmod +x $@
CLEANFILES += mpiflow-plot
EXTRA_DIST += apps/mpiflow-plot.in
