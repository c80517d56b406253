#!/usr/bin/env bash
# One device call: build, check, time, anchor, profile. Logs under $OUT (or ./out).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
"$here/build.sh" /tmp/mhab 2>&1 | tee "$OUT/build.log" || exit 1
# the new-shape variants in their own process, so that a crash there cannot cost the others' results
big=c128x128x8x2
/tmp/mhab/harness --skip $big 2>&1 | tee "$OUT/harness.log"
/tmp/mhab/harness --only $big 2>&1 | tee "$OUT/harness_bn128.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv | tee -a "$OUT/gpu.txt"
[ "${MJ_CUDNN:-1}" = 1 ] && timeout 60 python3 "$here/cudnn_ref.py" 2>&1 | tee "$OUT/cudnn.log"
if [ "${MJ_NCU:-1}" = 1 ]; then
  timeout 90 ncu --clock-control none -k regex:kern_c128 --launch-count 4 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
    --section SchedulerStats /tmp/mhab/harness --ncu --only c128x64x8x2,c128x128x8x2 > "$OUT/ncu.txt" 2>&1
  echo "ncu rc $?"
  grep -E "kern_|Duration|Throughput|Warp Cycles|Issued Warp|Eligible Warps" "$OUT/ncu.txt" | head -60
  timeout 60 ncu --clock-control none -k regex:kern_c128x64x8x2_d --launch-count 1 --section WarpStateStats \
    --section InstructionStats --print-details all /tmp/mhab/harness --ncu --only c128x64x8x2 > "$OUT/ncu_stalls.txt" 2>&1
  echo "ncu2 rc $?"
fi
cuobjdump -sass /tmp/mhab/c128x64x8x2_d.o > "$OUT/sass_m128_d.txt" 2>&1
for op in HMMA LDSM BAR MUFU LDGSTS SHFL; do echo "$op $(grep -c "$op" "$OUT/sass_m128_d.txt")"; done
grep -E "ALL CHECKS|FAILED" "$OUT"/harness*.log
for f in "$OUT"/harness*.log; do sed -n '/^config/,/^$/p' "$f"; done
