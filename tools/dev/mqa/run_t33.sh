#!/bin/bash
# Session 34: where does NVRTC's 16-head kernel lose its 8 %? run_t32 (H100) ran the library on two caches of the same
# specialized sources: NVRTC's cubins (A) 3.268 / 3.257 ms, nvcc's cubins (B) 3.016 / 2.998 (sparse MQA with the workspace,
# 16 heads, 8k); so the gap is the code, and the PTX is its only cause (ptxas rebuilds both cubins byte for byte from the two
# PTX files). The two hot loops differ little in SASS (890 / 892 instructions, the same HGMMA chains), so here ncu's source
# counters (instructions executed and stall samples for every SASS instruction) of one launch from each cache, printed as
# CSV, plus the warp-state and launch sections; then A / B timed twice more. The caches come from prep_t32.sh (run it on the
# CPU machine from the tree the call carries).
# carry ["tools/dev/mqa/build_t32", ".devdeps"]; about 3 minutes.
source "$(dirname "$0")/run_common.sh"
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
ncu --version | tail -1
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench; echo "library build rc $? $(el)"
for c in A B; do rm -rf /tmp/cache$c; cp -r tools/dev/mqa/build_t32/$c /tmp/cache$c; done
B=(build-gpu/mlajit-bench --s-q 8192 --topk 2048 --ops mqa --heads 16)
for c in A B; do
  MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 120 ncu --clock-control none --cache-control none -c 1 \
    -k regex:sparse_mqa_fwd_sm90t --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SchedulerStats --section SpeedOfLight --metrics smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second \
    --import-source no -o $OUT/logs/rep_$c "${B[@]}" --reps 2 > $OUT/logs/ncu_$c.log 2>&1
  echo "ncu cache $c rc $? $(el)"
  ncu -i $OUT/logs/rep_$c.ncu-rep --page source --csv --print-source sass > $OUT/logs/src_$c.csv 2> $OUT/logs/src_$c.err
  echo "source page rc $? lines $(wc -l < $OUT/logs/src_$c.csv)"
  [ "$(wc -l < $OUT/logs/src_$c.csv)" -gt 100 ] || { ncu -i $OUT/logs/rep_$c.ncu-rep --page source --csv > $OUT/logs/src2_$c.csv 2>&1;
    ncu -i $OUT/logs/rep_$c.ncu-rep --page raw --csv > $OUT/logs/raw_$c.csv 2>&1; }
  ncu -i $OUT/logs/rep_$c.ncu-rep --page details --print-details all > $OUT/logs/details_$c.txt 2>&1
  grep -E "Duration|Executed Instructions|Warp Cycles Per Issued|No Eligible|Issued Warp" $OUT/logs/details_$c.txt | head -8
  rm -f $OUT/logs/rep_$c.ncu-rep
done
for rep in 1 2; do
  for c in A B; do
    MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 60 "${B[@]}" --reps 20 > $OUT/logs/lib_${rep}_$c.log 2>&1
    echo "rep $rep cache $c rc $? $(el): $(grep -E "^(mqa|mha) |ERROR" $OUT/logs/lib_${rep}_$c.log | cut -c1-100)"
  done
done
