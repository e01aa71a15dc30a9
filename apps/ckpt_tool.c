/*
 * apps/ckpt_tool.c - mpiflow-ckpt: inspect checkpoints written by
 * mf_ckpt_save / mpiflow-train --checkpoint, on one process.
 *
 *   mpiflow-ckpt list FILE          header and every tensor
 *   mpiflow-ckpt verify FILE...     structure and checksums
 *   mpiflow-ckpt diff A B           max abs / rel difference per tensor
 *   mpiflow-ckpt stats FILE [NAME]  min, max, mean, std, norm, non-finite
 *   mpiflow-ckpt export FILE OUT.safetensors, import IN.safetensors FILE
 *                                   a GPT's weights to and from safetensors (apps/ckpt_hf.c)
 *
 * Exit status: 0 fine (or equal), 1 damaged (or different), 2 bad usage
 * or a file that cannot be read.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/ckpt_hf.h"

#define SLAB (1 << 22)   /* elements read at once */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mpiflow-ckpt COMMAND [OPTIONS] FILE...\n"
            "Inspects mpiflow checkpoints (parallel-HDF5 files written by mpiflow-train\n"
            "--checkpoint or mf_ckpt_save). Runs on one process; no mpiexec needed.\n"
            "\n"
            "commands:\n"
            "  list FILE              the header (step, epoch, world size, seed, optimizer,\n"
            "                         data cursor) and every tensor: name, global shape,\n"
            "                         dtype, SBP and placement at save time, bytes\n"
            "  verify FILE...         structure, and every tensor's checksum recomputed;\n"
            "                         one line per file, exit 1 if any fails\n"
            "  diff A B               per tensor: max |a-b| and max |a-b|/max(|a|,|b|);\n"
            "                         tensors in only one file; exit 1 if they differ\n"
            "  stats FILE [NAME...]   per tensor: min, max, mean, std, L2 norm and the count\n"
            "                         of NaN/Inf values (all tensors, or those named)\n"
            "  export FILE OUT.safetensors   the model's tensors as a safetensors file\n"
            "  import IN.safetensors FILE    a GPT's weights into a new checkpoint (doc/gpt.md)\n"
            "\n"
            "options:\n"
            "  --atol X, --rtol X     diff: equal when |a-b| <= atol + rtol*|b| (default 0 0)\n"
            "  -q, --quiet            verify, diff: print only failures\n"
            "  --layout mpiflow|hf-gpt2   export, import: the checkpoint's names and Linear\n"
            "                         [out, in] weights (default), or Hugging Face GPT-2's names\n"
            "                         with its Conv1D weights [in, out] (transposed on the way)\n"
            "  --n-head H             import: attention heads (default n_embd / 64, GPT-2's)\n"
            "  --help                 this text\n"
            "  --version              the mpiflow version\n"
            "\n"
            "Names are the dataset paths: model/hidden.weight, optim/hidden.weight/momentum.\n"
            "h5dump and h5ls read the same files (doc/checkpoints.md).\n"
            "exit status: 0 fine or equal, 1 damaged or different, 2 bad usage or unreadable\n");
}

static int64_t numel(const mf_ckpt_entry *e)
{
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= e->shape[i];
    return n;
}

static const char *shape_str(const mf_ckpt_entry *e, char *buf, size_t size)
{
    size_t len = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < e->ndim && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)e->shape[i]);
    if (len < size) snprintf(buf + len, size - len, ")");
    return buf;
}

static const char *bytes_str(double b, char *buf, size_t size)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}

static mf_ckpt_file *open_or_say(const char *path)
{
    mf_ckpt_file *f = mf_ckpt_open(path);
    if (!f) fprintf(stderr, "mpiflow-ckpt: error: %s\n", mf_last_error());
    return f;
}

/* Calls fn on entry i slab by slab: rows of axis 0 as doubles. */
typedef void (*slab_fn)(const double *v, int64_t n, void *user);
static int each_slab(const mf_ckpt_file *f, int i, double *buf, slab_fn fn, void *user)
{
    const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
    int64_t rows = e->ndim ? e->shape[0] : 1, row = e->ndim ? numel(e) / (rows ? rows : 1) : 1;
    if (e->ndim && rows == 0) return 0;
    int64_t step = row > 0 && row < SLAB ? SLAB / row : 1;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t n = rows - r0 < step ? rows - r0 : step;
        if (mf_ckpt_read_f64(f, i, r0, n, buf) != MF_OK) {
            fprintf(stderr, "mpiflow-ckpt: error: %s\n", mf_last_error());
            return -1;
        }
        fn(buf, n * row, user);
    }
    return 0;
}

