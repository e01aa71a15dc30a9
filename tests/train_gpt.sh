#!/bin/sh
# mpiflow-train --model gpt end to end, on a small GPT over a text file
# that the test writes (bytes): it learns (the validation loss falls
# below the unigram model's), data parallel on 2 and 3 ranks and ZeRO-1
# give the 1-rank losses within 1e-5, a resumed run equals an unbroken
# one, --metrics gets the validation loss, --trace every rank's spans,
# and bad data is refused with exit 2 on every rank.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T="$TMPDIR_TEST"

# a text with structure: numbered sentences of a few words, 60 KiB
word_text "$T/text.txt" 2600
SMALL="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --seq-len 32 --batch-size 12 --threads 1"

run_train 1 $SMALL --steps 60 --lr 3e-3 --log-every 10 --val-every 30 --val-batches 8 --metrics "$T/m1.csv" --checkpoint "$T/g.h5" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "training exit $rc"; }
grep -q 'tokens/s' "$T/out" || fail "no tokens/s in the progress lines"
grep -q '^step 30 val_loss=' "$T/out" || fail "no validation loss at step 30"
vl=$(final_field val_loss)
# the unigram entropy of this text, in nats per byte: what a model that
# ignores context gets; a model that learns goes below it
uni=$(od -An -v -tu1 "$T/text.txt" | tr -s ' ' '\n' | awk 'NF { c[$1]++; n++ } END { for (k in c) h -= c[k] / n * log(c[k] / n); print h }')
awk -v v="$vl" -v u="$uni" 'BEGIN { exit !(v + 0 < u - 0.3) }' || fail "val_loss $vl is not well below the unigram entropy $uni"
echo "ok: val_loss $vl < unigram $uni - 0.3"
head -1 "$T/m1.csv" | grep -q '^step,epoch,loss,lr,tokens_per_sec,elapsed_s,val_loss$' || fail "metrics header"
grep -q '^30,,,,,,' "$T/m1.csv" || fail "no validation row in the metrics"
[ "$(grep -c '^60,,,,,,' "$T/m1.csv")" -eq 1 ] || fail "no final validation row in the metrics"

# losses of the training rows (step,loss) of a metrics file
losses() { awk -F, 'NR > 1 && $3 != "" { print $1, $3 }' "$1"; }
close() { # FILE_A FILE_B: every loss within 1e-5 (relative)
    losses "$1" >"$T/a"
    losses "$2" >"$T/b"
    [ "$(wc -l <"$T/a")" -gt 0 ] && [ "$(wc -l <"$T/a")" -eq "$(wc -l <"$T/b")" ] || fail "$1 and $2 differ in rows"
    paste "$T/a" "$T/b" | awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 1e-5 * ($2 > 1 ? $2 : 1)) { print "step " $1 ": " $2 " vs " $4; bad = 1 } } END { exit bad }' ||
        fail "$1 and $2: losses differ by more than 1e-5"
}

# a constant rate, so that a run cut in two follows the same schedule
SMALL="$SMALL --lr-schedule constant"
run_train 1 $SMALL --steps 12 --log-every 1 --no-eval --metrics "$T/d1.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "1-rank reference exit $rc"
for np in 2 3; do
    run_train "$np" $SMALL --steps 12 --log-every 1 --no-eval --metrics "$T/d$np.csv" --trace "$T/t$np.json" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "$np-rank dp exit $rc"; }
    close "$T/d1.csv" "$T/d$np.csv"
    echo "ok: dp on $np ranks equals 1 rank within 1e-5"
done
# --trace: every rank's forward, backward and gradient allreduce spans
grep -q '^trace: .*t3.json; gradient communication' "$T/out" || fail "--trace: no summary line"
for pid in 0 1 2; do
    for name in forward backward "allreduce bucket 0"; do
        grep -q "\"name\":\"$name[^\"]*\",\"cat\":\"[a-z]*\",\"ph\":\"X\",\"pid\":$pid," "$T/t3.json" ||
            fail "trace: no '$name' span for rank $pid"
    done
done
echo "ok: --trace on 3 ranks has every rank's spans"
run_train 2 $SMALL --steps 12 --log-every 1 --no-eval --zero 1 --metrics "$T/z2.csv" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "ZeRO-1 exit $rc"; }
close "$T/d1.csv" "$T/z2.csv"
echo "ok: ZeRO-1 on 2 ranks equals 1 rank within 1e-5"

# resume: 6 steps, checkpoint, 6 more (on 2 ranks) = 12 unbroken
run_train 1 $SMALL --steps 6 --log-every 1 --no-eval --checkpoint "$T/r.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "first half exit $rc"
run_train 2 $SMALL --steps 12 --log-every 1 --no-eval --resume "$T/r.h5" --metrics "$T/r2.csv" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "resume exit $rc"; }
awk -F, 'NR > 1 && $1 > 6' "$T/d1.csv" >"$T/tail1"
{ head -1 "$T/d1.csv"; cat "$T/tail1"; } >"$T/d1tail.csv"
close "$T/d1tail.csv" "$T/r2.csv"
echo "ok: resumed on 2 ranks equals the unbroken run"

# bad data: exit 2 on every rank, with the reason
printf 'short' >"$T/short.txt"
refused 2 "fewer than one window" --model gpt --dataset "text:$T/short.txt" --seq-len 32 --steps 1
printf '\211\330\064\001\001\000\000\000' >"$T/bad_train.bin"   # 20240521, version 1, then zeros
head -c 1016 /dev/zero >>"$T/bad_train.bin"
refused 2 "bad magic number" --model gpt --dataset "tokens:$T/bad_*.bin" --steps 1
printf '\001\000\377\377' >"$T/big.bin"
refused 2 "not below the vocabulary size" --model gpt --dataset "tokens:$T/big.bin" --vocab-size 300 --seq-len 1 --batch-size 1 --no-eval --steps 1
refused 1 "holds images" --model gpt --dataset synthetic --steps 1
refused 1 "only for --model gpt" --model mlp --n-layer 2 --steps 1
refused 1 "not available for gpt" --model gpt --dataset "text:$T/text.txt" --parallel mp --steps 1
echo "ok: bad data and flags refused"
