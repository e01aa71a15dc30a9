/*
 * bench/bench_memory.c - a GPT under one parallel scheme: memory per rank
 * by category, communication per step and tokens/s, each next to what
 * theory predicts for it (doc/performance.md, "GPT parallel schemes").
 *
 *   mpiexec -n N bench_memory [--tp T] [--sp] [--zero 0|2|3] [--pp P]
 *       [--recompute none|block|attn] [--n-layer L] [--n-embd C]
 *       [--n-head H] [--seq-len T] [--vocab V] [--batch B] [--steps S]
 *       [--header]
 *
 * The model trains with AdamW on random tokens, on a mesh (N/T) x T. One
 * warm-up step makes the optimizer's state; then one step is measured:
 *   params, grads, adam   this rank's pieces (exact bytes)
 *   kept                  what the graph keeps for backward at the end of
 *                         the forward (mf_autograd_saved_bytes): the
 *                         activations, and under ZeRO-2 the gathered weights
 *   peak                  the allocator's peak over the step (size classes,
 *                         so up to a quarter above the requests)
 *   comm                  message bytes of all collectives in the step
 *                         (mf_comm_tally_get)
 * then S steps are timed for tokens/s, and under ZeRO-3 the share of the
 * forward's gather time hidden behind compute (mf_module_use_stats).
 * Theory, for rank 0, with N tokens
 * per data-parallel row, fp32:
 *   parameters  their pieces: matrices / tp, / dp under ZeRO-2/3
 *   kept        per block 16 N C floats (LayerNorm and Linear inputs,
 *               q k v, the attention output, the MLP's 4C twice) plus
 *               LayerNorm statistics; tp divides all but the LayerNorm
 *               and column-parallel inputs (4 N C stay), sp also the
 *               LayerNorm inputs (2 N C stay); recompute keeps a block's
 *               input (block) or that and the MLP's (attn); the head keeps
 *               the final LayerNorm's input and output and the logits'
 *               gradient, N V / tp
 *   comm        tp: 2(2L+1) allreduces of the activations, the loss's
 *               sums; the gradients: dp's bucketed allreduce, ZeRO's
 *               gathers per use and reduce-scatters, ZeRO-3's gathers of
 *               the saved weights for backward (with block recompute,
 *               the blocks' parameters gathered for the second forward)
 * With --pp P the GPT is a pipeline of P stages of N/P ranks (each a
 * mesh (N/P/T) x T), 1F1B over 2P micro-batches, and rank 0 is on the
 * first stage: its parameters are the embeddings' and its blocks', its
 * messages the activations it sends on (4 N C bytes, / T under sp), its
 * blocks' tp collectives, its piece of the tied embedding for the last
 * stage, and its stage's gradient sum; under tp without sp also one
 * allreduce of the activations per micro-batch more than its blocks and
 * embedding make (the gradient arrives B from the next stage, where a
 * single placement's backward has it P, and the planner sums the P
 * gradient it meets). kept is not measured there (the graph is the
 * executor's); peak is.
 * With --model lenet|vit an image model instead, data parallel with
 * ZeRO 0-3 (image_main: theory from the parameters).
 * Rank 0 prints one row; bench/run_memory.sh runs the schemes.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_memory: rank %d: %s: %s\n", mf_rank(), what, mf_last_error());
    exit(1);
}

typedef struct scheme {
    int tp, dp, zero, pp;
    bool sp;
    mf_gpt_recompute rc;
} scheme;

static int64_t piece_bytes(mf_tensor *t)
{
    mf_tensor *l = t && mf_tensor_is_global(t) ? mf_to_local(t) : mf_tensor_retain(t);
    int64_t b = l ? mf_tensor_numel(l) * 4 : 0;
    mf_tensor_destroy(l);
    return b;
}

static int64_t list_bytes(const mf_tensor_list *l, bool grads)
{
    int64_t b = 0;
    for (int i = 0; l && i < l->n; i++) b += piece_bytes(grads ? mf_tensor_grad(l->items[i].tensor) : l->items[i].tensor);
    return b;
}

/* the measured step's allocator peak and message bytes */
static void measured(int64_t *peak, int64_t *comm)
{
    mf_memory_stats st;
    mf_memory_get_stats(&st);
    *peak = st.peak;
    mf_comm_tally t;
    mf_comm_tally_get(&t);
    for (int k = 0; k < MF_COMM_KINDS; k++) *comm += t.bytes[k];
}

