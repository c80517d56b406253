// The attention ops: validate every argument (nothing launches on a bad one), pick the spec, launch.
#pragma once
#include <optional>

#include "mlajit/mlajit.h"
#include "mlajit_abi.h"
#include "runtime/handle.h"

namespace mlajit {

// What an op launches, fully decided on the host from the arguments alone (no GPU needed): validation
// errors come from building one, so they are testable on any machine.
template <typename Params>
struct LaunchPlan {
    KernelSpec spec;
    Dim3 grid;
    int threads = 0;
    int smem = 0;
    Params params{};
};

LaunchPlan<SparseMqaFwdParams> plan_sparse_mqa(const Arch& arch, const mlajit_sparse_mqa_args& a);
// The key-set pre-pass of a sparse MQA call (sparse_mqa/compact.cuh; mlajit_sparse_mqa_args.workspace): the workspace
// bytes it needs for a planned call (0 where it does not apply: no query token, or a latent cache spanning 2^36 bytes
// or more, beyond the list's 32-bit 16-byte offsets), and, given the caller's workspace, its launch with `main`'s
// params pointed at the list. Off (nullopt) without a workspace or where it does not apply; a workspace too small or
// misaligned is INVALID_ARGUMENT. sm_count > 0 (the device's SMs): where the pre-pass runs and the kernel has a persistent
// form (sparse_mqa_persistent_spec), `main` becomes that form with min(tokens, sm_count) blocks.
size_t sparse_mqa_workspace_bytes(const LaunchPlan<SparseMqaFwdParams>& main);
// The list's bytes for `tokens` query tokens of index rows `width` wide (what sparse_mqa_workspace_bytes returns where it
// applies): the one call reserves it in its workspace for each sparse step.
size_t sparse_mqa_kept_bytes(int64_t tokens, int64_t width);
std::optional<LaunchPlan<SparseMqaFwdParams>> plan_sparse_mqa_prepass(const Arch& arch, const mlajit_sparse_mqa_args& a,
                                                                      LaunchPlan<SparseMqaFwdParams>& main, int sm_count = 0);
LaunchPlan<MhaFwdParams> plan_mha(const Arch& arch, const mlajit_mha_args& a);
LaunchPlan<TopkMaskParams> plan_topk_mask(const Arch& arch, const mlajit_topk_mask_args& a);
LaunchPlan<QuantizeCacheParams> plan_quantize_cache(const Arch& arch, const mlajit_quantize_latent_cache_args& a);

template <typename Params>
void launch_plan(Handle& h, LaunchPlan<Params>& plan, CUstream stream) {
    h.launch(plan.spec, plan.grid, plan.threads, plan.smem, &plan.params, stream);
}

void sparse_mqa_prefill(Handle& h, const mlajit_sparse_mqa_args& a, CUstream stream);
void mha_prefill(Handle& h, const mlajit_mha_args& a, CUstream stream);
void topk_mask_build(Handle& h, const mlajit_topk_mask_args& a, CUstream stream);
void quantize_latent_cache(Handle& h, const mlajit_quantize_latent_cache_args& a, CUstream stream);

// The FP8 latent cache's descriptor: uint8 [num_blocks >= 1, block_size >= 1, 656], 16-byte aligned rows,
// num_blocks * block_size slots within int32. Throws INVALID_ARGUMENT naming `name` and what differs (a bf16
// tensor, a last dimension other than 656, ...).
void check_fp8_cache(const mlajit_tensor& t, const char* name);

int64_t topk_mask_words(int64_t max_seqlen_k);
// The fewest words a mask row may have for keys up to max_seqlen_k (ceil / 32): what inputs are checked against.
int64_t topk_mask_min_words(int64_t max_seqlen_k);

// Gathers the latent rows of requests [r0, r1) out of a paged cache (checked by the caller: kv_cache
// [num_blocks, block_size, 576] bf16, or the FP8 cache uint8 [.., .., 656] with kv_fp8, which is
// dequantized to bf16 on the way; block_table int32 [batch, max_blocks]) into bf16 dst rows of dst_stride
// elements, request r's key position p at row cu_k[r] - cu_k[r0] + p.
struct PagedGather {
    mlajit_tensor kv_cache, block_table;
    const int32_t* cu_seqlens_k = nullptr;  // device, the whole batch's
    int64_t r0 = 0, r1 = 0, max_s_k = 0;
    bool kv_fp8 = false;
    void* dst = nullptr;
    int64_t dst_stride = 0;
};
void paged_gather(Handle& h, const PagedGather& g, CUstream stream);

}  // namespace mlajit
