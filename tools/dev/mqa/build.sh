#!/bin/bash
# Builds the standalone sparse-MQA harness: one object per config in configs.h (kernel_cfg.cu with the
# config's constexprs), then harness.cu, linked into $BUILD/harness. Runs on the GPU machine or here.
set -e
cd "$(dirname "$0")"
ROOT=../../..
BUILD=${BUILD:-build}
ARCH=${ARCH:--gencode=arch=compute_90a,code=sm_90a}
NVCC="nvcc -std=c++17 -O2 --use_fast_math -lineinfo $ARCH -I $ROOT/kernels_src"  # -lineinfo: sanitizer reports name lines
CFG_FILE=${CFG_FILE:-configs.h}  # another list of configs (same format), e.g. configs_fp8.h for a short build
mkdir -p $BUILD
objs=()
pids=()
while read -r tag h n s k m pp skip fp8; do
  defs="-DCFG_H=$h -DCFG_N=$n -DCFG_S=$s -DCFG_TAG=$tag -DMJ_MQA_DEV_SKIP=$skip -DCFG_FP8=$fp8"
  [ "$k" != -1 ] && defs="$defs -DMJ_MQA_KSPLIT=$k"
  [ "$m" != -1 ] && defs="$defs -DMJ_MQA_MINB=$m"
  [ "$pp" != -1 ] && defs="$defs -DMJ_MQA_PINGPONG=$pp"
  case $tag in *nt) defs="$defs -DMJ_MQA_PP_TURNS=0";; esac  # ping-pong without the S-turn alternation
  case $tag in *f8i*) defs="$defs -DMJ_FP8_UNPACK=1";; esac  # FP8: integer unpack instead of cvt e4m3x2
  src=kernel_cfg.cu
  case $tag in *sm90t*) src=kernel_cfg90t.cu; defs="-DCFG_TAG=$tag -DCFG_H=$h -DCFG_N=$n -DCFG_S=$s -DMJ_MQA90T_DEV_SKIP=$skip -DCFG_FP8=$fp8"  # keys as M (16 / 32 heads)
                case $tag in *sm90tpin*) defs="$defs -DMJ_MQA90T_PIN=1";; esac
                case $tag in *sm90tper*) defs="$defs -DCFG_PERSIST=1";; esac  # the persistent grid (with the list: "_pre")
                # per / perr / perm / perrm: since session 33 all four build the one persistent form (ring + merge); the
                # others are at a49bf08 (MJ_MQA90T_RING / MJ_MQA90T_MERGE = 0)
                case $tag in *sm90t8f*) defs="$defs -DMJ_MQA90T8_FOLD=1";; esac  # FP8: the scale-folding body (sm90_t_fp8.cuh)
                case $tag in *sm90t8u*) defs="$defs -DMJ_FP8_UNPACK=1";; esac  # FP8 producer: the integer unpack (fp8.cuh)
                case $tag in *sm90t8s8*) defs="$defs -DMJ_MQA90T8_STAGE=8";; *sm90t8s16*) defs="$defs -DMJ_MQA90T8_STAGE=16";;  # FP8: raw-ring producer
                             *sm90t8s0*) defs="$defs -DMJ_MQA90T8_STAGE=0";; esac  # FP8: session 25's register producer
                case $tag in *sm90t8fi*) defs="$defs -DMJ_MQA90T8_INT=1";; esac  # folding body: codes to f16 by integer operations
                case $tag in *sm90t8fb*) defs="$defs -DMJ_MQA90T8_BULK=1";; esac  # folding body: rows by cp.async.bulk (gather timing)
                case $tag in *sm90tb*) defs="$defs -DMJ_MQA90T_BULK=1";; esac;;  # bf16: rows by cp.async.bulk (gather timing)
               *sm90*) src=kernel_cfg90.cu; defs="-DCFG_TAG=$tag -DMJ_MQA90_DEV_SKIP=$skip -DCFG_FP8=$fp8"
                       [ "$pp" != -1 ] && defs="$defs -DMJ_MQA90_OVERLAP=$pp"
                       case $tag in *f8i*) defs="$defs -DMJ_FP8_UNPACK=1";; esac
                       case $tag in *sm90o*) defs="$defs -DMJ_MQA90_SCHED=0";; esac  # the two-warpgroup S schedule
                       case $tag in *sm90pr*) defs="$defs -DMJ_MQA90_PAIR=1";; esac  # CTA pairs share the gather
                       case $tag in *sm90ps*) defs="$defs -DMJ_MQA90_PSYNC=1";; esac
                       case $tag in *sm90f8r*) defs="$defs -DMJ_MQA90_F8STAGE=0";; esac  # FP8: the register-staged producer
                       case $tag in *sm90f8st*) defs="$defs -DMJ_MQA90_F8STAGE=1";; esac  # FP8: the shared-memory-staged one
                       case $tag in *sm90f8sth*) defs="$defs -DMJ_MQA90_F8HELP=1";; esac  # staged FP8: warpgroup 1 converts half
                       case $tag in *sm90*lh*) defs="$defs -DMJ_MQA90_LATEHO=1";; esac  # late hand-over
                       case $tag in *sm90w2*) defs="$defs -DMJ_MQA90_SCHED=2";; esac  # bf16: schedule 2 (tile pairs)
                       case $tag in *sm90w2e*) defs="$defs -DMJ_MQA90_S2EARLY=1";; esac  # schedule 2: P of E handed over during its own P V
                       case $tag in *sm90per*) defs="$defs -DCFG_PERSIST=1";; esac  # the persistent grid (sm90_persist.cuh)
                       case $tag in *sm90sp*) defs="$defs -DMJ_MQA90_SPLITREL=1";; esac;; esac  # bf16: slots released in two parts
  case $tag in *_pre) defs="$defs -DMJ_MQA_KEPT_LIST=1";; esac  # the kernel reads the key-set pre-pass's list (index_set.cuh)
  nvcc_k=$NVCC
  case $tag in *nf_pre|*nf) nvcc_k=${NVCC/--use_fast_math /};; esac  # "nf": without --use_fast_math, as the runtime compiles
  $nvcc_k -Xptxas -v $defs -c $src -o $BUILD/k_$tag.o > $BUILD/k_$tag.log 2>&1 &
  pids+=($!); objs+=($BUILD/k_$tag.o)
