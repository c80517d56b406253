#!/bin/bash
# Session 29's one call (device time nearly spent on refused starts; it ran: docs/PERF.md "Session 29"): the checks of the
# persistent grid and of the keys-as-M kernel's even barrier counts that session 28 had prepared (its run_t25.sh, folded in
# here), with the closing call's sanitizer step on the library's small shapes alongside.
# Harness: checks with MQA_PERSIST_BLOCKS=3 (several tokens a block even in the small cases), memcheck / racecheck of the
# persistent form (2 blocks), 8k timing against the one-block-a-token form. Library (built meanwhile): the sparse MQA suites
# with MLAJIT_MQA_PERSIST=1 and =0 side by side, compute-sanitizer's four tools on "gpu small shapes*", then mlajit-bench
# sparse MQA on a quiet GPU with it on and off. carry ["tools/dev/mqa/build_t24", ".devdeps"]; about 6 minutes.
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t24/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT  # the archive also when a step's timeout ends the script
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=12 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit_gpu_tests mlajit-bench & bp=$!
MQA_PERSIST_BLOCKS=3 timeout 80 $H --no-bench --configs h16sm90t_pre,h16sm90tper_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
for tool in memcheck racecheck; do
  MQA_PERSIST_BLOCKS=2 timeout 40 compute-sanitizer --tool $tool --print-limit 4 $H --configs h16sm90tper_pre --sanitize > $OUT/logs/${tool}_per.log 2>&1
  echo "$tool h16sm90tper_pre rc $? : $(grep -E 'SUMMARY' $OUT/logs/${tool}_per.log) $(el)"
  grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/${tool}_per.log | sort | uniq -c | head -4
done
timeout 60 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t_pre,h16sm90tper_pre,h16sm90tg4_pre,h16sm90tperg4_pre --reps 5 --log $OUT/logs/b16.log > /dev/null 2>&1
echo "b16 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b16.log
wait $bp; echo "library build rc $? $(el)"
T=build-gpu/mlajit_gpu_tests
S='gpu: sparse MQA over heads*,gpu: sparse MQA contract*,gpu: sparse MQA and masked*'
MLAJIT_MQA_PERSIST=1 MLAJIT_CACHE_DIR=/tmp/c1 timeout 200 taskset -c 0-3 $T "--test-case=$S" > $OUT/logs/suite_p1.log 2>&1 & p1=$!
MLAJIT_MQA_PERSIST=0 MLAJIT_CACHE_DIR=/tmp/c2 timeout 200 taskset -c 4-7 $T "--test-case=$S" > $OUT/logs/suite_p0.log 2>&1 & p0=$!
sp=()
for tool in memcheck racecheck synccheck initcheck; do
  filt=(); [ $tool = racecheck ] && filt=(--kernel-name-exclude kns=nvjet)
  MLAJIT_MQA_PERSIST=1 MLAJIT_CACHE_DIR=/tmp/s_$tool MLAJIT_NVRTC_FLAGS=-lineinfo timeout 200 taskset -c 8-15 compute-sanitizer --tool $tool \
    "${filt[@]}" --error-exitcode 3 $T '--test-case=gpu small shapes*' > $OUT/logs/san_$tool.log 2>&1 & sp+=($!)
done
wait $p1; r1=$?; wait $p0; r0=$?
rs=(); for p in "${sp[@]}"; do wait "$p"; rs+=($?); done
echo "suites rc persist=1 $r1, persist=0 $r0; sanitizers rc ${rs[*]} (memcheck racecheck synccheck initcheck) $(el)"
grep -hE "^\[doctest\] (test cases|assertions)" $OUT/logs/suite_p1.log $OUT/logs/suite_p0.log
for t in memcheck racecheck synccheck initcheck; do echo "$t: $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' $OUT/logs/san_$t.log | tr '\n' ' ')"; done
grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/san_racecheck.log | sort | uniq -c | head -6
for v in 1 0; do
  MLAJIT_MQA_PERSIST=$v MLAJIT_CACHE_DIR=/tmp/c1 timeout 45 build-gpu/mlajit-bench --ops mqa,mqa-nows --heads 16,128 --s-q 8192 --topk 2048 --reps 10 \
    --csv $OUT/logs/mqa_bench_p$v.csv > $OUT/logs/mqa_bench_p$v.log 2>&1
  echo "bench MLAJIT_MQA_PERSIST=$v rc $? $(el)"; cut -d, -f3-4,6,9,10,13 $OUT/logs/mqa_bench_p$v.csv
done
