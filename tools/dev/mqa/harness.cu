// Standalone correctness + timing harness for kernels_src/sparse_mqa/{sm80,sm90}.cuh (every config in configs.h).
//
//   build.sh && build/harness [--configs tag,tag] [--no-check] [--no-bench] [--sanitize] [--log FILE]
//                             [--bench-s N] [--bench-heads 128,64] [--scatter] [--reps N]
//
// Correctness: fresh random bf16 inputs (never zeros), outputs poisoned (NaN) before each launch, padded
// strides with guard elements that must stay poisoned (catches writes past num_heads or past 512), every
// element of every checked row compared with a float64 CPU reference: per element |o - r| <= 2e-2 *
// max(|r|, rms(ref row)), ||o - r|| / ||r|| <= 2e-2 (printed), lse and max_logits within 1e-3 absolute
// (exactly -inf for rows with no valid index). Each config runs twice on the same inputs and must give
// bit-identical results (a moving answer is a race). Bench sizes check a subsample of tokens, all heads.
// Timing: s_q = s_kv = 8192 (--bench-s N), topk 2048, indices uniform over each query's causal prefix (-1
// padding for the first 2047 queries, at the row end or, with --scatter, spread over the row), cudaEvents,
// 3 warm-ups, median of --reps (15); the copy ceiling (1 GiB device-to-device) measured first.
// Reference semantics: the row's set of valid keys (a key listed twice is attended once).
// Key-set pre-pass (session 25): a config whose tag ends in "_pre" runs kernels_src/sparse_mqa/compact.cuh first (the
// variant of compact_variants.h with --compact-threads N, default 256) and its kernel reads the list. Its checks also
// compare the list with the host's (every checked token: same rows, same order, same count) and its outputs bit for bit
// with the same config without the pre-pass when that ran first on the same case; its bench times the pre-pass alone,
// the kernel alone (reading the list) and the two together.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <ctime>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mlajit_abi.h"
#include "compact_variants.h"
#ifdef MQA_CONFIGS_FILE  // build.sh CFG_FILE=...
#include MQA_CONFIGS_FILE
#else
#include "configs.h"
#endif

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(2);                                                                                   \
        }                                                                                              \
    } while (0)

#define DECL(tag, h, n, s, k, m, pp, skip, fp8) extern "C" cudaError_t mqa_launch_##tag(const SparseMqaFwdParams*, cudaStream_t);
MQA_CONFIGS(DECL)
#undef DECL

struct Cfg {
    const char* tag;
    int bh, bn, st, ks, pp, skip, fp8;
    cudaError_t (*launch)(const SparseMqaFwdParams*, cudaStream_t);
};
static const Cfg kCfgs[] = {
#define ENTRY(tag, h, n, s, k, m, pp, skip, fp8) {#tag, h, n, s, k, pp, skip, fp8, mqa_launch_##tag},
    MQA_CONFIGS(ENTRY)
#undef ENTRY
};
// "_pre" configs: the key-set pre-pass before the kernel; base_tag: the same config without it. A persistent-grid config
// ("per" in the tag, CFG_PERSIST; "perm": warpgroup 0 merges alone; "perr": the ring numbered across tokens; "perrm": both) is
// compared with the same tag without it (h16sm90tper_pre, h16sm90tperr_pre, h16sm90tperrm_pre with h16sm90t_pre).
static bool is_pre(const Cfg& c) {
    const size_t n = strlen(c.tag);
    return n > 4 && !strcmp(c.tag + n - 4, "_pre");
}
static std::string base_tag(const Cfg& c) {
    std::string t(c.tag);
    const size_t per = t.find("per");
    if (per != std::string::npos) {
        size_t end = per + 3;
        while (end < t.size() && (t[end] == 'm' || t[end] == 'r')) ++end;
        return t.erase(per, end - per);
    }
    return is_pre(c) ? t.substr(0, t.size() - 4) : t;
}

#define CDECL(ct, cw, f8) extern "C" cudaError_t mqa_compact_launch_##ct##_##cw##_##f8(const SparseMqaFwdParams*, cudaStream_t);
MQA_COMPACT_VARIANTS(CDECL)
#undef CDECL
struct CompactVariant {
    int threads, maxw, fp8;
    cudaError_t (*launch)(const SparseMqaFwdParams*, cudaStream_t);
};
static const CompactVariant kCompact[] = {
#define CENTRY(ct, cw, f8) {ct, cw, f8, mqa_compact_launch_##ct##_##cw##_##f8},
    MQA_COMPACT_VARIANTS(CENTRY)
#undef CENTRY
};
static int g_compact_threads = 256;
// The narrowest width class holding `width` at `threads` (0: the default --compact-threads).
static const CompactVariant* compact_for(int width, bool fp8, int threads = 0) {
    if (threads == 0) threads = g_compact_threads;
    const CompactVariant* best = nullptr;
    for (const CompactVariant& v : kCompact)
        if (v.threads == threads && v.fp8 == (fp8 ? 1 : 0) && width <= v.maxw && (!best || v.maxw < best->maxw)) best = &v;
    if (!best) {
        fprintf(stderr, "no pre-pass variant for %d threads, width %d, fp8 %d in compact_variants.h\n", threads, width, (int)fp8);
        exit(2);
    }
    return best;
}

static FILE* g_log = nullptr;
static bool g_single_launch = false;  // sanitizer runs: one launch per check
static void out(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char* fmt, ...) {
    va_list a;
    va_start(a, fmt);
    vprintf(fmt, a);
    va_end(a);
    if (g_log) {
        va_start(a, fmt);
        vfprintf(g_log, fmt, a);
        va_end(a);
        fflush(g_log);
    }
    fflush(stdout);
}

// ---- host bf16 ----
static inline uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static const uint16_t kPoisonBf = 0x7fc1;  // a NaN

// ---- host e4m3fn (OCP: bias 7, max 448, no inf, S.1111.111 = NaN) and the fp8_ds_mla row ----
static float e4m3_decode(uint8_t b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + m / 8.0f, e - 7);
    return s ? -v : v;
}
// Round-to-nearest-even onto the e4m3 grid, saturating at +-448 (the writer's rule in mlajit.h).
static uint8_t e4m3_encode(float x) {
    const uint8_t sign = x < 0 ? 0x80 : 0;
    float a = fabsf(x);
    if (!(a < 448.0f)) return sign | 0x7e;  // 448 (and saturation)
    int e;
    frexpf(a, &e);  // a = f * 2^e, f in [0.5, 1)
    int E = e - 1;  // a in [2^E, 2^(E+1))
    if (E < -6) E = -6;  // subnormal range: step 2^-9
    const float step = ldexpf(1.0f, E - 3);
    float q = nearbyintf(a / step) * step;  // RNE (default rounding mode)
    if (q >= 448.0f) q = 448.0f;
    // encode q exactly
    if (q < ldexpf(1.0f, -6)) return sign | (uint8_t)(q / ldexpf(1.0f, -9));
    frexpf(q, &e);
    E = e - 1;
    const int m = (int)(q / ldexpf(1.0f, E) * 8.0f) - 8;
    return sign | (uint8_t)(((E + 7) << 3) | m);
}
static const int kFp8Row = 656;
static const uint32_t kPoisonF = 0x7fc00001u;

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 12345) {}
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
    int below(int n) { return (int)(uni() * n); }
    float normalish() {  // sum of 4 uniforms, unit variance; never exactly zero in practice
        double x = uni() + uni() + uni() + uni() - 2.0;
        return (float)(x * 1.7320508);
    }
};

