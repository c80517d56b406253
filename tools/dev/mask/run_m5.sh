#!/usr/bin/env bash
# Task M5 (issue 12's mask build and masked rows) in one device call, steps in priority order, each
# time-boxed under one deadline: the library build starts at once in the background; the mask build's
# variants (tools/dev/mask/build_run.sh: checked word for word, timed beside read-only and copy kernels);
# then through the library: mlajit-bench mask / dense / masked at the goal cells, twice interleaved; the
# one call (run_bench.py, section mla, h 16 / 128, S 8k); the benchmark grid (tools/bench/run_on_gpu.sh,
# cut to the time left); ncu of dense and masked MHA at h 16 S 8k last. Logs under $OUT; table.txt last.
# 2026-12-03 (helper mask): 97 s of command on a cold H200 with the grid and ncu steps skipped (two bugs
# since fixed: the grid's $OUT did not exist yet, and `timeout` cannot run a shell function); the one-call
# steps then ran twice, with and without a side-stream fork of the mask build (reverted: no gain).
# Run from the repository root: OUT=... [OLD_KSRC=dir] bash tools/dev/mask/run_m5.sh [TOTAL_SECONDS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
total="${1:-220}"
OUT="${OUT:-/tmp/m5}"; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( total - ($(date +%s) - start) )); }
step() {  # name limit_s command...
    local name=$1 lim=$2; shift 2
    local l; l=$(left)
    (( lim > l - 3 )) && lim=$(( l - 3 ))
    if (( lim < 8 )); then echo "$name SKIPPED (no time left)" >>"$OUT/table.txt"; return; fi
    local t0; t0=$(date +%s)
    timeout "$lim" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? $(( $(date +%s) - t0 ))s" >>"$OUT/table.txt"
}
: >"$OUT/table.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >"$OUT/gpu.txt"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" &&
  cmake --build build-gpu -j 12 --target mlajit mlajit-bench ) >"$OUT/lib_build.log" 2>&1 &
lib_pid=$!
step maskbench 60 bash tools/dev/mask/build_run.sh /tmp/maskb
wait "$lib_pid"; echo "lib_build rc=$? at $(( $(date +%s) - start ))s" >>"$OUT/table.txt"
export MLAJIT_CACHE_DIR=/tmp/m5-cache
export MLAJIT_LIBRARY="$PWD/build-gpu/libmlajit.so"
export PYTHONPATH="$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}"
step bench16 40 build-gpu/mlajit-bench --ops mask,mha,masked,mha,masked --heads 16 --s-q 8192,16384 --reps 15 --csv "$OUT/bench16.csv"
step bench128 30 build-gpu/mlajit-bench --ops mha,masked --heads 128 --s-q 8192 --reps 10 --csv "$OUT/bench128.csv"
step mla 30 python3 tools/bench/run_bench.py --out "$OUT/mla" --sections mla --heads 16,128 --mla-seqs 8192 --seqs 8192 --budget-s 25
l=$(left)
if (( l > 60 )); then
  g=$(( l - 40 ))
  mkdir -p "$OUT/grid"
  OUT="$OUT/grid" SKIP_TESTS=1 BENCH_BUDGET_S=$(( g - 25 )) BENCH_ARGS="--no-flex --sections ceilings,dense,masked --seqs 1024,2048,4096,8192,16384,32768" \
    CPP_BENCH_ARGS="--ops mask --heads 16 --s-q 8192,16384,32768" step grid $g bash tools/bench/run_on_gpu.sh
fi
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)
ncu_one() {  # op
  "$ncu_bin" --clock-control none -k regex:mlajit_mha --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats \
    build-gpu/mlajit-bench --ops "$1" --heads 16 --s-q 8192 --reps 10 --check-rows 0
}
export -f ncu_one; export ncu_bin
step ncu_dense 20 bash -c 'ncu_one mha'
step ncu_masked 20 bash -c 'ncu_one masked'
echo "=== table"; cat "$OUT/table.txt"
echo "=== maskbench"; sed -n '/variant \/ reference/,$p' "$OUT/maskbench.log"; grep -E "FAIL|checked" "$OUT/maskbench.log" | head
echo "=== bench"; cut -d, -f3-10,13 "$OUT"/bench16.csv "$OUT"/bench128.csv 2>/dev/null | cut -c1-150
echo "=== mla"; grep -E "^mla|regret" "$OUT/mla.log" | head -8
echo "=== ncu"; for f in ncu_dense ncu_masked; do grep -E "Duration|SM Busy|Issue Slots Busy|Executed Ipc A|Compute \(SM\) Throughput|Memory Throughput|No Eligible|Warp Cycles Per Issued|Executed Instructions  " "$OUT/$f.log" | head -12 | sed "s/^/$f /"; done
echo "M5 done at $(( $(date +%s) - start ))s"
