#!/usr/bin/env bash
# One call on the GPU machine for the ecosystem pieces (issue 15): builds Release (library, warmup CLI,
# host-cost tool), runs the custom ops' tests (compiled = eager, CUDA graph replay = eager, op = float64
# reference), the host-cost benchmark, and the installed examples (install into a fresh prefix, build with
# find_package, run: the checked prefill on this GPU), and the engine-style Python example (bf16 and FP8 paged
# cache, checked against float64). Outputs in $OUT (or /tmp/mlajit-host-cost); a
# summary line last. Headers the machine lacks travel in .devdeps (tools/device/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-host-cost}"
mkdir -p "$out"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
t0=$(date +%s)
# An existing build folder (e.g. the GPU suite's, tests on) is reused as configured: configuring it again
# with other options would rebuild it. MLAJIT_SKIP_BUILD=1 trusts that the targets are built already.
if [ "${MLAJIT_SKIP_BUILD:-0}" != 1 ]; then
  conf=()
  [ -f "$build/CMakeCache.txt" ] || conf=(-DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_BUILD_TESTS=OFF "${prefix[@]}")
  cmake -S . -B "$build" -G Ninja "${conf[@]}" >"$out/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target mlajit mlajit-warmup mlajit-host-cost >"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A6 "$out/build.log" "$out/configure.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
export MLAJIT_LIBRARY="$PWD/$build/libmlajit.so"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-host-cost-cache}"
python3 -m unittest -v tools/python/tests/test_torch_ops.py >"$out/torch_ops_tests.log" 2>&1
ops_rc=$?
grep -E "^(test_|Ran|OK|FAILED|AssertionError)|Error" "$out/torch_ops_tests.log" | head -40
python3 tools/bench/host_cost.py --build "$build" --out "$out" 2>"$out/host_cost.err"
cost_rc=$?
[ $cost_rc = 0 ] || tail -20 "$out/host_cost.err"
# The installed package on a GPU: the examples' checked prefills. MLAJIT_EXAMPLES_BIN=<dir> runs examples
# built elsewhere against an installed package (tools/check_install.sh) with this build's library instead.
ex_rc=0
inst="$(mktemp -d)"
if [ -n "${MLAJIT_EXAMPLES_BIN:-}" ]; then
  mkdir -p "$inst/ex" && cp "$MLAJIT_EXAMPLES_BIN"/plan_and_prefill_c "$MLAJIT_EXAMPLES_BIN"/mla_prefill_cpp "$inst/ex/" || ex_rc=1
  export LD_LIBRARY_PATH="$(dirname "$MLAJIT_LIBRARY")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  cmake --install "$build" --prefix "$inst/prefix" >"$out/install.log" 2>&1 &&
    cmake -S examples -B "$inst/ex" -G Ninja -DCMAKE_PREFIX_PATH="$inst/prefix" >>"$out/install.log" 2>&1 &&
    cmake --build "$inst/ex" >>"$out/install.log" 2>&1 || ex_rc=1
fi
if [ $ex_rc = 0 ]; then
  "$inst/ex/plan_and_prefill_c" 2>&1 | tee "$out/examples.log" | tail -3 || ex_rc=1
  "$inst/ex/mla_prefill_cpp" 2>&1 | tee -a "$out/examples.log" | tail -6 || ex_rc=1
else
  tail -20 "$out/install.log"
fi
# The engine-style worked example (examples/python): a mixed prefill batch on the paged cache, bf16 and
# fp8_ds_mla, each checked against float64 (it prints PASS/FAIL and exits 1 on a mismatch).
py_rc=0
for kvd in auto fp8_ds_mla; do
  PYTHONPATH="$PWD/tools/python" python3 examples/python/sparse_mla_prefill_vllm.py --kv-cache-dtype "$kvd" \
    >"$out/example_vllm_$kvd.log" 2>&1 || py_rc=1
  tail -3 "$out/example_vllm_$kvd.log"
done
echo "SUMMARY: torch ops tests rc=$ops_rc, host cost rc=$cost_rc, installed examples rc=$ex_rc, vllm-style example rc=$py_rc ($(( $(date +%s) - t0 )) s)"
