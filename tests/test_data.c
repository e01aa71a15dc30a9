/*
 * tests/test_data.c - the IDX reader (gzip and plain, corrupt files),
 * datasets, and the loader's global permutation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>
#include "tests/test_util.h"

static char dir[256];

static void setup(void) { mf_test_tmpdir_make(dir, sizeof dir, "data"); }
static void teardown(void) { mf_test_tmpdir_remove(dir); }

/* Writes bytes to dir/name, gzip-compressed if gz. */
static const char *put(const char *name, const void *data, size_t n, bool gz)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert(f != NULL);
        ck_assert_int_eq(gzwrite(f, data, (unsigned)n), (int)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert(f != NULL);
        ck_assert_int_eq(fwrite(data, 1, n, f), n);
        fclose(f);
    }
    return path;
}

/* 3 images of 2x2 and 3 labels */
static const unsigned char images[] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2,
                                       0, 255, 10, 20, 1, 2, 3, 4, 200, 100, 50, 25};
static const unsigned char labels[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9};

START_TEST(idx_roundtrip)
{
    for (int gz = 0; gz < 2; gz++) {
        char ip[512], lp[512];
        snprintf(ip, sizeof ip, "%s", put(gz ? "img.gz" : "img", images, sizeof images, gz));
        snprintf(lp, sizeof lp, "%s", put(gz ? "lab.gz" : "lab", labels, sizeof labels, gz));
        mf_idx idx;
        ck_assert_ok(mf_idx_read(ip, &idx));
        ck_assert_int_eq(idx.ndim, 3);
        ck_assert(idx.dims[0] == 3 && idx.dims[1] == 2 && idx.dims[2] == 2 && idx.nbytes == 12);
        ck_assert_int_eq(((unsigned char *)idx.data)[1], 255);
        free(idx.data);
        mf_dataset *ds = mf_dataset_idx_load(ip, lp);
        ck_assert_nonnull(ds);
        ck_assert_int_eq(mf_dataset_size(ds), 3);
        ck_assert_int_eq(mf_dataset_classes(ds), 10);
        int64_t shape[3];
        mf_dataset_sample_shape(ds, shape);
        ck_assert(shape[0] == 1 && shape[1] == 2 && shape[2] == 2);
        /* unshuffled batches, normalised with mean 0 and std 1/255: pixels come out as bytes */
        mf_loader_opts o = {.batch_size = 2, .mean = 0.0, .std = 1.0 / 255};
        mf_loader *l = mf_loader_create(ds, &o);
        mf_tensor *x, *y;
        ck_assert_ok(mf_loader_next(l, &x, &y));
        ck_expect(x, 1e-4, MF_DIMS(2, 1, 2, 2), 0, 255, 10, 20, 1, 2, 3, 4);
        ck_expect(y, 0, MF_DIMS(2), 7, 0);
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
        ck_assert_ok(mf_loader_next(l, &x, &y));   /* the last, partial batch */
        ck_expect(y, 0, MF_DIMS(1), 9);
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
        ck_assert_int_eq(mf_loader_batches_per_epoch(l), 2);
        mf_loader_destroy(l);
        mf_dataset_destroy(ds);
    }
}
END_TEST

START_TEST(idx_multibyte)
{
    /* type 0x0D float, big-endian: 1.5 = 0x3fc00000 */
    const unsigned char f[] = {0, 0, 0x0D, 1, 0, 0, 0, 2, 0x3f, 0xc0, 0, 0, 0xc0, 0x20, 0, 0};
    mf_idx idx;
    ck_assert_ok(mf_idx_read(put("f.idx", f, sizeof f, false), &idx));
    float *v = idx.data;
    ck_assert(v[0] == 1.5f && v[1] == -2.5f);
    free(idx.data);
}
END_TEST

