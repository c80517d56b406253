#!/bin/bash
# Session 28, second harness call (after run_t24): the keys-as-M kernel with even barrier counts before its epilogue (the
# racecheck fix, now its code) and its persistent grid with each token's tile t in slot t % 2 (per; bit-identical to the
# one-block-a-token form expected). Checks with MQA_PERSIST_BLOCKS=3 (several tokens a block even in the small cases),
# memcheck / racecheck (2 blocks), 8k timing, then the library: racecheck on the GPU suite's small shapes and the sparse
# MQA suites (the new epilogue; with a workspace the persistent grid at 16 heads, compared bit for bit with the one-block-a-
# token form), mlajit-bench sparse MQA with / without it (and MLAJIT_MQA_PERSIST=0). carry ["tools/dev/mqa/build_t24", ".devdeps"].
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t24/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT  # the archive also when a step's timeout ends the script
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
phase=${1:-all}  # harness: the harness steps only (about a minute); all: then the library
[ $phase = all ] && { JOBS=10 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit_gpu_tests mlajit-bench & bp=$!; }
MQA_PERSIST_BLOCKS=3 timeout 100 $H --no-bench --configs h16sm90t_pre,h16sm90tper_pre,h16sm90t8_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
for tool in memcheck racecheck; do for c in h16sm90t_pre h16sm90tper_pre h16sm90t8_pre; do
  MQA_PERSIST_BLOCKS=2 timeout 60 compute-sanitizer --tool $tool --print-limit 4 $H --configs $c --sanitize > $OUT/logs/${tool}_$c.log 2>&1
  echo "$tool $c rc $? : $(grep -E 'SUMMARY' $OUT/logs/${tool}_$c.log) $(el)"
  grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/${tool}_$c.log | sort | uniq -c | head -4
done; done
timeout 80 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t_pre,h16sm90tper_pre,h16sm90tg4_pre,h16sm90tperg4_pre,h16sm90t8_pre --reps 5 --log $OUT/logs/b16.log > /dev/null 2>&1
echo "b16 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b16.log
[ $phase = harness ] && exit 0
wait $bp; echo "library build rc $? $(el)"
export MLAJIT_MQA_PERSIST=1  # the persistent grid (off by default until this runs)
T=build-gpu/mlajit_gpu_tests
MLAJIT_CACHE_DIR=/tmp/c2 timeout 90 $T '--test-case=gpu: sparse MQA*' > $OUT/logs/suite_mqa.log 2>&1
echo "sparse MQA suites rc $? $(el)"; tail -3 $OUT/logs/suite_mqa.log
MLAJIT_CACHE_DIR=/tmp/c2 timeout 60 build-gpu/mlajit-bench --ops mqa,mqa-nows --heads 16,128 --s-q 8192 --topk 2048 --reps 10 --csv $OUT/logs/mqa_bench.csv > $OUT/logs/mqa_bench.log 2>&1
echo "bench rc $? $(el)"; cut -d, -f3-4,6,9,10,13 $OUT/logs/mqa_bench.csv
MLAJIT_MQA_PERSIST=0 MLAJIT_CACHE_DIR=/tmp/c2 timeout 40 build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048 --reps 10 --csv $OUT/logs/mqa_bench_p0.csv > $OUT/logs/mqa_bench_p0.log 2>&1
echo "bench MLAJIT_MQA_PERSIST=0 rc $? $(el)"; cut -d, -f3-4,6,9,10,13 $OUT/logs/mqa_bench_p0.csv | tail -1
MLAJIT_CACHE_DIR=/tmp/s_race MLAJIT_NVRTC_FLAGS=-lineinfo timeout 110 compute-sanitizer --tool racecheck --kernel-name-exclude kns=nvjet \
  $T '--test-case=gpu small shapes*' > $OUT/logs/san_racecheck.log 2>&1
echo "library racecheck (small shapes) rc $? : $(grep -E 'RACECHECK SUMMARY' $OUT/logs/san_racecheck.log) $(el)"
grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/san_racecheck.log | sort | uniq -c | head -6
