#!/bin/bash
# train_lm figures (issue 15), from the example's own JSON summary: tokens/s of every plan vs the
# single rank in the same session (threads; mpirun for ddp and fsdp+tp), and the step-time cost of
# the loader (prefetch 2) and of checkpointing every 10 steps (async vs sync vs none).
#
#   bazel build --config=opt //examples:train_lm //data:text_to_tokens
#   bench/train_lm_report.sh [STEPS]          (default 40; prints a markdown table)
#
# Uses a per-run temporary directory (removed at exit).
set -u
steps="${1:-40}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bazel-out/k8-opt/bin/examples/train_lm"
t2t="$root/bazel-out/k8-opt/bin/data/text_to_tokens"
[ -x "$bin" ] && [ -x "$t2t" ] || { echo "build first: bazel build --config=opt //examples:train_lm //data:text_to_tokens"; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$t2t" --output "$tmp/c.mftok" --suffix .py --max-bytes 2000000 /usr/lib/python3.[0-9]* >/dev/null || exit 1
source "$root/collectives/mpi/mpi_env.sh"
field() { local v
  v=$(sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" <<<"$2")
  [ -n "$v" ] || v=$(sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" <<<"$2")
  echo "$v"; }
run() {  # run LABEL ARGS... -> prints a row; sets $tps
  local label="$1"; shift
  local out
  out=$("$@" --corpus "$tmp/c.mftok" --steps "$steps" --print-every 0 --json-summary 2>"$tmp/err" | tail -1)
  if [ -z "$(field tokens_per_s "$out")" ]; then echo "| $label | failed: $(tail -1 "$tmp/err") |"; tps=0; return; fi
  tps=$(field tokens_per_s "$out")
  local ratio
  ratio=$(awk -v a="$tps" -v b="${single:-$tps}" 'BEGIN { printf "%.2f", a / b }')
  printf "| %s | %s | %s | %.0f | %s | %.3f | %.2f%% | %.2f%% |\n" "$label" "$(field world_size "$out")" \
    "$(field mesh "$out")" "$tps" "$ratio" "$(field step_seconds "$out")" \
    "$(awk -v f="$(field loader_wait_fraction "$out")" 'BEGIN { print 100 * f }')" \
    "$(awk -v f="$(field checkpoint_stall_fraction "$out")" 'BEGIN { print 100 * f }')"
}
echo "| run | ranks | mesh | tokens/s | vs single | s/step | loader wait | checkpoint stall |"
echo "|---|---|---|---|---|---|---|---|"
single=""
run "single rank" "$bin"
single="$tps"
for plan in ddp zero1 fsdp tp fsdp+tp; do run "threads, $plan" "$bin" --nproc 4 --plan "$plan"; done
run "threads, ddp, 2 ranks" "$bin" --nproc 2 --plan ddp
run "mpirun -np 2, ddp" mpirun "${MPIRUN_FLAGS[@]}" -np 2 "$bin" --plan ddp
run "mpirun -np 4, ddp" mpirun "${MPIRUN_FLAGS[@]}" -np 4 "$bin" --plan ddp
run "mpirun -np 4, fsdp+tp" mpirun "${MPIRUN_FLAGS[@]}" -np 4 "$bin" --plan fsdp+tp
run "threads, ddp 2 ranks, ckpt every 10 (async)" "$bin" --nproc 2 --plan ddp --ckpt-dir "$tmp/a" --ckpt-every 10
run "threads, ddp 2 ranks, ckpt every 10 (sync)" "$bin" --nproc 2 --plan ddp --ckpt-dir "$tmp/s" --ckpt-every 10 --sync-checkpoint
run "mpirun -np 2, ddp, ckpt every 10 (async)" mpirun "${MPIRUN_FLAGS[@]}" -np 2 "$bin" --plan ddp --ckpt-dir "$tmp/m" --ckpt-every 10
