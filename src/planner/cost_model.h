// Predicted time of each prefill path for one request (DESIGN.md section 5), used when no calibration table
// measured on this GPU covers the request. Every term is a kernel rate times a FLOP or element count, so
// the calibration (or mlajit's own measured kernel speeds) can replace the rates without touching the
// formulas.
#pragma once
#include <optional>
#include <string_view>
#include <vector>

namespace mlajit {

// One request: its queries are the last s_q of its s_k key positions (bottom-right causal alignment);
// heads are the local (per-rank) query heads.
struct AttnShape {
    long s_q = 0;
    long s_k = 0;
    int heads = 0;
    int topk = 0;
};

// The latent cache's format, as the planner sees it: bf16 rows (576 x 2 bytes per key) or the FP8 cache
// (fp8_ds_mla: 656 bytes per key, dequantized by the readers).
enum class KvFormat { bf16 = 0, fp8 = 1 };

// Sparse MQA attention time on the FP8 cache over its time on the bf16 cache, for a request of `heads`
// local heads (the MHA paths dequantize only their run's keys once, a cost the cost model does not count
// on bf16 pages either). See cost_model.cpp for where the numbers come from.
double kv_format_mqa_factor(KvFormat f, int heads);

// Throws Error(INVALID_ARGUMENT) naming `what` (e.g. "request 3") and the bad field.
void check_shape(const AttnShape& s, std::string_view what);

// t = overhead_ms + flops / rate.
struct KernelRate {
    double tflops = 0;       // sustained rate on the FLOPs the term counts
    double overhead_ms = 0;  // what a call costs beyond its FLOPs (launch, tails of small grids)
    double ms(double flops) const { return overhead_ms + flops / (tflops * 1e9); }
};

// Building the packed top-k bitmask: scattering the indices dominates; the per-word part zeroes and
// writes the rows.
struct MaskBuildCost {
    double overhead_ms = 0;
    double ms_per_index = 0;  // per (query, topk) index
    double ms_per_word = 0;   // per 32-bit mask word
};

// One sparse-attention kernel variant: requests with heads <= max_heads run it, padding heads up to a
// multiple of `tile`, at its own rate (a 16-head tile keeps fewer tensor cores busy per gathered key).
struct MqaTileRate {
    int max_heads = 128;
    int tile = 64;
    KernelRate rate;
};

struct KernelRates {
    KernelRate upproj;    // kv_c [s_k,512] x W_kv_b^T -> [s_k, h*256]
    KernelRate mha_attn;  // causal attention, d_qk 192, d_v 128
    MaskBuildCost mask;   // masked MHA only
    KernelRate absorb;    // the two bmm's of sparse MQA: [s_q,h,128]x[128,512] and [s_q,h,512]x[512,128]
    KernelRate mqa_attn;  // sparse attention over the top-k latent rows, d_qk 576, d_v 512
    int mqa_head_tile = 64;  // the sparse kernel pads heads up to a multiple of this (16, 32 or 64)
    // When non-empty (sorted by max_heads), replaces mqa_attn / mqa_head_tile: the first entry whose
    // max_heads >= the request's heads applies (the last one beyond).
    std::vector<MqaTileRate> mqa_tiles;
    // mlajit's sparse kernel skips 64-index tiles that are all -1 padding, so its work follows the valid
    // indices (queries with a causal prefix shorter than topk have fewer); FlashMLA's spends it on all topk.
    bool mqa_skips_padding = false;
};

// The "no table" default: cuDNN / cuBLAS / FlashMLA-class kernels on an H200 (fits in cost_model.cpp).
// They do not describe another GPU or mlajit's own kernels; a calibration table measured on the local GPU
// replaces them.
KernelRates h200_anchor_rates();
// mlajit's own kernels on an H200, fitted to its calibration run (cost_model.cpp says how): the default
// when no calibration table covers a request.
KernelRates h200_mlajit_rates();

// FLOP and element counts of the terms.
double causal_pairs(long s_q, long s_k);  // s_q*(s_k - s_q) + s_q^2/2
double upproj_flops(const AttnShape& s);
double mha_attn_flops(const AttnShape& s);
double absorb_flops(const AttnShape& s);
int padded_heads(int heads, int head_tile);
// Sum over the request's queries of min(topk, causal prefix): the indices a DSA indexer can fill.
double valid_indices(long s_q, long s_k, int topk);
// FLOPs of sparse attention at `head_tile`, over all topk indices or only the valid ones.
double mqa_attn_flops(const AttnShape& s, int head_tile, bool valid_only = false);

struct MhaTimes {
    double upproj_ms = 0, attn_ms = 0, mask_ms = 0;
    double total() const { return upproj_ms + attn_ms + mask_ms; }
};
struct MqaTimes {
    double absorb_ms = 0, attn_ms = 0;
    double total() const { return absorb_ms + attn_ms; }
};
// Whole-path times of one request. mha_ms is masked MHA when s_k > topk, dense MHA otherwise.
struct PathTimes {
    double mha_ms = 0, mqa_ms = 0;
};

class CostModel {
public:
    explicit CostModel(KernelRates rates = h200_anchor_rates());
    MhaTimes mha(const AttnShape& s, bool masked) const;
    MqaTimes mqa(const AttnShape& s) const;
    // The sparse kernel variant (tile, rate) a request with `heads` heads runs.
    MqaTileRate mqa_tile(int heads) const;
    PathTimes predict(const AttnShape& s) const;
    // What one step of a path pays once, however many requests the one call batches into it: the rates'
    // overhead terms (launch set-up, small-grid tails, GEMM set-up). The rest of a request's time (the
    // FLOP and index terms) is its share of the batched step. See planner.h, "Batch-level routing".
    double mha_fixed_ms(bool masked) const;
    double mqa_fixed_ms(int heads) const;
    const KernelRates& rates() const { return rates_; }

private:
    KernelRates rates_;
};

// Where masked MHA stops winning along s_k = ratio * s_q (ratio >= 1), s_k > topk only.
struct ModelCrossover {
    enum class Kind { at, mha_throughout, mqa_throughout } kind = Kind::at;
    long s_q = 0;  // Kind::at: the first s_q where sparse MQA is predicted faster
};
ModelCrossover model_crossover(const CostModel& m, int heads, int topk, double ratio, long max_s_q = 1L << 22);

}  // namespace mlajit
