// mlajit kernel ABI: the parameter structs and launch-shape rules shared by the host runtime (C++20) and
// the kernels (compiled by NVRTC with no toolkit headers). Both sides include this one file, so a kernel
// and the code that launches it cannot disagree on a field or on the shared-memory size.
//
// Rules for this file: plain C types only (no <cstdint>, no std::), no device-only or host-only code.
#pragma once

typedef long long mj_i64;

// A rule both sides evaluate at run time (not only in constant expressions): callable from host and device code.
#if defined(__CUDACC__)
#define MJ_ABI_HD __host__ __device__
#else
#define MJ_ABI_HD
#endif

// ---------------------------------------------------------------------------------------------------------
// MHA forward (dense causal, or causal AND top-k bitmask). Varlen batch, bottom-right causal alignment:
// request r has s_q = cu_q[r+1]-cu_q[r] queries and s_k = cu_k[r+1]-cu_k[r] keys; local query i sits at key
// position s_k - s_q + i and attends local keys j <= that position (and, when masked, only if bit j of its
// mask row is set). All strides are in elements; the last dimension of every tensor is contiguous.
// The key vector of head h is [k_nope(128) ; k_pe(64)]: k_pe has its own strides, so a k_pe shared by all
// heads is kp_stride_head = 0, and one packed k [T_k, h, 192] is k_nope = k, k_pe = k + 128.
// ---------------------------------------------------------------------------------------------------------

// The portable MHA kernel's fused K/V up-projection (MJ_UP_PROJ = 1; the one-call prefill's small dense
// steps): before attending, the block of (head, request) writes its own head's k_nope / v rows of the request
// (at MhaFwdParams::k_nope / v, which must be distinct writable [T_k, h, 128] views, k_nope ; v per head) as
// latent rows . W_kv_b_h^T, so the step is one launch instead of a GEMM and an MHA launch. Each request then
// needs s_q <= MJ_BLOCK_M (one block per head and request). Latent rows come from kv_c (key t's row at
// kv_c + t * kv_stride, t the global key number; MhaFwdParams::k_pe gives k_pe as usual) or, when pages is
// not NULL, from the paged bf16 cache, k_pe included (MhaFwdParams::k_pe unused); a block-table entry
// outside [0, num_blocks) gives its keys NaN rows, as the paged gather does.
// ---------------------------------------------------------------------------------------------------------
struct MhaUpProj {
    const void* kv_c;         // bf16 latent rows [T_k, >= 512], row stride kv_stride (contiguous form)
    mj_i64 kv_stride;
    const void* w;            // bf16 W_kv_b [h * 256, 512]: rows 256h .. 256h + 127 give k_nope, the next 128 v
    mj_i64 w_stride;
    const void* pages;        // bf16 [num_blocks, block_size, 576], or NULL (contiguous form)
    mj_i64 page_stride, tok_stride;
    const int* block_table;   // int32 [batch, max_blocks]: row b = request b of cu_seqlens_k
    mj_i64 bt_stride;
    int block_size, num_blocks, max_blocks;
};
// Shared memory of the fused up-projection (reused by the attention after it): two stages of 64 latent rows
// x 64 columns and the head's 256 W_kv_b rows x 64 columns.
static constexpr int mj_mha_up_keys = 64;
static constexpr int mj_mha_up_smem_bytes() { return 2 * (mj_mha_up_keys * 64 * 2 + 256 * 64 * 2); }

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
    // The rope part of q (portable tier): bf16 [T_q, h, 64]; NULL means q + 128 with q's strides (a packed q).
    const void* q_pe;
    mj_i64 qp_stride_tok, qp_stride_head;
    MhaUpProj up;             // read only by the portable kernel's MJ_UP_PROJ = 1 variant
};

