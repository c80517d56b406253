#!/bin/bash
# Stop 14's one device call for the FP8 cache (helper fp8): configs_f8h.h prebuilt here (build/harness carried;
# built on the GPU machine only when missing), every check case on the FP8 Hopper configs, the paged bench at
# s_q = s_kv = 8192, topk 2048 (bf16 and FP8 pages of the same dequantized rows, block size 64, shuffled),
# synccheck on the new barrier edges if time is left. Summary table last.
#   OUT=... tools/dev/mqa/run_f8h.sh
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
export CFG_FILE=configs_f8h.h
[ -x build/harness ] || { bash build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
timeout ${CHECK_T:-30} ./build/harness --no-bench --configs ${CHECK_CONFIGS:-h64sm90f8sth,h64sm90f8st,h64sm90f8} --log $OUT/check.log > /dev/null 2>&1
echo "check rc $?"
timeout ${BENCH_T:-40} ./build/harness --no-check --paged --bench-s 8192 --bench-heads ${BENCH_HEADS:-128,64,32,16} \
  --bench-configs ${BENCH_CONFIGS:-h64sm90,h64sm90f8,h64sm90f8st,h64sm90f8sth,h64sm90f8sthnc,h16n32s2,h16n32s2f8} --reps ${REPS:-5} --log $OUT/bench.log > /dev/null 2>&1
echo "bench rc $?"
if [ "${SAN:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  timeout ${SAN_T:-20} compute-sanitizer --tool synccheck --print-limit 5 ./build/harness --configs h64sm90f8sth --sanitize > $OUT/san_synccheck.log 2>&1
  echo "synccheck rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/san_synccheck.log | tr '\n' ' ')"
fi
grep -E "FAIL|checks|^seed" $OUT/check.log | head -20
sed -n '/^config/,$p' $OUT/bench.log
