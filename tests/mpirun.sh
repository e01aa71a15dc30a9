#!/bin/sh
# Runs one test program under mpiexec: MF_NP ranks (default 1), Check's
# fork mode off (MPI in a forked child is unsafe), one BLAS thread per
# rank when ranks outnumber cores.
np=${MF_NP:-1}
exec "${MPIEXEC:-mpiexec}" -n "$np" -genv CK_FORK no "$@"
