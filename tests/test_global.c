/*
 * tests/test_global.c - global tensors: placement and SBP text, boxing
 * for every pair of SBPs (1-D and on a 2x2 mesh) with its backward,
 * every op under its signatures against the 1-rank result, Philox by
 * global index, and the error cases. Runs under mpiexec -n 1 to 4
 * (tests/global.sh); checks that need a rank count skip quietly when the
 * world is too small.
 */
#include <stdio.h>
#include <stdlib.h>
#include "tests/test_util.h"

/* All ranks agree before asserting, so a failure on one rank cannot
 * leave the others waiting in a collective. */
static void all_ok(bool ok, const char *what)
{
    mf_status st = mf_agree(ok ? MF_OK : MF_ERR_STATE);
    ck_assert_msg(st == MF_OK, "%s failed on some rank: %s", what, mf_last_error());
}

#define max_diff(a, b) mf_test_max_diff((a), (b), false)

static const char *sbp1[] = {"S(0)", "S(1)", "B", "P"};

/* full laid out as `from`; on each P dimension the pieces are uneven
 * shares, (coord + 1) / (1 + 2 + ... + n) of the value, that sum to it */
static mf_tensor *partial_input(mf_tensor *full, mf_placement *p, const char *from)
{
    char asb[32];
    snprintf(asb, sizeof asb, "%s", from);
    for (char *c = asb; *c; c++)
        if (*c == 'P') *c = 'B';
    mf_tensor *b = mf_global_from_full(full, p, asb);
    if (!strchr(from, 'P') || !b) return b;
    mf_nd_sbp s;
    mf_nd_sbp_parse(from, &s);
    mf_tensor *loc = mf_to_local(b), *x = NULL;
    if (loc) {
        double share = 1;
        int idx = mf_placement_index(p);
        for (int d = s.ndim - 1; d >= 0; d--) {
            int n = mf_placement_mesh_dim(p, d), coord = idx % n;
            idx /= n;
            if (s.d[d].kind == MF_SBP_P) share *= (coord + 1) / (n * (n + 1) / 2.0);
        }
        mf_tensor *piece = mf_scale(loc, share);
        x = mf_global_from_piece(piece, mf_tensor_ndim(full), mf_tensor_shape(full), p, from);
        mf_tensor_destroy(piece);
    }
    mf_tensor_destroy(loc);
    mf_tensor_destroy(b);
    return x;
}

/* boxes full from -> to on p and back through autograd; checks both */
static void check_box(mf_placement *p, mf_tensor *full, mf_tensor *w, const char *from, const char *to)
{
    char what[128];
    snprintf(what, sizeof what, "%s -> %s", from, to);
    mf_tensor *x = partial_input(full, p, from);
    ck_assert_nonnull(x);
    ck_assert_ok(mf_tensor_set_requires_grad(x, true));
    mf_tensor *y = mf_redistribute(x, p, to);
    ck_assert_nonnull(y);
    double d = max_diff(y, full);
    all_ok(d < 1e-12, what);
    /* loss = sum(y * w): the gradient of x is w, laid out as dual(from) */
    mf_tensor *wg = mf_global_from_full(w, p, mf_placement_mesh_ndim(p) == 2 ? "B,B" : "B");
    mf_tensor *yw = mf_mul(y, wg), *loss = yw ? mf_sum_all(yw) : NULL;
    ck_assert_nonnull(loss);
    ck_assert_ok(mf_backward(loss));
    mf_tensor *g = mf_tensor_grad(x);
    ck_assert_nonnull(g);
    d = max_diff(g, w);
    snprintf(what, sizeof what, "backward of %s -> %s", from, to);
    all_ok(d < 1e-12, what);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(wg);
    mf_tensor_destroy(yw);
    mf_tensor_destroy(loss);
}

