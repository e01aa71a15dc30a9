/*
 * apps/train_opts.c - parsing and checking mpiflow-train's flags.
 * Every flag is one row of a table (opts below): its name, where its
 * value goes, its range or choices and the words of its error, and its
 * lines of the usage text; the parser, --help and the range checks all
 * read that table. Every message names the flag and the value at fault.
 */
#include <errno.h>
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "apps/train_opts.h"
#include "mpiflow.h"

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

/* what a custom flag's parser may need beyond train_opts */
typedef struct parse_state {
    int nbounds, nvalues;                /* -1 / 0: not given */
    bool have_values;
} parse_state;

typedef enum {
    K_STR,      /* const char *: the value */
    K_ON,       /* bool: true */
    K_OFF,      /* bool: false */
    K_I64,      /* int64_t in [lo, hi] */
    K_INT,      /* int in [lo, hi] */
    K_F64,      /* double in [lo, hi] (or open at either end) */
    K_CHOICE,   /* const char *: one of choices */
    K_CUSTOM,   /* fn */
} opt_kind;

/* 0 or fail()'s 2; 1: stop and exit 0 (--help, --version) */
typedef int (*opt_fn)(train_opts *o, parse_state *ps, const char *v, char *err, size_t len);

typedef struct opt_def {
    const char *name;
    int has_arg;                 /* getopt_long's */
    opt_kind kind;
    size_t off;                  /* of the field in train_opts */
    double lo, hi;               /* numbers: the range (hi 0: none) */
    bool lo_open, hi_open;
    const char *const *choices;  /* K_CHOICE */
    const char *what;            /* the error: "--NAME: 'V' is not WHAT" */
    opt_fn fn;                   /* K_CUSTOM */
    const char *usage;           /* the usage lines it starts (a section's title first), or NULL */
} opt_def;

static const char *const models[] = {"mlp", "lenet", "vit", "gpt", NULL};
static const char *const optims[] = {"sgd", "momentum", "rmsprop", "adam", "adamw", NULL};
static const char *const scheds[] = {"constant", "step", "cosine", "piecewise", NULL};
static const char *const parallels[] = {"none", "dp", "mp", "hybrid", "2d", NULL};
static const char *const pipe_scheds[] = {"gpipe", "1f1b", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL};
static const char *const precisions[] = {"fp32", "bf16", NULL};

int parse_size(const char *s, int64_t *bytes)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0)) return -1;
    double unit = 1;
    if (*end) {
        char u = (char)toupper((unsigned char)*end);
        unit = u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : u == 'T' ? 1099511627776.0 : 0;
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'B' || *end == 'b') end++;
    }
    if (unit == 0 || *end || v * unit > 9e18) return -1;
    *bytes = (int64_t)(v * unit);
    return 0;
}

/* ---------------------------------------------------- the custom flags */
static int o_dataset(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    static const char *const datasets[] = {"fashion-mnist", "synthetic", NULL};
    (void)ps;
    if (!one_of(v, datasets) && strncmp(v, "text:", 5) && strncmp(v, "tokens:", 7))
        return fail(err, len, "--dataset: '%s' is not one of fashion-mnist, synthetic, text:PATH, tokens:GLOB", v);
    if ((!strncmp(v, "text:", 5) && !v[5]) || (!strncmp(v, "tokens:", 7) && !v[7]))
        return fail(err, len, "--dataset: '%s' names no path", v);
    o->dataset = v;
    return 0;
}

static int o_synthetic(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    double n[2];
    int k = parse_list(v, 2, n);
    (void)ps;
    if (k < 1 || n[0] < 1 || n[0] != floor(n[0]) || (k == 2 && (n[1] < 1 || n[1] != floor(n[1]))))
        return fail(err, len, "--synthetic-size: '%s' is not N or N,M with positive integers", v);
    o->synthetic_train = (int64_t)n[0];
    if (k == 2) o->synthetic_test = (int64_t)n[1];
    return 0;
}

