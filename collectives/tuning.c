/*
 * collectives/tuning.c - the selection table as data: a tuning file
 * that `mpiflow-bench tune` writes and MF_COLL_TUNING points at
 * (doc/collectives.md, "Tuning the selection").
 *
 * One rule per line, '#' starts a comment:
 *
 *   allreduce  2 1 0       rhd
 *   allreduce  2 1 196608  ring
 *
 * op (allreduce, reduce_scatter, allgather), ranks in the communicator,
 * node class (1: one node; 2: several nodes, several ranks on each; 3:
 * several nodes otherwise), the smallest message in bytes the rule
 * covers, and the algorithm. For a call, the rule of its op, rank count
 * and node class with the largest size not above the message's wins; a
 * communicator the file does not describe keeps the built-in table
 * (select.c). The file is read once, at mf_init, so a bad line fails
 * there with its line number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "collectives/coll_algo.h"
#include "base/error.h"

typedef struct trule {
    mfi_coll_op op;
    int ranks, nodes;
    int64_t from;
    mf_coll_algo algo;
} trule;

static trule *rules;
static int nrules;
static const char *const ops[MFI_COLL_OPS] = {"allreduce", "reduce_scatter", "allgather"};

mf_status mfi_coll_op_parse(const char *name, mfi_coll_op *out)
{
    for (int k = 0; name && k < MFI_COLL_OPS; k++)
        if (!strcmp(name, ops[k])) {
            *out = (mfi_coll_op)k;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "'%s' is not allreduce, reduce_scatter or allgather", name ? name : "(null)");
}

const char *mfi_coll_op_name(mfi_coll_op op) { return op >= 0 && op < MFI_COLL_OPS ? ops[op] : "?"; }

/* one line into *r; 0: a rule, 1: blank or comment */
static mf_status parse_line(char *line, const char *path, int no, trule *r, int *blank)
{
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char op[32], algo[32], extra[2];
    long long ranks, nodes, from;
    int k = sscanf(line, "%31s %lld %lld %lld %31s %1s", op, &ranks, &nodes, &from, algo, extra);
    *blank = k <= 0;
    if (*blank) return MF_OK;
    if (k != 5)
        MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: line %d: expected 'op ranks nodes from_bytes algorithm', "
                "e.g. 'allreduce 2 1 0 ring'", path, no);
    if (mfi_coll_op_parse(op, &r->op) != MF_OK)
        MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: line %d: '%s' is not allreduce, reduce_scatter or allgather", path,
                no, op);
    if (ranks < 2 || ranks > 1 << 24 || nodes < 1 || nodes > 3 || from < 0)
        MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: line %d: need ranks >= 2, a node class of 1, 2 or 3 and "
                "from_bytes >= 0", path, no);
    if (mf_coll_algo_parse(algo, &r->algo) != MF_OK || r->algo == MF_COLL_AUTO)
        MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: line %d: '%s' is not mpi, ring, rhd or hier", path, no, algo);
    if (r->algo == MF_COLL_RHD && r->op != MFI_ALLREDUCE)
        MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: line %d: %s has no rhd algorithm", path, no, op);
    r->ranks = (int)ranks;
    r->nodes = (int)nodes;
    r->from = from;
    return MF_OK;
}

/* The rules of the file at path into *out (*nout of them). */
static mf_status read_rules(const char *path, trule **out, int *nout)
{
    *out = NULL;
    *nout = 0;
    FILE *f = fopen(path, "r");
    if (!f) MF_FAIL(MF_ERR_ARG, "MF_COLL_TUNING=%s: cannot open it (%s)", path, strerror(errno));
    char line[512];
    mf_status st = MF_OK;
    trule *rs = NULL;
    int n = 0;
    for (int no = 1; st == MF_OK && fgets(line, sizeof line, f); no++) {
        trule r;
        int blank;
        st = parse_line(line, path, no, &r, &blank);
        if (st != MF_OK || blank) continue;
        trule *nr = realloc(rs, (size_t)(n + 1) * sizeof *nr);
        if (!nr) st = mfi_error(MF_ERR_NOMEM, "MF_COLL_TUNING: out of memory");
        else (rs = nr)[n++] = r;
    }
    if (st == MF_OK && ferror(f)) st = mfi_error(MF_ERR_ARG, "MF_COLL_TUNING=%s: read error", path);
    fclose(f);
    if (st != MF_OK) {
        free(rs);
        return st;
    }
    *out = rs;
    *nout = n;
    return MF_OK;
}

mf_status mfi_coll_tuning_load(void)
{
    static int done;
    if (done) return MF_OK;
    const char *path = getenv("MF_COLL_TUNING");
    if (path && *path) MF_TRY(read_rules(path, &rules, &nrules));
    done = 1;
    return MF_OK;
}

mf_status mf_coll_tuning_load(const char *path)
{
    if (!path || !*path) MF_FAIL(MF_ERR_ARG, "mf_coll_tuning_load: no file named");
    trule *rs;
    int n;
    MF_TRY(read_rules(path, &rs, &n));
    free(rules);
    rules = rs;
    nrules = n;
    return MF_OK;
}

bool mfi_coll_tuning_lookup(mfi_coll_op op, int ranks, int nodes, int64_t bytes, mf_coll_algo *out)
{
    const trule *best = NULL;
    for (int i = 0; i < nrules; i++) {
        const trule *r = &rules[i];
        if (r->op != op || r->ranks != ranks || r->nodes != nodes || r->from > bytes) continue;
        if (!best || r->from >= best->from) best = r;   /* a later line of the same size wins */
    }
    if (best) *out = best->algo;
    return best != NULL;
}
