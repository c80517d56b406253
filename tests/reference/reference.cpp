#include "reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace mlajit::ref {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

[[noreturn]] void fail(std::string_view fn, const std::string& what) {
    throw std::invalid_argument("mlajit::ref::" + std::string(fn) + ": " + what);
}

// Rows are independent and each is computed by one thread in a fixed order, so results do not depend on
// the thread count. Reference runs over thousands of rows would otherwise dominate GPU test time.
template <class F>
void parallel_for(int64_t n, F&& f) {
    const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
    const int64_t nt = std::min(hw, n);
    if (nt <= 1) {
        for (int64_t i = 0; i < n; ++i) f(i);
        return;
    }
    std::atomic<int64_t> next{0};
    std::exception_ptr error;
    std::mutex error_mu;
    {
        std::vector<std::jthread> pool;
        for (int64_t w = 0; w < nt; ++w)
            pool.emplace_back([&] {
                try {
                    for (int64_t i; (i = next.fetch_add(1)) < n;) f(i);
                } catch (...) {
                    std::lock_guard lk(error_mu);
                    if (!error) error = std::current_exception();
                    next.store(n);
                }
            });
    }
    if (error) std::rethrow_exception(error);
}

void check_cu(std::string_view fn, std::string_view name, std::span<const int32_t> cu) {
    if (cu.size() < 2) fail(fn, std::string(name) + " needs batch + 1 >= 2 entries, got " + std::to_string(cu.size()));
    if (cu[0] != 0) fail(fn, std::string(name) + "[0] must be 0, got " + std::to_string(cu[0]));
    for (size_t r = 1; r < cu.size(); ++r)
        if (cu[r] < cu[r - 1])
            fail(fn, std::string(name) + " must be non-decreasing, but [" + std::to_string(r) + "] = " +
                         std::to_string(cu[r]) + " < " + std::to_string(cu[r - 1]));
}

void check_cu_pair(std::string_view fn, std::span<const int32_t> cu_q, std::span<const int32_t> cu_k) {
    check_cu(fn, "cu_seqlens_q", cu_q);
    check_cu(fn, "cu_seqlens_k", cu_k);
    if (cu_q.size() != cu_k.size())
        fail(fn, "cu_seqlens_q has " + std::to_string(cu_q.size()) + " entries but cu_seqlens_k has " +
                     std::to_string(cu_k.size()));
}

// The request that owns token t; empty requests share their offset with the next one, and upper_bound
// skips past them to the request that actually contains t.
int64_t request_of(std::span<const int32_t> cu, int64_t t) {
    return int64_t(std::upper_bound(cu.begin(), cu.end(), t) - cu.begin()) - 1;
}

std::vector<int64_t> expand_rows(std::string_view fn, std::span<const int64_t> rows, int64_t n) {
    if (rows.empty()) {
        std::vector<int64_t> all(size_t(std::max<int64_t>(n, 0)));
        for (int64_t i = 0; i < n; ++i) all[size_t(i)] = i;
        return all;
    }
    for (int64_t r : rows)
        if (r < 0 || r >= n) fail(fn, "row " + std::to_string(r) + " is outside [0, " + std::to_string(n) + ")");
    return {rows.begin(), rows.end()};
}

void need(std::string_view fn, bool ok, const char* what) {
    if (!ok) fail(fn, what);
}

