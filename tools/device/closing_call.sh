#!/usr/bin/env bash
# The integrated check of a merged main in one device call (about 6-7 minutes warm, build included):
#   side by side: the GPU suite in three processes (both tiers), compute-sanitizer's four tools on the
#   small-shape cases, the soak (SOAK_S seconds, default 150: recurring and fresh-shape phases);
#   then on a quiet GPU: the ecosystem step (tools/bench/host_cost_on_gpu.sh: torch ops, host cost,
#   installed examples, the vLLM-style example), issue 13's one-call batch with the planner against both
#   forced paths, masked vs dense MHA through the library at the goal shapes.
# Every log goes into $OUT/logs.tgz (the device tool returns at most 8 files of a call, and only the last
# 12,000 characters of its output), and the summary lines are printed last. Name `.devdeps` in `carry`.
# QUICK=1 (a call with little device time left, about 3 minutes warm with SOAK_S=60): the GPU suite and the soak only.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/closing}"; logs="$(mktemp -d)"; mkdir -p "$out"  # logs outside $OUT: only the archive comes back
finish() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
trap finish EXIT
t0=$(date +%s); since() { echo "$(( $(date +%s) - t0 ))s"; }
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" >"$logs/configure.log" 2>&1
cmake --build build-gpu -j "$(nproc)" --target mlajit_gpu_tests mlajit-bench mlajit-warmup mlajit mlajit-host-cost >"$logs/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A6 "$logs/build.log" | head -40; echo "SUMMARY: build failed"; exit 1; }
echo "built $(since)"
T=build-gpu/mlajit_gpu_tests
g1='gpu: sparse MQA and masked MHA agree*,gpu: top-k mask + masked MHA + dense MHA over the grid'
g2='gpu: sparse MQA on the FP8 latent cache*,gpu: sparse MQA contract*'
MLAJIT_CACHE_DIR=/tmp/c1 timeout 280 taskset -c 0-2 $T "--test-case=$g1" >"$logs/suite1.log" 2>&1 & p1=$!
# suite 2, then the sparse MQA suites again without the persistent grid (MLAJIT_MQA_PERSIST=0; on by default, where every
# 16-head bf16 case with a workspace runs it and is compared bit for bit with the one-block-a-token form, without one), and
# with the 64-head kernel's (MLAJIT_MQA_PERSIST64=1, off by default: every bf16 case above 16 heads with a workspace)
(MLAJIT_CACHE_DIR=/tmp/c2 timeout 280 taskset -c 3-5 $T "--test-case=$g2" >"$logs/suite2.log" 2>&1; r=$?
 MLAJIT_MQA_PERSIST=0 MLAJIT_CACHE_DIR=/tmp/c5 timeout 200 taskset -c 3-5 $T "--test-case=gpu: sparse MQA over heads*,gpu: sparse MQA contract*" \
   >"$logs/suite4.log" 2>&1 || r=$((r + 10))
 MLAJIT_MQA_PERSIST64=1 MLAJIT_CACHE_DIR=/tmp/c5 timeout 200 taskset -c 3-5 $T "--test-case=gpu: sparse MQA over heads*,gpu: sparse MQA contract*" \
   >"$logs/suite5.log" 2>&1 || r=$((r + 100)); exit $r) & p2=$!
MLAJIT_CACHE_DIR=/tmp/c3 timeout 280 taskset -c 6-8 $T "--test-case-exclude=$g1,$g2,gpu soak*" >"$logs/suite3.log" 2>&1 & p3=$!
MLAJIT_SOAK_SECONDS=${SOAK_S:-150} MLAJIT_SOAK_SHARED_GPU=1 MLAJIT_SOAK_CSV="$logs/soak.csv" MLAJIT_CACHE_DIR=/tmp/c4 \
  timeout 280 taskset -c 12-15 $T '--test-case=gpu soak*' >"$logs/soak.log" 2>&1 & ps=$!
