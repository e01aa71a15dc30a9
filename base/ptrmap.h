/*
 * base/ptrmap.h - a map from addresses to ints (not installed): open
 * addressing, at most half full, growing by doubling. The backward's
 * pending counts per leaf, each optimizer's leaf-to-parameter index and
 * the global layer's set of synced gradients use it.
 */
#ifndef MPIFLOW_BASE_PTRMAP_H
#define MPIFLOW_BASE_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mfi_ptr_map {
    const void **key;
    int *val;
    size_t cap, n;   /* cap: a power of two, or 0 */
} mfi_ptr_map;

/* The value of key; when absent, NULL, or with add a new value 0 (NULL
 * with an MF_ERR_NOMEM error when memory runs out). */
int *mfi_ptr_map_at(mfi_ptr_map *m, const void *key, bool add);
/* Drops key; false when it was absent. */
bool mfi_ptr_map_remove(mfi_ptr_map *m, const void *key);
void mfi_ptr_map_free(mfi_ptr_map *m);

#endif