// Independent partial sums break the add-latency chain (the reference dominates GPU test time) and still
// give one fixed summation order.
double dot(const double* a, const double* b, int64_t n) {
    double s[8] = {};
    const int64_t body = n - n % 8;
    for (int64_t i = 0; i < body; i += 8)
        for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
    for (int64_t i = body; i < n; ++i) s[0] += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Attention of `heads` query vectors q [heads, d_qk] over nk keys: krow(j, h) and vrow(j, h) give key j's
// K and V rows for head h (valid until the next call). Keys are the outer loop so each key's data is read
// once for all heads while the per-head state stays in cache. Per head, V is summed in key order.
// No keys: out 0 and -inf for lse and max.
template <class KRow, class VRow>
void attend(const double* q, int64_t heads, int64_t nk, int64_t d_qk, int64_t d_v, double sm_scale, KRow krow,
            VRow vrow, double* out, double* lse, double* mx) {
    std::fill(out, out + heads * d_v, 0.0);
    if (nk == 0) {
        std::fill(lse, lse + heads, kNegInf);
        if (mx) std::fill(mx, mx + heads, kNegInf);
        return;
    }
    std::vector<double> p(size_t(heads * nk));  // logits, then probabilities
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t h = 0; h < heads; ++h) p[size_t(h * nk + j)] = sm_scale * dot(q + h * d_qk, krow(j, h), d_qk);
    for (int64_t h = 0; h < heads; ++h) {
        double* ph = p.data() + h * nk;
        const double m = *std::max_element(ph, ph + nk);
        double sum = 0.0;
        for (int64_t j = 0; j < nk; ++j) sum += std::exp(ph[j] - m);
        for (int64_t j = 0; j < nk; ++j) ph[j] = std::exp(ph[j] - m) / sum;
        lse[h] = m + std::log(sum);
        if (mx) mx[h] = m;
    }
    for (int64_t j = 0; j < nk; ++j)
        for (int64_t h = 0; h < heads; ++h) {
            const double w = p[size_t(h * nk + j)];
            const double* v = vrow(j, h);
            double* o = out + h * d_v;
            for (int64_t e = 0; e < d_v; ++e) o[e] += w * v[e];
        }
}

AttnResult make_result(std::vector<int64_t> rows, int64_t heads, int64_t dim, bool with_max) {
    AttnResult r;
    r.heads = heads;
    r.dim = dim;
    r.rows = std::move(rows);
    const size_t n = r.rows.size();
    r.out.assign(n * size_t(heads * dim), 0.0);
    r.lse.assign(n * size_t(heads), kNegInf);
    if (with_max) r.max_logits.assign(n * size_t(heads), kNegInf);
    return r;
}

// The gathered latent KV rows [nk, d_lat + d_pe] of one query, duplicates included.
std::vector<double> gather_kv(View lat, View pe, int64_t d_lat, int64_t d_pe, const std::vector<int64_t>& keys) {
    const int64_t d = d_lat + d_pe;
    std::vector<double> k(keys.size() * size_t(d));
    for (size_t j = 0; j < keys.size(); ++j) {
        lat.load(keys[j], 0, d_lat, k.data() + j * size_t(d));
        pe.load(keys[j], 0, d_pe, k.data() + j * size_t(d) + d_lat);
    }
    return k;
}

// Sparse MQA over the gathered rows K [nk, d_qk]; V is the first d_v columns of K, shared by all heads.
void mqa_attend(const double* q, int64_t heads, const std::vector<double>& kmat, int64_t d_qk, int64_t d_v,
                double sm_scale, double* out, double* lse, double* mx) {
    const auto row = [&](int64_t j, int64_t) { return kmat.data() + j * d_qk; };
    attend(q, heads, int64_t(kmat.size()) / d_qk, d_qk, d_v, sm_scale, row, row, out, lse, mx);
}

// W_kv_b in double, [heads * 256, 512]; converted once per call rather than once per use.
std::vector<double> load_wkvb(std::string_view fn, View w, int64_t heads) {
    need(fn, w.data != nullptr, "w_kv_b is null");
    const int64_t rows = heads * (kDimNope + kDimV);
    std::vector<double> wd(size_t(rows * kDimLatent));
    for (int64_t r = 0; r < rows; ++r) w.load(r, 0, kDimLatent, wd.data() + r * kDimLatent);
    return wd;
}
const double* w_uk(const std::vector<double>& wd, int64_t h, int64_t d) {
    return wd.data() + (h * (kDimNope + kDimV) + d) * kDimLatent;
}
const double* w_uv(const std::vector<double>& wd, int64_t h, int64_t e) {
    return wd.data() + (h * (kDimNope + kDimV) + kDimNope + e) * kDimLatent;
}

// dst [heads, 576] = absorbed query of token t.
void absorb_row(View q_nope, View q_pe, const std::vector<double>& wd, int64_t t, int64_t heads, double* dst) {
    constexpr int64_t d_qk = kDimLatent + kDimPe;
    double qn[kDimNope];
    for (int64_t h = 0; h < heads; ++h) {
        double* o = dst + h * d_qk;
        q_nope.load(t, h, kDimNope, qn);
        std::fill(o, o + kDimLatent, 0.0);
        for (int64_t d = 0; d < kDimNope; ++d) {
            const double* w = w_uk(wd, h, d);
            for (int64_t c = 0; c < kDimLatent; ++c) o[c] += qn[d] * w[c];
        }
        q_pe.load(t, h, kDimPe, o + kDimLatent);
    }
}

