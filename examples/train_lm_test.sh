#!/bin/bash
# train_lm end to end on the in-process world (each check below is one run):
#   1. the loss falls below 3.0 (from ln 256 = 5.55) in 80 steps of the default tiny model on a
#      real corpus (the Python standard library sources of the Debian package libpython3.*-minimal);
#   2. the plans are layouts only: ddp, zero1, fsdp, tp, fsdp+tp on 4 ranks log the same losses
#      as one rank (|diff| <= 2e-4 over 6 steps);
#   3. a rank killed with SIGKILL at step 25 under --max-restarts: the supervisor restarts the job
#      on 2 ranks (elastic) from the step-20 checkpoint; its loss curve equals the uninterrupted
#      4-rank run's (|diff| <= 2e-3) and its sample log is identical (no sample skipped or seen
#      twice; the 22-step epoch of this small corpus is crossed and every sample of epoch 0 read);
#   4. a crash in the middle of the async save of step 20: the restart resumes from step 10 and
#      ends equal to the uninterrupted run;
#   5. bad input exits 2 before any step: unknown plan, mesh that does not divide the world,
#      corpus missing or not a token file, checkpoint of another model config.
#
#   train_lm_test.sh TRAIN_LM TEXT_TO_TOKENS
set -u
bin="$1"
t2t="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$0")/train_lm_test_lib.sh"

pydir=$(python_stdlib_dir)
if [ -z "$pydir" ]; then
  echo "FAIL no Python standard library sources under /usr/lib/python3.* (apt-get install libpython3-stdlib)"
  exit 1
fi
"$t2t" --output "$tmp/big.mftok" --suffix .py --max-bytes 1000000 "$pydir" || { echo "FAIL text_to_tokens"; exit 1; }
"$t2t" --output "$tmp/small.mftok" --suffix .py --max-bytes 23000 "$pydir" || { echo "FAIL text_to_tokens"; exit 1; }

# 1. The loss falls.
out=$("$bin" --corpus "$tmp/big.mftok" --nproc 2 --steps 80 --print-every 20 --json-summary --log-csv "$tmp/l80.csv" 2>"$tmp/err"); rc=$?
echo "$out"
check "80 steps on 2 ranks (rc $rc: $(tail -2 "$tmp/err"))" $rc
last=$(tail -1 <<<"$out")
for f in start_loss final_loss tokens_per_s steps plan world_size; do
  [ -n "$(field $f "$last")" ]; check "summary has $f" $?
done
lt "$(field final_loss "$last")" 3.0; check "final loss $(field final_loss "$last") < 3.0 (start $(field start_loss "$last"))" $?
lt 5.0 "$(field start_loss "$last")"; check "start loss near ln 256" $?
[ "$(wc -l < "$tmp/l80.csv")" = 81 ]; check "CSV: header + 80 rows" $?
grep -q "^step 80/80  loss" <<<"$out"; check "progress line" $?

# 2. Plans are layouts: the same losses on every plan.
"$bin" --corpus "$tmp/big.mftok" --steps 6 --print-every 0 --log-csv "$tmp/p-single.csv" >/dev/null 2>"$tmp/err"
check "single rank 6 steps" $?
for plan in ddp zero1 fsdp tp fsdp+tp; do
  "$bin" --corpus "$tmp/big.mftok" --nproc 4 --plan "$plan" --steps 6 --print-every 0 --log-csv "$tmp/p-$plan.csv" >/dev/null 2>"$tmp/err"
  rc=$?
  d=$(curve_diff "$tmp/p-single.csv" "$tmp/p-$plan.csv")
  [ $rc = 0 ] && lt "$d" 2e-4; check "plan $plan on 4 ranks: loss curve = one rank's (max diff $d, rc $rc)" $?
done

# 2b. Overlap (FSDP gathers one block ahead, gradients reduced in buckets during backward) is the
# same computation as the serial path: identical losses with --overlap off and on.
for plan in ddp zero1 fsdp fsdp+tp; do
  "$bin" --corpus "$tmp/big.mftok" --nproc 4 --plan "$plan" --steps 4 --print-every 0 --overlap off \
    --log-csv "$tmp/o-off-$plan.csv" >/dev/null 2>"$tmp/err"
  rc1=$?
  "$bin" --corpus "$tmp/big.mftok" --nproc 4 --plan "$plan" --steps 4 --print-every 0 --overlap on --bucket-mb 0.05 \
    --log-csv "$tmp/o-on-$plan.csv" >/dev/null 2>"$tmp/err"
  rc2=$?
  [ "$(wc -l < "$tmp/o-off-$plan.csv")" = 5 ] && [ "$(wc -l < "$tmp/o-on-$plan.csv")" = 5 ]
  check "plan $plan: both overlap runs logged 4 steps (rc $rc1 $rc2)" $?
  [ "$(cut -d, -f2 "$tmp/o-off-$plan.csv")" = "$(cut -d, -f2 "$tmp/o-on-$plan.csv")" ]
  check "plan $plan: --overlap on logs the losses of --overlap off" $?
