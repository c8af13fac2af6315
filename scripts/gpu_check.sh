#!/usr/bin/env bash
# gpu_check.sh: the prepared GPU check: every CUDA test, the NCCL tables, and train_lm on the GPU
# (the CUDA worlds of launch/, the overlap of communication with compute).
#
#   scripts/gpu_check.sh             # the check (from anywhere; it cd's to the repository root)
#   scripts/gpu_check.sh --dry-run   # no build, no GPU: checks that every target and path it uses
#                                    # exists and prints the plan
#
# The machine: a GPU of compute capability 9.0 (H100 / H200: the kernels are built for sm_90), the
# CUDA toolkit at /usr/local/cuda (nvcc, NCCL, cuBLAS), and what README.md's quick start installs:
# bazel, g++, GoogleTest, Eigen, OpenMPI (libopenmpi-dev: //launch:world and train_lm link MPI;
# openmpi-bin: the mpirun runs of section 9) and the Python standard library sources under
# /usr/lib/python3.* (the corpus). No network. BAZEL=/path/to/bazel picks another bazel.
# An estimated 5-7 minutes on 1 x H100/H200 with 16 cores from an empty bazel cache (not yet run on
# a GPU; the build is most of it). Every step is time-boxed and the whole run stays inside
# GPU_CHECK_BUDGET_S (default 540 s): a step that would start past it is not run and counts as a
# failure.
#
# Sections:
#   1. environment: date, nvidia-smi (the GPU name), nvcc, bazel, OpenMPI, device count
#   2. the CUDA test targets: the list below must equal every cuda_cc_test / cuda_sh_test of the
#      repository (bazel query); a listed target that is missing, or one that is not listed, fails
#   3. build (--config=opt): the tests, //bench:comm, //ops/cuda:cublas_matmul_bench,
#      //examples:train_lm, //data:text_to_tokens
#   4. the CUDA tests, full output; a test skipped for lack of a CUDA device is a failure
#   5. NCCL tables: bench/comm --backend nccl (NcclWorld over every visible GPU: on one GPU a world
#      of ONE rank, so busbw is 0 by definition and the times are call overhead plus the local copy)
#      for all_reduce, all_gather, reduce_scatter, all_to_all, 8 B .. 256 MiB
#   6. cuBLAS GEMM throughput (4096^3)
#   7. the corpus: //data:text_to_tokens over /usr/lib/python3.*/**.py (2 MB)
#   8. train_lm on the GPU (--json-summary): (a) host vs cuda, 1 rank, 10 steps of the default
#      model: the losses must agree; (b) the overlap trace, --plan fsdp: 1 rank (NCCL) and 2
#      in-process ranks (on one GPU: the staged fallback, threads + host staging) with --overlap on
#      and off, printing step_seconds and exposed_comm_fraction
#   9. train_lm under mpirun, the overlap-trace run: -np 1 (NCCL over MPI) and -np 2 (on one
#      GPU: MPI + staging)
#  10. the figures as a block ready to paste into bench/README.md (GPU name, date)
#  11. summary: PASS, or FAIL with every failed step (every step still runs, so one run shows all)
# Output files (the log, the JSON lines, the README block) go to $GPU_CHECK_OUT (default: a new
# directory under /tmp, printed at the start).
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
case "${1:-}" in
  "") ;;
  --dry-run) DRY_RUN=1 ;;
  -h | --help)
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "gpu_check.sh: unknown argument '$1' (expected --dry-run or --help)" >&2
    exit 2
    ;;
esac

BAZEL="${BAZEL:-bazel}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-540}"
JOBS="$(nproc 2>/dev/null || echo 8)"
BAZEL_FLAGS=(--config=opt "--jobs=${JOBS}" --color=no --curses=no --show_progress_rate_limit=10)
# Tests see only Bazel's strict environment: pass the driver's library path and the GPU choice on.
TEST_FLAGS=(--test_output=all --test_summary=detailed --test_env=LD_LIBRARY_PATH
            --test_env=CUDA_VISIBLE_DEVICES --test_env=NCCL_DEBUG)
