#!/bin/bash
# Task S3's device call: a prebuilt harness (CFG_FILE=configs_s3.h build.sh here, carried), every check case,
# ncu (--clock-control none) on one Hopper launch of each kernel in NCU_CONFIGS at s_q = s_kv = NCU_S, heads
# NCU_H, then the 8k bench (bf16 contiguous; then bf16 vs FP8 pages). Logs under $OUT, a short table last.
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
[ -x build/harness ] || { bash build.sh > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
cfgarg=(); [ -n "${CONFIGS:-}" ] && cfgarg=(--configs $CONFIGS)
timeout ${CHECK_T:-60} ./build/harness --no-bench "${cfgarg[@]}" --log $OUT/check.log > /dev/null 2>&1; echo "check rc $?"
grep -E "FAIL|checks" $OUT/check.log | head -20
for c in ${NCU_CONFIGS:-}; do
  extra=""; case $c in *f8*) extra=--paged;; esac
  timeout ${NCU_T:-60} ncu --clock-control none --kernel-name regex:"mqa_kernel_${c}\$" --launch-skip 1 --launch-count 1 \
    --set full -o $OUT/ncu_$c ./build/harness --configs $c --bench-configs $c --no-check --bench-s ${NCU_S:-2048} \
    --bench-heads ${NCU_H:-128} --reps 1 $extra > $OUT/ncu_$c.log 2>&1
  echo "ncu $c rc $?"
  ncu --import $OUT/ncu_$c.ncu-rep --page details > $OUT/ncu_$c.txt 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps" $OUT/ncu_$c.txt | head -14
done
if [ -n "${SAN_CONFIGS:-}" ] && command -v compute-sanitizer > /dev/null; then
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    timeout ${SAN_T:-40} compute-sanitizer --tool $tool --print-limit 5 ./build/harness --configs $SAN_CONFIGS --sanitize > $OUT/san_$tool.log 2>&1
    echo "sanitizer $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ')"
  done
fi
if [ -n "${BENCH_CONFIGS:-}" ]; then
  timeout ${BENCH_T:-120} ./build/harness --no-check --bench-configs $BENCH_CONFIGS --bench-s ${BENCH_S:-8192} \
    --bench-heads ${BENCH_HEADS:-128,64} --reps ${REPS:-5} --log $OUT/bench.log > /dev/null 2>&1; echo "bench rc $?"
fi
if [ -n "${FP8_CONFIGS:-}" ]; then
  timeout ${FP8_T:-120} ./build/harness --no-check --paged --bench-configs $FP8_CONFIGS --bench-s ${BENCH_S:-8192} \
    --bench-heads ${FP8_HEADS:-128,32} --reps ${REPS:-5} --log $OUT/bench_fp8.log > /dev/null 2>&1; echo "bench fp8 rc $?"
fi
if [ -n "${SCATTER_CONFIGS:-}" ]; then
  timeout ${BENCH_T:-120} ./build/harness --no-check --scatter --bench-configs $SCATTER_CONFIGS --bench-s ${BENCH_S:-8192} \
    --bench-heads ${SCATTER_HEADS:-128} --reps ${REPS:-5} --log $OUT/bench_scatter.log > /dev/null 2>&1; echo "bench scatter rc $?"
fi
for f in $OUT/bench.log $OUT/bench_scatter.log $OUT/bench_fp8.log; do [ -f $f ] && { grep -E "FAIL" $f | head; sed -n '/^config/,$p' $f; }; done