START_TEST(idx_corrupt)
{
    unsigned char bad[sizeof images];
    memcpy(bad, images, sizeof bad);
    bad[0] = 0x1f;   /* not 0x0000 */
    const char *p = put("bad-magic.gz", bad, sizeof bad, true);
    mf_idx idx;
    ck_assert_fails(mf_idx_read(p, &idx), MF_ERR_FORMAT, "bad-magic.gz", "not an IDX file");
    p = put("short.gz", images, 20, true);   /* header promises 12 bytes, 4 follow */
    ck_assert_fails(mf_idx_read(p, &idx), MF_ERR_FORMAT, "short.gz", "truncated");
    p = put("tiny", images, 2, false);
    ck_assert_fails(mf_idx_read(p, &idx), MF_ERR_FORMAT, "tiny", "header");
    char missing[512];
    snprintf(missing, sizeof missing, "%s/nope.gz", dir);
    ck_assert_fails(mf_idx_read(missing, &idx), MF_ERR_IO, "nope.gz", "cannot open");
    /* four labels for three images */
    const unsigned char four[] = {0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4};
    char ip[512];
    snprintf(ip, sizeof ip, "%s", put("i3", images, sizeof images, false));
    ck_assert_fails(mf_dataset_idx_load(ip, put("l4", four, sizeof four, false)), MF_ERR_FORMAT, "3 images", "4 labels");
    ck_assert_fails(mf_dataset_fashion_mnist(dir, true), MF_ERR_IO, "train-images-idx3-ubyte", "dataset-fashion-mnist");
}
END_TEST

START_TEST(permutation)
{
    mf_dataset *ds = mf_dataset_synthetic(1000, 1, 4, 4, 10, 1, true);
    ck_assert_nonnull(ds);
    mf_loader_opts o = {.batch_size = 64, .seed = 42, .shuffle = true, .drop_last = true, .mean = 0.5, .std = 0.25};
    mf_loader *l = mf_loader_create(ds, &o), *l2 = mf_loader_create(ds, &o);
    ck_assert_int_eq(mf_loader_batches_per_epoch(l), 15);
    for (int e = 0; e < 2; e++) {
        char seen[1000] = {0};
        for (int i = 0; i < 1000; i++) {
            int64_t s = mf_loader_sample_index(l, e, i);
            ck_assert(s >= 0 && s < 1000 && !seen[s]);
            seen[s] = 1;
        }
    }
    int same = 0;
    for (int i = 0; i < 1000; i++) same += mf_loader_sample_index(l, 0, i) == mf_loader_sample_index(l, 1, i);
    ck_assert_msg(same < 20, "epochs 0 and 1 share %d positions", same);
    /* drop_last: 15 full batches, then epoch 1 starts */
    for (int b = 0; b < 16; b++) {
        mf_tensor *x, *y;
        ck_assert_ok(mf_loader_next(l, &x, &y));
        ck_expect_shape(x, MF_DIMS(64, 1, 4, 4));
        mf_tensor_destroy(x);
        mf_tensor_destroy(y);
    }
    ck_assert_int_eq(mf_loader_epoch(l), 1);
    ck_assert_int_eq(mf_loader_cursor(l), 64);
    /* seeking reproduces the same batch */
    ck_assert_ok(mf_loader_seek(l2, 1, 0));
    mf_tensor *x2, *y2;
    ck_assert_ok(mf_loader_next(l2, &x2, &y2));
    ck_assert_ok(mf_loader_seek(l, 1, 0));
    mf_tensor *x1, *y1;
    ck_assert_ok(mf_loader_next(l, &x1, &y1));
    ck_assert(!memcmp(mf_tensor_data(x1), mf_tensor_data(x2), mf_tensor_nbytes(x1)));
    ck_assert(!memcmp(mf_tensor_data(y1), mf_tensor_data(y2), mf_tensor_nbytes(y1)));
    ck_assert_fails(mf_loader_seek(l, 0, 5000), MF_ERR_ARG, "cursor 5000");
    mf_tensor *all[] = {x1, y1, x2, y2};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
    mf_loader_destroy(l);
    mf_loader_destroy(l2);
    mf_loader_opts big = {.batch_size = 2000, .shuffle = true, .drop_last = true, .std = 1};
    ck_assert_fails(mf_loader_create(ds, &big), MF_ERR_ARG, "1000 samples", "2000");
    mf_dataset_destroy(ds);
}
END_TEST

