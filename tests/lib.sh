# shellcheck shell=sh disable=SC2034
# tests/lib.sh - helpers for the shell tests (sourced).
# Environment from make check: MPIEXEC, top_srcdir, top_builddir. A test
# run by hand sets them itself (tests/README: top_srcdir=. top_builddir=.
# sh tests/NAME.sh from the build directory); without them it stops
# with a harness error instead of testing the wrong tree.
set -u
: "${MPIEXEC:=mpiexec}"

# harness_error WHAT: the test itself could not do what it set out to
# (a wait that timed out, a signal with no process to go to, a missing
# helper): automake's ERROR (exit 99), never a PASS or a product FAIL
harness_error() {
    echo "ERROR (test harness): $*" >&2
    exit 99
}

[ -n "${top_srcdir:-}" ] && [ -n "${top_builddir:-}" ] ||
    harness_error "top_srcdir and top_builddir are not set: run the shell tests with make check, or as
    top_srcdir=SRC top_builddir=BUILD sh SRC/tests/NAME.sh"
[ -f "$top_srcdir/tests/lib.sh" ] || harness_error "top_srcdir=$top_srcdir holds no tests/lib.sh"
TRAIN="$top_builddir/mpiflow-train"
# One compute thread per rank unless a test asks for more (--threads):
# make -j2 check runs two tests at once on two cores, and the OpenMP
# threads of a 1-rank run that wait on a core the other test holds made
# such runs up to 25 times slower (a LeNet epoch: 409 s against 16 s).
: "${MF_THREADS:=1}"
export MF_THREADS
TMPDIR_TEST=$(mktemp -d "${TMPDIR:-/tmp}/mf_test.XXXXXX") || harness_error "mktemp -d failed"
trap 'rm -rf "$TMPDIR_TEST"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

skip() {
    echo "SKIP: $*" >&2
    exit 77
}

# python_deps PKG... -- MODULE...: whether /usr/bin/python3 can import the
# modules. Returns 1 (the caller SKIPs) only when one of Debian's packages
# is absent, checked as absence; with every package installed an import
# that fails is a broken install and FAILs with Python's reason. Where
# there is no dpkg, a failed import counts as absence.
python_deps() {
    pkgs=
    while [ $# -gt 0 ] && [ "$1" != -- ]; do pkgs="$pkgs $1"; shift; done
    [ $# -gt 0 ] && shift
    mods=$(echo "$*" | tr ' ' ',')
    if command -v dpkg-query >/dev/null 2>&1; then
        for p in $pkgs; do
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
                python_missing="Debian's $p is not installed"
                return 1
            }
        done
        why=$(/usr/bin/python3 -c "import $mods" 2>&1) ||
            fail "$pkgs installed, but python3 cannot import $mods: $(echo "$why" | tail -1)"
        return 0
    fi
    /usr/bin/python3 -c "import $mods" 2>/dev/null && return 0
    python_missing="python3 cannot import $mods (no dpkg to tell an absent package from a broken one)"
    return 1
}

# count_matches PATTERN FILE: lines of FILE matching PATTERN (grep -E);
# 0 when the file does not exist yet
count_matches() {
    if [ -f "$2" ]; then grep -cE -- "$1" "$2"; else echo 0; fi
}

# wait_until SECONDS WHAT COMMAND...: runs COMMAND every 0.05 s until it
# succeeds; a harness error naming WHAT after SECONDS
wait_until() {
    wu_limit=$1 wu_what=$2
    shift 2
    wu_end=$(($(date +%s) + wu_limit))
    until "$@"; do
        [ "$(date +%s)" -lt "$wu_end" ] || harness_error "waited $wu_limit s for $wu_what"
        sleep 0.05
    done
}

# has_lines MIN PATTERN FILE: FILE exists and holds at least MIN lines
# matching PATTERN (for wait_until)
has_lines() { [ "$(count_matches "$2" "$3")" -ge "$1" ]; }

# rank_pid MARK R: the pid of world rank R of the job whose command line
# holds MARK
rank_pid() {
    for rp_p in $(pgrep -f -- "$1"); do
        tr '\0' '\n' <"/proc/$rp_p/environ" 2>/dev/null | grep -qx "PMI_RANK=$2" && { echo "$rp_p"; return 0; }
    done
    return 1
}

# send SIG WHAT PID...: kill -SIG to each PID; a harness error when
# there is none or one is gone already (the signal would test nothing)
send() {
    sd_sig=$1 sd_what=$2
    shift 2
    [ $# -gt 0 ] || harness_error "no process to send SIG$sd_sig to ($sd_what)"
    for sd_p in "$@"; do
        case $sd_p in
        -[0-9]* | [0-9]*) ;;
        *) harness_error "'$sd_p' is not a process id ($sd_what)" ;;
        esac
        kill -"$sd_sig" "$sd_p" 2>/dev/null || harness_error "SIG$sd_sig to $sd_p ($sd_what): no such process"
    done
}

