#!/bin/bash
# Session 34: the producers' gathers through 32-bit shared addresses. run_t32 (H100) found the library's 16-head kernel 8 %
# slower on NVRTC's cubins than on nvcc's of the same sources; their SASS differs in the producer's gather loop (134 against
# 109 instructions for 4 rows: NVRTC derives every cp.async destination from a 64-bit shared pointer). This tree computes
# those destinations as 32-bit shared addresses (gather_rows, load_q, the 64-head and FP8 producers); NVRTC's gather loop PTX
# is now nvcc's length (133 instructions). Here the library on two caches: N, this tree as NVRTC builds it, and B, nvcc's
# cubins of the old sources (d2fb902; MLAJIT_KERNELS_DIR points the library at those sources so B's keys match), both
# MLAJIT_OFFLINE=1. 16 heads N B N B, 128 heads N B, the one-block form from N, ncu (time, instructions) of the 16-head
# kernel from each, SASS of N's sparse kernels. The caches come from the CPU machine (tools/dev/mqa/build_t33: N by
# mlajit-warmup --tp 1,8 --arch sm_90a from this tree, B = build_t32/B, kernels_old = git archive d2fb902 kernels_src).
# carry ["tools/dev/mqa/build_t33", ".devdeps"]; about 3 minutes.
source "$(dirname "$0")/run_common.sh"
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench; echo "library build rc $? $(el)"
D=tools/dev/mqa/build_t33
for c in N B; do rm -rf /tmp/cache$c; cp -r $D/$c /tmp/cache$c; done
envof() { if [ $1 = B ]; then echo "MLAJIT_KERNELS_DIR=$PWD/$D/kernels_old"; else echo "MLAJIT_LOG_LEVEL=warn"; fi; }
for c in N; do
  for f in $(grep -l '"sparse_mqa_fwd_sm90' /tmp/cache$c/v1/sm_90a/*/*/meta.json); do
    d=$(dirname $f); cuobjdump -sass $d/kernel.cubin > $OUT/logs/sass_${c}_$(basename $(dirname $d))_$(basename $d | cut -c1-8).txt 2>&1
  done
done
B=(build-gpu/mlajit-bench --s-q 8192 --topk 2048 --ops mqa)
run() {  # run LOG CACHE HEADS [env...]
  local log=$1 c=$2 h=$3; shift 3
  env $(envof $c) "$@" MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 100 "${B[@]}" --heads $h --reps 20 > $OUT/logs/$log.log 2>&1
  echo "$log rc $? $(el): $(grep -E "^(mqa|mha) |ERROR|error" $OUT/logs/$log.log | head -2 | cut -c1-110)"
}
for rep in 1 2; do for c in N B; do run lib16_${rep}_$c $c 16; done; done
run lib16_onebl_N N 16 MLAJIT_MQA_PERSIST=0
for c in N B; do run lib128_$c $c 128; done
for c in N B; do
  env $(envof $c) MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 60 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second -k regex:sparse_mqa_fwd_sm90t -c 5 \
    "${B[@]}" --heads 16 --reps 4 > $OUT/logs/ncu_$c.log 2>&1
  echo "ncu $c rc $? $(el): $(grep gpu__time_duration $OUT/logs/ncu_$c.log | awk '{print $NF}' | sort -n | tr '\n' ' '), \
inst $(grep smsp__inst_executed $OUT/logs/ncu_$c.log | head -1 | awk '{print $NF}'), clock $(grep sm__cycles_elapsed $OUT/logs/ncu_$c.log | head -1 | awk '{print $(NF-1), $NF}')"
done
