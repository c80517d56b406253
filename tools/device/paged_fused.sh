#!/usr/bin/env bash
# Issue 15's fused paged up-projection in one device call: the one-call / paged / GEMM GPU tests,
# compute-sanitizer memcheck + racecheck on the small paged case (racecheck on the GEMM kernel only), then
# mlajit-bench --kv fp8 at batch 1, s_q = s_k = 8192, heads 128 and 16: call_bf16 (paged, block size 64)
# against call_contig (contiguous rows), with the separate gather (MLAJIT_GEMM=unfused) and with
# MLAJIT_GEMM=fused (the up-projection reading the pages; the default up to 16 heads). The GEMM-level timings are the FIGURE lines of the GEMM GPU test. MLAJIT_PREBUILT_DIR=<dir with mlajit_gpu_tests and mlajit-bench> skips the build
# (falls back to building when they do not run here); MLAJIT_WARM_CACHE, below. Logs in $OUT/paged_logs.tgz, the summary last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-paged}"
logs="$out/logs"
mkdir -p "$logs"
t0=$(date +%s)
bin="${MLAJIT_PREBUILT_DIR:-}"
if [ -n "$bin" ] && ! "$bin/mlajit_gpu_tests" -ltc >/dev/null 2>"$logs/prebuilt.log"; then
  echo "prebuilt binaries do not run here: $(head -c 300 "$logs/prebuilt.log")"
  bin=""
fi
if [ -z "$bin" ]; then
  prefix=()
  [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
  bin="${MLAJIT_BUILD_DIR:-build-gpu}"
  cmake -S . -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$logs/configure.log" 2>&1 ||
    { tail -30 "$logs/configure.log"; echo "SUMMARY: configure failed"; exit 1; }
  cmake --build "$bin" -j "$(nproc)" --target mlajit_gpu_tests mlajit-bench >"$logs/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A6 "$logs/build.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
fi
echo "binaries: $bin ($(( $(date +%s) - t0 )) s)"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-paged-cache}"
# MLAJIT_WARM_CACHE=<dir>: a cache warmed elsewhere (mlajit-warmup --arch sm_90a): nothing compiles when the
# NVRTC versions agree.
if [ -n "${MLAJIT_WARM_CACHE:-}" ] && [ -d "$MLAJIT_WARM_CACHE" ]; then mkdir -p "$MLAJIT_CACHE_DIR" && cp -r "$MLAJIT_WARM_CACHE"/. "$MLAJIT_CACHE_DIR"/; fi

t1=$(date +%s)
timeout "${TESTS_TIMEOUT:-150}" "$bin/mlajit_gpu_tests" -tc="*engine's inputs*,*paged bf16*,*projection GEMM*" >"$logs/gpu_tests.log" 2>&1
tests_rc=$?
grep -E "FIGURE|ERROR|FAILED|skipped|test cases|assertions|CHECK|REQUIRE|differ" "$logs/gpu_tests.log" | grep -v "^\s*$" | head -40
echo "tests: rc=$tests_rc $(( $(date +%s) - t1 )) s"

t2=$(date +%s)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout "${SAN_TIMEOUT:-90}" "$cs" --tool memcheck --error-exitcode 9 "$bin/mlajit_gpu_tests" -tc="*for compute-sanitizer*" >"$logs/memcheck.log" 2>&1
mem_rc=$?
timeout "${SAN_TIMEOUT:-90}" "$cs" --tool racecheck --racecheck-report all --error-exitcode 9 --kernel-name kns=mlajit_gemm_sm90 \
  "$bin/mlajit_gpu_tests" -tc="*for compute-sanitizer*" >"$logs/racecheck.log" 2>&1
race_rc=$?
for f in memcheck racecheck; do echo "$f: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|not supported" "$logs/$f.log" | tr '\n' ' ')"; done
echo "sanitizers: memcheck rc=$mem_rc racecheck rc=$race_rc $(( $(date +%s) - t2 )) s"

t3=$(date +%s)
bench() {  # $1: label, rest: env
  local label=$1; shift
  env "$@" timeout "${BENCH_TIMEOUT:-60}" "$bin/mlajit-bench" --kv fp8 --heads 128,16 --batch 1 --s-q 8192 --s-k 8192 --topk 2048 \
    --reps 20 --csv "$logs/bench_$label.csv" 2>"$logs/bench_$label.log"
  echo "bench $label rc=$?"
}
bench fused MLAJIT_GEMM=fused
bench unfused MLAJIT_GEMM=unfused
echo "bench: $(( $(date +%s) - t3 )) s"
for label in fused unfused; do
  echo "== $label"
  grep -E "^(call_bf16|call_contig|upconvert) " "$logs/bench_$label.log" | grep -v sparse | cut -c1-110
  grep -E "^engine .*sparse" "$logs/bench_$label.log" | sed 's/the one call.*//' | cut -c1-170
done
tar -C "$out" -czf "$out/paged_logs.tgz" logs && rm -rf "$logs"
echo "SUMMARY: tests rc=$tests_rc ($(grep -E '^\[doctest\] test cases' "$out/paged_logs.tgz" >/dev/null; tar -xzOf "$out/paged_logs.tgz" logs/gpu_tests.log | grep -E '^\[doctest\] (test cases|assertions)' | tr -s ' ' | tr '\n' ' ')), memcheck rc=$mem_rc, racecheck rc=$race_rc, total $(( $(date +%s) - t0 )) s"
