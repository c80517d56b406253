#!/bin/bash
# Session 22's first device call: the keys-as-M kernel's split schedule (configs_t13.h) against the shipped alternate-tile
# schedule: checks of every case, the 8k paged bench at 16 and 32 heads (and 16 heads contiguous / scattered padding),
# memcheck, synccheck and racecheck of the split forms. Prebuilt: CFG_FILE=configs_t13.h BUILD=build_t13 bash build.sh;
# carry ["tools/dev/mqa/build_t13", ".devdeps"]. Beside it the library is built (GPU tests, mlajit-bench), and the sparse MQA
# GPU tests and mlajit-bench at 16 heads run with the split forms compiled in (MLAJIT_NVRTC_FLAGS=-DMJ_MQA90T_SPLIT=k).
#   run: OUT=$OUT bash tools/dev/mqa/run_t13.sh      (about 5 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
bash tools/dev/mqa/lib_build.sh $OUT &
bpid=$!
t0=$(date +%s)
H=tools/dev/mqa/build_t13/harness
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 $H --no-bench --log $OUT/check.log > $OUT/check.out 2>&1; echo "check rc $?"
grep -E "checks" $OUT/check.log; grep -E "FAIL" $OUT/check.log | cut -c1-160 | sort | uniq -c | head
B16=h16sm90t,h16sm90tk1,h16sm90tk2,h16sm90tk2m
timeout 120 $H --no-check --paged --bench-s 8192 --bench-heads 16,32 --bench-configs $B16,h32sm90t,h32sm90tk1,h32sm90tk2,h64sm90 \
  --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $?"; sed -n '/^config/,$p' $OUT/bench.log
timeout 60 $H --no-check --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90tk1,h16sm90tk2 --reps 5 --log $OUT/bench_contig.log > /dev/null 2>&1
echo "bench contiguous rc $?"; sed -n '/^config/,$p' $OUT/bench_contig.log
timeout 60 $H --no-check --paged --scatter --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90tk1,h16sm90tk2 --reps 5 --log $OUT/bench_scatter.log > /dev/null 2>&1
echo "bench scattered rc $?"; sed -n '/^config/,$p' $OUT/bench_scatter.log
for c in h16sm90tk1 h16sm90tk2 h32sm90tk2; do
  for tool in memcheck synccheck; do
    timeout 60 compute-sanitizer --tool $tool --print-limit 3 $H --configs $c --sanitize > $OUT/san_${tool}_$c.log 2>&1
    echo "$tool $c rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/san_${tool}_$c.log | tr '\n' ' ')"
  done
done
timeout 90 compute-sanitizer --tool racecheck --print-limit 5 $H --configs h16sm90tk2 --sanitize > $OUT/san_racecheck_h16sm90tk2.log 2>&1
echo "racecheck h16sm90tk2 rc $? : $(grep -E 'RACECHECK SUMMARY|checks' $OUT/san_racecheck_h16sm90tk2.log | tr '\n' ' ')"
wait $bpid; echo "library build rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "error" -A4 $OUT/build.log | head -10
for k in 2; do
  MLAJIT_NVRTC_FLAGS=-DMJ_MQA90T_SPLIT=$k MLAJIT_CACHE_DIR=/tmp/mlajit-t13-cache timeout 150 build-gpu/mlajit_gpu_tests \
    -tc="*sparse MQA over heads*,*sparse MQA contract*,*NaN or inf in sparse MQA*,*agree on DSA*,*small shapes: sparse MQA*" > $OUT/gpu_tests_split$k.log 2>&1
  echo "gpu tests split $k rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/gpu_tests_split$k.log | head -8
done
for k in 0 2; do
  MLAJIT_NVRTC_FLAGS=-DMJ_MQA90T_SPLIT=$k MLAJIT_CACHE_DIR=/tmp/mlajit-t13-cache timeout 60 build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench_split$k.csv 2> $OUT/lib_bench_split$k.err
  echo "library bench split $k rc $?"; cut -d, -f3-9,13 $OUT/lib_bench_split$k.csv
done
