/*
 * apps/train_opts.c - parsing and checking mpiflow-train's flags.
 * Every message names the flag and the value at fault.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "apps/train_opts.h"
#include "mpiflow.h"

void train_opts_usage(FILE *f)
{
    fputs(
        "usage: mpiexec -n N mpiflow-train [options]\n"
        "\n"
        "Trains a model on Fashion-MNIST (or synthetic data) and reports the test\n"
        "accuracy. Every rank runs this same program.\n"
        "\n"
        "model and data:\n"
        "  --model mlp|lenet|vit|gpt  network (default mlp; vit: a small vision transformer)\n"
        "  --dataset fashion-mnist|synthetic|text:PATH|tokens:GLOB\n"
        "                             (default fashion-mnist; for gpt text:/usr/share/games/fortunes)\n"
        "      text:PATH              any text file, or a directory's files, read as bytes\n"
        "                             (vocabulary 256); the last tenth is the validation split\n"
        "      tokens:GLOB            llm.c token shards or nanoGPT uint16 .bin files; files with\n"
        "                             'val' in the name are the validation split\n"
        "  --data-dir DIR             IDX files (default /usr/share/datasets/fashion-mnist)\n"
        "  --synthetic-size N[,M]     synthetic train (and test) samples (default 10000,2000)\n"
        "GPT (doc/gpt.md; defaults: adamw, weight decay 0.1 on matrices, cosine schedule\n"
        "with 5% warmup to lr/10, --clip-grad 1, batch 16):\n"
        "  --preset char|10m|gpt2|gpt2-medium|gpt2-large|gpt2-xl   sizes (default char)\n"
        "  --n-layer L --n-head H --n-embd C --seq-len T --vocab-size V --dropout P\n"
        "                             override the preset (vocabulary: 256 for text, else 50257)\n"
        "  --val-every K              validation loss every K steps (default: at the end)\n"
        "  --val-batches N            batches of the validation split per evaluation (default 20)\n"
        "  --no-shuffle               read windows in order (as llm.c's and nanoGPT's evaluation)\n"
        "  --tensor-parallel N        gpt and vit: Megatron-LM's tensor parallelism over groups of N\n"
        "                             consecutive ranks (heads, MLP, a GPT's vocabulary split), data\n"
        "                             parallel across them: a mesh (ranks/N) x N (doc/parallelism.md)\n"
        "  --sequence-parallel        with --tensor-parallel: LayerNorms and residuals split over\n"
        "                             the sequence (a ViT's patches) between the tensor-parallel regions\n"
        "  --recompute none|block|attn   activation recompute: keep only each block's input (block)\n"
        "                             or skip the attention half's activations (attn), and run\n"
        "                             that forward again in backward (default none; by name:\n"
        "                             'transformer.h.*', 'transformer.h.*.attn'); mlp, lenet, vit:\n"
        "                             --recompute PATTERN, the modules by name (conv2, 'block*')\n"
        "length:\n"
        "  --epochs N                 passes over the training set (default 1)\n"
        "  --steps N                  optimizer steps instead of epochs\n"
        "  --batch-size B             samples per step (default 64)\n"
        "optimizer:\n"
        "  --optimizer sgd|momentum|rmsprop|adam|adamw   (default sgd)\n"
        "  --lr X                     learning rate (default 0.01; 0.001 for adam/adamw)\n"
        "  --momentum M               SGD/RMSprop momentum (default 0; 0.9 for 'momentum')\n"
        "  --weight-decay W           (default 0; 0.01 for adamw)\n"
        "  --clip-grad NORM           clip gradients to this global L2 norm\n"
        "  --lr-schedule constant|step|cosine|piecewise   (default constant)\n"
        "  --lr-step-size N --lr-gamma G      step: lr * G every N steps (default 1000, 0.1)\n"
        "  --warmup-steps N --lr-min X        cosine: linear warmup, then decay to X\n"
        "  --lr-boundaries S1,S2,.. --lr-values V0,V1,V2,..   piecewise constant\n"
        "parallel (each mode is only SBP choices; see doc/parallelism.md):\n"
        "  --parallel none|dp|mp|hybrid|2d   (default: none on 1 rank, dp on more)\n"
        "      dp      parameters B, data S(0): data parallel\n"
        "      mp      every Linear weight and bias S(0), data B: model parallel\n"
        "      hybrid  hidden layers data parallel, the output layer S(0)\n"
        "      2d      mesh dp x tp: Linear weights (B,S(0)), data (S(0),B)\n"
        "      conv layers stay data parallel (weights B, data S(0)) in every mode\n"
        "  --mesh RxC                 2d mesh: R data-parallel x C tensor-parallel ranks\n"
        "                             (default: 2 x N/2 for an even N, else N x 1)\n"
        "  --dump-params FILE         after training, write every parameter (gathered) as text\n"
        "  --bucket-mb MB             gradient buckets of MB MiB: each bucket's allreduce starts\n"
        "                             during backward as soon as its gradients are ready\n"
        "                             (default 25; 0: one sync per parameter after backward)\n"
        "  --plan FILE.json           the parallel layout as a plan (doc/plans.md): mesh, parameter\n"
        "                             rules, ZeRO, pipeline; instead of the flags above and below\n"
        "  --print-plan               print the plan the flags make, as JSON for --plan (stdout,\n"
        "                             rank 0), and each parameter's SBP with its rule (stderr); exit\n"
        "  --zero 0|1|2|3             1: ZeRO-1, optimizer state split S(0) over the data-parallel\n"
        "                             ranks, gradients reduce-scattered, parameters allgathered;\n"
        "                             2 and 3 split every parameter S over the data-parallel\n"
        "                             ranks and gather it for each module's forward (3 frees it\n"
        "                             after and gathers it again for backward, like FSDP)\n"
        "pipeline (see doc/pipeline.md):\n"
        "  --pipeline-stages P        cut the model into P stages balanced by parameter count;\n"
        "                             the ranks form P equal groups, in order, and --parallel\n"
        "                             applies inside each stage (2x2x2: 8 ranks, --parallel 2d\n"
        "                             --mesh 2x2 --pipeline-stages 2)\n"
        "                             gpt: its layers are the embeddings (0), each block\n"
        "                             (1..L) and the final LayerNorm with the tied head (L+1);\n"
        "                             --tensor-parallel applies inside each stage\n"
        "  --pipeline-cuts C1,C2,..   cut before these layers instead (e.g. 6 for lenet)\n"
        "  --micro-batches M          micro-batches per step, gradients accumulated (M must\n"
        "                             divide --batch-size; default: the largest divisor <= 4P)\n"
        "  --schedule gpipe|1f1b      pipeline schedule (default 1f1b: at most P micro-batches'\n"
        "                             activations per stage, GPipe keeps all M)\n"
        "checkpoints (parallel HDF5, see doc/checkpoints.md):\n"
        "  --checkpoint PATH          save model, optimizer and data position to PATH (written\n"
        "                             as PATH.tmp, renamed when complete) at the end of training\n"
        "  --save-every N             ... and every N steps\n"
        "  --keep-last K              keep the last K checkpoints: PATH, PATH.1, ... (default 1)\n"
        "  --fletcher32               also protect each piece with HDF5's Fletcher32 filter\n"
        "                             (checked by every HDF5 reader; slower to write)\n"
        "  --resume PATH              continue from a checkpoint: its step, data cursor and\n"
        "                             optimizer state; any rank count and --parallel mode\n"
        "  SIGUSR1, SIGTERM, SIGINT   (sbatch --signal=B:USR1@T, preemption, scancel, Ctrl-C) every\n"
        "                             rank stops after the current step, writes --checkpoint and\n"
        "                             exits 0 (slurm/*.sbatch requeue the job); during start-up, it\n"
        "                             saves the state it would start from. Signals within 5 s of\n"
        "                             the first are the same request; one 5 s or more later stops\n"
        "                             at once, exit 128+signal, no checkpoint. Without --checkpoint\n"
        "                             a stop exits 128+signal too: 0 means a checkpoint was written\n"
        "device (doc/cuda.md):\n"
        "  --device cpu|cuda          where every rank computes (default cpu); cuda: one GPU per\n"
        "                             rank, the local rank's among those visible (CUDA_VISIBLE_DEVICES,\n"
        "                             srun --gpus-per-task), for every model and --parallel mode\n"
        "  --precision fp32|bf16      bf16: autocast, matmul/linear/conv operands rounded to bfloat16\n"
        "                             with fp32 accumulation; weights, optimizer state and the other\n"
        "                             ops stay fp32 (default fp32); on cpu it needs the oneDNN\n"
        "                             engine and AVX512_BF16 or AMX, and is refused otherwise\n"
        "run:\n"
        "  --seed S                   seed for initialisation, dropout and shuffling (default 0)\n"
        "  --deterministic[=V]        the same bits on any number of data-parallel ranks (and\n"
        "                             pipeline stages, for mlp, lenet and vit; at a fixed\n"
        "                             --tensor-parallel for gpt and vit): the batch is cut into V shards\n"
        "                             computed one by one and summed in shard order (default V:\n"
        "                             the largest divisor of --batch-size up to 12; a multiple\n"
        "                             of the data-parallel ranks per stage; also with --zero 2|3).\n"
        "                             Refused with --parallel mp|hybrid|2d and gpt pipelines.\n"
        "                             Slower; see doc/design.md\n"
        "  --threads T                compute threads per rank (default cores / ranks per node)\n"
        "  --log-every K              progress every K steps (default 100)\n"
        "  --progress auto|bar|lines  progress display (default auto: a bar on a terminal)\n"
        "  --metrics FILE.csv         write step,epoch,loss,lr,samples_per_sec,elapsed_s\n"
        "  --eval-batch-size B        test batch size (default 1000)\n"
        "  --no-eval                  skip the test-set evaluation\n"
        "  --profile                  print the time spent per kernel class (GEMM, conv, ...)\n"
        "  --prefetch auto|on|off     load the next batch in a helper thread (default auto:\n"
        "                             on when --threads leaves a core free)\n"
        "  --trace FILE.json          write a Chrome/Perfetto trace: per rank, forward, backward,\n"
        "                             each gradient bucket's allreduce and the optimizer step;\n"
        "                             prints how much communication backward hid\n"
        "  --help, --version\n"
        "\n"
        "environment (doc/collectives.md):\n"
        "  MF_ALLREDUCE_ALGO=mpi|ring|rhd|hier, MF_REDUCE_SCATTER_ALGO=, MF_ALLGATHER_ALGO=\n"
        "                             force a collective algorithm (default: by size and topology)\n"
        "  MF_DETERMINISTIC=1         --deterministic, and every allreduce and reduce-scatter\n"
        "                             sums in rank order\n"
        "  MF_RANKS_PER_NODE=k        treat every k ranks as one node (test hierarchical paths)\n"
        "  MF_BIND=none               do not bind ranks to cores\n"
        "  MF_TIMEOUT=secs            report a wait on other ranks (collective, gradient bucket,\n"
        "                             pipeline transfer, checkpoint I/O) not over after secs,\n"
        "                             naming it and the missing ranks, and abort (doc/slurm.md)\n"
        "  MF_CPU_ENGINE=onednn|openblas  engine of the CPU matrix products and convolutions\n"
        "                             (default onednn where built in; doc/cpu.md)\n"
        "  MF_CKPT_SPACE_CHECK=0      do not check the free space before a save (doc/checkpoints.md)\n"
        "\n"
        "The last line printed starts with 'final' and holds test_accuracy= and test_loss=.\n"
        "Exit status: 0 on success (also after a stop on SIGTERM/SIGUSR1), 2 on bad input (flags,\n"
        "data files, a checkpoint that fails its checks or does not fit), found before the first\n"
        "step; 1 on other failures (a disk that fills during a save), 3 from the MF_TIMEOUT watchdog.\n",
        f);
}

static int fail(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return 2;
}

static bool parse_i64(const char *s, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double min, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min) return false;
    *out = v;
    return true;
}

static bool one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

/* "a,b,c" into up to max numbers; returns the count or -1. */
static int parse_list(const char *s, int max, double *out)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        if (n == max) return -1;
        char *end;
        errno = 0;
        out[n] = strtod(p, &end);
        if (errno || end == p || (*end && *end != ',') || !isfinite(out[n])) return -1;
        n++;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) return -1;
    }
    return n;
}