done

# 3. kill -9 of a rank, supervised elastic restart on 2 ranks.
common=(--corpus "$tmp/small.mftok" --plan zero1 --steps 30 --ckpt-every 10 --print-every 0 --json-summary)
"$bin" "${common[@]}" --nproc 4 --ckpt-dir "$tmp/ref" --sample-log "$tmp/ref.samples" >"$tmp/ref.out" 2>"$tmp/err"
check "uninterrupted 4-rank run (rc $?)" $?
"$bin" "${common[@]}" --nproc 4 --ckpt-dir "$tmp/kill" --sample-log "$tmp/kill.samples" --max-restarts 2 \
  --restart-nproc 2 --kill-rank 1 --kill-at-step 25 >"$tmp/kill.out" 2>"$tmp/kill.err"
rc=$?
cat "$tmp/kill.err"
check "killed run ends OK after restarts (rc $rc)" $rc
grep -q "supervisor: attempt 0 killed by signal 9" "$tmp/kill.err"; check "supervisor saw the kill -9" $?
last=$(tail -1 "$tmp/kill.out")
[ "$(field resumed_from_step "$last")" = 20 ] && [ "$(field world_size "$last")" = 2 ] && [ "$(field attempt "$last")" = 1 ]
check "restart on 2 ranks resumed from step 20: $last" $?
d=$(curve_diff "$tmp/ref/train_log.csv" "$tmp/kill/train_log.csv")
lt "$d" 2e-3; check "loss curve after the restart = uninterrupted (max diff $d)" $?
cmp -s "$tmp/ref.samples" "$tmp/kill.samples"; check "sample log identical to the uninterrupted run" $?
n=$(awk '{ print $2 }' "$tmp/kill.samples" | sort -n | uniq | wc -l)
[ "$n" = 30 ]; check "one sample-log line per step ($n)" $?
# epoch 0 of the small corpus: every sample read, the only repeats are the wrap-around padding.
samples=$(( ($(stat -c %s "$tmp/small.mftok") - 64) / 2 ))
seqs=$(( (samples - 1) / 64 ))
awk -v n="$seqs" '$4 == 0 { for (i = 5; i <= NF; ++i) { c[$i]++; rows++ } }
  END { distinct = 0; for (k in c) distinct++; pad = rows - n;
        exit !(distinct == n && rows == int((n + 15) / 16) * 16 && pad >= 0 && pad < 16) }' "$tmp/kill.samples"
check "epoch 0: all $seqs samples seen, repeats only the padding of the last batch" $?
awk '$4 == 1' "$tmp/kill.samples" | grep -q .; check "the run crossed into epoch 1" $?

# 4. A crash in the middle of an async save.
"$bin" "${common[@]}" --nproc 4 --ckpt-dir "$tmp/crash" --max-restarts 1 --crash-in-save-at-step 20 \
  >"$tmp/crash.out" 2>"$tmp/crash.err"
rc=$?
cat "$tmp/crash.err"
check "crash during a save: restart ends OK (rc $rc)" $rc
grep -q "dies in the middle of a checkpoint save" "$tmp/crash.err"; check "the save was interrupted" $?
last=$(tail -1 "$tmp/crash.out")
[ "$(field resumed_from_step "$last")" = 10 ]; check "resumed from the previous checkpoint (step 10): $last" $?
d=$(curve_diff "$tmp/ref/train_log.csv" "$tmp/crash/train_log.csv")
lt "$d" 2e-3; check "loss curve = uninterrupted (max diff $d)" $?

# 5. Bad input: exit 2 with a message, before any step.
bad() {  # bad NAME EXPECTED-MESSAGE ARGS...
  local name="$1" want="$2"; shift 2
  "$bin" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"; local rc=$?
  [ $rc = 2 ] && grep -qF -- "$want" "$tmp/bad.err" && ! grep -q "^step " "$tmp/bad.out"
  check "$name: exit 2 naming it (rc $rc: $(cat "$tmp/bad.err"))" $?
}
bad "unknown plan" "unknown --plan 'zero3'" --corpus "$tmp/big.mftok" --plan zero3
bad "mesh not dividing the world" "--mesh dp=3 has 3 ranks but the world has 4" --corpus "$tmp/big.mftok" --nproc 4 --mesh dp=3
bad "missing corpus" "$tmp/none.mftok" --corpus "$tmp/none.mftok"
printf 'hello, not tokens' > "$tmp/text.txt"
bad "corpus in the wrong format" "raw" --corpus "$tmp/text.txt"
bad "checkpoint of another model" "was written for model config 'vocab=256 seq_len=64 dim=64" \
  --corpus "$tmp/small.mftok" --ckpt-dir "$tmp/ref" --dim 32
bad "unknown flag" "unknown flag '--bogus'" --bogus
"$bin" --help | grep -q "usage: train_lm"; check "--help" $?
[ $fails = 0 ] && echo PASS || { echo "$fails FAILED"; exit 1; }
