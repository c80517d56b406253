#!/usr/bin/env bash
# SASS of the Hopper kernels (MHA dense/masked, sparse MQA bf16/FP8) and four portable sparse MQA tiles at the
# runtime's specializations, one normalized .sass file per kernel (addresses and comments dropped), for telling
# a refactor that must not change code from one that does:
#   tools/dev/sass_snapshot.sh /tmp/before; (edit); tools/dev/sass_snapshot.sh /tmp/after; diff -r /tmp/before /tmp/after
# Needs NVRTC (the toolkit's) and nvdisasm (NVDISASM=<path>; the toolkit's, or the nvidia-cuda-nvdisasm wheel's).
# These compiles use the kernel harnesses' options (--use_fast_math), NOT the runtime's (compiler.cpp: no fast
# math), so their SASS is not what the library launches. For that, give a build folder with mlajit-nvrtc-time:
#   tools/dev/sass_snapshot.sh OUTDIR BUILD_DIR [mlajit-nvrtc-time flags, e.g. --drop -lineinfo]
# snapshots every sm_90a variant of the default model (all tensor-parallel degrees) through the library's own
# compile path (same source, headers and options as a cache miss).
set -euo pipefail
out=$(realpath -m "${1:?usage: sass_snapshot.sh OUTDIR [BUILD_DIR [mlajit-nvrtc-time flags]]}"); mkdir -p "$out"
build=${2:+$(realpath "$2")}
cd "$(dirname "$0")/../.."
dis=${NVDISASM:-$(command -v nvdisasm || echo /usr/local/cuda/bin/nvdisasm)}
[ -x "$dis" ] || { echo "nvdisasm not found at $dis: set NVDISASM=<path>" >&2; exit 1; }
normalize() { "$dis" -c "$1" | grep -vE '^\s*(//|\.)' | sed -E 's#/\*[0-9a-f]+\*/##; s#;.*##' | grep -v '^\s*$'; }
if [ -n "$build" ]; then
  shift 2
  "$build/mlajit-nvrtc-time" --reps 1 --cubin-dir "$out" "$@" >"$out/nvrtc_time.log"
  for c in "$out"/*.cubin; do
    normalize "$c" >"${c%.cubin}.sass"
    echo "$(basename "${c%.cubin}"): $(wc -l <"${c%.cubin}.sass") instructions"
  done
  exit 0
fi
cubin=tools/dev/mqa/nvrtc_cubin.py
mqa90=(--template sparse_mqa/sm90.cuh -D MJ_BLOCK_H=64 -D MJ_BLOCK_N=64 -D MJ_STAGES=2 -D MJ_D_LATENT=512 -D MJ_D_ROPE=64 -D MJ_ARCH=90)
mha90=(--template mha/sm90.cuh -D MJ_BLOCK_M=128 -D MJ_BLOCK_N=128 -D MJ_STAGES=2 -D MJ_PINGPONG=1 -D MJ_D_NOPE=128 -D MJ_D_ROPE=64 -D MJ_D_V=128 -D MJ_ARCH=90)
pids=()
for f in 0 1; do python3 $cubin "$out/mqa90_fp8$f.cubin" "${mqa90[@]}" -D MJ_KV_FP8=$f >"$out/mqa90_fp8$f.log" 2>&1 & pids+=($!); done
for m in 0 1; do python3 $cubin "$out/mha90_masked$m.cubin" "${mha90[@]}" -D MJ_MASKED=$m >"$out/mha90_masked$m.log" 2>&1 & pids+=($!); done
for t in "64 32 0" "16 32 0" "32 32 1" "64 32 1"; do
  set -- $t
  python3 $cubin "$out/mqa80_$1x$2_fp8$3.cubin" --arch sm_80 --template sparse_mqa/sm80.cuh -D MJ_BLOCK_H=$1 -D MJ_BLOCK_N=$2 \
    -D MJ_WARPS=8 -D MJ_STAGES=2 -D MJ_D_LATENT=512 -D MJ_D_ROPE=64 -D MJ_KV_FP8=$3 -D MJ_ARCH=80 >"$out/mqa80_$1x$2_fp8$3.log" 2>&1 & pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ $rc = 0 ] || { echo "a compile failed: see $out/*.log" >&2; exit 1; }
for c in "$out"/*.cubin; do
  normalize "$c" >"${c%.cubin}.sass"
  echo "$(basename "${c%.cubin}"): $(wc -l <"${c%.cubin}.sass") instructions, $(grep -o 'Used [0-9]* registers' "${c%.cubin}.log" | head -1)"
done
