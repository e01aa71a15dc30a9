#!/bin/sh
# One full epoch of the mlp on Fashion-MNIST (batch 64, Adam) reaches at
# least 84 % test accuracy. A test of the result, not of time.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
expect_accuracy mlp 0.84
