#!/usr/bin/env bash
# Builds the GEMM harness: one nvcc object per kernel specialization, then the harness (links cuBLASLt).
# Usage: tools/dev/gemm/build.sh [build-dir]   (needs nvcc; the binary runs where an sm_90 GPU is)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../../.."
bd="${1:-$here/build}"
mkdir -p "$bd"
NVCC="${NVCC:-nvcc}"
FLAGS=(-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -use_fast_math -lineinfo -I "$root/kernels_src" -I "$root/src")
v() {  # name bm bn nmajor k-steps
    "$NVCC" "${FLAGS[@]}" -Xptxas -v -DWBM=$2 -DWBN=$3 -DWNM=$4 -DWKT=$5 -DWNAME=$1 -c "$here/wrap_gemm90.cu" -o "$bd/$1.o" > "$bd/$1.log" 2>&1 \
        || { cat "$bd/$1.log"; exit 1; }
}
for bm in 128 64; do
    v m${bm}_n256_b0_t8 $bm 256 0 8 & p1=$!
    v m${bm}_n128_b0_t8 $bm 128 0 8 & p2=$!
    wait $p1 $p2
    v m${bm}_n256_b1_t2 $bm 256 1 2 & p1=$!
    v m${bm}_n128_b1_t2 $bm 128 1 2 & p2=$!
    wait $p1 $p2
done
"$NVCC" -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I "$root/kernels_src" -I "$root/src" -c "$here/harness.cu" -o "$bd/harness.o"
"$NVCC" -gencode=arch=compute_90a,code=sm_90a "$bd"/*.o -o "$bd/harness" -lcublasLt -ldl
grep -h "registers\|spill" "$bd"/m*.log | sort | uniq -c
