#!/bin/bash
# text_to_tokens end to end: files under a directory in sorted order with a newline after each,
# --suffix and --max-bytes, the output readable as a byte-level token file, and bad input (exit 2).
#
#   text_to_tokens_test.sh TEXT_TO_TOKENS_BINARY
set -u
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
mkdir -p "$tmp/src/sub"
printf 'b' > "$tmp/src/b.py"
printf 'aa' > "$tmp/src/a.py"
printf 'zz' > "$tmp/src/sub/c.py"
printf 'ignored' > "$tmp/src/notes.txt"
out=$("$bin" --output "$tmp/t.mftok" --suffix .py "$tmp/src" 2>"$tmp/err"); rc=$?
check "converts (rc $rc: $(cat "$tmp/err"))" $rc
echo "$out" | grep -q "3 files, 8 byte tokens"; check "reports files and tokens: $out" $?
# payload: a a \n b \n z z \n as u16 little endian after the 64-byte header
payload=$(tail -c +65 "$tmp/t.mftok" | od -An -tu2 | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$payload" = "97 97 10 98 10 122 122 10" ]; check "sorted files, newline after each: '$payload'" $?
head -c 8 "$tmp/t.mftok" | grep -q MFTOKENS; check "mftok magic" $?

out=$("$bin" --output "$tmp/u.mftok" --max-bytes 4 "$tmp/src/a.py" "$tmp/src/b.py" 2>"$tmp/err"); rc=$?
check "--max-bytes converts (rc $rc)" $rc
echo "$out" | grep -q "2 files, 4 byte tokens"; check "--max-bytes cuts: $out" $?

"$bin" --output "$tmp/v.mftok" "$tmp/missing" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q "input '.*missing' does not exist" "$tmp/err"; check "missing input exits 2: $(cat "$tmp/err")" $?
"$bin" --output "$tmp/v.mftok" --suffix .rs "$tmp/src" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q "no file under the inputs matches --suffix '.rs'" "$tmp/err"; check "no match exits 2: $(cat "$tmp/err")" $?
"$bin" "$tmp/src" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q "missing --output" "$tmp/err"; check "missing --output exits 2" $?
"$bin" --bogus 2>"$tmp/err"; rc=$?
[ $rc = 2 ]; check "unknown flag exits 2" $?
"$bin" --help | grep -q "usage: text_to_tokens"; check "--help" $?
[ $fails = 0 ] && echo PASS || { echo "$fails FAILED"; exit 1; }
