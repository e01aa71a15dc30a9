/*
 * lib/pipeline/tied.h - a parameter used on two pipeline stages, such as
 * a GPT's token embedding, which is also its head (doc/pipeline.md,
 * "Tied parameters").
 */
#ifndef MPIFLOW_LIB_PIPELINE_TIED_H
#define MPIFLOW_LIB_PIPELINE_TIED_H

#include "lib/internal.h"

typedef struct mfi_ties mfi_ties;

/* Ties copy (on stage `to`, placement pl[to]) to param (on stage
 * `from` < to): same shape, dtype and nd-SBP, placements of the same
 * mesh. Rank i of one placement pairs with rank i of the other. */
mf_status mfi_ties_add(mfi_ties **t, mf_tensor *param, int from, mf_tensor *copy, int to, mf_placement *const *pl);
void mfi_ties_destroy(mfi_ties *t);

/* At the start of a step on this rank's stage me: the param's stage
 * sends its values; the copy's stage takes them into the copy and drops
 * its gradient. train: the param's stage also posts the receive of the
 * copy's gradient. */
mf_status mfi_ties_start(mfi_ties *t, int me, bool train);
/* Stage me has run its last backward: the copy's gradient goes to the
 * param's stage. */
mf_status mfi_ties_send_grads(mfi_ties *t, int me);
/* Stage me is about to run its last backward: the copy's gradient is
 * added to the param's, so that the data-parallel sum, which starts in
 * that backward, covers both uses. */
mf_status mfi_ties_add_grads(mfi_ties *t, int me);
/* Completes what this rank posted. */
mf_status mfi_ties_finish(mfi_ties *t);

#endif
