/*
 * mpiflow.h - the umbrella header: include this one.
 *
 * mpiflow is an MPI-native deep-learning training framework. See
 * README.md and doc/ for the concepts; each header below documents its
 * functions, their return values and who owns what.
 */
#ifndef MPIFLOW_H
#define MPIFLOW_H

#include "mpiflow/status.h"
#include "mpiflow/dtype.h"
#include "mpiflow/runtime.h"
#include "mpiflow/tensor.h"
#include "mpiflow/global.h"
#include "mpiflow/ops.h"
#include "mpiflow/autograd.h"
#include "mpiflow/nn.h"
#include "mpiflow/optim.h"
#include "mpiflow/data.h"
#include "mpiflow/models.h"
#include "mpiflow/ckpt.h"
#include "mpiflow/coll.h"
#include "mpiflow/trace.h"
#include "mpiflow/pipeline.h"
#include "mpiflow/plan.h"
#include "mpiflow/graph.h"
#include "mpiflow/predict.h"
#include "mpiflow/layout.h"

#endif
