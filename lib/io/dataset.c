/*
 * lib/io/dataset.c - in-memory classification datasets: IDX pairs
 * (Fashion-MNIST) and a synthetic, learnable one.
 *
 * Samples stay as bytes (0..255); the loader scales and normalises them
 * per batch, which keeps Fashion-MNIST's 60000 images at 47 MB.
 */
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include "base/philox.h"
#include "lib/io/dataset_internal.h"


void mf_dataset_destroy(mf_dataset *ds)
{
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    free(ds->tokens);
    free(ds);
}

int64_t mf_dataset_size(const mf_dataset *ds) { return ds->n; }
int mf_dataset_classes(const mf_dataset *ds) { return ds->classes; }

void mf_dataset_sample_shape(const mf_dataset *ds, int64_t shape[3])
{
    shape[0] = ds->tokens ? ds->seq_len : ds->c;
    shape[1] = ds->tokens ? 1 : ds->h;
    shape[2] = ds->tokens ? 1 : ds->w;
}

const uint8_t *mfi_dataset_pixels(const mf_dataset *ds) { return ds->pixels; }
const int64_t *mfi_dataset_labels(const mf_dataset *ds) { return ds->labels; }

void mf_dataset_stats(const mf_dataset *ds, double *mean, double *std)
{
    if (ds->tokens) {   /* no pixels to normalise */
        *mean = 0;
        *std = 1;
        return;
    }
    size_t n = (size_t)ds->n * (size_t)(ds->c * ds->h * ds->w);
    double s = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        double v = ds->pixels[i] / 255.0;
        s += v;
        sq += v * v;
    }
    double m = n ? s / (double)n : 0;
    *mean = m;
    *std = n ? sqrt(fmax(sq / (double)n - m * m, 0)) : 1;
}

mf_dataset *mf_dataset_idx_load(const char *images_path, const char *labels_path)
{
    mf_idx im, lb;
    memset(&lb, 0, sizeof lb);
    if (mf_idx_read(images_path, &im) != MF_OK) return NULL;
    mf_dataset *ds = NULL;
    mf_status st = mf_idx_read(labels_path, &lb);
    if (st != MF_OK) goto out;
    if (im.type != 0x08 || (im.ndim != 3 && im.ndim != 4)) {
        mfi_error(MF_ERR_FORMAT, "%s: expected unsigned-byte images [N, H, W] or [N, C, H, W], got type 0x%02x with %d "
                  "dims", images_path, im.type, im.ndim);
        goto out;
    }
    if (lb.type != 0x08 || lb.ndim != 1) {
        mfi_error(MF_ERR_FORMAT, "%s: expected unsigned-byte labels [N], got type 0x%02x with %d dims", labels_path,
                  lb.type, lb.ndim);
        goto out;
    }
    if (lb.dims[0] != im.dims[0]) {
        mfi_error(MF_ERR_FORMAT, "%s has %lld images but %s has %lld labels", images_path, (long long)im.dims[0],
                  labels_path, (long long)lb.dims[0]);
        goto out;
    }
    for (int i = 0; i < im.ndim; i++)
        if (im.dims[i] == 0 || im.dims[i] > INT32_MAX) {
            mfi_error(MF_ERR_FORMAT, "%s: dimension %d of the images is %lld: %s", images_path, i,
                      (long long)im.dims[i], i ? "an image needs at least one pixel" : "the file holds no images");
            goto out;
        }
    ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->labels = malloc((size_t)(lb.dims[0] ? lb.dims[0] : 1) * sizeof *ds->labels))) {
        mfi_error(MF_ERR_NOMEM, "out of memory loading %s", images_path);
        mf_dataset_destroy(ds);
        ds = NULL;
        goto out;
    }
    snprintf(ds->source, sizeof ds->source, "%s", images_path);
    snprintf(ds->labels_file, sizeof ds->labels_file, "%s", labels_path);
    ds->n = im.dims[0];
    ds->c = im.ndim == 4 ? (int)im.dims[1] : 1;
    ds->h = (int)im.dims[im.ndim - 2];
    ds->w = (int)im.dims[im.ndim - 1];
    ds->pixels = im.data;
    im.data = NULL;
    int maxl = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        ds->labels[i] = ((const uint8_t *)lb.data)[i];
        if (ds->labels[i] > maxl) maxl = (int)ds->labels[i];
    }
    ds->classes = maxl + 1;
