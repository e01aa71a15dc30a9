#!/bin/sh
# The same seed gives a bit-identical loss sequence in two runs (the
# metrics CSV prints each step's loss with 9 significant digits, which
# round-trips a float exactly). lenet covers dropout and shuffling too.
. "${top_srcdir:-.}/tests/lib.sh" || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
for model in mlp lenet; do
    for i in 1 2; do
        run_train 1 --model "$model" --dataset synthetic --synthetic-size 2000,200 --steps 40 --batch-size 32 \
            --optimizer momentum --lr 0.05 --seed 7 --log-every 1 --threads 1 --metrics "$TMPDIR_TEST/$model.$i.csv" \
            >/dev/null
        [ "$rc" -eq 0 ] || fail "$model run $i exited with $rc"
        cut -d, -f1-4 "$TMPDIR_TEST/$model.$i.csv" >"$TMPDIR_TEST/$model.$i.loss"
    done
    n=$(wc -l <"$TMPDIR_TEST/$model.1.loss")
    [ "$n" -eq 41 ] || fail "$model: expected 40 metric rows, got $((n - 1))"
    head -1 "$TMPDIR_TEST/$model.1.csv" | grep -q '^step,epoch,loss,lr,samples_per_sec' || fail "bad CSV header"
    cmp "$TMPDIR_TEST/$model.1.loss" "$TMPDIR_TEST/$model.2.loss" || fail "$model: loss sequences differ"
    # a different seed must change them, or the test proves nothing
    run_train 1 --model "$model" --dataset synthetic --synthetic-size 2000,200 --steps 40 --batch-size 32 \
        --optimizer momentum --lr 0.05 --seed 8 --log-every 1 --threads 1 --metrics "$TMPDIR_TEST/$model.3.csv" >/dev/null
    cut -d, -f1-4 "$TMPDIR_TEST/$model.3.csv" >"$TMPDIR_TEST/$model.3.loss"
    if cmp -s "$TMPDIR_TEST/$model.1.loss" "$TMPDIR_TEST/$model.3.loss"; then fail "$model: seed had no effect"; fi
    echo "$model: 40 losses bit-identical across two runs with seed 7"
done
