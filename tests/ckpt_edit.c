/*
 * tests/ckpt_edit.c - damages a checkpoint's attributes the way a bad
 * disk, a careless script or an old tool would, for tests/ckpt_faults.sh:
 *
 *   ckpt_edit FILE OBJECT ATTR del          remove the attribute
 *   ckpt_edit FILE OBJECT ATTR int VALUE    set it to a 64-bit integer
 *   ckpt_edit FILE OBJECT ATTR str TEXT     set it to a string
 *
 * OBJECT is "/", "/data", "/optim" or a dataset ("/model/hidden.weight").
 * Plain serial HDF5, no MPI. Exit 0 when done, 1 otherwise.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 5 || (strcmp(argv[4], "del") && argc < 6)) {
        fprintf(stderr, "usage: ckpt_edit FILE OBJECT ATTR del|int VALUE|str TEXT\n");
        return 1;
    }
    const char *file = argv[1], *obj = argv[2], *attr = argv[3], *op = argv[4];
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t o = f >= 0 ? H5Oopen(f, obj, H5P_DEFAULT) : -1;
    if (o < 0) {
        fprintf(stderr, "ckpt_edit: cannot open %s in %s\n", obj, file);
        return 1;
    }
    if (H5Aexists(o, attr) > 0 && H5Adelete(o, attr) < 0) return 1;
    int rc = 0;
    if (strcmp(op, "del")) {
        hid_t sp = H5Screate(H5S_SCALAR), t, a;
        if (!strcmp(op, "int")) {
            long long v = strtoll(argv[5], NULL, 10);
            a = H5Acreate2(o, attr, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
            rc = a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0;
        } else {
            t = H5Tcopy(H5T_C_S1);
            H5Tset_size(t, strlen(argv[5]) + 1);
            a = H5Acreate2(o, attr, t, sp, H5P_DEFAULT, H5P_DEFAULT);
            rc = a < 0 || H5Awrite(a, t, argv[5]) < 0;
            H5Tclose(t);
        }
        if (a >= 0) H5Aclose(a);
        H5Sclose(sp);
    }
    H5Oclose(o);
    return H5Fclose(f) < 0 || rc;
}
