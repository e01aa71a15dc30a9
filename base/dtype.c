/*
 * base/dtype.c - element types: sizes, names, parsing.
 */
#include <string.h>
#include "base/error.h"
#include "mpiflow/dtype.h"

static const size_t dtype_sizes[MF_DTYPE_COUNT] = {4, 8, 4, 8};
static const char *const dtype_names[MF_DTYPE_COUNT] = {"f32", "f64", "i32", "i64"};

size_t mf_dtype_size(mf_dtype dt) { return (unsigned)dt < MF_DTYPE_COUNT ? dtype_sizes[dt] : 0; }
const char *mf_dtype_name(mf_dtype dt) { return (unsigned)dt < MF_DTYPE_COUNT ? dtype_names[dt] : "?"; }
bool mf_dtype_is_float(mf_dtype dt) { return dt == MF_F32 || dt == MF_F64; }

mf_status mf_dtype_parse(const char *s, mf_dtype *dt)
{
    static const char *const alt[MF_DTYPE_COUNT] = {"float32", "float64", "int32", "int64"};
    for (int i = 0; s && i < MF_DTYPE_COUNT; i++)
        if (!strcmp(s, dtype_names[i]) || !strcmp(s, alt[i])) {
            *dt = (mf_dtype)i;
            return MF_OK;
        }
    MF_FAIL(MF_ERR_ARG, "unknown dtype '%s' (expected f32, f64, i32 or i64)", s ? s : "(null)");
}
