/*
 * lib/io/ckpt_check.c - the attribute checks of a checkpoint, shared by
 * the parallel loader and mpiflow-ckpt verify (lib/io/ckpt_check.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/global/global_internal.h"
#include "lib/io/ckpt_check.h"

/* a required integer attribute of obj (named where) in [lo, hi] */
static mf_status need_i64(hid_t obj, const char *path, const char *where, const char *name, int64_t lo, int64_t hi,
                          int64_t *v)
{
    if (H5Aexists(obj, name) <= 0)
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is missing", path, name, where);
    if (!mfi_h5_get_i64(obj, name, v))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is not one integer", path, name, where);
    if (*v < lo || *v > hi)
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is %lld, outside [%lld, %lld]", path, name, where,
                (long long)*v, (long long)lo, (long long)hi);
    return MF_OK;
}

static mf_status need_str(hid_t obj, const char *path, const char *where, const char *name, char *buf, size_t size)
{
    if (H5Aexists(obj, name) <= 0)
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is missing", path, name, where);
    if (!mfi_h5_get_str(obj, name, buf, size))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is not a string of at most %zu bytes", path, name, where,
                size - 1);
    return MF_OK;
}

static mf_status need_f64(hid_t obj, const char *path, const char *where, const char *name, double *v)
{
    if (H5Aexists(obj, name) <= 0)
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is missing", path, name, where);
    if (!mfi_h5_get_f64(obj, name, v) || !isfinite(*v))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute '%s' of %s is not one finite number", path, name, where);
    return MF_OK;
}

static mf_status check_optim(hid_t file, const char *path, mfi_ckpt_header *h);

/* "2026-12-01T20:31:01Z" */
static bool iso8601(const char *s)
{
    int y, mo, d, h, mi, se;
    char z = 0, end = 0;
    return strlen(s) == 20 && sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%c%c", &y, &mo, &d, &h, &mi, &se, &z, &end) == 7 &&
           z == 'Z' && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && se <= 60;
}

mf_status mfi_ckpt_check_header(hid_t file, const char *path, mfi_ckpt_header *h)
{
    memset(h, 0, sizeof *h);
    char fmt[64] = "", sums[16] = "mix64";
    int64_t version = 0;
    if (!mfi_h5_get_str(file, "format", fmt, sizeof fmt) || strcmp(fmt, MFI_CKPT_FORMAT))
        MF_FAIL(MF_ERR_FORMAT, "%s: the format attribute is '%s', not '%s': not an mpiflow checkpoint", path, fmt,
                MFI_CKPT_FORMAT);
    if (!mfi_h5_get_i64(file, "version", &version) || version != MFI_CKPT_VERSION)
        MF_FAIL(MF_ERR_FORMAT, "%s: checkpoint version %lld; this mpiflow reads version %d", path, (long long)version,
                MFI_CKPT_VERSION);
    const char *root = "the root";
    MF_TRY(need_i64(file, path, root, "step", 0, INT64_MAX, &h->step));
    MF_TRY(need_i64(file, path, root, "epoch", 0, INT64_MAX, &h->epoch));
    MF_TRY(need_i64(file, path, root, "world_size", 1, 1 << 24, &h->world_size));
    MF_TRY(need_i64(file, path, root, "seed", INT64_MIN, INT64_MAX, &h->seed));
    MF_TRY(need_i64(file, path, root, "rng_draws", 0, INT64_MAX, &h->rng_draws));
    MF_TRY(need_str(file, path, root, "created", h->created, sizeof h->created));
    if (!iso8601(h->created))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute 'created' of the root is '%s', not a UTC time like "
                "2026-12-01T20:31:01Z", path, h->created);
    /* files from before this attribute always had checksums */
    if (H5Aexists(file, "checksums") > 0) MF_TRY(need_str(file, path, root, "checksums", sums, sizeof sums));
    if (strcmp(sums, "mix64") && strcmp(sums, "none"))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute 'checksums' of the root is '%s', not 'mix64' or 'none'", path, sums);
    h->checksums = !strcmp(sums, "mix64");
    if (H5Lexists(file, "data", H5P_DEFAULT) <= 0)
        MF_FAIL(MF_ERR_FORMAT, "%s: the group /data (the data loader's position) is missing", path);
    hid_t g = H5Gopen2(file, "data", H5P_DEFAULT);
    if (g < 0) MF_FAIL(MF_ERR_FORMAT, "%s: /data is not a group", path);
    mf_status st = need_i64(g, path, "/data", "epoch", 0, INT64_MAX, &h->data_epoch);
    if (st == MF_OK) st = need_i64(g, path, "/data", "cursor", 0, INT64_MAX, &h->cursor);
    H5Gclose(g);
    MF_TRY(st);
    h->has_optim = H5Lexists(file, "optim", H5P_DEFAULT) > 0;
    if (h->has_optim) MF_TRY(check_optim(file, path, h));
    /* files from before the digest have none; one that is there must match */
    h->has_digest = H5Aexists(file, "header_digest") > 0;
    int64_t d = 0;
    if (h->has_digest && !mfi_h5_get_i64(file, "header_digest", &d))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute 'header_digest' of the root is not one integer", path);
    h->digest = (uint64_t)d;
    if (h->has_digest && h->digest != mfi_ckpt_header_digest(h))
        MF_FAIL(MF_ERR_FORMAT, "%s: the header (step, data position, optimizer attributes) fails its digest "
                "(stored %016llx, read %016llx): the file is damaged", path, (unsigned long long)h->digest,
                (unsigned long long)mfi_ckpt_header_digest(h));
    return MF_OK;
}

