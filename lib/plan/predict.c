/*
 * lib/plan/predict.c - a step's time from its graph and a calibration
 * (mpiflow/predict.h, doc/planning.md, "Predicting a step").
 *
 * Two streams, as the step runs them: compute, in the graph's order,
 * and communication. A blocking call (boxing, a ZeRO gather made when
 * needed) stops compute for its time; a non-blocking one (a gradient
 * bucket, a ZeRO-3 prefetch) starts when issued, after the calls before
 * it, and runs beside the compute that follows (the calibration's
 * overlap is the part of it compute hides; the rest holds compute up);
 * the optimizer's update waits for all of them, as does the end of the
 * step. A pipeline's stage-to-stage transfer costs its bytes at the
 * point-to-point bandwidth between two ranks; the time of the smallest
 * such transfer, the wait for the two to meet (mostly for the other to
 * run, where ranks share cores), counts towards the pipeline's idle
 * time, which mf_predict_pipeline weighs against the schedule's bubble.
 */
#include "lib/internal.h"
#include "mpiflow/predict.h"

/* one op's compute seconds */
static double op_time(const mf_graph_op *o, const mf_calibration *c)
{
    double t = o->kernels * mf_calibration_overhead(c);
    if (o->mm_calls && o->mm_flops > 0) {
        mf_prof_class cls = o->cls == MF_PROF_CONV || o->cls == MF_PROF_ATTENTION ? o->cls : MF_PROF_GEMM;
        t += o->mm_flops / mf_calibration_rate(c, cls, o->mm_flops / o->mm_calls);
    }
    if (o->mem_calls && o->mem_bytes > 0)
        t += o->mem_bytes / mf_calibration_rate(c, MF_PROF_ELEMENTWISE, o->mem_bytes / o->mem_calls);
    return t;
}

/* one communication entry's seconds */
static double comm_time(const mf_graph_op *o, const mf_calibration *c)
{
    if (o->comm_pipe) {
        int nodes = o->comm_nodes > 1 ? 2 : 1;
        double bw = mf_calibration_comm_bandwidth(c, MF_COMM_P2P, 2, nodes);
        if (bw > 0) return (double)o->comm_bytes / bw;
    }
    return mf_calibration_comm_time(c, (mf_comm_kind)o->comm_kind, o->comm_bytes, o->comm_ranks, o->comm_nodes);
}

double mf_predict_entry(const mf_graph_op *o, const mf_calibration *c)
{
    if (!o || !c) return 0;
    return o->comm_kind >= 0 ? comm_time(o, c) : op_time(o, c);
}

mf_status mf_predict_step(const mf_graph *g, const mf_calibration *c, mf_step_time *out)
{
    if (!g || !c || !out) MF_FAIL(MF_ERR_ARG, "mf_predict_step: graph, calibration or result is NULL");
    memset(out, 0, sizeof *out);
    double t = 0, comm_end = 0;
    bool waited = false;
    for (int i = 0; i < mf_graph_num_ops(g); i++) {
        const mf_graph_op *o = mf_graph_get_op(g, i);
        if (o->comm_kind >= 0) {
            double d = comm_time(o, c);
            if (o->comm_pipe)   /* the smallest transfer's time between two ranks: the wait to meet */
                out->pipe_wait += mf_calibration_comm_time(c, MF_COMM_P2P, 1, 2, o->comm_nodes > 1 ? 2 : 1);
            out->comm += d;
            if (o->comm_async) {   /* the part compute cannot hide holds it up */
                const double ov = mf_calibration_overlap(c);
                comm_end = (comm_end > t ? comm_end : t) + ov * d;
                t += (1 - ov) * d;
                out->exposed_comm += (1 - ov) * d;
            } else {
                t += d;
                out->exposed_comm += d;
            }
            continue;
        }
        if (o->phase == MF_GRAPH_UPDATE && !waited) {   /* the update waits for the gradients */
            if (comm_end > t) {
                out->exposed_comm += comm_end - t;
                t = comm_end;
            }
            waited = true;
        }
        double d = op_time(o, c);
        out->compute += d;
        t += d;
    }
    if (comm_end > t) {
        out->exposed_comm += comm_end - t;
        t = comm_end;
    }
    out->step = t;
    return MF_OK;
}

void mf_predict_pipeline(mf_step_time *t, int stages, int micro_batches)
{
    if (stages < 2 || micro_batches < 1) return;
    double b = t->step * (double)(stages - 1) / micro_batches;
    t->bubble = b > t->pipe_wait ? b : t->pipe_wait;
    t->step += t->bubble;
}