static void parallel_for(int n, const std::function<void(int)>& f) {
    int nt = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> th;
    std::atomic<int> next{0};
    for (int i = 0; i < nt; ++i)
        th.emplace_back([&] {
            for (int j; (j = next.fetch_add(1)) < n;) f(j);
        });
    for (auto& t : th) t.join();
}

// ---- a problem: inputs (host + device), strides, reference on a set of checked tokens ----
struct Problem {
    std::string name;
    int s_q = 0, s_kv = 0, h = 0, topk = 0;
    int batch = 0;
    std::vector<int> cu_q, cu_kv;  // empty: not batched
    mj_i64 q_st = 0, q_sh = 0, kv_st = 0, idx_st = 0, o_st = 0, o_sh = 0, lse_st = 0;
    float sm_scale = 0;
    std::vector<uint16_t> q, kv;
    std::vector<int> idx;
    std::vector<int> check_toks;
    // Paged latent cache (block_size > 0): the device gets kv as shuffled pages + a block table; the
    // reference keeps reading the contiguous rows.
    int block_size = 0, max_blocks = 0, num_pages = 0;
    std::vector<int> bt;
    std::vector<uint16_t> kv_paged;
    int* dbt = nullptr;
    // FP8 latent cache (fp8): kv quantized row by row (kv then holds the dequantized values the kernels
    // see, so the reference reads them), paged like kv_paged with fp8_row_bytes per row.
    bool fp8 = false;
    int fp8_row_bytes = kFp8Row;
    std::vector<uint8_t> kv8_rows;   // contiguous [s_kv][656]
    std::vector<uint8_t> kv8_paged;  // [num_pages][block_size][fp8_row_bytes]
    void* dkv8 = nullptr;
    int nan_key = -1;                // contiguous kv row whose second scale is NaN (-1: none)
    std::vector<double> r_out, r_lse, r_ml;  // [check][h][512], [check][h]
    double valid_pairs = 0;                  // sum over tokens of valid indices
    bool causal = false;                     // SparseMqaFwdParams::causal = 1 (batched form only here)
    unsigned* dkept = nullptr;               // the pre-pass's list [tokens of the call][topk] and its counts
    int* dcount = nullptr;
    // device
    void *dq = nullptr, *dkv = nullptr, *dout = nullptr;
    int *didx = nullptr, *dcuq = nullptr, *dcukv = nullptr;
    float *dlse = nullptr, *dml = nullptr;
    size_t out_elems = 0, lse_elems = 0;

    void req_of(int tok, int& base, int& len) const {
        int last;
        req_of(tok, base, len, last);
    }
    // last: the highest valid key (causal: the query's own position, bottom-right aligned; else len - 1).
    void req_of(int tok, int& base, int& len, int& last) const {
        if (cu_q.empty()) {
            base = 0;
            len = s_kv;
            last = causal ? s_kv - s_q + tok : s_kv - 1;
            return;
        }
        int r = 0;
        while (r + 1 < (int)cu_q.size() && !(cu_q[r] <= tok && tok < cu_q[r + 1])) ++r;
        if (r + 1 >= (int)cu_q.size()) {  // before a sub-batch's first token: not part of the call
            base = 0;
            len = 0;
            last = -1;
            return;
        }
        base = cu_kv[r];
        len = cu_kv[r + 1] - cu_kv[r];
        last = causal ? len - (cu_q[r + 1] - cu_q[r]) + (tok - cu_q[r]) : len - 1;
    }
};

static void alloc_inputs(Problem& P, Rng& rng, float q_scale, bool pad) {
    P.q_sh = 576 + (pad ? 64 : 0);
    P.q_st = P.h * P.q_sh + (pad ? 128 : 0);
    P.kv_st = 576 + (pad ? 64 : 0);
    P.idx_st = P.topk + (pad ? 8 : 0);
    P.o_sh = 512 + (pad ? 64 : 0);
    P.o_st = (P.h + (pad ? 1 : 0)) * P.o_sh;
    P.lse_st = P.h + (pad ? 3 : 0);
    P.q.assign((size_t)P.s_q * P.q_st, f2bf(1.0f));
    for (int t = 0; t < P.s_q; ++t)
        for (int hh = 0; hh < P.h; ++hh)
            for (int d = 0; d < 576; ++d) P.q[(size_t)t * P.q_st + hh * P.q_sh + d] = f2bf(q_scale * rng.normalish());
    P.kv.assign((size_t)P.s_kv * P.kv_st, f2bf(1.0f));
    for (int r = 0; r < P.s_kv; ++r)
        for (int d = 0; d < 576; ++d) P.kv[(size_t)r * P.kv_st + d] = f2bf(rng.normalish());
    P.idx.assign((size_t)P.s_q * P.idx_st, -1);
}

// Index row patterns.
static void row_random(Problem& P, Rng& rng, int tok, double p_inv) {
    int base, len;
    P.req_of(tok, base, len);
    int* row = &P.idx[(size_t)tok * P.idx_st];
    for (int j = 0; j < P.topk; ++j) {
        if (rng.uni() < p_inv || len == 0) {
            const int bad[5] = {-1, -1, -7, len, len + 1000};  // -1, negative, past the (request's) end
            row[j] = bad[rng.below(5)];
        } else {
            row[j] = rng.below(len);
        }
    }
}
// Uniform over the causal prefix [0, pos] without repetition, then -1 padding (FlashMLA's benchmark).
static void row_causal(Problem& P, Rng& rng, int tok, int pos, std::vector<int>& scratch) {
    int* row = &P.idx[(size_t)tok * P.idx_st];
    const int n = std::min(pos + 1, P.topk);
    scratch.resize(pos + 1);
    for (int i = 0; i <= pos; ++i) scratch[i] = i;
    for (int i = 0; i < n; ++i) {
        int j = i + rng.below(pos + 1 - i);
        std::swap(scratch[i], scratch[j]);
        row[i] = scratch[i];
    }
    for (int i = n; i < P.topk; ++i) row[i] = -1;
}
static void row_empty(Problem& P, int tok) {
    int* row = &P.idx[(size_t)tok * P.idx_st];
    for (int j = 0; j < P.topk; ++j) row[j] = (j % 3 == 0) ? -1 : (j % 3 == 1 ? P.s_kv + 5 : -100);
}
static void row_last_only(Problem& P, Rng& rng, int tok) {
    int base, len;
    P.req_of(tok, base, len);
    int* row = &P.idx[(size_t)tok * P.idx_st];
    for (int j = 0; j < P.topk; ++j) row[j] = -1;
    row[P.topk - 1] = rng.below(len);
}
static void row_same(Problem& P, Rng& rng, int tok) {
    int base, len;
    P.req_of(tok, base, len);
    int* row = &P.idx[(size_t)tok * P.idx_st];
    const int v = rng.below(len);
    for (int j = 0; j < P.topk; ++j) row[j] = v;
}

