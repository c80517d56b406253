#!/usr/bin/env bash
# Issue 12 in one device call, steps in priority order under one deadline (the call must end inside its
# budget): the library build starts in the background at once (16 cores), the harness (nvcc) builds beside
# it; then the harness checks (float64, small cases incl. NaN in the next request's K/V), the library's MHA
# GPU tests (both tiers), the harness timing (shipped h90pp/h90np, the v4 and t1 experiments) with cuDNN
# SDPA in the same call, mlajit-bench (mha, masked at h 128/16, S 8192), and sanitizers on h90pp last.
# (Run 2026-12-03 with v4 as the shipped candidate: the library's MHA tests needed more than the 40 s box,
# their cold NVRTC compiles over both tiers included; give them 120 s.)
# Run from the repository root: OUT=... bash tools/dev/mha/run_issue12.sh [TOTAL_SECONDS]   (default 300)
# MJ_NCU=1 adds ncu (stall reasons, instruction stats) of MJ_NCU_VARIANTS (default h90pp,h90t4) after the timing.
# Device time: the 2026-12-03 call ran 133 s of command and cost 221 s of budget (cold start and the 30 s
# idle hold included): call give_back right after the last call of a session.
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=tools/dev/mha
total="${1:-300}"
OUT="${OUT:-/tmp/mha12}"; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( total - ($(date +%s) - start) )); }
step() {  # name limit_s command...: runs only while time is left; records rc and seconds in table.txt
    local name=$1 lim=$2; shift 2
    local l; l=$(left)
    (( lim > l - 3 )) && lim=$(( l - 3 ))
    if (( lim < 8 )); then echo "$name SKIPPED (no time left)" >>"$OUT/table.txt"; return; fi
    local t0; t0=$(date +%s)
    timeout "$lim" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc=$? $(( $(date +%s) - t0 ))s" >>"$OUT/table.txt"
}
: >"$OUT/table.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >"$OUT/gpu.txt"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" &&
  cmake --build build-gpu -j 10 --target mlajit_gpu_tests mlajit-bench ) >"$OUT/lib_build.log" 2>&1 &
lib_pid=$!
step hbuild 90 "$here/build.sh" /tmp/mhab
grep -E "^h90" "$OUT/hbuild.log"
VARS=h90pp,h90v4,h90t3,h90t4
step hcheck 50 /tmp/mhab/harness --no-perf --only "$VARS"
wait "$lib_pid"; echo "lib_build rc=$? at $(( $(date +%s) - start ))s" >>"$OUT/table.txt"
export MLAJIT_CACHE_DIR=/tmp/mha12-cache
step gpu_tests 120 build-gpu/mlajit_gpu_tests '--test-case=*MHA*'
step hperf 40 /tmp/mhab/harness --no-check --only "$VARS"
step cudnn 30 python3 "$here/cudnn_ref.py" 128:8192 16:8192 16:16384
if [ "${MJ_NCU:-0}" = 1 ]; then  # stall reasons, dense vs masked, h=128 S=8192 (one launch each per variant)
  step ncu 90 ncu --clock-control none -k regex:kern_h90 --launch-count 4 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats /tmp/mhab/harness --ncu --only "${MJ_NCU_VARIANTS:-h90pp,h90t4}"
fi
step bench 30 build-gpu/mlajit-bench --ops mha,masked --heads 128,16 --s-q 8192 --reps 10 --csv "$OUT/bench.csv"
for tool in memcheck racecheck synccheck; do
  step "san_$tool" 25 compute-sanitizer --tool $tool --print-limit 5 /tmp/mhab/harness --no-perf --quick --only "${MJ_SAN_VARIANTS:-h90pp,h90t4}"
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >>"$OUT/gpu.txt"
cat "$OUT/table.txt" "$OUT/gpu.txt"
grep -E "FAIL|ALL CHECKS|FAILED" "$OUT/hcheck.log" | head -20
grep -E "ERROR|test cases|assertions" "$OUT/gpu_tests.log" | head -12
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/san_*.log
sed -n '/^config/,/^$/p' "$OUT/hperf.log"
grep -E "FAIL" "$OUT/hperf.log" | head -5
cat "$OUT/cudnn.log"
cat "$OUT/bench.csv" 2>/dev/null
