#!/usr/bin/env bash
# The whole GPU suite in one call on a GPU machine: build (Release), the GPU tests against the float64
# reference, and mlajit-check at a few shapes. Logs go to $OUT (or /tmp/mlajit-gpu); the last line is a
# summary. Warnings are not errors here (the GPU machine has another g++; CI enforces them). Headers a bare GPU machine lacks can travel in .devdeps/include (see tools/device/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-gpu}"
mkdir -p "$out"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; echo "SUMMARY: configure failed"; exit 1
fi
if ! cmake --build "$build" -j "$(nproc)" --target mlajit_gpu_tests mlajit-check mlajit-warmup >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A6 "$out/build.log" | head -80; echo "SUMMARY: build failed"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-gpu-cache}"
"$build/mlajit_gpu_tests" ${MLAJIT_GPU_TEST_ARGS:-} >"$out/gpu_tests.log" 2>&1
tests_rc=$?
grep -E "ERROR|FAILED|WARNING|skipped|test cases|assertions" "$out/gpu_tests.log" | head -60
check_rc=0
for shape in "--heads 16 --s-q 2048 --s-k 2048" "--heads 128 --s-q 4096 --s-k 4096" "--heads 16 --s-q 4096 --s-k 16384"; do
  "$build/mlajit-check" $shape 2>&1 | tee -a "$out/check.log" || check_rc=1
done
# The planner's calibration on this GPU (MLAJIT_GPU_CALIBRATE=0 skips it): the table goes into the cache
# and a copy to $OUT; --evaluate scores the planner on shapes between the grid's cells.
cal_rc=skipped
if [ "${MLAJIT_GPU_CALIBRATE:-1}" = 1 ]; then
  "$build/mlajit-warmup" calibrate --evaluate ${MLAJIT_CALIBRATE_ARGS:-} >"$out/calibrate.log" 2>&1
  cal_rc=$?
  sed -n '/^crossover/,$p' "$out/calibrate.log" | head -80
  cp "$MLAJIT_CACHE_DIR"/calibration/*.json "$out/" 2>/dev/null || true
fi
echo "SUMMARY: gpu tests rc=$tests_rc, mlajit-check rc=$check_rc, calibrate rc=$cal_rc ($(grep -E '^\[doctest\] test cases' "$out/gpu_tests.log" | tr -s ' '))"
[ $tests_rc = 0 ] && [ $check_rc = 0 ] && { [ "$cal_rc" = 0 ] || [ "$cal_rc" = skipped ]; }
