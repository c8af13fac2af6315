#!/bin/bash
# Command line of loader_demo: --help / -h print the usage on stdout and exit 0; any argument
# exits 2 with a message naming it and pointing at --help (the demo itself: loader_demo_test).
#
#   loader_demo_cli_test.sh LOADER_DEMO_BINARY
set -u
demo="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

for help in --help -h; do
  out=$("$demo" $help 2>"$tmp/err"); rc=$?
  check "$help exits 0 (got $rc)" $rc
  echo "$out" | head -1 | grep -q "^usage: loader_demo"; check "$help prints the usage on stdout" $?
  echo "$out" | grep -q -- "-h, --help"; check "$help lists --help" $?
  [ ! -s "$tmp/err" ]; check "$help prints nothing on stderr" $?
done

# bad_input NAME EXPECTED ARGS...: exit 2, EXPECTED (fixed string) on stderr, nothing on stdout.
bad_input() {
  local name="$1" want="$2"; shift 2
  local out rc
  out=$("$demo" "$@" 2>"$tmp/err"); rc=$?
  [ $rc = 2 ]; check "$name exits 2 (got $rc)" $?
  grep -qF -- "$want" "$tmp/err"; check "$name says: $want (got: $(cat "$tmp/err"))" $?
  [ -z "$out" ]; check "$name prints nothing on stdout" $?
}
bad_input "unknown flag" "unknown flag '--steps'; see 'loader_demo --help'" --steps 3
bad_input "positional argument" "unexpected argument 'train.bin'; see 'loader_demo --help'" train.bin

[ $fails = 0 ]
