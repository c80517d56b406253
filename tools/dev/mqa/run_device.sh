#!/bin/bash
# One device call: build the harness (unless a prebuilt build/harness came along), check every case on the
# chosen configs, time s_q = s_kv = 8192 with -1 padding at the row end and scattered, run the four
# compute-sanitizer tools on the sanitizer case. Logs under $OUT.
#   CONFIGS=... BENCH_CONFIGS=... SAN_CONFIGS=... tools/dev/mqa/run_device.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
CONFIGS=${CONFIGS:-h64sm90,h64n64s2,h32n64s2,h16n32s2}
SAN_CONFIGS=${SAN_CONFIGS:-h64sm90,h16n32s2}
[ -x build/harness ] && ./build/harness --no-check --no-bench > /dev/null 2>&1 || rm -f build/harness
[ -x build/harness ] || bash build.sh > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 120 ./build/harness --configs $CONFIGS --no-bench --log $OUT/check.log > /dev/null 2>&1; echo "check rc $?"
grep -E "FAIL|checks" $OUT/check.log | head -20
for mode in ${BENCH_MODES:-end scatter}; do
  extra=""; [ $mode = scatter ] && extra=--scatter
  timeout 150 ./build/harness --configs $CONFIGS --no-check --bench-s ${BENCH_S:-8192} --bench-heads ${BENCH_HEADS:-128,64,32,16} $extra --reps 7 --log $OUT/bench_$mode.log > /dev/null 2>&1
  echo "bench $mode rc $?"
done
if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck initcheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool --print-limit 5 ./build/harness --configs $SAN_CONFIGS --sanitize > $OUT/san_$tool.log 2>&1
    echo "sanitizer $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ')"
  done
fi
for mode in ${BENCH_MODES:-end scatter}; do echo "== bench ($mode padding)"; sed -n '/^config/,$p' $OUT/bench_$mode.log; done
