/*
 * mpiflow/runtime.h - start-up, threads, the random seed, logging and timers.
 *
 * mf_init initialises MPI when the caller has not, picks the number of
 * compute threads per rank (cores / ranks on the node unless told), and
 * sets the global seed. Every rank runs the same program (SPMD).
 */
#ifndef MPIFLOW_RUNTIME_H
#define MPIFLOW_RUNTIME_H

#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include "mpiflow/status.h"
#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initialise mpiflow. If MPI is not initialised, it is, asking for
 * MPI_THREAD_MULTIPLE (the progress and watchdog threads call MPI), and
 * mf_finalize will finalize it; otherwise the caller keeps ownership of
 * MPI. argc/argv may be NULL.
 * Environment: MF_THREADS (threads per rank), MF_SEED, MF_PROFILE=1. */
MF_API mf_status mf_init(int *argc, char ***argv);
/* Release caches and, if mf_init started MPI, finalize it. */
MF_API mf_status mf_finalize(void);
MF_API bool mf_initialized(void);

MF_API int mf_rank(void);        /* rank in MPI_COMM_WORLD */
MF_API int mf_world_size(void);
MF_API int mf_local_rank(void);  /* rank among the ranks of this node */
MF_API int mf_local_size(void);
/* This rank's node and the number of nodes: the machines whose ranks
 * share memory, or under srun Slurm's nodes (SLURM_NODEID, when srun
 * started every rank). MF_RANKS_PER_NODE=k makes one machine look like
 * nodes of k ranks (ranks k*i .. k*i+k-1), for the hierarchical
 * collectives; mf_local_rank/size follow it. */
MF_API int mf_node_id(void);
MF_API int mf_node_count(void);
/* One line on what this rank sees: its node, local rank, the machine as
 * hwloc sees it (packages, NUMA nodes, cores, hardware threads, GPUs) and
 * the cores it is bound to. Not collective. */
MF_API const char *mf_topology_str(char *buf, size_t size);

/* Threads used by the CPU kernels and OpenBLAS on this rank. n <= 0
 * restores the default: SLURM_CPUS_PER_TASK under srun, else usable
 * cores / ranks on this node, at least 1. */
MF_API mf_status mf_set_threads(int n);
MF_API int mf_threads(void);
/* Cores this rank may use: its binding, or its share of the node. */
MF_API int mf_cores(void);

/* The global seed: parameter initialisation, dropout, rand/randn and
 * data shuffling all derive their Philox keys from it. */
MF_API void mf_manual_seed(uint64_t seed);
MF_API uint64_t mf_seed(void);
/* How many draws (rand, randn, dropout calls) the global generator has
 * made since mf_manual_seed; checkpoints save it so that a resumed run
 * draws the same dropout masks as an uninterrupted one. */
MF_API uint64_t mf_rng_draws(void);
MF_API void mf_rng_set_draws(uint64_t n);

typedef enum mf_log_level { MF_LOG_DEBUG, MF_LOG_INFO, MF_LOG_WARN, MF_LOG_ERROR } mf_log_level;
/* Logs are printed by rank 0 only, except MF_LOG_ERROR and
 * mf_log_all, which every rank prints with a "[rank N]" prefix.
 * (mf_log itself is the logarithm op.) */
