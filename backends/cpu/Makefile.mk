# backends/cpu: oneDNN or OpenBLAS GEMMs and convolutions, OpenMP kernels on raw buffers.
noinst_LTLIBRARIES += backends/cpu/libmf_cpu.la
backends_cpu_libmf_cpu_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPENBLAS_CFLAGS)
# -fno-math-errno: sqrt (exact either way) vectorises; nothing here reads errno
backends_cpu_libmf_cpu_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -fno-math-errno
backends_cpu_libmf_cpu_la_SOURCES = \
	backends/cpu/cpu_backend.c backends/cpu/cpu_copy.c backends/cpu/cpu_elementwise.c \
	backends/cpu/cpu_reduce.c backends/cpu/cpu_gemm.c backends/cpu/cpu_conv.c \
	backends/cpu/cpu_pool.c backends/cpu/cpu_norm.c backends/cpu/cpu_optim.c \
	backends/cpu/cpu_attention.c backends/cpu/cpu_engine.c backends/cpu/cpu_signals.c
if HAVE_ONEDNN
backends_cpu_libmf_cpu_la_SOURCES += backends/cpu/cpu_onednn.c
else
backends_cpu_libmf_cpu_la_SOURCES += backends/cpu/cpu_onednn_none.c
endif
libmpiflow_la_LIBADD += backends/cpu/libmf_cpu.la
noinst_HEADERS += backends/cpu/cpu_iter.h backends/cpu/cpu_kernels.h backends/cpu/cpu_math.h backends/cpu/cpu_engine.h backends/cpu/cpu_conv_tmpl.h \
	backends/cpu/cpu_norm_tmpl.h backends/cpu/cpu_attention_tmpl.h backends/backend.h backends/plan.h
