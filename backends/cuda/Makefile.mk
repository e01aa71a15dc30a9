# backends/cuda: cuBLAS and .cu kernels, built by nvcc into libmpiflow
# when configure found the CUDA toolkit (HAVE_CUDA). Building needs no
# GPU. nvcc goes through libtool with scripts/nvcc-wrap, which
# translates libtool's -fPIC into nvcc's spelling.
CUDA_SOURCES = \
	backends/cuda/cuda_backend.cu backends/cuda/cuda_copy.cu backends/cuda/cuda_elementwise.cu \
	backends/cuda/cuda_reduce.cu backends/cuda/cuda_gemm.cu backends/cuda/cuda_pool.cu \
	backends/cuda/cuda_norm.cu backends/cuda/cuda_optim.cu backends/cuda/cuda_blas.cu \
	backends/cuda/cuda_attention.cu
noinst_HEADERS += backends/cuda/cuda_common.cuh
EXTRA_DIST += $(CUDA_SOURCES)
SUFFIXES = .cu
NVCC_ALL_FLAGS = $(CUDA_ARCH) -std=c++17 -O3 -Xcompiler=-fvisibility=hidden -Xcompiler=-Wall \
	-I$(top_srcdir)/include -I$(top_srcdir) -I$(top_builddir) $(CUDA_CPPFLAGS) -DMF_CUDA_LIBDIR='"$(CUDA_LIBDIR)"' \
	$(NVCCFLAGS)
.cu.lo:
	$(AM_V_CC)$(LIBTOOL) $(AM_V_lt) --tag=CC --mode=compile $(top_srcdir)/scripts/nvcc-wrap $(NVCC) \
	  $(NVCC_ALL_FLAGS) -c -o $@ $<
if HAVE_CUDA
noinst_LTLIBRARIES += backends/cuda/libmf_cuda.la
backends_cuda_libmf_cuda_la_SOURCES = $(CUDA_SOURCES)
libmpiflow_la_LIBADD += backends/cuda/libmf_cuda.la $(CUDA_LIBS)
$(CUDA_SOURCES:.cu=.lo): backends/cuda/cuda_common.cuh backends/backend.h backends/plan.h base/alloc.h base/error.h base/philox.h \
	include/mpiflow/tensor.h
endif