// Copies some valid keys of the row over other positions: duplicates (attended once).
static void row_dups(Problem& P, Rng& rng, int tok, double frac) {
    int* row = &P.idx[(size_t)tok * P.idx_st];
    std::vector<int> valid;
    for (int j = 0; j < P.topk; ++j)
        if (row[j] >= 0) valid.push_back(row[j]);
    if (valid.empty()) return;
    const int n = std::max(1, (int)(frac * P.topk));
    for (int i = 0; i < n; ++i) row[rng.below(P.topk)] = valid[rng.below((int)valid.size())];
}
// Quantizes every contiguous kv row into a 656-byte fp8_ds_mla row (per-128 amax / 448 scales, RNE,
// saturating) and overwrites kv's latent part with what the kernels compute with: bf16(float(e4m3) * scale).
// nan_key >= 0: that row's second scale becomes NaN (its 128 values NaN in the reference too).
static void quantize_kv(Problem& P, int nan_key) {
    P.fp8 = true;
    P.nan_key = nan_key;
    P.kv8_rows.assign((size_t)P.s_kv * kFp8Row, 0);
    parallel_for(P.s_kv, [&](int r) {
        uint16_t* row = &P.kv[(size_t)r * P.kv_st];
        uint8_t* dst = &P.kv8_rows[(size_t)r * kFp8Row];
        for (int g = 0; g < 4; ++g) {
            float amax = 0;
            for (int i = 0; i < 128; ++i) amax = std::max(amax, fabsf(bf2f(row[g * 128 + i])));
            float scale = amax > 0 ? amax / 448.0f : 1.0f;
            if (r == nan_key && g == 1) scale = NAN;
            memcpy(dst + 512 + 4 * g, &scale, 4);
            for (int i = 0; i < 128; ++i) {
                const uint8_t code = std::isnan(scale) ? 0x38 : e4m3_encode(bf2f(row[g * 128 + i]) / scale);
                dst[g * 128 + i] = code;
                const float deq = e4m3_decode(code) * scale;  // fp32 product, then one rounding to bf16
                row[g * 128 + i] = std::isnan(deq) ? (uint16_t)0x7fc0 : f2bf(deq);
            }
        }
        memcpy(dst + 528, row + 512, 128);  // k_pe as stored
    });
}

// Pages the contiguous kv (requests cu_kv, or one sequence) into shuffled pages of `bs` rows: the last page
// of a request partial, spare pages and unused table entries poisoned / out of range, request 1's first page
// shared with request 0's (same rows copied into the contiguous kv, so the reference agrees).
static void make_paged(Problem& P, Rng& rng, int bs) {
    P.block_size = bs;
    std::vector<int> cu = P.cu_kv.empty() ? std::vector<int>{0, P.s_kv} : P.cu_kv;
    const int nreq = (int)cu.size() - 1;
    const bool share = nreq >= 2 && cu[1] - cu[0] >= bs && cu[2] - cu[1] >= bs;
    if (share)
        for (int r = 0; r < bs; ++r) {
            for (int d = 0; d < 576; ++d) P.kv[(size_t)(cu[1] + r) * P.kv_st + d] = P.kv[(size_t)(cu[0] + r) * P.kv_st + d];
            if (P.fp8) memcpy(&P.kv8_rows[(size_t)(cu[1] + r) * kFp8Row], &P.kv8_rows[(size_t)(cu[0] + r) * kFp8Row], kFp8Row);
        }
    int need = 0, maxb = 1;
    for (int r = 0; r < nreq; ++r) {
        const int nb = (cu[r + 1] - cu[r] + bs - 1) / bs;
        need += nb;
        maxb = std::max(maxb, nb);
    }
    P.max_blocks = maxb + 1;
    P.num_pages = need + 3;
    std::vector<int> perm(P.num_pages);
    for (int i = 0; i < P.num_pages; ++i) perm[i] = i;
    for (int i = P.num_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    P.kv_paged.assign((size_t)P.num_pages * bs * P.kv_st, 0x7f7f);  // ~3e38: a read of an unused row shows
    if (P.fp8) P.kv8_paged.assign((size_t)P.num_pages * bs * P.fp8_row_bytes, 0x7f);  // e4m3 NaN codes, scales 3.4e38
    P.bt.assign((size_t)nreq * P.max_blocks, P.num_pages + 7);     // unused entries: out of range
    int next = 0;
    for (int r = 0; r < nreq; ++r) {
        const int len = cu[r + 1] - cu[r];
        for (int b = 0; b * bs < len; ++b) {
            const int pg = (share && r == 1 && b == 0) ? P.bt[0] : perm[next++];
            P.bt[(size_t)r * P.max_blocks + b] = pg;
            for (int i = 0; i < bs && b * bs + i < len; ++i) {
                memcpy(&P.kv_paged[((size_t)pg * bs + i) * P.kv_st], &P.kv[(size_t)(cu[r] + b * bs + i) * P.kv_st], 576 * 2);
                if (P.fp8)
                    memcpy(&P.kv8_paged[((size_t)pg * bs + i) * P.fp8_row_bytes], &P.kv8_rows[(size_t)(cu[r] + b * bs + i) * kFp8Row], kFp8Row);
            }
        }
    }
}

static void reference(Problem& P) {
    const int nc = (int)P.check_toks.size();
    P.r_out.assign((size_t)nc * P.h * 512, 0.0);
    P.r_lse.assign((size_t)nc * P.h, 0.0);
    P.r_ml.assign((size_t)nc * P.h, 0.0);
    std::vector<float> kvf((size_t)P.s_kv * 576);
    for (int r = 0; r < P.s_kv; ++r)
        for (int d = 0; d < 576; ++d) kvf[(size_t)r * 576 + d] = bf2f(P.kv[(size_t)r * P.kv_st + d]);
    parallel_for(nc * P.h, [&](int job) {
        const int ci = job / P.h, hh = job % P.h, tok = P.check_toks[ci];
        int base, len, last;
        P.req_of(tok, base, len, last);
        std::vector<int> rows;  // the row's set of valid keys: a key listed twice is attended once
        for (int j = 0; j < P.topk; ++j) {
            int v = P.idx[(size_t)tok * P.idx_st + j];
            if (v >= 0 && v < len && v <= last) rows.push_back(base + v);
        }
        std::sort(rows.begin(), rows.end());
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        double* o = &P.r_out[((size_t)ci * P.h + hh) * 512];
        if (rows.empty()) {
            P.r_lse[(size_t)ci * P.h + hh] = -INFINITY;
            P.r_ml[(size_t)ci * P.h + hh] = -INFINITY;
            return;
        }
        double qd[576];
        for (int d = 0; d < 576; ++d) qd[d] = bf2f(P.q[(size_t)tok * P.q_st + hh * P.q_sh + d]);
        std::vector<double> lg(rows.size());
        double m = -INFINITY;
        for (size_t i = 0; i < rows.size(); ++i) {
            const float* k = &kvf[(size_t)rows[i] * 576];
            double acc = 0;
            for (int d = 0; d < 576; ++d) acc += qd[d] * k[d];
            lg[i] = acc * (double)P.sm_scale;
            m = std::max(m, lg[i]);
        }
        double L = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
            const double e = exp(lg[i] - m);
            L += e;
            const float* k = &kvf[(size_t)rows[i] * 576];
            for (int d = 0; d < 512; ++d) o[d] += e * k[d];
        }
        for (int d = 0; d < 512; ++d) o[d] /= L;
        P.r_lse[(size_t)ci * P.h + hh] = m + log(L);
        P.r_ml[(size_t)ci * P.h + hh] = m;
    });
}