static int o_preset(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    mf_gpt_config gc;
    (void)ps;
    if (mf_gpt_preset(v, &gc) != MF_OK) return fail(err, len, "--preset: %s", mf_last_error());
    o->preset = v;
    return 0;
}

static int o_bounds(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    double bounds[TRAIN_MAX_PIECES];
    ps->nbounds = parse_list(v, TRAIN_MAX_PIECES, bounds);
    if (ps->nbounds < 1)
        return fail(err, len, "--lr-boundaries: '%s' is not a list of up to %d steps", v, TRAIN_MAX_PIECES);
    for (int i = 0; i < ps->nbounds; i++) {
        if (bounds[i] < 0 || bounds[i] != floor(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
            return fail(err, len, "--lr-boundaries: '%s' must be increasing integer steps", v);
        o->boundaries[i] = (int64_t)bounds[i];
    }
    return 0;
}

static int o_values(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    ps->nvalues = parse_list(v, TRAIN_MAX_PIECES + 1, o->values);
    if (ps->nvalues < 1) return fail(err, len, "--lr-values: '%s' is not a list of learning rates", v);
    ps->have_values = true;
    return 0;
}

static int o_mesh(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    char *end;
    long r = strtol(v, &end, 10), c = *end == 'x' ? strtol(end + 1, &end, 10) : 0;
    (void)ps;
    if (r < 1 || c < 1 || *end) return fail(err, len, "--mesh: '%s' is not RxC (e.g. 2x2)", v);
    o->mesh_r = (int)r;
    o->mesh_c = (int)c;
    return 0;
}

static int o_recompute(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)ps;
    if (!*v) return fail(err, len, "--recompute: an empty module pattern");
    o->recompute = v;
    return 0;
}

static int o_zero(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)ps;
    if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "2") && strcmp(v, "3"))
        return fail(err, len, "--zero: '%s' is not 0, 1, 2 or 3", v);
    o->zero = v[0] - '0';
    return 0;
}

static int o_memory(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)ps;
    if (parse_size(v, &o->memory) != 0)
        return fail(err, len, "--memory: '%s' is not a size such as 80GiB, 512MiB, 6G or a count of bytes", v);
    return 0;
}

static int o_seed(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    int64_t seed;
    (void)ps;
    if (!parse_i64(v, 0, &seed)) return fail(err, len, "--seed: '%s' is not an integer >= 0", v);
    o->seed = (uint64_t)seed;
    return 0;
}

static int o_deterministic(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    int64_t n = -1;
    (void)ps;
    if (v && (!parse_i64(v, 1, &n) || n > 4096))
        return fail(err, len, "--deterministic=%s: not a shard count from 1 to 4096", v);
    o->shards = v ? (int)n : -1;
    return 0;
}

/* auto (-1), and two words for 1 and 0 */
static int tristate(const char *flag, const char *on, const char *off, int *dst, const char *v, char *err, size_t len)
{
    if (!strcmp(v, "auto")) *dst = -1;
    else if (!strcmp(v, on)) *dst = 1;
    else if (!strcmp(v, off)) *dst = 0;
    else return fail(err, len, "--%s: '%s' is not one of auto, %s, %s", flag, v, on, off);
    return 0;
}

static int o_progress(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)ps;
    return tristate("progress", "bar", "lines", &o->progress, v, err, len);
}

static int o_prefetch(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)ps;
    return tristate("prefetch", "on", "off", &o->prefetch, v, err, len);
}

static int o_help(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)o, (void)ps, (void)v, (void)err, (void)len;
    train_opts_usage(stdout);
    return 1;
}

static int o_version(train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    (void)o, (void)ps, (void)v, (void)err, (void)len;
    printf("mpiflow-train %s\n", mf_version());
    return 1;
}

