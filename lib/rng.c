/*
 * lib/rng.c - the global seed, draw keys and keyed initialisation.
 *
 * Each random tensor gets a 64-bit key: rand/randn/dropout take the next
 * draw number of the global generator (reset by mf_manual_seed, and the
 * same on every rank because every rank runs the same program);
 * parameters use a hash of their dotted name. Values then come from
 * lib/rng.h by element index.
 */
#include "lib/internal.h"

static uint64_t global_seed = 0;
static uint64_t draw_counter = 0;

void mf_manual_seed(uint64_t seed)
{
    global_seed = seed;
    draw_counter = 0;
}

uint64_t mf_seed(void) { return global_seed; }

uint64_t mf_rng_draws(void) { return draw_counter; }
void mf_rng_set_draws(uint64_t n) { draw_counter = n; }

uint64_t mfi_rng_next_key(void)
{
    /* Spread by an odd multiplier; name keys are FNV-1a hashes, and a
     * clash between the two is as unlikely as any 64-bit collision. */
    return 0x9e3779b97f4a7c15ull * ++draw_counter;
}

uint64_t mfi_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static mf_status keyed_fill(const char *fn, mf_tensor *t, mfi_dist d, double a, double b, uint64_t seed,
                            const char *key)
{
    if (!t) MF_FAIL(MF_ERR_ARG, "%s: tensor is NULL", fn);
    if (t->global) return mfi_global_inplace(MFI_IP_KEYED, t, NULL, 0);
    if (!mf_dtype_is_float(t->dtype))
        MF_FAIL(MF_ERR_DTYPE, "%s: '%s' is %s, not a float dtype", fn, mf_tensor_name(t), mf_dtype_name(t->dtype));
    if (!mf_tensor_is_contiguous(t)) MF_FAIL(MF_ERR_ARG, "%s: '%s' is not contiguous", fn, mf_tensor_name(t));
    mfi_view v = mfi_view_of(t);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_OTHER, mfi_backend_of(t), philox_fill, &v, d, a, b, seed, mfi_hash_str(key), 0);
    if (st == MF_OK) mfi_bump_version(t);
    return st;
}

mf_status mf_uniform_keyed_(mf_tensor *t, double lo, double hi, uint64_t seed, const char *key)
{
    return keyed_fill("mf_uniform_keyed_", t, MFI_DIST_UNIFORM, lo, hi, seed, key);
}

mf_status mf_normal_keyed_(mf_tensor *t, double mean, double std, uint64_t seed, const char *key)
{
    return keyed_fill("mf_normal_keyed_", t, MFI_DIST_NORMAL, mean, std, seed, key);
}
