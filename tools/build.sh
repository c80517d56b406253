#!/usr/bin/env bash
# Configures and builds mlajit into ${MLAJIT_BUILD_DIR:-build} (Release with debug info, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build="${MLAJIT_BUILD_DIR:-build}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLAJIT_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
