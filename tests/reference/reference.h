// float64 CPU reference of mlajit's attention semantics (DESIGN.md section 2), used by every GPU test and
// by the benchmark. Inputs are read through strided views (bf16 bit patterns, float or double); all math is
// in double. Results cover a list of query rows so that large GPU tests can check a sample quickly.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bf16.h"

namespace mlajit::ref {

// ---- tolerances used by the GPU tests ------------------------------------------------------------------
// out: bf16 has a relative half-ulp of 2^-9 (~2e-3); the kernels also round P to bf16 before P.V and
// accumulate in fp32, so a correct kernel sits near 1e-2 worst case per element. 2e-2 leaves headroom
// while an indexing or softmax bug (errors of order |out| itself) still fails. Elements of out near zero
// come from cancellation, their error scales with the typical magnitude, hence an absolute floor of
// kOutAtolRmsFraction * rms(reference).
inline constexpr double kOutRtol = 2e-2;
inline constexpr double kOutAtolRmsFraction = 2e-2;
// Aggregate bound ||got - ref|| / ||ref||: a correct bf16 kernel lands near 3e-3; a systematic bias that
// slips under the per-element bound does not.
inline constexpr double kOutRelL2Max = 1e-2;
// lse / max_logits are fp32 from fp32 logits of exact bf16 products: errors ~1e-6 for logits of order
// 10. 1e-3 absolute (natural log) allows exp2/log2 rewriting and scale rounding; a missed or extra key
// moves lse by about its softmax weight, which for typical top-k rows is far above that.
inline constexpr double kLseAtol = 1e-3;
inline constexpr double kMaxLogitsAtol = 1e-3;

// ---- inputs ----------------------------------------------------------------------------------------------
enum class DType { bf16, f32, f64 };

// Read-only strided view of a [tok, head, dim] tensor whose last dim is contiguous. Strides in elements.
// A tensor shared by all heads has stride_head = 0; a 2-D matrix uses tok as its row index.
struct View {
    const void* data = nullptr;
    DType type = DType::bf16;
    int64_t stride_tok = 0;
    int64_t stride_head = 0;

    View() = default;
    View(const uint16_t* p, int64_t st, int64_t sh = 0) : data(p), type(DType::bf16), stride_tok(st), stride_head(sh) {}
    View(const float* p, int64_t st, int64_t sh = 0) : data(p), type(DType::f32), stride_tok(st), stride_head(sh) {}
    View(const double* p, int64_t st, int64_t sh = 0) : data(p), type(DType::f64), stride_tok(st), stride_head(sh) {}

    View shifted(int64_t elems) const;  // same strides, starting `elems` further along the last dim
    void load(int64_t tok, int64_t head, int64_t n, double* dst) const;  // dst[0..n) = row (tok, head)
    double at(int64_t tok, int64_t head, int64_t d) const;
};

// Outputs of one reference call, only for the query tokens in `rows` (global indices, in the order given).
struct AttnResult {
    int64_t heads = 0;
    int64_t dim = 0;
    std::vector<int64_t> rows;
    std::vector<double> out;         // [rows.size(), heads, dim]
    std::vector<double> lse;         // [rows.size(), heads], natural log; -inf where nothing is attended
    std::vector<double> max_logits;  // [rows.size(), heads]; sparse MQA only, -inf where nothing is attended