void project_row(const double* lat, const std::vector<double>& wd, int64_t heads, double* dst) {
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t e = 0; e < kDimV; ++e) dst[h * kDimV + e] = dot(lat + h * kDimLatent, w_uv(wd, h, e), kDimLatent);
}

std::string fmt_num(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

std::string fmt_index(std::string_view name, int64_t flat, std::span<const int64_t> shape,
                      std::span<const int64_t> rows) {
    std::string s(name);
    if (shape.empty()) return s + "[" + std::to_string(flat) + "]";
    std::vector<int64_t> idx(shape.size());
    for (size_t k = shape.size(); k-- > 0;) {
        idx[k] = flat % shape[k];
        flat /= shape[k];
    }
    s += "[";
    for (size_t k = 0; k < idx.size(); ++k) {
        if (k) s += ", ";
        if (k == 0 && !rows.empty()) s += "tok " + std::to_string(rows[size_t(idx[0])]);
        else s += std::to_string(idx[k]);
    }
    return s + "]";
}

}  // namespace

// ---- View --------------------------------------------------------------------------------------------------

View View::shifted(int64_t elems) const {
    View v = *this;
    switch (type) {
        case DType::bf16: v.data = static_cast<const uint16_t*>(data) + elems; break;
        case DType::f32: v.data = static_cast<const float*>(data) + elems; break;
        case DType::f64: v.data = static_cast<const double*>(data) + elems; break;
    }
    return v;
}

void View::load(int64_t tok, int64_t head, int64_t n, double* dst) const {
    const int64_t off = tok * stride_tok + head * stride_head;
    switch (type) {
        case DType::bf16: {
            const uint16_t* p = static_cast<const uint16_t*>(data) + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_double(p[i]);
            break;
        }
        case DType::f32: {
            const float* p = static_cast<const float*>(data) + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = double(p[i]);
            break;
        }
        case DType::f64: std::memcpy(dst, static_cast<const double*>(data) + off, size_t(n) * sizeof(double)); break;
    }
}

double View::at(int64_t tok, int64_t head, int64_t d) const {
    double x;
    shifted(d).load(tok, head, 1, &x);
    return x;
}

// ---- attention -------------------------------------------------------------------------------------------

// A top-k selection is a set: a key listed twice in a row is attended once (the order of keys does not
// change the softmax).
static void unique_keys(std::vector<int64_t>& keys) {
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
}

