#!/bin/bash
# Session 26 (issue 16; configs_t22.h): the FP8 keys-as-M kernel's producers at 16 heads, 8k paged: shipped register producer,
# its loads row by row, the raw-ring producer with 8 and 16 warps (whole kernel, producer alone, codes unconverted); the 64-head
# FP8 kernel with the shared register producer (duplicates D1) against the committed one (harness_head: h64sm90f8 built from
# HEAD's sources), checks on every case first; memcheck / synccheck of the raw-ring forms.
# Prebuilt: CFG_FILE=configs_t22.h BUILD=build_t22 bash build.sh; build_t22/harness_head from HEAD (see run_t19.sh's header,
# with the line X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)). carry ["tools/dev/mqa/build_t22"]; timeout_s 330.
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
BUDGET=${BUDGET:-315}
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
N=tools/dev/mqa/build_t22/harness; O=tools/dev/mqa/build_t22/harness_head
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout 110 $N --no-bench --configs h16sm90t8,h16sm90t8rp,h16sm90t8s8,h16sm90t8s16,h64sm90f8 --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
b() { local t=$(( $5 < $(left) ? $5 : $(left) )); [ $t -lt 10 ] && { echo "$4 skipped (time)"; return; }
      timeout $t $1 --no-check --paged --bench-s 8192 --bench-heads $2 --bench-configs $3 --reps 5 --log $OUT/logs/$4.log > /dev/null 2>&1
      echo "$4 rc $? $(el)"; }
b $N 16 h16sm90t,h16sm90t8,h16sm90t8g4,h16sm90t8rp,h16sm90t8rpg4,h16sm90t8s8,h16sm90t8s8g4,h16sm90t8s8r,h16sm90t8s16,h16sm90t8s16g4 b16 110
b $N 64 h64sm90f8 b64 25
b $O 64 h64sm90f8 b64head 25
for c in h16sm90t8s8 h16sm90t8s16; do for tool in memcheck synccheck; do
  t=$(( 30 < $(left) ? 30 : $(left) )); [ $t -lt 12 ] && { echo "$tool $c skipped (time)"; continue; }
  timeout $t compute-sanitizer --tool $tool --print-limit 5 $N --configs $c --sanitize > $OUT/logs/san_${tool}_$c.log 2>&1
  echo "$tool $c rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/logs/san_${tool}_$c.log | tr '\n' ' ') $(el)"
done; done
echo "== summary $(cat $OUT/logs/gpu.txt)"
for f in b16 b64 b64head; do [ -f $OUT/logs/$f.log ] && sed -n '/^config/,$p' $OUT/logs/$f.log | sed "s/^/$f: /"; done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
