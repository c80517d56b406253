#!/usr/bin/env bash
# Tensor-parallel start-up on a shared, empty kernel cache: N ranks (default 8; rank i on GPU i mod the
# GPU count) start together, each runs the one-call prefill (mlajit_mla_prefill, planned and with each
# path forced) over a mixed batch with DeepSeek-V3.2's TP8 shape (16 local heads), checked against the
# float64 reference; then we check from the logs that every kernel key was compiled by exactly
# one rank, that the cache holds one entry per key, and that a second start compiles nothing.
# Usage: tools/device/tp_ranks.sh [build dir] [ranks]. Run after tools/device/gpu_suite.sh built it.
# No NCCL is used (the ranks need no communication); NCCL_NVLS_ENABLE=0 stays set regardless.
set -uo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build-gpu}"
ranks="${2:-8}"
export NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { echo "tp_ranks: no GPU"; exit 1; }
cache=$(mktemp -d /tmp/mlajit-tp-cache.XXXX)
logs=$(mktemp -d /tmp/mlajit-tp-logs.XXXX)
run_ranks() {  # $1: round name
  local pids=()
  for ((r = 0; r < ranks; r++)); do
    CUDA_VISIBLE_DEVICES=$((r % ngpu)) MLAJIT_CACHE_DIR="$cache" MLAJIT_LOG_LEVEL=info \
      "$build/mlajit-check" --heads 16 --batch "${MLAJIT_TP_BATCH:-300:300,1500:3000,0:64,700:6000}" >"$logs/$1.rank$r.log" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  echo "$bad"
}
bad1=$(run_ranks first)
compiles=$(cat "$logs"/first.rank*.log | grep -o 'compiled [^ ]*' | sort | uniq -c)
dup=$(echo "$compiles" | awk '$1 > 1' | wc -l)
keys=$(echo "$compiles" | grep -c compiled)
entries=$(find "$cache" -name kernel.cubin | wc -l)
bad2=$(run_ranks second)
again=$(cat "$logs"/second.rank*.log | grep -c 'compiled ' || true)
echo "$compiles"
echo "TP ranks: $ranks on $ngpu GPU(s); failed ranks: first start $bad1, second $bad2; kernels compiled: $keys" \
     "(compiled by more than one rank: $dup); cache entries: $entries; compiles on the second start: $again"
[ "$bad1" = 0 ] && [ "$bad2" = 0 ] && [ "$dup" = 0 ] && [ "$entries" = "$keys" ] && [ "$again" = 0 ]
