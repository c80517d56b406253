#!/bin/bash
# One Nsight Compute profile of a harness config at 8k paged (the run scripts' shared step): the 4th launch of the main
# kernel (the key-set pre-pass of a "_pre" config is not matched), its summary lines printed, the report in LOG.
#   bash tools/dev/mqa/ncu_profile.sh HARNESS CONFIG HEADS LOG [TIMEOUT_S]
H=$1; c=$2; heads=$3; log=$4
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats"
timeout "${5:-120}" ncu --clock-control none $S -k regex:mqa_kernel --launch-skip 3 --launch-count 1 \
  $H --no-check --paged --bench-s 8192 --bench-heads $heads --bench-configs $c --reps 3 > $log 2>&1
echo "ncu $c rc $?"
grep -E "^  *(Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Mem Pipes Busy|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|Executed Ipc Active|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Avg. Active Threads Per Warp)" $log | sed 's/^ *//' | tr -s ' '
grep -iE "shared|stall|bottleneck|pipe" $log | grep -v "^ *-" | head -14 | cut -c1-170
