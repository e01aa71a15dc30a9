/*
 * tests/test_tokens.c - token datasets: text as bytes (a file and a
 * directory), llm.c shards and nanoGPT .bin files, their windows through
 * the loader, the split by file name and by position, and the refusals
 * of bad data (a bad magic number, a truncated shard, a token beyond the
 * vocabulary, a text shorter than one window).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/test_util.h"

static char dir[256];

static void setup(void)
{
    mf_test_tmpdir_make(dir, sizeof dir, "tokens");
    char sub[300];
    snprintf(sub, sizeof sub, "%s/texts", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
}

static void teardown(void) { mf_test_tmpdir_remove(dir); }

static const char *put(const char *name, const void *data, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    ck_assert_int_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

/* an llm.c shard of tokens first, first+1, ... (count of them), with
 * the header's magic, version and count as given */
static void put_shard(const char *name, int32_t magic, int32_t version, int32_t count, int first, int ntok)
{
    size_t bytes = 1024 + 2 * (size_t)ntok;
    unsigned char *b = calloc(1, bytes);
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (int i = 0; i < ntok; i++) {
        b[1024 + 2 * i] = (unsigned char)((first + i) & 0xff);
        b[1024 + 2 * i + 1] = (unsigned char)((first + i) >> 8);
    }
    put(name, b, bytes);
    free(b);
}

static char spec[512];
static const char *in_dir(const char *pattern)
{
    snprintf(spec, sizeof spec, "%s/%s", dir, pattern);
    return spec;
}

START_TEST(text_windows)
{
    const char *text = "abcdefghijklmnopqrstuvwxyz0123456789";   /* 36 bytes */
    char p[512];
    snprintf(p, sizeof p, "%s", put("t.txt", text, 36));
    mf_dataset *ds = mf_dataset_text(p, 0, 1, 8);
    ck_assert_nonnull(ds);
    ck_assert(mf_dataset_is_tokens(ds));
    ck_assert_int_eq(mf_dataset_seq_len(ds), 8);
    ck_assert_int_eq(mf_dataset_classes(ds), 256);
    ck_assert_int_eq(mf_dataset_num_tokens(ds), 36);
    ck_assert_int_eq(mf_dataset_size(ds), 4);   /* (36 - 1) / 8 windows of 9 */
    mf_loader_opts lo = {.batch_size = 4, .shuffle = false, .std = 1};
    mf_loader *l = mf_loader_create(ds, &lo);
    mf_tensor *x, *y;
    ck_assert_ok(mf_loader_next(l, &x, &y));
    ck_assert_int_eq(mf_tensor_dtype(x), MF_I64);
    ck_expect_shape(x, MF_DIMS(4, 8));
    const int64_t *px = mf_tensor_data(x), *py = mf_tensor_data(y);
    for (int w = 0; w < 4; w++)
        for (int j = 0; j < 8; j++) {
            ck_assert_int_eq(px[w * 8 + j], text[w * 8 + j]);
            ck_assert_int_eq(py[w * 8 + j], text[w * 8 + j + 1]);
        }
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_loader_destroy(l);
    /* shuffled: the same windows, another order, the same on every call */
    lo.shuffle = true;
    lo.seed = 9;
    l = mf_loader_create(ds, &lo);
    ck_assert_ok(mf_loader_next(l, &x, &y));
    int seen = 0;   /* windows start with a, i, q, y: each once */
    for (int w = 0; w < 4; w++) seen |= 1 << (((const int64_t *)mf_tensor_data(x))[w * 8] - 'a') / 8;
    ck_assert_int_eq(seen, 15);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_loader_destroy(l);
    mf_dataset_destroy(ds);
    /* the split by position: bytes [0.5, 1) only */
    ds = mf_dataset_text(p, 0.5, 1, 8);
    ck_assert_int_eq(mf_dataset_num_tokens(ds), 18);
    ck_assert_int_eq(mf_dataset_size(ds), 2);
    mf_dataset_destroy(ds);
    /* a directory: its files in name order, links and .dat skipped */
    put("texts/b", "BBBB", 4);
    put("texts/a", "AAAA", 4);
    put("texts/a.dat", "XXXX", 4);
    char link[600], target[600];
    snprintf(link, sizeof link, "%s/texts/c.u8", dir);
    snprintf(target, sizeof target, "%s/texts/a", dir);
    ck_assert_int_eq(symlink(target, link), 0);
    ds = mf_dataset_text(in_dir("texts"), 0, 1, 3);
    ck_assert_nonnull(ds);
    ck_assert_int_eq(mf_dataset_num_tokens(ds), 8);
    mf_dataset_destroy(ds);
    ck_assert_fails(mf_dataset_text(p, 0, 1, 40), MF_ERR_FORMAT, "36 tokens", "fewer than one window", "41");
    ck_assert_fails(mf_dataset_text(in_dir("none.txt"), 0, 1, 4), MF_ERR_IO, "none.txt");
    ck_assert_fails(mf_dataset_text(p, 0.5, 0.2, 4), MF_ERR_ARG, "range");
}
END_TEST