/* ------------------------------------------------------------ the table */
static const opt_def opts[] = {
    {.name = "model", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, model), .choices = models, .what = "one of mlp, lenet, vit, gpt",
     .usage = "model and data:\n"
              "  --model mlp|lenet|vit|gpt  network (default mlp; vit: a small vision transformer)\n"},
    {.name = "dataset", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_dataset,
     .usage = "  --dataset fashion-mnist|synthetic|text:PATH|tokens:GLOB\n"
              "                             (default fashion-mnist; for gpt text:/usr/share/games/fortunes)\n"
              "      text:PATH              any text file, or a directory's files, read as bytes\n"
              "                             (vocabulary 256); the last tenth is the validation split\n"
              "      tokens:GLOB            llm.c token shards or nanoGPT uint16 .bin files; files with\n"
              "                             'val' in the name are the validation split\n"},
    {.name = "data-dir", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, data_dir),
     .usage = "  --data-dir DIR             IDX files (default /usr/share/datasets/fashion-mnist)\n"},
    {.name = "synthetic-size", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_synthetic,
     .usage = "  --synthetic-size N[,M]     synthetic train (and test) samples (default 10000,2000)\n"},
    {.name = "preset", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_preset,
     .usage = "GPT (doc/gpt.md; defaults: adamw, weight decay 0.1 on matrices, cosine schedule\n"
              "with 5% warmup to lr/10, --clip-grad 1, batch 16):\n"
              "  --preset char|10m|gpt2|gpt2-medium|gpt2-large|gpt2-xl   sizes (default char)\n"},
    {.name = "n-layer", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, n_layer), .lo = 1, .hi = 65536, .what = "an integer from 1 to 65536",
     .usage = "  --n-layer L --n-head H --n-embd C --seq-len T --vocab-size V --dropout P\n"
              "                             override the preset (vocabulary: 256 for text, else 50257)\n"},
    {.name = "n-head", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, n_head), .lo = 1, .hi = 65536, .what = "an integer from 1 to 65536"},
    {.name = "n-embd", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, n_embd), .lo = 1, .hi = 65536, .what = "an integer from 1 to 65536"},
    {.name = "seq-len", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, seq_len), .lo = 1, .hi = 1048576, .what = "an integer from 1 to 1048576"},
    {.name = "vocab-size", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, vocab_size), .lo = 2, .hi = 65536, .what = "an integer from 2 to 65536"},
    {.name = "dropout", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, dropout), .lo = 0, .hi = 1, .hi_open = true, .what = "in [0, 1)"},
    {.name = "val-every", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, val_every), .lo = 1, .what = "a positive integer",
     .usage = "  --val-every K              validation loss every K steps (default: at the end)\n"},
    {.name = "val-batches", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, val_batches), .lo = 1, .what = "a positive integer",
     .usage = "  --val-batches N            batches of the validation split per evaluation (default 20)\n"},
    {.name = "no-shuffle", .has_arg = no_argument, .kind = K_OFF, .off = offsetof(train_opts, shuffle),
     .usage = "  --no-shuffle               read windows in order (as llm.c's and nanoGPT's evaluation)\n"},
    {.name = "epochs", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, epochs), .lo = 1, .what = "a positive integer",
     .usage = "length:\n"
              "  --epochs N                 passes over the training set (default 1)\n"},
    {.name = "steps", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, steps), .lo = 1, .what = "a positive integer",
     .usage = "  --steps N                  optimizer steps instead of epochs\n"},
    {.name = "batch-size", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, batch_size), .lo = 1, .what = "a positive integer",
     .usage = "  --batch-size B             samples per step (default 64)\n"},
    {.name = "optimizer", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, optimizer), .choices = optims, .what = "one of sgd, momentum, rmsprop, adam, adamw",
     .usage = "optimizer:\n"
              "  --optimizer sgd|momentum|rmsprop|adam|adamw   (default sgd)\n"},
    {.name = "lr", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, lr), .lo = 0, .lo_open = true, .what = "a positive number",
     .usage = "  --lr X                     learning rate (default 0.01; 0.001 for adam/adamw)\n"},
    {.name = "momentum", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, momentum), .lo = 0, .hi = 1, .hi_open = true, .what = "a number in [0, 1)",
     .usage = "  --momentum M               SGD/RMSprop momentum (default 0; 0.9 for 'momentum')\n"},
    {.name = "weight-decay", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, weight_decay), .lo = 0, .what = "a number >= 0",
     .usage = "  --weight-decay W           (default 0; 0.01 for adamw)\n"},
    {.name = "clip-grad", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, clip_grad), .lo = 0, .lo_open = true, .what = "a positive number",
     .usage = "  --clip-grad NORM           clip gradients to this global L2 norm\n"},
    {.name = "lr-schedule", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, schedule), .choices = scheds, .what = "one of constant, step, cosine, piecewise",
     .usage = "  --lr-schedule constant|step|cosine|piecewise   (default constant)\n"},
    {.name = "lr-step-size", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, step_size), .lo = 1, .what = "a positive integer",
     .usage = "  --lr-step-size N --lr-gamma G      step: lr * G every N steps (default 1000, 0.1)\n"},
    {.name = "lr-gamma", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, gamma), .lo = 0, .what = "a number >= 0"},
    {.name = "warmup-steps", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, warmup), .lo = 0, .what = "an integer >= 0",
     .usage = "  --warmup-steps N --lr-min X        cosine: linear warmup, then decay to X\n"},
    {.name = "lr-min", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, lr_min), .lo = 0, .what = "a number >= 0"},
    {.name = "lr-boundaries", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_bounds,
     .usage = "  --lr-boundaries S1,S2,.. --lr-values V0,V1,V2,..   piecewise constant\n"},
    {.name = "lr-values", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_values},
    {.name = "parallel", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, parallel), .choices = parallels, .what = "one of none, dp, mp, hybrid, 2d",
     .usage = "parallel (each mode is only SBP choices; see doc/parallelism.md):\n"
              "  --parallel none|dp|mp|hybrid|2d   (default: none on 1 rank, dp on more)\n"
              "      dp      parameters B, data S(0): data parallel\n"
              "      mp      every Linear weight and bias S(0), data B: model parallel\n"
              "      hybrid  hidden layers data parallel, the output layer S(0)\n"
              "      2d      mesh dp x tp: Linear weights (B,S(0)), data (S(0),B)\n"
              "      conv layers stay data parallel (weights B, data S(0)) in every mode\n"},
    {.name = "mesh", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_mesh,
     .usage = "  --mesh RxC                 2d mesh: R data-parallel x C tensor-parallel ranks\n"
              "                             (default: 2 x N/2 for an even N, else N x 1)\n"},
    {.name = "tensor-parallel", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, tensor_parallel), .lo = 1, .hi = 4096, .what = "a degree from 1 to 4096",
     .usage = "  --tensor-parallel N        gpt and vit: Megatron-LM's tensor parallelism over groups of N\n"
              "                             consecutive ranks (heads, MLP, a GPT's vocabulary split), data\n"
              "                             parallel across them: a mesh (ranks/N) x N (doc/parallelism.md)\n"},
    {.name = "sequence-parallel", .has_arg = no_argument, .kind = K_ON,
     .off = offsetof(train_opts, sequence_parallel),
     .usage = "  --sequence-parallel        with --tensor-parallel: LayerNorms and residuals split over\n"
              "                             the sequence (a ViT's patches) between the tensor-parallel regions\n"},
    {.name = "recompute", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_recompute,
     .usage = "  --recompute none|block|attn   activation recompute: keep only each block's input (block)\n"
              "                             or skip the attention half's activations (attn), and run\n"
              "                             that forward again in backward (default none; by name:\n"
              "                             'transformer.h.*', 'transformer.h.*.attn'); mlp, lenet, vit:\n"
              "                             --recompute PATTERN, the modules by name (conv2, 'block*')\n"},
    {.name = "dump-params", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, dump_params),
     .usage = "  --dump-params FILE         after training, write every parameter (gathered) as text\n"},
    {.name = "bucket-mb", .has_arg = required_argument, .kind = K_F64,
     .off = offsetof(train_opts, bucket_mb), .lo = 0, .hi = 1048576, .what = "a size in MiB from 0 to 1048576",
     .usage = "  --bucket-mb MB             gradient buckets of MB MiB: each bucket's allreduce starts\n"
              "                             during backward as soon as its gradients are ready\n"
              "                             (default 25; 0: one sync per parameter after backward)\n"},
    {.name = "plan", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, plan),
     .usage = "  --plan FILE.json           the parallel layout as a plan (doc/plans.md): mesh, parameter\n"
              "                             rules, ZeRO, pipeline; instead of the flags above and below\n"
              "  --plan auto                the plan mpiflow-plan predicts fastest on these ranks within\n"
              "                             --memory (doc/planning.md); at the end, predicted against measured\n"},
    {.name = "memory", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_memory,
     .usage = "  --memory SIZE              --plan auto: memory per rank, as 80GiB, 512MiB, 6G (default: no limit)\n"},
    {.name = "calibration", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, calibration),
     .usage = "  --calibration FILE         --plan auto: rates from mpiflow-bench calibrate (default: built-in)\n"},
    {.name = "plan-trials", .has_arg = required_argument, .kind = K_INT, .off = offsetof(train_opts, plan_trials),
     .lo = 0, .hi = 64, .what = "an integer from 0 to 64",
     .usage = "  --plan-trials K            --plan auto: train the K leading plans (those predicted within\n"
              "                             1.5x of the fastest) a few steps each and keep the fastest\n"
              "                             measured (default 4; 0: trust the prediction)\n"},
    {.name = "print-plan", .has_arg = no_argument, .kind = K_ON, .off = offsetof(train_opts, print_plan),
     .usage = "  --print-plan               print the plan the flags make, as JSON for --plan (stdout,\n"
              "                             rank 0), and each parameter's SBP with its rule (stderr); exit\n"},
    {.name = "zero", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_zero,
     .usage = "  --zero 0|1|2|3             1: ZeRO-1, optimizer state split S(0) over the data-parallel\n"
              "                             ranks, gradients reduce-scattered, parameters allgathered;\n"
              "                             2 and 3 split every parameter S over the data-parallel\n"
              "                             ranks and gather it for each module's forward (3 frees it\n"
              "                             after and gathers it again for backward, like FSDP)\n"},
    {.name = "pipeline-stages", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, pipeline_stages), .lo = 1, .hi = 64, .what = "a count from 1 to 64",
     .usage = "pipeline (see doc/pipeline.md):\n"
              "  --pipeline-stages P        cut the model into P stages balanced by parameter count;\n"
              "                             the ranks form P equal groups, in order, and --parallel\n"
              "                             applies inside each stage (2x2x2: 8 ranks, --parallel 2d\n"
              "                             --mesh 2x2 --pipeline-stages 2)\n"
              "                             gpt: its layers are the embeddings (0), each block\n"
              "                             (1..L) and the final LayerNorm with the tied head (L+1);\n"
              "                             --tensor-parallel applies inside each stage\n"},
    {.name = "pipeline-cuts", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, pipeline_cuts),
     .usage = "  --pipeline-cuts C1,C2,..   cut before these layers instead (e.g. 6 for lenet)\n"},
    {.name = "micro-batches", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, micro_batches), .lo = 1, .hi = 1024, .what = "a count from 1 to 1024",
     .usage = "  --micro-batches M          micro-batches per step, gradients accumulated (M must\n"
              "                             divide --batch-size; default: the largest divisor <= 4P)\n"},
    {.name = "schedule", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, pipeline_schedule), .choices = pipe_scheds, .what = "gpipe or 1f1b",
     .usage = "  --schedule gpipe|1f1b      pipeline schedule (default 1f1b: at most P micro-batches'\n"
              "                             activations per stage, GPipe keeps all M)\n"},
    {.name = "checkpoint", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, checkpoint),
     .usage = "checkpoints (parallel HDF5, see doc/checkpoints.md):\n"
              "  --checkpoint PATH          save model, optimizer and data position to PATH (written\n"
              "                             as PATH.tmp, renamed when complete) at the end of training\n"},
    {.name = "save-every", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, save_every), .lo = 1, .what = "a step count >= 1",
     .usage = "  --save-every N             ... and every N steps\n"},
    {.name = "keep-last", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, keep_last), .lo = 1, .hi = 1000, .what = "a count from 1 to 1000",
     .usage = "  --keep-last K              keep the last K checkpoints: PATH, PATH.1, ... (default 1)\n"},
    {.name = "fletcher32", .has_arg = no_argument, .kind = K_ON, .off = offsetof(train_opts, fletcher32),
     .usage = "  --fletcher32               also protect each piece with HDF5's Fletcher32 filter\n"
              "                             (checked by every HDF5 reader; slower to write)\n"},
    {.name = "resume", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, resume),
     .usage = "  --resume PATH              continue from a checkpoint: its step, data cursor and\n"
              "                             optimizer state; any rank count and --parallel mode\n"
              "  SIGUSR1, SIGTERM, SIGINT   (sbatch --signal=B:USR1@T, preemption, scancel, Ctrl-C) every\n"
              "                             rank stops after the current step, writes --checkpoint and\n"
              "                             exits 0 (slurm/*.sbatch requeue the job); during start-up, it\n"
              "                             saves the state it would start from. Signals within 5 s of\n"
              "                             the first are the same request; one 5 s or more later stops\n"
              "                             at once, exit 128+signal, no checkpoint. Without --checkpoint\n"
              "                             a stop exits 128+signal too: 0 means a checkpoint was written\n"},
    {.name = "device", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, device), .choices = devices, .what = "cpu or cuda",
     .usage = "device (doc/cuda.md):\n"
              "  --device cpu|cuda          where every rank computes (default cpu); cuda: one GPU per\n"
              "                             rank, the local rank's among those visible (CUDA_VISIBLE_DEVICES,\n"
              "                             srun --gpus-per-task), for every model and --parallel mode\n"},
    {.name = "precision", .has_arg = required_argument, .kind = K_CHOICE,
     .off = offsetof(train_opts, precision), .choices = precisions, .what = "fp32 or bf16",
     .usage = "  --precision fp32|bf16      bf16: autocast, matmul/linear/conv operands rounded to bfloat16\n"
              "                             with fp32 accumulation; weights, optimizer state and the other\n"
              "                             ops stay fp32 (default fp32); on cpu it needs the oneDNN\n"
              "                             engine and AVX512_BF16 or AMX, and is refused otherwise\n"},
    {.name = "seed", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_seed,
     .usage = "run:\n"
              "  --seed S                   seed for initialisation, dropout and shuffling (default 0)\n"},
    {.name = "deterministic", .has_arg = optional_argument, .kind = K_CUSTOM, .fn = o_deterministic,
     .usage = "  --deterministic[=V]        the same bits on any number of data-parallel ranks (and\n"
              "                             pipeline stages, for mlp, lenet and vit; at a fixed\n"
              "                             --tensor-parallel for gpt and vit): the batch is cut into V shards\n"
              "                             computed one by one and summed in shard order (default V:\n"
              "                             the largest divisor of --batch-size up to 12; a multiple\n"
              "                             of the data-parallel ranks per stage; also with --zero 2|3).\n"
              "                             Refused with --parallel mp|hybrid|2d and gpt pipelines.\n"
              "                             Slower; see doc/design.md\n"},
    {.name = "threads", .has_arg = required_argument, .kind = K_INT,
     .off = offsetof(train_opts, threads), .lo = 0, .hi = 4096, .what = "an integer in 0..4096",
     .usage = "  --threads T                compute threads per rank (default cores / ranks per node)\n"},
    {.name = "log-every", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, log_every), .lo = 1, .what = "a positive integer",
     .usage = "  --log-every K              progress every K steps (default 100)\n"},
    {.name = "progress", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_progress,
     .usage = "  --progress auto|bar|lines  progress display (default auto: a bar on a terminal)\n"},
    {.name = "metrics", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, metrics),
     .usage = "  --metrics FILE.csv         write step,epoch,loss,lr,samples_per_sec,elapsed_s\n"},
    {.name = "eval-batch-size", .has_arg = required_argument, .kind = K_I64,
     .off = offsetof(train_opts, eval_batch_size), .lo = 1, .what = "a positive integer",
     .usage = "  --eval-batch-size B        test batch size (default 1000)\n"},
    {.name = "no-eval", .has_arg = no_argument, .kind = K_OFF, .off = offsetof(train_opts, eval),
     .usage = "  --no-eval                  skip the test-set evaluation\n"},
    {.name = "profile", .has_arg = no_argument, .kind = K_ON, .off = offsetof(train_opts, profile),
     .usage = "  --profile                  print the time spent per kernel class (GEMM, conv, ...)\n"},
    {.name = "prefetch", .has_arg = required_argument, .kind = K_CUSTOM, .fn = o_prefetch,
     .usage = "  --prefetch auto|on|off     load the next batch in a helper thread (default auto:\n"
              "                             on when --threads leaves a core free)\n"},
    {.name = "trace", .has_arg = required_argument, .kind = K_STR, .off = offsetof(train_opts, trace),
     .usage = "  --trace FILE.json          write a Chrome/Perfetto trace: per rank, forward, backward,\n"
              "                             each gradient bucket's allreduce and the optimizer step;\n"
              "                             prints how much communication backward hid\n"},
    {.name = "help", .has_arg = no_argument, .kind = K_CUSTOM, .fn = o_help,
     .usage = "  --help, --version\n"},
    {.name = "version", .has_arg = no_argument, .kind = K_CUSTOM, .fn = o_version},

};
enum { NOPTS = sizeof opts / sizeof *opts };

