/*
 * lib/plan/calibration.c - the rates a prediction uses, measured on this
 * machine (mpiflow/predict.h, doc/planning.md).
 *
 * The file is text, one fact per line, '#' comments:
 *   source TEXT                           what measured it
 *   rate gemm|conv|attention WORK RATE    FLOPs per kernel call, FLOP/s
 *   rate memory BYTES RATE                bytes per kernel call, bytes/s
 *   overhead SECONDS                      a kernel call's fixed cost
 *   overlap FRACTION                      how much of a non-blocking collective's time
 *                                         compute hides (0 to 1)
 *   comm KIND RANKS NODES BYTES SECONDS   one collective's time
 * A curve's points are kept sorted by work; between points the rate is
 * interpolated in log(work), beyond them held at the end point. A
 * collective's time is interpolated in log(bytes) on its own rank and
 * node count's points, beyond them extended at the last points'
 * bandwidth; for a rank count not measured, the nearest one's times
 * scaled by the algorithms' (n - 1) / n.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include "lib/internal.h"
#include "mpiflow/predict.h"

#define MAX_POINTS 48
#define NCURVES 4   /* gemm, conv, attention, memory */
static const char *const curve_names[NCURVES] = {"gemm", "conv", "attention", "memory"};

typedef struct curve {
    int n;
    double work[MAX_POINTS], rate[MAX_POINTS];
} curve;

typedef struct comm_table {
    mf_comm_kind kind;
    int ranks, nodes, n;
    double bytes[MAX_POINTS], seconds[MAX_POINTS];
} comm_table;

struct mf_calibration {
    char source[256];
    curve curves[NCURVES];
    double overhead;
    double overlap;
    comm_table *comms;
    int ncomms;
};

static int curve_of(mf_prof_class cls)
{
    return cls == MF_PROF_GEMM ? 0 : cls == MF_PROF_CONV ? 1 : cls == MF_PROF_ATTENTION ? 2 : 3;
}

/* (a, b) into the points x, y (*n of them), kept sorted by x */
static void insert_sorted(double *x, double *y, int *n, double a, double b)
{
    if (*n == MAX_POINTS || !(a > 0) || !(b > 0)) return;
    int i = (*n)++;
    while (i > 0 && x[i - 1] > a) {
        x[i] = x[i - 1];
        y[i] = y[i - 1];
        i--;
    }
    x[i] = a;
    y[i] = b;
}

static void curve_add(curve *c, double work, double rate) { insert_sorted(c->work, c->rate, &c->n, work, rate); }