static void upload(Problem& P) {
    CK(cudaMalloc(&P.dq, P.q.size() * 2));
    CK(cudaMemcpy(P.dq, P.q.data(), P.q.size() * 2, cudaMemcpyHostToDevice));
    const std::vector<uint16_t>& kvd = P.block_size ? P.kv_paged : P.kv;
    CK(cudaMalloc(&P.dkv, kvd.size() * 2));
    CK(cudaMemcpy(P.dkv, kvd.data(), kvd.size() * 2, cudaMemcpyHostToDevice));
    if (P.fp8) {
        CK(cudaMalloc(&P.dkv8, P.kv8_paged.size()));
        CK(cudaMemcpy(P.dkv8, P.kv8_paged.data(), P.kv8_paged.size(), cudaMemcpyHostToDevice));
    }
    if (P.block_size) {
        CK(cudaMalloc(&P.dbt, P.bt.size() * 4));
        CK(cudaMemcpy(P.dbt, P.bt.data(), P.bt.size() * 4, cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&P.didx, P.idx.size() * 4));
    CK(cudaMemcpy(P.didx, P.idx.data(), P.idx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&P.dkept, (size_t)P.s_q * P.topk * 4));
    CK(cudaMalloc(&P.dcount, (size_t)P.s_q * 4));
    P.out_elems = (size_t)P.s_q * P.o_st;
    P.lse_elems = (size_t)P.s_q * P.lse_st;
    CK(cudaMalloc(&P.dout, P.out_elems * 2));
    CK(cudaMalloc(&P.dlse, P.lse_elems * 4));
    CK(cudaMalloc(&P.dml, P.lse_elems * 4));
    if (!P.cu_q.empty()) {
        CK(cudaMalloc(&P.dcuq, P.cu_q.size() * 4));
        CK(cudaMemcpy(P.dcuq, P.cu_q.data(), P.cu_q.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&P.dcukv, P.cu_kv.size() * 4));
        CK(cudaMemcpy(P.dcukv, P.cu_kv.data(), P.cu_kv.size() * 4, cudaMemcpyHostToDevice));
    }
    P.valid_pairs = 0;
    std::vector<int> keys;
    for (int t = 0; t < P.s_q; ++t) {
        int base, len, last;
        P.req_of(t, base, len, last);
        keys.clear();
        for (int j = 0; j < P.topk; ++j) {
            int v = P.idx[(size_t)t * P.idx_st + j];
            if (v >= 0 && v < len && v <= last) keys.push_back(v);
        }
        std::sort(keys.begin(), keys.end());
        P.valid_pairs += std::unique(keys.begin(), keys.end()) - keys.begin();
    }
}
static void release(Problem& P) {
    cudaFree(P.dq);
    cudaFree(P.dkv);
    cudaFree(P.didx);
    cudaFree(P.dout);
    cudaFree(P.dlse);
    cudaFree(P.dml);
    if (P.dcuq) cudaFree(P.dcuq);
    if (P.dcukv) cudaFree(P.dcukv);
    if (P.dbt) cudaFree(P.dbt);
    if (P.dkv8) cudaFree(P.dkv8);
    cudaFree(P.dkept);
    cudaFree(P.dcount);
    P = Problem();
}

static SparseMqaFwdParams params(const Problem& P, bool fp8 = false, bool pre = false) {
    SparseMqaFwdParams p{};
    p.q = P.dq;
    p.q_stride_tok = P.q_st;
    p.q_stride_head = P.q_sh;
    p.kv = P.dkv;
    p.kv_stride_tok = P.kv_st;
    p.indices = P.didx;
    p.idx_stride_tok = P.idx_st;
    p.out = P.dout;
    p.o_stride_tok = P.o_st;
    p.o_stride_head = P.o_sh;
    p.lse = P.dlse;
    p.lse_stride_tok = P.lse_st;
    p.max_logits = P.dml;
    p.ml_stride_tok = P.lse_st;
    p.cu_seqlens_q = P.cu_q.empty() ? nullptr : P.dcuq;
    p.cu_seqlens_kv = P.cu_q.empty() ? nullptr : P.dcukv;
    p.batch = P.batch;
    p.s_q = P.s_q;
    p.s_kv = P.s_kv;
    p.num_heads = P.h;
    p.topk = P.topk;
    p.sm_scale = P.sm_scale;
    p.sm_scale_log2 = (float)(P.sm_scale * 1.4426950408889634);
    if (!P.cu_q.empty()) p.s_q = P.s_q - P.cu_q[0];  // the launcher's grid.x: a sub-batch covers cu_q[0]..
    if (P.block_size) {
        p.block_table = P.dbt;
        p.bt_stride_req = P.max_blocks;
        p.kv_stride_page = (mj_i64)P.block_size * P.kv_st;
        p.block_size = P.block_size;
        p.num_pages = P.num_pages;
        if (P.cu_q.empty()) p.s_kv = P.max_blocks * P.block_size;
    }
    if (fp8) {  // the FP8 pages: strides in bytes
        p.kv = P.dkv8;
        p.kv_stride_tok = P.fp8_row_bytes;
        p.kv_stride_page = (mj_i64)P.block_size * P.fp8_row_bytes;
    }
    p.causal = P.causal ? 1 : 0;
    if (pre) {  // the list: row i = token first + i of the call
        p.kept_rows = P.dkept;
        p.kept_count = P.dcount;
        p.kept_stride = P.topk;
    }
    return p;
}

// The config's launch: with the pre-pass first ("_pre").
static cudaError_t launch_cfg(const Cfg& c, const SparseMqaFwdParams& p) {
    if (is_pre(c)) {
        cudaError_t e = compact_for(p.topk, c.fp8 != 0)->launch(&p, 0);
        if (e != cudaSuccess) return e;
    }
    return c.launch(&p, 0);
}

// The list the pre-pass must write for token `tok` (the kernels' semantics: the single-sequence paged form's keys run to
// the table's capacity p.s_kv, a table entry outside [0, num_pages) makes its keys invalid).
static std::vector<unsigned> expected_list(const Problem& P, const SparseMqaFwdParams& p, int tok, bool fp8) {
    int base, len, last;
    P.req_of(tok, base, len, last);
    if (P.cu_q.empty()) {
        len = p.s_kv;
        last = P.causal ? len - P.s_q + tok : len - 1;
    }
    std::vector<unsigned> out;
    std::vector<int> seen;
    const mj_i64 ebytes = fp8 ? 1 : 2;
    for (int j = 0; j < P.topk; ++j) {
        const int key = P.idx[(size_t)tok * P.idx_st + j];
        if (key < 0 || key >= len || key > last) continue;
        mj_i64 off;
        if (P.block_size) {
            const int r = P.cu_q.empty() ? 0 : [&] { int rr = 0; while (!(P.cu_q[rr] <= tok && tok < P.cu_q[rr + 1])) ++rr; return rr; }();
            const int pg = P.bt[(size_t)r * P.max_blocks + key / P.block_size];
            if (pg < 0 || pg >= P.num_pages) continue;
            off = (pg * p.kv_stride_page + (mj_i64)(key % P.block_size) * p.kv_stride_tok) * ebytes;
        } else {
            off = (mj_i64)(base + key) * p.kv_stride_tok * ebytes;
        }
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(key);
        out.push_back((unsigned)(off >> 4));
    }
    return out;
}
// Checks the pre-pass's list of every checked token against expected_list; returns the number of bad tokens (first in *what).
static long check_list(const Problem& P, const SparseMqaFwdParams& p, bool fp8, std::string* what) {
    const int first = P.cu_q.empty() ? 0 : P.cu_q[0];
    std::vector<unsigned> rows((size_t)p.s_q * P.topk);
    std::vector<int> cnt(p.s_q);
    CK(cudaMemcpy(rows.data(), P.dkept, rows.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cnt.data(), P.dcount, cnt.size() * 4, cudaMemcpyDeviceToHost));
    long bad = 0;
    for (int tok : P.check_toks) {
        if (tok < first || tok >= first + p.s_q) continue;
        const int i = tok - first;
        const std::vector<unsigned> e = expected_list(P, p, tok, fp8);
        const bool ok = cnt[i] == (int)e.size() && std::equal(e.begin(), e.end(), rows.begin() + (size_t)i * P.topk);
        if (!ok && bad++ == 0) {
            char b[160];
            snprintf(b, sizeof b, "pre-pass list of tok %d: count %d, expected %zu", tok, cnt[i], e.size());
            *what = b;
        }
    }
    return bad;
}

static void poison(Problem& P) {
    std::vector<uint16_t> po(P.out_elems, kPoisonBf);
    CK(cudaMemcpy(P.dout, po.data(), P.out_elems * 2, cudaMemcpyHostToDevice));
    std::vector<uint32_t> pl(P.lse_elems, kPoisonF);
    CK(cudaMemcpy(P.dlse, pl.data(), P.lse_elems * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(P.dml, pl.data(), P.lse_elems * 4, cudaMemcpyHostToDevice));
}

struct Result {
    bool ok = true;
    double rel = 0, max_ratio = 0, lse_err = 0, ml_err = 0;
    long fails = 0, guard_bad = 0;
    bool deterministic = true;
    std::string first_fail;
    long list_bad = 0;  // "_pre": checked tokens whose list differs from the host's
    int same = -1;      // "_pre": outputs bit-identical to the config without the pre-pass (-1: that did not run)
};
// Outputs of the configs without the pre-pass on the current problem (by tag), for the "_pre" configs' bit comparison.
struct Outs {
    std::vector<uint16_t> o;
    std::vector<float> l, m;
};
static std::vector<std::pair<std::string, Outs>> g_base_outs;

static Result run_check(Problem& P, const Cfg& c) {
    Result R;
    SparseMqaFwdParams p = params(P, c.fp8 != 0, is_pre(c));
    std::vector<uint16_t> o1(P.out_elems), o2(P.out_elems);
    std::vector<float> l1(P.lse_elems), m1(P.lse_elems), l2(P.lse_elems), m2(P.lse_elems);
    const int reps = g_single_launch ? 1 : 2;
    for (int rep = 0; rep < reps; ++rep) {
        poison(P);
        if (is_pre(c)) {  // the list poisoned too: an entry or count the pre-pass leaves unwritten shows
            CK(cudaMemset(P.dkept, 0xff, (size_t)p.s_q * P.topk * 4));
            CK(cudaMemset(P.dcount, 0xff, (size_t)p.s_q * 4));
        }
        CK(launch_cfg(c, p));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy((rep ? o2 : o1).data(), P.dout, P.out_elems * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy((rep ? l2 : l1).data(), P.dlse, P.lse_elems * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy((rep ? m2 : m1).data(), P.dml, P.lse_elems * 4, cudaMemcpyDeviceToHost));
    }
    if (reps == 1) o2 = o1, l2 = l1, m2 = m1;
    R.deterministic = memcmp(o1.data(), o2.data(), o1.size() * 2) == 0 && memcmp(l1.data(), l2.data(), l1.size() * 4) == 0 &&
                      memcmp(m1.data(), m2.data(), m1.size() * 4) == 0;
    double num = 0, den = 0;
    auto fail = [&](const char* what, int tok, int hh, int d, double got, double ref) {
        if (R.fails++ == 0) {
            char b[256];
            snprintf(b, sizeof b, "%s tok %d head %d col %d: got %.6g ref %.6g", what, tok, hh, d, got, ref);
            R.first_fail = b;
        }
    };
    for (size_t ci = 0; ci < P.check_toks.size(); ++ci) {
        const int tok = P.check_toks[ci];
        if (std::isnan(P.r_lse[ci * P.h])) {
            // The row attends the key with a NaN scale: every head's output must show it (not checked further).
            for (int hh = 0; hh < P.h; ++hh) {
                bool nonfinite = false;
                for (int d = 0; d < 512; ++d) nonfinite |= !std::isfinite(bf2f(o1[(size_t)tok * P.o_st + hh * P.o_sh + d]));
                if (!nonfinite) fail("row attending a NaN scale has a finite output", tok, hh, -1, 0, NAN);
            }
            continue;
        }
        for (int hh = 0; hh < P.h; ++hh) {
            const double* r = &P.r_out[(ci * P.h + hh) * 512];
            double ss = 0;
            for (int d = 0; d < 512; ++d) ss += r[d] * r[d];
            const double rms = sqrt(ss / 512);
            for (int d = 0; d < 512; ++d) {
                const double g = bf2f(o1[(size_t)tok * P.o_st + hh * P.o_sh + d]);
                const double e = fabs(g - r[d]);
                num += e * e;
                den += r[d] * r[d];
                const double tol = 2e-2 * std::max(fabs(r[d]), rms);
                if (!std::isfinite(g)) fail("out not finite", tok, hh, d, g, r[d]);
                else if (rms == 0 ? g != 0 : e > tol) fail("out", tok, hh, d, g, r[d]);
                if (rms > 0) R.max_ratio = std::max(R.max_ratio, e / std::max(fabs(r[d]), rms));
            }
            for (int which = 0; which < 2; ++which) {
                const double g = (which ? m1 : l1)[(size_t)tok * P.lse_st + hh];
                const double ref = (which ? P.r_ml : P.r_lse)[ci * P.h + hh];
                if (std::isinf(ref)) {
                    if (!(std::isinf(g) && g < 0)) fail(which ? "max_logits" : "lse", tok, hh, -1, g, ref);
                } else {
                    const double e = fabs(g - ref);
                    if (!std::isfinite(g) || e > 1e-3) fail(which ? "max_logits" : "lse", tok, hh, -1, g, ref);
                    if (std::isfinite(g)) (which ? R.ml_err : R.lse_err) = std::max(which ? R.ml_err : R.lse_err, e);
                }
            }
        }
        // guards: head padding of out (columns >= 512 of each head, heads >= h), lse/ml past h
        for (mj_i64 e = 0; e < P.o_st; ++e) {
            const mj_i64 hh = e / P.o_sh, d = e % P.o_sh;
            if ((hh >= P.h || d >= 512) && o1[(size_t)tok * P.o_st + e] != kPoisonBf) R.guard_bad++;
        }
        for (mj_i64 hh = P.h; hh < P.lse_st; ++hh) {
            uint32_t a, b;
            memcpy(&a, &l1[(size_t)tok * P.lse_st + hh], 4);
            memcpy(&b, &m1[(size_t)tok * P.lse_st + hh], 4);
            if (a != kPoisonF || b != kPoisonF) R.guard_bad++;
        }
    }
    R.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    std::string list_what;
    if (is_pre(c)) {
        R.list_bad = check_list(P, p, c.fp8 != 0, &list_what);
        for (auto& b : g_base_outs)
            if (b.first == base_tag(c))
                R.same = b.second.o == o1 && memcmp(b.second.l.data(), l1.data(), l1.size() * 4) == 0 &&
                         memcmp(b.second.m.data(), m1.data(), m1.size() * 4) == 0;
        if (R.first_fail.empty() && R.list_bad) R.first_fail = list_what;
        if (R.first_fail.empty() && R.same == 0) R.first_fail = "outputs differ from " + base_tag(c) + "'s";
    }
    g_base_outs.push_back({c.tag, Outs{o1, l1, m1}});  // (a "_pre" config is the base of its persistent form)
    R.ok = R.fails == 0 && R.guard_bad == 0 && R.deterministic && R.rel <= 2e-2 && R.list_bad == 0 && R.same != 0;
    return R;
}

// ---- the correctness cases ----
static std::vector<int> all_toks(int n) {
    std::vector<int> v(n);
    for (int i = 0; i < n; ++i) v[i] = i;
    return v;
}

static Problem make_case(int which, Rng& rng) {
    Problem P;
    std::vector<int> scratch;
    auto basic = [&](const char* name, int s_q, int s_kv, int h, int topk, float q_scale) {
        P.name = name;
        P.s_q = s_q;
        P.s_kv = s_kv;
        P.h = h;
        P.topk = topk;
        P.sm_scale = (float)(1.0 / sqrt(192.0) * 1.3);
        alloc_inputs(P, rng, q_scale, true);
        P.check_toks = all_toks(s_q);
    };
    switch (which) {
        case 0:
            basic("h16 topk64 mixed-invalid/empty/dups/last-only", 6, 300, 16, 64, 1.0f);
            for (int t = 0; t < 6; ++t) row_random(P, rng, t, 0.2);
            row_empty(P, 2);
            row_same(P, rng, 4);
            row_last_only(P, rng, 5);
            break;
        case 1:
            basic("h20 topk2048 random 10% invalid, empty row, last-only row", 5, 3000, 20, 2048, 1.0f);
            for (int t = 0; t < 5; ++t) row_random(P, rng, t, 0.1);
            row_empty(P, 1);
            row_last_only(P, rng, 3);
            break;
        case 2:
            basic("h32 topk128 s_kv50 (heavy duplicates)", 6, 50, 32, 128, 1.0f);
            for (int t = 0; t < 6; ++t) row_random(P, rng, t, 0.1);
            break;
        case 3:
            basic("h64 topk2048 causal/empty/random/last-only/50% invalid", 5, 5000, 64, 2048, 1.0f);
            row_causal(P, rng, 0, 100, scratch);
            row_empty(P, 1);
            row_random(P, rng, 2, 0.0);
            row_last_only(P, rng, 3);
            row_random(P, rng, 4, 0.5);
            break;
        case 4: {
            basic("h128 topk2048 causal prefix rows (pos 0..4095)", 10, 4096, 128, 2048, 1.0f);
            const int pos[10] = {0, 1, 63, 64, 65, 1000, 2047, 2048, 3000, 4095};
            for (int t = 0; t < 10; ++t) row_causal(P, rng, t, pos[t], scratch);
            break;
        }
        case 5: {
            basic("batched h24 topk256 (empty request, request-local ranges)", 9, 1760, 24, 256, 1.0f);
            P.batch = 4;
            P.cu_q = {0, 3, 3, 7, 9};
            P.cu_kv = {0, 400, 450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.15);
            row_empty(P, 5);
            break;
        }
        case 6:
            basic("h1 topk64", 3, 200, 1, 64, 1.0f);
            for (int t = 0; t < 3; ++t) row_random(P, rng, t, 0.1);
            break;
        case 7:
            basic("h128 topk512 peaky logits (q x3), 30% invalid", 24, 2048, 128, 512, 3.0f);
            for (int t = 0; t < 24; ++t) row_random(P, rng, t, 0.3);
            break;
        case 8:
            basic("h100 topk1024 (partial head block)", 6, 1500, 100, 1024, 1.0f);
            for (int t = 0; t < 6; ++t) row_random(P, rng, t, 0.05);
            break;
        case 9:
            basic("h64 topk192", 4, 1000, 64, 192, 1.0f);
            for (int t = 0; t < 4; ++t) row_random(P, rng, t, 0.1);
            break;
        case 10:
            basic("h48 topk100 (not a multiple of 64: beyond the contract)", 4, 700, 48, 100, 1.0f);
            for (int t = 0; t < 4; ++t) row_random(P, rng, t, 0.1);
            break;
        case 11:  // small enough for compute-sanitizer: 8 tiles, partial head block, an empty row
            basic("sanitize: h100 topk512 20% invalid, empty row", 3, 700, 100, 512, 1.0f);
            for (int t = 0; t < 3; ++t) row_random(P, rng, t, 0.2);
            row_empty(P, 1);
            break;
        case 12:
            basic("width 1, 30% invalid", 40, 300, 16, 1, 1.0f);
            for (int t = 0; t < 40; ++t) row_random(P, rng, t, 0.3);
            break;
        case 13:
            basic("h64 width 7, duplicates", 12, 90, 64, 7, 1.0f);
            for (int t = 0; t < 12; ++t) row_random(P, rng, t, 0.2), row_dups(P, rng, t, 0.4);
            break;
        case 14:
            basic("h128 width 2053, causal + duplicates", 6, 5000, 128, 2053, 1.0f);
            for (int t = 0; t < 6; ++t) row_causal(P, rng, t, 1000 * t + 500, scratch), row_dups(P, rng, t, 0.2);
            break;
        case 15:
            basic("sub-batch: cu_seqlens_q[0] = 3, cu_seqlens_kv[0] = 450, h24 width 256", 9, 1760, 24, 256, 1.0f);
            P.batch = 2;
            P.cu_q = {3, 7, 9};
            P.cu_kv = {450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.15), row_dups(P, rng, t, 0.1);
            P.check_toks = {3, 4, 5, 6, 7, 8};
            break;
        case 16:
        case 17:
        case 18: {
            const int bs = which == 16 ? 16 : which == 17 ? 1 : 64;
            basic(which == 16 ? "paged bs 16, batched, shared page" : which == 17 ? "paged bs 1, batched" : "paged bs 64, batched",
                  9, 1760, 48, 300, 1.0f);
            P.batch = 4;
            P.cu_q = {0, 3, 3, 7, 9};
            P.cu_kv = {0, 400, 450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.15), row_dups(P, rng, t, 0.1);
            make_paged(P, rng, bs);
            break;
        }
        // FP8 latent cache (the bf16 configs run the same problem from bf16 pages of the dequantized rows).
        case 19:
            basic("fp8 paged bs 64, batched, shared page, row stride 672, h48 width 300", 9, 1760, 48, 300, 1.0f);
            P.batch = 4;
            P.cu_q = {0, 3, 3, 7, 9};
            P.cu_kv = {0, 400, 450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.15), row_dups(P, rng, t, 0.1);
            quantize_kv(P, -1);
            P.fp8_row_bytes = 672;
            make_paged(P, rng, 64);
            break;
        case 20:
            basic("fp8 paged bs 16, h128 width 2053 causal + dups, key 3000 with a NaN scale", 6, 5000, 128, 2053, 1.0f);
            P.batch = 1;  // the batched form: keys past 5000 on the partial last page are not the sequence's
            P.cu_q = {0, 6};
            P.cu_kv = {0, 5000};
            for (int t = 0; t < 6; ++t) row_causal(P, rng, t, 1000 * t + 500, scratch), row_dups(P, rng, t, 0.2);
            quantize_kv(P, 3000);
            make_paged(P, rng, 16);
            break;
        case 21:  // small enough for compute-sanitizer
            basic("fp8 sanitize: paged bs 64, h100 topk512 20% invalid, empty row", 3, 700, 100, 512, 1.0f);
            P.batch = 1;
            P.cu_q = {0, 3};
            P.cu_kv = {0, 700};
            for (int t = 0; t < 3; ++t) row_random(P, rng, t, 0.2);
            row_empty(P, 1);
            quantize_kv(P, -1);
            make_paged(P, rng, 64);
            break;
        case 22:
            basic("fp8 paged bs 1, batched, h16 width 64", 9, 1760, 16, 64, 1.0f);
            P.batch = 4;
            P.cu_q = {0, 3, 3, 7, 9};
            P.cu_kv = {0, 400, 450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.15);
            quantize_kv(P, -1);
            make_paged(P, rng, 1);
            break;
        case 23:  // FP8 rows so that every config runs it (the bf16 ones from bf16 pages of the dequantized rows)
            basic("causal = 1 (DSA): batched, paged bs 16, h48 width 300, keys past each query's position, dups", 9, 1760, 48, 300, 1.0f);
            P.causal = true;
            P.batch = 4;
            P.cu_q = {0, 3, 3, 7, 9};
            P.cu_kv = {0, 400, 450, 1700, 1760};
            for (int t = 0; t < 9; ++t) row_random(P, rng, t, 0.1), row_dups(P, rng, t, 0.15);
            row_last_only(P, rng, 6);
            quantize_kv(P, -1);
            make_paged(P, rng, 16);
            break;
        case 24: {  // the table's spare entry (block 16) is out of range: keys 1024..1087 are invalid by their page alone
            basic("paged single sequence bs 64, s_kv 1024: keys on bad page entries and past the table, dups, h32 width 512", 6, 1024, 32,
                  512, 1.0f);
            for (int t = 0; t < 6; ++t) {
                row_random(P, rng, t, 0.1);
                int* row = &P.idx[(size_t)t * P.idx_st];
                for (int j = 0; j < P.topk; ++j)
                    if (rng.uni() < 0.15) row[j] = 1024 + rng.below(t == 5 ? 200 : 64);  // 1088+: past the table's capacity
                row_dups(P, rng, t, 0.1);
            }
            quantize_kv(P, -1);
            make_paged(P, rng, 64);
            break;
        }
        default:
            break;
    }
    return P;
}
static const int kNumCases = 25;
static bool is_sanitize_case(int cs) { return cs == 11 || cs == 21; }

static std::vector<const Cfg*> pick(const std::string& list) {
    std::vector<const Cfg*> v;
    for (const Cfg& c : kCfgs)
        if (list.empty() || ("," + list + ",").find("," + std::string(c.tag) + ",") != std::string::npos) v.push_back(&c);
    return v;
}

// Bench problem: s_q = s_kv = g_bench_s, topk 2048 causal rows; -1 padding at the row end or scattered
// over the row (g_scatter): the compacted key set must make the two cost the same.
static int g_bench_s = 8192;
static bool g_scatter = false;
static bool g_paged = false;  // --paged: block size 64, shuffled pages; bf16 and FP8 pages of the same (dequantized) rows
static Problem make_bench(int h, Rng& rng) {
    Problem P;
    P.name = g_scatter ? "bench (scattered padding)" : "bench (padding at row end)";
    P.s_q = g_bench_s;
    P.s_kv = g_bench_s;
    P.h = h;
    P.topk = 2048;
    P.sm_scale = (float)(1.0 / sqrt(192.0) * 1.3);
    alloc_inputs(P, rng, 1.0f, false);
    std::vector<int> scratch;
    for (int t = 0; t < P.s_q; ++t) {
        row_causal(P, rng, t, t, scratch);
        if (g_scatter) {
            int* row = &P.idx[(size_t)t * P.idx_st];
            for (int j = P.topk - 1; j > 0; --j) std::swap(row[j], row[rng.below(j + 1)]);
        }
    }
    P.check_toks = {0, 1, 2, 63, 64, 1000, 2046, 2047, 2048, 3071, P.s_q - 1};
    for (int i = 0; i < 5; ++i) P.check_toks.push_back(rng.below(P.s_q));
    if (g_paged) {
        P.name += ", paged bs 64 (bf16 and FP8)";
        quantize_kv(P, -1);
        make_paged(P, rng, 64);
    }
    return P;
}

int main(int argc, char** argv) {
    std::string cfg_list, bench_list, bench_heads = "128,64,32,16";
    int reps = 15;
    bool check = true, bench = true, sanitize = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--configs" && i + 1 < argc) cfg_list = argv[++i];
        else if (a == "--bench-configs" && i + 1 < argc) bench_list = argv[++i];
        else if (a == "--no-check") check = false;
        else if (a == "--bench-heads" && i + 1 < argc) bench_heads = argv[++i];
        else if (a == "--bench-s" && i + 1 < argc) g_bench_s = atoi(argv[++i]);
        else if (a == "--scatter") g_scatter = true;
        else if (a == "--paged") g_paged = true;
        else if (a == "--reps" && i + 1 < argc) reps = atoi(argv[++i]);
        else if (a == "--no-bench") bench = false;
        else if (a == "--sanitize") sanitize = true, bench = false, g_single_launch = true;
        else if (a == "--log" && i + 1 < argc) g_log = fopen(argv[++i], "w");
        else if (a == "--compact-threads" && i + 1 < argc) g_compact_threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    out("device: %s, %d SMs, L2 %d MB, smem/block optin %zu\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
        prop.sharedMemPerBlockOptin);
    const auto cfgs = pick(cfg_list);
    const uint64_t seed = (uint64_t)time(nullptr);
    Rng rng(seed);
    out("seed %llu\n", (unsigned long long)seed);
    int total_fail = 0, total_run = 0;

    if (check) {
        for (int cs = 0; cs < kNumCases; ++cs) {
            if (sanitize != is_sanitize_case(cs)) continue;
            Problem P = make_case(cs, rng);
            reference(P);
            upload(P);
            g_base_outs.clear();
            out("case %d: %s  (s_q %d, s_kv %d, h %d, topk %d)\n", cs, P.name.c_str(), P.s_q, P.s_kv, P.h, P.topk);
            for (const Cfg* c : cfgs) {
                if (c->skip) continue;  // timing-only variants compute something else
                if (c->fp8 && !P.fp8) continue;  // FP8 configs read only the FP8 pages
                Result R = run_check(P, *c);
                total_run++;
                total_fail += !R.ok;
                out("  %-12s %s  rel %.3e  max|e|/scale %.3e  lse %.2e  ml %.2e  fails %ld  guard %ld  det %s%s %s\n", c->tag,
                    R.ok ? "PASS" : "FAIL", R.rel, R.max_ratio, R.lse_err, R.ml_err, R.fails, R.guard_bad,
                    R.deterministic ? "yes" : "NO",
                    !is_pre(*c) ? "" : R.list_bad ? "  list BAD" : R.same == 1 ? "  list ok, same bits" : R.same == 0 ? "  list ok, bits DIFFER" : "  list ok",
                    R.first_fail.c_str());
            }
            release(P);
        }
    }

    struct Row {
        std::string tag;
        int h;
        double ms, tf_all, tf_valid, gather_tbs;
        const char* status;
        double pre_ms = -1, both_ms = -1;  // "_pre": the pre-pass alone, pre-pass + kernel (ms: the kernel alone)
    };
    std::vector<Row> rows;
    double copy_tbs = 0;
    if (bench) {
        // The copy ceiling in this run: device-to-device 1 GiB, bytes read + written.
        const size_t cb = size_t(1) << 30;
        void *ca, *cbuf;
        CK(cudaMalloc(&ca, cb));
        CK(cudaMalloc(&cbuf, cb));
        CK(cudaMemset(ca, 1, cb));
        cudaEvent_t c0, c1;
        CK(cudaEventCreate(&c0));
        CK(cudaEventCreate(&c1));
        std::vector<float> ct;
        for (int i = 0; i < 6; ++i) {
            CK(cudaEventRecord(c0));
            CK(cudaMemcpy(cbuf, ca, cb, cudaMemcpyDeviceToDevice));
            CK(cudaEventRecord(c1));
            CK(cudaEventSynchronize(c1));
            float ms;
            CK(cudaEventElapsedTime(&ms, c0, c1));
            ct.push_back(ms);
        }
        std::sort(ct.begin(), ct.end());
        copy_tbs = 2.0 * cb / (ct[ct.size() / 2] * 1e-3) * 1e-12;
        out("copy ceiling: %.2f TB/s (1 GiB device-to-device, read + write)\n", copy_tbs);
        CK(cudaFree(ca));
        CK(cudaFree(cbuf));
        std::vector<int> hs;
        for (size_t a = 0; a < bench_heads.size();) {
            size_t b = bench_heads.find(',', a);
            if (b == std::string::npos) b = bench_heads.size();
            hs.push_back(atoi(bench_heads.substr(a, b - a).c_str()));
            a = b + 1;
        }
        for (int h : hs) {
            Problem P = make_bench(h, rng);
            reference(P);
            upload(P);
            const double flops_all = 2.0 * P.s_q * (double)h * P.topk * (576 + 512);
            const double flops_valid = 2.0 * P.valid_pairs * h * (576 + 512);
            out("bench h=%d: s_q=s_kv=%d topk=%d, valid fraction %.4f\n", h, P.s_q, P.topk, P.valid_pairs / ((double)P.s_q * P.topk));
            g_base_outs.clear();
            // Median of `reps` timed runs of f (after 3 warm-ups), ms; min / max through lo / hi.
            auto time_ms = [&](const std::function<void()>& f, double* lo = nullptr, double* hi = nullptr) {
                for (int i = 0; i < 3; ++i) f();
                CK(cudaDeviceSynchronize());
                cudaEvent_t e0, e1;
                CK(cudaEventCreate(&e0));
                CK(cudaEventCreate(&e1));
                std::vector<float> ts;
                for (int i = 0; i < reps; ++i) {
                    CK(cudaEventRecord(e0));
                    f();
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    ts.push_back(ms);
                }
                CK(cudaEventDestroy(e0));
                CK(cudaEventDestroy(e1));
                std::sort(ts.begin(), ts.end());
                if (lo) *lo = ts.front();
                if (hi) *hi = ts.back();
                return (double)ts[ts.size() / 2];
            };
            bool any_pre = false;
            for (const Cfg* c : pick(bench_list))
                if (is_pre(*c) && (cfg_list.empty() || std::find(cfgs.begin(), cfgs.end(), c) != cfgs.end())) any_pre = true;
            if (any_pre) {  // every pre-pass variant that holds the row, alone (its list checked on the bench's checked tokens)
                for (const CompactVariant& v : kCompact) {
                    if (P.topk > v.maxw || (v.fp8 && !P.fp8)) continue;
                    const SparseMqaFwdParams p = params(P, v.fp8 != 0, true);
                    CK(cudaMemset(P.dkept, 0xff, (size_t)p.s_q * P.topk * 4));
                    const double ms = time_ms([&] { CK(v.launch(&p, 0)); });
                    std::string what;
                    const long bad = check_list(P, p, v.fp8 != 0, &what);
                    total_run++;
                    total_fail += bad != 0;
                    out("  pre-pass alone: %3d threads, rows <= %4d, %s cache: %.4f ms  list %s %s\n", v.threads, v.maxw, v.fp8 ? "FP8 " : "bf16",
                        ms, bad ? "BAD" : "ok", what.c_str());
                }
            }
            std::vector<const Cfg*> sel;
            for (const Cfg* c : pick(bench_list)) {
                if (!cfg_list.empty() && std::find(cfgs.begin(), cfgs.end(), c) == cfgs.end()) continue;
                // small head counts only on small tiles and the default, big ones only on 64-head tiles
                if (h >= 64 && c->bh != 64) continue;
                if (c->skip && h != 128 && h != 32 && c->bh != h) continue;
                if (h == 32 && c->bh == 16) continue;
                if (h == 16 && !(c->bh == 16 || !strcmp(c->tag, "h64n64s2") || !strncmp(c->tag, "h64sm90", 7))) continue;
                if (c->fp8 && !P.fp8) continue;
                sel.push_back(c);
            }
            if (!sel.empty()) sel.push_back(sel.front());  // the first again: run-to-run spread
            for (size_t si = 0; si < sel.size(); ++si) {
                const Cfg* c = sel[si];
                const bool repeat = si + 1 == sel.size() && sel.size() > 1;
                Result R;
                if (!repeat && !c->skip) {
                    R = run_check(P, *c);
                    total_run++;
                    total_fail += !R.ok;
                }
                const bool pre = is_pre(*c);
                SparseMqaFwdParams p = params(P, c->fp8 != 0, pre);
                if (pre) {  // a valid list for the kernel-alone timing
                    CK(compact_for(p.topk, c->fp8 != 0)->launch(&p, 0));
                    CK(cudaDeviceSynchronize());
                }
                double tmin, tmax;
                const double ms = time_ms([&] { CK(c->launch(&p, 0)); }, &tmin, &tmax);  // the kernel alone
                double pre_ms = -1, both_ms = -1;
                if (pre) {
                    pre_ms = time_ms([&] { CK(compact_for(p.topk, c->fp8 != 0)->launch(&p, 0)); });
                    both_ms = time_ms([&] { CK(launch_cfg(*c, p)); });
                }
                const std::string tag = std::string(c->tag) + (repeat ? "(again)" : "");
                // Gathered latent bytes: every valid key's 1152-byte row, once per 64- (or BLOCK_H-) head block.
                const double gathered = P.valid_pairs * (c->fp8 ? 656.0 : 1152.0) * ((h + c->bh - 1) / c->bh);
                rows.push_back({tag, h, ms, flops_all / ms * 1e-9, flops_valid / ms * 1e-9, gathered / (ms * 1e-3) * 1e-12,
                                c->skip ? "diag" : repeat ? "-" : R.ok ? "ok" : "FAIL", pre_ms, both_ms});
                out("  %-17s %s rel %.3e lse %.2e ml %.2e det %s%s  %.3f ms (min %.3f max %.3f)  %.1f TFLOP/s (valid %.1f) %s\n",
                    tag.c_str(), repeat || c->skip ? "----" : R.ok ? "PASS" : "FAIL", R.rel, R.lse_err, R.ml_err, R.deterministic ? "yes" : "NO",
                    !pre || repeat ? "" : R.same == 1 ? " same bits" : R.same == 0 ? " bits DIFFER" : "", ms, tmin, tmax,
                    flops_all / ms * 1e-9, flops_valid / ms * 1e-9, R.first_fail.c_str());
                if (pre) out("  %-17s pre-pass alone %.4f ms, pre-pass + kernel %.3f ms\n", tag.c_str(), pre_ms, both_ms);
            }
            release(P);
        }
    }
    out("\n%d checks, %d failed\n", total_run, total_fail);
    if (!rows.empty()) {
        out("%-17s %5s %9s %12s %14s %12s %s   (copy ceiling %.2f TB/s; \"_pre\": ms = the kernel alone)\n", "config", "heads", "ms",
            "TFLOP/s", "TFLOP/s valid", "gather TB/s", "check", copy_tbs);
        for (auto& r : rows) {
            out("%-17s %5d %9.3f %12.1f %14.1f %12.2f %s", r.tag.c_str(), r.h, r.ms, r.tf_all, r.tf_valid, r.gather_tbs, r.status);
            if (r.pre_ms >= 0) out("   pre-pass %.4f  pre+kernel %.3f", r.pre_ms, r.both_ms);
            out("\n");
        }
    }
    if (g_log) fclose(g_log);
    return total_fail ? 1 : 0;
}