void train_opts_usage(FILE *f)
{
    fputs(
        "usage: mpiexec -n N mpiflow-train [options]\n"
        "\n"
        "Trains a model on Fashion-MNIST (or synthetic data) and reports the test\n"
        "accuracy. Every rank runs this same program.\n"
        "\n",
        f);
    for (int i = 0; i < NOPTS; i++)
        if (opts[i].usage) fputs(opts[i].usage, f);
    fputs(
        "\n"
        "environment (doc/collectives.md):\n"
        "  MF_ALLREDUCE_ALGO=mpi|ring|rhd|hier, MF_REDUCE_SCATTER_ALGO=, MF_ALLGATHER_ALGO=\n"
        "                             force a collective algorithm (default: by size and topology)\n"
        "  MF_DETERMINISTIC=1         --deterministic, and every allreduce and reduce-scatter\n"
        "                             sums in rank order\n"
        "  MF_RANKS_PER_NODE=k        treat every k ranks as one node (test hierarchical paths)\n"
        "  MF_BIND=none               do not bind ranks to cores\n"
        "  MF_WAIT=spin|yield         how ranks wait for each other (default: yield the CPU\n"
        "                             where ranks outnumber a node's CPUs, else spin)\n"
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

static int opt_index(const char *name)
{
    for (int i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, name)) return i;
    return -1;   /* not reached: the names are the table's */
}

/* the value v of flag d into o; 0, 1 (stop) or 2 */
static int set_one(const opt_def *d, train_opts *o, parse_state *ps, const char *v, char *err, size_t len)
{
    char *field = (char *)o + d->off;
    int64_t n;
    double x;
    switch (d->kind) {
    case K_STR: *(const char **)field = v; return 0;
    case K_ON: *(bool *)field = true; return 0;
    case K_OFF: *(bool *)field = false; return 0;
    case K_CHOICE:
        if (!one_of(v, d->choices)) break;
        *(const char **)field = v;
        return 0;
    case K_I64:
    case K_INT:
        if (!parse_i64(v, (int64_t)d->lo, &n) || (d->hi > 0 && (double)n > d->hi)) break;
        if (d->kind == K_INT) *(int *)field = (int)n;
        else *(int64_t *)field = n;
        return 0;
    case K_F64:
        if (!parse_f64(v, d->lo, &x) || (d->lo_open && x == d->lo) ||
            (d->hi > 0 && (x > d->hi || (d->hi_open && x == d->hi))))
            break;
        *(double *)field = x;
        return 0;
    case K_CUSTOM: return d->fn(o, ps, v, err, len);
    }
    return fail(err, len, "--%s: '%s' is not %s", d->name, v, d->what);
}

static void defaults(train_opts *o)
{
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
    o->plan_trials = -1;
    o->progress = -1;
    o->eval = true;
    o->prefetch = -1;
    o->device = "cpu";
    o->precision = "fp32";
    o->dropout = -1;
    o->val_batches = 20;
    o->shuffle = true;
}

int train_opts_parse(int argc, char **argv, train_opts *o, char *err, size_t len)
{
    defaults(o);
    struct option longopts[NOPTS + 1];
    for (int i = 0; i < NOPTS; i++) longopts[i] = (struct option){opts[i].name, opts[i].has_arg, 0, 256 + i};
    longopts[NOPTS] = (struct option){0, 0, 0, 0};
    bool given[NOPTS] = {false};
    parse_state ps = {-1, 0, false};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') c = 256 + opt_index("help");
        if (c == ':') return fail(err, len, "%s needs a value", argv[optind - 1]);
        if (c == '?') {
            if (optopt >= 256 && optopt < 256 + NOPTS) return fail(err, len, "--%s needs a value", opts[optopt - 256].name);
            return fail(err, len, "unknown option '%s' (see --help)", argv[optind - 1]);
        }
        given[c - 256] = true;
        int r = set_one(&opts[c - 256], o, &ps, optarg, err, len);
        if (r) return r;
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
    if ((o->memory || o->calibration || o->plan_trials >= 0) && !(o->plan && !strcmp(o->plan, "auto")))
        return fail(err, len, "--memory, --calibration and --plan-trials: only with --plan auto");
    if (o->plan_trials < 0) o->plan_trials = 4;
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
    if (gpt != (!strncmp(o->dataset, "text:", 5) || !strncmp(o->dataset, "tokens:", 7)) && (gpt ? given[opt_index("dataset")] : true))
        return fail(err, len, gpt ? "--model gpt: --dataset %s holds images; give text:PATH or tokens:GLOB"
                                  : "--dataset %s: text and tokens are for --model gpt", o->dataset);
    if (gpt) {   /* GPT-2's recipe, as nanoGPT trains it */
        if (!given[opt_index("dataset")]) o->dataset = "text:/usr/share/games/fortunes";
        if (!given[opt_index("optimizer")]) o->optimizer = "adamw";
        if (!given[opt_index("lr-schedule")]) o->schedule = "cosine";
        if (!given[opt_index("batch-size")]) o->batch_size = 16;
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
    if (gpt && !given[opt_index("lr-min")]) o->lr_min = o->lr / 10;
    if (gpt && !given[opt_index("warmup-steps")]) o->warmup = -1;   /* 5 % of the steps, once they are known */
    if (o->momentum < 0) o->momentum = !strcmp(o->optimizer, "momentum") ? 0.9 : 0.0;
    if (o->weight_decay < 0) o->weight_decay = !strcmp(o->optimizer, "adamw") ? 0.01 : 0.0;
    if (!strcmp(o->schedule, "piecewise")) {
        if (ps.nbounds < 1 || !ps.have_values || ps.nvalues != ps.nbounds + 1)
            return fail(err, len, "--lr-schedule piecewise: needs --lr-boundaries with n steps and --lr-values with "
                        "n+1 rates (got %d and %d)", ps.nbounds < 0 ? 0 : ps.nbounds, ps.nvalues);
        o->npieces = ps.nbounds;
    } else if (ps.nbounds >= 0 || ps.have_values) {
        return fail(err, len, "--lr-boundaries/--lr-values: only for --lr-schedule piecewise");
    }
    return 0;
}