AttnResult sparse_mqa(const SparseMqaArgs& a) {
    constexpr std::string_view fn = "sparse_mqa";
    need(fn, a.q.data && a.kv.data, "q and kv must be non-null");
    need(fn, a.heads > 0 && a.topk >= 0 && a.s_q >= 0 && a.s_kv >= 0, "needs heads > 0 and topk, s_q, s_kv >= 0");
    need(fn, a.indices || a.topk == 0 || a.s_q == 0, "indices is null");
    need(fn, a.d_v > 0 && a.d_qk >= a.d_v, "needs 0 < d_v <= d_qk");
    const bool batched = !a.cu_seqlens_q.empty() || !a.cu_seqlens_kv.empty();
    if (batched) {
        check_cu(fn, "cu_seqlens_q", a.cu_seqlens_q);
        check_cu(fn, "cu_seqlens_kv", a.cu_seqlens_kv);
        need(fn, a.cu_seqlens_q.size() == a.cu_seqlens_kv.size(), "cu_seqlens_q and cu_seqlens_kv differ in length");
        if (a.cu_seqlens_q.back() != a.s_q)
            fail(fn, "cu_seqlens_q ends at " + std::to_string(a.cu_seqlens_q.back()) + " but s_q is " +
                         std::to_string(a.s_q));
        if (a.cu_seqlens_kv.back() > a.s_kv)
            fail(fn, "cu_seqlens_kv ends at " + std::to_string(a.cu_seqlens_kv.back()) + " beyond s_kv " +
                         std::to_string(a.s_kv));
    }
    const int64_t idx_stride = a.idx_stride ? a.idx_stride : a.topk;
    AttnResult res = make_result(expand_rows(fn, a.rows, a.s_q), a.heads, a.d_v, true);
    const View lat = a.kv;
    parallel_for(int64_t(res.rows.size()), [&](int64_t i) {
        const int64_t t = res.rows[size_t(i)];
        int64_t base = 0, limit = a.s_kv;
        if (batched) {
            const int64_t r = request_of(a.cu_seqlens_q, t);
            base = a.cu_seqlens_kv[size_t(r)];
            limit = a.cu_seqlens_kv[size_t(r) + 1] - base;
        }
        int64_t causal_limit = limit;  // causal: local query i attends keys <= s_kv - s_q + i (bottom-right)
        if (a.causal) {
            int64_t q0 = 0, s_q = a.s_q;
            if (batched) {
                const int64_t r = request_of(a.cu_seqlens_q, t);
                q0 = a.cu_seqlens_q[size_t(r)];
                s_q = a.cu_seqlens_q[size_t(r) + 1] - q0;
            }
            causal_limit = std::min(limit, limit - s_q + (t - q0) + 1);
        }
        std::vector<int64_t> keys;
        for (int64_t k = 0; k < a.topk; ++k) {
            const int64_t idx = a.indices[t * idx_stride + k];
            if (idx >= 0 && idx < causal_limit) keys.push_back(base + idx);
        }
        unique_keys(keys);
        const std::vector<double> kmat = gather_kv(lat, lat.shifted(a.d_v), a.d_v, a.d_qk - a.d_v, keys);
        std::vector<double> q(size_t(a.heads * a.d_qk));
        for (int64_t h = 0; h < a.heads; ++h) a.q.load(t, h, a.d_qk, q.data() + h * a.d_qk);
        mqa_attend(q.data(), a.heads, kmat, a.d_qk, a.d_v, a.sm_scale, res.out.data() + i * a.heads * a.d_v,
                   res.lse.data() + i * a.heads, res.max_logits.data() + i * a.heads);
    });
    return res;
}

AttnResult mha(const MhaArgs& a) {
    constexpr std::string_view fn = "mha";
    need(fn, a.q.data && a.k_nope.data && a.k_pe.data && a.v.data, "q, k_nope, k_pe and v must be non-null");
    need(fn, a.heads > 0 && a.d_nope >= 0 && a.d_pe >= 0 && a.d_v > 0, "needs heads > 0 and positive dims");
    check_cu_pair(fn, a.cu_seqlens_q, a.cu_seqlens_k);
    if (a.mask) {
        int64_t max_sk = 0;
        for (size_t r = 0; r + 1 < a.cu_seqlens_k.size(); ++r)
            max_sk = std::max<int64_t>(max_sk, a.cu_seqlens_k[r + 1] - a.cu_seqlens_k[r]);
        if (a.mask_stride_words * 32 < max_sk)
            fail(fn, "mask_stride_words " + std::to_string(a.mask_stride_words) + " cannot hold " +
                         std::to_string(max_sk) + " keys");
    }
    const int64_t d_qk = a.d_nope + a.d_pe;
    AttnResult res = make_result(expand_rows(fn, a.rows, a.cu_seqlens_q.back()), a.heads, a.d_v, false);
    parallel_for(int64_t(res.rows.size()), [&](int64_t i) {
        const int64_t t = res.rows[size_t(i)];
        const int64_t r = request_of(a.cu_seqlens_q, t);
        const int64_t s_q = a.cu_seqlens_q[size_t(r) + 1] - a.cu_seqlens_q[size_t(r)];
        const int64_t k0 = a.cu_seqlens_k[size_t(r)];
        const int64_t s_k = a.cu_seqlens_k[size_t(r) + 1] - k0;
        const int64_t last = s_k - s_q + (t - a.cu_seqlens_q[size_t(r)]);  // may be < 0: nothing attended
        const uint32_t* mrow = a.mask ? a.mask + t * a.mask_stride_words : nullptr;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j <= last; ++j)
            if (!mrow || ((mrow[j >> 5] >> (j & 31)) & 1u)) keys.push_back(k0 + j);

        std::vector<double> q(size_t(a.heads * d_qk)), k(static_cast<size_t>(d_qk)), v(static_cast<size_t>(a.d_v));
        for (int64_t h = 0; h < a.heads; ++h) a.q.load(t, h, d_qk, q.data() + h * d_qk);
        const auto krow = [&](int64_t j, int64_t h) {
            a.k_nope.load(keys[size_t(j)], h, a.d_nope, k.data());
            a.k_pe.load(keys[size_t(j)], h, a.d_pe, k.data() + a.d_nope);
            return k.data();
        };
        const auto vrow = [&](int64_t j, int64_t h) {
            a.v.load(keys[size_t(j)], h, a.d_v, v.data());
            return v.data();
        };
        attend(q.data(), a.heads, int64_t(keys.size()), d_qk, a.d_v, a.sm_scale, krow, vrow,
               res.out.data() + i * a.heads * a.d_v, res.lse.data() + i * a.heads, nullptr);
    });
    return res;
}

