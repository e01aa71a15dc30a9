/*
 * mpiflow/trace.h - per-rank timelines in Chrome/Perfetto trace format.
 *
 *   mf_trace_enable(true);                 // collective: aligns the ranks' clocks
 *   double t0 = mf_time(); ...; mf_trace_span("forward", "compute", 0, t0, mf_time());
 *   mf_trace_write("run.json");            // collective: rank 0 writes every rank's spans
 *
 * Open the file in https://ui.perfetto.dev or chrome://tracing: one
 * process per rank, thread 0 for compute and thread 1 for communication.
 * While tracing is on, the gradient buckets of mf_optim_step record one
 * "comm" span per bucket, on thread 1.
 */
#ifndef MPIFLOW_TRACE_H
#define MPIFLOW_TRACE_H

#include <stdbool.h>
#include "mpiflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts (or stops) recording. Starting is collective: after a barrier
 * every rank takes its time zero, so spans line up across ranks. */
MF_API mf_status mf_trace_enable(bool on);
MF_API bool mf_trace_enabled(void);
/* One span [t0, t1] on mf_time's clock (a no-op when not recording);
 * name and cat are copied (up to 63 characters). */
MF_API void mf_trace_span(const char *name, const char *cat, int tid, double t0, double t1);
/* Collective: gathers every rank's spans and rank 0 writes the JSON file
 * (path.tmp, then renamed). The recording is kept. */
MF_API mf_status mf_trace_write(const char *path);
/* On this rank: the seconds of spans of category comm_cat, and the
 * fraction of them that lies inside spans named `inside` or `inside`
 * followed by a space and more (for example "comm" inside "backward":
 * communication hidden behind backward, also the pipeline's "backward 3"). */
MF_API double mf_trace_hidden(const char *comm_cat, const char *inside, double *comm_seconds);

#ifdef __cplusplus
}
#endif
#endif