/* ------------------------------------------------------------------ list */
static int cmd_list(const char *path)
{
    mf_ckpt_file *f = open_or_say(path);
    if (!f) return 2;
    char attrs[2048];
    printf("%s\n", path);
    mf_ckpt_attrs(f, "/", attrs, sizeof attrs);
    printf("  file:  %s\n", attrs);
    mf_ckpt_attrs(f, "/data", attrs, sizeof attrs);
    if (attrs[0]) printf("  data:  %s\n", attrs);
    mf_ckpt_attrs(f, "/optim", attrs, sizeof attrs);
    if (attrs[0]) printf("  optim: %s\n", attrs);
    printf("\n  %-40s %-16s %-5s %-10s %-16s %10s\n", "tensor", "global shape", "dtype", "sbp", "placement", "bytes");
    double total = 0;
    for (int i = 0; i < mf_ckpt_count(f); i++) {
        const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
        double b = (double)numel(e) * (double)mf_dtype_size(e->dtype);
        char sh[128], bs[32];
        printf("  %-40s %-16s %-5s %-10s %-16s %10s\n", e->name, shape_str(e, sh, sizeof sh), mf_dtype_name(e->dtype),
               e->sbp[0] ? e->sbp : "-", e->placement[0] ? e->placement : "-", bytes_str(b, bs, sizeof bs));
        total += b;
    }
    char bs[32];
    printf("\n  %d tensors, %s\n", mf_ckpt_count(f), bytes_str(total, bs, sizeof bs));
    mf_ckpt_close(f);
    return 0;
}