done < <(grep -o '^ *X([^)]*)' $CFG_FILE | sed 's/X(//; s/)//; s/,/ /g')
# The key-set pre-pass (kernels_src/sparse_mqa/compact.cuh): one object per line of compact_variants.h. A config whose tag
# ends in "_pre" compiles its kernel as without the suffix plus MJ_MQA_KEPT_LIST=1; the harness runs the pre-pass before it.
while read -r ct cw f8; do
  $NVCC -Xptxas -v -DCFG_CT=$ct -DCFG_CW=$cw -DCFG_FP8=$f8 -c compact_cfg.cu -o $BUILD/c_${ct}_${cw}_${f8}.o > $BUILD/c_${ct}_${cw}_${f8}.log 2>&1 &
  pids+=($!); objs+=($BUILD/c_${ct}_${cw}_${f8}.o)
done < <(grep -o '^ *X([^)]*)' compact_variants.h | sed 's/X(//; s/)//; s/,/ /g')
$NVCC -DMQA_CONFIGS_FILE="\"$CFG_FILE\"" -c harness.cu -o $BUILD/harness.o &
pids+=($!)
fail=0
for p in "${pids[@]}"; do wait $p || fail=1; done
for f in $BUILD/k_*.log $BUILD/c_*.log; do echo "$f: $(grep -o 'Used [0-9]* registers\|[0-9]* bytes spill stores' $f | tr '\n' ' ')"; done
[ $fail = 0 ] || { cat $BUILD/*.log; echo BUILD FAILED; exit 1; }
$NVCC ${objs[@]} $BUILD/harness.o -o $BUILD/harness
echo built $BUILD/harness
