#!/bin/sh
# Pipeline parallelism: the stage cuts and the transfers between stage
# placements (test_pipeline) on 2, 3 and 4 ranks; make check runs it on
# 1 rank as an ordinary suite too.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for np in 2 3 4; do
    run_suite "$np" test_pipeline
done
echo "pipeline: stage cuts and stage-to-stage transfers on 1-4 ranks"
