#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace mlajit {

// How the default rates were obtained. Source: /work/shared/h200_anchor_routing.csv (ANCHORS.md, "The best
// of today's parts per path"), 40 cells: heads {128, 64, 32, 16}, s_q 2k..32k, s_k in {1, 2, 4} x s_q,
// topk 2048. One fit per term, on the term's own column, of t_ms = overhead + FLOPs / rate, by least
// squares on the relative error (weights 1/t^2: times span 0.05..130 ms and a plain fit would only see the
// largest cells):
//   upproj    column upproj_ms   (cuBLAS)       631.2 TFLOP/s + 26.9 us   rms 6.8 %, max 23.6 %
//   mha_attn  column attn_mha_ms (cuDNN SDPA)   610.7 TFLOP/s + 74.9 us   rms 5.4 %, max 17.1 %
//   absorb    column absorb_ms   (torch bmm)    379.3 TFLOP/s + 49.4 us   rms 7.0 %, max 24.3 %
//   mqa_attn  column flashmla_ms (FlashMLA sm90) 614.2 TFLOP/s, no overhead rms 6.8 %, max 18.5 %
// FlashMLA's free fit gave a negative overhead (-90 us, 589 TFLOP/s): L2 misses at s_k = 64k make large
// cells slow, which tilts the line; a negative constant would make tiny requests cost less than nothing,
// so that term is fitted through the origin. The worst cells of each fit are the smallest (h = 16,
// s = 2k: a few tens of microseconds, launch-dominated) and FlashMLA at s_k = 64k (-16 %).
// Whole paths against the mha_ms / mqa_ms columns: MHA rms 4.1 % (max 8.9 %), MQA rms 6.3 % (max 18.1 %);
// the predicted winner matches 39 of 40 cells (the miss: h=16 s_q=8k s_k=32k, measured 4.053 vs 4.076 ms).
// The cuDNN rate has no top-k mask in it: it is an optimistic bound for a masked kernel (mlajit's portable
// masked kernel measured ~250 TFLOP/s at S=8k, docs/perf_mha_notes.md), which is why the calibration table
// and mlajit's measured kernel rates must replace it.
// Mask build: the CSV has no mask (cuDNN cannot take one). From mlajit's topk_mask kernel
// (docs/perf_mha_notes.md: 0.021 ms at S=4096, 0.037 ms at S=8192, topk 2048): the per-word cost set by
// bandwidth (4 bytes written at the ~4 TB/s copy ceiling = 1e-9 ms), then overhead and per-index cost
// solved exactly from the two points (6.0 us, 1.72e-9 ms per index).
// FlashMLA on Hopper pads heads to 64, hence mqa_head_tile 64.
KernelRates h200_anchor_rates() {
    KernelRates r;
    r.upproj = {631.2, 0.0269};
    r.mha_attn = {610.7, 0.0749};
    r.mask = {0.0060, 1.72e-9, 1.0e-9};
    r.absorb = {379.3, 0.0494};
    r.mqa_attn = {614.2, 0.0};
    r.mqa_head_tile = 64;
    return r;
}

void check_shape(const AttnShape& s, std::string_view what) {
    if (s.s_q < 1) fail_arg("{}: s_q = {} must be at least 1 (a request with no queries has nothing to plan)", what, s.s_q);
    if (s.s_k < s.s_q)
        fail_arg("{}: s_k = {} is less than s_q = {}: the queries are the last s_q of the s_k key positions, so "
                 "s_k counts the new tokens too",
                 what, s.s_k, s.s_q);
    if (s.heads < 1 || s.heads > 128) fail_arg("{}: heads = {} must be in 1..128 (local heads per rank)", what, s.heads);
    if (s.topk < 1) fail_arg("{}: topk = {} must be at least 1", what, s.topk);
}

