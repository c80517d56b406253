// Standalone correctness + timing harness for kernels_src/mha_fwd.cuh and kernels_src/topk_mask.cuh.
// Built on the GPU machine by tools/dev/mha/build.sh (nvcc, one wrapper object per specialization).
//
// Correctness: fresh random bf16 inputs (seeded from the clock, seed printed), outputs poisoned with NaN
// bytes, padded strides whose pads hold NaN (a kernel that reads a pad produces NaN; one that writes a
// pad is caught too), every output element compared against a float64 CPU reference:
//   out: |o - r| <= 2e-2 * max(|r|, rms(ref row)), ||out - ref|| / ||ref|| printed; a row that attends
//   nothing must be exactly 0 with lse = -inf; lse: |lse - ref| <= 1e-3. NaN never passes.
// Timing: cudaEvents around each launch, 3 warm-ups, median of 15.
//
// usage: harness [--no-perf] [--no-check] [--only a,b] [--skip a,b] [--shapes h:S,..] [--ncu]   (--ncu: one dense and one
// masked launch of each selected config at h=128 S=8192, for a profiler)
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mlajit_abi.h"

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

typedef cudaError_t (*mha_launch_fn)(const MhaFwdParams*, cudaStream_t);
typedef cudaError_t (*mask_launch_fn)(const TopkMaskParams*, cudaStream_t);
// The tested configs of mha_fwd.cuh (BLOCK_M x BLOCK_N x WARPS x STAGES), built by build.sh under these
// names. (Device run 3 also timed EXPERIMENTAL variants -- Q re-read from shared memory at 64-key tiles,
// lazy rescale, a 3-stage ping-pong -- since removed; see docs/perf_mha_notes.md.)
// h90pp / h90np: the Hopper tier (kernels_src/mha/sm90.cuh) with / without ping-pong of its two consumers.
// Masked-only knob variants of it (MJ_MASK_EXP; their dense kernel is h90pp's): h90x1 = mask box
// without the bit test, x2 = bit test without the mask box (both timing-only: their masked outputs are
// wrong), x4 = no tile-bitmap scan, x8 = the 2026-12-03 per-score bit test instead of the compacted one.
// (x3, x5: knobs of the copy-warp mask stage, removed with it.) h90old: an older version for side-by-side
// timing (build.sh OLD_KSRC, -DWITH_OLD; its mha/sm90.cuh must define what wrap_mha90.cu uses), and
// oldrpb4, that version's top-k mask build (WITH_OLD too).
// (The v4 / t1 / t3 / t4 experiments of 2026-12-03 were removed with tools/dev/mha/sm90_v4.cuh once the
// folded kernel replaced them: docs/perf_mha_notes.md.)
#ifdef WITH_OLD
#define MHA_OLD(X) X(h90old, 128)
#else
#define MHA_OLD(X)
#endif
#ifdef NO_PORTABLE
#define MHA_PORTABLE(X)
#else
#define MHA_PORTABLE(X) X(c128x64x8x2, 128) X(c64x64x4x2, 64) X(c64x32x4x2, 64) X(c128x128x8x2, 128)
#endif
#define MHA_VARIANTS(X) \
    MHA_PORTABLE(X) X(h90pp, 128) X(h90np, 128) MHA_OLD(X)
// masked-only variants: their dense kernel is h90pp's
#define MHA_MASKED_VARIANTS(X) X(h90x1) X(h90x2) X(h90x4) X(h90x8)
#define DECL_MHA(n, bm)                                                      \
    extern "C" cudaError_t launch_##n##_d(const MhaFwdParams*, cudaStream_t); \
    extern "C" cudaError_t launch_##n##_m(const MhaFwdParams*, cudaStream_t);
MHA_VARIANTS(DECL_MHA)
#define DECL_MHA_M(n) extern "C" cudaError_t launch_##n##_m(const MhaFwdParams*, cudaStream_t);
MHA_MASKED_VARIANTS(DECL_MHA_M)
extern "C" cudaError_t launch_rpb4(const TopkMaskParams*, cudaStream_t);
extern "C" cudaError_t launch_rpb1(const TopkMaskParams*, cudaStream_t);
extern "C" cudaError_t launch_rpb8(const TopkMaskParams*, cudaStream_t);
extern "C" cudaError_t launch_rpb16(const TopkMaskParams*, cudaStream_t);
#ifdef WITH_OLD
extern "C" cudaError_t launch_oldrpb4(const TopkMaskParams*, cudaStream_t);
#endif

struct MhaCfg {
    const char* name;
    int bm;
    mha_launch_fn dense, masked;
};
#define CFG_ROW(n, bm) {#n, bm, launch_##n##_d, launch_##n##_m},
#define CFG_ROW_M(n) {#n, 128, launch_h90pp_d, launch_##n##_m},
static const MhaCfg kCfgs[] = {MHA_VARIANTS(CFG_ROW) MHA_MASKED_VARIANTS(CFG_ROW_M)};

