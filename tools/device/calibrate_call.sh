#!/usr/bin/env bash
# The planner's calibration in one device call (about 4 minutes warm, build included): the library's Release build,
# `mlajit-warmup calibrate --evaluate` (the whole one-call path per cell, both routes; off-grid shapes scored), and
# mlajit-bench's sparse MQA rows at the goal shape (8k, topk 2048, with and without the key-set pre-pass's workspace) as
# the anchor of the same call. The table and the logs come back in $OUT/logs.tgz; fit the rates here with
#   python3 tools/dev/fit_rates.py TABLE.json --upproj 505.8 --evaluate calibrate.log
# Name `.devdeps` in `carry`.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/calibrate}"; logs="$(mktemp -d)"; mkdir -p "$out"
finish() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
trap finish EXIT
t0=$(date +%s); since() { echo "$(( $(date +%s) - t0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
JOBS=$(nproc) bash tools/dev/mqa/lib_build.sh "$logs" mlajit-warmup mlajit-bench ||
  { grep -E "error|FAILED" -A6 "$logs/build.log" | head -40; echo "SUMMARY: build failed"; exit 1; }
echo "built $(since)"
export MLAJIT_CACHE_DIR=/tmp/cal-cache
timeout 360 build-gpu/mlajit-warmup calibrate --evaluate >"$logs/calibrate.log" 2>&1
rc=$?; echo "calibrate rc $rc $(since)"
cp "$MLAJIT_CACHE_DIR"/calibration/*.json "$logs/" 2>/dev/null
timeout 120 build-gpu/mlajit-bench --ops mqa,mqa-nows --heads 16,32,64,128 --s-q 8192 --topk 2048 --reps 10 --csv "$logs/mqa_bench.csv" >"$logs/mqa_bench.log" 2>&1
echo "bench rc $? $(since)"
sed -n '/^crossover/,$p' "$logs/calibrate.log" | head -30
grep -E "^planner with" "$logs/calibrate.log"
cat "$logs/mqa_bench.csv"
echo "SUMMARY: calibrate rc $rc ($(since)); logs in logs.tgz"
