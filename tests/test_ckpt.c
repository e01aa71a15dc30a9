/*
 * tests/test_ckpt.c - parallel-HDF5 checkpoints: round trips, resharding
 * between parallel layouts, the training state, and every bad input
 * (missing, not HDF5, wrong format, truncated, missing tensor, wrong
 * shape, checksum mismatch, unwritable directory) with the model left
 * unchanged. Runs under mpiexec -n 1 to 4 (tests/ckpt.sh).
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "tests/test_util.h"

static char dir[256];

static const char *path_of(const char *name)
{
    static char buf[4][512];   /* a few live at once in one call */
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* the mlp, with a layout: "none", "dp", "mp", "hybrid", "2d" (the
 * output layer's 5 rows split unevenly on 2 to 4 ranks) */
static mf_module *mlp(const char *layout, uint64_t seed)
{
    mf_manual_seed(seed);
    mf_module *m = mf_model_create("mlp", 1, 6, 6, 5);
    if (!m || !strcmp(layout, "none")) return m;
    mf_placement *p = !strcmp(layout, "2d") ? mf_placement_parse("0-3 mesh 2x2") : mf_placement_world();
    if (!strcmp(layout, "mp")) {
        mf_module_param_to_global(m, "hidden.weight", p, "S(0)");
        mf_module_param_to_global(m, "output.weight", p, "S(1)");
    } else if (!strcmp(layout, "hybrid")) {
        mf_module_param_to_global(m, "output.weight", p, "S(0)");
        mf_module_param_to_global(m, "output.bias", p, "S(0)");
    } else if (!strcmp(layout, "2d")) {
        mf_module_param_to_global(m, "hidden.weight", p, "B,S(0)");
        mf_module_param_to_global(m, "output.bias", p, "S(0),B");
    }
    mf_module_to_global(m, p, !strcmp(layout, "2d") ? "B,B" : "B");
    mf_placement_destroy(p);
    return m;
}

/* max difference between two models' state */
static double model_diff(mf_module *a, mf_module *b)
{
    mf_tensor_list *la = mf_module_state_dict(a), *lb = mf_module_state_dict(b);
    double worst = la->n == lb->n ? 0 : INFINITY;
    for (int i = 0; i < la->n && i < lb->n; i++) {
        mf_tensor *fb = mf_tensor_is_global(lb->items[i].tensor) ? mf_global_gather(lb->items[i].tensor)
                                                                   : mf_tensor_retain(lb->items[i].tensor);
        double d = mf_test_max_diff(la->items[i].tensor, fb, false);   /* INFINITY for a NaN */
        if (d > worst) worst = d;
        mf_tensor_destroy(fb);
    }
    mf_tensor_list_destroy(la);
    mf_tensor_list_destroy(lb);
    return worst;
}

START_TEST(test_round_trip_and_reshard)
{
    const char *layouts[] = {"none", "dp", "mp", "hybrid", "2d"};
    for (int a = 0; a < 5; a++) {
        if (!strcmp(layouts[a], "2d") && mf_world_size() != 4) continue;
        mf_module *src = mlp(layouts[a], 1);
        ck_assert_nonnull(src);
        mf_train_state st = {123, 4, 640, 99};
        ck_assert_ok(mf_ckpt_save(path_of("a.h5"), src, NULL, &st));
        ck_assert(access(path_of("a.h5"), R_OK) == 0);
        ck_assert(access(path_of("a.h5.tmp"), F_OK) != 0);
        for (int b = 0; b < 5; b++) {
            if (!strcmp(layouts[b], "2d") && mf_world_size() != 4) continue;
            mf_module *dst = mlp(layouts[b], 2);   /* other values */
            ck_assert(model_diff(src, dst) > 0);
            mf_train_state got = {0, 0, 0, 0};
            ck_assert_ok(mf_ckpt_load(path_of("a.h5"), dst, NULL, &got));
            ck_assert_msg(model_diff(src, dst) == 0, "%s -> %s", layouts[a], layouts[b]);
            ck_assert(got.step == 123 && got.epoch == 4 && got.cursor == 640 && got.seed == 99);
            mf_module_destroy(dst);
        }
        mf_module_destroy(src);
    }
}
END_TEST

/* k Adam steps on a fixed batch; returns the last loss */
static double train(mf_module *m, mf_optim *o, int k)
{
    mf_manual_seed(55);
    mf_tensor *x = mf_randn(MF_F32, 4, (const int64_t[]){8, 1, 6, 6});
    mf_tensor *u = mf_rand(MF_F32, 1, (const int64_t[]){8}), *u5 = mf_scale(u, 4.99), *y = mf_cast(u5, MF_I64);
    mf_tensor_list *ps = mf_module_parameters(m);
    const mf_placement *p = NULL;
    for (int i = 0; i < ps->n && !p; i++) p = mf_global_placement(ps->items[i].tensor);
    bool d2 = p && mf_placement_mesh_ndim(p) == 2;
    mf_tensor *gx = p ? mf_global_from_full(x, p, d2 ? "S(0),B" : "S(0)") : mf_tensor_retain(x);
    mf_tensor *gy = p ? mf_global_from_full(y, p, d2 ? "S(0),B" : "S(0)") : mf_tensor_retain(y);
    double loss = NAN;
    for (int i = 0; i < k; i++) {
        mf_optim_zero_grad(o);
        mf_tensor *out = mf_module_forward(m, gx), *l = mf_cross_entropy(out, gy, MF_REDUCTION_MEAN);
        ck_assert_ok(mf_backward(l));
        ck_assert_ok(mf_optim_step(o));
        loss = mf_tensor_item(l);
        mf_tensor_destroy(out);
        mf_tensor_destroy(l);
    }
    mf_tensor *all[] = {x, u, u5, y, gx, gy};
    for (int i = 0; i < 6; i++) mf_tensor_destroy(all[i]);
    mf_tensor_list_destroy(ps);
    return loss;
}

static mf_optim *adam(mf_module *m)
{
    mf_tensor_list *ps = mf_module_parameters(m);
    mf_adam_opts ao = mf_adam_defaults();
    ao.lr = 0.01;
    mf_optim *o = mf_adam_create(ps, &ao);
    mf_tensor_list_destroy(ps);
    return o;
}

/* 3 steps + save + 3 steps equals 3 steps + load (any layout) + 3 steps */
START_TEST(test_resume_with_optimizer)
{
    const char *layouts[] = {"none", "dp", "mp", "2d"};
    mf_module *a = mlp("dp", 1);
    mf_optim *oa = adam(a);
    train(a, oa, 3);
    ck_assert_ok(mf_ckpt_save(path_of("opt.h5"), a, oa, NULL));
    double want = train(a, oa, 3);
    for (int b = 0; b < 4; b++) {
        if (!strcmp(layouts[b], "2d") && mf_world_size() != 4) continue;
        mf_module *m = mlp(layouts[b], 9);
        mf_optim *o = adam(m);
        ck_assert_ok(mf_ckpt_load(path_of("opt.h5"), m, o, NULL));
        ck_assert(mf_optim_steps(o) == 3);
        double got = train(m, o, 3);
        ck_assert_msg(fabs(got - want) <= 1e-5 * fabs(want), "resumed as %s: loss %.9g, straight %.9g", layouts[b], got,
                      want);
        if (!strcmp(layouts[b], "dp")) ck_assert_msg(got == want, "same layout: %.9g vs %.9g", got, want);
        mf_optim_destroy(o);
        mf_module_destroy(m);
    }
    /* an SGD run cannot resume from an Adam checkpoint */
    mf_module *m = mlp("dp", 1);
    mf_tensor_list *ps = mf_module_parameters(m);
    mf_sgd_opts so = mf_sgd_defaults();
    mf_optim *sgd = mf_sgd_create(ps, &so);
    ck_assert_fails(mf_ckpt_load(path_of("opt.h5"), m, sgd, NULL), MF_ERR_FORMAT,
                    "the optimizer is adam in the checkpoint but sgd in this run");
    mf_optim_destroy(sgd);
    mf_tensor_list_destroy(ps);
    mf_module_destroy(m);
    mf_optim_destroy(oa);
    mf_module_destroy(a);
}
END_TEST

/* byte offset of a dataset's data in the file, read with plain HDF5 */
static long data_offset(const char *file, const char *dset)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    return (long)off;
}