enum {
    OPT_MODEL = 256, OPT_DATASET, OPT_DATA_DIR, OPT_SYNTH, OPT_EPOCHS, OPT_STEPS, OPT_BATCH, OPT_OPTIM, OPT_LR,
    OPT_MOMENTUM, OPT_WD, OPT_CLIP, OPT_SCHED, OPT_STEP_SIZE, OPT_GAMMA, OPT_WARMUP, OPT_LR_MIN, OPT_BOUNDS,
    OPT_VALUES, OPT_SEED, OPT_THREADS, OPT_LOG_EVERY, OPT_PROGRESS, OPT_METRICS, OPT_EVAL_BATCH, OPT_NO_EVAL,
    OPT_PROFILE, OPT_PREFETCH, OPT_PARALLEL, OPT_MESH, OPT_DUMP, OPT_CKPT, OPT_SAVE_EVERY, OPT_RESUME, OPT_KEEP, OPT_FLETCHER,
    OPT_BUCKET, OPT_ZERO, OPT_TRACE, OPT_PP_STAGES, OPT_PP_CUTS, OPT_MICRO, OPT_PP_SCHED, OPT_DEVICE, OPT_PRECISION,
    OPT_DETERMINISTIC, OPT_PRESET, OPT_N_LAYER, OPT_N_HEAD, OPT_N_EMBD, OPT_SEQ_LEN, OPT_VOCAB, OPT_DROPOUT,
    OPT_VAL_EVERY, OPT_VAL_BATCHES, OPT_NO_SHUFFLE, OPT_TP, OPT_SP, OPT_RECOMPUTE, OPT_PLAN, OPT_PRINT_PLAN, OPT_HELP, OPT_VERSION
};

