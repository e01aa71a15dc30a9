#!/bin/sh
# One full epoch of the mlp on Fashion-MNIST (batch 64, Adam) reaches at
# least 84 % test accuracy. A test of the result, not of time.
. "$top_srcdir/tests/lib.sh"
expect_accuracy mlp 0.84
