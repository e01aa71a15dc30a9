/*
 * lib/io/h5util.h - what the checkpoint writer (ckpt.c) and reader
 * (ckpt_file.c) share: HDF5 types of our dtypes, scalar attributes, and
 * the checksum of doc/design.md section 7.
 */
#ifndef MF_IO_H5UTIL_H
#define MF_IO_H5UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stdint.h>
#include "mpiflow/tensor.h"

hid_t mfi_h5_mem_type(mf_dtype dt);
hid_t mfi_h5_file_type(mf_dtype dt);
/* the dtype of a dataset's file type; false for types we never write */
bool mfi_h5_dtype_of(hid_t ftype, mf_dtype *dt);

void mfi_h5_set_str(hid_t obj, const char *name, const char *value);
void mfi_h5_set_i64(hid_t obj, const char *name, int64_t v);
void mfi_h5_set_f64(hid_t obj, const char *name, double v);
/* false unless the attribute exists and holds one integer, float or
 * fixed-length string (that fits size, NUL included) */
bool mfi_h5_get_i64(hid_t obj, const char *name, int64_t *v);
bool mfi_h5_get_f64(hid_t obj, const char *name, double *v);
bool mfi_h5_get_str(hid_t obj, const char *name, char *buf, size_t size);

/* Why the last HDF5 call failed, from its error stack: the operating
 * system's reason when one is in it ("No space left on device",
 * "Permission denied"), else the innermost message. Returns buf. */
char *mfi_h5_reason(char *buf, size_t size);

/* The checksum attribute: the sum (mod 2^64) over elements of
 * term(value bits, global row-major index * 0x9e3779b97f4a7c15) (see
 * h5util.c and doc/checkpoints.md). Order-free, so each rank adds the
 * share of the block it holds: block [start, start+count) of a tensor of
 * global shape gshape, dense in data, esize bytes an element. */
uint64_t mfi_ckpt_checksum(const void *data, size_t esize, int ndim, const int64_t *gshape, const int64_t *start,
                           const int64_t *count);

#endif