std::vector<uint32_t> topk_mask(const int32_t* indices, int64_t idx_stride, int64_t topk,
                                std::span<const int32_t> cu_seqlens_q, std::span<const int32_t> cu_seqlens_k,
                                int64_t stride_words) {
    constexpr std::string_view fn = "topk_mask";
    check_cu_pair(fn, cu_seqlens_q, cu_seqlens_k);
    need(fn, topk >= 0 && stride_words >= 0, "needs topk >= 0 and stride_words >= 0");
    need(fn, indices || topk == 0 || cu_seqlens_q.back() == 0, "indices is null");
    if (idx_stride == 0) idx_stride = topk;
    std::vector<uint32_t> mask(size_t(cu_seqlens_q.back() * stride_words), 0u);
    for (size_t r = 0; r + 1 < cu_seqlens_q.size(); ++r) {
        const int64_t s_k = cu_seqlens_k[r + 1] - cu_seqlens_k[r];
        if (s_k > stride_words * 32)
            fail(fn, "request " + std::to_string(r) + " has " + std::to_string(s_k) + " keys but stride_words " +
                         std::to_string(stride_words) + " holds only " + std::to_string(stride_words * 32));
        for (int64_t t = cu_seqlens_q[r]; t < cu_seqlens_q[r + 1]; ++t)
            for (int64_t k = 0; k < topk; ++k) {
                const int64_t j = indices[t * idx_stride + k];
                if (j >= 0 && j < s_k) mask[size_t(t * stride_words + (j >> 5))] |= 1u << (j & 31);
            }
    }
    return mask;
}

// ---- DSA cross-path algebra --------------------------------------------------------------------------------

std::vector<double> absorb_q(View q_nope, View q_pe, View w_kv_b, int64_t tokens, int64_t heads,
                             std::span<const int64_t> rows) {
    constexpr std::string_view fn = "absorb_q";
    need(fn, q_nope.data && q_pe.data && heads > 0, "needs q_nope, q_pe and heads > 0");
    const std::vector<int64_t> rs = expand_rows(fn, rows, tokens);
    const std::vector<double> wd = load_wkvb(fn, w_kv_b, heads);
    constexpr int64_t d_qk = kDimLatent + kDimPe;
    std::vector<double> out(rs.size() * size_t(heads * d_qk));
    parallel_for(int64_t(rs.size()), [&](int64_t i) {
        absorb_row(q_nope, q_pe, wd, rs[size_t(i)], heads, out.data() + i * heads * d_qk);
    });
    return out;
}

DecompressedKv decompress_kv(View kv_c, View w_kv_b, int64_t tokens, int64_t heads) {
    constexpr std::string_view fn = "decompress_kv";
    need(fn, kv_c.data && heads > 0 && tokens >= 0, "needs kv_c, heads > 0 and tokens >= 0");
    const std::vector<double> wd = load_wkvb(fn, w_kv_b, heads);
    DecompressedKv r;
    r.k_nope.resize(size_t(tokens * heads * kDimNope));
    r.v.resize(size_t(tokens * heads * kDimV));
    parallel_for(tokens, [&](int64_t t) {
        double c[kDimLatent];
        kv_c.load(t, 0, kDimLatent, c);
        for (int64_t h = 0; h < heads; ++h) {
            double* kn = r.k_nope.data() + (t * heads + h) * kDimNope;
            double* v = r.v.data() + (t * heads + h) * kDimV;
            for (int64_t d = 0; d < kDimNope; ++d) kn[d] = dot(c, w_uk(wd, h, d), kDimLatent);
            for (int64_t e = 0; e < kDimV; ++e) v[e] = dot(c, w_uv(wd, h, e), kDimLatent);
        }
    });
    return r;
}

