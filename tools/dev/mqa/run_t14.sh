#!/bin/bash
# Session 22's second device call: Nsight Compute on the keys-as-M kernel at 16 heads, 8k paged (configs_t14.h): the whole
# kernel, its gather alone, its math alone; one profiled launch each after the warm-up launches.
# Prebuilt: CFG_FILE=configs_t14.h BUILD=build_t14 bash build.sh; carry ["tools/dev/mqa/build_t14"].
#   run: OUT=$OUT bash tools/dev/mqa/run_t14.sh      (about 3 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/logs
H=tools/dev/mqa/build_t14/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for c in h16sm90t h16sm90tg4 h16sm90tm3; do bash tools/dev/mqa/ncu_profile.sh $H $c 16 $OUT/logs/ncu_$c.txt; done
tar -czf $OUT/ncu_logs.tgz -C $OUT logs && rm -rf $OUT/logs