START_TEST(test_placement_text)
{
    int n = mf_world_size();
    char text[64], buf[128];
    snprintf(text, sizeof text, "0-%d", n - 1);
    mf_placement *p = mf_placement_parse(n == 1 ? "0" : text);
    ck_assert_nonnull(p);
    ck_assert_str_eq(mf_placement_str(p, buf, sizeof buf), n == 1 ? "0" : text);
    ck_assert_int_eq(mf_placement_size(p), n);
    mf_placement *w = mf_placement_world();
    ck_assert(mf_placement_equal(p, w));
    mf_placement_destroy(w);
    mf_placement_destroy(p);
    if (n == 4) {
        p = mf_placement_parse("0-3 mesh 2x2");
        ck_assert_nonnull(p);
        ck_assert_str_eq(mf_placement_str(p, buf, sizeof buf), "0-3 mesh 2x2");
        ck_assert_int_eq(mf_placement_mesh_ndim(p), 2);
        mf_placement_destroy(p);
        p = mf_placement_parse("0,2,1,3 mesh 2x2");
        ck_assert_nonnull(p);
        ck_assert_str_eq(mf_placement_str(p, buf, sizeof buf), "0,2,1,3 mesh 2x2");
        mf_placement_destroy(p);
    }
    ck_assert_fails(mf_placement_parse("0-x"), MF_ERR_ARG, "cannot read placement '0-x'");
    ck_assert_fails(mf_placement_parse("0 mesh 2x2"), MF_ERR_ARG, "mesh of 4 ranks does not fit 1 ranks");
    snprintf(text, sizeof text, "0-%d", n);
    ck_assert_fails(mf_placement_parse(text), MF_ERR_ARG, "is not in the world");
    /* a cuda placement needs a GPU on its members; the failure is agreed by every rank */
    if (!mf_cuda_available()) {
        ck_assert_fails(mf_placement_parse("0 cuda"), MF_ERR_BACKEND, "a cuda placement on rank 0", "CUDA is unavailable");
    } else {
        mf_placement *c = mf_placement_parse("0 cuda");
        ck_assert_nonnull(c);
        ck_assert_str_eq(mf_placement_str(c, buf, sizeof buf), "0 cuda");
        mf_placement_destroy(c);
    }
}
END_TEST

START_TEST(test_sbp_text)
{
    mf_nd_sbp s;
    char buf[64];
    const char *ok[] = {"S(0)", "B", "P", "S(0),B", "S(1),S(0)", "B,P,S(2)"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        ck_assert_ok(mf_nd_sbp_parse(ok[i], &s));
        ck_assert_str_eq(mf_nd_sbp_str(&s, buf, sizeof buf), ok[i]);
    }
    ck_assert_ok(mf_nd_sbp_parse(" S(0) , B ", &s));
    ck_assert_str_eq(mf_nd_sbp_str(&s, buf, sizeof buf), "S(0),B");
    ck_assert_fails(mf_nd_sbp_parse("S(x)", &s), MF_ERR_ARG, "cannot read SBP 'S(x)'");
    ck_assert_fails(mf_nd_sbp_parse("Q", &s), MF_ERR_ARG, "cannot read SBP");
    ck_assert_fails(mf_nd_sbp_parse("", &s), MF_ERR_ARG, "cannot read SBP");
    mf_placement *w = mf_placement_world();
    ck_assert_ok(mf_nd_sbp_parse("S(3)", &s));
    ck_assert_fails(mf_nd_sbp_check(&s, w, 2), MF_ERR_ARG, "S(3) splits axis 3 of a 2-D tensor");
    ck_assert_ok(mf_nd_sbp_parse("S(0),B", &s));
    ck_assert_fails(mf_nd_sbp_check(&s, w, 2), MF_ERR_ARG, "has 2 entries", "1-D mesh");
    mf_placement_destroy(w);
}
END_TEST

START_TEST(test_boxing_1d)
{
    mf_placement *p = mf_placement_world();
    /* uneven on every rank count up to 4 */
    const int64_t shapes[][2] = {{5, 7}, {3, 2}, {1, 6}};
    for (size_t k = 0; k < 3; k++) {
        mf_manual_seed(10 + k);
        mf_tensor *full = mf_randn(MF_F64, 2, shapes[k]), *w = mf_randn(MF_F64, 2, shapes[k]);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) check_box(p, full, w, sbp1[i], sbp1[j]);
        mf_tensor_destroy(full);
        mf_tensor_destroy(w);
    }
    mf_placement_destroy(p);
}
END_TEST

/* every pair of nd-SBPs on a 2-D mesh: 2x2 on 4 ranks, 1xN and Nx1 otherwise */
static void boxing_2d(const char *text)
{
    mf_placement *p = mf_placement_parse(text);
    ck_assert_nonnull(p);
    mf_manual_seed(3);
    const int64_t shape[2] = {5, 3};
    mf_tensor *full = mf_randn(MF_F64, 2, shape), *w = mf_randn(MF_F64, 2, shape);
    char from[16], to[16];
    for (int a = 0; a < 16; a++)
        for (int b = 0; b < 16; b++) {
            snprintf(from, sizeof from, "%s,%s", sbp1[a / 4], sbp1[a % 4]);
            snprintf(to, sizeof to, "%s,%s", sbp1[b / 4], sbp1[b % 4]);
            check_box(p, full, w, from, to);
        }
    mf_tensor_destroy(full);
    mf_tensor_destroy(w);
    mf_placement_destroy(p);
}

