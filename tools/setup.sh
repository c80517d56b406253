#!/usr/bin/env bash
# Installs what building mlajit needs from Debian/Ubuntu packages (the CUDA toolkit is expected at
# /usr/local/cuda or $CUDA_HOME). Safe to re-run: skips apt when every header is already there.
set -euo pipefail
need=0
for h in /usr/include/fmt/format.h /usr/include/spdlog/spdlog.h /usr/include/doctest/doctest.h /usr/include/xxhash.h \
         /usr/include/nlohmann/json.hpp /usr/include/CLI/CLI.hpp; do
  [ -f "$h" ] || need=1
done
command -v cmake >/dev/null || need=1
command -v ninja >/dev/null || need=1
command -v g++ >/dev/null || need=1
command -v pkg-config >/dev/null || need=1  # tools/check_install.sh builds the examples with it too
if [ "$need" = 1 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
    g++ cmake ninja-build pkg-config python3 libfmt-dev libspdlog-dev doctest-dev libxxhash-dev nlohmann-json3-dev libcli11-dev
fi
cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ] || [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "setup: CUDA toolkit headers not found under $cuda/include (cuda.h, nvrtc.h)." >&2
  echo "setup: install the CUDA toolkit (12.0 or newer) or set CUDA_HOME to its folder." >&2
  exit 1
fi
