#!/bin/bash
# Session 21's device call: the keys-as-M kernel on the FP8 cache (sparse_mqa/sm90_t_fp8.cuh). Harness checks of every
# FP8 variant (float64 of the dequantized rows), the 8k paged bench at 16 heads beside the bf16 keys-as-M kernel and
# the portable FP8 tile, compute-sanitizer on the sanitize case; then the library (Release, built here in the
# background): the sparse MQA / FP8 GPU tests with the runtime's new pick, and mlajit-bench --kv fp8 at 16 heads.
# Prebuilt harness: CFG_FILE=configs_t8.h BUILD=build_t8 bash build.sh; carry ["tools/dev/mqa/build_t8", ".devdeps"].
#   run: OUT=$OUT bash tools/dev/mqa/run_t8.sh      (about 6 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT &
bpid=$!
H=tools/dev/mqa/build_t8/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F8="h16sm90t8,h16sm90t8s2,h16sm90t8s5,h16sm90t8i"
timeout 90 $H --no-bench --configs $F8,h16sm90tpin --log $OUT/check.log > $OUT/check.out 2>&1; echo "check rc $?"
grep -E "FAIL|PASS|checks" $OUT/check.log | tail -30
timeout 150 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs $F8,h16sm90t8mo,h16sm90t8go,h16sm90t,h16sm90tpin,h16n32s2f8 --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
for tool in memcheck synccheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --print-limit 5 $H --configs h16sm90t8 --sanitize > $OUT/san_$tool.log 2>&1
  echo "$tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ')"
done
wait $bpid; echo "library build rc $?"; grep -E "error" -A4 $OUT/build.log | head -10
MLAJIT_CACHE_DIR=/tmp/mlajit-t8-cache timeout 200 build-gpu/mlajit_gpu_tests \
  -tc="*sparse MQA on the FP8*,*fp8 cache, the sparse path*,*NaN or inf in sparse MQA*" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $?"; grep -E "test cases|assertions|FAILED|ERROR" $OUT/gpu_tests.log | head -12
MLAJIT_CACHE_DIR=/tmp/mlajit-t8-cache timeout 120 build-gpu/mlajit-bench --kv fp8 --heads 16 --batch 8 --s-q 1024 --s-k 33792 \
  --reps 10 > $OUT/lib_fp8.csv 2> $OUT/lib_fp8.err
echo "library fp8 bench rc $?"; cat $OUT/lib_fp8.csv | cut -c1-200