/* ---------------------------------------------------------------- verify */
static int verify_one(const char *path, bool quiet)
{
    mf_ckpt_file *f = mf_ckpt_open(path);
    if (!f) {
        printf("FAILED %s\n", mf_last_error());   /* the message names the file */
        return 1;
    }
    int bad = 0, model = 0;
    if (mf_ckpt_check(f) != MF_OK) {   /* the loader's checks of the header */
        printf("FAILED %s\n", mf_last_error());
        bad++;
    }
    for (int i = 0; i < mf_ckpt_count(f); i++) {
        const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
        uint64_t sum;
        if (!strncmp(e->name, "model/", 6)) model++;
        if (mf_ckpt_verify_entry(f, i, &sum) != MF_OK) {
            printf("FAILED %s\n", mf_last_error());
            bad++;
        }
    }
    if (!model) {
        printf("FAILED %s: no tensors under /model\n", path);
        bad++;
    }
    if (!bad && !quiet) {
        int64_t step = 0;
        mf_ckpt_attr_i64(f, "/", "step", &step);
        printf("ok %s: %d tensors, checksums match, step %lld\n", path, mf_ckpt_count(f), (long long)step);
    }
    mf_ckpt_close(f);
    return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ diff */
typedef struct pair_stats {
    double max_abs, max_rel, atol, rtol;
    int64_t over;   /* elements beyond the tolerance */
} pair_stats;

static void compare(const double *a, const double *b, int64_t n, pair_stats *s)
{
    for (int64_t k = 0; k < n; k++) {
        if (a[k] == b[k] || (isnan(a[k]) && isnan(b[k]))) continue;
        double d = fabs(a[k] - b[k]), m = fmax(fabs(a[k]), fabs(b[k]));
        if (isnan(d)) d = INFINITY;
        double rel = m > 0 && isfinite(m) ? d / m : INFINITY;
        if (d > s->max_abs) s->max_abs = d;
        if (rel > s->max_rel) s->max_rel = rel;
        if (!(d <= s->atol + s->rtol * fabs(b[k]))) s->over++;
    }
}

static int diff_entry(const mf_ckpt_file *fa, int ia, const mf_ckpt_file *fb, int ib, double *ba, double *bb,
                      pair_stats *s)
{
    const mf_ckpt_entry *e = mf_ckpt_entry_at(fa, ia);
    int64_t rows = e->ndim ? e->shape[0] : 1, row = e->ndim && rows ? numel(e) / rows : 1;
    int64_t step = row > 0 && row < SLAB ? SLAB / row : 1;
    for (int64_t r0 = 0; r0 < rows && (!e->ndim || row > 0); r0 += step) {
        int64_t n = rows - r0 < step ? rows - r0 : step;
        if (mf_ckpt_read_f64(fa, ia, r0, n, ba) != MF_OK || mf_ckpt_read_f64(fb, ib, r0, n, bb) != MF_OK) {
            fprintf(stderr, "mpiflow-ckpt: error: %s\n", mf_last_error());
            return -1;
        }
        compare(ba, bb, n * row, s);
    }
    return 0;
}

static bool same_shape(const mf_ckpt_entry *a, const mf_ckpt_entry *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static int cmd_diff(const char *pa, const char *pb, double atol, double rtol, bool quiet)
{
    mf_ckpt_file *fa = open_or_say(pa), *fb = fa ? open_or_say(pb) : NULL;
    double *ba = malloc(SLAB * sizeof *ba), *bb = malloc(SLAB * sizeof *bb);
    int rc = fa && fb && ba && bb ? 0 : 2, differ = 0, same = 0;
    if (!rc) {
        int64_t sa = 0, sb = 0;
        mf_ckpt_attr_i64(fa, "/", "step", &sa);
        mf_ckpt_attr_i64(fb, "/", "step", &sb);
        if (!quiet) printf("A %s (step %lld)\nB %s (step %lld)\n\n  %-40s %12s %12s\n", pa, (long long)sa, pb,
                           (long long)sb, "tensor", "max abs", "max rel");
    }
    for (int i = 0; !rc && i < mf_ckpt_count(fa); i++) {
        const mf_ckpt_entry *ea = mf_ckpt_entry_at(fa, i);
        int j = mf_ckpt_find(fb, ea->name);
        char s1[128], s2[128];
        if (j < 0) {
            printf("  %-40s only in A\n", ea->name);
            differ++;
            continue;
        }
        const mf_ckpt_entry *eb = mf_ckpt_entry_at(fb, j);
        if (!same_shape(ea, eb)) {
            printf("  %-40s shape %s in A, %s in B\n", ea->name, shape_str(ea, s1, sizeof s1), shape_str(eb, s2, sizeof s2));
            differ++;
            continue;
        }
        pair_stats s = {0, 0, atol, rtol, 0};
        if (diff_entry(fa, i, fb, j, ba, bb, &s)) {
            rc = 2;
            break;
        }
        if (s.over) differ++;
        else same++;
        if (s.over || !quiet)
            printf("  %-40s %12.4g %12.4g%s\n", ea->name, s.max_abs, s.max_rel, s.over ? "  differs" : "");
    }
    for (int j = 0; !rc && j < mf_ckpt_count(fb); j++)
        if (mf_ckpt_find(fa, mf_ckpt_entry_at(fb, j)->name) < 0) {
            printf("  %-40s only in B\n", mf_ckpt_entry_at(fb, j)->name);
            differ++;
        }
    if (!rc) {
        if (!quiet || differ) printf("\n  %d tensors equal, %d differ\n", same, differ);
        rc = differ ? 1 : 0;
    }
    free(ba);
    free(bb);
    mf_ckpt_close(fa);
    mf_ckpt_close(fb);
    return rc;
}

/* ----------------------------------------------------------------- stats */
typedef struct moments {
    double min, max, sum, sumsq;
    int64_t n, nonfinite;
} moments;

static void accumulate(const double *v, int64_t n, void *user)
{
    moments *m = user;
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(v[k])) {
            m->nonfinite++;
            continue;
        }
        m->min = fmin(m->min, v[k]);
        m->max = fmax(m->max, v[k]);
        m->sum += v[k];
        m->sumsq += v[k] * v[k];
        m->n++;
    }
}

static int cmd_stats(const char *path, char **names, int nnames)
{
    mf_ckpt_file *f = open_or_say(path);
    double *buf = malloc(SLAB * sizeof *buf);
    if (!f || !buf) {
        free(buf);
        mf_ckpt_close(f);
        return 2;
    }
    int rc = 0;
    for (int k = 0; k < nnames; k++)
        if (mf_ckpt_find(f, names[k]) < 0) {
            fprintf(stderr, "mpiflow-ckpt: error: %s: no tensor '%s' (see mpiflow-ckpt list)\n", path, names[k]);
            rc = 2;
        }
    if (!rc) printf("  %-40s %12s %12s %12s %12s %12s %8s\n", "tensor", "min", "max", "mean", "std", "norm", "nan/inf");
    for (int i = 0; !rc && i < mf_ckpt_count(f); i++) {
        const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
        bool wanted = nnames == 0;
        for (int k = 0; k < nnames; k++) wanted |= mf_ckpt_find(f, names[k]) == i;
        if (!wanted) continue;
        moments m = {INFINITY, -INFINITY, 0, 0, 0, 0};
        if (each_slab(f, i, buf, accumulate, &m)) {
            rc = 2;
            break;
        }
        double mean = m.n ? m.sum / (double)m.n : NAN;
        double var = m.n ? fmax(m.sumsq / (double)m.n - mean * mean, 0) : NAN;
        printf("  %-40s %12.5g %12.5g %12.5g %12.5g %12.5g %8lld\n", e->name, m.n ? m.min : NAN, m.n ? m.max : NAN,
               mean, sqrt(var), sqrt(m.sumsq), (long long)m.nonfinite);
    }
    free(buf);
    mf_ckpt_close(f);
    return rc;
}

