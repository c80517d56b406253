#!/bin/bash
# Session 21's fifth device call: checks of both keys-as-M bodies after the epilogue moved into sm90_t_common.cuh, the
# 8k paged bench at 16 heads, racecheck of the bf16 body. Prebuilt: CFG_FILE=configs_t12.h BUILD=build_t12 bash build.sh;
# carry ["tools/dev/mqa/build_t12"].   run: OUT=$OUT bash tools/dev/mqa/run_t12.sh      (about a minute)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
H=tools/dev/mqa/build_t12/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 90 $H --no-bench --log $OUT/check.log > $OUT/check.out 2>&1; echo "check rc $?"
grep -E "checks" $OUT/check.log; grep -E "FAIL" $OUT/check.log | cut -c1-160 | sort | uniq -c | head
timeout 90 $H --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90t8 --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
timeout 60 compute-sanitizer --tool memcheck --print-limit 3 $H --configs h16sm90t --sanitize > $OUT/san_memcheck.log 2>&1
echo "memcheck rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/san_memcheck.log | tr '\n' ' ')"
