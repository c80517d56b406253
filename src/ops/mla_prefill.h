// The one-call MLA prefill (mlajit_mla_prefill): plan every request, then run each request group on its
// path with the projections through cuBLASLt. Everything up to the launches is decided on the host by pure
// functions (check_mla_args, schedule_mla, the step layouts), so it is tested without a GPU.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mlajit/mlajit.h"
#include "ops/gemm_cublaslt.h"
#include "planner/planner.h"
#include "runtime/handle.h"

namespace mlajit {

struct MlaShapes {
    int64_t total_q = 0, total_k = 0, heads = 0, batch = 0;
    int64_t width = 0;  // of the indices tensor (any from 1 up)
    int64_t topk = 0;   // the model's top-k (args.topk, else the width): dense MHA is exact for s_k <= topk
    bool q_packed = false;   // q_nope / q_pe are views of one [T_q, h, 192] tensor: MHA reads it in place
    bool kv_packed = false;  // kv_c / k_pe are views of one [T_k, 576] tensor: MQA reads it in place
    bool paged = false;      // the latent cache is kv_cache [num_blocks, block_size, 576] + block_table
    bool kv_fp8 = false;     // paged, and kv_cache is the FP8 cache (uint8 [num_blocks, block_size, 656])
    int64_t num_blocks = 0, block_size = 0, max_blocks = 0;
    bool has_lse = false;
    // Set by the caller (mla_paged_fused), not by check_mla_args: a bf16 paged cache whose
    // MHA up-projection gathers its rows inside the Hopper GEMM (no kv_gather buffer; a k_pe buffer instead).
    bool paged_fused = false;
    // Set by the caller (enable_small_steps), not by check_mla_args: dense steps whose requests all have
    // s_q <= small_max_q and s_k <= small_max_keys run in one launch (the portable MHA kernel computes each
    // head's K/V rows itself, mha_up_spec). 0: never.
    int small_max_q = 0, small_max_keys = 0;
    // Set by the caller (GemmRunner::scratch_bytes): cuBLASLt's scratch at the start of the workspace.
    size_t gemm_scratch = kGemmWorkspaceBytes;
};
// Where a step's buffers start in the workspace: after cuBLASLt's scratch, and at 256 at least without one, as
// offset 0 means "not used" in a step layout.
inline size_t workspace_base(const MlaShapes& s) { return s.gemm_scratch > 256 ? s.gemm_scratch : 256; }

// Validates every argument (names the bad one); device pointers may be NULL when `need_data` is false
// (the workspace-size query), and the layout is then taken as unpacked (an upper bound).
MlaShapes check_mla_args(const mlajit_mla_prefill_args& a, bool need_data);

// One launch group. MHA steps cover a run of consecutive requests of one MHA path. MQA steps cover a run
// of consecutive whole requests (one batched launch set: absorb, attention, output projection), or, for a
// request too large for the budget alone, a chunk of its queries (the absorbed queries and latent outputs
// of a step bound the workspace).
struct MlaStep {
    Path path = Path::sparse_mqa;
    int64_t r0 = 0, r1 = 0;   // requests [r0, r1)
    int64_t t0 = 0, t1 = 0;   // global query tokens [t0, t1)
    int64_t k0 = 0, k1 = 0;   // global key tokens [k0, k1) of the requests
    int64_t max_s_k = 0;      // longest request of the step (mask row length)
    bool first_chunk = true;  // MQA: first chunk of its request, which packs the request's latent rows
    bool chunk = false;       // MQA: part of one request's queries (else whole requests [r0, r1))
    bool small = false;       // dense MHA in one launch, K/V up-projection inside (MlaShapes::small_max_*)
};

// Byte offsets inside the workspace of one step's buffers (0 = not used), and the step's total.
struct MlaStepLayout {
    size_t kv_up = 0;    // MHA: [tk, h, 256] = kv_c . W_kv_b^T (k_nope ; v per head)
    size_t q_pack = 0;   // MHA: [tq, h, 192] when q is not packed
    size_t mask = 0;     // masked MHA: [tq, words]
    size_t q_mqa = 0;    // MQA: [c, h, 576] absorbed queries
    size_t latent = 0;   // MQA: [c, h, 512] latent outputs
    size_t kept = 0, kept_bytes = 0;  // MQA: the key-set pre-pass's list (sparse_mqa_kept_bytes(c, width))
    size_t kv_pack = 0;  // MQA: [s_k, 576] when kv is not packed or is paged (gathered from the pages)
    size_t kv_gather = 0; // MHA, paged cache: [tk, 576] latent rows of the run, gathered from the pages
    size_t kpe = 0;       // MHA, paged_fused: [tk, 64] k_pe rows of the run, written by the up-projection
    size_t lse = 0;      // [tq, h] fp32 when the caller passed no lse
    size_t end = 0;
};
MlaStepLayout step_layout(const MlaShapes& s, const MlaStep& st);

struct MlaLimits {
    size_t mha_run_bytes = size_t(1) << 30;   // a run of MHA requests grows while its buffers fit in this
    size_t mqa_chunk_bytes = size_t(1) << 30; // MQA query chunks are sized to fit in this
};

struct MlaSchedule {
    std::vector<Path> paths;  // per request
    std::vector<MlaStep> steps;
    size_t workspace_bytes = 0;  // cuBLASLt's scratch (MlaShapes::gemm_scratch) + the largest step
};
// paths: one per request (requests with s_q = 0 run nothing). cu_q / cu_k: host cu_seqlens [batch + 1].
MlaSchedule schedule_mla(const MlaShapes& s, const int32_t* cu_q, const int32_t* cu_k, std::span<const Path> paths,
                         const MlaLimits& limits = {});

// The per-request paths for the call: force_path when given (checked), else the planner with this GPU's
// calibration table (MLAJIT_PATH and MLAJIT_MASKED_MHA_MAX_SEQ apply).
std::vector<Path> plan_mla_paths(const std::string& gpu_name, const MlaShapes& s, const int32_t* cu_q,
                                 const int32_t* cu_k, int force_path);

// fused_max_heads: the handle's GemmRunner::fused_paged_max_heads() (the size of what mla_prefill will run
// there; 0: the separate gather); gemm_scratch: its GemmRunner::scratch_bytes().
size_t mla_prefill_workspace_size(const std::string& gpu_name, const mlajit_mla_prefill_args& a, int64_t fused_max_heads = 0,
                                  size_t gemm_scratch = kGemmWorkspaceBytes);
// Whether a call with shapes s takes the fused paged up-projection (a bf16 paged cache, at most
// fused_max_heads heads: GemmRunner::fused_paged_max_heads()). Sets nothing.
bool mla_paged_fused(const MlaShapes& s, int64_t fused_max_heads);
// Sets what the step layouts take from the handle's GemmRunner (fused_max_heads: fused_paged_max_heads(),
// gemm_scratch: scratch_bytes()): the size query and the call both go through here, so they lay out alike.
void set_gemm_choices(MlaShapes& s, int64_t fused_max_heads, size_t gemm_scratch);
// Sets s.small_max_q / small_max_keys for a call on arch (MLAJIT_SMALL_STEP_KEYS; inputs whose rows are not
// 16-byte aligned keep the separate up-projection). The workspace query leaves them 0;
// schedule_mla sizes every step as if it were not small either, so the query and the call need the same bytes.
void enable_small_steps(MlaShapes& s, const Arch& arch, const mlajit_mla_prefill_args& a);
// check_mla_args(a, true) with the handle's choices (set_gemm_choices, as the size query takes them): the shapes
// whose step layouts fit the workspace the query sized. Small steps are not enabled (enable_small_steps).
MlaShapes mla_call_shapes(Handle& h, const mlajit_mla_prefill_args& a);
void mla_prefill(Handle& h, const mlajit_mla_prefill_args& a, CUstream stream);

}  // namespace mlajit
