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
# Default: every target with a seed corpus (tests/fuzz/corpus/<name>/ for <name>_fuzzer).
if [ "${#TARGETS[@]}" -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do TARGETS+=("$(basename "$d")"); done
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
  echo "run_fuzzers: $t for ${SECONDS_PER_TARGET}s on $(ls "$corpus" | wc -l) seeds"
  # -timeout: one input may run at most 30 s (a hang is a bug); -rss_limit_mb: the default 2 GB.
  if ! "$BIN/tests/fuzz/${t}_fuzzer" "$corpus" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 \
      -rss_limit_mb=2048 -max_len=512 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/${t}-" \
      > "$WORK/$t.log" 2>&1; then
    failed=1
    tail -n 60 "$WORK/$t.log" >&2
    echo "run_fuzzers: $t FAILED; reproducer(s) in $ARTIFACTS:" >&2
    ls -l "$ARTIFACTS" | grep -- "$t-" >&2 || true
  else
    grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added)" "$WORK/$t.log" || true
    echo "run_fuzzers: $t OK"
  fi
done
exit "$failed"
