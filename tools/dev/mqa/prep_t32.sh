#!/bin/bash
# On the CPU machine, before a run_t32 call: the two caches it compares, from this tree (their keys name the kernel sources,
# so they must be rebuilt after any change under kernels_src/ and after rebuilding the library here):
#   build_t32/A: what NVRTC compiles (mlajit-warmup --tp 1,8 --arch sm_90a, MLAJIT_DUMP_DIR keeps each specialized .cu)
#   build_t32/B: the same entries with nvcc's cubins of those .cu files (tools/dev/nvcc_cubins.py)
# Needs build/mlajit-warmup built from this tree (cmake --build build --target mlajit-warmup). About 1.5 minutes.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=tools/dev/mqa/build_t32
rm -rf $D /tmp/prep_t32_dump && mkdir -p $D
MLAJIT_DUMP_DIR=/tmp/prep_t32_dump MLAJIT_CACHE_DIR=$D/A build/mlajit-warmup --tp 1,8 --arch sm_90a | tail -1
cp -r $D/A $D/B
python3 tools/dev/nvcc_cubins.py /tmp/prep_t32_dump $D/B sparse_mqa_fwd_sm90t sparse_mqa_fwd_sm90 mha_fwd_sm90 | tail -1
rm -rf $D/B/.nvcc_build
du -sh $D
