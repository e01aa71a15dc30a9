/*
 * apps/train_device.h - mpiflow-train's lines about devices and bf16
 * (train_device.c).
 */
#ifndef MPIFLOW_APPS_TRAIN_DEVICE_H
#define MPIFLOW_APPS_TRAIN_DEVICE_H

#include "mpiflow.h"

/* On a GPU: every rank's device, one line each from rank 0. Collective. */
void device_lines(mf_device_type dev);
/* On a GPU: the kernels each rank ran there and on the CPU. Collective. */
void kernel_tally(mf_device_type dev);
/* GFLOP/s of a 256x1024x1024 matrix product on the CPU in bf16 autocast
 * and in fp32, with this process's threads (0 where it failed). */
void bf16_rates(double *bf16, double *fp32);
/* --precision bf16 on the CPU: rank 0 says whether bf16 pays here, with
 * both rates, and warns when it is slower than fp32. Collective. */
void bf16_advice(void);

#endif
