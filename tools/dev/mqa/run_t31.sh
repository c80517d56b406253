#!/bin/bash
# Session 32: why ring + merge (perrm, the runtime's persistent form since session 32) gains 8 % in the harness (8k paged, 16
# heads, kernel alone: 2.766 against 3.007 ms for per, H100, run_t30) but ~1 % through the library (mlajit-bench 3.304 against
# 3.334 ms, one sample each). What differs between the two: the runtime compiles without --use_fast_math (the harness with it:
# configs_t31.h's "nf" configs are built as the runtime builds them), the bench's cache is contiguous (run_t30's harness ran
# --paged), its -1 padding is scattered over the rows (compacted by the pre-pass either way), and it times the pre-pass and the
# kernel back to back (no input rotation at this shape: one set is 227 MB).
# Here: checks of the six configs (3 blocks: the nf forms' bits against their own one-block form), the six timed on the paged
# and the contiguous cache, the library bench with and without the two switches alternated three times (reps 20), and the
# library's kernels alone under ncu (gpu__time_duration; --cache-control none: L2 as in the bench).
# carry ["tools/dev/mqa/build_t31", ".devdeps"]; about 4 minutes.
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t31/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
JOBS=14 bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit-bench & bp=$!
C=h16sm90t_pre,h16sm90tper_pre,h16sm90tperrm_pre,h16sm90tnf_pre,h16sm90tpernf_pre,h16sm90tperrmnf_pre
MQA_PERSIST_BLOCKS=3 timeout 60 $H --no-bench --configs $C --log $OUT/logs/check.log > /dev/null 2>&1
echo "checks rc $? $(el): $(for c in per perrm pernf perrmnf; do echo -n "$c $(grep -c "h16sm90t${c}_pre PASS.*same bits" $OUT/logs/check.log)/$(grep -c "h16sm90t${c}_pre " $OUT/logs/check.log) "; done)"
grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | head -4
for lay in paged contiguous; do
  for rep in 1 2; do
    flag=(); [ $lay = paged ] && flag=(--paged)
    timeout 60 $H --no-check "${flag[@]}" --bench-s 8192 --bench-heads 16 --bench-configs $C --reps 5 --log $OUT/logs/b_${lay}_$rep.log > /dev/null 2>&1
    echo "$lay ($rep) rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b_${lay}_$rep.log
  done
done
wait $bp; echo "library build rc $? $(el)"
ON="-DMJ_MQA90T_RING=1 -DMJ_MQA90T_MERGE=1"  # the default since session 32
OFF="-DMJ_MQA90T_RING=0 -DMJ_MQA90T_MERGE=0"
B=(build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048)
for rep in 1 2 3; do
  for f in "$ON" "$OFF"; do
    MLAJIT_NVRTC_FLAGS="$f" MLAJIT_CACHE_DIR=/tmp/c1 timeout 40 "${B[@]}" --reps 20 > $OUT/logs/lib_${rep}_${f: -1}.log 2>&1
    echo "library rep $rep flags '$f' rc $? $(el): $(grep -E "^mqa" $OUT/logs/lib_${rep}_${f: -1}.log)"
  done
done
for f in "$ON" "$OFF"; do
  MLAJIT_NVRTC_FLAGS="$f" MLAJIT_CACHE_DIR=/tmp/c1 timeout 90 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum -k regex:mqa "${B[@]}" --reps 10 > $OUT/logs/ncu_${f: -1}.log 2>&1
  echo "ncu flags '$f' rc $? $(el)"
  awk '/\(.*\)x\(/ { name = $1 } /gpu__time_duration.sum/ { t[name] = t[name] " " $NF " " $(NF - 1) }
       END { for (k in t) print k ":" t[k] }' $OUT/logs/ncu_${f: -1}.log | cut -c1-400
done
