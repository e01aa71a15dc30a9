#!/bin/sh
# Damaged or mismatched IDX data is refused before the first step, with
# exit 2 and a message naming the file, on every rank:
# - a gzip file whose CRC does not match (the reader reads to the end of
#   the stream, so zlib checks the trailer), a truncated one, one cut
#   just before its trailer, and data beyond what the header promises;
# - a header promising 27 GB or 650 GB (the buffer grows with what the
#   file holds: no allocation of the promise, no "out of memory");
# - a training label of 255 and a test label of 12 (Fashion-MNIST has
#   10 classes), test images of another shape than the training images;
# - images of width 0, a file of no images, and images LeNet cannot take.
# The files are small IDX pairs cut from Fashion-MNIST.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
require_fashion_mnist
T=$TMPDIR_TEST
FM=/usr/share/datasets/fashion-mnist

be32() {   # a big-endian 32-bit integer, as bytes
    printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"
}
# images OUT N H W [NDIMS]: N images of H x W pixels (taken from Fashion-MNIST's)
images() {
    { printf '\000\000\010\003'; be32 "$2"; be32 "$3"; be32 "$4"; zcat "$FM/train-images-idx3-ubyte.gz" | tail -c +17 |
        head -c $(($2 * $3 * $4)); } >"$1"
}
# labels OUT N [SKIP]: N labels from Fashion-MNIST's
labels() {
    { printf '\000\000\010\001'; be32 "$2"; zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c "$2"; } >"$1"
}
# a good data directory: 96 training and 48 test images, gzip-compressed
good() {
    rm -rf "$T/d"
    mkdir "$T/d"
    images "$T/d/train-images-idx3-ubyte" 96 28 28
    labels "$T/d/train-labels-idx1-ubyte" 96
    images "$T/d/t10k-images-idx3-ubyte" 48 28 28
    labels "$T/d/t10k-labels-idx1-ubyte" 48
    for g in "$T"/d/*-ubyte; do gzip -n "$g"; done
}
# bad WHAT MESSAGE [MODEL]: training on $T/d fails with MESSAGE on 2 ranks before any step
bad() {
    timeout 120 "$MPIEXEC" -n 2 "$TRAIN" --progress lines --model "${3:-mlp}" --data-dir "$T/d" --batch-size 16 \
        --steps 4 --threads 1 >"$T/out" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$T/out"; fail "$1: exit $rc, not 2"; }
    n=$(grep -c "error: .*$2" "$T/out")
    [ "$n" -eq 2 ] || { cat "$T/out"; fail "$1: '$2' on $n ranks, not 2"; }
    grep -q "^step " "$T/out" && { cat "$T/out"; fail "$1: found after training had started"; }
    echo "ok: $1: $(grep -m1 'error:' "$T/out" | sed 's/^mpiflow-train: error: //')"
}

good
run_train 2 --data-dir "$T/d" --batch-size 16 --steps 4 --threads 1 >/dev/null
[ "$rc" -eq 0 ] || fail "the good data: exit $rc"

# a bad CRC: one byte of the trailer
f="$T/d/train-images-idx3-ubyte.gz"
size=$(stat -c %s "$f")
printf '\125' | dd of="$f" bs=1 seek=$((size - 6)) conv=notrunc 2>/dev/null
bad "a bad gzip CRC" "train-images-idx3-ubyte.gz: the file is damaged (incorrect data check)"
good
head -c $(($(stat -c %s "$f") / 2)) "$f" >"$T/half" && mv "$T/half" "$f"
bad "a truncated gzip file" "train-images-idx3-ubyte.gz: truncated, or a damaged header: the header promises 75264 bytes"
good
head -c $(($(stat -c %s "$f") - 8)) "$f" >"$T/cut" && mv "$T/cut" "$f"
bad "a gzip file without its trailer (all the data, no CRC)" "train-images-idx3-ubyte.gz: the file is damaged (it ends inside its gzip stream"
good
images "$T/d/train-images-idx3-ubyte" 96 28 28
printf 'extra' >>"$T/d/train-images-idx3-ubyte"
rm "$T/d/train-images-idx3-ubyte.gz"
bad "data beyond the header's" "train-images-idx3-ubyte: the file holds more data than its header says"
for claim in "36000 28 27000" "65536 4096 2480"; do   # 27 GB, 650 GB
    good
    # shellcheck disable=SC2086
    set -- $claim
    { printf '\000\000\010\003'; be32 "$1"; be32 "$2"; be32 "$3"; zcat "$FM/train-images-idx3-ubyte.gz" | tail -c +17 |
        head -c 75264; } | gzip -n >"$f"
    bad "a header claiming $1 x $2 x $3 bytes" "train-images-idx3-ubyte.gz: .*header promises $(($1 * $2 * $3)) bytes of data but the file holds 75264"
done
grep -q "out of memory" "$T/out" && fail "a huge header: 'out of memory'"

good
{ printf '\000\000\010\001'; be32 96; zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c 17; printf '\377';
  zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +27 | head -c 78; } | gzip -n >"$T/d/train-labels-idx1-ubyte.gz"
bad "a training label of 255" "train-labels-idx1-ubyte.gz: label 255 of sample 17 is outside the 10 classes 0..9"
good
{ printf '\000\000\010\001'; be32 48; zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c 40; printf '\014';
  zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +50 | head -c 7; } | gzip -n >"$T/d/t10k-labels-idx1-ubyte.gz"
bad "a test label of 12" "t10k-labels-idx1-ubyte.gz: label 12 of sample 40 is outside the 10 classes"
good
images "$T/d/t10k-images-idx3-ubyte" 48 32 32
gzip -nf "$T/d/t10k-images-idx3-ubyte"
bad "test images of 32x32" "the test set (.*t10k-images-idx3-ubyte.gz) has images of 1x32x32 but the training set (.*) 1x28x28"
good
{ printf '\000\000\010\003'; be32 96; be32 28; be32 0; } | gzip -n >"$f"
bad "images of width 0" "train-images-idx3-ubyte.gz: dimension 2 of the images is 0: an image needs at least one pixel"
good
{ printf '\000\000\010\003'; be32 0; be32 28; be32 28; } | gzip -n >"$f"
{ printf '\000\000\010\001'; be32 0; } | gzip -n >"$T/d/train-labels-idx1-ubyte.gz"
bad "no images" "train-images-idx3-ubyte.gz: dimension 0 of the images is 0: the file holds no images"
good
images "$T/d/train-images-idx3-ubyte" 96 30 30
images "$T/d/t10k-images-idx3-ubyte" 48 30 30
gzip -nf "$T/d/train-images-idx3-ubyte" "$T/d/t10k-images-idx3-ubyte"
bad "lenet on 30x30 images" "--model lenet cannot take the images of .* (1x30x30): .*must be a multiple of 4" lenet
echo "data faults: every damaged or mismatched file refused before training"
