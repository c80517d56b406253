// mlajit kernel ABI: the parameter structs and launch-shape rules shared by the host runtime (C++20) and
// the kernels (compiled by NVRTC with no toolkit headers). Both sides include this one file, so a kernel
// and the code that launches it cannot disagree on a field or on the shared-memory size.
//
// Rules for this file: plain C types only (no <cstdint>, no std::), no device-only or host-only code.
#pragma once

typedef long long mj_i64;

// ---------------------------------------------------------------------------------------------------------
// MHA forward (dense causal, or causal AND top-k bitmask). Varlen batch, bottom-right causal alignment:
// request r has s_q = cu_q[r+1]-cu_q[r] queries and s_k = cu_k[r+1]-cu_k[r] keys; local query i sits at key
// position s_k - s_q + i and attends local keys j <= that position (and, when masked, only if bit j of its
// mask row is set). All strides are in elements; the last dimension of every tensor is contiguous.
// The key vector of head h is [k_nope(128) ; k_pe(64)]: k_pe has its own strides, so a k_pe shared by all
// heads is kp_stride_head = 0, and one packed k [T_k, h, 192] is k_nope = k, k_pe = k + 128.
// ---------------------------------------------------------------------------------------------------------
struct MhaFwdParams {
    const void* q;        // bf16 [T_q, h, 192]
    mj_i64 q_stride_tok, q_stride_head;
    const void* k_nope;   // bf16 [T_k, h, 128]
    mj_i64 kn_stride_tok, kn_stride_head;
    const void* k_pe;     // bf16 [T_k, h or shared, 64]
    mj_i64 kp_stride_tok, kp_stride_head;
    const void* v;        // bf16 [T_k, h, 128]
    mj_i64 v_stride_tok, v_stride_head;
    void* out;            // bf16 [T_q, h, 128]
    mj_i64 o_stride_tok, o_stride_head;
    float* lse;           // fp32 [T_q, h], natural log; -inf for a row that attends nothing
    mj_i64 lse_stride_tok, lse_stride_head;
    const int* cu_seqlens_q;  // device int32 [batch + 1]
    const int* cu_seqlens_k;  // device int32 [batch + 1]
    // Top-k bitmask (only read by the masked variant): row t (global query token) starts at
    // mask + t * mask_stride_row; bit j of word w is request-local key 32*w + j.
    const unsigned* mask;
    mj_i64 mask_stride_row;   // in 32-bit words, >= ceil(max s_k / 32)
    int batch;
    int num_heads;
    int max_seqlen_q;         // grid.x covers ceil(max_seqlen_q / MJ_BLOCK_M) query blocks
    int max_seqlen_k;
    float sm_scale;           // softmax scale applied to q.k
    float sm_scale_log2;      // sm_scale * log2(e), for exp2-based softmax
};

// ---------------------------------------------------------------------------------------------------------
// Top-k mask build: indices [T_q, topk] (request-local key positions; -1 or outside [0, s_k) skipped) ->
// mask rows as above. Every word of every row in [0, mask_stride_row) is written (zero where no bit), so
// the caller needs no memset. One block per (row group, request).
// ---------------------------------------------------------------------------------------------------------
struct TopkMaskParams {
    const int* indices;       // int32 [T_q, topk]
    mj_i64 idx_stride_tok;
    unsigned* mask;           // uint32 [T_q, mask_stride_row]
    mj_i64 mask_stride_row;
    const int* cu_seqlens_q;  // device int32 [batch + 1]
    const int* cu_seqlens_k;  // device int32 [batch + 1]
    int batch;
    int topk;
    int max_seqlen_q;
};

