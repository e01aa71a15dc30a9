/*
 * apps/plan.c - mpiflow-plan: every plan of a model on a cluster, each
 * predicted (peak memory per rank and step time) by running its step as
 * the ranks would, on the meta device in a simulated world, at the rates
 * of a calibration; then the best that fits (doc/planning.md).
 *
 *   mpiflow-plan --model gpt --preset gpt2-xl --ranks 1024 --ranks-per-node 8 --memory 80GiB
 *       [--calibration FILE] [--tuning FILE] [--top 10] [--all] [--write plan.json]
 *       [mpiflow-train's model and training flags]
 *
 * One process, no MPI launch for any simulated rank count. Exit 0 with
 * a table, 2 for bad input (and when no plan fits: the message names the
 * smallest memory that would do).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/plan_search.h"
#include "mpiflow.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mpiflow-plan --model MODEL --ranks N [--ranks-per-node K] [--memory SIZE]\n"
               "                    [--calibration FILE] [--tuning FILE] [--top T] [--all] [--write FILE]\n"
               "                    [mpiflow-train's model and training flags: --preset, --n-layer, --batch-size, ...]\n"
               "Predicts, for every plan of the model on N ranks in nodes of K (data parallel, ZeRO-1/2/3,\n"
               "tensor parallel with and without sequence parallel, pipelines and their micro-batches,\n"
               "recompute), the peak memory per rank and the step time, by running the step as the ranks\n"
               "would on the meta device in a simulated world (doc/planning.md); prints the best plans\n"
               "that fit in --memory, fastest first. One process; no MPI launch.\n"
               "  --ranks N            ranks of the run (default: this launch's)\n"
               "  --ranks-per-node K   ranks per node (default: N, one node); tensor parallel stays\n"
               "                       inside a node\n"
               "  --memory SIZE        memory per rank, as 80GiB, 512MiB, 6G or bytes (default: no limit)\n"
               "  --calibration FILE   rates measured by mpiflow-bench calibrate (default: built-in)\n"
               "  --tuning FILE        the collectives' tuning file (MF_COLL_TUNING's)\n"
               "  --top T              plans to print (default 10)\n"
               "  --all                every plan, also those that do not fit or cannot run, with why\n"
               "  --write FILE         the best plan as JSON, for mpiflow-train --plan FILE\n"
               "  --explain            the best plan's step on its first rank, entry by entry: each op\n"
               "                       with the SBP signature it ran under, each collective with its\n"
               "                       message and algorithm, and the time predicted for each\n"
               "  --tsv                every plan as tab-separated lines instead of the table: flags,\n"
               "                       dp, tp, pp, runs (1/0), predicted step seconds, peak bytes per rank,\n"
               "                       its parameters', gradients' and optimizer state's bytes, the\n"
               "                       peak's ZeRO gathers, communication buffers, logits, slack and\n"
               "                       gradients alive, and the plan file's JSON where the layout search\n"
               "                       wrote one (else empty)\n"
               "  --help               this text\n"
               "Columns: the plan (as mpiflow-train flags), its mesh dp x tp x pp, the predicted step\n"
               "time split into compute, communication compute does not hide, and a pipeline's bubble;\n"
               "the peak memory per rank and its parts: parameters, the gradients alive at that moment\n"
               "(none when it comes before backward's first), optimizer state, ZeRO-2/3\n"
               "parameters gathered for use, communication buffers (gradient buckets, ZeRO's, boxing's),\n"
               "the fused head's logits, the allocator's size-class slack, and the rest: activations\n"
               "with every temporary.\n");
}

static int bad(const char *fmt, const char *a)
{
    fprintf(stderr, "mpiflow-plan: error: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 2;
}

static bool parse_count(const char *s, int *v)
{
    char *end;
    long n = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || n < 1 || n > 1 << 24) return false;
    *v = (int)n;
    return true;
}

int main(int argc, char **argv)
{
    search_opts so = {.top = 10};
    /* our flags out; the rest to mpiflow-train's parser */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int nrest = 0;
    if (!rest) return 1;
    rest[nrest++] = "mpiflow-plan";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(rest);
            return 0;
        }
        if (!strcmp(a, "--ranks") || !strcmp(a, "--ranks-per-node") || !strcmp(a, "--top")) {
            int *dst = !strcmp(a, "--ranks") ? &so.ranks : !strcmp(a, "--top") ? &so.top : &so.per_node;
            if (!parse_count(v, dst)) {
                free(rest);
                return bad("%s needs a whole number from 1 up", a);
            }
            i++;
        } else if (!strcmp(a, "--memory")) {
            if (!v || parse_size(v, &so.memory) != 0) {
                free(rest);
                return bad("--memory '%s': expected a size such as 80GiB, 512MiB, 6G or a count of bytes", v ? v : "");
            }
            i++;
        } else if (!strcmp(a, "--calibration") || !strcmp(a, "--tuning") || !strcmp(a, "--write")) {
            if (!v) {
                free(rest);
                return bad("%s needs a file", a);
            }
            *(!strcmp(a, "--calibration") ? &so.calibration : !strcmp(a, "--tuning") ? &so.tuning : &so.write) = v;
            i++;
        } else if (!strcmp(a, "--all")) {
            so.all = true;
        } else if (!strcmp(a, "--tsv")) {
            so.tsv = true;
        } else if (!strcmp(a, "--explain")) {
            so.explain = true;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    char err[512];
    bool dataset = false;
    for (int k = 0; k < nrest; k++) dataset |= !strncmp(rest[k], "--dataset", 9) || !strncmp(rest[k], "--vocab-size", 12);
    int pr = train_opts_parse(nrest, rest, &so.base, err, sizeof err);
    free(rest);
    if (pr == 1) return 0;
    if (pr == 2) return bad("%s", err);
    /* no data is read: a GPT preset keeps its own vocabulary (GPT-2's
     * 50257) unless a dataset or a vocabulary is named, where training
     * would read text as bytes (256) */
    mf_gpt_config pc;
    if (!dataset && !strcmp(so.base.model, "gpt") && so.base.preset && mf_gpt_preset(so.base.preset, &pc) == MF_OK &&
        pc.vocab_size > 256)
        so.base.vocab_size = pc.vocab_size;
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-plan: error: cannot start: %s\n", mf_last_error());
        return 1;
    }
    int code = plan_search_main(&so);
    mf_finalize();
    return code;
}
