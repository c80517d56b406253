// The attention ops: validate every argument (nothing launches on a bad one), pick the spec, launch.
#pragma once
#include "mlajit/mlajit.h"
#include "runtime/handle.h"

namespace mlajit {

void sparse_mqa_prefill(Handle& h, const mlajit_sparse_mqa_args& a, CUstream stream);
void mha_prefill(Handle& h, const mlajit_mha_args& a, CUstream stream);
void topk_mask_build(Handle& h, const mlajit_topk_mask_args& a, CUstream stream);

int64_t topk_mask_words(int64_t max_seqlen_k);

}  // namespace mlajit
