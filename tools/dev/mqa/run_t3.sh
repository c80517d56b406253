#!/bin/bash
# Session 20's last device call (short): O^T's rescale pinned before the wgmma fence (h16sm90tpin) against the shipped
# form in the harness (checks, 8k paged bench at 16 heads); the shipped keys-as-M kernel through the library (Release build of mlajit-bench
# only; mlajit-bench --ops mqa at 16 heads, 8k, checked), and racecheck of the 64-head kernel beside it in the harness
# (prebuilt: CFG_FILE=configs_t1.h BUILD=build_t1 bash build.sh; carry ["tools/dev/mqa/build_t1", ".devdeps"]).
#   run: OUT=$OUT bash tools/dev/mqa/run_t3.sh      (about 2 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_BUILD_TESTS=OFF "${prefix[@]}" > $OUT/configure.log 2>&1 &&
  cmake --build build-gpu -j 16 --target mlajit-bench > $OUT/build.log 2>&1 ) &
bpid=$!
H=tools/dev/mqa/build_t1/harness
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 30 compute-sanitizer --tool racecheck --print-limit 3 $H --configs h64sm90 --sanitize > $OUT/san_racecheck_h64sm90.log 2>&1
echo "racecheck h64sm90 rc $? : $(grep -E 'RACECHECK SUMMARY|checks' $OUT/san_racecheck_h64sm90.log | tr '\n' ' ')"
timeout 30 $H --no-bench --configs h16sm90tpin --log $OUT/check_pin.log > /dev/null 2>&1; echo "check pin rc $?"; grep -E "FAIL|checks" $OUT/check_pin.log | head -5
timeout 60 $H --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90tpin --reps 5 --log $OUT/bench_pin.log > /dev/null 2>&1
echo "bench pin rc $?"; sed -n '/^config/,$p' $OUT/bench_pin.log
wait $bpid; echo "library build rc $?"; grep -E "error" -A4 $OUT/build.log | head -10
MLAJIT_CACHE_DIR=/tmp/mlajit-t3-cache timeout 60 build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench.csv 2> $OUT/lib_bench.err
echo "library bench rc $?"; cut -d, -f3-9,13 $OUT/lib_bench.csv
MLAJIT_CACHE_DIR=/tmp/mlajit-t3-cache MLAJIT_TIER=portable timeout 60 build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench_portable.csv 2>&1
echo "library bench, portable tier rc $?"; cut -d, -f3-9,13 $OUT/lib_bench_portable.csv | tail -1
