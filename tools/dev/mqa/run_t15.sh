#!/bin/bash
# Session 23's device call: the 64-head kernel on 32-key tiles in four slots (configs_t15.h: "n32" schedule 1, "n32np" the
# same with P handed over by bar.arrive, "w2n32" schedule 2) against the 64-key two-slot form: every harness check, the 8k
# paged bench at 128 and 64 heads with the math alone ("mo") and gather alone ("go") parts; the library (which picks n32
# for the bf16 cache above 16 heads) built beside it, its sparse MQA and one-call GPU tests and mlajit-bench; then schedule
# 2 through the library (MLAJIT_NVRTC_FLAGS), contiguous / scattered-padding benches, memcheck / synccheck / racecheck.
# Most important first: a run cut short still reports them. Prebuilt: CFG_FILE=configs_t15.h BUILD=build_t15 bash build.sh;
# carry ["tools/dev/mqa/build_t15", ".devdeps"]. Record of session 23's call: the forms and the runtime pick were removed after it
# (docs/PERF.md "32-key tiles in four slots"); rerunning needs commit 6949765.
#   run: OUT=$OUT bash tools/dev/mqa/run_t15.sh      (about 6 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT
bash tools/dev/mqa/lib_build.sh $OUT &
bpid=$!
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
H=tools/dev/mqa/build_t15/harness
export MLAJIT_CACHE_DIR=/tmp/mlajit-t15-cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 $H --no-bench --configs h64sm90,h64sm90n32,h64sm90n32np,h64sm90w2n32 --log $OUT/check.log > $OUT/check.out 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/check.log; grep -E "FAIL" $OUT/check.log | cut -c1-160 | sort | uniq -c | head
ALL=h64sm90,h64sm90n32,h64sm90n32np,h64sm90w2n32,h64sm90w2n32mo,h64sm90mo,h64sm90n32mo,h64sm90go,h64sm90n32go
timeout 120 $H --no-check --paged --bench-s 8192 --bench-heads 128,64 --bench-configs $ALL --reps 5 --log $OUT/bench.log > $OUT/bench.out 2>&1
echo "bench rc $? $(el)"; sed -n '/^config/,$p' $OUT/bench.log
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/build.log | head -10
timeout 120 build-gpu/mlajit_gpu_tests \
  -tc="*sparse MQA over heads*,*sparse MQA contract*,*NaN or inf in sparse MQA*,*agree on DSA*,*small shapes: sparse MQA*,*mla_prefill gives the DSA*,*mla_prefill takes the engine*,*chunked*" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/gpu_tests.log | head -8
for h in 128 64; do
  timeout 40 build-gpu/mlajit-bench --ops mqa --heads $h --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench_h$h.csv 2> $OUT/lib_bench_h$h.err
  echo "library bench $h heads rc $?"; cut -d, -f3-9,13 $OUT/lib_bench_h$h.csv
done
tar czf $OUT/logs.tgz -C $OUT --exclude=logs.tgz . 2>/dev/null  # again at the end
MLAJIT_NVRTC_FLAGS=-DMJ_MQA90_SCHED=2 timeout 90 build-gpu/mlajit_gpu_tests \
  -tc="*sparse MQA over heads*,*sparse MQA contract*,*NaN or inf in sparse MQA*,*agree on DSA*,*small shapes: sparse MQA*" > $OUT/gpu_tests_w2.log 2>&1
echo "gpu tests, schedule 2 compiled in, rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/gpu_tests_w2.log | head -8
MLAJIT_NVRTC_FLAGS=-DMJ_MQA90_SCHED=2 timeout 40 build-gpu/mlajit-bench --ops mqa --heads 128 --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench_w2_h128.csv 2> $OUT/lib_bench_w2_h128.err
echo "library bench 128 heads, schedule 2, rc $?"; cut -d, -f3-9,13 $OUT/lib_bench_w2_h128.csv
timeout 40 $H --no-check --bench-s 8192 --bench-heads 128 --bench-configs h64sm90,h64sm90n32,h64sm90w2n32 --reps 5 --log $OUT/bench_contig.log > /dev/null 2>&1
echo "bench contiguous rc $?"; sed -n '/^config/,$p' $OUT/bench_contig.log
timeout 40 $H --no-check --paged --scatter --bench-s 8192 --bench-heads 128 --bench-configs h64sm90,h64sm90n32,h64sm90w2n32 --reps 5 --log $OUT/bench_scatter.log > /dev/null 2>&1
echo "bench scattered rc $?"; sed -n '/^config/,$p' $OUT/bench_scatter.log
for c in h64sm90n32 h64sm90w2n32; do
  tools="memcheck synccheck"; [ $c = h64sm90w2n32 ] && tools="$tools racecheck"
  for tool in $tools; do
    timeout 60 compute-sanitizer --tool $tool --print-limit 5 $H --configs $c --sanitize > $OUT/san_${tool}_$c.log 2>&1
    echo "$tool $c rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_${tool}_$c.log | tr '\n' ' ') $(el)"
  done
done
tar czf $OUT/logs.tgz -C $OUT --exclude=logs.tgz . 2>/dev/null