START_TEST(test_boxing_2d_mesh)
{
    int n = mf_world_size();
    char text[64];
    if (n == 4) {
        boxing_2d("0-3 mesh 2x2");
        boxing_2d("3,1,2,0 mesh 2x2");
        return;
    }
    snprintf(text, sizeof text, "0-%d mesh 1x%d", n - 1, n);
    boxing_2d(n == 1 ? "0 mesh 1x1" : text);
    snprintf(text, sizeof text, "0-%d mesh %dx1", n - 1, n);
    if (n > 1) boxing_2d(text);
}
END_TEST

/* Between placements of the same ranks (another order, another mesh)
 * boxing takes the general path, and autograd runs through it. */
START_TEST(test_cross_placement_autograd)
{
    int n = mf_world_size();
    char text[64];
    /* the world reversed, and (on 4 ranks) the world as a 2x2 mesh */
    int len = snprintf(text, sizeof text, "%d", n - 1);
    for (int r = n - 2; r >= 0; r--) len += snprintf(text + len, sizeof text - (size_t)len, ",%d", r);
    mf_placement *w = mf_placement_world(), *rev = mf_placement_parse(text);
    mf_placement *mesh = n == 4 ? mf_placement_parse("0-3 mesh 2x2") : NULL;
    ck_assert(w && rev);
    mf_manual_seed(17);
    const int64_t shape[2] = {7, 5};
    mf_tensor *full = mf_randn(MF_F64, 2, shape), *wt = mf_randn(MF_F64, 2, shape);
    const char *from[] = {"S(0)", "S(1)", "B", "P"};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            mf_tensor *x = partial_input(full, w, from[i]);
            ck_assert_nonnull(x);
            ck_assert_ok(mf_tensor_set_requires_grad(x, true));
            mf_placement *dst = mesh && j == 2 ? mesh : rev;
            const char *to = dst == mesh ? "S(1),S(0)" : from[j];
            mf_tensor *y = mf_redistribute(x, dst, to);
            ck_assert_msg(y != NULL, "%s -> %s: %s", from[i], to, mf_last_error());
            all_ok(max_diff(y, full) < 1e-12, "across placements");
            mf_tensor *wg = mf_global_from_full(wt, dst, dst == mesh ? "B,B" : "B");
            mf_tensor *yw = mf_mul(y, wg), *loss = mf_sum_all(yw);
            ck_assert_ok(mf_backward(loss));
            all_ok(max_diff(mf_tensor_grad(x), wt) < 1e-12, "gradient across placements");
            mf_tensor *all[] = {x, y, wg, yw, loss};
            for (int k = 0; k < 5; k++) mf_tensor_destroy(all[k]);
        }
    mf_tensor_destroy(full);
    mf_tensor_destroy(wt);
    mf_placement_destroy(w);
    mf_placement_destroy(rev);
    mf_placement_destroy(mesh);
}
END_TEST

/* Tensors on part of the world: ranks outside skip the kernels, keep the
 * metadata, and take part in moving data across placements. */