START_TEST(prefetch_matches_inline)
{
    /* the helper thread must produce exactly the inline batches, across
     * epoch ends, partial batches and seeks */
    mf_dataset *ds = mf_dataset_synthetic(300, 1, 6, 6, 5, 3, true);
    mf_loader_opts a = {.batch_size = 64, .seed = 11, .shuffle = true, .mean = 0.4, .std = 0.2}, b = a;
    b.prefetch = true;
    mf_loader *la = mf_loader_create(ds, &a), *lb = mf_loader_create(ds, &b);
    for (int i = 0; i < 14; i++) {
        if (i == 9) {
            ck_assert_ok(mf_loader_seek(la, 5, 17));
            ck_assert_ok(mf_loader_seek(lb, 5, 17));
        }
        mf_tensor *xa, *ya, *xb, *yb;
        ck_assert_ok(mf_loader_next(la, &xa, &ya));
        ck_assert_ok(mf_loader_next(lb, &xb, &yb));
        ck_assert_int_eq(mf_tensor_numel(xa), mf_tensor_numel(xb));
        ck_assert_msg(!memcmp(mf_tensor_data(xa), mf_tensor_data(xb), mf_tensor_nbytes(xa)), "batch %d differs", i);
        ck_assert(!memcmp(mf_tensor_data(ya), mf_tensor_data(yb), mf_tensor_nbytes(ya)));
        ck_assert_int_eq(mf_loader_epoch(la), mf_loader_epoch(lb));
        ck_assert_int_eq(mf_loader_cursor(la), mf_loader_cursor(lb));
        mf_tensor *all[] = {xa, ya, xb, yb};
        for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
    }
    ck_assert_int_eq(mf_loader_sample_index(lb, 2, 7), mf_loader_sample_index(la, 2, 7));
    mf_loader_destroy(la);
    mf_loader_destroy(lb);   /* with a batch still prefetched */
    mf_dataset_destroy(ds);
}
END_TEST

START_TEST(micro_batch_shards)
{
    /* with micro-batches, a shard holds its piece of each micro-batch in
     * turn: over the shards, exactly the whole batch's rows (the last,
     * partial batch too), each where the balanced splits put it */
    mf_dataset *ds = mf_dataset_synthetic(23, 1, 4, 4, 3, 5, true);
    mf_loader_opts full = {.batch_size = 10, .seed = 4, .shuffle = true, .std = 1};
    mf_loader *lf = mf_loader_create(ds, &full);
    enum { M = 3, S = 2 };
    mf_loader *ls[S];
    for (int k = 0; k < S; k++) {
        mf_loader_opts o = full;
        o.prefetch = k == 1;
        o.shard_index = k;
        o.shard_count = S;
        o.micro_batches = M;
        ls[k] = mf_loader_create(ds, &o);
        ck_assert_nonnull(ls[k]);
    }
    for (int b = 0; b < 3; b++) {   /* rows 10, 10, 3 */
        mf_tensor *fx, *fy, *x[S], *y[S];
        ck_assert_ok(mf_loader_next(lf, &fx, &fy));
        int64_t rows = mf_tensor_dim(fx, 0), d = 16, got = 0, off[S] = {0};
        for (int k = 0; k < S; k++) {
            ck_assert_ok(mf_loader_next(ls[k], &x[k], &y[k]));
            ck_assert_int_eq(mf_loader_batch_rows(ls[k]), rows);
            got += mf_tensor_dim(x[k], 0);
        }
        ck_assert_int_eq(got, rows);
        for (int64_t m = 0, start = 0; m < M; m++) {
            int64_t bm = rows / M + (m < rows % M);
            for (int k = 0, at = 0; k < S; k++) {
                int64_t piece = bm / S + (k < bm % S);
                const float *a = (const float *)mf_tensor_data(x[k]) + off[k] * d;
                const float *w = (const float *)mf_tensor_data(fx) + (start + at) * d;
                ck_assert_msg(!memcmp(a, w, (size_t)(piece * d) * sizeof *a), "batch %d micro-batch %lld shard %d", b,
                              (long long)m, k);
                ck_assert(!memcmp((const int64_t *)mf_tensor_data(y[k]) + off[k],
                                  (const int64_t *)mf_tensor_data(fy) + start + at, (size_t)piece * sizeof(int64_t)));
                off[k] += piece;
                at += (int)piece;
            }
            start += bm;
        }
        mf_tensor_destroy(fx);
        mf_tensor_destroy(fy);
        for (int k = 0; k < S; k++) {
            mf_tensor_destroy(x[k]);
            mf_tensor_destroy(y[k]);
        }
    }
    mf_loader_opts bad = full;
    bad.micro_batches = -1;
    ck_assert_fails(mf_loader_create(ds, &bad), MF_ERR_ARG, "-1 micro-batches");
    mf_loader_destroy(lf);
    for (int k = 0; k < S; k++) mf_loader_destroy(ls[k]);
    mf_dataset_destroy(ds);
}
END_TEST

