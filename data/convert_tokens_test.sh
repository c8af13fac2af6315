#!/bin/bash
# convert_tokens end to end: converts a raw uint16 file, refuses to convert its output again,
# refuses a token outside --vocab-size, and the usual --help / bad-flag behaviour.
#
#   convert_tokens_test.sh CONVERT_TOKENS_BINARY
set -u
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# 5 uint16 tokens: 1 2 3 4 300
printf '\x01\x00\x02\x00\x03\x00\x04\x00\x2c\x01' > "$tmp/raw.bin"
out=$("$bin" --input "$tmp/raw.bin" --width u16 --output "$tmp/t.mftok" 2>"$tmp/err"); rc=$?
check "converts (rc $rc: $(cat "$tmp/err"))" $rc
echo "$out" | grep -q "5 u16 tokens, vocabulary 301"; check "reports count and vocabulary: $out" $?
[ "$(stat -c %s "$tmp/t.mftok")" = 74 ]; check "64-byte header + 10 bytes" $?
head -c 8 "$tmp/t.mftok" | grep -q MFTOKENS; check "magic" $?

"$bin" --input "$tmp/t.mftok" --width u16 --output "$tmp/u.mftok" 2>"$tmp/err"; rc=$?
[ $rc = 1 ]; check "already converted exits 1 (got $rc)" $?
grep -q "already a .mftok file" "$tmp/err"; check "says already converted: $(cat "$tmp/err")" $?

"$bin" --input "$tmp/raw.bin" --width u16 --output "$tmp/v.mftok" --vocab-size 256 2>"$tmp/err"; rc=$?
[ $rc = 1 ]; check "token outside vocabulary exits 1 (got $rc)" $?
grep -q "token 300 at position 4 is outside the vocabulary \[0, 256)" "$tmp/err"; check "names the token: $(cat "$tmp/err")" $?
[ ! -e "$tmp/v.mftok" ] && [ ! -e "$tmp/v.mftok.tmp" ]; check "no output left behind" $?

printf '\x01\x00\x02' > "$tmp/odd.bin"
"$bin" --input "$tmp/odd.bin" --width u16 --output "$tmp/w.mftok" 2>"$tmp/err"; rc=$?
[ $rc = 1 ]; check "odd size exits 1 (got $rc)" $?
grep -q "3 bytes is not a multiple of the 2-byte token width" "$tmp/err"; check "names the size: $(cat "$tmp/err")" $?

for help in --help -h; do
  out=$("$bin" $help 2>"$tmp/err"); rc=$?
  check "$help exits 0 (got $rc)" $rc
  echo "$out" | head -1 | grep -q "^usage: convert_tokens"; check "$help prints the usage" $?
  [ ! -s "$tmp/err" ]; check "$help prints nothing on stderr" $?
done
bad_input() {  # bad_input NAME EXPECTED ARGS...
  local name="$1" want="$2"; shift 2
  local out rc
  out=$("$bin" "$@" 2>"$tmp/err"); rc=$?
  [ $rc = 2 ]; check "$name exits 2 (got $rc)" $?
  grep -qF -- "$want" "$tmp/err"; check "$name says: $want (got: $(cat "$tmp/err"))" $?
  [ -z "$out" ]; check "$name prints nothing on stdout" $?
}
bad_input "unknown flag" "unknown flag '--bogus'; see 'convert_tokens --help'" --bogus
bad_input "bad width" "unknown --width 'u8'; expected one of u16, u32" --input a --output b --width u8
bad_input "missing width" "missing --width" --input a --output b
bad_input "bad vocab" "--vocab-size must be >= 1, got 0" --vocab-size 0

[ $fails = 0 ]