MF_API void mf_log_at(mf_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define mf_log_info(...) mf_log_at(MF_LOG_INFO, __VA_ARGS__)
#define mf_log_warn(...) mf_log_at(MF_LOG_WARN, __VA_ARGS__)
#define mf_log_error(...) mf_log_at(MF_LOG_ERROR, __VA_ARGS__)
MF_API void mf_log_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
MF_API void mf_log_set_level(mf_log_level level);

/* Wall-clock seconds from a monotonic clock. */
MF_API double mf_time(void);

/* Collective over MPI_COMM_WORLD: every rank passes its own status and
 * gets back MF_OK only if all ranks passed MF_OK. Otherwise each rank
 * gets a failure: a failing rank its own status and message, the others
 * the lowest failing rank's status and message, prefixed by that rank
 * ("rank 2: ..."). This is how an error that one rank sees is agreed on
 * before anyone goes on. */
MF_API mf_status mf_agree(mf_status local);

/* Kernel profiling: with MF_PROFILE=1 or mf_profile_enable(true), the
 * time spent in each kernel class (and in the data loader) is
 * accumulated per rank. */
typedef enum mf_prof_class {
    MF_PROF_GEMM, MF_PROF_CONV, MF_PROF_ELEMENTWISE, MF_PROF_REDUCE,
    MF_PROF_NORM, MF_PROF_POOL, MF_PROF_OPTIM, MF_PROF_DATA, MF_PROF_ATTENTION, MF_PROF_OTHER, MF_PROF_COUNT
} mf_prof_class;
MF_API void mf_profile_enable(bool on);
MF_API bool mf_profile_enabled(void);
MF_API void mf_profile_reset(void);
/* Seconds accumulated in one class and the number of kernel calls. */
MF_API double mf_profile_seconds(mf_prof_class c, int64_t *calls);
/* Floating-point operations done in a class: GEMMs, convolutions and
 * fused attention count 2 per multiply-add (a convolution's taps on the
 * zero padding are not counted, as they multiply nothing; attention
 * counts its causal half), the other kernels their arithmetic per
 * element (doc/planning.md lists it). With mf_profile_seconds, the rate
 * a kernel class ran at inside training. */
MF_API double mf_profile_flops(mf_prof_class c);
/* Bytes the kernels of a class read and wrote (each operand once; a
 * broadcast operand its distinct elements), counted as mf_profile_flops. */
MF_API double mf_profile_bytes(mf_prof_class c);
MF_API const char *mf_profile_class_name(mf_prof_class c);
/* The backend kernel table (doc/extending.md): the name of kernel i
 * ("gemm", "attention_fwd", ...; i from 0, NULL past the last), and how
 * many times a kernel ran on a device type since start-up, always
 * counted (-1: no kernel of that name). The parity tests read it to
 * prove that a case ran the kernel it checks on the device it names. */
MF_API const char *mf_kernel_name(int i);
MF_API int64_t mf_kernel_calls(mf_device_type dev, const char *kernel);

/* Memory held by the caching allocator, in bytes. */
typedef struct mf_memory_stats {
    int64_t in_use;      /* bytes handed out now */
    int64_t peak;        /* highest in_use since start or reset */
    int64_t cached;      /* bytes kept for reuse */
    int64_t allocs;      /* allocation requests */
    int64_t hits;        /* requests served from the cache */
} mf_memory_stats;
MF_API void mf_memory_get_stats(mf_memory_stats *st);   /* host memory */
/* The caching allocator of one device (MF_DEV_CUDA: GPU memory). */
MF_API void mf_memory_get_stats_on(mf_device_type dev, mf_memory_stats *st);
MF_API void mf_memory_reset_peak(void);
/* Every device's allocator together: in_use and peak of the sum (host
 * and meta memory of a simulated CPU rank, which a real one holds in
 * one allocator); the other fields summed. */
MF_API void mf_memory_get_total_stats(mf_memory_stats *st);
/* What the bytes are for (doc/planning.md). Tensors by default:
 * parameters, gradients, optimizer state, activations and every
 * temporary; the rest are marked where they are made. */
typedef enum mf_memory_use {
    MF_MEM_TENSORS,      /* parameters, optimizer state, activations, temporaries */
    MF_MEM_ZERO_GATHER,  /* ZeRO-2/3 parameters gathered whole for a module's use */
    MF_MEM_COMM,         /* communication buffers: gradient buckets, ZeRO's, boxing's */
    MF_MEM_LOGITS,       /* the fused head and loss: logits chunks and their gradient */
    MF_MEM_GRADS,        /* parameters' gradients, from when backward hands them over */
    MF_MEM_USES
} mf_memory_use;
/* Every allocator together: the bytes requested for each use, and the
 * size classes' slack (the rest of in_use). */
typedef struct mf_memory_breakdown {
    int64_t bytes[MF_MEM_USES];
    int64_t slack;
} mf_memory_breakdown;
/* now, and at the moment of the peak since the last reset (either NULL) */
MF_API void mf_memory_get_breakdown(mf_memory_breakdown *now, mf_memory_breakdown *at_peak);
/* Marks this thread's tensors made from now on as for use u; returns
 * the use before, to restore. */
MF_API mf_memory_use mf_memory_use_begin(mf_memory_use u);
/* Give cached blocks back to the system. */
MF_API void mf_memory_empty_cache(void);
/* Caps the bytes a device's allocator hands out at once (cached blocks
 * count too, and are given back first), as a machine with that much
 * memory would: an allocation past it fails with MF_ERR_NOMEM and a
 * message that names the limit. 0: none (the default). MF_MEMORY_LIMIT
 * sets the host's at mf_init ("6G", "512M", "100000K" or bytes).
 * MF_ERR_ARG for a negative size or an unknown device. */
MF_API mf_status mf_memory_set_limit_on(mf_device_type dev, int64_t bytes);
MF_API int64_t mf_memory_limit_on(mf_device_type dev);

/* ---- the CPU engine: which library runs matrix products and
 * convolutions on the CPU (doc/cpu.md). oneDNN when it was built (it
 * JIT-compiles for the CPU it finds), OpenBLAS always. MF_CPU_ENGINE
 * (openblas|onednn) chooses at mf_init. Either gives results within the
 * tests' tolerances of the other, not bit for bit; at a fixed engine and
 * thread count every run gives the same bits. */
typedef enum mf_cpu_engine { MF_CPU_OPENBLAS, MF_CPU_ONEDNN } mf_cpu_engine;
MF_API bool mf_cpu_engine_available(mf_cpu_engine e);
/* MF_ERR_ARG when e is unknown or not in this build. */
MF_API mf_status mf_cpu_engine_set(mf_cpu_engine e);
MF_API mf_cpu_engine mf_cpu_engine_get(void);
MF_API const char *mf_cpu_engine_name(mf_cpu_engine e);   /* "openblas", "onednn" */
/* Whether bf16 autocast multiplies in bfloat16 on this CPU (AVX512_BF16
 * or AMX, through oneDNN). Without it autocast still rounds the operands
 * to bfloat16, but multiplies them in f32 and is no faster. */
MF_API bool mf_cpu_bf16_native(void);
/* One line: each op class's engine and instruction set, e.g. "gemm
 * onednn (avx512_core_bf16: brg:avx512_core), conv2d onednn (...),
 * pooling/norm/attention mpiflow OpenMP, bf16 native". */
MF_API const char *mf_cpu_engine_describe(char *buf, size_t size);

MF_API const char *mf_version(void);

#ifdef __cplusplus
}
#endif
#endif
