#!/usr/bin/env bash
# The top-k mask build's variants side by side on the GPU machine (nvcc, seconds): every variant checked
# word for word against a CPU reference (DSA-like causal top-k indices, a varlen batch with an unaligned
# index stride for the scalar path), then timed beside a read-only and a copy kernel over the same bytes.
# Usage: OLD_KSRC=<dir with topk_mask/sm80.cuh of an older version> bash tools/dev/mask/build_run.sh [bd]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ksrc="$here/../../../kernels_src"
bd="${1:-/tmp/maskb}"; mkdir -p "$bd"
F=(-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I "$ksrc")
pids=()
v() {  # name rpb [extra]
    local n=$1 r=$2; shift 2
    nvcc "$@" "${F[@]}" -DWRPB=$r -DWNAME=$n -c "$here/wrap.cu" -o "$bd/$n.o" >"$bd/$n.log" 2>&1 &
    pids+=($!)
}
for r in 1 2 4 8; do v r$r $r; done
oldf=()
if [ -n "${OLD_KSRC:-}" ]; then v old4 4 -I "$OLD_KSRC"; oldf=(-DWITH_OLD); fi
nvcc "${F[@]}" "${oldf[@]}" -c "$here/bench.cu" -o "$bd/bench.o" >"$bd/bench.log" 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || { cat "$bd"/*.log; exit 1; }; done
nvcc "${F[@]}" "$bd"/*.o -o "$bd/maskbench"
"$bd/maskbench" ${MASKBENCH_ARGS:-}