/* whether parameter `name` is in a layer before `cut` (the GPT's layers:
 * 0 the embeddings, 1 + i block i, L + 1 the final LayerNorm) */
static bool on_first_stage(const char *name, int cut, int L)
{
    const char *h = strstr(name, ".h.");
    int layer = h ? 1 + atoi(h + 3) : strstr(name, "ln_f") ? L + 1 : 0;
    return layer < cut;
}

/* ---- theory */
/* elements of one parameter on rank 0: split by tp (its tensor-parallel
 * axis) and, under ZeRO-2/3, by dp (balanced: the first piece) */
static int64_t param_elems(const char *name, int64_t numel, int64_t len0, const scheme *s)
{
    static const char *const split[] = {"wte.weight", "c_attn.weight", "c_attn.bias", "attn.c_proj.weight",
                                        "c_fc.weight", "c_fc.bias", "mlp.c_proj.weight"};
    bool tps = false;
    for (size_t i = 0; i < sizeof split / sizeof *split; i++) tps |= strstr(name, split[i]) != NULL;
    int64_t e = tps && s->tp > 1 ? numel / s->tp : numel;
    (void)len0;
    return s->zero >= 2 ? (e + s->dp - 1) / s->dp : e;
}

static int64_t theory_kept(const mf_gpt_config *c, int64_t N, const scheme *s)
{
    const int64_t C = c->n_embd, t = s->tp, H = c->n_head;
    int64_t full = s->sp ? 2 * N * C : 4 * N * C, split = s->sp ? 14 * N * C : 12 * N * C;
    int64_t stats = s->sp ? 4 * N / t : 4 * N;
    int64_t block = full + split / t + stats + N * H / t;     /* floats */
    int64_t input = s->sp ? N * C / t : N * C;
    int64_t mlp = (s->sp ? N * C / t : N * C) + N * C + 8 * N * C / t + 2 * (s->sp ? N / t : N);
    if (s->rc == MF_RECOMPUTE_BLOCK) block = input;
    else if (s->rc == MF_RECOMPUTE_ATTN) block = input + mlp;
    int64_t head = input + 2 * N + N * C + N * (int64_t)c->vocab_size / t;
    int64_t bytes = 4 * (c->n_layer * block + head) + 8 * N + (t > 1 ? 12 * N : 0) + 8 * c->seq_len;
    return bytes;
}

/* message bytes of a step's collectives on rank 0 */
/* parameter elements (rank 0, before ZeRO's split) by where they are
 * used: the attention half of the blocks, the MLP half, outside; the
 * weights backward keeps of each (all but biases and wpe) */
typedef struct pcount {
    int64_t all, rep, wte;
    int64_t half[3], saved[3];   /* attention half, MLP half, outside */
} pcount;

static int64_t theory_comm(const mf_gpt_config *c, int64_t N, const pcount *q, const scheme *s)
{
    const int64_t L = c->n_layer, A = 4 * N * c->n_embd;
    int64_t b = 0;
    if (s->tp > 1) {
        int64_t again = s->rc == MF_RECOMPUTE_BLOCK ? 2 * L : s->rc == MF_RECOMPUTE_ATTN ? L : 0;
        b += (2 * (2 * L + 1) + again) * A * (s->sp ? 2 : 1) + 4 * N + 4 * N * s->tp;
    }
    if (s->zero >= 2) {   /* each use gathered, each gradient reduce-scattered */
        b += 2 * 4 * (q->all + q->wte);
        /* a recomputed part's parameters once more, for its second
         * forward; under ZeRO-3 the other parts' kept weights again for
         * backward */
        const bool rc[2] = {s->rc != MF_RECOMPUTE_NONE, s->rc == MF_RECOMPUTE_BLOCK};
        for (int k = 0; k < 2; k++) b += 4 * (rc[k] ? q->half[k] : s->zero == 3 ? q->saved[k] : 0);
        if (s->zero == 3) b += 4 * q->saved[2];
        if (s->tp > 1) b += 4 * ((q->rep + s->dp - 1) / s->dp);   /* replicated over tp: their shards summed there */
    } else if (s->dp > 1) {
        b += 4 * q->all;                 /* the bucketed allreduce */
    } else if (s->tp > 1) {
        b += 4 * q->rep;
    }
    return b + (s->dp * s->tp > 1 ? 4 : 0);   /* the loss, for the report */
}

