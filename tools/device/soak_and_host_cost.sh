#!/usr/bin/env bash
# One GPU call for the leak soak and the ecosystem figures (issues 14 and 15), the two side by side:
#   1. build (Release; or MLAJIT_PREBUILT_DIR=<dir of binaries built elsewhere>), then the kernel cache is
#      warmed: mlajit-warmup warmup, every variant of DeepSeek-V3.2 at TP 1/2/4/8 (MLAJIT_WARM_CACHE=<dir>
#      copies a cache warmed elsewhere in first: then nothing compiles when the NVRTC versions agree);
#   2. on CPU cores 0-7: the soak (tests/gpu/test_soak_gpu.cpp) for SOAK_SECONDS on the warm cache, memory
#      sampled per batch (CSV kept);
#   3. on CPU cores 8-15, meanwhile: tools/bench/host_cost_on_gpu.sh (the custom ops' GPU tests, the host
#      cost benchmark, the installed examples' checked prefills).
# The soak's device-memory figure is device-wide, so it is reported, not checked (MLAJIT_SOAK_SHARED_GPU=1):
# the other processes' contexts come and go while the soak runs; compare it with the CSV's times after
# step 3 ended (printed). Host RSS is per process and unaffected.
# Usage: bash tools/device/soak_and_host_cost.sh [SOAK_SECONDS]   (default 120). Everything lands in
# $OUT/logs.tgz (the device tool returns at most 8 files); the figures are printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
soak_s="${1:-120}"
out="${OUT:-/tmp/mlajit-soak-eco}"
logs="$(mktemp -d)"
mkdir -p "$out"
finish() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
trap finish EXIT
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
cache=/tmp/mlajit-soak-eco-cache
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
if [ -n "${MLAJIT_PREBUILT_DIR:-}" ]; then
  # Binaries built on another machine (mlajit_gpu_tests, libmlajit.so, mlajit-host-cost, mlajit-warmup,
  # and the examples built against an install of them): no build here, the cheapest call.
  build="$MLAJIT_PREBUILT_DIR"
  export MLAJIT_EXAMPLES_BIN="$build"
  echo "prebuilt binaries: $build"
else
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$logs/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target mlajit-warmup mlajit_gpu_tests mlajit mlajit-host-cost >"$logs/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A6 "$logs/build.log" "$logs/configure.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
  echo "built: $(since)"
fi
# A cache warmed elsewhere (same NVRTC version: same keys) is copied in; warmup then only checks it, or
# compiles what is missing.
[ -n "${MLAJIT_WARM_CACHE:-}" ] && mkdir -p "$cache" && cp -r "$MLAJIT_WARM_CACHE"/. "$cache"/
"$build/mlajit-warmup" warmup --model deepseek-v3.2 --tp 1,2,4,8 --jobs 16 --cache-dir "$cache" >"$logs/warmup.log" 2>&1
echo "cache warmed: rc=$? $(since) ($(tail -1 "$logs/warmup.log"))"
pin_a=(); pin_b=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 16 ]; then pin_a=(taskset -c 0-7); pin_b=(taskset -c 8-15); fi
soak_start=$(date +%s)
MLAJIT_CACHE_DIR="$cache" MLAJIT_SOAK_SECONDS="$soak_s" MLAJIT_SOAK_SHARED_GPU=1 MLAJIT_SOAK_CSV="$logs/soak.csv" \
  "${pin_a[@]}" "$build/mlajit_gpu_tests" '--test-case=gpu soak*' >"$logs/soak.log" 2>&1 &
soak_pid=$!
MLAJIT_CACHE_DIR="$cache" MLAJIT_SKIP_BUILD=1 MLAJIT_BUILD_DIR="$build" OUT="$logs/eco" \
  timeout $(( soak_s + 60 )) "${pin_b[@]}" bash tools/bench/host_cost_on_gpu.sh >"$logs/eco.log" 2>&1
eco_rc=$?
echo "ecosystem steps: rc=$eco_rc, ended $(( $(date +%s) - soak_start )) s into the soak"
wait $soak_pid
soak_rc=$?
echo "soak: rc=$soak_rc $(since)"
echo "=== soak"; grep -E "FIGURE|ERROR|FAILED|test cases" "$logs/soak.log" | head -20
echo "=== ecosystem"; cat "$logs/eco.log" | tail -100
echo "SUMMARY: soak rc=$soak_rc, ecosystem rc=$eco_rc, total $(since)"
