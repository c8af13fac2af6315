# Helpers shared by train_lm_test.sh and train_lm_mpi_test.sh (sourced).
fails=0
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
field() {  # field NAME JSON-LINE: the value of a JSON field (string quotes dropped)
  local v
  v=$(sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" <<<"$2")
  [ -n "$v" ] || v=$(sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" <<<"$2")
  echo "$v"
}
# max |a - b| over the loss column (2) of two train_lm CSV logs, rows of the same steps; "inf" if
# the step lists differ, a file is missing or empty, or either has no data row (a missing log must
# fail the comparison, never compare as 0).
curve_diff() {
  if [ ! -s "$1" ] || [ ! -s "$2" ]; then
    echo "curve_diff: missing or empty log: '$1' or '$2'" >&2
    echo inf
    return
  fi
  awk -F, 'NR==FNR { if (FNR > 1) a[$1] = $2; n1 = FNR - 1; next }
           FNR > 1 { if (!($1 in a)) bad = 1; d = a[$1] - $2; if (d < 0) d = -d; if (d > m) m = d; n2 = FNR - 1 }
           END { if (bad || n1 != n2 || n1 < 1) print "inf"; else printf "%.3g\n", m + 0 }' "$1" "$2"
}
# a < b for numbers; an empty or "inf" a is never less.
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a != "inf" && a + 0 < b + 0) }'; }
# The Python standard library sources of Debian's libpython3.*-minimal / -stdlib: the corpus.
python_stdlib_dir() { ls -d /usr/lib/python3.[0-9]* 2>/dev/null | head -1; }
