#!/bin/bash
# Fault test of the MPI backend: one rank fails, the job must end non-zero within a bounded time.
#
#   mpi_fault_test.sh BINARY
#
# For each mode of mpi_fault_test.cc, runs mpirun -np 4 (and -np 8 for stall) under a hard timeout
# and asserts: mpirun exits non-zero (with the expected code where mpirun reports it), within
# MAX_SECONDS, and the output has the expected messages. Prints "N passed, M failed".
set -u
binary="$1"
[[ "$binary" = /* ]] || binary="$PWD/$binary"
# mpi_env.sh lies next to this script (also when the script is another package's test, in runfiles).
for env_file in "$(dirname "${BASH_SOURCE[0]}")/mpi_env.sh" "${TEST_SRCDIR:-.}/meshflow/collectives/mpi/mpi_env.sh" \
  "$PWD/collectives/mpi/mpi_env.sh"; do
  [[ -f "$env_file" ]] && break
done
source "$env_file" || { echo "mpi_env.sh not found"; exit 2; }

TIMEOUT_MS=3000   # collective timeout inside the job (stall mode)
HARD=40           # hard limit per mpirun (the runs stay well under the 300 s of a medium test)
MAX_SECONDS=30    # the job must be over by then
passed=0
failed=0

# run NP MODE EXPECTED_RC PATTERN...
run() {
  local np="$1" mode="$2" want_rc="$3"
  shift 3
  local log
  log="$(mktemp)"
  local start end rc
  start=$(date +%s)
  timeout --kill-after=5 "$HARD" mpirun "${MPIRUN_FLAGS[@]}" -np "$np" "$binary" "$mode" "$TIMEOUT_MS" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  local elapsed=$((end - start)) why=""
  # timeout(1) exits 124 (or 137 after --kill-after); a job killed by a signal also gives 137.
  if [[ $rc -eq 124 || ( $rc -eq 137 && $elapsed -ge $HARD ) ]]; then
    why="hard timeout (${HARD}s): the job hung"
  elif [[ $rc -eq 0 ]]; then
    why="mpirun exited 0"
  elif [[ "$want_rc" != "any" && $rc -ne $want_rc ]]; then
    why="exit code $rc, expected $want_rc"
  elif [[ $elapsed -gt $MAX_SECONDS ]]; then
    why="took ${elapsed}s > ${MAX_SECONDS}s"
  elif grep -q "second all_reduce completed" "$log"; then
    why="a rank completed the collective without rank 1"
  elif grep -Eq "wrong value|after the skip completed|buffer untouched: NO" "$log"; then
    why="a rank used the data of a mismatched collective"
  fi
  for pattern in "$@"; do
    if [[ -z "$why" ]] && ! grep -Eq -- "$pattern" "$log"; then why="output lacks /$pattern/"; fi
  done
  echo "=== np $np mode $mode: exit code $rc after ${elapsed}s"
  sed 's/^/    /' "$log" | grep -v '^    *$' | head -40
  if [[ -z "$why" ]]; then
    echo "PASS: np $np mode $mode"
    passed=$((passed + 1))
  else
    echo "FAIL: np $np mode $mode: $why"
    failed=$((failed + 1))
  fi
  rm -f "$log"
}

run 4 exit 3 "rank 1: exiting with code 3"
run 8 exit 3 "rank 1: exiting with code 3"
run 4 kill 137 "killing itself" "exited on signal 9"
run 4 error 4 "rank 1: aborting the MPI job: INTERNAL: rank 1: injected failure"
run 4 stall 2 "DEADLINE_EXCEEDED: mpi all_reduce on group \[0,1,2,3\] \(world ranks\): timed out after 3000 ms" \
  "group ranks \[1\] \(world ranks \[1\]\) did not arrive" "aborting the MPI job"
run 8 stall 2 "DEADLINE_EXCEEDED: mpi all_reduce on group \[0,1,2,3,4,5,6,7\]" \
  "group ranks \[1\] \(world ranks \[1\]\) did not arrive"

# A skipped collective: every rank refuses it (each prints its error and that its buffer was not
# written, before any rank aborts), naming both call sites; repeated, since the end of the job
# (every rank in MPI_Abort at once) is the racy part.
refused() { echo "rank $1: refused the [a-z]+ all_reduce: FAILED_PRECONDITION: .*mismatched call sites.*; buffer untouched: yes"; }
for i in 1 2 3 4 5; do
  run 4 skip 2 "FAILED_PRECONDITION: mpi all_reduce on group \[0,1,2,3\] \(world ranks\): mismatched call sites: group rank 0 \(world 0\) is at its collective #1 all_reduce called at [^ ]*mpi_fault_test\.cc:[0-9]+, but group rank 1 \(world 1\) at #1 all_reduce called at [^ ]*mpi_fault_test\.cc:[0-9]+" \
    "rank [0-9]: aborting the MPI job: FAILED_PRECONDITION" "$(refused 0)" "$(refused 1)" "$(refused 2)" "$(refused 3)"
done
# A rank skips the last collective and finalizes while the others time out and abort.
for i in 1 2; do
  run 4 skip_last 2 "group ranks \[1\] \(world ranks \[1\]\) did not arrive" "aborting the MPI job"
done
# A rank never reaches MpiFinalize: the others give up after twice the timeout and abort.
run 4 late_finalize 1 "MpiFinalize: not every rank reached MpiFinalize within 6000 ms; aborting the job instead of finalizing"

echo "mpi fault test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
