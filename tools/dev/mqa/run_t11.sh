#!/bin/bash
# Session 21's fourth device call: the bf16 rows' gather alone by 16-byte cp.async (the kernel's producer) against one
# cp.async.bulk a row; 8k paged, 16 heads. Prebuilt: CFG_FILE=configs_t11.h BUILD=build_t11 bash build.sh; carry
# ["tools/dev/mqa/build_t11"].   run: OUT=$OUT bash tools/dev/mqa/run_t11.sh      (under a minute)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
H=tools/dev/mqa/build_t11/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90tbg4,h16sm90tg4,h16sm90t8bs2g4,h16sm90t8s2g4,h16sm90t --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
timeout 60 compute-sanitizer --tool memcheck --print-limit 3 $H --no-check --paged --bench-s 1024 --bench-heads 16 --bench-configs h16sm90tbg4 --reps 1 > $OUT/san_memcheck_bulk_bf16.log 2>&1
echo "memcheck bulk rc $? : $(grep -E 'ERROR SUMMARY' $OUT/san_memcheck_bulk_bf16.log)"
