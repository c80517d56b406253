#!/bin/bash
# One device call for the FP8-cache kernels: short build (configs_fp8.h), every check case, the paged bench
# (bf16 and FP8 pages of the same rows, block size 64, shuffled), compute-sanitizer on the FP8 case.
#   OUT=... BENCH_HEADS=128,64,32,16 SAN=1 tools/dev/mqa/run_fp8.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
export CFG_FILE=configs_fp8.h
[ -x build/harness ] || { /usr/bin/time -f "build %e s" bash build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }; }
grep -E "registers|build " $OUT/build.log
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout ${CHECK_T:-90} ./build/harness --no-bench --log $OUT/check.log > /dev/null 2>&1; echo "check rc $?"
grep -E "FAIL|checks|^case" $OUT/check.log | head -40
timeout ${BENCH_T:-120} ./build/harness --no-check --paged --bench-s ${BENCH_S:-8192} --bench-heads ${BENCH_HEADS:-128,64,32,16} \
  --bench-configs ${BENCH_CONFIGS:-h64sm90,h64sm90f8,h16n32s2,h16n32s2f8} --reps ${REPS:-7} --log $OUT/bench.log > /dev/null 2>&1
echo "bench rc $?"
if [ "${SAN:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    timeout ${SAN_T:-45} compute-sanitizer --tool $tool --print-limit 5 ./build/harness --configs ${SAN_CONFIGS:-h64sm90f8,h16n32s2f8,h64n32s2f8} --sanitize > $OUT/san_$tool.log 2>&1
    echo "sanitizer $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ')"
  done
fi
grep -E "bench h=|PASS|FAIL" $OUT/bench.log | head -30
sed -n '/^config/,$p' $OUT/bench.log
