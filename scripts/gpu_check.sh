#!/usr/bin/env bash
# gpu_check.sh: the prepared GPU check of the NCCL backend and the CUDA kernels (issues 4 and 5).
#
# Run from anywhere on a machine with /usr/local/cuda, a GPU and bazel (1 x H200, 16 cores: about
# 3-4 minutes from an empty bazel cache):
#   scripts/gpu_check.sh
# It needs no network and no MPI (single-process NCCL: NcclWorld over every visible GPU, so one
# GPU gives a world of size 1). Sections:
#   1. environment (nvidia-smi, nvcc, device count)
#   2. build of the CUDA targets (bazel -c opt, -j = number of cores)
#   3. the NCCL / CUDA tests with their full output; any skipped device test is a failure here
#   4. nccl-tests style tables: //bench:comm_nccl --backend nccl for all_reduce, all_gather,
#      reduce_scatter, all_to_all from 8 B to 256 MiB (device buffers, cudaEvent timing)
#   5. cuBLAS GEMM throughput, 4096^3 (f32, f32 with TF32, f64)
# Exits non-zero if any step fails (every step still runs, so one run shows everything).
set -uo pipefail
cd "$(dirname "$0")/.."

JOBS="$(nproc 2>/dev/null || echo 8)"
BAZEL_FLAGS=(-c opt "--jobs=${JOBS}" --color=no --curses=no --show_progress_rate_limit=10)
TARGETS_TEST=(//runtime/cuda:device_kernels_test //runtime/cuda:cuda_device_test
              //collectives/nccl:nccl_communicator_test //collectives/nccl:nccl_executor_test
              //ops/cuda:cublas_matmul_test)
TARGETS_BIN=(//bench:comm_nccl //ops/cuda:cublas_matmul_bench)
status=0
failures=()

section() {
  echo
  echo "=============================================================================="
  echo "== $*"
  echo "=============================================================================="
}
fail() {
  echo "FAIL: $*"
  failures+=("$*")
  status=1
}

section "1. Environment"
date
echo "cores: ${JOBS}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi || fail "nvidia-smi exited non-zero"
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
else
  echo "nvidia-smi not found"
  gpus=0
fi
echo "GPUs listed by nvidia-smi: ${gpus}"
[[ "${gpus}" -ge 1 ]] || fail "no GPU visible (the device tests would only skip)"
/usr/local/cuda/bin/nvcc --version | tail -n 2 || fail "nvcc not found at /usr/local/cuda/bin/nvcc"
command -v bazel >/dev/null 2>&1 || { fail "bazel not found"; echo "FAILED: ${failures[*]}"; exit 1; }

section "2. Build (bazel ${BAZEL_FLAGS[*]})"
start=$SECONDS
if ! timeout 300 bazel build "${BAZEL_FLAGS[@]}" "${TARGETS_TEST[@]}" "${TARGETS_BIN[@]}"; then
  fail "bazel build"
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "build took $((SECONDS - start)) s"

section "3. Tests (device kernels, CUDA runtime, NCCL backend, executor on NCCL, cuBLAS matmul)"
start=$SECONDS
timeout 300 bazel test "${BAZEL_FLAGS[@]}" --test_output=all --test_summary=detailed "${TARGETS_TEST[@]}" ||
  fail "bazel test"
for t in "${TARGETS_TEST[@]}"; do
  log="bazel-testlogs/${t#//}"
  log="${log/://}/test.log"
  if [[ -f "$log" ]] && grep -q "no CUDA device" "$log"; then
    fail "$t skipped device tests (no CUDA device seen by the test)"
  fi
done
echo "tests took $((SECONDS - start)) s"

section "4. Collective bandwidth on NCCL (bench/comm_nccl --backend nccl, 8 B .. 256 MiB)"
for op in all_reduce all_gather reduce_scatter all_to_all; do
  echo
  echo "---- ${op}"
  timeout 120 bazel-bin/bench/comm_nccl --backend nccl --op "${op}" -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 ||
    fail "comm_nccl --op ${op}"
done

section "5. cuBLAS GEMM throughput (4096^3)"
timeout 120 bazel-bin/ops/cuda/cublas_matmul_bench 4096 20 || fail "cublas_matmul_bench"

section "Summary"
if [[ ${status} -eq 0 ]]; then
  echo "gpu_check: ALL OK"
else
  for f in "${failures[@]}"; do echo "FAILED: ${f}"; done
fi
exit ${status}
