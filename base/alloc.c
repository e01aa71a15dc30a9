/*
 * base/alloc.c - the caching allocator behind every tensor storage, one
 * arena per device.
 *
 * glibc serves large mallocs with fresh mmaps, so an eager framework
 * that allocates each activation every step would fault its pages in
 * again and again (doc/design.md section 2); on a GPU, cudaMalloc and
 * cudaFree synchronise the device. Freed blocks are kept in size classes
 * (four per power of two, so at most 25 % slack) and handed out again.
 * The free lists live on the host (a device block cannot hold a link),
 * in nodes that are recycled. mf_memory_empty_cache returns the blocks
 * to the system. A limit (mf_memory_set_limit, MF_MEMORY_LIMIT) caps the
 * bytes handed out at once, as a smaller machine would: a request past
 * it first gives the cache back, then fails as an allocation does when
 * the system has no memory left.
 *
 * A device block freed here may be handed out again at once: kernels
 * run in order on one compute stream, so a later kernel cannot overtake
 * an earlier one still reading the block. Copies on the communication
 * stream wait for their own completion before returning (see
 * backends/cuda), so they never hold a freed block either.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/alloc.h"

#define ALIGN 64
#define MIN_CLASS_BYTES 256
#define NCLASSES (64 * 4)
#define NDEV 3   /* cpu, cuda, meta */

typedef struct node { void *p; struct node *next; } node;

typedef struct arena {
    mfi_arena_ops ops;
    bool ready;
    node *free_list[NCLASSES];
    mf_memory_stats stats;
    int64_t limit;       /* the most bytes handed out at once; 0: no limit */
} arena;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static arena arenas[NDEV];
static int64_t total_in_use, total_peak;   /* every arena together */
/* the bytes requested per use now, and at the total peak */
static int64_t use_now[MF_MEM_USES], use_peak[MF_MEM_USES], slack_peak;
static _Thread_local int use_of_thread;
static node *spare;   /* recycled list nodes */

static void *host_raw_alloc(size_t n)
{
    void *p = NULL;
    return posix_memalign(&p, ALIGN, n) == 0 ? p : NULL;
}

static void host_raw_free(void *p) { free(p); }

/* The arena of dev, with the host's set up on first use (lock held). */
static arena *arena_of(mf_device_type dev)
{
    if ((unsigned)dev >= NDEV) return NULL;
    arena *a = &arenas[dev];
    if (!a->ready && dev == MF_DEV_CPU) {
        a->ops.raw_alloc = host_raw_alloc;
        a->ops.raw_free = host_raw_free;
        a->ready = true;
    }
    return a->ready ? a : NULL;
}

void mfi_arena_register(mf_device_type dev, const mfi_arena_ops *ops)
{
    if ((unsigned)dev >= NDEV || dev == MF_DEV_CPU) return;
    pthread_mutex_lock(&lock);
    arenas[dev].ops = *ops;
    arenas[dev].ready = true;
    pthread_mutex_unlock(&lock);
}

/* Class index and the rounded size for a request. */
static int size_class(size_t n, size_t *rounded)
{
    if (n < MIN_CLASS_BYTES) n = MIN_CLASS_BYTES;
    int k = 63 - __builtin_clzll((unsigned long long)n);   /* 2^k <= n */
    size_t base = (size_t)1 << k;
    size_t quarter = base >> 2;
    int sub = 0;
    size_t r = base;
    while (r < n) {
        r += quarter;
        sub++;
    }
    if (sub == 4) {      /* rounded up to the next power of two */
        k++;
        sub = 0;
    }
    *rounded = r;
    return k * 4 + sub;
}

/* Frees every cached block of a (lock held by the caller). */
static void drain(arena *a)
{
    for (int c = 0; c < NCLASSES; c++) {
        node *b = a->free_list[c];
        while (b) {
            node *next = b->next;
            a->ops.raw_free(b->p);
            b->next = spare;
            spare = b;
            b = next;
        }
        a->free_list[c] = NULL;
    }
    a->stats.cached = 0;
}

static void note_peak(void)   /* lock held */
{
    if (total_in_use <= total_peak) return;
    total_peak = total_in_use;
    int64_t req = 0;
    for (int u = 0; u < MF_MEM_USES; u++) req += use_peak[u] = use_now[u];
    slack_peak = total_peak - req;
}

void *mfi_alloc_on(mf_device_type dev, size_t nbytes) { return mfi_alloc_use(dev, nbytes, MF_MEM_TENSORS); }

