#!/usr/bin/env bash
# The whole benchmark in one call on the GPU machine: build libmlajit.so and mlajit-bench (Release, into
# build-gpu), the Python binding's tests, the Python driver (our paths vs cuDNN, FlexAttention, FlashMLA's
# published figure, the matmul and copy ceilings, heatmaps, planner vs oracle, mixed batch), then the C++
# bench. Everything lands in $OUT (or docs/bench/<date>_<gpu>/ when $OUT is unset); a short table last.
#
#   bash tools/bench/run_on_gpu.sh                 # full run (under 4 minutes on an H200, build included)
#   BENCH_BUDGET_S=120 BENCH_ARGS="--seqs 1024,4096 --heads 128,16" bash tools/bench/run_on_gpu.sh  # quick
#   SKIP_TESTS=1 / SKIP_CPP=1 / SKIP_PY=1          # leave a part out
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
build="${MLAJIT_BUILD_DIR:-build-gpu}"
if [ -z "${OUT:-}" ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($NF)}')
  OUT="docs/bench/$(date -u +%Y-%m-%d)_${gpu:-gpu}"
fi
mkdir -p "$OUT"
log="$OUT/run.log"
t0=$(date +%s)
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
{
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" &&
  cmake --build "$build" -j "$(nproc)" --target mlajit mlajit-bench
} >"$OUT/build.txt" 2>&1 || { grep -E "error|FAILED" -A6 "$OUT/build.txt" | head -60; echo "BENCH SUMMARY: build failed"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$log"
rm -f "$OUT/build.txt"
export MLAJIT_LIBRARY="$PWD/$build/libmlajit.so"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-bench-cache}"
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$log"

tests_rc=skipped
if [ -z "${SKIP_TESTS:-}" ]; then
  python3 -m unittest discover -v tools/python/tests >>"$log" 2>&1
  tests_rc=$?
  grep -E "^(Ran|OK|FAILED)|ERROR:|FAIL:|skipped" "$log" | tail -15
fi

py_rc=skipped
if [ -z "${SKIP_PY:-}" ]; then
  python3 tools/bench/run_bench.py --out "$OUT" --budget-s "${BENCH_BUDGET_S:-330}" ${BENCH_ARGS:-} >/dev/null 2>>"$log"
  py_rc=$?
fi

cpp_rc=skipped
if [ -z "${SKIP_CPP:-}" ]; then
  "$build/mlajit-bench" ${CPP_BENCH_ARGS:---ops mha,masked,mqa,mask --heads 128,16 --s-q 1024,4096,16384} \
    --csv "$OUT/bench_cpp.csv" 2>>"$log"
  cpp_rc=$?
  echo "--- mlajit-bench (C++, no Python in the loop)"
  cut -d, -f3-10,12 "$OUT/bench_cpp.csv" | column -t -s, 2>/dev/null || cat "$OUT/bench_cpp.csv"
fi
echo "--- summary ($OUT/summary.md)"
# The long per-cell table stays in summary.md; print the ceilings, the best per op, the planner and the mixed batch.
[ -f "$OUT/summary.md" ] && awk '/^## Ours against/{skip=1} /^## Best/{skip=0} /^## Masked MHA over/{skip=1} /^## mla_prefill/{skip=0} !skip' \
  "$OUT/summary.md" | grep -v '^$' | head -80
echo "BENCH SUMMARY: tests rc=$tests_rc, run_bench rc=$py_rc, mlajit-bench rc=$cpp_rc, $(( $(date +%s) - t0 )) s; files in $OUT"
