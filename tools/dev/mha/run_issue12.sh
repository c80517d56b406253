#!/usr/bin/env bash
# Issue 12 in one device call, steps in priority order under one deadline (the call must end inside its
# budget): the library build starts in the background at once, the harness (nvcc, Hopper variants only)
# builds beside it; then the harness checks (float64, small cases A-F incl. NaN in the next request's
# K/V), the harness timing (the kernel h90pp, its masked breakdown knobs h90x1, x2, x4, x8, and h90old +
# the old mask build when OLD_KSRC is set) with cuDNN SDPA in the same call, ncu of one dense and one
# masked launch (MJ_NCU=1), mlajit-bench through the library (dense and masked + mask build, h 128 / 16,
# S 8192), the library's MHA and mask GPU tests on both tiers, and sanitizers on h90pp last.
# Run from the repository root: OUT=... [OLD_KSRC=dir] bash tools/dev/mha/run_issue12.sh [TOTAL_SECONDS]
# Env: MJ_LIB=0 skips the library (build, mlajit-bench, GPU tests: a harness-only call); MJ_CUDNN=0 skips
# cuDNN; MJ_NCU=1 runs ncu; MJ_TESTS=0 skips the library's GPU tests; MJ_SAN ("memcheck racecheck synccheck",
# the default) picks the sanitizers; MJ_VARS the harness variants.
# Device time: a cold start costs 60-90 s on top of the command: call give_back after the last call.
# 2026-12-03 (helper mha, MJ_TESTS=0): 62, 58 and 54 s of command on the H200 (the harness build takes
# seconds there; the library build ~45 s runs beside the harness steps).
set -uo pipefail
cd "$(dirname "$0")/../../.."
here=tools/dev/mha
total="${1:-240}"
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
[ "${MJ_LIB:-1}" = 1 ] && ( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" &&
  cmake --build build-gpu -j 8 --target mlajit-bench $([ "${MJ_TESTS:-1}" = 1 ] && echo mlajit_gpu_tests) ) >"$OUT/lib_build.log" 2>&1 &
lib_pid=$!
MJ_NO_PORTABLE=1 step hbuild 120 "$here/build.sh" /tmp/mhab
grep -E "^h90|built|failed" "$OUT/hbuild.log"
VARS="${MJ_VARS:-h90pp,h90x1,h90x2,h90x4,h90x8}"
[ -n "${OLD_KSRC:-}" ] && VARS="$VARS,h90old"
CHECK_VARS=$(echo "$VARS" | tr ',' '\n' | grep -v -E '^h90x[12]$' | paste -sd,)  # x1, x2: wrong by design
step hcheck 50 /tmp/mhab/harness --no-perf --only "$CHECK_VARS"
step hperf 60 /tmp/mhab/harness --no-check --only "$VARS" --shapes 128:8192,16:8192,16:16384,128:8192
[ "${MJ_CUDNN:-1}" = 1 ] && step cudnn 40 python3 "$here/cudnn_ref.py" 128:8192 16:8192 16:16384
if [ "${MJ_LIB:-1}" = 1 ]; then
wait "$lib_pid"; echo "lib_build rc=$? at $(( $(date +%s) - start ))s" >>"$OUT/table.txt"
export MLAJIT_CACHE_DIR=/tmp/mha12-cache
step bench 45 build-gpu/mlajit-bench --ops mha,masked --heads 128,16 --s-q 8192 --reps 10 --csv "$OUT/bench.csv"
fi
if [ "${MJ_NCU:-0}" = 1 ]; then  # stall reasons and issue slots, h=128 S=8192: h90pp dense + masked
  step ncu 60 ncu --clock-control none -k regex:kern_h90 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --print-details all /tmp/mhab/harness --ncu --only h90pp
fi
if [ "${MJ_TESTS:-1}" = 1 ] && [ "${MJ_LIB:-1}" = 1 ]; then
  # every test case that runs MHA or the mask build, on the Hopper tier and on the portable tier
  tc='--test-case=*MHA*,*mask*'
  step gpu_tests 60 build-gpu/mlajit_gpu_tests "$tc"
  MLAJIT_TIER=portable step gpu_tests_portable 60 build-gpu/mlajit_gpu_tests "$tc"
fi
for tool in ${MJ_SAN:-memcheck racecheck synccheck}; do
  step "san_$tool" 25 compute-sanitizer --tool $tool --print-limit 5 /tmp/mhab/harness --no-perf --quick --only h90pp
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >>"$OUT/gpu.txt"
cat "$OUT/table.txt" "$OUT/gpu.txt"
grep -E "FAIL|ALL CHECKS|FAILED" "$OUT/hcheck.log" | head -20
grep -E "ERROR|test cases|assertions" "$OUT/gpu_tests.log" "$OUT/gpu_tests_portable.log" 2>/dev/null | head -16
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/san_*.log 2>/dev/null
grep -E "kern_h90|Duration|SM Frequency|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Stall" "$OUT/ncu.log" 2>/dev/null | head -40
grep -E "FAIL" "$OUT/hperf.log" | head -5
sed -n '/^config/,/^$/p' "$OUT/hperf.log"
cat "$OUT/cudnn.log"
cat "$OUT/bench.csv" 2>/dev/null
# The device tool brings back a limited number of files: everything but the table and the CSV in one archive.
( cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log )
