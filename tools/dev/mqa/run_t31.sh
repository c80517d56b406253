#!/bin/bash
# Session 32: why ring + merge (perrm) gains 8 % in the harness (8k paged, 16 heads, kernel alone: 2.766 against 3.007 ms,
# H100, run_t30) but 1 % through the library (mlajit-bench 3.304 against 3.334 ms, one sample each). Differences between the
# two: the library's cache is contiguous (the harness ran --paged), its input sets rotate so that each call starts with a
# cold L2, and its time is the pre-pass + kernel between events. Here: the harness on the contiguous cache (two runs), the
# library bench with and without the switches alternated three times (reps 20), and the library's kernels alone under ncu
# (gpu__time_duration, --cache-control none so that the rotation's cold L2 stays). carry ["tools/dev/mqa/build_t30",
# ".devdeps"]; about 3 minutes.
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t30/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench & bp=$!
C=h16sm90tper_pre,h16sm90tperrm_pre
for rep in 1 2; do
  timeout 40 $H --no-check --bench-s 8192 --bench-heads 16 --bench-configs $C --reps 5 --log $OUT/logs/c16_$rep.log > /dev/null 2>&1
  echo "contiguous ($rep) rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/c16_$rep.log
done
wait $bp; echo "library build rc $? $(el)"
F="-DMJ_MQA90T_RING=1 -DMJ_MQA90T_MERGE=1"  # the default since session 32; "off" below: the form before
OFF="-DMJ_MQA90T_RING=0 -DMJ_MQA90T_MERGE=0"
B=(build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048)
for rep in 1 2 3; do
  for f in "$F" "$OFF"; do
    MLAJIT_NVRTC_FLAGS="$f" MLAJIT_CACHE_DIR=/tmp/c1 timeout 40 "${B[@]}" --reps 20 > $OUT/logs/lib_${rep}_${f: -1}.log 2>&1
    echo "library rep $rep flags '$f' rc $? $(el): $(grep -E "^mqa" $OUT/logs/lib_${rep}_${f: -1}.log)"
  done
done
n=0
for f in "$F" "$OFF"; do
  n=$((n + 1))
  MLAJIT_NVRTC_FLAGS="$f" MLAJIT_CACHE_DIR=/tmp/c1 timeout 90 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum -k regex:mqa "${B[@]}" --reps 10 > $OUT/logs/ncu_$n.log 2>&1
  echo "ncu flags '$f' rc $? $(el)"
  awk '/\(.*\)x\(/ { name = $1 } /gpu__time_duration.sum/ { t[name] = t[name] " " $NF " " $(NF - 1) }
       END { for (k in t) print k ":" t[k] }' $OUT/logs/ncu_$n.log | cut -c1-400
done
