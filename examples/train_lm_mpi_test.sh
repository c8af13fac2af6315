#!/bin/bash
# train_lm under mpirun: one rank of a 4-process job is killed with SIGKILL at step 25; the
# supervisor (--max-restarts, --launcher mpirun) restarts the job with mpirun -np 2 from the
# newest complete checkpoint (step 20). The loss curve equals an uninterrupted run's (the
# in-process 4-rank run: the MPI backend reduces with the same rank-order folds, so the
# tolerance covers only the restart's resharding) and the sample log is identical.
#
#   train_lm_mpi_test.sh TRAIN_LM TEXT_TO_TOKENS MPI_ENV_SH
set -u
bin="$1"
t2t="$2"
source "$3"
export MESHFLOW_MPIRUN_FLAGS="${MPIRUN_FLAGS[*]}"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/train_lm_test_lib.sh"

pydir=$(python_stdlib_dir)
[ -n "$pydir" ] || { echo "FAIL no Python standard library sources under /usr/lib/python3.*"; exit 1; }
"$t2t" --output "$tmp/small.mftok" --suffix .py --max-bytes 23000 "$pydir" || { echo "FAIL text_to_tokens"; exit 1; }
common=(--corpus "$tmp/small.mftok" --plan zero1 --steps 30 --ckpt-every 10 --print-every 0 --json-summary)

timeout 300 "$bin" "${common[@]}" --nproc 4 --ckpt-dir "$tmp/ref" --sample-log "$tmp/ref.samples" >"$tmp/ref.out" 2>&1
check "uninterrupted in-process 4-rank run (rc $?)" $?

timeout --kill-after=10 600 "$bin" "${common[@]}" --launcher mpirun --nproc 4 --max-restarts 2 --restart-nproc 2 \
  --kill-rank 1 --kill-at-step 25 --ckpt-dir "$tmp/mpi" --sample-log "$tmp/mpi.samples" >"$tmp/mpi.out" 2>"$tmp/mpi.err"
rc=$?
tail -20 "$tmp/mpi.err"
check "mpirun job killed at step 25 ends OK after the restart (rc $rc)" $rc
grep -q "supervisor: attempt 0 exited with code\|supervisor: attempt 0 killed" "$tmp/mpi.err"; check "supervisor saw the failed mpirun" $?
grep -q "restart 1 of 2: mpirun .* -np 2 " "$tmp/mpi.err"; check "restart with mpirun -np 2" $?
last=$(tail -1 "$tmp/mpi.out")
echo "$last"
[ "$(field resumed_from_step "$last")" = 20 ] && [ "$(field world_size "$last")" = 2 ]
check "resumed from step 20 on 2 processes" $?
d=$(curve_diff "$tmp/ref/train_log.csv" "$tmp/mpi/train_log.csv")
lt "$d" 2e-3; check "loss curve = uninterrupted run's (max diff $d)" $?
cmp -s "$tmp/ref.samples" "$tmp/mpi.samples"; check "sample log identical (no sample skipped or repeated)" $?
[ $fails = 0 ] && echo PASS || { echo "$fails FAILED"; exit 1; }
