/*
 * examples/pipeline_mlp.c - OneFlow's "network relay": the hidden layer
 * on rank 0, the output layer on rank 1, and micro-batches flowing
 * through them in the 1F1B schedule. On one rank both stages are one.
 * The losses are those of one rank.
 *
 *   mpicc pipeline_mlp.c $(pkg-config --cflags --libs mpiflow) -o pipeline_mlp
 *   mpiexec -n 2 ./pipeline_mlp
 */
#include <stdio.h>
#include <mpiflow.h>

#define CHECK(x)                                                          \
    do {                                                                  \
        if (!(x)) {                                                       \
            fprintf(stderr, "pipeline_mlp: %s\n", mf_last_error());       \
            return 1;                                                     \
        }                                                                 \
    } while (0)

enum { M = 4, BATCH = 64 };

int main(int argc, char **argv)
{
    CHECK(mf_init(&argc, &argv) == MF_OK);
    mf_manual_seed(0);
    int P = mf_world_size() > 1 ? 2 : 1;
    mf_placement *stage[2] = {mf_placement_parse("0"), mf_placement_parse(P > 1 ? "1" : "0")};
    CHECK(stage[0] && stage[1]);

    mf_module *model = mf_sequential_create();
    CHECK(mf_sequential_add(model, NULL, mf_flatten_create(1, -1)) == MF_OK);
    CHECK(mf_sequential_add(model, "hidden", mf_linear_create(64, 32, true)) == MF_OK);
    CHECK(mf_sequential_add(model, NULL, mf_relu_create()) == MF_OK);
    CHECK(mf_sequential_add(model, "outlayer", mf_linear_create(32, 4, true)) == MF_OK);
    CHECK(mf_module_reset_parameters(model, 0) == MF_OK);
    /* stage 0: flatten and hidden; stage 1: relu and outlayer */
    int first[3] = {0, 2, 4};
    if (P == 1) first[1] = 4;
    for (int s = 0; s < P; s++)
        for (int c = first[s]; c < first[s + 1]; c++)
            CHECK(mf_module_to_global(mf_module_child_at(model, c), stage[s], "B") == MF_OK);
    const char *in_sbp[2] = {"S(0)", "S(0)"};
    mf_pipeline_opts po = {.nstages = P, .first = first, .placements = stage, .input_sbp = in_sbp,
                           .micro_batches = M, .schedule = MF_PIPELINE_1F1B};
    mf_pipeline *pipe = mf_pipeline_create(model, &po);
    CHECK(pipe);

    mf_tensor_list *params = mf_module_parameters(model);
    mf_sgd_opts so = mf_sgd_defaults();
    so.lr = 0.05;
    mf_optim *opt = mf_sgd_create(params, &so);
    CHECK(opt);

    /* every rank makes the M micro-batches of each batch, one after the other */
    mf_dataset *data = mf_dataset_synthetic(4000, 1, 8, 8, 4, 0, true);
    CHECK(data);
    double mean, std;
    mf_dataset_stats(data, &mean, &std);
    mf_loader_opts lo = {.batch_size = BATCH, .shuffle = true, .drop_last = true, .mean = mean, .std = std,
                         .micro_batches = M};
    mf_loader *loader = mf_loader_create(data, &lo);
    CHECK(loader);

    double first_loss = 0, loss = 0;
    for (int step = 1; step <= 200; step++) {
        mf_tensor *xs, *ys, *x[M], *y[M];
        CHECK(mf_loader_next(loader, &xs, &ys) == MF_OK);
        int64_t rows = BATCH / M, xshape[4] = {rows, 1, 8, 8};
        for (int m = 0; m < M; m++) {   /* x[m] on stage 0, y[m] on the last stage */
            mf_tensor *px = mf_narrow(xs, 0, m * rows, rows), *py = mf_narrow(ys, 0, m * rows, rows);
            mf_tensor *cx = mf_contiguous(px);
            x[m] = mf_global_from_piece(cx, 4, xshape, stage[0], "S(0)");
            y[m] = mf_global_from_piece(py, 1, &rows, stage[P - 1], "S(0)");
            CHECK(x[m] && y[m]);
            mf_tensor_destroy(px);
            mf_tensor_destroy(py);
            mf_tensor_destroy(cx);
        }
        CHECK(mf_optim_zero_grad(opt) == MF_OK);
        CHECK(mf_pipeline_train_step(pipe, x, y, NULL, NULL, &loss) == MF_OK);   /* every rank gets the loss */
        CHECK(mf_optim_step(opt) == MF_OK);
        if (step == 1) first_loss = loss;
        if (step % 50 == 0) mf_log_info("step %d loss %.4f", step, loss);
        for (int m = 0; m < M; m++) {
            mf_tensor_destroy(x[m]);
            mf_tensor_destroy(y[m]);
        }
        mf_tensor_destroy(xs);
        mf_tensor_destroy(ys);
    }
    mf_log_info("loss %.4f -> %.4f with %d stage(s), %d micro-batches", first_loss, loss, P, M);

    mf_loader_destroy(loader);
    mf_dataset_destroy(data);
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_pipeline_destroy(pipe);
    mf_module_destroy(model);
    mf_placement_destroy(stage[0]);
    mf_placement_destroy(stage[1]);
    mf_finalize();
    return loss < first_loss ? 0 : 1;
}