std::vector<double> project_out(std::span<const double> latent, int64_t n, int64_t heads, View w_kv_b) {
    constexpr std::string_view fn = "project_out";
    need(fn, heads > 0 && n >= 0, "needs heads > 0 and n >= 0");
    if (int64_t(latent.size()) != n * heads * kDimLatent)
        fail(fn, "latent has " + std::to_string(latent.size()) + " elements, expected n * heads * 512 = " +
                     std::to_string(n * heads * kDimLatent));
    const std::vector<double> wd = load_wkvb(fn, w_kv_b, heads);
    std::vector<double> out(size_t(n * heads * kDimV));
    parallel_for(n, [&](int64_t i) {
        project_row(latent.data() + i * heads * kDimLatent, wd, heads, out.data() + i * heads * kDimV);
    });
    return out;
}

AttnResult dsa_prefill_reference(const DsaArgs& a) {
    constexpr std::string_view fn = "dsa_prefill_reference";
    need(fn, a.q_nope.data && a.q_pe.data && a.kv_c.data && a.k_pe.data, "q_nope, q_pe, kv_c, k_pe must be non-null");
    need(fn, a.heads > 0 && a.topk >= 0, "needs heads > 0 and topk >= 0");
    check_cu_pair(fn, a.cu_seqlens_q, a.cu_seqlens_k);
    need(fn, a.indices || a.topk == 0 || a.cu_seqlens_q.back() == 0, "indices is null");
    const std::vector<double> wd = load_wkvb(fn, a.w_kv_b, a.heads);
    const int64_t idx_stride = a.idx_stride ? a.idx_stride : a.topk;
    constexpr int64_t d_qk = kDimLatent + kDimPe;
    AttnResult res = make_result(expand_rows(fn, a.rows, a.cu_seqlens_q.back()), a.heads, kDimV, false);
    parallel_for(int64_t(res.rows.size()), [&](int64_t i) {
        const int64_t t = res.rows[size_t(i)];
        const int64_t r = request_of(a.cu_seqlens_q, t);
        const int64_t base = a.cu_seqlens_k[size_t(r)];
        const int64_t s_k = a.cu_seqlens_k[size_t(r) + 1] - base;
        // DSA: the query's own causal prefix (bottom-right aligned), each selected key once.
        const int64_t q0 = a.cu_seqlens_q[size_t(r)], s_q = a.cu_seqlens_q[size_t(r) + 1] - q0;
        const int64_t limit = s_k - s_q + (t - q0) + 1;
        std::vector<int64_t> keys;
        for (int64_t k = 0; k < a.topk; ++k) {
            const int64_t idx = a.indices[t * idx_stride + k];
            if (idx >= 0 && idx < limit) keys.push_back(base + idx);
        }
        unique_keys(keys);
        const std::vector<double> kmat = gather_kv(a.kv_c, a.k_pe, kDimLatent, kDimPe, keys);
        std::vector<double> q(size_t(a.heads * d_qk)), lat(size_t(a.heads * kDimLatent));
        absorb_row(a.q_nope, a.q_pe, wd, t, a.heads, q.data());
        mqa_attend(q.data(), a.heads, kmat, d_qk, kDimLatent, a.sm_scale, lat.data(), res.lse.data() + i * a.heads,
                   nullptr);
        project_row(lat.data(), wd, a.heads, res.out.data() + i * a.heads * kDimV);
    });
    return res;
}

// ---- test inputs -----------------------------------------------------------------------------------------

