#!/bin/bash
# Task S4's device call: the prebuilt harness (CFG_FILE=configs_s4.h build.sh on the CPU machine, carried), every
# check case on CHECK_CONFIGS (float64 reference, bit-identical reruns), the 8k paged bench (bf16 and FP8 pages
# of the same rows, block size 64) on every config at BENCH_HEADS, the contiguous bf16 bench and the scattered
# padding at 128 / 64 heads, compute-sanitizer (SAN_TOOLS) on SAN_CONFIGS. Logs under $OUT, a short table last.
# Call 1 (2026-12-03, configs_s4.h under its earlier tag names):
#   BENCH_HEADS=128,64,32,16 BENCH_CONFIGS=<every tag> CONTIG_CONFIGS=h64sm90,h64sm90lh CONTIG_HEADS=128 SCATTER=0
#   SAN_CONFIGS=h64sm90f8,h64sm90lh SAN_TOOLS="synccheck racecheck" SAN_T=35 CHECK_T=80 BENCH_T=90 bash run_s4.sh
# Call 2 (not run: no device time left; CFG_FILE=configs_s4b.h build.sh first):
#   BENCH_HEADS=128,64,32,16 BENCH_CONFIGS=h64sm90,h64sm90sp,h64sm90f8,h64sm90f8st,h64sm90f8stsk,h64sm90f8stnc,h16n32s2,h16n32s2f8
#   CONTIG_CONFIGS=h64sm90,h64sm90sp CONTIG_HEADS=128 SAN_CONFIGS=h64sm90f8st,h64sm90sp SAN_TOOLS="synccheck racecheck"
#   SAN_T=35 CHECK_T=80 BENCH_T=90 bash run_s4.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
t0=$(date +%s)
timeout ${CHECK_T:-90} ./build/harness --no-bench --configs ${CHECK_CONFIGS:-h64sm90,h64sm90sp,h64sm90f8,h64sm90f8st} --log $OUT/check.log > /dev/null 2>&1
echo "check rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|checks" $OUT/check.log | head -20
if [ -n "${BENCH_HEADS:-}" ]; then
  timeout ${BENCH_T:-120} ./build/harness --no-check --paged --bench-s 8192 --bench-heads $BENCH_HEADS --bench-configs $BENCH_CONFIGS \
    --reps ${REPS:-5} --log $OUT/bench.log > /dev/null 2>&1; echo "bench rc $? ($(( $(date +%s) - t0 )) s)"
fi
if [ -n "${CONTIG_CONFIGS:-}" ]; then
  timeout ${BENCH_T:-120} ./build/harness --no-check --bench-s 8192 --bench-heads ${CONTIG_HEADS:-128,64} --bench-configs $CONTIG_CONFIGS \
    --reps ${REPS:-5} --log $OUT/bench_contig.log > /dev/null 2>&1; echo "bench contig rc $? ($(( $(date +%s) - t0 )) s)"
  [ "${SCATTER:-1}" = 1 ] && timeout ${BENCH_T:-120} ./build/harness --no-check --scatter --bench-s 8192 --bench-heads 128 --bench-configs $CONTIG_CONFIGS \
    --reps ${REPS:-5} --log $OUT/bench_scatter.log > /dev/null 2>&1; echo "bench scatter rc $? ($(( $(date +%s) - t0 )) s)"
fi
if [ -n "${SAN_CONFIGS:-}" ] && command -v compute-sanitizer > /dev/null; then
  for tool in ${SAN_TOOLS:-synccheck racecheck}; do
    timeout ${SAN_T:-40} compute-sanitizer --tool $tool --print-limit 5 ./build/harness --configs $SAN_CONFIGS --sanitize > $OUT/san_$tool.log 2>&1
    echo "sanitizer $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  done
fi
for f in $OUT/bench.log $OUT/bench_contig.log $OUT/bench_scatter.log; do [ -f $f ] && { grep -E "FAIL|copy ceiling" $f | head -5; sed -n '/^config/,$p' $f; }; done
