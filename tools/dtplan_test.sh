#!/bin/bash
# Contract tests of the dtplan CLI (flags, JSON keys, exit codes). Users script it: keep stable.
set -u
DTPLAN="$(dirname "$0")/dtplan"
[ -x "$DTPLAN" ] || DTPLAN="$TEST_SRCDIR/$TEST_WORKSPACE/tools/dtplan"
fails=0
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
check() {  # check NAME CONDITION-RESULT
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

out=$("$DTPLAN" --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --json --execute)
rc=$?
check "json+execute exits 0" $rc
for key in '"steps"' '"kind"' '"mesh_dims"' '"tensor_dim"' '"bytes_per_rank"' '"modelled_us"' \
           '"max_bytes_received_per_rank"' '"lower_bound_bytes_per_rank"' '"planner"' '"verified":true' \
           '"measured_max_bytes_received_per_rank"'; do
  echo "$out" | grep -q "$key"; check "json has $key" $?
done

out=$("$DTPLAN" --mesh 2x2x2 --names dp,tp,cp --shape 8,8,8 --from 'S(0),S(1),S(2)' --to 'S(2),S(1),S(0)' --show --execute)
check "text+show+execute exits 0" $?
echo "$out" | grep -q "verified=true"; check "text reports verified=true" $?
echo "$out" | grep -qi "lower bound"; check "text reports the lower bound" $?

out=$("$DTPLAN" --mesh 2 --shape 5 --from 'P' --to 'S(0)' --json --dump)
check "partial source with dump exits 0" $?
echo "$out" | grep -q '"lower_bound_bytes_per_rank":null'; check "partial source has null lower bound" $?
echo "$out" | grep -q '"ranks":\[{"rank":0,"offset":\[0\],"local_shape":\[3\],"data":\[0,1,2\]}'; check "dump of rank 0" $?

# --dump prints every value exactly: integers as integers (1000001, not 1e+06), floats
# round-trippable, and JSON-valid identities of Partial(max) as strings.
out=$("$DTPLAN" --mesh 1 --shape 1000002 --dtype i64 --from R --to R --json --dump)
check "i64 dump exits 0" $?
echo "$out" | grep -q ',999999,1000000,1000001\]}'; check "i64 dump prints 1000001 exactly" $?
echo "$out" | grep -q 'e+0'; check "i64 dump has no exponent form" $((1 - $?))
out=$("$DTPLAN" --mesh 2 --shape 3 --from 'S(0)' --to 'P(max)' --json --dump)
check "S(0) -> P(max) dump exits 0" $?
echo "$out" | grep -q '"kind":"local_shard_to_partial"'; check "S(0) -> P(max) is one local step" $?
echo "$out" | grep -q '"data":\[0,1,"-inf"\]'; check "P(max) identity dumped as the JSON string -inf" $?
echo "$out" | grep -q '"measured_max_bytes_received_per_rank":0'; check "S(0) -> P(max) moves no byte" $?
# JSON readers see doubles: --json --dump prints each element's exact value as a double, so the
# bf16 528 is 528, not the shortest bf16 text 5.3e+02 (which a double reader takes for 530).
out=$("$DTPLAN" --mesh 2 --shape 600 --dtype bf16 --from 'S(0)' --to R --json --dump)
check "bf16 dump exits 0" $?
echo "$out" | grep -q ',524,524,524,528,528,528,528,528,532,'; check "bf16 dump prints 528 exactly" $?
echo "$out" | grep -q 'e+0'; check "bf16 dump has no exponent form" $((1 - $?))
out=$("$DTPLAN" --mesh 1 --shape 2 --dtype f32 --from R --to R --dump)
echo "$out" | grep -q 'rank 0 offset \[0\] local_shape \[2\] data \[0 1\]'; check "text dump prints every value" $?

out=$("$DTPLAN" --mesh 2x2 --shape 7,5 --from 'S(0),S(0)' --to 'R,S(1)' --planner greedy --json --execute)
check "greedy planner exits 0" $?
echo "$out" | grep -q '"planner":"greedy"'; check "planner field is greedy" $?

"$DTPLAN" --mesh 2x0 --shape 4 --from R --to R >/dev/null 2>&1; [ $? = 2 ]; check "bad mesh exits 2" $?
"$DTPLAN" --mesh 2 --shape 4 --from 'S(3)' --to R >/dev/null 2>&1; [ $? = 2 ]; check "shard dim out of range exits 2" $?
"$DTPLAN" --mesh 2 --shape 4 --from 'P(sum)' --to 'P(max)' >/dev/null 2>&1; [ $? = 2 ]; check "Partial to other Partial exits 2" $?
err=$("$DTPLAN" --mesh 2 --shape 4 --from 'Q' --to R 2>&1 >/dev/null); echo "$err" | grep -q "bad placement 'Q'"; check "bad placement message names the text" $?
"$DTPLAN" --mesh 2 --shape 4 --from R >/dev/null 2>&1; [ $? = 2 ]; check "missing --to exits 2" $?
"$DTPLAN" --mesh 2 --shape 4 --from R --to R --bogus >/dev/null 2>&1; [ $? = 2 ]; check "unknown flag exits 2" $?

# --help / -h: usage on stdout, nothing on stderr, exit 0 (help wins over other arguments).
for help in --help -h; do
  out=$("$DTPLAN" $help 2>"$tmp/err"); rc=$?
  check "$help exits 0" $rc
  echo "$out" | head -1 | grep -q "^usage: dtplan"; check "$help prints the usage on stdout" $?
  for flag in --mesh --names --shape --dtype --from --to --from-order --to-order --topology --planner \
              --show --json --execute --dump; do
    echo "$out" | grep -q -- "$flag"; check "$help lists $flag" $?
  done
  [ ! -s "$tmp/err" ]; check "$help prints nothing on stderr" $?
done
"$DTPLAN" --bogus --help >/dev/null 2>&1; check "--help wins over an unknown flag" $?

# bad_input NAME EXPECTED ARGS...: exit 2, EXPECTED (fixed string) on stderr, nothing on stdout.
bad_input() {
  local name="$1" want="$2"; shift 2
  local out err rc
  out=$("$DTPLAN" "$@" 2>"$tmp/err"); rc=$?
  err=$(cat "$tmp/err")
  [ $rc = 2 ]; check "$name exits 2 (got $rc)" $?
  echo "$err" | grep -qF -- "$want"; check "$name says: $want (got: $err)" $?
  [ -z "$out" ]; check "$name prints nothing on stdout" $?
}
base="--mesh 2 --shape 4"
bad_input "unknown flag" "unknown flag '--bogus'; see 'dtplan --help'" $base --from R --to R --bogus
bad_input "unknown single-dash flag" "unknown flag '-x'; see 'dtplan --help'" $base --from R --to R -x
bad_input "positional argument" "unexpected argument 'extra'; see 'dtplan --help'" $base --from R --to R extra
bad_input "--dtype f16" "--dtype: unknown dtype 'f16'; expected one of f32, f64, bf16, i32, i64" \
  $base --from R --to R --dtype f16
bad_input "--planner fastest" "--planner: unknown planner 'fastest'; expected one of optimal, greedy, direct" \
  $base --from R --to R --planner fastest
bad_input "--topology unknown key" \
  "unknown key 'bw'; expected one of intra, bw_intra, bw_inter, lat_intra, lat_inter" \
  $base --from R --to R --topology 'bw=3'
bad_input "--from unknown placement" "--from: bad placement 'Q': unknown form; expected one of S(<dim>), R, P, P(sum|avg|max|min)" \
  $base --from Q --to R
bad_input "--to unknown reduce op" "--to: bad placement 'P(prod)': unknown reduce op 'prod'; expected one of sum, avg, max, min" \
  $base --from R --to 'P(prod)'
bad_input "missing --to" "missing --to; see 'dtplan --help'" $base --from R

# Search budget (issue #17): a 6-D case stops at --max-edges with the best plan found, which still
# executes and verifies; small cases are proven optimal.
out=$("$DTPLAN" --mesh 2x2x2x2x2x2 --shape 8,8,8 --from 'P,S(0),S(1),S(2),R,S(0)' --to 'S(2),S(1),S(0),R,P,R' \
  --max-edges 2000 --json --execute); rc=$?
check "6-D case with --max-edges 2000 exits 0 (got $rc)" $rc
echo "$out" | grep -q '"proven_optimal":false'; check "6-D budgeted plan is not proven optimal" $?
echo "$out" | grep -q '"verified":true'; check "6-D budgeted plan executes and verifies" $?
echo "$out" | grep -q '"search_edges":[1-9]'; check "6-D budgeted plan reports search_edges" $?
out=$("$DTPLAN" --mesh 2x2x2x2x2x2 --shape 8,8,8 --from 'P,S(0),S(1),S(2),R,S(0)' --to 'S(2),S(1),S(0),R,P,R' \
  --max-edges 500)
echo "$out" | grep -q "not proven optimal: the search budget ran out after"; check "text says not proven optimal" $?
out=$("$DTPLAN" --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --max-edges=0 --json)
echo "$out" | grep -q '"proven_optimal":true'; check "unlimited budget proves a 2-D case optimal" $?
out=$("$DTPLAN" --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --json)
echo "$out" | grep -q '"proven_optimal":true'; check "default budget proves a 2-D case optimal" $?
out=$("$DTPLAN" --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --max-search-ms 60000 --json)
echo "$out" | grep -q '"proven_optimal":true'; check "--max-search-ms accepted" $?
out=$("$DTPLAN" --help)
for flag in --max-edges --max-search-ms --max-memory-mib; do
  echo "$out" | grep -q -- "$flag"; check "--help lists $flag" $?
done

bad_input "--max-edges -1" "search budget max_edges=-1 must be >= 0 (0: unlimited)" $base --from R --to R --max-edges -1
bad_input "--max-edges abc" "--max-edges: 'abc' is not an integer" $base --from R --to R --max-edges abc
bad_input "--max-search-ms nan" "search budget max_ms=nan must be >= 0 and finite" $base --from R --to R --max-search-ms nan
bad_input "--max-search-ms -5" "search budget max_ms=-5 must be >= 0 and finite" $base --from R --to R --max-search-ms=-5
bad_input "--max-memory-mib 0" "--max-memory-mib 0 must be >= 1" $base --from R --to R --max-memory-mib 0

# Topology checked against the mesh; limits that keep every modelled time finite.
bad_input "--topology intra=7 on a 2-D mesh" \
  "--topology: topology intra= names mesh dim 7 but the mesh has 2 dims (0..1)" \
  --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --topology intra=7
bad_input "--topology bw_inter=1e-320" "bw_inter=1e-320 must be > 0 and at least 1e-06 GB/s (1 kB/s)" \
  --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --topology 'intra=0;bw_inter=1e-320'
bad_input "--topology lat_inter=1e10" "lat_inter=1e10 must be at most 1e+09 us" \
  --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'S(1),S(0)' --topology 'lat_inter=1e10'
out=$("$DTPLAN" --mesh 2x2 --shape 8,8 --from 'S(0),S(1)' --to 'R,R' --topology 'intra=;bw_inter=1e-6;lat_inter=1e9' --json)
check "slowest valid topology exits 0" $?
echo "$out" | grep -q '"modelled_us":null'; check "slowest valid topology has a finite modelled_us" $((1 - $?))

# Memory estimated before allocating (issue #17: these died of bad_alloc / were killed).
bad_input "--execute 65536x65536" \
  "RESOURCE_EXHAUSTED: --execute needs about 103080264704 bytes (98305 MiB), more than the limit of 8192 MiB (--max-memory-mib)" \
  --mesh 2x2 --shape 65536,65536 --from 'S(0),S(1)' --to 'S(1),S(0)' --execute
bad_input "--execute 2^48 elements" "RESOURCE_EXHAUSTED: --execute needs about 6755399442105344 bytes (6442450945 MiB)" \
  --mesh 2x2 --shape 16777216,16777216 --from 'S(0),S(1)' --to 'S(1),S(0)' --execute
bad_input "--mesh 1073741824" "RESOURCE_EXHAUSTED: planning needs about 274877906944 bytes (262144 MiB)" \
  --mesh 1073741824 --shape 8 --from 'S(0)' --to R
bad_input "--max-memory-mib 1 --execute" "more than the limit of 1 MiB (--max-memory-mib)" \
  --mesh 2x2 --shape 512,512 --from 'S(0),S(1)' --to 'S(1),S(0)' --execute --max-memory-mib 1
out=$("$DTPLAN" --mesh 2x2 --shape 16777216,16777216 --from 'S(0),S(1)' --to 'S(1),S(0)' --json)
check "planning (no --execute) a 2^48-element shape exits 0" $?
# The identity plan needs no per-rank tables: R -> R on 2^30 ranks plans within the default limit.
out=$("$DTPLAN" --mesh 1024x1024x1024 --shape 8 --from R,R,R --to R,R,R --json)
check "identity plan on 2^30 ranks exits 0" $?
echo "$out" | grep -q '"steps":\[\]'; check "identity plan on 2^30 ranks has no steps" $?

[ $fails = 0 ]
