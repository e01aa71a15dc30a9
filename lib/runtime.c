/*
 * lib/runtime.c - mf_init/mf_finalize, thread counts, logging, agreement.
 */
#include <stdio.h>
#include <time.h>
#include "lib/internal.h"
#include "collectives/coll.h"
#include "collectives/comm.h"

static int init_count;
static bool mpi_started;
static int nthreads = 1;
static int ncores;   /* 0 until measured */
static mf_log_level log_level = MF_LOG_INFO;

static int default_threads(void)
{
    /* srun's tasks get the CPUs Slurm gave each (--cpus-per-task) */
    const char *cpt = getenv("SLURM_CPUS_PER_TASK");
    if (cpt && *cpt && getenv("SLURM_STEP_ID") && atoi(cpt) > 0) return atoi(cpt);
    int total = 0;
    int usable = mfi_topo_cores(&total);
    /* A rank bound to a subset of the cores (by Slurm or mpiexec) uses
     * that subset; an unbound rank shares the node with its peers. */
    if (usable < total) return usable > 0 ? usable : 1;
    int per = total / (mfi_comm_shared_size() > 0 ? mfi_comm_shared_size() : 1);
    return per > 0 ? per : 1;
}

static long env_long(const char *name, long def)
{
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? def : v;
}

/* MF_MEMORY_LIMIT: "6G", "512M", "100000K" or bytes, the host's cap */
static mf_status memory_limit_env(void)
{
    const char *s = getenv("MF_MEMORY_LIMIT");
    if (!s || !*s) return MF_OK;
    char *end;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "K") || !strcmp(end, "k") ? 1024.0 : !strcmp(end, "M") || !strcmp(end, "m") ? 1048576.0
                : !strcmp(end, "G") || !strcmp(end, "g") ? 1073741824.0 : *end ? 0 : 1;
    if (end == s || !(v >= 0) || unit == 0 || v * unit > 9e18)
        MF_FAIL(MF_ERR_ARG, "MF_MEMORY_LIMIT='%s': expected a size such as 6G, 512M, 100000K or a count of bytes", s);
    return mf_memory_set_limit_on(MF_DEV_CPU, (int64_t)(v * unit));
}

mf_status mf_init(int *argc, char ***argv)
{
    if (init_count++ > 0) return MF_OK;
    mf_status st = mfi_mpi_init(argc, argv, &mpi_started);
    if (st == MF_OK) st = mfi_comm_world_setup();
    if (st == MF_OK) {   /* a bad MF_*_ALGO fails here, on every rank */
        mf_status env = mfi_coll_check_env();
        if (env == MF_OK) env = memory_limit_env();
        if (env == MF_OK) env = mfi_cpu_engine_from_env();   /* MF_CPU_ENGINE */
        if (env == MF_OK) env = mfi_watchdog_start();   /* MF_TIMEOUT */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", env != MF_OK ? mf_last_error() : "");
        st = mfi_comm_agree(env, msg);
        if (st != MF_OK) {
            mfi_comm_world_teardown();
            if (mpi_started) mfi_mpi_finalize();
            mpi_started = false;
        }
    }
    if (st != MF_OK) {
        init_count = 0;
        return st;
    }
    const char *seed = getenv("MF_SEED");
    if (seed && *seed) mf_manual_seed(strtoull(seed, NULL, 10));
    if (getenv("MF_PROFILE") && atoi(getenv("MF_PROFILE")) > 0) mf_profile_enable(true);
    long lvl = env_long("MF_LOG_LEVEL", -1);
    if (lvl >= MF_LOG_DEBUG && lvl <= MF_LOG_ERROR) log_level = (mf_log_level)lvl;
    return mf_set_threads((int)env_long("MF_THREADS", 0));
}

mf_status mf_finalize(void)
{
    if (init_count == 0) return MF_OK;
    if (--init_count > 0) return MF_OK;
    mfi_request_shutdown();   /* the progress thread, before the communicators go */
    mfi_trace_shutdown();
    mfi_device_shutdown();
    mfi_cpu_backend.shutdown();   /* cached oneDNN primitives */
    mfi_alloc_shutdown();
    mfi_global_teardown();
    mfi_comm_world_teardown();
    ncores = 0;
    mf_status st = MF_OK;
    if (mpi_started) st = mfi_mpi_finalize();
    mpi_started = false;
    return st;
}

bool mf_initialized(void) { return init_count > 0; }
int mf_rank(void) { return mfi_comm_rank(); }
int mf_world_size(void) { return mfi_comm_size(); }
int mf_local_rank(void) { return mfi_comm_node_rank(); }
int mf_local_size(void) { return mfi_comm_node_size(); }
int mf_node_id(void) { return mfi_comm_node_id(); }
int mf_node_count(void) { return mfi_comm_node_count(); }

const char *mf_topology_str(char *buf, size_t size)
{
    char machine[512];
    mfi_topo_describe(machine, sizeof machine);
    int k = mfi_comm_node_emulated();
    char emu[64] = "";
    if (k) snprintf(emu, sizeof emu, " (emulated, MF_RANKS_PER_NODE=%d)", k);
    else if (mfi_comm_node_from_slurm()) snprintf(emu, sizeof emu, " (Slurm's SLURM_NODEID)");
    snprintf(buf, size, "rank %d of %d: node %d of %d%s, local rank %d of %d; %s (%s; %s)", mf_rank(), mf_world_size(),
             mf_node_id(), mf_node_count(), emu, mf_local_rank(), mf_local_size(), machine, mfi_comm_bind_note(),
             mfi_comm_wait_note());
    return buf;
}

mf_status mf_set_threads(int n)
{
    if (ncores == 0) ncores = default_threads();   /* hwloc loads the topology: once */
    if (n <= 0) n = ncores;
    nthreads = n;
    if (mfi_cpu_backend.set_threads) mfi_cpu_backend.set_threads(n);
    return MF_OK;
}

int mf_threads(void) { return nthreads; }
int mf_cores(void) { return ncores > 0 ? ncores : 1; }

/* ---------------------------------------------------------------- logging */
void mf_log_set_level(mf_log_level level) { log_level = level; }

void mf_log_at(mf_log_level level, const char *fmt, ...)
{
    if (level < log_level) return;
    bool all = level == MF_LOG_ERROR;
    if (!all && mf_rank() != 0) return;
    FILE *f = level >= MF_LOG_WARN ? stderr : stdout;
    va_list ap;
    va_start(ap, fmt);
    if (all && mf_world_size() > 1) fprintf(f, "[rank %d] ", mf_rank());
    if (level == MF_LOG_WARN) fputs("warning: ", f);
    if (level == MF_LOG_ERROR) fputs("error: ", f);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}

void mf_log_all(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (mf_world_size() > 1) fprintf(stdout, "[rank %d] ", mf_rank());
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

double mf_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mf_status mf_agree(mf_status local)
{
    char msg[1536];
    snprintf(msg, sizeof msg, "%s", local != MF_OK ? mf_last_error() : "");
    return mfi_comm_agree(local, msg);
}
