#!/usr/bin/env bash
# The one-call prefill's small dense steps (one launch: the portable MHA kernel computes its head's K/V
# up-projection, MLAJIT_SMALL_STEP_KEYS) in one device call: build, the one-call GPU tests that cover them,
# compute-sanitizer memcheck + racecheck on the small-step case, then the same shapes with the setting on
# (default) and off (0): host cost of mlajit_mla_prefill (mlajit-host-cost, queued launches) and the GPU
# time of the whole call (mlajit-bench --kv fp8: call_bf16 = paged bf16 cache, call_contig = contiguous rows,
# planned = dense). Logs in $OUT/small_logs.tgz, a table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-small}"
logs="$out/logs"
mkdir -p "$logs"
t0=$(date +%s)
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
bin="${MLAJIT_BUILD_DIR:-build-gpu}"
cmake -S . -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$logs/configure.log" 2>&1 ||
  { tail -30 "$logs/configure.log"; echo "SUMMARY: configure failed"; exit 1; }
cmake --build "$bin" -j "$(nproc)" --target mlajit_gpu_tests mlajit-bench mlajit-host-cost >"$logs/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A6 "$logs/build.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-small-cache}"
tests='*small dense steps*,*paged bf16 cache*,*every token count*,*DSA result on every path*'
"$bin/mlajit_gpu_tests" -tc="$tests" >"$logs/tests.log" 2>&1; rc_tests=$?
tail -3 "$logs/tests.log"
rc_tests0=0
for keys in 0 128; do
  MLAJIT_SMALL_STEP_KEYS=$keys "$bin/mlajit_gpu_tests" -tc='*small dense steps*' >"$logs/tests_keys$keys.log" 2>&1 || rc_tests0=1
  echo "MLAJIT_SMALL_STEP_KEYS=$keys: $(grep -E '^\[doctest\] (test cases|Status)' "$logs/tests_keys$keys.log" | tr '\n' ' ')"
done
echo "tests: $(( $(date +%s) - t0 )) s"
# Time-boxed: a sanitizer that hangs must not take the call with it.
san=(timeout -s KILL 150 compute-sanitizer --error-exitcode 9)
"${san[@]}" --tool memcheck "$bin/mlajit_gpu_tests" -tc='*small dense steps run*' >"$logs/memcheck.log" 2>&1; rc_mem=$?
"${san[@]}" --tool racecheck --racecheck-report hazard "$bin/mlajit_gpu_tests" -tc='*small dense steps run*' \
  >"$logs/racecheck.log" 2>&1; rc_race=$?
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logs/memcheck.log" "$logs/racecheck.log" | head -4
echo "sanitizers: $(( $(date +%s) - t0 )) s"
for keys in 64 0; do
  for shape in "16 128 1" "16 16 1" "64 128 1" "64 16 8"; do
    set -- $shape
    MLAJIT_SMALL_STEP_KEYS=$keys "$bin/mlajit-host-cost" --tokens $(( $1 * $3 )) --batch "$3" --heads "$2" --no-first-call \
      >"$logs/host_${keys}_$1_$2_$3.log" 2>&1
    c=$(grep -E "^api.mla_prefill " "$logs/host_${keys}_$1_$2_$3.log" | head -1)
    echo "host  keys=$keys s_q=$1 heads=$2 batch=$3: $c"
  done
  for shape in "16 128 1" "64 16 8" "64 128 8"; do
    set -- $shape
    MLAJIT_SMALL_STEP_KEYS=$keys "$bin/mlajit-bench" --kv fp8 --heads "$2" --batch "$3" --s-q "$1" --s-k "$1" --reps 100 \
      >"$logs/bench_${keys}_$1_$2_$3.csv" 2>"$logs/bench_${keys}_$1_$2_$3.log"
    echo "bench keys=$keys s_q=s_k=$1 heads=$2 batch=$3 (rc $?):"
    grep -E "call_bf16|call_contig" "$logs/bench_${keys}_$1_$2_$3.log" | grep -E "planned|dense" | head -4
  done
done
tar -C "$out" -czf "$out/small_logs.tgz" logs && rm -rf "$logs"
echo "SUMMARY: tests rc $rc_tests (keys 0 and 128: $rc_tests0), memcheck rc $rc_mem, racecheck rc $rc_race, $(( $(date +%s) - t0 )) s"