static const struct option longopts[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"data-dir", required_argument, 0, OPT_DATA_DIR},
    {"synthetic-size", required_argument, 0, OPT_SYNTH},
    {"epochs", required_argument, 0, OPT_EPOCHS},
    {"steps", required_argument, 0, OPT_STEPS},
    {"batch-size", required_argument, 0, OPT_BATCH},
    {"optimizer", required_argument, 0, OPT_OPTIM},
    {"lr", required_argument, 0, OPT_LR},
    {"momentum", required_argument, 0, OPT_MOMENTUM},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"clip-grad", required_argument, 0, OPT_CLIP},
    {"lr-schedule", required_argument, 0, OPT_SCHED},
    {"lr-step-size", required_argument, 0, OPT_STEP_SIZE},
    {"lr-gamma", required_argument, 0, OPT_GAMMA},
    {"warmup-steps", required_argument, 0, OPT_WARMUP},
    {"lr-min", required_argument, 0, OPT_LR_MIN},
    {"lr-boundaries", required_argument, 0, OPT_BOUNDS},
    {"lr-values", required_argument, 0, OPT_VALUES},
    {"seed", required_argument, 0, OPT_SEED},
    {"threads", required_argument, 0, OPT_THREADS},
    {"log-every", required_argument, 0, OPT_LOG_EVERY},
    {"progress", required_argument, 0, OPT_PROGRESS},
    {"metrics", required_argument, 0, OPT_METRICS},
    {"eval-batch-size", required_argument, 0, OPT_EVAL_BATCH},
    {"no-eval", no_argument, 0, OPT_NO_EVAL},
    {"profile", no_argument, 0, OPT_PROFILE},
    {"prefetch", required_argument, 0, OPT_PREFETCH},
    {"parallel", required_argument, 0, OPT_PARALLEL},
    {"mesh", required_argument, 0, OPT_MESH},
    {"dump-params", required_argument, 0, OPT_DUMP},
    {"checkpoint", required_argument, 0, OPT_CKPT},
    {"save-every", required_argument, 0, OPT_SAVE_EVERY},
    {"resume", required_argument, 0, OPT_RESUME},
    {"keep-last", required_argument, 0, OPT_KEEP},
    {"fletcher32", no_argument, 0, OPT_FLETCHER},
    {"bucket-mb", required_argument, 0, OPT_BUCKET},
    {"zero", required_argument, 0, OPT_ZERO},
    {"trace", required_argument, 0, OPT_TRACE},
    {"pipeline-stages", required_argument, 0, OPT_PP_STAGES},
    {"pipeline-cuts", required_argument, 0, OPT_PP_CUTS},
    {"micro-batches", required_argument, 0, OPT_MICRO},
    {"schedule", required_argument, 0, OPT_PP_SCHED},
    {"device", required_argument, 0, OPT_DEVICE},
    {"precision", required_argument, 0, OPT_PRECISION},
    {"deterministic", optional_argument, 0, OPT_DETERMINISTIC},
    {"preset", required_argument, 0, OPT_PRESET},
    {"n-layer", required_argument, 0, OPT_N_LAYER},
    {"n-head", required_argument, 0, OPT_N_HEAD},
    {"n-embd", required_argument, 0, OPT_N_EMBD},
    {"seq-len", required_argument, 0, OPT_SEQ_LEN},
    {"vocab-size", required_argument, 0, OPT_VOCAB},
    {"dropout", required_argument, 0, OPT_DROPOUT},
    {"val-every", required_argument, 0, OPT_VAL_EVERY},
    {"val-batches", required_argument, 0, OPT_VAL_BATCHES},
    {"no-shuffle", no_argument, 0, OPT_NO_SHUFFLE},
    {"tensor-parallel", required_argument, 0, OPT_TP},
    {"sequence-parallel", no_argument, 0, OPT_SP},
    {"recompute", required_argument, 0, OPT_RECOMPUTE},
    {"plan", required_argument, 0, OPT_PLAN},
    {"print-plan", no_argument, 0, OPT_PRINT_PLAN},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