static void write_bytes(const char *file, long off, const void *bytes, size_t n, long truncate_to)
{
    if (mf_rank() == 0) {
        FILE *f = fopen(file, "r+b");
        if (f && off >= 0) {
            fseek(f, off, SEEK_SET);
            fwrite(bytes, 1, n, f);
        }
        if (f) fclose(f);
        if (truncate_to >= 0) ck_assert(truncate(file, truncate_to) == 0);
    }
    mf_agree(MF_OK);   /* a barrier */
}

START_TEST(test_bad_checkpoints)
{
    mf_module *m = mlp("dp", 1), *ref = mlp("dp", 1), *lenet;
    ck_assert_ok(mf_ckpt_save(path_of("good.h5"), m, NULL, NULL));
    /* missing file; not HDF5 */
    ck_assert_fails(mf_ckpt_load(path_of("nothere.h5"), m, NULL, NULL), MF_ERR_IO, "nothere.h5: cannot read the checkpoint");
    if (mf_rank() == 0) {
        FILE *f = fopen(path_of("text.h5"), "w");
        fputs("this is not HDF5\n", f);
        fclose(f);
    }
    mf_agree(MF_OK);
    ck_assert_fails(mf_ckpt_load(path_of("text.h5"), m, NULL, NULL), MF_ERR_FORMAT, "text.h5: not an HDF5 file");
    /* a missing tensor, a wrong shape: names the file and the tensor */
    mf_manual_seed(3);
    lenet = mf_model_create("lenet", 1, 8, 8, 5);
    mf_placement *w = mf_placement_world();
    mf_module_to_global(lenet, w, "B");
    ck_assert_fails(mf_ckpt_load(path_of("good.h5"), lenet, NULL, NULL), MF_ERR_FORMAT, "good.h5: tensor 'conv1.weight' is missing");
    mf_module *wide = mf_model_create("mlp", 1, 6, 7, 5);
    ck_assert_fails(mf_ckpt_load(path_of("good.h5"), wide, NULL, NULL), MF_ERR_SHAPE,
                    "tensor 'hidden.weight' has shape [512,36] in the checkpoint but [512,42] in the model");
    /* a flipped byte in hidden.bias: the checksum catches it; the model is unchanged */
    if (mf_rank() == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp %s %s", path_of("good.h5"), path_of("flip.h5"));
        ck_assert(system(cmd) == 0);
    }
    mf_agree(MF_OK);
    long off = mf_rank() == 0 ? data_offset(path_of("flip.h5"), "/model/hidden.bias") : -1;
    const unsigned char junk[4] = {0x12, 0x34, 0x56, 0x78};
    write_bytes(path_of("flip.h5"), off + 8, junk, 4, -1);
    mf_tensor *b = mf_module_get(m, "hidden.bias");
    ck_assert_ok(mf_fill_(b, 7.0));
    ck_assert_fails(mf_ckpt_load(path_of("flip.h5"), m, NULL, NULL), MF_ERR_FORMAT, "tensor 'hidden.bias' fails its checksum");
    ck_assert(mf_tensor_item(mf_mean_all(b)) == 7.0);   /* untouched */
    /* truncated */
    if (mf_rank() == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "head -c 3000 %s > %s", path_of("good.h5"), path_of("short.h5"));
        ck_assert(system(cmd) == 0);
    }
    mf_agree(MF_OK);
    mf_clear_error();
    ck_assert(mf_ckpt_load(path_of("short.h5"), m, NULL, NULL) != MF_OK);
    ck_assert_msg(strstr(mf_last_error(), "short.h5"), "%s", mf_last_error());
    /* an unwritable place: an error, and nothing created */
    ck_assert_fails(mf_ckpt_save("/nonexistent-dir/x.h5", m, NULL, NULL), MF_ERR_IO, "cannot create /nonexistent-dir/x.h5.tmp");
    /* the good one still loads */
    ck_assert_ok(mf_ckpt_load(path_of("good.h5"), m, NULL, NULL));
    ck_assert(model_diff(ref, m) == 0);
    mf_module_destroy(m);
    mf_module_destroy(ref);
    mf_module_destroy(lenet);
    mf_module_destroy(wide);
    mf_placement_destroy(w);
}
END_TEST

