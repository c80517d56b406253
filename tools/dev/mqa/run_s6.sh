#!/bin/bash
# Session 19's device call: (1) sparse MQA sm90 schedules 1 and 2 after schedule 2's racecheck mends, with their
# parts (math alone, gather alone) in one run (prebuilt harness: CFG_FILE=configs_s6.h bash tools/dev/mqa/build.sh
# on the CPU machine; carry ["tools/dev/mqa/build", ".devdeps"]); (2) issue 15's host cost, two runs of
# tools/bench/host_cost.py (per-call rows only) on a Release build with the C++ torch ops, built in the
# background while the harness runs, and the torch ops' tests once. Logs under $OUT, tables last.
#   run: OUT=$OUT bash tools/dev/mqa/run_s6.sh      (about 7 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/hc
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
build=build-hc
( cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_BUILD_TESTS=OFF -DMLAJIT_TORCH_OPS=AUTO \
    -DPython3_EXECUTABLE="$(command -v python3)" "${prefix[@]}" > $OUT/hc/configure.log 2>&1 &&
  targets=(mlajit mlajit-warmup mlajit-host-cost) && { grep -q "building libmlajit_torch.so" $OUT/hc/configure.log && targets+=(mlajit_torch); true; } &&
  nice cmake --build $build -j 12 --target "${targets[@]}" > $OUT/hc/build.log 2>&1; echo $? > $OUT/hc/build.rc ) &
bpid=$!
( cd tools/dev/mqa && CHECK_CONFIGS=h64sm90,h64sm90w2,h64sm90w2e BENCH_HEADS=128 \
  BENCH_CONFIGS=h64sm90,h64sm90w2,h64sm90w2e,h64sm90mo,h64sm90go,h64sm90w2mo,h64sm90w2go CONTIG_CONFIGS= \
  SAN_CONFIGS=h64sm90w2,h64sm90w2e SAN_TOOLS="racecheck synccheck" SAN_T=60 CHECK_T=100 BENCH_T=150 \
  OUT=$OUT bash run_s4.sh > $OUT/harness.txt 2>&1 )
wait $bpid
if [ "$(cat $OUT/hc/build.rc 2>/dev/null)" != 0 ]; then grep -E "error" -A4 $OUT/hc/build.log $OUT/hc/configure.log | head -30; echo "library build failed"; cat $OUT/harness.txt; exit 1; fi
grep -E "libmlajit_torch" $OUT/hc/configure.log
MLAJIT_BUILD_DIR=$build MLAJIT_SKIP_BUILD=1 MLAJIT_HOST_COST_QUICK=1 OUT=$OUT/hc timeout 240 bash tools/bench/host_cost_on_gpu.sh > $OUT/hc/run1.txt 2>&1
tail -3 $OUT/hc/run1.txt
export MLAJIT_LIBRARY="$PWD/$build/libmlajit.so" MLAJIT_CACHE_DIR=/tmp/mlajit-host-cost-cache
for r in 2; do timeout 120 python3 tools/bench/host_cost.py --build $build --no-first-call > $OUT/hc/run$r.txt 2> $OUT/hc/run$r.err; done
echo "== host cost run 1 (with the torch ops tests)"; cat $OUT/hc/host_cost.txt
for r in 2; do echo "== host cost run $r"; grep -vE "^ +ctypes part" $OUT/hc/run$r.txt; done
cat $OUT/harness.txt
