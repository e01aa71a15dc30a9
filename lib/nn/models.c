/*
 * lib/nn/models.c - the mlp and LeNet of OneFlow's examples as Sequential models.
 */
#include "lib/nn/nn_internal.h"

/* Adds each (name, module) pair; on a failure the rest are destroyed. */
static mf_module *build(int n, const char *const *names, mf_module **mods)
{
    mf_module *seq = mf_sequential_create();
    mf_status st = seq ? MF_OK : mf_last_status();
    for (int i = 0; i < n; i++) {
        if (st != MF_OK || !mods[i]) {
            if (st == MF_OK) st = mf_last_status() != MF_OK ? mf_last_status() : MF_ERR_INTERNAL;
            mf_module_destroy(mods[i]);
            continue;
        }
        st = mf_sequential_add(seq, names[i], mods[i]);
    }
    if (st == MF_OK) st = mf_module_reset_parameters(seq, mf_seed());
    if (st != MF_OK) {
        mf_module_destroy(seq);
        return NULL;
    }
    return seq;
}

mf_module *mf_model_mlp(int64_t in_features, int64_t hidden, int64_t classes)
{
    static const char *const names[] = {"flatten", "hidden", "relu", "output"};
    mf_module *mods[] = {mf_flatten_create(1, -1), mf_linear_create(in_features, hidden, true), mf_relu_create(),
                         mf_linear_create(hidden, classes, true)};
    return build(4, names, mods);
}

mf_module *mf_model_lenet(int64_t channels, int64_t h, int64_t w, int64_t classes)
{
    if (h % 4 || w % 4 || h < 4 || w < 4) {
        mfi_error(MF_ERR_SHAPE, "mf_model_lenet: input %lldx%lld must be a multiple of 4 on each side", (long long)h,
                  (long long)w);
        return NULL;
    }
    static const char *const names[] = {"conv1", "relu1", "pool1", "conv2", "relu2", "pool2",
                                        "flatten", "hidden", "relu3", "dropout", "output"};
    mf_module *mods[] = {
        mf_conv2d_create(channels, 32, 5, 1, 2), mf_relu_create(), mf_max_pool2d_create(2, 2),
        mf_conv2d_create(32, 64, 5, 1, 2), mf_relu_create(), mf_max_pool2d_create(2, 2),
        mf_flatten_create(1, -1), mf_linear_create(64 * (h / 4) * (w / 4), 512, true), mf_relu_create(),
        mf_dropout_create(0.5), mf_linear_create(512, classes, true)};
    return build(11, names, mods);
}

mf_module *mf_model_create(const char *name, int64_t c, int64_t h, int64_t w, int64_t classes)
{
    if (name && !strcmp(name, "mlp")) return mf_model_mlp(c * h * w, 512, classes);
    if (name && !strcmp(name, "lenet")) return mf_model_lenet(c, h, w, classes);
    if (name && !strcmp(name, "vit")) {
        if (h != w) {
            mfi_error(MF_ERR_SHAPE, "vit: the image must be square, not %lldx%lld", (long long)h, (long long)w);
            return NULL;
        }
        mf_vit_config vc = {(int)h, (int)c, h % 7 == 0 ? 7 : 4, 64, 4, 2, 128, (int)classes};
        return mf_model_vit(&vc);
    }
    mfi_error(MF_ERR_ARG, "unknown model '%s' (expected mlp, lenet or vit)", name ? name : "(null)");
    return NULL;
}