double causal_pairs(long s_q, long s_k) {
    const double q = double(s_q);
    return q * double(s_k - s_q) + q * q / 2;
}
// mlajit's own kernels on the H200 (2026-12-02, driver 580 / CUDA 13.0): fitted by tools/dev/fit_rates.py
// to the calibration run of `mlajit-warmup calibrate` (docs/PERF.md, "Planner calibration"): 60 cells of
// whole-path mlajit_mla_prefill times, heads {128, 64, 32, 16} x s_q {1k..16k} x s_k {1, 2, 4} x s_q,
// topk 2048, spread indices (one per equal slice of each causal prefix). Least squares on the relative
// error, as above. MHA path on the 48 masked cells, up-projection and attention rates with one overhead
// jointly (mask build as above): up-projection 505.8 TFLOP/s (cuBLASLt), masked attention 283.3 TFLOP/s
// + 66.1 us; rms 3.1 %, max 12.3 % (h 16, s_q 1k, s_k 4k). MQA path: absorption kept at the anchors'
// cuBLAS fit (within one head count it scales with s_q * h exactly like the sparse attention, so whole
// paths cannot separate them), sparse attention per head tile over the VALID indices: tile 16 125.9
// TFLOP/s + 1.2 us, tile 32 169.2 + 58.4 us, tile 64 293.5 + 69.9 us; rms 2.1 %, max 10.5 % (h 64, s_q 16k,
// s_k 64k: L2 misses over 64k latent rows). Counting all topk instead of the valid ones gave rms 38 %:
// the kernel skips all-padding index tiles. The predicted winner matches the measured one on 48/48
// masked cells.
// Masked attention refitted 2026-12-03 to the Hopper tier (kernels_src/mha/sm90.cuh v3, the default on
// sm_90a; the 12-02 calibration above ran the portable tier, ~280 TFLOP/s): the kernel alone, mask build
// excluded, median of 15 (tools/dev/mha harness, docs/calibration/mha_sm90_rates_2026-12-03.md): h 128 S 8k
// 5.507 ms, h 16 S 8k 0.701 ms, h 16 S 16k 2.441 ms (top-2048 masks, no tile skippable: the work is the
// dense causal work) -> 539.5 TFLOP/s + 56.4 us, worst cell 6.7 %. Dense on the same tier fits 752.5
// TFLOP/s + 57.5 us (the planner's MHA path is the masked one whenever s_k > topk, so only masked is used).
// Then the masked kernel with a mask stage (t4, 616.6 TFLOP/s), and v5 (2026-12-03: dense and masked one
// kernel, kernels_src/mha/sm90.cuh, the mask words copied by cp.async; docs/calibration/
// mha_sm90_v5_rates_2026-12-03.md): masked h 128 S 8k 4.345 ms, h 16 S 8k 0.596, h 16 S 16k 2.059; with the
// overhead kept from the fit above (three large cells cannot pin it), 656.1 TFLOP/s, cells within 4.5 %.
// Refitted 2026-12-03 to the Hopper tier's whole-path calibration (`mlajit-warmup calibrate --evaluate`,
// same 60-cell grid as 12-02, merged main of 12-03 with the Hopper MHA v5 and sparse MQA schedule-1
// kernels; table and log in docs/calibration/NVIDIA_H200_2026-12-03_hopper.json and
// calibrate_H200_2026-12-03_hopper.log), `tools/dev/fit_rates.py TABLE --upproj 505.8`:
// - MHA: the up-projection pinned at the 12-02 cuBLASLt fit (the same GEMM; the grid's cells, s_k <= 4 s_q,
//   are attention-bound and a free fit puts it at 675.6 TFLOP/s, which under-predicts issue 13's
//   chunked-prefill batch, 64 x 64 new over 3000 cached at 16 heads, up-projection-bound: 1.48 ms against
//   1.931 measured; pinned: 1.87); masked attention 662.7 TFLOP/s + 31.0 us (the one MHA overhead);
//   rms 6.1 %, max 17.3 % (h 16, s_q = s_k = 4k: a quarter of a millisecond).
// - Sparse attention over the valid indices, per tile: 16: 96.7 TFLOP/s (+ 0: the free fit's overhead was
//   negative), 32: 200.7 + 30.4 us, 64 (Hopper schedule 1): 385.2 + 40.2 us; rms 7.9 %, max 20.0 % (h 32,
//   s_q 8k, s_k 32k). The misses are the long contexts (s_k >= 4 s_q, -10..-20 %): the gather's L2 misses
//   grow with the cached rows, which the FLOP count does not see. The 16-head tile (the portable kernel)
//   measured slower than on 12-02 (h 16 s_q = s_k = 16k: 11.26 ms against 8.84).
// - Winner right on 45 of 48 masked cells (the misses within 2 %); on the 44 off-grid shapes of the same
//   run the refit model picks the faster path on 44 (the 12-02 rates: 42, 1.17 ms lost of 143.7).
// - Fixed cost per step (batch-level routing, planner.h): masked MHA 31.0 + 6.0 (mask) = 37.0 us; sparse
//   MQA 49.4 (absorption, anchors' fit) + the tile's overhead: 49.4 / 79.8 / 89.6 us at 16 / 32 / 64.
// 2026-12-05 (session 20): at <= 16 heads the Hopper tier runs the keys-as-M kernel (sparse_mqa/sm90_t.cuh) instead
// of the portable 16 x 32 tile; its rate is the 12-03 fit's 96.7 TFLOP/s times the two kernels' same-run ratio (8k,
// topk 2048, paged: 5.333 / 4.513 ms, H100, tools/dev/mqa/run_t1.sh): 114.0. Not refitted on whole paths.
// Refitted 2026-12-03 evening (helper mask) to the shipped kernels alone (H200, docs/PERF.md "Top-k mask
// build and masked MHA, 2026-12-03 evening"; raw logs docs/calibration/mask_build_2026-12-03/):
// - Mask build (kernels_src/topk_mask/sm80.cuh, 16-byte index loads): 0.0312 / 0.0516 / 0.1031 ms at
//   S 8k / 16k / 32k, topk 2048 (tools/dev/mask). Overhead kept at 6.0 us (small requests are latency-
//   bound; a free line puts 16 us there, the bandwidth ramp of the large cells) and 1e-9 ms per word;
//   per index refitted (relative least squares): 1.12e-9 ms (was 1.72e-9, which over-predicted S 8k by
//   19 %); cells -14 % / +0.5 % / +11 %, at most 0.011 ms, under 1 % of their paths.
// - Masked attention: mlajit-bench masked minus the mask build, same call: h 16 S 8k 0.5506 ms, h 16 S 16k
//   1.9195, h 128 S 8k 4.0584; the one MHA overhead kept at 31.0 us (fitted on whole paths above, which
//   three kernel cells cannot re-pin): 692.4 TFLOP/s (was 662.7: +9.7 % at h 16 S 16k); cells -4.2 % /
//   +5.0 % / -1.4 %. Whole one-call path at h 16 S 8k (run_bench.py, same call): measured 0.636 ms,
//   predicted 0.622 (the 662.7 / 1.72e-9 rates: 0.655).
// Refitted 2026-12-07 (session 31) to a whole-path calibration on the H200 (same 60-cell grid, merged main at 676e273:
// the 16-head keys-as-M kernel with its persistent grid and the key-set pre-pass, Hopper MHA v5; table, log and the
// rates' fit in docs/bench/2026-12-07_h200_s31_t29/cal/), `tools/dev/fit_rates.py TABLE --upproj 505.8`: masked
// attention 707.7 TFLOP/s + 25.6 us (rms 5.3 %, max 13.2 %: h 16, s_q = s_k = 4k); sparse tiles 16: 151.4 + 5.0 us,
// 32: 234.3 + 40.4 us, 64: 440.2 + 52.0 us (rms 6.0 %, max 15.7 %: h 64, s_q 8k, s_k 32k). Winner right on 48 of 48
// masked cells; on the run's 44 off-grid shapes the refit model picks the faster path on 43 (0.733 ms lost of 130.9;
// the old rates put the 16-head sparse path 33 % slow: 114.0 against 151.4). Issue 13's batch, one step: masked 1.847
// ms, sparse 2.029 predicted (measured on the H200 in session 26: 1.948 planned masked, 2.056 forced sparse).
KernelRates h200_mlajit_rates() {
    KernelRates r = h200_anchor_rates();
    r.upproj = {505.8, 0.0};
    r.mha_attn = {707.7, 0.0256};
    r.mask = {0.0060, 1.12e-9, 1.0e-9};
    r.mqa_tiles = {{16, 16, {151.4, 0.0050}}, {32, 32, {234.3, 0.0404}}, {128, 64, {440.2, 0.0520}}};
    r.mqa_attn = r.mqa_tiles.back().rate;
    r.mqa_head_tile = 64;
    r.mqa_skips_padding = true;
    return r;
}

