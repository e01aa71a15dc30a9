#!/bin/sh
# A tiny GPT's loss and every parameter gradient equal an independent
# PyTorch GPT-2 (tests/gpt_reference.py) that loads the same weights from
# the checkpoint with h5py. SKIPs when Debian's python3-torch or
# python3-h5py is not installed; FAILs when they are but do not import.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
python_deps python3-torch python3-h5py -- torch h5py || skip "$python_missing"
"$MPIEXEC" -n 1 "$top_builddir/tests/gpt_grads" "$TMPDIR_TEST/g.h5" "$TMPDIR_TEST/g.txt" || fail "gpt_grads"
/usr/bin/python3 "$top_srcdir/tests/gpt_reference.py" "$TMPDIR_TEST/g.h5" "$TMPDIR_TEST/g.txt" || fail "PyTorch disagrees"
