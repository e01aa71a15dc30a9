/*
 * base/ptrmap.c - a map from addresses to ints (base/ptrmap.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include "base/error.h"
#include "base/ptrmap.h"

static size_t slot_of(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    return (size_t)x & (cap - 1);
}

static bool grow(mfi_ptr_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 64;
    const void **key = calloc(cap, sizeof *key);
    int *val = calloc(cap, sizeof *val);
    if (!key || !val) {
        free(key);
        free(val);
        mfi_error(MF_ERR_NOMEM, "out of memory");
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->key[i]) continue;
        size_t h = slot_of(m->key[i], cap);
        while (key[h]) h = (h + 1) & (cap - 1);
        key[h] = m->key[i];
        val[h] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
    return true;
}

int *mfi_ptr_map_at(mfi_ptr_map *m, const void *key, bool add)
{
    if (add && 2 * (m->n + 1) > m->cap && !grow(m)) return NULL;
    if (!m->cap) return NULL;
    size_t h = slot_of(key, m->cap);
    while (m->key[h] && m->key[h] != key) h = (h + 1) & (m->cap - 1);
    if (!m->key[h]) {
        if (!add) return NULL;
        m->key[h] = key;
        m->val[h] = 0;
        m->n++;
    }
    return &m->val[h];
}

bool mfi_ptr_map_remove(mfi_ptr_map *m, const void *key)
{
    if (!m->n) return false;
    size_t mask = m->cap - 1, h = slot_of(key, m->cap);
    while (m->key[h] && m->key[h] != key) h = (h + 1) & mask;
    if (!m->key[h]) return false;
    /* backward shift: move up each later key of the run whose home slot
     * is not between the hole and it, so no probe meets a gap early */
    for (size_t j = (h + 1) & mask; m->key[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->key[j], m->cap);
        bool stays = h <= j ? (h < home && home <= j) : (h < home || home <= j);
        if (stays) continue;
        m->key[h] = m->key[j];
        m->val[h] = m->val[j];
        h = j;
    }
    m->key[h] = NULL;
    m->val[h] = 0;
    m->n--;
    return true;
}

void mfi_ptr_map_free(mfi_ptr_map *m)
{
    free(m->key);
    free(m->val);
    *m = (mfi_ptr_map){0};
}
