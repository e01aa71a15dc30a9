#!/bin/sh
# Installs the Debian packages mpiflow needs, skipping those already
# present. Idempotent; run as root (or through sudo when available).
#   scripts/install-deps.sh            build, test and run dependencies: the
#                                      fortunes text for the GPT quick start,
#                                      PyTorch and h5py for the GPT reference
#                                      test (and Slurm for tests/slurm.sh, when
#                                      it installs)
#   scripts/install-deps.sh --bench    the same (PyTorch is a test dependency now)
set -eu

PKGS="build-essential autoconf automake libtool libtool-bin pkg-config
mpich libmpich-dev libopenblas-dev libopenblas-openmp-dev libhwloc-dev hwloc
libhdf5-mpich-dev hdf5-tools check zlib1g-dev librandom123-dev
dataset-fashion-mnist gdb fortunes gnuplot-nox libdnnl-dev"
# PyTorch and h5py: the GPT reference test and bench/ comparisons
BENCH_PKGS="python3-torch python3-numpy python3-h5py"
# for tests/slurm.sh, which SKIPs without them: installed when possible
SLURM_PKGS="slurm-wlm munge"

want="$PKGS $BENCH_PKGS $SLURM_PKGS"
for arg in "$@"; do
    case "$arg" in
    --bench) ;;   # always installed now
    -h | --help)
        sed -n '2,6s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *)
        echo "install-deps.sh: unknown option '$arg' (try --help)" >&2
        exit 2
        ;;
    esac
done

missing=""
for p in $want; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "install-deps.sh: all packages present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=sudo
    else
        echo "install-deps.sh: need root to install:$missing" >&2
        exit 1
    fi
fi
echo "install-deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
bench=""
base=""
slurm=""
for p in $missing; do
    case " $BENCH_PKGS " in
    *" $p "*) bench="$bench $p" ;;
    *)
        case " $SLURM_PKGS " in
        *" $p "*) slurm="$slurm $p" ;;
        *) base="$base $p" ;;
        esac
        ;;
    esac
done
# shellcheck disable=SC2086
[ -z "$base" ] || $SUDO apt-get install -y -q $base
# PyTorch's recommends are large and not needed for a CPU comparison
# shellcheck disable=SC2086
[ -z "$bench" ] || $SUDO apt-get install -y -q --no-install-recommends $bench
# shellcheck disable=SC2086
[ -z "$slurm" ] || $SUDO apt-get install -y -q $slurm ||
    echo "install-deps.sh: could not install$slurm; tests/slurm.sh will SKIP" >&2
