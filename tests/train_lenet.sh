#!/bin/sh
# One full epoch of lenet on Fashion-MNIST (batch 64, Adam) reaches at
# least 87 % test accuracy. A test of the result, not of time.
. "$top_srcdir/tests/lib.sh"
expect_accuracy lenet 0.87
