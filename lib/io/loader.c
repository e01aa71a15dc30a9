/*
 * lib/io/loader.c - batches through a global permutation fixed by
 * (seed, epoch) (doc/design.md section 5): images with labels, or token
 * windows (lib/io/tokens.c).
 *
 * The permutation sorts sample indices by a 64-bit Philox key of
 * (seed, epoch, index), so it is the same on every rank and needs no
 * communication. Pixels are scaled to [0, 1] and normalised with
 * (x - mean) / std as one multiply-add per pixel (vectorised; a lookup
 * table was 5x slower, being a gather).
 *
 * With opts.prefetch a helper thread assembles the next batch while the
 * caller computes (like PyTorch's DataLoader workers). It produces
 * exactly the batch the caller would have made, so results do not
 * change; it only moves the work off the critical path.
 */
#include <pthread.h>
#include <stdio.h>
#include "lib/global/global_internal.h"
#include "base/clones.h"
#include "base/philox.h"

typedef struct batch {
    int64_t epoch, cursor;   /* the position it was made for */
    mf_tensor *x, *y;
    mf_status st;
    char err[512];
} batch;

struct mf_loader {
    const mf_dataset *ds;
    mf_loader_opts o;
    int64_t epoch, cursor;
    int64_t last_rows;       /* rows of the whole batch last returned */
    int64_t *perm;
    int64_t perm_epoch;
    float scale, shift;      /* x = pixel * scale + shift */
    /* prefetch */
    bool threaded, pending, ready, stop;
    batch slot;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct keyed { uint64_t key; int64_t idx; } keyed;

/* Sorts by key, ties in index order, as a least-significant-digit radix
 * sort: six stable passes of 11 bits each over the 64-bit keys (tmp holds
 * n more). Linear in n where qsort's comparisons cost a measurable share
 * of a small model's step once per epoch. */
static void sort_keyed(keyed *k, keyed *tmp, int64_t n)
{
    enum { BITS = 11, BUCKETS = 1 << BITS };
    int64_t count[BUCKETS];
    keyed *from = k, *to = tmp;
    for (int shift = 0; shift < 64; shift += BITS) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[from[i].key >> shift & (BUCKETS - 1)]++;
        for (int64_t b = 0, at = 0; b < BUCKETS; b++) {
            int64_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) to[count[from[i].key >> shift & (BUCKETS - 1)]++] = from[i];
        keyed *t = from;
        from = to;
        to = t;
    }
    /* six passes: the result is back in k */
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
    keyed *k = malloc((size_t)(n ? 2 * n : 1) * sizeof *k);
    if (!k) MF_FAIL(MF_ERR_NOMEM, "loader: out of memory for the permutation of %lld samples", (long long)n);
    uint64_t key = mfi_hash_str("loader/permutation") + (uint64_t)epoch;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        mfi_philox4(l->o.seed, key, (uint64_t)i, w);
        k[i].key = (uint64_t)w[0] << 32 | w[1];
        k[i].idx = i;
    }
    sort_keyed(k, k + n, n);
    for (int64_t i = 0; i < n; i++) l->perm[i] = k[i].idx;
    free(k);
    l->perm_epoch = epoch;
    return MF_OK;
}

/* (epoch, cursor) moved past a finished epoch. */
static void normalize(const mf_loader *l, int64_t *epoch, int64_t *cursor)
{
    int64_t n = mf_dataset_size(l->ds);
    if (*cursor >= n || (l->o.drop_last && n - *cursor < l->o.batch_size)) {
        (*epoch)++;
        *cursor = 0;
    }
}

/* Token windows: x [rows, T] the first T tokens of each window, y the
 * T after them, in the order of the image rows below. */
static mf_status make_windows(mf_loader *l, const uint16_t *tokens, int M, const int64_t *seg_start,
                              const int64_t *seg_len, int64_t rows, mf_tensor **x, mf_tensor **y)
{
    const int64_t T = mf_dataset_seq_len(l->ds);
    mf_tensor *tx = mfi_tensor_new_on(MF_DEV_CPU, MF_I64, MF_DIMS(rows, T));
    mf_tensor *ty = mfi_tensor_new_on(MF_DEV_CPU, MF_I64, MF_DIMS(rows, T));
    if (!tx || !ty) {
        mf_tensor_destroy(tx);
        mf_tensor_destroy(ty);
        return mf_last_status();
    }
    int64_t *px = mf_tensor_data(tx), *py = mf_tensor_data(ty);
    for (int m = 0, r = 0; m < M; m++)
        for (int64_t i = 0; i < seg_len[m]; i++, r++) {
            const uint16_t *w = tokens + l->perm[seg_start[m] + i] * T;
            for (int64_t j = 0; j < T; j++) {
                px[r * T + j] = w[j];
                py[r * T + j] = w[j + 1];
            }
        }
    *x = tx;
    *y = ty;
    return MF_OK;
}

