#!/bin/bash
# The key-set pre-pass (configs_t19.h, issue 13, session 25): every harness case on each kernel with and without
# kernels_src/sparse_mqa/compact.cuh before it (list checked, outputs bit-identical to the kernel's own set build), then
# 8k paged timings: 16 heads (keys-as-M kernel) and 128 heads (64-head kernel) with and without the pre-pass (the kernel
# alone, the pre-pass alone at every thread count, the two together), the portable 16 x 32 tile at 16 heads, the
# committed kernels (harness_head) as the baseline; memcheck of the pre-pass configs on the small cases; the FP8 64-head
# kernel at 128 heads if time is left. Written in session 25 and not run there (no device time was left).
# Prebuilt: CFG_FILE=configs_t19.h BUILD=build_t19 bash build.sh; build_t19/harness_head from the committed sources:
#   git archive HEAD kernels_src tools/dev/mqa | tar -x -C /tmp/h, then in /tmp/h/tools/dev/mqa a configs file with the
#   two lines X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0) and X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0) (each X at a line's
#   start), CFG_FILE=that BUILD=b bash build.sh, cp b/harness <repo>/tools/dev/mqa/build_t19/harness_head.
# carry ["tools/dev/mqa/build_t19"].   run (timeout_s 360): OUT=$OUT bash tools/dev/mqa/run_t19.sh   (BUDGET=seconds: ~345)
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
BUDGET=${BUDGET:-345}  # seconds this script may take (later steps are skipped past it)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
N=tools/dev/mqa/build_t19/harness; O=tools/dev/mqa/build_t19/harness_head
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout $(( BUDGET / 3 )) $N --no-bench --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-200 | sort | uniq -c | head
echo "pre configs: $(grep -c 'same bits' $OUT/logs/check.log) bit-identical to their base, $(grep -c 'list ok' $OUT/logs/check.log) lists ok, $(grep -cE 'list BAD|DIFFER' $OUT/logs/check.log) bad"
b() { local t=$(( $5 < $(left) ? $5 : $(left) )); [ $t -lt 10 ] && { echo "$4 skipped (time)"; return; }
      timeout $t $1 --no-check --paged --bench-s 8192 --bench-heads $2 --bench-configs $3 --reps 7 --log $OUT/logs/$4.log > /dev/null 2>&1
      echo "$4 rc $? $(el)"; grep -E "pre-pass alone:" $OUT/logs/$4.log; sed -n '/^config/,$p' $OUT/logs/$4.log | grep -v '^config'; }
echo "config            heads        ms      TFLOP/s  TFLOP/s valid  gather TB/s check"
b $N 16 h16sm90t,h16sm90t_pre bench16 50
b $N 128 h64sm90,h64sm90_pre bench128 55
for c in h16sm90t_pre h64sm90f8_pre; do
  t=$(( 35 < $(left) ? 35 : $(left) )); [ $t -lt 15 ] && { echo "memcheck $c skipped (time)"; continue; }
  timeout $t compute-sanitizer --tool memcheck --print-limit 5 $N --configs $c --sanitize > $OUT/logs/san_memcheck_$c.log 2>&1
  echo "memcheck $c rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/logs/san_memcheck_$c.log | tr '\n' ' ') $(el)"
done
b $O 16 h16sm90t head16 30
b $O 128 h64sm90 head128 30
b $N 16 h16n32s2,h16n32s2_pre bench16p 45
b $N 128 h64sm90f8,h64sm90f8_pre bench128f8 40
echo "== summary (ms; _pre rows: the kernel alone, then the pre-pass alone and the two together) $(cat $OUT/logs/gpu.txt)"
for f in bench16 bench128 head16 head128 bench16p bench128f8; do
  [ -f $OUT/logs/$f.log ] && sed -n '/^config/,$p' $OUT/logs/$f.log | grep -v '^config' | sed "s/^/$f: /"
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