    const double* out_at(size_t i, int64_t h) const { return out.data() + (int64_t(i) * heads + h) * dim; }
    double lse_at(size_t i, int64_t h) const { return lse[int64_t(i) * heads + h]; }
};

// ---- attention -------------------------------------------------------------------------------------------
// An empty cu_seqlens span means one request. An empty `rows` means every query token, in order.

struct SparseMqaArgs {
    View q{};                         // [s_q, heads, d_qk]
    View kv{};                        // [s_kv, d_qk] (stride_head ignored); the first d_v columns are V
    const int32_t* indices = nullptr; // [s_q, topk]
    int64_t idx_stride = 0;           // elements between index rows; 0 means topk
    int64_t s_q = 0, s_kv = 0, heads = 0, topk = 0;
    double sm_scale = 0.0;
    // Batched form (both or neither): token t of request r uses kv row cu_seqlens_kv[r] + idx, valid iff
    // 0 <= idx < s_kv of r. Otherwise valid iff 0 <= idx < s_kv.
    std::span<const int32_t> cu_seqlens_q{}, cu_seqlens_kv{};
    std::span<const int64_t> rows{};
    int64_t d_qk = 576, d_v = 512;
    // DSA's causal index semantics (mlajit_sparse_mqa_args.causal): local query i of a request (s_q
    // queries, s_kv keys) also skips indices > s_kv - s_q + i.
    bool causal = false;
};
// Invalid indices are skipped; a key listed more than once in a row is attended once. Row with no valid
// index: out 0, lse and max_logits -inf. max_logits = max over valid keys of sm_scale * q.k.
AttnResult sparse_mqa(const SparseMqaArgs& a);

struct MhaArgs {
    View q{};       // [T_q, heads, d_nope + d_pe]
    View k_nope{};  // [T_k, heads, d_nope]; for a packed k [T_k, heads, 192] pass k itself
    View k_pe{};    // [T_k, heads or shared, d_pe]: shared has stride_head 0; packed k: k.shifted(d_nope)
    View v{};       // [T_k, heads, d_v]
    std::span<const int32_t> cu_seqlens_q{}, cu_seqlens_k{};  // required, batch + 1 entries
    int64_t heads = 0;
    double sm_scale = 0.0;
    // Optional top-k mask: row t (global query token) at mask + t * mask_stride_words; bit j of word w is
    // request-local key 32w + j.
    const uint32_t* mask = nullptr;
    int64_t mask_stride_words = 0;
    std::span<const int64_t> rows{};
    int64_t d_nope = 128, d_pe = 64, d_v = 128;
};
// Bottom-right causal: local query i of a request with s_q queries and s_k keys attends local key j iff
// j <= s_k - s_q + i (and its mask bit is set). Empty row: out 0, lse -inf.
AttnResult mha(const MhaArgs& a);

// Packed top-k bitmask [T_q, stride_words], as the GPU builds it. Indices outside [0, s_k) of the
// query's request (-1 included) set nothing. idx_stride 0 means topk.
std::vector<uint32_t> topk_mask(const int32_t* indices, int64_t idx_stride, int64_t topk,
                                std::span<const int32_t> cu_seqlens_q, std::span<const int32_t> cu_seqlens_k,
                                int64_t stride_words);

// ---- DSA cross-path algebra (DESIGN.md section 1) --------------------------------------------------------
// w_kv_b is DeepSeek's kv_b_proj weight [heads * 256, 512] (View with tok = row): for head h, rows
// h*256 + [0, 128) are W_UK (k_nope = kv_c . W_UK^T) and rows h*256 + [128, 256) are W_UV.
inline constexpr int64_t kDimNope = 128, kDimPe = 64, kDimLatent = 512, kDimV = 128;

// q_mqa[t, h] = [q_nope[t, h] . W_UK_h (512) ; q_pe[t, h] (64)] -> [rows.size(), heads, 576].
std::vector<double> absorb_q(View q_nope, View q_pe, View w_kv_b, int64_t tokens, int64_t heads,
                             std::span<const int64_t> rows = {});

struct DecompressedKv {
    std::vector<double> k_nope;  // [tokens, heads, 128] = kv_c . W_UK_h^T
    std::vector<double> v;       // [tokens, heads, 128] = kv_c . W_UV_h^T
};
DecompressedKv decompress_kv(View kv_c, View w_kv_b, int64_t tokens, int64_t heads);

// out[n, h, e] = sum_c latent[n, h, c] * W_UV_h[e, c]: latent [n, heads, 512] -> [n, heads, 128].
std::vector<double> project_out(std::span<const double> latent, int64_t n, int64_t heads, View w_kv_b);

struct DsaArgs {
    View q_nope{};  // [T, heads, 128]
    View q_pe{};    // [T, heads, 64]
    View kv_c{};    // [T_k, 512]; with a packed latent cache [T_k, 576]: kv_c = kv, k_pe = kv.shifted(512)
    View k_pe{};    // [T_k, 64]
    View w_kv_b{};  // [heads * 256, 512]
    const int32_t* indices = nullptr;  // [T, topk], request-local
    int64_t idx_stride = 0, topk = 0, heads = 0;
    std::span<const int32_t> cu_seqlens_q{}, cu_seqlens_k{};  // required
    double sm_scale = 0.0;
    std::span<const int64_t> rows{};
};
// The whole DSA prefill output [rows.size(), heads, 128] with lse, through the MQA formulation. DSA
// semantics: a query attends the indexed keys of its own causal prefix (bottom-right aligned), each once.
AttnResult dsa_prefill_reference(const DsaArgs& a);

// The packed layouts engines send and the tests and tools build: q [s_q, heads, 576] and the latent cache
// [s_kv, 576] (kv_c then k_pe) for sparse MQA; q [T, heads, 192] (q_nope then q_pe), the same latent cache
// and w_kv_b [heads * 256, 512] for the whole prefill. Fields not named (batch boundaries, rows, causal,
// index stride) stay at their defaults.
SparseMqaArgs packed_sparse_mqa(const uint16_t* q, const uint16_t* kv, const int32_t* indices, int64_t s_q,
                                int64_t s_kv, int64_t heads, int64_t topk, double sm_scale);
DsaArgs packed_dsa(const uint16_t* q, const uint16_t* kv, const uint16_t* w_kv_b, const int32_t* indices, int64_t topk,
                   int64_t heads, std::span<const int32_t> cu_seqlens_q, std::span<const int32_t> cu_seqlens_k,
                   double sm_scale);

// ---- test inputs -----------------------------------------------------------------------------------------
// [T_q, topk] indices that a DSA indexer could produce: for each query, min(topk, causal prefix) distinct
// keys of its causal prefix (bottom-right aligned), the rest -1, in random order (so -1 is not only at
// the end). Distinct and causal, so masked MHA and sparse MQA see the same key set.
std::vector<int32_t> causal_topk_indices(Rng& rng, std::span<const int32_t> cu_seqlens_q,
                                         std::span<const int32_t> cu_seqlens_k, int64_t topk);

// A sorted sample of query rows: the first and last row of every request plus up to `per_request`
// random others, so edge rows are always checked.
std::vector<int64_t> sample_rows(Rng& rng, std::span<const int32_t> cu_seqlens_q, int64_t per_request);

// ---- comparison ------------------------------------------------------------------------------------------
double rel_l2_error(std::span<const double> got, std::span<const double> want);  // ||got-want|| / ||want||
double max_abs_error(std::span<const double> got, std::span<const double> want);
double rms(std::span<const double> x);

struct Tolerance {
    double rtol = 0.0;
    double atol = 0.0;
    double rel_l2_max = 0.0;  // 0: no aggregate bound
};
Tolerance out_tolerance(std::span<const double> want);  // kOutRtol, kOutAtolRmsFraction * rms, kOutRelL2Max

struct CheckReport {
    std::string name;
    int64_t checked = 0, bad = 0, nonfinite = 0;
    double max_abs = 0.0, rel_l2 = 0.0;
    Tolerance tol;
    std::string first_bad;  // "name[tok 17, 2, 33]: got ... expected ...", empty if none
    bool ok() const;
    std::string summary() const;
};

// Element-wise |got - want| <= atol + rtol * |want|. A got that is NaN, or infinite where want is not the
// same infinity, is bad and counted as non-finite. `shape` names the index in messages; `rows` maps its
// first dim to global tokens. rel_l2 and max_abs are over the elements where both are finite.
CheckReport check_close(std::string_view name, std::span<const double> got, std::span<const double> want,
                        const Tolerance& tol, std::span<const int64_t> shape = {},
                        std::span<const int64_t> rows = {});

// got [rows.size(), heads, dim] gathered from a full tensor at the result's rows.
std::vector<double> gather_rows(View got, std::span<const int64_t> rows, int64_t heads, int64_t dim);

// Compare a device result (copied to the host) with a reference, using the constants above.
CheckReport check_out(std::string_view name, View got, const AttnResult& want);
// The same with out_tolerance()'s absolute floor scaled by atol_scale (for results with more roundings).
CheckReport check_out(std::string_view name, View got, const AttnResult& want, double atol_scale);
CheckReport check_lse(std::string_view name, View got, const AttnResult& want,
                      double atol = kLseAtol);  // View [tok, head]
CheckReport check_max_logits(std::string_view name, View got, const AttnResult& want);  // View [tok, head]

}  // namespace mlajit::ref
