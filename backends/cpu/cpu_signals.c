/*
 * backends/cpu/cpu_signals.c - no signal handler runs on a thread while
 * it executes oneDNN's generated code.
 *
 * oneDNN 2.x's generated f32 GEMM kernels (dnnl_sgemm, and the "gemm:jit"
 * matmul and convolution implementations it falls back to without
 * AVX-512) point the stack pointer into a heap buffer while they run. A
 * signal delivered then makes the kernel write the handler's frame into
 * that buffer's neighbours: the heap is corrupted, and the process
 * aborts later in free() (seen as "corrupted size vs. prev_size" when
 * SIGUSR1 asked mpiflow-train to checkpoint and stop, or with any
 * profiler's timer signal). So:
 *   - the threads of the OpenMP pool block asynchronous signals for good
 *     (mpiflow's compute threads; signals go to the main thread or to
 *     the other threads of the process);
 *   - the calling thread blocks them for the length of each oneDNN call,
 *     and they are delivered as soon as it returns.
 * Synchronous signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT) stay
 * open, so a fault is still reported where it happens (doc/cpu.md).
 */
#include <signal.h>
#include <pthread.h>
#include "backends/cpu/cpu_engine.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static void async_set(sigset_t *s)
{
    sigfillset(s);
    const int sync[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
    for (size_t i = 0; i < sizeof sync / sizeof *sync; i++) sigdelset(s, sync[i]);
}

void mfi_signals_block(sigset_t *old)
{
    sigset_t s;
    async_set(&s);
    pthread_sigmask(SIG_BLOCK, &s, old);
}

void mfi_signals_restore(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

void mfi_signals_pool(int n)
{
#ifdef _OPENMP
    sigset_t s;
    async_set(&s);
#pragma omp parallel num_threads(n)
    if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, &s, NULL);
#else
    (void)n;
#endif
}
