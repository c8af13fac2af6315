#!/bin/bash
# train_mlp as a test: every plan matches the single rank (--check), one JSON line per run with
# the contract's fields, the compiled fsdp step printed with its collectives, and bad flags exit 2.
set -u
bin="$1"
out="$("$bin" --check)"
rc=$?
echo "$out"
if [ "$rc" -ne 0 ]; then echo "FAIL: train_mlp --check exited $rc"; exit 1; fi
for plan in single ddp zero1 fsdp tp fsdp+tp; do
  line="$(grep -F "\"plan\": \"$plan\"" <<<"$out")"
  if [ -z "$line" ]; then echo "FAIL: no JSON line for plan $plan"; exit 1; fi
  for field in '"ranks": ' '"initial_loss": ' '"final_loss": ' '"max_param_diff_vs_single": ' \
               '"bytes_per_rank": {"params": ' '"grads": ' '"optimizer": '; do
    if ! grep -qF "$field" <<<"$line"; then echo "FAIL: plan $plan line lacks $field: $line"; exit 1; fi
  done
done
line="$(grep -F '"mode": "compiled"' <<<"$out")"
for field in '"plan": "fsdp"' '"ranks": 4' '"max_param_diff_vs_single": ' '"peak_live_bytes_per_rank": '; do
  if ! grep -qF "$field" <<<"$line"; then echo "FAIL: compiled line lacks $field: $line"; exit 1; fi
done
if ! grep -q "^compiled training step, plan fsdp" <<<"$out" || ! grep -q "^peak live bytes per rank: max " <<<"$out" \
   || ! grep -q "reduce_scatter" <<<"$out"; then
  echo "FAIL: the compiled program (with its collectives and peak memory) is not printed"; exit 1
fi
if [ "$(grep -c '^{' <<<"$out")" -ne 7 ]; then echo "FAIL: expected 7 JSON lines"; exit 1; fi
if [ "$("$bin" --plans ddp --steps 2 --program none | grep -c '^{')" -ne 2 ]; then echo "FAIL: --program none"; exit 1; fi
"$bin" --program bogus >/dev/null 2>err.txt; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "unknown --program 'bogus'" err.txt; then echo "FAIL: --program bogus: rc $rc, $(cat err.txt)"; exit 1; fi
"$bin" --plans bogus >/dev/null 2>err.txt; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "unknown --plans 'bogus'" err.txt; then echo "FAIL: --plans bogus: rc $rc, $(cat err.txt)"; exit 1; fi
"$bin" --steps 0 >/dev/null 2>err.txt; rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "steps '0'" err.txt; then echo "FAIL: --steps 0: rc $rc, $(cat err.txt)"; exit 1; fi
"$bin" --help >/dev/null || { echo "FAIL: --help"; exit 1; }
echo PASS