START_TEST(test_subset_placement)
{
    int n = mf_world_size();
    if (n < 2) return;
    char text[32];
    snprintf(text, sizeof text, "1-%d", n - 1);
    mf_placement *p0 = mf_placement_parse("0"), *rest = mf_placement_parse(text), *w = mf_placement_world();
    ck_assert(p0 && rest && w);
    const int64_t shape[2] = {7, 3};
    mf_manual_seed(21);
    mf_tensor *x = mf_global_randn(MF_F64, 2, shape, p0, "B");
    mf_manual_seed(21);
    mf_tensor *ref = mf_randn(MF_F64, 2, shape), *rref = mf_relu(ref), *sref = mf_sum_all(rref);
    mf_tensor *y = mf_relu(x), *sy = mf_sum_all(y);
    ck_assert_nonnull(sy);
    all_ok((mf_rank() == 0) == (mf_tensor_is_global(y) && mf_placement_index(mf_global_placement(y)) == 0), "placement");
    mf_tensor *loc = mf_to_local(y);
    all_ok(mf_rank() == 0 ? loc != NULL : loc == NULL, "pieces only inside the placement");
    mf_tensor_destroy(loc);
    all_ok(mf_tensor_item(sy) == mf_tensor_item(sref), "sum on rank 0 only");
    /* rank 0 -> the other ranks, split; then to the world */
    mf_tensor *z = mf_redistribute(y, rest, "S(0)"), *z2 = z ? mf_redistribute(z, w, "S(1)") : NULL;
    ck_assert_nonnull(z2);
    all_ok(max_diff(z, rref) == 0 && max_diff(z2, rref) == 0, "across placements");
    /* autograd across different rank sets is refused, on every rank */
    mf_tensor *g = mf_global_from_full(ref, w, "S(0)");
    ck_assert_ok(mf_tensor_set_requires_grad(g, true));
    ck_assert_fails(mf_redistribute(g, p0, "B"), MF_ERR_ARG, "autograd across different rank sets");
    mf_tensor *all[] = {x, ref, rref, sref, y, sy, z, z2, g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
    mf_placement_destroy(p0);
    mf_placement_destroy(rest);
    mf_placement_destroy(w);
}
END_TEST

START_TEST(test_global_random)
{
    mf_placement *p = mf_placement_world();
    const int64_t shape[2] = {7, 5};
    const char *sbps[] = {"S(0)", "S(1)", "B"};
    for (int i = 0; i < 3; i++) {
        mf_manual_seed(99);
        mf_tensor *g = mf_global_randn(MF_F32, 2, shape, p, sbps[i]);
        mf_manual_seed(99);
        mf_tensor *l = mf_randn(MF_F32, 2, shape);   /* what one rank draws */
        ck_assert_nonnull(g);
        all_ok(max_diff(g, l) == 0.0, sbps[i]);
        mf_tensor_destroy(g);
        mf_tensor_destroy(l);
    }
    mf_placement_destroy(p);
}
END_TEST

START_TEST(test_to_global_semantics)
{
    mf_placement *p = mf_placement_world();
    int n = mf_world_size(), r = mf_rank();
    /* S(0): pieces are joined; rank r holds the balanced rows */
    int64_t rows = 7 / n + (r < 7 % n), start = r * (7 / n) + (r < 7 % n ? r : 7 % n);
    mf_tensor *piece = mf_full(MF_F64, 2, (const int64_t[]){rows, 2}, (double)r);
    mf_tensor *g = mf_to_global(piece, p, "S(0)");
    ck_assert_nonnull(g);
    ck_assert_int_eq(mf_tensor_shape(g)[0], 7);
    mf_tensor *full = mf_global_gather(g);
    ck_assert_nonnull(full);
    int owner = 0;
    for (int64_t i = 0; i < 7; i++) {
        int64_t q = 7 / n, rem = 7 % n;
        owner = i < rem * (q + 1) ? (int)(i / (q + 1)) : (int)(rem + (i - rem * (q + 1)) / q);
        ck_assert(mf_tensor_get(full, (const int64_t[]){i, 1}) == owner);
    }
    (void)start;
    mf_tensor_destroy(full);
    mf_tensor_destroy(g);
    /* B: rank 0's value wins; P: values are summed */
    g = mf_to_global(piece, p, "B");
    mf_tensor_destroy(piece);
    piece = mf_full(MF_F64, 1, (const int64_t[]){3}, (double)(r + 1));
    mf_tensor_destroy(g);
    g = mf_to_global(piece, p, "B");
    full = mf_global_gather(g);
    ck_assert(mf_tensor_get(full, (const int64_t[]){2}) == 1.0);
    mf_tensor_destroy(full);
    mf_tensor_destroy(g);
    g = mf_to_global(piece, p, "P");
    full = mf_global_gather(g);
    ck_assert(mf_tensor_get(full, (const int64_t[]){0}) == n * (n + 1) / 2.0);
    mf_tensor_destroy(full);
    mf_tensor_destroy(g);
    mf_tensor_destroy(piece);
    /* unbalanced S pieces are refused on every rank */
    if (n > 1) {
        piece = mf_zeros(MF_F64, 1, (const int64_t[]){r == 0 ? 3 : 1});
        ck_assert_fails(mf_to_global(piece, p, "S(0)"), MF_ERR_SHAPE, "balanced split");
        mf_tensor_destroy(piece);
    }
    mf_placement_destroy(p);
}
END_TEST

START_TEST(test_global_errors)
{
    mf_placement *w = mf_placement_world();
    mf_tensor *full = mf_ones(MF_F32, 2, (const int64_t[]){4, 3});
    ck_assert_fails(mf_global_from_full(full, w, "S(3)"), MF_ERR_ARG, "S(3) splits axis 3 of a 2-D tensor");
    /* meshes of different sizes */
    mf_placement *m2 = mf_placement_parse(mf_world_size() == 1 ? "0 mesh 1x1" : "0");
    ck_assert_nonnull(m2);
    mf_tensor *a = mf_global_from_full(full, w, "B"), *b = mf_global_from_full(full, m2, mf_world_size() == 1 ? "B,B" : "B");
    ck_assert_nonnull(a);
    ck_assert_nonnull(b);
    ck_assert_fails(mf_add(a, b), MF_ERR_ARG, "mf_add", "meshes differ", "input 0 f32 [4,3] B on", "input 1 f32 [4,3]");
    /* a local tensor among global ones */
    ck_assert_fails(mf_add(a, full), MF_ERR_ARG, "input 1 is a local tensor", "input 1 f32 [4,3] local");
    /* no boxing path between device types; without a GPU a cuda
     * placement cannot even be made */
    if (!mf_cuda_available()) {
        ck_assert_fails(mf_placement_parse("0 cuda"), MF_ERR_BACKEND, "cuda");
    } else {
        mf_placement *g = mf_placement_parse("0 cuda");
        ck_assert_nonnull(g);
        mf_tensor *d = mf_global_from_full(full, g, "B");
        ck_assert_nonnull(d);
        mf_tensor *onw = mf_global_from_full(full, w, "B");
        ck_assert_fails(mf_add(onw, d), MF_ERR_ARG, "mf_add");
        mf_tensor_destroy(onw);
        mf_tensor_destroy(d);
        mf_placement_destroy(g);
    }
    /* shape errors name the op and the inputs' SBPs */
    mf_tensor *c = mf_global_from_full(full, w, "S(0)");
    ck_assert_fails(mf_matmul(a, c), MF_ERR_SHAPE, "mf_matmul", "S(0) on");
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
    mf_tensor_destroy(c);
    mf_tensor_destroy(full);
    mf_placement_destroy(m2);
    /* a parameter split that leaves a rank without a piece */
    if (mf_world_size() >= 3) {
        mf_module *lin = mf_linear_create(4, 2, true);
        ck_assert_nonnull(lin);
        ck_assert_fails(mf_module_param_to_global(lin, "weight", w, "S(0)"), MF_ERR_SHAPE, "parameter 'weight' [2,4]",
                        "splits axis 0 of length 2 over", "does not divide it");
        ck_assert_fails(mf_module_param_to_global(lin, "nothere", w, "B"), MF_ERR_ARG, "no parameter or buffer 'nothere'");
        ck_assert_ok(mf_module_to_global(lin, w, "B"));
        ck_assert_fails(mf_module_param_to_global(lin, "weight", w, "B"), MF_ERR_STATE, "already global");
        mf_module_destroy(lin);
    }
    mf_placement_destroy(w);
}
END_TEST

/* Batch norm's running statistics are written in place, so a global
 * module keeps them up to date: B statistics (with x split by samples)
 * and S(0) statistics (channel split) both match the local module. */
START_TEST(test_batchnorm_running_stats)
{
    mf_placement *w = mf_placement_world();
    mf_manual_seed(8);
    mf_tensor *x = mf_randn(MF_F32, 4, (const int64_t[]){6, 4, 3, 3});
    float ref[8], got[8];
    for (int k = -1; k < 2; k++) {
        mf_module *bn = mf_batch_norm2d_create(4);
        ck_assert_nonnull(bn);
        if (k == 1) {
            ck_assert_ok(mf_module_param_to_global(bn, "running_mean", w, "S(0)"));
            ck_assert_ok(mf_module_param_to_global(bn, "running_var", w, "S(0)"));
        }
        if (k >= 0) ck_assert_ok(mf_module_to_global(bn, w, "B"));
        mf_tensor *gx = k >= 0 ? mf_global_from_full(x, w, "S(0)") : mf_tensor_retain(x);
        for (int step = 0; step < 2; step++) {
            mf_tensor *y = mf_module_forward(bn, gx);
            ck_assert_nonnull(y);
            mf_tensor_destroy(y);
        }
        ck_assert_ok(mf_tensor_copy_out(mf_module_get(bn, "running_mean"), MF_F32, k < 0 ? ref : got, 4));
        ck_assert_ok(mf_tensor_copy_out(mf_module_get(bn, "running_var"), MF_F32, k < 0 ? ref + 4 : got + 4, 4));
        ck_assert(mf_tensor_item(mf_module_get(bn, "num_batches_tracked")) == 2);
        for (int i = 0; k >= 0 && i < 8; i++)
            ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-5f * (1 + fabsf(ref[i])), "stat %d: %g vs %g", i, got[i], ref[i]);
        mf_tensor_destroy(gx);
        mf_module_destroy(bn);
    }
    mf_tensor_destroy(x);
    mf_placement_destroy(w);
}
END_TEST

