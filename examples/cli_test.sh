#!/bin/bash
# Command lines of the examples: --help / -h print the usage on stdout and exit 0; an unknown
# flag, argument or --backend value exits 2 with a message naming it (and the valid backends).
#
#   cli_test.sh HELLO_MESH TP_MLP ATTENTION
set -u
hello_mesh="$1"
tp_mlp="$2"
attention="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# expect_help BINARY NAME FLAG...: usage on stdout listing every FLAG, nothing on stderr, exit 0.
expect_help() {
  local bin="$1" name="$2"; shift 2
  local h out rc flag
  for h in --help -h; do
    out=$("$bin" $h 2>"$tmp/err"); rc=$?
    check "$name $h exits 0 (got $rc)" $rc
    echo "$out" | head -1 | grep -q "^usage: $name"; check "$name $h prints the usage on stdout" $?
    for flag in "$@"; do
      echo "$out" | grep -qF -- "$flag"; check "$name $h lists $flag" $?
    done
    [ ! -s "$tmp/err" ]; check "$name $h prints nothing on stderr" $?
  done
}

# bad_input BINARY NAME EXPECTED ARGS...: exit 2, EXPECTED (fixed string) on stderr, nothing on
# stdout (the demo does not run).
bad_input() {
  local bin="$1" name="$2" want="$3"; shift 3
  local out rc
  out=$(timeout --kill-after=5 60 "$bin" "$@" 2>"$tmp/err"); rc=$?
  [ $rc = 2 ]; check "$name $* exits 2 (got $rc)" $?
  grep -qF -- "$want" "$tmp/err"; check "$name $* says: $want (got: $(cat "$tmp/err"))" $?
  [ -z "$out" ]; check "$name $* prints nothing on stdout" $?
}

expect_help "$hello_mesh" hello_mesh "-h, --help"
bad_input "$hello_mesh" hello_mesh "unknown flag '--backend'; see 'hello_mesh --help'" --backend threads
bad_input "$hello_mesh" hello_mesh "unexpected argument 'x'; see 'hello_mesh --help'" x

for pair in "$tp_mlp tp_mlp" "$attention attention"; do
  set -- $pair
  bin="$1" name="$2"
  expect_help "$bin" "$name" "--backend B" "threads" "mpi" "-h, --help"
  bad_input "$bin" "$name" "unknown --backend 'nccl'; expected one of threads, mpi" --backend nccl
  bad_input "$bin" "$name" "unknown --backend 'gloo'; expected one of threads, mpi" --backend=gloo
  bad_input "$bin" "$name" "--backend needs a value; see '$name --help'" --backend
  bad_input "$bin" "$name" "unknown flag '--bogus'; see '$name --help'" --bogus
done

[ $fails = 0 ]
