#!/bin/bash
# Runs mpi_checkpoint_test_main under mpirun with 4 and 8 processes, each in a fresh directory.
set -u
here="${TEST_SRCDIR:-$PWD}/${TEST_WORKSPACE:-meshflow}"
runner="$here/collectives/mpi/mpirun_test.sh"
bin="$here/tests/mpi/mpi_checkpoint_test_main"
tmp="${TEST_TMPDIR:-/tmp}"
status=0
for np in 4 8; do
  bash "$runner" --timeout 120 "$bin" "$np" -- "$tmp/ckpt_np$np" || status=1
done
exit $status
