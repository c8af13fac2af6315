#!/bin/bash
# Runs an MPI test binary under mpirun for each process count, each run under a hard timeout.
#
#   mpirun_test.sh [--timeout SECONDS] BINARY NP [NP ...] [-- ARGS...]
#
# A run passes when mpirun exits 0 and its output has a line "... N passed, 0 failed" with N >= 1
# (a run that checked nothing does not pass). Works as root
# (--allow-run-as-root) and with more ranks than cores (--oversubscribe). The environment keeps
# OpenMPI on shared memory inside one container: btl self,vader with no single-copy mechanism
# (CMA needs ptrace rights that containers often lack), pml ob1 (no UCX probing).
set -u

timeout_s=100
if [[ "${1:-}" == "--timeout" ]]; then
  timeout_s="$2"
  shift 2
fi
binary="$1"
shift
nps=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  nps+=("$1")
  shift
done
[[ "${1:-}" == "--" ]] && shift
args=("$@")

[[ "$binary" = /* ]] || binary="$PWD/$binary"
# mpi_env.sh lies next to this script (also when the script is another package's test, in runfiles).
for env_file in "$(dirname "${BASH_SOURCE[0]}")/mpi_env.sh" "${TEST_SRCDIR:-.}/meshflow/collectives/mpi/mpi_env.sh" \
  "$PWD/collectives/mpi/mpi_env.sh"; do
  [[ -f "$env_file" ]] && break
done
source "$env_file" || { echo "mpi_env.sh not found"; exit 2; }

status=0
for np in "${nps[@]}"; do
  echo "=== mpirun -np $np $(basename "$binary") ${args[*]:-} (timeout ${timeout_s}s)"
  log="$(mktemp)"
  start=$(date +%s)
  timeout --kill-after=5 "$timeout_s" mpirun "${MPIRUN_FLAGS[@]}" -np "$np" "$binary" "${args[@]}" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  cat "$log"
  echo "=== np $np: exit code $rc after $((end - start)) s"
  # timeout(1) exits 124 (or 137 after --kill-after); a job killed by a signal also gives 137.
  if [[ $rc -eq 124 || ( $rc -eq 137 && $((end - start)) -ge $timeout_s ) ]]; then
    echo "FAIL: np $np: hard timeout of ${timeout_s}s reached (a hang)"
    status=1
  elif [[ $rc -ne 0 ]]; then
    echo "FAIL: np $np: mpirun exited with $rc"
    status=1
  elif ! grep -Eq "(^|[^0-9])[1-9][0-9]* passed, 0 failed" "$log"; then
    echo "FAIL: np $np: no 'N passed, 0 failed' line with N >= 1"
    status=1
  fi
  rm -f "$log"
done
exit $status
