#!/usr/bin/env bash
# One device call for the Hopper tier: build the harness, check every small case and the perf shapes
# (float64 reference), time the Hopper variants against the portable default and cuDNN in the same call,
# then compute-sanitizer (memcheck, racecheck, synccheck) on the small cases. Logs under $OUT.
# Env: MJ_VARIANTS (harness --only list), MJ_SAN=0 to skip the sanitizers, MJ_PERF=0 to skip timing,
# MJ_SAN_VARIANT (the variant the sanitizers run), MJ_CUDNN_SHAPES ("h:S ..." for cudnn_ref.py).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/out}"; mkdir -p "$OUT"
VARS="${MJ_VARIANTS:-h90pp,h90np}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
"$here/build.sh" /tmp/mhab > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
grep -E "^(h90|c64x64)" "$OUT/build.log"
echo "build $(( $(date +%s) - t0 )) s"
timeout 150 /tmp/mhab/harness --no-perf --only "$VARS" > "$OUT/check.log" 2>&1; echo "check rc $?"
grep -E "FAIL|ALL CHECKS|FAILED|error" "$OUT/check.log" | head -30
if [ "${MJ_PERF:-1}" = 1 ]; then
  timeout 150 /tmp/mhab/harness --no-check --only "$VARS" > "$OUT/perf.log" 2>&1; echo "perf rc $?"
  grep -E "FAIL" "$OUT/perf.log" | head
  timeout 60 python3 "$here/cudnn_ref.py" ${MJ_CUDNN_SHAPES:-128:8192 16:8192 16:16384} > "$OUT/cudnn.log" 2>&1
fi
if [ "${MJ_SAN:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 45 compute-sanitizer --tool $tool --print-limit 5 /tmp/mhab/harness --no-perf --quick --only "${MJ_SAN_VARIANT:-h90pp}" \
      > "$OUT/san_$tool.log" 2>&1
    echo "$tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_$tool.log" | tr '\n' ' ')"
  done
fi
if [ "${MJ_NCU:-0}" = 1 ]; then  # one dense and one masked launch per selected Hopper variant, h=128 S=8192
  timeout 120 ncu --clock-control none -k regex:kern_h90 --launch-count 4 --section SpeedOfLight --section WarpStateStats \
    --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section SchedulerStats \
    /tmp/mhab/harness --ncu --only "${MJ_NCU_VARIANTS:-h90pp,h90np}" > "$OUT/ncu.txt" 2>&1; echo "ncu rc $?"
  grep -E "kern_h90|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Shared.*Bandwidth|Stall" "$OUT/ncu.txt" | head -60
  cuobjdump -sass /tmp/mhab/h90pp_d.o > "$OUT/sass_h90pp_d.txt" 2>&1
  for op in HGMMA WARPGROUP.ARRIVE WARPGROUP.DEPBAR MUFU.EX2 BAR.SYNC SYNCS; do echo "$op $(grep -c "$op" "$OUT/sass_h90pp_d.txt")"; done
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$OUT/gpu.txt"
sed -n '/^config/,/^$/p' "$OUT/perf.log" 2>/dev/null
cat "$OUT/cudnn.log" 2>/dev/null
