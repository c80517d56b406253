// Sparse MQA key-set pre-pass, both tiers (sm_80 and newer): every token's index row turned once into its compacted list
// of latent rows, which the main kernels read instead of building the set in each of their blocks (mlajit_abi.h,
// SparseMqaFwdParams "Key-set pre-pass"; sparse_mqa/index_set.cuh, which holds every piece used here).
//
// One block a token, MJ_COMPACT_THREADS threads, small enough that several blocks share an SM (the main kernels run one
// block an SM, which waits alone while it builds its set): build_keep into shared memory (the set, then the hash table:
// mj_mqa_compact_smem_bytes(width) bytes), then write_kept_rows to kept_rows row i and the set's size to kept_count[i]
// (i: the token's number in the call). Rows up to MJ_COMPACT_MAXW wide (the host picks the specialization; at 2048 a
// thread keeps 8 hash slots in registers instead of 32).
//
// Specialization (constexpr ints ahead of the include, as every family's): MJ_KV_FP8 (the kv strides count bytes of the
// FP8 cache's rows, else bf16 elements), MJ_COMPACT_THREADS (a multiple of 32; the runtime's: mj_mqa_compact_threads),
// MJ_COMPACT_MAXW (the widest row it takes, a multiple of 32 up to mj_mqa_max_width; the runtime's: mj_mqa_compact_maxw).
// grid.x = tokens of the call, as the main kernel's.
#pragma once
#include "mlajit_device.cuh"
#include "sparse_mqa/index_set.cuh"

extern "C" __global__ void __launch_bounds__(MJ_COMPACT_THREADS) mlajit_sparse_mqa_compact(const SparseMqaFwdParams p) {
    constexpr int kThreads = MJ_COMPACT_THREADS, kMaxW = MJ_COMPACT_MAXW;
    static_assert(mj_idx::kSetBytes % 8 == 0, "the hash table follows the set, 8-byte aligned");
    static_assert(kThreads % 32 == 0 && kThreads <= 1024 && kMaxW % 32 == 0 && kMaxW <= mj_mqa_max_width, "pre-pass specialization");
    extern __shared__ __align__(16) unsigned char smem[];
    const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
    const mj_idx::Request rq = mj_idx::request_of_token(p, tok);
    const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
    const int width = p.topk;
    const mj_idx::SetView ks = mj_idx::set_view(smem);
    mj_idx::build_keep<kThreads, kMaxW>(p, rq, irow, width, ks.keep, ks.pref, ks.nvalid, (unsigned long long*)(smem + mj_idx::kSetBytes));
    unsigned* out = p.kept_rows + (mj_i64)rq.slot * p.kept_stride;
    mj_idx::write_kept_rows<kThreads, kMaxW>(p, rq, irow, width, ks.keep, ks.pref, out);
    if (threadIdx.x == 0) p.kept_count[rq.slot] = *ks.nvalid;
}
