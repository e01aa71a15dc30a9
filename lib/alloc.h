/*
 * lib/alloc.h - the caching allocator, for backends' workspaces too.
 */
#ifndef MPIFLOW_LIB_ALLOC_H
#define MPIFLOW_LIB_ALLOC_H

#include <stddef.h>

void *mfi_alloc(size_t nbytes);            /* 64-byte aligned, cached */
void mfi_free(void *p, size_t nbytes);     /* nbytes as passed to mfi_alloc */
void mfi_alloc_shutdown(void);

#endif
