/*
 * lib/optim/optim_state.h - an optimizer's state as a checkpoint sees it
 * (not installed): its parameters' names, its state tensors as global
 * tensors, its step and its hyper-parameters. lib/io reads and writes an
 * optimizer through these functions only (doc/design.md section 7).
 */
#ifndef MPIFLOW_LIB_OPTIM_STATE_H
#define MPIFLOW_LIB_OPTIM_STATE_H

#include "mpiflow.h"

int mfi_optim_nparams(const mf_optim *o);
const char *mfi_optim_param_name(const mf_optim *o, int i);
/* Slots of state tensors per parameter (some unused by o's configuration). */
int mfi_optim_nstate(const mf_optim *o);
/* The name of state slot k ("exp_avg"), NULL when o does not use it. */
const char *mfi_optim_state_name(const mf_optim *o, int k);
/* Bytes of all state tensors once o has stepped (0 before). */
double mfi_optim_state_bytes(const mf_optim *o);
/* State k of parameter i as a tensor of the parameter's global shape:
 * a new reference to a wrapper around this rank's piece (S(0) under
 * ZeRO-1, else the parameter's SBP), creating the state when create is
 * true; NULL when slot k is unused. */
mf_tensor *mfi_optim_state_view(mf_optim *o, int i, int k, bool create);
/* After a load: every parameter has taken `steps` steps. */
void mfi_optim_set_steps(mf_optim *o, int64_t steps);
/* o's hyper-parameters named in names (NULL-terminated), into v; their count. */
int mfi_optim_hypers(const mf_optim *o, const char *const *names, double *v, int max);

#endif
