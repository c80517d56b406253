#!/bin/bash
# Session 33: is NVRTC's code the library's gap? run_t31 (H200) found the library's 16-head kernel 3.11 ms under ncu against
# 2.835 for the same source built by nvcc in the harness (both without fast math, same grid); NVRTC's PTX of that source
# addresses shared memory through 64-bit registers where nvcc's uses 32-bit ones (every Hopper kernel: 2-4x the add.s64).
# Here the library runs both: cache A as NVRTC built it (mlajit-warmup --tp 1,8 --arch sm_90a on the CPU machine), cache B the
# same entries with nvcc's cubins of the same specialized sources (tools/dev/nvcc_cubins.py), MLAJIT_OFFLINE=1 so nothing
# compiles. mlajit-bench (mqa with the workspace and mha, 128 and 16 heads, 8k) alternated A / B three times, then the
# 16- and 128-head sparse kernels under ncu, and both sparse cubins' SASS to compare.
# carry ["tools/dev/mqa/build_t32", ".devdeps"]; about 4 minutes.
source "$(dirname "$0")/run_common.sh"
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=16 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench; echo "library build rc $? $(el)"
for c in A B; do rm -rf /tmp/cache$c; cp -r tools/dev/mqa/build_t32/$c /tmp/cache$c; done
B=(build-gpu/mlajit-bench --ops mqa,mha --heads 128,16 --s-q 8192 --topk 2048 --reps 20)
for rep in 1 2 3; do
  for c in A B; do
    MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 100 "${B[@]}" > $OUT/logs/lib_${rep}_$c.log 2>&1
    echo "rep $rep cache $c rc $? $(el)"; grep -E "^(mqa|mha) |ERROR" $OUT/logs/lib_${rep}_$c.log | cut -c1-110
  done
done
for c in A B; do
  for h in 16 128; do
    MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 90 ncu --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second -k regex:sparse_mqa_fwd \
      build-gpu/mlajit-bench --ops mqa --heads $h --s-q 8192 --topk 2048 --reps 10 > $OUT/logs/ncu_${c}_$h.log 2>&1
    echo "ncu cache $c heads $h rc $? $(el): $(grep gpu__time_duration $OUT/logs/ncu_${c}_$h.log | awk '{print $NF}' | sort -n | sed -n 5p) \
$(grep gpu__time_duration $OUT/logs/ncu_${c}_$h.log | head -1 | awk '{print $(NF-1)}'), inst $(grep smsp__inst_executed $OUT/logs/ncu_${c}_$h.log | head -1 | awk '{print $NF}'), \
clock $(grep sm__cycles_elapsed $OUT/logs/ncu_${c}_$h.log | head -1 | awk '{print $(NF-1), $NF}')"
  done
done
for c in A B; do
  for f in $(grep -l '"sparse_mqa_fwd_sm90' /tmp/cache$c/v1/sm_90a/*/*/meta.json); do
    d=$(dirname $f); cuobjdump -sass $d/kernel.cubin > $OUT/logs/sass_${c}_$(basename $(dirname $d))_$(basename $d | cut -c1-8).txt 2>&1
  done
done
ls $OUT/logs | grep -c sass_
