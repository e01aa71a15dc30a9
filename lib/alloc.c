/*
 * lib/alloc.c - the caching allocator behind every tensor storage.
 *
 * glibc serves large mallocs with fresh mmaps, so an eager framework
 * that allocates each activation every step would fault its pages in
 * again and again (DESIGN.md section 2). Freed blocks are kept here in
 * size classes (four per power of two, so at most 25 % slack) and handed
 * out again. mf_memory_empty_cache returns them to the system.
 */
#include <pthread.h>
#include "lib/internal.h"

#define ALIGN 64
#define MIN_CLASS_BYTES 256
#define NCLASSES (64 * 4)

typedef struct block { struct block *next; } block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *free_list[NCLASSES];
static mf_memory_stats stats;

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

void *mfi_alloc(size_t nbytes)
{
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    void *p = NULL;
    pthread_mutex_lock(&lock);
    stats.allocs++;
    if (free_list[c]) {
        block *b = free_list[c];
        free_list[c] = b->next;
        stats.cached -= (int64_t)rounded;
        stats.hits++;
        p = b;
    }
    pthread_mutex_unlock(&lock);
    if (!p && posix_memalign(&p, ALIGN, rounded) != 0) {
        /* Give the cache back and try once more before failing. */
        mf_memory_empty_cache();
        if (posix_memalign(&p, ALIGN, rounded) != 0) return NULL;
    }
    pthread_mutex_lock(&lock);
    stats.in_use += (int64_t)rounded;
    if (stats.in_use > stats.peak) stats.peak = stats.in_use;
    pthread_mutex_unlock(&lock);
    return p;
}

void mfi_free(void *p, size_t nbytes)
{
    if (!p) return;
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    block *b = p;
    pthread_mutex_lock(&lock);
    b->next = free_list[c];
    free_list[c] = b;
    stats.in_use -= (int64_t)rounded;
    stats.cached += (int64_t)rounded;
    pthread_mutex_unlock(&lock);
}

void mf_memory_empty_cache(void)
{
    pthread_mutex_lock(&lock);
    for (int c = 0; c < NCLASSES; c++) {
        block *b = free_list[c];
        while (b) {
            block *next = b->next;
            free(b);
            b = next;
        }
        free_list[c] = NULL;
    }
    stats.cached = 0;
    pthread_mutex_unlock(&lock);
}

void mfi_alloc_shutdown(void) { mf_memory_empty_cache(); }

void mf_memory_get_stats(mf_memory_stats *st)
{
    pthread_mutex_lock(&lock);
    *st = stats;
    pthread_mutex_unlock(&lock);
}

void mf_memory_reset_peak(void)
{
    pthread_mutex_lock(&lock);
    stats.peak = stats.in_use;
    pthread_mutex_unlock(&lock);
}
