#!/usr/bin/env bash
# On a GPU machine, in one call (about 6 minutes with the defaults; at most ~9):
#   1. compute-sanitizer memcheck, racecheck, initcheck and synccheck over every kernel family at small
#      shapes (the "gpu small shapes" cases of tests/gpu/test_soak_gpu.cpp: sparse MQA, dense and masked
#      MHA, the top-k mask, the one call on each of its paths and paged (paged_gather), the shape issue 14
#      saw initcheck flag), on both kernel tiers;
#   2. a soak: mixed batches with fresh random shapes and data for SOAK_SECONDS, a sample of every call
#      checked against float64, device memory (cuMemGetInfo) and host RSS reported at start and end.
# Usage: bash tools/device/sanitize_soak.sh [SOAK_SECONDS]   (default 60; 0 skips the soak)
# MLAJIT_SANITIZE_TIERS="auto portable" (default; "auto" alone halves the tool time), and
# MLAJIT_SANITIZER_TIMEOUT_S (default 40) bounds each tool run: 8 runs, so at worst 5.5 minutes of
# tools; a small-shape run takes seconds plainly and tens of seconds under a tool.
# Logs go to $OUT (or /tmp/mlajit-sanitize); a table and a SUMMARY line come last. The exit status is 0
# only when every tool reports 0 errors and the soak passes.
set -uo pipefail
cd "$(dirname "$0")/../.."
soak_s="${1:-${MLAJIT_SOAK_SECONDS:-60}}"
tool_timeout="${MLAJIT_SANITIZER_TIMEOUT_S:-40}"
out="${OUT:-/tmp/mlajit-sanitize}"
mkdir -p "$out"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; echo "SUMMARY: configure failed"; exit 1
fi
if ! cmake --build "$build" -j "$(nproc)" --target mlajit_gpu_tests >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" -A6 "$out/build.log" | head -80; echo "SUMMARY: build failed"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"

cs="$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")"
# Kernels with line info, so that a report names a source line (another cache key: its own directory).
export MLAJIT_NVRTC_FLAGS="${MLAJIT_NVRTC_FLAGS:--lineinfo}"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-sanitize-cache}"
tests="$build/mlajit_gpu_tests"
small='--test-case=gpu small shapes*'

# Both kernel tiers (MLAJIT_TIER): on a Hopper GPU "auto" runs the sm_90a kernels, "portable" the others.
tiers="${MLAJIT_SANITIZE_TIERS:-auto portable}"

# Plain run first: compiles every kernel once (the tools then load them from the cache) and proves the
# small cases pass without a tool.
plain_rc=0
for tier in $tiers; do
  t1=$(date +%s)
  MLAJIT_TIER=$tier "$tests" "$small" >"$out/plain-$tier.log" 2>&1 || plain_rc=1
  echo "plain small-shape run, tier $tier: $(( $(date +%s) - t1 )) s ($(grep -E '^\[doctest\] (test cases|assertions)' "$out/plain-$tier.log" | tr -s ' ' | tr '\n' ' '))"
done

declare -A errs rcs secs
all_ok=$([ $plain_rc = 0 ] && echo 1 || echo 0)
for tool in memcheck racecheck initcheck synccheck; do
  extra=()
  # racecheck: hazards in shared memory, the whole point for the Hopper pipelines.
  [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
  [ "$tool" = initcheck ] && extra=(--track-unused-memory no)
  t1=$(date +%s)
  errs[$tool]=""
  rcs[$tool]=0
  for tier in $tiers; do
    log="$out/$tool-$tier.log"
    MLAJIT_TIER=$tier timeout "$tool_timeout" "$cs" --tool "$tool" --error-exitcode 97 --print-limit 20 "${extra[@]}" \
      "$tests" "$small" >"$log" 2>&1
    rc=$?
    [ $rc = 0 ] || rcs[$tool]=$rc
    n=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+')
    if grep -q 'Device not supported' "$log"; then
      # The gVisor runtime refuses compute-sanitizer (KINDS.md); only a Firecracker machine runs this part.
      e="unsupported device"; all_ok=0
    elif [ $rc = 124 ]; then e="timeout ${tool_timeout}s"; all_ok=0
    elif [ -z "$n" ]; then e="no summary (rc $rc)"; all_ok=0
    else e=$n; { [ "$n" = 0 ] && [ $rc = 0 ]; } || all_ok=0
    fi
    errs[$tool]="${errs[$tool]}${errs[$tool]:+ }$tier:$e"
    # The first reports, with the kernel and the line, for the log reader.
    grep -E '^========= (Invalid|Uninitialized|Race|Barrier|Error|    at|Warning)' "$log" | head -12
  done
  secs[$tool]=$(( $(date +%s) - t1 ))
done

soak_rc=skipped
if [ "$soak_s" != 0 ]; then
  t1=$(date +%s)
  MLAJIT_SOAK_SECONDS="$soak_s" "$tests" '--test-case=gpu soak*' >"$out/soak.log" 2>&1
  soak_rc=$?
  [ $soak_rc = 0 ] || all_ok=0
  grep -E 'FIGURE|ERROR|FAILED' "$out/soak.log" | head -20
  echo "soak: rc=$soak_rc, $(( $(date +%s) - t1 )) s"
fi

printf '\n%-10s %-44s %-6s %s\n' tool "errors per tier" rc seconds
for tool in memcheck racecheck initcheck synccheck; do
  printf '%-10s %-44s %-6s %s\n' "$tool" "${errs[$tool]}" "${rcs[$tool]}" "${secs[$tool]}"
done
echo "SUMMARY: plain rc=$plain_rc; memcheck ${errs[memcheck]}, racecheck ${errs[racecheck]}, initcheck ${errs[initcheck]}, synccheck ${errs[synccheck]} errors; soak ${soak_s}s rc=$soak_rc; total $(( $(date +%s) - t0 )) s"
[ "$all_ok" = 1 ]
