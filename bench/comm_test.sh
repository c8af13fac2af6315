#!/bin/bash
# Tiny runs of //bench:comm: every op on the threads backend (4 ranks), then all_reduce and
# all_to_all under mpirun -np 4 (hard timeout 60 s each). Every data line must report #wrong = 0
# and every run must exit 0.
#
#   comm_test.sh COMM_BINARY MPI_ENV_SH
set -u
comm="$1"
env_file="$2"
[[ "$comm" = /* ]] || comm="$PWD/$comm"

status=0
# check_output NAME LOG: data lines (not starting with '#') exist and all have column 8 (#wrong) = 0.
check_output() {
  local name="$1" log="$2"
  local lines bad
  lines=$(grep -vc '^#' "$log")
  bad=$(awk '!/^#/ && NF >= 8 && $8 != 0' "$log" | wc -l)
  if [[ "$lines" -lt 1 ]]; then
    echo "FAIL: $name: no data lines"
    status=1
  elif [[ "$bad" -ne 0 ]]; then
    echo "FAIL: $name: $bad lines with #wrong != 0"
    status=1
  elif ! grep -q '^# Avg bus bandwidth' "$log"; then
    echo "FAIL: $name: no 'Avg bus bandwidth' line"
    status=1
  fi
}

run_threads() {
  local name="$1"
  shift
  local log
  log="$(mktemp)"
  echo "=== threads: $*"
  timeout --kill-after=5 60 "$comm" --backend threads -t 4 -b 8 -e 64K -f 4 -c 1 -n 2 -w 1 "$@" >"$log" 2>&1
  local rc=$?
  cat "$log"
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: $name: exit code $rc"
    status=1
  fi
  check_output "$name" "$log"
  rm -f "$log"
}

for op in all_gather reduce_scatter all_reduce all_to_all; do
  run_threads "threads $op" --op "$op"
done
run_threads "threads redistribute S(0)->R" --op redistribute --from 'S(0)' --to 'R' --mesh 4
run_threads "threads redistribute S(0),S(1)->S(1),S(0)" --op redistribute --from 'S(0),S(1)' --to 'S(1),S(0)' --mesh 2x2
run_threads "threads all_reduce bf16" --op all_reduce -d bf16
run_threads "threads all_gather i64 3 ranks" --op all_gather -d i64 -t 3

# A wrong-usage run must fail cleanly (non-zero exit, no hang).
if "$comm" --op no_such_op >/dev/null 2>&1; then
  echo "FAIL: --op no_such_op exited 0"
  status=1
fi

source "$env_file" || { echo "cannot source $env_file"; exit 2; }
for op in all_reduce all_to_all; do
  log="$(mktemp)"
  echo "=== mpirun -np 4 comm --backend mpi --op $op"
  timeout --kill-after=5 60 mpirun "${MPIRUN_FLAGS[@]}" -np 4 "$comm" --backend mpi --op "$op" \
    -b 8 -e 64K -f 4 -c 1 -n 2 -w 1 >"$log" 2>&1
  rc=$?
  cat "$log"
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: mpi $op: exit code $rc (124/137: hard timeout)"
    status=1
  fi
  check_output "mpi $op" "$log"
  rm -f "$log"
done

[[ $status -eq 0 ]] && echo "PASS"
exit $status