/* A model on global parameters trains like the local one: two SGD steps
 * of a Linear under each SBP of its weight. */
START_TEST(test_module_training)
{
    mf_placement *w = mf_placement_world();
    const char *sbps[] = {"B", "S(0)", "S(1)"};
    mf_manual_seed(4);
    mf_tensor *x = mf_randn(MF_F32, 2, (const int64_t[]){6, 5});
    mf_tensor *u = mf_rand(MF_F32, 1, (const int64_t[]){6}), *u3 = mf_scale(u, 2.99), *y = mf_cast(u3, MF_I64);
    mf_tensor_destroy(u);
    mf_tensor_destroy(u3);
    float ref[32], got[32];
    for (int k = -1; k < 3; k++) {
        mf_module *lin = mf_linear_create(5, 4, true);
        ck_assert_ok(mf_module_reset_parameters(lin, 11));
        if (k >= 0) {
            ck_assert_ok(mf_module_param_to_global(lin, "weight", w, sbps[k]));
            ck_assert_ok(mf_module_to_global(lin, w, "B"));
        }
        mf_tensor_list *ps = mf_module_parameters(lin);
        mf_sgd_opts so = mf_sgd_defaults();
        so.lr = 0.1;
        so.momentum = 0.9;
        mf_optim *opt = mf_sgd_create(ps, &so);
        mf_tensor *gx = k >= 0 ? mf_global_from_full(x, w, "S(0)") : mf_tensor_retain(x);
        mf_tensor *gy = k >= 0 ? mf_global_from_full(y, w, "S(0)") : mf_tensor_retain(y);
        for (int step = 0; step < 2; step++) {
            mf_optim_zero_grad(opt);
            mf_tensor *out = mf_module_forward(lin, gx), *loss = mf_cross_entropy(out, gy, MF_REDUCTION_MEAN);
            ck_assert_nonnull(loss);
            ck_assert_ok(mf_backward(loss));
            ck_assert_ok(mf_clip_grad_norm(ps, 0.5, NULL));
            ck_assert_ok(mf_optim_step(opt));
            mf_tensor_destroy(out);
            mf_tensor_destroy(loss);
        }
        ck_assert_ok(mf_tensor_copy_out(mf_module_get(lin, "weight"), MF_F32, k < 0 ? ref : got, 20));
        for (int i = 0; k >= 0 && i < 20; i++)
            ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-6f * (1 + fabsf(ref[i])), "weight %s [%d]: %g vs %g", sbps[k], i,
                          got[i], ref[i]);
        mf_tensor_destroy(gx);
        mf_tensor_destroy(gy);
        mf_optim_destroy(opt);
        mf_tensor_list_destroy(ps);
        mf_module_destroy(lin);
    }
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_placement_destroy(w);
}
END_TEST

Suite *global_suite(void)
{
    Suite *s = suite_create("global");
    TCase *tc = tcase_create("global");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_placement_text);
    tcase_add_test(tc, test_sbp_text);
    tcase_add_test(tc, test_boxing_1d);
    tcase_add_test(tc, test_boxing_2d_mesh);
    tcase_add_test(tc, test_subset_placement);
    tcase_add_test(tc, test_cross_placement_autograd);
    tcase_add_test(tc, test_global_random);
    tcase_add_test(tc, test_to_global_semantics);
    tcase_add_test(tc, test_global_errors);
    tcase_add_test(tc, test_module_training);
    tcase_add_test(tc, test_batchnorm_running_stats);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(global_suite)
