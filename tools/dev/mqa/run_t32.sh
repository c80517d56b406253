#!/bin/bash
# Session 33: is NVRTC's code the library's gap? run_t31 (H200) found the library's 16-head kernel 3.11 ms under ncu against
# 2.835 for the same source built by nvcc in the harness (both without fast math, same grid); NVRTC's PTX of that source
# addresses shared memory through 64-bit registers where nvcc's uses 32-bit ones (every Hopper kernel: 2-4x the add.s64).
# Here the library runs both: cache A as NVRTC built it, cache B the same entries with nvcc's cubins of the same specialized
# sources (both made by tools/dev/mqa/prep_t32.sh on the CPU machine from the tree the call carries: run it first),
# MLAJIT_OFFLINE=1 so nothing compiles (a key that does not match is an error in the log, not a silent compile). Both sparse
# cubins' SASS, then mlajit-bench (sparse MQA with the workspace, 16 heads, 8k) alternated A / B twice, the 16-head kernel
# under ncu from each, the one-block form through the library once (MLAJIT_MQA_PERSIST=0; the harness times its own), and 128
# heads once each.
# First, while the library builds: the harness's perrmnf (the same source by nvcc, build_t31) on the contiguous cache with the
# padding scattered (as the bench's), then under ncu with the same metrics as the library below.
# carry ["tools/dev/mqa/build_t32", "tools/dev/mqa/build_t31", ".devdeps"]; about 4 minutes. (build_t31's perrmnf is the
# persistent form as of 89346ae, the same kernel the runtime has since session 33.)
source "$(dirname "$0")/run_common.sh"
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench & bp=$!
H=tools/dev/mqa/build_t31/harness
HC=h16sm90tperrmnf_pre,h16sm90tnf_pre
timeout 60 $H --no-check --scatter --compact-threads 512 --bench-s 8192 --bench-heads 16 --bench-configs $HC --reps 5 --log $OUT/logs/h_scatter.log > /dev/null 2>&1
echo "harness (scattered padding) rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/h_scatter.log
timeout 90 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second \
  -k regex:perrmnf $H --no-check --scatter --compact-threads 512 --bench-s 8192 --bench-heads 16 --bench-configs h16sm90tperrmnf_pre --reps 5 > $OUT/logs/ncu_h.log 2>&1
echo "ncu harness perrmnf rc $? $(el): $(grep gpu__time_duration $OUT/logs/ncu_h.log | awk '{print $NF}' | sort -n | tr '\n' ' '), inst $(grep smsp__inst_executed $OUT/logs/ncu_h.log | head -1 | awk '{print $NF}')"
wait $bp; echo "library build rc $? $(el)"
for c in A B; do rm -rf /tmp/cache$c; cp -r tools/dev/mqa/build_t32/$c /tmp/cache$c; done
for c in A B; do
  for f in $(grep -l '"sparse_mqa_fwd_sm90' /tmp/cache$c/v1/sm_90a/*/*/meta.json); do
    d=$(dirname $f); cuobjdump -sass $d/kernel.cubin > $OUT/logs/sass_${c}_$(basename $(dirname $d))_$(basename $d | cut -c1-8).txt 2>&1
  done
done
ls $OUT/logs | grep -c sass_
B=(build-gpu/mlajit-bench --s-q 8192 --topk 2048 --reps 20)
for rep in 1 2; do
  for c in A B; do
    MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 60 "${B[@]}" --ops mqa --heads 16 > $OUT/logs/lib_${rep}_$c.log 2>&1
    echo "rep $rep cache $c rc $? $(el): $(grep -E "^(mqa|mha) |ERROR" $OUT/logs/lib_${rep}_$c.log | cut -c1-100)"
  done
done
# The one-block form through the library (the harness's: h16sm90tnf_pre above): is the gap the persistent form's or every form's?
MLAJIT_MQA_PERSIST=0 MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cacheA timeout 60 "${B[@]}" --ops mqa --heads 16 > $OUT/logs/lib_onebl.log 2>&1
echo "one block a token, cache A rc $? $(el): $(grep -E "^(mqa|mha) |ERROR" $OUT/logs/lib_onebl.log | cut -c1-100)"
for c in A B; do
  MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 40 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second -k regex:sparse_mqa_fwd \
    "${B[@]}" --ops mqa --heads 16 --reps 10 > $OUT/logs/ncu_$c.log 2>&1
  echo "ncu cache $c rc $? $(el): $(grep gpu__time_duration $OUT/logs/ncu_$c.log | awk '{print $NF}' | sort -n | tr '\n' ' '), \
inst $(grep smsp__inst_executed $OUT/logs/ncu_$c.log | head -1 | awk '{print $NF}'), clock $(grep sm__cycles_elapsed $OUT/logs/ncu_$c.log | head -1 | awk '{print $(NF-1), $NF}')"
done
for c in A B; do  # 128 heads (sparse MQA with the workspace), once each
  MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 100 "${B[@]}" --ops mqa --heads 128 > $OUT/logs/lib128_$c.log 2>&1
  echo "128 heads cache $c rc $? $(el)"; grep -E "^(mqa|mha) |ERROR" $OUT/logs/lib128_$c.log | cut -c1-100
done
