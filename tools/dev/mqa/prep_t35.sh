#!/bin/bash
# On the CPU machine, before a run_t35 call: rebuilds every cache it carries from git, where this machine lacks them (they
# are git-ignored; session 35 found no device and left them in place). Each comes from one commit's kernels_src, through the
# library's MLAJIT_KERNELS_DIR, so its keys are those a run with the same MLAJIT_KERNELS_DIR looks up:
#   build_t33/kernels_old, kernels_n: d2fb902's and 3a6c822's kernels_src (the pointer form; the 32-bit form everywhere)
#   build_t32/A: d2fb902 through NVRTC    build_t33/N: 3a6c822 through NVRTC    build_t33/B: A's entries with nvcc's cubins
# PREP_ROOT (default tools/dev/mqa) puts them elsewhere, e.g. to compare a rebuild with the caches in place. Needs
# build/mlajit-warmup built from this tree (cmake --build build; run_t35 also carries build/mlajit-bench), or WARMUP=another
# warmup binary (prep_t37.sh: 710580a's), and nvcc
# (/usr/local/cuda/bin). About 1 minute. Checked in session 35: rebuilt under /tmp, every key, built_by and cubin .text equal
# to the caches in place.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${PREP_ROOT:-tools/dev/mqa}
W=$(realpath "${WARMUP:-build/mlajit-warmup}")  # prep_t37.sh passes 710580a's (keys without the 64-head PERSIST parameter)
T=$R/build_t33
dump=$(mktemp -d)
trap 'rm -rf "$dump"' EXIT
rm -rf "$T" "$R/build_t32/A" && mkdir -p "$T/kernels_old" "$T/kernels_n" "$R/build_t32"
git archive d2fb902 kernels_src | tar -x -C "$T/kernels_old" --strip-components=1
git archive 3a6c822 kernels_src | tar -x -C "$T/kernels_n" --strip-components=1
T=$(realpath "$T")
export PATH="$PATH:/usr/local/cuda/bin"
MLAJIT_KERNELS_DIR="$T/kernels_n" MLAJIT_CACHE_DIR="$T/N" "$W" --tp 1,8 --arch sm_90a | tail -1
MLAJIT_KERNELS_DIR="$T/kernels_old" MLAJIT_DUMP_DIR="$dump" MLAJIT_CACHE_DIR="$R/build_t32/A" \
  "$W" --tp 1,8 --arch sm_90a | tail -1
cp -r "$R/build_t32/A" "$T/B"
MLAJIT_KERNELS_DIR="$T/kernels_old" python3 tools/dev/nvcc_cubins.py "$dump" "$T/B" \
  sparse_mqa_fwd_sm90t sparse_mqa_fwd_sm90 mha_fwd_sm90 | tail -1
rm -rf "$T/B/.nvcc_build"
du -sh "$T" "$R/build_t32/A"
