/*
 * lib/io/loader.c - batches through a global permutation fixed by
 * (seed, epoch) (DESIGN.md section 5).
 *
 * The permutation sorts sample indices by a 64-bit Philox key of
 * (seed, epoch, index), so it is the same on every rank and needs no
 * communication. Pixels are scaled to [0, 1] and normalised with
 * (x - mean) / std through a 256-entry table.
 */
#include "lib/internal.h"
#include "lib/rng.h"

struct mf_loader {
    const mf_dataset *ds;
    mf_loader_opts o;
    int64_t epoch, cursor;
    int64_t *perm;
    int64_t perm_epoch;
    float lut[256];
};

typedef struct keyed { uint64_t key; int64_t idx; } keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static mf_status build_perm(mf_loader *l, int64_t epoch)
{
    if (l->perm_epoch == epoch) return MF_OK;
    int64_t n = mf_dataset_size(l->ds);
    if (!l->o.shuffle) {
        for (int64_t i = 0; i < n; i++) l->perm[i] = i;
        l->perm_epoch = epoch;
        return MF_OK;
    }
    keyed *k = malloc((size_t)(n ? n : 1) * sizeof *k);
    if (!k) MF_FAIL(MF_ERR_NOMEM, "loader: out of memory for the permutation of %lld samples", (long long)n);
    uint64_t key = mfi_hash_str("loader/permutation") + (uint64_t)epoch;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        mfi_philox4(l->o.seed, key, (uint64_t)i, w);
        k[i].key = (uint64_t)w[0] << 32 | w[1];
        k[i].idx = i;
    }
    qsort(k, (size_t)n, sizeof *k, by_key);
    for (int64_t i = 0; i < n; i++) l->perm[i] = k[i].idx;
    free(k);
    l->perm_epoch = epoch;
    return MF_OK;
}

mf_loader *mf_loader_create(const mf_dataset *ds, const mf_loader_opts *o)
{
    if (!ds || !o) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: dataset or options are NULL");
        return NULL;
    }
    int64_t n = mf_dataset_size(ds);
    if (o->batch_size < 1) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: batch size %lld must be >= 1", (long long)o->batch_size);
        return NULL;
    }
    if (o->drop_last && n < o->batch_size) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: the dataset has %lld samples, fewer than one batch of %lld",
                  (long long)n, (long long)o->batch_size);
        return NULL;
    }
    if (!(o->std > 0)) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: std %g must be > 0", o->std);
        return NULL;
    }
    mf_loader *l = calloc(1, sizeof *l);
    if (!l || !(l->perm = malloc((size_t)(n ? n : 1) * sizeof *l->perm))) {
        free(l);
        mfi_error(MF_ERR_NOMEM, "mf_loader_create: out of memory");
        return NULL;
    }
    l->ds = ds;
    l->o = *o;
    l->perm_epoch = -1;
    for (int i = 0; i < 256; i++) l->lut[i] = (float)((i / 255.0 - o->mean) / o->std);
    return l;
}

void mf_loader_destroy(mf_loader *l)
{
    if (!l) return;
    free(l->perm);
    free(l);
}

int64_t mf_loader_batches_per_epoch(const mf_loader *l)
{
    int64_t n = mf_dataset_size(l->ds), b = l->o.batch_size;
    return l->o.drop_last ? n / b : (n + b - 1) / b;
}

static void normalize_epoch(mf_loader *l)
{
    int64_t n = mf_dataset_size(l->ds);
    if (l->cursor >= n || (l->o.drop_last && n - l->cursor < l->o.batch_size)) {
        l->epoch++;
        l->cursor = 0;
    }
}

int64_t mf_loader_epoch(const mf_loader *l) { return l->epoch; }
int64_t mf_loader_cursor(const mf_loader *l) { return l->cursor; }

mf_status mf_loader_seek(mf_loader *l, int64_t epoch, int64_t cursor)
{
    if (epoch < 0 || cursor < 0 || cursor > mf_dataset_size(l->ds))
        MF_FAIL(MF_ERR_ARG, "mf_loader_seek: epoch %lld, cursor %lld is outside the dataset of %lld samples",
                (long long)epoch, (long long)cursor, (long long)mf_dataset_size(l->ds));
    l->epoch = epoch;
    l->cursor = cursor;
    return MF_OK;
}

int64_t mf_loader_sample_index(const mf_loader *l, int64_t epoch, int64_t pos)
{
    mf_loader *m = (mf_loader *)l;
    if (pos < 0 || pos >= mf_dataset_size(l->ds) || build_perm(m, epoch) != MF_OK) return -1;
    return m->perm[pos];
}

mf_status mf_loader_next(mf_loader *l, mf_tensor **x, mf_tensor **y)
{
    *x = *y = NULL;
    normalize_epoch(l);
    MF_TRY(build_perm(l, l->epoch));
    int64_t n = mf_dataset_size(l->ds), b = l->o.batch_size;
    if (b > n - l->cursor) b = n - l->cursor;
    int64_t shape[3];
    mf_dataset_sample_shape(l->ds, shape);
    int64_t d = shape[0] * shape[1] * shape[2];
    mf_tensor *tx = mf_empty(MF_F32, MF_DIMS(b, shape[0], shape[1], shape[2]));
    mf_tensor *ty = mf_empty(MF_I64, MF_DIMS(b));
    if (!tx || !ty) {
        mf_tensor_destroy(tx);
        mf_tensor_destroy(ty);
        return mf_last_status();
    }
    float *px = mf_tensor_data(tx);
    int64_t *py = mf_tensor_data(ty);
    const uint8_t *pixels = mfi_dataset_pixels(l->ds);
    const int64_t *labels = mfi_dataset_labels(l->ds);
    for (int64_t i = 0; i < b; i++) {
        int64_t s = l->perm[l->cursor + i];
        const uint8_t *src = pixels + s * d;
        float *dst = px + i * d;
        for (int64_t j = 0; j < d; j++) dst[j] = l->lut[src[j]];
        py[i] = labels[s];
    }
    l->cursor += b;
    *x = tx;
    *y = ty;
    return MF_OK;
}