int train_opts_parse(int argc, char **argv, train_opts *o, char *err, size_t len)
{
    static const char *const models[] = {"mlp", "lenet", "vit", "gpt", NULL};
    static const char *const datasets[] = {"fashion-mnist", "synthetic", NULL};
    static const char *const optims[] = {"sgd", "momentum", "rmsprop", "adam", "adamw", NULL};
    static const char *const scheds[] = {"constant", "step", "cosine", "piecewise", NULL};
    static const char *const parallels[] = {"none", "dp", "mp", "hybrid", "2d", NULL};
    memset(o, 0, sizeof *o);
    o->model = "mlp";
    o->dataset = "fashion-mnist";
    o->optimizer = "sgd";
    o->schedule = "constant";
    o->batch_size = 64;
    o->eval_batch_size = 1000;
    o->log_every = 100;
    o->synthetic_train = 10000;
    o->synthetic_test = 2000;
    o->step_size = 1000;
    o->gamma = 0.1;
    o->lr = o->momentum = o->weight_decay = -1;   /* unset */
    o->bucket_mb = 25;
    o->progress = -1;
    o->eval = true;
    o->prefetch = -1;
    o->device = "cpu";
    o->precision = "fp32";
    o->dropout = -1;
    o->val_batches = 20;
    o->shuffle = true;
    bool have_values = false, given_data = false, given_optim = false, given_sched = false, given_batch = false,
         given_warmup = false, given_lr_min = false;
    int nvalues = 0;
    double bounds[TRAIN_MAX_PIECES];
    int nbounds = -1;
    int64_t seed = 0;
    int64_t threads = 0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case OPT_MODEL:
            if (!one_of(v, models)) return fail(err, len, "--model: '%s' is not one of mlp, lenet, vit, gpt", v);
            o->model = v;
            break;
        case OPT_DATASET:
            if (!one_of(v, datasets) && strncmp(v, "text:", 5) && strncmp(v, "tokens:", 7))
                return fail(err, len, "--dataset: '%s' is not one of fashion-mnist, synthetic, text:PATH, tokens:GLOB", v);
            if ((!strncmp(v, "text:", 5) && !v[5]) || (!strncmp(v, "tokens:", 7) && !v[7]))
                return fail(err, len, "--dataset: '%s' names no path", v);
            o->dataset = v;
            given_data = true;
            break;
        case OPT_DATA_DIR: o->data_dir = v; break;
        case OPT_SYNTH: {
            double n[2];
            int k = parse_list(v, 2, n);
            if (k < 1 || n[0] < 1 || n[0] != floor(n[0]) || (k == 2 && (n[1] < 1 || n[1] != floor(n[1]))))
                return fail(err, len, "--synthetic-size: '%s' is not N or N,M with positive integers", v);
            o->synthetic_train = (int64_t)n[0];
            if (k == 2) o->synthetic_test = (int64_t)n[1];
            break;
        }
        case OPT_EPOCHS:
            if (!parse_i64(v, 1, &o->epochs)) return fail(err, len, "--epochs: '%s' is not a positive integer", v);
            break;
        case OPT_STEPS:
            if (!parse_i64(v, 1, &o->steps)) return fail(err, len, "--steps: '%s' is not a positive integer", v);
            break;
        case OPT_BATCH:
            if (!parse_i64(v, 1, &o->batch_size)) return fail(err, len, "--batch-size: '%s' is not a positive integer", v);
            given_batch = true;
            break;
        case OPT_EVAL_BATCH:
            if (!parse_i64(v, 1, &o->eval_batch_size))
                return fail(err, len, "--eval-batch-size: '%s' is not a positive integer", v);
            break;
        case OPT_OPTIM:
            if (!one_of(v, optims))
                return fail(err, len, "--optimizer: '%s' is not one of sgd, momentum, rmsprop, adam, adamw", v);
            o->optimizer = v;
            given_optim = true;
            break;
        case OPT_LR:
            if (!parse_f64(v, 0, &o->lr) || o->lr == 0) return fail(err, len, "--lr: '%s' is not a positive number", v);
            break;
        case OPT_MOMENTUM:
            if (!parse_f64(v, 0, &o->momentum) || o->momentum >= 1)
                return fail(err, len, "--momentum: '%s' is not a number in [0, 1)", v);
            break;
        case OPT_WD:
            if (!parse_f64(v, 0, &o->weight_decay)) return fail(err, len, "--weight-decay: '%s' is not a number >= 0", v);
            break;
        case OPT_CLIP:
            if (!parse_f64(v, 0, &o->clip_grad) || o->clip_grad == 0)
                return fail(err, len, "--clip-grad: '%s' is not a positive number", v);
            break;
        case OPT_SCHED:
            if (!one_of(v, scheds))
                return fail(err, len, "--lr-schedule: '%s' is not one of constant, step, cosine, piecewise", v);
            o->schedule = v;
            given_sched = true;
            break;
        case OPT_STEP_SIZE:
            if (!parse_i64(v, 1, &o->step_size)) return fail(err, len, "--lr-step-size: '%s' is not a positive integer", v);
            break;
        case OPT_GAMMA:
            if (!parse_f64(v, 0, &o->gamma)) return fail(err, len, "--lr-gamma: '%s' is not a number >= 0", v);
            break;
        case OPT_WARMUP:
            if (!parse_i64(v, 0, &o->warmup)) return fail(err, len, "--warmup-steps: '%s' is not an integer >= 0", v);
            given_warmup = true;
            break;
        case OPT_LR_MIN:
            if (!parse_f64(v, 0, &o->lr_min)) return fail(err, len, "--lr-min: '%s' is not a number >= 0", v);
            given_lr_min = true;
            break;
        case OPT_BOUNDS:
            nbounds = parse_list(v, TRAIN_MAX_PIECES, bounds);
            if (nbounds < 1) return fail(err, len, "--lr-boundaries: '%s' is not a list of up to %d steps", v, TRAIN_MAX_PIECES);
            for (int i = 0; i < nbounds; i++) {
                if (bounds[i] < 0 || bounds[i] != floor(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
                    return fail(err, len, "--lr-boundaries: '%s' must be increasing integer steps", v);
                o->boundaries[i] = (int64_t)bounds[i];
            }
            break;
        case OPT_VALUES:
            nvalues = parse_list(v, TRAIN_MAX_PIECES + 1, o->values);
            if (nvalues < 1) return fail(err, len, "--lr-values: '%s' is not a list of learning rates", v);
            have_values = true;
            break;
        case OPT_SEED:
            if (!parse_i64(v, 0, &seed)) return fail(err, len, "--seed: '%s' is not an integer >= 0", v);
            o->seed = (uint64_t)seed;
            break;
        case OPT_THREADS:
            if (!parse_i64(v, 0, &threads) || threads > 4096)
                return fail(err, len, "--threads: '%s' is not an integer in 0..4096", v);
            o->threads = (int)threads;
            break;
        case OPT_LOG_EVERY:
            if (!parse_i64(v, 1, &o->log_every)) return fail(err, len, "--log-every: '%s' is not a positive integer", v);
            break;
        case OPT_PROGRESS:
            if (!strcmp(v, "auto")) o->progress = -1;
            else if (!strcmp(v, "bar")) o->progress = 1;
            else if (!strcmp(v, "lines")) o->progress = 0;
            else return fail(err, len, "--progress: '%s' is not one of auto, bar, lines", v);
            break;
        case OPT_METRICS: o->metrics = v; break;
        case OPT_NO_EVAL: o->eval = false; break;
        case OPT_FLETCHER: o->fletcher32 = true; break;
        case OPT_BUCKET:
            if (!parse_f64(v, 0, &o->bucket_mb) || o->bucket_mb > 1048576)
                return fail(err, len, "--bucket-mb: '%s' is not a size in MiB from 0 to 1048576", v);
            break;
        case OPT_ZERO:
            if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2") && strcmp(v, "3"))
                return fail(err, len, "--zero: '%s' is not 0, 1, 2 or 3", v);
            o->zero = v[0] - '0';
            break;
        case OPT_TRACE: o->trace = v; break;
        case OPT_PP_STAGES: {
            int64_t n;
            if (!parse_i64(v, 1, &n) || n > 64) return fail(err, len, "--pipeline-stages: '%s' is not a count from 1 to 64", v);
            o->pipeline_stages = (int)n;
            break;
        }
        case OPT_PP_CUTS: o->pipeline_cuts = v; break;
        case OPT_MICRO: {
            int64_t n;
            if (!parse_i64(v, 1, &n) || n > 1024) return fail(err, len, "--micro-batches: '%s' is not a count from 1 to 1024", v);
            o->micro_batches = (int)n;
            break;
        }
        case OPT_DEVICE:
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) return fail(err, len, "--device: '%s' is not cpu or cuda", v);
            o->device = v;
            break;
        case OPT_PRECISION:
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) return fail(err, len, "--precision: '%s' is not fp32 or bf16", v);
            o->precision = v;
            break;
        case OPT_PP_SCHED:
            if (strcmp(v, "gpipe") && strcmp(v, "1f1b")) return fail(err, len, "--schedule: '%s' is not gpipe or 1f1b", v);
            o->pipeline_schedule = v;
            break;
        case OPT_PROFILE: o->profile = true; break;
        case OPT_PRESET: {
            mf_gpt_config gc;
            if (mf_gpt_preset(v, &gc) != MF_OK) return fail(err, len, "--preset: %s", mf_last_error());
            o->preset = v;
            break;
        }
        case OPT_N_LAYER: case OPT_N_HEAD: case OPT_N_EMBD: case OPT_SEQ_LEN: case OPT_VOCAB: {
            int64_t n;
            int64_t hi = c == OPT_VOCAB ? 65536 : c == OPT_SEQ_LEN ? 1 << 20 : 1 << 16;
            if (!parse_i64(v, c == OPT_VOCAB ? 2 : 1, &n) || n > hi)
                return fail(err, len, "--%s: '%s' is not an integer from %d to %lld", longopts[c - OPT_MODEL].name, v,
                            c == OPT_VOCAB ? 2 : 1, (long long)hi);
            int *dst = c == OPT_N_LAYER ? &o->n_layer : c == OPT_N_HEAD ? &o->n_head : c == OPT_N_EMBD ? &o->n_embd
                       : c == OPT_SEQ_LEN ? &o->seq_len : &o->vocab_size;
            *dst = (int)n;
            break;
        }
        case OPT_DROPOUT:
            if (!parse_f64(v, 0, &o->dropout) || o->dropout >= 1) return fail(err, len, "--dropout: '%s' is not in [0, 1)", v);
            break;
        case OPT_VAL_EVERY:
            if (!parse_i64(v, 1, &o->val_every)) return fail(err, len, "--val-every: '%s' is not a positive integer", v);
            break;
        case OPT_VAL_BATCHES:
            if (!parse_i64(v, 1, &o->val_batches)) return fail(err, len, "--val-batches: '%s' is not a positive integer", v);
            break;
        case OPT_NO_SHUFFLE: o->shuffle = false; break;
        case OPT_TP: {
            int64_t n;
            if (!parse_i64(v, 1, &n) || n > 4096) return fail(err, len, "--tensor-parallel: '%s' is not a degree from 1 to 4096", v);
            o->tensor_parallel = (int)n;
            break;
        }
        case OPT_SP: o->sequence_parallel = true; break;
        case OPT_PLAN: o->plan = v; break;
        case OPT_PRINT_PLAN: o->print_plan = true; break;
        case OPT_RECOMPUTE:
            if (!*v) return fail(err, len, "--recompute: an empty module pattern");
            o->recompute = v;
            break;
        case OPT_DETERMINISTIC: {
            int64_t n = -1;
            if (v && (!parse_i64(v, 1, &n) || n > 4096))
                return fail(err, len, "--deterministic=%s: not a shard count from 1 to 4096", v);
            o->shards = v ? (int)n : -1;
            break;
        }
        case OPT_PARALLEL:
            if (!one_of(v, parallels)) return fail(err, len, "--parallel: '%s' is not one of none, dp, mp, hybrid, 2d", v);
            o->parallel = v;
            break;
        case OPT_MESH: {
            char *end;
            long r = strtol(v, &end, 10), c = *end == 'x' ? strtol(end + 1, &end, 10) : 0;
            if (r < 1 || c < 1 || *end) return fail(err, len, "--mesh: '%s' is not RxC (e.g. 2x2)", v);
            o->mesh_r = (int)r;
            o->mesh_c = (int)c;
            break;
        }
        case OPT_DUMP: o->dump_params = v; break;
        case OPT_CKPT: o->checkpoint = v; break;
        case OPT_RESUME: o->resume = v; break;
        case OPT_KEEP:
            if (!parse_i64(v, 1, &o->keep_last) || o->keep_last > 1000)
                return fail(err, len, "--keep-last: '%s' is not a count from 1 to 1000", v);
            break;
        case OPT_SAVE_EVERY:
            if (!parse_i64(v, 1, &o->save_every)) return fail(err, len, "--save-every: '%s' is not a step count >= 1", v);
            break;
        case OPT_PREFETCH:
            if (!strcmp(v, "auto")) o->prefetch = -1;
            else if (!strcmp(v, "on")) o->prefetch = 1;
            else if (!strcmp(v, "off")) o->prefetch = 0;
            else return fail(err, len, "--prefetch: '%s' is not one of auto, on, off", v);
            break;
        case 'h':
        case OPT_HELP:
            train_opts_usage(stdout);
            return 1;
        case OPT_VERSION:
            printf("mpiflow-train %s\n", mf_version());
            return 1;
        case ':':
            return fail(err, len, "%s needs a value", argv[optind - 1]);
        default:
            if (optopt >= OPT_MODEL && optopt <= OPT_VERSION)
                return fail(err, len, "--%s needs a value", longopts[optopt - OPT_MODEL].name);
            return fail(err, len, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
    }
    if (optind < argc) return fail(err, len, "unexpected argument '%s' (see --help)", argv[optind]);
    if (o->save_every && !o->checkpoint) return fail(err, len, "--save-every: needs --checkpoint PATH");
    if (o->keep_last && !o->checkpoint) return fail(err, len, "--keep-last: needs --checkpoint PATH");
    if (o->fletcher32 && !o->checkpoint) return fail(err, len, "--fletcher32: needs --checkpoint PATH");
    if (!o->keep_last) o->keep_last = 1;
    if (o->plan && (o->parallel || o->mesh_r || o->tensor_parallel || o->sequence_parallel || o->zero ||
                    o->pipeline_stages || o->pipeline_cuts || o->micro_batches || o->pipeline_schedule || o->recompute))
        return fail(err, len, "--plan %s gives the parallel layout: drop --parallel, --mesh, --tensor-parallel, "
                    "--sequence-parallel, --zero, --pipeline-stages, --pipeline-cuts, --micro-batches, --schedule "
                    "and --recompute, or drop --plan (--print-plan shows the plan those flags make)", o->plan);
    if (o->mesh_r && (!o->parallel || strcmp(o->parallel, "2d")))
        return fail(err, len, "--mesh: only for --parallel 2d");
    if (o->epochs && o->steps) return fail(err, len, "--epochs and --steps: give one, not both");
    if (o->micro_batches && o->batch_size % o->micro_batches)
        return fail(err, len, "--micro-batches %d does not divide --batch-size %lld: every micro-batch must have the "
                    "same number of samples", o->micro_batches, (long long)o->batch_size);
    const char *det = getenv("MF_DETERMINISTIC");
    if (!o->shards && det && *det && strcmp(det, "0")) o->shards = -1;
    if (o->shards < 0) {   /* the default: the largest divisor of the batch up to 12 */
        o->shards = 12;
        while (o->batch_size % o->shards) o->shards--;
    }
    if (o->shards && o->batch_size % o->shards)
        return fail(err, len, "--deterministic=%d does not divide --batch-size %lld: every shard must have the same "
                    "number of samples", o->shards, (long long)o->batch_size);
    if (o->shards && o->micro_batches && o->shards % o->micro_batches)
        return fail(err, len, "--deterministic=%d: --micro-batches %d must divide the shards (each micro-batch is "
                    "run as its shards)", o->shards, o->micro_batches);
    if (o->pipeline_schedule && !o->pipeline_stages && !o->pipeline_cuts && !o->micro_batches)
        return fail(err, len, "--schedule: only with --pipeline-stages, --pipeline-cuts or --micro-batches");
    if (!o->pipeline_schedule) o->pipeline_schedule = "1f1b";
    if (!o->epochs && !o->steps) o->epochs = 1;
    bool gpt = !strcmp(o->model, "gpt");
    if (!gpt && (o->preset || o->n_layer || o->n_head || o->n_embd || o->seq_len || o->vocab_size || o->dropout >= 0 ||
                 o->val_every || !o->shuffle))
        return fail(err, len, "--preset, --n-layer, --n-head, --n-embd, --seq-len, --vocab-size, --dropout, "
                    "--val-every and --no-shuffle: only for --model gpt");
    if (o->tensor_parallel && !gpt && strcmp(o->model, "vit"))
        return fail(err, len, "--tensor-parallel %d: --model %s has no Megatron-style plan (gpt and vit have); "
                    "--parallel mp, hybrid or 2d split its Linear layers, or give a --plan", o->tensor_parallel, o->model);
    if (o->tensor_parallel && !gpt && o->parallel && strcmp(o->parallel, "dp"))
        return fail(err, len, "--tensor-parallel: --parallel %s; tensor parallelism combines with dp only", o->parallel);
    static const char *const gpt_recompute[] = {"none", "block", "attn", NULL};
    if (gpt && o->recompute && !strcmp(o->recompute, "transformer.h.*")) o->recompute = "block";   /* by name */
    if (gpt && o->recompute && !strcmp(o->recompute, "transformer.h.*.attn")) o->recompute = "attn";
    if (gpt && o->recompute && !one_of(o->recompute, gpt_recompute))
        return fail(err, len, "--recompute %s: a GPT recomputes none, block (each block, 'transformer.h.*') or attn "
                    "(each attention half, 'transformer.h.*.attn')", o->recompute);
    if ((o->pipeline_stages || o->pipeline_cuts || o->micro_batches) && o->zero >= 2)
        return fail(err, len, "--zero %d with a pipeline: ZeRO-2 and -3 split parameters over the data-parallel "
                    "ranks, but pipeline stages keep theirs whole; use --zero 1 (the optimizer state) inside "
                    "the stages", o->zero);
    if (o->sequence_parallel && o->tensor_parallel < 2)
        return fail(err, len, "--sequence-parallel: splits the sequence over the tensor-parallel ranks; give "
                    "--tensor-parallel N with N >= 2");
    if (gpt != (!strncmp(o->dataset, "text:", 5) || !strncmp(o->dataset, "tokens:", 7)) && (gpt ? given_data : true))
        return fail(err, len, gpt ? "--model gpt: --dataset %s holds images; give text:PATH or tokens:GLOB"
                                  : "--dataset %s: text and tokens are for --model gpt", o->dataset);
    if (gpt) {   /* GPT-2's recipe, as nanoGPT trains it */
        if (!given_data) o->dataset = "text:/usr/share/games/fortunes";
        if (!given_optim) o->optimizer = "adamw";
        if (!given_sched) o->schedule = "cosine";
        if (!given_batch) o->batch_size = 16;
        if (o->weight_decay < 0 && !strcmp(o->optimizer, "adamw")) o->weight_decay = 0.1;
        if (o->clip_grad == 0) o->clip_grad = 1.0;
        if (!o->preset) o->preset = "char";
        if (o->parallel && strcmp(o->parallel, "none") && strcmp(o->parallel, "dp"))
            return fail(err, len, "--model gpt: --parallel %s is not available for gpt in this release; use none or dp",
                        o->parallel);
        if (o->shards && (o->pipeline_stages > 1 || o->pipeline_cuts))
            return fail(err, len, "--deterministic with pipeline stages for gpt: the token embedding (first stage) "
                        "and the head (last stage) share a weight whose two gradients would meet outside the "
                        "shards' fixed order; run every rank as data (and tensor) parallel");
    }
    bool adam = !strcmp(o->optimizer, "adam") || !strcmp(o->optimizer, "adamw");
    if (o->lr < 0) o->lr = adam ? 1e-3 : 0.01;
    if (gpt && !given_lr_min) o->lr_min = o->lr / 10;
    if (gpt && !given_warmup) o->warmup = -1;   /* 5 % of the steps, once they are known */
    if (o->momentum < 0) o->momentum = !strcmp(o->optimizer, "momentum") ? 0.9 : 0.0;
    if (o->weight_decay < 0) o->weight_decay = !strcmp(o->optimizer, "adamw") ? 0.01 : 0.0;
    if (!strcmp(o->schedule, "piecewise")) {
        if (nbounds < 1 || !have_values || nvalues != nbounds + 1)
            return fail(err, len, "--lr-schedule piecewise: needs --lr-boundaries with n steps and --lr-values with "
                        "n+1 rates (got %d and %d)", nbounds < 0 ? 0 : nbounds, nvalues);
        o->npieces = nbounds;
    } else if (nbounds >= 0 || have_values) {
        return fail(err, len, "--lr-boundaries/--lr-values: only for --lr-schedule piecewise");
    }
    return 0;
}