# Every cuda_cc_test / cuda_sh_test of the repository (section 2 checks this list against bazel query).
CUDA_TESTS=(
  //runtime/cuda:device_kernels_test
  //runtime/cuda:cuda_device_test
  //collectives/nccl:nccl_communicator_test
  //collectives/nccl:nccl_executor_test
  //collectives/nccl:nccl_errors_test
  //ops/cuda:cublas_matmul_test
  //ops/cuda:cuda_op_kernels_test
  //launch:cuda_world_test
  //tests/doc:cuda_doc_test
  //tests/doc:ops_cuda_doc_test
  //tests/doc:nccl_doc_test
  //tests/doc:launch_cuda_doc_test
)
BINARIES=(//bench:comm //ops/cuda:cublas_matmul_bench //examples:train_lm //data:text_to_tokens)
MPI_HEADER=/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h
NVCC=/usr/local/cuda/bin/nvcc
# train_lm: (a) the default model; (b) the overlap trace on a larger one (4 layers, dim 256).
TRAIN_COMMON=(--json-summary --print-every 10)
TRACE_MODEL=(--layers 4 --dim 256 --heads 8 --mlp-hidden 1024 --seq-len 128 --batch 32 --steps 30)

OUT="${GPU_CHECK_OUT:-}"  # created after the dry-run branch
failures=()
figures=()  # "kind|fields..." rows for the README block

section() {
  echo
  echo "=============================================================================="
  echo "== $*   (t = ${SECONDS} s)"
  echo "=============================================================================="
}
fail() {
  echo "FAIL: $*"
  failures+=("$*")
}
# tbox LIMIT CMD...: CMD under `timeout`, its limit cut to what is left of the budget; not run
# (status 124) when less than 15 s are left.
tbox() {
  local limit="$1"
  shift
  local left=$((BUDGET_S - SECONDS))
  if [[ ${left} -lt 15 ]]; then
    echo "not run (the ${BUDGET_S} s budget is spent): $*"
    return 124
  fi
  if [[ ${limit} -gt ${left} ]]; then limit=${left}; fi
  timeout --kill-after=10 "${limit}" "$@"
}
# The BUILD file of a label declares a target of its name.
declared() {
  local label="$1" pkg name
  pkg="${label#//}"
  pkg="${pkg%%:*}"
  name="${label##*:}"
  [[ -f "${pkg}/BUILD.bazel" ]] && grep -q "name = \"${name}\"" "${pkg}/BUILD.bazel"
}
# json_field FILE NAME: the value of "NAME" in the last JSON line of FILE ("" when absent).
json_field() {
  { grep '^{' "$1" || true; } | tail -n 1 | sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"
}
summary_and_exit() {
  section "11. Summary"
  if [[ ${#failures[@]} -eq 0 ]]; then
    echo "gpu_check: PASS (${SECONDS} s; output in ${OUT})"
    exit 0
  fi
  for f in "${failures[@]}"; do echo "FAILED: ${f}"; done
  echo "gpu_check: FAIL (${#failures[@]} failed step(s), ${SECONDS} s; output in ${OUT})"
  exit 1
}

if [[ ${DRY_RUN} -eq 1 ]]; then
  section "Dry run: targets, paths and tools (nothing is built or run)"
  bad=0
  for t in "${CUDA_TESTS[@]}" "${BINARIES[@]}"; do
    if declared "$t"; then echo "ok       target ${t}"; else echo "MISSING  target ${t}"; bad=1; fi
  done
  for f in collectives/mpi/mpi_env.sh third_party/cuda.bzl; do
    if [[ -f "$f" ]]; then echo "ok       file ${f}"; else echo "MISSING  file ${f}"; bad=1; fi
  done
  py="$(compgen -G '/usr/lib/python3.[0-9]*' | head -n 1 || true)"
  if [[ -n "${py}" ]]; then echo "ok       corpus sources ${py}"; else echo "MISSING  /usr/lib/python3.* (corpus)"; bad=1; fi
  for tool in "${BAZEL}" "${NVCC}" nvidia-smi mpirun timeout; do
    if command -v "${tool}" >/dev/null 2>&1; then
      echo "ok       tool ${tool}"
    else
      echo "absent   tool ${tool} (needed on the GPU machine)"
    fi
  done
  if [[ -f "${MPI_HEADER}" ]]; then echo "ok       ${MPI_HEADER}"; else echo "absent   ${MPI_HEADER} (needed)"; fi
  echo
  echo "plan: ${BAZEL} build ${BAZEL_FLAGS[*]} ${CUDA_TESTS[*]} ${BINARIES[*]}"
  echo "      ${BAZEL} test ${BAZEL_FLAGS[*]} ${TEST_FLAGS[*]} <the ${#CUDA_TESTS[@]} CUDA tests>"
  echo "      bazel-bin/bench/comm --backend nccl; cublas_matmul_bench; text_to_tokens; train_lm x 8"
  echo "      (budget ${BUDGET_S} s; output to ${OUT:-a new directory /tmp/gpu_check.*})"
  if [[ ${bad} -eq 0 ]]; then echo "dry run: OK"; else echo "dry run: FAIL (missing targets or files)"; fi
  exit "${bad}"
fi

if [[ -z "${OUT}" ]]; then OUT="$(mktemp -d /tmp/gpu_check.XXXXXX)"; fi
mkdir -p "${OUT}"
exec > >(tee "${OUT}/gpu_check.log") 2>&1
echo "gpu_check: output in ${OUT}"

# ---------------------------------------------------------------------------------------------
section "1. Environment"
date -u
echo "cores: ${JOBS}"
gpus=0
gpu_name="unknown GPU"
driver="?"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi || fail "nvidia-smi exited non-zero"
  gpus="$({ nvidia-smi -L 2>/dev/null || true; } | grep -c '^GPU' || true)"
  gpu_name="$({ nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true; } | head -n 1)"
  driver="$({ nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null || true; } | head -n 1)"
else
  echo "nvidia-smi not found"
fi
echo "GPUs listed by nvidia-smi: ${gpus} (${gpu_name:-?}, driver ${driver:-?})"
[[ "${gpus}" -ge 1 ]] || fail "no GPU visible (the device tests would only skip)"
cuda_version="$("${NVCC}" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)"
if [[ -n "${cuda_version}" ]]; then echo "nvcc: CUDA ${cuda_version}"; else fail "nvcc not found at ${NVCC}"; fi
[[ -f "${MPI_HEADER}" ]] || fail "OpenMPI headers not found (${MPI_HEADER}): apt-get install libopenmpi-dev openmpi-bin"
if ! command -v "${BAZEL}" >/dev/null 2>&1; then
  fail "bazel not found (${BAZEL}); set BAZEL=/path/to/bazel"
fi
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "the machine lacks what the check needs; stopping"
  summary_and_exit
fi
"${BAZEL}" --version || true

# ---------------------------------------------------------------------------------------------
section "2. The CUDA test targets (listed here vs declared in the repository)"
missing=0
for t in "${CUDA_TESTS[@]}"; do
  if ! declared "$t"; then
    fail "listed CUDA test ${t} is not declared in its BUILD file"
    missing=1
  fi
done
universe="$(for d in */; do
  d="${d%/}"
  if [[ "$d" == bazel-* || -L "$d" ]]; then continue; fi
  if [[ -n "$(find "$d" -name BUILD.bazel -print -quit)" ]]; then echo "//$d/..."; fi
done | paste -sd+ -)"
if declared_tests="$(tbox 120 "${BAZEL}" query --keep_going \
    "attr(generator_function, '^cuda_(cc|sh)_test\$', ${universe})" 2>"${OUT}/query.err")"; then :; fi
if [[ -z "${declared_tests}" ]]; then
  cat "${OUT}/query.err"
  fail "bazel query found no CUDA test (was the CUDA toolkit detected? see third_party/cuda.bzl)"
  missing=1
fi
for t in ${declared_tests}; do
  listed=0
  for l in "${CUDA_TESTS[@]}"; do
    if [[ "$t" == "$l" ]]; then listed=1; fi
  done
  if [[ ${listed} -eq 1 ]]; then echo "ok      ${t}"; else fail "CUDA test ${t} is not in CUDA_TESTS of scripts/gpu_check.sh"; fi
done
for l in "${CUDA_TESTS[@]}"; do
  if ! grep -qx -- "$l" <<<"${declared_tests}"; then
    fail "listed CUDA test ${l} is not a declared CUDA test (bazel query)"
    missing=1
  fi
done

# ---------------------------------------------------------------------------------------------
section "3. Build (${BAZEL} build ${BAZEL_FLAGS[*]})"
start=${SECONDS}
built=1
targets=("${BINARIES[@]}")
if [[ ${missing} -eq 0 ]]; then targets+=("${CUDA_TESTS[@]}"); fi
if ! tbox 360 "${BAZEL}" build "${BAZEL_FLAGS[@]}" "${targets[@]}"; then
  fail "bazel build"
  built=0
fi
echo "build took $((SECONDS - start)) s"
if [[ ${built} -eq 0 ]]; then summary_and_exit; fi
# The output directories of this configuration (not the bazel-bin symlink, which follows the last build).
BIN="$("${BAZEL}" info "${BAZEL_FLAGS[@]}" bazel-bin 2>/dev/null || true)"
TESTLOGS="$("${BAZEL}" info "${BAZEL_FLAGS[@]}" bazel-testlogs 2>/dev/null || true)"
if [[ -z "${BIN}" || -z "${TESTLOGS}" ]]; then
  fail "bazel info bazel-bin / bazel-testlogs"
  summary_and_exit
fi

# ---------------------------------------------------------------------------------------------
section "4. CUDA tests (${#CUDA_TESTS[@]} targets)"
start=${SECONDS}
if [[ ${missing} -eq 0 ]]; then
  tbox 240 "${BAZEL}" test "${BAZEL_FLAGS[@]}" "${TEST_FLAGS[@]}" "${CUDA_TESTS[@]}" || fail "bazel test (CUDA tests)"
  for t in "${CUDA_TESTS[@]}"; do
    log="${TESTLOGS}/${t#//}"
    log="${log/://}/test.log"
    if [[ ! -f "${log}" ]]; then
      fail "${t}: no test log (${log})"
    elif grep -A1 ': Skipped$' "${log}" | grep -q 'no CUDA device'; then
      fail "${t} skipped device tests (no CUDA device seen by the test)"
    else
      skipped="$(grep -c '^\[  SKIPPED \] [A-Za-z]' "${log}" || true)"
      echo "${t}: log ok (${skipped} skipped for other reasons, e.g. no-device rows or 2+ GPUs)"
    fi
  done
else
  fail "CUDA tests not run (the target list is wrong, section 2)"
fi
echo "tests took $((SECONDS - start)) s"

# ---------------------------------------------------------------------------------------------
section "5. NCCL tables (bench/comm --backend nccl; ${gpus} GPU(s): a world of ${gpus} rank(s))"
if [[ "${gpus}" -eq 1 ]]; then
  echo "One GPU: the NCCL world has 1 rank. busbw = algbw x (n-1)/n or 2(n-1)/n = 0 by definition;"
  echo "the times are NCCL's call overhead and the local copy; d2d is cudaMemcpyAsync device to device."
fi
for op in all_reduce all_gather reduce_scatter all_to_all; do
  echo
  echo "---- ${op}"
  if tbox 60 "${BIN}/bench/comm" --backend nccl --op "${op}" -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 \
      | tee "${OUT}/comm_${op}.txt"; then
    # size time algbw #wrong d2d at 8 B, 64 KiB, 1 MiB, 16 MiB, 256 MiB.
    while read -r size _ _ _ t_us algbw _ wrong d2d _; do
      case "${size}" in
        8 | 65536 | 1048576 | 16777216 | 268435456) figures+=("comm|${op}|${size}|${t_us}|${algbw}|${d2d}|${wrong}") ;;
      esac
    done < <(grep -v '^#' "${OUT}/comm_${op}.txt" || true)
  else
    fail "bench/comm --backend nccl --op ${op}"
  fi
done

# ---------------------------------------------------------------------------------------------
section "6. cuBLAS GEMM throughput (4096^3)"
if tbox 60 "${BIN}/ops/cuda/cublas_matmul_bench" 4096 20 | tee "${OUT}/gemm.txt"; then
  while read -r line; do figures+=("gemm|${line}"); done < <(grep -i 'tflop' "${OUT}/gemm.txt" || true)
else
  fail "cublas_matmul_bench"
fi

# ---------------------------------------------------------------------------------------------
section "7. Corpus (//data:text_to_tokens over /usr/lib/python3.*)"
corpus="${OUT}/py.mftok"
py_dirs=()
for d in /usr/lib/python3.[0-9]*; do
  if [[ -d "$d" ]]; then py_dirs+=("$d"); fi
done
if [[ ${#py_dirs[@]} -eq 0 ]]; then
  fail "no /usr/lib/python3.* sources for the corpus (apt-get install libpython3-stdlib)"
elif ! tbox 60 "${BIN}/data/text_to_tokens" --output "${corpus}" --suffix .py --max-bytes 2000000 "${py_dirs[@]}"; then
  fail "text_to_tokens"
fi

# ---------------------------------------------------------------------------------------------
# run_train NAME LIMIT CMD...: a train_lm command line under tbox, its output in $OUT/NAME.txt;
# fails when it exits non-zero or prints no JSON summary.
run_train() {
  local name="$1" limit="$2"
  shift 2
  echo
  echo "---- ${name}: $*"
  if ! tbox "${limit}" "$@" 2>&1 | tee "${OUT}/${name}.txt"; then
    fail "train_lm ${name}"
    return 0
  fi
  if [[ -z "$(json_field "${OUT}/${name}.txt" final_loss)" ]]; then fail "train_lm ${name}: no JSON summary"; fi
}
# train NAME LIMIT ARGS...: train_lm in-process on the corpus with TRAIN_COMMON and ARGS.
train() {
  local name="$1" limit="$2"
  shift 2
  run_train "${name}" "${limit}" "${BIN}/examples/train_lm" --corpus "${corpus}" "${TRAIN_COMMON[@]}" "$@"
}
# trace_row NAME LABEL: prints and records the overlap figures of run NAME.
trace_row() {
  local f="${OUT}/$1.txt" s e t l
  s="$(json_field "$f" step_seconds)"
  e="$(json_field "$f" exposed_comm_fraction)"
  t="$(json_field "$f" tokens_per_s)"
  l="$(json_field "$f" final_loss)"
  printf '%-44s step_seconds %-10s exposed_comm_fraction %-8s tokens/s %-10s final_loss %s\n' \
    "$2" "${s:-?}" "${e:-?}" "${t:-?}" "${l:-?}"
  figures+=("train|$2|${s:-?}|${e:-?}|${t:-?}|${l:-?}")
}

section "8a. train_lm: host vs cuda (1 rank, default model, 10 steps)"
if [[ -f "${corpus}" ]]; then
  train host_1 90 --device host --nproc 1 --steps 10
  train cuda_1 90 --device cuda --nproc 1 --steps 10
  hs="$(json_field "${OUT}/host_1.txt" start_loss)"
  cs="$(json_field "${OUT}/cuda_1.txt" start_loss)"
  hf="$(json_field "${OUT}/host_1.txt" final_loss)"
  cf="$(json_field "${OUT}/cuda_1.txt" final_loss)"
  echo "start_loss host ${hs:-?} cuda ${cs:-?}; final_loss host ${hf:-?} cuda ${cf:-?}"
  if [[ -n "${hs}" && -n "${cs}" && -n "${hf}" && -n "${cf}" ]]; then
    if awk -v a="${hs}" -v b="${cs}" -v c="${hf}" -v d="${cf}" \
        'BEGIN { x = a - b; y = c - d; exit !((x < 0 ? -x : x) <= 1e-3 && (y < 0 ? -y : y) <= 5e-2) }'; then
      echo "host and cuda agree (|start| <= 1e-3, |final| <= 5e-2)"
    else
      fail "train_lm host vs cuda: losses differ (start ${hs} vs ${cs}, final ${hf} vs ${cf})"
    fi
  fi
  figures+=("agree|${hs:-?}|${cs:-?}|${hf:-?}|${cf:-?}")
else
  fail "train_lm runs skipped: no corpus"
fi

if [[ "${gpus}" -ge 2 ]]; then two="2 ranks, NCCL (2 GPUs)"; else two="2 ranks on 1 GPU (threads + staging)"; fi
section "8b. train_lm overlap trace (--plan fsdp, 4 layers, dim 256, 30 steps)"
if [[ -f "${corpus}" ]]; then
  for overlap in on off; do
    train "trace_1_${overlap}" 120 --device cuda --nproc 1 --plan fsdp --overlap "${overlap}" "${TRACE_MODEL[@]}"
    train "trace_2_${overlap}" 150 --device cuda --nproc 2 --plan fsdp --overlap "${overlap}" "${TRACE_MODEL[@]}"
  done
  echo
  for overlap in on off; do
    trace_row "trace_1_${overlap}" "1 rank, NCCL, overlap ${overlap}"
    trace_row "trace_2_${overlap}" "${two}, overlap ${overlap}"
  done
  for n in 1 2; do
    a="$(json_field "${OUT}/trace_${n}_on.txt" final_loss)"
    b="$(json_field "${OUT}/trace_${n}_off.txt" final_loss)"
    echo "${n} rank(s): final_loss overlap on ${a:-?} vs off ${b:-?} ($([[ -n "$a" && "$a" == "$b" ]] && echo same || echo different))"
  done
fi

# ---------------------------------------------------------------------------------------------
section "9. train_lm under mpirun (the launcher path of launch/cuda_world)"
if ! command -v mpirun >/dev/null 2>&1; then
  fail "mpirun not found (apt-get install openmpi-bin): the launcher path is not checked"
elif [[ -f "${corpus}" ]]; then
  # shellcheck disable=SC1091
  source collectives/mpi/mpi_env.sh
  for np in 1 2; do
    if [[ "${np}" -le "${gpus}" ]]; then kind="NCCL over MPI"; else kind="MPI + staging"; fi
    run_train "mpirun_${np}" 150 mpirun "${MPIRUN_FLAGS[@]}" -np "${np}" "${BIN}/examples/train_lm" \
      --corpus "${corpus}" "${TRAIN_COMMON[@]}" --device cuda --plan fsdp "${TRACE_MODEL[@]}"
    trace_row "mpirun_${np}" "mpirun -np ${np}, ${kind}, overlap on"
  done
fi

# ---------------------------------------------------------------------------------------------
section "10. Figures for bench/README.md (paste below '## NCCL (GPU)')"
readme="${OUT}/readme_block.md"
{
  echo "### One GPU: NCCL tables and train_lm (${gpu_name:-GPU}, $(date -u +%Y-%m-%d))"
  echo
  echo "\`scripts/gpu_check.sh\` on 1 x ${gpu_name:-GPU} (driver ${driver:-?}, CUDA ${cuda_version:-?}), ${JOBS}"
  echo "cores. NCCL world of ${gpus} rank(s): with one rank busbw is 0 by definition, so the times are"
  echo "NCCL's call overhead and the local copy (d2d: cudaMemcpyAsync device to device)."
  echo
  echo "| op | size (B) | time (us) | algbw (GB/s) | d2d (GB/s) | #wrong |"
  echo "|---|---|---|---|---|---|"
  for f in "${figures[@]}"; do
    IFS='|' read -r kind a b c d e g <<<"$f"
    if [[ "${kind}" == comm ]]; then echo "| ${a} | ${b} | ${c} | ${d} | ${e} | ${g} |"; fi
  done
  echo
  for f in "${figures[@]}"; do
    IFS='|' read -r kind a <<<"$f"
    if [[ "${kind}" == gemm ]]; then echo "cuBLAS: ${a}  "; fi
  done
  echo
  for f in "${figures[@]}"; do
    IFS='|' read -r kind a b c d <<<"$f"
    if [[ "${kind}" == agree ]]; then
      echo "train_lm, default model, 1 rank, 10 steps: start_loss host ${a} / cuda ${b}, final_loss host ${c} / cuda ${d}."
    fi
  done
  echo
  echo "train_lm \`--device cuda --plan fsdp --layers 4 --dim 256 --heads 8 --mlp-hidden 1024 --seq-len 128"
  echo "--batch 32 --steps 30\` (exposed_comm_fraction: the rank's thread blocked on communication /"
  echo "communication time):"
  echo
  echo "| world | step_seconds | exposed_comm_fraction | tokens/s | final_loss |"
  echo "|---|---|---|---|---|"
  for f in "${figures[@]}"; do
    IFS='|' read -r kind a b c d e <<<"$f"
    if [[ "${kind}" == train ]]; then echo "| ${a} | ${b} | ${c} | ${d} | ${e} |"; fi
  done
} >"${readme}"
cat "${readme}"

summary_and_exit