/* ---- an image model (LeNet, the ViT) under a data-parallel plan with
 * ZeRO stage z: the same columns, theory from the parameters alone:
 *   params, grads  whole, or rank 0's piece of each (its largest axis
 *                  split evenly, the first piece the largest) under
 *                  ZeRO-2/3
 *   adam           two values per parameter element, / dp from ZeRO-1
 *   comm           dp: the gradients' allreduce; ZeRO-1: also the
 *                  updated parameters' allgather; ZeRO-2/3: every
 *                  parameter gathered for its use and every gradient
 *                  reduce-scattered; ZeRO-3: the weights backward keeps
 *                  (all but biases and the position embedding) gathered
 *                  again
 * kept is not predicted for these models. */
static int64_t first_piece(const mf_tensor *t, int dp)
{
    const int nd = mf_tensor_ndim(t);
    const int64_t *sh = mf_tensor_shape(t), n = mf_tensor_numel(t);
    int a = -1;
    for (int k = 0; k < nd; k++)
        if (sh[k] >= dp && (a < 0 || sh[k] > sh[a])) a = k;
    return a < 0 || dp < 2 ? n : (sh[a] + dp - 1) / dp * (n / sh[a]);
}

static int image_main(const char *model, int zero, int B, int steps, bool header)
{
    const int n = mf_world_size();
    mf_manual_seed(0);
    mf_module *m = mf_model_create(model, 1, 28, 28, 10);
    mf_placement *p = mf_placement_world();
    mf_plan *plan = mf_plan_create();
    if (!m || !p || !plan || mf_plan_set_mesh(plan, 1, (const char *const[]){"dp"}, (const int[]){-1}) != MF_OK ||
        (zero >= 2 && mf_plan_set_zero(plan, zero, "dp") != MF_OK) || mf_plan_apply(plan, m, p) != MF_OK)
        die("plan");
    mf_tensor_list *params = mf_module_parameters(m);
    int64_t P = 0, P_rank = 0, saved = 0;
    for (int i = 0; i < params->n; i++) {
        const mf_tensor *t = params->items[i].tensor;
        const char *nm = params->items[i].name;
        P += mf_tensor_numel(t);
        P_rank += zero >= 2 ? first_piece(t, n) : mf_tensor_numel(t);
        if (!strstr(nm, "bias") && !strstr(nm, "pos")) saved += mf_tensor_numel(t);
    }
    mf_adam_opts ao = mf_adamw_defaults();
    ao.lr = 1e-4;
    mf_optim *opt = mf_adamw_create(params, &ao);
    if (!opt || mf_optim_set_zero(opt, zero == 1 ? 1 : 0) != MF_OK) die("optimizer");
    float *img = malloc((size_t)B * 784 * sizeof *img);
    int64_t *lab = malloc((size_t)B * sizeof *lab);
    uint64_t r = 7;
    for (int64_t i = 0; i < (int64_t)B * 784; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        img[i] = (float)((r >> 40) % 1000) / 1000.0f;
        if (i < B) lab[i] = (int64_t)((r >> 33) % 10);
    }
    mf_tensor *fx = mf_from_data(MF_F32, 4, (const int64_t[]){B, 1, 28, 28}, img);
    mf_tensor *fy = mf_from_data(MF_I64, 1, (const int64_t[]){B}, lab);
    free(img);
    free(lab);
    mf_tensor *x = fx ? mf_global_from_full(fx, p, "S(0)") : NULL, *y = fy ? mf_global_from_full(fy, p, "S(0)") : NULL;
    mf_tensor_destroy(fx);
    mf_tensor_destroy(fy);
    if (!x || !y) die("batch");
    int64_t grads = 0, peak = 0, comm = 0;
    double secs = 0;
    for (int it = 0; it < 2 + steps; it++) {
        const bool measure = it == 1;
        if (mf_optim_zero_grad(opt) != MF_OK) die("zero_grad");
        if (measure) {
            mf_memory_reset_peak();
            mf_comm_tally_reset();
        }
        double t0 = mf_time();
        mf_tensor *out = mf_module_forward(m, x), *loss = out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
        if (!loss || mf_backward(loss) != MF_OK || mf_optim_sync_grads(opt) != MF_OK) die("step");
        if (measure) grads = list_bytes(params, true);
        if (mf_optim_step(opt) != MF_OK) die("step");
        mf_tensor_destroy(out);
        mf_tensor_destroy(loss);
        if (it >= 2) secs += mf_time() - t0;
        if (measure) measured(&peak, &comm);
    }
    mf_tensor_list *state = mf_optim_state(opt);
    int64_t pbytes = list_bytes(params, false), sbytes = list_bytes(state, false);
    int64_t t_adam = zero >= 1 ? 8 * ((P + n - 1) / n) : 8 * P;
    int64_t t_comm = n < 2 ? 0 : zero >= 2 ? 8 * P + (zero == 3 ? 4 * saved : 0) : zero == 1 ? 8 * P : 4 * P;
    if (mf_rank() == 0) {
        if (header) {
            printf("%s: %lld parameters, batch %d of 28x28 images; MiB per rank (rank 0): measured / theory\n", model,
                   (long long)P, B);
            printf("%-16s %5s %15s %15s %15s %9s %17s %10s\n", "scheme", "ranks", "params", "grads", "adam", "peak",
                   "comm/step", "samples/s");
        }
        char name[32];
        snprintf(name, sizeof name, "%s %s%d", model, zero ? "zero" : "dp", zero ? zero : n);
        const double MiB = 1048576.0;
        int64_t t_grads = zero >= 2 ? P_rank : P;
        printf("%-16s %5d %7.3f/%-7.3f %7.3f/%-7.3f %7.3f/%-7.3f %9.2f %8.3f/%-8.3f %10.0f\n", name, n, pbytes / MiB,
               4 * P_rank / MiB, grads / MiB, 4 * t_grads / MiB, sbytes / MiB, t_adam / MiB, peak / MiB, comm / MiB,
               t_comm / MiB, (double)steps * B / secs);
        fflush(stdout);
    }
    mf_tensor_list_destroy(state);
    mf_tensor_list_destroy(params);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_optim_destroy(opt);
    mf_plan_destroy(plan);
    mf_placement_destroy(p);
    mf_module_destroy(m);
    mf_finalize();
    return 0;
}

