#!/usr/bin/env bash
# The main job: build, warm the default cache for the default model (DeepSeek-V3.2, TP 1/2/4/8) and, on a
# machine with a GPU, run one checked prefill through the library (path choice, time, error vs float64).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
build="${MLAJIT_BUILD_DIR:-build}"
arch_flag=()
if ! "$build/mlajit-check" --has-gpu >/dev/null 2>&1; then
  arch_flag=(--arch "${MLAJIT_ARCH:-sm_90a}")  # no GPU here: build for the H100/H200 target
fi
"$build/mlajit-warmup" warmup --model deepseek-v3.2 --tp 1,2,4,8 "${arch_flag[@]}"
if "$build/mlajit-check" --has-gpu >/dev/null 2>&1; then
  "$build/mlajit-check"
else
  echo "main: no GPU on this machine: cache warmed; skipped the checked prefill"
fi