// Sparse MQA on the FP8 cache. The one call dequantizes the keys of each step into bf16 rows with one
// gather pass (656 bytes read, 1152 written per key) on BOTH paths: the MHA runs did so from the start, and
// the sparse steps do so because the sparse kernel reading the FP8 pages directly measured 1.37x (16 heads,
// portable tile) to 1.50x (64 and 128 heads, Hopper tile) slower than on bf16 rows (H200, s_q = s_kv = 8k,
// topk 2048; docs/PERF.md "Sparse MQA on the FP8 cache": the in-kernel dequantization costs more than the
// bytes it saves). With the same gather on both paths the format does not move the crossover: factor 1.
// When a direct FP8 kernel beats gather + bf16, this is where its measured time ratio per head tile goes.
double kv_format_mqa_factor(KvFormat f, int heads) {
    (void)f;
    (void)heads;
    return 1.0;
}

double upproj_flops(const AttnShape& s) { return 2.0 * double(s.s_k) * 512 * s.heads * 256; }

double mha_attn_flops(const AttnShape& s) { return 2.0 * s.heads * causal_pairs(s.s_q, s.s_k) * (192 + 128); }

double absorb_flops(const AttnShape& s) { return 2 * (2.0 * double(s.s_q) * s.heads * 128 * 512); }

