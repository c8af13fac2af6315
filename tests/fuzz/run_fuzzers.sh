#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with --config=fuzz (clang-14, ASan + UBSan) and runs
# each for a bounded time on a scratch copy of its seed corpus. Fails on any crash, sanitizer
# report, timeout or out-of-memory; the reproducer is copied to $ARTIFACTS (default
# /tmp/meshflow-fuzz-artifacts). Turn a reproducer into a regression: copy it into
# tests/fuzz/corpus/<target>/ (the replay tests under `bazel test //...` run it) and add a gtest
# case in the owning folder's test.
#
#   tests/fuzz/run_fuzzers.sh            60 s per target
#   tests/fuzz/run_fuzzers.sh 300        300 s per target
#   tests/fuzz/run_fuzzers.sh 30 layout_parser
#
# Uses its own Bazel output base (switching CC re-configures the C++ toolchain; this keeps the
# default server's cache intact): $MESHFLOW_FUZZ_OUTPUT_BASE, default /root/.cache/bazel_fuzz.
# Extra Bazel flags (e.g. --config=ci) come from $MESHFLOW_FUZZ_BAZEL_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/../.."

SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
# Default: every target of tests/fuzz/BUILD.bazel (meshflow_fuzz_target), each of which must have
# a seed corpus tests/fuzz/corpus/<name>/: a target without one would silently not be fuzzed.
if [ "${#TARGETS[@]}" -eq 0 ]; then
  while read -r t; do TARGETS+=("$t"); done < <(
    sed -n '/^meshflow_fuzz_target(/,/)/s/^ *name = "\([a-z0-9_]*\)",.*/\1/p' tests/fuzz/BUILD.bazel)
  for t in "${TARGETS[@]}"; do
    if [ -z "$(ls -A "tests/fuzz/corpus/$t" 2> /dev/null)" ]; then
      echo "run_fuzzers: fuzz target '$t' has no seeds in tests/fuzz/corpus/$t/" >&2
      exit 1
    fi
  done
  for d in tests/fuzz/corpus/*/; do
    case " ${TARGETS[*]} " in *" $(basename "$d") "*) ;; *)
      echo "run_fuzzers: tests/fuzz/corpus/$(basename "$d")/ belongs to no meshflow_fuzz_target" >&2
      exit 1 ;;
    esac
  done
fi
OUTPUT_BASE="${MESHFLOW_FUZZ_OUTPUT_BASE:-/root/.cache/bazel_fuzz}"
ARTIFACTS="${ARTIFACTS:-/tmp/meshflow-fuzz-artifacts}"
read -r -a EXTRA_FLAGS <<< "${MESHFLOW_FUZZ_BAZEL_FLAGS:-}"

if ! command -v clang-14 > /dev/null; then
  echo "run_fuzzers: clang-14 not found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

LABELS=()
for t in "${TARGETS[@]}"; do LABELS+=("//tests/fuzz:${t}_fuzzer"); done
WORK="$(mktemp -d /tmp/meshflow-fuzz.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# The build log is long (ld.gold warns about every ASan helper symbol); show it only on failure.
if ! bazel --output_base="$OUTPUT_BASE" build --config=fuzz "${EXTRA_FLAGS[@]}" "${LABELS[@]}" \
    > "$WORK/build.log" 2>&1; then
  grep -v "ld.gold: warning: Cannot export local symbol" "$WORK/build.log" | tail -n 80 >&2
  echo "run_fuzzers: build FAILED" >&2
  exit 1
fi
BIN="$(bazel --output_base="$OUTPUT_BASE" info --config=fuzz "${EXTRA_FLAGS[@]}" bazel-bin 2> /dev/null)"
mkdir -p "$ARTIFACTS"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=0
for t in "${TARGETS[@]}"; do
  corpus="$WORK/$t"
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/
  seeds=$(ls "$corpus" | wc -l)
  echo "run_fuzzers: $t for ${SECONDS_PER_TARGET}s on $seeds seeds"
  # planner_executor runs a thread world per input (~100 execs/s): libFuzzer's slow ramp of the
  # length limit (-len_control) would hold its inputs at the longest seed for a whole short run,
  # so it gets the full limit at once; its inputs decode at most ~100 bytes (6 extra hops).
  len_flags=(-max_len=512)
  if [ "$t" = planner_executor ]; then len_flags=(-max_len=160 -len_control=0); fi
  # -timeout: one input may run at most 30 s (a hang is a bug); -rss_limit_mb: the default 2 GB.
  if ! "$BIN/tests/fuzz/${t}_fuzzer" "$corpus" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 \
      -rss_limit_mb=2048 "${len_flags[@]}" -print_final_stats=1 -artifact_prefix="$ARTIFACTS/${t}-" \
      > "$WORK/$t.log" 2>&1; then
    failed=1
    tail -n 60 "$WORK/$t.log" >&2
    echo "run_fuzzers: $t FAILED; reproducer(s) in $ARTIFACTS:" >&2
    ls -l "$ARTIFACTS" | grep -- "$t-" >&2 || true
  else
    grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added)" "$WORK/$t.log" || true
    # One line per target for the figures in bench/README.md: execs/s and corpus growth.
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t.log" | tail -n 1)
    longest=$(find "$corpus" -type f -printf '%s\n' | sort -n | tail -n 1)
    echo "run_fuzzers: $t OK: ${execs:-?} execs in ${SECONDS_PER_TARGET} s" \
      "($(( ${execs:-0} / SECONDS_PER_TARGET )) execs/s), corpus $seeds -> $(ls "$corpus" | wc -l) inputs," \
      "longest ${longest:-0} bytes"
  fi
done
exit "$failed"