/* the good checkpoint copied to name, then changed with plain HDF5 on
 * rank 0: fn(file) */
static void altered(const char *good, const char *name, void (*fn)(hid_t))
{
    if (mf_rank() == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp %s %s", good, path_of(name));
        ck_assert(system(cmd) == 0);
        hid_t f = H5Fopen(path_of(name), H5F_ACC_RDWR, H5P_DEFAULT);
        ck_assert(f >= 0);
        fn(f);
        H5Fclose(f);
    }
    mf_agree(MF_OK);
}

static void other_format(hid_t f)
{
    H5Adelete(f, "format");
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, 6);
    hid_t a = H5Acreate2(f, "format", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, "keras");
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void int_bias(hid_t f)
{
    H5Ldelete(f, "/model/hidden.bias", H5P_DEFAULT);
    hid_t sp = H5Screate_simple(1, (const hsize_t[]){512}, NULL);
    hid_t d = H5Dcreate2(f, "/model/hidden.bias", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
}

/* a wrong format attribute and a wrong dtype: refused, model unchanged */
START_TEST(test_wrong_format_and_dtype)
{
    mf_module *m = mlp("mp", 1), *ref = mlp("mp", 1), *other = mlp("mp", 4);
    ck_assert_ok(mf_ckpt_save(path_of("fmt.h5"), other, NULL, NULL));
    altered(path_of("fmt.h5"), "keras.h5", other_format);
    altered(path_of("fmt.h5"), "int.h5", int_bias);
    ck_assert_fails(mf_ckpt_load(path_of("keras.h5"), m, NULL, NULL), MF_ERR_FORMAT,
                    "keras.h5: the format attribute is 'keras', not 'mpiflow-checkpoint'");
    ck_assert_fails(mf_ckpt_load(path_of("int.h5"), m, NULL, NULL), MF_ERR_DTYPE,
                    "int.h5: tensor 'hidden.bias' has another dtype in the checkpoint than the model's f32");
    ck_assert(model_diff(ref, m) == 0);
    mf_module_destroy(m);
    mf_module_destroy(ref);
    mf_module_destroy(other);
}
END_TEST

/* The serial reader (mpiflow-ckpt's): every tensor with its global
 * shape, SBP and placement, values equal to the gathered model, the
 * checksums recomputed; Fletcher32 checkpoints reshard like plain ones. */
START_TEST(test_reader_and_fletcher32)
{
    mf_module *m = mlp("mp", 1);
    mf_ckpt_opts opts = {.keep_last = 1, .fletcher32 = true};
    ck_assert_ok(mf_ckpt_save(path_of("plain.h5"), m, NULL, NULL));
    ck_assert_ok(mf_ckpt_save_ex(path_of("f32.h5"), m, NULL, NULL, &opts));
    mf_tensor_list *sd = mf_module_state_dict(m);
    for (int k = 0; k < 2; k++) {
        const char *file = path_of(k ? "f32.h5" : "plain.h5");
        mf_ckpt_file *f = mf_ckpt_open(file);
        ck_assert_msg(f != NULL, "%s", mf_last_error());
        ck_assert_int_eq(mf_ckpt_count(f), sd->n);
        for (int i = 0; i < sd->n; i++) {
            mf_tensor *full = mf_global_gather(sd->items[i].tensor);
            const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
            char want[300];
            snprintf(want, sizeof want, "model/%s", sd->items[i].name);
            ck_assert_str_eq(e->name, want);   /* in state_dict order */
            ck_assert_int_eq(mf_ckpt_find(f, want), i);
            ck_assert_int_eq(e->ndim, mf_tensor_ndim(full));
            for (int d = 0; d < e->ndim; d++) ck_assert(e->shape[d] == mf_tensor_shape(full)[d]);
            ck_assert_str_eq(e->sbp, !strcmp(sd->items[i].name, "hidden.weight")   ? "S(0)"
                                     : !strcmp(sd->items[i].name, "output.weight") ? "S(1)"
                                                                                   : "B");
            uint64_t sum;
            ck_assert_ok(mf_ckpt_verify_entry(f, i, &sum));
            ck_assert(sum == e->checksum);
            /* rows 1.. of the tensor against the gathered values */
            int64_t rows = e->shape[0], row = mf_tensor_numel(full) / rows;
            double *v = malloc((size_t)(rows * row) * sizeof *v);
            ck_assert_ok(mf_ckpt_read_f64(f, i, 1, rows - 1, v));
            const float *fv = mf_tensor_data(full);
            for (int64_t j = 0; j < (rows - 1) * row; j++) ck_assert(v[j] == (double)fv[row + j]);
            free(v);
            mf_tensor_destroy(full);
        }
        char attrs[512];
        ck_assert_ok(mf_ckpt_attrs(f, "/", attrs, sizeof attrs));
        ck_assert_msg(strstr(attrs, "format=mpiflow-checkpoint version=1 step=0"), "%s", attrs);
        mf_ckpt_close(f);
    }
    /* Fletcher32: chunks of one piece (hidden.weight: rows of rank 0) */
    if (mf_rank() == 0) {
        hid_t f = H5Fopen(path_of("f32.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, "/model/hidden.weight", H5P_DEFAULT), dcpl = H5Dget_create_plist(d);
        hsize_t chunk[2];
        ck_assert_int_eq(H5Pget_nfilters(dcpl), 1);
        ck_assert_int_eq(H5Pget_chunk(dcpl, 2, chunk), 2);
        ck_assert(chunk[0] == (hsize_t)((512 + mf_world_size() - 1) / mf_world_size()) && chunk[1] == 36);
        H5Pclose(dcpl);
        H5Dclose(d);
        H5Fclose(f);
    }
    const char *layouts[] = {"none", "dp", "2d"};
    for (int b = 0; b < 3; b++) {
        if (!strcmp(layouts[b], "2d") && mf_world_size() != 4) continue;
        mf_module *dst = mlp(layouts[b], 2);
        ck_assert_ok(mf_ckpt_load(path_of("f32.h5"), dst, NULL, NULL));
        ck_assert_msg(model_diff(m, dst) == 0, "fletcher32 mp -> %s", layouts[b]);
        mf_module_destroy(dst);
    }
    /* not a checkpoint: NULL and a message naming the file */
    ck_assert(mf_ckpt_open(path_of("nothere.h5")) == NULL);
    ck_assert(strstr(mf_last_error(), "nothere.h5: cannot read the checkpoint"));
    mf_tensor_list_destroy(sd);
    mf_module_destroy(m);
}
END_TEST

/* Across world sizes (tests/ckpt.sh): MF_CKPT_FILE and MF_CKPT_MODE=save
 * or load; the layout follows the rank count (1: local, 3: mp, 4: 2d,
 * else dp). The loaded model must equal a fresh one of the same seed. */
START_TEST(test_across_world_sizes)
{
    const char *file = getenv("MF_CKPT_FILE"), *mode = getenv("MF_CKPT_MODE");
    if (!file || !mode) return;
    int n = mf_world_size();
    const char *layout = n == 1 ? "none" : n == 3 ? "mp" : n == 4 ? "2d" : "dp";
    mf_module *ref = mlp(layout, 1);
    mf_train_state st = {7, 1, 96, 1};
    if (!strcmp(mode, "save")) {
        ck_assert_ok(mf_ckpt_save(file, ref, NULL, &st));
    } else {
        mf_module *m = mlp(layout, 2);
        mf_train_state got;
        ck_assert_ok(mf_ckpt_load(file, m, NULL, &got));
        ck_assert_msg(model_diff(ref, m) == 0, "loaded on %d ranks as %s", n, layout);
        ck_assert(got.step == 7 && got.cursor == 96);
        mf_module_destroy(m);
    }
    mf_module_destroy(ref);
}
END_TEST

/* A checkpoint written without checksums (checksums="none") loads and
 * verifies on structure alone; and the diff helpers never call a NaN
 * close. */
START_TEST(test_no_checksums_and_nan)
{
    mf_module *src = mlp("dp", 1), *dst = mlp("dp", 2);
    mf_ckpt_opts opts = {.keep_last = 1, .no_checksums = true};
    mf_train_state st = {7, 0, 40, 1};
    ck_assert_ok(mf_ckpt_save_ex(path_of("nosum.h5"), src, NULL, &st, &opts));
    mf_ckpt_file *f = mf_ckpt_open(path_of("nosum.h5"));
    ck_assert_msg(f != NULL, "%s", mf_last_error());
    ck_assert_ok(mf_ckpt_check(f));
    for (int i = 0; i < mf_ckpt_count(f); i++) {
        uint64_t sum;
        ck_assert(!mf_ckpt_entry_at(f, i)->has_checksum);
        ck_assert_ok(mf_ckpt_verify_entry(f, i, &sum));
    }
    mf_ckpt_close(f);
    mf_train_state got = {0, 0, 0, 0};
    ck_assert_ok(mf_ckpt_load(path_of("nosum.h5"), dst, NULL, &got));
    ck_assert(model_diff(src, dst) == 0);
    ck_assert(got.step == 7 && got.cursor == 40);
    mf_module_destroy(src);
    mf_module_destroy(dst);
    /* a NaN in one parameter, after equal ones: the difference is infinite, not 0 */
    src = mlp("none", 1);
    dst = mlp("none", 1);
    ck_assert(model_diff(src, dst) == 0);
    mf_tensor_list *sd = mf_module_state_dict(dst);
    ck_assert_ok(mf_tensor_set(sd->items[0].tensor, (const int64_t[]){0, 0}, NAN));
    ck_assert(model_diff(src, dst) == INFINITY);
    ck_assert(model_diff(dst, src) == INFINITY);
    mf_tensor_list_destroy(sd);
    mf_module_destroy(src);
    mf_module_destroy(dst);
}
END_TEST

Suite *ckpt_suite(void)
{
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("ckpt");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_round_trip_and_reshard);
    tcase_add_test(tc, test_bad_checkpoints);
    tcase_add_test(tc, test_resume_with_optimizer);
    tcase_add_test(tc, test_wrong_format_and_dtype);
    tcase_add_test(tc, test_reader_and_fletcher32);
    tcase_add_test(tc, test_across_world_sizes);
    tcase_add_test(tc, test_no_checksums_and_nan);
    suite_add_tcase(s, tc);
    return s;
}

static int run(int argc, char **argv)
{
    return mf_test_main(argc, argv, ckpt_suite);
}

int main(int argc, char **argv)
{
    /* one directory shared by the ranks of this run (same host) */
    const char *base = getenv("MF_TEST_TMPDIR");
    if (!base) {
        fprintf(stderr, "test_ckpt: set MF_TEST_TMPDIR to a directory for the files (tests/ckpt.sh does)\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", base);
    return run(argc, argv);
}