/* The batch at (epoch, cursor), already normalized. par: use OpenMP
 * (not from the helper thread, which would start a second team). */
/* one image row: pixels to floats, x = pixel * scale + shift */
CPU_CLONES static void pixels_to_f32(float *restrict dst, const uint8_t *restrict src, int64_t d, float scale,
                                     float shift)
{
    for (int64_t j = 0; j < d; j++) dst[j] = (float)src[j] * scale + shift;
}

static mf_status make_batch(mf_loader *l, int64_t epoch, int64_t cursor, bool par, mf_tensor **x, mf_tensor **y)
{
    *x = *y = NULL;
    MF_TRY(build_perm(l, epoch));
    int64_t n = mf_dataset_size(l->ds), b = l->o.batch_size;
    if (b > n - cursor) b = n - cursor;
    /* this rank's rows: for each micro-batch (balanced pieces of the
     * batch), its shard of that micro-batch's rows */
    int M = l->o.micro_batches > 1 ? l->o.micro_batches : 1, S = l->o.shard_count > 1 ? l->o.shard_count : 1;
    int k = S > 1 ? l->o.shard_index : 0;
    int64_t seg_start[MF_LOADER_MAX_MICRO], seg_len[MF_LOADER_MAX_MICRO], rows = 0;
    for (int m = 0; m < M; m++) {
        int64_t ms, mb, ks, kb;
        mfi_split(b, M, m, &ms, &mb);
        mfi_split(mb, S, k, &ks, &kb);
        seg_start[m] = cursor + ms + ks;
        seg_len[m] = kb;
        rows += kb;
    }
    const uint16_t *tokens = mfi_dataset_tokens(l->ds);
    if (tokens) return make_windows(l, tokens, M, seg_start, seg_len, rows, x, y);
    int64_t shape[3];
    mf_dataset_sample_shape(l->ds, shape);
    int64_t d = shape[0] * shape[1] * shape[2];
    mf_tensor *tx = mfi_tensor_new_on(MF_DEV_CPU, MF_F32, MF_DIMS(rows, shape[0], shape[1], shape[2]));
    mf_tensor *ty = mfi_tensor_new_on(MF_DEV_CPU, MF_I64, MF_DIMS(rows));
    if (!tx || !ty) {
        mf_tensor_destroy(tx);
        mf_tensor_destroy(ty);
        return mf_last_status();
    }
    float *px = mf_tensor_data(tx);
    int64_t *py = mf_tensor_data(ty);
    const uint8_t *pixels = mfi_dataset_pixels(l->ds);
    const int64_t *labels = mfi_dataset_labels(l->ds);
    const float scale = l->scale, shift = l->shift;
    for (int m = 0, row0 = 0; m < M; row0 += (int)seg_len[m], m++) {
        const int64_t *perm = l->perm + seg_start[m], cnt = seg_len[m];
        float *pxm = px + (int64_t)row0 * d;
        int64_t *pym = py + row0;
        #pragma omp parallel for if (par && cnt * d >= 65536) schedule(static)
        for (int64_t i = 0; i < cnt; i++) {
            /* the rows are random ones of a dataset far larger than the
             * caches: fetch a few rows ahead, or each row waits on memory */
            if (i + 4 < cnt) {
                const uint8_t *ahead = pixels + perm[i + 4] * d;
                for (int64_t j = 0; j < d; j += 64) __builtin_prefetch(ahead + j);
                __builtin_prefetch(ahead + d - 1);
                __builtin_prefetch(labels + perm[i + 4]);
            }
            pixels_to_f32(pxm + i * d, pixels + perm[i] * d, d, scale, shift);
            pym[i] = labels[perm[i]];
        }
    }
    *x = tx;
    *y = ty;
    return MF_OK;
}

static void *worker_main(void *arg)
{
    mf_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->pending && !l->stop) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        batch *s = &l->slot;
        pthread_mutex_unlock(&l->mu);
        s->st = make_batch(l, s->epoch, s->cursor, false, &s->x, &s->y);
        if (s->st != MF_OK) snprintf(s->err, sizeof s->err, "%s", mf_last_error());
        pthread_mutex_lock(&l->mu);
        l->pending = false;
        l->ready = true;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Waits for the helper to be idle; with mu held. */
