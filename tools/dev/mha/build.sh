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
mha() {  # name bm bn warps masked stages [extra nvcc flags...]
    local n=$1 bm=$2 bn=$3 w=$4 m=$5 st=$6; shift 6
    "$NVCC" "${FLAGS[@]}" -Xptxas -v -DWBM=$bm -DWBN=$bn -DWW=$w -DWMASK=$m -DWST=$st -DWNAME=$n "$@" \
        -c "$here/wrap_mha.cu" -o "$bd/$n.o" > "$bd/$n.log" 2>&1 || { cat "$bd/$n.log"; exit 1; }
}
mha90() {  # name masked pingpong [extra nvcc flags, placed first: an -I there goes ahead of kernels_src]
    local n=$1 m=$2 pp=$3; shift 3
    "$NVCC" "$@" "${FLAGS[@]}" -I "$here/../../../src" -Xptxas -v -DWMASK=$m -DWPP=$pp -DWNAME=$n \
        -c "$here/wrap_mha90.cu" -o "$bd/$n.o" > "$bd/$n.log" 2>&1 || { cat "$bd/$n.log"; exit 1; }
}
msk() {  # name rpb
    "$NVCC" "${FLAGS[@]}" -Xptxas -v -DWRPB=$2 -DWNAME=$1 -c "$here/wrap_mask.cu" -o "$bd/$1.o" > "$bd/$1.log" 2>&1 \
        || { cat "$bd/$1.log"; exit 1; }
}
# name (also the launcher suffix in harness.cu), BLOCK_M, BLOCK_N, WARPS, STAGES, extra nvcc flags
# MJ_NO_PORTABLE=1: skip the portable configs (and build the harness without them: -DNO_PORTABLE).
hflags=()
[ "${MJ_NO_PORTABLE:-0}" = 1 ] && hflags=(-DNO_PORTABLE)
while read -r n bm bn w st x; do
    [ "${MJ_NO_PORTABLE:-0}" = 1 ] && continue
    for m in 0 1; do
        sfx=d; [ $m = 1 ] && sfx=m
        mha ${n}_$sfx $bm $bn $w $m $st $x & pids+=($!)
    done
done <<'CFGS'
c128x64x8x2 128 64 8 2
c64x64x4x2 64 64 4 2
c64x32x4x2 64 32 4 2
c128x128x8x2 128 128 8 2
CFGS
for pp in 0 1; do
    n=h90np; [ $pp = 1 ] && n=h90pp
    mha90 ${n}_d 0 $pp & pids+=($!)
    mha90 ${n}_m 1 $pp & pids+=($!)
done
# Masked breakdown knobs of mha/sm90.cuh (MJ_MASK_EXP; harness-only, outputs of 1 and 2 are wrong by design):
# x1 = mask box kept, bit test compiled out; x2 = bit test kept, no mask box; x4 = no tile-bitmap scan
# (correct, no tile skipping); x8 = the 2026-12-03 per-score bit test instead of the compacted one.
# Masked objects only: the knob acts on MJ_MASKED alone, so the harness runs h90pp's dense object as their
# dense kernel.
for e in 1 2 4 8; do
    mha90 h90x${e}_m 1 1 -DMJ_MASK_EXP=$e & pids+=($!)
done
# OLD_KSRC=<dir holding mha/sm90.cuh and topk_mask/sm80.cuh of an older version, nothing else>: built as
# h90old and oldrpb4 for a side-by-side timing in the same call (the harness then needs -DWITH_OLD). The
# older mha/sm90.cuh compiles against this tree's mlajit_abi.h and sm90.cuh (it reads the maps by name).
if [ -n "${OLD_KSRC:-}" ]; then
    mha90 h90old_d 0 1 -I "$OLD_KSRC" & pids+=($!)
    mha90 h90old_m 1 1 -I "$OLD_KSRC" & pids+=($!)
    "$NVCC" -I "$OLD_KSRC" "${FLAGS[@]}" -DWRPB=4 -DWNAME=oldrpb4 -c "$here/wrap_mask.cu" -o "$bd/oldrpb4.o" > "$bd/oldrpb4.log" 2>&1 &
    pids+=($!)
    hflags+=(-DWITH_OLD)
fi
msk rpb4 4 & pids+=($!)
msk rpb1 1 & pids+=($!)
msk rpb8 8 & pids+=($!)
msk rpb16 16 & pids+=($!)
"$NVCC" "${FLAGS[@]}" "${hflags[@]}" -c "$here/harness.cu" -o "$bd/harness.o" & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[ $fail = 0 ] || { echo "build failed"; exit 1; }
for f in "$bd"/h90*.log "$bd"/c*.log "$bd"/rpb*.log; do
    [ -f "$f" ] || continue
    echo "$(basename "$f" .log): $(grep -h -E 'registers|spill' "$f" | grep -v 'Compiling' | tr -s ' ' | tr '\n' ' ')"
done
"$NVCC" "${FLAGS[@]}" "$bd"/*.o -o "$bd/harness" -lpthread -ldl
echo "built $bd/harness"