const char *const *mfi_ckpt_hyper_names(const char *type)
{
    static const char *const sgd[] = {"lr", "momentum", "weight_decay", NULL};
    static const char *const rms[] = {"lr", "alpha", "eps", "momentum", "weight_decay", NULL};
    static const char *const adam[] = {"lr", "beta1", "beta2", "eps", "weight_decay", NULL};
    if (!type) return NULL;
    if (!strcmp(type, "sgd")) return sgd;
    if (!strcmp(type, "rmsprop")) return rms;
    if (!strcmp(type, "adam") || !strcmp(type, "adamw")) return adam;
    return NULL;
}

static void fnv(uint64_t *h, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) *h = (*h ^ *p) * 0x100000001b3ULL;
}

uint64_t mfi_ckpt_header_digest(const mfi_ckpt_header *h)
{
    uint64_t d = 0xcbf29ce484222325ULL;
    char t[256];
    snprintf(t, sizeof t, "step=%lld;epoch=%lld;world_size=%lld;seed=%lld;rng_draws=%lld;created=%s;checksums=%d;",
             (long long)h->step, (long long)h->epoch, (long long)h->world_size, (long long)h->seed,
             (long long)h->rng_draws, h->created, h->checksums);
    fnv(&d, t);
    snprintf(t, sizeof t, "data.epoch=%lld;data.cursor=%lld;", (long long)h->data_epoch, (long long)h->cursor);
    fnv(&d, t);
    if (h->has_optim) {
        snprintf(t, sizeof t, "optim.type=%s;optim.step=%lld;", h->optim_type, (long long)h->optim_step);
        fnv(&d, t);
        for (int i = 0; i < h->nhyper; i++) {
            uint64_t bits;
            memcpy(&bits, &h->hyper[i], sizeof bits);
            snprintf(t, sizeof t, "%d=%016llx;", i, (unsigned long long)bits);
            fnv(&d, t);
        }
    }
    return d;
}