# refused NP WANT ARGS...: mpiflow-train on NP ranks exits 2 with an
# error matching WANT on every rank (bad input is refused, not trained on)
refused() {
    np=$1
    want=$2
    shift 2
    run_train "$np" "$@" >/dev/null
    [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2"
    [ "$(grep -c "error: .*$want" "$TMPDIR_TEST/out")" -eq "$np" ] ||
        { cat "$TMPDIR_TEST/out"; fail "$*: not '$want' on all $np ranks"; }
    echo "ok: $* -> $want"
}

# run_train NP ARGS...: mpiflow-train on NP ranks; output in $TMPDIR_TEST/out,
# exit status in $rc.
run_train() {
    np=$1
    shift
    "$MPIEXEC" -n "$np" "$TRAIN" --progress lines "$@" >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
}

# final_field NAME: the value of NAME= on the 'final' line of the last run.
final_field() {
    grep '^final ' "$TMPDIR_TEST/out" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# at_least VALUE MIN: true if VALUE >= MIN (decimals).
at_least() {
    awk -v v="$1" -v m="$2" 'BEGIN { exit !(v != "" && v + 0 >= m + 0) }'
}

# gpu_device: a device node or driver entry of an NVIDIA GPU on this
# machine, whatever CUDA says; empty when there is none
gpu_device() {
    for g in /dev/nvidia[0-9]* /proc/driver/nvidia/gpus/*; do
        [ -e "$g" ] && { echo "$g"; return 0; }
    done
    return 1
}

# skip_unless_cuda OUTPUT: after a --device cuda run that exited 2 saying
# CUDA is unavailable: SKIP when the machine has no GPU (or the build
# no CUDA backend, or CUDA_VISIBLE_DEVICES hides them all), FAIL with the
# CUDA error when a GPU is there
skip_unless_cuda() {
    why=$(grep -o 'CUDA is unavailable.*' "$1" | head -1)
    dev=$(gpu_device) || skip "no GPU: $why"
    case $why in *"built without"*) skip "no CUDA backend in this build: $why" ;; esac
    [ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] && skip "CUDA_VISIBLE_DEVICES hides every GPU: $why"
    fail "a GPU is present ($dev) but CUDA failed to start: $why"
}

require_fashion_mnist() {
    [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
        fail "Fashion-MNIST is missing: run scripts/install-deps.sh (Debian package dataset-fashion-mnist)"
}

# expect_accuracy MODEL MIN: one full epoch of MODEL on Fashion-MNIST
# (batch 64, Adam, lr 0.001) reaches at least MIN test accuracy.
expect_accuracy() {
    require_fashion_mnist
    run_train 1 --model "$1" --dataset fashion-mnist --epochs 1 --batch-size 64 --optimizer adam --lr 0.001 \
        --log-every 200 --seed 1
    [ "$rc" -eq 0 ] || fail "mpiflow-train exited with $rc"
    acc=$(final_field test_accuracy)
    at_least "$acc" "$2" || fail "$1 test accuracy $acc < $2"
    echo "$1: test accuracy $acc after one epoch (threshold $2)"
}

# run_suite NP NAME [ENV=VALUE...]: the Check suite tests/NAME on NP ranks
# (with the environment given); fails unless every check passes.
run_suite() {
    np=$1
    name=$2
    shift 2
    env "$@" MF_NP="$np" timeout 600 "$top_srcdir/tests/mpirun.sh" "$top_builddir/tests/$name" >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
    [ "$rc" -eq 0 ] || fail "$name on $np ranks $*: exit $rc"
    grep -q "100%: Checks" "$TMPDIR_TEST/out" || fail "$name on $np ranks $*: no summary"
}

# losses FILE.csv: the loss column of a --metrics file
losses() { tail -n +2 "$1" | cut -d, -f3; }

# same_losses A.csv B.csv WHAT [TOL]: the losses of two --metrics files
# agree within TOL, relative (default 1e-5; 0: the same digits)
same_losses() {
    losses "$2" >"$TMPDIR_TEST/b.loss"
    losses "$1" | paste -d' ' - "$TMPDIR_TEST/b.loss" |
        awk -v what="$3" -v tol="${4:-1e-5}" '{ d = $1 - $2; if (d < 0) d = -d; r = d / (1e-3 + ($1 < 0 ? -$1 : $1));
                 if (r > w) w = r; n++ }
             END { printf "ok: %s: worst relative loss difference %.3g over %d steps\n", what, w, n;
                   exit !(n > 0 && w <= tol) }' || fail "$3: losses differ"
}

# close_params A B TOL: two --dump-params files agree: per "# name" block,
# max |a - b| / max |b| (each tensor's scale), worst over all blocks, at
# most TOL
close_params() {
    paste -d' ' "$1" "$2" | awk -v tol="$3" '
        function done() { if (n && m > 0 && d / m > w) w = d / m; if (n && m == 0 && d > w) w = d }
        /^#/ { done(); d = 0; m = 0; n = 0; next }
        { e = $1 - $2; if (e < 0) e = -e; b = $2 < 0 ? -$2 : $2; if (e > d) d = e; if (b > m) m = b; n++; all++ }
        END { done(); printf "%d values, worst difference %.3g of the tensor'"'"'s largest\n", all, w; exit !(all > 0 && w <= tol) }'
}

# word_text FILE LINES: a text with structure for the GPT tests: LINES
# numbered sentences of 3-6 words from a vocabulary of eight (seeded)
word_text() {
    awk -v lines="$2" 'BEGIN { split("the cat sat on a mat and dog", w, " ");
             srand(7); for (i = 0; i < lines; i++) { s = ""; n = 3 + int(rand() * 4);
             for (j = 0; j < n; j++) s = s w[1 + int(rand() * 8)] " "; print i % 10, s "." } }' >"$1"
}
