#!/usr/bin/env bash
# Builds the harness: one nvcc object per kernel specialization (in parallel), then the harness.
# Usage: tools/dev/mha/build.sh [build-dir]   (run from anywhere; needs nvcc)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ksrc="$here/../../../kernels_src"
bd="${1:-$here/build}"
mkdir -p "$bd"
NVCC="${NVCC:-nvcc}"
FLAGS=(-std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -use_fast_math -lineinfo -I "$ksrc")
pids=()
mha() {  # name bm bn warps masked [stages]
    "$NVCC" "${FLAGS[@]}" -Xptxas -v -DWBM=$2 -DWBN=$3 -DWW=$4 -DWMASK=$5 -DWST=${6:-2} -DWNAME=$1 -c "$here/wrap_mha.cu" \
        -o "$bd/$1.o" > "$bd/$1.log" 2>&1 || { cat "$bd/$1.log"; exit 1; }
}
msk() {  # name rpb
    "$NVCC" "${FLAGS[@]}" -Xptxas -v -DWRPB=$2 -DWNAME=$1 -c "$here/wrap_mask.cu" -o "$bd/$1.o" > "$bd/$1.log" 2>&1 \
        || { cat "$bd/$1.log"; exit 1; }
}
mha m128_n64_w8_d 128 64 8 0 & pids+=($!)
mha m128_n64_w8_m 128 64 8 1 & pids+=($!)
mha m128_n64_w8_s3_d 128 64 8 0 3 & pids+=($!)
mha m128_n64_w8_s3_m 128 64 8 1 3 & pids+=($!)
mha m64_n64_w4_d 64 64 4 0 & pids+=($!)
mha m64_n64_w4_m 64 64 4 1 & pids+=($!)
mha m64_n32_w4_d 64 32 4 0 & pids+=($!)
mha m64_n32_w4_m 64 32 4 1 & pids+=($!)
msk rpb4 4 & pids+=($!)
msk rpb1 1 & pids+=($!)
"$NVCC" "${FLAGS[@]}" -c "$here/harness.cu" -o "$bd/harness.o" & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail = 0 ] || { echo "build failed"; exit 1; }
for f in "$bd"/m*.log "$bd"/rpb*.log; do
    echo "$(basename "$f" .log): $(grep -h -E 'registers|spill' "$f" | grep -v 'Compiling' | tr -s ' ' | tr '\n' ' ')"
done
"$NVCC" "${FLAGS[@]}" "$bd"/*.o -o "$bd/harness" -lpthread
echo "built $bd/harness"