out:
    free(im.data);
    free(lb.data);
    return ds;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

mf_dataset *mf_dataset_fashion_mnist(const char *dir, bool train)
{
    if (!dir) dir = "/usr/share/datasets/fashion-mnist";
    const char *split = train ? "train" : "t10k";
    char img[1024], lab[1024];
    snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    /* an unpacked copy works too */
    if (!exists(img)) snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte", dir, split);
    if (!exists(lab)) snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte", dir, split);
    if (!exists(img) || !exists(lab)) {
        mfi_error(MF_ERR_IO, "Fashion-MNIST %s split not found in %s: expected %s-images-idx3-ubyte.gz and "
                  "%s-labels-idx1-ubyte.gz (install the Debian package dataset-fashion-mnist, or pass --data-dir)",
                  train ? "training" : "test", dir, split, split);
        return NULL;
    }
    mf_dataset *ds = mf_dataset_idx_load(img, lab);
    if (ds && mf_dataset_set_classes(ds, 10) != MF_OK) {   /* Fashion-MNIST's ten */
        mf_dataset_destroy(ds);
        return NULL;
    }
    return ds;
}

mf_status mf_dataset_set_classes(mf_dataset *ds, int classes)
{
    if (!ds || classes < 2) MF_FAIL(MF_ERR_ARG, "mf_dataset_set_classes: need a dataset and >= 2 classes");
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->labels[i] < 0 || ds->labels[i] >= classes)
            MF_FAIL(MF_ERR_FORMAT, "%s: label %lld of sample %lld is outside the %d classes 0..%d",
                    ds->labels_file[0] ? ds->labels_file : "dataset", (long long)ds->labels[i], (long long)i, classes, classes - 1);
    ds->classes = classes;
    return MF_OK;
}

const char *mf_dataset_source(const mf_dataset *ds)
{
    return ds && ds->source[0] ? ds->source : "synthetic data";
}

mf_dataset *mf_dataset_synthetic(int64_t n, int c, int h, int w, int classes, uint64_t seed, bool train)
{
    if (n < 1 || c < 1 || h < 1 || w < 1 || classes < 2) {
        mfi_error(MF_ERR_ARG, "mf_dataset_synthetic: need n >= 1, a positive shape and >= 2 classes");
        return NULL;
    }
    int64_t d = (int64_t)c * h * w;
    mf_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->pixels = malloc((size_t)(n * d))) || !(ds->labels = malloc((size_t)n * sizeof *ds->labels))) {
        mf_dataset_destroy(ds);
        mfi_error(MF_ERR_NOMEM, "mf_dataset_synthetic: out of memory for %lld samples", (long long)n);
        return NULL;
    }
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = classes;
    const uint64_t kt = mfi_hash_str("synthetic/template");
    const uint64_t kl = mfi_hash_str(train ? "synthetic/train/label" : "synthetic/test/label");
    const uint64_t kn = mfi_hash_str(train ? "synthetic/train/noise" : "synthetic/test/noise");
    /* a sample is its class template (fixed per class) plus noise */
    for (int64_t i = 0; i < n; i++) {
        int64_t y = mfi_philox_u32(seed, kl, (uint64_t)i) % (uint32_t)classes;
        ds->labels[i] = y;
        for (int64_t j = 0; j < d; j++) {
            double t = mfi_u01(mfi_philox_u32(seed, kt, (uint64_t)(y * d + j)));
            double z = mfi_u01(mfi_philox_u32(seed, kn, (uint64_t)(i * d + j)));
            double v = 0.6 * t + 0.4 * z;
            ds->pixels[i * d + j] = (uint8_t)(v * 255.0);
        }
    }
    return ds;
}
