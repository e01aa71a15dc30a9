/*
 * tests/gpt_parallel.c - for tests/gpt_parallel.sh: one forward and
 * backward of a tiny GPT under tensor (and sequence) parallelism on a
 * mesh (ranks/TP) x TP, checks what it communicated against Megatron-LM's
 * count, and writes the loss and every gradient for the script to
 * compare with the 1-rank run.
 *   gpt_parallel TP SP OUT.txt [RECOMPUTE [DROPOUT]]
 * SP 0 or 1; RECOMPUTE none, block or attn (mf_gpt_set_recompute);
 * DROPOUT the model's (default 0; above 0 the count is not checked).
 * The count, for L blocks, with a rows of activations [rows, C] per
 * rank (bytes A = 4 rows C) and tp > 1:
 *   tp    allreduce 2(2L+1) of A (the embedding's and each row-parallel
 *         output's, forward and backward) and 1 of the loss's sums of
 *         exp; allgather 1, the loss's row maxima
 *   tp+sp reduce-scatter 2(2L+1) of A and allgather 2(2L+1) of A instead
 *         of those allreduces (each one becomes a pair)
 * and nothing at all for tp 1 (data parallel only: the gradients are
 * synchronised after backward, outside what is counted). Recompute runs
 * the forward's collectives again in backward: 2 per block (block), 1
 * (attn).
 * OUT.txt: "# loss", the loss, then "# NAME" and the gradient's values,
 * one per line, per parameter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static int fail(const char *what)
{
    fprintf(stderr, "gpt_parallel: rank %d: %s: %s\n", mf_rank(), what, mf_last_error());
    return 1;
}

/* expect calls and bytes of one kind */
static int expect(const mf_comm_tally *t, mf_comm_kind k, int64_t calls, int64_t bytes)
{
    if (t->calls[k] == calls && t->bytes[k] == bytes) return 0;
    fprintf(stderr, "gpt_parallel: rank %d: %s: %lld calls of %lld bytes in all, expected %lld calls of %lld\n", mf_rank(),
            mf_comm_kind_name(k), (long long)t->calls[k], (long long)t->bytes[k], (long long)calls, (long long)bytes);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: gpt_parallel TP SP OUT.txt [none|block|attn [DROPOUT]]\n");
        return 2;
    }
    const char *rc = argc > 4 ? argv[4] : "none";
    const double dropout = argc > 5 ? atof(argv[5]) : 0.0;
    const mf_gpt_recompute mode = !strcmp(rc, "block") ? MF_RECOMPUTE_BLOCK : !strcmp(rc, "attn") ? MF_RECOMPUTE_ATTN
                                                                                                 : MF_RECOMPUTE_NONE;
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    const int tp = atoi(argv[1]), sp = atoi(argv[2]), n = mf_world_size();
    if (tp < 1 || n % tp) {
        fprintf(stderr, "gpt_parallel: TP %d does not divide %d ranks\n", tp, n);
        return 2;
    }
    /* 4 heads; a vocabulary of 23 splits unevenly over 2 and 4 ranks */
    const mf_gpt_config c = {2, 4, 16, 12, 23, dropout};
    const int64_t B = 4, T = 12, dp = n / tp;
    mf_manual_seed(11);
    mf_module *m = mf_model_gpt(&c);
    mf_tensor_list *pl = m ? mf_module_parameters(m) : NULL;
    if (!pl) return fail("model");
    for (int i = 0; i < pl->n; i++) {   /* away from GPT-2's near-linear init, keyed by name */
        mf_tensor *t = pl->items[i].tensor;
        if (mf_normal_keyed_(t, 0.0, mf_tensor_ndim(t) >= 2 ? 0.3 : 0.5, 11, pl->items[i].name) != MF_OK)
            return fail("init");
    }
    mf_tensor_list_destroy(pl);
    if (mf_gpt_set_recompute(m, mode) != MF_OK) return fail("recompute");
    mf_tensor *x = mf_empty(MF_I64, MF_DIMS(B, T)), *y = mf_empty(MF_I64, MF_DIMS(B, T));
    int64_t *px = mf_tensor_data(x), *py = mf_tensor_data(y);
    for (int64_t i = 0; i < B * T; i++) {   /* a fixed, irregular batch */
        px[i] = (7 * i + 3) % c.vocab_size;
        py[i] = (i * i + 5) % c.vocab_size;
    }
    mf_placement *p = NULL;
    if (n > 1) {
        p = mf_placement_world_mesh(2, (const int[]){(int)dp, tp});
        mf_gpt_parallel gp = {.tp_dim = 1, .sequence_parallel = sp != 0};
        if (!p || mf_gpt_parallelize(m, p, &gp) != MF_OK) return fail("mf_gpt_parallelize");
        mf_tensor *gx = mf_global_from_full(x, p, "S(0),B"), *gy = mf_global_from_full(y, p, "S(0),B");
        if (!gx || !gy) return fail("batch");
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
        x = gx;
        y = gy;
    }
    mf_comm_tally_reset();
    mf_tensor *loss = mf_gpt_loss(m, x, y);
    if (!loss || mf_backward(loss) != MF_OK) return fail("loss and backward");
    mf_comm_tally t;
    mf_comm_tally_get(&t);
    int bad = 0;
    const int64_t rows = B / dp * T, A = 4 * rows * c.n_embd, L = c.n_layer;
    mf_comm_tally want = {{0}, {0}};
    if (tp > 1 && !sp) {
        want.calls[MF_COMM_ALLREDUCE] = 2 * (2 * L + 1) + 1;
        want.bytes[MF_COMM_ALLREDUCE] = 2 * (2 * L + 1) * A + 4 * rows;
        want.calls[MF_COMM_ALLGATHER] = 1;
        want.bytes[MF_COMM_ALLGATHER] = 4 * rows * tp;
    } else if (tp > 1) {
        want.calls[MF_COMM_REDUCE_SCATTER] = 2 * (2 * L + 1);
        want.bytes[MF_COMM_REDUCE_SCATTER] = 2 * (2 * L + 1) * A;
        want.calls[MF_COMM_ALLGATHER] = 2 * (2 * L + 1) + 1;
        want.bytes[MF_COMM_ALLGATHER] = 2 * (2 * L + 1) * A + 4 * rows * tp;
        want.calls[MF_COMM_ALLREDUCE] = 1;
        want.bytes[MF_COMM_ALLREDUCE] = 4 * rows;
    }
    /* recompute: the recomputed part's forward collectives once more */
    const int64_t again = mode == MF_RECOMPUTE_BLOCK ? 2 * L : mode == MF_RECOMPUTE_ATTN ? L : 0;
    mf_comm_kind fwd = sp ? MF_COMM_REDUCE_SCATTER : MF_COMM_ALLREDUCE;
    if (tp > 1) {
        want.calls[fwd] += again;
        want.bytes[fwd] += again * A;
        if (sp) {   /* and the allgathers at the regions' inputs */
            want.calls[MF_COMM_ALLGATHER] += again;
            want.bytes[MF_COMM_ALLGATHER] += again * A;
        }
    }
    for (int k = 0; k < MF_COMM_KINDS && dropout == 0; k++) bad |= expect(&t, (mf_comm_kind)k, want.calls[k], want.bytes[k]);
    if (mf_rank() == 0)
        printf("gpt_parallel: tp %d%s on %d rank(s), recompute %s, dropout %g: allreduce %lld, reduce-scatter %lld, "
               "allgather %lld calls in forward and backward%s\n", tp, sp ? " + sp" : "", n, rc, dropout,
               (long long)t.calls[MF_COMM_ALLREDUCE], (long long)t.calls[MF_COMM_REDUCE_SCATTER],
               (long long)t.calls[MF_COMM_ALLGATHER], bad ? "" : dropout > 0 ? "" : ", as expected");
    /* the gradients in the parameters' own layouts, then whole */
    mf_tensor_list *l = mf_module_parameters(m);
    mf_sgd_opts so = mf_sgd_defaults();
    mf_optim *opt = l ? mf_sgd_create(l, &so) : NULL;
    if (!opt || mf_optim_sync_grads(opt) != MF_OK) return fail("gradient sync");
    mf_tensor *lf = mf_tensor_is_global(loss) ? mf_global_gather(loss) : mf_tensor_retain(loss);
    FILE *f = mf_rank() == 0 ? fopen(argv[3], "w") : NULL;
    if (!lf || (mf_rank() == 0 && !f)) return fail("output");
    if (f) fprintf(f, "# loss\n%.9g\n", mf_tensor_item(lf));
    for (int i = 0; i < l->n; i++) {
        mf_tensor *g = mf_tensor_grad(l->items[i].tensor);
        mf_tensor *full = !g ? NULL : mf_tensor_is_global(g) ? mf_global_gather(g) : mf_tensor_retain(g);
        int64_t cnt = mf_tensor_numel(l->items[i].tensor);
        double *v = calloc((size_t)cnt + 1, sizeof *v);
        if (!full || !v || mf_tensor_copy_out(full, MF_F64, v, cnt) != MF_OK) return fail(l->items[i].name);
        if (f) {
            fprintf(f, "# %s\n", l->items[i].name);
            for (int64_t k = 0; k < cnt; k++) fprintf(f, "%.9g\n", v[k]);
        }
        free(v);
        mf_tensor_destroy(full);
    }
    if (f) fclose(f);
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(l);
    mf_tensor_destroy(lf);
    mf_tensor_destroy(loss);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_placement_destroy(p);
    mf_module_destroy(m);
    mf_finalize();
    return bad;
}
