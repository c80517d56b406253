#!/bin/bash
# Session 36: why is NVRTC's code of the one-block 16-head kernel and the 64-head kernel slower than nvcc's (A against B:
# 3.44 / 3.27 ms at 16 heads one block a token, 8.90-8.95 / 8.38-8.60 at 128 heads; H100, run_t35), and why does the 32-bit
# address form (N) make them slower still (4.00-4.04, 9.34) though it made the persistent grid faster? The PTX loop lengths
# say little (perf_mqa_notes.md), so this call brings back what the CPU machine cannot make (it has no disassembler and
# no GPU): the SASS of the three caches' kernels, and ncu's per-instruction stall samples for each at 8k, topk 2048.
# carry ["build/mlajit-bench", "tools/dev/mqa/build_t33", "tools/dev/mqa/build_t32", ".devdeps"]; ~3 minutes.
source "$(dirname "$0")/run_common.sh"
trap 'pack && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
D=tools/dev/mqa/build_t33
export PATH=$PATH:/usr/local/cuda/bin
rm -rf /tmp/cacheN /tmp/cacheA /tmp/cacheB
cp -r $D/N /tmp/cacheN; cp -r $D/B /tmp/cacheB; cp -r tools/dev/mqa/build_t32/A /tmp/cacheA
envof() { if [ $1 = N ]; then echo "MLAJIT_KERNELS_DIR=$PWD/$D/kernels_n"; else echo "MLAJIT_KERNELS_DIR=$PWD/$D/kernels_old"; fi; }
cubin_of() {  # cubin_of CACHE SPEC-SUBSTRING
  grep -l -F "$2" $(find /tmp/cache$1 -name meta.json) | head -1 | xargs dirname | sed 's|$|/kernel.cubin|'
}
H64='sparse_mqa_fwd_sm90[BLOCK_H=64,BLOCK_N=64,STAGES=2,D_LATENT=512,D_ROPE=64,KV_FP8=0]'
H16='sparse_mqa_fwd_sm90t[BLOCK_H=16,BLOCK_N=64,STAGES=2,D_LATENT=512,D_ROPE=64,KV_FP8=0,PERSIST=0]'
for c in N A B; do
  cuobjdump -sass "$(cubin_of $c "$H64")" > $OUT/logs/sass_${c}_h64.txt 2>&1
  cuobjdump -sass "$(cubin_of $c "$H16")" > $OUT/logs/sass_${c}_h16.txt 2>&1
  cuobjdump -res-usage "$(cubin_of $c "$H64")" "$(cubin_of $c "$H16")" > $OUT/logs/res_${c}.txt 2>&1
done
pack; echo "sass $(el): $(wc -l $OUT/logs/sass_*.txt | tail -1)"; grep -h "REG" $OUT/logs/res_*.txt | head -6
prof() {  # prof CACHE HEADS KERNEL-REGEX [env...]
  local c=$1 h=$2 k=$3; shift 3; local r=$OUT/logs/ncu_${c}_h$h
  env $(envof $c) "$@" MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 100 ncu --clock-control none -k "regex:$k" -c 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters \
    -f -o $r ${BENCH:-build/mlajit-bench} --s-q 8192 --topk 2048 --ops mqa --heads $h --reps 1 > $r.log 2>&1
  ncu -i $r.ncu-rep --page source --csv --print-source sass > ${r}_source.csv 2>&1
  ncu -i $r.ncu-rep --page details > ${r}_details.txt 2>&1
  rm -f $r.ncu-rep; pack
  echo "$c h$h $(el): $(grep -E 'Duration|Issue Slots Busy|No Eligible' ${r}_details.txt | tr -s ' ' | head -3 | tr '\n' ';')"
}
for c in A B N; do prof $c 128 '^mlajit_sparse_mqa_fwd_sm90$'; done
for c in A B N; do prof $c 16 'mlajit_sparse_mqa_fwd_sm90t' MLAJIT_MQA_PERSIST=0; done
ls -la $OUT/logs | tail -30
