/*
 * examples/hybrid_mlp.c - OneFlow's mixed_parallel_mlp as a program:
 * the hidden layer data parallel (weights B, data S(0)), the output layer
 * split by output features (S(0)). Only the SBPs say so; the library
 * derives the communication. Run it on any number of ranks: the losses
 * are those of one rank.
 *
 *   mpicc hybrid_mlp.c $(pkg-config --cflags --libs mpiflow) -o hybrid_mlp
 *   mpiexec -n 2 ./hybrid_mlp
 */
#include <stdio.h>
#include <mpiflow.h>

#define CHECK(x)                                                          \
    do {                                                                  \
        if (!(x)) {                                                       \
            fprintf(stderr, "hybrid_mlp: %s\n", mf_last_error());         \
            return 1;                                                     \
        }                                                                 \
    } while (0)

int main(int argc, char **argv)
{
    CHECK(mf_init(&argc, &argv) == MF_OK);
    mf_manual_seed(0);
    mf_placement *world = mf_placement_world();   /* every rank, a 1-D mesh */
    CHECK(world);

    /* each rank makes only its rows of every batch of 64 */
    mf_dataset *data = mf_dataset_synthetic(4000, 1, 8, 8, 4, 0, true);
    CHECK(data);
    double mean, std;
    mf_dataset_stats(data, &mean, &std);
    mf_loader_opts lo = {.batch_size = 64, .shuffle = true, .drop_last = true, .mean = mean, .std = std,
                         .shard_index = mf_placement_index(world), .shard_count = mf_placement_size(world)};
    mf_loader *loader = mf_loader_create(data, &lo);
    CHECK(loader);

    mf_module *model = mf_sequential_create();
    CHECK(mf_sequential_add(model, NULL, mf_flatten_create(1, -1)) == MF_OK);
    CHECK(mf_sequential_add(model, "hidden", mf_linear_create(64, 32, true)) == MF_OK);
    CHECK(mf_sequential_add(model, NULL, mf_relu_create()) == MF_OK);
    CHECK(mf_sequential_add(model, "output", mf_linear_create(32, 4, true)) == MF_OK);
    CHECK(mf_module_reset_parameters(model, 0) == MF_OK);    /* initialise, then make global */
    CHECK(mf_module_param_to_global(model, "output.weight", world, "S(0)") == MF_OK);
    CHECK(mf_module_param_to_global(model, "output.bias", world, "S(0)") == MF_OK);
    CHECK(mf_module_to_global(model, world, "B") == MF_OK);  /* the rest: replicated */

    mf_tensor_list *params = mf_module_parameters(model);
    mf_sgd_opts so = mf_sgd_defaults();
    so.lr = 0.01;
    mf_optim *opt = mf_sgd_create(params, &so);
    CHECK(opt);

    double first = 0, last = 0;
    for (int step = 1; step <= 200; step++) {
        mf_tensor *xs, *ys;
        CHECK(mf_loader_next(loader, &xs, &ys) == MF_OK);
        int64_t rows = mf_loader_batch_rows(loader), xshape[4] = {rows, 1, 8, 8};
        mf_tensor *x = mf_global_from_piece(xs, 4, xshape, world, "S(0)");
        mf_tensor *y = mf_global_from_piece(ys, 1, &rows, world, "S(0)");
        CHECK(x && y);
        mf_optim_zero_grad(opt);
        mf_tensor *logits = mf_module_forward(model, x);
        mf_tensor *loss = mf_cross_entropy(logits, y, MF_REDUCTION_MEAN);
        CHECK(loss);
        CHECK(mf_backward(loss) == MF_OK);
        CHECK(mf_optim_step(opt) == MF_OK);       /* syncs the B gradients, then updates */
        last = mf_tensor_item(loss);              /* collective: the loss is a partial sum */
        if (step == 1) {
            char sbp[32];
            first = last;
            mf_log_info("logits %s, loss %s", mf_global_sbp_str(logits, sbp, sizeof sbp),
                        mf_global_sbp_str(loss, sbp + 16, sizeof sbp - 16));
        }
        if (step % 50 == 0) mf_log_info("step %d loss %.4f", step, last);
        mf_tensor *all[] = {xs, ys, x, y, logits, loss};
        for (int i = 0; i < 6; i++) mf_tensor_destroy(all[i]);
    }
    mf_log_info("loss %.4f -> %.4f on %d rank(s)", first, last, mf_world_size());

    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_module_destroy(model);
    mf_loader_destroy(loader);
    mf_dataset_destroy(data);
    mf_placement_destroy(world);
    mf_finalize();
    return last < first ? 0 : 1;
}
