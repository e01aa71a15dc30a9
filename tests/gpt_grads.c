/*
 * tests/gpt_grads.c - for tests/gpt_reference.sh: builds a tiny GPT,
 * saves it as a checkpoint, and writes the loss of one fixed batch and
 * every parameter's gradient as text, for PyTorch to check.
 *   gpt_grads OUT.h5 OUT.txt
 * OUT.txt: "tokens B T x... y...", "loss L", then "grad NAME N v..." per
 * parameter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpiflow.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: gpt_grads OUT.h5 OUT.txt\n");
        return 2;
    }
    if (mf_init(&argc, &argv) != MF_OK) return 1;
    const mf_gpt_config c = {2, 2, 16, 12, 23, 0.0};
    const int64_t B = 3, T = 10;
    mf_manual_seed(11);
    mf_module *m = mf_model_gpt(&c);
    FILE *f = fopen(argv[2], "w");
    /* weights of a trained model's size, so that every nonlinearity works
     * away from its linear part (GPT-2's init keeps them near it) */
    mf_tensor_list *pl = m ? mf_module_parameters(m) : NULL;
    for (int i = 0; pl && i < pl->n; i++) {
        mf_tensor *t = pl->items[i].tensor;
        mf_status st = mf_normal_keyed_(t, 0.0, mf_tensor_ndim(t) >= 2 ? 0.3 : 0.5, 11, pl->items[i].name);
        if (st == MF_OK && strstr(pl->items[i].name, "ln_") && strstr(pl->items[i].name, ".weight")) {
            mf_tensor *one = mf_ones(MF_F32, mf_tensor_ndim(t), mf_tensor_shape(t));   /* LayerNorm weights near 1 */
            st = one ? mf_add_(t, one, 1.0) : mf_last_status();
            mf_tensor_destroy(one);
        }
        if (st != MF_OK) return 1;
    }
    mf_tensor_list_destroy(pl);
    if (!m || !f || mf_ckpt_save(argv[1], m, NULL, NULL) != MF_OK) {
        fprintf(stderr, "gpt_grads: %s\n", mf_last_error());
        return 1;
    }
    mf_tensor *x = mf_empty(MF_I64, MF_DIMS(B, T)), *y = mf_empty(MF_I64, MF_DIMS(B, T));
    int64_t *px = mf_tensor_data(x), *py = mf_tensor_data(y);
    for (int64_t i = 0; i < B * T; i++) {   /* a fixed, irregular batch */
        px[i] = (7 * i + 3) % c.vocab_size;
        py[i] = (i * i + 5) % c.vocab_size;
    }
    fprintf(f, "tokens %lld %lld", (long long)B, (long long)T);
    for (int64_t i = 0; i < B * T; i++) fprintf(f, " %lld", (long long)px[i]);
    for (int64_t i = 0; i < B * T; i++) fprintf(f, " %lld", (long long)py[i]);
    fputc('\n', f);
    mf_tensor *loss = mf_gpt_loss(m, x, y);
    if (!loss || mf_backward(loss) != MF_OK) {
        fprintf(stderr, "gpt_grads: %s\n", mf_last_error());
        return 1;
    }
    fprintf(f, "loss %.9g\n", mf_tensor_item(loss));
    mf_tensor_list *l = mf_module_parameters(m);
    for (int i = 0; i < l->n; i++) {
        mf_tensor *g = mf_tensor_grad(l->items[i].tensor);
        int64_t n = mf_tensor_numel(l->items[i].tensor);
        double *v = calloc((size_t)n, sizeof *v);
        if (g && mf_tensor_copy_out(g, MF_F64, v, n) != MF_OK) return 1;
        fprintf(f, "grad %s %lld", l->items[i].name, (long long)n);
        for (int64_t k = 0; k < n; k++) fprintf(f, " %.9g", v[k]);
        fputc('\n', f);
        free(v);
    }
    fclose(f);
    mf_tensor_list_destroy(l);
    mf_tensor_destroy(loss);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_module_destroy(m);
    mf_finalize();
    return 0;
}