// ------------------------------------------------------------------------------------------------------
static inline uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
struct Rng {
    uint64_t s;
    uint64_t next() { return s = splitmix(s); }
    double uni() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0,1)
    int below(int n) { return (int)(next() % (uint64_t)n); }
};
static inline uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline double bf2d(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static const uint16_t kBfNaN = 0x7fc0;

__global__ void fill_bf16_kernel(uint16_t* p, size_t n, uint64_t seed, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t x = i * 0x9e3779b97f4a7c15ull ^ seed;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        float u = ((float)(x >> 40) + 0.5f) * (1.0f / 16777216.0f);
        float v = (2.f * u - 1.f) * amp;
        uint32_t b = __float_as_uint(v);
        b += 0x7fffu + ((b >> 16) & 1u);
        p[i] = (uint16_t)(b >> 16);
    }
}

template <class F>
static void parallel_for(int n, F f) {
    int nt = std::max(1u, std::thread::hardware_concurrency());
    std::atomic<int> next{0};
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t)
        th.emplace_back([&] {
            for (int i; (i = next.fetch_add(1)) < n;) f(i);
        });
    for (auto& x : th) x.join();
}

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------------------------------------------------
// A problem: inputs on host (bf16 bits, NaN in pads) and device, output buffers, layout.
struct Problem {
    int h = 0, batch = 0, max_sq = 0, max_sk = 0, Tq = 0, Tk = 0;
    std::vector<int> cu_q, cu_k;
    int kp_mode = 0;  // 0: k_pe shared by heads, 1: k_pe per head, 2: packed k [T,h,192]
    mj_i64 q_st, q_sh, kn_st, kn_sh, kp_st, kp_sh, v_st, v_sh, o_st, o_sh, l_st, l_sh;
    size_t q_n, k_n, kp_n, v_n, o_n, l_n;  // buffer sizes in elements
    std::vector<uint16_t> q, k, kp, v;      // host copies (k = k_nope or packed k)
    uint16_t *dq = nullptr, *dk = nullptr, *dkp = nullptr, *dv = nullptr, *dout = nullptr;
    float* dlse = nullptr;
    int *dcu_q = nullptr, *dcu_k = nullptr;
    float scale = 0;
    // masked
    int topk = 0;
    std::vector<int> idx;                 // [Tq, topk]
    mj_i64 m_stride = 0;                  // words
    std::vector<uint32_t> mask_ref;       // [Tq, m_stride]
    int* didx = nullptr;
    uint32_t* dmask = nullptr;

    const uint16_t* qp(int t, int hh) const { return &q[t * q_st + hh * q_sh]; }
    const uint16_t* knp(int j, int hh) const { return &k[j * kn_st + hh * kn_sh]; }
    const uint16_t* kpp(int j, int hh) const {
        return kp_mode == 2 ? &k[j * kn_st + hh * kn_sh + 128] : &kp[j * kp_st + hh * kp_sh];
    }
    const uint16_t* vp(int j, int hh) const { return &v[j * v_st + hh * v_sh]; }

    void free_all() {
        for (void* p : {(void*)dq, (void*)dk, (void*)dkp, (void*)dv, (void*)dout, (void*)dlse, (void*)dcu_q, (void*)dcu_k,
                        (void*)didx, (void*)dmask})
            if (p) CK(cudaFree(p));
        dq = dk = dkp = dv = dout = nullptr;
        dlse = nullptr;
        dcu_q = dcu_k = nullptr;
        didx = nullptr;
        dmask = nullptr;
    }
};

struct Req {
    int s_q, s_k;
};

