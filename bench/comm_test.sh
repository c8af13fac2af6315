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
run_threads "threads all_reduce without call-site checks" --op all_reduce --checks args

# --help / -h: the usage on stdout, nothing on stderr, exit 0 (help wins over other arguments).
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
for help in --help -h "--op no_such_op --help"; do
  # shellcheck disable=SC2086
  out=$("$comm" $help 2>"$tmp/err")
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: comm $help: exit code $rc, want 0"
    status=1
  fi
  if [[ "$(echo "$out" | head -1)" != "usage: comm"* ]]; then
    echo "FAIL: comm $help: stdout does not start with 'usage: comm'"
    status=1
  fi
  for flag in --backend --op --from --to --mesh -b -e -f -n -w -c -t -d --checks --csv; do
    if ! echo "$out" | grep -qF -- " $flag "; then
      echo "FAIL: comm $help: usage does not list $flag"
      status=1
    fi
  done
  if [[ -s "$tmp/err" ]]; then
    echo "FAIL: comm $help: wrote to stderr: $(cat "$tmp/err")"
    status=1
  fi
done

# Wrong usage fails cleanly before any run: exit 2, a message naming the bad value and the valid
# ones on stderr, nothing on stdout, no hang.
# bad_input WANT ARGS...
bad_input() {
  local want="$1"
  shift
  local out rc ok=1
  out=$(timeout --kill-after=5 20 "$comm" "$@" 2>"$tmp/err")
  rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL: comm $*: exit code $rc, want 2"
    ok=0
  fi
  if ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: comm $*: stderr lacks \"$want\": $(cat "$tmp/err")"
    ok=0
  fi
  if [[ -n "$out" ]]; then
    echo "FAIL: comm $*: wrote to stdout"
    ok=0
  fi
  if [[ $ok -eq 1 ]]; then
    echo "ok: comm $* -> $(cat "$tmp/err")"
  else
    status=1
  fi
}
bad_input "unknown --op 'no_such_op'; expected one of all_gather, reduce_scatter, all_reduce, all_to_all, redistribute" \
  --op no_such_op
bad_input "unknown --backend 'gloo'; expected one of threads, mpi, nccl" --backend gloo
bad_input "-d: unknown dtype 'f16'; expected one of f32, f64, bf16, i32, i64" -d f16
bad_input "unknown -c '2'; expected one of 0, 1" -c 2
bad_input "unknown --checks 'some'; expected one of full, args, none" --checks some
bad_input "--from: bad placement 'Q': unknown form; expected one of S(<dim>), R, P, P(sum|avg|max|min)" \
  --op redistribute --from Q --to R
bad_input "--to: bad placement 'P(prod)': unknown reduce op 'prod'; expected one of sum, avg, max, min" \
  --op redistribute --from 'S(0)' --to 'P(prod)'
bad_input "--mesh 2x2 has 4 ranks but -t is 3" --op redistribute --from 'S(0),S(1)' --to R,R --mesh 2x2 -t 3
bad_input "unknown flag '--bogus'; see 'comm --help'" --op all_reduce --bogus 1
bad_input "unexpected argument 'all_reduce'; see 'comm --help'" all_reduce
bad_input "option '-b' needs a value; see 'comm --help'" -b
bad_input "-b: bad size '8X'" -b 8X

source "$env_file" || { echo "cannot source $env_file"; exit 2; }
for run in "all_reduce full" "all_to_all full" "all_reduce none"; do
  op="${run% *}"
  checks="${run#* }"
  log="$(mktemp)"
  echo "=== mpirun -np 4 comm --backend mpi --op $op --checks $checks"
  timeout --kill-after=5 60 mpirun "${MPIRUN_FLAGS[@]}" -np 4 "$comm" --backend mpi --op "$op" --checks "$checks" \
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
