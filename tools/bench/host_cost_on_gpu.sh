#!/usr/bin/env bash
# One call on the GPU machine for the ecosystem pieces (issue 15): builds Release (library, warmup CLI,
# host-cost tool, and the C++ torch ops libmlajit_torch.so against the machine's torch), runs the host-cost
# benchmark (C API rows, then the custom op through both backends: C++ ops and Python-defined ops), the
# custom ops' tests once per backend (MLAJIT_TORCH_BACKEND=cpp and =python, two processes side by side:
# compiled = eager, CUDA graph replay = eager, op = float64 reference, opcheck), the installed examples
# (install into a fresh prefix, build with find_package, run: the checked prefill on this GPU), and the
# engine-style Python example (bf16 and FP8 paged cache, checked against float64). Outputs in $OUT (or
# /tmp/mlajit-host-cost); a summary line last. Headers the machine lacks travel in .devdeps
# (tools/device/README.md).
# Knobs: MLAJIT_BUILD_DIR (default build-gpu); MLAJIT_SKIP_BUILD=1 trusts that the build folder holds the
# library and mlajit-host-cost already (e.g. built elsewhere and carried) and only builds libmlajit_torch.so
# there if it is missing (tools/python/csrc/build_torch_ops.sh); MLAJIT_HOST_COST_QUICK=1 skips the
# fresh-process first calls (no cold compiles) and the examples, for a short device call.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mlajit-host-cost}"
mkdir -p "$out"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build="${MLAJIT_BUILD_DIR:-build-gpu}"
quick="${MLAJIT_HOST_COST_QUICK:-0}"
t0=$(date +%s)
# An existing build folder (e.g. the GPU suite's, tests on) is reused as configured: configuring it again
# with other options would rebuild it.
if [ "${MLAJIT_SKIP_BUILD:-0}" != 1 ]; then
  conf=()
  [ -f "$build/CMakeCache.txt" ] || conf=(-DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_BUILD_TESTS=OFF
                                          -DMLAJIT_TORCH_OPS=AUTO -DPython3_EXECUTABLE="$(command -v python3)" "${prefix[@]}")
  targets=(mlajit mlajit-warmup mlajit-host-cost)
  cmake -S . -B "$build" -G Ninja "${conf[@]}" >"$out/configure.log" 2>&1 &&
    { grep -q "building libmlajit_torch.so" "$out/configure.log" && targets+=(mlajit_torch); true; } &&
    cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" -A6 "$out/build.log" "$out/configure.log" | head -60; echo "SUMMARY: build failed"; exit 1; }
  grep -E "libmlajit_torch" "$out/configure.log"
  echo "build: $(( $(date +%s) - t0 )) s"
elif [ ! -f "$build/libmlajit_torch.so" ]; then
  bash tools/python/csrc/build_torch_ops.sh "$build" >"$out/build_torch_ops.log" 2>&1 || tail -20 "$out/build_torch_ops.log"
  tail -1 "$out/build_torch_ops.log"
  echo "libmlajit_torch.so: $(( $(date +%s) - t0 )) s"
fi
export MLAJIT_LIBRARY="$PWD/$build/libmlajit.so"
export MLAJIT_CACHE_DIR="${MLAJIT_CACHE_DIR:-/tmp/mlajit-host-cost-cache}"
# Timing first, alone on the machine; then the tests of both backends side by side (two processes: a
# process registers torch.ops.mlajit once). The benchmark's warm-up fills the kernel cache they share.
qflag=()
[ "$quick" = 1 ] && qflag=(--no-first-call)
python3 tools/bench/host_cost.py --build "$build" --out "$out" "${qflag[@]}" 2>"$out/host_cost.err"
cost_rc=$?
[ $cost_rc = 0 ] || tail -20 "$out/host_cost.err"
echo "host cost: $(( $(date +%s) - t0 )) s"
MLAJIT_TORCH_BACKEND=cpp python3 -m unittest -v tools/python/tests/test_torch_ops.py >"$out/torch_ops_tests_cpp.log" 2>&1 &
pid_cpp=$!
MLAJIT_TORCH_BACKEND=python python3 -m unittest -v tools/python/tests/test_torch_ops.py >"$out/torch_ops_tests_python.log" 2>&1 &
pid_python=$!
wait "$pid_cpp"; ops_cpp=$?
wait "$pid_python"; ops_py=$?
for b in cpp python; do
  echo "-- torch ops tests, backend $b"
  grep -E "^(test_|Ran|OK|FAILED|AssertionError)|Error|torch ops backend" "$out/torch_ops_tests_$b.log" | head -30
done
ops_rc="cpp=$ops_cpp,python=$ops_py"
if [ "$quick" = 1 ]; then
  echo "SUMMARY: torch ops tests rc $ops_rc, host cost rc=$cost_rc (quick: no first calls, no examples; $(( $(date +%s) - t0 )) s)"
  exit 0
fi
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
echo "SUMMARY: torch ops tests rc $ops_rc, host cost rc=$cost_rc, installed examples rc=$ex_rc, vllm-style example rc=$py_rc ($(( $(date +%s) - t0 )) s)"
