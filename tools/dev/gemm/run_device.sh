#!/usr/bin/env bash
# One GPU call for the projections' GEMM (issue 15), on binaries built elsewhere (this machine's build is
# too slow to pay for in device time): the harness (JIT kernel vs cuBLASLt, float64 checks), the GEMM and
# one-call GPU tests, and mlajit-host-cost with the JIT GEMM and with MLAJIT_GEMM=cublaslt.
# Usage (from the repository root): BIN=<folder with harness, mlajit_gpu_tests, mlajit-host-cost> OUT=... bash tools/dev/gemm/run_device.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
out="${OUT:-/tmp/gemm-device}"
bin="${BIN:-bin}"
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MLAJIT_CACHE_DIR=/tmp/gemm-device-cache
t0=$(date +%s)
timeout 30 "$bin/harness" >"$out/harness.log" 2>&1; h_rc=$?
grep -v PASS "$out/harness.log" | tail -40
echo "harness: $(grep -c PASS "$out/harness.log") checks passed, rc=$h_rc ($(( $(date +%s) - t0 )) s)"
timeout 70 "$bin/mlajit_gpu_tests" -tc="*projection GEMM*,*mla_prefill*,*agree on DSA*" >"$out/gpu_tests.log" 2>&1; t_rc=$?
grep -E "ERROR|FAILED|test cases|assertions|projection GEMM|worst" "$out/gpu_tests.log" | head -40
echo "gpu tests rc=$t_rc ($(( $(date +%s) - t0 )) s)"
timeout 35 "$bin/mlajit-host-cost" --tokens 16 --heads 128 >"$out/host_cost_jit.log" 2>&1; c1=$?
MLAJIT_GEMM=cublaslt timeout 35 "$bin/mlajit-host-cost" --tokens 16 --heads 128 >"$out/host_cost_cublaslt.log" 2>&1; c2=$?
for f in jit cublaslt; do echo "== host cost, GEMM: $f"; grep -E "^api\.|^split\.|^first\.|first call split|^  " "$out/host_cost_$f.log" | head -40; done
echo "SUMMARY: harness rc=$h_rc, gpu tests rc=$t_rc, host cost rc=$c1/$c2 ($(( $(date +%s) - t0 )) s)"
