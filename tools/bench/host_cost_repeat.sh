#!/usr/bin/env bash
# Issue 15's custom-op host cost, repeated: a Release build with the C++ torch ops (no tests), then N runs of
# tools/bench/host_cost.py --no-first-call in a row on the same machine, one summary line per run (the C API,
# the C++ op, the same with the GPU idle, torch's empty-op dispatch), so run-to-run spread is seen in one call.
#   run on the GPU machine: OUT=$OUT bash tools/bench/host_cost_repeat.sh [N]      (N default 4; ~4 minutes)
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-host-cost-repeat}"; mkdir -p "$out"
n="${1:-4}"
build="${MLAJIT_BUILD_DIR:-build-hc}"  # a build that already holds the targets below is reused as it is
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
t0=$(date +%s)
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_BUILD_TESTS=OFF -DMLAJIT_TORCH_OPS=AUTO \
  -DPython3_EXECUTABLE="$(command -v python3)" "${prefix[@]}" >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
targets=(mlajit mlajit-host-cost); grep -q "building libmlajit_torch.so" "$out/configure.log" && targets+=(mlajit_torch)
cmake --build $build -j "$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 || { grep -E "error" -A4 "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s (${targets[*]})"
export MLAJIT_LIBRARY="$PWD/$build/libmlajit.so" MLAJIT_CACHE_DIR=/tmp/mlajit-host-cost-repeat-cache
row() { grep -E "$1" "$2" | head -1 | grep -oE '[0-9]+\.[0-9]+ us' | head -1; }
for r in $(seq 1 "$n"); do
  timeout 150 python3 tools/bench/host_cost.py --build $build --no-first-call >"$out/run$r.txt" 2>"$out/run$r.err"
  rc=$?; f="$out/run$r.txt"
  echo "run $r (rc $rc): C API $(row '^api.mla_prefill' $f) | op [cpp] $(row 'mla_prefill \[cpp\]' $f) | op [cpp] GPU idle $(row '\[cpp\], GPU idle' $f) | empty-op dispatch $(row 'empty Python custom op' $f) | op [python] $(row 'mla_prefill \[python\]' $f)" | tee -a "$out/summary.txt"
done
echo "total: $(( $(date +%s) - t0 )) s"
