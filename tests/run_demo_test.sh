#!/bin/sh
# Runs a demo binary and fails when it fails or does not report success.
set -e
out=$("$1")
echo "$out"
echo "$out" | grep -q "all checks passed"