/* --atol/--rtol's value into *v; false (with a message) when it is not a number >= 0 */
static bool parse_tol(const char *opt, const char *arg, double *v)
{
    char *end = NULL;
    *v = arg ? strtod(arg, &end) : -1;
    if (arg && end && end != arg && !*end && *v >= 0) return true;
    fprintf(stderr, "mpiflow-ckpt: error: %s: '%s' is not a number >= 0\n", opt, arg ? arg : "");
    return false;
}

int main(int argc, char **argv)
{
    double atol = 0, rtol = 0;
    bool quiet = false;
    const char *layout = "mpiflow";
    int n_head = 0;
    const char *cmd = NULL;
    char **args = calloc((size_t)argc, sizeof *args);
    int nargs = 0, rc = 2;
    if (!args) return 2;
    /* options may come anywhere; the first other word is the command */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool value = !strcmp(a, "--atol") || !strcmp(a, "--rtol");
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (value) {
            if (!parse_tol(a, i + 1 < argc ? argv[i + 1] : NULL, !strcmp(a, "--atol") ? &atol : &rtol)) goto out;
            i++;
        } else if (!strcmp(a, "--layout") || !strcmp(a, "--n-head")) {
            const char *v = i + 1 < argc ? argv[++i] : NULL;
            char *end = NULL;
            long h = v && a[2] == 'n' ? strtol(v, &end, 10) : 0;
            if (!v || (a[2] == 'l' && strcmp(v, "mpiflow") && strcmp(v, "hf-gpt2")) || (a[2] == 'n' && (*end || h < 1 || h > 4096))) {
                fprintf(stderr, "mpiflow-ckpt: error: %s: '%s' is not %s\n", a, v ? v : "", a[2] == 'l' ? "mpiflow or hf-gpt2" : "a head count");
                goto out;
            }
            if (a[2] == 'l') layout = v;
            else n_head = (int)h;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--version")) {
            printf("mpiflow-ckpt %s\n", mf_version());
            rc = 0;
            goto out;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "mpiflow-ckpt: error: unknown option '%s' (see --help)\n", a);
            goto out;
        } else if (!cmd) {
            cmd = a;
        } else {
            args[nargs++] = argv[i];
        }
    }
    if (!cmd) usage(stderr);
    else if (!strcmp(cmd, "list") && nargs == 1) rc = cmd_list(args[0]);
    else if (!strcmp(cmd, "verify") && nargs >= 1) {
        rc = 0;
        for (int i = 0; i < nargs; i++) rc |= verify_one(args[i], quiet);
    } else if (!strcmp(cmd, "diff") && nargs == 2) rc = cmd_diff(args[0], args[1], atol, rtol, quiet);
    else if (!strcmp(cmd, "stats") && nargs >= 1) rc = cmd_stats(args[0], args + 1, nargs - 1);
    else if ((!strcmp(cmd, "export") || !strcmp(cmd, "import")) && nargs == 2) {
        if (mf_init(&argc, &argv) != MF_OK) {
            fprintf(stderr, "mpiflow-ckpt: error: cannot start: %s\n", mf_last_error());
            rc = 1;
            goto out;
        }
        rc = cmd[0] == 'e' ? ckpt_export(args[0], args[1], layout) : ckpt_import(args[0], args[1], layout, n_head);
        mf_finalize();
    } else if (strcmp(cmd, "list") && strcmp(cmd, "verify") && strcmp(cmd, "diff") && strcmp(cmd, "stats") &&
               strcmp(cmd, "export") && strcmp(cmd, "import"))
        fprintf(stderr, "mpiflow-ckpt: error: unknown command '%s': one of list, verify, diff, stats, export, import\n", cmd);
    else
        fprintf(stderr, "mpiflow-ckpt: error: %s: wrong number of files (see --help)\n", cmd);
out:
    free(args);
    return rc;
}