// The Hopper tier of MHA (kernels_src/mha/sm90.cuh, sm_90a) takes the same MhaFwdParams plus four TMA tensor
// maps the host encodes with cuTensorMapEncodeTiled (bf16, 3-D {dim, head, token}, boxes of 64 x 1 x 128
// elements, 128-byte swizzle): q (192 wide), k_nope (128), k_pe (64; head extent 1 when shared by all
// heads) and v (128); masked, a fifth over the mask words (uint32 2-D {word, row}, boxes of 4 x 128, no
// swizzle). The maps come first: a CUtensorMap must sit 64-byte aligned in parameter space.
// ---------------------------------------------------------------------------------------------------------
struct alignas(64) MjTensorMap {
    unsigned long long raw[16];  // opaque CUtensorMap (128 bytes)
};
struct MhaFwdSm90Params {
    MjTensorMap tm_q, tm_k_nope, tm_k_pe, tm_v;
    MjTensorMap tm_mask;  // masked only: uint32 2-D {word, row} over the mask, boxes of 4 x 128, no swizzle
    MhaFwdParams p;
    int kp_shared;  // 1: k_pe is one head shared by all (tm_k_pe's head coordinate is always 0)
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
// latent kv rows of 576 shared by all heads, indices [s_q, width] -> out [s_q, h, 512] =
// softmax(sm_scale q.kv^T) over the row's set of valid keys, times kv[:, :512].
// - width (`topk` below) is any value >= 1: the kernels pad their tiles themselves.
// - An index is valid iff 0 <= index < s_kv of its request (and, paged, its page id is in [0, num_pages));
//   -1 and anything else is skipped. A key listed more than once in a row is attended ONCE (a top-k
//   selection is a set). A row with no valid index: out = 0, lse = -inf, max_logits = -inf.
// - Batched form: when cu_seqlens_q is non-null the call covers tokens cu_q[0] .. cu_q[batch] - 1 (cu_q[0]
//   may be > 0: a sub-batch of a larger batch; every tensor is still indexed from token 0, and grid.x =
//   cu_q[batch] - cu_q[0]). Token t belongs to request r (cu_q[r] <= t < cu_q[r+1]), its indices are local
//   to r, s_kv_r = cu_kv[r+1] - cu_kv[r] and the contiguous kv row is cu_kv[r] + index (cu_kv[0] may be > 0
//   too). Single-sequence form: grid.x = s_q, s_kv_0 = s_kv.
// - causal = 1 (DSA's semantics, as the one-call prefill and masked MHA use): query i of a request with
//   s_q_r queries (bottom-right aligned at key position s_kv_r - s_q_r + i) also skips indices past that
//   position. causal = 0: FlashMLA's semantics.
// - Latent cache: contiguous (block_table NULL): kv [*, 576] rows kv_stride_tok apart. Paged: kv
//   [num_pages, block_size, 576], key p of request r is row p % block_size of page
//   block_table[r * bt_stride_req + p / block_size] (page kv_stride_page elements apart, rows kv_stride_tok).
//   Paged single-sequence form: s_kv = max_blocks * block_size (the table's capacity; the host sets it), so
//   give cu_seqlens when the last page is partial and indices may point past the sequence.
// - Rows up to mj_mqa_max_width wide (below); the host refuses wider ones.
// - FP8 latent cache (kernels specialized with KV_FP8 = 1, paged form only): kv is uint8 [num_pages,
//   block_size, 656] (mlajit.h "FP8 latent cache": 512 e4m3fn, 4 fp32 scales, 64 bf16 k_pe) and the kv
//   strides count bytes (multiples of 16); the kernels compute with bf16(float(e4m3) * scale) and k_pe as
//   stored.
// - Key-set pre-pass (kept_rows not NULL): the kernel sparse_mqa/compact.cuh, launched before the main kernel with the
//   same params, grid.x tokens of the call (as the main kernel's), mj_mqa_compact_threads(topk) threads (specialized for
//   rows up to mj_mqa_compact_maxw(topk)) and mj_mqa_compact_smem_bytes(topk) bytes of shared memory, writes for token
//   cu_q[0] + i (i = 0 .. grid.x - 1) its row i of kept_rows: the latent rows of the row's set of valid keys (each key
//   once, at its lowest position, in row order) as byte offsets from kv over 16, and kept_count[i] of them. The main kernels then read that list instead of
//   building the set themselves (same keys, same order: the same result bits). The host takes the list form only where
//   every latent row is 16-byte aligned and the cache spans less than 2^36 bytes. NULL: every block builds its own set.
// ---------------------------------------------------------------------------------------------------------
struct SparseMqaFwdParams {
    const void* q;            // bf16 [s_q, h, 576]
    mj_i64 q_stride_tok, q_stride_head;
    const void* kv;           // bf16 [s_kv, 576], or the FP8 cache (uint8 rows of 656, strides in bytes)
    mj_i64 kv_stride_tok;
    const int* indices;       // int32 [s_q, topk]: topk = the row width, any value >= 1
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
    const int* block_table;   // NULL = contiguous kv; else int32 [batch, max_blocks] page ids
    mj_i64 bt_stride_req;     // elements between two requests' block-table rows
    mj_i64 kv_stride_page;    // elements (FP8: bytes) between two pages of kv
    int block_size;           // rows per page (paged form)
    int num_pages;            // pages in kv: a table entry outside [0, num_pages) makes its keys invalid
    int causal;               // 1: DSA's causal index semantics (see above); 0: FlashMLA's
    unsigned* kept_rows;      // NULL, or uint32 [tokens of the call, kept_stride]: the key-set pre-pass's list (above)
    int* kept_count;          // int32 [tokens of the call]: its lengths (with kept_rows)
    mj_i64 kept_stride;       // entries between two tokens' rows of kept_rows, >= topk
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
// MHA, Hopper tier: one TMA producer warpgroup + MJ_BLOCK_M / 64 consumer warpgroups; Q tile resident, K and
// V tiles MJ_STAGES deep, every tile in 64-column boxes (128-byte swizzle rows); + 1024 so the kernel can
// align the tiles to the swizzle period, + 512 for the mbarriers and the tile-skip bitmap.
static constexpr int mj_mha90_threads(int block_m) { return 128 + 128 * (block_m / 64); }
static constexpr int mj_mha90_smem_bytes(int block_m, int block_n, int stages, int d_qk, int d_v) {
    return 1024 + 2 * (block_m * d_qk + stages * block_n * (d_qk + d_v)) + 512;
}
// Sparse MQA: one query token and MJ_BLOCK_H heads per block; MJ_BLOCK_N gathered keys per step.
// Index rows up to mj_mqa_max_width wide: the compacted key set of a row (sparse_mqa/index_set.cuh) keeps
// a bitmap and a prefix count per 32 positions in shared memory; the host refuses wider rows.
static constexpr int mj_mqa_max_width = 8192;
static constexpr int mj_mqa_index_set_bytes = (mj_mqa_max_width / 32) * 6 + 16;
// The set build's hash table (8 bytes a slot) for a row of `width` positions: a power of two >= 2 * width, from 64 up to
// mj_mqa_max_width slots. The key-set pre-pass (sparse_mqa/compact.cuh): the set, then the table, in shared memory.
static constexpr MJ_ABI_HD int mj_mqa_hash_slots(int width) {
    int n = 64;
    while (n < 2 * width && n < mj_mqa_max_width) n <<= 1;
    return n;
}
// Its specialization for a row of `width` positions: the widest row it takes (2048 or mj_mqa_max_width) and its threads
// (H100, 8k, topk 2048: 512 threads 0.207 ms, 256 0.228, 128 0.372; at the 8192 class 256 and 512 both 0.35).
static constexpr int mj_mqa_compact_maxw(int width) { return width <= 2048 ? 2048 : mj_mqa_max_width; }
static constexpr int mj_mqa_compact_threads(int width) { return width <= 2048 ? 512 : 256; }
static constexpr int mj_mqa_compact_smem_bytes(int width) { return mj_mqa_index_set_bytes + mj_mqa_hash_slots(width) * 8; }
static constexpr int mj_mqa_threads(int warps) { return warps * 32; }
static constexpr int mj_mqa_smem_bytes(int block_h, int block_n, int stages, int d_qk, int d_v) {
    // Q tile + K ring (V is the first d_v columns of K) + P tile (bf16) + row-stat scratch (512 B) +
    // per-row rescale (fp32) + per-slot row validity (1 byte a row) + the row's compacted index set
    return 2 * (block_h * d_qk + stages * block_n * d_qk + block_h * block_n) + 512 + 4 * block_h +
           stages * block_n + mj_mqa_index_set_bytes + 0 * d_v;
}
// Sparse MQA, portable tier on the FP8 cache (KV_FP8 = 1): Q tile + ONE bf16 K tile (the math's operand,
// written by the dequantization) + a STAGES-deep ring of raw 656-byte rows (cp.async targets) + at
// BLOCK_H 64 the split reduction's exchange (128 B a key) + P tile + row-stat scratch + per-row rescale +
// STAGES * BLOCK_N bytes (kept for the layout) + the row's compacted index set.
static constexpr int mj_mqa_fp8_row_bytes = 656;
static constexpr int mj_mqa_smem_bytes_fp8(int block_h, int block_n, int stages) {
    return 2 * (block_h * 576 + block_n * 576 + block_h * block_n) + stages * block_n * mj_mqa_fp8_row_bytes +
           (block_h == 64 ? block_n * 128 : 0) + 512 + 4 * block_h + stages * block_n + mj_mqa_index_set_bytes;
}
// Sparse MQA, Hopper tier (sparse_mqa/sm90.cuh): one token x 64 heads a block, two math warpgroups + one
// producer warpgroup; Q, a 2-slot ring of 64-key tiles (576 wide), P (bf16 64 x 64), row-stat scratch, the ring's
// mbarriers and the row's key set. The FP8 form (KV_FP8 = 1) uses the same layout: its producer dequantizes
// into the ring from registers.
static constexpr int mj_mqa90_threads() { return 3 * 128; }
static constexpr int mj_mqa90_smem_bytes() { return 3 * 9 * 64 * 128 + 64 * 128 + 2 * 64 * 4 + 2 * 2 * 8 + mj_mqa_index_set_bytes; }
// Sparse MQA, Hopper tier for 16 / 32 heads (sparse_mqa/sm90_t.cuh: keys as the wgmma M dimension): Q [block_h x 576],
// a ring of STAGES tiles of BLOCK_N keys, the tile maxima exchange ([2][2][4][block_h] fp32), the epilogue's row sums and maxima
// ([2][4][block_h] + [2][block_h] fp32), the ring's mbarriers and the row's key set; on the FP8 cache (kv_fp8 1) then the
// producer warps' rings of raw 656-byte rows (16 warps x 6 rows, sparse_mqa/sm90_f8_staged.cuh). The persistent grid (persist
// 1, sparse_mqa/sm90_t_persist.cuh): a second Q buffer and the epilogue's O staging ([block_h][512 + 4] fp32) besides.
static constexpr int mj_mqa90t8_raw_bytes() { return 16 * 6 * 656; }
static constexpr int mj_mqa90t_smem_bytes(int block_h, int block_n, int stages, int kv_fp8 = 0, int persist = 0) {
    return 9 * block_h * 128 + stages * 9 * block_n * 128 + 16 * block_h * 4 + 10 * block_h * 4 + stages * 2 * 8 +
           mj_mqa_index_set_bytes + (kv_fp8 ? mj_mqa90t8_raw_bytes() : 0) +
           (persist ? 9 * block_h * 128 + block_h * (512 + 4) * 4 : 0);
}
// Its threads: 2 math warpgroups and 4 producer warps (bf16), or 16 producer warps on the FP8 cache (kv_fp8 1: the raw-ring
// producer, sparse_mqa/sm90_f8_staged.cuh, whose conversions need many warps to run near the conversion unit's rate).
static constexpr int mj_mqa90t_threads(int kv_fp8) { return kv_fp8 ? 768 : 384; }
// The scale-folding FP8 body of the same kernel (sparse_mqa/sm90_t_fp8.cuh, a development body that 384 threads run):
// Q [block_h x 576] (q_nope f16), STAGES slots of BLOCK_N rows as stored (656 bytes a key: k_pe block, codes, scales), the
// tile maxima exchange ([2][2][4][block_h + 4] fp32), the epilogue's row sums and maxima, the per-head q_nope factors
// ([block_h] fp32), the mbarriers and the key set.
static constexpr int mj_mqa90t8_smem_bytes(int block_h, int block_n, int stages) {
    return 9 * block_h * 128 + stages * block_n * 656 + 16 * (block_h + 4) * 4 + 10 * block_h * 4 + block_h * 4 + stages * 2 * 8 +
           mj_mqa_index_set_bytes;
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
// The FP8 cache (spec MJ_KV_FP8 = 1) lands in the same bf16 rows: bf16(e4m3 * scale) for kv_c, k_pe as
// stored; its page and token strides count bytes.
struct PagedGatherParams {
    const void* pages;        // bf16 [num_blocks, block_size, 576], or uint8 [.., .., 656] (MJ_KV_FP8)
    mj_i64 page_stride, tok_stride;  // in elements of the page dtype
    const int* block_table;   // int32 [batch, max_blocks] (row r of this pointer = request r of the run)
    mj_i64 bt_stride;
    const int* cu_seqlens_k;  // device int32 [batch + 1], absolute entries
    void* dst;                // bf16 [rows, dst_stride]
    mj_i64 dst_stride;
    int batch, block_size, num_blocks, max_blocks;
};
static constexpr int mj_gather_threads() { return 128; }

// ---------------------------------------------------------------------------------------------------------
// FP8 latent cache (fp8_ds_mla, mlajit.h "FP8 latent cache"): 656-byte rows, kv_c as 512 e4m3fn, 4 fp32
// scales (one per 128 values), k_pe as 64 bf16. The byte offsets inside a row:
static constexpr int mj_fp8_row_bytes = 656;
static constexpr int mj_fp8_scales_at = 512;
static constexpr int mj_fp8_rope_at = 528;
// Writer (kernels_src/quantize_cache): token t's kv_c / k_pe rows into the row at slot_mapping[t] (page
// slot / block_size, row slot % block_size). Per 128 values scale = amax / 448 (1 when that is 0), code =
// e4m3(RNE(x / scale)) saturating at 448. A slot < 0 or >= num_blocks * block_size is skipped.
// ---------------------------------------------------------------------------------------------------------
struct QuantizeCacheParams {
    const void* kv_c;         // bf16 [tokens, 512]
    mj_i64 kvc_stride;        // elements
    const void* k_pe;         // bf16 [tokens, 64]
    mj_i64 kpe_stride;        // elements
    const int* slot_mapping;  // int32 [tokens]
    void* cache;              // uint8 [num_blocks, block_size, 656]
    mj_i64 page_stride, tok_stride;  // bytes
    mj_i64 tokens;
    int block_size, num_blocks;
};
static constexpr int mj_quant_threads(int tokens_per_block) { return 32 * tokens_per_block; }