int padded_heads(int heads, int head_tile) {
    if (head_tile < 1) fail_arg("mqa_head_tile = {} must be at least 1 (16, 32 or 64 for the sparse kernels)", head_tile);
    return (heads + head_tile - 1) / head_tile * head_tile;
}

double valid_indices(long s_q, long s_k, int topk) {
    // Query i (0-based, bottom-right aligned) has a prefix of s_k - s_q + 1 + i keys.
    const double first = double(s_k - s_q + 1);
    const double partial = std::clamp(double(topk) - first + 1, 0.0, double(s_q));  // queries with < topk keys
    return partial * first + partial * (partial - 1) / 2 + (double(s_q) - partial) * topk;
}

double mqa_attn_flops(const AttnShape& s, int head_tile, bool valid_only) {
    const double indices = valid_only ? valid_indices(s.s_q, s.s_k, s.topk) : double(s.s_q) * s.topk;
    return 2.0 * indices * padded_heads(s.heads, head_tile) * (576 + 512);
}

CostModel::CostModel(KernelRates rates) : rates_(rates) {
    const KernelRate* all[] = {&rates_.upproj, &rates_.mha_attn, &rates_.absorb, &rates_.mqa_attn};
    const char* names[] = {"upproj", "mha_attn", "absorb", "mqa_attn"};
    for (int i = 0; i < 4; ++i) {
        if (!(all[i]->tflops > 0) || !std::isfinite(all[i]->tflops))
            fail_arg("cost model: {} rate = {} TFLOP/s must be a positive number", names[i], all[i]->tflops);
        if (!(all[i]->overhead_ms >= 0) || !std::isfinite(all[i]->overhead_ms))
            fail_arg("cost model: {} overhead = {} ms must be a non-negative number", names[i], all[i]->overhead_ms);
    }
    const auto& m = rates_.mask;
    if (!(m.overhead_ms >= 0 && m.ms_per_index >= 0 && m.ms_per_word >= 0))
        fail_arg("cost model: mask build costs ({} ms, {} ms/index, {} ms/word) must be non-negative", m.overhead_ms,
                 m.ms_per_index, m.ms_per_word);
    padded_heads(1, rates_.mqa_head_tile);
    for (size_t i = 0; i < rates_.mqa_tiles.size(); ++i) {
        const auto& t = rates_.mqa_tiles[i];
        if (!(t.rate.tflops > 0) || !std::isfinite(t.rate.tflops) || !(t.rate.overhead_ms >= 0))
            fail_arg("cost model: sparse tile {} has rate {} TFLOP/s + {} ms: both must be positive (overhead >= 0)", i,
                     t.rate.tflops, t.rate.overhead_ms);
        padded_heads(1, t.tile);
        if (i > 0 && t.max_heads <= rates_.mqa_tiles[i - 1].max_heads)
            fail_arg("cost model: sparse tiles must be sorted by max_heads ({} after {})", t.max_heads,
                     rates_.mqa_tiles[i - 1].max_heads);
    }
}