// ---------------------------------------------------------------------------------------------------------
// Sparse MQA prefill (FlashMLA's sparse prefill semantics): q [s_q, h, 576] (absorbed nope 512 ; rope 64),
// kv [s_kv, 576] shared by all heads, indices [s_q, topk] -> out [s_q, h, 512] = softmax(sm_scale q.kv^T)
// over the valid indexed rows, times kv[:, :512]. Invalid index (-1 or outside [0, s_kv)): skipped.
// A row with no valid index: out = 0, lse = -inf, max_logits = -inf. Duplicate indices count twice
// (same as a gather followed by dense attention).
// Batched form: when cu_seqlens_q is non-null, token t belongs to request r (cu_q[r] <= t < cu_q[r+1]),
// its indices are local to r and kv row = cu_kv[r] + index, valid iff 0 <= index < s_kv_r.
// ---------------------------------------------------------------------------------------------------------
struct SparseMqaFwdParams {
    const void* q;            // bf16 [s_q, h, 576]
    mj_i64 q_stride_tok, q_stride_head;
    const void* kv;           // bf16 [s_kv, 576]
    mj_i64 kv_stride_tok;
    const int* indices;       // int32 [s_q, topk]
    mj_i64 idx_stride_tok;
    void* out;                // bf16 [s_q, h, 512]
    mj_i64 o_stride_tok, o_stride_head;
    float* lse;               // fp32 [s_q, h] (natural log)
    mj_i64 lse_stride_tok;    // head stride is 1
    float* max_logits;        // fp32 [s_q, h]: max over valid keys of sm_scale * q.k
    mj_i64 ml_stride_tok;     // head stride is 1
    const int* cu_seqlens_q;  // nullable, device int32 [batch + 1]
    const int* cu_seqlens_kv; // nullable, device int32 [batch + 1]
    int batch;
    int s_q, s_kv;
    int num_heads;
    int topk;
    float sm_scale;
    float sm_scale_log2;
};

// ---------------------------------------------------------------------------------------------------------
// Launch shapes. The host builds grid/block/shared memory from these; the kernels static_assert against
// the same functions, so the two sides read one rule. Arguments are the spec's tile parameters.
// ---------------------------------------------------------------------------------------------------------
// MHA: MJ_BLOCK_M queries x MJ_BLOCK_N keys per step, MJ_WARPS warps (each owns BLOCK_M / WARPS rows),
// Q tile resident, K and V tiles MJ_STAGES deep.
static constexpr int mj_mha_threads(int warps) { return warps * 32; }
static constexpr int mj_mha_smem_bytes(int block_m, int block_n, int stages, int d_qk, int d_v) {
    // Q tile + K and V stages (bf16) + per stage the mask words of the block's rows for one key tile (the
    // masked variant copies them alongside K/V, so its bit tests read shared memory, not global) + 256:
    // tile-skip bitmap scratch.
    return 2 * (block_m * d_qk + stages * block_n * (d_qk + d_v)) + stages * block_m * (block_n / 32) * 4 + 256;
}
// Sparse MQA: one query token and MJ_BLOCK_H heads per block; MJ_BLOCK_N gathered keys per step.
static constexpr int mj_mqa_threads(int warps) { return warps * 32; }
static constexpr int mj_mqa_smem_bytes(int block_h, int block_n, int stages, int d_qk, int d_v) {
    // Q tile + K ring (V is the first d_v columns of K) + P tile (bf16) + row-stat scratch (512 B) +
    // per-row rescale (fp32) + per-slot row validity (1 byte a row) + non-empty-tile bitmap (8 words)
    return 2 * (block_h * d_qk + stages * block_n * d_qk + block_h * block_n) + 512 + 4 * block_h +
           stages * block_n + 32 + 0 * d_v;
}
// Mask build: MJ_ROWS_PER_BLOCK query rows per block.
static constexpr int mj_mask_threads() { return 256; }

// ---------------------------------------------------------------------------------------------------------
// Paged latent-cache gather: the rows of a run of requests from pages [num_blocks, block_size, 576] into
// one contiguous [sum of s_k, 576] buffer (what the K/V up-projection and the MHA kernel read). Request r
// (0-based from cu_seqlens_k) key position p is token p % block_size of page block_table[r][p / block_size]
// and lands in dst row cu_seqlens_k[r] - cu_seqlens_k[0] + p. A page id outside [0, num_blocks) is never
// read: its rows are written as NaN, so every output that attends them shows it (the host cannot see
// device-side block tables before launch).
// ---------------------------------------------------------------------------------------------------------
struct PagedGatherParams {
    const void* pages;        // bf16 [num_blocks, block_size, 576]
    mj_i64 page_stride, tok_stride;  // in elements
    const int* block_table;   // int32 [batch, max_blocks] (row r of this pointer = request r of the run)
    mj_i64 bt_stride;
    const int* cu_seqlens_k;  // device int32 [batch + 1], absolute entries
    void* dst;                // bf16 [rows, dst_stride]
    mj_i64 dst_stride;
    int batch, block_size, num_blocks, max_blocks;
};
static constexpr int mj_gather_threads() { return 128; }
