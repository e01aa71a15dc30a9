/*
 * lib/rng.c - the global seed, draw keys, sample-keyed indices and keyed
 * initialisation (doc/design.md, "Determinism").
 *
 * Each random tensor gets a 64-bit key. Keys are scoped by module: a
 * module's forward (mf_module_forward) takes the next key of its
 * parent's scope as its own scope, and the draws inside it (dropout,
 * rand, randn) are numbered 1, 2, ... within that scope. At the top
 * level the draws are counted by mf_rng_draws, which checkpoints save.
 * So layer c of a Sequential draws key(key(top, step's draw), c + 1)
 * whether the Sequential runs whole or cut into pipeline stages, and
 * every rank agrees because every rank runs the same program.
 *
 * Inside a key a value is picked by element index. The pipeline
 * executor declares which samples of the step's batch a micro-batch
 * holds (mfi_rng_set_rows), and dropout turns a global element index
 * into (sample, element within the sample), so masks follow samples,
 * not the way a batch is cut. Parameters use a hash of their dotted
 * name. Values then come from base/philox.h.
 */
#include "lib/internal.h"

static uint64_t global_seed = 0;
static uint64_t top_draws = 0;       /* draws at the top level (mf_rng_draws) */
static mfi_rng_scope cur = {0, 0, 0};   /* the scope draws are taken in now */
static mfi_rng_rows rows = {0, 0, 0, 0};

void mf_manual_seed(uint64_t seed)
{
    global_seed = seed;
    top_draws = 0;
    cur = (mfi_rng_scope){0, 0, 0};
}

uint64_t mf_seed(void) { return global_seed; }

uint64_t mf_rng_draws(void) { return top_draws; }
void mf_rng_set_draws(uint64_t n) { top_draws = n; }

/* splitmix64's finaliser: a bijection that mixes every bit */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t mfi_rng_key(uint64_t scope, uint64_t n)
{
    /* The top level spreads the draw number by an odd multiplier; name
     * keys are FNV-1a hashes, and a clash between any two is as unlikely
     * as any 64-bit collision. */
    return scope ? mix64(scope ^ mix64(n + 0x632be59bd9b4e019ull)) : 0x9e3779b97f4a7c15ull * n;
}

uint64_t mfi_rng_next_key(void)
{
    if (!cur.depth) return mfi_rng_key(0, ++top_draws);
    return mfi_rng_key(cur.key, ++cur.n);
}

mfi_rng_scope mfi_rng_enter(uint64_t key, uint64_t n)
{
    mfi_rng_scope saved = cur;
    cur = (mfi_rng_scope){key, n, saved.depth + 1};
    return saved;
}

void mfi_rng_leave(mfi_rng_scope saved) { cur = saved; }

mfi_rng_state mfi_rng_save(void) { return (mfi_rng_state){cur, top_draws, rows}; }

void mfi_rng_restore(const mfi_rng_state *s)
{
    cur = s->cur;
    top_draws = s->top;
    rows = s->rows;
}

void mfi_rng_set_rows(const mfi_rng_rows *r) { rows = r ? *r : (mfi_rng_rows){0, 0, 0, 0}; }
mfi_rng_rows mfi_rng_get_rows(void) { return rows; }

int64_t mfi_rng_sample_index(const mfi_rng_rows *r, int64_t numel, int64_t e)
{
    if (!r->nrows || numel % r->nrows) return e;   /* not one row per sample: by element */
    int64_t per = numel / r->nrows, row = e / per;
    int64_t sample = r->chunk ? r->base + row / r->chunk * r->stride + row % r->chunk : r->base + row;
    return sample * per + e % per;
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
