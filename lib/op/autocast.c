/*
 * lib/op/autocast.c - bfloat16 autocast: mixed precision for the GEMMs.
 *
 * While autocast is bf16, matmul, linear and conv2d round their f32
 * operands to bfloat16 (round to nearest, ties to even) and accumulate
 * in f32, as PyTorch's autocast does for these ops; a backend may run
 * such a GEMM on bfloat16 hardware (tensor cores), since the rounded
 * operands convert exactly. Outputs, the other ops, parameters (the f32
 * master weights) and optimizer state stay f32. Each recorded op keeps
 * the precision of its forward for its backward GEMMs.
 *
 * Where the backend multiplies bfloat16 (oneDNN on AVX512_BF16 or AMX),
 * linear and conv2d convert each operand once into an image: x and the
 * weight at the forward, kept with the saved tensors for the backward's
 * two GEMMs, and the incoming gradient once for both of them (half the
 * conversions of rounding inside every GEMM; the images cost half the
 * saved f32 operands' memory until the backward). A convolution's images
 * are made in the layout the engine's kernels read (oneDNN's blocked
 * layouts) where the backend can: the conversion and the reorder in one
 * pass, and no reorder again in the passes that share the operand.
 */
#include "lib/internal.h"

static _Thread_local mf_precision cur = MF_PRECISION_FP32;

mf_status mf_autocast_set(mf_precision p)
{
    if (p != MF_PRECISION_FP32 && p != MF_PRECISION_BF16)
        MF_FAIL(MF_ERR_ARG, "mf_autocast_set: unknown precision %d (fp32 or bf16)", (int)p);
    cur = p;
    return MF_OK;
}

mf_precision mf_autocast_get(void) { return cur; }

const char *mf_precision_name(mf_precision p)
{
    return p == MF_PRECISION_BF16 ? "bf16" : p == MF_PRECISION_FP32 ? "fp32" : "?";
}

mf_status mf_precision_parse(const char *s, mf_precision *p)
{
    if (s && !strcmp(s, "fp32")) *p = MF_PRECISION_FP32;
    else if (s && !strcmp(s, "bf16")) *p = MF_PRECISION_BF16;
    else MF_FAIL(MF_ERR_ARG, "unknown precision '%s' (fp32 or bf16)", s ? s : "(null)");
    return MF_OK;
}

bool mfi_autocast_bf16(mf_dtype dt) { return cur == MF_PRECISION_BF16 && dt == MF_F32; }

int mfi_autocast_push(bool bf16)
{
    int prev = (int)cur;
    cur = bf16 ? MF_PRECISION_BF16 : MF_PRECISION_FP32;
    return prev;
}

void mfi_autocast_pop(int prev) { cur = (mf_precision)prev; }

mf_tensor *mfi_bf16_operand(mf_tensor *x, bool contiguous)
{
    if (!mfi_backend_of(x)->bf16_in_kernel) return mfi_bf16_copy(x);
    return contiguous ? mfi_contiguous_raw(x) : mf_tensor_retain(x);
}

mf_tensor *mfi_bf16_copy(mf_tensor *x)
{
    mf_tensor *r = mfi_tensor_new_on(mf_tensor_device(x), x->dtype, x->ndim, x->shape);
    if (!r) return NULL;
    mfi_view o = mfi_view_of(r), i = mfi_view_of(x);
    mf_status st;
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(r), unary_fwd, MFI_UN_ROUND_BF16, &o, &i, 0.0);
    if (st != MF_OK) {
        mf_tensor_destroy(r);
        return NULL;
    }
    return r;
}

mf_tensor *mfi_bf16_image(mf_tensor *t, mf_prof_class cls)
{
    const mfi_backend *be = mfi_backend_of(t);
    if (!be->bf16_images || !be->bf16_images() || t->dtype != MF_F32 || !mf_tensor_is_contiguous(t)) return NULL;
    int64_t n = mf_tensor_numel(t), half = (n + 1) / 2;
    if (n == 0) return NULL;
    mf_tensor *img = mfi_tensor_new_on(mf_tensor_device(t), MF_F32, 1, &half);
    if (!img) return NULL;   /* the GEMM converts it instead */
    mf_status st;
    MFI_HOOK(st, cls, be, bf16_image, mf_tensor_data(img), mf_tensor_data(t), n);
    if (st != MF_OK) {
        mf_tensor_destroy(img);
        return NULL;
    }
    return img;
}

mf_tensor *mfi_conv_image(mf_tensor *t, const mfi_conv2d *g, int which, bool *own)
{
    const mfi_backend *be = mfi_backend_of(t);
    *own = false;
    bool plain = !be->conv_image_bytes || !be->conv_image || !be->bf16_images || !be->bf16_images() ||
                 t->dtype != MF_F32 || !mf_tensor_is_contiguous(t) || mf_tensor_numel(t) == 0;
    int64_t bytes = plain ? 0 : be->conv_image_bytes(g, which);
    if (bytes <= 0) return mfi_bf16_image(t, MF_PROF_CONV);
    int64_t n = (bytes + 3) / 4;
    mf_tensor *img = mfi_tensor_new_on(mf_tensor_device(t), MF_F32, 1, &n);
    if (!img) return NULL;   /* the kernels convert t instead */
    mf_status st;
    MFI_HOOK(st, MF_PROF_CONV, be, conv_image, g, which, mf_tensor_data(img), mf_tensor_data(t));
    if (st != MF_OK) {
        mf_tensor_destroy(img);
        return NULL;
    }
    *own = true;
    return img;
}