std::vector<int32_t> causal_topk_indices(Rng& rng, std::span<const int32_t> cu_seqlens_q,
                                         std::span<const int32_t> cu_seqlens_k, int64_t topk) {
    constexpr std::string_view fn = "causal_topk_indices";
    check_cu_pair(fn, cu_seqlens_q, cu_seqlens_k);
    need(fn, topk > 0, "needs topk > 0");
    std::vector<int32_t> idx(size_t(cu_seqlens_q.back() * topk), -1);
    std::vector<int32_t> cand;
    for (size_t r = 0; r + 1 < cu_seqlens_q.size(); ++r) {
        const int64_t s_q = cu_seqlens_q[r + 1] - cu_seqlens_q[r];
        const int64_t s_k = cu_seqlens_k[r + 1] - cu_seqlens_k[r];
        for (int64_t i = 0; i < s_q; ++i) {
            const int64_t n_cand = std::max<int64_t>(0, s_k - s_q + i + 1);
            const int64_t m = std::min(topk, n_cand);
            cand.resize(size_t(n_cand));
            for (int64_t j = 0; j < n_cand; ++j) cand[size_t(j)] = int32_t(j);
            int32_t* row = idx.data() + (cu_seqlens_q[r] + i) * topk;
            for (int64_t j = 0; j < m; ++j) {  // partial Fisher-Yates: m distinct keys
                std::swap(cand[size_t(j)], cand[size_t(rng.uniform_int(j, n_cand - 1))]);
                row[j] = cand[size_t(j)];
            }
            for (int64_t j = topk - 1; j > 0; --j) std::swap(row[j], row[rng.uniform_int(0, j)]);
        }
    }
    return idx;
}

std::vector<int64_t> sample_rows(Rng& rng, std::span<const int32_t> cu_seqlens_q, int64_t per_request) {
    check_cu("sample_rows", "cu_seqlens_q", cu_seqlens_q);
    std::vector<int64_t> rows;
    for (size_t r = 0; r + 1 < cu_seqlens_q.size(); ++r) {
        const int64_t b = cu_seqlens_q[r], e = cu_seqlens_q[r + 1];
        if (b == e) continue;
        rows.push_back(b);
        rows.push_back(e - 1);
        for (int64_t k = 0; k < per_request; ++k) rows.push_back(rng.uniform_int(b, e - 1));
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

// ---- comparison ------------------------------------------------------------------------------------------

double rel_l2_error(std::span<const double> got, std::span<const double> want) {
    if (got.size() != want.size()) fail("rel_l2_error", "sizes differ");
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(num / den);
}

double max_abs_error(std::span<const double> got, std::span<const double> want) {
    if (got.size() != want.size()) fail("max_abs_error", "sizes differ");
    double m = 0.0;
    for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(got[i] - want[i]));
    return m;
}

double rms(std::span<const double> x) {
    double s = 0.0;
    for (double v : x) s += v * v;
    return x.empty() ? 0.0 : std::sqrt(s / double(x.size()));
}

Tolerance out_tolerance(std::span<const double> want) {
    return {kOutRtol, kOutAtolRmsFraction * rms(want), kOutRelL2Max};
}

bool CheckReport::ok() const {
    return bad == 0 && !(tol.rel_l2_max > 0.0 && !(rel_l2 <= tol.rel_l2_max));
}

std::string CheckReport::summary() const {
    std::string s = name + (ok() ? ": ok, " : ": FAILED, ") + std::to_string(bad) + " of " +
                    std::to_string(checked) + " out of tolerance (rtol " + fmt_num(tol.rtol) + ", atol " +
                    fmt_num(tol.atol) + "), " + std::to_string(nonfinite) + " non-finite, max |err| " +
                    fmt_num(max_abs) + ", rel L2 " + fmt_num(rel_l2);
    if (tol.rel_l2_max > 0.0) s += " (max " + fmt_num(tol.rel_l2_max) + ")";
    if (!first_bad.empty()) s += "; first bad: " + first_bad;
    return s;
}

CheckReport check_close(std::string_view name, std::span<const double> got, std::span<const double> want,
                        const Tolerance& tol, std::span<const int64_t> shape, std::span<const int64_t> rows) {
    constexpr std::string_view fn = "check_close";
    if (got.size() != want.size())
        fail(fn, std::string(name) + ": got has " + std::to_string(got.size()) + " elements, expected has " +
                     std::to_string(want.size()));
    if (!shape.empty()) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        if (n != int64_t(want.size()))
            fail(fn, std::string(name) + ": shape holds " + std::to_string(n) + " elements, tensors hold " +
                         std::to_string(want.size()));
        if (!rows.empty() && int64_t(rows.size()) != shape[0])
            fail(fn, std::string(name) + ": rows.size() != shape[0]");
    }
    CheckReport rep;
    rep.name = name;
    rep.tol = tol;
    rep.checked = int64_t(want.size());
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double g = got[i], w = want[i];
        bool bad;
        double limit = 0.0;
        if (std::isfinite(g) && std::isfinite(w)) {
            const double err = std::fabs(g - w);
            limit = tol.atol + tol.rtol * std::fabs(w);
            bad = !(err <= limit);
            rep.max_abs = std::max(rep.max_abs, err);
            num += err * err;
            den += w * w;
        } else {
            bad = !(g == w);  // same infinity passes; NaN never does
            if (bad && !std::isfinite(g)) ++rep.nonfinite;
        }
        if (!bad) continue;
        ++rep.bad;
        if (rep.first_bad.empty()) {
            rep.first_bad =
                fmt_index(name, int64_t(i), shape, rows) + ": got " + fmt_num(g) + " expected " + fmt_num(w);
            if (std::isfinite(g) && std::isfinite(w))
                rep.first_bad += " (|err| " + fmt_num(std::fabs(g - w)) + " > " + fmt_num(limit) + ")";
        }
    }
    rep.rel_l2 = den > 0.0 ? std::sqrt(num / den) : (num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity());
    return rep;
}

