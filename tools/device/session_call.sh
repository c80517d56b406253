#!/usr/bin/env bash
# One device call that does as much of a session's device work as its time allows (BUDGET seconds, default 570): the harness
# run RUN (default tools/dev/mqa/run_t37.sh, at most RUN_S seconds, default 280), on an H200 the planner's calibration
# (calibrate_call.sh; CAL=0 leaves it out), then the closing call (closing_call.sh: whole with SOAK_S 90 where 330 s are left,
# QUICK with SOAK_S 45 where 150 are). Logs under $OUT/run, $OUT/cal, $OUT/close (one logs.tgz each). Name in
# `carry` what RUN needs and `.devdeps`.
set -uo pipefail
cd "$(dirname "$0")/../.."
top="${OUT:-/tmp/session_call}"; mkdir -p "$top/run" "$top/cal" "$top/close"
t0=$(date +%s); left() { echo $(( ${BUDGET:-570} - ($(date +%s) - t0) )); }
OUT="$top/run" timeout "${RUN_S:-280}" bash "${RUN:-tools/dev/mqa/run_t37.sh}"
echo "=== run done, $(left) s left"
if [ "${CAL:-1}" = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "$(left)" -gt 280 ]; then
  OUT="$top/cal" timeout 270 bash tools/device/calibrate_call.sh
  echo "=== calibration done, $(left) s left"
fi
l=$(left)
if [ "$l" -gt 330 ]; then SOAK_S=90 OUT="$top/close" timeout $((l - 10)) bash tools/device/closing_call.sh
elif [ "$l" -gt 150 ]; then QUICK=1 SOAK_S=45 OUT="$top/close" timeout $((l - 10)) bash tools/device/closing_call.sh
else echo "no time left for the closing call"; fi
