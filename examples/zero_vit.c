/*
 * examples/zero_vit.c - a small vision transformer trained under a plan
 * read from text: ZeRO-3 over every rank (each parameter split, gathered
 * for its module's forward and freed after) and recompute of the
 * blocks. Neither the model nor this loop mentions either; the plan
 * does. Run it on any number of ranks: the losses are those of one rank.
 *
 *   mpicc zero_vit.c $(pkg-config --cflags --libs mpiflow) -o zero_vit
 *   mpiexec -n 2 ./zero_vit
 */
#include <stdio.h>
#include <mpiflow.h>

#define CHECK(x)                                                        \
    do {                                                                \
        if (!(x)) {                                                     \
            fprintf(stderr, "zero_vit: %s\n", mf_last_error());         \
            return 1;                                                   \
        }                                                               \
    } while (0)

static const char plan_text[] = "{\"zero\": {\"stage\": 3}, \"recompute\": [\"block*\"]}";

int main(int argc, char **argv)
{
    CHECK(mf_init(&argc, &argv) == MF_OK);
    mf_manual_seed(0);
    mf_plan *plan = mf_plan_parse(plan_text, sizeof plan_text - 1, "zero_vit");
    CHECK(plan);
    mf_placement *world = mf_plan_placement(plan, 0, mf_world_size(), MF_DEV_CPU);   /* dp: every rank */
    CHECK(world);

    /* 1000 images of 1x28x28 in 10 classes; each rank makes its rows */
    mf_dataset *data = mf_dataset_synthetic(1000, 1, 28, 28, 10, 0, true);
    CHECK(data);
    double mean, std;
    mf_dataset_stats(data, &mean, &std);
    mf_loader_opts lo = {.batch_size = 16, .shuffle = true, .drop_last = true, .mean = mean, .std = std,
                         .shard_index = mf_placement_index(world), .shard_count = mf_placement_size(world)};
    mf_loader *loader = mf_loader_create(data, &lo);
    CHECK(loader);

    /* 16 patches of 7x7, width 32, 2 heads, 2 blocks */
    mf_vit_config vc = {.image = 28, .channels = 1, .patch = 7, .dim = 32, .heads = 2, .depth = 2, .mlp_dim = 64,
                        .classes = 10};
    mf_module *model = mf_model_vit(&vc);
    CHECK(model);
    CHECK(mf_plan_apply(plan, model, world) == MF_OK);   /* every parameter's SBP, by the plan */
    CHECK(mf_plan_apply_recompute(plan, model) == MF_OK);
    char data_sbp[32];
    CHECK(mf_plan_data_sbp(plan, data_sbp, sizeof data_sbp) == MF_OK);

    mf_tensor_list *params = mf_module_parameters(model);
    mf_adam_opts ao = mf_adam_defaults();
    ao.lr = 0.003;
    mf_optim *opt = mf_adam_create(params, &ao);
    CHECK(opt);

    double first = 0, last = 0;
    for (int step = 1; step <= 30; step++) {
        mf_tensor *xs, *ys;
        CHECK(mf_loader_next(loader, &xs, &ys) == MF_OK);
        int64_t rows = mf_loader_batch_rows(loader), xshape[4] = {rows, 1, 28, 28};
        mf_tensor *x = mf_global_from_piece(xs, 4, xshape, world, data_sbp);
        mf_tensor *y = mf_global_from_piece(ys, 1, &rows, world, data_sbp);
        CHECK(x && y);
        mf_optim_zero_grad(opt);
        mf_tensor *logits = mf_module_forward(model, x);
        mf_tensor *loss = mf_cross_entropy(logits, y, MF_REDUCTION_MEAN);
        CHECK(loss);
        CHECK(mf_backward(loss) == MF_OK);
        CHECK(mf_optim_step(opt) == MF_OK);
        last = mf_tensor_item(loss);
        if (step == 1) {
            char sbp[32];
            first = last;
            mf_log_info("patch.proj.weight %s", mf_global_sbp_str(mf_module_get(model, "patch.proj.weight"), sbp,
                                                                  sizeof sbp));
        }
        if (step % 10 == 0) mf_log_info("step %d loss %.4f", step, last);
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
    mf_plan_destroy(plan);
    mf_finalize();
    return last < first ? 0 : 1;
}
