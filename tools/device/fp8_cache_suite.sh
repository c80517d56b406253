#!/usr/bin/env bash
# Issue 16 (FP8 latent cache) in one device call: build (Release), the FP8 GPU tests (writer round trip,
# the one call's MHA paths and bad page on the FP8 cache; the sparse-path case needs the FP8 sparse MQA
# kernel), the bf16 paged one-call test as a regression check of the shared gather, then mlajit-bench
# --kv fp8 at TP8 (16 heads), 8 requests x 1024 new tokens over 32k cached each. Logs and CSV in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-fp8}"
mkdir -p "$out"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; echo "SUMMARY: configure failed"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target mlajit_gpu_tests mlajit-bench >"$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A6 "$out/build.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-fp8-cache}"
t1=$(date +%s)
"$build/mlajit_gpu_tests" -tc="*fp8*,*paged cache*" -s >"$out/gpu_tests.log" 2>&1
tests_rc=$?
grep -E "FIGURE|ERROR|FAILED|skipped|test cases|assertions|CHECK|REQUIRE" "$out/gpu_tests.log" | grep -v "^\s*$" | head -60
echo "tests: $(( $(date +%s) - t1 )) s"
t2=$(date +%s)
timeout "${FP8_BENCH_TIMEOUT:-120}" "$build/mlajit-bench" --kv fp8 --heads "${FP8_BENCH_HEADS:-16}" --batch 8 --s-q 1024 \
  --s-k 33792 --topk 2048 --reps 10 --csv "$out/fp8_bench.csv" 2>"$out/fp8_bench.log"
bench_rc=$?
cat "$out/fp8_bench.log"
echo "bench: $(( $(date +%s) - t2 )) s"
echo "SUMMARY: fp8 gpu tests rc=$tests_rc, bench rc=$bench_rc ($(grep -E '^\[doctest\] test cases' "$out/gpu_tests.log" | tr -s ' '))"
