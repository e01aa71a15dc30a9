# lib/: the device-neutral core (tensors, ops, autograd, nn, optim, io).
noinst_LTLIBRARIES += lib/libmf_core.la
lib_libmf_core_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZLIB_CFLAGS) $(HDF5_CFLAGS)
lib_libmf_core_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
lib_libmf_core_la_SOURCES = \
	lib/device.c lib/tensor.c lib/runtime.c lib/profile.c lib/rng.c lib/trace.c \
	lib/op.c lib/autograd.c lib/recompute.c \
	lib/op/elementwise.c lib/op/matmul.c lib/op/reduce.c lib/op/view.c lib/op/concat.c \
	lib/op/softmax.c lib/op/embedding.c lib/op/conv2d.c lib/op/pool.c lib/op/norm.c \
	lib/op/dropout.c lib/op/loss.c lib/op/to_device.c lib/op/autocast.c lib/op/attention.c lib/op/linear_xent.c \
	lib/nn/module.c lib/nn/linear.c lib/nn/conv2d.c lib/nn/pool.c lib/nn/activation.c \
	lib/nn/norm.c lib/nn/embedding.c lib/nn/sequential.c lib/nn/models.c lib/nn/gpt.c lib/nn/gpt_parallel.c lib/nn/gpt_pipeline.c lib/nn/gpt_generate.c lib/nn/to_global.c lib/nn/param_use.c lib/nn/layout.c lib/nn/vit.c \
	lib/optim/optimizer.c lib/optim/sgd.c lib/optim/rmsprop.c lib/optim/adam.c \
	lib/optim/schedule.c lib/optim/clip.c lib/optim/grad_sync.c lib/optim/buckets.c lib/optim/bucket_sum.c lib/optim/zero.c lib/optim/optim_state.c \
	lib/pipeline/partition.c \
	lib/pipeline/schedule.c \
	lib/pipeline/executor.c lib/pipeline/tied.c \
	lib/pipeline/shards.c \
	lib/io/idx.c lib/io/zfile.c lib/io/dataset.c lib/io/tokens.c lib/io/safetensors.c lib/io/loader.c lib/io/h5util.c lib/io/ckpt.c lib/io/ckpt_load.c lib/io/ckpt_layout.c lib/io/ckpt_check.c lib/io/ckpt_file.c \
	lib/global/placement.c lib/global/sbp.c lib/global/gtensor.c lib/global/boxing.c \
	lib/global/signature.c lib/global/apply.c lib/global/inplace.c lib/global/grad_state.c lib/global/regather.c \
	lib/plan/plan.c lib/plan/plan_json.c lib/plan/plan_apply.c lib/plan/calibration.c lib/plan/calibrate.c lib/plan/predict.c lib/plan/layout.c \
	lib/graph/cost.c lib/graph/meta.c lib/graph/graph.c lib/graph/sim.c
libmpiflow_la_LIBADD += lib/libmf_core.la
noinst_HEADERS += lib/internal.h lib/nn/nn_internal.h \
	lib/optim/optim_internal.h lib/optim/optim_state.h lib/optim/buckets.h lib/global/global_internal.h lib/io/h5util.h lib/io/ckpt_check.h lib/io/ckpt_internal.h lib/io/dataset_internal.h lib/plan/plan_internal.h \
	lib/graph/graph_internal.h
mpiflowinc_HEADERS += include/mpiflow/status.h include/mpiflow/runtime.h include/mpiflow/tensor.h \
	include/mpiflow/ops.h include/mpiflow/autograd.h include/mpiflow/nn.h include/mpiflow/optim.h \
	include/mpiflow/data.h include/mpiflow/models.h \
	include/mpiflow/global.h include/mpiflow/ckpt.h include/mpiflow/coll.h include/mpiflow/trace.h \
	include/mpiflow/pipeline.h include/mpiflow/plan.h include/mpiflow/graph.h include/mpiflow/predict.h include/mpiflow/layout.h
