#!/usr/bin/env bash
# The integrated GPU check in one device call, steps in priority order, each under its own time limit so
# the call ends inside its budget: build (Release), the whole GPU suite (both tiers: the MHA and sparse MQA
# cases loop over MLAJIT_TIER themselves), mlajit-check on the Hopper tier and the portable tier, a short
# mlajit-bench against cuDNN SDPA in the same process, then compute-sanitizer memcheck/racecheck on the
# small-shape cases if time is left. Logs in $OUT (or /tmp/mlajit-integration); a table last.
# Usage: bash tools/device/integration_check.sh [TOTAL_SECONDS]   (default 420)
set -uo pipefail
cd "$(dirname "$0")/../.."
total="${1:-420}"
out="${OUT:-/tmp/mlajit-integration}"
mkdir -p "$out"
start=$(date +%s)
left() { echo $(( total - ($(date +%s) - start) )); }
step() {  # name limit_s command...: runs while time is left; records rc and seconds
    local name=$1 lim=$2; shift 2
    local l; l=$(left)
    (( lim > l - 5 )) && lim=$(( l - 5 ))
    if (( lim < 10 )); then echo "$name SKIPPED (no time left)" >>"$out/table.txt"; return; fi
    local t0; t0=$(date +%s)
    timeout "$lim" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $(( $(date +%s) - t0 ))s" >>"$out/table.txt"
}
: >"$out/table.txt"
prefix=()
[ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build=build-gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" \
  >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
step build 240 cmake --build "$build" -j "$(nproc)" --target mlajit_gpu_tests mlajit-check mlajit-bench
grep -E "error|FAILED" -A6 "$out/build.log" | head -40
export MLAJIT_CACHE_DIR=/tmp/mlajit-int-cache
step gpu_tests 200 "$build/mlajit_gpu_tests"
step check_hopper 60 "$build/mlajit-check" --heads 16 --s-q 4096 --s-k 16384
step check_portable 60 env MLAJIT_TIER=portable "$build/mlajit-check" --heads 16 --s-q 2048 --s-k 2048
step bench 60 "$build/mlajit-bench" --ops mha,masked,mqa --heads 128,16 --s-q 8192 --reps 10 --csv "$out/bench.csv"
step cudnn 40 python3 - <<'PY'
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for h, S in ((128, 8192), (16, 8192), (16, 16384)):
    q = torch.randn(1, h, S, 192, device="cuda", dtype=torch.bfloat16); k = torch.randn_like(q)
    v = torch.randn(1, h, S, 128, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(3): F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ts = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); F.scaled_dot_product_attention(q, k, v, is_causal=True); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b))
    ms = sorted(ts)[len(ts) // 2]
    print(f"cudnn dense causal h={h} S={S}: {ms:.3f} ms, {2*h*S*S*320/2/ms/1e9:.0f} TFLOP/s")
PY
step soak 50 env MLAJIT_SOAK_SECONDS=30 "$build/mlajit_gpu_tests" '--test-case=gpu soak*'
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
export MLAJIT_NVRTC_FLAGS=-lineinfo
for tool in memcheck racecheck synccheck initcheck; do
  step "san_$tool" 60 "$cs" --tool "$tool" --error-exitcode 3 "$build/mlajit_gpu_tests" '--test-case=gpu small shapes*'
done
echo "=== gpu tests"; grep -E "ERROR|test cases|assertions|skipped" "$out/gpu_tests.log" | head -30
echo "=== checks"; grep -hE "ok|FAIL|ms|error" "$out/check_hopper.log" "$out/check_portable.log" | head -30
echo "=== bench"; cat "$out/bench.csv" 2>/dev/null | cut -c1-200 | head -12; cat "$out/cudnn.log"
echo "=== soak"; grep -E "MESSAGE|ERROR|test cases" "$out/soak.log" | head -8
echo "=== sanitizers"; for t in memcheck racecheck synccheck initcheck; do tail -2 "$out/san_$t.log" 2>/dev/null; done
echo "=== table"; cat "$out/table.txt"
