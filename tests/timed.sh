#!/bin/sh
# Runs a test (the command line given) and appends its wall time to its
# log as "mf-elapsed: SECONDS s", for the per-test table .ci/run prints.
# The exit status is the test's.
start=$(date +%s%N)
"$@"
rc=$?
end=$(date +%s%N)
echo "mf-elapsed: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", (b - a) / 1e9 }') s"
exit $rc
