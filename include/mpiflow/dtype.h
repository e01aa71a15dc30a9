/*
 * mpiflow/dtype.h - element types of tensors and collectives.
 */
#ifndef MPIFLOW_DTYPE_H
#define MPIFLOW_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include "mpiflow/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mf_dtype {
    MF_F32 = 0,
    MF_F64,      /* CPU only; used for gradient checks */
    MF_I32,
    MF_I64,
    MF_DTYPE_COUNT
} mf_dtype;

MF_API size_t mf_dtype_size(mf_dtype dt);
MF_API const char *mf_dtype_name(mf_dtype dt);   /* "f32" */
MF_API mf_status mf_dtype_parse(const char *s, mf_dtype *dt);
MF_API bool mf_dtype_is_float(mf_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
