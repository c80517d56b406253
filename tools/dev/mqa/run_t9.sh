#!/bin/bash
# Session 21's second device call: where the FP8 keys-as-M kernel's time goes. The producer's gather alone ("g4": math
# warpgroups release each tile as it lands) on FP8 rows (656 bytes, 4 and 2 slots) and bf16 rows (1152), beside the whole
# kernels and their "go" forms (no wgmma), 8k paged, 16 heads.
# Prebuilt harness: CFG_FILE=configs_t9.h BUILD=build_t9 bash build.sh; carry ["tools/dev/mqa/build_t9"].
#   run: OUT=$OUT bash tools/dev/mqa/run_t9.sh      (about 1 minute)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
H=tools/dev/mqa/build_t9/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 200 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t8g4,h16sm90t8s2g4,h16sm90tg4,h16sm90t8,h16sm90t8s2,h16sm90t8go,h16sm90t,h16sm90tgo --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