static mf_status check_optim(hid_t file, const char *path, mfi_ckpt_header *h)
{
    hid_t g = H5Gopen2(file, "optim", H5P_DEFAULT);
    if (g < 0) MF_FAIL(MF_ERR_FORMAT, "%s: /optim is not a group", path);
    mf_status st = need_str(g, path, "/optim", "type", h->optim_type, sizeof h->optim_type);
    const char *const *names = st == MF_OK ? mfi_ckpt_hyper_names(h->optim_type) : NULL;
    if (st == MF_OK && !names)
        st = mfi_error(MF_ERR_FORMAT, "%s: the optimizer type '%s' in /optim is none that mpiflow writes (sgd, "
                       "rmsprop, adam, adamw)", path, h->optim_type);
    if (st == MF_OK) st = need_i64(g, path, "/optim", "step", 0, INT64_MAX, &h->optim_step);
    for (h->nhyper = 0; st == MF_OK && names[h->nhyper]; h->nhyper++)
        st = need_f64(g, path, "/optim", names[h->nhyper], &h->hyper[h->nhyper]);
    H5Gclose(g);
    return st;
}

mf_status mfi_ckpt_check_dataset(hid_t ds, const char *path, const char *name, int ndim, const mfi_ckpt_header *h,
                                 bool *has_sum, uint64_t *sum)
{
    char where[320], sbp_text[96], pl_text[256];
    snprintf(where, sizeof where, "tensor '%s'", name);
    MF_TRY(need_str(ds, path, where, "sbp", sbp_text, sizeof sbp_text));
    MF_TRY(need_str(ds, path, where, "placement", pl_text, sizeof pl_text));
    mf_nd_sbp sbp;
    if (mf_nd_sbp_parse(sbp_text, &sbp) != MF_OK)
        MF_FAIL(MF_ERR_FORMAT, "%s: tensor '%s' has sbp '%s', which is not an SBP like \"S(0),B\"", path, name, sbp_text);
    int *ranks = malloc(MFI_PLACEMENT_TEXT_CAP * sizeof *ranks), n = 0, nd = 0, mesh[MF_MAX_MESH];
    mf_device_type dev;
    if (!ranks) MF_FAIL(MF_ERR_NOMEM, "%s: out of memory checking tensor '%s'", path, name);
    mf_status st = mfi_placement_text(pl_text, ranks, MFI_PLACEMENT_TEXT_CAP, &n, &nd, mesh, &dev);
    if (st == MF_OK) st = mfi_placement_layout_check("placement", n, ranks, nd, mesh, (int)h->world_size);
    free(ranks);
    if (st != MF_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", mf_last_error());
        MF_FAIL(MF_ERR_FORMAT, "%s: tensor '%s' has placement '%s', which is no placement in a world of %lld ranks (%s)",
                path, name, pl_text, (long long)h->world_size, why);
    }
    if (sbp.ndim != nd)
        MF_FAIL(MF_ERR_FORMAT, "%s: tensor '%s' has sbp '%s' for a %d-D mesh but placement '%s'", path, name, sbp_text,
                nd, pl_text);
    for (int d = 0; d < sbp.ndim; d++)
        if (sbp.d[d].kind == MF_SBP_S && sbp.d[d].axis >= ndim)
            MF_FAIL(MF_ERR_FORMAT, "%s: tensor '%s' has sbp '%s', which splits axis %d of a %d-D tensor", path, name,
                    sbp_text, sbp.d[d].axis, ndim);
    int64_t v = 0;
    *has_sum = H5Aexists(ds, "checksum") > 0;
    if (*has_sum && !mfi_h5_get_i64(ds, "checksum", &v))
        MF_FAIL(MF_ERR_FORMAT, "%s: the attribute 'checksum' of tensor '%s' is not one integer", path, name);
    if (!*has_sum && h->checksums)
        MF_FAIL(MF_ERR_FORMAT, "%s: tensor '%s' has no checksum attribute (and the file says it was written with them)",
                path, name);
    *sum = (uint64_t)v;
    return MF_OK;
}
