/*
 * tests/cuda_parity.h - the harness of tests/test_cuda.c: runs one
 * function of its inputs on the device under test and on the reference,
 * backpropagates sum(out * w) for a fixed w on both, and compares the
 * output and every input gradient element by element:
 *
 *   |dut - ref| <= rtol * |ref| + atol     (f32: 1e-4, 3e-6; f64: 1e-10, 1e-12)
 *
 * the same rule on every kernel. With a GPU the device under test is
 * CUDA and the reference the CPU in the same dtype; without one
 * (parity_self_check) it is the CPU in f32 against the CPU in f64, within
 * half the tolerance.
 */
#ifndef MPIFLOW_TESTS_CUDA_PARITY_H
#define MPIFLOW_TESTS_CUDA_PARITY_H

#include "tests/test_util.h"

#define EXACT 1      /* parity flag: the same bits on both */
#define SAME_DTYPE 2 /* parity flag: no f64 reference without a GPU (the case fixes its dtypes) */

typedef mf_tensor *(*fn_t)(mf_tensor **in, void *u);

extern bool parity_self_check;        /* no GPU: CPU f32 against CPU f64 */
extern mf_device_type parity_dut;     /* the device under test (MF_DEV_CUDA unless parity_self_check) */
extern double parity_worst;           /* the worst error since reset, as a share of the tolerance */
extern int parity_ncases;             /* parity() calls since reset */
extern int64_t parity_dut_calls[64];  /* kernel calls (by table index) made by the device under test's runs */

/* Runs fn on the device under test and on the reference, and compares
 * output and gradients in the dtype of in[0] (flags: EXACT, SAME_DTYPE).
 * Fails the running Check test on a difference. */
void parity(const char *what, fn_t fn, int n, mf_tensor **in, void *u, int flags);
/* A tensor of shape with uniform values in [lo, hi), requiring grad */
mf_tensor *rnd(mf_dtype dt, int ndim, const int64_t *shape, double lo, double hi);
/* n int64 class indices below hi: (7i + 3) mod hi */
mf_tensor *ints(int64_t n, int64_t hi);
void free_all(int n, mf_tensor **t);

#endif
