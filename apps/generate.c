/*
 * apps/generate.c - mpiflow-generate: text from a GPT checkpoint
 * (doc/gpt.md), with a KV cache. Byte-level models (vocabulary 256) take
 * and print text; token models take and print token ids.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

#define EXIT_BAD_INPUT 2

static void usage(FILE *f)
{
    fputs("usage: mpiflow-generate --checkpoint C [--prompt TEXT | --prompt-tokens ID,ID,..] [options]\n"
          "\n"
          "Continues a prompt with a GPT trained by mpiflow-train --model gpt (or imported\n"
          "with mpiflow-ckpt import). Byte-level models print text; token models print ids.\n"
          "\n"
          "  --checkpoint C          the checkpoint (its /model attributes give the sizes)\n"
          "  --prompt TEXT           the start, as bytes (default: a newline)\n"
          "  --prompt-tokens LIST    the start as token ids, e.g. 15496,11 (token models)\n"
          "  --max-new-tokens N      tokens to add (default 200)\n"
          "  --temperature T         0: always the most likely token (default 0.8)\n"
          "  --top-k K               draw among the K most likely only (default 40; 0: all)\n"
          "  --seed S                the same seed gives the same text (default 0)\n"
          "  --no-cache              recompute the whole context at every step (slower; the\n"
          "                          same tokens)\n"
          "  --help, --version\n"
          "\n"
          "Exit status: 0, 2 on bad input (flags, a checkpoint that is not a GPT's), 1 otherwise.\n",
          f);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return false;
    *v = x;
    return true;
}

/* the GPT sizes stored with the checkpoint; reports what is wrong */
static mf_status read_config(const char *path, mf_gpt_config *c)
{
    mf_ckpt_file *f = mf_ckpt_open(path);
    if (!f) {
        fprintf(stderr, "mpiflow-generate: error: %s\n", mf_last_error());
        return mf_last_status();
    }
    char attrs[1024] = "";
    mf_status st = mf_ckpt_attrs(f, "/model", attrs, sizeof attrs);
    int64_t v[5];
    const char *names[5] = {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size"};
    bool ok = st == MF_OK && strstr(attrs, "architecture=gpt");
    for (int i = 0; ok && i < 5; i++) ok = mf_ckpt_attr_i64(f, "/model", names[i], &v[i]) && v[i] > 0 && v[i] < 1 << 30;
    mf_ckpt_close(f);
    if (st != MF_OK) {
        fprintf(stderr, "mpiflow-generate: error: %s: %s\n", path, mf_last_error());
        return st;
    }
    if (!ok) {
        fprintf(stderr, "mpiflow-generate: error: %s is not a GPT checkpoint (its /model has no architecture=gpt "
                "with n_layer, n_head, n_embd, seq_len and vocab_size)\n", path);
        return MF_ERR_FORMAT;
    }
    *c = (mf_gpt_config){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], 0.0};
    return MF_OK;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"checkpoint", required_argument, 0, 'c'}, {"prompt", required_argument, 0, 'p'},
        {"prompt-tokens", required_argument, 0, 'P'}, {"max-new-tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'}, {"top-k", required_argument, 0, 'k'},
        {"seed", required_argument, 0, 's'}, {"no-cache", no_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0},
    };
    const char *ckpt = NULL, *prompt = "\n", *ptokens = NULL;
    int64_t max_new = 200, top_k = 40, seed = 0;
    double temp = 0.8;
    bool cache = true;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': ckpt = optarg; break;
        case 'p': prompt = optarg; break;
        case 'P': ptokens = optarg; break;
        case 'n':
            if (!parse_i64(optarg, 0, 1 << 24, &max_new)) {
                fprintf(stderr, "mpiflow-generate: error: --max-new-tokens: '%s' is not a count from 0 to %d\n", optarg, 1 << 24);
                return EXIT_BAD_INPUT;
            }
            break;
        case 't': {
            char *end;
            temp = strtod(optarg, &end);
            if (end == optarg || *end || !(temp >= 0 && temp <= 100)) {
                fprintf(stderr, "mpiflow-generate: error: --temperature: '%s' is not a number in [0, 100]\n", optarg);
                return EXIT_BAD_INPUT;
            }
            break;
        }
        case 'k':
            if (!parse_i64(optarg, 0, 1 << 20, &top_k)) {
                fprintf(stderr, "mpiflow-generate: error: --top-k: '%s' is not an integer >= 0\n", optarg);
                return EXIT_BAD_INPUT;
            }
            break;
        case 's':
            if (!parse_i64(optarg, 0, INT64_MAX, &seed)) {
                fprintf(stderr, "mpiflow-generate: error: --seed: '%s' is not an integer >= 0\n", optarg);
                return EXIT_BAD_INPUT;
            }
            break;
        case 'N': cache = false; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("mpiflow-generate %s\n", mf_version()); return 0;
        default:
            fprintf(stderr, "mpiflow-generate: error: %s '%s' (see --help)\n", c == ':' ? "a value is missing for" : "unknown option",
                    argv[optind - 1]);
            return EXIT_BAD_INPUT;
        }
    }
    if (optind < argc || !ckpt) {
        fprintf(stderr, "mpiflow-generate: error: %s (see --help)\n", ckpt ? "unexpected argument" : "--checkpoint C is required");
        return EXIT_BAD_INPUT;
    }
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mpiflow-generate: error: cannot start: %s\n", mf_last_error());
        return 1;
    }
    int code = 0;
    mf_module *m = NULL;
    int64_t *toks = NULL, *out = NULL;
    mf_gpt_config cfg;
    mf_status st = read_config(ckpt, &cfg);
    if (st != MF_OK) {
        code = st == MF_ERR_NOMEM ? 1 : EXIT_BAD_INPUT;
        goto done;
    }
    bool bytes = cfg.vocab_size == 256;
    int n = 0;
    size_t cap = strlen(ptokens ? ptokens : prompt) + 2;
    toks = malloc(cap * sizeof *toks);
    if (!toks) goto nomem;
    if (ptokens) {
        for (const char *s = ptokens; *s;) {
            char *end;
            long long v = strtoll(s, &end, 10);
            if (end == s || (*end && *end != ',') || v < 0 || v >= cfg.vocab_size) {
                fprintf(stderr, "mpiflow-generate: error: --prompt-tokens: '%s' is not a list of ids below %d\n", ptokens,
                        cfg.vocab_size);
                code = EXIT_BAD_INPUT;
                goto done;
            }
            toks[n++] = v;
            s = *end ? end + 1 : end;
        }
    } else if (bytes) {
        for (const char *s = prompt; *s; s++) toks[n++] = (unsigned char)*s;
    } else {
        fprintf(stderr, "mpiflow-generate: error: %s has a vocabulary of %d tokens: give the prompt as ids with "
                "--prompt-tokens (this tool has no tokenizer)\n", ckpt, cfg.vocab_size);
        code = EXIT_BAD_INPUT;
        goto done;
    }
    if (n == 0) {
        fprintf(stderr, "mpiflow-generate: error: the prompt is empty\n");
        code = EXIT_BAD_INPUT;
        goto done;
    }
    m = mf_model_gpt(&cfg);
    if (!m || mf_ckpt_load(ckpt, m, NULL, NULL) != MF_OK) {
        fprintf(stderr, "mpiflow-generate: error: %s: %s\n", ckpt, mf_last_error());
        code = EXIT_BAD_INPUT;
        goto done;
    }
    out = malloc((size_t)(n + max_new) * sizeof *out);
    if (!out) goto nomem;
    mf_gpt_gen_opts go = {temp, (int)top_k, (uint64_t)seed, cache};
    if (mf_gpt_generate(m, toks, n, (int)max_new, &go, out) != MF_OK) {
        fprintf(stderr, "mpiflow-generate: error: %s\n", mf_last_error());
        code = 1;
        goto done;
    }
    if (mf_rank() == 0) {
        for (int64_t i = 0; i < n + max_new; i++) {
            if (bytes) putchar((int)out[i]);
            else printf("%s%lld", i ? "," : "", (long long)out[i]);
        }
        putchar('\n');
        fflush(stdout);
    }
    goto done;
nomem:
    fprintf(stderr, "mpiflow-generate: error: out of memory\n");
    code = 1;
done:
    free(toks);
    free(out);
    mf_module_destroy(m);
    mf_finalize();
    return code;
}
