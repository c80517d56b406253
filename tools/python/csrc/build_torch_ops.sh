#!/usr/bin/env bash
# Builds libmlajit_torch.so (mlajit_torch.cpp) with the compiler alone, next to an already built libmlajit.so:
#   bash tools/python/csrc/build_torch_ops.sh <folder holding libmlajit.so> [python3]
# For a machine that runs a prebuilt library (e.g. the GPU machine, from binaries built elsewhere) and has
# torch and a C++ compiler but no time for a CMake build. CMake (MLAJIT_TORCH_OPS) does the same in a build.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
dir="$(cd "${1:?usage: build_torch_ops.sh <folder with libmlajit.so> [python3]}" && pwd)"
py="${2:-python3}"
[ -f "$dir/libmlajit.so" ] || { echo "build_torch_ops.sh: no $dir/libmlajit.so: build the library first" >&2; exit 1; }
read -r ver tdir abi < <("$py" -c 'import os, torch; print(torch.__version__, os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] && command -v nvcc >/dev/null; then cuda="$(dirname "$(dirname "$(command -v nvcc)")")"; fi
"${CXX:-g++}" -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra \
  -I"$root/include" -isystem "$tdir/include" -isystem "$tdir/include/torch/csrc/api/include" -isystem "$cuda/include" \
  -D_GLIBCXX_USE_CXX11_ABI="$abi" -DMLAJIT_TORCH_VERSION="\"$ver\"" \
  "$here/mlajit_torch.cpp" -o "$dir/libmlajit_torch.so" \
  -L"$dir" -lmlajit -L"$tdir/lib" -lc10 -ltorch_cpu -ltorch -lc10_cuda -Wl,-rpath,'$ORIGIN'
echo "built $dir/libmlajit_torch.so for torch $ver"
