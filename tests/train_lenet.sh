#!/bin/sh
# One full epoch of lenet on Fashion-MNIST (batch 64, Adam) reaches at
# least 87 % test accuracy. A test of the result, not of time.
. "$top_srcdir/tests/lib.sh"
require_fashion_mnist
run_train 1 --model lenet --dataset fashion-mnist --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 \
    --log-every 200 --seed 1
[ "$rc" -eq 0 ] || fail "mpiflow-train exited with $rc"
acc=$(final_field test_accuracy)
at_least "$acc" 0.87 || fail "lenet test accuracy $acc < 0.87"
echo "lenet: test accuracy $acc after one epoch"
