#!/bin/bash
# Session 37: where the 64-head kernel's warps wait. Session 28 (H100, 128 heads, 8k paged, with the list): schedule 1 (the
# runtime's) whole 8.15 ms, math alone 6.91, gather alone 6.26; schedule 2 (tile pairs, FlashMLA's order) 8.65 / 5.95 / 6.18,
# against FlashMLA's 7.72 (H200, all slots computed). Both end 1.2-2.5 ms above max(math, gather), and the math alone is
# ~3,600 cycles a tile against ~2,200 of tensor work. This call times them again, then takes ncu's per-instruction stall
# samples (SourceCounters, with the CUDA source imported: -lineinfo) of each schedule whole and math alone, then run_t36's
# library part (SASS and stall samples of NVRTC's N / A and nvcc's B caches) if time is left. Also the 64-head kernel's
# persistent grid (h64sm90per_pre, sm90_persist.cuh): checks (bits against the one-block form, 3 blocks for several items
# a block), timing beside the others, sanitizers.
# Reading the stall CSVs: python3 tools/dev/ncu_stalls.py logs/ncu_<config>_cuda.csv (or _sass.csv) [--top N] [--grep TEXT].
# Prebuilt: CFG_FILE=configs_t37.h BUILD=build_t37 bash build.sh.
# Also 710580a's mlajit-bench as tools/dev/mqa/build_t37/mlajit-bench-710580a (run_t36's caches). ~7-8 minutes.
# tools/dev/mqa/prep_t37.sh rebuilds every carried, git-ignored piece where this machine lacks it.
# carry ["build/mlajit-bench", "tools/dev/mqa/build_t37", "tools/dev/mqa/build_t33", "tools/dev/mqa/build_t32", ".devdeps"]
source "$(dirname "$0")/run_common.sh"
trap 'pack && rm -rf $OUT/logs' EXIT
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
H=tools/dev/mqa/build_t37/harness
timeout 60 $H --no-bench --configs h64sm90_pre,h64sm90w2_pre,h64sm90per_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el): $(grep -E 'checks' $OUT/logs/check.log | tail -1)"; grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | head -5
# the persistent grid with 3 blocks: every block takes several items of the small cases (the ring and Q across items)
MQA_PERSIST_BLOCKS=3 timeout 60 $H --no-bench --configs h64sm90_pre,h64sm90per_pre --log $OUT/logs/check_per3.log > /dev/null 2>&1
echo "check per 3 blocks rc $? $(el): $(grep -E 'checks' $OUT/logs/check_per3.log | tail -1)"; grep -E "FAIL|DIFFER" $OUT/logs/check_per3.log | cut -c1-160 | head -5
pack
timeout 90 $H --no-check --paged --bench-s 8192 --bench-heads 128 \
  --bench-configs h64sm90_pre,h64sm90per_pre,h64sm90w2_pre,h64sm90mo_pre,h64sm90w2mo_pre,h64sm90go_pre,h64sm90w2go_pre,h64sm90_pre,h64sm90per_pre,h64sm90w2_pre --reps 5 \
  --log $OUT/logs/b128.log > /dev/null 2>&1; echo "b128 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b128.log; pack
# A block's fixed cost (launch, Q load, first tile's latency, epilogue: what a persistent grid would hide) from the time at
# three lengths: T(s) = blocks(s) r + tiles(s) c, blocks 2 s, tiles 64 s v(s), v = 0.75 / 0.875 / 0.9375 at 4k / 8k / 16k.
for s in 4096 16384; do
  timeout 60 $H --no-check --paged --bench-s $s --bench-heads 128 --bench-configs h64sm90_pre,h64sm90per_pre,h64sm90mo_pre,h64sm90w2_pre --reps 5 \
    --log $OUT/logs/b128_s$s.log > /dev/null 2>&1; echo "b128 s=$s rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b128_s$s.log
done; pack
for tool in memcheck racecheck synccheck; do
  MQA_PERSIST_BLOCKS=3 timeout 60 compute-sanitizer --tool $tool --print-limit 4 $H --configs h64sm90per_pre --sanitize > $OUT/logs/${tool}_per.log 2>&1
  echo "$tool h64sm90per_pre rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/logs/${tool}_per.log) $(el)"
done; pack
# Through the library (build/mlajit-bench from this tree, compiling on the device; every cell checked against float64):
# MLAJIT_MQA_PERSIST64 off / on alternated, 64 and 128 heads at 8k with the workspace.
for v in 0 1 0 1; do
  MLAJIT_MQA_PERSIST64=$v MLAJIT_CACHE_DIR=/tmp/c37 timeout 90 build/mlajit-bench --ops mqa --heads 64,128 --s-q 8192 --topk 2048 \
    --reps 20 > $OUT/logs/lib_persist64_$v.log 2>&1; echo "library MLAJIT_MQA_PERSIST64=$v rc $? $(el)"; grep -E ",mqa," $OUT/logs/lib_persist64_$v.log | cut -d, -f3-13
  cat $OUT/logs/lib_persist64_$v.log >> $OUT/logs/lib_persist64.log
done; pack
hprof() {  # hprof CONFIG: one launch (the 4th) at 128 heads, 8k paged
  local c=$1 r=$OUT/logs/ncu_$1
  timeout 100 ncu --clock-control none -k regex:mqa_kernel --launch-skip 3 --launch-count 1 --import-source yes \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    -f -o $r $H --no-check --paged --bench-s 8192 --bench-heads 128 --bench-configs $c --reps 3 > $r.log 2>&1
  ncu -i $r.ncu-rep --page source --csv --print-source sass > ${r}_sass.csv 2>&1
  ncu -i $r.ncu-rep --page source --csv --print-source cuda > ${r}_cuda.csv 2>&1
  ncu -i $r.ncu-rep --page details > ${r}_details.txt 2>&1
  rm -f $r.ncu-rep; pack
  echo "$c $(el): $(grep -E 'Duration|Issue Slots Busy|No Eligible' ${r}_details.txt | tr -s ' ' | head -3 | tr '\n' ';')"
}
for c in h64sm90_pre h64sm90per_pre h64sm90w2_pre h64sm90mo_pre h64sm90w2mo_pre; do hprof $c; done
ls -la $OUT/logs | tail -20
# run_t36 needs a bench binary whose 64-head spec has no PERSIST parameter (its caches were keyed before it): 710580a's
[ "${LIB:-1}" = 1 ] && BENCH=tools/dev/mqa/build_t37/mlajit-bench-710580a OUT=$OUT/lib bash tools/dev/mqa/run_t36.sh
echo "done $(el)"