static void wait_idle(mf_loader *l)
{
    while (l->pending) pthread_cond_wait(&l->cv, &l->mu);
}

static void drop_slot(mf_loader *l)
{
    if (!l->ready) return;
    mf_tensor_destroy(l->slot.x);
    mf_tensor_destroy(l->slot.y);
    l->slot.x = l->slot.y = NULL;
    l->ready = false;
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
    if (o->micro_batches < 0 || o->micro_batches > MF_LOADER_MAX_MICRO) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: %d micro-batches is not in 0 .. %d", o->micro_batches,
                  MF_LOADER_MAX_MICRO);
        return NULL;
    }
    if (o->shard_count < 0 || (o->shard_count > 0 && (o->shard_index < 0 || o->shard_index >= o->shard_count))) {
        mfi_error(MF_ERR_ARG, "mf_loader_create: shard %d of %d is out of range", o->shard_index, o->shard_count);
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
    l->scale = (float)(1.0 / (255.0 * o->std));
    l->shift = (float)(-o->mean / o->std);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (o->prefetch) {
        if (pthread_create(&l->worker, NULL, worker_main, l) == 0) l->threaded = true;
        else mf_log_warn("mf_loader_create: no prefetch thread; loading batches inline");
    }
    return l;
}

void mf_loader_destroy(mf_loader *l)
{
    if (!l) return;
    if (l->threaded) {
        pthread_mutex_lock(&l->mu);
        wait_idle(l);
        l->stop = true;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->worker, NULL);
    }
    drop_slot(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->perm);
    free(l);
}

int64_t mf_loader_batches_per_epoch(const mf_loader *l)
{
    int64_t n = mf_dataset_size(l->ds), b = l->o.batch_size;
    return l->o.drop_last ? n / b : (n + b - 1) / b;
}

int64_t mf_loader_epoch(const mf_loader *l) { return l->epoch; }
int64_t mf_loader_batch_rows(const mf_loader *l) { return l->last_rows; }
int64_t mf_loader_cursor(const mf_loader *l) { return l->cursor; }

mf_status mf_loader_seek(mf_loader *l, int64_t epoch, int64_t cursor)
{
    if (epoch < 0 || cursor < 0 || cursor > mf_dataset_size(l->ds))
        MF_FAIL(MF_ERR_ARG, "mf_loader_seek: epoch %lld, cursor %lld is outside the dataset of %lld samples",
                (long long)epoch, (long long)cursor, (long long)mf_dataset_size(l->ds));
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    drop_slot(l);
    l->epoch = epoch;
    l->cursor = cursor;
    pthread_mutex_unlock(&l->mu);
    return MF_OK;
}

int64_t mf_loader_sample_index(const mf_loader *l, int64_t epoch, int64_t pos)
{
    mf_loader *m = (mf_loader *)l;
    pthread_mutex_lock(&m->mu);
    wait_idle(m);
    int64_t r = -1;
    if (pos >= 0 && pos < mf_dataset_size(l->ds) && build_perm(m, epoch) == MF_OK) r = m->perm[pos];
    pthread_mutex_unlock(&m->mu);
    return r;
}

mf_status mf_loader_next(mf_loader *l, mf_tensor **x, mf_tensor **y)
{
    double t0 = mfi_prof_on ? mf_time() : 0;
    *x = *y = NULL;
    normalize(l, &l->epoch, &l->cursor);
    mf_status st = MF_OK;
    pthread_mutex_lock(&l->mu);
    wait_idle(l);
    if (l->ready && l->slot.epoch == l->epoch && l->slot.cursor == l->cursor) {
        st = l->slot.st;
        if (st != MF_OK) mfi_error(st, "%s", l->slot.err);
        *x = l->slot.x;
        *y = l->slot.y;
        l->slot.x = l->slot.y = NULL;
        l->ready = false;
    } else {
        drop_slot(l);
        st = make_batch(l, l->epoch, l->cursor, !l->threaded, x, y);
    }
    if (st == MF_OK) {
        /* the whole batch's rows, also when this rank made only its shard */
        int64_t rows = mf_dataset_size(l->ds) - l->cursor;
        if (rows > l->o.batch_size) rows = l->o.batch_size;
        l->last_rows = rows;
        l->cursor += rows;
        if (l->threaded) {
            /* start on the batch after this one */
            int64_t e = l->epoch, c = l->cursor;
            normalize(l, &e, &c);
            l->slot.epoch = e;
            l->slot.cursor = c;
            l->pending = true;
            pthread_cond_broadcast(&l->cv);
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (mfi_prof_on) mfi_prof_add(MF_PROF_DATA, mf_time() - t0);
    return st;
}