cs=/usr/local/cuda/bin/compute-sanitizer; command -v compute-sanitizer >/dev/null && cs=$(command -v compute-sanitizer)
sp=(); quick=${QUICK:-0}
# racecheck skips cuBLASLt's kernels (nvjet_*): on 2026-12-03 it reported 1,024 hazards at one pair of offsets in
# nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT, NVIDIA's binary, which we can neither read nor change (its
# results matched float64 in every test); our kernels are the ones this run must clear.
[ "$quick" = 1 ] || for tool in memcheck racecheck synccheck initcheck; do
  filt=(); [ $tool = racecheck ] && filt=(--kernel-name-exclude kns=nvjet)
  MLAJIT_CACHE_DIR=/tmp/s_$tool MLAJIT_NVRTC_FLAGS=-lineinfo timeout 280 taskset -c 9-11 "$cs" --tool $tool "${filt[@]}" --error-exitcode 3 \
    $T '--test-case=gpu small shapes*' >"$logs/san_$tool.log" 2>&1 & sp+=($!)
done
wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?
rs=(); for p in "${sp[@]}"; do wait "$p"; rs+=($?); done
wait $ps; rsoak=$?
echo "suite, sanitizers, soak done $(since)"
reco=skipped
if [ "$quick" != 1 ]; then
MLAJIT_CACHE_DIR=/tmp/c1 MLAJIT_SKIP_BUILD=1 MLAJIT_BUILD_DIR=build-gpu OUT="$logs/eco" timeout 240 bash tools/bench/host_cost_on_gpu.sh >"$logs/eco.log" 2>&1
reco=$?; echo "eco rc=$reco $(since)"
export MLAJIT_CACHE_DIR=/tmp/c1
for a in "--heads 16,32 --batch 64 --s-q 64 --s-k 3064" "--heads 16 --batch 1 --s-q 4096 --s-k 7096"; do
  timeout 60 build-gpu/mlajit-bench --kv fp8 --topk 2048 $a --reps 10 >>"$logs/batch_bench.log" 2>&1
done
timeout 90 build-gpu/mlajit-bench --ops mha,masked --heads 128,16 --s-q 8192 --reps 15 >"$logs/mha_bench.log" 2>&1
timeout 60 build-gpu/mlajit-bench --ops mha,masked --heads 16 --s-q 16384 --reps 15 >>"$logs/mha_bench.log" 2>&1
for v in 0 1 0 1; do  # the 64-head kernel's persistent grid (MLAJIT_MQA_PERSIST64) against one block a token and head block
  echo "MLAJIT_MQA_PERSIST64=$v" >>"$logs/persist64_bench.log"
  MLAJIT_MQA_PERSIST64=$v timeout 60 build-gpu/mlajit-bench --ops mqa --heads 64,128 --s-q 8192 --topk 2048 --reps 20 >>"$logs/persist64_bench.log" 2>&1
done
echo "benches done $(since)"
fi
echo "=== one call, batch (planned vs forced)"; grep -E "^(call_bf16|call_fp8) " "$logs/batch_bench.log" 2>/dev/null
echo "=== MHA through the library"; grep -E "^(mha|masked) " "$logs/mha_bench.log" 2>/dev/null
echo "=== sparse MQA, MLAJIT_MQA_PERSIST64=0 / 1 alternated"; grep -E "^MLAJIT_MQA_PERSIST64|,mqa," "$logs/persist64_bench.log" 2>/dev/null
echo "=== host cost"; grep -E "api\.|split\.gemm|split\.launch|first\.call_warm|custom op|ctypes function|SUMMARY" "$logs/eco.log" 2>/dev/null | head -20
echo "=== soak"; grep -E "FIGURE|test cases" "$logs/soak.log" | cut -c1-700
echo "=== sanitizers"; for t in memcheck racecheck synccheck initcheck; do echo "$t: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$logs/san_$t.log" 2>/dev/null | tr '\n' ' ')"; done
echo "=== suite"; grep -hE "^\[doctest\] (test cases|assertions)" "$logs"/suite?.log
echo "SUMMARY: suite rc $r1/$r2/$r3 (r2 + 10: suite4, the run without the persistent grid; + 100: suite5, with the 64-head one), sanitizers rc ${rs[*]} (memcheck racecheck synccheck initcheck), soak rc $rsoak, eco rc $reco ($(since)); logs in logs.tgz"
