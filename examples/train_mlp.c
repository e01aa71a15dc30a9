/*
 * examples/train_mlp.c - the smallest complete mpiflow program: build a
 * model, train it with Adam on synthetic data, report the loss.
 *
 *   mpicc train_mlp.c $(pkg-config --cflags --libs mpiflow) -o train_mlp
 *   mpiexec -n 1 ./train_mlp
 */
#include <stdio.h>
#include <mpiflow.h>

#define CHECK(x)                                                         \
    do {                                                                 \
        if (!(x)) {                                                      \
            fprintf(stderr, "train_mlp: %s\n", mf_last_error());         \
            return 1;                                                    \
        }                                                                \
    } while (0)

int main(int argc, char **argv)
{
    CHECK(mf_init(&argc, &argv) == MF_OK);
    mf_manual_seed(0);

    /* 4000 samples of 1x8x8 in 4 classes */
    mf_dataset *data = mf_dataset_synthetic(4000, 1, 8, 8, 4, 0, true);
    CHECK(data);
    double mean, std;
    mf_dataset_stats(data, &mean, &std);
    mf_loader_opts lo = {.batch_size = 64, .seed = 0, .shuffle = true, .drop_last = true, .mean = mean, .std = std};
    mf_loader *loader = mf_loader_create(data, &lo);
    CHECK(loader);

    /* flatten -> Linear(64, 32) -> ReLU -> Linear(32, 4), PyTorch names */
    mf_module *model = mf_sequential_create();
    CHECK(mf_sequential_add(model, NULL, mf_flatten_create(1, -1)) == MF_OK);
    CHECK(mf_sequential_add(model, "fc1", mf_linear_create(64, 32, true)) == MF_OK);
    CHECK(mf_sequential_add(model, NULL, mf_relu_create()) == MF_OK);
    CHECK(mf_sequential_add(model, "fc2", mf_linear_create(32, 4, true)) == MF_OK);
    CHECK(mf_module_reset_parameters(model, 0) == MF_OK);   /* keyed by name: same on any rank count */

    mf_tensor_list *params = mf_module_parameters(model);
    mf_adam_opts ao = mf_adam_defaults();
    ao.lr = 0.01;
    mf_optim *opt = mf_adam_create(params, &ao);
    CHECK(opt);

    double first = 0, last = 0;
    for (int step = 1; step <= 200; step++) {
        mf_tensor *x, *y;
        CHECK(mf_loader_next(loader, &x, &y) == MF_OK);
        mf_optim_zero_grad(opt);
        mf_tensor *logits = mf_module_forward(model, x);
        mf_tensor *loss = mf_cross_entropy(logits, y, MF_REDUCTION_MEAN);
        CHECK(loss);
        CHECK(mf_backward(loss) == MF_OK);
        CHECK(mf_optim_step(opt) == MF_OK);
        last = mf_tensor_item(loss);
        if (step == 1) first = last;
        if (step % 50 == 0) mf_log_info("step %d loss %.4f", step, last);
        mf_tensor_destroy(x);   /* every tensor returned is the caller's reference */
        mf_tensor_destroy(y);
        mf_tensor_destroy(logits);
        mf_tensor_destroy(loss);
    }
    mf_log_info("loss %.4f -> %.4f", first, last);

    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_module_destroy(model);
    mf_loader_destroy(loader);
    mf_dataset_destroy(data);
    mf_finalize();
    return last < first ? 0 : 1;
}