void *mfi_alloc_use(mf_device_type dev, size_t nbytes, int use)
{
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    void *p = NULL;
    pthread_mutex_lock(&lock);
    arena *a = arena_of(dev);
    if (!a) {
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    a->stats.allocs++;
    node *b = a->free_list[c];
    if (b) {
        a->free_list[c] = b->next;
        p = b->p;
        b->next = spare;
        spare = b;
        a->stats.cached -= (int64_t)rounded;
        a->stats.hits++;
    }
    mfi_arena_ops ops = a->ops;
    bool over = !p && a->limit && a->stats.in_use + a->stats.cached + (int64_t)rounded > a->limit;
    bool refuse = !p && a->limit && a->stats.in_use + (int64_t)rounded > a->limit;
    pthread_mutex_unlock(&lock);
    if (refuse) return NULL;
    if (over) mfi_empty_cache_on(dev);   /* what is cached counts against the limit too */
    if (!p && !(p = ops.raw_alloc(rounded))) {
        /* Give the cache back and try once more before failing. */
        mfi_empty_cache_on(dev);
        if (!(p = ops.raw_alloc(rounded))) return NULL;
    }
    pthread_mutex_lock(&lock);
    a->stats.in_use += (int64_t)rounded;
    if (a->stats.in_use > a->stats.peak) a->stats.peak = a->stats.in_use;
    total_in_use += (int64_t)rounded;
    use_now[(unsigned)use < MF_MEM_USES ? use : 0] += (int64_t)nbytes;
    note_peak();
    pthread_mutex_unlock(&lock);
    return p;
}

void mfi_free_on(mf_device_type dev, void *p, size_t nbytes) { mfi_free_use(dev, p, nbytes, MF_MEM_TENSORS); }

void mfi_free_use(mf_device_type dev, void *p, size_t nbytes, int use)
{
    if (!p) return;
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    pthread_mutex_lock(&lock);
    arena *a = arena_of(dev);
    node *b = spare;
    if (b) spare = b->next;
    else b = malloc(sizeof *b);
    if (!a) {   /* cannot happen: the block came from this arena */
        free(b);
        pthread_mutex_unlock(&lock);
        return;
    }
    a->stats.in_use -= (int64_t)rounded;
    total_in_use -= (int64_t)rounded;
    use_now[(unsigned)use < MF_MEM_USES ? use : 0] -= (int64_t)nbytes;
    if (!b) {   /* no memory for the link: give the block back instead */
        pthread_mutex_unlock(&lock);
        a->ops.raw_free(p);
        return;
    }
    b->p = p;
    b->next = a->free_list[c];
    a->free_list[c] = b;
    a->stats.cached += (int64_t)rounded;
    pthread_mutex_unlock(&lock);
}

void mfi_alloc_retag(size_t nbytes, int from, int to)
{
    if ((unsigned)from >= MF_MEM_USES || (unsigned)to >= MF_MEM_USES || from == to) return;
    pthread_mutex_lock(&lock);
    use_now[from] -= (int64_t)nbytes;
    use_now[to] += (int64_t)nbytes;
    pthread_mutex_unlock(&lock);
}

void *mfi_alloc(size_t nbytes) { return mfi_alloc_on(MF_DEV_CPU, nbytes); }
void mfi_free(void *p, size_t nbytes) { mfi_free_on(MF_DEV_CPU, p, nbytes); }

void mfi_empty_cache_on(mf_device_type dev)
{
    pthread_mutex_lock(&lock);
    arena *a = arena_of(dev);
    if (a) drain(a);
    pthread_mutex_unlock(&lock);
}

void mf_memory_empty_cache(void)
{
    for (int d = 0; d < NDEV; d++) mfi_empty_cache_on((mf_device_type)d);
}

void mfi_alloc_shutdown(void)
{
    mf_memory_empty_cache();
    pthread_mutex_lock(&lock);
    while (spare) {
        node *next = spare->next;
        free(spare);
        spare = next;
    }
    pthread_mutex_unlock(&lock);
}

void mf_memory_get_stats_on(mf_device_type dev, mf_memory_stats *st)
{
    pthread_mutex_lock(&lock);
    arena *a = arena_of(dev);
    if (a) *st = a->stats;
    else memset(st, 0, sizeof *st);
    pthread_mutex_unlock(&lock);
}

void mf_memory_get_stats(mf_memory_stats *st) { mf_memory_get_stats_on(MF_DEV_CPU, st); }

void mf_memory_reset_peak(void)
{
    pthread_mutex_lock(&lock);
    for (int d = 0; d < NDEV; d++) arenas[d].stats.peak = arenas[d].stats.in_use;
    total_peak = total_in_use;
    int64_t req = 0;
    for (int u = 0; u < MF_MEM_USES; u++) req += use_peak[u] = use_now[u];
    slack_peak = total_peak - req;
    pthread_mutex_unlock(&lock);
}

void mf_memory_get_breakdown(mf_memory_breakdown *now, mf_memory_breakdown *at_peak)
{
    pthread_mutex_lock(&lock);
    if (now) {
        memcpy(now->bytes, use_now, sizeof use_now);
        now->slack = total_in_use;
        for (int u = 0; u < MF_MEM_USES; u++) now->slack -= use_now[u];
    }
    if (at_peak) {
        memcpy(at_peak->bytes, use_peak, sizeof use_peak);
        at_peak->slack = slack_peak;
    }
    pthread_mutex_unlock(&lock);
}

mf_memory_use mf_memory_use_begin(mf_memory_use u)
{
    int was = use_of_thread;
    use_of_thread = (unsigned)u < MF_MEM_USES ? (int)u : MF_MEM_TENSORS;
    return (mf_memory_use)was;
}

int mfi_memory_use_now(void) { return use_of_thread; }

void mf_memory_get_total_stats(mf_memory_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&lock);
    for (int d = 0; d < NDEV; d++) {
        st->cached += arenas[d].stats.cached;
        st->allocs += arenas[d].stats.allocs;
        st->hits += arenas[d].stats.hits;
    }
    st->in_use = total_in_use;
    st->peak = total_peak;
    pthread_mutex_unlock(&lock);
}

mf_status mf_memory_set_limit_on(mf_device_type dev, int64_t bytes)
{
    if ((unsigned)dev >= NDEV || bytes < 0) return MF_ERR_ARG;
    pthread_mutex_lock(&lock);
    arenas[dev].limit = bytes;
    pthread_mutex_unlock(&lock);
    return MF_OK;
}

int64_t mf_memory_limit_on(mf_device_type dev)
{
    if ((unsigned)dev >= NDEV) return 0;
    pthread_mutex_lock(&lock);
    int64_t l = arenas[dev].limit;
    pthread_mutex_unlock(&lock);
    return l;
}
