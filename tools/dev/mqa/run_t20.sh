#!/bin/bash
# Session 25 (issue 16): the keys-as-M kernel on the FP8 cache with the dequantizing producer (configs_t20.h) at 16 heads
# (and 32: two 16-head blocks against the 64-head kernels), its timing forms, the FP8 dequantization's instruction rates
# (tools/dev/cvtbench), sanitizers on it; the library built beside it with the new pick (FP8 at <= 16 heads on the Hopper
# tier, the one call reading the FP8 pages in place): its sparse / FP8 GPU tests and mlajit-bench --kv fp8 (issue 16's
# TP8 shape) and the op at 16 heads.
# Prebuilt: CFG_FILE=configs_t20.h BUILD=build_t20 bash build.sh; nvcc ... -o tools/dev/cvtbench/build/cvtbench (see its header)
# carry ["tools/dev/mqa/build_t20", "tools/dev/cvtbench/build", ".devdeps"].   run: OUT=$OUT bash tools/dev/mqa/run_t20.sh
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs &
bpid=$!
N=tools/dev/mqa/build_t20/harness
export MLAJIT_CACHE_DIR=/tmp/mlajit-t20-cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 $N --no-bench --configs h16sm90t,h16sm90t8,h16sm90t8u,h16sm90t8w,h16sm90t8f,h16n32s2f8,h16n32s2 --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
b() { timeout 100 $N --no-check --paged --bench-s 8192 --bench-heads $1 --bench-configs $2 --reps 5 --log $OUT/logs/$3.log > /dev/null 2>&1
      echo "$3 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/$3.log | grep -v '^config'; }
echo "config            heads        ms      TFLOP/s  TFLOP/s valid  gather TB/s check"
b 16 h16sm90t,h16sm90tg4,h16sm90t8,h16sm90t8g4,h16sm90t8raw,h16sm90t8u,h16sm90t8w,h16sm90t8wg4,h16sm90t8f,h16n32s2f8 b16
b 32 h16sm90t8,h16sm90t8w,h64sm90f8,h64sm90 b32
timeout 60 tools/dev/cvtbench/build/cvtbench > $OUT/logs/cvtbench.log 2>&1; echo "cvtbench rc $? $(el)"
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for k in h16sm90t8 h16sm90t; do
  $CUOBJ -sass tools/dev/mqa/build_t20/k_$k.o > $OUT/logs/sass_$k.txt 2>&1
  echo "sass $k: $(grep -oE '\b(F2FP[A-Z0-9.]*|HADD2\.F32|F2F[A-Z0-9.]*|FMUL|PRMT|LDS[A-Z0-9.]*|STS[A-Z0-9.]*|LDG[A-Z0-9.]*|HGMMA[A-Z0-9.]*)' $OUT/logs/sass_$k.txt | sort | uniq -c | sort -rn | head -12 | tr '\n' ' ')"
done
$CUOBJ -sass tools/dev/cvtbench/build/cvtbench > $OUT/logs/sass_cvtbench.txt 2>&1
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --print-limit 5 $N --configs h16sm90t8 --sanitize > $OUT/logs/san_${tool}.log 2>&1
  echo "$tool h16sm90t8 rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/logs/san_${tool}.log | tr '\n' ' ') $(el)"
done
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
timeout 200 build-gpu/mlajit_gpu_tests -tc="*sparse MQA*,*fp8*,*agree on DSA*,*mla_prefill gives the DSA*,*mla_prefill takes the engine*,*chunked*" > $OUT/logs/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/logs/gpu_tests.log | head -8
timeout 100 compute-sanitizer --tool racecheck --print-limit 5 build-gpu/mlajit_gpu_tests -tc="*small shapes: sparse MQA*,*small shapes: fp8*" > $OUT/logs/lib_racecheck.log 2>&1
echo "library racecheck rc $? : $(grep -E 'RACECHECK SUMMARY|test cases' $OUT/logs/lib_racecheck.log | tr '\n' ' ') $(el)"
timeout 150 build-gpu/mlajit-bench --kv fp8 --heads 16 --batch 8 --s-q 1024 --s-k 33792 --reps 10 > $OUT/logs/lib_fp8.csv 2> $OUT/logs/lib_fp8.err
echo "library fp8 bench rc $? $(el)"; cut -d, -f2-4,9-11 $OUT/logs/lib_fp8.csv
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
