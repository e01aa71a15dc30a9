/*
 * mpiflow/models.h - the reference models of OneFlow's examples.
 */
#ifndef MPIFLOW_MODELS_H
#define MPIFLOW_MODELS_H

#include "mpiflow/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* OneFlow's mixed_parallel_mlp: flatten, hidden = Linear(in, hidden),
 * ReLU, output = Linear(hidden, classes). Parameters: hidden.weight,
 * hidden.bias, output.weight, output.bias. */
MF_API mf_module *mf_model_mlp(int64_t in_features, int64_t hidden, int64_t classes);

/* OneFlow's mixed_parallel_lenet for [N, channels, h, w] input (h and w
 * divisible by 4): conv1 = Conv2d(channels, 32, 5, padding 2), ReLU,
 * MaxPool 2; conv2 = Conv2d(32, 64, 5, padding 2), ReLU, MaxPool 2;
 * flatten; hidden = Linear(64*h/4*w/4, 512), ReLU, Dropout(0.5);
 * output = Linear(512, classes). */
MF_API mf_module *mf_model_lenet(int64_t channels, int64_t h, int64_t w, int64_t classes);

/* "mlp" or "lenet" for input [c, h, w]; NULL with an error otherwise. */
MF_API mf_module *mf_model_create(const char *name, int64_t c, int64_t h, int64_t w, int64_t classes);

#ifdef __cplusplus
}
#endif
#endif
