/*
 * apps/parallel.c - mpiflow-train's --parallel modes. Each is only a
 * choice of placement and SBPs; the library derives the communication.
 *   dp      parameters B, data S(0)
 *   mp      Linear weights and biases S(0) (output features), data B
 *           (S(0) for a model with convolutions, which stay data parallel)
 *   hybrid  data S(0), parameters B, the last Linear S(0)
 *   2d      mesh R x C: Linear (B,S(0)), other parameters (B,B), data (S(0),B)
 * Conv layers keep B parameters in every mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/parallel.h"

/* the Linear layer (top-level child) a parameter belongs to, or NULL */
static bool in_linear(mf_module *model, const char *name, char *layer, size_t len)
{
    const char *dot = strrchr(name, '.');
    if (!dot || (size_t)(dot - name) >= len) return false;
    memcpy(layer, name, (size_t)(dot - name));
    layer[dot - name] = '\0';
    mf_module *c = mf_module_child(model, layer);
    return c && !strcmp(mf_module_type(c), "Linear");
}

static mf_status place_params(const par *pp, mf_module *model)
{
    mf_tensor_list *l = mf_module_parameters(model);
    if (!l) return mf_last_status();
    char last[256] = "", layer[256];
    for (int i = 0; i < l->n; i++)
        if (in_linear(model, l->items[i].name, layer, sizeof layer)) snprintf(last, sizeof last, "%s", layer);
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        const char *name = l->items[i].name, *sbp = NULL;
        if (!in_linear(model, name, layer, sizeof layer)) continue;
        if (!strcmp(pp->mode, "mp")) sbp = "S(0)";
        else if (!strcmp(pp->mode, "hybrid") && !strcmp(layer, last)) sbp = "S(0)";
        else if (!strcmp(pp->mode, "2d")) sbp = "B,S(0)";
        if (sbp) st = mf_module_param_to_global(model, name, pp->p, sbp);
    }
    mf_tensor_list_destroy(l);
    if (st == MF_OK) st = mf_module_to_global(model, pp->p, strcmp(pp->mode, "2d") ? "B" : "B,B");
    return st;
}

/* whether the model has convolutions (top-level children) */
static bool has_conv(mf_module *model)
{
    for (int i = 0; i < mf_module_num_children(model); i++)
        if (!strcmp(mf_module_type(mf_module_child_at(model, i)), "Conv2d")) return true;
    return false;
}

mf_status par_setup(par *pp, const train_opts *o, mf_module *model, char *err, size_t len)
{
    int n = mf_world_size();
    memset(pp, 0, sizeof *pp);
    pp->mode = o->parallel ? o->parallel : n > 1 ? "dp" : "none";
    if (!strcmp(pp->mode, "none")) return MF_OK;
    if (!strcmp(pp->mode, "2d")) {
        pp->mesh_r = o->mesh_r ? o->mesh_r : n % 2 == 0 ? 2 : n;
        pp->mesh_c = o->mesh_c ? o->mesh_c : n % 2 == 0 ? n / 2 : 1;
        if (pp->mesh_r * pp->mesh_c != n) {
            snprintf(err, len, "--mesh %dx%d has %d ranks but the job has %d", pp->mesh_r, pp->mesh_c,
                     pp->mesh_r * pp->mesh_c, n);
            return MF_ERR_ARG;
        }
        pp->p = mf_placement_world_mesh(2, (const int[]){pp->mesh_r, pp->mesh_c});
        pp->data_sbp = "S(0),B";
        pp->shard_index = mf_rank() / pp->mesh_c;   /* the row of the mesh */
        pp->shard_count = pp->mesh_r;
    } else {
        pp->p = mf_placement_world();
        /* mp: data B, except that convolutions stay data parallel */
        pp->data_sbp = !strcmp(pp->mode, "mp") && !has_conv(model) ? "B" : "S(0)";
        if (!strcmp(pp->data_sbp, "S(0)")) {
            pp->shard_index = mf_rank();
            pp->shard_count = n;
        }
    }
    if (!pp->p) return mf_last_status();
    mf_status st = place_params(pp, model);
    if (st != MF_OK) snprintf(err, len, "--parallel %s: %s", pp->mode, mf_last_error());
    return st;
}

mf_status par_batch(const par *pp, int64_t rows, mf_tensor **x, mf_tensor **y)
{
    if (!pp->p) return MF_OK;
    mf_tensor *gx, *gy;
    if (pp->shard_count > 1) {
        int64_t xs[MF_MAX_DIMS];
        int nd = mf_tensor_ndim(*x);
        memcpy(xs, mf_tensor_shape(*x), (size_t)nd * sizeof *xs);
        xs[0] = rows;
        gx = mf_global_from_piece(*x, nd, xs, pp->p, pp->data_sbp);
        gy = gx ? mf_global_from_piece(*y, 1, &rows, pp->p, pp->data_sbp) : NULL;
    } else {
        gx = mf_global_from_full(*x, pp->p, pp->data_sbp);
        gy = gx ? mf_global_from_full(*y, pp->p, pp->data_sbp) : NULL;
    }
    mf_tensor_destroy(*x);
    mf_tensor_destroy(*y);
    *x = gx;
    *y = gy;
    if (!gy) {
        mf_tensor_destroy(gx);
        *x = NULL;
        return mf_last_status();
    }
    return MF_OK;
}

void par_describe(const par *pp, char *buf, size_t len)
{
    char pl[128];
    if (!pp->p) snprintf(buf, len, "none (local tensors)");
    else if (pp->mesh_r) snprintf(buf, len, "%s on mesh %dx%d (%s)", pp->mode, pp->mesh_r, pp->mesh_c,
                                  mf_placement_str(pp->p, pl, sizeof pl));
    else snprintf(buf, len, "%s on ranks %s", pp->mode, mf_placement_str(pp->p, pl, sizeof pl));
}

mf_status par_dump_params(mf_module *model, const char *path)
{
    mf_tensor_list *l = mf_module_parameters(model);
    if (!l) return mf_last_status();
    FILE *f = mf_rank() == 0 ? fopen(path, "w") : NULL;
    mf_status st = MF_OK;
    if (mf_rank() == 0 && !f) {
        fprintf(stderr, "mpiflow-train: error: --dump-params: cannot write %s\n", path);
        st = MF_ERR_IO;
    }
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        mf_tensor *t = l->items[i].tensor;
        mf_tensor *full = mf_tensor_is_global(t) ? mf_global_gather(t) : mf_tensor_retain(t);
        if (!full) {
            st = mf_last_status();
            break;
        }
        int64_t cnt = mf_tensor_numel(full);
        float *v = f ? malloc((size_t)(cnt + 1) * sizeof *v) : NULL;
        if (f && v && mf_tensor_copy_out(full, MF_F32, v, cnt) == MF_OK) {
            char sh[128];
            fprintf(f, "# %s %s\n", l->items[i].name, mf_tensor_shape_str(full, sh, sizeof sh));
            for (int64_t k = 0; k < cnt; k++) fprintf(f, "%.9g\n", v[k]);
        }
        free(v);
        mf_tensor_destroy(full);
    }
    if (f && fclose(f) != 0) st = MF_ERR_IO;
    mf_tensor_list_destroy(l);
    return mf_agree(st);
}

void par_destroy(par *pp) { mf_placement_destroy(pp->p); }
