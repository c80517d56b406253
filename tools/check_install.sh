#!/usr/bin/env bash
# Checks the installed package the way a user consumes it: installs the build (default build/, or
# $MLAJIT_BUILD_DIR) into a fresh prefix, moves the prefix elsewhere (nothing may point back at the source
# or build tree, or at the prefix given at install time), then builds examples/ against it twice, with
# find_package(mlajit) and with pkg-config, and runs both programs: the planner everywhere, a checked
# prefill where a GPU exists (skipped, saying so, elsewhere). Needs a finished build (tools/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD"
build="${MLAJIT_BUILD_DIR:-build}"
[ -f "$build/CMakeCache.txt" ] || { echo "check_install: no build in $build: run tools/build.sh first" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/mlajit-install-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "check_install: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/staged" >/dev/null
mv "$work/staged" "$work/prefix"  # relocated: the package must find itself from where it lies
prefix="$work/prefix"

# What a user expects to find.
[ -f "$prefix/include/mlajit/mlajit.h" ] && [ -f "$prefix/include/mlajit/mlajit.hpp" ] || fail "headers missing"
[ -x "$prefix/bin/mlajit-warmup" ] || fail "bin/mlajit-warmup missing"
pc="$(find "$prefix" -name mlajit.pc -path '*pkgconfig*' | head -1)"
[ -n "$pc" ] || fail "mlajit.pc missing"
[ -n "$(find "$prefix" -name mlajitConfigVersion.cmake)" ] || fail "CMake package version file missing"
lib="$(find "$prefix" -name 'libmlajit.so' | head -1)"
[ -n "$lib" ] || fail "libmlajit.so (the development symlink) missing"
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
[[ "$soname" =~ ^libmlajit\.so\.[0-9]+(\.[0-9]+)?$ ]] || fail "SONAME is '$soname', expected libmlajit.so.<version>"
[ -e "$(dirname "$lib")/$soname" ] || fail "$soname (the SONAME link) missing next to libmlajit.so"
if readelf -d "$lib" | grep -E 'NEEDED.*(libcuda|libnvrtc|libcublas|libstdc\+\+)' >/dev/null; then
  fail "libmlajit.so links a CUDA library or libstdc++ (they must be dlopen'ed / static): $(readelf -d "$lib" | grep NEEDED)"
fi
# The package's text files (binaries carry source paths in their debug info, which is harmless).
pkgfiles=$(find "$prefix" -name '*.cmake' -o -name '*.pc')
if grep -l -e "$src" -e "$work/staged" $pkgfiles >/dev/null; then
  fail "package files name the source tree or the install-time prefix: $(grep -l -e "$src" -e "$work/staged" $pkgfiles)"
fi
"$prefix/bin/mlajit-warmup" --help >/dev/null || fail "installed mlajit-warmup does not run"
echo "check_install: installed and relocated to $prefix: SONAME $soname, $(cd "$prefix" && find . -type f | wc -l) files"

# The examples see only the installed package (their own folder holds no mlajit header).
cd "$work"
cmake -S "$src/examples" -B "$work/with-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release -DMLAJIT_EXAMPLES_WERROR=ON >/dev/null
cmake --build "$work/with-cmake" >/dev/null
echo "check_install: built examples with find_package(mlajit)"
"$work/with-cmake/plan_and_prefill_c"
"$work/with-cmake/mla_prefill_cpp"

export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pc_libdir="$(pkg-config --variable=libdir mlajit)"
mkdir -p "$work/with-pkgconfig"
cc -std=c99 -O2 -Wall -Wextra -Wpedantic -Werror -Wno-missing-field-initializers "$src/examples/c/plan_and_prefill.c" -o "$work/with-pkgconfig/c" \
   $(pkg-config --cflags --libs mlajit) -Wl,-rpath,"$pc_libdir" -ldl -lm
c++ -std=c++17 -O2 -Wall -Wextra -Wpedantic -Werror "$src/examples/cpp/mla_prefill.cpp" -o "$work/with-pkgconfig/cpp" \
   $(pkg-config --cflags --libs mlajit) -Wl,-rpath,"$pc_libdir" -ldl
echo "check_install: built examples with pkg-config (mlajit $(pkg-config --modversion mlajit))"
"$work/with-pkgconfig/c" >/dev/null || fail "the pkg-config build of the C example failed"
"$work/with-pkgconfig/cpp" >/dev/null || fail "the pkg-config build of the C++ example failed"
echo "check_install: ok"
