/*
 * tests/test_safetensors.c - the safetensors reader and writer: a round
 * trip, a file that NumPy writes (as Hugging Face's Python writer lays it
 * out), and the refusal of damaged headers with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test_util.h"

static char dir[256];
static void setup(void) { mf_test_tmpdir_make(dir, sizeof dir, "safetensors"); }
static void teardown(void) { mf_test_tmpdir_remove(dir); }

static const char *in_dir(const char *name)
{
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

START_TEST(round_trip)
{
    mf_tensor *a = T32(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 6.5), *b = T64(MF_DIMS(4), -1, 0.25, 1e300, 7);
    mf_tensor *c = TI64(MF_DIMS(1, 2, 1), 9, -3), *e = mf_zeros(MF_F32, MF_DIMS(0, 5));
    const char *names[] = {"h.0.attn.c_attn.weight", "b", "idx", "empty"};
    mf_tensor *ts[] = {a, b, c, e};
    char path[512];
    snprintf(path, sizeof path, "%s", in_dir("rt.safetensors"));
    ck_assert_ok(mf_safetensors_write(path, 4, names, ts));
    mf_safetensors *s = mf_safetensors_open(path);
    ck_assert_nonnull(s);
    ck_assert_int_eq(mf_safetensors_count(s), 4);
    for (int i = 0; i < 4; i++) {
        const mf_st_tensor *t = mf_safetensors_at(s, mf_safetensors_find(s, names[i]));
        ck_assert_nonnull(t);
        ck_assert_int_eq(t->dtype, mf_tensor_dtype(ts[i]));
        ck_assert_int_eq(t->ndim, mf_tensor_ndim(ts[i]));
        for (int d = 0; d < t->ndim; d++) ck_assert_int_eq(t->shape[d], mf_tensor_shape(ts[i])[d]);
        size_t bytes = (size_t)mf_tensor_numel(ts[i]) * mf_dtype_size(t->dtype);
        ck_assert(bytes == 0 || memcmp(t->data, mf_tensor_data(ts[i]), bytes) == 0);
    }
    ck_assert_int_eq(mf_safetensors_find(s, "nope"), -1);
    mf_safetensors_close(s);
    FILE *f = fopen(path, "rb");   /* the data starts 8-byte aligned */
    unsigned char lb[8];
    ck_assert_int_eq(fread(lb, 1, 8, f), 8);
    fclose(f);
    ck_assert_int_eq(lb[0] % 8, 0);
    mf_tensor *all[] = {a, b, c, e};
    for (int i = 0; i < 4; i++) mf_tensor_destroy(all[i]);
}
END_TEST

START_TEST(numpy_file)
{
    ck_assert_msg(system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0,
                  "python3-numpy is a test dependency (scripts/install-deps.sh installs it)");
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c '\n"
             "import json, struct, numpy as np\n"
             "w = np.arange(12, dtype=np.float32).reshape(3, 4) / 8\n"
             "b = np.array([1.5, -2.0], dtype=np.float64)\n"
             "hdr = {\"__metadata__\": {\"format\": \"pt\"},\n"
             "       \"wte.weight\": {\"dtype\": \"F32\", \"shape\": [3, 4], \"data_offsets\": [0, 48]},\n"
             "       \"bias\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [48, 64]}}\n"
             "h = json.dumps(hdr).encode()\n"
             "h += b\" \" * (-len(h) %% 8)\n"
             "open(\"%s\", \"wb\").write(struct.pack(\"<Q\", len(h)) + h + w.tobytes() + b.tobytes())\n'",
             in_dir("np.safetensors"));
    ck_assert_int_eq(system(cmd), 0);
    mf_safetensors *s = mf_safetensors_open(in_dir("np.safetensors"));
    ck_assert_nonnull(s);
    ck_assert_int_eq(mf_safetensors_count(s), 2);
    const mf_st_tensor *w = mf_safetensors_at(s, mf_safetensors_find(s, "wte.weight"));
    const mf_st_tensor *b = mf_safetensors_at(s, mf_safetensors_find(s, "bias"));
    ck_assert(w && b && w->dtype == MF_F32 && w->ndim == 2 && w->shape[0] == 3 && w->shape[1] == 4);
    for (int i = 0; i < 12; i++) ck_assert(((const float *)w->data)[i] == (float)i / 8);
    ck_assert(((const double *)b->data)[0] == 1.5 && ((const double *)b->data)[1] == -2.0);
    mf_safetensors_close(s);
}
END_TEST

/* a file of header text hdr and nbytes of data; hlen < 0: the true length */
static const char *put(const char *name, const char *hdr, int64_t hlen, int nbytes)
{
    const char *p = in_dir(name);
    FILE *f = fopen(p, "wb");
    ck_assert(f != NULL);
    uint64_t n = hlen < 0 ? strlen(hdr) : (uint64_t)hlen;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(n >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (int i = 0; i < nbytes; i++) fputc(i, f);
    fclose(f);
    return p;
}

START_TEST(damaged)
{
    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    mf_safetensors *ok = mf_safetensors_open(put("ok", good, -1, 8));   /* the control: it reads */
    ck_assert_nonnull(ok);
    mf_safetensors_close(ok);
    FILE *f = fopen(in_dir("tiny"), "wb");
    fputs("abc", f);
    fclose(f);
    ck_assert_fails(mf_safetensors_open(in_dir("tiny")), MF_ERR_FORMAT, "tiny", "shorter than the 8-byte");
    ck_assert_fails(mf_safetensors_open(put("long", good, 1 << 20, 8)), MF_ERR_FORMAT, "header length 1048576", "does not fit");
    ck_assert_fails(mf_safetensors_open(put("notjson", "[1,2,3]  ", -1, 0)), MF_ERR_FORMAT, "not a JSON object");
    ck_assert_fails(mf_safetensors_open(put("f16", "{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", -1, 4)),
                    MF_ERR_FORMAT, "dtype F16");
    ck_assert_fails(mf_safetensors_open(put("short", good, -1, 4)), MF_ERR_FORMAT, "'a'", "do not hold its 8 bytes");
    ck_assert_fails(mf_safetensors_open(put("size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8)),
                    MF_ERR_FORMAT, "12 bytes");
    ck_assert_fails(mf_safetensors_open(put("noshape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", -1, 8)),
                    MF_ERR_FORMAT, "lacks shape");
    ck_assert_fails(mf_safetensors_open(put("open", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offs", -1, 8)),
                    MF_ERR_FORMAT, "not a safetensors file");
    ck_assert_fails(mf_safetensors_open(put("trail", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", -1, 8)),
                    MF_ERR_FORMAT, "header is not JSON", "'x' after the JSON value");
    ck_assert_fails(mf_safetensors_open(in_dir("missing")), MF_ERR_IO, "missing");
}
END_TEST

static Suite *st_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, numpy_file);
    tcase_add_test(tc, damaged);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(st_suite)