std::vector<double> gather_rows(View got, std::span<const int64_t> rows, int64_t heads, int64_t dim) {
    std::vector<double> g(rows.size() * size_t(heads * dim));
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t h = 0; h < heads; ++h) got.load(rows[i], h, dim, g.data() + (int64_t(i) * heads + h) * dim);
    return g;
}

CheckReport check_out(std::string_view name, View got, const AttnResult& want) { return check_out(name, got, want, 1.0); }

CheckReport check_out(std::string_view name, View got, const AttnResult& want, double atol_scale) {
    const std::vector<double> g = gather_rows(got, want.rows, want.heads, want.dim);
    const int64_t shape[] = {int64_t(want.rows.size()), want.heads, want.dim};
    Tolerance tol = out_tolerance(want.out);
    tol.atol *= atol_scale;
    return check_close(name, g, want.out, tol, shape, want.rows);
}

CheckReport check_lse(std::string_view name, View got, const AttnResult& want, double atol) {
    const std::vector<double> g = gather_rows(got, want.rows, want.heads, 1);
    const int64_t shape[] = {int64_t(want.rows.size()), want.heads};
    return check_close(name, g, want.lse, {0.0, atol, 0.0}, shape, want.rows);
}

CheckReport check_max_logits(std::string_view name, View got, const AttnResult& want) {
    if (want.max_logits.empty()) fail("check_max_logits", std::string(name) + ": the reference has no max_logits");
    const std::vector<double> g = gather_rows(got, want.rows, want.heads, 1);
    const int64_t shape[] = {int64_t(want.rows.size()), want.heads};
    return check_close(name, g, want.max_logits, {0.0, kMaxLogitsAtol, 0.0}, shape, want.rows);
}


SparseMqaArgs packed_sparse_mqa(const uint16_t* q, const uint16_t* kv, const int32_t* indices, int64_t s_q,
                                int64_t s_kv, int64_t heads, int64_t topk, double sm_scale) {
    SparseMqaArgs a;
    a.q = View(q, heads * 576, 576);
    a.kv = View(kv, 576, 0);
    a.indices = indices;
    a.s_q = s_q;
    a.s_kv = s_kv;
    a.heads = heads;
    a.topk = topk;
    a.sm_scale = sm_scale;
    return a;
}

DsaArgs packed_dsa(const uint16_t* q, const uint16_t* kv, const uint16_t* w_kv_b, const int32_t* indices, int64_t topk,
                   int64_t heads, std::span<const int32_t> cu_seqlens_q, std::span<const int32_t> cu_seqlens_k,
                   double sm_scale) {
    DsaArgs a;
    a.q_nope = View(q, heads * 192, 192);
    a.q_pe = a.q_nope.shifted(128);
    a.kv_c = View(kv, 576, 0);
    a.k_pe = a.kv_c.shifted(512);
    a.w_kv_b = View(w_kv_b, 512, 0);
    a.indices = indices;
    a.topk = topk;
    a.heads = heads;
    a.cu_seqlens_q = cu_seqlens_q;
    a.cu_seqlens_k = cu_seqlens_k;
    a.sm_scale = sm_scale;
    return a;
}

}  // namespace mlajit::ref