static comm_table *table_for(mf_calibration *c, mf_comm_kind kind, int ranks, int nodes, bool add)
{
    for (int i = 0; i < c->ncomms; i++)
        if (c->comms[i].kind == kind && c->comms[i].ranks == ranks && c->comms[i].nodes == nodes) return &c->comms[i];
    if (!add) return NULL;
    comm_table *t = realloc(c->comms, (size_t)(c->ncomms + 1) * sizeof *t);
    if (!t) return NULL;
    c->comms = t;
    t = &c->comms[c->ncomms++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->ranks = ranks;
    t->nodes = nodes;
    return t;
}

static void comm_add(mf_calibration *c, mf_comm_kind kind, int ranks, int nodes, double bytes, double seconds)
{
    comm_table *t = table_for(c, kind, ranks, nodes, true);
    if (t) insert_sorted(t->bytes, t->seconds, &t->n, bytes, seconds);
}

mf_calibration *mf_calibration_default(void)
{
    mf_calibration *c = calloc(1, sizeof *c);
    if (!c) {
        mfi_error(MF_ERR_NOMEM, "mf_calibration_default: out of memory");
        return NULL;
    }
    snprintf(c->source, sizeof c->source, "built-in default");
    /* one core with AVX2 FMA: small GEMMs far from its peak */
    static const double gw[] = {1e4, 1e6, 1e8, 1e10}, gr[] = {2e9, 15e9, 40e9, 50e9};
    for (int i = 0; i < 4; i++) {
        curve_add(&c->curves[0], gw[i], gr[i]);
        curve_add(&c->curves[1], gw[i], gr[i] * 0.6);
        curve_add(&c->curves[2], gw[i], gr[i] * 0.4);
    }
    curve_add(&c->curves[3], 1e4, 2e9);
    curve_add(&c->curves[3], 1e8, 8e9);
    c->overhead = 2e-6;
    c->overlap = 1;   /* a progress thread on a core of its own */
    /* one node's shared memory: 5 us and 4 GB/s a link */
    for (int n = 2; n <= 8; n *= 2)
        for (int k = 0; k <= MF_COMM_P2P; k++)
            for (double b = 4096; b <= 1 << 28; b *= 64) {
                double f = k == MF_COMM_ALLREDUCE ? 2.0 * (n - 1) / n : k == MF_COMM_P2P ? 1.0 : (double)(n - 1) / n;
                comm_add(c, (mf_comm_kind)k, n, 1, b, 5e-6 * n + f * b / 4e9);
            }
    return c;
}

/* ---- for the measurement (calibrate.c) */
void mfi_calibration_add_rate(mf_calibration *c, mf_prof_class cls, double work, double rate)
{
    curve_add(&c->curves[curve_of(cls)], work, rate);
}

void mfi_calibration_add_comm(mf_calibration *c, mf_comm_kind kind, int ranks, int nodes, double bytes, double s)
{
    comm_add(c, kind, ranks, nodes, bytes, s);
}

void mfi_calibration_set_overlap(mf_calibration *c, double overlap)
{
    c->overlap = overlap < -1 ? -1 : overlap > 1 ? 1 : overlap;
}

void mfi_calibration_set(mf_calibration *c, const char *source, double overhead)
{
    if (source) snprintf(c->source, sizeof c->source, "%s", source);
    if (overhead >= 0) c->overhead = overhead;
}

mf_calibration *mfi_calibration_empty(void)
{
    mf_calibration *c = calloc(1, sizeof *c);
    if (!c) mfi_error(MF_ERR_NOMEM, "calibration: out of memory");
    else c->overlap = 1;   /* a file without the line: full overlap, as before it was measured */
    return c;
}

void mf_calibration_destroy(mf_calibration *c)
{
    if (!c) return;
    free(c->comms);
    free(c);
}

const char *mf_calibration_source(const mf_calibration *c) { return c ? c->source : "none"; }

/* ------------------------------------------------------------- lookups */
static double interp_log(const double *x, const double *y, int n, double at)
{
    if (n == 0) return 0;
    if (at <= x[0] || n == 1) return y[0];
    if (at >= x[n - 1]) return y[n - 1];
    int i = 1;
    while (x[i] < at) i++;
    double f = (log(at) - log(x[i - 1])) / (log(x[i]) - log(x[i - 1]));
    return y[i - 1] + f * (y[i] - y[i - 1]);
}

double mf_calibration_rate(const mf_calibration *c, mf_prof_class cls, double work)
{
    const curve *k = &c->curves[curve_of(cls)];
    return interp_log(k->work, k->rate, k->n, work);
}

double mf_calibration_overhead(const mf_calibration *c) { return c->overhead; }

double mf_calibration_overlap(const mf_calibration *c) { return c->overlap; }

/* A larger message is never faster: a point above a later, larger one
 * (a noisy measurement) counts as that one. */
static double table_time_raw(const comm_table *t, double bytes);
static double table_time(const comm_table *t, double bytes)
{
    double s = table_time_raw(t, bytes);
    for (int i = 0; i < t->n; i++)
        if (t->bytes[i] >= bytes && t->seconds[i] < s) s = t->seconds[i];
    return s;
}

/* the bandwidth of a table's largest messages: the slope of its last two
 * points, else its last point's bytes per second */
static double table_bandwidth(const comm_table *t)
{
    int n = t->n;
    double bw = n > 1 ? (t->bytes[n - 1] - t->bytes[n - 2]) / (t->seconds[n - 1] - t->seconds[n - 2]) : 0;
    return bw > 0 && isfinite(bw) ? bw : t->bytes[n - 1] / t->seconds[n - 1];
}

static double table_time_raw(const comm_table *t, double bytes)
{
    if (t->n == 0) return 0;
    if (t->n == 1) return t->seconds[0] * bytes / t->bytes[0];
    if (bytes >= t->bytes[t->n - 1]) return t->seconds[t->n - 1] + (bytes - t->bytes[t->n - 1]) / table_bandwidth(t);
    if (bytes <= t->bytes[0]) return t->seconds[0];
    int i = 1;
    while (t->bytes[i] < bytes) i++;
    double f = (log(bytes) - log(t->bytes[i - 1])) / (log(t->bytes[i]) - log(t->bytes[i - 1]));
    return exp(log(t->seconds[i - 1]) + f * (log(t->seconds[i]) - log(t->seconds[i - 1])));
}

static double share(mf_comm_kind k, int n)
{
    return k == MF_COMM_P2P || k == MF_COMM_BCAST ? 1.0 : (double)(n - 1) / n;
}

/* the table of that rank and node count, else the nearest measured rank
 * count with the same nodes (one, or more than one), else any */
static const comm_table *nearest_table(const mf_calibration *c, mf_comm_kind kind, int ranks, int nodes)
{
    const comm_table *best = table_for((mf_calibration *)c, kind, ranks, nodes, false);
    for (int pass = 0; pass < 2 && !best; pass++)
        for (int i = 0; i < c->ncomms; i++) {
            const comm_table *u = &c->comms[i];
            if (u->kind != kind || (pass == 0 && (u->nodes > 1) != (nodes > 1))) continue;
            if (!best || abs(u->ranks - ranks) < abs(best->ranks - ranks)) best = u;
        }
    return best;
}

double mf_calibration_comm_time(const mf_calibration *c, mf_comm_kind kind, int64_t bytes, int ranks, int nodes)
{
    if (ranks < 2 || bytes <= 0) return 0;
    const comm_table *t = nearest_table(c, kind, ranks, nodes);
    if (!t) return 0;
    return table_time(t, (double)bytes) * share(kind, ranks) / share(kind, t->ranks);
}

double mf_calibration_comm_bandwidth(const mf_calibration *c, mf_comm_kind kind, int ranks, int nodes)
{
    const comm_table *t = ranks >= 2 ? nearest_table(c, kind, ranks, nodes) : NULL;
    return t && t->n > 0 ? table_bandwidth(t) : 0;
}

/* ------------------------------------------------------------ the file */
mf_status mf_calibration_write(const mf_calibration *c, FILE *f)
{
    fprintf(f, "# mpiflow calibration (doc/planning.md): rates measured on this machine\n");
    fprintf(f, "source %s\n", c->source);
    for (int k = 0; k < NCURVES; k++)
        for (int i = 0; i < c->curves[k].n; i++)
            fprintf(f, "rate %s %.6g %.6g\n", curve_names[k], c->curves[k].work[i], c->curves[k].rate[i]);
    fprintf(f, "overhead %.6g\n", c->overhead);
    fprintf(f, "overlap %.4g\n", c->overlap);
    for (int t = 0; t < c->ncomms; t++)
        for (int i = 0; i < c->comms[t].n; i++)
            fprintf(f, "comm %s %d %d %.6g %.6g\n", mf_comm_kind_name(c->comms[t].kind), c->comms[t].ranks,
                    c->comms[t].nodes, c->comms[t].bytes[i], c->comms[t].seconds[i]);
    return ferror(f) ? mfi_error(MF_ERR_IO, "writing the calibration failed") : MF_OK;
}

static bool positive(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end && errno == 0 && *v > 0 && isfinite(*v);
}

static bool count(const char *s, int *v)
{
    char *end;
    long n = strtol(s, &end, 10);
    *v = (int)n;
    return end != s && !*end && n >= 1 && n <= 1 << 24;
}

static mf_status parse_line(mf_calibration *c, char *line, const char *path, int ln)
{
    char *tok[8];
    int n = 0;
    for (char *s = strtok(line, " \t\r\n"); s && n < 8; s = strtok(NULL, " \t\r\n")) tok[n++] = s;
    if (n == 0 || tok[0][0] == '#') return MF_OK;
    double a, b;
    if (!strcmp(tok[0], "source")) return MF_OK;
    if (!strcmp(tok[0], "rate") && n == 4) {
        for (int k = 0; k < NCURVES; k++)
            if (!strcmp(tok[1], curve_names[k])) {
                if (!positive(tok[2], &a) || !positive(tok[3], &b)) break;
                curve_add(&c->curves[k], a, b);
                return MF_OK;
            }
        MF_FAIL(MF_ERR_FORMAT, "%s:%d: expected 'rate gemm|conv|attention|memory WORK RATE' with positive numbers",
                path, ln);
    }
    if (!strcmp(tok[0], "overhead") && n == 2) {
        if (!positive(tok[1], &c->overhead))
            MF_FAIL(MF_ERR_FORMAT, "%s:%d: the overhead must be a positive number of seconds", path, ln);
        return MF_OK;
    }
    if (!strcmp(tok[0], "overlap") && n == 2) {
        char *end;
        errno = 0;
        double v = strtod(tok[1], &end);
        if (errno || *end || !(v >= -1 && v <= 1))
            MF_FAIL(MF_ERR_FORMAT, "%s:%d: the overlap must be a fraction from -1 to 1", path, ln);
        c->overlap = v;
        return MF_OK;
    }
    if (!strcmp(tok[0], "comm") && n == 6) {
        int ranks, nodes;
        for (int k = 0; k < MF_COMM_KINDS; k++)
            if (!strcmp(tok[1], mf_comm_kind_name((mf_comm_kind)k))) {
                if (!count(tok[2], &ranks) || !count(tok[3], &nodes) || !positive(tok[4], &a) || !positive(tok[5], &b))
                    break;
                comm_add(c, (mf_comm_kind)k, ranks, nodes, a, b);
                return MF_OK;
            }
        MF_FAIL(MF_ERR_FORMAT, "%s:%d: expected 'comm KIND RANKS NODES BYTES SECONDS' (KIND allreduce, "
                "reduce-scatter, allgather, all-to-all, broadcast or point-to-point; positive numbers)", path, ln);
    }
    MF_FAIL(MF_ERR_FORMAT, "%s:%d: '%s' is not a calibration line (source, rate, overhead, overlap or comm)", path, ln, tok[0]);
}

mf_calibration *mf_calibration_load(const char *path)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) {
        mfi_error(MF_ERR_IO, "cannot read the calibration file %s: %s (write one with mpiflow-bench calibrate)",
                  path ? path : "(null)", strerror(errno));
        return NULL;
    }
    mf_calibration *c = calloc(1, sizeof *c);
    if (!c) {
        fclose(f);
        mfi_error(MF_ERR_NOMEM, "mf_calibration_load: out of memory");
        return NULL;
    }
    char line[1024];
    int ln = 0;
    mf_status st = MF_OK;
    while (st == MF_OK && fgets(line, sizeof line, f)) {
        ln++;
        if (!strncmp(line, "source ", 7)) {
            snprintf(c->source, sizeof c->source, "%.255s", line + 7);
            c->source[strcspn(c->source, "\r\n")] = 0;
        }
        st = parse_line(c, line, path, ln);
    }
    fclose(f);
    if (st == MF_OK && (c->curves[0].n == 0 || c->curves[3].n == 0))
        st = mfi_error(MF_ERR_FORMAT, "%s: no 'rate gemm' or no 'rate memory' line: not a whole calibration "
                       "(write one with mpiflow-bench calibrate)", path);
    for (int k = 1; st == MF_OK && k < 3; k++)   /* conv and attention fall back on GEMM's curve */
        if (c->curves[k].n == 0) c->curves[k] = c->curves[0];
    if (st != MF_OK) {
        mf_calibration_destroy(c);
        return NULL;
    }
    if (!c->source[0]) snprintf(c->source, sizeof c->source, "%s", path);
    return c;
}
