#!/usr/bin/env bash
# One device call for the Hopper tier: build the harness, check every small case and the perf shapes
# (float64 reference), time the Hopper variants against the portable default and cuDNN in the same call,
# then compute-sanitizer (memcheck, racecheck, synccheck) on the small cases. Logs under $OUT.
# Env: MJ_VARIANTS (harness --only list), MJ_SAN=0 to skip the sanitizers, MJ_PERF=0 to skip timing.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$here/out}"; mkdir -p "$OUT"
VARS="${MJ_VARIANTS:-h90pp,h90np,c64x64x4x2}"
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
  timeout 60 python3 "$here/cudnn_ref.py" > "$OUT/cudnn.log" 2>&1
fi
if [ "${MJ_SAN:-1}" = 1 ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 45 compute-sanitizer --tool $tool --print-limit 5 /tmp/mhab/harness --no-perf --quick --only h90pp \
      > "$OUT/san_$tool.log" 2>&1
    echo "$tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_$tool.log" | tr '\n' ' ')"
  done
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$OUT/gpu.txt"
sed -n '/^config/,/^$/p' "$OUT/perf.log" 2>/dev/null
cat "$OUT/cudnn.log" 2>/dev/null