MhaTimes CostModel::mha(const AttnShape& s, bool masked) const {
    MhaTimes t;
    t.upproj_ms = rates_.upproj.ms(upproj_flops(s));
    t.attn_ms = rates_.mha_attn.ms(mha_attn_flops(s));
    if (masked) {
        const double words = double(s.s_q) * double((s.s_k + 31) / 32);
        t.mask_ms = rates_.mask.overhead_ms + double(s.s_q) * s.topk * rates_.mask.ms_per_index +
                    words * rates_.mask.ms_per_word;
    }
    return t;
}

MqaTileRate CostModel::mqa_tile(int heads) const {
    if (rates_.mqa_tiles.empty()) return {128, rates_.mqa_head_tile, rates_.mqa_attn};
    for (const auto& t : rates_.mqa_tiles)
        if (heads <= t.max_heads) return t;
    return rates_.mqa_tiles.back();
}

MqaTimes CostModel::mqa(const AttnShape& s) const {
    const MqaTileRate t = mqa_tile(s.heads);
    return {rates_.absorb.ms(absorb_flops(s)), t.rate.ms(mqa_attn_flops(s, t.tile, rates_.mqa_skips_padding))};
}

double CostModel::mha_fixed_ms(bool masked) const {
    return rates_.upproj.overhead_ms + rates_.mha_attn.overhead_ms + (masked ? rates_.mask.overhead_ms : 0.0);
}

double CostModel::mqa_fixed_ms(int heads) const { return rates_.absorb.overhead_ms + mqa_tile(heads).rate.overhead_ms; }

PathTimes CostModel::predict(const AttnShape& s) const {
    return {mha(s, s.s_k > s.topk).total(), mqa(s).total()};
}

ModelCrossover model_crossover(const CostModel& m, int heads, int topk, double ratio, long max_s_q) {
    if (!(ratio >= 1)) fail_arg("model_crossover: ratio s_k/s_q = {} must be at least 1", ratio);
    // Positive where sparse MQA wins. Only s_k > topk counts: below it the path is dense MHA anyway.
    auto margin = [&](long s_q) {
        AttnShape s{s_q, std::max(s_q, long(std::ceil(ratio * double(s_q)))), heads, topk};
        PathTimes t = m.predict(s);
        return std::log(t.mha_ms / t.mqa_ms);
    };
    long lo = std::max(1L, long(std::floor(double(topk) / ratio)));
    while (lo < max_s_q && std::ceil(ratio * double(lo)) <= topk) ++lo;
    if (margin(lo) >= 0) return {ModelCrossover::Kind::mqa_throughout, lo};
    if (margin(max_s_q) < 0) return {ModelCrossover::Kind::mha_throughout, max_s_q};
    long hi = max_s_q;
    while (hi - lo > 1) {
        long mid = lo + (hi - lo) / 2;
        (margin(mid) < 0 ? lo : hi) = mid;
    }
    return {ModelCrossover::Kind::at, hi};
}

}  // namespace mlajit
