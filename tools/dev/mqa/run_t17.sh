#!/bin/bash
# A block's fixed cost (configs_t17.h: DEV_SKIP 5 / 6) beside the whole kernel and its parts at 16 heads (keys-as-M
# kernel) and 128 heads (64-head kernel), 8k paged; then the L2 gather ceiling (tools/dev/l2gather) for bf16 (1152-byte)
# and FP8 (656-byte) rows. Written in session 24.
# Prebuilt: CFG_FILE=configs_t17.h BUILD=build_t17 bash build.sh; nvcc -O3 -arch=sm_90a -std=c++17
#   -o tools/dev/l2gather/build/l2gather tools/dev/l2gather/l2gather.cu;
# carry ["tools/dev/mqa/build_t17", "tools/dev/l2gather/build"].   run: OUT=$OUT bash tools/dev/mqa/run_t17.sh (~2 min)
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
H=tools/dev/mqa/build_t17/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 60 $H --no-bench --configs h16sm90t,h64sm90 --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log
timeout 90 $H --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90tg4,h16sm90tmo,h16sm90tz5,h16sm90tz6 --reps 5 --log $OUT/logs/bench16.log > /dev/null 2>&1
echo "bench 16 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/bench16.log
timeout 120 $H --no-check --paged --bench-s 8192 --bench-heads 128 --bench-configs h64sm90,h64sm90go,h64sm90mo,h64sm90z5,h64sm90z6 --reps 5 --log $OUT/logs/bench128.log > /dev/null 2>&1
echo "bench 128 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/bench128.log
for rb in 1152 656; do
  timeout 120 tools/dev/l2gather/build/l2gather $rb 5 > $OUT/logs/l2gather_$rb.log 2>&1; echo "l2gather $rb rc $? $(el)"; cat $OUT/logs/l2gather_$rb.log
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