// host_gen: inputs drawn on the host with NaN pads (small problems); else drawn on the GPU, no pads.
static void setup_problem(Problem& P, int h, const std::vector<Req>& reqs, int kp_mode, bool pad, bool host_gen,
                          uint64_t seed, float amp_q, float amp_k, float scale) {
    P.h = h;
    P.batch = (int)reqs.size();
    P.kp_mode = kp_mode;
    P.cu_q = {0};
    P.cu_k = {0};
    P.max_sq = P.max_sk = 0;
    for (auto& r : reqs) {
        P.cu_q.push_back(P.cu_q.back() + r.s_q);
        P.cu_k.push_back(P.cu_k.back() + r.s_k);
        P.max_sq = std::max(P.max_sq, r.s_q);
        P.max_sk = std::max(P.max_sk, r.s_k);
    }
    P.Tq = P.cu_q.back();
    P.Tk = P.cu_k.back();
    P.scale = scale;
    const int ph = pad ? 8 : 0, pt = pad ? 16 : 0;
    P.q_sh = 192 + ph;
    P.q_st = h * P.q_sh + pt;
    if (kp_mode == 2) {
        P.kn_sh = 192 + ph;
        P.kn_st = h * P.kn_sh + pt;
        P.kp_sh = P.kn_sh;
        P.kp_st = P.kn_st;
    } else {
        P.kn_sh = 128 + ph;
        P.kn_st = h * P.kn_sh + pt;
        if (kp_mode == 0) {
            P.kp_sh = 0;
            P.kp_st = 64 + ph;
        } else {
            P.kp_sh = 64 + ph;
            P.kp_st = h * P.kp_sh + pt;
        }
    }
    P.v_sh = 128 + ph;
    P.v_st = h * P.v_sh + pt;
    P.o_sh = 128 + ph;
    P.o_st = h * P.o_sh + (pad ? 8 : 0);
    P.l_sh = 1;
    P.l_st = h + (pad ? 3 : 0);
    P.q_n = (size_t)P.Tq * P.q_st;
    P.k_n = (size_t)P.Tk * P.kn_st;
    P.kp_n = kp_mode == 2 ? 0 : (size_t)P.Tk * P.kp_st;
    P.v_n = (size_t)P.Tk * P.v_st;
    P.o_n = (size_t)P.Tq * P.o_st;
    P.l_n = (size_t)P.Tq * P.l_st;

    CK(cudaMalloc(&P.dq, P.q_n * 2));
    CK(cudaMalloc(&P.dk, P.k_n * 2));
    if (P.kp_n) CK(cudaMalloc(&P.dkp, P.kp_n * 2));
    CK(cudaMalloc(&P.dv, P.v_n * 2));
    CK(cudaMalloc(&P.dout, P.o_n * 2));
    CK(cudaMalloc(&P.dlse, P.l_n * 4));
    CK(cudaMalloc(&P.dcu_q, (P.batch + 1) * 4));
    CK(cudaMalloc(&P.dcu_k, (P.batch + 1) * 4));
    CK(cudaMemcpy(P.dcu_q, P.cu_q.data(), (P.batch + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(P.dcu_k, P.cu_k.data(), (P.batch + 1) * 4, cudaMemcpyHostToDevice));

    P.q.assign(P.q_n, 0);
    P.k.assign(P.k_n, 0);
    P.kp.assign(P.kp_n, 0);
    P.v.assign(P.v_n, 0);
    if (host_gen) {
        Rng rng{seed};
        // Fill valid elements with random values, everything else (pads) with NaN.
        auto fill = [&](std::vector<uint16_t>& buf, int ntok, mj_i64 st, mj_i64 sh, int nh, int width, int col0, float amp) {
            for (int t = 0; t < ntok; ++t)
                for (int hh = 0; hh < nh; ++hh)
                    for (int d = 0; d < width; ++d) {
                        float x = (float)((2 * rng.uni() - 1) * amp);
                        uint16_t b = f2bf(x);
                        if ((b & 0x7fff) == 0) b = f2bf(amp * 0.01f);
                        buf[t * st + hh * sh + col0 + d] = b;
                    }
        };
        std::fill(P.q.begin(), P.q.end(), kBfNaN);
        std::fill(P.k.begin(), P.k.end(), kBfNaN);
        std::fill(P.kp.begin(), P.kp.end(), kBfNaN);
        std::fill(P.v.begin(), P.v.end(), kBfNaN);
        fill(P.q, P.Tq, P.q_st, P.q_sh, h, 192, 0, amp_q);
        if (kp_mode == 2) {
            fill(P.k, P.Tk, P.kn_st, P.kn_sh, h, 192, 0, amp_k);
        } else {
            fill(P.k, P.Tk, P.kn_st, P.kn_sh, h, 128, 0, amp_k);
            fill(P.kp, P.Tk, P.kp_st, P.kp_sh, kp_mode == 0 ? 1 : h, 64, 0, amp_k);
        }
        fill(P.v, P.Tk, P.v_st, P.v_sh, h, 128, 0, 1.0f);
        CK(cudaMemcpy(P.dq, P.q.data(), P.q_n * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(P.dk, P.k.data(), P.k_n * 2, cudaMemcpyHostToDevice));
        if (P.kp_n) CK(cudaMemcpy(P.dkp, P.kp.data(), P.kp_n * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(P.dv, P.v.data(), P.v_n * 2, cudaMemcpyHostToDevice));
    } else {
        fill_bf16_kernel<<<2048, 256>>>(P.dq, P.q_n, splitmix(seed + 1), amp_q);
        fill_bf16_kernel<<<2048, 256>>>(P.dk, P.k_n, splitmix(seed + 2), amp_k);
        if (P.kp_n) fill_bf16_kernel<<<2048, 256>>>(P.dkp, P.kp_n, splitmix(seed + 3), amp_k);
        fill_bf16_kernel<<<2048, 256>>>(P.dv, P.v_n, splitmix(seed + 4), 1.0f);
        CK(cudaGetLastError());
        CK(cudaMemcpy(P.q.data(), P.dq, P.q_n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(P.k.data(), P.dk, P.k_n * 2, cudaMemcpyDeviceToHost));
        if (P.kp_n) CK(cudaMemcpy(P.kp.data(), P.dkp, P.kp_n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(P.v.data(), P.dv, P.v_n * 2, cudaMemcpyDeviceToHost));
    }
}

long long mha90_totals[2];  // token counts of q and k for the Hopper launchers' tensor maps

static MhaFwdParams make_params(const Problem& P, bool masked) {
    mha90_totals[0] = P.Tq;
    mha90_totals[1] = P.Tk;
    MhaFwdParams p;
    memset(&p, 0, sizeof p);
    p.q = P.dq;
    p.q_stride_tok = P.q_st;
    p.q_stride_head = P.q_sh;
    p.k_nope = P.dk;
    p.kn_stride_tok = P.kn_st;
    p.kn_stride_head = P.kn_sh;
    p.k_pe = P.kp_mode == 2 ? (const void*)(P.dk + 128) : (const void*)P.dkp;
    p.kp_stride_tok = P.kp_st;
    p.kp_stride_head = P.kp_sh;
    p.v = P.dv;
    p.v_stride_tok = P.v_st;
    p.v_stride_head = P.v_sh;
    p.out = P.dout;
    p.o_stride_tok = P.o_st;
    p.o_stride_head = P.o_sh;
    p.lse = P.dlse;
    p.lse_stride_tok = P.l_st;
    p.lse_stride_head = P.l_sh;
    p.cu_seqlens_q = P.dcu_q;
    p.cu_seqlens_k = P.dcu_k;
    p.mask = masked ? P.dmask : nullptr;
    p.mask_stride_row = masked ? P.m_stride : 0;
    p.batch = P.batch;
    p.num_heads = P.h;
    p.max_seqlen_q = P.max_sq;
    p.max_seqlen_k = P.max_sk;
    p.sm_scale = P.scale;
    p.sm_scale_log2 = (float)(P.scale * 1.4426950408889634);
    return p;
}

// ------------------------------------------------------------------------------------------------------
// Index generation. kind 0: small random sets with invalid/duplicate/future entries and a few special
// rows; kind 1: top-k distinct keys uniform over the causal prefix (all of it when it has <= topk keys),
// -1 padded; kind 2: sink (4 keys) + sliding window of 96 keys (many empty key tiles).
static void make_indices(Problem& P, int topk, int kind, uint64_t seed, mj_i64 extra_words) {
    P.topk = topk;
    P.idx.assign((size_t)P.Tq * topk, -1);
    parallel_for(P.batch, [&](int r) {
        const int s_q = P.cu_q[r + 1] - P.cu_q[r], s_k = P.cu_k[r + 1] - P.cu_k[r];
        std::vector<char> used;
        for (int i = 0; i < s_q; ++i) {
            Rng rng{splitmix(seed * 7919 + (uint64_t)(P.cu_q[r] + i))};
            int* row = &P.idx[(size_t)(P.cu_q[r] + i) * topk];
            const int qpos = s_k - s_q + i;
            const int prefix = std::max(0, std::min(qpos + 1, s_k));
            if (kind == 0) {
                int special = (i * 37 + r) % 23;
                for (int k = 0; k < topk; ++k) {
                    int x = rng.below(100);
                    int val;
                    if (special == 5) val = -1;                                 // nothing attended
                    else if (special == 9) val = s_k + rng.below(1000);           // only out-of-range
                    else if (x < 8) val = -1;
                    else if (x < 11) val = s_k + rng.below(50);                   // >= s_k: skipped
                    else if (x < 13) val = -2 - rng.below(1000);                  // negative: skipped
                    else if (x < 20 && qpos + 1 < s_k) val = qpos + 1 + rng.below(s_k - qpos - 1);  // future key
                    else if (x < 25 && k > 0) val = row[rng.below(k)];            // duplicate
                    else val = prefix > 0 ? rng.below(prefix) : -1;
                    row[k] = val;
                }
            } else if (kind == 1) {
                if (prefix <= topk) {
                    for (int k = 0; k < prefix; ++k) row[k] = k;
                } else {
                    used.assign(prefix, 0);
                    int n = 0;
                    while (n < topk) {
                        int c = rng.below(prefix);
                        if (!used[c]) used[c] = 1, row[n++] = c;
                    }
                }
                // shuffle so that order carries no information
                for (int k = topk - 1; k > 0; --k) std::swap(row[k], row[rng.below(k + 1)]);
            } else {
                int n = 0;
                for (int k = 0; k < 4 && k < prefix && n < topk; ++k) row[n++] = k;
                for (int k = std::max(4, qpos - 95); k <= qpos && k < s_k && n < topk; ++k) row[n++] = k;
            }
        }
    });
    // Rows padded to a multiple of 4 words (16 bytes), as mlajit_topk_mask_words sizes them: the Hopper
    // kernel reads the mask by TMA (the library runs the portable tier for any other stride).
    P.m_stride = ((P.max_sk + 31) / 32 + extra_words + 3) / 4 * 4;
    P.mask_ref.assign((size_t)P.Tq * P.m_stride, 0u);
    for (int r = 0; r < P.batch; ++r) {
        const int s_k = P.cu_k[r + 1] - P.cu_k[r];
        for (int t = P.cu_q[r]; t < P.cu_q[r + 1]; ++t)
            for (int k = 0; k < topk; ++k) {
                int x = P.idx[(size_t)t * topk + k];
                if (x >= 0 && x < s_k) P.mask_ref[(size_t)t * P.m_stride + (x >> 5)] |= 1u << (x & 31);
            }
    }
    if (P.didx) CK(cudaFree(P.didx));
    if (P.dmask) CK(cudaFree(P.dmask));
    CK(cudaMalloc(&P.didx, P.idx.size() * 4));
    CK(cudaMemcpy(P.didx, P.idx.data(), P.idx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&P.dmask, P.mask_ref.size() * 4));
}

static TopkMaskParams make_mask_params(const Problem& P) {
    TopkMaskParams m;
    memset(&m, 0, sizeof m);
    m.indices = P.didx;
    m.idx_stride_tok = P.topk;
    m.mask = P.dmask;
    m.mask_stride_row = P.m_stride;
    m.cu_seqlens_q = P.dcu_q;
    m.cu_seqlens_k = P.dcu_k;
    m.batch = P.batch;
    m.topk = P.topk;
    m.max_seqlen_q = P.max_sq;
    return m;
}

static int g_failures = 0;

static void poison_empty_requests(Problem& P) {
    for (int r = 0; r < P.batch; ++r) {
        if (P.cu_q[r + 1] != P.cu_q[r]) continue;
        for (int j = P.cu_k[r]; j < P.cu_k[r + 1]; ++j)
            for (int hh = 0; hh < P.h; ++hh) {
                for (int d = 0; d < (P.kp_mode == 2 ? 192 : 128); ++d) P.k[j * P.kn_st + hh * P.kn_sh + d] = kBfNaN;
                if (P.kp_mode != 2)
                    for (int d = 0; d < 64; ++d) P.kp[j * P.kp_st + (P.kp_mode == 0 ? 0 : hh * P.kp_sh) + d] = kBfNaN;
                for (int d = 0; d < 128; ++d) P.v[j * P.v_st + hh * P.v_sh + d] = kBfNaN;
            }
    }
    CK(cudaMemcpy(P.dk, P.k.data(), P.k_n * 2, cudaMemcpyHostToDevice));
    if (P.kp_n) CK(cudaMemcpy(P.dkp, P.kp.data(), P.kp_n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(P.dv, P.v.data(), P.v_n * 2, cudaMemcpyHostToDevice));
}

static bool check_mask(const Problem& P, mask_launch_fn fn, const char* name) {
    CK(cudaMemset(P.dmask, 0xAB, P.mask_ref.size() * 4));
    TopkMaskParams m = make_mask_params(P);
    CK(fn(&m, 0));
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> got(P.mask_ref.size());
    CK(cudaMemcpy(got.data(), P.dmask, got.size() * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != P.mask_ref[i]) {
            if (!bad) first = i;
            ++bad;
        }
    printf("    mask %-5s rows %d x %lld words: %s", name, P.Tq, (long long)P.m_stride, bad ? "FAIL" : "ok");
    if (bad) {
        printf(" (%zu bad words, first row %lld word %lld: got %08x want %08x)", bad, (long long)(first / P.m_stride), (long long)(first % P.m_stride),
               got[first], P.mask_ref[first]);
        ++g_failures;
    }
    printf("\n");
    return bad == 0;
}

// float64 reference for one (token, head) row. Returns false if the row attends nothing.
static bool ref_row(const Problem& P, bool masked, int r, int t, int hh, double* out, double* lse) {
    const int s_q = P.cu_q[r + 1] - P.cu_q[r], s_k = P.cu_k[r + 1] - P.cu_k[r];
    const int i = t - P.cu_q[r];
    const int qpos = s_k - s_q + i;
    const int kend = std::min(qpos, s_k - 1);
    double q[192];
    const uint16_t* qr = P.qp(t, hh);
    for (int d = 0; d < 192; ++d) q[d] = bf2d(qr[d]);
    std::vector<double> sc;
    std::vector<int> keys;
    const uint32_t* mrow = masked ? &P.mask_ref[(size_t)t * P.m_stride] : nullptr;
    for (int j = 0; j <= kend; ++j) {
        if (masked && !((mrow[j >> 5] >> (j & 31)) & 1u)) continue;
        const int jg = P.cu_k[r] + j;
        const uint16_t* kn = P.knp(jg, hh);
        const uint16_t* kp = P.kpp(jg, hh);
        double s = 0;
        for (int d = 0; d < 128; ++d) s += q[d] * bf2d(kn[d]);
        for (int d = 0; d < 64; ++d) s += q[128 + d] * bf2d(kp[d]);
        sc.push_back(s * P.scale);
        keys.push_back(jg);
    }
    for (int d = 0; d < 128; ++d) out[d] = 0;
    if (keys.empty()) {
        *lse = -INFINITY;
        return false;
    }
    double m = -INFINITY;
    for (double s : sc) m = std::max(m, s);
    double l = 0;
    for (size_t n = 0; n < keys.size(); ++n) {
        const double pw = std::exp(sc[n] - m);
        l += pw;
        const uint16_t* vr = P.vp(keys[n], hh);
        for (int d = 0; d < 128; ++d) out[d] += pw * bf2d(vr[d]);
    }
    for (int d = 0; d < 128; ++d) out[d] /= l;
    *lse = m + std::log(l);
    return true;
}

struct CheckResult {
    double rel_fro;
    double max_lse_err;
    long long bad_out, bad_lse, bad_pad, rows, empty_rows;
};

// float64 references for a set of (token, head) rows, computed once per problem and reused for every
// kernel variant. rows_per_req < 0: every row; else that many per request (first, last, random).
struct RefSet {
    bool masked = false, all_rows = false;
    std::vector<int> req, tok, head;
    std::vector<double> out, lse;  // [n][128], [n]
    std::vector<char> any;
};
static RefSet compute_ref(const Problem& P, bool masked, int rows_per_req, int heads_to_check, uint64_t seed) {
    RefSet R;
    R.masked = masked;
    R.all_rows = rows_per_req < 0 && heads_to_check >= P.h;
    std::vector<std::pair<int, int>> rows;  // (request, token)
    Rng rng{seed};
    for (int r = 0; r < P.batch; ++r) {
        const int s_q = P.cu_q[r + 1] - P.cu_q[r];
        if (rows_per_req < 0 || s_q <= rows_per_req) {
            for (int i = 0; i < s_q; ++i) rows.push_back({r, P.cu_q[r] + i});
        } else {
            std::vector<int> pick = {0, 1, s_q - 1, s_q - 2, s_q / 2};
            while ((int)pick.size() < rows_per_req) pick.push_back(rng.below(s_q));
            for (int i : pick) rows.push_back({r, P.cu_q[r] + i});
        }
    }
    std::vector<int> heads;
    if (heads_to_check >= P.h) {
        for (int hh = 0; hh < P.h; ++hh) heads.push_back(hh);
    } else {
        heads = {0, P.h - 1};
        while ((int)heads.size() < heads_to_check) heads.push_back(rng.below(P.h));
    }
    const int n = (int)(rows.size() * heads.size());
    R.req.resize(n);
    R.tok.resize(n);
    R.head.resize(n);
    R.out.resize((size_t)n * 128);
    R.lse.resize(n);
    R.any.resize(n);
    for (int w = 0; w < n; ++w) {
        R.req[w] = rows[w / heads.size()].first;
        R.tok[w] = rows[w / heads.size()].second;
        R.head[w] = heads[w % heads.size()];
    }
    parallel_for(n, [&](int w) { R.any[w] = ref_row(P, masked, R.req[w], R.tok[w], R.head[w], &R.out[(size_t)w * 128], &R.lse[w]); });
    return R;
}

static CheckResult check_mha(const Problem& P, const RefSet& R) {
    std::vector<uint16_t> out(P.o_n);
    std::vector<float> lse(P.l_n);
    CK(cudaMemcpy(out.data(), P.dout, P.o_n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), P.dlse, P.l_n * 4, cudaMemcpyDeviceToHost));
    const int n = (int)R.tok.size();
    CheckResult c{};
    double se_all = 0, sr_all = 0;
    for (int w = 0; w < n; ++w) {
        const int t = R.tok[w], hh = R.head[w];
        const double* ref = &R.out[(size_t)w * 128];
        const bool any = R.any[w];
        const uint16_t* o = &out[t * P.o_st + hh * P.o_sh];
        const float gl = lse[t * P.l_st + hh * P.l_sh];
        double rms = 0;
        for (int d = 0; d < 128; ++d) rms += ref[d] * ref[d];
        rms = std::sqrt(rms / 128);
        for (int d = 0; d < 128; ++d) {
            const double g = bf2d(o[d]);
            const double err = std::fabs(g - ref[d]);
            if (any ? !(err <= 2e-2 * std::max(std::fabs(ref[d]), rms)) : !(g == 0.0)) ++c.bad_out;
            se_all += std::isfinite(err) ? err * err : 1e30;
            sr_all += ref[d] * ref[d];
        }
        c.empty_rows += !any;
        if (any) {
            const double le = std::fabs((double)gl - R.lse[w]);
            c.max_lse_err = std::max(c.max_lse_err, std::isfinite(le) ? le : 1e30);
            c.bad_lse += !(le <= 1e-3);
        } else {
            c.bad_lse += !(std::isinf(gl) && gl < 0);
        }
    }
    c.rows = n;
    c.rel_fro = sr_all > 0 ? std::sqrt(se_all / sr_all) : std::sqrt(se_all);
    // Pads of out/lse (between heads, after the last head of a token) must still hold the poison.
    // Only meaningful when every row was checked (the whole buffer is then "ours").
    if (R.all_rows) {
        std::vector<char> owned(P.o_n, 0), lowned(P.l_n, 0);
        for (int t = 0; t < P.Tq; ++t)
            for (int hh = 0; hh < P.h; ++hh) {
                for (int d = 0; d < 128; ++d) owned[t * P.o_st + hh * P.o_sh + d] = 1;
                lowned[t * P.l_st + hh * P.l_sh] = 1;
            }
        for (size_t i = 0; i < P.o_n; ++i)
            if (!owned[i] && out[i] != 0xffff) ++c.bad_pad;
        for (size_t i = 0; i < P.l_n; ++i) {
            uint32_t u;
            memcpy(&u, &lse[i], 4);
            if (!lowned[i] && u != 0xffffffffu) ++c.bad_pad;
        }
    }
    return c;
}

static void run_mha(const Problem& P, mha_launch_fn fn, bool masked) {
    CK(cudaMemset(P.dout, 0xff, P.o_n * 2));  // bf16 0xffff = NaN
    CK(cudaMemset(P.dlse, 0xff, P.l_n * 4));  // fp32 NaN
    MhaFwdParams p = make_params(P, masked);
    CK(fn(&p, 0));
    CK(cudaDeviceSynchronize());
}

static void report(const char* what, const CheckResult& c) {
    const bool ok = c.bad_out == 0 && c.bad_lse == 0 && c.bad_pad == 0;
    if (!ok) ++g_failures;
    printf("    %-28s %s  rows %lld (empty %lld)  ||o-r||/||r|| %.3e  max|dlse| %.2e  bad out %lld lse %lld pad %lld\n", what,
           ok ? "ok  " : "FAIL", c.rows, c.empty_rows, c.rel_fro, c.max_lse_err, c.bad_out, c.bad_lse, c.bad_pad);
    fflush(stdout);
}

// ------------------------------------------------------------------------------------------------------
struct SmallCase {
    const char* name;
    int h;
    std::vector<Req> reqs;
    int kp_mode;
    bool pad;
    float amp_q;
    int idx_kind, topk;
    int rows_per_req;  // -1: all rows
    // Requests with s_q == 0 get NaN in all their K, k_pe and V rows: the partial last key tile of the
    // request before reads them (TMA boxes cross request boundaries), and they must not reach its output.
    bool nan_empty_reqs = false;
};

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class F>
static float time_ms(F launch, int warm = 3, int reps = 15) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; ++i) launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> ts;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return median(ts);
}

int main(int argc, char** argv) {
    bool perf = true, check = true, ncu = false, quick = false;  // --quick: small cases A and C only
    std::string only, skip;  // comma-separated variant names
    std::vector<std::pair<int, int>> perf_shapes = {{128, 8192}, {16, 8192}, {16, 16384}};  // (heads, S)
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--no-perf")) perf = false;
        if (!strcmp(argv[i], "--no-check")) check = false;
        if (!strcmp(argv[i], "--ncu")) ncu = true;
        if (!strcmp(argv[i], "--quick")) quick = true;
        if (!strcmp(argv[i], "--only") && i + 1 < argc) only = std::string(",") + argv[++i] + ",";
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {  // perf shapes "h:S,h:S"
            perf_shapes.clear();
            for (const char* q = argv[++i]; *q;) {
                int hh = 0, ss = 0, n = 0;
                if (sscanf(q, "%d:%d%n", &hh, &ss, &n) != 2 || hh < 1 || ss < 1) {
                    fprintf(stderr, "--shapes wants h:S[,h:S...], e.g. 128:8192,16:16384 (got '%s')\n", q);
                    return 2;
                }
                perf_shapes.push_back({hh, ss});
                q += n;
                if (*q == ',') ++q;
            }
        }
        if (!strcmp(argv[i], "--skip") && i + 1 < argc) skip = std::string(",") + argv[++i] + ",";
    }
    std::vector<MhaCfg> cfgs;
    for (const MhaCfg& c : kCfgs) {
        const std::string key = std::string(",") + c.name + ",";
        if ((only.empty() || only.find(key) != std::string::npos) && skip.find(key) == std::string::npos) cfgs.push_back(c);
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, smem/block optin %zu\n", prop.name, prop.multiProcessorCount, prop.sharedMemPerBlockOptin);
    const uint64_t seed = (uint64_t)std::chrono::system_clock::now().time_since_epoch().count();
    printf("seed %llu\n", (unsigned long long)seed);
    const float ds_scale = 1.0f / std::sqrt(192.0f);
    if (ncu) {
        Problem P;
        setup_problem(P, 128, {{8192, 8192}}, 0, false, false, seed, 1.f, 1.f, ds_scale);
        make_indices(P, 2048, 1, seed + 5, 0);
        TopkMaskParams m = make_mask_params(P);
        CK(launch_rpb4(&m, 0));
        for (const MhaCfg& cfg : cfgs) {
            run_mha(P, cfg.dense, false);
            run_mha(P, cfg.masked, true);
        }
        P.free_all();
        return 0;
    }

    if (check) {
        const std::vector<SmallCase> cases = {
            {"A varlen chunked, k_pe shared", 4, {{1, 1}, {63, 200}, {200, 331}}, 0, true, 1.f, 0, 40, -1},
            {"B packed k, peaky", 3, {{129, 129}, {1, 77}, {300, 1000}}, 2, true, 4.f, 0, 64, -1},
            // (5, 3): more queries than keys, outside the contract; its first rows must come out empty, not NaN
            {"C k_pe per head, top-k sets", 2, {{64, 64}, {128, 4100}, {33, 97}, {5, 3}}, 1, false, 2.f, 1, 256, -1},
            {"D window mask (tile skip)", 2, {{1500, 1500}, {700, 2333}}, 0, true, 1.f, 2, 100, -1},
            {"E long keys (bitmap cap)", 2, {{70, 140000}, {5, 300}}, 0, false, 1.f, 1, 2048, -1},
            {"F NaN in the next request's K/V", 2, {{100, 100}, {0, 64}, {37, 300}, {0, 50}, {129, 129}, {0, 128}}, 0, true,
             1.f, 1, 64, -1, true},
        };
        for (size_t ci = 0; ci < cases.size(); ++ci) {
            const SmallCase& sc = cases[ci];
            if (quick && ci != 0 && ci != 2 && ci != 5) continue;
            Problem P;
            const double t0 = now_s();
            setup_problem(P, sc.h, sc.reqs, sc.kp_mode, sc.pad, true, seed + 101 * ci, sc.amp_q, 1.f, ds_scale * 1.25f);
            if (sc.nan_empty_reqs) poison_empty_requests(P);
            make_indices(P, sc.topk, sc.idx_kind, seed + 7 * ci, 3);
            printf("case %s: h=%d reqs", sc.name, sc.h);
            for (auto& r : sc.reqs) printf(" (%d,%d)", r.s_q, r.s_k);
            printf(" topk=%d (setup %.1fs)\n", sc.topk, now_s() - t0);
            bool mask_ok = check_mask(P, launch_rpb4, "rpb4");
            mask_ok &= check_mask(P, launch_rpb1, "rpb1");
            mask_ok &= check_mask(P, launch_rpb8, "rpb8");
            mask_ok &= check_mask(P, launch_rpb16, "rpb16");
            // the masked MHA runs on the GPU-built mask (rpb1 result now in P.dmask; rebuild with rpb4)
            {
                TopkMaskParams m = make_mask_params(P);
                CK(launch_rpb4(&m, 0));
                CK(cudaDeviceSynchronize());
            }
            const RefSet ref_d = compute_ref(P, false, sc.rows_per_req, P.h, seed);
            const RefSet ref_m = compute_ref(P, true, sc.rows_per_req, P.h, seed);
            for (const MhaCfg& cfg : cfgs) {
                char what[96];
                run_mha(P, cfg.dense, false);
                snprintf(what, sizeof what, "%s dense", cfg.name);
                report(what, check_mha(P, ref_d));
                if (!mask_ok) continue;
                run_mha(P, cfg.masked, true);
                snprintf(what, sizeof what, "%s masked", cfg.name);
                report(what, check_mha(P, ref_m));
            }
            P.free_all();
        }
    }

    struct PerfRow {
        std::string cfg, what;
        float ms;
        double tflops, tflops_attended;
    };
    std::vector<PerfRow> table;
    if (perf) {
        const std::vector<std::pair<int, int>> shapes = perf_shapes;
        for (const auto& hs : shapes) {
            const int H = hs.first, S = hs.second;
            Problem P;
            setup_problem(P, H, {{S, S}}, 0, false, false, seed + S, 1.f, 1.f, ds_scale);
            make_indices(P, 2048, 1, seed + S + 5, 0);
            {
                TopkMaskParams m = make_mask_params(P);
                CK(launch_rpb4(&m, 0));
                CK(cudaDeviceSynchronize());
                const float ms = time_ms([&] { CK(launch_rpb4(&m, 0)); });
                table.push_back({"mask rpb4", "h=" + std::to_string(H) + " S=" + std::to_string(S) + " topk2048 build", ms, 0, 0});
                const std::pair<const char*, mask_launch_fn> others[] = {{"rpb1", launch_rpb1}, {"rpb8", launch_rpb8}, {"rpb16", launch_rpb16}};
                for (const auto& o : others) {
                    const float ms1 = time_ms([&] { CK(o.second(&m, 0)); });
                    table.push_back({std::string("mask ") + o.first, "h=" + std::to_string(H) + " S=" + std::to_string(S) + " topk2048 build", ms1, 0, 0});
                    check_mask(P, o.second, o.first);
                }
#ifdef WITH_OLD
                const float ms_old = time_ms([&] { CK(launch_oldrpb4(&m, 0)); });
                table.push_back({"mask oldrpb4", "h=" + std::to_string(H) + " S=" + std::to_string(S) + " topk2048 build", ms_old, 0, 0});
                check_mask(P, launch_oldrpb4, "oldrpb4");
#endif
            }
            check_mask(P, launch_rpb4, "rpb4");
            double pairs_causal = 0, pairs_att = 0;
            for (int i = 0; i < S; ++i) {
                pairs_causal += i + 1;
                pairs_att += std::min(i + 1, 2048);
            }
            const double fl_dense = 2.0 * H * (double)S * S * 320 / 2;  // anchor convention
            const double fl_att = 2.0 * H * pairs_att * 320;
            (void)pairs_causal;
            const RefSet refs[2] = {compute_ref(P, false, 24, 4, seed), compute_ref(P, true, 24, 4, seed + 1)};
            for (const MhaCfg& cfg : cfgs) {
                for (int masked = 0; masked < 2; ++masked) {
                    mha_launch_fn fn = masked ? cfg.masked : cfg.dense;
                    if (masked) {  // masked runs on the GPU-built mask
                        TopkMaskParams m = make_mask_params(P);
                        CK(launch_rpb4(&m, 0));
                    }
                    run_mha(P, fn, masked);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s S=%d h=%d (subset)", cfg.name, masked ? "masked" : "dense", S, H);
                    report(what, check_mha(P, refs[masked]));
                    MhaFwdParams p = make_params(P, masked);
                    const float ms = time_ms([&] { CK(fn(&p, 0)); });
                    table.push_back({cfg.name, std::string(masked ? "masked top2048" : "dense causal") + " h=" + std::to_string(H) + " S=" + std::to_string(S),
                                     ms, fl_dense / (ms * 1e-3) / 1e12, (masked ? fl_att : fl_dense) / (ms * 1e-3) / 1e12});
                }
            }
            P.free_all();
        }
        printf("\n%-13s %-28s %10s %14s %16s\n", "config", "case (batch 1)", "ms", "TFLOP/s(dense)", "TFLOP/s(attended)");
        for (auto& r : table)
            printf("%-13s %-28s %10.3f %14.1f %16.1f\n", r.cfg.c_str(), r.what.c_str(), r.ms, r.tflops, r.tflops_attended);
    }
    printf("\n%s: %d failure(s)\n", g_failures ? "FAILED" : "ALL CHECKS PASSED", g_failures);
    return g_failures ? 1 : 0;
}
