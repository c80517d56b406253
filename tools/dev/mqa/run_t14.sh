#!/bin/bash
# Session 22's second device call: Nsight Compute on the keys-as-M kernel at 16 heads, 8k paged (configs_t14.h): the whole
# kernel, its gather alone, its math alone; one profiled launch each after the warm-up launches.
# Prebuilt: CFG_FILE=configs_t14.h BUILD=build_t14 bash build.sh; carry ["tools/dev/mqa/build_t14"].
#   run: OUT=$OUT bash tools/dev/mqa/run_t14.sh      (about 3 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/logs
H=tools/dev/mqa/build_t14/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
for c in h16sm90t h16sm90tg4 h16sm90tm3; do
  timeout 120 ncu --clock-control none $S -k regex:mqa_kernel --launch-skip 3 --launch-count 1 \
    $H --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs $c --reps 3 > $OUT/logs/ncu_$c.txt 2>&1
  echo "ncu $c rc $?"
  grep -E "^  *(Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes Busy|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|Executed Ipc Active|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp)" $OUT/logs/ncu_$c.txt | sed 's/^ *//' | tr -s ' '
  grep -iE "shared|stall|bottleneck|pipe" $OUT/logs/ncu_$c.txt | grep -v "^ *-" | head -14 | cut -c1-170
done
tar -czf $OUT/ncu_logs.tgz -C $OUT logs && rm -rf $OUT/logs
