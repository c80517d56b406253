#!/bin/bash
# Session 21's third device call: the FP8 rows' gather alone by 16-byte cp.async (the kernel's producer) against one
# cp.async.bulk a row; 8k paged, 16 heads. Prebuilt: CFG_FILE=configs_t10.h BUILD=build_t10 bash build.sh; carry
# ["tools/dev/mqa/build_t10"].   run: OUT=$OUT bash tools/dev/mqa/run_t10.sh      (under a minute)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
H=tools/dev/mqa/build_t10/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t8bg4,h16sm90t8bs2g4,h16sm90t8bs5g4,h16sm90t8g4,h16sm90tg4,h16sm90t8 --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
timeout 60 compute-sanitizer --tool memcheck --print-limit 3 $H --no-check --paged --bench-s 1024 --bench-heads 16 --bench-configs h16sm90t8bg4 --reps 1 > $OUT/san_memcheck_bulk.log 2>&1
echo "memcheck bulk rc $? : $(grep -E 'ERROR SUMMARY' $OUT/san_memcheck_bulk.log)"