START_TEST(synthetic_is_deterministic)
{
    mf_dataset *a = mf_dataset_synthetic(50, 1, 8, 8, 4, 9, true), *b = mf_dataset_synthetic(50, 1, 8, 8, 4, 9, true);
    mf_loader_opts o = {.batch_size = 50, .mean = 0, .std = 1};
    mf_loader *la = mf_loader_create(a, &o), *lb = mf_loader_create(b, &o);
    mf_tensor *xa, *ya, *xb, *yb;
    ck_assert_ok(mf_loader_next(la, &xa, &ya));
    ck_assert_ok(mf_loader_next(lb, &xb, &yb));
    ck_assert(!memcmp(mf_tensor_data(xa), mf_tensor_data(xb), mf_tensor_nbytes(xa)));
    double mean, std;
    mf_dataset_stats(a, &mean, &std);
    ck_assert(mean > 0.2 && mean < 0.8 && std > 0.05);
    int64_t counts[4] = {0};
    for (int i = 0; i < 50; i++) counts[(int)mf_tensor_get(ya, (const int64_t[]){i})]++;
    for (int c = 0; c < 4; c++) ck_assert(counts[c] > 0);
    /* the test split has other samples but the same class templates:
     * the mean image of a class is close across the splits */
    mf_dataset *t = mf_dataset_synthetic(400, 1, 8, 8, 4, 9, false), *u = mf_dataset_synthetic(400, 1, 8, 8, 4, 9, true);
    mf_loader_opts o4 = {.batch_size = 400, .mean = 0, .std = 1.0 / 255};   /* x = pixel */
    mf_loader *lt = mf_loader_create(t, &o4), *lu = mf_loader_create(u, &o4);
    mf_tensor *xt, *yt, *xu, *yu;
    ck_assert_ok(mf_loader_next(lt, &xt, &yt));
    ck_assert_ok(mf_loader_next(lu, &xu, &yu));
    ck_assert(memcmp(mf_tensor_data(xt), mf_tensor_data(xu), mf_tensor_nbytes(xt)));
    double mt[64] = {0}, mu[64] = {0}, nt = 0, nu = 0;
    for (int i = 0; i < 400; i++) {
        const float *pt = (const float *)mf_tensor_data(xt) + i * 64, *pu = (const float *)mf_tensor_data(xu) + i * 64;
        bool ct = mf_tensor_get(yt, (const int64_t[]){i}) == 0, cu = mf_tensor_get(yu, (const int64_t[]){i}) == 0;
        for (int j = 0; j < 64; j++) {
            if (ct) mt[j] += pt[j];
            if (cu) mu[j] += pu[j];
        }
        nt += ct;
        nu += cu;
    }
    double diff = 0;
    for (int j = 0; j < 64; j++) diff = fmax(diff, fabs(mt[j] / nt - mu[j] / nu));
    ck_assert_msg(diff < 20, "class-0 means differ by %g (of 255) across splits", diff);
    mf_tensor *all[] = {xa, ya, xb, yb, xt, yt, xu, yu};
    for (int k = 0; k < 8; k++) mf_tensor_destroy(all[k]);
    mf_loader_destroy(la);
    mf_loader_destroy(lb);
    mf_loader_destroy(lt);
    mf_loader_destroy(lu);
    mf_dataset_destroy(a);
    mf_dataset_destroy(b);
    mf_dataset_destroy(t);
    mf_dataset_destroy(u);
}
END_TEST

START_TEST(fashion_mnist)
{
    mf_dataset *tr = mf_dataset_fashion_mnist(NULL, true), *te = mf_dataset_fashion_mnist(NULL, false);
    ck_assert_msg(tr && te, "Fashion-MNIST (Debian package dataset-fashion-mnist): %s", mf_last_error());
    ck_assert_int_eq(mf_dataset_size(tr), 60000);
    ck_assert_int_eq(mf_dataset_size(te), 10000);
    ck_assert_int_eq(mf_dataset_classes(tr), 10);
    double mean, std;
    mf_dataset_stats(tr, &mean, &std);
    ck_assert_msg(fabs(mean - 0.2860) < 0.001 && fabs(std - 0.3530) < 0.001, "mean %g std %g", mean, std);
    mf_dataset_destroy(tr);
    mf_dataset_destroy(te);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("io");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, idx_roundtrip);
    tcase_add_test(tc, idx_multibyte);
    tcase_add_test(tc, idx_corrupt);
    tcase_add_test(tc, permutation);
    tcase_add_test(tc, prefetch_matches_inline);
    tcase_add_test(tc, micro_batch_shards);
    tcase_add_test(tc, synthetic_is_deterministic);
    tcase_add_test(tc, fashion_mnist);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