START_TEST(token_files)
{
    put_shard("s_train_000.bin", 20240520, 1, 100, 0, 100);
    put_shard("s_train_001.bin", 20240520, 1, 50, 100, 50);
    put_shard("s_val_000.bin", 20240520, 1, 30, 1000, 30);
    mf_dataset *tr = mf_dataset_tokens(in_dir("s_*.bin"), false, 10, 50257);
    mf_dataset *va = mf_dataset_tokens(in_dir("s_*.bin"), true, 10, 50257);
    ck_assert_nonnull(tr);
    ck_assert_nonnull(va);
    ck_assert_int_eq(mf_dataset_num_tokens(tr), 150);   /* both training shards, in name order */
    ck_assert_int_eq(mf_dataset_num_tokens(va), 30);
    ck_assert_int_eq(mf_dataset_size(tr), 14);
    mf_loader_opts lo = {.batch_size = 14, .shuffle = false, .std = 1};
    mf_loader *l = mf_loader_create(tr, &lo);
    mf_tensor *x, *y;
    ck_assert_ok(mf_loader_next(l, &x, &y));
    ck_assert_int_eq(((const int64_t *)mf_tensor_data(x))[13 * 10 + 9], 139);   /* across the shard boundary */
    ck_assert_int_eq(((const int64_t *)mf_tensor_data(y))[13 * 10 + 9], 140);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_loader_destroy(l);
    mf_dataset_destroy(tr);
    mf_dataset_destroy(va);
    /* nanoGPT's raw uint16, no val file: the last tenth is validation */
    uint16_t raw[200];
    for (int i = 0; i < 200; i++) raw[i] = (uint16_t)(i * 7);
    put("train.bin", raw, sizeof raw);
    tr = mf_dataset_tokens(in_dir("train.bin"), false, 16, 2000);
    va = mf_dataset_tokens(in_dir("train.bin"), true, 16, 2000);
    ck_assert_int_eq(mf_dataset_num_tokens(tr), 180);
    ck_assert_int_eq(mf_dataset_num_tokens(va), 20);
    mf_dataset_destroy(tr);
    mf_dataset_destroy(va);
    /* bad data */
    ck_assert_fails(mf_dataset_tokens(in_dir("train.bin"), false, 16, 1000), MF_ERR_FORMAT, "token 1001", "1000");
    put_shard("bad_magic.bin", 20240521, 1, 10, 0, 10);
    ck_assert_fails(mf_dataset_tokens(in_dir("bad_magic.bin"), false, 4, 300), MF_ERR_FORMAT, "bad magic number 20240521",
                    "20240520");
    put_shard("trunc.bin", 20240520, 1, 64, 0, 40);
    ck_assert_fails(mf_dataset_tokens(in_dir("trunc.bin"), false, 4, 300), MF_ERR_FORMAT, "trunc.bin", "64 tokens");
    put_shard("v2.bin", 20240520, 2, 10, 0, 10);
    ck_assert_fails(mf_dataset_tokens(in_dir("v2.bin"), false, 4, 300), MF_ERR_FORMAT, "version 2");
    put("odd.bin", "abc", 3);
    ck_assert_fails(mf_dataset_tokens(in_dir("odd.bin"), false, 1, 300), MF_ERR_FORMAT, "odd");
    ck_assert_fails(mf_dataset_tokens(in_dir("nothing*.bin"), false, 4, 300), MF_ERR_IO, "no file matches");
    ck_assert_fails(mf_dataset_tokens(in_dir("train.bin"), false, 4, 1), MF_ERR_ARG, "vocabulary size 1");
}
END_TEST

static Suite *tokens_suite(void)
{
    Suite *s = suite_create("tokens");
    TCase *tc = tcase_create("tokens");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, text_windows);
    tcase_add_test(tc, token_files);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(tokens_suite)