int main(int argc, char **argv)
{
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    mf_gpt_config c = {4, 8, 256, 256, 8192, 0.0};
    scheme s = {1, 1, 0, 1, false, MF_RECOMPUTE_NONE};
    int B = 8, steps = 3;
    bool header = false;
    const char *model = "gpt";
    static const struct option longs[] = {
        {"tp", required_argument, 0, 't'},      {"sp", no_argument, 0, 's'},
        {"pp", required_argument, 0, 'P'},
        {"zero", required_argument, 0, 'z'},    {"recompute", required_argument, 0, 'r'},
        {"n-layer", required_argument, 0, 'L'}, {"n-embd", required_argument, 0, 'C'},
        {"n-head", required_argument, 0, 'H'},  {"seq-len", required_argument, 0, 'T'},
        {"vocab", required_argument, 0, 'V'},   {"batch", required_argument, 0, 'B'},
        {"steps", required_argument, 0, 'S'},   {"header", no_argument, 0, 'h'},
        {"model", required_argument, 0, 'm'},   {"help", no_argument, 0, '?'},
        {0, 0, 0, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 't': s.tp = atoi(optarg); break;
        case 's': s.sp = true; break;
        case 'P': s.pp = atoi(optarg); break;
        case 'z': s.zero = atoi(optarg); break;
        case 'r': s.rc = !strcmp(optarg, "block") ? MF_RECOMPUTE_BLOCK : !strcmp(optarg, "attn") ? MF_RECOMPUTE_ATTN
                                                                                              : MF_RECOMPUTE_NONE; break;
        case 'L': c.n_layer = atoi(optarg); break;
        case 'C': c.n_embd = atoi(optarg); break;
        case 'H': c.n_head = atoi(optarg); break;
        case 'T': c.seq_len = atoi(optarg); break;
        case 'V': c.vocab_size = atoi(optarg); break;
        case 'B': B = atoi(optarg); break;
        case 'S': steps = atoi(optarg); break;
        case 'h': header = true; break;
        case 'm': model = optarg; break;
        default:
            if (mf_rank() == 0)
                printf("usage: mpiexec -n N bench_memory [--tp T] [--sp] [--zero 0|2|3] [--pp P] [--recompute none|block|attn]\n"
                       "       [--n-layer L] [--n-embd C] [--n-head H] [--seq-len T] [--vocab V] [--batch B]\n"
                       "       [--steps S] [--header]\n"
                       "       mpiexec -n N bench_memory --model lenet|vit [--zero 0|1|2|3] [--batch B] [--steps S] [--header]\n"
                       "A GPT's (or an image model's, data parallel) memory per rank by category, communication\n"
                       "per step and throughput under one parallel scheme, each next to theory's figure\n"
                       "(doc/performance.md).\n");
            mf_finalize();
            return ch == '?' ? 0 : 2;
        }
    }
    if (strcmp(model, "gpt")) {
        if ((strcmp(model, "lenet") && strcmp(model, "vit")) || s.zero < 0 || s.zero > 3 || B % mf_world_size()) {
            fprintf(stderr, "bench_memory: --model %s --zero %d --batch %d: lenet or vit, stage 0 to 3, a batch the ranks "
                    "divide\n", model, s.zero, B);
            return 2;
        }
        return image_main(model, s.zero, B, steps, header);
    }
    int n = mf_world_size();
    if (s.pp < 1 || n % s.pp || s.tp < 1 || (n / s.pp) % s.tp || (s.pp > 1 && s.zero)) {
        fprintf(stderr, "bench_memory: --pp %d --tp %d do not divide %d ranks (or ZeRO-2/3 with a pipeline)\n", s.pp,
                s.tp, n);
        return 2;
    }
    s.dp = n / s.pp / s.tp;
    mf_manual_seed(0);
    mf_module *m = mf_model_gpt(&c);
    if (!m || mf_gpt_set_recompute(m, s.rc) != MF_OK) die("model");
    mf_placement *p = NULL, *stage[MF_MAX_STAGES] = {NULL};
    int first[MF_MAX_STAGES + 1], M = 2 * s.pp;
    mf_pipeline *pipe = NULL;
    if (s.pp > 1) {
        int k = n / s.pp, *ranks = malloc((size_t)k * sizeof *ranks);
        for (int st = 0; st < s.pp; st++) {
            for (int i = 0; i < k; i++) ranks[i] = st * k + i;
            if (!(stage[st] = mf_placement_create(k, ranks, 2, (const int[]){s.dp, s.tp}, MF_DEV_CPU))) die("placement");
        }
        free(ranks);
        if (mf_pipeline_balance(mf_gpt_layers(m), s.pp, first) != MF_OK) die("balance");
        mf_gpt_pipeline_opts go = {s.pp, first, stage, {1, s.sp, 0}, M, MF_PIPELINE_1F1B, 0};
        if (!(pipe = mf_gpt_pipeline_create(m, &go))) die("mf_gpt_pipeline_create");
        p = mf_placement_retain(stage[0]);
    } else if (n > 1 || s.zero) {
        p = mf_placement_world_mesh(2, (const int[]){s.dp, s.tp});
        mf_gpt_parallel gp = {1, s.sp, s.zero};
        if (!p || mf_gpt_parallelize(m, p, &gp) != MF_OK) die("mf_gpt_parallelize");
    }
    /* theory's parameter counts on rank 0 */
    mf_tensor_list *params = mf_module_parameters(m);
    int64_t P_rank = 0;
    pcount q = {0, 0, 0, {0, 0, 0}, {0, 0, 0}};
    int blocks0 = c.n_layer;   /* rank 0's blocks */
    if (pipe) blocks0 = (first[1] < c.n_layer + 1 ? first[1] : c.n_layer + 1) - 1;
    for (int i = 0; i < params->n; i++) {
        const char *nm = params->items[i].name;
        if (pipe && !on_first_stage(nm, first[1], c.n_layer)) continue;
        int64_t numel = mf_tensor_numel(params->items[i].tensor), len0 = mf_tensor_shape(params->items[i].tensor)[0];
        scheme nz = s;
        nz.zero = 0;
        int64_t e = param_elems(nm, numel, len0, &nz);
        P_rank += param_elems(nm, numel, len0, &s);
        q.all += e;
        if (e == numel && s.tp > 1) q.rep += e;
        bool kept_w = !strstr(nm, ".bias") && !strstr(nm, "wpe");   /* Linear and LayerNorm weights, the head */
        int where = !strstr(nm, ".h.") ? 2 : strstr(nm, "ln_2") || strstr(nm, "mlp") ? 1 : 0;
        q.half[where] += e;
        if (kept_w) q.saved[where] += e;
        if (strstr(nm, "wte")) q.wte = e;
    }
    mf_adam_opts ao = mf_adamw_defaults();
    ao.lr = 1e-4;
    mf_optim *opt = mf_adamw_create(params, &ao);
    if (!opt) die("optimizer");
    int64_t *v = malloc((size_t)B * c.seq_len * sizeof *v);
    uint64_t r = 7;
    for (int64_t i = 0; i < (int64_t)B * c.seq_len; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int64_t)((r >> 33) % (uint64_t)c.vocab_size);
    }
    mf_tensor *x = mf_from_data(MF_I64, 2, (const int64_t[]){B, c.seq_len}, v), *y = mf_clone(x);
    free(v);
    mf_tensor *mx[MF_MAX_STAGES * 2], *my[MF_MAX_STAGES * 2];
    for (int i = 0; pipe && i < M; i++) {   /* micro-batch i: rows i B/M .. on the first stage, targets on the last */
        mf_tensor *xi = mf_narrow(x, 0, (int64_t)i * (B / M), B / M), *yi = mf_narrow(y, 0, (int64_t)i * (B / M), B / M);
        mf_tensor *cx = xi ? mf_contiguous(xi) : NULL, *cy = yi ? mf_contiguous(yi) : NULL;
        mx[i] = cx ? mf_global_from_full(cx, stage[0], "S(0),B") : NULL;
        my[i] = cy ? mf_global_from_full(cy, stage[s.pp - 1], "S(0),B") : NULL;
        if (!mx[i] || !my[i]) die("micro-batches");
        mf_tensor *tmp[] = {xi, yi, cx, cy};
        for (int k = 0; k < 4; k++) mf_tensor_destroy(tmp[k]);
    }
    if (p && !pipe) {
        mf_tensor *gx = mf_global_from_full(x, p, "S(0),B"), *gy = mf_global_from_full(y, p, "S(0),B");
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
        x = gx;
        y = gy;
        if (!x || !y) die("batch");
    }
    int64_t kept = 0, grads = 0, peak = 0, comm = 0;
    double secs = 0;
    for (int it = 0; it < 2 + steps; it++) {
        bool measure = it == 1;
        if (mf_optim_zero_grad(opt) != MF_OK) die("zero_grad");
        if (measure) {
            mf_memory_reset_peak();
            mf_comm_tally_reset();
        }
        double t0 = mf_time();
        mf_tensor *loss = NULL;
        double pl;
        if (pipe) {
            if (mf_pipeline_train_step(pipe, mx, my, mf_gpt_pipeline_loss, m, &pl) != MF_OK ||
                mf_optim_sync_grads(opt) != MF_OK)
                die("pipeline step");
        } else {
            if (!(loss = mf_gpt_loss(m, x, y))) die("forward");
            if (measure) kept = mf_autograd_saved_bytes(loss);
            if (mf_backward(loss) != MF_OK || mf_optim_sync_grads(opt) != MF_OK) die("backward");
        }
        if (measure) grads = list_bytes(params, true);
        if (mf_optim_step(opt) != MF_OK) die("step");
        mf_tensor_destroy(loss);
        if (it >= 2) secs += mf_time() - t0;
        if (it == 1) mf_module_use_stats(NULL, NULL, true);   /* the timed steps' gathers */
        if (measure) measured(&peak, &comm);
    }
    mf_tensor_list *state = mf_optim_state(opt);
    int64_t pbytes = list_bytes(params, false), sbytes = list_bytes(state, false);
    const int64_t N = (int64_t)(B / s.dp) * c.seq_len;
    /* ZeRO-2 keeps the gathered weights of what is not recomputed */
    int64_t kept_w = q.saved[2] + (s.rc == MF_RECOMPUTE_NONE ? q.saved[0] : 0) + (s.rc != MF_RECOMPUTE_BLOCK ? q.saved[1] : 0);
    int64_t t_kept = theory_kept(&c, N, &s) + (s.zero == 2 ? 4 * kept_w : 0);
    int64_t t_comm = theory_comm(&c, N, &q, &s);
    if (pipe) {   /* rank 0 on the first stage: see the top */
        const int64_t A = 4 * N * c.n_embd;
        /* tp without sp: one allreduce more per micro-batch, as the
         * gradient arrives B and meets the P one of a column-parallel input */
        t_comm = (s.tp > 1 ? (4 * blocks0 + 1 + !s.sp) * A * (s.sp ? 2 : 1) : 0) + (s.sp ? A / s.tp : A) +
                 4 * q.wte + (s.dp > 1 ? 4 * q.all : s.tp > 1 ? 4 * q.rep : 0);
        t_kept = 0;
    }
    if (mf_rank() == 0) {
        char name[64], tpn[16];
        snprintf(tpn, sizeof tpn, "tp%d", s.tp);
        char ppn[16] = "";
        if (pipe) snprintf(ppn, sizeof ppn, "pp%d+", s.pp);
        snprintf(name, sizeof name, "%s%s%s%s%s%s", ppn, s.tp > 1 ? tpn : s.zero ? "" : "dp", s.sp ? "+sp" : "",
                 s.zero ? (s.tp > 1 ? "+zero" : "zero") : "", s.zero ? (s.zero == 2 ? "2" : "3") : "",
                 s.rc == MF_RECOMPUTE_BLOCK ? "+rc-block" : s.rc == MF_RECOMPUTE_ATTN ? "+rc-attn" : "");
        if (header) {
            printf("GPT L=%d C=%d H=%d T=%d V=%d, batch %d; MiB per rank (rank 0): measured / theory\n", c.n_layer,
                   c.n_embd, c.n_head, c.seq_len, c.vocab_size, B);
            printf("%-16s %5s %15s %15s %15s %15s %9s %17s %10s %7s\n", "scheme", "ranks", "params", "grads", "adam",
                   "kept", "peak", "comm/step", "tokens/s", "hidden");
        }
        const double MiB = 1048576.0;
        double gs = 0, ws = 0;
        mf_module_use_stats(&gs, &ws, false);
        char hid[16] = "-";
        if (s.zero == 3 && gs > 0) snprintf(hid, sizeof hid, "%.0f%%", ws < gs ? 100 * (1 - ws / gs) : 0.0);
        char kp[32] = "      -/-      ";
        if (!pipe) snprintf(kp, sizeof kp, "%7.1f/%-7.1f", kept / MiB, t_kept / MiB);
        printf("%-16s %5d %7.1f/%-7.1f %7.1f/%-7.1f %7.1f/%-7.1f %15s %9.1f %8.2f/%-8.2f %10.0f %7s\n", name, n,
               pbytes / MiB, 4 * P_rank / MiB, grads / MiB, 4 * P_rank / MiB, sbytes / MiB, 8 * P_rank / MiB, kp,
               peak / MiB, comm / MiB, t_comm / MiB, (double)steps * B * c.seq_len / secs, hid);
        fflush(stdout);
    }
    mf_tensor_list_destroy(state);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_placement_destroy(p);
    for (int i = 0; pipe && i < M; i++) {
        mf_tensor_destroy(mx[i]);
        mf_tensor_destroy(my[i]);
    }
    mf_pipeline_destroy(pipe);
    for (int i = 0; i < s.pp; i++) mf_placement_destroy(stage[i]);
    mf_module_destroy(m);
    mf_finalize();
    return 0;
}
