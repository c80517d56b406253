#!/bin/bash
# NVRTC compile of every supported config (as the runtime does it): registers, spills, errors.
cd "$(dirname "$0")/../../.."
# Fifth field: KV_FP8 (the FP8 latent cache); 0 when absent.
cfgs="64,64,2,90 64,32,3,90 64,32,2,90 64,32,2,80 32,64,2,90 32,32,2,90 32,32,2,80 16,64,2,90 16,32,2,90 16,32,2,80 16,32,3,90 16,32,3,80 16,32,4,90
      64,32,2,90,1 64,32,2,80,1 64,32,3,90,1 32,64,2,90,1 32,32,2,90,1 32,32,2,80,1 16,64,2,90,1 16,32,2,90,1 16,32,2,80,1 16,32,3,90,1 16,32,3,80,1 16,32,4,90,1 16,32,4,80,1 ${EXTRA}"
for c in $cfgs; do
  IFS=, read h n s a f <<< "$c"
  arch=sm_${a}; [ "$a" = 90 ] && arch=sm_90a
  out=$(python3 tools/dev/nvrtc_check.py sparse_mqa/sm80.cuh --arch $arch -D MJ_BLOCK_H=$h -D MJ_BLOCK_N=$n -D MJ_WARPS=8 \
        -D MJ_STAGES=$s -D MJ_D_LATENT=512 -D MJ_D_ROPE=64 -D MJ_ARCH=$a -D MJ_KV_FP8=${f:-0} 2>&1)
  rc=$?
  regs=$(echo "$out" | grep -o "Used [0-9]* registers" ); sp=$(echo "$out" | grep -o "[0-9]* bytes spill stores")
  echo "H=$h N=$n S=$s FP8=${f:-0} $arch rc=$rc $regs, $sp"
  if [ $rc -ne 0 ]; then echo "$out" | grep -i error | head -5; fi
done
exit 0
