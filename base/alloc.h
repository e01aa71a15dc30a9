/*
 * base/alloc.h - the caching allocator, one arena per device, for
 * backends' workspaces too.
 */
#ifndef MPIFLOW_BASE_ALLOC_H
#define MPIFLOW_BASE_ALLOC_H

#include <stddef.h>
#include "mpiflow/runtime.h"
#include "mpiflow/tensor.h"

void *mfi_alloc(size_t nbytes);            /* host, 64-byte aligned, cached */
void mfi_free(void *p, size_t nbytes);     /* nbytes as passed to mfi_alloc */

/* A device's arena: raw_alloc/raw_free are its uncached calls (cudaMalloc);
 * raw_alloc returns NULL when the device is out of memory. */
typedef struct mfi_arena_ops {
    void *(*raw_alloc)(size_t nbytes);
    void (*raw_free)(void *p);
} mfi_arena_ops;
/* Registers dev's raw calls (the CPU's are built in). */
void mfi_arena_register(mf_device_type dev, const mfi_arena_ops *ops);
void *mfi_alloc_on(mf_device_type dev, size_t nbytes);
void mfi_free_on(mf_device_type dev, void *p, size_t nbytes);
/* The same for a use (mf_memory_use; the ones above: MF_MEM_TENSORS),
 * freed with the use it was allocated for. */
void *mfi_alloc_use(mf_device_type dev, size_t nbytes, int use);
void mfi_free_use(mf_device_type dev, void *p, size_t nbytes, int use);
/* nbytes (as allocated) handed over from use `from` to use `to`: a
 * block that turned out to be for another use, as a gradient. */
void mfi_alloc_retag(size_t nbytes, int from, int to);
/* This thread's use for the tensors it makes (mf_memory_use_begin). */
int mfi_memory_use_now(void);
void mfi_empty_cache_on(mf_device_type dev);
void mfi_alloc_shutdown(void);

#endif
